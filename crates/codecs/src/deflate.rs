//! `gzip` (v3 `gzip`, numcodecs `gzip`) and zlib (numcodecs `zlib`, v3 `numcodecs.zlib`) via flate2.

use std::io::Write;
use std::sync::Arc;

use flate2::Compression;
use serde_json::json;
use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::bounded::read_bounded;
use crate::config::int;
use crate::error::invalid;
use crate::registry::Codec;

/// The two framings of DEFLATE that Zarr uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Gzip,
    Zlib,
}

#[derive(Debug)]
pub(crate) struct DeflateCodec {
    framing: Framing,
    level: u32,
}

fn level(spec: &CodecSpec) -> crate::Result<u32> {
    let level = int(spec, "level", Some(1))?;
    u32::try_from(level)
        .ok()
        .filter(|l| *l <= 9)
        .ok_or_else(|| invalid(&spec.name, format!("level {level} is not in 0..=9")))
}

pub(crate) fn build_gzip(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    Ok(Codec::BytesToBytes(Arc::new(DeflateCodec {
        framing: Framing::Gzip,
        level: level(spec)?,
    })))
}

pub(crate) fn build_zlib(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    Ok(Codec::BytesToBytes(Arc::new(DeflateCodec {
        framing: Framing::Zlib,
        level: level(spec)?,
    })))
}

impl DeflateCodec {
    fn name(&self) -> &'static str {
        match self.framing {
            Framing::Gzip => "gzip",
            Framing::Zlib => "numcodecs.zlib",
        }
    }

    fn library(&self, e: std::io::Error) -> Error {
        Error::CodecLibrary {
            codec: self.name().into(),
            source: Box::new(e),
        }
    }
}

impl BytesToBytesCodec for DeflateCodec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        let out = Vec::with_capacity(decoded.len() / 2 + 64);
        let level = Compression::new(self.level);
        let result = match self.framing {
            Framing::Gzip => {
                let mut e = flate2::write::GzEncoder::new(out, level);
                e.write_all(decoded).and_then(|()| e.finish())
            }
            Framing::Zlib => {
                let mut e = flate2::write::ZlibEncoder::new(out, level);
                e.write_all(decoded).and_then(|()| e.finish())
            }
        };
        result.map_err(|e| self.library(e))
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        match self.framing {
            Framing::Gzip => read_bounded(
                flate2::read::MultiGzDecoder::new(encoded),
                max_decoded_len,
                self.name(),
            ),
            Framing::Zlib => read_bounded(
                flate2::read::ZlibDecoder::new(encoded),
                max_decoded_len,
                self.name(),
            ),
        }
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new(self.name(), json!({"level": self.level}))
    }
}
