//! numcodecs `bitround` (v2 filter, v3 `numcodecs.bitround`): rounds float mantissas to `keepbits`
//! bits when encoding, so that a compressor after it does better; the stored values are ordinary
//! floats, so decoding is the identity (numcodecs only reinterprets the integers as floats).

use std::sync::Arc;

use serde_json::json;
use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, DataType, Error, Result};

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
}
