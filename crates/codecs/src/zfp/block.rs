//! One zfp block: embedded bit-plane coding of 4^d integer coefficients, their negabinary
//! sequency order, and the inverse decorrelating transforms (lossy and reversible).

use super::stream::BitReader;

/// A coefficient integer (i32 for int32/float32 fields, i64 for int64/float64), with the
/// two's-complement wrapping arithmetic libzfp's C relies on.
pub(super) trait Coefficient: Copy + Default {
    /// The unsigned integer the bit planes are coded in.
    const BITS: u32;
    /// Bits of the reversible mode's precision field (5 for 32-bit, 6 for 64-bit integers).
    const PRECISION_BITS: u32;
    fn from_negabinary(bits: u64) -> Self;
    fn add(self, other: Self) -> Self;
    fn sub(self, other: Self) -> Self;
    fn half(self) -> Self;
    fn double(self) -> Self;
}

macro_rules! coefficient {
    ($int:ty, $uint:ty, $precision_bits:expr) => {
        impl Coefficient for $int {
            const BITS: u32 = <$uint>::BITS;
            const PRECISION_BITS: u32 = $precision_bits;
            fn from_negabinary(bits: u64) -> Self {
                // Negabinary digits alternate in sign; the mask 0b1010... maps them back.
                const MASK: $uint = (<$uint>::MAX / 3) << 1;
                ((bits as $uint ^ MASK).wrapping_sub(MASK)) as $int
            }
            fn add(self, other: Self) -> Self {
                self.wrapping_add(other)
            }
            fn sub(self, other: Self) -> Self {
                self.wrapping_sub(other)
            }
            fn half(self) -> Self {
                self >> 1
            }
            fn double(self) -> Self {
                self.wrapping_shl(1)
            }
        }
    };
}

coefficient!(i32, u32, 5);
coefficient!(i64, u64, 6);

/// Coefficient order by sequency: for each dimensionality, the block index (x fastest) of the
/// n-th coded coefficient. Coordinates are listed as (x, y, z); zfp orders by their sum,
/// then by their sum of squares.
pub(super) fn permutation(dims: usize) -> Vec<usize> {
    let index = |c: &[usize]| c.iter().rev().fold(0, |acc, &v| acc * 4 + v);
    let table: &[&[usize]] = match dims {
        1 => &[&[0], &[1], &[2], &[3]],
        2 => &PERM_2,
        3 => &PERM_3,
        _ => return PERM_4.to_vec(),
    };
    table.iter().map(|c| index(c)).collect()
}

#[rustfmt::skip]
const PERM_2: [&[usize]; 16] = [
    &[0, 0],
    &[1, 0], &[0, 1],
    &[1, 1],
    &[2, 0], &[0, 2],
    &[2, 1], &[1, 2],
    &[3, 0], &[0, 3],
    &[2, 2],
    &[3, 1], &[1, 3],
    &[3, 2], &[2, 3],
    &[3, 3],
];

#[rustfmt::skip]
const PERM_3: [&[usize]; 64] = [
    &[0, 0, 0],
    &[1, 0, 0], &[0, 1, 0], &[0, 0, 1],
    &[0, 1, 1], &[1, 0, 1], &[1, 1, 0],
    &[2, 0, 0], &[0, 2, 0], &[0, 0, 2],
    &[1, 1, 1],
    &[2, 1, 0], &[2, 0, 1], &[0, 2, 1], &[1, 2, 0], &[1, 0, 2], &[0, 1, 2],
    &[3, 0, 0], &[0, 3, 0], &[0, 0, 3],
    &[2, 1, 1], &[1, 2, 1], &[1, 1, 2],
    &[0, 2, 2], &[2, 0, 2], &[2, 2, 0],
    &[3, 1, 0], &[3, 0, 1], &[0, 3, 1], &[1, 3, 0], &[1, 0, 3], &[0, 1, 3],
    &[1, 2, 2], &[2, 1, 2], &[2, 2, 1],
    &[3, 1, 1], &[1, 3, 1], &[1, 1, 3],
    &[3, 2, 0], &[3, 0, 2], &[0, 3, 2], &[2, 3, 0], &[2, 0, 3], &[0, 2, 3],
    &[2, 2, 2],
    &[3, 2, 1], &[3, 1, 2], &[1, 3, 2], &[2, 3, 1], &[2, 1, 3], &[1, 2, 3],
    &[0, 3, 3], &[3, 0, 3], &[3, 3, 0],
    &[3, 2, 2], &[2, 3, 2], &[2, 2, 3],
    &[1, 3, 3], &[3, 1, 3], &[3, 3, 1],
    &[2, 3, 3], &[3, 2, 3], &[3, 3, 2],
    &[3, 3, 3],
];

/// The 4D sequency order (block index, x fastest) of libzfp 1.0: also by sum, then sum of squares,
/// but with its own order among ties, so it is libzfp's table; the 4D fixtures decode bit for bit.
#[rustfmt::skip]
const PERM_4: [usize; 256] = [
    0, 1, 4, 16, 64, 5, 80, 17, 68, 65, 20, 2, 8, 32, 128, 84,
    81, 69, 21, 6, 18, 66, 24, 72, 9, 96, 33, 36, 129, 132, 144, 3,
    12, 48, 192, 85, 82, 70, 22, 73, 25, 88, 37, 100, 97, 148, 145, 133,
    10, 160, 34, 136, 130, 40, 7, 19, 67, 28, 76, 13, 112, 49, 52, 193,
    196, 208, 86, 89, 101, 149, 161, 137, 41, 134, 38, 164, 26, 152, 146, 104,
    98, 74, 83, 71, 23, 77, 29, 92, 53, 116, 113, 212, 209, 197, 11, 35,
    131, 44, 140, 14, 176, 50, 56, 194, 200, 224, 90, 165, 102, 153, 150, 105,
    168, 162, 138, 42, 87, 93, 117, 213, 27, 75, 99, 39, 135, 147, 108, 45,
    141, 156, 30, 78, 177, 180, 54, 114, 120, 57, 198, 210, 216, 201, 225, 228,
    15, 240, 51, 204, 195, 60, 169, 166, 154, 106, 91, 103, 151, 109, 157, 94,
    181, 118, 121, 214, 217, 229, 163, 139, 43, 142, 46, 172, 58, 184, 178, 232,
    226, 202, 241, 205, 61, 199, 55, 244, 31, 220, 211, 124, 115, 79, 170, 167,
    155, 107, 158, 110, 173, 122, 185, 182, 233, 230, 218, 95, 245, 119, 221, 215,
    125, 242, 206, 62, 203, 59, 248, 47, 236, 227, 188, 179, 143, 171, 174, 186,
    234, 246, 222, 126, 219, 123, 249, 111, 237, 231, 189, 183, 159, 252, 243, 207,
    63, 175, 250, 187, 238, 235, 190, 253, 247, 223, 127, 254, 251, 239, 191, 255,
];

/// Decodes the bit planes of `out.len()` unsigned coefficients, most significant plane first,
/// spending at most `maxbits` bits and `maxprec` planes; returns the bits spent.
///
/// Each plane starts with the bits of the coefficients already known to be significant, then
/// codes the rest with a group test ("is there another one?") and a unary run to the next one.
pub(super) fn decode_planes(
    reader: &mut BitReader<'_>,
    maxbits: u64,
    maxprec: u32,
    intprec: u32,
    out: &mut [u64],
) -> u64 {
    out.iter_mut().for_each(|v| *v = 0);
    let size = out.len();
    let kmin = intprec.saturating_sub(maxprec);
    let mut bits = maxbits;
    let mut significant = 0usize;
    let mut plane = intprec;
    while bits > 0 && plane > kmin {
        plane -= 1;
        let bit = 1u64 << plane;
        let verbatim = (significant as u64).min(bits) as usize;
        bits -= verbatim as u64;
        for start in (0..verbatim).step_by(64) {
            let n = (verbatim - start).min(64);
            let mut ones = reader.read_bits(n as u32);
            while ones != 0 {
                out[start + ones.trailing_zeros() as usize] += bit;
                ones &= ones - 1;
            }
        }
        while significant < size && bits > 0 {
            bits -= 1;
            if !reader.read_bit() {
                break;
            }
            while significant < size - 1 && bits > 0 {
                bits -= 1;
                if reader.read_bit() {
                    break;
                }
                significant += 1;
            }
            out[significant] += bit;
            significant += 1;
        }
    }
    maxbits - bits
}

/// Decodes one block of integer coefficients into `block` (4^d values, x fastest), the
/// integer part shared by all types: bit planes, then at least `minbits` bits consumed, then
/// sequency order and the inverse transform. Returns the bits spent.
pub(super) fn decode_ints<I: Coefficient>(
    reader: &mut BitReader<'_>,
    limits: Limits,
    perm: &[usize],
    scratch: &mut [u64],
    block: &mut [I],
    reversible: bool,
) -> u64 {
    let mut bits = 0;
    let mut maxprec = limits.maxprec;
    let mut maxbits = limits.maxbits;
    if reversible {
        maxprec = reader.read_bits(I::PRECISION_BITS) as u32 + 1;
        bits += u64::from(I::PRECISION_BITS);
        maxbits = maxbits.saturating_sub(bits);
    }
    bits += decode_planes(reader, maxbits, maxprec, I::BITS, scratch);
    if bits < limits.minbits {
        reader.skip((limits.minbits - bits) as usize);
        bits = limits.minbits;
    }
    for (&coded, &position) in scratch.iter().zip(perm) {
        block[position] = I::from_negabinary(coded);
    }
    let dims = perm.len().trailing_zeros() as usize / 2;
    if reversible {
        inverse_transform(block, dims, reversible_lift);
    } else {
        inverse_transform(block, dims, lift);
    }
    bits
}

/// The bit budget of a block's integer part (signed in zfp: a budget below zero spends nothing).
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    pub(super) minbits: u64,
    pub(super) maxbits: u64,
    pub(super) maxprec: u32,
}

/// Applies `lift` along each axis of a 4^dims block, the highest axis first (zfp's order: the
/// lossy lift rounds, so the order matters).
fn inverse_transform<I: Coefficient>(
    block: &mut [I],
    dims: usize,
    lift: impl Fn(&mut [I], usize, usize),
) {
    for axis in (0..dims).rev() {
        let stride = 1usize << (2 * axis);
        // Each line along `axis` starts where that axis's coordinate is 0; lines are independent.
        for line in 0..block.len() / 4 {
            lift(block, (line / stride) * stride * 4 + line % stride, stride);
        }
    }
}

/// zfp's inverse lifting step of the lossy transform on the 4 values at `start`, `start + s`, ...
fn lift<I: Coefficient>(p: &mut [I], start: usize, s: usize) {
    let (mut x, mut y, mut z, mut w) = (p[start], p[start + s], p[start + 2 * s], p[start + 3 * s]);
    y = y.add(w.half());
    w = w.sub(y.half());
    y = y.add(w);
    w = w.double().sub(y);
    z = z.add(x);
    x = x.double().sub(z);
    y = y.add(z);
    z = z.double().sub(y);
    w = w.add(x);
    x = x.double().sub(w);
    p[start] = x;
    p[start + s] = y;
    p[start + 2 * s] = z;
    p[start + 3 * s] = w;
}

/// The reversible transform's inverse step: a prefix-sum (Pascal) predictor, exact in integers.
fn reversible_lift<I: Coefficient>(p: &mut [I], start: usize, s: usize) {
    let (x, mut y, mut z, mut w) = (p[start], p[start + s], p[start + 2 * s], p[start + 3 * s]);
    w = w.add(z);
    z = z.add(y);
    w = w.add(z);
    y = y.add(x);
    z = z.add(y);
    w = w.add(z);
    p[start + s] = y;
    p[start + 2 * s] = z;
    p[start + 3 * s] = w;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permutations_are_permutations() {
        for dims in 1..=4 {
            let mut perm = permutation(dims);
            assert_eq!(perm.len(), 1 << (2 * dims));
            perm.sort_unstable();
            assert!(perm.iter().enumerate().all(|(i, &p)| i == p), "{dims}D");
        }
    }

    #[test]
    fn negabinary_round_trips_small_values() {
        // 0b11 in negabinary is -2 + 1 = -1; 0b110 is 4 - 2 = 2.
        assert_eq!(i32::from_negabinary(0b11), -1);
        assert_eq!(i64::from_negabinary(0b110), 2);
        assert_eq!(i32::from_negabinary(0), 0);
    }
}
