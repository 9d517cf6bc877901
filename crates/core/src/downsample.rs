//! Downsampling for multiscale pyramids: one level is a reduction over each 2x2 (2x2x2, ...) block
//! of the level above, on the dimensions that shrink.
//!
//! Pure code over typed buffers (little-endian, C order), as the pipeline holds decoded chunks.
//! Edges: a dimension of odd extent `n` becomes `ceil(n / 2)`, and its last block holds the one
//! element that exists (with its neighbours in the other dimensions): the reduction runs over the
//! elements a block has, never over padding. Masked elements (NaN, and the value given as `masked`,
//! the array's `_FillValue`) take no part in `mean`, `min` and `max`; a block of masked elements
//! only is the masked value (NaN when only NaN). `mode` counts every value but NaN, and `nearest`
//! takes the block's first element as it is.

use crate::error::{Error, Result};
use crate::DataType;

/// How a block of the level above becomes one element.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Reduction {
    /// The mean; integers round to the nearest value (halves away from zero).
    #[default]
    Mean,
    /// The most frequent value (the first of those that are, in C order): for labels.
    Mode,
    /// The block's first element (its lowest corner).
    Nearest,
    /// The smallest value.
    Min,
    /// The largest value.
    Max,
}

impl Reduction {
    /// Its name, as `--downsample` takes it.
    pub const fn name(self) -> &'static str {
        match self {
            Reduction::Mean => "mean",
            Reduction::Mode => "mode",
            Reduction::Nearest => "nearest",
            Reduction::Min => "min",
            Reduction::Max => "max",
        }
    }
}

impl std::str::FromStr for Reduction {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Ok(match s {
            "mean" => Reduction::Mean,
            "mode" => Reduction::Mode,
            "nearest" => Reduction::Nearest,
            "min" => Reduction::Min,
            "max" => Reduction::Max,
            _ => return Err(format!("{s:?} is not mean, mode, nearest, min or max")),
        })
    }
}

impl serde::Serialize for Reduction {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> serde::Deserialize<'de> for Reduction {
    fn deserialize<D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> std::result::Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl std::fmt::Display for Reduction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether `data_type` can be downsampled (booleans, integers and floats).
pub fn downsamples(data_type: DataType) -> bool {
    matches!(
        data_type,
        DataType::Bool
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Float16
            | DataType::Float32
            | DataType::Float64
    )
}

/// The shape of `valid` downsampled by `factors` (1 or 2 per dimension): `ceil(valid / factor)`.
pub fn downsampled_shape(valid: &[u64], factors: &[u64]) -> Vec<u64> {
    valid
        .iter()
        .zip(factors)
        .map(|(&n, &f)| n.div_ceil(f.max(1)))
        .collect()
}

/// Downsamples the elements of `source` (C order, `shape`) that lie in the box `valid` from its
/// origin (the rest is padding past the array's end) by `factors` (1 or 2 per dimension) with
/// `reduction`: returns the [`downsampled_shape`] of `valid`, C order. `masked` is one element's
/// bytes that `mean`, `min` and `max` leave out (see the module documentation).
pub fn downsample(
    data_type: DataType,
    reduction: Reduction,
    source: &[u8],
    shape: &[u64],
    valid: &[u64],
    factors: &[u64],
    masked: Option<&[u8]>,
) -> Result<Vec<u8>> {
    let size = data_type.size();
    let elements = crate::product(shape) as usize;
    if shape.len() != valid.len()
        || shape.len() != factors.len()
        || source.len() != elements * size
        || valid.iter().zip(shape).any(|(v, s)| v > s)
        || factors.iter().any(|f| !matches!(f, 1 | 2))
    {
        return Err(Error::InvalidGeometry {
            reason: format!(
                "downsampling {} bytes of shape {shape:?} (valid {valid:?}) by {factors:?}",
                source.len()
            ),
        });
    }
    let masked = masked.filter(|m| m.len() == size);
    if reduction == Reduction::Mean {
        let fast = match data_type {
            DataType::Bool | DataType::UInt8 => {
                mean_2x2_unsigned::<1>(source, shape, valid, factors, masked)
            }
            DataType::UInt16 => mean_2x2_unsigned::<2>(source, shape, valid, factors, masked),
            DataType::UInt32 => mean_2x2_unsigned::<4>(source, shape, valid, factors, masked),
            _ => None,
        };
        if let Some(out) = fast {
            return Ok(out);
        }
    }
    macro_rules! typed {
        ($t:ty, $float:expr) => {
            run::<$t>(
                reduction, source, shape, valid, factors, masked, $float, size,
            )
        };
    }
    Ok(match data_type {
        DataType::Bool | DataType::UInt8 => typed!(u8, false),
        DataType::Int8 => typed!(i8, false),
        DataType::Int16 => typed!(i16, false),
        DataType::UInt16 => typed!(u16, false),
        DataType::Int32 => typed!(i32, false),
        DataType::UInt32 => typed!(u32, false),
        DataType::Int64 => typed!(i64, false),
        DataType::UInt64 => typed!(u64, false),
        DataType::Float16 => typed!(F16, true),
        DataType::Float32 => typed!(f32, true),
        DataType::Float64 => typed!(f64, true),
        other => {
            return Err(Error::Codec {
                codec: "downsample".into(),
                reason: format!(
                    "data type {} cannot be downsampled (booleans, integers and floats can)",
                    other
                ),
            })
        }
    })
}

/// An element type the reductions work on.
trait Element: Copy + PartialEq + PartialOrd {
    fn read(bytes: &[u8]) -> Self;
    fn write(self, out: &mut Vec<u8>);
    /// Whether the value is NaN (never for integers).
    fn is_nan(self) -> bool;
    /// The mean of `values` (none masked, at least one).
    fn mean(values: &[Self]) -> Self;
    /// [`Element::mean_kept`] of a whole 2 x 2 block: the common case, worth a form of its own.
    #[inline]
    fn mean4(values: [Self; 4], masked: Option<Self>) -> Option<Self> {
        Self::mean_kept(&values, masked)
    }
    /// The mean of the `values` that are neither NaN nor `masked`; `None` when every one is.
    fn mean_kept(values: &[Self], masked: Option<Self>) -> Option<Self> {
        let mut kept = [values[0]; 64];
        let mut n = 0;
        for &v in values {
            if !v.is_nan() && Some(v) != masked && n < kept.len() {
                kept[n] = v;
                n += 1;
            }
        }
        (n > 0).then(|| Self::mean(&kept[..n]))
    }
}

/// An integer mean's division: `sum / n` rounded to nearest, halves away from zero (`n` > 0). A
/// macro so that a constant `n` (a whole 2x2 or 2x2x2 block) divides by a shift.
macro_rules! div_rounded {
    ($sum:expr, $n:expr) => {{
        let (sum, n) = ($sum, $n);
        if sum >= 0 {
            (2 * sum + n) / (2 * n)
        } else {
            -((-2 * sum + n) / (2 * n))
        }
    }};
}
macro_rules! integer {
    ($($t:ty => $acc:ty),*) => {$(
        impl Element for $t {
            fn read(bytes: &[u8]) -> Self {
                let mut b = [0u8; std::mem::size_of::<$t>()];
                b.copy_from_slice(bytes);
                <$t>::from_le_bytes(b)
            }
            #[inline]
            fn write(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn is_nan(self) -> bool {
                false
            }
            fn mean(values: &[Self]) -> Self {
                // The sum in a type that holds it (a block has at most 2^rank elements); a
                // narrower one divides much faster than i128.
                let n = values.len() as $acc;
                let sum: $acc = values.iter().map(|&v| v as $acc).sum();
                // Rounded to nearest, halves away from zero: the mean of values of the type is
                // within the type's range, so the cast back cannot wrap.
                // Whole blocks divide by a constant (a shift), the common case by far.
                let rounded = match n {
                    4 => div_rounded!(sum, 4),
                    8 => div_rounded!(sum, 8),
                    _ => div_rounded!(sum, n),
                };
                rounded as $t
            }
            #[inline(always)]
            fn mean4(v: [Self; 4], masked: Option<Self>) -> Option<Self> {
                let m = masked.map_or(<$acc>::MIN, |m| m as $acc);
                let k = [
                    (v[0] as $acc != m) as $acc,
                    (v[1] as $acc != m) as $acc,
                    (v[2] as $acc != m) as $acc,
                    (v[3] as $acc != m) as $acc,
                ];
                let n = k[0] + k[1] + k[2] + k[3];
                let sum = k[0] * v[0] as $acc
                    + k[1] * v[1] as $acc
                    + k[2] * v[2] as $acc
                    + k[3] * v[3] as $acc;
                match n {
                    4 => Some(div_rounded!(sum, 4) as $t),
                    0 => None,
                    _ => Some(div_rounded!(sum, n) as $t),
                }
            }
            #[inline]
            fn mean_kept(values: &[Self], masked: Option<Self>) -> Option<Self> {
                // One pass, no branch per element: integers are never NaN.
                let masked = masked.map_or(<$acc>::MIN, |m| m as $acc);
                let (mut sum, mut n): ($acc, $acc) = (0, 0);
                for &v in values {
                    let keep = (v as $acc != masked) as $acc;
                    sum += keep * v as $acc;
                    n += keep;
                }
                if n == 0 {
                    return None;
                }
                let rounded = match n {
                    4 => div_rounded!(sum, 4),
                    8 => div_rounded!(sum, 8),
                    _ => div_rounded!(sum, n),
                };
                Some(rounded as $t)
            }
        }
    )*};
}
integer!(u8 => i64, i8 => i64, u16 => i64, i16 => i64, u32 => i64, i32 => i64, u64 => i128, i64 => i128);

impl Element for f32 {
    fn read(bytes: &[u8]) -> Self {
        f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
    }
    fn write(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    fn mean(values: &[Self]) -> Self {
        (values.iter().map(|&v| v as f64).sum::<f64>() / values.len() as f64) as f32
    }
}

impl Element for f64 {
    fn read(bytes: &[u8]) -> Self {
        let mut b = [0u8; 8];
        b.copy_from_slice(bytes);
        f64::from_le_bytes(b)
    }
    fn write(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    fn mean(values: &[Self]) -> Self {
        values.iter().sum::<f64>() / values.len() as f64
    }
}

/// IEEE half precision, computed in f32.
#[derive(Clone, Copy, PartialEq, PartialOrd)]
struct F16(half::f16);

impl Element for F16 {
    fn read(bytes: &[u8]) -> Self {
        F16(half::f16::from_le_bytes([bytes[0], bytes[1]]))
    }
    fn write(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_le_bytes());
    }
    fn is_nan(self) -> bool {
        self.0.is_nan()
    }
    fn mean(values: &[Self]) -> Self {
        let sum: f32 = values.iter().map(|v| v.0.to_f32()).sum();
        F16(half::f16::from_f32(sum / values.len() as f32))
    }
}

/// The mean of whole 2 x 2 blocks of an unsigned integer type of `N` bytes (at most 4), straight
/// from the little-endian bytes: the case of an image pyramid (issue 41), and a third of its extra
/// CPU time when it went through [`run`] (a typed copy of the input and a push per output
/// element). The same values as [`run`]: `(2 * sum + 4) / 8`, which for a non-negative sum is
/// `(sum + 2) >> 2`, and for a block holding the `masked` value the mean of the others (the masked
/// value when all are). `None` unless only the last two dimensions shrink and `valid` is even
/// along both (then [`run`] handles the edges).
fn mean_2x2_unsigned<const N: usize>(
    source: &[u8],
    shape: &[u64],
    valid: &[u64],
    factors: &[u64],
    masked: Option<&[u8]>,
) -> Option<Vec<u8>> {
    let rank = shape.len();
    if rank < 2
        || factors[rank - 2..] != [2, 2]
        || factors[..rank - 2].iter().any(|&f| f != 1)
        || valid[rank - 2..].iter().any(|v| !v.is_multiple_of(2))
    {
        return None;
    }
    // A value no element has when nothing is masked: elements are below 2^32.
    let masked = masked.map_or(u64::MAX, le_u64::<N>);
    let strides = crate::strides(shape, N);
    let (rows, width) = (valid[rank - 2] as usize / 2, valid[rank - 1] as usize);
    let outer = &valid[..rank - 2];
    let out_len = crate::product(outer) as usize * rows * (width / 2) * N;
    let mut out = vec![0u8; out_len];
    if out_len == 0 {
        return Some(out);
    }
    let row_bytes = width / 2 * N;
    let mut index = vec![0u64; outer.len()];
    let mut written = 0;
    while written < out_len {
        let base: usize = index
            .iter()
            .zip(&strides)
            .map(|(&i, &s)| i as usize * s)
            .sum();
        for y in 0..rows {
            let upper = base + 2 * y * strides[rank - 2];
            let lower = upper + strides[rank - 2];
            let (upper, lower) = (
                &source[upper..upper + width * N],
                &source[lower..lower + width * N],
            );
            let dst = &mut out[written..written + row_bytes];
            // The whole row as if nothing were masked, without a branch per block (so that it
            // vectorises); again block by block in the rare row that holds the masked value.
            let hit = match N {
                1 | 2 => mean_row_narrow::<N>(upper, lower, dst, masked),
                _ => {
                    let mut hit = false;
                    for (v, o) in blocks::<N>(upper, lower, &mut *dst) {
                        hit |= (v[0] == masked)
                            | (v[1] == masked)
                            | (v[2] == masked)
                            | (v[3] == masked);
                        let mean = (v[0] + v[1] + v[2] + v[3] + 2) >> 2;
                        o.copy_from_slice(&mean.to_le_bytes()[..N]);
                    }
                    hit
                }
            };
            if hit {
                for (v, o) in blocks::<N>(upper, lower, &mut *dst) {
                    let kept = v.iter().filter(|&&x| x != masked);
                    let n = kept.clone().count() as u64;
                    let mean = match n {
                        0 => masked,
                        _ => (2 * kept.sum::<u64>() + n) / (2 * n),
                    };
                    o.copy_from_slice(&mean.to_le_bytes()[..N]);
                }
            }
            written += row_bytes;
        }
        // Next block of rows, C order over the dimensions that keep their extent.
        for d in (0..index.len()).rev() {
            index[d] += 1;
            if index[d] < outer[d] {
                break;
            }
            index[d] = 0;
        }
    }
    Some(out)
}

/// One row of [`mean_2x2_unsigned`] for elements of one or two bytes, as if nothing were masked:
/// four of them sum within a `u32`, and in 32-bit lanes the loop vectorises (a quarter of the time
/// of the 64-bit one). Returns whether any element is `masked`.
#[inline(always)]
fn mean_row_narrow<const N: usize>(
    upper: &[u8],
    lower: &[u8],
    dst: &mut [u8],
    masked: u64,
) -> bool {
    // Elements are below 2^16: a masked value of more bytes matches none of them.
    let masked = u32::try_from(masked).unwrap_or(u32::MAX);
    // Below 2^16 for these sizes: the narrowing keeps every value.
    let le = |b: &[u8]| le_u64::<N>(b) as u32;
    let mut hit = false;
    for ((a, b), o) in upper
        .chunks_exact(2 * N)
        .zip(lower.chunks_exact(2 * N))
        .zip(dst.chunks_exact_mut(N))
    {
        let v = [le(&a[..N]), le(&a[N..]), le(&b[..N]), le(&b[N..])];
        hit |= (v[0] == masked) | (v[1] == masked) | (v[2] == masked) | (v[3] == masked);
        let mean = (v[0] + v[1] + v[2] + v[3] + 2) >> 2;
        o.copy_from_slice(&mean.to_le_bytes()[..N]);
    }
    hit
}

/// The 2 x 2 blocks of a row pair (`upper`, `lower`) of unsigned integers of `N` bytes, with the
/// output element of each in `dst`.
fn blocks<'a, const N: usize>(
    upper: &'a [u8],
    lower: &'a [u8],
    dst: &'a mut [u8],
) -> impl Iterator<Item = ([u64; 4], &'a mut [u8])> + 'a {
    upper
        .chunks_exact(2 * N)
        .zip(lower.chunks_exact(2 * N))
        .zip(dst.chunks_exact_mut(N))
        .map(|((a, b), o)| {
            let v = [
                le_u64::<N>(&a[..N]),
                le_u64::<N>(&a[N..]),
                le_u64::<N>(&b[..N]),
                le_u64::<N>(&b[N..]),
            ];
            (v, o)
        })
}

/// The unsigned little-endian integer of `N` (at most 8) bytes at the start of `bytes`.
#[inline(always)]
fn le_u64<const N: usize>(bytes: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..N].copy_from_slice(&bytes[..N]);
    u64::from_le_bytes(b)
}

#[allow(clippy::too_many_arguments)]
fn run<T: Element>(
    reduction: Reduction,
    source: &[u8],
    shape: &[u64],
    valid: &[u64],
    factors: &[u64],
    masked: Option<&[u8]>,
    float: bool,
    size: usize,
) -> Vec<u8> {
    let out_shape = downsampled_shape(valid, factors);
    let out_elements = crate::product(&out_shape) as usize;
    let mut out = Vec::with_capacity(out_elements * size);
    if out_elements == 0 {
        return out;
    }
    let strides = crate::strides(shape, 1);
    let masked_value = masked.map(T::read);
    let rank = shape.len();
    // Read once, element by element: the blocks then index a typed buffer.
    let values: Vec<T> = source.chunks_exact(size).map(T::read).collect();
    // Integers without a masked value keep every element: no filtering per block.
    let unmasked = !float && masked_value.is_none();
    if rank == 0 {
        values[0].write(&mut out);
        return out;
    }
    let last = rank - 1;
    // The offsets of a block's elements from its corner, C order: the corner, then every
    // combination of +1 on the dimensions that shrink and are `taken`.
    let offsets = |taken: &dyn Fn(usize) -> bool| -> Vec<usize> {
        let mut offsets = vec![0usize];
        for d in 0..rank {
            if factors[d] == 2 && taken(d) {
                offsets = offsets.iter().flat_map(|&o| [o, o + strides[d]]).collect();
            }
        }
        offsets
    };
    // The outer index (every dimension but the last), one row of output at a time.
    let mut index = vec![0u64; rank];
    let mut block: Vec<T> = Vec::with_capacity(1 << rank.min(6));
    let mut kept: Vec<T> = Vec::with_capacity(block.capacity());
    let rows = out_elements / out_shape[last] as usize;
    let step = factors[last] as usize * strides[last];
    for _ in 0..rows {
        // A block on the far edge of a dimension of odd extent has no +1 there.
        let inside = |d: usize| index[d] * 2 + 1 < valid[d];
        let row = offsets(&|d| d == last || inside(d));
        let row_end = offsets(&|d| d != last && inside(d));
        let mut corner: usize = (0..last)
            .map(|d| (index[d] * factors[d]) as usize * strides[d])
            .sum();
        let mut first = 0;
        // The common case, the mean of whole 2 x 2 blocks along the row (offsets 0, 1, s, s + 1):
        // the two rows of the level above in step, without an index or an edge test per block.
        if reduction == Reduction::Mean && row.len() == 4 && factors[last] == 2 {
            let whole = (valid[last] / 2) as usize;
            let below = corner + row[2];
            let (upper, lower) = (
                &values[corner..corner + 2 * whole],
                &values[below..below + 2 * whole],
            );
            for (a, b) in upper.chunks_exact(2).zip(lower.chunks_exact(2)) {
                let four = [a[0], a[1], b[0], b[1]];
                match T::mean4(four, masked_value) {
                    Some(mean) => mean,
                    None => only_masked(&four, masked_value, float),
                }
                .write(&mut out);
            }
            corner += 2 * whole;
            first = whole as u64;
        }
        for x in first..out_shape[last] {
            let at_edge = factors[last] == 2 && x * 2 + 1 >= valid[last];
            // The common case, the mean of a whole 2 x 2 block, from the stack.
            if !at_edge && row.len() == 4 && reduction == Reduction::Mean {
                let four = [
                    values[corner + row[0]],
                    values[corner + row[1]],
                    values[corner + row[2]],
                    values[corner + row[3]],
                ];
                match T::mean4(four, masked_value) {
                    Some(mean) => mean,
                    None => only_masked(&four, masked_value, float),
                }
                .write(&mut out);
                corner += step;
                continue;
            }
            block.clear();
            block.extend(
                if at_edge { &row_end } else { &row }
                    .iter()
                    .map(|&o| values[corner + o]),
            );
            let value = if unmasked && reduction == Reduction::Mean {
                T::mean(&block)
            } else {
                reduce(reduction, &block, &mut kept, masked_value, float)
            };
            value.write(&mut out);
            corner += step;
        }
        // Next row, C order over the outer dimensions.
        for d in (0..last).rev() {
            index[d] += 1;
            if index[d] < out_shape[d] {
                break;
            }
            index[d] = 0;
        }
    }
    out
}

/// The value of a block of only masked elements: it stays masked (NaN when only NaN and no other
/// masked value is set).
fn only_masked<T: Element>(block: &[T], masked: Option<T>, float: bool) -> T {
    match masked {
        Some(m) if !float || block.contains(&m) => m,
        _ => block[0],
    }
}

/// One block's value.
fn reduce<T: Element>(
    reduction: Reduction,
    block: &[T],
    kept: &mut Vec<T>,
    masked: Option<T>,
    float: bool,
) -> T {
    let first = block[0];
    match reduction {
        Reduction::Nearest => first,
        Reduction::Mode => {
            let mut best = None;
            let mut best_count = 0;
            for (i, &v) in block.iter().enumerate() {
                if v.is_nan() || block[..i].contains(&v) {
                    continue;
                }
                let count = block[i..].iter().filter(|&&w| w == v).count();
                if count > best_count {
                    best = Some(v);
                    best_count = count;
                }
            }
            best.unwrap_or(first)
        }
        Reduction::Mean => match T::mean_kept(block, masked) {
            Some(mean) => mean,
            None => only_masked(block, masked, float),
        },
        Reduction::Min | Reduction::Max => {
            kept.clear();
            kept.extend(
                block
                    .iter()
                    .copied()
                    .filter(|&v| !v.is_nan() && Some(v) != masked),
            );
            if kept.is_empty() {
                return only_masked(block, masked, float);
            }
            match reduction {
                Reduction::Min => kept
                    .iter()
                    .copied()
                    .fold(kept[0], |a, b| if b < a { b } else { a }),
                _ => kept
                    .iter()
                    .copied()
                    .fold(kept[0], |a, b| if b > a { b } else { a }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u16s(values: &[u16]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn back_u16(bytes: &[u8]) -> Vec<u16> {
        bytes
            .chunks(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect()
    }

    fn f32s(values: &[f32]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn back_f32(bytes: &[u8]) -> Vec<f32> {
        bytes
            .chunks(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    /// The whole-block unsigned mean straight from the bytes gives what the general path gives,
    /// at the types' extremes, with padding past `valid`, and with a leading axis that keeps its
    /// extent (cyx).
    #[test]
    fn unsigned_mean_from_bytes_matches_the_general_path() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let cases: [(&[u64], &[u64], &[u64]); 4] = [
            (&[8, 12], &[8, 12], &[2, 2]),
            (&[8, 12], &[6, 10], &[2, 2]),
            (&[3, 6, 4], &[2, 6, 4], &[1, 2, 2]),
            (&[2, 2, 6, 8], &[2, 1, 4, 8], &[1, 1, 2, 2]),
        ];
        for (data_type, size) in [
            (DataType::UInt8, 1),
            (DataType::UInt16, 2),
            (DataType::UInt32, 4),
        ] {
            let masks: [Option<Vec<u8>>; 3] = [None, Some(vec![0xff; size]), Some(vec![0; size])];
            for ((shape, valid, factors), masked) in cases
                .iter()
                .flat_map(|case| masks.iter().map(move |m| (case, m.as_deref())))
            {
                let (shape, valid, factors) = (*shape, *valid, *factors);
                let elements = crate::product(shape) as usize;
                let source: Vec<u8> = (0..elements * size)
                    .map(|i| match i % 5 {
                        // Runs of the largest value, where a sum in the element type would wrap.
                        0 | 1 => 0xff,
                        // Zeros: a masked value in some blocks, every element of others.
                        2 if i % 3 == 0 => 0,
                        _ => next() as u8,
                    })
                    .collect();
                let fast = mean_2x2_unsigned_for(data_type, &source, shape, valid, factors, masked)
                    .expect("whole blocks take the fast path");
                let general = match size {
                    1 => run::<u8>(
                        Reduction::Mean,
                        &source,
                        shape,
                        valid,
                        factors,
                        masked,
                        false,
                        1,
                    ),
                    2 => run::<u16>(
                        Reduction::Mean,
                        &source,
                        shape,
                        valid,
                        factors,
                        masked,
                        false,
                        2,
                    ),
                    _ => run::<u32>(
                        Reduction::Mean,
                        &source,
                        shape,
                        valid,
                        factors,
                        masked,
                        false,
                        4,
                    ),
                };
                assert_eq!(
                    fast, general,
                    "{data_type:?} {shape:?} {valid:?} {factors:?} {masked:?}"
                );
                let via = downsample(
                    data_type,
                    Reduction::Mean,
                    &source,
                    shape,
                    valid,
                    factors,
                    masked,
                )
                .expect("downsamples");
                assert_eq!(via, general);
            }
        }
        // Odd extents and blocks along other axes go to the general path.
        let source = vec![0u8; 2 * 5 * 4];
        assert!(mean_2x2_unsigned::<2>(&source, &[5, 4], &[5, 4], &[2, 2], None).is_none());
        assert!(mean_2x2_unsigned::<2>(&source, &[5, 4], &[5, 4], &[1, 2], None).is_none());
    }

    fn mean_2x2_unsigned_for(
        data_type: DataType,
        source: &[u8],
        shape: &[u64],
        valid: &[u64],
        factors: &[u64],
        masked: Option<&[u8]>,
    ) -> Option<Vec<u8>> {
        match data_type {
            DataType::UInt8 => mean_2x2_unsigned::<1>(source, shape, valid, factors, masked),
            DataType::UInt16 => mean_2x2_unsigned::<2>(source, shape, valid, factors, masked),
            _ => mean_2x2_unsigned::<4>(source, shape, valid, factors, masked),
        }
    }

    fn u16_2d(reduction: Reduction, values: &[u16], shape: &[u64], valid: &[u64]) -> Vec<u16> {
        let out = downsample(
            DataType::UInt16,
            reduction,
            &u16s(values),
            shape,
            valid,
            &[2, 2],
            None,
        )
        .expect("downsamples");
        back_u16(&out)
    }

    #[test]
    fn each_reduction_over_2x2_blocks() {
        // 2 x 4: blocks [1, 2, 5, 6] and [3, 4, 7, 7].
        let values = [1, 2, 3, 4, 5, 6, 7, 7];
        let shape = [2, 4];
        assert_eq!(
            u16_2d(Reduction::Mean, &values, &shape, &shape),
            [4, 5],
            "3.5 rounds up to 4, 5.25 down to 5"
        );
        assert_eq!(u16_2d(Reduction::Min, &values, &shape, &shape), [1, 3]);
        assert_eq!(u16_2d(Reduction::Max, &values, &shape, &shape), [6, 7]);
        assert_eq!(u16_2d(Reduction::Nearest, &values, &shape, &shape), [1, 3]);
        assert_eq!(u16_2d(Reduction::Mode, &values, &shape, &shape), [1, 7]);
    }

    #[test]
    fn odd_edges_reduce_over_the_elements_that_exist() {
        // 3 x 3 valid within a 4 x 4 buffer (the last row and column are padding).
        #[rustfmt::skip]
        let values = [
            1, 3, 10, 999,
            5, 7, 20, 999,
            100, 200, 300, 999,
            999, 999, 999, 999,
        ];
        assert_eq!(
            u16_2d(Reduction::Mean, &values, &[4, 4], &[3, 3]),
            [4, 15, 150, 300]
        );
    }

    #[test]
    fn only_the_dimensions_that_shrink_are_reduced() {
        // c, y, x = 2, 2, 2 with factors 1, 2, 2: one value per channel.
        let values = [1u16, 2, 3, 4, 10, 20, 30, 40];
        let out = downsample(
            DataType::UInt16,
            Reduction::Mean,
            &u16s(&values),
            &[2, 2, 2],
            &[2, 2, 2],
            &[1, 2, 2],
            None,
        )
        .expect("downsamples");
        assert_eq!(back_u16(&out), [3, 25], "2.5 rounds to 3");
        // z, y, x = 2, 2, 2 by 2 in every dimension: one value.
        let out = downsample(
            DataType::UInt16,
            Reduction::Max,
            &u16s(&values),
            &[2, 2, 2],
            &[2, 2, 2],
            &[2, 2, 2],
            None,
        )
        .expect("downsamples");
        assert_eq!(back_u16(&out), [40]);
    }

    /// The mean of every block, whole or cut by an odd edge, with and without a masked value,
    /// equals the one of each block's kept elements computed here element by element (the rows of
    /// whole 2 x 2 blocks go through a path of their own).
    #[test]
    fn means_of_whole_and_edge_blocks_equal_a_reference() {
        let shape = [2u64, 7, 9];
        let valid = [2u64, 7, 9];
        let values: Vec<u16> = (0..126u32).map(|i| ((i * 7919) % 13) as u16).collect();
        for masked in [None, Some(0u16)] {
            let bytes = masked.map(|m| m.to_le_bytes());
            let out = downsample(
                DataType::UInt16,
                Reduction::Mean,
                &u16s(&values),
                &shape,
                &valid,
                &[1, 2, 2],
                bytes.as_ref().map(|b| &b[..]),
            )
            .expect("downsamples");
            let mut expected = Vec::new();
            for c in 0..2usize {
                for y in 0..4usize {
                    for x in 0..5usize {
                        let kept: Vec<i64> = (2 * y..(2 * y + 2).min(7))
                            .flat_map(|yy| (2 * x..(2 * x + 2).min(9)).map(move |xx| (yy, xx)))
                            .map(|(yy, xx)| values[c * 63 + yy * 9 + xx])
                            .filter(|&v| Some(v) != masked)
                            .map(i64::from)
                            .collect();
                        let n = kept.len() as i64;
                        let sum: i64 = kept.iter().sum();
                        expected.push(match n {
                            0 => masked.unwrap_or(0),
                            _ => ((2 * sum + n) / (2 * n)) as u16,
                        });
                    }
                }
            }
            assert_eq!(back_u16(&out), expected, "masked {masked:?}");
        }
    }

    #[test]
    fn nan_and_the_masked_value_do_not_pull_the_mean() {
        let nan = f32::NAN;
        let values = [1.0, nan, -9.0, -9.0, 3.0, nan, -9.0, nan];
        let out = downsample(
            DataType::Float32,
            Reduction::Mean,
            &f32s(&values),
            &[2, 4],
            &[2, 4],
            &[2, 2],
            Some(&(-9.0f32).to_le_bytes()),
        )
        .expect("downsamples");
        assert_eq!(back_f32(&out), [2.0, -9.0]);
        let all_nan = downsample(
            DataType::Float32,
            Reduction::Mean,
            &f32s(&[nan; 4]),
            &[2, 2],
            &[2, 2],
            &[2, 2],
            None,
        )
        .expect("downsamples");
        assert!(back_f32(&all_nan)[0].is_nan());
        let masked_ints = downsample(
            DataType::UInt16,
            Reduction::Mean,
            &u16s(&[0, 0, 0, 4]),
            &[2, 2],
            &[2, 2],
            &[2, 2],
            Some(&0u16.to_le_bytes()),
        )
        .expect("downsamples");
        assert_eq!(back_u16(&masked_ints), [4]);
    }

    #[test]
    fn signed_means_round_halves_away_from_zero() {
        let values: Vec<u8> = [-3i8, -4, 1, 2].iter().map(|&v| v as u8).collect();
        let out = downsample(
            DataType::Int8,
            Reduction::Mean,
            &values,
            &[4],
            &[4],
            &[2],
            None,
        )
        .expect("downsamples");
        assert_eq!(out.iter().map(|&b| b as i8).collect::<Vec<_>>(), [-4, 2]);
        let big = [u64::MAX, u64::MAX - 1];
        let bytes: Vec<u8> = big.iter().flat_map(|v| v.to_le_bytes()).collect();
        let out = downsample(
            DataType::UInt64,
            Reduction::Mean,
            &bytes,
            &[2],
            &[2],
            &[2],
            None,
        )
        .expect("downsamples");
        assert_eq!(out, u64::MAX.to_le_bytes(), "no overflow in the sum");
    }

    #[test]
    fn strings_are_refused() {
        assert!(!downsamples(DataType::String));
        assert!(downsample(
            DataType::Complex64,
            Reduction::Mean,
            &[0; 8],
            &[1],
            &[1],
            &[2],
            None
        )
        .is_err());
    }
}
