//! A run's budget: the memory its pipeline may take (what the plan, the source, the survey and
//! the listing hold counted first), and how many threads fetch and write (2 for local I/O, more
//! for object stores).

use super::*;

/// Threads fetching and threads writing for a run between `locations`: `explicit`, else 2 for local
/// paths and 8 when any location is remote.
pub(crate) fn io_threads(explicit: Option<usize>, locations: &[&Location]) -> usize {
    io_threads_for(explicit, locations.iter().any(|l| l.is_remote()))
}

/// Threads fetching and threads writing: `explicit` (capped, see
/// [`capped_io_threads`](crate::threads::capped_io_threads)), else 2 for local I/O and 8 for remote.
pub(super) fn io_threads_for(explicit: Option<usize>, remote: bool) -> usize {
    explicit
        .map(|n| crate::threads::capped_io_threads(n).0)
        .unwrap_or_else(|| default_io_threads(remote, u64::MAX))
        .max(1)
}

/// Fetch and write threads (each) of a conversion without `--io-threads`: 2 for local I/O; for remote
/// I/O 8, and up to 32 while that many shards of `largest_shard` raw bytes in flight in both directions
/// stay within [`REMOTE_SMALL_SHARDS_IN_FLIGHT`]. A remote run's speed is round trips in flight: small
/// shards are latency-bound (W10's 10,000 one-element shards at 20 ms: 34.6 s with 8 writers, 13.9 s
/// with 32), while big ones already fill the link with 8 (W7–W9, 4–8 MiB shards, keep 8).
pub(super) fn default_io_threads(remote: bool, largest_shard: u64) -> usize {
    if !remote {
        return zshard_pipeline::DEFAULT_IO_THREADS;
    }
    let fitting = REMOTE_SMALL_SHARDS_IN_FLIGHT / largest_shard.max(1).saturating_mul(2);
    usize::try_from(fitting)
        .unwrap_or(usize::MAX)
        .clamp(REMOTE_IO_THREADS, REMOTE_IO_THREADS_MAX)
}

/// See [`default_io_threads`].
pub(super) const REMOTE_IO_THREADS: usize = 8;
/// See [`default_io_threads`].
pub(super) const REMOTE_IO_THREADS_MAX: usize = 32;
/// Raw shard bytes that the extra threads of a remote run may hold (see [`default_io_threads`]).
pub(super) const REMOTE_SMALL_SHARDS_IN_FLIGHT: u64 = 64 << 20;

/// What a run holds beside its pipeline from when it knows its shards done to its end (counted by
/// [`Conversion::budget_holding`]): the destination's survey (its record files and listed shards),
/// the source's listing (16 bytes per source chunk, 8 per shard), the sets of shards done (a hash
/// table entry per shard: an update that rewrites a few shards of a million holds a million), and
/// for an update, the decoded inner digests of the shards it may rewrite (8 bytes per inner chunk:
/// up to 128 KiB per shard).
pub(crate) fn held(
    survey: &zshard_state::Survey,
    listed: &crate::run::digests::Listed,
    resume: &zshard_state::Resume,
    reuse: Option<&crate::run::reuse::Reuse>,
) -> u64 {
    survey
        .memory_bytes()
        .saturating_add(listed.memory_bytes())
        .saturating_add(resume.memory_bytes())
        .saturating_add(reuse.map_or(0, crate::run::reuse::Reuse::memory_bytes))
}

impl Conversion {
    /// The pipeline's budget for `opened` under the memory limit.
    pub(super) fn budget(&self, opened: &Opened) -> Result<Budget> {
        self.budget_holding(opened, 0)
    }

    /// [`Conversion::budget`] when `held` bytes more are held for the whole run: what the
    /// destination's survey and the source's listing (kept to record what each shard is made
    /// from) hold, known once they are read.
    pub(crate) fn budget_holding(&self, opened: &Opened, held: u64) -> Result<Budget> {
        let outside = memory::Outside {
            upload_buffers: memory::upload_buffers(
                &opened.destination,
                self.store_options.part_size,
                &opened.plan.layouts(),
            ),
            // The plan, held for the whole run, and what the source holds.
            // With a pyramid, also the shards of its lower levels that wait for their blocks.
            resident: opened
                .input
                .memory_bytes()
                .saturating_add(memory::plan_bytes(opened.plan.arrays.len()))
                .saturating_add(crate::plan::pyramid::pending_bytes(&opened.plan))
                .saturating_add(held),
        };
        // A local reference file whose targets are remote reads over the network too.
        let remote = opened.input.reads_remote() || opened.destination.is_remote();
        let budget_with = |io_threads| {
            memory::budget(
                &opened.plan,
                &opened.input.url(),
                crate::threads::capped_threads(self.threads).0,
                self.memory_limit,
                outside,
                io_threads,
            )
        };
        if let Some(explicit) = self.io_threads {
            return budget_with(crate::threads::capped_io_threads(explicit.max(1)).0);
        }
        let usual = budget_with(default_io_threads(remote, u64::MAX))?;
        if !remote {
            return Ok(usual);
        }
        let largest_shard = opened
            .plan
            .layouts()
            .iter()
            .map(ArrayLayout::shard_bytes)
            .max()
            .unwrap_or(0);
        let wanted = default_io_threads(remote, largest_shard);
        if wanted <= usual.io_threads {
            return Ok(usual);
        }
        // More I/O threads only where the memory limit lets them in without taking CPU threads or part
        // size from the run (or refusing it).
        Ok(match budget_with(wanted) {
            Ok(more) if more.threads >= usual.threads && more.part_bytes >= usual.part_bytes => {
                more
            }
            _ => usual,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_run_holds_counts_its_done_shards_and_the_inner_digests_it_decoded() {
        let survey = zshard_state::Survey::default();
        let listed = crate::run::digests::Listed {
            digests: zshard_state::Digests::new(vec![Some(vec![0; 1000])]),
            versions: vec![None],
            keep: Vec::new(),
            found: vec![None],
        };
        let mut resume = zshard_state::Resume::default();
        let listing_only = held(&survey, &listed, &resume, None);
        assert_eq!(listing_only, 8000, "8 bytes per shard digest");
        // An update of a million-shard array that rewrites one: a million shards done.
        resume.done = vec![(0..1_000_000u64).collect()];
        let with_done = held(&survey, &listed, &resume, None);
        assert!(
            with_done >= listing_only + 9_000_000 && with_done <= listing_only + 20_000_000,
            "{with_done}"
        );
        // 100 shards to rewrite, 16,384 inner chunks each: 128 KiB of digests each.
        let recorded = (0..100u64).map(|i| (i, vec![7u64; 16_384])).collect();
        let reuse = crate::run::reuse::Reuse::with_recorded(recorded);
        let with_reuse = held(&survey, &listed, &resume, Some(&reuse));
        assert!(
            with_reuse >= with_done + 100 * (128 << 10),
            "{with_reuse} {with_done}"
        );
        assert!(with_reuse <= with_done + 100 * (128 << 10) + (16 << 10));
    }

    #[test]
    fn remote_runs_of_small_shards_get_more_io_threads_and_big_ones_keep_eight() {
        assert_eq!(default_io_threads(false, 1), 2);
        assert_eq!(default_io_threads(false, 1 << 30), 2);
        // W10: one-element shards; a 64 KiB shard of a tile pyramid.
        assert_eq!(default_io_threads(true, 1), 32);
        assert_eq!(default_io_threads(true, 64 << 10), 32);
        assert_eq!(default_io_threads(true, 2 << 20), 16);
        // W8 (1024² f4) and W7 (2048² u2): 4 and 8 MiB shards keep the 8 they were measured with.
        assert_eq!(default_io_threads(true, 4 << 20), 8);
        assert_eq!(default_io_threads(true, 8 << 20), 8);
        assert_eq!(default_io_threads(true, u64::MAX), 8);
        assert_eq!(io_threads_for(Some(3), true), 3);
        assert_eq!(io_threads_for(Some(0), false), 1);
        assert_eq!(io_threads_for(None, true), 8);
    }
}
