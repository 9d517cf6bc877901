//! Verification: decodes the source and the output and compares every element (or a sample
//! of shards), checking every output shard's index on the way: checksum, offsets and lengths inside the
//! object, no overlapping inner chunks. The source side is the conversion pipeline itself, with raw
//! inner chunks going to a sink that compares instead of writing.

use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};
use zshard_codecs::build_chain;
use zshard_core::{
    linear_index, ArrayMeta, ChunkRepr, CodecChain, IndexEncoding, IndexLocation, Node, NodeKind,
    ShardGeometry,
};
use zshard_pipeline::{ArrayJob, ArrayLayout, BudgetRequest, Derived, ShardTask};
use zshard_store::{IoRuntime, Location, Store, StoreOptions};
use zshard_zarr::open_hierarchy;

use super::extras::{extra_objects, stale_consolidated_entries};
use super::sink::VerifySink;
use crate::error::{one_line, Error, Result};
use crate::plan::input::{Input, OnUnsupported, ReadOptions, SkippedArray};
use crate::plan::pyramid::Made;
use crate::plan::{array_name, inner_chain, MadeFromAbove};
use crate::Conversion;
use zshard_state::join;

/// How many mismatches are kept one by one; the rest are counted.
const KEPT: usize = 50;

/// Mismatches found: how many, and the first 50 in full, so that a thoroughly broken output
/// cannot exhaust memory.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Mismatches {
    /// Differences found (elements, shard indexes, stray objects, metadata).
    #[serde(rename = "mismatch_count")]
    pub count: usize,
    /// The first differences, one message each, naming the shard key and inner chunk.
    #[serde(rename = "mismatches")]
    pub first: Vec<String>,
}

impl Mismatches {
    pub(crate) fn push(&mut self, message: String) {
        self.count += 1;
        if self.first.len() < KEPT {
            self.first.push(message);
        }
    }
}

/// The layout of one sharded output array, read from its `zarr.json`.
pub(crate) struct OutputArray {
    meta: ArrayMeta,
    pub(crate) inner_shape: Vec<u64>,
    pub(crate) inner_chain: CodecChain,
    pub(crate) index_location: IndexLocation,
    pub(crate) index_encoding: IndexEncoding,
}

pub(crate) fn output_array(meta: ArrayMeta) -> Result<OutputArray> {
    let config = match (meta.codecs.len(), meta.sharding()) {
        (1, Some(config)) => config?,
        _ => {
            return Err(Error::Layout {
                reason: "is not a sharded array (its only codec must be sharding_indexed)".into(),
            })
        }
    };
    let index_location = config.index_location;
    let index_encoding = config.index_encoding()?;
    let (inner_shape, inner_codecs) = (config.chunk_shape, config.codecs);
    let inner_chain = inner_chain(&meta, &inner_shape, &inner_codecs, "inner")?;
    Ok(OutputArray {
        meta,
        inner_shape,
        inner_chain,
        index_location,
        index_encoding,
    })
}

/// A deterministic sample: shard `index` of array `array` is checked with probability `fraction`.
fn sampled(array: usize, index: u64, fraction: f64) -> bool {
    if fraction >= 1.0 {
        return true;
    }
    // splitmix64 of the pair: uniform, and the same shards on every run.
    let mut z = index ^ ((array as u64) << 48) ^ 0x9e37_79b9_7f4a_7c15;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z as f64 / u64::MAX as f64) < fraction
}

fn arrays(nodes: Vec<Node>) -> Vec<(String, ArrayMeta)> {
    nodes
        .into_iter()
        .filter_map(|n| match n.kind {
            NodeKind::Array(meta) => Some((n.path, *meta)),
            NodeKind::Group { .. } => None,
        })
        .collect()
}

fn groups(nodes: Vec<Node>) -> Vec<(String, Map<String, Value>)> {
    nodes
        .into_iter()
        .filter_map(|n| match n.kind {
            NodeKind::Group { attributes } => Some((n.path, attributes)),
            NodeKind::Array(_) => None,
        })
        .collect()
}

/// What a reader uses to interpret the values, where the output differs from the source: shape, data
/// type, fill value (both as decoded), dimension names and user attributes (`_FillValue`,
/// `scale_factor`, `units`, ...), each named with both values. Both sides are as zshard reads them:
/// a v2 source's `_ARRAY_DIMENSIONS` attribute is its dimension names, as the conversion writes them.
fn metadata_differences(what: &str, source: &ArrayMeta, output: &ArrayMeta) -> Vec<String> {
    let mut differences = Vec::new();
    let mut differ = |field: &str, source: String, output: String| {
        differences.push(format!(
            "{what}: {field} differs: source {source}, output {output}"
        ));
    };
    if source.shape != output.shape {
        differ(
            "shape",
            format!("{:?}", source.shape),
            format!("{:?}", output.shape),
        );
    }
    if source.data_type != output.data_type {
        differ(
            "data_type",
            source.data_type.to_string(),
            output.data_type.to_string(),
        );
    }
    if source.fill_value != output.fill_value {
        differ(
            "fill_value",
            source.fill_value.to_v3_json(source.data_type).to_string(),
            output.fill_value.to_v3_json(output.data_type).to_string(),
        );
    }
    if source.dimension_names != output.dimension_names {
        let show = |names: &Option<Vec<Option<String>>>| {
            names.as_ref().map_or_else(
                || "none".to_string(),
                |n| Value::from(n.clone()).to_string(),
            )
        };
        differ(
            "dimension_names",
            show(&source.dimension_names),
            show(&output.dimension_names),
        );
    }
    differences.extend(attribute_differences(
        what,
        &source.attributes,
        &output.attributes,
    ));
    differences
}

/// Attributes missing, added or changed in the output, by name with both values.
fn attribute_differences(
    what: &str,
    source: &Map<String, Value>,
    output: &Map<String, Value>,
) -> Vec<String> {
    let show = |value: Option<&Value>| value.map_or_else(|| "absent".to_string(), Value::to_string);
    let names = source
        .keys()
        .chain(output.keys().filter(|k| !source.contains_key(*k)));
    names
        .filter(|name| source.get(*name) != output.get(*name))
        .map(|name| {
            format!(
                "{what}: attribute {name:?} differs: source {}, output {}",
                show(source.get(name)),
                show(output.get(name))
            )
        })
        .collect()
}

/// A comparison of an output with its source: every element (or a sample of shards), and every
/// output shard's index.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Verification {
    /// The source that was converted.
    pub source: String,
    /// The sharded Zarr v3 output.
    pub destination: String,
    /// How the source is read.
    pub source_options: ReadOptions,
    /// How storage is reached.
    pub store_options: StoreOptions,
    /// Threads fetching chunks and reading shards, each (see [`Conversion::io_threads`](crate::Conversion)).
    pub io_threads: Option<usize>,
    /// Check only this fraction of shards (a deterministic sample), in (0, 1].
    pub sample: f64,
    /// Worker threads per CPU stage.
    pub threads: usize,
    /// What the conversion did with OME-Zarr metadata (the source is compared as it was written).
    pub ome: zshard_zarr::ome::OmeMetadata,
    /// Estimated peak memory not to exceed, in bytes; `None`: as a conversion's default (half of
    /// the machine's or the cgroup's memory). Shards are compared in parts sized to fit it.
    pub memory_limit: Option<u64>,
}

/// What a verification found (as a document: what Python's `zshard.verify` reads).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Verified {
    /// The output compared.
    pub destination: String,
    /// Shards compared element by element (all, or the sample).
    pub shards_checked: u64,
    /// Arrays compared.
    pub arrays: usize,
    /// Differences: none means every element equals the source and every index is valid.
    #[serde(flatten)]
    pub mismatches: Mismatches,
    /// Requests made for a kerchunk reference set (none for other inputs): logged, not a result.
    #[serde(skip)]
    pub reference_reads: Option<zshard_kerchunk::ReadStats>,
    /// Source arrays zshard does not read, which a conversion skips (`--on-unsupported skip`) or
    /// refuses: not compared, and not a mismatch.
    pub skipped_arrays: Vec<SkippedArray>,
    /// Files in the output that are not part of its Zarr hierarchy (a `readme.txt` beside an
    /// array's metadata), by location: not a mismatch, since no reader sees them.
    pub warnings: Vec<String>,
}

impl Verification {
    /// A verification of every shard, with threads for every core.
    pub fn new(source: impl Into<String>, destination: impl Into<String>) -> Self {
        Verification {
            source: source.into(),
            destination: destination.into(),
            source_options: ReadOptions::default(),
            store_options: StoreOptions::default(),
            io_threads: None,
            sample: 1.0,
            threads: crate::threads::default_threads(),
            ome: Default::default(),
            memory_limit: None,
        }
    }

    /// The verification of what `conversion` writes, every shard: its source read as the conversion
    /// reads it (source and storage options, I/O threads, threads) and compared as it was written
    /// (`ome`). The one place a verification is derived from a conversion: every field is named
    /// here, so one added to [`Verification`] cannot be left out.
    pub fn of(conversion: &Conversion) -> Verification {
        Verification {
            source: conversion.source.clone(),
            destination: conversion.destination.clone(),
            source_options: conversion.source_options.clone(),
            store_options: conversion.store_options.clone(),
            io_threads: conversion.io_threads,
            sample: 1.0,
            threads: conversion.threads,
            ome: conversion.ome,
            memory_limit: conversion.memory_limit,
        }
    }

    /// Compares; an error means the comparison could not be made, mismatches are in the result.
    pub fn run(&self) -> Result<Verified> {
        verify(self)
    }
}

fn lock(mismatches: &Mutex<Mismatches>) -> Result<std::sync::MutexGuard<'_, Mismatches>> {
    mismatches.lock().map_err(|_| Error::Poisoned {
        what: "the mismatches",
    })
}

/// `zshard verify`, in steps: check the settings, open the source as it was converted and the
/// output, compare every array's metadata (making the jobs that compare its elements), the groups'
/// attributes and the objects besides them, then the elements.
fn verify(v: &Verification) -> Result<Verified> {
    let (threads, threads_warnings) = checked_threads(v)?;
    let (source_location, destination_location) = (
        Location::parse(&v.source)?,
        Location::parse(&v.destination)?,
    );
    let runtime = IoRuntime::with_options(2, v.store_options.clone())?;
    let src = Input::open(&source_location, &v.source_options, runtime.clone())?;
    let (source_nodes, mut skipped_arrays) = source_as_converted(v, &src)?;
    let dst = Store::open_location(&destination_location, runtime, false)?;
    let output_nodes = open_hierarchy(&dst)?;
    let mismatches = Arc::new(Mutex::new(Mismatches::default()));
    // A pyramid made while converting is compared with the pyramid this source makes.
    let (mut source_nodes, made, unmade) =
        super::pyramid::as_made(source_nodes, &output_nodes, &src.url());
    zshard_zarr::ome::finish(&mut source_nodes, v.ome)?;
    if let Some(unmade) = unmade {
        lock(&mismatches)?.push(unmade);
    }
    let outputs = arrays(output_nodes.clone());
    let mut jobs = Vec::new();
    // The path of each job's array, by job.
    let mut compared: Vec<String> = Vec::new();
    for (path, meta) in arrays(source_nodes.clone()) {
        let Some(origin) = origin(made.as_ref(), &path, &compared) else {
            // The level above is not compared (its shape or type differs, reported): there is
            // nothing to recompute this one from.
            continue;
        };
        match compare_array(
            &src,
            &dst,
            &outputs,
            path.clone(),
            meta,
            origin,
            &mismatches,
        )? {
            Compared::Job(job) => {
                jobs.push(*job);
                compared.push(path);
            }
            Compared::Skipped(skipped) => skipped_arrays.push(skipped),
            Compared::Done => {}
        }
    }
    compare_groups(&src, &dst, &source_nodes, &output_nodes, &mismatches)?;
    let mut warnings = compare_other_objects(
        &dst,
        &source_nodes,
        &output_nodes,
        &skipped_arrays,
        &mismatches,
    )?;
    warnings.extend(threads_warnings);
    let stats = compare_elements(
        v,
        &jobs,
        threads,
        &[&source_location, &destination_location],
    )?;
    let mismatches = std::mem::take(&mut *lock(&mismatches)?);
    Ok(Verified {
        destination: dst.url(""),
        shards_checked: stats.shards_written + stats.shards_empty,
        arrays: jobs.len(),
        mismatches,
        reference_reads: src.reference_reads(),
        skipped_arrays,
        warnings,
    })
}

/// The sample fraction and thread counts checked; the worker threads as capped, with a warning
/// when they or the I/O threads were.
fn checked_threads(v: &Verification) -> Result<(usize, Vec<String>)> {
    let sample = v.sample;
    if !(sample > 0.0 && sample <= 1.0) {
        return Err(Error::Options {
            reason: format!(
                "{} is not in (0, 1]",
                zshard_core::Setting::Sample.given(sample)
            ),
        });
    }
    crate::threads::check_threads(zshard_core::Setting::Threads, Some(v.threads))?;
    crate::threads::check_threads(zshard_core::Setting::IoThreads, v.io_threads)?;
    let (threads, warning) = crate::threads::capped_threads(v.threads);
    let io_warning = v
        .io_threads
        .and_then(|n| crate::threads::capped_io_threads(n).1);
    Ok((threads, warning.into_iter().chain(io_warning).collect()))
}

/// The source's nodes as the conversion wrote them: OME-Zarr 0.4 attributes in their 0.5 form.
/// Arrays zshard does not read were never converted: whatever `--on-unsupported` said, there is
/// nothing to compare them with (they are returned as skipped).
fn source_as_converted(v: &Verification, src: &Input) -> Result<(Vec<Node>, Vec<SkippedArray>)> {
    let skipping = ReadOptions {
        on_unsupported: OnUnsupported::Skip,
        ..v.source_options.clone()
    };
    let (mut source_nodes, skipped_arrays) = src.nodes_skipping(&skipping)?;
    zshard_zarr::ome::apply(&mut source_nodes, v.ome)?;
    Ok((source_nodes, skipped_arrays))
}

/// Where the elements an output array is compared with come from.
enum Origin {
    /// The source array at this path.
    Source(String),
    /// Level 0 of a pyramid made while converting: the source array at this path.
    Level0(String),
    /// A lower level of that pyramid, recomputed from the level above as the conversion made it.
    Below { level: usize, derived: Derived },
}

/// Where the elements of the array at `path` come from: the source, or, for a level of the pyramid
/// `made` below level 0, the job of the level above (`None` when that level is not compared).
fn origin(made: Option<&Made>, path: &str, compared: &[String]) -> Option<Origin> {
    let Some(made) = made else {
        return Some(Origin::Source(path.to_string()));
    };
    match made.levels.iter().position(|l| l == path) {
        None => Some(Origin::Source(path.to_string())),
        Some(0) => Some(Origin::Level0(made.source_path.clone())),
        Some(level) => {
            let above = made.levels.get(level - 1)?;
            let from = compared.iter().position(|p| p == above)?;
            Some(Origin::Below {
                level,
                derived: Derived {
                    from,
                    reduction: made.reduction,
                    factors: made.factors.clone(),
                    masked: made.masked.clone(),
                },
            })
        }
    }
}

/// What comparing one source array's metadata leaves to do.
enum Compared {
    /// Compare its elements with this job.
    Job(Box<ArrayJob>),
    /// Its codecs cannot be read: it was not converted.
    Skipped(SkippedArray),
    /// Nothing more (missing from the output, or its elements cannot be compared one for one).
    Done,
}

/// Compares the source array at `path` with its output among `outputs` (metadata differences go to
/// `mismatches`), and makes the job that compares their elements (read from `origin`).
fn compare_array(
    src: &Input,
    dst: &Store,
    outputs: &[(String, ArrayMeta)],
    path: String,
    meta: ArrayMeta,
    origin: Origin,
    mismatches: &Arc<Mutex<Mismatches>>,
) -> Result<Compared> {
    let name = array_name(&src.url(), &path);
    let source_chain = match build_chain(&meta.codecs, &meta.chunk_repr()) {
        Ok(chain) => chain,
        Err(source) => {
            return Ok(Compared::Skipped(SkippedArray {
                path: path.clone(),
                reason: one_line(&Error::Codecs {
                    which: "source",
                    source,
                }),
            }));
        }
    };
    let Some((_, out)) = outputs.iter().find(|(p, _)| *p == path) else {
        lock(mismatches)?.push(format!("array {name}: missing from {}", dst.url("")));
        return Ok(Compared::Done);
    };
    let out = output_array(out.clone()).map_err(|e| Error::OutputArray {
        array: name.clone(),
        source: Box::new(e),
    })?;
    let differences = metadata_differences(&format!("array {name}"), &meta, &out.meta);
    for difference in differences {
        lock(mismatches)?.push(difference);
    }
    if (out.meta.shape.as_slice(), out.meta.data_type) != (meta.shape.as_slice(), meta.data_type) {
        // The elements cannot be compared one for one.
        return Ok(Compared::Done);
    }
    let in_array = |e: Error| Error::Array {
        array: name.clone(),
        source: Box::new(e),
    };
    let geometry = ShardGeometry::new(&meta.shape, &out.meta.chunk_shape, &out.inner_shape)
        .map_err(|e| in_array(e.into()))?;
    let inner_repr = ChunkRepr {
        shape: out.inner_shape.clone(),
        data_type: meta.data_type,
        fill_value: meta.fill_value.clone(),
    };
    let (reader, derived, level): (Arc<dyn zshard_core::ChunkReader>, _, _) = match origin {
        Origin::Source(read) => (src.reader(&read, &meta), None, None),
        Origin::Level0(read) => (src.reader(&read, &meta), None, Some((0, None))),
        Origin::Below { level, derived } => (
            Arc::new(MadeFromAbove),
            Some(derived.clone()),
            Some((level, Some(derived.reduction))),
        ),
    };
    Ok(Compared::Job(Box::new(ArrayJob {
        name,
        derived,
        previous: None,
        hash_copied: true,
        source_chain,
        reader,
        sink: Arc::new(VerifySink {
            level,
            store: dst.child(&path),
            keys: out.meta.chunk_key_encoding,
            geometry: geometry.clone(),
            inner_repr: inner_repr.clone(),
            inner_chain: out.inner_chain,
            index_location: out.index_location,
            index_encoding: out.index_encoding,
            mismatches: mismatches.clone(),
        }),
        layout: ArrayLayout {
            geometry,
            source_repr: meta.chunk_repr(),
            source_grid: meta.rectilinear.clone(),
            inner_repr,
            passthrough: false,
        },
        inner_chain: None,
    })))
}

/// Every source group's attributes compared with its output's (a group missing is a mismatch).
fn compare_groups(
    src: &Input,
    dst: &Store,
    source_nodes: &[Node],
    output_nodes: &[Node],
    mismatches: &Mutex<Mismatches>,
) -> Result<()> {
    let output_groups = groups(output_nodes.to_vec());
    for (path, attributes) in groups(source_nodes.to_vec()) {
        let name = format!("group {}", array_name(&src.url(), &path));
        match output_groups.iter().find(|(p, _)| *p == path) {
            Some((_, out)) => {
                for difference in attribute_differences(&name, &attributes, out) {
                    lock(mismatches)?.push(difference);
                }
            }
            None => lock(mismatches)?.push(format!("{name}: missing from {}", dst.url(""))),
        }
    }
    Ok(())
}

/// The output's objects besides its arrays' and groups' own: strays, nodes the source does not have
/// (nor zshard skipped there), stale consolidated entries (each a mismatch); returns the warnings
/// about objects of other tools.
fn compare_other_objects(
    dst: &Store,
    source_nodes: &[Node],
    output_nodes: &[Node],
    skipped_arrays: &[SkippedArray],
    mismatches: &Mutex<Mismatches>,
) -> Result<Vec<String>> {
    let source_arrays: Vec<&str> = source_nodes
        .iter()
        .filter(|n| matches!(n.kind, NodeKind::Array(_)))
        .map(|n| n.path.as_str())
        .collect();
    let source_groups: Vec<&str> = source_nodes
        .iter()
        .filter(|n| matches!(n.kind, NodeKind::Group { .. }))
        .map(|n| n.path.as_str())
        .collect();
    let extras = extra_objects(dst, output_nodes)?;
    for stray in extras.strays.into_iter().chain(extras.unknown_nodes) {
        lock(mismatches)?.push(stray);
    }
    // Arrays and groups the source does not have (nor zshard skipped there) are not a copy of it.
    for node in output_nodes {
        let (what, in_source) = match &node.kind {
            NodeKind::Array(_) => ("array", source_arrays.contains(&node.path.as_str())),
            NodeKind::Group { .. } => ("group", source_groups.contains(&node.path.as_str())),
        };
        let linked = dst.first_link(&join(&node.path, "zarr.json")).is_some();
        if !in_source && !linked && !skipped_arrays.iter().any(|s| s.path == node.path) {
            lock(mismatches)?.push(format!(
                "{what} {}: in the output, not in the source",
                array_name(&dst.url(""), &node.path)
            ));
        }
    }
    for stale in stale_consolidated_entries(dst)? {
        lock(mismatches)?.push(stale);
    }
    Ok(extras.foreign)
}

/// Runs `jobs` on the sampled shards: the sinks compare the elements (mismatches go where each
/// sink's point). Sized by the conversion's memory model under the same limit: the sink compares
/// shards part by part (see `VerifySink::begin_shard`), as a conversion writes them.
fn compare_elements(
    v: &Verification,
    jobs: &[ArrayJob],
    threads: usize,
    locations: &[&Location],
) -> Result<zshard_pipeline::Stats> {
    // A level of a pyramid recomputed from the level above is never a task: the pipeline makes
    // its shards from the sampled shards above (a shard whose blocks are not all sampled is not
    // compared).
    let tasks = ShardTask::all(jobs).filter(|t| {
        if jobs[t.array].derived.is_some() {
            return false;
        }
        let grid = jobs[t.array].layout.geometry.shard_grid();
        sampled(t.array, linear_index(&t.shard, &grid), v.sample)
    });
    let layouts: Vec<ArrayLayout> = jobs.iter().map(|j| j.layout.clone()).collect();
    let budget = zshard_pipeline::budget(
        &layouts,
        &BudgetRequest {
            threads,
            limit: Some(
                v.memory_limit
                    .unwrap_or_else(crate::run::memory::default_limit),
            ),
            upload_buffers: 0,
            // The shards of recomputed pyramid levels that wait for their blocks.
            resident: jobs
                .iter()
                .filter(|j| j.derived.is_some())
                .map(|j| {
                    let element = j.layout.inner_repr.data_type.size() as u64;
                    crate::plan::pyramid::level_pending_bytes(&j.layout.geometry, element)
                })
                .fold(0, u64::saturating_add),
            io_threads: crate::run::conversion::io_threads(v.io_threads, locations),
        },
    )?;
    Ok(zshard_pipeline::run(
        jobs,
        tasks,
        &budget.options(),
        &|_| {},
    )?)
}

#[cfg(test)]
mod derived_tests {
    use super::*;
    use zshard_zarr::ome::OmeMetadata;

    #[test]
    fn a_verification_reads_and_compares_as_its_conversion() {
        let mut conversion = Conversion::new("in.zarr", "out.zarr");
        conversion.ome = OmeMetadata::Keep;
        conversion.io_threads = Some(3);
        conversion.threads = 5;
        conversion.source_options.on_unsupported = OnUnsupported::Skip;
        conversion.store_options.anonymous = true;
        let verification = Verification::of(&conversion);
        assert_eq!(
            (
                verification.source.as_str(),
                verification.destination.as_str()
            ),
            ("in.zarr", "out.zarr")
        );
        assert_eq!(verification.ome, OmeMetadata::Keep);
        assert_eq!(verification.io_threads, Some(3));
        assert_eq!(verification.threads, 5);
        assert_eq!(
            verification.source_options.on_unsupported,
            OnUnsupported::Skip
        );
        assert_eq!(verification.store_options, conversion.store_options);
        assert_eq!(verification.sample, 1.0);
    }
}
