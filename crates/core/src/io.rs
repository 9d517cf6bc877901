//! The two seams of the pipeline: where encoded chunks come from and where shards go. Readers and
//! writers implement them; the stages see nothing else of the outside world.

use std::fmt::Debug;

use bytes::Bytes;

use crate::error::Result;

/// A source of encoded chunks of one array, addressed by chunk grid coordinates.
pub trait ChunkReader: Send + Sync + Debug {
    /// The key of a chunk, for messages (for example `temperature/0.3`).
    fn chunk_key(&self, coord: &[u64]) -> String;

    /// Reads several chunks at once, so that an implementation can overlap or coalesce requests.
    /// `Ok(None)` is a chunk that does not exist (it holds the fill value). The result has one entry per
    /// coordinate, in order.
    fn read_chunks(&self, coords: &[Vec<u64>]) -> Vec<Result<Option<Bytes>>>;
}

/// A destination for the shards of one array.
pub trait ShardSink: Send + Sync + Debug {
    /// The key of a shard, for messages.
    fn shard_key(&self, shard: &[u64]) -> String;

    /// Stores a shard from its encoded inner chunks (C order, `None` = empty). The shard must become
    /// visible under its key only once complete. Called for every shard, also when every inner chunk
    /// is empty (a writer then stores nothing). Returns the number of bytes written.
    fn write_shard(&self, shard: &[u64], inner: &[Option<Bytes>]) -> Result<u64>;
}
