//! `plan`: what a conversion would do, checked against the destination as `convert` finds it,
//! with what an update of a finished conversion would rewrite.

use super::*;

impl Conversion {
    /// What the conversion would do, from metadata and one listing of each array's stored chunks
    /// (for the stored bytes it reads, as a run lists them): no chunk is read, and nothing is
    /// written.
    pub fn plan(&self) -> Result<crate::PlanReport> {
        let opened = self.open()?;
        let budget = self.budget(&opened)?;
        self.check_destination(&opened)?;
        let jobs = opened.plan.read_jobs(&opened.input);
        let reads = zshard_pipeline::planned_reads(&jobs, &budget.options());
        let multipart = Location::parse(&self.destination)?.is_remote();
        let mut cost = crate::plan::plan_report::Cost::of(
            &opened.plan,
            &reads,
            self.store_options.part_size as u64,
            multipart,
        );
        let destination = self.probed_destination()?;
        // As the update would take them: from the versions a finished conversion kept (an Icechunk
        // snapshot's), brought forward by the source's own diff, rather than listed.
        let known = match &destination {
            Some(destination) => {
                crate::run::digests::kept_versions(&jobs, destination, &opened.kept_sources(false))
            }
            None => Vec::new(),
        };
        let (listed, brought_forward) = list_sources(
            &opened.plan,
            &jobs,
            &reads,
            self.store_options.max_requests,
            &known,
        );
        let estimate = self.count_requests(&opened, &jobs, &reads, &listed, &mut cost);
        let update = self.plan_update(&opened, destination.as_ref(), &jobs, listed, &budget)?;
        drop(jobs);
        let mut report = crate::PlanReport::new(
            opened.plan,
            budget,
            opened.input.url(),
            self.destination.clone(),
            opened.input.reference_reads(),
        )
        .with_memory_limit_source(memory::limit_origin(self.memory_limit));
        // Counting an Icechunk source's chunks reads every manifest: not when every array's
        // versions came from what the destination kept (the plan of an update reads what it does).
        if !brought_forward {
            report.icechunk_chunks = opened.input.icechunk_chunks()?;
        }
        report.cost = Some(cost);
        report.estimate = Some(estimate);
        report.update = update;
        if let Some(output) = self.icechunk_output() {
            // Which repository the commit goes to, and in which spec version: read, never made.
            let runtime = zshard_store::IoRuntime::with_options(2, self.store_options.clone())?;
            let spec = zshard_icechunk::destination_spec(&self.destination, output.spec, &runtime)?;
            report.icechunk_output = Some((output.branch, spec));
        }
        Ok(report)
    }

    /// What `plan` checks of the destination, as `convert` would find it (issue 44): that it can
    /// be listed and read, and that what it holds (a claim, records, metadata) does not make
    /// `convert` refuse it. A local folder that does not exist yet passes: `convert` makes it.
    pub(super) fn check_destination(&self, opened: &Opened) -> Result<()> {
        if self.icechunk_output().is_some() {
            return Ok(());
        }
        let location = Location::parse(&self.destination)?;
        if location.local_path().is_some_and(|path| !path.exists()) {
            return Ok(());
        }
        // A plan answers soon: an endpoint that does not answer is retried for 15 s at most.
        let options = StoreOptions {
            retry_timeout: self
                .store_options
                .retry_timeout
                .min(std::time::Duration::from_secs(15)),
            ..self.store_options.clone()
        };
        let runtime = IoRuntime::with_options(2, options)?;
        let destination = Store::open_location(&location, runtime, false)?;
        // A finished conversion whose source changed is brought up to date, not refused: its
        // records name what each shard was made from.
        let fingerprint = opened.fingerprint()?.tracking_sources(true);
        zshard_state::check_plannable(&destination, &opened.plan.outputs(), &fingerprint)?;
        Ok(())
    }

    /// The destination as `plan` reads it (see [`Conversion::plan_update`]): without retries, as a
    /// destination that cannot be read (none yet, an endpoint that does not answer) has no update
    /// to plan, and must not hold up the plan. `None` for an Icechunk repository, or a destination
    /// that cannot be opened.
    fn probed_destination(&self) -> Result<Option<Store>> {
        if self.icechunk_output().is_some() {
            return Ok(None);
        }
        let probe = StoreOptions {
            retries: Some(0),
            ..self.store_options.clone()
        };
        let runtime = IoRuntime::with_options(2, probe)?;
        let location = Location::parse(&self.destination)?;
        Ok(Store::open_location(&location, runtime, false).ok())
    }

    /// What a run would bring up to date in `destination` (see
    /// [`Conversion::probed_destination`]) when it holds this conversion finished (see
    /// [`crate::UpdatePlan`]); `None` for any other destination (none yet, or an Icechunk
    /// repository).
    pub(super) fn plan_update(
        &self,
        opened: &Opened,
        destination: Option<&Store>,
        jobs: &[zshard_pipeline::ArrayJob],
        listed: Vec<Option<zshard_core::ChunkVersions>>,
        budget: &zshard_pipeline::Budget,
    ) -> Result<Option<crate::UpdatePlan>> {
        let Some(destination) = destination else {
            return Ok(None);
        };
        let fingerprint = opened.fingerprint()?;
        let outputs = opened.plan.outputs();
        let survey = match zshard_state::survey_finished(destination, &outputs, &fingerprint) {
            Ok(survey) => survey,
            Err(e) => {
                tracing::debug!("no update to plan: {}", zshard_state::one_line(&e));
                return Ok(None);
            }
        };
        if !zshard_state::has_kept_records(&survey, &outputs) {
            return Ok(None);
        }
        let listed = crate::run::digests::listed_with(jobs, listed)?;
        let changes = zshard_state::shards_to_update(&survey, &outputs, &listed.digests);
        let reuse = crate::run::reuse::Reuse::for_plan(jobs, &opened.plan, &survey, &listed);
        Ok(Some(crate::plan::plan_report::UpdatePlan::of(
            &opened.plan,
            jobs,
            &changes,
            &|array, shard| reuse.inner_to_copy(jobs, array, shard),
            &|array| {
                jobs.get(array)
                    .map_or(0, |job| budget.parts_per_shard(&job.layout))
            },
            destination.location().is_remote(),
        )))
    }
}

/// Each array's stored chunks, from one listing of them (for the stored bytes the job reads): of
/// the arrays read from a source whose reader names their versions and cannot tell its reads
/// without listing (references can: their byte ranges are `reads`). `None` for the others, and
/// for a source that cannot be listed (an HTTP server): its stored bytes are then unknown. Arrays
/// are listed `in_flight` at a time (`--max-requests`, at most [`MAX_LISTINGS_IN_FLIGHT`]): a
/// hierarchy of many arrays on an object store would otherwise wait for each listing in turn.
/// An array with versions `known` (per job: kept by a finished conversion, see
/// `digests::kept_versions`) has them brought forward as the update would (see
/// [`zshard_core::ChunkReader::chunk_versions_since`]); also whether every array whose source has
/// a version as a whole (an Icechunk snapshot) had, so that no manifest was listed (`false`
/// without one).
fn list_sources(
    plan: &crate::Plan,
    jobs: &[zshard_pipeline::ArrayJob],
    reads: &[Option<zshard_core::PlannedReads>],
    in_flight: usize,
    known: &[Option<zshard_core::KnownVersions>],
) -> (Vec<Option<zshard_core::ChunkVersions>>, bool) {
    let wanted: Vec<usize> = (0..plan.arrays.len().min(jobs.len()))
        .filter(|&i| {
            reads.get(i).copied().flatten().is_none()
                && plan.made_from_above(&plan.arrays[i].path).is_none()
                && jobs[i].reader.names_versions()
        })
        .collect();
    let list = |i: usize| -> (Option<zshard_core::ChunkVersions>, bool) {
        let job = &jobs[i];
        let grid = job.layout.source_chunk_grid();
        let listing = match known.get(i).and_then(Option::as_ref) {
            Some(known) => {
                job.reader
                    .chunk_versions_since(&grid, Some(known))
                    .map(|(versions, how)| {
                        let forward = !matches!(how, zshard_core::VersionsFrom::Listed { .. });
                        (versions, forward)
                    })
            }
            None => job.reader.chunk_versions(&grid).map(|v| (v, false)),
        };
        match listing {
            Ok(listing) => listing,
            Err(e) => {
                tracing::debug!(
                    "cannot list the chunks of {}: {}",
                    plan.arrays[i].path,
                    zshard_core::chain_text(&e)
                );
                (None, false)
            }
        }
    };
    let next = std::sync::atomic::AtomicUsize::new(0);
    type Listing = (usize, (Option<zshard_core::ChunkVersions>, bool));
    let listed: Vec<Listing> = std::thread::scope(|scope| {
        let threads = in_flight.clamp(1, MAX_LISTINGS_IN_FLIGHT).min(wanted.len());
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&i) = wanted.get(n) else { break };
                        mine.push((i, list(i)));
                    }
                    mine
                })
            })
            .collect();
        workers
            .into_iter()
            // A listing thread that panicked lists nothing: its arrays' stored bytes are unknown.
            .flat_map(|worker| worker.join().unwrap_or_default())
            .collect()
    });
    let mut out: Vec<Option<zshard_core::ChunkVersions>> = vec![None; jobs.len()];
    let mut forward = vec![false; jobs.len()];
    for (i, (versions, brought_forward)) in listed {
        out[i] = versions;
        forward[i] = brought_forward;
    }
    let versioned: Vec<usize> = (0..jobs.len())
        .filter(|&i| jobs[i].reader.source_version().is_some())
        .collect();
    let all_forward = !versioned.is_empty() && versioned.iter().all(|&i| forward[i]);
    (out, all_forward)
}

/// The most arrays whose chunks `plan` lists side by side (a thread each).
const MAX_LISTINGS_IN_FLIGHT: usize = 64;

impl Conversion {
    /// Completes `cost` with the stored bytes (from `listed` and the references' `reads`) and every
    /// request of the job by kind on each side, and estimates its time and price.
    fn count_requests(
        &self,
        opened: &Opened,
        jobs: &[zshard_pipeline::ArrayJob],
        reads: &[Option<zshard_core::PlannedReads>],
        listed: &[Option<zshard_core::ChunkVersions>],
        cost: &mut crate::Cost,
    ) -> crate::Estimate {
        use crate::plan::estimate::{self, Requests, Side};
        let plan = &opened.plan;
        let mut stored = Some(0u64);
        let mut source = Requests {
            get: cost.get_requests,
            ..Requests::default()
        };
        for (i, array) in plan.arrays.iter().enumerate() {
            if plan.made_from_above(&array.path).is_some() {
                continue;
            }
            let bytes = match (reads.get(i).copied().flatten(), listed.get(i)) {
                (Some(reads), _) => Some(reads.bytes),
                (None, Some(Some(versions))) => {
                    source.list += estimate::listing_pages(versions.len() as u64);
                    versions.stored_bytes()
                }
                _ => None,
            };
            stored = stored.zip(bytes).map(|(a, b)| a + b);
        }
        cost.stored_bytes_in = stored;
        let destination = Requests {
            put: cost.put_requests,
            ..Requests::default()
        };
        let source_remote = Location::parse(&opened.input.url()).is_ok_and(|l| l.is_remote());
        let destination_remote = Location::parse(&self.destination).is_ok_and(|l| l.is_remote());
        // The output taken to compress as the source does; raw sizes when that is unknown.
        let bytes_out = match stored {
            Some(stored) if cost.raw_bytes_in > 0 => {
                (cost.put_bytes as u128 * stored as u128 / cost.raw_bytes_in as u128) as u64
            }
            _ => cost.put_bytes,
        };
        let source_side = Side {
            requests: source,
            bytes: stored.unwrap_or(cost.raw_bytes_in),
            remote: source_remote,
        };
        let mut destination_side = Side {
            requests: destination,
            bytes: bytes_out,
            remote: destination_remote,
        };
        // Workers stated for the estimate count as the job's (`plan` itself runs as one).
        let stated = &self.estimate_with;
        let workers = stated.workers.unwrap_or(self.partition.count).max(1);
        let in_flight = self.store_options.max_requests as u64;
        // The state's records and lease renewals follow the run's length: from the data's.
        let data_seconds = estimate::seconds(
            &source_side,
            &destination_side,
            (workers, in_flight),
            stated,
        );
        let job = estimate::Job {
            workers,
            shards: plan.arrays.iter().map(|a| a.geometry.shard_count()).sum(),
            arrays: plan.arrays.len() as u64,
            tracked: crate::run::digests::tracked(jobs),
            keep_manifest: self.keep_manifest,
            checkpoint_seconds: self.record_log().1.as_secs_f64(),
            renew_seconds: self.lease_stale_after.as_secs_f64() / 4.0,
        };
        // An Icechunk output keeps no zshard state: its commit's requests are not counted.
        let (by_file, state) = match self.icechunk_output() {
            Some(_) => Default::default(),
            None => estimate::state_requests(&job, data_seconds),
        };
        destination_side.requests += state;
        cost.source_requests = source_side.requests;
        cost.destination_requests = destination_side.requests;
        cost.state_requests = by_file;
        estimate::estimate(
            &source_side,
            &destination_side,
            (workers, in_flight),
            stated,
        )
    }
}
