//! Which keys of a destination belong to zshard, so that `--overwrite` removes only those: zshard's
//! state folder, the metadata documents of the Zarr hierarchy found there (v3 `zarr.json`, v2
//! `.zarray`/`.zgroup`/`.zattrs`/`.zmetadata`), walked from the root and from every node this
//! conversion writes, and the chunk keys of each array found (keys below the array that parse as its
//! chunk keys under its metadata's chunk key encoding and lie in its chunk grid) or described by zshard's own state. Anything
//! else (a `notes.txt` beside the data, another tool's folder) is not ours and stays.

use std::collections::BTreeSet;

use serde_json::Value;
use zshard_core::{grid_shape, ChunkKeyEncoding, RectilinearGrid};

use crate::join;

/// How an array names its chunks: `c/0/1` (v3 default), `0.1` (v2 and v3 `v2` encoding), ...
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChunkKeys {
    encoding: ChunkKeyEncoding,
    /// Chunks along each dimension: a key whose coordinates fall outside the grid (`c/0/9` of a
    /// 1x2 grid) is no chunk of the array, so not ours to remove.
    grid: Vec<u64>,
}

/// A one-character separator, as every chunk key encoding has.
fn separator(text: &str) -> Option<char> {
    let mut chars = text.chars();
    let separator = chars.next()?;
    chars.next().is_none().then_some(separator)
}

impl ChunkKeys {
    /// The chunk keys of a v3 array's `zarr.json` document; `None` when it is not one.
    pub(crate) fn of_v3(doc: &Value) -> Option<ChunkKeys> {
        let encoding = doc.get("chunk_key_encoding");
        let name = encoding
            .and_then(|e| e.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("default");
        let configured = encoding
            .and_then(|e| e.get("configuration"))
            .and_then(|c| c.get("separator"))
            .and_then(Value::as_str);
        let encoding = match name {
            "default" => ChunkKeyEncoding::Default {
                separator: configured.map_or(Some('/'), separator)?,
            },
            "v2" => ChunkKeyEncoding::V2 {
                separator: configured.map_or(Some('.'), separator)?,
            },
            _ => return None,
        };
        let grid = v3_grid(doc, &shape(doc)?)?;
        Some(ChunkKeys { encoding, grid })
    }

    /// The chunk keys of a v2 array's `.zarray` document.
    pub(crate) fn of_v2(doc: &Value) -> Option<ChunkKeys> {
        let configured = doc.get("dimension_separator").and_then(Value::as_str);
        let encoding = ChunkKeyEncoding::V2 {
            separator: configured.map_or(Some('.'), separator)?,
        };
        let shape = shape(doc)?;
        let chunks = integers(doc.get("chunks")?)?;
        (chunks.len() == shape.len()).then_some(())?;
        let grid = grid_shape(&shape, &chunks);
        Some(ChunkKeys { encoding, grid })
    }

    /// Whether `relative` (a key relative to the array's path) is one of its chunk keys.
    pub(crate) fn matches(&self, relative: &str) -> bool {
        self.encoding
            .coordinates(relative, self.grid.len())
            .is_some_and(|coord| coord.iter().zip(&self.grid).all(|(c, n)| c < n))
    }
}

/// A list of non-negative integers.
fn integers(value: &Value) -> Option<Vec<u64>> {
    value.as_array()?.iter().map(Value::as_u64).collect()
}

/// The `shape` of an array's metadata document.
fn shape(doc: &Value) -> Option<Vec<u64>> {
    integers(doc.get("shape")?)
}

/// The chunks along each dimension of a v3 array's `chunk_grid` (regular or rectilinear); `None`
/// for a grid zshard cannot read, whose keys are then left alone.
fn v3_grid(doc: &Value, shape: &[u64]) -> Option<Vec<u64>> {
    let grid = doc.get("chunk_grid")?;
    let configuration = grid.get("configuration")?;
    match grid.get("name")?.as_str()? {
        "regular" => {
            let chunks = integers(configuration.get("chunk_shape")?)?;
            (chunks.len() == shape.len()).then(|| grid_shape(shape, &chunks))
        }
        "rectilinear" => RectilinearGrid::from_configuration(configuration, shape)
            .ok()
            .map(|g| g.grid_shape()),
        _ => None,
    }
}

/// A node of a Zarr hierarchy as the destination's keys describe it.
enum Node {
    Group,
    Array(ChunkKeys),
    /// Metadata that cannot be read as either: its documents are ours to replace, nothing below it.
    Unreadable,
}

/// Metadata document names of Zarr v2 and v3.
const METADATA_DOCUMENTS: [&str; 5] = ["zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"];

/// The keys among `keys` (every key of the destination) that `--overwrite` may remove: the hierarchy
/// walked from `roots` (the root and the paths this conversion writes), the chunk keys of `arrays`
/// (arrays described by zshard's state or this conversion, as path and chunk keys), and the state
/// folder. `read` reads a metadata document.
pub(crate) fn owned_keys(
    keys: &BTreeSet<String>,
    roots: &[String],
    arrays: &[(String, ChunkKeys)],
    read: &dyn Fn(&str) -> Option<Value>,
) -> BTreeSet<String> {
    let mut owned: BTreeSet<String> = keys
        .iter()
        // A file where zshard's state folder goes is state gone wrong, zshard's to clear too.
        .filter(|k| k.starts_with(".zshard/") || *k == ".zshard")
        .cloned()
        .collect();
    let mut arrays = arrays.to_vec();
    let mut visited = BTreeSet::new();
    let mut stack: Vec<String> = roots.to_vec();
    while let Some(path) = stack.pop() {
        if !visited.insert(path.clone()) {
            continue;
        }
        let Some(node) = node_at(keys, &path, read) else {
            continue;
        };
        owned.extend(
            METADATA_DOCUMENTS
                .iter()
                .map(|doc| join(&path, doc))
                .filter(|k| keys.contains(k)),
        );
        match node {
            Node::Array(chunk_keys) => arrays.push((path, chunk_keys)),
            Node::Group => stack.extend(children(keys, &path).map(|c| join(&path, &c))),
            Node::Unreadable => {}
        }
    }
    for (path, chunk_keys) in &arrays {
        owned.extend(
            below(keys, path)
                .filter(|(_, relative)| chunk_keys.matches(relative))
                .map(|(key, _)| key.clone()),
        );
        // The records a finished conversion kept beside the array's metadata: an overwrite must
        // not leave them to vouch for shards it replaces.
        let kept = crate::made_from::kept_key(path);
        if keys.contains(&kept) {
            owned.insert(kept);
        }
        let versions = crate::made_from::source_versions_key(path);
        if keys.contains(&versions) {
            owned.insert(versions);
        }
    }
    owned
}

/// The node whose metadata is at `path`, if any.
fn node_at(
    keys: &BTreeSet<String>,
    path: &str,
    read: &dyn Fn(&str) -> Option<Value>,
) -> Option<Node> {
    let v3 = join(path, "zarr.json");
    if keys.contains(&v3) {
        let doc = read(&v3);
        return Some(match doc.as_ref().and_then(|d| d.get("node_type")) {
            Some(t) if t == "group" => Node::Group,
            Some(t) if t == "array" => doc
                .as_ref()
                .and_then(ChunkKeys::of_v3)
                .map_or(Node::Unreadable, Node::Array),
            _ => Node::Unreadable,
        });
    }
    let zarray = join(path, ".zarray");
    if keys.contains(&zarray) {
        return Some(
            read(&zarray)
                .as_ref()
                .and_then(ChunkKeys::of_v2)
                .map_or(Node::Unreadable, Node::Array),
        );
    }
    keys.contains(&join(path, ".zgroup")).then_some(Node::Group)
}

/// The keys below `path` with their part relative to it.
fn below<'a>(
    keys: &'a BTreeSet<String>,
    path: &'a str,
) -> impl Iterator<Item = (&'a String, &'a str)> + 'a {
    keys.iter().filter_map(move |key| {
        let relative = if path.is_empty() {
            Some(key.as_str())
        } else {
            key.strip_prefix(path).and_then(|r| r.strip_prefix('/'))
        };
        relative.map(|r| (key, r))
    })
}

/// Names of the immediate sub-folders of `path` (candidate child nodes), zshard's state excluded.
fn children(keys: &BTreeSet<String>, path: &str) -> impl Iterator<Item = String> {
    below(keys, path)
        .filter_map(|(_, relative)| relative.split_once('/').map(|(first, _)| first.to_string()))
        .filter(|name| name != ".zshard")
        .collect::<BTreeSet<_>>()
        .into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chunk_keys_of_each_encoding() {
        let v3 = ChunkKeys::of_v3(&json!({"shape": [4, 4], "chunk_grid": regular(&[2, 1])}))
            .expect("v3");
        assert!(v3.matches("c/0/1"));
        assert!(!v3.matches("c/0"));
        assert!(!v3.matches("c/0/x"));
        assert!(!v3.matches("notes.txt"));
        let dotted = ChunkKeys::of_v3(&json!({"shape": [4, 4], "chunk_grid": regular(&[2, 2]),
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "."}}}))
        .expect("v3 dotted");
        assert!(dotted.matches("c.0.1"));
        assert!(!dotted.matches("c/0/1"));
        let v2 = ChunkKeys::of_v2(&json!({"shape": [4, 4], "chunks": [1, 1]})).expect("v2");
        assert!(v2.matches("3.0"));
        assert!(!v2.matches("3/0"));
        let nested = ChunkKeys::of_v2(
            &json!({"shape": [4, 4], "chunks": [1, 1], "dimension_separator": "/"}),
        )
        .expect("nested");
        assert!(nested.matches("3/0"));
        let scalar =
            ChunkKeys::of_v3(&json!({"shape": [], "chunk_grid": regular(&[])})).expect("0-d");
        assert!(scalar.matches("c"));
        assert!(!scalar.matches("c/0"));
    }

    fn regular(chunk_shape: &[u64]) -> Value {
        json!({"name": "regular", "configuration": {"chunk_shape": chunk_shape}})
    }

    #[test]
    fn keys_outside_the_grid_are_no_chunks() {
        // 10 x 10 in 5 x 4 chunks: a 2 x 3 grid.
        let v3 = ChunkKeys::of_v3(&json!({"shape": [10, 10], "chunk_grid": regular(&[5, 4])}))
            .expect("v3");
        assert!(v3.matches("c/1/2"));
        assert!(!v3.matches("c/2/0"));
        assert!(!v3.matches("c/0/9"));
        let v2 = ChunkKeys::of_v2(&json!({"shape": [10, 10], "chunks": [5, 4]})).expect("v2");
        assert!(v2.matches("1.2"));
        assert!(!v2.matches("99.99"));
        let rectilinear = ChunkKeys::of_v3(&json!({"shape": [10], "chunk_grid": {
            "name": "rectilinear",
            "configuration": {"kind": "inline", "chunk_shapes": [[3, 7]]}}}))
        .expect("rectilinear");
        assert!(rectilinear.matches("c/1"));
        assert!(!rectilinear.matches("c/2"));
        // A grid zshard cannot read: no chunk keys at all, so nothing below the array is removed.
        assert!(
            ChunkKeys::of_v3(&json!({"shape": [10], "chunk_grid": {"name": "other"}})).is_none()
        );
    }

    #[test]
    fn only_the_hierarchy_and_the_state_are_owned() {
        let keys: BTreeSet<String> = [
            ".zgroup",
            ".zattrs",
            "notes.txt",
            "sub/keep.txt",
            "a/.zarray",
            "a/0.0",
            "a/0.1",
            "a/readme",
            "a/9.9",
            "b/zarr.json",
            "b/c/0/0",
            "b/c/0/2",
            "b/c/x",
            "other/data.bin",
            ".zshard/options/all.json",
        ]
        .iter()
        .map(|k| k.to_string())
        .collect();
        let read = |key: &str| -> Option<Value> {
            Some(match key {
                "a/.zarray" => json!({"shape": [10, 10], "chunks": [5, 5]}),
                "b/zarr.json" => json!({"node_type": "array", "shape": [10, 10],
                    "chunk_grid": regular(&[5, 5])}),
                _ => json!({}),
            })
        };
        let owned = owned_keys(&keys, &[String::new()], &[], &read);
        let expected: BTreeSet<String> = [
            ".zgroup",
            ".zattrs",
            "a/.zarray",
            "a/0.0",
            "a/0.1",
            "b/zarr.json",
            "b/c/0/0",
            ".zshard/options/all.json",
        ]
        .iter()
        .map(|k| k.to_string())
        .collect();
        assert_eq!(owned, expected);
    }
}
