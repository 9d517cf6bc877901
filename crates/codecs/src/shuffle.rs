//! numcodecs `shuffle` (v3 `numcodecs.shuffle`): groups byte `k` of every element together.
//!
//! numcodecs refuses buffers that are not whole elements (`ValueError` on encode and decode) and
//! treats `elementsize <= 1` as no shuffle; this codec does the same, so a chunk with trailing bytes
//! is an error rather than silently guessed.

use std::sync::Arc;

use serde_json::json;
use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::bounded::check_input_len;
use crate::config::int;
use crate::registry::Codec;

const NAME: &str = "numcodecs.shuffle";

#[derive(Debug)]
pub(crate) struct ShuffleCodec {
    /// As configured (numcodecs' default is 4, whatever the data type).
    elementsize: i64,
}

pub(crate) fn build(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    Ok(Codec::BytesToBytes(Arc::new(ShuffleCodec {
        elementsize: int(spec, "elementsize", Some(4))?,
    })))
}

impl ShuffleCodec {
    /// The element size to shuffle by, or `None` when numcodecs copies the bytes unchanged.
    fn size(&self, len: usize) -> Result<Option<usize>> {
        let size = match usize::try_from(self.elementsize) {
            Ok(size) if size > 1 => size,
            _ => return Ok(None),
        };
        if !len.is_multiple_of(size) {
            return Err(Error::codec(
                NAME,
                format!("{len} bytes are not a whole number of {size}-byte elements"),
            ));
        }
        Ok(Some(size))
    }
}

impl BytesToBytesCodec for ShuffleCodec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        let Some(size) = self.size(decoded.len())? else {
            return Ok(decoded.to_vec());
        };
        let count = decoded.len() / size;
        let mut out = vec![0u8; decoded.len()];
        for (i, element) in decoded.chunks_exact(size).enumerate() {
            for (b, byte) in element.iter().enumerate() {
                out[b * count + i] = *byte;
            }
        }
        Ok(out)
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        check_input_len(encoded, max_decoded_len, NAME)?;
        let Some(size) = self.size(encoded.len())? else {
            return Ok(encoded.to_vec());
        };
        let count = encoded.len() / size;
        let mut out = vec![0u8; encoded.len()];
        for (b, plane) in encoded.chunks_exact(count.max(1)).enumerate() {
            for (i, byte) in plane.iter().enumerate() {
                out[i * size + b] = *byte;
            }
        }
        Ok(out)
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        decoded_len
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new(NAME, json!({"elementsize": self.elementsize}))
    }
}
