//! What the protocol needs to know of a conversion's plan: the output arrays (their paths, shard
//! grids and `zarr.json`) and the groups. Borrowed from the plan (`zshard-convert` builds it with
//! `Plan::outputs`), so the protocol sits below the planner and holds no copy of it.

use zshard_core::ShardGeometry;
use zshard_writer::ShardedArrayMetadata;

/// The nodes a conversion writes, in hierarchy order.
#[derive(Debug, Clone, Default)]
pub struct Outputs<'a> {
    /// The arrays, in hierarchy order (a shard's global index counts through them in this order).
    pub arrays: Vec<OutputArray<'a>>,
    /// The groups' paths (the root's is empty).
    pub groups: Vec<&'a String>,
}

/// One array a conversion writes.
#[derive(Debug, Clone, Copy)]
pub struct OutputArray<'a> {
    /// Its path in the hierarchy (empty for a single array).
    pub path: &'a String,
    /// Its shards and inner chunks.
    pub geometry: &'a ShardGeometry,
    /// Its `zarr.json`.
    pub output: &'a ShardedArrayMetadata,
}
