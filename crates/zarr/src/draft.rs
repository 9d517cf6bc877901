//! The pre-final Zarr v3 layout that zarr-python 2.11–2.18 writes with `ZARR_V3_EXPERIMENTAL_API=1`
//! (the "core protocol v3.0" draft), with or without the draft sharding storage transformer
//! (`ShardingStorageTransformer`, "Sharding storage transformer 1.0", Feb 2022).
//!
//! Layout: a `zarr.json` entry point with `metadata_key_suffix`; `meta/root/<path>.array.json` and
//! `.group.json` (groups may also be implicit: a folder of `meta/root/` without a document); chunks
//! at `data/root/<path>/c<i>/<j>`. An array document is Zarr v2's `.zarray` in other words (numpy
//! dtype strings, v2 fill values, one numcodecs compressor named by a codec URL, filters under
//! `attributes.filters`, `chunk_memory_layout` for `order`), so it is translated into a `.zarray`
//! value and read by the v2 translation. With the sharding transformer (`type: indexed`) the shard
//! key is the chunk key floored by `chunks_per_shard`, and each shard ends with an index of
//! `(offset, nbytes)` little-endian u64 pairs in C order, no checksum: the `sharding_indexed` index
//! without `crc32c`, so the array is read by inner chunk like any sharded source.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Map, Value};
use zshard_core::{
    checked_byte_size, ArrayMeta, ChunkKeyEncoding, Endian, IndexEncoding, IndexLocation, Node,
    NodeKind, SourceShards,
};
use zshard_store::Store;

use crate::error::{metadata, Error, Result};
use crate::v2::{array_from_value_with, FillAttribute, V2_COMPRESSORS};

/// The `zarr_format` (and `metadata_encoding`) of the draft's entry point.
pub const DRAFT_PROTOCOL: &str = "https://purl.org/zarr/spec/protocol/core/3.0";

/// The `extension` of the draft sharding storage transformer.
pub const DRAFT_SHARDING: &str = "https://purl.org/zarr/spec/storage_transformers/sharding/1.0";

/// Codec URLs are this prefix, the numcodecs id, `/` and a version (`.../codec/blosc/1.0`).
const CODEC_URL_PREFIX: &str = "https://purl.org/zarr/spec/codec/";

/// The folder of the metadata documents.
const META_ROOT: &str = "meta/root";

/// The folder of the chunks.
const DATA_ROOT: &str = "data/root";

/// The most inner chunks one shard may hold (an index of 2 GiB): more is corrupt metadata.
const MAX_CHUNKS_PER_SHARD: u64 = 1 << 27;

/// The entry point, `zarr.json`.
#[derive(Deserialize)]
struct EntryPoint {
    zarr_format: String,
    #[serde(default)]
    metadata_encoding: Option<String>,
    metadata_key_suffix: String,
    #[serde(default)]
    extensions: Vec<Value>,
}

/// An array document, `meta/root/<path>.array<suffix>`.
#[derive(Deserialize)]
struct DraftArray {
    shape: Vec<u64>,
    data_type: Value,
    chunk_grid: ChunkGrid,
    #[serde(default = "c_order")]
    chunk_memory_layout: String,
    #[serde(default)]
    compressor: Option<DraftCodec>,
    #[serde(default)]
    fill_value: Value,
    #[serde(default)]
    attributes: Map<String, Value>,
    #[serde(default)]
    extensions: Vec<Value>,
    #[serde(default)]
    storage_transformers: Vec<StorageTransformer>,
    /// Written by zarr-python when given; wins over `chunk_grid.separator` as zarr-python reads it.
    #[serde(default)]
    dimension_separator: Option<String>,
}

fn c_order() -> String {
    "C".into()
}

fn slash() -> String {
    "/".into()
}

#[derive(Deserialize)]
struct ChunkGrid {
    #[serde(rename = "type")]
    kind: String,
    chunk_shape: Vec<u64>,
    #[serde(default = "slash")]
    separator: String,
}

#[derive(Deserialize)]
struct DraftCodec {
    codec: String,
    #[serde(default)]
    configuration: Map<String, Value>,
}

#[derive(Deserialize)]
struct StorageTransformer {
    extension: String,
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    configuration: Map<String, Value>,
}

/// A group document, `meta/root/<path>.group<suffix>`.
#[derive(Deserialize)]
struct DraftGroup {
    #[serde(default)]
    attributes: Map<String, Value>,
}

/// Whether a `zarr.json` is the draft's entry point (it has `metadata_key_suffix`; the final v3
/// `zarr.json` has `zarr_format: 3` and no such member).
pub fn is_draft_entry_point(doc: &[u8]) -> bool {
    // Only the one member is looked at: the rest is skipped, not parsed into values (a final
    // `zarr.json` may hold millions of them).
    #[derive(Deserialize)]
    struct Probe {
        metadata_key_suffix: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Probe>(doc).is_ok_and(|p| p.metadata_key_suffix.is_some())
}

/// Parses the entry point read from `key` (named in errors): the suffix of the metadata documents.
pub fn parse_draft_entry_point(key: &str, doc: &[u8]) -> Result<String> {
    let entry: EntryPoint = serde_json::from_slice(doc).map_err(|source| Error::Json {
        key: key.to_string(),
        source,
    })?;
    if entry.zarr_format != DRAFT_PROTOCOL {
        return Err(metadata(
            key,
            format!(
                "zarr_format {:?} is not the v3 draft protocol {DRAFT_PROTOCOL}",
                entry.zarr_format
            ),
        ));
    }
    if let Some(encoding) = entry.metadata_encoding.filter(|e| e != DRAFT_PROTOCOL) {
        return Err(metadata(
            key,
            format!("metadata_encoding {encoding:?} is not supported (JSON, {DRAFT_PROTOCOL})"),
        ));
    }
    check_extensions(key, &entry.extensions)?;
    if entry.metadata_key_suffix.contains('/') {
        return Err(metadata(
            key,
            format!(
                "metadata_key_suffix {:?} must not contain /",
                entry.metadata_key_suffix
            ),
        ));
    }
    Ok(entry.metadata_key_suffix)
}

/// Refuses extensions that must be understood: the draft's extension points may change what the data
/// means, and zshard knows none of them.
fn check_extensions(key: &str, extensions: &[Value]) -> Result<()> {
    let ignorable = |v: &Value| v.get("must_understand") == Some(&Value::Bool(false));
    match extensions.iter().find(|e| !ignorable(e)) {
        Some(e) => Err(metadata(
            key,
            format!("extension {e} must be understood and is not supported"),
        )),
        None => Ok(()),
    }
}

/// Parses a draft array document read from `key` (named in errors) into the model: chunks keyed
/// `c<i>/<j>` below `data/root/<path>`, read by inner chunk when the sharding transformer is set.
pub fn parse_draft_array(key: &str, doc: &[u8]) -> Result<ArrayMeta> {
    let draft: DraftArray = serde_json::from_slice(doc).map_err(|source| Error::Json {
        key: key.to_string(),
        source,
    })?;
    check_extensions(key, &draft.extensions)?;
    if draft.chunk_grid.kind != "regular" {
        return Err(metadata(
            key,
            format!(
                "chunk_grid type {:?} is not supported (regular)",
                draft.chunk_grid.kind
            ),
        ));
    }
    let separator = separator(
        key,
        draft
            .dimension_separator
            .as_deref()
            .unwrap_or(&draft.chunk_grid.separator),
    )?;
    let mut attributes = draft.attributes;
    // zarr-python keeps the filters there, for want of a member; they are not user attributes.
    let filters = attributes.shift_remove("filters").unwrap_or(Value::Null);
    let zarray = json!({
        "zarr_format": 2,
        "shape": draft.shape,
        "chunks": draft.chunk_grid.chunk_shape,
        "dtype": typestr(key, &draft.data_type)?,
        "compressor": draft.compressor.map(|c| compressor(key, c)).transpose()?,
        "fill_value": draft.fill_value,
        "order": draft.chunk_memory_layout,
        "filters": filters,
    });
    let mut meta = array_from_value_with(key, zarray, attributes, FillAttribute::Unchanged)?;
    meta.chunk_key_encoding = ChunkKeyEncoding::Draft { separator };
    meta.sharded = shards(key, &draft.storage_transformers, &meta)?;
    Ok(meta)
}

fn separator(key: &str, separator: &str) -> Result<char> {
    match separator {
        "/" => Ok('/'),
        "." => Ok('.'),
        other => Err(metadata(
            key,
            format!("chunk key separator {other:?} is not / or ."),
        )),
    }
}

/// The numpy type string of a draft `data_type`: core types are v2's (`<i4`, `>f8`), except `bool`,
/// `i1` and `u1`; extension types (complex, datetime, strings) are `{"extension", "type"}` objects.
fn typestr(key: &str, data_type: &Value) -> Result<String> {
    let name = match data_type {
        Value::Object(extension) => extension.get("type").unwrap_or(&Value::Null),
        other => other,
    };
    match name.as_str() {
        Some("bool") => Ok("|b1".into()),
        Some("i1") => Ok("|i1".into()),
        Some("u1") => Ok("|u1".into()),
        Some(other) => Ok(other.into()),
        None => Err(metadata(
            key,
            format!("data_type {data_type} is not supported (structured or not a type string)"),
        )),
    }
}

/// The numcodecs configuration (`{"id": ..., ...}`) of a draft compressor named by its codec URL.
fn compressor(key: &str, codec: DraftCodec) -> Result<Value> {
    let id = codec
        .codec
        .strip_prefix(CODEC_URL_PREFIX)
        .and_then(|rest| rest.split_once('/'))
        .map(|(id, _version)| id)
        .filter(|id| V2_COMPRESSORS.contains(id))
        .ok_or_else(|| {
            metadata(
                key,
                format!(
                    "compressor {:?} is not supported (supported: {CODEC_URL_PREFIX}<id>/1.0 with <id> one of {})",
                    codec.codec,
                    V2_COMPRESSORS.join(", ")
                ),
            )
        })?;
    let mut config = codec.configuration;
    config.insert("id".into(), Value::String(id.into()));
    Ok(Value::Object(config))
}

/// Where the inner chunks of an array with `transformers` are: `None` without a transformer, shards
/// of `chunks_per_shard` chunks with the draft's index (little endian, no checksum, at the end) with
/// the sharding transformer.
fn shards(
    key: &str,
    transformers: &[StorageTransformer],
    meta: &ArrayMeta,
) -> Result<Option<SourceShards>> {
    let transformer = match transformers {
        [] => return Ok(None),
        [one] => one,
        _ => {
            return Err(metadata(
                key,
                format!(
                "{} storage transformers are not supported (at most one, the sharding transformer)",
                transformers.len()
            ),
            ))
        }
    };
    if transformer.extension != DRAFT_SHARDING || transformer.kind != "indexed" {
        return Err(metadata(
            key,
            format!(
                "storage transformer {:?} of type {:?} is not supported (only {DRAFT_SHARDING} of type \"indexed\")",
                transformer.extension, transformer.kind
            ),
        ));
    }
    let per_shard: Vec<u64> = transformer
        .configuration
        .get("chunks_per_shard")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
        .filter(|c| c.len() == meta.shape.len() && !c.contains(&0))
        .ok_or_else(|| {
            metadata(
                key,
                format!(
                    "chunks_per_shard must be {} positive integers, one per dimension",
                    meta.shape.len()
                ),
            )
        })?;
    let too_many = per_shard
        .iter()
        .try_fold(1u64, |acc, &n| acc.checked_mul(n))
        .is_none_or(|n| n > MAX_CHUNKS_PER_SHARD);
    let shard_shape: Option<Vec<u64>> = meta
        .chunk_shape
        .iter()
        .zip(&per_shard)
        .map(|(c, n)| c.checked_mul(*n))
        .collect();
    let shard_shape = match shard_shape {
        Some(shape) if !too_many => shape,
        _ => {
            return Err(metadata(
                key,
                format!("chunks_per_shard {per_shard:?} makes shards of more than {MAX_CHUNKS_PER_SHARD} chunks"),
            ))
        }
    };
    checked_byte_size("shard shape", &shard_shape, meta.data_type.size()).map_err(|source| {
        Error::Core {
            key: key.to_string(),
            source,
        }
    })?;
    Ok(Some(SourceShards {
        rectilinear: None,
        shard_shape,
        index_encoding: IndexEncoding {
            endian: Endian::Little,
            crc32c: false,
        },
        index_location: IndexLocation::End,
    }))
}

/// Parses a draft group document read from `key`: its attributes.
pub fn parse_draft_group(key: &str, doc: &[u8]) -> Result<Map<String, Value>> {
    let group: DraftGroup = serde_json::from_slice(doc).map_err(|source| Error::Json {
        key: key.to_string(),
        source,
    })?;
    Ok(group.attributes)
}

/// Where the chunks of the array at `path` (`""` for a root array) are, relative to the hierarchy.
pub fn data_prefix(path: &str) -> String {
    if path.is_empty() {
        DATA_ROOT.to_string()
    } else {
        format!("{DATA_ROOT}/{path}")
    }
}

/// Every node of the draft hierarchy whose entry point `entry` is the store's `zarr.json`: the root
/// (an array, or a group with or without a document), and every array and group below it from one
/// listing of `meta/root/`; folders without a document are groups without attributes, as in
/// zarr-python.
pub(crate) fn open_hierarchy(store: &Store, entry: &[u8]) -> Result<Vec<Node>> {
    let suffix = parse_draft_entry_point(&store.url("zarr.json"), entry)?;
    let array_doc = format!(".array{suffix}");
    let group_doc = format!(".group{suffix}");
    let root_array = format!("{META_ROOT}{array_doc}");
    if let Some(doc) = store.get(&root_array)? {
        let meta = parse_draft_array(&store.url(&root_array), &doc)?;
        return Ok(vec![Node {
            path: String::new(),
            kind: NodeKind::Array(Box::new(meta)),
        }]);
    }
    let root_group = format!("{META_ROOT}{group_doc}");
    let attributes = match store.get(&root_group)? {
        Some(doc) => parse_draft_group(&store.url(&root_group), &doc)?,
        None => Map::new(),
    };
    let mut nodes = BTreeMap::from([(String::new(), NodeKind::Group { attributes })]);
    let prefix = format!("{META_ROOT}/");
    for key in store.list_keys(META_ROOT)? {
        let Some(name) = key.strip_prefix(&prefix) else {
            continue;
        };
        let kind = if let Some(path) = name.strip_suffix(&array_doc) {
            let doc = read(store, &key)?;
            let meta = parse_draft_array(&store.url(&key), &doc)?;
            (path, NodeKind::Array(Box::new(meta)))
        } else if let Some(path) = name.strip_suffix(&group_doc) {
            let doc = read(store, &key)?;
            let attributes = parse_draft_group(&store.url(&key), &doc)?;
            (path, NodeKind::Group { attributes })
        } else {
            continue;
        };
        nodes.insert(kind.0.to_string(), kind.1);
    }
    add_implicit_groups(&mut nodes);
    Ok(nodes
        .into_iter()
        .map(|(path, kind)| Node { path, kind })
        .collect())
}

fn read(store: &Store, key: &str) -> Result<bytes::Bytes> {
    store
        .get(key)?
        .ok_or_else(|| metadata(&store.url(key), "listed but gone when read"))
}

/// Gives every node's missing ancestors a group without attributes (zarr-python's implicit groups).
fn add_implicit_groups(nodes: &mut BTreeMap<String, NodeKind>) {
    let paths: Vec<String> = nodes.keys().cloned().collect();
    for path in paths {
        let mut parent = path.as_str();
        while let Some((above, _)) = parent.rsplit_once('/') {
            nodes
                .entry(above.to_string())
                .or_insert_with(|| NodeKind::Group {
                    attributes: Map::new(),
                });
            parent = above;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARDED: &str = r#"{
        "attributes": {"u": "v", "filters": [{"id": "delta", "dtype": "<i4"}]},
        "chunk_grid": {"chunk_shape": [3, 2], "separator": "/", "type": "regular"},
        "chunk_memory_layout": "C",
        "compressor": {"codec": "https://purl.org/zarr/spec/codec/blosc/1.0",
            "configuration": {"blocksize": 0, "clevel": 5, "cname": "lz4", "shuffle": 1}},
        "data_type": "<i4", "extensions": [], "fill_value": 5, "shape": [10, 7],
        "storage_transformers": [{"configuration": {"chunks_per_shard": [2, 2]},
            "extension": "https://purl.org/zarr/spec/storage_transformers/sharding/1.0",
            "type": "indexed"}]
    }"#;

    #[test]
    fn a_sharded_array_is_read_by_inner_chunk_with_the_index_without_checksum() {
        let meta = parse_draft_array("a.array.json", SHARDED.as_bytes()).expect("parses");
        assert_eq!(meta.shape, vec![10, 7]);
        assert_eq!(meta.chunk_shape, vec![3, 2]);
        assert_eq!(meta.data_type, zshard_core::DataType::Int32);
        let names: Vec<&str> = meta.codecs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["bytes", "numcodecs.delta", "blosc"]);
        assert_eq!(meta.chunk_key_encoding.key(&[1, 3]), "c1/3");
        assert_eq!(Value::Object(meta.attributes.clone()), json!({"u": "v"}));
        assert_eq!(
            meta.sharded,
            Some(SourceShards {
                rectilinear: None,
                shard_shape: vec![6, 4],
                index_encoding: IndexEncoding {
                    endian: Endian::Little,
                    crc32c: false
                },
                index_location: IndexLocation::End,
            })
        );
    }

    #[test]
    fn an_unsharded_array_with_extension_types_and_order_f() {
        let doc = br#"{"attributes": {}, "chunk_grid": {"chunk_shape": [2, 2], "separator": ".", "type": "regular"},
            "chunk_memory_layout": "F", "data_type": {"extension": "x", "type": "<c16", "fallback": null},
            "extensions": [], "fill_value": [1.0, "NaN"], "shape": [3, 3]}"#;
        let meta = parse_draft_array("b.array.json", doc).expect("parses");
        assert_eq!(meta.data_type, zshard_core::DataType::Complex128);
        assert_eq!(meta.chunk_key_encoding.key(&[1, 0]), "c1.0");
        assert_eq!(meta.codecs[0].name, "transpose");
        assert!(meta.sharded.is_none());
        for (name, typestr) in [
            ("bool", "|b1"),
            ("i1", "|i1"),
            ("u1", "|u1"),
            (">u2", ">u2"),
        ] {
            assert_eq!(typestr_of(name), typestr);
        }
    }

    fn typestr_of(name: &str) -> String {
        typestr("k", &Value::String(name.into())).expect("type")
    }

    #[test]
    fn bad_documents_are_refused_naming_the_key_and_the_reason() {
        let cases = [
            (
                SHARDED.replace("[2, 2]", "[2]"),
                "chunks_per_shard must be 2 positive integers",
            ),
            (
                SHARDED.replace("[2, 2]", "[0, 2]"),
                "chunks_per_shard must be 2 positive integers",
            ),
            (
                SHARDED.replace("[2, 2]", "[4294967296, 4294967296]"),
                "makes shards of more than",
            ),
            (
                SHARDED.replace("\"indexed\"", "\"hashed\""),
                "of type \"hashed\" is not supported",
            ),
            (
                SHARDED.replace("sharding/1.0", "sharding/2.0"),
                "is not supported (only",
            ),
            (
                SHARDED.replace("codec/blosc/1.0", "codec/snappy/1.0"),
                "compressor \"https://purl.org/zarr/spec/codec/snappy/1.0\" is not supported",
            ),
            (
                SHARDED.replace("\"regular\"", "\"rectilinear\""),
                "chunk_grid type \"rectilinear\"",
            ),
            (
                SHARDED.replace(
                    "\"extensions\": []",
                    "\"extensions\": [{\"must_understand\": true}]",
                ),
                "must be understood",
            ),
            (
                SHARDED.replace("\"<i4\"", "[[\"a\", \"<i4\"]]"),
                "structured",
            ),
            (
                SHARDED.replace("\"separator\": \"/\"", "\"separator\": \"-\""),
                "separator \"-\"",
            ),
        ];
        for (doc, reason) in cases {
            let e = parse_draft_array("meta/root/a.array.json", doc.as_bytes())
                .expect_err(reason)
                .to_string();
            assert!(e.starts_with("meta/root/a.array.json: "), "{e}");
            assert!(e.contains(reason), "{e} lacks {reason}");
        }
        let e = parse_draft_array("k", b"{\"shape\": [1]}").expect_err("incomplete");
        assert!(matches!(e, Error::Json { .. }), "{e}");
    }

    #[test]
    fn entry_points() {
        let entry = br#"{"extensions": [], "metadata_encoding": "https://purl.org/zarr/spec/protocol/core/3.0",
            "metadata_key_suffix": ".json", "zarr_format": "https://purl.org/zarr/spec/protocol/core/3.0"}"#;
        assert!(is_draft_entry_point(entry));
        assert_eq!(
            parse_draft_entry_point("zarr.json", entry).ok(),
            Some(".json".into())
        );
        assert!(!is_draft_entry_point(
            br#"{"zarr_format": 3, "node_type": "group"}"#
        ));
        assert!(!is_draft_entry_point(b"not json"));
        let wrong = br#"{"metadata_key_suffix": ".json", "zarr_format": 3}"#;
        assert!(parse_draft_entry_point("zarr.json", wrong).is_err());
    }

    #[test]
    fn implicit_groups_are_added_above_every_node() {
        let array = parse_draft_array("k", SHARDED.as_bytes()).expect("parses");
        let mut nodes = BTreeMap::from([
            (
                String::new(),
                NodeKind::Group {
                    attributes: Map::new(),
                },
            ),
            ("g/sub/a".to_string(), NodeKind::Array(Box::new(array))),
        ]);
        add_implicit_groups(&mut nodes);
        let paths: Vec<&str> = nodes.keys().map(String::as_str).collect();
        assert_eq!(paths, ["", "g", "g/sub", "g/sub/a"]);
        assert_eq!(data_prefix("g/sub/a"), "data/root/g/sub/a");
        assert_eq!(data_prefix(""), "data/root");
    }
}
