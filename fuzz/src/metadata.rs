//! `v2_metadata` and `v3_metadata`: a metadata document, optionally followed by a 0xFF byte and an
//! encoded chunk. The document is parsed; for an array, the codec chain is built from the parsed
//! codecs and the chunk decoded with it (when the chunk is small enough to decode in a fuzz run).
//!
//! Promises checked: no panic; a parsed array has a chunk shape of the array's rank without zero
//! extents, a fill value of one element, and a chunk size that fits memory arithmetic; the decode
//! promises of `codec_decode`.

use zshard_codecs::build_chain;
use zshard_core::{ArrayMeta, NodeKind};

use crate::codecs::{decode_and_check, largest_stage};

/// Chunks larger than this are not decoded here (their metadata is still parsed and checked).
const MAX_DECODE: usize = 8 << 20;

fn split(data: &[u8]) -> (&[u8], Option<&[u8]>) {
    match data.iter().position(|&b| b == 0xff) {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    }
}

fn check_array(meta: &ArrayMeta, chunk: Option<&[u8]>) {
    assert_eq!(meta.chunk_shape.len(), meta.shape.len());
    assert!(!meta.chunk_shape.contains(&0));
    // A string's fill value is its UTF-8 bytes; `size()` is then the handle size, not the value's.
    if !meta.data_type.is_variable() {
        assert_eq!(meta.fill_value.as_bytes().len(), meta.data_type.size());
    }
    let repr = meta.chunk_repr();
    let bytes = meta
        .chunk_shape
        .iter()
        .try_fold(meta.data_type.size() as u64, |a, &d| a.checked_mul(d));
    assert!(
        bytes.is_some_and(|b| b <= zshard_core::MAX_BUFFER_BYTES),
        "chunk shape {:?} passed the size check",
        meta.chunk_shape
    );
    let Ok(chain) = build_chain(&meta.codecs, &repr) else {
        return;
    };
    if repr.byte_len() > MAX_DECODE || largest_stage(&chain, &repr) > 4 * MAX_DECODE {
        return;
    }
    decode_and_check(&chain, &meta.codecs, &repr, chunk.unwrap_or_default());
}

/// `.zarray`, then optionally 0xFF and `.zattrs`, then optionally 0xFF and a chunk.
pub fn v2_metadata(data: &[u8]) {
    let (zarray, rest) = split(data);
    let (zattrs, chunk) = match rest {
        Some(rest) => {
            let (zattrs, chunk) = split(rest);
            ((!zattrs.is_empty()).then_some(zattrs), chunk)
        }
        None => (None, None),
    };
    if let Ok(meta) = zshard_zarr::parse_v2_array("fuzz/.zarray", zarray, zattrs) {
        check_array(&meta, chunk);
    }
}

/// `zarr.json`, then optionally 0xFF and a chunk.
pub fn v3_metadata(data: &[u8]) {
    let (doc, chunk) = split(data);
    let Ok(node) = zshard_zarr::parse_v3_node("fuzz/zarr.json", doc) else {
        return;
    };
    match node.kind {
        NodeKind::Array(meta) => check_array(&meta, chunk),
        NodeKind::Group { .. } => {
            for (key, value) in node.consolidated.iter().flatten() {
                if let Ok(sub) = zshard_zarr::parse_v3_node(key, value.to_string().as_bytes()) {
                    if let NodeKind::Array(meta) = sub.kind {
                        check_array(&meta, None);
                    }
                }
            }
        }
    }
}

/// The most inner chunks whose draft shard index is decoded here (larger ones are parsed, not read).
const MAX_DRAFT_INDEX_CHUNKS: u64 = 1 << 16;

/// A document of the pre-final Zarr v3 layout (zarr-python 2.11–2.18), then optionally 0xFF and a
/// chunk or shard. The document is tried as the entry point (`zarr.json`), a group and an array;
/// a parsed array is checked as above (its inner chunks with the sharding transformer), and then
/// the bytes after 0xFF are read as one of its shards: the draft index (little endian, no checksum,
/// at the end) decodes whenever the shard is long enough, and is validated.
pub fn draft_metadata(data: &[u8]) {
    use zshard_zarr::draft::{parse_draft_array, parse_draft_entry_point, parse_draft_group};
    let (doc, chunk) = split(data);
    let _ = parse_draft_entry_point("fuzz/zarr.json", doc);
    let _ = parse_draft_group("fuzz/meta/root/a.group.json", doc);
    let Ok(meta) = parse_draft_array("fuzz/meta/root/a.array.json", doc) else {
        return;
    };
    assert!(matches!(
        meta.chunk_key_encoding,
        zshard_core::ChunkKeyEncoding::Draft { .. }
    ));
    let Some(shards) = &meta.sharded else {
        check_array(&meta, chunk);
        return;
    };
    assert_eq!(shards.shard_shape.len(), meta.shape.len());
    for (shard, inner) in shards.shard_shape.iter().zip(&meta.chunk_shape) {
        assert_eq!(
            shard % inner,
            0,
            "shard {shard} is not a multiple of {inner}"
        );
    }
    assert!(!shards.index_encoding.crc32c);
    check_array(&meta, None);
    let per_shard = shards.chunks_per_shard(&meta.chunk_shape);
    let chunks = per_shard.iter().product::<u64>();
    let (Some(shard), true) = (chunk, chunks <= MAX_DRAFT_INDEX_CHUNKS) else {
        return;
    };
    let index_len = shards.index_encoding.byte_len(chunks as usize);
    if shard.len() < index_len {
        return;
    }
    let index = zshard_core::ShardIndex::decode(
        &shard[shard.len() - index_len..],
        chunks as usize,
        shards.index_encoding,
    )
    .expect("an index of the right length always decodes");
    assert_eq!(index.entries().len() as u64, chunks);
    let _ = index.validate(shard.len() as u64, index_len as u64, shards.index_location);
}
