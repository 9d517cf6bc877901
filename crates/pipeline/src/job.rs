use std::sync::Arc;

use crate::cancel::Cancel;
use std::borrow::Cow;

use zshard_core::{
    ChunkReader, ChunkRepr, CodecChain, RectilinearGrid, Region, ShardGeometry, ShardSink,
    ShardSplit,
};

/// Everything the stages need to convert one array: where chunks come from and how they decode, its
/// layout, the inner codecs, and where shards go.
#[derive(Debug, Clone)]
pub struct ArrayJob {
    /// The array's name in messages (its path in the hierarchy, or its location).
    pub name: String,
    /// Sizes and types of the array, its source chunks and its shards.
    pub layout: ArrayLayout,
    /// How source chunks decode into little-endian C-order elements of `layout.source_repr`.
    pub source_chain: CodecChain,
    /// How inner chunks are encoded; `None` hands the sink raw inner chunks (little-endian C order),
    /// which is how `verify` compares a source with an existing output.
    pub inner_chain: Option<CodecChain>,
    /// Where encoded source chunks come from, by grid position.
    pub reader: Arc<dyn ChunkReader>,
    /// Where finished shards go.
    pub sink: Arc<dyn ShardSink>,
    /// A pyramid level made from the level above while the run converts it (its reader is never
    /// asked: no task of the run names this job); `None` for an array read from its source.
    pub derived: Option<Derived>,
    /// For an update of a finished output: that output as it stands, read by inner chunk (grid
    /// position in the array's inner-chunk grid), encoded as this job encodes them. The inner
    /// chunks a task reuses ([`ShardTask::reuse`]) are copied from it rather than converted.
    pub previous: Option<Arc<dyn ChunkReader>>,
    /// Whether the inner chunks copied from `previous` are decoded to hash their values for the
    /// manifest ([`ShardOutcome::chunk_hashes`]), as converted ones are. Without (no manifest is
    /// kept), a copy costs no decode, and the outcome of a shard that copies names no hashes (a
    /// copied-through array's copies are hashed all the same: their stored bytes are the hash's).
    pub hash_copied: bool,
}

impl ArrayJob {
    /// Whether copied inner chunks go unhashed: they would be decoded to be hashed (an encoding,
    /// not copied-through, array) and the job does not hash copies ([`ArrayJob::hash_copied`]).
    pub(crate) fn copies_go_unhashed(&self) -> bool {
        !self.hash_copied && !self.layout.passthrough && self.inner_chain.is_some()
    }

    /// The most bytes one of its inner chunks can take stored (`u64::MAX` when its codecs do not
    /// bound it): what a read of its stored inner chunks may be refused beyond.
    pub fn max_inner_len(&self) -> u64 {
        self.inner_chain
            .as_ref()
            .and_then(|chain| chain.max_stored_len(&self.layout.inner_repr).ok())
            .unwrap_or(u64::MAX)
    }
}

/// How a level of a multiscale pyramid is made from the level above (issue 41): each inner chunk of
/// the level above, as the run assembles it, is reduced block by block into this level's shards,
/// and a shard of this level is encoded and written once every block of it is in. No level is read
/// back from the output.
#[derive(Debug, Clone, PartialEq)]
pub struct Derived {
    /// The job (its index in the run's jobs) of the level above.
    pub from: usize,
    /// How a block of the level above becomes one element.
    pub reduction: zshard_core::downsample::Reduction,
    /// Per dimension: 2 where this level halves the one above, 1 where it keeps its extent.
    pub factors: Vec<u64>,
    /// One element's bytes that `mean`, `min` and `max` leave out (the array's `_FillValue`).
    pub masked: Option<Vec<u8>>,
}

/// How one array's source chunks become shards: the sizes and types that decide what a run holds in
/// memory, without the codecs or I/O. The memory model ([`budget`](crate::budget)) works on it alone,
/// so a plan can be sized before any source chunk or output is opened.
#[derive(Debug, Clone, PartialEq)]
pub struct ArrayLayout {
    /// The array, its shards and their inner chunks.
    pub geometry: ShardGeometry,
    /// A decoded source chunk (its shape is the source chunk shape; on a rectilinear grid, the
    /// largest chunk's, each chunk having its own).
    pub source_repr: ChunkRepr,
    /// The source chunks lie on this rectilinear grid; `None`: on the regular grid of
    /// `source_repr.shape`.
    pub source_grid: Option<Arc<RectilinearGrid>>,
    /// A decoded inner chunk of the output.
    pub inner_repr: ChunkRepr,
    /// Source chunks are already inner chunks, encoded exactly as the output's are (same chunk shape and
    /// codec chain): their bytes are copied without decoding. The planner decides when this is valid.
    pub passthrough: bool,
}

impl ArrayLayout {
    /// Bytes of one element of the output (at least one).
    pub(crate) fn element_size(&self) -> usize {
        self.inner_repr.data_type.size().max(1)
    }

    /// Raw bytes of this array's largest shard: its shape clipped to the array's, times the element
    /// size (one byte for variable-size types, whose values live outside the grid).
    pub fn shard_bytes(&self) -> u64 {
        let geometry = &self.geometry;
        geometry
            .shard_shape()
            .iter()
            .zip(geometry.array_shape())
            .map(|(&shard, &array)| shard.min(array).max(1))
            .fold(self.element_size() as u64, u64::saturating_mul)
    }

    /// The source chunks that overlap `region` (array coordinates, inside the array), in C order.
    pub fn source_chunks_overlapping(&self, region: &Region) -> Vec<Vec<u64>> {
        match &self.source_grid {
            Some(grid) => grid.chunks_overlapping(region),
            None => region.chunks_overlapping(&self.source_repr.shape),
        }
    }

    /// How many source chunks the array has along each dimension.
    pub fn source_chunk_grid(&self) -> Vec<u64> {
        match &self.source_grid {
            Some(grid) => grid.grid_shape(),
            None => zshard_core::grid_shape(self.geometry.array_shape(), &self.source_repr.shape),
        }
    }

    /// The region of source chunk `coord`, clipped to the array.
    pub(crate) fn source_chunk_region(&self, coord: &[u64]) -> Region {
        match &self.source_grid {
            Some(grid) => grid.chunk_region(coord),
            None => Region::of_chunk(coord, &self.source_repr.shape, self.geometry.array_shape()),
        }
    }

    /// What source chunk `coord` decodes to: on a rectilinear grid, a chunk of its own (full) shape.
    pub(crate) fn source_chunk_repr(&self, coord: &[u64]) -> Cow<'_, ChunkRepr> {
        match self.source_grid.as_ref().and_then(|g| g.chunk_shape(coord)) {
            Some(shape) => Cow::Owned(ChunkRepr {
                shape,
                ..self.source_repr.clone()
            }),
            None => Cow::Borrowed(&self.source_repr),
        }
    }

    /// How shards are cut into parts of at most `part_bytes` raw bytes of inner chunks.
    pub(crate) fn split(&self, part_bytes: u64) -> ShardSplit {
        self.geometry
            .split_by_bytes(part_bytes, self.element_size())
    }

    /// Whether decoded source chunks can be kept between the parts of a shard (see
    /// [`Options::keep_source_chunks`]): not when chunks pass through encoded (each is one inner chunk
    /// anyway), nor for variable-size types (strings are handles into their own message's table).
    pub(crate) fn can_keep_source_chunks(&self) -> bool {
        !self.passthrough && !self.source_repr.data_type.is_variable()
    }

    /// Whether a source chunk can meet two shards across dimension `d`: always on a rectilinear
    /// grid, and on a regular one unless its chunks tile the shards along `d`.
    pub(crate) fn source_chunks_straddle_shards(&self, d: usize) -> bool {
        let shard = self.geometry.shard_shape();
        let tiles = self.source_grid.is_none()
            && match (shard.get(d), self.source_repr.shape.get(d)) {
                (Some(&s), Some(&c)) => c > 0 && s % c == 0,
                _ => false,
            };
        !tiles
    }

    /// Whether consecutive shards can share source chunks, for [`Options::keep_source_chunks`] to
    /// hand them over.
    pub(crate) fn can_hand_over_source_chunks(&self) -> bool {
        self.can_keep_source_chunks()
            && (0..self.geometry.shard_shape().len()).any(|d| self.source_chunks_straddle_shards(d))
    }

    /// Shards in C order from a shard to its neighbour across the first dimension (one slab of the
    /// shard grid), and one more: the window within which shards hand over the source chunks they
    /// share with [`Options::keep_across_slab`]. Capped at [`MAX_SLAB_WINDOW`]: each part checks
    /// its source chunks against every shard of the window; beyond the cap only the next shard
    /// takes them.
    pub(crate) fn slab_window(&self) -> usize {
        let grid = self.geometry.shard_grid();
        let slab = grid
            .iter()
            .skip(1)
            .fold(1u64, |a, &n| a.saturating_mul(n.max(1)));
        usize::try_from(slab.saturating_add(1))
            .ok()
            .filter(|&w| w <= MAX_SLAB_WINDOW)
            .unwrap_or(1)
    }
}

/// One unit of work: a shard of one of the jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardTask {
    /// Index of the array in the slice of [`ArrayJob`]s given to [`run`](crate::run).
    pub array: usize,
    /// Grid coordinate of the shard in the array's shard grid.
    pub shard: Vec<u64>,
    /// Inner chunks of the shard (C-order indices within it, ascending) whose encoded bytes are
    /// copied from the job's previous output ([`ArrayJob::previous`]): an update's inner chunks
    /// whose source chunks did not change. Their source chunks are not read. Empty for a shard
    /// converted whole.
    pub reuse: Vec<u64>,
}

impl ShardTask {
    /// Shard `shard` of array `array`, converted whole.
    pub fn new(array: usize, shard: Vec<u64>) -> ShardTask {
        ShardTask {
            array,
            shard,
            reuse: Vec::new(),
        }
    }

    /// Whether inner chunk `inner` (C-order index within the shard) is copied, not converted.
    pub(crate) fn reuses(&self, inner: u64) -> bool {
        self.reuse.binary_search(&inner).is_ok()
    }

    /// Every shard of every job, array by array, shards in C order.
    pub fn all(jobs: &[ArrayJob]) -> impl Iterator<Item = ShardTask> + '_ {
        jobs.iter().enumerate().flat_map(|(array, job)| {
            let grid = job.layout.geometry.shard_grid();
            (0..zshard_core::product(&grid))
                .map(move |i| ShardTask::new(array, zshard_core::unravel_index(i, &grid)))
        })
    }
}

/// Knobs of a run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Worker threads for each CPU stage (decode, encode).
    pub threads: usize,
    /// Capacity of each channel between stages, in messages (one part of a shard each).
    pub channel_capacity: usize,
    /// Threads that fetch source chunks and threads that write shards (each), so that storage round
    /// trips overlap; they wait on I/O, not on the CPU.
    pub io_threads: usize,
    /// Raw bytes of inner chunks in one message at most: bigger shards are cut into parts of whole
    /// inner chunks (see [`ShardSplit`](zshard_core::ShardSplit)) that go through the stages on their
    /// own and are streamed to the sink in order, so memory does not grow with the shard size.
    pub part_bytes: u64,
    /// Whether a shard keeps the decoded source chunks that several of its parts need, so that each
    /// is read and decoded once per shard, and hands the ones the next shard of its array in the
    /// run's order needs too to that shard, so that a source chunk straddling two consecutive shards
    /// is read and decoded once. It costs the memory of about one slab of source chunks across the
    /// shard (see `ShardSplit::slab_shape`) and one face of them between shards; without it, such
    /// chunks are read for each part and each shard.
    pub keep_source_chunks: bool,
    /// With [`Options::keep_source_chunks`]: whether a shard keeps the decoded source chunks it shares
    /// with any shard of its array up to one slab of the shard grid later in the run's order (the
    /// shards after it in C order up to its neighbour across the first dimension), not only with the
    /// next one, so that in a run in C order every source chunk is read and decoded once (issue 43:
    /// a rechunk of 100³ chunks into 256³ shards decoded 468 chunks of 294 with the next shard
    /// alone). It costs the memory of one face of source chunks across the whole array (see
    /// `budget.rs`); the budget turns it off when that does not fit.
    pub keep_across_slab: bool,
    /// With [`Options::keep_source_chunks`]: whether a shard keeps a decoded source chunk between its
    /// parts only while a part within one row of parts ahead needs it (see
    /// `ShardSplit::parts_per_row`), rather than until the last part that needs it. It holds about
    /// two rows of parts' source chunks instead of a slab of them, and reads a chunk again for a
    /// part more than a row after the one before that needed it: where a slab does not fit the
    /// limit (W6, one 4 GiB shard in 512 MiB: each source chunk is decoded twice instead of four
    /// times without keeping).
    pub keep_within_rows: bool,
    /// With [`Options::keep_source_chunks`] (and not [`Options::keep_within_rows`]): whether a
    /// decoded source chunk kept between the parts of a shard is cut down, after each part, to the
    /// box of it that the shard's later parts still need (unless a later shard needs it whole).
    /// Where parts step one inner chunk at a time across source chunks (W6, one 4 GiB shard in
    /// 512 MiB: 128³ inner chunks in 256³ source chunks), a chunk is needed by two bands of parts a
    /// whole plane of parts apart; kept whole it costs a slab of source chunks, cut down it costs
    /// only the rows the next band needs, and each chunk is still decoded once (issue 43: kept
    /// within rows, twice).
    pub trim_kept: bool,
    /// Messages in flight at most (the window between the fetchers and the writer, see
    /// `window.rs`); `None`: what the channels and stages hold when full. A budget narrows it where
    /// that is what lets each source chunk be decoded once under the limit: the decoded source
    /// chunks in flight are what the peak counts per message (issue 43: W6 at full scale, one 4 GiB
    /// shard in 512 MiB, fits cut-down keeping with 8 messages of 16 MiB, not with 21).
    pub max_in_flight: Option<usize>,
    /// Stops the run from outside (see [`Cancel`]); a new handle by default.
    pub cancel: Cancel,
}

/// Fetch and write threads unless configured otherwise (local disks need few).
pub const DEFAULT_IO_THREADS: usize = 2;

/// The widest window of shards that hand source chunks over (see [`ArrayLayout::slab_window`]).
pub(crate) const MAX_SLAB_WINDOW: usize = 64;

/// Default of [`Options::part_bytes`]: the automatic shard size, so such shards are one message.
pub(crate) const DEFAULT_PART_BYTES: u64 = 64 << 20;

impl Options {
    /// `threads` workers for each CPU stage, channels of one message per worker, the default I/O
    /// threads and part size, keeping source chunks between parts. For a run sized to a memory limit
    /// use [`Budget::options`](crate::Budget::options).
    pub fn with_threads(threads: usize) -> Self {
        let threads = threads.max(1);
        Options {
            threads,
            channel_capacity: threads,
            io_threads: DEFAULT_IO_THREADS,
            part_bytes: DEFAULT_PART_BYTES,
            keep_source_chunks: true,
            keep_across_slab: true,
            keep_within_rows: false,
            trim_kept: false,
            max_in_flight: None,
            cancel: Cancel::new(),
        }
    }
}

/// What happened to one shard, reported to the progress callback as it completes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardOutcome {
    /// The shard this outcome is of.
    pub task: ShardTask,
    /// Encoded bytes of the source chunks read for the shard (missing chunks count nothing).
    pub bytes_read: u64,
    /// Source chunk reads for the shard, missing ones included; a chunk needed by several parts counts
    /// once per read, so once per shard only with [`Options::keep_source_chunks`], with which a
    /// chunk that the shard before it in the run (of the same array) read is not read again.
    pub chunks_read: u64,
    /// Source chunks that did not exist (they read as the fill value).
    pub chunks_missing: u64,
    /// Inner chunks copied encoded from the previous output ([`ShardTask::reuse`]); their bytes
    /// read count in `bytes_read`.
    pub inner_chunks_copied: u64,
    /// Bytes stored for the shard, index included; 0 when it was not written.
    pub bytes_written: u64,
    /// False when every inner chunk held only the fill value, so nothing was written.
    pub written: bool,
    /// The crc32c of the stored object (0 when nothing was written), as the sink computed it.
    pub crc32c: u32,
    /// The version the store gave the stored object (its ETag, as the store's listings show it), when
    /// it names one; `None` when nothing was written.
    pub version: Option<String>,
    /// Per inner chunk (C order), the crc32c of its decoded values as the writer got them, or of
    /// its stored bytes when the array is copied through ([`ArrayLayout::passthrough`]); `None`
    /// for an empty chunk (only the fill value, or outside the array). Empty, however many inner
    /// chunks the shard has, when some were copied without a hash ([`ArrayJob::hash_copied`]).
    pub chunk_hashes: Vec<Option<u32>>,
}

/// One part of a shard, written: a shard that fits [`Options::part_bytes`] is one part, a bigger one
/// several, so that progress advances inside a large shard. Reported before its shard's
/// [`ShardOutcome`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartOutcome {
    /// The shard this part is of.
    pub task: ShardTask,
    /// The part's index in its shard (from 0) and the number of parts of the shard.
    pub index: u64,
    /// Parts of the shard.
    pub count: u64,
    /// Inner chunks in the part inside the array (empty ones included; the padding past the
    /// array's end, which the shard does not store, not).
    pub inner_chunks: u64,
    /// Raw (decoded) bytes of those inner chunks: what progress by bytes counts, known in advance.
    pub raw_bytes: u64,
    /// Encoded bytes of the source chunks read for the part.
    pub bytes_read: u64,
    /// Source chunk reads for the part, missing ones included.
    pub chunks_read: u64,
    /// Encoded bytes of the part's inner chunks handed to the sink (the shard index is not counted).
    pub bytes_written: u64,
}

/// Told about a run as it goes: each part written, then each shard done. Any
/// `Fn(&ShardOutcome)` is one that ignores parts.
pub trait Progress: Sync {
    /// A part of a shard was written (see [`PartOutcome`]).
    fn part_done(&self, _part: &PartOutcome) {}
    /// A shard is complete.
    fn shard_done(&self, outcome: &ShardOutcome);
}

impl<F: Fn(&ShardOutcome) + Sync> Progress for F {
    fn shard_done(&self, outcome: &ShardOutcome) {
        self(outcome);
    }
}
