//! numcodecs `bz2` (v3 `numcodecs.bz2`): bzip2 streams as Python's `bz2.compress` writes them.

use std::io::Write;
use std::sync::Arc;

use serde_json::json;
use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::bounded::read_bounded;
use crate::config::int;
use crate::error::invalid;
use crate::registry::Codec;

const NAME: &str = "numcodecs.bz2";

#[derive(Debug)]
pub(crate) struct Bz2Codec {
    level: u32,
}

pub(crate) fn build(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    // numcodecs' default level is 1.
    let level = int(spec, "level", Some(1))?;
    let level = u32::try_from(level)
        .ok()
        .filter(|l| (1..=9).contains(l))
        .ok_or_else(|| invalid(NAME, format!("level {level} is not in 1..=9")))?;
    Ok(Codec::BytesToBytes(Arc::new(Bz2Codec { level })))
}

fn library(e: std::io::Error) -> Error {
    Error::CodecLibrary {
        codec: NAME.into(),
        source: Box::new(e),
    }
}

impl BytesToBytesCodec for Bz2Codec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        let level = bzip2::Compression::try_new(self.level)
            .ok_or_else(|| Error::codec(NAME, format!("level {} is not in 1..=9", self.level)))?;
        let mut encoder =
            bzip2::write::BzEncoder::new(Vec::with_capacity(decoded.len() / 2 + 64), level);
        encoder.write_all(decoded).map_err(library)?;
        encoder.finish().map_err(library)
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        // Python's bz2.decompress reads concatenated streams; so does the multi-stream decoder.
        read_bounded(
            bzip2::read::MultiBzDecoder::new(encoded),
            max_decoded_len,
            NAME,
        )
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new(NAME, json!({"level": self.level}))
    }
}
