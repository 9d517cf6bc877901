//! `bytes`: the array→bytes codec that lays elements out in a byte order.

use serde_json::json;
use zshard_core::{ArrayToBytesCodec, ChunkRepr, CodecSpec, Endian, Error, Result};

use crate::config::string;
use crate::error::invalid;
use crate::registry::Codec;

/// The v3 `bytes` codec: elements in the configured byte order, C order, nothing else. Without an
/// `endian` (allowed for single-byte types) it leaves bytes as they are.
#[derive(Debug)]
pub struct BytesCodec {
    endian: Option<Endian>,
}

impl BytesCodec {
    /// A `bytes` codec writing elements in `endian` byte order.
    pub fn new(endian: Endian) -> Self {
        BytesCodec {
            endian: Some(endian),
        }
    }
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let endian = match string(spec, "endian") {
        Some("little") => Some(Endian::Little),
        Some("big") => Some(Endian::Big),
        // Byte order means nothing for single-byte units (uint8, bool, fixed-length bytes).
        None if repr.data_type.swap_unit() == 1 => None,
        None => {
            return Err(invalid(
                &spec.name,
                "missing endian for a multi-byte data type",
            ))
        }
        Some(other) => {
            return Err(invalid(
                &spec.name,
                format!("endian {other:?} is not little or big"),
            ))
        }
    };
    Ok(Codec::ArrayToBytes(std::sync::Arc::new(BytesCodec {
        endian,
    })))
}

impl BytesCodec {
    fn swap(&self, data: &mut [u8], repr: &ChunkRepr) {
        if self.endian == Some(Endian::Big) {
            repr.data_type.swap_bytes(data);
        }
    }
}

impl ArrayToBytesCodec for BytesCodec {
    fn encode(&self, mut data: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        self.swap(&mut data, repr);
        Ok(data)
    }

    fn decode(&self, mut encoded: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        if encoded.len() != repr.byte_len() {
            return Err(Error::DecodedSize {
                expected: repr.byte_len(),
                actual: encoded.len(),
            });
        }
        self.swap(&mut encoded, repr);
        Ok(encoded)
    }

    fn max_encoded_len(&self, repr: &ChunkRepr) -> usize {
        repr.byte_len()
    }

    fn spec(&self) -> CodecSpec {
        match self.endian {
            Some(e) => CodecSpec::new("bytes", json!({"endian": e.as_str()})),
            None => CodecSpec::new("bytes", json!({})),
        }
    }
}
