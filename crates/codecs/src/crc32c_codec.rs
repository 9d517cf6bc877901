//! `crc32c`: appends a little-endian CRC-32C of the data; decoding verifies and strips it.

use std::sync::Arc;

use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::bounded::check_input_len;
use crate::registry::Codec;

#[derive(Debug)]
pub(crate) struct Crc32cCodec;

pub(crate) fn build(_spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    Ok(Codec::BytesToBytes(Arc::new(Crc32cCodec)))
}

impl BytesToBytesCodec for Crc32cCodec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(decoded.len() + 4);
        out.extend_from_slice(decoded);
        out.extend_from_slice(&zshard_core::crc32c(decoded).to_le_bytes());
        Ok(out)
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        let Some(split) = encoded.len().checked_sub(4) else {
            return Err(Error::codec(
                "crc32c",
                "input is shorter than its 4-byte checksum",
            ));
        };
        let (data, stored) = encoded.split_at(split);
        check_input_len(data, max_decoded_len, "crc32c")?;
        let stored = u32::from_le_bytes([stored[0], stored[1], stored[2], stored[3]]);
        let actual = zshard_core::crc32c(data);
        if stored != actual {
            return Err(Error::codec(
                "crc32c",
                format!("checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"),
            ));
        }
        Ok(data.to_vec())
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        decoded_len.saturating_add(4)
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new("crc32c", serde_json::Value::Null)
    }
}
