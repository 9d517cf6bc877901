//! `zshard convert` and `zshard finalize`: plan, skip what is done, run the pipeline on this worker's
//! shards, then write the metadata documents once everything is done.

use std::collections::HashSet;
use std::sync::Mutex;

use anyhow::{bail, Context};
use zshard_core::{linear_index, IndexLocation};
use zshard_pipeline::{ArrayJob, ShardTask, Stats};
use zshard_store::{IoRuntime, Store};
use zshard_writer::{write_array_metadata, write_group_metadata};

use crate::partition::Partition;
use crate::plan::{Layouts, Plan};
use crate::progress::Progress;
use crate::report::Report;
use crate::source::{Input, SourceArgs};
use crate::state::{self, EmptyLog, Prepared};
use crate::storage::StorageArgs;

/// Parameters of one conversion.
#[derive(Debug, Clone)]
pub struct Conversion {
    pub source: String,
    pub destination: String,
    pub layouts: Layouts,
    pub threads: usize,
    /// Use fewer threads, or refuse, rather than exceed this estimated peak memory (bytes).
    pub memory_limit: Option<u64>,
    pub quiet: bool,
    pub partition: Partition,
    pub overwrite: bool,
    pub source_args: SourceArgs,
    pub storage: StorageArgs,
    pub report: Option<std::path::PathBuf>,
}

/// Threads for storage requests; they mostly wait, so a few serve many CPU workers.
const IO_THREADS: usize = 2;

/// The source opened and the plan made and checked.
pub struct Opened {
    pub source: Input,
    pub plan: Plan,
    pub fingerprint: serde_json::Value,
    runtime: std::sync::Arc<IoRuntime>,
}

impl Opened {
    /// Retries of transient storage failures so far.
    pub fn retries(&self) -> u64 {
        self.runtime.retries()
    }

    /// Opens the destination (creating a local folder with `create`).
    pub fn destination(&self, destination: &str, create: bool) -> anyhow::Result<Store> {
        Ok(Store::open(destination, self.runtime.clone(), create)?)
    }
}

/// Opens the source and plans; fails on everything `convert` would reject, before anything is written.
pub fn open(
    source: &str,
    destination: &str,
    layouts: &Layouts,
    args: &SourceArgs,
    storage: &StorageArgs,
) -> anyhow::Result<Opened> {
    refuse_overlap(source, destination)?;
    let runtime = IoRuntime::with_options(IO_THREADS, storage.options())?;
    let source_store = Input::open(source, args, runtime.clone())?;
    let nodes = source_store.nodes()?;
    let plan = Plan::new(&nodes, layouts, &source_store.url())?;
    let fingerprint = state::fingerprint(&source_id(source), &plan);
    Ok(Opened {
        source: source_store,
        plan,
        fingerprint,
        runtime,
    })
}

/// The source as recorded in the destination's state: absolute for local paths, so that the same run
/// started from another directory is recognised.
fn source_id(source: &str) -> String {
    if source.contains("://") {
        return source.trim_end_matches('/').to_string();
    }
    std::fs::canonicalize(source)
        .map_or_else(|_| source.to_string(), |p| p.to_string_lossy().into_owned())
}

/// This worker's shards that are not done yet, in enumeration order.
fn pending<'a>(
    jobs: &'a [ArrayJob],
    partition: Partition,
    done: &'a [HashSet<u64>],
) -> impl Iterator<Item = ShardTask> + 'a {
    ShardTask::all(jobs)
        .enumerate()
        .filter_map(move |(global, task)| {
            let grid = jobs[task.array].layout.geometry.shard_grid();
            let owned = partition.owns(global as u64);
            (owned && !done[task.array].contains(&linear_index(&task.shard, &grid))).then_some(task)
        })
}

pub fn convert(c: &Conversion) -> anyhow::Result<Stats> {
    let opened = open(
        &c.source,
        &c.destination,
        &c.layouts,
        &c.source_args,
        &c.storage,
    )?;
    let uploads = crate::memory::upload_buffers(&c.destination, c.storage.options().part_size);
    let io_threads = c.storage.io_threads(&[&c.source, &c.destination]);
    let budget =
        crate::memory::budget(&opened.plan, c.threads, c.memory_limit, uploads, io_threads)?;
    let destination = &opened.destination(&c.destination, true)?;
    let Opened {
        source,
        plan,
        fingerprint,
        ..
    } = &opened;
    if state::prepare(destination, plan, fingerprint, c.partition, c.overwrite)?
        == Prepared::Complete
    {
        let all: Vec<u64> = plan
            .arrays
            .iter()
            .map(|a| a.geometry.shard_count())
            .collect();
        let report = Report::new(plan, &c.source, destination, c.partition, &all);
        report.finish(true, c.report.as_deref())?;
        if !c.quiet {
            eprintln!(
                "zshard: {} is already complete with these options; nothing to do",
                destination.url("")
            );
        }
        return Ok(Stats::default());
    }
    let done = state::done_shards(destination, plan, c.partition)?;
    let jobs = plan.jobs(source, destination);
    let total = pending(&jobs, c.partition, &done).count() as u64;
    let skipped: Vec<u64> = done.iter().map(|d| d.len() as u64).collect();
    let mut report = Report::new(plan, &c.source, destination, c.partition, &skipped);
    let progress = Progress::new(total, c.quiet);
    let log = Mutex::new(EmptyLog::new(destination.clone(), c.partition));
    let log_error = Mutex::new(None);
    let per_array = Mutex::new(report.arrays_mut().to_vec());
    let result = zshard_pipeline::run(
        &jobs,
        pending(&jobs, c.partition, &done),
        &budget.options(),
        &|outcome| {
            progress.shard_done(outcome);
            if let Ok(mut arrays) = per_array.lock() {
                arrays[outcome.task.array].add(outcome);
            }
            if !outcome.written {
                let recorded = log
                    .lock()
                    .map_err(|_| anyhow::anyhow!("record lock poisoned"))
                    .and_then(|mut l| {
                        l.record(&plan.arrays[outcome.task.array].path, &outcome.task.shard)
                    });
                if let (Err(e), Ok(mut slot)) = (recorded, log_error.lock()) {
                    slot.get_or_insert(e);
                }
            }
        },
    );
    // Keep what was learned about empty shards even when the run failed, so a rerun skips them.
    let flushed = log
        .lock()
        .map_err(|_| anyhow::anyhow!("record lock poisoned"))?
        .flush();
    *report.arrays_mut() = per_array.into_inner().unwrap_or_default();
    report.set_retries(opened.retries());
    let stats = match result {
        Ok(stats) => stats,
        Err(e) => {
            progress.abandon();
            // The conversion's error is the one to report; a report that cannot be written is secondary.
            if let Err(report_error) = report.finish(false, c.report.as_deref()) {
                eprintln!("zshard: warning: {report_error:#}");
            }
            return Err(e.into());
        }
    };
    flushed?;
    if let Some(e) = log_error.into_inner().ok().flatten() {
        return Err(e.context("cannot record empty shards"));
    }
    if c.partition.is_all() {
        write_metadata(destination, plan)?;
        state::clear(destination)?;
    }
    progress.finish();
    report.finish(true, c.report.as_deref())?;
    if !c.quiet {
        eprintln!("{}", report.summary());
        if !c.partition.is_all() {
            eprintln!(
                "zshard: worker {}/{} done; once every worker is done, run `zshard finalize` with the same options",
                c.partition.index, c.partition.count
            );
        }
    }
    Ok(stats)
}

/// `zshard finalize`: checks that every shard of every worker is done, then writes the metadata.
pub fn finalize(
    source: &str,
    destination: &str,
    layouts: &Layouts,
    args: &SourceArgs,
    storage: &StorageArgs,
    quiet: bool,
) -> anyhow::Result<()> {
    let opened = open(source, destination, layouts, args, storage)?;
    let destination = opened.destination(destination, false)?;
    let Opened {
        plan,
        fingerprint,
        source: source_store,
        ..
    } = opened;
    if state::check_recorded(&destination, &plan, &fingerprint)? == Prepared::Complete {
        if !quiet {
            eprintln!("zshard: {} is already finalized", destination.url(""));
        }
        return Ok(());
    }
    let done = state::done_shards(&destination, &plan, Partition::ALL)?;
    let jobs = plan.jobs(&source_store, &destination);
    let mut missing = pending(&jobs, Partition::ALL, &done);
    if let Some(first) = missing.next() {
        let count = 1 + missing.count();
        let array = &plan.arrays[first.array];
        bail!(
            "{count} shard(s) are not done yet (first: array {}, shard {}); rerun the workers that did not finish",
            crate::plan::array_name(&source_store.url(), &array.path),
            jobs[first.array].sink.shard_key(&first.shard)
        );
    }
    write_metadata(&destination, &plan)?;
    state::clear(&destination)?;
    if !quiet {
        eprintln!(
            "zshard: finalized {}: {} array(s), {} group(s)",
            destination.url(""),
            plan.arrays.len(),
            plan.groups.len()
        );
    }
    Ok(())
}

/// Writes every array's and group's `zarr.json`, after all data: an output with metadata is complete.
fn write_metadata(destination: &Store, plan: &Plan) -> anyhow::Result<()> {
    for array in &plan.arrays {
        write_array_metadata(destination, &array.path, &array.output)?;
    }
    // Deepest groups first, the root last.
    let mut groups: Vec<_> = plan.groups.iter().collect();
    groups.sort_by_key(|(path, _)| {
        std::cmp::Reverse(path.matches('/').count() + usize::from(!path.is_empty()))
    });
    for (path, attributes) in groups {
        write_group_metadata(destination, path, attributes)?;
    }
    Ok(())
}

/// Source and destination must not overlap in either direction: converting into the source would read
/// our own output, and a destination holding the source could be cleared by `--overwrite`.
fn refuse_overlap(source: &str, destination: &str) -> anyhow::Result<()> {
    let local = |s: &str| match s.split_once("://") {
        None => Some(std::path::PathBuf::from(s)),
        Some(("file", rest)) => Some(std::path::PathBuf::from(rest)),
        Some(_) => None,
    };
    let (inside, holds) = match (local(source), local(destination)) {
        (Some(src), Some(dst)) => {
            let src = src
                .canonicalize()
                .with_context(|| format!("source {source} does not exist"))?;
            let dst = resolve(&dst);
            (dst.starts_with(&src), src.starts_with(&dst))
        }
        (None, None) => {
            let norm = |s: &str| format!("{}/", s.trim_end_matches('/'));
            let (src, dst) = (norm(source), norm(destination));
            (dst.starts_with(&src), src.starts_with(&dst))
        }
        _ => (false, false),
    };
    if inside {
        bail!("destination {destination} is inside the source {source}");
    }
    if holds {
        bail!("the source {source} is inside the destination {destination}");
    }
    Ok(())
}

/// An absolute path with symlinks and `..` resolved, also when its last components do not exist yet:
/// the nearest existing ancestor is canonicalized and the rest applied lexically.
fn resolve(path: &std::path::Path) -> std::path::PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    // `..` lexically first (as create_dir_all would walk it), then symlinks of the existing part.
    let mut lexical = std::path::PathBuf::new();
    for component in absolute.components() {
        match component {
            std::path::Component::ParentDir => {
                lexical.pop();
            }
            std::path::Component::CurDir => {}
            other => lexical.push(other),
        }
    }
    let mut existing = lexical.as_path();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            // `..` at the end, or the root: let the lexical pass below handle it.
            _ => break,
        }
    }
    let mut out = existing
        .canonicalize()
        .unwrap_or_else(|_| existing.to_path_buf());
    for part in rest.iter().rev() {
        if part == ".." {
            out.pop();
        } else if part != "." {
            out.push(part);
        }
    }
    out
}

/// `--index-location` values.
pub fn parse_index_location(s: &str) -> Result<IndexLocation, String> {
    IndexLocation::parse(s).ok_or_else(|| format!("{s:?} is not start or end"))
}

/// A shape given on the command line as `a,b,c`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape(pub Vec<u64>);

/// Parses `a,b,c` into a shape.
pub fn parse_shape(s: &str) -> Result<Shape, String> {
    s.split(',')
        .map(|part| {
            part.trim()
                .parse::<u64>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| {
                    format!("{part:?} is not a positive integer (expected a,b,... e.g. 4096,4096)")
                })
        })
        .collect::<Result<Vec<u64>, String>>()
        .map(Shape)
}
