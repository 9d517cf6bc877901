//! `plan`: what a conversion would do, checked against the destination as `convert` finds it,
//! with what an update of a finished conversion would rewrite.

use super::*;

impl Conversion {
    /// What the conversion would do, from metadata alone: no chunk is listed or read, and nothing is
    /// written.
    pub fn plan(&self) -> Result<crate::PlanReport> {
        let opened = self.open()?;
        let budget = self.budget(&opened)?;
        self.check_destination(&opened)?;
        let jobs = opened.plan.read_jobs(&opened.input);
        let reads = zshard_pipeline::planned_reads(&jobs, &budget.options());
        let multipart = Location::parse(&self.destination)?.is_remote();
        let cost = crate::plan::plan_report::Cost::of(
            &opened.plan,
            &reads,
            self.store_options.part_size as u64,
            multipart,
        );
        let update = self.plan_update(&opened, &jobs)?;
        drop(jobs);
        let mut report = crate::PlanReport::new(
            opened.plan,
            budget,
            opened.input.url(),
            self.destination.clone(),
            opened.input.reference_reads(),
        )
        .with_memory_limit_source(memory::limit_origin(self.memory_limit));
        report.icechunk_chunks = opened.input.icechunk_chunks();
        report.cost = Some(cost);
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

    /// What a run would bring up to date in a destination that holds this conversion finished
    /// (see [`crate::UpdatePlan`]); `None` for any other destination (none yet, or an Icechunk
    /// repository).
    pub(super) fn plan_update(
        &self,
        opened: &Opened,
        jobs: &[zshard_pipeline::ArrayJob],
    ) -> Result<Option<crate::UpdatePlan>> {
        if self.icechunk_output().is_some() {
            return Ok(None);
        }
        // One round of reads, without retries: a destination that cannot be read (none yet, an
        // endpoint that does not answer) has no update to plan, and must not hold up the plan.
        let probe = StoreOptions {
            retries: Some(0),
            ..self.store_options.clone()
        };
        let runtime = IoRuntime::with_options(2, probe)?;
        let location = Location::parse(&self.destination)?;
        let Ok(destination) = Store::open_location(&location, runtime, false) else {
            return Ok(None);
        };
        let fingerprint = opened.fingerprint()?;
        let outputs = opened.plan.outputs();
        let survey = match zshard_state::survey_finished(&destination, &outputs, &fingerprint) {
            Ok(survey) => survey,
            Err(e) => {
                tracing::debug!("no update to plan: {}", zshard_state::one_line(&e));
                return Ok(None);
            }
        };
        if !zshard_state::has_kept_records(&survey, &outputs) {
            return Ok(None);
        }
        let listed = crate::run::digests::listed(jobs)?;
        let changes = zshard_state::shards_to_update(&survey, &outputs, &listed.digests);
        let reuse = crate::run::reuse::Reuse::for_plan(jobs, &opened.plan, &survey, &listed);
        Ok(Some(crate::plan::plan_report::UpdatePlan::of(
            &opened.plan,
            jobs,
            &changes,
            &|array, shard| reuse.inner_to_copy(jobs, array, shard),
        )))
    }
}
