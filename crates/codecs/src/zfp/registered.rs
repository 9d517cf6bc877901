//! The zarr-extensions registry's `zfp` codec (array→bytes, as zarrs writes it): the same zfp
//! blocks as numcodecs' `zfpy`, without zfp's header. The field is the chunk (x the last axis,
//! a 0-d chunk one value), its type the array's, and the compression parameters come from the
//! configuration's `mode` as libzfp sets them:
//!
//! - `fixed_rate`: `zfp_stream_set_rate(rate, type, 3, no alignment)`, with 3 dimensions whatever
//!   the chunk's, as zarrs calls it: `floor(64 rate + 0.5)` bits a block (at least 9 for float32,
//!   12 for float64);
//! - `fixed_precision`, `fixed_accuracy` (floats only, as zarrs), `reversible`: zfp's own settings;
//! - `expert`: `minbits`, `maxbits`, `maxprec`, `minexp` as given.
//!
//! Read only, chunks of 1 to 4 dimensions (more are refused naming the registry). int32, int64,
//! float32 and float64 are zfp's own types; the others are demoted from zfp's integers as the
//! registry and zarrs do it: int8/int16 `clamp(v >> (31 - N))`, uint8/uint16
//! `clamp((v >> (31 - N)) + 2^(N-1))`, and uint32/uint64, which zarrs stores as int32/int64
//! (values above their largest clamped), `max(v, 0)`.

use std::sync::Arc;

use serde_json::Value;
use zshard_core::{ArrayToBytesCodec, ChunkRepr, CodecSpec, DataType, Error, Result};

use super::stream::{MAX_BITS, MAX_PREC, MIN_EXP};
use super::{decode_values, BitReader, Header, Params, ScalarType, MAX_BLOCK_BYTES};
use crate::error::invalid;
use crate::registry::Codec;

const NAME: &str = "zfp";

#[derive(Debug)]
pub(crate) struct ZfpCodec {
    spec: CodecSpec,
    scalar: ScalarType,
    params: Params,
    /// The array's type when zfp holds it as a wider integer.
    demote: Option<Demote>,
}

/// How an array type zfp does not have comes back from zfp's int32 or int64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Demote {
    Int8,
    UInt8,
    Int16,
    UInt16,
    UInt32,
    UInt64,
}

impl Demote {
    /// Little-endian bytes of the array's values from zfp's little-endian int32 (int64) values.
    fn apply(self, decoded: &[u8]) -> Vec<u8> {
        let int32 = || {
            decoded
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        match self {
            Demote::Int8 => int32()
                .map(|v| (v >> 23).clamp(-0x80, 0x7f) as i8 as u8)
                .collect(),
            Demote::UInt8 => int32()
                .map(|v| ((v >> 23) + 0x80).clamp(0, 0xff) as u8)
                .collect(),
            Demote::Int16 => int32()
                .flat_map(|v| ((v >> 15).clamp(-0x8000, 0x7fff) as i16).to_le_bytes())
                .collect(),
            Demote::UInt16 => int32()
                .flat_map(|v| (((v >> 15) + 0x8000).clamp(0, 0xffff) as u16).to_le_bytes())
                .collect(),
            Demote::UInt32 => int32()
                .flat_map(|v| (v.max(0) as u32).to_le_bytes())
                .collect(),
            Demote::UInt64 => decoded
                .chunks_exact(8)
                .flat_map(|b| {
                    let v = i64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
                    (v.max(0) as u64).to_le_bytes()
                })
                .collect(),
        }
    }
}

fn not_supported(reason: String) -> crate::Error {
    crate::Error::NotSupported {
        codec: NAME.into(),
        reason,
    }
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let (scalar, demote) = match repr.data_type {
        DataType::Int32 => (ScalarType::Int32, None),
        DataType::Int64 => (ScalarType::Int64, None),
        DataType::Float32 => (ScalarType::Float32, None),
        DataType::Float64 => (ScalarType::Float64, None),
        DataType::Int8 => (ScalarType::Int32, Some(Demote::Int8)),
        DataType::UInt8 => (ScalarType::Int32, Some(Demote::UInt8)),
        DataType::Int16 => (ScalarType::Int32, Some(Demote::Int16)),
        DataType::UInt16 => (ScalarType::Int32, Some(Demote::UInt16)),
        DataType::UInt32 => (ScalarType::Int32, Some(Demote::UInt32)),
        DataType::UInt64 => (ScalarType::Int64, Some(Demote::UInt64)),
        other => {
            return Err(not_supported(format!(
                "zshard reads zfp chunks of integers of 8 to 64 bits, float32 and float64, not \
                 {other} (zarrs' float16 and bfloat16 promotions are not read)"
            )))
        }
    };
    if repr.shape.len() > 4 {
        return Err(not_supported(format!(
            "a chunk of {} dimensions (zfp holds 1 to 4; the registry asks for a squeeze codec \
             before it)",
            repr.shape.len()
        )));
    }
    let params = params(spec, scalar)?;
    Ok(Codec::ArrayToBytes(Arc::new(ZfpCodec {
        spec: spec.clone(),
        scalar,
        params,
        demote,
    })))
}

/// The exponent `e` of `x = m 2^e` with `0.5 <= m < 1` (C's `frexp`), for a finite `x > 0`.
fn frexp_exponent(x: f64) -> i32 {
    let bits = x.to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    if exponent == 0 {
        // Subnormal: scale into the normal range first.
        return frexp_exponent(x * 2f64.powi(64)) - 64;
    }
    exponent - 1022
}

/// The compression parameters libzfp sets for the configuration's mode.
fn params(spec: &CodecSpec, scalar: ScalarType) -> crate::Result<Params> {
    let number = |key: &str| {
        spec.get(key)
            .and_then(Value::as_f64)
            .filter(|v| v.is_finite())
            .ok_or_else(|| invalid(NAME, format!("{key} must be a finite number")))
    };
    let unsigned = |key: &str| {
        spec.get(key)
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| invalid(NAME, format!("{key} must be an unsigned integer")))
    };
    let lossless_range = Params {
        minbits: 1,
        maxbits: MAX_BITS,
        maxprec: MAX_PREC,
        minexp: MIN_EXP,
    };
    let mode = spec.get("mode").and_then(Value::as_str).unwrap_or_default();
    let params = match mode {
        "reversible" => Params {
            minexp: MIN_EXP - 1,
            ..lossless_range
        },
        "fixed_precision" => {
            let precision = unsigned("precision")?;
            Params {
                maxprec: if precision == 0 {
                    MAX_PREC
                } else {
                    precision.min(MAX_PREC)
                },
                ..lossless_range
            }
        }
        "fixed_accuracy" => {
            if matches!(scalar, ScalarType::Int32 | ScalarType::Int64) {
                return Err(invalid(
                    NAME,
                    format!("fixed_accuracy is for floats, not {}", scalar.name()),
                ));
            }
            let tolerance = number("tolerance")?;
            Params {
                minexp: if tolerance > 0.0 {
                    frexp_exponent(tolerance) - 1
                } else {
                    MIN_EXP
                },
                ..lossless_range
            }
        }
        "fixed_rate" => {
            let rate = number("rate")?;
            let bits = (64.0 * rate + 0.5).floor();
            if !(0.0..=f64::from(MAX_BITS)).contains(&bits) {
                return Err(invalid(
                    NAME,
                    format!("rate {rate} is not 0 to {}", MAX_BITS / 64),
                ));
            }
            let least = match scalar {
                ScalarType::Float32 => 1 + 8,
                ScalarType::Float64 => 1 + 11,
                _ => 0,
            };
            let bits = (bits as u32).max(least);
            Params {
                minbits: bits,
                maxbits: bits,
                ..lossless_range
            }
        }
        "expert" => {
            let minexp = spec
                .get("minexp")
                .and_then(Value::as_i64)
                .and_then(|v| i32::try_from(v).ok())
                .ok_or_else(|| invalid(NAME, "minexp must be an integer"))?;
            Params {
                minbits: unsigned("minbits")?,
                maxbits: unsigned("maxbits")?,
                maxprec: unsigned("maxprec")?,
                minexp,
            }
        }
        other => {
            return Err(invalid(
                NAME,
                format!(
                    "mode {other:?} is not reversible, expert, fixed_accuracy, fixed_rate or fixed_precision"
                ),
            ))
        }
    };
    if params.minbits > params.maxbits
        || params.maxbits > MAX_BITS
        || !(1..=MAX_PREC).contains(&params.maxprec)
        || params.minexp < MIN_EXP - 1
    {
        return Err(invalid(
            NAME,
            format!(
                "invalid parameters (minbits {}, maxbits {}, maxprec {}, minexp {})",
                params.minbits, params.maxbits, params.maxprec, params.minexp
            ),
        ));
    }
    Ok(params)
}

impl ArrayToBytesCodec for ZfpCodec {
    fn encode(&self, _data: Vec<u8>, _repr: &ChunkRepr) -> Result<Vec<u8>> {
        Err(Error::codec(
            NAME,
            "zshard decodes zfp but does not encode it; write with another codec",
        ))
    }

    fn decode(&self, encoded: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        let count = usize::try_from(repr.elements())
            .map_err(|_| Error::codec(NAME, "the chunk has too many elements"))?;
        let mut sizes: Vec<u64> = repr.shape.iter().rev().copied().collect();
        if sizes.is_empty() {
            sizes.push(1);
        }
        if sizes.len() > 4 {
            return Err(Error::codec(
                NAME,
                format!("a chunk of {} dimensions", sizes.len()),
            ));
        }
        let header = Header {
            scalar: self.scalar,
            sizes,
            params: self.params,
        };
        let decoded = decode_values(&mut BitReader::new(&encoded), &header, count, NAME)?;
        Ok(match self.demote {
            Some(demote) => demote.apply(&decoded),
            None => decoded,
        })
    }

    fn max_encoded_len(&self, repr: &ChunkRepr) -> usize {
        let blocks = repr
            .shape
            .iter()
            .map(|&n| usize::try_from(n.div_ceil(4)).unwrap_or(usize::MAX))
            .fold(1usize, usize::saturating_mul);
        blocks.saturating_mul(MAX_BLOCK_BYTES).saturating_add(64)
    }

    fn spec(&self) -> CodecSpec {
        self.spec.clone()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::zfp::stream::read_header;

    /// The zfpy fixtures (`tests/fixtures/zfp`, made by make_zfp_fixtures.py with zfpy 1.0.1)
    /// without their header are what the registry's `zfp` stores: the header of each short mode is
    /// 96 bits (magic and version, field, 12-bit mode), so the blocks start at byte 12. The
    /// parameters computed from the registered configuration must be those zfpy wrote in the
    /// header, and the values those zfpy decoded.
    #[test]
    fn decodes_the_fixtures_without_their_header_from_the_configuration() {
        let modes = [
            ("rate", json!({"mode": "fixed_rate", "rate": 8})),
            (
                "precision",
                json!({"mode": "fixed_precision", "precision": 12}),
            ),
            (
                "tolerance",
                json!({"mode": "fixed_accuracy", "tolerance": 1e-3}),
            ),
            ("reversible", json!({"mode": "reversible"})),
        ];
        let mut checked = 0;
        for (name, repr) in crate::zfp::tests::cases() {
            let (mode, config) = modes
                .iter()
                .find(|(m, _)| name.contains(&format!("_{m}_")))
                .expect("a mode");
            let ints = name.starts_with("int");
            // zarrs sets the rate for 3 dimensions; zfpy for the field's own.
            if (*mode == "rate" && !name.ends_with("3d")) || (*mode == "tolerance" && ints) {
                continue;
            }
            let stream = std::fs::read(crate::zfp::tests::fixtures().join(format!("{name}.zfp")))
                .expect("fixture");
            let header = read_header(&mut BitReader::new(&stream)).expect("header");
            let spec = CodecSpec::new(NAME, config.clone());
            let Ok(Codec::ArrayToBytes(codec)) = build(&spec, &repr) else {
                panic!("{name}: not built");
            };
            assert_eq!(
                params(&spec, header.scalar).expect("params"),
                header.params,
                "{name}"
            );
            let decoded = codec.decode(stream[12..].to_vec(), &repr).expect(&name);
            let raw = std::fs::read(crate::zfp::tests::fixtures().join(format!("{name}.raw")))
                .expect("raw");
            assert!(decoded == raw, "{name}: values differ");
            checked += 1;
        }
        // 4 types x precision and reversible x 4 dimensionalities, 2 float types x tolerance x 4,
        // 4 types x rate in 3 dimensions.
        assert_eq!(checked, 32 + 8 + 4);
    }

    #[test]
    fn refuses_what_it_does_not_read_naming_the_registry() {
        let repr = |data_type, shape: &[u64]| ChunkRepr {
            shape: shape.to_vec(),
            data_type,
            fill_value: zshard_core::FillValue::zero(data_type),
        };
        let reversible = CodecSpec::new(NAME, json!({"mode": "reversible"}));
        let err = build(&reversible, &repr(DataType::Float16, &[4])).expect_err("float16");
        assert!(
            err.to_string()
                .starts_with("codec zfp (zarr-extensions registry) is not supported: zshard reads zfp chunks of integers"),
            "{err}"
        );
        let err = build(&reversible, &repr(DataType::Float32, &[1, 2, 2, 2, 2])).expect_err("5-d");
        assert!(err.to_string().contains("5 dimensions"), "{err}");
        for bad in [
            json!({"mode": "fixed_rate"}),
            json!({"mode": "fixed_rate", "rate": -1}),
            json!({"mode": "expert", "minbits": 9, "maxbits": 8, "maxprec": 64, "minexp": -1074}),
            json!({"mode": "expert", "minbits": 1, "maxbits": 8, "maxprec": 65, "minexp": -1074}),
            json!({"mode": "lossless"}),
        ] {
            let spec = CodecSpec::new(NAME, bad.clone());
            assert!(
                build(&spec, &repr(DataType::Float64, &[4])).is_err(),
                "{bad}"
            );
        }
        let accuracy = CodecSpec::new(NAME, json!({"mode": "fixed_accuracy", "tolerance": 0.5}));
        assert!(build(&accuracy, &repr(DataType::Int32, &[4])).is_err());
        // frexp: 1e-3 = 0.512 * 2^-9; 1.0 = 0.5 * 2^1; a subnormal.
        assert_eq!(frexp_exponent(1e-3), -9);
        assert_eq!(frexp_exponent(1.0), 1);
        assert_eq!(frexp_exponent(f64::from_bits(1)), -1073);
        // A 0-d chunk is one value; the expert mode takes its parameters as given.
        let expert = CodecSpec::new(
            NAME,
            json!({"mode": "expert", "minbits": 1, "maxbits": 13, "maxprec": 19, "minexp": -2}),
        );
        assert_eq!(
            params(&expert, ScalarType::Float32).expect("expert"),
            Params {
                minbits: 1,
                maxbits: 13,
                maxprec: 19,
                minexp: -2
            }
        );
        let Ok(Codec::ArrayToBytes(c)) = build(&reversible, &repr(DataType::Float32, &[])) else {
            panic!("0-d");
        };
        assert!(c.decode(Vec::new(), &repr(DataType::Float32, &[])).is_err());
        assert!(c.encode(vec![0; 4], &repr(DataType::Float32, &[])).is_err());
    }

    /// The registry's demotions (and zarrs' for uint32/uint64) at their edges.
    #[test]
    fn smaller_and_unsigned_types_are_demoted_as_the_registry_says() {
        let int32 =
            |values: &[i32]| -> Vec<u8> { values.iter().flat_map(|v| v.to_le_bytes()).collect() };
        // int8 -128, -1, 0, 127 promoted (v << 23), and a value past the top that clamps.
        let promoted = int32(&[-128 << 23, -1 << 23, 0, 127 << 23, i32::MAX]);
        assert_eq!(Demote::Int8.apply(&promoted), [0x80, 0xff, 0, 0x7f, 0x7f]);
        // uint8 0, 128, 255 promoted ((u - 128) << 23).
        let promoted = int32(&[-128 << 23, 0, 127 << 23, i32::MIN]);
        assert_eq!(Demote::UInt8.apply(&promoted), [0, 128, 255, 0]);
        let promoted = int32(&[-0x8000 << 15, 5 << 15, 0x7fff << 15]);
        let got: Vec<i16> = Demote::Int16
            .apply(&promoted)
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(got, [-0x8000, 5, 0x7fff]);
        let promoted = int32(&[-0x8000 << 15, 0, 0x7fff << 15]);
        let got: Vec<u16> = Demote::UInt16
            .apply(&promoted)
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(got, [0, 0x8000, 0xffff]);
        assert_eq!(
            Demote::UInt32.apply(&int32(&[-3, 7])),
            [0, 0, 0, 0, 7, 0, 0, 0]
        );
        let int64: Vec<u8> = [-3i64, 1 << 40]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let got: Vec<u64> = Demote::UInt64
            .apply(&int64)
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8")))
            .collect();
        assert_eq!(got, [0, 1 << 40]);
    }
}
