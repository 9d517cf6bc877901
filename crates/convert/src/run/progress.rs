//! What a run tells its [`Observer`] as it goes, besides the shards: the work ahead (so a front end
//! can show a fraction, a rate and an ETA by bytes) and each part of a shard as it is written (so
//! progress advances inside a large shard).

use zshard_core::product;
use zshard_pipeline::{ArrayJob, PartOutcome, ShardOutcome, ShardTask};

use zshard_state::{Observer, Work};

/// The work of converting `tasks`, shards of `jobs`: the inner chunks they store (none of the
/// padding past the array's end).
pub(crate) fn work_of(jobs: &[ArrayJob], tasks: impl Iterator<Item = ShardTask>) -> Work {
    let chunk_bytes: Vec<u64> = jobs
        .iter()
        .map(|job| {
            product(job.layout.geometry.inner_shape())
                * job.layout.inner_repr.data_type.size().max(1) as u64
        })
        .collect();
    tasks.fold(Work::default(), |mut work, task| {
        let geometry = &jobs[task.array].layout.geometry;
        let chunks = geometry.chunks_inside(&geometry.shard_region(&task.shard));
        work.shards += 1;
        work.inner_chunks += chunks;
        work.raw_bytes += chunks * chunk_bytes[task.array];
        work
    })
}

/// Passes the pipeline's events on: parts to the observer, with the array's name, and shards to
/// `shard_done` (which tells the observer and records them).
pub(crate) struct Relay<'a> {
    pub(crate) observer: &'a dyn Observer,
    /// The name of each array in messages, by index.
    pub(crate) names: Vec<String>,
    pub(crate) shard_done: &'a (dyn Fn(&ShardOutcome) + Sync),
}

impl zshard_pipeline::Progress for Relay<'_> {
    fn part_done(&self, part: &PartOutcome) {
        let name = self.names.get(part.task.array).map_or("", String::as_str);
        self.observer.part_done(name, part);
    }

    fn shard_done(&self, outcome: &ShardOutcome) {
        (self.shard_done)(outcome);
    }
}
