//! `zstd` (Zstandard frames, as numcodecs and zarr-python write them).

use std::sync::Arc;

use serde_json::json;
use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::config::int;
use crate::error::invalid;
use crate::registry::Codec;

#[derive(Debug)]
pub struct ZstdCodec {
    level: i32,
    checksum: bool,
}

pub(crate) fn build(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    let level = int(spec, "level", Some(0))?;
    let range = zstd::compression_level_range();
    if !range.contains(&(level as i32)) {
        return Err(invalid(
            "zstd",
            format!("level {level} is not in {range:?}"),
        ));
    }
    let checksum = spec
        .get("checksum")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    Ok(Codec::BytesToBytes(Arc::new(ZstdCodec {
        level: level as i32,
        checksum,
    })))
}

fn library(e: std::io::Error) -> Error {
    Error::CodecLibrary {
        codec: "zstd".into(),
        source: Box::new(e),
    }
}

impl BytesToBytesCodec for ZstdCodec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        let mut compressor = zstd::bulk::Compressor::new(self.level).map_err(library)?;
        compressor
            .set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(self.checksum))
            .map_err(library)?;
        compressor.compress(decoded).map_err(library)
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        // Frames written by streaming encoders may not state their size; the decoder stops with an
        // error rather than grow past the bound either way.
        if let Ok(Some(size)) = zstd::zstd_safe::get_frame_content_size(encoded) {
            if size > max_decoded_len as u64 {
                return Err(Error::codec(
                    "zstd",
                    format!("frame claims {size} decoded bytes, more than the expected {max_decoded_len}"),
                ));
            }
        }
        let decoder = zstd::stream::read::Decoder::with_buffer(encoded).map_err(library)?;
        crate::bounded::read_bounded(decoder, max_decoded_len, "zstd")
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        zstd::zstd_safe::compress_bound(decoded_len)
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new(
            "zstd",
            json!({"level": self.level, "checksum": self.checksum}),
        )
    }
}
