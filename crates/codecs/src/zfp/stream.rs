//! zfp's bit stream and its full header (magic, field metadata, compression mode).
//!
//! libzfp writes 64-bit words least significant bit first and stores them little endian, so the
//! stream is a plain LSB-first bit sequence over the bytes.

/// Reads bits least significant first, 64 at a time from the bytes. Reading past the end yields
/// zeros and marks the reader [`overrun`](BitReader::overrun): callers check it after each block,
/// which keeps the hot loop free of error paths.
pub(super) struct BitReader<'a> {
    data: &'a [u8],
    /// The next byte to load into `buffer`.
    next: usize,
    /// Bits not yet read, least significant first.
    buffer: u64,
    /// How many bits of `buffer` are unread.
    available: u32,
    overrun: bool,
}

impl<'a> BitReader<'a> {
    pub(super) fn new(data: &'a [u8]) -> Self {
        BitReader {
            data,
            next: 0,
            buffer: 0,
            available: 0,
            overrun: false,
        }
    }

    /// True once a read went past the end of the data.
    pub(super) fn overrun(&self) -> bool {
        self.overrun
    }

    /// Loads the next (up to) 8 bytes; past the end, 64 zero bits and the overrun mark.
    fn refill(&mut self) {
        let rest = self.data.get(self.next..).unwrap_or(&[]);
        let take = rest.len().min(8);
        if take == 0 {
            self.overrun = true;
            self.buffer = 0;
            self.available = 64;
            return;
        }
        let mut word = [0u8; 8];
        word[..take].copy_from_slice(&rest[..take]);
        self.buffer = u64::from_le_bytes(word);
        self.available = 8 * take as u32;
        self.next += take;
    }

    pub(super) fn read_bit(&mut self) -> bool {
        if self.available == 0 {
            self.refill();
        }
        let bit = self.buffer & 1 == 1;
        self.buffer >>= 1;
        self.available -= 1;
        bit
    }

    /// Reads `n <= 64` bits; the first bit read is the least significant of the result.
    pub(super) fn read_bits(&mut self, n: u32) -> u64 {
        if n <= self.available {
            return self.take(n);
        }
        // The last refill of a stream may hold fewer than `n` bits (its final bytes), so this
        // gathers across as many refills as it takes.
        let mut value = 0;
        let mut read = 0;
        while read < n {
            if self.available == 0 {
                self.refill();
            }
            let step = (n - read).min(self.available);
            value |= self.take(step) << read;
            read += step;
        }
        value
    }

    /// Takes `n <= available` bits from the buffer.
    fn take(&mut self, n: u32) -> u64 {
        if n == 0 {
            return 0;
        }
        let value = if n == 64 {
            self.buffer
        } else {
            self.buffer & ((1u64 << n) - 1)
        };
        self.buffer = self.buffer.checked_shr(n).unwrap_or(0);
        self.available -= n;
        value
    }

    pub(super) fn skip(&mut self, mut n: usize) {
        while n > 0 {
            if self.available == 0 {
                self.refill();
            }
            let step = n.min(self.available as usize) as u32;
            self.take(step);
            n -= step as usize;
        }
    }
}

/// The scalar types zfp stores (the header's 2-bit type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ScalarType {
    Int32,
    Int64,
    Float32,
    Float64,
}

impl ScalarType {
    pub(super) fn name(self) -> &'static str {
        match self {
            ScalarType::Int32 => "int32",
            ScalarType::Int64 => "int64",
            ScalarType::Float32 => "float32",
            ScalarType::Float64 => "float64",
        }
    }
}

/// zfp's smallest exponent (`ZFP_MIN_EXP`): fixed-accuracy mode below it means reversible.
pub(super) const MIN_EXP: i32 = -1074;
/// zfp's largest block size in bits (`ZFP_MAX_BITS`).
pub(super) const MAX_BITS: u32 = 16658;
/// zfp's largest precision (`ZFP_MAX_PREC`).
pub(super) const MAX_PREC: u32 = 64;
/// The largest 12-bit mode code; larger codes mean a 64-bit mode word follows.
const MODE_SHORT_MAX: u64 = (1 << 12) - 2;
/// The codec version zfp 1.0 (and 0.5.x) write after the magic `zfp`.
pub(super) const CODEC_VERSION: u64 = 5;

/// The compression parameters of a stream, as zfp keeps them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Params {
    pub(super) minbits: u32,
    pub(super) maxbits: u32,
    pub(super) maxprec: u32,
    pub(super) minexp: i32,
}

impl Params {
    /// zfp's reversible (lossless) mode marks itself with an exponent below the smallest.
    pub(super) fn reversible(&self) -> bool {
        self.minexp < MIN_EXP
    }
}

/// What the full header says: the field's type and sizes (x fastest) and the mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) scalar: ScalarType,
    /// nx, ny, nz, nw for as many dimensions as the field has (x varies fastest).
    pub(super) sizes: Vec<u64>,
    pub(super) params: Params,
}

/// Reads the full header zfpy's `compress_numpy` writes; `Err` says what is wrong.
pub(super) fn read_header(reader: &mut BitReader<'_>) -> Result<Header, String> {
    let magic = [
        reader.read_bits(8),
        reader.read_bits(8),
        reader.read_bits(8),
    ];
    if magic != [u64::from(b'z'), u64::from(b'f'), u64::from(b'p')] {
        return Err("the chunk does not start with zfp's magic \"zfp\"".into());
    }
    let version = reader.read_bits(8);
    if version != CODEC_VERSION {
        return Err(format!(
            "zfp codec version {version} is not supported (zfp 0.5.x and 1.0 write {CODEC_VERSION})"
        ));
    }
    let meta = reader.read_bits(52);
    let (scalar, sizes) = field(meta);
    let params = mode(reader)?;
    if reader.overrun() {
        return Err("the chunk ends inside the zfp header".into());
    }
    Ok(Header {
        scalar,
        sizes,
        params,
    })
}

/// Decodes the 52-bit field metadata: 2 bits type, 2 bits dimensionality, then sizes minus one.
fn field(meta: u64) -> (ScalarType, Vec<u64>) {
    let scalar = match meta & 3 {
        0 => ScalarType::Int32,
        1 => ScalarType::Int64,
        2 => ScalarType::Float32,
        _ => ScalarType::Float64,
    };
    let dims = (meta >> 2 & 3) + 1;
    let sizes = meta >> 4;
    let (bits, count) = match dims {
        // zfp reads only 32 of the 48 bits of a 1D size.
        1 => (32, 1),
        2 => (24, 2),
        3 => (16, 3),
        _ => (12, 4),
    };
    let field_bits = match dims {
        1 => 48,
        _ => bits,
    };
    let sizes = (0..count)
        .map(|i| ((sizes >> (i * field_bits)) & ((1u64 << bits) - 1)) + 1)
        .collect();
    (scalar, sizes)
}

/// Reads the 12-bit mode code (or the 64-bit word it announces) into parameters.
fn mode(reader: &mut BitReader<'_>) -> Result<Params, String> {
    let mut code = reader.read_bits(12);
    if code > MODE_SHORT_MAX {
        code += reader.read_bits(52) << 12;
    }
    let params = if code <= MODE_SHORT_MAX {
        short_mode(code)
    } else {
        let field = |shift: u32, mask: u64| (code >> shift) & mask;
        Params {
            minbits: field(12, 0x7fff) as u32 + 1,
            maxbits: field(27, 0x7fff) as u32 + 1,
            maxprec: field(42, 0x7f) as u32 + 1,
            minexp: field(49, 0x7fff) as i32 - 16495,
        }
    };
    if params.minbits > params.maxbits || !(1..=MAX_PREC).contains(&params.maxprec) {
        return Err(format!(
            "invalid zfp mode (minbits {}, maxbits {}, maxprec {})",
            params.minbits, params.maxbits, params.maxprec
        ));
    }
    Ok(params)
}

/// The four common modes zfp codes in 12 bits.
fn short_mode(code: u64) -> Params {
    let lossless_range = Params {
        minbits: 1,
        maxbits: MAX_BITS,
        maxprec: MAX_PREC,
        minexp: MIN_EXP,
    };
    match code {
        // Fixed rate: every block takes exactly code + 1 bits.
        0..=2047 => Params {
            minbits: code as u32 + 1,
            maxbits: code as u32 + 1,
            ..lossless_range
        },
        // Fixed precision: code - 2047 bit planes.
        2048..=2175 => Params {
            maxprec: (code - 2047) as u32,
            ..lossless_range
        },
        2176 => Params {
            minexp: MIN_EXP - 1,
            ..lossless_range
        },
        // Fixed accuracy: the smallest exponent kept.
        _ => Params {
            minexp: (code - 2177) as i32 + MIN_EXP,
            ..lossless_range
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_bits_lsb_first_across_bytes_and_marks_overrun() {
        let data = [0b1010_1101u8, 0xff, 0x01];
        let mut r = BitReader::new(&data);
        assert!(r.read_bit());
        assert!(!r.read_bit());
        assert_eq!(r.read_bits(3), 0b011);
        assert_eq!(r.read_bits(11), 0b111_1111_1101);
        assert_eq!(r.read_bits(8), 1);
        assert!(!r.overrun());
        assert_eq!(r.read_bits(4), 0);
        assert!(r.overrun());
    }

    #[test]
    fn reads_wide_fields_across_a_short_last_refill() {
        // Two bytes left when 52 bits are asked for: the missing bits read as zeros (overrun),
        // never an arithmetic overflow (a fuzz finding).
        let mut r = BitReader::new(&[0xff, 0x01]);
        assert_eq!(r.read_bits(52), 0x1ff);
        assert!(r.overrun());
        // Ten bytes: 64 bits, then a refill of 2 bytes in the middle of a 12-bit read.
        let mut data = [0u8; 10];
        data[7] = 0x80;
        data[8] = 0x0f;
        let mut r = BitReader::new(&data);
        assert_eq!(r.read_bits(60), 0);
        assert_eq!(r.read_bits(12), 0b1111_1000);
        assert!(!r.overrun());
    }

    #[test]
    fn decodes_the_short_modes() {
        assert_eq!(short_mode(63).maxbits, 64);
        assert_eq!(short_mode(63).minbits, 64);
        assert_eq!(short_mode(2048 + 15).maxprec, 16);
        assert!(short_mode(2176).reversible());
        assert_eq!(short_mode(2177 + 1074 - 7).minexp, -7);
    }
}
