//! `finalize`: the metadata of a partitioned conversion once every worker's shards are done.

use super::*;

impl Conversion {
    /// After a partitioned conversion: checks that every shard of every worker is done, then writes
    /// the metadata. Once [`Conversion::cancel`] is cancelled it stops before the next document
    /// (each is written whole or not at all) with [`Error::Cancelled`]; a rerun finishes it.
    pub fn finalize(&self) -> Result<Finalized> {
        if let Some(output) = self.icechunk_output() {
            return self.finalize_into_icechunk(&output);
        }
        self.finalize_opened(self.open()?)
    }

    /// [`Conversion::finalize`] into Zarr, with the source opened and planned.
    pub(crate) fn finalize_opened(&self, opened: Opened) -> Result<Finalized> {
        let destination = opened.destination(false)?;
        let fingerprint = opened.fingerprint()?;
        let Opened { plan, input, .. } = opened;
        let mut finalized = Finalized {
            destination: destination.url(""),
            arrays: plan.arrays.len(),
            groups: plan.groups.len(),
            already_finalized: false,
            published: None,
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
        let digests = crate::run::digests::of(&plan.read_jobs(&input))?;
        let fingerprint = fingerprint.tracking_sources(digests.all_known());
        let done = zshard_state::done_shards(
            &destination,
            &plan.outputs(),
            Partition::ALL,
            lease.key(),
            &survey,
            &digests,
        )?
        .done;
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
        zshard_state::abort_recorded_uploads(&destination)?;
        // Shards that the workers' runs wrote after their last checkpoint (trusted above by their
        // manifest's checksum) reach the disk before the metadata says the output is complete.
        destination.checkpoint()?;
        let keep_manifest = self.keep_manifest || survey.asks_to_keep_the_manifest();
        finish(
            &destination,
            &plan,
            self.consolidate,
            &self.cancel,
            &[],
            lease,
            keep_manifest,
            MadeFrom {
                digests: &digests,
                fingerprint: &fingerprint,
                survey: &survey,
            },
        )?;
        Ok(finalized)
    }
}
