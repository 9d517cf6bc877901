//! The pre-final v3 layout in a local store: hierarchy discovery (explicit and implicit groups, the
//! root's attributes) and the chunks of a sharded and an unsharded array read through
//! `array_chunk_reader` from `data/root/<path>/c<i>/<j>`, shards laid out by
//! `zshard_core::assemble_shard` with the draft's index (little endian, no crc32c, at the end).

use bytes::Bytes;
use serde_json::json;
use zshard_core::{assemble_shard, Endian, IndexEncoding, IndexLocation, NodeKind, SourceShards};
use zshard_store::{IoRuntime, Store};
use zshard_zarr::{array_chunk_reader, open_hierarchy};

const ENTRY: &str = r#"{"extensions": [], "metadata_encoding": "https://purl.org/zarr/spec/protocol/core/3.0",
    "metadata_key_suffix": ".json", "zarr_format": "https://purl.org/zarr/spec/protocol/core/3.0"}"#;

fn array_doc(transformers: serde_json::Value) -> Bytes {
    Bytes::from(
        json!({
            "attributes": {"a": 1}, "chunk_grid": {"chunk_shape": [2, 2], "separator": "/", "type": "regular"},
            "chunk_memory_layout": "C", "data_type": "<u2", "extensions": [], "fill_value": 0,
            "shape": [5, 4], "storage_transformers": transformers
        })
        .to_string(),
    )
}

const DRAFT_INDEX: IndexEncoding = IndexEncoding {
    endian: Endian::Little,
    crc32c: false,
};

fn draft_store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let runtime = IoRuntime::new(1).expect("runtime");
    let store = Store::open(dir.path().to_str().expect("utf-8"), runtime, true).expect("store");
    let put = |key: &str, bytes: Bytes| store.put(key, bytes).expect("put");
    put("zarr.json", Bytes::from(ENTRY));
    put(
        "meta/root.group.json",
        Bytes::from(r#"{"attributes": {"title": "t"}}"#),
    );
    put(
        "meta/root/g.group.json",
        Bytes::from(r#"{"attributes": {}}"#),
    );
    let sharding = json!([{"extension": "https://purl.org/zarr/spec/storage_transformers/sharding/1.0",
        "type": "indexed", "configuration": {"chunks_per_shard": [2, 1]}}]);
    put(
        "meta/root/g/implicit/sharded.array.json",
        array_doc(sharding),
    );
    put("meta/root/plain.array.json", array_doc(json!([])));
    // Shard (0, 1) of `sharded`: inner chunks (0, 1) and (1, 1); (0, 1) empty.
    let shard = assemble_shard(
        &[None, Some(b"one-one".to_vec())],
        IndexLocation::End,
        DRAFT_INDEX,
    );
    put("data/root/g/implicit/sharded/c0/1", Bytes::from(shard));
    put("data/root/plain/c2/1", Bytes::from_static(b"two-one"));
    (dir, store)
}

#[test]
fn the_hierarchy_has_explicit_and_implicit_groups_and_both_arrays() {
    let (_dir, store) = draft_store();
    let nodes = open_hierarchy(&store).expect("hierarchy");
    let kinds: Vec<(&str, bool)> = nodes
        .iter()
        .map(|n| (n.path.as_str(), matches!(n.kind, NodeKind::Array(_))))
        .collect();
    assert_eq!(
        kinds,
        [
            ("", false),
            ("g", false),
            ("g/implicit", false),
            ("g/implicit/sharded", true),
            ("plain", true)
        ]
    );
    let NodeKind::Group { attributes } = &nodes[0].kind else {
        panic!("root is a group")
    };
    assert_eq!(attributes.get("title"), Some(&json!("t")));
    let NodeKind::Array(sharded) = &nodes[3].kind else {
        panic!("an array")
    };
    assert_eq!(
        sharded.sharded,
        Some(SourceShards {
            rectilinear: None,
            shard_shape: vec![4, 2],
            index_encoding: DRAFT_INDEX,
            index_location: IndexLocation::End
        })
    );
}

#[test]
fn chunks_are_read_from_data_root_by_inner_chunk_through_the_draft_index() {
    let (_dir, store) = draft_store();
    let nodes = open_hierarchy(&store).expect("hierarchy");
    let meta = |path: &str| match &nodes.iter().find(|n| n.path == path).expect(path).kind {
        NodeKind::Array(meta) => meta.as_ref().clone(),
        NodeKind::Group { .. } => panic!("{path} is a group"),
    };
    let sharded = array_chunk_reader(&store, "g/implicit/sharded", &meta("g/implicit/sharded"));
    let read = sharded.read_chunks(&[vec![1, 1], vec![0, 1], vec![0, 0], vec![2, 0]], u64::MAX);
    let read: Vec<Option<Bytes>> = read.into_iter().map(|r| r.expect("read")).collect();
    assert_eq!(
        read,
        [Some(Bytes::from_static(b"one-one")), None, None, None]
    );
    assert!(sharded
        .chunk_key(&[1, 1])
        .ends_with("data/root/g/implicit/sharded/c0/1 (inner chunk 1)"));
    let plain = array_chunk_reader(&store, "plain", &meta("plain"));
    let read = plain.read_chunks(&[vec![2, 1], vec![0, 0]], u64::MAX);
    let read: Vec<Option<Bytes>> = read.into_iter().map(|r| r.expect("read")).collect();
    assert_eq!(read, [Some(Bytes::from_static(b"two-one")), None]);
    assert!(plain.chunk_key(&[2, 1]).ends_with("data/root/plain/c2/1"));
}
