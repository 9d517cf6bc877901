//! The conversion stages of zshard, joined by bounded channels:
//!
//! fetch (I/O threads) → decode (rayon) → assemble (one thread) → encode (rayon) → write (I/O threads).
//!
//! A message is one part of a shard of one array: shards bigger than [`Options::part_bytes`] are cut
//! into parts of whole inner chunks that go through the stages on their own and are streamed to the
//! sink in order (a shard that fits is one part). Stages know nothing of formats or stores: a
//! [`ChunkReader`](zshard_core::ChunkReader) yields encoded source chunks by grid position, codec
//! chains decode and encode, and a [`ShardSink`](zshard_core::ShardSink) stores finished shards.
//! Memory is bounded by the channel capacities (at most one message per worker) and a window of
//! messages in flight, not by the array size; [`budget`] sizes threads, part size and channel
//! capacity to a memory limit from the arrays' [`ArrayLayout`]s alone, before anything is read. The
//! order of [`ShardTask`]s is the caller's: a subset of shards (one worker's part, the shards not
//! done yet) is just a different iterator.
//!
//! ```no_run
//! # fn jobs() -> Vec<zshard_pipeline::ArrayJob> { unimplemented!() }
//! use zshard_pipeline::{run, Options, ShardTask};
//!
//! let jobs = jobs();
//! let stats = run(&jobs, ShardTask::all(&jobs), &Options::with_threads(4), &|_outcome| {}).unwrap();
//! println!("{} shards written", stats.shards_written);
//! ```

mod budget;
mod cancel;
mod error;
mod job;
mod stages;
mod stats;
mod window;

pub use budget::{budget, Budget, BudgetRequest, MemoryUse};
pub use cancel::Cancel;
pub use error::{Error, Result};
pub use job::{
    ArrayJob, ArrayLayout, Derived, Options, PartOutcome, Progress, ShardOutcome, ShardTask,
    DEFAULT_IO_THREADS,
};
pub use stages::{planned_reads, run, run_observed};
pub use stats::Stats;
