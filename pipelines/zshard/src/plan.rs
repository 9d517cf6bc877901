//! Turning a source hierarchy and the command-line options into a checked plan. Everything `convert`
//! can reject is rejected here, before anything is written.

use std::sync::Arc;

use anyhow::{anyhow, bail, Context};
use serde_json::{Map, Value};
use zshard_codecs::build_chain;
use zshard_core::{
    auto_shard_shape, ArrayMeta, ChunkRepr, IndexLocation, Node, NodeKind, ShardGeometry,
};
use zshard_pipeline::{ArrayJob, ArrayLayout};
use zshard_store::Store;
use zshard_writer::{ShardWriter, ShardedArrayMetadata};

use crate::compressor::Compressor;

/// Options of `convert` that shape the output.
#[derive(Debug, Clone)]
pub struct Layout {
    pub shard_shape: Option<Vec<u64>>,
    pub chunk_shape: Option<Vec<u64>>,
    pub compressor: Compressor,
    pub index_location: IndexLocation,
    /// Copy source chunks without decoding where they are already encoded as the output's inner chunks.
    pub passthrough: bool,
}

/// The layout of every array: one default, and overrides by array path (from job files).
#[derive(Debug, Clone)]
pub struct Layouts {
    pub default: Layout,
    pub per_array: std::collections::BTreeMap<String, Layout>,
}

impl From<Layout> for Layouts {
    fn from(default: Layout) -> Self {
        Layouts {
            default,
            per_array: Default::default(),
        }
    }
}

impl Layouts {
    fn for_array(&self, path: &str) -> &Layout {
        self.per_array.get(path).unwrap_or(&self.default)
    }
}

/// One array to convert.
#[derive(Debug)]
pub struct PlannedArray {
    pub path: String,
    pub source: ArrayMeta,
    pub geometry: ShardGeometry,
    pub output: ShardedArrayMetadata,
    /// Source chunks are copied as encoded (see [`passthrough_applies`]).
    pub passthrough: bool,
    job_parts: (zshard_core::CodecChain, zshard_core::CodecChain),
}

impl PlannedArray {
    /// How its source chunks become shards, for the pipeline and its memory model.
    pub fn layout(&self) -> ArrayLayout {
        ArrayLayout {
            geometry: self.geometry.clone(),
            source_repr: self.source.chunk_repr(),
            inner_repr: ChunkRepr {
                shape: self.output.inner_shape.clone(),
                data_type: self.output.data_type,
                fill_value: self.output.fill_value.clone(),
            },
            passthrough: self.passthrough,
        }
    }
}

/// Everything a conversion will do.
#[derive(Debug)]
pub struct Plan {
    pub arrays: Vec<PlannedArray>,
    /// Groups by path, with their attributes.
    pub groups: Vec<(String, Map<String, Value>)>,
}

/// The name of the array at `path` in messages: its path in the hierarchy, or the source's location
/// when the source is a single array.
pub fn array_name(source: &str, path: &str) -> String {
    if path.is_empty() {
        source.to_string()
    } else {
        path.to_string()
    }
}

impl Plan {
    pub fn new(nodes: &[Node], layouts: &Layouts, source: &str) -> anyhow::Result<Plan> {
        let mut arrays = Vec::new();
        let mut groups = Vec::new();
        for node in nodes {
            match &node.kind {
                NodeKind::Group { attributes } => {
                    groups.push((node.path.clone(), attributes.clone()))
                }
                NodeKind::Array(meta) => arrays.push(
                    plan_array(&node.path, meta, layouts.for_array(&node.path))
                        .with_context(|| format!("array {}", array_name(source, &node.path)))?,
                ),
            }
        }
        if let Some(unknown) = layouts
            .per_array
            .keys()
            .find(|p| !arrays.iter().any(|a| &a.path == *p))
        {
            bail!("array {unknown:?} has its own settings but is not an array of {source}");
        }
        Ok(Plan { arrays, groups })
    }

    /// The layout of each array, for the memory model.
    pub fn layouts(&self) -> Vec<ArrayLayout> {
        self.arrays.iter().map(PlannedArray::layout).collect()
    }

    /// The pipeline jobs, reading from `source` and writing below `destination`.
    pub fn jobs(&self, source: &crate::source::Input, destination: &Store) -> Vec<ArrayJob> {
        self.arrays
            .iter()
            .map(|a| {
                let writer = ShardWriter::new(destination.child(&a.path), a.output.index_location);
                ArrayJob {
                    name: array_name(&source.url(), &a.path),
                    layout: a.layout(),
                    source_chain: a.job_parts.0.clone(),
                    inner_chain: Some(a.job_parts.1.clone()),
                    reader: source.reader(&a.path, &a.source),
                    sink: Arc::new(writer),
                }
            })
            .collect()
    }
}

/// The inner chunk shape of an already sharded source, which is the natural default for the output.
fn source_inner_shape(meta: &ArrayMeta) -> Option<Vec<u64>> {
    // Only when sharding comes first: after a transpose its chunk shape is in permuted axis order.
    let sharding = meta
        .codecs
        .first()
        .filter(|c| c.name == "sharding_indexed")?;
    sharding
        .get("chunk_shape")?
        .as_array()?
        .iter()
        .map(Value::as_u64)
        .collect()
}

fn check_rank(what: &str, shape: &[u64], meta: &ArrayMeta) -> anyhow::Result<()> {
    if shape.len() != meta.shape.len() {
        bail!(
            "{what} {shape:?} has {} dimensions, but the array has {} (shape {:?})",
            shape.len(),
            meta.shape.len(),
            meta.shape
        );
    }
    Ok(())
}

fn plan_array(path: &str, meta: &ArrayMeta, layout: &Layout) -> anyhow::Result<PlannedArray> {
    let inner_shape = match &layout.chunk_shape {
        Some(shape) => {
            check_rank("--chunk-shape", shape, meta)?;
            shape.clone()
        }
        None => source_inner_shape(meta).unwrap_or_else(|| meta.chunk_shape.clone()),
    };
    let shard_shape = match &layout.shard_shape {
        Some(shape) => {
            check_rank("--shard-shape", shape, meta)?;
            shape.clone()
        }
        None => auto_shard_shape(&meta.shape, &inner_shape, meta.data_type.size()),
    };
    let geometry =
        ShardGeometry::new(&meta.shape, &shard_shape, &inner_shape).map_err(|e| anyhow!("{e}"))?;
    let size = meta.data_type.size();
    zshard_core::checked_byte_size("shard shape", &shard_shape, size)
        .map_err(|e| anyhow!("{e}"))?;
    zshard_core::checked_byte_size("inner chunk shape", &inner_shape, size)
        .map_err(|e| anyhow!("{e}"))?;
    let source_chain = build_chain(&meta.codecs, &meta.chunk_repr()).context("source codecs")?;
    let inner_codecs = layout.compressor.inner_codecs(meta.data_type);
    let inner_repr = ChunkRepr {
        shape: inner_shape.clone(),
        data_type: meta.data_type,
        fill_value: meta.fill_value.clone(),
    };
    let inner_chain = build_chain(&inner_codecs, &inner_repr).context("output codecs")?;
    let passthrough =
        layout.passthrough && passthrough_applies(meta, &inner_shape, &source_chain, &inner_chain);
    let output = ShardedArrayMetadata {
        shape: meta.shape.clone(),
        data_type: meta.data_type,
        fill_value: meta.fill_value.clone(),
        shard_shape,
        inner_shape,
        inner_codecs: inner_chain.specs(),
        index_location: layout.index_location,
        attributes: meta.attributes.clone(),
        dimension_names: meta.dimension_names.clone(),
    };
    Ok(PlannedArray {
        path: path.to_string(),
        source: meta.clone(),
        geometry,
        output,
        passthrough,
        job_parts: (source_chain, inner_chain),
    })
}

/// Whether source chunks can be copied as inner chunks without decoding: the same chunk shape (so one
/// source chunk is one inner chunk, edge chunks included, which both formats store whole) and the same
/// codec chain, configuration for configuration, for the same data type. A source stored in the
/// `sharding_indexed` codec has shard-sized chunks and never qualifies.
fn passthrough_applies(
    meta: &ArrayMeta,
    inner_shape: &[u64],
    source_chain: &zshard_core::CodecChain,
    inner_chain: &zshard_core::CodecChain,
) -> bool {
    meta.chunk_shape == inner_shape && source_chain.specs() == inner_chain.specs()
}
