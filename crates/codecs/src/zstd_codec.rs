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

/// zstd's message for `ZSTD_error_dstSize_tooSmall`.
const DST_TOO_SMALL: &str = "Destination buffer is too small";

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
        // Decoded in one shot, straight into the output buffer: a streaming decoder would allocate
        // the window a frame header asks for (128 MiB for a 12-byte frame that states no content
        // size), whatever the chunk's size. The buffer starts at the stated content size (exact for
        // the usual single frame) and doubles up to the bound when frames do not state it or follow
        // each other, so it never outgrows twice the output.
        let mut capacity = match zstd::zstd_safe::get_frame_content_size(encoded) {
            Ok(Some(size)) if size > max_decoded_len as u64 => {
                return Err(Error::codec(
                    "zstd",
                    format!("frame claims {size} decoded bytes, more than the expected {max_decoded_len}"),
                ));
            }
            Ok(Some(size)) => size as usize,
            _ => max_decoded_len.min(64 << 10),
        };
        let mut context = zstd::zstd_safe::DCtx::create();
        loop {
            let mut out = Vec::with_capacity(capacity);
            match context.decompress(&mut out, encoded) {
                Ok(_) => return Ok(out),
                Err(code)
                    if zstd::zstd_safe::get_error_name(code) == DST_TOO_SMALL
                        && capacity < max_decoded_len =>
                {
                    capacity = capacity.saturating_mul(2).clamp(1, max_decoded_len);
                }
                Err(code) if zstd::zstd_safe::get_error_name(code) == DST_TOO_SMALL => {
                    return Err(Error::codec(
                        "zstd",
                        format!("decodes to more than the expected {max_decoded_len} bytes"),
                    ));
                }
                Err(code) => {
                    return Err(Error::codec(
                        "zstd",
                        format!(
                            "decompression failed: {}",
                            zstd::zstd_safe::get_error_name(code)
                        ),
                    ))
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn codec() -> ZstdCodec {
        ZstdCodec {
            level: 3,
            checksum: false,
        }
    }

    #[test]
    fn frame_asking_for_a_huge_window_is_decoded_without_it() {
        // Found with the codec_decode fuzz target: a frame header without content size asking for a
        // 2^27-byte window, then one empty last raw block. The streaming decoder allocated 128 MiB
        // for it; it decodes to nothing.
        let frame = [0x28, 0xb5, 0x2f, 0xfd, 0x00, 0x88, 0x01, 0x00, 0x00];
        assert_eq!(codec().decode(&frame, 16).ok(), Some(Vec::new()));
    }

    #[test]
    fn frames_without_content_size_and_concatenated_frames_decode() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        // A streaming encoder does not state the content size.
        let mut streamed = Vec::new();
        {
            let mut e = zstd::stream::write::Encoder::new(&mut streamed, 3).expect("encoder");
            e.include_contentsize(false).expect("parameter");
            std::io::Write::write_all(&mut e, &data).expect("write");
            e.finish().expect("finish");
        }
        assert_eq!(
            zstd::zstd_safe::get_frame_content_size(&streamed).ok(),
            Some(None)
        );
        assert_eq!(
            codec().decode(&streamed, data.len()).ok(),
            Some(data.clone())
        );
        assert!(codec().decode(&streamed, data.len() - 1).is_err());
        let mut two = codec().encode(&data[..1000]).expect("encode");
        two.extend(codec().encode(&data[1000..]).expect("encode"));
        assert_eq!(codec().decode(&two, data.len()).ok(), Some(data.clone()));
        assert!(codec().decode(&two, data.len() - 1).is_err());
        assert!(codec()
            .decode(&[0x28, 0xb5, 0x2f, 0xfd, 0x00], 100)
            .is_err());
    }
}
