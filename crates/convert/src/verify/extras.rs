//! What an output holds beyond the hierarchy its conversion wrote (`zshard verify` reports it): keys
//! in an array's chunk namespace that are no shard of its grid, staged files of interrupted writes,
//! a conversion's state, stale consolidated entries, and files zshard never writes there.

use zshard_core::{grid_shape, ChunkKeyEncoding, Node, NodeKind};
use zshard_store::Store;

use crate::error::Result;
use serde_json::Value;

/// What the output holds beside the converted hierarchy.
#[derive(Debug, Default)]
pub(super) struct Extras {
    /// Mismatches: keys where an array keeps its chunks that are not a shard of its grid, staged
    /// files of interrupted writes, the state folder of a conversion (`.zshard/`, which a finished
    /// one removes, even empty), each named by its location.
    pub(super) strays: Vec<String>,
    /// Files that are not part of the Zarr hierarchy (a `readme.txt` beside an array's metadata):
    /// readers never see them and zshard writes around them, so they are reported, not mismatches.
    pub(super) foreign: Vec<String>,
    /// Mismatches: arrays and groups whose metadata documents are in the output but that its
    /// hierarchy (as opened, through the root's consolidated metadata) does not hold.
    pub(super) unknown_nodes: Vec<String>,
}

/// The warning about the file at `url`, which is no part of the hierarchy.
fn not_zarr(url: &str) -> String {
    format!("{url}: not part of the Zarr hierarchy (no reader sees it; not compared)")
}

/// The deepest node of `nodes` that `key` lies below, and the rest of the key below it.
fn owner<'a, 'k>(nodes: &'a [Node], key: &'k str) -> Option<(&'a Node, &'k str)> {
    nodes
        .iter()
        .filter_map(|n| {
            let rest = match n.path.as_str() {
                "" => Some(key),
                path => key.strip_prefix(path)?.strip_prefix('/'),
            };
            rest.map(|rest| (n, rest))
        })
        .min_by_key(|(_, rest)| rest.len())
}

/// Sorts every key of the output (one listing) into [`Extras`], by the deepest node of `nodes` (the
/// output's arrays and groups) it lies below.
pub(super) fn extra_objects(dst: &Store, nodes: &[Node]) -> Result<Extras> {
    let mut extras = Extras::default();
    let keys = dst.list_keys("")?;
    let mut state = Vec::new();
    // Metadata documents of nodes the hierarchy does not hold (readers that list the store, or
    // do not use the root's consolidated metadata, see them), with their kind.
    let mut unknown: Vec<(String, &str)> = Vec::new();
    for key in &keys {
        let (parent, document) = key.rsplit_once('/').unwrap_or(("", key));
        let kind = match document {
            ".zarray" => "array",
            ".zgroup" => "group",
            "zarr.json" => "node",
            _ => continue,
        };
        let known = owner(nodes, key).is_some_and(|(_, rest)| rest == "zarr.json");
        if known || parent.split('/').any(|s| s == ".zshard") || dst.first_link(key).is_some() {
            continue;
        }
        let kind = match dst
            .get(key)?
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        {
            Some(doc) if kind == "node" => match doc.get("node_type").and_then(Value::as_str) {
                Some("array") => "array",
                Some("group") => "group",
                _ => "node",
            },
            _ => kind,
        };
        if !unknown.iter().any(|(p, _)| p == parent) {
            unknown.push((parent.to_string(), kind));
        }
    }
    for (path, kind) in &unknown {
        extras.unknown_nodes.push(format!(
            "{kind} {}: in the output, not in the source",
            if path.is_empty() {
                dst.url("")
            } else {
                path.clone()
            }
        ));
    }
    let below_unknown = |key: &str| {
        unknown.iter().any(|(p, _)| {
            p.is_empty()
                || key
                    .strip_prefix(p.as_str())
                    .is_some_and(|r| r.starts_with('/'))
        })
    };
    let mut links: Vec<std::path::PathBuf> = Vec::new();
    for key in keys.iter().cloned() {
        // What a linked folder leads to is not zshard's (it never writes or removes through a
        // link): named once, not compared. A link at a chunk key is a stray below.
        if let Some(link) = dst
            .first_link(&key)
            .filter(|l| Some(l) != dst.local_path(&key).as_ref())
        {
            if !links.contains(&link) {
                extras.foreign.push(format!(
                    "{}: a symbolic link; what it leads to is not zshard's and was not compared",
                    link.display()
                ));
                links.push(link);
            }
            continue;
        }
        if key == zshard_state::MANIFEST
            || zshard_state::is_kept_records(&key)
            || zshard_state::is_source_versions(&key)
        {
            // Kept by `--keep-manifest`, and what each array's shards were made from (for the
            // next run to bring the output up to date).
            continue;
        }
        if key == ".zshard" || key.starts_with(".zshard/") {
            state.push(format!(
                "{}: stray object: state of an unfinished conversion (a finished one removes .zshard/)",
                dst.url(&key)
            ));
            continue;
        }
        if below_unknown(&key) {
            continue;
        }
        let Some((node, rest)) = owner(nodes, &key) else {
            extras.foreign.push(not_zarr(&dst.url(&key)));
            continue;
        };
        if rest == "zarr.json" {
            continue;
        }
        if let NodeKind::Array(meta) = &node.kind {
            if in_chunk_namespace(rest, meta.chunk_key_encoding) {
                let grid = grid_shape(&meta.shape, &meta.chunk_shape);
                if !is_chunk_key(rest, meta.chunk_key_encoding, &grid) {
                    extras.strays.push(format!(
                        "{}: stray object: not a shard of the array's grid {grid:?}",
                        dst.url(&key)
                    ));
                }
                continue;
            }
        }
        extras.foreign.push(not_zarr(&dst.url(&key)));
    }
    for key in dst.staged_keys("")? {
        extras.strays.push(format!(
            "{}: stray object: staged file of an interrupted write",
            dst.url(&key)
        ));
    }
    extras.strays.extend(state);
    // An empty state folder lists no key on disk, but Zarr readers still list it as a member.
    if let Some(state) = dst.local_path(".zshard") {
        let empty = std::fs::read_dir(&state).is_ok_and(|mut entries| entries.next().is_none());
        if empty {
            extras.strays.push(format!(
                "{}: stray object: the state folder of a conversion (a finished one removes .zshard/)",
                dst.url(".zshard")
            ));
        }
    }
    Ok(extras)
}

/// Nodes whose `zarr.json` says something else than the root's consolidated metadata, which readers
/// use instead of the node's own document (and verify compares through): a difference there is one
/// no comparison with the source would see. The `consolidated_metadata` members themselves are left
/// out (a child group's entry carries an empty one).
pub(super) fn stale_consolidated_entries(dst: &Store) -> Result<Vec<String>> {
    let Some(root) = dst.get("zarr.json")? else {
        return Ok(Vec::new());
    };
    let without_consolidated = |mut doc: Value| {
        if let Some(map) = doc.as_object_mut() {
            map.remove("consolidated_metadata");
        }
        doc
    };
    // The root was parsed by `open_hierarchy` already; a document that is not JSON differs.
    let Ok(root) = serde_json::from_slice::<Value>(&root) else {
        return Ok(Vec::new());
    };
    let Some(entries) = root
        .pointer("/consolidated_metadata/metadata")
        .and_then(Value::as_object)
    else {
        return Ok(Vec::new());
    };
    let mut stale = Vec::new();
    for (path, entry) in entries {
        let key = format!("{path}/zarr.json");
        let problem = match dst.get(&key)? {
            None => Some("is missing, but the root's consolidated metadata lists it"),
            Some(bytes) => (serde_json::from_slice::<Value>(&bytes)
                .ok()
                .map(without_consolidated)
                != Some(without_consolidated(entry.clone())))
            .then_some(
                "differs from its entry in the root's consolidated metadata, which readers use",
            ),
        };
        if let Some(problem) = problem {
            stale.push(format!("{}: {problem}", dst.url(&key)));
        }
    }
    Ok(stale)
}

/// Whether `key` lies where `encoding` puts chunk keys (`c/...` or a leading number): files a user
/// keeps beside an array (`notes.txt`), which zshard writes around and never removes, are not strays.
fn in_chunk_namespace(key: &str, encoding: ChunkKeyEncoding) -> bool {
    match encoding {
        ChunkKeyEncoding::Default { separator } => {
            key == "c"
                || key
                    .strip_prefix('c')
                    .is_some_and(|rest| rest.starts_with(separator))
        }
        ChunkKeyEncoding::V2 { .. } => key.starts_with(|c: char| c.is_ascii_digit()),
        ChunkKeyEncoding::Draft { .. } => key
            .strip_prefix('c')
            .is_some_and(|rest| rest.is_empty() || rest.starts_with(|c: char| c.is_ascii_digit())),
    }
}

/// Whether `key` is the key of a chunk of `grid` under `encoding`: its numbers are a coordinate inside
/// the grid, and that coordinate's key is exactly `key`.
fn is_chunk_key(key: &str, encoding: ChunkKeyEncoding, grid: &[u64]) -> bool {
    encoding.coordinates(key, grid.len()).is_some_and(|coord| {
        coord.iter().zip(grid).all(|(c, g)| c < g) && encoding.key(&coord) == key
    })
}
