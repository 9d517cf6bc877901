use std::sync::Arc;

use zshard_core::{ChunkReader, ChunkRepr, CodecChain, ShardGeometry, ShardSink};

/// Everything the stages need to convert one array: where chunks come from and how they decode, the
/// target geometry and inner codecs, and where shards go.
#[derive(Debug, Clone)]
pub struct ArrayJob {
    /// The array's name in messages (its path in the hierarchy, or its location).
    pub name: String,
    pub geometry: ShardGeometry,
    /// A decoded source chunk (its shape is the source chunk shape).
    pub source_repr: ChunkRepr,
    pub source_chain: CodecChain,
    /// A decoded inner chunk of the output.
    pub inner_repr: ChunkRepr,
    pub inner_chain: CodecChain,
    pub reader: Arc<dyn ChunkReader>,
    pub sink: Arc<dyn ShardSink>,
}

/// One unit of work: a shard of one of the jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardTask {
    pub array: usize,
    pub shard: Vec<u64>,
}

impl ShardTask {
    /// Every shard of every job, array by array, shards in C order.
    pub fn all(jobs: &[ArrayJob]) -> impl Iterator<Item = ShardTask> + '_ {
        jobs.iter().enumerate().flat_map(|(array, job)| {
            let grid = job.geometry.shard_grid();
            (0..zshard_core::product(&grid)).map(move |i| ShardTask {
                array,
                shard: zshard_core::unravel_index(i, &grid),
            })
        })
    }
}

/// Knobs of a run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Worker threads for each CPU stage (decode, encode).
    pub threads: usize,
    /// Capacity of each channel between stages, in shards.
    pub channel_capacity: usize,
}

impl Options {
    pub fn with_threads(threads: usize) -> Self {
        let threads = threads.max(1);
        Options {
            threads,
            channel_capacity: threads,
        }
    }
}

/// What happened to one shard, reported to the progress callback as it completes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardOutcome {
    pub array: usize,
    pub bytes_read: u64,
    pub chunks_read: u64,
    pub chunks_missing: u64,
    pub bytes_written: u64,
    /// False when every inner chunk held only the fill value, so nothing was written.
    pub written: bool,
}

/// Totals of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    pub shards_written: u64,
    pub shards_empty: u64,
    pub chunks_read: u64,
    pub chunks_missing: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}
