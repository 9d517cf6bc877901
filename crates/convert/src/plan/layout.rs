//! Turning a source hierarchy and the layout options into a checked plan. Everything `convert` can
//! reject is rejected here, before anything is written.

use std::sync::Arc;

use serde_json::{Map, Value};
use zshard_codecs::build_chain;
use zshard_core::{ArrayMeta, ChunkRepr, IndexLocation, Node, NodeKind, Setting, ShardGeometry};
use zshard_pipeline::{ArrayJob, ArrayLayout};
use zshard_store::Store;
use zshard_writer::{ShardWriter, ShardedArrayMetadata};

use crate::compressor::Compressor;
use crate::error::{one_line, Error, Result};
use crate::plan::input::{Input, OnUnsupported, SkippedArray};
use crate::plan::shape::{
    check_names_known, given_extents, inner_shape_of, shard_shape_of, ShapeSpec,
};

/// Options that shape the output of an array.
#[derive(Debug, Clone, PartialEq)]
pub struct Layout {
    /// Shard shape; `None`, and the dimensions a shape by name leaves out, are chosen (see
    /// [`auto_shard_shape_around`]).
    pub shard_shape: Option<ShapeSpec>,
    /// Inner chunk shape; `None`, and the dimensions a shape by name leaves out, keep the source's
    /// chunk (or inner chunk) shape.
    pub chunk_shape: Option<ShapeSpec>,
    /// The inner chunks' codecs.
    pub compressor: Compressor,
    /// Where each shard's index goes.
    pub index_location: IndexLocation,
    /// Copy source chunks without decoding where they are already encoded as the output's inner chunks.
    pub passthrough: bool,
}

impl Default for Layout {
    /// Automatic shapes, zstd level 3, the index at the end, passthrough where it applies.
    fn default() -> Self {
        Layout {
            shard_shape: None,
            chunk_shape: None,
            compressor: Compressor::DEFAULT,
            index_location: IndexLocation::End,
            passthrough: true,
        }
    }
}

/// The layout of every array: one default, and overrides by array path (from job files).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Layouts {
    /// The layout of arrays without their own.
    pub default: Layout,
    /// Layouts of single arrays, by path in the hierarchy.
    pub per_array: std::collections::BTreeMap<String, Layout>,
    /// Shapes of the levels of multiscale (OME-Zarr) pyramids, by level (0: full resolution), for
    /// every pyramid of the hierarchy. Levels without their own get shapes derived from the first
    /// level's (see [`zshard_core::level_shapes`]); an array's own layout in `per_array` wins.
    pub per_level: std::collections::BTreeMap<usize, LevelShapes>,
    /// Arrays of `per_array` whose shapes there are the ones given for the whole conversion (as
    /// `finalize` completes the options given with each array's recorded layout), not their own:
    /// as in `default`, `--level-shapes` and the derivation from the first level decide a pyramid
    /// level's shapes; the rest of its layout (compressor, index location) stays its own.
    pub shapes_given_to_all: std::collections::BTreeSet<String>,
}

/// The shapes of one pyramid level (the `level_shapes` setting).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LevelShapes {
    /// The level's shard shape.
    pub shard_shape: Vec<u64>,
    /// Its inner chunk shape; `None`: the first level's, within the level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_shape: Option<Vec<u64>>,
}

impl From<Layout> for Layouts {
    fn from(default: Layout) -> Self {
        Layouts {
            default,
            ..Layouts::default()
        }
    }
}

impl Layouts {
    fn for_array(&self, path: &str) -> &Layout {
        self.per_array.get(path).unwrap_or(&self.default)
    }

    /// Whether the array at `path` has shapes of its own (see [`Layouts::shapes_given_to_all`]).
    fn own_shapes(&self, path: &str) -> bool {
        self.per_array.contains_key(path) && !self.shapes_given_to_all.contains(path)
    }

    /// Refuses shapes by dimension name that name a dimension no array they apply to has: the
    /// default layout's against every array of the source, an array's own against that array.
    fn check_dimension_names(&self, arrays: &[PlannedArray], source: &str) -> Result<()> {
        let metas = || arrays.iter().map(|a| &a.source);
        for (option, spec) in self.default.shapes() {
            check_names_known(option, spec, metas(), &format!("any array of {source}"))?;
        }
        for (path, layout) in &self.per_array {
            let own = || arrays.iter().filter(|a| &a.path == path).map(|a| &a.source);
            for (option, spec) in layout.shapes() {
                check_names_known(option, spec, own(), &format!("the array {path:?}"))?;
            }
        }
        Ok(())
    }
}

impl Layout {
    /// The shapes it gives, with the setting that gives each.
    fn shapes(&self) -> impl Iterator<Item = (Setting, &ShapeSpec)> {
        [
            (Setting::ShardShape, self.shard_shape.as_ref()),
            (Setting::ChunkShape, self.chunk_shape.as_ref()),
        ]
        .into_iter()
        .filter_map(|(option, spec)| spec.map(|s| (option, s)))
    }
}

/// One array to convert.
#[derive(Debug)]
pub struct PlannedArray {
    /// Path in the hierarchy (empty for a single array).
    pub path: String,
    /// The source array.
    pub source: ArrayMeta,
    /// Shards and inner chunks of the output.
    pub geometry: ShardGeometry,
    /// The output's `zarr.json`.
    pub output: ShardedArrayMetadata,
    /// Source chunks are copied as encoded (same chunk shape and codec chain as the output).
    pub passthrough: bool,
    /// With `--compressor source`: why the source's codecs could not be kept (the default was used).
    pub compressor_fallback: Option<String>,
    /// The multiscale pyramid it is a level of, if any.
    pub level: Option<PyramidLevel>,
    job_parts: (zshard_core::CodecChain, zshard_core::CodecChain),
}

impl PlannedArray {
    /// How its source chunks become shards, for the pipeline and its memory model.
    pub fn layout(&self) -> ArrayLayout {
        ArrayLayout {
            geometry: self.geometry.clone(),
            source_repr: self.source.chunk_repr(),
            source_grid: self.source.rectilinear.clone(),
            inner_repr: ChunkRepr {
                shape: self.output.inner_shape.clone(),
                data_type: self.output.data_type,
                fill_value: self.output.fill_value.clone(),
            },
            passthrough: self.passthrough,
        }
    }
}

/// Where an array sits in a multiscale pyramid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PyramidLevel {
    /// The image's group.
    pub group: String,
    /// The level (0: full resolution).
    pub level: usize,
}

/// Every array and group a conversion writes, checked.
#[derive(Debug)]
pub struct Plan {
    /// Arrays in hierarchy order.
    pub arrays: Vec<PlannedArray>,
    /// Groups by path, with their attributes.
    pub groups: Vec<(String, Map<String, Value>)>,
    /// Files that are not Zarr nodes, copied as they are (a bioformats2raw layout's OME-XML), by key.
    pub files: Vec<(String, bytes::Bytes)>,
    /// What readers will find different from what they may expect, for the whole hierarchy.
    pub warnings: Vec<String>,
    /// Arrays left out because zshard does not read them (`--on-unsupported skip`).
    pub skipped: Vec<SkippedArray>,
    /// The pyramid this conversion makes from its source (`--pyramid`), if any.
    pub(crate) pyramid: Option<crate::plan::pyramid::Made>,
}

impl Plan {
    /// What the destination protocol knows of this plan: the output arrays and the groups,
    /// borrowed.
    pub fn outputs(&self) -> zshard_state::Outputs<'_> {
        zshard_state::Outputs {
            arrays: self
                .arrays
                .iter()
                .map(|a| zshard_state::OutputArray {
                    path: &a.path,
                    geometry: &a.geometry,
                    output: &a.output,
                })
                .collect(),
            groups: self.groups.iter().map(|(path, _)| path).collect(),
            owners: self
                .pyramid
                .as_ref()
                .map(|made| made.owners.clone())
                .unwrap_or_default(),
        }
    }
}

/// The name of the array at `path` in messages: its path in the hierarchy, or the source's location
/// when the source is a single array.
pub(crate) fn array_name(source: &str, path: &str) -> String {
    if path.is_empty() {
        source.to_string()
    } else {
        path.to_string()
    }
}

/// What names of zshard's own begin with: its state folder (`.zshard`) in a destination, the staging
/// folder (`.zshard-staging`) and records (`.zshard-chunks`, ...) of an Icechunk output. A node of that
/// name would be written where zshard keeps its state, and removed with it.
pub(crate) const RESERVED_PREFIX: &str = ".zshard";

/// The first segment of a node's path that zshard reserves, if any, with what it reserves it for:
/// names beginning with [`RESERVED_PREFIX`], and names of staged files (`NAME#<n>`, see
/// [`zshard_store::staged_base`]), which a run removes as leftovers of interrupted writes.
fn reserved_segment(path: &str) -> Option<(&str, &'static str)> {
    path.split('/').find_map(|segment| {
        if segment.starts_with(RESERVED_PREFIX) {
            Some((segment, "names starting with .zshard hold its state in the destination, where this node would be removed with it"))
        } else if zshard_store::staged_base(segment).is_some() {
            Some((segment, "a name ending in # and digits is that of a file staged by an interrupted write, which a run removes"))
        } else {
            None
        }
    })
}

impl Plan {
    /// Plans every array of `nodes` (the hierarchy of `source`) with its layout.
    /// With [`OnUnsupported::Skip`], an array whose source codecs zshard does not read is left out
    /// and listed in [`Plan::skipped`].
    ///
    /// Automatic shard shapes hold at most `auto_max_chunks` inner chunks (see
    /// [`auto_shard_shape_around`]).
    pub(crate) fn new(
        nodes: &[Node],
        layouts: &Layouts,
        source: &str,
        on_unsupported: OnUnsupported,
        auto_max_chunks: u64,
    ) -> Result<Plan> {
        for node in nodes {
            if let Some((name, why)) = reserved_segment(&node.path) {
                return Err(Error::ReservedName {
                    path: array_name(source, &node.path),
                    name: name.to_string(),
                    why,
                });
            }
        }
        let levels = level_layouts(nodes, layouts, source, auto_max_chunks)?;
        let mut arrays = Vec::new();
        let mut groups = Vec::new();
        let mut skipped = Vec::new();
        for node in nodes {
            match &node.kind {
                NodeKind::Group { attributes } => {
                    groups.push((node.path.clone(), attributes.clone()))
                }
                NodeKind::Array(meta) => {
                    let (layout, level) = match levels.get(&node.path) {
                        Some((layout, level)) => (layout, Some(level.clone())),
                        None => (layouts.for_array(&node.path), None),
                    };
                    let mut array = match plan_array(&node.path, meta, layout, auto_max_chunks) {
                        Ok(array) => array,
                        Err(
                            e @ Error::Codecs {
                                which: "source", ..
                            },
                        ) if on_unsupported == OnUnsupported::Skip => {
                            skipped.push(SkippedArray {
                                path: node.path.clone(),
                                reason: one_line(&e),
                            });
                            continue;
                        }
                        Err(e) => {
                            return Err(Error::Array {
                                array: array_name(source, &node.path),
                                source: Box::new(e),
                            })
                        }
                    };
                    array.level = level;
                    arrays.push(array);
                }
            }
        }
        if let Some(unknown) = layouts.per_array.keys().find(|p| {
            !arrays.iter().any(|a| &a.path == *p) && !skipped.iter().any(|s| &s.path == *p)
        }) {
            return Err(Error::Options {
                reason: format!(
                    "array {unknown:?} has its own settings but is not an array of {source}"
                ),
            });
        }
        layouts.check_dimension_names(&arrays, source)?;
        Ok(Plan {
            arrays,
            groups,
            files: Vec::new(),
            warnings: Vec::new(),
            skipped,
            pyramid: None,
        })
    }

    /// The layout of each array, for the memory model.
    pub fn layouts(&self) -> Vec<ArrayLayout> {
        self.arrays.iter().map(PlannedArray::layout).collect()
    }

    /// The pipeline jobs, reading from `source` and writing below `destination`.
    pub(crate) fn jobs(&self, source: &Input, destination: &Store) -> Vec<ArrayJob> {
        self.jobs_into(source, |a| {
            Arc::new(ShardWriter::new(
                destination.child(&a.path),
                a.output.index_location,
            ))
        })
    }

    /// The pipeline jobs reading from `source`, each array's shards going to `sink(array)`.
    fn jobs_into(
        &self,
        source: &Input,
        sink: impl Fn(&PlannedArray) -> Arc<dyn zshard_core::ShardSink>,
    ) -> Vec<ArrayJob> {
        self.arrays
            .iter()
            .map(|a| {
                let (reader, derived) = self.reader(source, a);
                ArrayJob {
                    name: array_name(&source.url(), &a.path),
                    layout: a.layout(),
                    source_chain: a.job_parts.0.clone(),
                    inner_chain: Some(a.job_parts.1.clone()),
                    reader,
                    sink: sink(a),
                    derived,
                    previous: None,
                    hash_copied: true,
                }
            })
            .collect()
    }

    /// The path in the source that `array` is read from: its own, but a pyramid's level 0's is
    /// the array the pyramid is made from.
    pub(crate) fn source_path<'a>(&'a self, array: &'a PlannedArray) -> &'a str {
        match &self.pyramid {
            Some(made) if made.levels.first() == Some(&array.path) => &made.source_path,
            _ => &array.path,
        }
    }

    /// Where the array's chunks come from: its source's reader, or, for a level of a pyramid this
    /// conversion makes, the level above (and a reader that is never asked).
    fn reader(
        &self,
        source: &Input,
        array: &PlannedArray,
    ) -> (
        Arc<dyn zshard_core::ChunkReader>,
        Option<zshard_pipeline::Derived>,
    ) {
        let Some(made) = &self.pyramid else {
            return (source.reader(&array.path, &array.source), None);
        };
        match made.levels.iter().position(|l| *l == array.path) {
            Some(0) => (source.reader(&made.source_path, &array.source), None),
            Some(level) => {
                let above = &made.levels[level - 1];
                let from = self.arrays.iter().position(|a| &a.path == above);
                let derived = from.map(|from| zshard_pipeline::Derived {
                    from,
                    reduction: made.reduction,
                    factors: made.factors.clone(),
                    masked: made.masked.clone(),
                });
                (Arc::new(MadeFromAbove), derived)
            }
            None => (source.reader(&array.path, &array.source), None),
        }
    }
}

/// A sink of jobs that only read: nothing is ever written to it. Its text follows a shard's
/// coordinate in messages (empty for a plan's cost estimate; finalize's " (read back)" for the
/// pyramid level it reads back, already written).
#[derive(Debug)]
pub(crate) struct NoSink(pub(crate) &'static str);

impl zshard_core::ShardSink for NoSink {
    fn shard_key(&self, shard: &[u64]) -> String {
        format!("{shard:?}{}", self.0)
    }

    fn write_shard(
        &self,
        _shard: &[u64],
        _inner: &[Option<bytes::Bytes>],
    ) -> zshard_core::Result<zshard_core::Stored> {
        Ok(zshard_core::Stored::NOTHING)
    }
}

impl Plan {
    /// The pipeline jobs reading from `source`, writing nowhere: what a plan asks its readers
    /// about the reads a run would make.
    pub(crate) fn read_jobs(&self, source: &Input) -> Vec<ArrayJob> {
        self.jobs_into(source, |_| Arc::new(NoSink("")))
    }
}

/// The reader of a pyramid level made from the level above: no task of a run names it, so it is
/// never asked for a chunk; it names no versions, so a pyramid's records say nothing of what its
/// shards were made from, and its reads cannot be planned.
#[derive(Debug)]
pub(crate) struct MadeFromAbove;

impl zshard_core::ChunkReader for MadeFromAbove {
    fn chunk_key(&self, coord: &[u64]) -> String {
        format!("{coord:?} (made from the level above)")
    }

    fn read_chunks(
        &self,
        coords: &[Vec<u64>],
        _max_len: u64,
    ) -> Vec<zshard_core::Result<Option<bytes::Bytes>>> {
        coords
            .iter()
            .map(|_| {
                Err(zshard_core::Error::InvalidGeometry {
                    reason: "a pyramid level is made from the level above, never read".into(),
                })
            })
            .collect()
    }

    fn planned_reads(
        &self,
        _coords: &[Vec<u64>],
        _max_len: u64,
    ) -> Option<zshard_core::PlannedReads> {
        None
    }
}

/// The inner chunk shape of level 0 of a pyramid made from the array `meta` (`--pyramid`):
/// `--level-shapes` for level 0, else the default layout's, else the source's.
pub(crate) fn first_level_inner(layouts: &Layouts, meta: &ArrayMeta) -> Result<Vec<u64>> {
    let layout = level_layout(layouts, "0", 0);
    inner_shape_of(layout.chunk_shape.as_ref(), meta)
}

/// The layout of every level of every multiscale pyramid of `nodes`, by array path, with where it
/// sits: an array's own layout, else its level's shapes from [`Layouts::per_level`], else (above the
/// first level) shapes derived from the first level's through the level's downsampling factors.
fn level_layouts(
    nodes: &[Node],
    layouts: &Layouts,
    source: &str,
    auto_max_chunks: u64,
) -> Result<std::collections::BTreeMap<String, (Layout, PyramidLevel)>> {
    let pyramids = zshard_zarr::ome::pyramids(nodes)?;
    let deepest = pyramids.iter().map(|p| p.levels.len()).max().unwrap_or(0);
    if let Some(level) = layouts.per_level.keys().find(|&&l| l >= deepest) {
        return Err(Error::Options {
            reason: format!(
                "{} gives shapes for pyramid level {level}, but {source} has {}",
                Setting::LevelShapes,
                match deepest {
                    0 => "no multiscale pyramid (OME-Zarr multiscales)".to_string(),
                    n => format!("levels 0 to {} only", n - 1),
                }
            ),
        });
    }
    // By path: a plate holds thousands of images.
    let arrays: std::collections::HashMap<&str, &ArrayMeta> = nodes
        .iter()
        .filter_map(|n| match &n.kind {
            NodeKind::Array(meta) => Some((n.path.as_str(), meta.as_ref())),
            NodeKind::Group { .. } => None,
        })
        .collect();
    let array = |path: &str| arrays.get(path).copied();
    let mut all = std::collections::BTreeMap::new();
    for pyramid in &pyramids {
        let Some((first, first_meta)) = pyramid
            .levels
            .first()
            .and_then(|l| Some((l, array(&l.path)?)))
        else {
            continue;
        };
        let first_layout = level_layout(layouts, &first.path, 0);
        // A first level whose shapes do not resolve is refused when it is planned.
        let Ok((first_shard, first_inner)) =
            resolved_shapes(first_meta, &first_layout, auto_max_chunks)
        else {
            continue;
        };
        for (index, level) in pyramid.levels.iter().enumerate() {
            let Some(meta) = array(&level.path) else {
                continue;
            };
            let mut layout = level_layout(layouts, &level.path, index);
            let own = layouts.own_shapes(&level.path);
            if index > 0 && !own && meta.shape.len() == first_meta.shape.len() {
                let factors = downsampling(first, first_meta, level, meta);
                let (shard, inner) =
                    zshard_core::level_shapes(&first_shard, &first_inner, &factors, &meta.shape);
                let given = layouts.per_level.get(&index);
                layout.shard_shape = Some(given.map_or(shard, |g| g.shard_shape.clone()).into());
                layout.chunk_shape = Some(
                    given
                        .and_then(|g| g.chunk_shape.clone())
                        .unwrap_or(inner)
                        .into(),
                );
            }
            let position = PyramidLevel {
                group: pyramid.group.clone(),
                level: index,
            };
            all.insert(level.path.clone(), (layout, position));
        }
    }
    Ok(all)
}

/// The layout of level `index` of a pyramid at `path` before any derivation: the array's own, else
/// (or when its shapes are those given to all) with the level's shapes from `--level-shapes`.
fn level_layout(layouts: &Layouts, path: &str, index: usize) -> Layout {
    let mut layout = layouts.for_array(path).clone();
    if layouts.own_shapes(path) {
        return layout;
    }
    if let Some(given) = layouts.per_level.get(&index) {
        layout.shard_shape = Some(given.shard_shape.clone().into());
        layout.chunk_shape = given.chunk_shape.clone().map(Into::into);
    }
    layout
}

/// How many first-level elements one element of `level` spans, per dimension: the ratio of the
/// levels' `scale` transformations when both give one, else of their extents.
fn downsampling(
    first: &zshard_zarr::ome::PyramidLevel,
    first_meta: &ArrayMeta,
    level: &zshard_zarr::ome::PyramidLevel,
    meta: &ArrayMeta,
) -> Vec<f64> {
    let rank = meta.shape.len();
    let scales = match (&first.scale, &level.scale) {
        (Some(a), Some(b)) if a.len() == rank && b.len() == rank => Some((a, b)),
        _ => None,
    };
    (0..rank)
        .map(|d| match scales {
            Some((a, b)) if a[d] > 0.0 => b[d] / a[d],
            _ => first_meta.shape[d] as f64 / meta.shape[d].max(1) as f64,
        })
        .collect()
}

/// The shard and inner chunk shapes `layout` gives the array `meta`, checked against its rank.
fn resolved_shapes(
    meta: &ArrayMeta,
    layout: &Layout,
    auto_max_chunks: u64,
) -> Result<(Vec<u64>, Vec<u64>)> {
    let mut inner_shape = inner_shape_of(layout.chunk_shape.as_ref(), meta)?;
    // The source's chunk is the default inner chunk only where it fits the shard given: an xarray
    // dataset stores each 1-D coordinate as one chunk (a `time` of 8,760), which `time=48` would
    // otherwise refuse (issue 44: the docs' example). Cut to the shard, it is rechunked.
    let chunks_given = given_extents(Setting::ChunkShape, layout.chunk_shape.as_ref(), meta)?;
    let shards_given = given_extents(Setting::ShardShape, layout.shard_shape.as_ref(), meta)?;
    for ((inner, chunk), shard) in inner_shape.iter_mut().zip(&chunks_given).zip(&shards_given) {
        if let (None, Some(shard)) = (chunk, shard) {
            *inner = (*inner).min(*shard);
        }
    }
    let shard_shape = shard_shape_of(
        layout.shard_shape.as_ref(),
        meta,
        &inner_shape,
        auto_max_chunks,
    )?;
    Ok((shard_shape, inner_shape))
}

fn plan_array(
    path: &str,
    meta: &ArrayMeta,
    layout: &Layout,
    auto_max_chunks: u64,
) -> Result<PlannedArray> {
    let (shard_shape, inner_shape) = resolved_shapes(meta, layout, auto_max_chunks)?;
    let geometry = ShardGeometry::new(&meta.shape, &shard_shape, &inner_shape)?;
    let size = meta.data_type.size();
    zshard_core::checked_byte_size("shard shape", &shard_shape, size)?;
    zshard_core::checked_byte_size("inner chunk shape", &inner_shape, size)?;
    let source_chain =
        build_chain(&meta.codecs, &meta.chunk_repr()).map_err(|source| Error::Codecs {
            which: "source",
            source,
        })?;
    let (inner_codecs, mut compressor_fallback) = layout.compressor.for_array(meta);
    let inner_chain = match inner_chain(meta, &inner_shape, &inner_codecs, "output") {
        // The source's own chain may not fit other inner chunks (a `reshape` to fixed sizes):
        // `--compressor source` then writes the default, as for any chain it cannot keep.
        Err(problem)
            if layout.compressor == Compressor::Source && compressor_fallback.is_none() =>
        {
            let default = Compressor::DEFAULT.inner_codecs(meta.data_type);
            compressor_fallback = Some(format!(
                "the source's codecs do not fit inner chunks of shape {inner_shape:?} ({}); written with the default {} instead",
                one_line(&problem),
                Compressor::DEFAULT
            ));
            inner_chain(meta, &inner_shape, &default, "output")?
        }
        other => other?,
    };
    let passthrough =
        layout.passthrough && passthrough_applies(meta, &inner_shape, &source_chain, &inner_chain);
    tracing::debug!(
        target: "zshard_convert::plan",
        array = path,
        passthrough,
        allowed = layout.passthrough,
        source_chunks = ?meta.chunk_shape,
        inner_chunks = ?inner_shape,
        same_codecs = source_chain.specs() == inner_chain.specs(),
        "passthrough decision"
    );
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
        compressor_fallback,
        level: None,
        job_parts: (source_chain, inner_chain),
    })
}

/// The codec chain of inner chunks of `shape` of the array `meta`, built from `codecs` (`which` says
/// whose codecs they are in errors).
pub(crate) fn inner_chain(
    meta: &ArrayMeta,
    shape: &[u64],
    codecs: &[zshard_core::CodecSpec],
    which: &'static str,
) -> Result<zshard_core::CodecChain> {
    let repr = ChunkRepr {
        shape: shape.to_vec(),
        data_type: meta.data_type,
        fill_value: meta.fill_value.clone(),
    };
    build_chain(codecs, &repr).map_err(|source| Error::Codecs { which, source })
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
    meta.rectilinear.is_none()
        && meta.chunk_shape == inner_shape
        && source_chain.specs() == inner_chain.specs()
}

impl Plan {
    /// What readers will see differently in the output than in the source, and where `--compressor
    /// source` could not keep the source's codecs: one message per thing, naming the array.
    pub(crate) fn reader_warnings(&self, source: &str) -> Vec<String> {
        let hierarchy = self.warnings.iter().map(|w| format!("{source}: {w}"));
        hierarchy
            .chain(self.arrays.iter().flat_map(|array| {
                let name = array_name(source, &array.path);
                array
                    .source
                    .warnings
                    .iter()
                    .chain(&array.compressor_fallback)
                    .map(move |warning| format!("array {name}: {warning}"))
            }))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::shape::check_shape;
    use serde_json::json;
    use zshard_core::{ChunkKeyEncoding, CodecSpec, DataType, FillValue};

    #[test]
    fn names_of_zshard_state_are_reserved_at_every_depth() {
        assert_eq!(reserved_segment(".zshard").map(|r| r.0), Some(".zshard"));
        assert_eq!(
            reserved_segment("g/zarr.json#1/a").map(|r| r.0),
            Some("zarr.json#1")
        );
        assert_eq!(
            reserved_segment("g/.zshard-staging/a").map(|r| r.0),
            Some(".zshard-staging")
        );
        assert_eq!(reserved_segment(""), None);
        assert_eq!(reserved_segment("g/zshard/a.zshard"), None);
    }

    fn meta(shape: &[u64]) -> ArrayMeta {
        ArrayMeta {
            shape: shape.to_vec(),
            data_type: DataType::UInt8,
            fill_value: FillValue::zero(DataType::UInt8),
            chunk_shape: vec![32, 32],
            codecs: vec![CodecSpec::new("bytes", json!({}))],
            chunk_key_encoding: ChunkKeyEncoding::Default { separator: '/' },
            attributes: Map::new(),
            dimension_names: None,
            rectilinear: None,
            sharded: None,
            warnings: Vec::new(),
        }
    }

    /// Issue 44, point 8: the hint for shapes by name is in the syntax of the front end in use
    /// (Python was told `shard_shape=latitude=73`).
    #[test]
    fn the_by_name_hint_is_in_the_front_ends_syntax() {
        let mut latitude = meta(&[73]);
        latitude.chunk_shape = vec![73];
        latitude.dimension_names = Some(vec![Some("latitude".into())]);
        let hint = |spelling| {
            zshard_core::setting::spelled(spelling, || {
                check_shape(Setting::ShardShape, &[48, 73], &latitude)
                    .expect_err("rank")
                    .to_string()
            })
        };
        use zshard_core::setting::Spelling;
        let python = hint(Spelling::Keyword);
        assert!(
            python.ends_with(r#"e.g. shard_shape={"latitude": 73}"#),
            "{python}"
        );
        let flag = hint(Spelling::Flag);
        assert!(flag.ends_with("e.g. --shard-shape latitude=73"), "{flag}");
        let job = hint(Spelling::JobKey);
        assert!(
            job.ends_with("e.g. shard_shape = { latitude = 73 }"),
            "{job}"
        );
    }

    /// Issue 44: the docs' `time=48` on an xarray dataset, whose `time` coordinate is one chunk of
    /// 96: its inner chunk is cut to the shard (it was refused: "inner chunk shape [96] does not
    /// divide shard shape [48]"); a chunk shape given, or a source chunk that fits, stays.
    #[test]
    fn a_source_chunk_larger_than_the_shard_given_is_cut_to_it() {
        let mut time = meta(&[96]);
        time.chunk_shape = vec![96];
        time.dimension_names = Some(vec![Some("time".into())]);
        let time = time;
        let layout = |shard: &str, chunk: Option<&str>| Layout {
            shard_shape: Some(shard.parse().expect("shape")),
            chunk_shape: chunk.map(|c| c.parse().expect("shape")),
            ..Layout::default()
        };
        let resolve =
            |meta: &ArrayMeta, l: &Layout| resolved_shapes(meta, l, u64::MAX).expect("shapes");
        let shapes = |l: &Layout| resolve(&time, l);
        assert_eq!(shapes(&layout("time=48", None)), (vec![48], vec![48]));
        assert_eq!(shapes(&layout("48", None)), (vec![48], vec![48]));
        assert_eq!(
            shapes(&layout("time=48", Some("time=24"))),
            (vec![48], vec![24])
        );
        // A chunk shape given is kept, and refused if it does not fit.
        let given = layout("time=48", Some("time=96"));
        let (shard, inner) = shapes(&given);
        assert!(ShardGeometry::new(&time.shape, &shard, &inner).is_err());
        // A source chunk that fits the shard stays.
        let mut fits = time.clone();
        fits.chunk_shape = vec![24];
        assert_eq!(
            resolve(&fits, &layout("time=48", None)),
            (vec![48], vec![24])
        );
    }

    fn level(scale: Option<Vec<f64>>) -> zshard_zarr::ome::PyramidLevel {
        zshard_zarr::ome::PyramidLevel {
            path: "1".into(),
            scale,
        }
    }

    #[test]
    fn downsampling_comes_from_the_scales_else_from_the_shapes() {
        let (first, half) = (meta(&[256, 200]), meta(&[128, 100]));
        let by_scale = downsampling(
            &level(Some(vec![0.5, 0.5])),
            &first,
            &level(Some(vec![2.0, 1.0])),
            &half,
        );
        assert_eq!(by_scale, vec![4.0, 2.0]);
        // No scales (or of another rank): the ratio of the extents.
        assert_eq!(
            downsampling(&level(None), &first, &level(Some(vec![2.0])), &half),
            vec![2.0, 2.0]
        );
    }

    #[test]
    fn a_level_without_a_pyramid_is_refused() {
        let nodes = vec![Node {
            path: String::new(),
            kind: NodeKind::Array(Box::new(meta(&[64, 64]))),
        }];
        let mut layouts = Layouts::default();
        layouts.per_level.insert(
            1,
            LevelShapes {
                shard_shape: vec![64, 64],
                chunk_shape: None,
            },
        );
        let error = zshard_core::setting::spelled(zshard_core::Spelling::Flag, || {
            Plan::new(
                &nodes,
                &layouts,
                "a.zarr",
                OnUnsupported::Refuse,
                zshard_core::AUTO_SHARD_MAX_CHUNKS,
            )
            .expect_err("no pyramid")
            .to_string()
        });
        assert!(
            error.contains("--level-shapes gives shapes for pyramid level 1, but a.zarr has no multiscale pyramid"),
            "{error}"
        );
    }
}
