//! `finalize`: the metadata of a partitioned conversion once every worker's shards are done.

use super::*;
use crate::run::conversion::budget::held;
use crate::run::digests::Listed;
use zshard_state::{Owner, Resume};

impl Conversion {
    /// After a partitioned conversion: checks that every shard of every worker is done, then writes
    /// the metadata. Once [`Conversion::cancel`] is cancelled it stops before the next document
    /// (each is written whole or not at all) with [`Error::Cancelled`]; a rerun finishes it.
    pub fn finalize(&self) -> Result<Finalized> {
        if let Some(output) = self.icechunk_output() {
            return self.finalize_into_icechunk(&output);
        }
        self.refuse_a_repositorys_staging()?;
        self.finalize_opened(self.open()?)
    }

    /// Refuses to finalize the staging folder of an Icechunk repository as a Zarr destination: its
    /// metadata would be written there and nothing committed; the repository's finalize commits.
    fn refuse_a_repositorys_staging(&self) -> Result<()> {
        let trimmed = self.destination.trim_end_matches('/');
        let Some((repository, _)) = trimmed
            .rsplit_once('/')
            .filter(|(_, name)| *name == zshard_icechunk::STAGING)
        else {
            return Ok(());
        };
        if !zshard_icechunk::is_repository(repository) {
            return Ok(());
        }
        Err(Error::Options {
            reason: format!(
                "{} is the staging folder of the Icechunk repository {repository}: run `zshard \
                 finalize {repository}`, which commits what the workers staged",
                self.destination
            ),
        })
    }

    /// [`Conversion::finalize`] into Zarr, with the source opened and planned.
    pub(crate) fn finalize_opened(&self, opened: Opened) -> Result<Finalized> {
        let destination = opened.destination(false)?;
        let fingerprint = opened.fingerprint()?;
        let (plan, input) = (&opened.plan, &opened.input);
        let mut finalized = Finalized {
            destination: destination.url(""),
            arrays: plan.arrays.len(),
            groups: plan.groups.len(),
            already_finalized: false,
            published: None,
            warnings: Vec::new(),
        };
        let survey = zshard_state::survey(&destination, &plan.outputs(), true, &fingerprint)?;
        if let Prepared::Complete =
            zshard_state::check_recorded(&destination, &plan.outputs(), &fingerprint, &survey)?
        {
            finalized.already_finalized = true;
            clear_state(&destination, None, &[])?;
            return Ok(finalized);
        }
        self.stop_if_cancelled()?;
        let lease = Lease::acquire(&destination, Partition::ALL, self.lease_stale_after)?;
        // Read again under the lease: what it shows cannot be cleared by an --overwrite meanwhile.
        let survey = zshard_state::survey(&destination, &plan.outputs(), true, &fingerprint)?;
        // As an unsplit run lists: from the versions an earlier finished run kept, brought forward
        // by the source's own diff (Icechunk), else whole. Every worker's shard counts below only
        // when its record's digest is the one these versions give, so they are the versions the
        // output is made from, and are kept for the next run as an unsplit run keeps its own.
        let listed = crate::run::digests::listed_since(
            &plan.read_jobs(input),
            &destination,
            &opened.kept_sources(false),
        )?;
        let paths: Vec<String> = plan.arrays.iter().map(|a| a.path.clone()).collect();
        finalized.warnings = listed.warnings(&paths);
        let digests = &listed.digests;
        let fingerprint = fingerprint.tracking_sources(digests.all_known());
        let outputs = plan.outputs();
        let resume = zshard_state::done_shards(
            &destination,
            &outputs,
            Partition::ALL,
            lease.key(),
            &survey,
            digests,
        )?;
        // Needed only to make a pyramid's small levels (a refusal counts only then), with what is
        // held beside their pipeline: the survey, the listing and the done shards.
        let budget = self.budget_holding(&opened, held(&survey, &listed, &resume, None));
        let done = &resume.done;
        let jobs = plan.jobs(input, &destination);
        // The levels of a pyramid no worker makes are made below.
        let mut missing = pending(&jobs, &outputs, Partition::ALL, done)
            .filter(|task| *outputs.owner(task.array) != Owner::Finalize);
        if let Some(first) = missing.next() {
            let count = 1 + missing.count() as u64;
            let array = &plan.arrays[first.array];
            return Err(Error::NotDone {
                missing: count,
                array: array_name(&input.url(), &array.path),
                key: jobs[first.array].sink.shard_key(&first.shard),
            });
        }
        drop(missing);
        zshard_state::abort_recorded_uploads(&destination)?;
        let records =
            self.make_small_levels(&destination, plan, jobs, (&resume, &listed), budget)?;
        // Shards that the workers' runs wrote after their last checkpoint (trusted above by their
        // manifest's checksum) reach the disk before the metadata says the output is complete.
        destination.checkpoint()?;
        let keep_manifest = self.keep_manifest || survey.asks_to_keep_the_manifest();
        finish(
            &destination,
            plan,
            self.consolidate,
            &self.cancel,
            &records,
            lease,
            keep_manifest,
            MadeFrom {
                digests,
                fingerprint: &fingerprint,
                survey: &survey,
                source_versions: &listed.keep,
            },
        )?;
        Ok(finalized)
    }
}

impl Conversion {
    /// The levels of a pyramid that no worker makes ([`Owner::Finalize`]: those some shard of which
    /// is made from the regions of several workers): made in one pass over the last level the
    /// workers made, read back from the output as they wrote it, by the pipeline stage that makes
    /// them in a single run (so the bytes are the same). That read is the only one of the output:
    /// level `k` holds 1/4^k of the image (2-D), and with the shapes derived from level 0's the
    /// workers make every level down to the one whose shard is one inner chunk. Resumable like a
    /// run: the shards are recorded as done, and a rerun makes only those that are not. Returns
    /// the last record files, which go out with the metadata.
    fn make_small_levels(
        &self,
        destination: &Store,
        plan: &Plan,
        mut jobs: Vec<ArrayJob>,
        (resume, listed): (&Resume, &Listed),
        budget: Result<Budget>,
    ) -> Result<Vec<(String, bytes::Bytes)>> {
        let outputs = plan.outputs();
        let first = (0..jobs.len()).find(|&i| *outputs.owner(i) == Owner::Finalize);
        let Some(from) = first.and_then(|i| jobs[i].derived.as_ref().map(|d| d.from)) else {
            return Ok(Vec::new());
        };
        let budget = &budget?;
        let done = &resume.done;
        let array = &plan.arrays[from];
        let name = jobs[from].name.clone();
        let unreadable = |source: Error| Error::OutputArray {
            array: name.clone(),
            source: Box::new(source),
        };
        // The level as its metadata will describe it, read by inner chunk.
        let document = document_bytes(&array.output.to_json());
        let parsed =
            zshard_zarr::parse_v3_node(&super::finish::metadata_key(&array.path), &document)
                .map_err(|e| unreadable(e.into()))?;
        let zshard_core::NodeKind::Array(meta) = parsed.kind else {
            return Err(unreadable(Error::Options {
                reason: "its metadata is not an array's".into(),
            }));
        };
        let meta = meta.read_by_inner_chunk();
        let job = &mut jobs[from];
        job.reader = zshard_zarr::array_chunk_reader(destination, &array.path, &meta);
        job.source_chain = job.inner_chain.clone().ok_or_else(|| {
            unreadable(Error::Options {
                reason: "it has no inner codecs".into(),
            })
        })?;
        job.layout.source_repr = job.layout.inner_repr.clone();
        job.layout.source_grid = None;
        job.layout.passthrough = false;
        job.derived = None;
        // The level read stays as the workers wrote it.
        // Already written, and stays so.
        job.sink = Arc::new(crate::plan::NoSink(" (read back)"));
        let jobs = jobs;
        let tasks: Vec<ShardTask> = ShardTask::all(&jobs)
            .filter(|task| task.array == from && feeds_undone(&jobs, done, task))
            .collect();
        if tasks.is_empty() {
            return Ok(Vec::new());
        }
        // Recorded as an unpartitioned run's: every worker's records are trusted for the shards
        // that worker makes, and these are made by none.
        let conversion = Conversion {
            partition: Partition::ALL,
            ..self.clone()
        };
        let builder = Mutex::new(ReportBuilder::new(&conversion));
        let recorder = Recorder::new(
            &conversion,
            destination,
            plan,
            &(),
            &builder,
            &resume.untrusted,
            listed,
        );
        let names = plan.arrays.iter().map(|a| a.path.clone()).collect();
        let result = self.with_writeback(destination, || {
            zshard_pipeline::run_observed(
                &jobs,
                tasks.into_iter(),
                &zshard_pipeline::Options {
                    cancel: self.cancel.clone(),
                    ..budget.options()
                },
                &crate::run::progress::Relay {
                    observer: &(),
                    names,
                    shard_done: &|outcome: &ShardOutcome| {
                        if outcome.task.array != from {
                            recorder.shard_done(outcome);
                        }
                    },
                },
            )
        });
        let checkpointed = destination.checkpoint();
        let (records, log_error) = recorder.finish()?;
        checkpointed?;
        if let Err(e) = result {
            // What was made is recorded, for the rerun.
            destination.block_on(destination.put_many_async(&records))?;
            return Err(e.into());
        }
        if let Some(e) = log_error {
            return Err(Error::Record {
                source: Box::new(e),
            });
        }
        self.stop_if_cancelled()?;
        Ok(records)
    }
}
