//! `zshard ls`: the arrays of a source, as the conversion reads them (any input kind, the selection
//! applied), from metadata alone.

use serde::Serialize;
use serde_json::Value;
use zshard_core::{CodecSpec, NodeKind};
use zshard_store::{IoRuntime, Location, StoreOptions};

use crate::error::Result;
use crate::plan::input::{Input, ReadOptions, SkippedArray};

/// One array of a source.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct ListedArray {
    /// Path in the hierarchy (empty when the source is a single array).
    pub path: String,
    /// Extent per dimension.
    pub shape: Vec<u64>,
    /// The v3 `data_type` (a name, or an object for parametrised types).
    pub data_type: Value,
    /// The chunks the source is read by: its chunks, or an already sharded source's inner chunks.
    pub chunk_shape: Vec<u64>,
    /// An already sharded source's shard shape.
    pub shard_shape: Option<Vec<u64>>,
    /// The chunks' codec chain as v3 codecs (v2 compressors, filters and byte order translated; the
    /// inner chunks' chain of an already sharded source).
    #[schemars(with = "Vec<Value>")]
    pub codecs: Vec<CodecSpec>,
}

/// The arrays and groups of a source.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Listing {
    /// The source's location.
    pub source: String,
    /// Arrays in hierarchy order.
    pub arrays: Vec<ListedArray>,
    /// Group paths in hierarchy order (the root is `""`).
    pub groups: Vec<String>,
    /// Arrays zshard does not read, with why (with `--on-unsupported skip`; otherwise they fail).
    pub skipped_arrays: Vec<SkippedArray>,
}

/// Lists the arrays of `source` that `options.selection` takes (and the groups above them), and
/// those skipped as unsupported (`options.on_unsupported`).
pub fn list(source: &str, options: &ReadOptions, store_options: &StoreOptions) -> Result<Listing> {
    let location = Location::parse(source)?;
    let runtime = IoRuntime::with_options(2, store_options.clone())?;
    let input = Input::open(&location, options, runtime)?;
    let mut listing = Listing {
        source: input.url(),
        arrays: Vec::new(),
        groups: Vec::new(),
        skipped_arrays: Vec::new(),
    };
    let (nodes, skipped) = input.nodes_skipping(options)?;
    listing.skipped_arrays = skipped;
    for node in nodes {
        match node.kind {
            NodeKind::Group { .. } => listing.groups.push(node.path),
            NodeKind::Array(meta) => listing.arrays.push(ListedArray {
                path: node.path,
                shape: meta.shape,
                data_type: meta.data_type.to_v3_json(),
                shard_shape: meta.sharded.map(|s| s.shard_shape),
                chunk_shape: meta.chunk_shape,
                codecs: meta.codecs,
            }),
        }
    }
    Ok(listing)
}
