//! numcodecs `lz4` (v3 `numcodecs.lz4`): a 4-byte little-endian decoded size, then one raw LZ4 block.

use std::sync::Arc;

use serde_json::json;
use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::config::int;
use crate::registry::Codec;

const NAME: &str = "numcodecs.lz4";

#[derive(Debug)]
pub(crate) struct Lz4Codec {
    /// Kept for the metadata only: lz4_flex has one speed, and any LZ4 block decodes the same way.
    acceleration: i64,
}

pub(crate) fn build(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    Ok(Codec::BytesToBytes(Arc::new(Lz4Codec {
        acceleration: int(spec, "acceleration", Some(1))?,
    })))
}

impl BytesToBytesCodec for Lz4Codec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        // numcodecs stores the size as a C int.
        let size = i32::try_from(decoded.len()).map_err(|_| {
            Error::codec(
                NAME,
                format!("{} bytes do not fit the 32-bit size header", decoded.len()),
            )
        })?;
        let block = lz4_flex::block::compress(decoded);
        let mut out = Vec::with_capacity(4 + block.len());
        out.extend_from_slice(&size.to_le_bytes());
        out.extend_from_slice(&block);
        Ok(out)
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        let Some((header, block)) = encoded.split_first_chunk::<4>() else {
            return Err(Error::codec(
                NAME,
                "input is shorter than its 4-byte size header",
            ));
        };
        // A C int in numcodecs: sizes with the top bit set are negative there, and refused.
        let size = i32::from_le_bytes(*header);
        let size = usize::try_from(size)
            .map_err(|_| Error::codec(NAME, format!("invalid decoded size {size}")))?;
        // An LZ4 block decodes to at most 255 bytes per byte (a match grows by 255 for each byte of
        // its length): a larger claim is refused before the buffer is allocated, which matters for
        // variable-length chunks, whose expected size (1 GiB) bounds nothing.
        if size > block.len().saturating_mul(255).saturating_add(64) {
            return Err(Error::codec(
                NAME,
                format!(
                    "header claims {size} decoded bytes, more than a {}-byte block can hold",
                    block.len()
                ),
            ));
        }
        if size > max_decoded_len {
            return Err(Error::codec(
                NAME,
                format!(
                    "header claims {size} decoded bytes, more than the expected {max_decoded_len}"
                ),
            ));
        }
        let mut out = vec![0u8; size];
        let written =
            lz4_flex::block::decompress_into(block, &mut out).map_err(|e| Error::CodecLibrary {
                codec: NAME.into(),
                source: Box::new(e),
            })?;
        if written != size {
            return Err(Error::codec(
                NAME,
                format!("block decodes to {written} bytes, the header says {size}"),
            ));
        }
        Ok(out)
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        lz4_flex::block::get_maximum_output_size(decoded_len).saturating_add(4)
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new(NAME, json!({"acceleration": self.acceleration}))
    }
}
