//! numcodecs `zfpy` (v2 compressor id `zfpy`, v3 array→bytes codec `numcodecs.zfpy`): LLNL's zfp
//! as numcodecs writes it through zfpy's `compress_numpy`, decoded here in pure Rust.
//!
//! A chunk is one zfp stream with the full header: the magic `zfp` and codec version, the field's
//! scalar type and sizes (x, the last numpy axis, fastest), and the compression mode (fixed rate,
//! fixed precision, fixed accuracy or reversible). The field is cut into blocks of 4^d values
//! (partial at the upper edges), coded one after the other. zshard only decodes zfp: it writes
//! the values with its own codecs.
//!
//! Every size in the header is untrusted: the header must describe exactly the chunk's element
//! count and data type before anything is allocated, and a stream that ends early is refused.

mod block;
mod registered;
mod stream;

use std::sync::Arc;

use zshard_core::{ArrayToBytesCodec, ChunkRepr, CodecSpec, DataType, Error, Result};

use crate::error::invalid;
use crate::registry::Codec;
use block::{decode_ints, permutation, Coefficient, Limits};
use stream::{read_header, BitReader, Header, Params, ScalarType};

pub(crate) use registered::build as build_registered;

const NAME: &str = "numcodecs.zfpy";

/// The largest block zfp's 64-bit mode word allows (maxbits up to 2^15 bits), in bytes.
const MAX_BLOCK_BYTES: usize = (1 << 15) / 8;

/// The zfpy codec: decode only; its configuration (mode, tolerance, rate, precision) is kept
/// for the metadata, the stream describes itself.
#[derive(Debug)]
pub(crate) struct ZfpyCodec {
    spec: CodecSpec,
    scalar: ScalarType,
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let scalar = match repr.data_type {
        DataType::Int32 => ScalarType::Int32,
        DataType::Int64 => ScalarType::Int64,
        DataType::Float32 => ScalarType::Float32,
        DataType::Float64 => ScalarType::Float64,
        other => {
            return Err(invalid(
                NAME,
                format!(
                    "cannot hold {other} arrays (zfp stores int32, int64, float32 and float64)"
                ),
            ))
        }
    };
    Ok(Codec::ArrayToBytes(Arc::new(ZfpyCodec {
        spec: spec.clone(),
        scalar,
    })))
}

fn error(reason: impl Into<String>) -> Error {
    Error::codec(NAME, reason)
}

impl ArrayToBytesCodec for ZfpyCodec {
    fn encode(&self, _data: Vec<u8>, _repr: &ChunkRepr) -> Result<Vec<u8>> {
        Err(error(
            "zshard decodes zfp but does not encode it; write with another codec",
        ))
    }

    fn decode(&self, encoded: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        let count = usize::try_from(repr.elements())
            .map_err(|_| error("the chunk has too many elements"))?;
        decode(&encoded, self.scalar, count)
    }

    fn max_encoded_len(&self, repr: &ChunkRepr) -> usize {
        let blocks = repr
            .shape
            .iter()
            .map(|&n| usize::try_from(n.div_ceil(4)).unwrap_or(usize::MAX))
            .fold(1usize, usize::saturating_mul);
        let blocks = if repr.shape.len() > 4 {
            usize::try_from(repr.elements()).unwrap_or(usize::MAX)
        } else {
            blocks
        };
        blocks.saturating_mul(MAX_BLOCK_BYTES).saturating_add(64)
    }

    fn spec(&self) -> CodecSpec {
        self.spec.clone()
    }
}

/// Decodes a zfpy chunk of `count` values of type `scalar` into little-endian C-order bytes.
fn decode(encoded: &[u8], scalar: ScalarType, count: usize) -> Result<Vec<u8>> {
    let mut reader = BitReader::new(encoded);
    let header = read_header(&mut reader).map_err(error)?;
    check_header(&header, scalar, count)?;
    decode_values(&mut reader, &header, count, NAME)
}

/// Decodes the blocks after the header (or from the start of a headerless stream) of the field
/// `header` describes, `count` values of its type, into little-endian C-order bytes; `name` is
/// the codec errors name.
fn decode_values(
    reader: &mut BitReader<'_>,
    header: &Header,
    count: usize,
    name: &'static str,
) -> Result<Vec<u8>> {
    let scalar = header.scalar;
    let with = |e: Error| match e {
        Error::Codec { reason, .. } => Error::codec(name, reason),
        other => other,
    };
    match scalar {
        ScalarType::Int32 => decode_field::<i32>(reader, header, count, 4, |b, out| {
            for (o, v) in out.iter_mut().zip(b.values) {
                o[..4].copy_from_slice(&v.to_le_bytes());
            }
        }),
        ScalarType::Int64 => decode_field::<i64>(reader, header, count, 8, |b, out| {
            for (o, v) in out.iter_mut().zip(b.values) {
                *o = v.to_le_bytes();
            }
        }),
        ScalarType::Float32 => decode_field::<i32>(reader, header, count, 4, |b, out| {
            let values = b.values.iter();
            match b.kind {
                BlockKind::Scaled(emax) => {
                    let scale = pow2_f32(emax - 30);
                    for (o, &v) in out.iter_mut().zip(values) {
                        o[..4].copy_from_slice(&(v as f32 * scale).to_le_bytes());
                    }
                }
                BlockKind::Raw => {
                    for (o, &v) in out.iter_mut().zip(values) {
                        // Negative integers hold sign-magnitude floats in two's complement.
                        let bits = if v < 0 { v ^ i32::MAX } else { v };
                        o[..4].copy_from_slice(&bits.to_le_bytes());
                    }
                }
                BlockKind::Zero => out.iter_mut().for_each(|o| *o = [0; 8]),
            }
        }),
        ScalarType::Float64 => decode_field::<i64>(reader, header, count, 8, |b, out| {
            let values = b.values.iter();
            match b.kind {
                BlockKind::Scaled(emax) => {
                    let scale = pow2_f64(emax - 62);
                    for (o, &v) in out.iter_mut().zip(values) {
                        *o = (v as f64 * scale).to_le_bytes();
                    }
                }
                BlockKind::Raw => {
                    for (o, &v) in out.iter_mut().zip(values) {
                        *o = (if v < 0 { v ^ i64::MAX } else { v }).to_le_bytes();
                    }
                }
                BlockKind::Zero => out.iter_mut().for_each(|o| *o = [0; 8]),
            }
        }),
    }
    .map_err(with)
}

/// The header must describe the chunk: same scalar type, same element count (numcodecs reshapes
/// the decoded values to the chunk's shape, so only the count has to agree).
fn check_header(header: &Header, scalar: ScalarType, count: usize) -> Result<()> {
    let elements = header
        .sizes
        .iter()
        .try_fold(1u64, |acc, &n| acc.checked_mul(n))
        .unwrap_or(u64::MAX);
    if header.scalar != scalar || elements != count as u64 {
        return Err(error(format!(
            "the stream holds {elements} {} values (zfp sizes x, y, z, w: {:?}), the chunk {count} {} values",
            header.scalar.name(),
            header.sizes,
            scalar.name()
        )));
    }
    Ok(())
}

/// How a float block is rebuilt from its integers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BlockKind {
    /// Integers times the block's power-of-two scale `2^(emax - (bits - 2))`.
    Scaled(i32),
    /// All zeros.
    Zero,
    /// Reversible blocks that store the float bits themselves (as sign-magnitude integers).
    Raw,
}

/// One decoded block: its 4^d integers (x fastest) and how floats are rebuilt from them.
struct DecodedBlock<'a, I> {
    values: &'a [I],
    kind: BlockKind,
}

/// Decodes every block of the field in zfp's order (x blocks fastest) and scatters the part of
/// each that lies inside the field into C-order output of `width`-byte values; `convert` writes
/// a block's values as little-endian bytes (the first `width` of each 8 are used).
fn decode_field<I: Coefficient>(
    reader: &mut BitReader<'_>,
    header: &Header,
    count: usize,
    width: usize,
    convert: impl Fn(&DecodedBlock<'_, I>, &mut [[u8; 8]]),
) -> Result<Vec<u8>> {
    let dims = header.sizes.len();
    let block_len = 1usize << (2 * dims);
    let perm = permutation(dims);
    let layout = Layout::new(&header.sizes);
    let total: usize = layout.blocks.iter().product();
    let mut out = vec![0u8; count * width];
    let mut scratch = vec![0u64; block_len];
    let mut values = vec![I::default(); block_len];
    let mut bytes = vec![[0u8; 8]; block_len];
    let mut origin = [0usize; 4];
    for index in 0..total {
        let kind = decode_block(reader, header, &perm, &mut scratch, &mut values);
        if reader.overrun() {
            return Err(error(format!(
                "the stream ends inside block {index} of {total}"
            )));
        }
        convert(
            &DecodedBlock {
                values: &values,
                kind,
            },
            &mut bytes,
        );
        layout.scatter(&bytes, &origin[..dims], width, &mut out);
        layout.next_origin(&mut origin[..dims]);
    }
    Ok(out)
}

/// The field's geometry: sizes and strides along x, y, z, w (x fastest in the output), the
/// block counts, and each block value's offset from the block's first value.
struct Layout {
    sizes: Vec<usize>,
    strides: Vec<usize>,
    blocks: Vec<usize>,
    offsets: Vec<usize>,
}

impl Layout {
    fn new(sizes: &[u64]) -> Self {
        let sizes: Vec<usize> = sizes.iter().map(|&n| n as usize).collect();
        let strides: Vec<usize> = sizes
            .iter()
            .scan(1usize, |stride, &n| {
                let this = *stride;
                *stride = stride.saturating_mul(n);
                Some(this)
            })
            .collect();
        let offsets = (0..1usize << (2 * sizes.len()))
            .map(|i| {
                strides
                    .iter()
                    .enumerate()
                    .map(|(axis, stride)| ((i >> (2 * axis)) & 3) * stride)
                    .sum()
            })
            .collect();
        Layout {
            blocks: sizes.iter().map(|n| n.div_ceil(4)).collect(),
            sizes,
            strides,
            offsets,
        }
    }

    /// Moves `origin` to the next block's first value, x blocks fastest.
    fn next_origin(&self, origin: &mut [usize]) {
        for (axis, start) in origin.iter_mut().enumerate() {
            *start += 4;
            if *start < self.sizes[axis] {
                return;
            }
            *start = 0;
        }
    }

    /// Copies the part of a 4^d block at `origin` that lies inside the field into the output.
    fn scatter(&self, bytes: &[[u8; 8]], origin: &[usize], width: usize, out: &mut [u8]) {
        let base: usize = origin.iter().zip(&self.strides).map(|(o, s)| o * s).sum();
        let whole = origin.iter().zip(&self.sizes).all(|(o, n)| o + 4 <= *n);
        for (i, (value, offset)) in bytes.iter().zip(&self.offsets).enumerate() {
            if !whole {
                let inside = origin
                    .iter()
                    .zip(&self.sizes)
                    .enumerate()
                    .all(|(axis, (o, n))| o + ((i >> (2 * axis)) & 3) < *n);
                if !inside {
                    continue;
                }
            }
            let at = (base + offset) * width;
            out[at..at + width].copy_from_slice(&value[..width]);
        }
    }
}

/// Decodes the next block into `values` (integers, or the integer form of floats).
fn decode_block<I: Coefficient>(
    reader: &mut BitReader<'_>,
    header: &Header,
    perm: &[usize],
    scratch: &mut [u64],
    values: &mut [I],
) -> BlockKind {
    let params = header.params;
    let reversible = params.reversible();
    let dims = header.sizes.len();
    let (ebits, ebias) = match header.scalar {
        ScalarType::Int32 | ScalarType::Int64 => {
            let limits = Limits {
                minbits: u64::from(params.minbits),
                maxbits: u64::from(params.maxbits),
                maxprec: params.maxprec,
            };
            decode_ints(reader, limits, perm, scratch, values, reversible);
            return BlockKind::Raw;
        }
        ScalarType::Float32 => (8u32, 127i32),
        ScalarType::Float64 => (11, 1023),
    };
    // A float block starts with one bit: 0 for a block of zeros.
    let mut bits = 1u64;
    if !reader.read_bit() {
        values.iter_mut().for_each(|v| *v = I::default());
        if u64::from(params.minbits) > bits {
            reader.skip((u64::from(params.minbits) - bits) as usize);
        }
        return BlockKind::Zero;
    }
    // Reversible blocks then say whether they store the float bits themselves (1) or integers
    // with a common exponent (0), which the lossy modes always use.
    let raw = reversible && {
        bits += 1;
        reader.read_bit()
    };
    let mut emax = 0;
    if !raw {
        emax = reader.read_bits(ebits) as i32 - ebias;
        bits += u64::from(ebits);
    }
    let maxprec = if reversible {
        params.maxprec
    } else {
        precision(emax, params.maxprec, params.minexp, dims)
    };
    let limits = Limits {
        minbits: u64::from(params.minbits).saturating_sub(bits),
        maxbits: u64::from(params.maxbits).saturating_sub(bits),
        maxprec,
    };
    decode_ints(reader, limits, perm, scratch, values, reversible);
    if raw {
        BlockKind::Raw
    } else if reversible && emax == -ebias {
        // The reversible encoder gives an all-zero integer block the smallest exponent.
        BlockKind::Zero
    } else {
        BlockKind::Scaled(emax)
    }
}

/// zfp's bit-plane budget of a float block with common exponent `emax` (fixed accuracy keeps
/// the planes down to `minexp`; the other modes have the lowest `minexp`, so `maxprec` decides).
fn precision(emax: i32, maxprec: u32, minexp: i32, dims: usize) -> u32 {
    let planes = i64::from(emax) - i64::from(minexp) + 2 * dims as i64 + 2;
    planes.clamp(0, i64::from(maxprec)) as u32
}

/// `2^n` as an f32, rounded as C's `ldexpf(1, n)` (zero below the subnormals).
fn pow2_f32(n: i32) -> f32 {
    match n {
        // 2^-150 rounds (to even) to zero, as do smaller powers.
        ..=-150 => 0.0,
        -149..=-127 => f32::from_bits(1u32 << (n + 149)),
        -126..=127 => f32::from_bits(((n + 127) as u32) << 23),
        _ => f32::INFINITY,
    }
}

/// `2^n` as an f64, rounded as C's `ldexp(1, n)`.
fn pow2_f64(n: i32) -> f64 {
    match n {
        ..=-1075 => 0.0,
        -1074..=-1023 => f64::from_bits(1u64 << (n + 1074)),
        -1022..=1023 => f64::from_bits(((n + 1023) as u64) << 52),
        _ => f64::INFINITY,
    }
}

#[cfg(test)]
mod tests;
