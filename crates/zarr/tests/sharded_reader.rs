//! `ShardedChunkReader` against shards laid out by `zshard_core::assemble_shard` in a local store.

use bytes::Bytes;
use zshard_core::{
    assemble_shard, ChunkKeyEncoding, ChunkReader, Endian, IndexEncoding, IndexLocation,
    SourceShards,
};
use zshard_store::{IoRuntime, Store};
use zshard_zarr::ShardedChunkReader;

/// The bytes stored for inner chunk `coord` (distinct per chunk and of different lengths).
fn chunk(coord: &[u64]) -> Vec<u8> {
    let tag = (coord[0] * 10 + coord[1]) as u8;
    vec![tag; 3 + tag as usize % 7]
}

/// A 2-D array in shards of 2x4 inner chunks: shard (0,0) whole except an empty inner chunk (0,1),
/// shard (0,1) with a broken index, shard (1,0) missing, shard (1,1) truncated.
fn store_with_shards(
    location: IndexLocation,
    encoding: IndexEncoding,
) -> (tempfile::TempDir, ShardedChunkReader) {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = IoRuntime::new(1).expect("runtime");
    let store = Store::open(dir.path().to_str().expect("utf-8"), runtime, true).expect("store");
    let keys = ChunkKeyEncoding::Default { separator: '/' };
    let shard = |origin: [u64; 2]| -> Vec<u8> {
        let inner: Vec<Option<Vec<u8>>> = (0..8u64)
            .map(|i| {
                let coord = [origin[0] * 2 + i / 4, origin[1] * 4 + i % 4];
                (coord != [0, 1]).then(|| chunk(&coord))
            })
            .collect();
        assemble_shard(&inner, location, encoding)
    };
    store
        .put(&keys.key(&[0, 0]), Bytes::from(shard([0, 0])))
        .expect("put");
    let mut broken = shard([0, 1]);
    let at = match location {
        IndexLocation::Start => 3,
        IndexLocation::End => broken.len() - 9,
    };
    broken[at] ^= 0xff;
    store
        .put(&keys.key(&[0, 1]), Bytes::from(broken))
        .expect("put");
    // Cut short: the index at the end no longer is where it should be; with the index at the start,
    // the last inner chunk runs past the end.
    let mut truncated = shard([1, 1]);
    truncated.truncate(truncated.len() - 4);
    store
        .put(&keys.key(&[1, 1]), Bytes::from(truncated))
        .expect("put");
    let shards = SourceShards {
        rectilinear: None,
        shard_shape: vec![20, 40],
        index_encoding: encoding,
        index_location: location,
    };
    let reader = ShardedChunkReader::new(store, keys, shards, &[10, 10]);
    (dir, reader)
}

#[test]
fn inner_chunks_are_read_by_position_from_their_shards() {
    let encodings = [
        IndexEncoding::default(),
        IndexEncoding {
            endian: Endian::Big,
            crc32c: false,
        },
    ];
    for location in [IndexLocation::Start, IndexLocation::End] {
        for encoding in encodings {
            let case = format!("{location:?} {encoding:?}");
            let (_dir, reader) = store_with_shards(location, encoding);
            // Out of C order, and two shards in one batch (the missing one too).
            let coords: Vec<Vec<u64>> = vec![
                vec![1, 3],
                vec![0, 0],
                vec![2, 1],
                vec![1, 0],
                vec![0, 1],
                vec![0, 2],
            ];
            let got = reader.read_chunks(&coords, u64::MAX);
            for (coord, result) in coords.iter().zip(&got) {
                let bytes = result.as_ref().expect(&case);
                let expected = (coord[0] < 2 && coord != &vec![0, 1]).then(|| chunk(coord));
                assert_eq!(
                    bytes.as_ref().map(|b| b.to_vec()),
                    expected,
                    "{case} {coord:?}"
                );
            }
            // Read again: the index is kept, the answer the same.
            let again = reader.read_chunks(&coords[..2], u64::MAX);
            assert_eq!(
                again[1]
                    .as_ref()
                    .expect("read")
                    .as_ref()
                    .map(|b| b.to_vec()),
                Some(chunk(&[0, 0]))
            );
        }
    }
}

#[test]
fn a_broken_index_or_a_truncated_shard_is_an_error_naming_the_shard() {
    for location in [IndexLocation::Start, IndexLocation::End] {
        let (_dir, reader) = store_with_shards(location, IndexEncoding::default());
        let broken = reader.read_chunks(&[vec![0, 5], vec![1, 6]], u64::MAX);
        for result in &broken {
            let err = result.as_ref().expect_err("broken index");
            let text = zshard_core::chain_text(err);
            assert!(text.contains("c/0/1") && text.contains("crc32c"), "{text}");
        }
        let truncated = reader.read_chunks(&[vec![3, 7]], u64::MAX);
        let err = truncated[0].as_ref().expect_err("truncated shard");
        assert!(zshard_core::chain_text(err).contains("c/1/1"), "{err}");
        assert!(reader.chunk_key(&[3, 6]).ends_with("c/1/1 (inner chunk 6)"));
    }
}

#[test]
fn an_index_entry_past_the_end_of_the_shard_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = IoRuntime::new(1).expect("runtime");
    let store = Store::open(dir.path().to_str().expect("utf-8"), runtime, true).expect("store");
    let keys = ChunkKeyEncoding::Default { separator: '/' };
    // One inner chunk, index at the end without checksum, pointing 100 bytes past the data.
    let encoding = IndexEncoding {
        endian: Endian::Little,
        crc32c: false,
    };
    let mut shard = vec![7u8; 10];
    shard.extend_from_slice(&0u64.to_le_bytes());
    shard.extend_from_slice(&110u64.to_le_bytes());
    store.put(&keys.key(&[0]), Bytes::from(shard)).expect("put");
    let shards = SourceShards {
        rectilinear: None,
        shard_shape: vec![4],
        index_encoding: encoding,
        index_location: IndexLocation::End,
    };
    let reader = ShardedChunkReader::new(store, keys, shards, &[4]);
    let got = reader.read_chunks(&[vec![0]], u64::MAX);
    let err = got[0].as_ref().expect_err("past the end");
    assert!(zshard_core::chain_text(err).contains("c/0"), "{err}");
}

/// Shards on a rectilinear grid (rows in edges of 20, 10 and 30, one column of 40; inner chunks of
/// 10x10), each holding its inner chunks out of order with gaps between them, index at the end: the
/// inner chunks lie on one regular grid, each shard with as many as its edges hold.
#[test]
fn rectilinear_shards_with_unordered_inner_chunks_are_read_by_position() {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = IoRuntime::new(1).expect("runtime");
    let store = Store::open(dir.path().to_str().expect("utf-8"), runtime, true).expect("store");
    let keys = ChunkKeyEncoding::Default { separator: '/' };
    let encoding = IndexEncoding {
        endian: Endian::Little,
        crc32c: false,
    };
    let grid = zshard_core::RectilinearGrid::from_configuration(
        &serde_json::json!({"kind": "inline", "chunk_shapes": [[20, 10, 30], [40]]}),
        &[55, 40],
    )
    .expect("grid");
    // Shards start at rows 0, 20 and 30 (inner rows 0, 2 and 3), with 2, 1 and 3 inner rows of 4.
    for (shard, (first_row, rows)) in [(0u64, 2u64), (2, 1), (3, 3)].into_iter().enumerate() {
        let n = rows * 4;
        let mut data = vec![0xeeu8; 5];
        let mut index = vec![(u64::MAX, u64::MAX); n as usize];
        // Last chunk first; the inner chunk (1, 1) of the first shard is absent.
        for i in (0..n).rev() {
            let coord = [first_row + i / 4, i % 4];
            if coord == [1, 1] {
                continue;
            }
            let bytes = chunk(&coord);
            index[i as usize] = (data.len() as u64, bytes.len() as u64);
            data.extend_from_slice(&bytes);
            data.extend_from_slice(&[0xee; 3]);
        }
        for (offset, nbytes) in index {
            data.extend_from_slice(&offset.to_le_bytes());
            data.extend_from_slice(&nbytes.to_le_bytes());
        }
        store
            .put(&keys.key(&[shard as u64, 0]), Bytes::from(data))
            .expect("put");
    }
    let shards = SourceShards {
        rectilinear: Some(std::sync::Arc::new(grid)),
        shard_shape: vec![30, 40],
        index_encoding: encoding,
        index_location: IndexLocation::End,
    };
    let reader = ShardedChunkReader::new(store, keys, shards, &[10, 10]);
    let coords: Vec<Vec<u64>> = zshard_core::c_order(&[6, 4]).collect();
    let got = reader.read_chunks(&coords, u64::MAX);
    for (coord, result) in coords.iter().zip(&got) {
        let bytes = result.as_ref().expect("read");
        let expected = (coord != &vec![1, 1]).then(|| chunk(coord));
        assert_eq!(bytes.as_ref().map(|b| b.to_vec()), expected, "{coord:?}");
    }
    assert!(reader.chunk_key(&[2, 3]).ends_with("c/1/0 (inner chunk 3)"));
    assert!(reader.chunk_key(&[4, 1]).ends_with("c/2/0 (inner chunk 5)"));
    // Past the array's last shard: missing, not an error.
    let past = reader.read_chunks(&[vec![6, 0]], u64::MAX);
    assert!(matches!(past[0], Ok(None)));
}
