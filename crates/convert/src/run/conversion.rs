//! A conversion: plan, skip what is done, run the pipeline on this worker's shards, then write the
//! metadata documents once everything is done (`convert`, or `finalize` after a partitioned run).
//! The steps live here; their parts in `conversion/`: opening and planning the source (`open.rs`),
//! `plan` (`planning.rs`), the shards a run converts (`shards.rs`), the end of a run (`finish.rs`),
//! `finalize` (`finalize.rs`) and the run's budget: memory and I/O threads (`budget.rs`).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use zshard_core::linear_index;
use zshard_pipeline::{ArrayJob, ArrayLayout, ShardOutcome, ShardTask};
use zshard_store::{IoRuntime, Location, Overlap, Store, StoreOptions};
use zshard_writer::{consolidated_group_bytes, document_bytes, group_json};

use crate::error::{Error, Result};
use crate::plan::input::{Input, ReadOptions};
use crate::plan::{array_name, Layouts, Plan};
use crate::run::memory;
use crate::run::recorder::Recorder;
use crate::run::report::{Report, ReportBuilder, Status};
use crate::run::reuse::Reuse;
use zshard_pipeline::{Budget, Cancel};
use zshard_state::{Lease, Observer, Partition, Prepared};

mod budget;
use budget::held;
mod finalize;
mod finish;
mod open;
mod planning;
mod shards;

pub(crate) use budget::io_threads;
use finish::{clear_state, finish, MadeFrom};
use shards::*;

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
    pub source_options: ReadOptions,
    /// How storage is reached (credentials, endpoints, retries, upload parts).
    pub store_options: StoreOptions,
    /// Threads fetching chunks and threads writing shards, each; `None`: 2 for local paths, 8 to 32
    /// (by shard size) when the source or destination is remote.
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
    /// Also write the report as JSON to this file, on every exit of [`Conversion::convert`]: success,
    /// failure (before or during the run), cancel, and a rerun of a complete conversion (status
    /// `complete`). `{worker}` (the worker's index), `{host}` (the host name) and `{date}` (the start,
    /// UTC, as `20261124T155057Z`) in it are replaced.
    pub report_path: Option<PathBuf>,
    /// Stops [`Conversion::convert`] from another thread (a signal handler, Python's
    /// `KeyboardInterrupt`): no further chunk is fetched, shards not complete are abandoned (never
    /// published), what was done is recorded for a rerun, the report is written, and `convert`
    /// returns [`Error::Cancelled`]. Clone it before starting the conversion.
    pub cancel: Cancel,
    /// Consolidate the metadata of a hierarchy into its root `zarr.json`, as zarr-python 3.1 does
    /// (xarray opens such an output without a warning, and reads one document instead of one per
    /// node). A single array has nothing to consolidate.
    pub consolidate: bool,
    /// What becomes of OME-Zarr metadata: by default a 0.4 hierarchy is written as 0.5.
    pub ome: zshard_zarr::ome::OmeMetadata,
    /// Make an OME-Zarr multiscale pyramid of the source array (see `plan/pyramid.rs`).
    pub pyramid: Option<crate::PyramidOptions>,
    /// How long this run's lease on the destination stays fresh without renewal (it is renewed
    /// four times as often): an `--overwrite` by another run refuses while it is fresh, and takes it
    /// over once it is stale (a run killed with `kill -9`). Default
    /// [`DEFAULT_LEASE_STALE_AFTER`](crate::DEFAULT_LEASE_STALE_AFTER).
    pub lease_stale_after: std::time::Duration,
    /// Commit the output to a branch of the Icechunk repository at `destination` instead of
    /// writing plain Zarr there (see `icechunk_output.rs`). A destination that already is a
    /// repository gets the defaults.
    pub icechunk: Option<crate::IcechunkOutput>,
    /// Keep the checksum manifest of every shard written (`.zshard/manifest.tsv`) once the
    /// conversion finishes, for `zshard verify --manifest` (see `manifest.rs`); otherwise it is
    /// removed with the rest of the state.
    pub keep_manifest: bool,
    /// What `plan`'s time and price estimate assumes in place of its defaults (see
    /// [`Stated`](crate::Stated)).
    pub estimate_with: crate::Stated,
    /// When records are flushed and compacted (tests make them small).
    pub(crate) record_limits: zshard_state::RecordLimits,
    /// How often the shards written are recorded as done, on local disk each time after a
    /// checkpoint (one `syncfs` of the destination's filesystem; shards are renamed into place
    /// without an fsync of their own). A power loss can lose or damage only the shards written
    /// since the last checkpoint; a resume checks those against the manifest and converts again any
    /// that do not match. Default [`DEFAULT_CHECKPOINT_INTERVAL`](crate::DEFAULT_CHECKPOINT_INTERVAL).
    pub checkpoint_interval: std::time::Duration,
    /// The shards that kept records say were made from what their source holds now are done
    /// wherever their bytes are: an update of a conversion committed into an Icechunk repository,
    /// staged beside the records while the shards are in the repository (`icechunk_output.rs`).
    /// Set once the repository's branch is found to hold them, before the records are read.
    pub(crate) kept_shards_elsewhere: Arc<std::sync::atomic::AtomicBool>,
    /// Where those shards are as the kept records describe them: the Icechunk destination and the
    /// snapshot of zshard's commit of them. An update copies the inner chunks that did not change
    /// from there (`reuse.rs`). Set with [`Conversion::kept_shards_elsewhere`], when the staged
    /// records are the ones that commit kept.
    pub(crate) shards_committed: Arc<std::sync::Mutex<Option<(String, String)>>>,
}

/// How often a local destination's filesystem is synced while shards are written (see `run`).
const WRITEBACK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Threads for storage requests while opening and planning; they mostly wait.
const OPEN_IO_THREADS: usize = 2;

impl Conversion {
    /// A conversion with the default layout, every shard, threads for every core and no report.
    pub fn new(source: impl Into<String>, destination: impl Into<String>) -> Self {
        Conversion {
            source: source.into(),
            destination: destination.into(),
            layouts: Layouts::default(),
            source_options: ReadOptions::default(),
            store_options: StoreOptions::default(),
            io_threads: None,
            threads: crate::threads::default_threads(),
            memory_limit: None,
            partition: Partition::ALL,
            overwrite: false,
            report_path: None,
            cancel: Cancel::new(),
            consolidate: true,
            ome: Default::default(),
            pyramid: None,
            lease_stale_after: zshard_state::DEFAULT_LEASE_STALE_AFTER,
            checkpoint_interval: crate::DEFAULT_CHECKPOINT_INTERVAL,
            icechunk: None,
            keep_manifest: false,
            estimate_with: crate::Stated::default(),
            record_limits: zshard_state::RecordLimits::default(),
            kept_shards_elsewhere: Arc::default(),
            shards_committed: Arc::default(),
        }
    }

    /// Opens the source and plans; fails on everything `convert` would reject, before anything is
    /// written.
    pub(crate) fn open(&self) -> Result<Opened> {
        let (source, destination, runtime) = self.locations()?;
        self.open_source(&source, destination, runtime)
    }

    /// The source and destination, checked not to overlap, and the I/O runtime to open them on.
    fn locations(&self) -> Result<(Location, Location, Arc<IoRuntime>)> {
        let (source, destination) = (
            Location::parse(&self.source)?,
            Location::parse(&self.destination)?,
        );
        refuse_overlap(&source, &destination)?;
        let runtime = IoRuntime::with_options(OPEN_IO_THREADS, self.store_options.clone())?;
        Ok((source, destination, runtime))
    }

    /// [`Conversion::open`] and this run's lease on the destination, opened with its store. On an
    /// object store the lease's PUT goes out while the source's metadata is read (it needs nothing
    /// from it: a round trip saved), and is removed again when the source does not open; a local
    /// destination folder is created only once the source has opened.
    fn open_leased(&self) -> Result<(Opened, Store, Lease)> {
        let (source, destination, runtime) = self.locations()?;
        if !destination.is_remote() {
            let opened = self.open_source(&source, destination, runtime)?;
            let store = opened.destination(true)?;
            refuse_links(&store, &opened.plan)?;
            zshard_state::clear_state_file(&store, self.overwrite)?;
            let lease = Lease::acquire(&store, self.partition, self.lease_stale_after)?;
            return Ok((opened, store, lease));
        }
        let store = Store::open_location(&destination, runtime.clone(), true)?;
        let (opened, lease) = std::thread::scope(|scope| {
            let lease = std::thread::Builder::new()
                .name("zshard-lease".into())
                .spawn_scoped(scope, || {
                    Lease::acquire(&store, self.partition, self.lease_stale_after)
                })
                .map_err(|source| Error::Thread {
                    what: "the lease",
                    source,
                })?;
            let opened = self.open_source(&source, destination, runtime);
            let lease = lease
                .join()
                .map_err(|_| Error::Poisoned { what: "the lease" })?;
            // A lease taken for a source that does not open is dropped, which removes it.
            Ok::<_, Error>((opened?, lease?))
        })?;
        Ok((opened, store, lease))
    }

    /// Checks everything `convert` checks before writing (the source, the layouts), without reading
    /// a chunk or touching the destination.
    pub fn check(&self) -> Result<()> {
        self.open().map(|_| ())
    }

    /// Converts this worker's shards that are not done yet, then (in an unpartitioned run) writes
    /// the metadata. Resumes an interrupted run with the same options; refuses a destination that
    /// holds another conversion unless [`Conversion::overwrite`] is set. Stops early with
    /// [`Error::Cancelled`] once [`Conversion::cancel`] is cancelled. Writes the report (see
    /// [`Conversion::report_path`]) however it ends.
    pub fn convert(&self, observer: &dyn Observer) -> Result<Report> {
        if let Some(output) = self.icechunk_output() {
            return self.convert_into_icechunk(&output, observer);
        }
        self.convert_checked(observer, None)
    }

    /// [`Conversion::convert`] into Zarr, asking `committed` (when given) before the destination's
    /// state is read whether the conversion is complete elsewhere (see [`Committed`]).
    pub(crate) fn convert_checked(
        &self,
        observer: &dyn Observer,
        committed: Option<Committed<'_>>,
    ) -> Result<Report> {
        let builder = Mutex::new(ReportBuilder::new(self));
        let ran = self.run(observer, &builder, committed);
        let builder = builder
            .into_inner()
            .map_err(|_| Error::Poisoned { what: "the report" })?;
        match ran {
            Ok((status, reference_reads)) => {
                let mut report = builder.finish(Ok(status));
                report.reference_reads = reference_reads;
                self.write_report(&builder, &report)?;
                Ok(report)
            }
            Err(e) => {
                // The conversion's error is the one to return; a report that cannot be written is
                // secondary, so it is only a warning.
                if let Err(report_error) = self.write_report(&builder, &builder.finish(Err(&e))) {
                    observer.warning(&crate::one_line(&report_error));
                }
                Err(e)
            }
        }
    }

    /// For front ends that fail before they can call [`Conversion::convert`] (options that do not
    /// parse): writes the report of a run that failed with `error` at once, if there is a
    /// [`Conversion::report_path`].
    pub fn report_failure(&self, error: &Error) -> Result<()> {
        let builder = ReportBuilder::new(self);
        self.write_report(&builder, &builder.finish(Err(error)))
    }

    /// The conversion behind [`Conversion::convert`]: how it ended, and the reference reads made.
    /// In steps: open the source and plan, lease the destination, claim it (or find the conversion
    /// complete), find the shards done, convert the others, then finish (metadata) or record.
    fn run(
        &self,
        observer: &dyn Observer,
        builder: &Mutex<ReportBuilder>,
        committed: Option<Committed<'_>>,
    ) -> Result<(Status, Option<zshard_kerchunk::ReadStats>)> {
        let (opened, destination, lease) = self.open_leased()?;
        crate::plan::pyramid::check_finished(&opened.plan, &destination, self.overwrite)?;
        // Refused before the destination is claimed when the limit is too small for the plan alone.
        self.budget(&opened)?;
        self.stop_if_cancelled()?;
        let destination = &destination;
        let Opened { input, plan, .. } = &opened;
        // What each shard is made from now: one listing of each array's source chunks, on a thread
        // of its own while the destination is claimed and surveyed.
        let read_jobs = plan.read_jobs(input);
        let tracked = crate::run::digests::tracked(&read_jobs);
        let kept = opened.kept_sources(self.overwrite);
        let listed_count = opened.runtime.listed_count();
        let listing = crate::run::digests::Pending::start(read_jobs, destination.clone(), kept);
        if tracked {
            observer.listing(&listed_count);
        }
        let fingerprint = &opened.fingerprint()?.tracking_sources(tracked);
        let planned = |skipped: &[u64]| -> Result<()> {
            builder
                .lock()
                .map_err(|_| Error::Poisoned { what: "the report" })?
                .planned(plan, destination.url(""), skipped, opened.runtime.clone());
            Ok(())
        };
        let partition = self.partition;
        for warning in plan.reader_warnings(&input.url()) {
            observer.warning(&warning);
        }
        let Some((survey, options_record)) = self.claim(
            destination,
            plan,
            fingerprint,
            &lease,
            committed,
            observer,
            &|| listing.get(),
        )?
        else {
            // Complete: elsewhere, or here by a run killed while removing its state.
            let lease_key = lease.stop();
            clear_state(destination, None, &[lease_key])?;
            let all: Vec<u64> = plan
                .arrays
                .iter()
                .map(|a| a.geometry.shard_count())
                .collect();
            planned(&all)?;
            return Ok((Status::Complete, input.reference_reads()));
        };
        let listed = listing.wait()?;
        let paths: Vec<String> = plan.arrays.iter().map(|a| a.path.clone()).collect();
        for warning in listed.warnings(&paths) {
            observer.warning(&warning);
        }
        // Refused with what the survey and the listing hold (a few bytes per shard and per source
        // chunk: at 10^8 source chunks, 1.6 GB) before anything is removed or recorded; sized below
        // once what else the run holds is known.
        self.budget_holding(
            &opened,
            survey.memory_bytes().saturating_add(listed.memory_bytes()),
        )?;
        let digests = &listed.digests;
        let destination = &zshard_state::recording_uploads(destination, partition, &survey)?;
        let mut resume = zshard_state::done_shards(
            destination,
            &plan.outputs(),
            partition,
            lease.key(),
            &survey,
            digests,
        )?;
        if self
            .kept_shards_elsewhere
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            let current = zshard_state::kept_current(&survey, &plan.outputs(), digests);
            for (done, current) in resume.done.iter_mut().zip(current) {
                done.extend(current);
            }
        }
        let mut update_record = None;
        if let Some(update) =
            zshard_state::update_counts(&survey, &plan.outputs(), partition, &resume.done)
        {
            // For `status`: what this update sets out to write (kept by a resumed run). It goes
            // out beside the first reads; shards wait for it, as for the options record.
            let shards = update.shards_rewritten + update.shards_added;
            if shards > 0 {
                update_record = Some(Arc::new(zshard_state::record_update(
                    destination,
                    partition,
                    shards,
                )?));
            }
            if let Ok(mut b) = builder.lock() {
                b.updated(Some(crate::Update {
                    shards_rewritten: update.shards_rewritten,
                    shards_added: update.shards_added,
                    shards_removed: update.shards_removed,
                    inner_chunks_copied: 0,
                }));
            }
        }
        let done = &resume.done;
        let outputs = plan.outputs();
        // What this worker did before: its own shards only (the others' are theirs to count).
        let mut first_global = 0u64;
        let skipped: Vec<u64> = plan
            .arrays
            .iter()
            .zip(done)
            .enumerate()
            .map(|(i, (array, done))| {
                let first = first_global;
                first_global = first_global.saturating_add(array.geometry.shard_count());
                let owned = done
                    .iter()
                    .filter(|&&shard| outputs.owns(partition, i, shard, first));
                owned.count() as u64
            })
            .collect();
        planned(&skipped)?;
        // Shards are published without an fsync each (group commit): the shard log checkpoints
        // before each `done` record, and the run before its last records and the metadata.
        let mut jobs = plan.jobs(input, &destination.deferring_sync()?);
        // A worker makes no level of a pyramid that `finalize` makes: the blocks its shards bring
        // them are not kept, and no shard of its is converted again for them.
        if !partition.is_all() {
            for (i, job) in jobs.iter_mut().enumerate() {
                if *outputs.owner(i) == zshard_state::Owner::Finalize {
                    job.derived = None;
                }
            }
        }
        // The options record (and an update's record) is still in flight: chunks are fetched
        // meanwhile, shards wait for it.
        for ahead in options_record.iter().chain(&update_record) {
            for job in &mut jobs {
                job.sink = ahead.before(Arc::clone(&job.sink));
            }
        }
        // An update copies the inner chunks that did not change from the shards it rewrites.
        let elsewhere = self
            .kept_shards_elsewhere
            .load(std::sync::atomic::Ordering::SeqCst);
        let zarr_destination = (!elsewhere).then_some(destination);
        let committed = match elsewhere {
            true => self
                .shards_committed
                .lock()
                .map_err(|_| Error::Poisoned { what: "the commit" })?
                .clone(),
            false => None,
        };
        // A commit that cannot be opened (its snapshot expired since): its shards are converted
        // whole, as before copies were made.
        let committed = committed.and_then(|(repository, snapshot)| {
            zshard_icechunk::Committed::open(&repository, &snapshot, opened.runtime.clone())
                .inspect_err(|e| {
                    observer.warning(&format!(
                        "the shards to rewrite are converted whole, none of their inner chunks copied: {}",
                        crate::one_line(e)
                    ))
                })
                .ok()
        });
        let reuse = match &committed {
            Some(committed) => Reuse::for_commit(&mut jobs, plan, committed, &survey, listed),
            None => Reuse::for_run(&mut jobs, plan, zarr_destination, &survey, listed),
        };
        // Inner chunks copied into a Zarr destination are decoded to hash their values only for a
        // manifest that will be kept (an Icechunk destination's are hashed as before): the
        // manifest's per-chunk hashes say which inner chunk of a damaged shard differs, and without
        // one a copy costs no decode. A kept manifest then names no chunk hashes for the shards of a
        // worker that ran before another asked to keep it; their size and crc32c are checked alike.
        let hash_copied = committed.is_some()
            || self.keep_manifest
            || survey.holds_a_kept_manifest()
            || survey.asks_to_keep_the_manifest();
        for job in &mut jobs {
            job.hash_copied = hash_copied;
        }
        let jobs = jobs;
        // Sized with everything the run holds beside the pipeline until its end, now known.
        let budget = self.budget_holding(&opened, held(&survey, listed, &resume, Some(&reuse)))?;
        // The inner chunks a shard copies are found once, as the pipeline takes its tasks: the
        // work ahead counts whole shards.
        let tasks = to_run(&jobs, &outputs, partition, done).map(|task| reuse.task(&jobs, task));
        // This worker's whole share, so that progress starts from what earlier runs did (issue 44).
        let none_done = vec![HashSet::new(); jobs.len()];
        let whole = crate::run::progress::work_of(
            &jobs,
            with_made(&jobs, to_run(&jobs, &outputs, partition, &none_done)).into_iter(),
        );
        let work = crate::run::progress::work_of(
            &jobs,
            with_made(&jobs, to_run(&jobs, &outputs, partition, done)).into_iter(),
        )
        .with_done_of(&whole);
        observer.started(work.shards);
        observer.work(&work);
        let recorder = Recorder::new(
            self,
            destination,
            plan,
            observer,
            builder,
            &resume.untrusted,
            listed,
        );
        let names = plan.arrays.iter();
        let names = names.map(|a| array_name(&input.url(), &a.path)).collect();
        let result = self.with_writeback(destination, || {
            zshard_pipeline::run_observed(
                &jobs,
                tasks,
                &zshard_pipeline::Options {
                    cancel: self.cancel.clone(),
                    ..budget.options()
                },
                &crate::run::progress::Relay {
                    observer,
                    names,
                    shard_done: &|outcome: &ShardOutcome| recorder.shard_done(outcome),
                },
            )
        });
        // Nothing is recorded before the options record (and an update's record) has landed (a run
        // without shards to write never waited for them).
        for ahead in options_record.iter().chain(&update_record) {
            ahead.finish()?;
        }
        // The checkpoint that the last records (and the metadata) need: every shard written
        // reaches the disk first.
        let checkpointed = destination.checkpoint();
        let (records, log_error) = recorder.finish()?;
        checkpointed?;
        let made_from = MadeFrom {
            digests,
            fingerprint,
            survey: &survey,
            source_versions: &listed.keep,
        };
        self.conclude(
            destination,
            plan,
            lease,
            records,
            (result, log_error),
            made_from,
        )?;
        Ok((Status::Ok, input.reference_reads()))
    }

    /// Claims `destination` for this conversion under `lease` (see [`zshard_state::prepare`]): what
    /// it holds, and the options record still in flight; `None` when the conversion is complete
    /// (`committed` elsewhere, or here).
    ///
    /// `digests` waits for the listing of the source (see `digests.rs`), made meanwhile.
    #[allow(clippy::too_many_arguments)]
    fn claim<'d>(
        &self,
        destination: &Store,
        plan: &Plan,
        fingerprint: &zshard_state::Fingerprint,
        lease: &Lease,
        committed: Option<Committed<'_>>,
        observer: &dyn Observer,
        digests: &dyn Fn() -> Option<&'d zshard_state::Digests>,
    ) -> Result<Option<(zshard_state::Survey, Option<Arc<zshard_state::WriteAhead>>)>> {
        if let Some(committed) = committed {
            let running = zshard_state::holds_a_run(destination)?;
            if committed(plan, fingerprint, running)? {
                return Ok(None);
            }
        }
        // The lease (taken in `open_leased`) is held from before the destination is touched until
        // its state is removed, so that an --overwrite elsewhere refuses while this run writes.
        let (prepared, options_record) = zshard_state::prepare(
            destination,
            &plan.outputs(),
            fingerprint,
            self.partition,
            self.overwrite.then_some(lease.key()),
            observer,
            digests,
        )?;
        Ok(match prepared {
            Prepared::Run(survey) => Some((*survey, options_record)),
            Prepared::Complete => None,
        })
    }

    /// Runs `pipeline`, and on local disk a thread beside it that syncs the filesystem every
    /// WRITEBACK_INTERVAL (or checkpoint interval, when shorter): the shards' writeback then
    /// overlaps the conversion, and the checkpoints that must wait (before each `done` record, and
    /// at the end) find little left to write.
    fn with_writeback<T>(&self, destination: &Store, pipeline: impl FnOnce() -> T) -> T {
        let writeback = WRITEBACK_INTERVAL.min(self.checkpoint_interval);
        std::thread::scope(|scope| {
            let (stop, stopped) = std::sync::mpsc::channel::<()>();
            if destination.location().is_local() {
                let dst = destination.clone();
                scope.spawn(move || {
                    while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                        stopped.recv_timeout(writeback)
                    {
                        // Best effort: the checkpoints that records depend on report errors.
                        let _ = dst.checkpoint();
                    }
                });
            }
            let result = pipeline();
            drop(stop);
            result
        })
    }

    /// After the pipeline: an unpartitioned run that converted everything writes the metadata with
    /// its last `records`; any other keeps what it learned (the records) for a rerun or `finalize`,
    /// then fails with the pipeline's `result` or the `log_error`, if any.
    fn conclude(
        &self,
        destination: &Store,
        plan: &Plan,
        lease: Lease,
        mut records: Vec<(String, bytes::Bytes)>,
        (result, log_error): (
            zshard_pipeline::Result<zshard_pipeline::Stats>,
            Option<Error>,
        ),
        made_from: MadeFrom<'_>,
    ) -> Result<()> {
        let partition = self.partition;
        // Asked to stop: the metadata is left to the rerun, which then finds every shard done.
        if partition.is_all()
            && result.is_ok()
            && log_error.is_none()
            && !self.cancel.is_cancelled()
        {
            // The last records go out with the metadata: both only say what is already true.
            return finish(
                destination,
                plan,
                self.consolidate,
                &self.cancel,
                &records,
                lease,
                self.keep_manifest,
                made_from,
            );
        }
        // Keep what was learned about shards even when the run failed or was cancelled, so a rerun
        // skips them; and a worker's --keep-manifest, so that `finalize` keeps it without the flag.
        if self.keep_manifest {
            records.push(zshard_state::keep_manifest_marker());
        }
        let flushed = destination.block_on(destination.put_many_async(&records));
        result?;
        flushed?;
        if let Some(e) = log_error {
            return Err(Error::Record {
                source: Box::new(e),
            });
        }
        if partition.is_all() {
            self.stop_if_cancelled()?;
        }
        lease.release()?;
        Ok(())
    }

    /// How the run's shard records are batched: the limits, and the longest time between two
    /// recordings (the checkpoint interval).
    pub(crate) fn record_log(&self) -> (zshard_state::RecordLimits, std::time::Duration) {
        (self.record_limits, self.checkpoint_interval)
    }

    /// [`Error::Cancelled`] once [`Conversion::cancel`] is cancelled.
    fn stop_if_cancelled(&self) -> Result<()> {
        if self.cancel.is_cancelled() {
            return Err(Error::Cancelled);
        }
        Ok(())
    }

    fn write_report(&self, builder: &ReportBuilder, report: &Report) -> Result<()> {
        match &self.report_path {
            Some(template) => report.write_json(&builder.path(template)),
            None => Ok(()),
        }
    }
}

impl Conversion {
    /// Where an Icechunk output commits: as set, or the defaults when the destination already is
    /// a repository.
    fn icechunk_output(&self) -> Option<crate::IcechunkOutput> {
        self.icechunk.clone().or_else(|| {
            zshard_icechunk::is_repository(&self.destination).then(crate::IcechunkOutput::default)
        })
    }
}

/// What `finalize` did (as a document: what Python's `zshard.finalize` reads).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
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
    /// The commit made into an Icechunk repository (logged, not in the document).
    #[serde(skip)]
    pub published: Option<crate::Published>,
    /// What to tell the user (arrays whose kept source versions could not be brought forward,
    /// and why; printed, not in the document).
    #[serde(skip)]
    pub warnings: Vec<String>,
}

/// Asked by a conversion into an Icechunk repository, with the plan, the conversion's fingerprint
/// and whether the staging folder holds a run of a conversion (recorded options), once the
/// staging folder is leased and before its state is read: whether the repository's branch already
/// holds this conversion (`true`: the run ends as complete, writing nothing), or an error to stop
/// with (it holds another one).
pub(crate) type Committed<'a> =
    &'a (dyn Fn(&Plan, &zshard_state::Fingerprint, bool) -> Result<bool> + Sync);

/// The source opened and the plan made and checked.
pub(crate) struct Opened {
    input: Input,
    pub(crate) plan: Plan,
    /// The source as a conversion's fingerprint records it.
    pub(crate) source_id: String,
    runtime: Arc<IoRuntime>,
    destination: Location,
}

impl Opened {
    /// What identifies this conversion in the destination's claim and records (made only by the
    /// commands that write or check them: `plan` does without).
    pub(crate) fn fingerprint(&self) -> Result<zshard_state::Fingerprint> {
        Ok(zshard_state::Fingerprint::new(
            &self.source_id,
            &self.plan.outputs(),
        )?)
    }

    /// [`Opened::fingerprint`], naming whether every array's source names its chunks' versions
    /// (its records then say what each shard was made from, see `digests.rs`).
    pub(crate) fn tracked_fingerprint(&self) -> Result<zshard_state::Fingerprint> {
        let tracked = crate::run::digests::tracked(&self.plan.read_jobs(&self.input));
        Ok(self.fingerprint()?.tracking_sources(tracked))
    }

    /// Which source versions files of the destination describe this conversion's arrays (see
    /// `digests::listed_since`); with `overwrite`, none is read.
    pub(crate) fn kept_sources(&self, overwrite: bool) -> crate::run::digests::KeptSources {
        let plan = &self.plan;
        crate::run::digests::KeptSources {
            paths: plan.arrays.iter().map(|a| a.path.clone()).collect(),
            location: self.source_id.clone(),
            arrays: plan
                .arrays
                .iter()
                .map(|a| plan.source_path(a).to_string())
                .collect(),
            ignored: overwrite,
        }
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

/// A local destination where this conversion would write through a symbolic link (zshard's state
/// folder, a node's folder, an array's `c` folder of chunks, or a link on the way to one) is refused
/// before anything is written: what it wrote there would land outside the destination, and a later
/// Whether `error` is the budget's refusal of a shard index too big for the memory limit.
fn is_shard_index_refusal(error: &Error) -> bool {
    let error = match error {
        Error::Array { source, .. } => source.as_ref(),
        other => other,
    };
    matches!(
        error,
        Error::Pipeline(zshard_pipeline::Error::MemoryLimit {
            cause: zshard_pipeline::MemoryUse::ShardIndex { .. },
            ..
        })
    )
}

/// `--overwrite` never removes through links (the store refuses any write or removal through one, so
/// a link deeper down fails that shard instead).
fn refuse_links(destination: &Store, plan: &Plan) -> Result<()> {
    let arrays = plan.arrays.iter().map(|a| zshard_state::join(&a.path, "c"));
    let groups = plan.groups.iter().map(|(path, _)| path.clone());
    let paths = std::iter::once(zshard_state::STATE_DIR.to_string())
        .chain(arrays)
        .chain(groups);
    for path in paths {
        if let Some(link) = destination.first_link(&path) {
            return Err(Error::Destination {
                reason: format!(
                    "{} is a symbolic link on the way to {}: zshard never writes or removes through links in a destination; remove the link or convert elsewhere",
                    link.display(),
                    destination.url(&path)
                ),
            });
        }
    }
    Ok(())
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
