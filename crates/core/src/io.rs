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
    ///
    /// `max_len` is the most bytes a stored chunk can take (the source chain's
    /// [`CodecChain::max_stored_len`](crate::CodecChain::max_stored_len) for a chunk): a chunk
    /// stored in more fails, naming both sizes, without being read whole (at most `max_len + 1`
    /// bytes of it are), whatever its object, file, member or reference states, so that no input
    /// makes a run allocate more than its chunks can need. `u64::MAX` reads without a bound.
    fn read_chunks(&self, coords: &[Vec<u64>], max_len: u64) -> Vec<Result<Option<Bytes>>>;

    /// Whether one call of [`ChunkReader::read_chunks`] with more chunks can take fewer requests
    /// than several calls with fewer (nearby byte ranges of one file coalesce into one request, as
    /// for references into HDF5 files): the pipeline then reads the chunks of several shards in
    /// flight with one call. `false` by default.
    fn coalesces_reads(&self) -> bool {
        false
    }

    /// The requests and bytes that [`ChunkReader::read_chunks`] of `coords` would take, when the
    /// reader knows without reading (references name their byte ranges); `None` by default.
    fn planned_reads(&self, coords: &[Vec<u64>], max_len: u64) -> Option<PlannedReads> {
        let _ = (coords, max_len);
        None
    }
}

/// What reading chunks takes from storage (see [`ChunkReader::planned_reads`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PlannedReads {
    /// Requests (GETs).
    pub requests: u64,
    /// Bytes requested.
    pub bytes: u64,
}

impl std::ops::AddAssign for PlannedReads {
    fn add_assign(&mut self, other: PlannedReads) {
        self.requests += other.requests;
        self.bytes += other.bytes;
    }
}

/// What a [`ShardSink`] stored for one shard: the object's size and the crc32c (Castagnoli) of its
/// bytes, as a manifest records them, and the object's version as the store named it. Both numbers
/// are 0 when nothing was stored (a shard of only empty inner chunks).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Stored {
    /// Bytes stored, index included.
    pub bytes: u64,
    /// The crc32c of the stored object's bytes, in order.
    pub crc32c: u32,
    /// The version the store gave the object when it was written (its ETag: an S3 object's digest,
    /// a local file's inode, modification time and size), as the store's listings show it; `None`
    /// when nothing was stored or the store names none.
    pub version: Option<String>,
}

impl Stored {
    /// Nothing stored.
    pub const NOTHING: Stored = Stored {
        bytes: 0,
        crc32c: 0,
        version: None,
    };

    /// The object made of `parts`, in order.
    pub fn of_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> Stored {
        let mut stored = Stored::NOTHING;
        for part in parts {
            stored.crc32c = crc32c::crc32c_append(stored.crc32c, part);
            stored.bytes += part.len() as u64;
        }
        stored
    }
}

/// A destination for the shards of one array.
pub trait ShardSink: Send + Sync + Debug {
    /// The key of a shard, for messages.
    fn shard_key(&self, shard: &[u64]) -> String;

    /// Stores a shard from its encoded inner chunks (C order, `None` = empty). The shard must become
    /// visible under its key only once complete. Called for every shard, also when every inner chunk
    /// is empty (a writer then stores nothing). Returns what was stored.
    fn write_shard(&self, shard: &[u64], inner: &[Option<Bytes>]) -> Result<Stored>;

    /// Starts a shard of `chunks` inner chunks that arrives in parts (consecutive runs of its C-order
    /// inner chunks, in order), for shards too big to hold at once. Dropping the stream before
    /// [`ShardStream::finish`] abandons the shard: nothing appears under its key. The default collects
    /// the parts and calls [`ShardSink::write_shard`] at the end; writers override it to stream.
    fn begin_shard(&self, shard: &[u64], chunks: usize) -> Result<Box<dyn ShardStream + '_>> {
        Ok(Box::new(CollectedShard {
            sink: self,
            shard: shard.to_vec(),
            inner: Vec::with_capacity(chunks),
        }))
    }
}

/// A shard being written part by part (see [`ShardSink::begin_shard`]).
pub trait ShardStream: Send {
    /// Appends the next inner chunks (C order, `None` = empty).
    fn append(&mut self, inner: &[Option<Bytes>]) -> Result<()>;

    /// Completes the shard (it becomes visible under its key; a shard of only empty chunks is not
    /// stored, as with `write_shard`). Returns what was stored.
    fn finish(self: Box<Self>) -> Result<Stored>;
}

/// The default [`ShardStream`]: keeps every part and writes the shard whole.
struct CollectedShard<'a, S: ShardSink + ?Sized> {
    sink: &'a S,
    shard: Vec<u64>,
    inner: Vec<Option<Bytes>>,
}

impl<S: ShardSink + ?Sized> ShardStream for CollectedShard<'_, S> {
    fn append(&mut self, inner: &[Option<Bytes>]) -> Result<()> {
        self.inner.extend_from_slice(inner);
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Stored> {
        self.sink.write_shard(&self.shard, &self.inner)
    }
}
