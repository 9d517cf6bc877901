//! numcodecs `pcodec` (v2 compressor id `pcodec`, v3 array→bytes codec `numcodecs.pcodec`): the
//! standalone format of the `pco` crate, which numcodecs writes through pcodec's
//! `standalone.simple_compress` (the Python package binds this same crate).
//!
//! A chunk is one standalone file: a header, then pco chunks of one number type each (one per page
//! of `equal_pages_up_to` numbers), then a termination byte. Decoding checks that the file holds
//! exactly the chunk's element count, reading pco chunk by chunk so that a file that claims more
//! numbers than the chunk has is refused before they are allocated.

use std::sync::Arc;

use half::f16;
use pco::data_types::Number;
use pco::standalone::{simple_compress, DecompressorItem, FileDecompressor};
use pco::{ChunkConfig, DeltaSpec, ModeSpec, PagingSpec, DEFAULT_MAX_PAGE_N};
use serde_json::{json, Value};
use zshard_core::{ArrayToBytesCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::config::{int, string};
use crate::error::invalid;
use crate::numeric::NumDt;
use crate::registry::Codec;

const NAME: &str = "numcodecs.pcodec";

/// numcodecs' default compression level.
const DEFAULT_LEVEL: i64 = 8;

/// numcodecs' `mode_spec`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Auto,
    Classic,
}

/// numcodecs' `delta_spec` (with `delta_encoding_order` folded in, as numcodecs does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Delta {
    Auto,
    None,
    TryConsecutive(Option<u64>),
    TryLookback,
}

/// The configuration numcodecs' `PCodec` takes; it matters only when encoding (the format is
/// self-describing), but a value numcodecs refuses is refused here too.
#[derive(Debug)]
pub(crate) struct PcodecCodec {
    level: u64,
    mode: Mode,
    delta: Delta,
    equal_pages_up_to: u64,
    number: NumDt,
}

/// A pco number that converts to and from little-endian bytes.
trait LeNumber: Number {
    const SIZE: usize;
    fn from_le_slice(bytes: &[u8]) -> Self;
    fn extend_le(self, out: &mut Vec<u8>);
}

macro_rules! le_number {
    ($($t:ty),*) => {$(
        impl LeNumber for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn from_le_slice(bytes: &[u8]) -> Self {
                let mut array = [0u8; std::mem::size_of::<$t>()];
                array.copy_from_slice(bytes);
                <$t>::from_le_bytes(array)
            }
            fn extend_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}

le_number!(i8, i16, i32, i64, u8, u16, u32, u64, f16, f32, f64);

/// Calls `$f::<T>($args)` with `T` the Rust type of a [`NumDt`].
macro_rules! dispatch {
    ($kind:expr, $f:ident($($arg:expr),*)) => {
        match $kind {
            NumDt::I8 => $f::<i8>($($arg),*),
            NumDt::I16 => $f::<i16>($($arg),*),
            NumDt::I32 => $f::<i32>($($arg),*),
            NumDt::I64 => $f::<i64>($($arg),*),
            NumDt::U8 => $f::<u8>($($arg),*),
            NumDt::U16 => $f::<u16>($($arg),*),
            NumDt::U32 => $f::<u32>($($arg),*),
            NumDt::U64 => $f::<u64>($($arg),*),
            NumDt::F16 => $f::<f16>($($arg),*),
            NumDt::F32 => $f::<f32>($($arg),*),
            NumDt::F64 => $f::<f64>($($arg),*),
        }
    };
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let number = NumDt::of(repr.data_type).ok_or_else(|| {
        invalid(
            NAME,
            format!(
                "cannot store {} arrays (pcodec stores integers and floats of 8 to 64 bits)",
                repr.data_type
            ),
        )
    })?;
    let mode = match string(spec, "mode_spec").unwrap_or("auto") {
        "auto" => Mode::Auto,
        "classic" => Mode::Classic,
        other => return Err(unsupported("mode_spec", other)),
    };
    match string(spec, "paging_spec").unwrap_or("equal_pages_up_to") {
        "equal_pages_up_to" => {}
        other => return Err(unsupported("paging_spec", other)),
    }
    Ok(Codec::ArrayToBytes(Arc::new(PcodecCodec {
        level: non_negative(spec, "level", DEFAULT_LEVEL)?,
        mode,
        delta: delta(spec)?,
        equal_pages_up_to: page_limit(spec)?,
        number,
    })))
}

fn unsupported(key: &str, value: &str) -> crate::Error {
    invalid(NAME, format!("{key} {value:?} is not supported"))
}

/// `equal_pages_up_to`: at least one number per page (pco divides by it when it pages a chunk).
fn page_limit(spec: &CodecSpec) -> crate::Result<u64> {
    match non_negative(spec, "equal_pages_up_to", DEFAULT_MAX_PAGE_N as i64)? {
        0 => Err(invalid(
            NAME,
            "equal_pages_up_to 0: a page holds at least one number",
        )),
        limit => Ok(limit),
    }
}

fn non_negative(spec: &CodecSpec, key: &str, default: i64) -> crate::Result<u64> {
    let value = int(spec, key, Some(default))?;
    u64::try_from(value).map_err(|_| invalid(NAME, format!("{key} {value} is negative")))
}

/// `delta_spec` with `delta_encoding_order`, as numcodecs' `_get_chunk_config` combines them.
fn delta(spec: &CodecSpec) -> crate::Result<Delta> {
    let order = match spec.get("delta_encoding_order") {
        None | Some(Value::Null) => None,
        Some(_) => Some(non_negative(spec, "delta_encoding_order", 0)?),
    };
    Ok(
        match (string(spec, "delta_spec").unwrap_or("auto"), order) {
            // numcodecs' backwards compatibility: an order with "auto" means try_consecutive.
            ("auto", Some(order)) => Delta::TryConsecutive(Some(order)),
            ("auto", None) => Delta::Auto,
            ("try_consecutive", order) => Delta::TryConsecutive(order),
            (other, Some(_)) => {
                return Err(invalid(
                    NAME,
                    format!("delta_encoding_order needs delta_spec try_consecutive, not {other:?}"),
                ))
            }
            ("none", None) => Delta::None,
            ("try_lookback", None) => Delta::TryLookback,
            (other, None) => return Err(unsupported("delta_spec", other)),
        },
    )
}

fn pco_error(error: pco::errors::PcoError) -> Error {
    Error::codec(NAME, error.to_string())
}

impl PcodecCodec {
    /// The chunk configuration numcodecs' `_get_chunk_config` makes from the same settings.
    fn chunk_config(&self) -> Result<ChunkConfig> {
        let usize_of = |v: u64, what: &str| {
            usize::try_from(v).map_err(|_| Error::codec(NAME, format!("{what} {v} is too large")))
        };
        let delta = match self.delta {
            Delta::Auto => DeltaSpec::Auto,
            Delta::None => DeltaSpec::NoOp,
            // pcodec's `DeltaSpec.try_consecutive(order)` requires an order: numcodecs passing
            // None fails there, so a missing order fails here too.
            Delta::TryConsecutive(Some(order)) => {
                DeltaSpec::TryConsecutive(usize_of(order, "delta_encoding_order")?)
            }
            Delta::TryConsecutive(None) => {
                return Err(Error::codec(
                    NAME,
                    "delta_spec try_consecutive needs delta_encoding_order",
                ))
            }
            Delta::TryLookback => DeltaSpec::TryLookback,
        };
        Ok(ChunkConfig::default()
            .with_compression_level(usize_of(self.level, "level")?)
            .with_mode_spec(match self.mode {
                Mode::Auto => ModeSpec::Auto,
                Mode::Classic => ModeSpec::Classic,
            })
            .with_delta_spec(delta)
            .with_paging_spec(PagingSpec::EqualPagesUpTo(usize_of(
                self.equal_pages_up_to,
                "equal_pages_up_to",
            )?)))
    }
}

fn compress<T: LeNumber>(data: &[u8], config: &ChunkConfig) -> Result<Vec<u8>> {
    let numbers: Vec<T> = data.chunks_exact(T::SIZE).map(T::from_le_slice).collect();
    simple_compress(&numbers, config).map_err(pco_error)
}

/// Decodes a standalone file of exactly `count` numbers of type `T` into little-endian bytes.
fn decompress<T: LeNumber>(encoded: &[u8], count: usize) -> Result<Vec<u8>> {
    let (file, mut src) = FileDecompressor::new(encoded).map_err(pco_error)?;
    let mut numbers: Vec<T> = Vec::with_capacity(count);
    loop {
        check_chunk_claims(src, count - numbers.len(), count)?;
        match file
            .chunk_decompressor::<T, &[u8]>(src)
            .map_err(pco_error)?
        {
            DecompressorItem::EndOfData(_) => break,
            DecompressorItem::Chunk(mut chunk) => {
                let start = numbers.len();
                let end = start.saturating_add(chunk.n());
                if end > count {
                    return Err(more_than_the_chunk(count));
                }
                numbers.resize(end, T::default());
                let progress = chunk.read(&mut numbers[start..]).map_err(pco_error)?;
                if !progress.finished || progress.n_processed != end - start {
                    return Err(Error::codec(NAME, "a pco chunk ends early"));
                }
                src = chunk.into_src();
            }
        }
    }
    if numbers.len() != count {
        return Err(Error::DecodedSize {
            expected: count.saturating_mul(T::SIZE),
            actual: numbers.len().saturating_mul(T::SIZE),
        });
    }
    let mut out = Vec::with_capacity(count.saturating_mul(T::SIZE));
    for n in numbers {
        n.extend_le(&mut out);
    }
    Ok(out)
}

fn more_than_the_chunk(count: usize) -> Error {
    Error::codec(
        NAME,
        format!("holds more than the chunk's {count} elements"),
    )
}

/// pco's dictionary mode (`Mode::Dict`), as the chunk metadata's 4-bit mode variant.
const DICT_MODE: u32 = 4;

/// What the pco chunk at the start of `src` claims: its count of numbers and, in dictionary mode,
/// the dictionary's length; `None` at the end of the file. The standalone format puts a number-type
/// byte (0 ends the file), then the count minus one in 24 bits; the chunk metadata starts on the
/// next byte with the 4-bit mode, and dictionary mode follows it with the length in 25 bits (pco
/// reads bits from the least significant end of little-endian words). Missing bytes read as zeros,
/// as pco pads its input.
fn chunk_claims(src: &[u8]) -> Option<(usize, Option<usize>)> {
    let mut head = [0u8; 8];
    let len = src.len().min(head.len());
    head[..len].copy_from_slice(&src[..len]);
    if head[0] == 0 {
        return None;
    }
    let n = u32::from_le_bytes([head[1], head[2], head[3], 0]) as usize + 1;
    let meta = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    let dict_len = (meta & 0xf == DICT_MODE).then_some(((meta >> 4) & ((1 << 25) - 1)) as usize);
    Some((n, dict_len))
}

/// Refuses a pco chunk that claims more numbers than the `remaining` ones of the chunk of `count`,
/// or a dictionary longer than its own count, before pco sees it: pco allocates the dictionary at
/// the length the chunk states (up to 2^25 numbers) before it finds out whether the bytes follow.
fn check_chunk_claims(src: &[u8], remaining: usize, count: usize) -> Result<()> {
    let Some((n, dict_len)) = chunk_claims(src) else {
        return Ok(());
    };
    if n > remaining {
        return Err(more_than_the_chunk(count));
    }
    match dict_len {
        Some(dict_len) if dict_len > n => Err(Error::codec(
            NAME,
            format!("a pco chunk of {n} numbers claims a dictionary of {dict_len}"),
        )),
        _ => Ok(()),
    }
}

impl ArrayToBytesCodec for PcodecCodec {
    fn encode(&self, data: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        if data.len() != repr.byte_len() {
            return Err(Error::DecodedSize {
                expected: repr.byte_len(),
                actual: data.len(),
            });
        }
        let config = self.chunk_config()?;
        dispatch!(self.number, compress(&data, &config))
    }

    fn decode(&self, encoded: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        let count = usize::try_from(repr.elements())
            .map_err(|_| Error::codec(NAME, "chunk has too many elements"))?;
        dispatch!(self.number, decompress(&encoded, count))
    }

    fn max_encoded_len(&self, repr: &ChunkRepr) -> usize {
        // pco's worst case is a little above the raw size (headers per page plus the bit widths).
        let raw = repr.byte_len();
        raw.saturating_add(raw / 4).saturating_add(4096)
    }

    fn spec(&self) -> CodecSpec {
        let (delta_spec, order) = match self.delta {
            Delta::Auto => ("auto", None),
            Delta::None => ("none", None),
            Delta::TryConsecutive(order) => ("try_consecutive", order),
            Delta::TryLookback => ("try_lookback", None),
        };
        CodecSpec::new(
            NAME,
            json!({
                "level": self.level,
                "mode_spec": match self.mode { Mode::Auto => "auto", Mode::Classic => "classic" },
                "delta_spec": delta_spec,
                "paging_spec": "equal_pages_up_to",
                "delta_encoding_order": order,
                "equal_pages_up_to": self.equal_pages_up_to,
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zshard_core::{DataType, FillValue};

    fn repr(data_type: DataType, n: u64) -> ChunkRepr {
        ChunkRepr {
            shape: vec![n],
            data_type,
            fill_value: FillValue::zero(data_type),
        }
    }

    fn codec(config: Value, repr: &ChunkRepr) -> Arc<dyn ArrayToBytesCodec> {
        match build(&CodecSpec::new(NAME, config), repr) {
            Ok(Codec::ArrayToBytes(c)) => c,
            other => panic!("not an array-to-bytes codec: {other:?}"),
        }
    }

    #[test]
    fn round_trips_every_number_type_over_several_pages() {
        for data_type in [
            DataType::Int16,
            DataType::Int32,
            DataType::Int64,
            DataType::UInt16,
            DataType::UInt32,
            DataType::UInt64,
            DataType::Float16,
            DataType::Float32,
            DataType::Float64,
        ] {
            let r = repr(data_type, 1000);
            let c = codec(json!({"level": 8, "equal_pages_up_to": 300}), &r);
            let data: Vec<u8> = (0..r.byte_len()).map(|i| (i * 7 % 13) as u8).collect();
            let encoded = c.encode(data.clone(), &r).expect("encode");
            assert_eq!(c.decode(encoded, &r).expect("decode"), data, "{data_type}");
        }
    }

    #[test]
    fn reads_the_claims_of_pco_chunks_where_pco_does() {
        // 1000 numbers of 3 distinct values in pco's dictionary mode (numcodecs does not ask for
        // it, but a pco file may use it).
        let numbers: Vec<i32> = (0..1000).map(|i| [7, -3, 100_000][i % 3]).collect();
        let config = ChunkConfig::default().with_mode_spec(ModeSpec::TryDict);
        let encoded = simple_compress(&numbers, &config).expect("compress");
        let (_, src) = FileDecompressor::new(encoded.as_slice()).expect("header");
        assert_eq!(chunk_claims(src), Some((1000, Some(3))));
        let data: Vec<u8> = numbers.iter().flat_map(|n| n.to_le_bytes()).collect();
        let r = repr(DataType::Int32, 1000);
        let c = codec(json!({}), &r);
        assert_eq!(c.decode(encoded.clone(), &r).expect("decode"), data);
        // The same chunk claiming a dictionary of 2^25 - 1 numbers is refused before pco allocates it.
        let at = encoded.len() - src.len() + 4;
        let mut lying = encoded.clone();
        lying[at..at + 4].copy_from_slice(&(DICT_MODE | 0x1ff_ffff << 4).to_le_bytes());
        let err = c.decode(lying, &r).expect_err("refused");
        assert!(
            err.to_string()
                .contains("a pco chunk of 1000 numbers claims a dictionary of 33554431"),
            "{err}"
        );
    }

    #[test]
    fn refuses_wrong_counts_types_and_garbage() {
        let r = repr(DataType::Int32, 100);
        let c = codec(json!({}), &r);
        let encoded = c.encode(vec![1; 400], &r).expect("encode");
        let err = c
            .decode(encoded.clone(), &repr(DataType::Int32, 99))
            .expect_err("too many");
        assert!(
            err.to_string().contains("more than the chunk's 99"),
            "{err}"
        );
        let err = c
            .decode(encoded.clone(), &repr(DataType::Int32, 101))
            .expect_err("too few");
        assert!(
            matches!(
                err,
                Error::DecodedSize {
                    expected: 404,
                    actual: 400
                }
            ),
            "{err}"
        );
        let u32s = codec(json!({}), &repr(DataType::UInt32, 100));
        assert!(u32s
            .decode(encoded.clone(), &repr(DataType::UInt32, 100))
            .is_err());
        assert!(c.decode(encoded[..encoded.len() / 2].to_vec(), &r).is_err());
        assert!(c.decode(b"not pco".to_vec(), &r).is_err());
        let bad = build(&CodecSpec::new(NAME, json!({})), &repr(DataType::Bool, 4));
        assert!(bad.is_err());
        let bad = build(&CodecSpec::new(NAME, json!({"mode_spec": "try_dict"})), &r);
        assert!(bad.is_err());
        let bad = build(
            &CodecSpec::new(
                NAME,
                json!({"delta_spec": "none", "delta_encoding_order": 1}),
            ),
            &r,
        );
        assert!(bad.is_err());
        // pco divides by the page limit (a fuzz finding: a panic inside pco on encode).
        let err = build(&CodecSpec::new(NAME, json!({"equal_pages_up_to": 0})), &r)
            .expect_err("a page of no numbers");
        assert!(err.to_string().contains("equal_pages_up_to 0"), "{err}");
    }
}
