//! `zstd` (Zstandard frames, as numcodecs and zarr-python write them).

use std::cell::RefCell;
use std::sync::Arc;

use serde_json::json;
use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::config::int;
use crate::error::invalid;
use crate::registry::Codec;
use crate::zstd_context::Context;

#[derive(Debug)]
pub(crate) struct ZstdCodec {
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

/// The magic number that opens a zstd frame (little endian 0xFD2FB528).
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// zstd's message for `ZSTD_error_dstSize_tooSmall`.
const DST_TOO_SMALL: &str = "Destination buffer is too small";

fn context_error(name: &'static str) -> Error {
    Error::CodecLibrary {
        codec: "zstd".into(),
        source: name.into(),
    }
}

impl BytesToBytesCodec for ZstdCodec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        COMPRESSORS.with(|cache| {
            let mut cache = cache.borrow_mut();
            let key = (self.level, self.checksum);
            let at = match cache.iter().position(|(k, _)| *k == key) {
                Some(at) => at,
                None => {
                    let context = Context::new(self.level, self.checksum).map_err(context_error)?;
                    cache.push((key, context));
                    cache.len() - 1
                }
            };
            cache[at].1.compress(decoded).map_err(context_error)
        })
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        // Decoded in one shot, straight into the output buffer: a streaming decoder would allocate
        // the window a frame header asks for (128 MiB for a 12-byte frame that states no content
        // size), whatever the chunk's size. The buffer starts at the stated content size (exact for
        // the usual single frame) and doubles up to the bound when frames do not state it or follow
        // each other, so it never outgrows twice the output.
        let capacity = match zstd::zstd_safe::get_frame_content_size(encoded) {
            Ok(Some(size)) if size > max_decoded_len as u64 => {
                return Err(Error::codec(
                    "zstd",
                    format!("frame claims {size} decoded bytes, more than the expected {max_decoded_len}"),
                ));
            }
            Ok(Some(size)) => size as usize,
            _ => max_decoded_len.min(64 << 10),
        };
        DECOMPRESSOR.with(|context| {
            let mut context = context.borrow_mut();
            decode_into(&mut context, encoded, capacity, max_decoded_len)
        })
    }

    fn check_framing(&self, encoded: &[u8], decoded_len: usize) -> Option<Result<()>> {
        // Walks the frames and their block headers (no decompression). Frames that do not state their
        // content size cannot be checked this way.
        let mut offset = 0;
        let mut total: u64 = 0;
        while offset < encoded.len() {
            let rest = &encoded[offset..];
            // A skippable frame holds no content: decoders pass over it.
            if let Some(len) = skippable_frame_len(rest) {
                if len > rest.len() {
                    return Some(Err(Error::codec("zstd", "a skippable frame is truncated")));
                }
                offset += len;
                continue;
            }
            // A frame compressed with a dictionary decodes only with that dictionary, which Zarr's
            // zstd codec cannot name: copied, it would be unreadable by every reader.
            if let Some(id) = dictionary_id(rest).filter(|&id| id != 0) {
                return Some(Err(Error::codec(
                    "zstd",
                    format!("the frame needs the zstd dictionary {id}, which Zarr's zstd codec cannot name, so no reader could decode it"),
                )));
            }
            // A frame with a content checksum is decoded: only decoding verifies it.
            if rest.starts_with(&ZSTD_MAGIC) && rest.get(4).is_some_and(|d| d & 0x04 != 0) {
                return None;
            }
            let size = match zstd::zstd_safe::get_frame_content_size(rest) {
                Ok(Some(size)) => size,
                _ => return None,
            };
            let Ok(frame_len) = zstd::zstd_safe::find_frame_compressed_size(rest) else {
                return Some(Err(Error::codec(
                    "zstd",
                    "not a valid zstd frame (bad header or truncated)",
                )));
            };
            if let Err(reason) = check_blocks(&rest[..frame_len.min(rest.len())], size) {
                return Some(Err(Error::codec("zstd", reason)));
            }
            total = total.saturating_add(size);
            offset += frame_len.max(1);
        }
        if offset == 0 || total != decoded_len as u64 {
            return Some(Err(Error::codec(
                "zstd",
                format!("frames hold {total} decoded bytes, expected {decoded_len}"),
            )));
        }
        Some(Ok(()))
    }

    fn for_copy(&self, encoded: &[u8]) -> Option<Vec<u8>> {
        without_skippable_frames(encoded)
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

/// The most bytes one block decodes to (the format's `Block_Maximum_Size`, 128 KiB).
const BLOCK_MAX: u64 = 128 << 10;

/// Length of the header of the zstd frame `frame`, from its descriptor byte (RFC 8878, 3.1.1.1).
fn frame_header_len(frame: &[u8]) -> Option<usize> {
    let descriptor = *frame.get(4)?;
    let single_segment = descriptor & 0x20 != 0;
    let dictionary_id = [0, 1, 2, 4][usize::from(descriptor & 0x03)];
    let content_size = match descriptor >> 6 {
        0 => usize::from(single_segment),
        1 => 2,
        2 => 4,
        _ => 8,
    };
    Some(5 + usize::from(!single_segment) + dictionary_id + content_size)
}

/// The length (header included) that the skippable frame at the start of `frame` states, `None`
/// when `frame` does not start with one (RFC 8878, 3.1.2: magic 0x184D2A5?, then a 4-byte size).
fn skippable_frame_len(frame: &[u8]) -> Option<usize> {
    let magic = u32::from_le_bytes(frame.get(..4)?.try_into().ok()?);
    if magic & 0xffff_fff0 != 0x184d_2a50 {
        return None;
    }
    let size = u32::from_le_bytes(frame.get(4..8)?.try_into().ok()?);
    Some(8usize.saturating_add(usize::try_from(size).ok()?))
}

/// `encoded` without its skippable frames, when it has any and every frame is whole; `None`
/// otherwise. Skippable frames decode to nothing, but numcodecs reads the content size of the first
/// frame only and refuses a chunk that opens with one (it states 0), so passthrough drops them.
fn without_skippable_frames(encoded: &[u8]) -> Option<Vec<u8>> {
    let mut kept = Vec::new();
    let mut skipped = false;
    let mut offset = 0;
    while offset < encoded.len() {
        let rest = &encoded[offset..];
        if let Some(len) = skippable_frame_len(rest) {
            if len > rest.len() {
                return None;
            }
            skipped = true;
            offset += len;
            continue;
        }
        let len = zstd::zstd_safe::find_frame_compressed_size(rest).ok()?;
        if len == 0 || len > rest.len() {
            return None;
        }
        kept.extend_from_slice(&rest[..len]);
        offset += len;
    }
    skipped.then_some(kept)
}

/// The `Dictionary_ID` of the zstd frame at the start of `frame` (0 when it names none), `None`
/// when `frame` does not start with a zstd frame header (RFC 8878, 3.1.1.1.3).
fn dictionary_id(frame: &[u8]) -> Option<u32> {
    if !frame.starts_with(&ZSTD_MAGIC) {
        return None;
    }
    let descriptor = *frame.get(4)?;
    let single_segment = descriptor & 0x20 != 0;
    let at = 5 + usize::from(!single_segment);
    let len = [0, 1, 2, 4][usize::from(descriptor & 0x03)];
    let field = frame.get(at..at + len)?;
    Some(
        field
            .iter()
            .rev()
            .fold(0u32, |id, &byte| id << 8 | u32::from(byte)),
    )
}

/// Checks the block headers of the one whole frame `frame` against the content size its header
/// states, without decoding: raw and RLE blocks state what they decode to, a compressed block decodes
/// to at most [`BLOCK_MAX`]. A frame whose blocks promise more (or can hold less) than its header
/// says is damaged, and would be copied as it is by passthrough if only its header were read.
fn check_blocks(frame: &[u8], content_size: u64) -> std::result::Result<(), String> {
    let truncated = || "not a valid zstd frame (bad header or truncated)".to_string();
    let mut at = frame_header_len(frame).ok_or_else(truncated)?;
    let (mut least, mut most) = (0u64, 0u64);
    loop {
        let header = frame.get(at..at + 3).ok_or_else(truncated)?;
        let header = u32::from(header[0]) | u32::from(header[1]) << 8 | u32::from(header[2]) << 16;
        let (last, kind, size) = (header & 1 != 0, (header >> 1) & 3, u64::from(header >> 3));
        if size > BLOCK_MAX {
            return Err(format!(
                "a block of the frame states {size} bytes, more than a block may hold ({BLOCK_MAX})"
            ));
        }
        let stored = match kind {
            // Raw: `size` bytes as they are; RLE: one byte repeated `size` times.
            0 | 1 => {
                least += size;
                most += size;
                if kind == 0 {
                    size
                } else {
                    1
                }
            }
            2 => {
                most += BLOCK_MAX;
                size
            }
            _ => return Err("a block of the frame has the reserved block type".to_string()),
        };
        at += 3 + stored as usize;
        if least > content_size {
            return Err(format!(
                "the frame's blocks decode to at least {least} bytes, its header says {content_size}"
            ));
        }
        if last {
            break;
        }
    }
    if most < content_size {
        return Err(format!(
            "the frame's blocks decode to at most {most} bytes, its header says {content_size}"
        ));
    }
    Ok(())
}

thread_local! {
    /// Compression contexts of this thread by (level, checksum). A context holds megabytes of tables:
    /// making one per chunk cost more than compressing a 128 KiB chunk at level 3.
    static COMPRESSORS: RefCell<Vec<((i32, bool), Context)>> =
        const { RefCell::new(Vec::new()) };
    /// This thread's decompression context, reused for every chunk.
    static DECOMPRESSOR: RefCell<zstd::zstd_safe::DCtx<'static>> =
        RefCell::new(zstd::zstd_safe::DCtx::create());
}

/// Decodes the frames of `encoded` in one shot into a buffer of `capacity` that doubles up to
/// `max_decoded_len` while it is too small.
fn decode_into(
    context: &mut zstd::zstd_safe::DCtx<'static>,
    encoded: &[u8],
    mut capacity: usize,
    max_decoded_len: usize,
) -> Result<Vec<u8>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `frame` (a zstd frame without a dictionary) with a one-byte `Dictionary_ID` of `id`.
    fn with_dictionary_id(frame: &[u8], id: u8) -> Vec<u8> {
        let mut out = frame.to_vec();
        assert_eq!(out[4] & 0x03, 0, "the frame names no dictionary yet");
        out[4] |= 0x01;
        let at = 5 + usize::from(out[4] & 0x20 == 0);
        out.insert(at, id);
        out
    }

    fn codec() -> ZstdCodec {
        ZstdCodec {
            level: 3,
            checksum: false,
        }
    }

    #[test]
    fn framing_is_checked_without_decoding() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let one = codec().encode(&data).expect("encode");
        assert!(matches!(
            codec().check_framing(&one, data.len()),
            Some(Ok(()))
        ));
        // Truncated, garbage, a wrong size, nothing: errors.
        assert!(matches!(
            codec().check_framing(&one[..one.len() - 1], data.len()),
            Some(Err(_))
        ));
        let garbage: Vec<u8> = (0..one.len()).map(|i| (i * 37 + 11) as u8).collect();
        assert!(matches!(
            codec().check_framing(&garbage, data.len()),
            Some(Err(_)) | None
        ));
        assert!(matches!(
            codec().check_framing(&one, data.len() + 1),
            Some(Err(_))
        ));
        assert!(matches!(codec().check_framing(&[], 0), Some(Err(_))));
        // A frame with a checksum is left to a full decode, which verifies it.
        let checked = ZstdCodec {
            level: 3,
            checksum: true,
        };
        let with_sum = checked.encode(&data).expect("encode");
        assert!(checked.check_framing(&with_sum, data.len()).is_none());
        // A frame naming a dictionary (here 7, inserted into a valid frame's header) is refused with
        // its number: Zarr's zstd cannot name a dictionary, so no reader decodes it (issue 31, row 7).
        let dictionary = with_dictionary_id(&one, 7);
        assert_eq!(dictionary_id(&dictionary), Some(7));
        assert_eq!(dictionary_id(&one), Some(0));
        match codec().check_framing(&dictionary, data.len()) {
            Some(Err(e)) => assert!(e.to_string().contains("dictionary 7"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert!(codec().decode(&dictionary, data.len()).is_err());
        // Two frames add up.
        let mut two = codec().encode(&data[..1000]).expect("encode");
        two.extend(codec().encode(&data[1000..]).expect("encode"));
        assert!(matches!(
            codec().check_framing(&two, data.len()),
            Some(Ok(()))
        ));
    }

    /// A single-segment frame stating `content_size` (256..65791) bytes, then `blocks` (type, size,
    /// content bytes), the last one marked last.
    fn frame(content_size: u64, blocks: &[(u32, u32, usize)]) -> Vec<u8> {
        let mut out = vec![0x28, 0xb5, 0x2f, 0xfd, 0x60];
        out.extend_from_slice(&((content_size - 256) as u16).to_le_bytes());
        for (i, &(kind, size, stored)) in blocks.iter().enumerate() {
            let last = u32::from(i + 1 == blocks.len());
            let header = last | kind << 1 | size << 3;
            out.extend_from_slice(&header.to_le_bytes()[..3]);
            out.extend(std::iter::repeat_n(7u8, stored));
        }
        out
    }

    #[test]
    fn blocks_that_promise_more_than_the_header_says_are_refused_without_decoding() {
        let message = |bytes: &[u8], len: usize| match codec().check_framing(bytes, len) {
            Some(Err(e)) => e.to_string(),
            other => format!("{other:?}"),
        };
        // The header says 512 bytes; 8000 RLE blocks of 128 KiB promise a gigabyte.
        let rle = frame(512, &vec![(1, 128 << 10, 1); 8000]);
        assert_eq!(rle.len(), 7 + 8000 * 4);
        assert_eq!(
            message(&rle, 512),
            "codec zstd: the frame's blocks decode to at least 131072 bytes, its header says 512"
        );
        // Blocks of more than 128 KiB do not exist.
        assert_eq!(
            message(&frame(512, &[(1, 1 << 20, 1)]), 512),
            "codec zstd: a block of the frame states 1048576 bytes, more than a block may hold (131072)"
        );
        // A raw block of 100 bytes cannot make 512.
        assert_eq!(
            message(&frame(512, &[(0, 100, 100)]), 512),
            "codec zstd: the frame's blocks decode to at most 100 bytes, its header says 512"
        );
        // What the blocks state adds up: accepted, and it decodes to what the header says.
        let good = frame(512, &[(1, 256, 1), (0, 256, 256)]);
        assert!(matches!(codec().check_framing(&good, 512), Some(Ok(()))));
        assert_eq!(codec().decode(&good, 512).map(|d| d.len()).ok(), Some(512));
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
