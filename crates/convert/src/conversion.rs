//! A conversion: plan, skip what is done, run the pipeline on this worker's shards, then write the
//! metadata documents once everything is done (`convert`, or `finalize` after a partitioned run).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use zshard_core::linear_index;
use zshard_pipeline::{ArrayJob, ShardOutcome, ShardTask};
use zshard_store::{IoRuntime, Location, Overlap, Store, StoreOptions};
use zshard_writer::{
    group_json, write_array_metadata, write_consolidated_group_metadata, write_group_metadata,
};

use crate::error::{Error, Result};
use crate::input::{Input, SourceOptions};
use crate::memory;
use crate::partition::Partition;
use crate::plan::{array_name, Layouts, Plan};
use crate::report::{Report, ReportBuilder};
use crate::state::{self, EmptyLog, Prepared};
use zshard_pipeline::Budget;

/// Told about a run as it goes (a progress bar, a log, a Python callback).
pub trait Observer: Sync {
    /// The run starts with this many shards to convert (those not done by an earlier run).
    fn started(&self, _pending_shards: u64) {}
    /// A shard is done (written, or found to hold only the fill value).
    fn shard_done(&self, _outcome: &ShardOutcome) {}
    /// Something went wrong that does not stop the run or change its result (a report that could
    /// not be written after the run had failed anyway), or the output will read differently in some
    /// reader than the source (a v2 fill value xarray cannot be told about in v3).
    fn warning(&self, _message: &str) {}
}

/// Observes nothing.
impl Observer for () {}

/// One conversion of a source into sharded Zarr v3: where from, where to, and how. Make one with
/// [`Conversion::new`] and set the fields that differ from the defaults.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Conversion {
    /// A Zarr array or group, or a kerchunk reference set: a path or URL.
    pub source: String,
    /// Where the sharded Zarr v3 output goes: a path or URL.
    pub destination: String,
    /// Shapes, codecs and index location, for all arrays or per array.
    pub layouts: Layouts,
    /// How the source is read.
    pub source_options: SourceOptions,
    /// How storage is reached (credentials, endpoints, retries, upload parts).
    pub store_options: StoreOptions,
    /// Threads fetching chunks and threads writing shards, each; `None`: 2 for local paths, 8 when
    /// the source or destination is remote.
    pub io_threads: Option<usize>,
    /// Worker threads per CPU stage (fewer are used when the memory limit needs it).
    pub threads: usize,
    /// Estimated peak memory not to exceed, in bytes; `None`: half of the machine's (or cgroup's).
    pub memory_limit: Option<u64>,
    /// This worker's share of the shards.
    pub partition: Partition,
    /// Replace whatever the destination holds (otherwise a destination from a run with other
    /// options is refused, and one from a run with the same options is resumed).
    pub overwrite: bool,
    /// Also write the report as JSON to this file (when the run fails too).
    pub report_path: Option<PathBuf>,
    /// Consolidate the metadata of a hierarchy into its root `zarr.json`, as zarr-python 3.1 does
    /// (xarray opens such an output without a warning, and reads one document instead of one per
    /// node). A single array has nothing to consolidate.
    pub consolidate: bool,
}

/// Threads for storage requests while opening and planning; they mostly wait.
const OPEN_IO_THREADS: usize = 2;

impl Conversion {
    /// A conversion with the default layout, every shard, threads for every core and no report.
    pub fn new(source: impl Into<String>, destination: impl Into<String>) -> Self {
        Conversion {
            source: source.into(),
            destination: destination.into(),
            layouts: Layouts::default(),
            source_options: SourceOptions::default(),
            store_options: StoreOptions::default(),
            io_threads: None,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_limit: None,
            partition: Partition::ALL,
            overwrite: false,
            report_path: None,
            consolidate: true,
        }
    }

    /// Opens the source and plans; fails on everything `convert` would reject, before anything is
    /// written.
    fn open(&self) -> Result<Opened> {
        let (source, destination) = (
            Location::parse(&self.source)?,
            Location::parse(&self.destination)?,
        );
        refuse_overlap(&source, &destination)?;
        let runtime = IoRuntime::with_options(OPEN_IO_THREADS, self.store_options.clone())?;
        let input = Input::open(&source, &self.source_options, runtime.clone())?;
        let nodes = input.nodes()?;
        let plan = Plan::new(&nodes, &self.layouts, &input.url())?;
        let fingerprint = state::fingerprint(&source_id(&source), &plan);
        Ok(Opened {
            input,
            plan,
            fingerprint,
            runtime,
            source,
            destination,
        })
    }

    /// Checks everything `convert` checks before writing (the source, the layouts), without reading
    /// a chunk or touching the destination.
    pub fn check(&self) -> Result<()> {
        self.open().map(|_| ())
    }

    fn budget(&self, opened: &Opened) -> Result<Budget> {
        let uploads = memory::upload_buffers(&opened.destination, self.store_options.part_size);
        let io_threads = io_threads(self.io_threads, &[&opened.source, &opened.destination]);
        memory::budget(
            &opened.plan,
            self.threads,
            self.memory_limit,
            uploads,
            io_threads,
        )
    }

    /// What the conversion would do, from metadata alone: no chunk is listed or read, and nothing is
    /// written.
    pub fn plan(&self) -> Result<crate::PlanReport> {
        let opened = self.open()?;
        let budget = self.budget(&opened)?;
        Ok(crate::PlanReport::new(
            opened.plan,
            budget,
            opened.input.url(),
            self.destination.clone(),
            opened.input.reference_reads(),
        ))
    }

    /// Converts this worker's shards that are not done yet, then (in an unpartitioned run) writes
    /// the metadata. Resumes an interrupted run with the same options; refuses a destination that
    /// holds another conversion unless [`Conversion::overwrite`] is set.
    pub fn convert(&self, observer: &dyn Observer) -> Result<Report> {
        let opened = self.open()?;
        let budget = self.budget(&opened)?;
        let destination = &opened.destination(true)?;
        let Opened {
            input,
            plan,
            fingerprint,
            ..
        } = &opened;
        let partition = self.partition;
        for warning in reader_warnings(plan, &input.url()) {
            observer.warning(&warning);
        }
        if state::prepare(destination, plan, fingerprint, partition, self.overwrite)?
            == Prepared::Complete
        {
            let all: Vec<u64> = plan
                .arrays
                .iter()
                .map(|a| a.geometry.shard_count())
                .collect();
            let builder =
                ReportBuilder::new(plan, &self.source, destination.url(""), partition, &all);
            let mut report = builder.finish(true, opened.retries());
            report.already_complete = true;
            report.reference_reads = input.reference_reads();
            self.write_report(&report)?;
            return Ok(report);
        }
        let done = state::done_shards(destination, plan, partition)?;
        let jobs = plan.jobs(input, destination);
        observer.started(pending(&jobs, partition, &done).count() as u64);
        let skipped: Vec<u64> = done.iter().map(|d| d.len() as u64).collect();
        let builder = Mutex::new(ReportBuilder::new(
            plan,
            &self.source,
            destination.url(""),
            partition,
            &skipped,
        ));
        let log = Mutex::new(EmptyLog::new(destination.clone(), partition));
        let log_error = Mutex::new(None);
        let result = zshard_pipeline::run(
            &jobs,
            pending(&jobs, partition, &done),
            &budget.options(),
            &|outcome| {
                observer.shard_done(outcome);
                if let Ok(mut b) = builder.lock() {
                    b.add(outcome);
                }
                if !outcome.written {
                    let recorded = log
                        .lock()
                        .map_err(|_| Error::Poisoned { what: "the record" })
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
            .map_err(|_| Error::Poisoned { what: "the record" })?
            .flush();
        let builder = builder
            .into_inner()
            .map_err(|_| Error::Poisoned { what: "the report" })?;
        if let Err(e) = result {
            // The conversion's error is the one to return; a report that cannot be written is
            // secondary, so it is only a warning.
            if let Err(report_error) = self.write_report(&builder.finish(false, opened.retries())) {
                observer.warning(&crate::one_line(&report_error));
            }
            return Err(e.into());
        }
        flushed?;
        if let Some(e) = log_error.into_inner().ok().flatten() {
            return Err(Error::Record {
                source: Box::new(e),
            });
        }
        if partition.is_all() {
            write_metadata(destination, plan, self.consolidate)?;
            state::clear(destination)?;
        }
        // The duration includes writing the metadata.
        let mut report = builder.finish(true, opened.retries());
        report.reference_reads = input.reference_reads();
        self.write_report(&report)?;
        Ok(report)
    }

    fn write_report(&self, report: &Report) -> Result<()> {
        match &self.report_path {
            Some(path) => report.write_json(path),
            None => Ok(()),
        }
    }

    /// After a partitioned conversion: checks that every shard of every worker is done, then writes
    /// the metadata.
    pub fn finalize(&self) -> Result<Finalized> {
        let opened = self.open()?;
        let destination = opened.destination(false)?;
        let Opened {
            plan,
            fingerprint,
            input,
            ..
        } = opened;
        let mut finalized = Finalized {
            destination: destination.url(""),
            arrays: plan.arrays.len(),
            groups: plan.groups.len(),
            already_finalized: false,
        };
        if state::check_recorded(&destination, &plan, &fingerprint)? == Prepared::Complete {
            finalized.already_finalized = true;
            return Ok(finalized);
        }
        let done = state::done_shards(&destination, &plan, Partition::ALL)?;
        let jobs = plan.jobs(&input, &destination);
        let mut missing = pending(&jobs, Partition::ALL, &done);
        if let Some(first) = missing.next() {
            let count = 1 + missing.count() as u64;
            let array = &plan.arrays[first.array];
            return Err(Error::NotDone {
                missing: count,
                array: array_name(&input.url(), &array.path),
                key: jobs[first.array].sink.shard_key(&first.shard),
            });
        }
        write_metadata(&destination, &plan, self.consolidate)?;
        state::clear(&destination)?;
        Ok(finalized)
    }
}

/// What `finalize` did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finalized {
    /// The destination's location.
    pub destination: String,
    /// Arrays whose metadata it holds.
    pub arrays: usize,
    /// Groups whose metadata it holds.
    pub groups: usize,
    /// It was finalized before with the same options; nothing was written.
    pub already_finalized: bool,
}

/// The source opened and the plan made and checked.
struct Opened {
    input: Input,
    plan: Plan,
    fingerprint: serde_json::Value,
    runtime: Arc<IoRuntime>,
    source: Location,
    destination: Location,
}

impl Opened {
    /// Retries of transient storage failures so far.
    fn retries(&self) -> u64 {
        self.runtime.retries()
    }

    /// Opens the destination (creating a local folder with `create`).
    fn destination(&self, create: bool) -> Result<Store> {
        Ok(Store::open_location(
            &self.destination,
            self.runtime.clone(),
            create,
        )?)
    }
}

/// Threads fetching and threads writing for a run between `locations`: `explicit`, else 2 for local
/// paths and 8 when any location is remote.
pub(crate) fn io_threads(explicit: Option<usize>, locations: &[&Location]) -> usize {
    let remote = locations.iter().any(|l| l.is_remote());
    explicit
        .unwrap_or(if remote {
            8
        } else {
            zshard_pipeline::DEFAULT_IO_THREADS
        })
        .max(1)
}

/// The source as recorded in the destination's state: absolute for local paths, so that the same run
/// started from another directory is recognised.
fn source_id(source: &Location) -> String {
    // URLs (`file://` ones too) are recorded as given, as every earlier version did: a run resumed by
    // a newer zshard must be recognised.
    let text = source.as_str();
    if text.contains("://") {
        return text.trim_end_matches('/').to_string();
    }
    std::fs::canonicalize(text)
        .map_or_else(|_| text.to_string(), |p| p.to_string_lossy().into_owned())
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

/// What readers will see differently in the output than in the source, one message per thing,
/// naming the array.
pub(crate) fn reader_warnings(plan: &Plan, source: &str) -> Vec<String> {
    plan.arrays
        .iter()
        .flat_map(|array| {
            let name = array_name(source, &array.path);
            array
                .source
                .warnings
                .iter()
                .map(move |warning| format!("array {name}: {warning}"))
        })
        .collect()
}

/// Writes every array's and group's `zarr.json`, after all data: an output with metadata is complete.
/// The root group's comes last, with every other document consolidated into it when `consolidate`
/// (a reader trusts consolidated metadata over the files, so it must describe the final ones).
fn write_metadata(destination: &Store, plan: &Plan, consolidate: bool) -> Result<()> {
    for array in &plan.arrays {
        write_array_metadata(destination, &array.path, &array.output)?;
    }
    // Deepest groups first, the root last.
    let mut groups: Vec<_> = plan.groups.iter().collect();
    groups.sort_by_key(|(path, _)| {
        std::cmp::Reverse(path.matches('/').count() + usize::from(!path.is_empty()))
    });
    for (path, attributes) in groups {
        if path.is_empty() && consolidate {
            write_consolidated_group_metadata(destination, path, attributes, members(plan))?;
        } else {
            write_group_metadata(destination, path, attributes)?;
        }
    }
    Ok(())
}

/// The `zarr.json` document of every node below the root, by path.
fn members(plan: &Plan) -> impl Iterator<Item = (String, serde_json::Value)> + '_ {
    let arrays = plan
        .arrays
        .iter()
        .map(|array| (array.path.clone(), array.output.to_json()));
    let groups = plan
        .groups
        .iter()
        .map(|(path, attributes)| (path.clone(), group_json(attributes)));
    arrays.chain(groups).filter(|(path, _)| !path.is_empty())
}
/// Source and destination must not overlap in either direction: converting into the source would read
/// our own output, and a destination holding the source could be cleared by `--overwrite`.
fn refuse_overlap(source: &Location, destination: &Location) -> Result<()> {
    let overlap = Location::overlap(source, destination).map_err(|cause| Error::SourceMissing {
        location: source.to_string(),
        source: cause,
    })?;
    let reason = match overlap {
        None => return Ok(()),
        Some(Overlap::DestinationInSource) => {
            format!("destination {destination} is inside the source {source}")
        }
        Some(Overlap::SourceInDestination) => {
            format!("the source {source} is inside the destination {destination}")
        }
    };
    Err(Error::Overlap { reason })
}
