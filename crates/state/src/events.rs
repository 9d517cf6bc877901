//! The events of a run that the conversion and the destination protocol both tell: the observer a
//! front end gives (a progress bar, a log, a Python callback) and the work ahead it is told about.
//! Here, below both, so that the protocol can warn through the observer of the run it serves.

/// Told about a run as it goes (a progress bar, a log, a Python callback).
pub trait Observer: Sync {
    /// Before the run starts, its listing of the source (what each shard is made from now, to
    /// compare with what a finished destination was made from) is under way, beside the survey of
    /// the destination: `listed` counts the objects both have named so far, for a display to read
    /// as often as it shows it until [`Observer::started`] (a source of many objects takes minutes
    /// to list). Told once, and not for a run whose source names no versions.
    fn listing(&self, _listed: &zshard_store::ListedCount) {}
    /// The run starts with this many shards to convert (those not done by an earlier run).
    fn started(&self, _pending_shards: u64) {}
    /// The work ahead, after [`Observer::started`]: shards, inner chunks and raw bytes.
    fn work(&self, _work: &Work) {}
    /// A part of a shard of the array named `array` was written (before its shard is done; a shard
    /// that fits the part size is one part).
    fn part_done(&self, _array: &str, _part: &zshard_pipeline::PartOutcome) {}
    /// A shard is done (written, or found to hold only the fill value).
    fn shard_done(&self, _outcome: &zshard_pipeline::ShardOutcome) {}
    /// Something went wrong that does not stop the run or change its result (a report that could
    /// not be written after the run had failed anyway), or the output will read differently in some
    /// reader than the source (a v2 fill value xarray cannot be told about in v3).
    fn warning(&self, _message: &str) {}
}

/// Observes nothing.
impl Observer for () {}

/// The work of a run, told to [`Observer::work`] before the first shard: what the shards still to
/// convert amount to. Bytes are raw (decoded) sizes of their inner chunks, which the metadata gives
/// in advance (compressed sizes depend on the data), so the sum of [`PartOutcome::raw_bytes`](zshard_pipeline::PartOutcome::raw_bytes) of a
/// complete run equals [`Work::raw_bytes`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Work {
    /// Shards to convert (those not done by an earlier run, of this worker's share).
    pub shards: u64,
    /// Inner chunks of those shards.
    pub inner_chunks: u64,
    /// Raw bytes of those inner chunks.
    pub raw_bytes: u64,
    /// Shards of this worker's share that earlier runs did (not converted again): with
    /// [`Work::shards`], the whole share, so that a resumed run's progress starts from what is done
    /// (as `zshard status` counts it), not from 0 of what is left.
    pub done_shards: u64,
    /// Inner chunks of those shards.
    pub done_inner_chunks: u64,
    /// Raw bytes of those inner chunks.
    pub done_raw_bytes: u64,
}

impl Work {
    /// This work with `whole`'s (this worker's whole share, done or not) beyond it counted as done
    /// by earlier runs.
    pub fn with_done_of(self, whole: &Work) -> Work {
        Work {
            done_shards: whole.shards.saturating_sub(self.shards),
            done_inner_chunks: whole.inner_chunks.saturating_sub(self.inner_chunks),
            done_raw_bytes: whole.raw_bytes.saturating_sub(self.raw_bytes),
            ..self
        }
    }
}
