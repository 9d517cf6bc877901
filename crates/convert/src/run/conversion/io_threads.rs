//! How many threads fetch and write for a run: 2 for local I/O, more for object stores.

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
