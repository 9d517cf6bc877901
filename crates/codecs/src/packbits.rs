//! numcodecs `packbits` (v3 `numcodecs.packbits`): booleans as bits, most significant bit first
//! (`np.packbits`), after one byte that counts the padding bits of the last byte.

use std::sync::Arc;

use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::registry::Codec;

const NAME: &str = "numcodecs.packbits";

#[derive(Debug)]
pub(crate) struct PackBitsCodec;

pub(crate) fn build(_spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    Ok(Codec::BytesToBytes(Arc::new(PackBitsCodec)))
}

impl BytesToBytesCodec for PackBitsCodec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        let mut out = vec![0u8; 1 + decoded.len().div_ceil(8)];
        out[0] = ((8 - decoded.len() % 8) % 8) as u8;
        for (i, byte) in decoded.iter().enumerate() {
            // numpy views each byte as a bool: any non-zero byte is true.
            if *byte != 0 {
                out[1 + i / 8] |= 0x80 >> (i % 8);
            }
        }
        Ok(out)
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        let Some((&padding, packed)) = encoded.split_first() else {
            return Err(Error::codec(NAME, "input is empty"));
        };
        let bits = packed.len().saturating_mul(8);
        // numcodecs only writes 0..=7; more would mean the header is not a padding count.
        if padding > 7 || (padding as usize) > bits {
            return Err(Error::codec(
                NAME,
                format!(
                    "{padding} padding bits do not fit {} packed bytes",
                    packed.len()
                ),
            ));
        }
        let len = bits - padding as usize;
        if len > max_decoded_len {
            return Err(Error::codec(
                NAME,
                format!("decodes to {len} bytes, more than the expected {max_decoded_len}"),
            ));
        }
        Ok((0..len)
            .map(|i| (packed[i / 8] >> (7 - i % 8)) & 1)
            .collect())
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        decoded_len.div_ceil(8).saturating_add(1)
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new(NAME, serde_json::Value::Null)
    }
}
