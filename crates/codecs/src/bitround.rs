//! `bitround`: rounds values to `keepbits` significant bits when encoding, so that a compressor after
//! it does better; the stored values are ordinary values of the array's type, so decoding is the
//! identity.
//!
//! Two spellings with two meanings:
//! - numcodecs `bitround` (v2 filter, v3 `numcodecs.bitround`): float16/32/64 mantissas, as numcodecs
//!   rounds them (its integer addition wraps, as numpy's does).
//! - zarr-extensions `bitround` (the registered array→array codec, zarrs writes it): also bfloat16,
//!   the complex types (each part on its own), integers and datetime64/timedelta64 (as int64).
//!   Integers keep `keepbits` bits from their most significant set bit (two's complement bits
//!   as unsigned, as zarrs rounds them); additions saturate as zarrs', so an all-ones pattern
//!   (a NaN) never wraps to zero.

use std::sync::Arc;

use serde_json::json;
use zshard_core::{
    ArrayToArrayCodec, BytesToBytesCodec, ChunkRepr, CodecSpec, DataType, Error, Result,
};

use crate::bounded::check_input_len;
use crate::config::int;
use crate::error::invalid;
use crate::registry::Codec;

const NAME: &str = "numcodecs.bitround";

#[derive(Debug)]
pub(crate) struct BitRoundCodec {
    keepbits: u32,
    /// Bytes per element.
    size: usize,
    /// Mantissa bits of the element type (numcodecs' `max_bits`).
    mantissa_bits: u32,
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let (size, mantissa_bits) = match repr.data_type {
        DataType::Float16 => (2, 10),
        DataType::Float32 => (4, 23),
        DataType::Float64 => (8, 52),
        other => {
            return Err(invalid(
                NAME,
                format!("only float16/32/64 arrays can be bit-rounded, not {other}"),
            ))
        }
    };
    let keepbits = int(spec, "keepbits", None)?;
    let keepbits = u32::try_from(keepbits)
        .ok()
        .filter(|k| *k <= mantissa_bits)
        .ok_or_else(|| {
            invalid(
                NAME,
                format!(
                    "keepbits {keepbits} is not 0 to {mantissa_bits} (the {} mantissa)",
                    repr.data_type
                ),
            )
        })?;
    Ok(Codec::BytesToBytes(Arc::new(BitRoundCodec {
        keepbits,
        size,
        mantissa_bits,
    })))
}

impl BitRoundCodec {
    /// numcodecs' rounding on the integer view of one element (`bits` wide, wrapping as numpy does):
    /// add half a quantum (rounding half to even), then clear the dropped bits.
    fn round(&self, value: u64) -> u64 {
        let width = 8 * self.size as u32;
        let all = u64::MAX >> (64 - width);
        let maskbits = self.mantissa_bits - self.keepbits;
        let mask = (all << maskbits) & all;
        let half_quantum1 = (1u64 << (maskbits - 1)) - 1;
        let rounded = value
            .wrapping_add((value >> maskbits) & 1)
            .wrapping_add(half_quantum1);
        rounded & mask
    }
}

impl BytesToBytesCodec for BitRoundCodec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        if !decoded.len().is_multiple_of(self.size) {
            return Err(Error::codec(
                NAME,
                format!("{} bytes are not whole elements", decoded.len()),
            ));
        }
        if self.keepbits == self.mantissa_bits {
            return Ok(decoded.to_vec());
        }
        let mut out = Vec::with_capacity(decoded.len());
        for element in decoded.chunks_exact(self.size) {
            let mut word = [0u8; 8];
            word[..self.size].copy_from_slice(element);
            let rounded = self.round(u64::from_le_bytes(word)).to_le_bytes();
            out.extend_from_slice(&rounded[..self.size]);
        }
        Ok(out)
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        check_input_len(encoded, max_decoded_len, NAME)?;
        Ok(encoded.to_vec())
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        decoded_len
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new(NAME, json!({"keepbits": self.keepbits}))
    }
}

/// The registered (zarr-extensions) name.
const REGISTERED: &str = "bitround";

/// How the registered codec rounds one element part.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rounding {
    /// A float's mantissa of `mantissa_bits` bits.
    Float { mantissa_bits: u32 },
    /// An integer, from its most significant set bit.
    Integer,
}

/// The registered `bitround` codec (array→array).
#[derive(Debug)]
pub(crate) struct RegisteredBitRound {
    keepbits: u32,
    /// Bytes per rounded part (a complex number has two).
    part: usize,
    rounding: Rounding,
}

pub(crate) fn build_registered(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let float = |part, mantissa_bits| (part, Rounding::Float { mantissa_bits });
    let (part, rounding) = match repr.data_type {
        DataType::Float16 | DataType::ComplexFloat16 => float(2, 10),
        DataType::BFloat16 | DataType::ComplexBFloat16 => float(2, 7),
        DataType::Float32 | DataType::Complex64 => float(4, 23),
        DataType::Float64 | DataType::Complex128 => float(8, 52),
        DataType::Int8 | DataType::UInt8 => (1, Rounding::Integer),
        DataType::Int16 | DataType::UInt16 => (2, Rounding::Integer),
        DataType::Int32 | DataType::UInt32 => (4, Rounding::Integer),
        DataType::Int64
        | DataType::UInt64
        | DataType::DateTime64(..)
        | DataType::TimeDelta64(..) => (8, Rounding::Integer),
        other => {
            return Err(invalid(
                REGISTERED,
                format!(
                    "cannot round {other} arrays (the registry's types: integers, float16/32/64, \
                     bfloat16, their complex forms, datetime64 and timedelta64)"
                ),
            ))
        }
    };
    let keepbits = int(spec, "keepbits", None)?;
    // The registry asks for at least 1; 0 (numcodecs allows it for floats) is read too, as the
    // decoding never needs it.
    let keepbits = u32::try_from(keepbits)
        .map_err(|_| invalid(REGISTERED, format!("keepbits {keepbits} is negative")))?;
    Ok(Codec::ArrayToArray(Arc::new(RegisteredBitRound {
        keepbits,
        part,
        rounding,
    })))
}

/// Rounds `value` (the low `width` bits matter) to `keepbits` of its `maxbits` low bits, half to
/// even, saturating at all ones of the width.
fn round_saturating(value: u64, keepbits: u32, maxbits: u32, width: u32) -> u64 {
    if keepbits >= maxbits {
        return value;
    }
    let all = u64::MAX >> (64 - width);
    let maskbits = maxbits - keepbits;
    let mask = (all >> maskbits) << maskbits;
    let half_quantum1 = (1u64 << (maskbits - 1)) - 1;
    let add = ((value >> maskbits) & 1) + half_quantum1;
    value.saturating_add(add).min(all) & mask
}

impl RegisteredBitRound {
    fn round(&self, value: u64) -> u64 {
        let width = 8 * self.part as u32;
        let maxbits = match self.rounding {
            Rounding::Float { mantissa_bits } => mantissa_bits,
            Rounding::Integer => 64 - value.leading_zeros(),
        };
        round_saturating(value, self.keepbits, maxbits, width)
    }
}

impl ArrayToArrayCodec for RegisteredBitRound {
    fn encoded_repr(&self, decoded: &ChunkRepr) -> Result<ChunkRepr> {
        Ok(decoded.clone())
    }

    fn encode(&self, mut data: Vec<u8>, _decoded: &ChunkRepr) -> Result<Vec<u8>> {
        if !data.len().is_multiple_of(self.part) {
            return Err(Error::codec(
                REGISTERED,
                format!("{} bytes are not whole elements", data.len()),
            ));
        }
        for part in data.chunks_exact_mut(self.part) {
            let mut word = [0u8; 8];
            word[..self.part].copy_from_slice(part);
            let rounded = self.round(u64::from_le_bytes(word)).to_le_bytes();
            part.copy_from_slice(&rounded[..self.part]);
        }
        Ok(data)
    }

    fn decode(&self, data: Vec<u8>, decoded: &ChunkRepr) -> Result<Vec<u8>> {
        if data.len() != decoded.byte_len() {
            return Err(Error::DecodedSize {
                expected: decoded.byte_len(),
                actual: data.len(),
            });
        }
        Ok(data)
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new(REGISTERED, json!({"keepbits": self.keepbits}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zshard_core::FillValue;

    fn codec(data_type: DataType, keepbits: i64) -> crate::Result<Codec> {
        let repr = ChunkRepr {
            shape: vec![4],
            data_type,
            fill_value: FillValue::zero(data_type),
        };
        build(&CodecSpec::new(NAME, json!({"keepbits": keepbits})), &repr)
    }

    #[test]
    fn rounds_as_numcodecs_and_decodes_as_is() {
        let Ok(Codec::BytesToBytes(c)) = codec(DataType::Float32, 3) else {
            panic!("not built");
        };
        let values = [1.0f32, 1.1, -3.3, 1.0e30];
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let encoded = c.encode(&data).expect("encode");
        let rounded: Vec<u32> = encoded
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        // numcodecs.BitRound(keepbits=3).encode(np.array([1.0, 1.1, -3.3, 1e30], "f4")).view("u4")
        assert_eq!(
            rounded,
            [0x3f80_0000, 0x3f90_0000, 0xc050_0000, 0x7150_0000]
        );
        assert_eq!(c.decode(&encoded, 16).expect("decode"), encoded);
        assert!(c.decode(&encoded, 15).is_err());
        // keepbits 0 on float64: ties to even, as numcodecs (1.5 -> 2, 2.5 -> 2, 3.5 -> 4).
        let Ok(Codec::BytesToBytes(c)) = codec(DataType::Float64, 0) else {
            panic!("not built");
        };
        let data: Vec<u8> = [1.5f64, 2.5, 3.5, -0.75]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let rounded: Vec<u64> = c
            .encode(&data)
            .expect("encode")
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect();
        assert_eq!(
            rounded,
            [
                0x4000_0000_0000_0000,
                0x4000_0000_0000_0000,
                0x4010_0000_0000_0000,
                0xbfe0_0000_0000_0000
            ]
        );
        assert!(codec(DataType::Int32, 3).is_err());
        assert!(codec(DataType::Float16, 11).is_err());
        assert!(codec(DataType::Float64, -1).is_err());
    }

    fn registered(data_type: DataType, keepbits: i64) -> Arc<dyn ArrayToArrayCodec> {
        let repr = ChunkRepr {
            shape: vec![4],
            data_type,
            fill_value: FillValue::zero(data_type),
        };
        let spec = CodecSpec::new(REGISTERED, json!({"keepbits": keepbits}));
        match build_registered(&spec, &repr) {
            Ok(Codec::ArrayToArray(c)) => c,
            other => panic!("not built: {other:?}"),
        }
    }

    fn repr(data_type: DataType, n: u64) -> ChunkRepr {
        ChunkRepr {
            shape: vec![n],
            data_type,
            fill_value: FillValue::zero(data_type),
        }
    }

    /// The registry's sample data (zarr-extensions codecs/bitround/sample_data, written by zarrs):
    /// keepbits 3 on uint8 and float32.
    #[test]
    fn registered_rounds_as_the_registry_samples() {
        let c = registered(DataType::UInt8, 3);
        let original = vec![0u8, 1, 10, 11, 100, 123, 200, 208, 209, 255];
        let rounded = c
            .encode(original, &repr(DataType::UInt8, 10))
            .expect("encode");
        assert_eq!(rounded, [0, 1, 10, 12, 96, 128, 192, 192, 224, 224]);
        let c = registered(DataType::Float32, 3);
        let values = [
            0.0f32,
            0.1,
            1.2,
            12.3,
            123.4,
            1234.5,
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let got: Vec<f32> = c
            .encode(data, &repr(DataType::Float32, 9))
            .expect("encode")
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(&got[..6], &[0.0, 0.1015625, 1.25, 12.0, 120.0, 1280.0]);
        assert!(got[6].is_nan());
        assert_eq!(&got[7..], &[f32::INFINITY, f32::NEG_INFINITY]);
        // Decoding is the identity, of exactly the chunk's size.
        let c = registered(DataType::Int16, 3);
        assert_eq!(
            c.decode(vec![1, 2, 3, 4], &repr(DataType::Int16, 2))
                .expect("decode"),
            [1, 2, 3, 4]
        );
        assert!(c.decode(vec![1, 2, 3], &repr(DataType::Int16, 2)).is_err());
        assert_eq!(
            c.spec().to_json(),
            json!({"name": "bitround", "configuration": {"keepbits": 3}})
        );
    }

    /// zarrs' own unit tests (uint32 keepbits 3), bfloat16 and complex parts, and an all-ones NaN that
    /// numcodecs' wrapping addition would turn into 0.
    #[test]
    fn registered_rounds_integers_bfloat16_complex_and_saturates() {
        let c = registered(DataType::UInt32, 3);
        let values: [u32; 7] = [0, 1024, 1280, 1664, 1685, 123145182, 4294967295];
        let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let got: Vec<u32> = c
            .encode(data, &repr(DataType::UInt32, 7))
            .expect("encode")
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(got, [0, 1024, 1280, 1536, 1792, 117440512, 3758096384]);
        // bfloat16 1.2 (0x3f9a) keeps 3 of 7 mantissa bits: 1.25 (0x3fa0).
        let c = registered(DataType::BFloat16, 3);
        assert_eq!(
            c.encode(vec![0x9a, 0x3f], &repr(DataType::BFloat16, 1))
                .expect("encode"),
            [0xa0, 0x3f]
        );
        // complex64: each float32 part on its own.
        let c = registered(DataType::Complex64, 3);
        let data: Vec<u8> = [1.2f32, 123.4]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let got = c
            .encode(data, &repr(DataType::Complex64, 1))
            .expect("encode");
        assert_eq!(got[..4], 1.25f32.to_le_bytes());
        assert_eq!(got[4..], 120.0f32.to_le_bytes());
        // An all-ones float32 (a NaN) stays a NaN.
        let c = registered(DataType::Float32, 3);
        let got = c
            .encode(vec![0xff; 4], &repr(DataType::Float32, 1))
            .expect("encode");
        assert_eq!(got, [0x00, 0x00, 0xf0, 0xff]);
        // Types the registry does not list are refused naming the codec.
        let spec = CodecSpec::new(REGISTERED, json!({"keepbits": 3}));
        let err = build_registered(&spec, &repr(DataType::Bool, 1)).expect_err("bool");
        assert!(err.to_string().contains("bitround"), "{err}");
        assert!(build_registered(
            &CodecSpec::new(REGISTERED, json!({"keepbits": -1})),
            &repr(DataType::Int8, 1)
        )
        .is_err());
    }
}
