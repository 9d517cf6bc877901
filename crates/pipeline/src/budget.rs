//! How much memory a run holds, and how it is kept under a limit.
//!
//! The stages pass messages of one shard part each (see [`Options::part_bytes`]): a part's raw inner
//! chunks, and the decoded source chunks it needs. The pipeline holds a bounded number of messages
//! (its window of messages in flight), so the peak is that number times the biggest message, plus the
//! source chunks that open shards keep between their parts and one shard hands to the next, plus a
//! fixed base. Under a limit the part
//! size shrinks first (down to one inner chunk), then the thread count.
//!
//! The model works on [`ArrayLayout`]s alone, the part of an [`ArrayJob`](crate::ArrayJob) that
//! decides its memory, so a plan is sized before any chunk is read or output opened, and a run sized
//! by [`Budget::options`] is the run the model describes.

use std::fmt;

use zshard_core::{product, Setting, ShardGeometry};

use crate::error::{Error, Result};
use crate::job::{ArrayLayout, Options, DEFAULT_PART_BYTES};
use crate::stages::{messages_in_flight, narrow_window};

/// What the process holds whatever the data: code, runtimes, I/O and allocator slack (measured: a
/// conversion of a tiny array peaks near 30 MiB).
const BASE_BYTES: u64 = 48 << 20;

/// Raw bytes of messages that one channel may hold when its capacity is derived from the message size.
const CHANNEL_BUDGET_BYTES: u64 = 32 << 20;

/// Parts are not made smaller than this for memory's sake alone: enough inner chunks to keep every
/// worker busy within one part.
const SMALL_PART_BYTES: u64 = 4 << 20;

/// What a message holds for each of its inner chunks besides their bytes, from the read to the write:
/// the raw chunk's buffer and its slot, the encoded chunk's buffer (zstd's output is allocated at its
/// bound, 64 bytes or more), its `Bytes` handle and share, and, for a shard of one part, its index
/// entry and piece. With one-element chunks this is what a part is made of (measured: a part of
/// 2^20 uint16 inner chunks of 1 x 1 held about 230 MiB).
pub(crate) const INNER_CHUNK_OVERHEAD: u64 = 256;

/// What a message holds for each source chunk it reads besides its bytes: its grid coordinate, the
/// encoded buffer's handle and the decoded buffer's slot, and the assembler's map entry.
pub(crate) const SOURCE_CHUNK_OVERHEAD: u64 = 160;

/// Bytes of index a shard streamed in parts holds per inner chunk until it is complete: its entry
/// (24 bytes) and, when it is written at the end, the encoded index (16 bytes per chunk).
pub(crate) const INDEX_BYTES_PER_CHUNK: u64 = 40;

/// What a run may use, for [`budget`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetRequest {
    /// Worker threads wanted for each CPU stage; fewer are used when they do not fit the limit.
    pub threads: usize,
    /// Bytes the whole process may hold at its peak. `None`: no limit, so every thread wanted and parts
    /// of the default size, as a run that only checks (`verify`) has.
    pub limit: Option<u64>,
    /// Bytes held outside the pipeline for uploads of streamed shards (part of the peak).
    pub upload_buffers: u64,
    /// Fetch threads and write threads (each); see [`Options::io_threads`].
    pub io_threads: usize,
    /// Bytes the source holds for the whole run outside the pipeline (the parsed references of a
    /// kerchunk set); part of the peak.
    pub resident: u64,
}

/// Threads and part size of a run, and the memory they are expected to need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// Worker threads for each CPU stage (at most the request's, fewer when the limit needs it).
    pub threads: usize,
    /// Raw bytes of inner chunks in one message at most; see [`Options::part_bytes`].
    pub part_bytes: u64,
    /// Capacity of each channel between stages, in messages; see [`Options::channel_capacity`].
    pub channel_capacity: usize,
    /// The estimated peak of the whole process, upload buffers included.
    pub estimated_peak: u64,
    /// The limit it was sized for (`None`: no limit).
    pub limit: Option<u64>,
    /// Part of `estimated_peak` for uploads of streamed shards.
    pub upload_buffers: u64,
    /// Fetch threads and write threads (each); see [`Options::io_threads`].
    pub io_threads: usize,
    /// See [`Options::keep_source_chunks`].
    pub keep_source_chunks: bool,
    /// See [`Options::keep_across_slab`].
    pub keep_across_slab: bool,
    /// See [`Options::keep_within_rows`].
    pub keep_within_rows: bool,
    /// See [`Options::trim_kept`].
    pub trim_kept: bool,
    /// See [`Options::max_in_flight`]: set only with [`Budget::trim_kept`], when the messages that
    /// the channels and stages hold do not fit beside what the shard keeps cut down.
    pub max_in_flight: Option<usize>,
    /// Part of `estimated_peak` that the source holds for the whole run (see
    /// [`BudgetRequest::resident`]).
    pub resident: u64,
}

impl Budget {
    /// The pipeline options of this budget.
    pub fn options(&self) -> Options {
        Options {
            threads: self.threads,
            channel_capacity: self.channel_capacity,
            io_threads: self.io_threads,
            part_bytes: self.part_bytes,
            keep_source_chunks: self.keep_source_chunks,
            keep_across_slab: self.keep_across_slab,
            keep_within_rows: self.keep_within_rows,
            trim_kept: self.trim_kept,
            max_in_flight: self.max_in_flight,
            cancel: crate::Cancel::new(),
        }
    }

    /// Parts each shard of `array` is cut into.
    pub fn parts_per_shard(&self, array: &ArrayLayout) -> u64 {
        array.split(self.part_bytes).parts()
    }

    /// Whether a source chunk under several parts of a shard of `array` is read once (kept between
    /// them) rather than once per part.
    pub fn keeps_source_chunks(&self, array: &ArrayLayout) -> bool {
        // Kept within rows of parts, a chunk is read again for a part more than a row later.
        self.keep_source_chunks && !self.keep_within_rows && array.can_keep_source_chunks()
    }

    /// Whether a source chunk under several parts of a shard of `array` is kept only between parts
    /// within one row of parts (see [`Options::keep_within_rows`]): it is read again for a part more
    /// than a row after the last that needed it (W6 at full scale: twice).
    pub fn keeps_source_chunks_within_rows(&self, array: &ArrayLayout) -> bool {
        self.keep_source_chunks && self.keep_within_rows && array.can_keep_source_chunks()
    }

    /// What this budget keeps (see [`Keep`]).
    fn keep(&self) -> Keep {
        match (
            self.keep_source_chunks,
            self.keep_across_slab,
            self.keep_within_rows,
            self.trim_kept,
        ) {
            (false, _, _, _) => Keep::Nothing,
            (true, _, true, _) => Keep::Rows,
            (true, false, false, true) => Keep::Bands,
            (true, false, false, false) => Keep::ForNext,
            (true, true, false, _) => Keep::AcrossSlab,
        }
    }

    /// Estimated peak of converting `array` alone within this budget, upload buffers included.
    pub fn array_peak(&self, array: &ArrayLayout) -> u64 {
        let estimate = estimate(
            std::slice::from_ref(array),
            self.threads,
            self.part_bytes,
            self.io_threads,
            self.keep(),
            self.max_in_flight.is_some(),
        );
        estimate
            .peak()
            .saturating_add(self.upload_buffers)
            .saturating_add(self.resident)
    }
}

/// The most threads (up to `request.threads`) and the biggest parts (up to the default) whose estimated
/// peak fits `request.limit`, keeping straddling source chunks between parts when that fits too.
/// Refuses with [`Error::MemoryLimit`] when even one thread with parts of one inner chunk does not fit:
/// the source chunks are then too big for the limit. Without a limit, every thread wanted and parts of
/// the default size.
pub fn budget(arrays: &[ArrayLayout], request: &BudgetRequest) -> Result<Budget> {
    let BudgetRequest {
        threads: wanted,
        limit,
        upload_buffers,
        io_threads,
        resident,
    } = *request;
    let outside = upload_buffers.saturating_add(resident);
    let peak_of = |threads, part_bytes, keep, narrow| {
        let estimate = estimate(arrays, threads, part_bytes, io_threads, keep, narrow);
        (estimate.peak().saturating_add(outside), estimate.capacity)
    };
    let budget_of = |threads, part_bytes, keep: Keep, narrow: bool| {
        let (estimated_peak, channel_capacity) = peak_of(threads, part_bytes, keep, narrow);
        Budget {
            threads,
            part_bytes,
            channel_capacity,
            estimated_peak,
            limit,
            upload_buffers,
            io_threads,
            keep_source_chunks: keep != Keep::Nothing,
            keep_across_slab: keep == Keep::AcrossSlab,
            keep_within_rows: keep == Keep::Rows,
            trim_kept: keep == Keep::Bands,
            max_in_flight: narrow.then(|| {
                narrow_window(&Options {
                    io_threads,
                    ..Options::with_threads(threads)
                })
            }),
            resident,
        }
    };
    let Some(limit) = limit else {
        return Ok(budget_of(
            wanted.max(1),
            DEFAULT_PART_BYTES,
            Keep::AcrossSlab,
            false,
        ));
    };
    let part_sizes: Vec<u64> =
        std::iter::successors(Some(DEFAULT_PART_BYTES), |p| (*p > 1).then_some(p / 2)).collect();
    for threads in (1..=wanted.max(1)).rev() {
        // Keeping costs about a slab of source chunks per open shard; a source chunk read once
        // instead of once per part is worth it (W3: 2.5 s and 0.2 GiB against 3.7 s and 1.35 GiB).
        // Cut-down keeping holds few decoded source chunks in flight (parts after a chunk's first
        // read none), so when the messages that fill the channels do not fit beside what it keeps,
        // it is tried with the fewest messages in flight that keep every thread busy before
        // keeping within rows, which reads chunks again (W6 at full scale: 8 messages instead of
        // 21, each chunk decoded once instead of twice).
        let tries = [
            (Keep::AcrossSlab, false),
            (Keep::ForNext, false),
            (Keep::Bands, false),
            (Keep::Bands, true),
            (Keep::Rows, false),
            (Keep::Nothing, false),
        ];
        // Narrowed only where parts share source chunks that it keeps: elsewhere a narrower
        // window would only buy threads or part size at the pipeline's depth.
        let shares = |p: u64| arrays.iter().any(|a| kept_in_bands_bytes(a, p) > 0);
        for (keep, narrow) in tries {
            let fits =
                |p: u64| (!narrow || shares(p)) && peak_of(threads, p, keep, narrow).0 <= limit;
            let Some(mut part_bytes) = part_sizes.iter().copied().find(|&p| fits(p)) else {
                continue;
            };
            // Smaller parts hold less memory at the same speed as long as no source chunk has to be
            // read for two parts (W1, 2 threads: 413 MiB with whole 32 MiB shards, 105 MiB with 4 MiB
            // parts, the same CPU time), so shrink them down to SMALL_PART_BYTES while that holds:
            // always when straddling source chunks are kept until their last part, else while none
            // straddles two parts (kept within rows, a part's rows change with its size).
            while part_bytes / 2 >= SMALL_PART_BYTES
                && fits(part_bytes / 2)
                && arrays.iter().all(|a| {
                    (matches!(keep, Keep::AcrossSlab | Keep::ForNext | Keep::Bands)
                        && a.can_keep_source_chunks())
                        || reads_each_source_chunk_once(a, part_bytes / 2)
                })
            {
                part_bytes /= 2;
            }
            return Ok(budget_of(threads, part_bytes, keep, narrow));
        }
    }
    Err(refusal(arrays, io_threads, upload_buffers, resident, limit))
}

/// Why even the smallest run (one thread, parts of one inner chunk, nothing kept) does not fit
/// `limit`: the array whose own smallest run needs the most, and what in it needs the most.
fn refusal(
    arrays: &[ArrayLayout],
    io_threads: usize,
    upload_buffers: u64,
    resident: u64,
    limit: u64,
) -> Error {
    let outside = upload_buffers.saturating_add(resident);
    let smallest = |a: &ArrayLayout| {
        estimate(
            std::slice::from_ref(a),
            1,
            1,
            io_threads,
            Keep::Nothing,
            false,
        )
    };
    let worst = arrays
        .iter()
        .enumerate()
        .map(|(i, a)| (i, smallest(a)))
        .max_by_key(|(_, e)| e.peak());
    let needed = estimate(arrays, 1, 1, io_threads, Keep::Nothing, false)
        .peak()
        .saturating_add(outside);
    let (array, cause) = match worst {
        // The process itself does not fit the limit: no shape makes it smaller.
        _ if BASE_BYTES >= limit => (None, MemoryUse::Process { bytes: BASE_BYTES }),
        // The part buffers of shards uploaded in parts, when they weigh the most: no chunk shape
        // makes them smaller.
        Some((_, e)) if upload_buffers > e.index.max(e.messages).max(resident) => (
            None,
            MemoryUse::Uploads {
                bytes: upload_buffers,
            },
        ),
        Some((i, e)) if e.index > e.messages.max(resident) => (
            Some(i),
            MemoryUse::ShardIndex {
                chunks_per_shard: product(&arrays[i].geometry.chunks_per_shard()),
                open_shards: e.open_shards,
                bytes: e.index,
            },
        ),
        Some((i, e)) if e.messages >= resident => {
            (Some(i), MemoryUse::Chunks { bytes: e.messages })
        }
        _ => (None, MemoryUse::Source { bytes: resident }),
    };
    Error::MemoryLimit {
        array,
        needed,
        limit,
        cause,
    }
}

/// What needs the memory that a conversion cannot do without, in [`Error::MemoryLimit`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryUse {
    /// The source and inner chunks of the messages in flight, with parts of one inner chunk.
    Chunks {
        /// Their bytes.
        bytes: u64,
    },
    /// The index entries of the shards open at the writer, which stay until each shard is complete.
    ShardIndex {
        /// Inner chunks per shard (one index entry each).
        chunks_per_shard: u64,
        /// Shards open at a time.
        open_shards: u64,
        /// Their bytes.
        bytes: u64,
    },
    /// What the source holds for the whole run (the parsed references of a kerchunk set).
    Source {
        /// Its bytes.
        bytes: u64,
    },
    /// What the process holds whatever the data (code, runtimes, I/O and allocator slack): a limit
    /// below it fits no conversion.
    Process {
        /// Its bytes.
        bytes: u64,
    },
    /// The buffers of the shards being uploaded to an object store: a shard larger than one part
    /// holds a part being filled and one in flight (see [`BudgetRequest::upload_buffers`]).
    Uploads {
        /// Their bytes.
        bytes: u64,
    },
}

impl fmt::Display for MemoryUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MemoryUse::Chunks { bytes } => write!(
                f,
                "the source chunks (or inner chunks) in flight take {}, too big for it: use smaller {}",
                HumanBytes(bytes),
                Setting::ChunkShape
            ),
            MemoryUse::ShardIndex {
                chunks_per_shard,
                open_shards,
                bytes,
            } => write!(
                f,
                "the shard index takes {} ({chunks_per_shard} inner chunks per shard at {INDEX_BYTES_PER_CHUNK} B each, {open_shards} shards open at a time): use a smaller {} or a larger {}",
                HumanBytes(bytes),
                Setting::ShardShape,
                Setting::ChunkShape
            ),
            MemoryUse::Process { bytes } => write!(
                f,
                "zshard itself needs about {} whatever the data (code, runtimes, I/O buffers)",
                HumanBytes(bytes)
            ),
            MemoryUse::Source { bytes } => write!(
                f,
                "what the run holds from start to end takes {} (the plan, a kerchunk set's references, the versions of the source's chunks and the destination's records an update compares): split the conversion (fewer arrays, a smaller reference set) or raise {}",
                HumanBytes(bytes),
                Setting::MemoryLimit
            ),
            MemoryUse::Uploads { bytes } => write!(
                f,
                "the buffers of shards uploaded to the object store take {} (a part being filled and one being sent for each shard open at a time): use a smaller {} (at least 5MiB) or a smaller {}",
                HumanBytes(bytes),
                Setting::PartSize,
                Setting::ShardShape
            ),
        }
    }
}

/// What a run of the pipeline holds at its peak, by structure (upload buffers and what the source
/// holds are outside it), and the channel capacity it was sized with.
#[derive(Debug, Clone, Copy)]
struct Estimate {
    /// The messages in flight.
    messages: u64,
    /// Decoded source chunks kept between the parts of the open shards.
    kept: u64,
    /// Index entries of the shards streamed in parts that are open at the writer.
    index: u64,
    /// Shards open at a time (of the array with the most index bytes).
    open_shards: u64,
    capacity: usize,
}

impl Estimate {
    fn peak(&self) -> u64 {
        BASE_BYTES
            .saturating_add(self.messages)
            .saturating_add(self.kept)
            .saturating_add(self.index)
    }
}

/// What a run keeps of the decoded source chunks that several parts or shards need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// Nothing: such chunks are read for each part and each shard.
    Nothing,
    /// Those that later parts of the shard or the next shard need ([`Options::keep_source_chunks`]).
    ForNext,
    /// Also those that shards up to one slab of the shard grid later need
    /// ([`Options::keep_across_slab`]).
    AcrossSlab,
    /// Those that later parts of the shard or the next shard need, each cut down after every part
    /// to what the later parts need ([`Options::trim_kept`]).
    Bands,
    /// Those that the next shard needs, and between the parts of a shard only those that a part
    /// within one row ahead needs ([`Options::keep_within_rows`]).
    Rows,
}

/// Estimated peak of `threads` workers with parts of at most `part_bytes` (keeping source chunks
/// between parts and shards as `keep` says, with the fewest messages in flight when `narrow`, see
/// [`Options::max_in_flight`]), and the channel capacity.
fn estimate(
    arrays: &[ArrayLayout],
    threads: usize,
    part_bytes: u64,
    io_threads: usize,
    keep: Keep,
    narrow: bool,
) -> Estimate {
    let largest = |bytes: fn(&ArrayLayout, u64) -> (u64, u64)| {
        arrays
            .iter()
            .map(|a| bytes(a, part_bytes))
            .max()
            .unwrap_or((0, 0))
    };
    // Channels are sized by the raw bytes of a message, as they were before its per-chunk costs
    // were counted, so runs of big chunks keep their speed; the peak counts everything.
    let capacity = channel_capacity(threads, largest(message_bytes).0);
    let message = arrays
        .iter()
        .map(|a| {
            let (raw, overhead) = message_bytes(a, part_bytes);
            raw.saturating_add(overhead)
        })
        .max()
        .unwrap_or(0);
    let options = Options {
        channel_capacity: capacity,
        io_threads,
        ..Options::with_threads(threads)
    };
    let in_flight = messages_in_flight(&Options {
        max_in_flight: narrow.then(|| narrow_window(&options)),
        ..options
    }) as u64;
    // The parts in flight are consecutive, so they span this many shards, each with its kept chunks
    // and, when it comes in several parts, its index entries.
    let open_shards = |a: &ArrayLayout| {
        (in_flight.div_ceil(a.split(part_bytes).parts()) + 1)
            .min(product(&a.geometry.shard_grid()).max(1))
    };
    // The assembler starts a shard once the shard before it (of its array) is complete, so two faces of
    // source chunks at most are held for handing over: the one the open shard was handed, and the
    // one it gathers for the next.
    let kept = arrays
        .iter()
        .filter(|_| keep != Keep::Nothing)
        .map(|a| {
            let handed = match keep {
                Keep::AcrossSlab => kept_across_slab_bytes(a),
                _ => handed_bytes(a),
            };
            let kept = match keep {
                Keep::Rows => kept_in_rows_bytes(a, part_bytes),
                Keep::Bands => kept_in_bands_bytes(a, part_bytes),
                _ => kept_bytes(a, part_bytes),
            };
            kept.saturating_mul(open_shards(a))
                .saturating_add(handed.saturating_mul(2))
        })
        .max()
        .unwrap_or(0);
    let (index, open) = arrays
        .iter()
        .map(|a| {
            (
                index_bytes(a, part_bytes).saturating_mul(open_shards(a)),
                open_shards(a),
            )
        })
        .max()
        .unwrap_or((0, 0));
    Estimate {
        messages: message.saturating_mul(in_flight),
        kept,
        index,
        open_shards: open,
        capacity,
    }
}

/// Bytes of index entries one shard of `array` holds while it is streamed in parts of at most
/// `part_bytes` (a shard of one part builds its index within its message).
fn index_bytes(array: &ArrayLayout, part_bytes: u64) -> u64 {
    if array.split(part_bytes).parts() < 2 {
        return 0;
    }
    product(&array.geometry.chunks_per_shard()).saturating_mul(INDEX_BYTES_PER_CHUNK)
}

/// Channel capacity for messages of up to `message_bytes` raw bytes: as many as fit in
/// [`CHANNEL_BUDGET_BYTES`], at least one and at most one per worker. Each message already spreads
/// its chunks over all workers, so a deeper queue of big messages only holds more memory (W1, 32 MiB
/// shards: capacity 2 peaked near 600 MiB, capacity 1 near 500 MiB, at the same speed).
fn channel_capacity(threads: usize, message_bytes: u64) -> usize {
    let fit = CHANNEL_BUDGET_BYTES / message_bytes.max(1);
    usize::try_from(fit)
        .unwrap_or(usize::MAX)
        .clamp(1, threads.max(1))
}

/// Bytes of the biggest part of `array`'s shards with parts of at most `part_bytes`: its raw inner
/// chunks or the decoded source chunks it overlaps, whichever is more; and what its inner and source
/// chunks cost besides their bytes.
fn message_bytes(array: &ArrayLayout, part_bytes: u64) -> (u64, u64) {
    let part = largest_part(array, part_bytes);
    let (footprint, source_chunks) = array_footprint(array, &part);
    let inner_chunks = product(&part) / product(array.geometry.inner_shape()).max(1);
    let raw = product(&part)
        .max(footprint)
        .saturating_mul(array.element_size() as u64);
    let overhead = inner_chunks
        .saturating_mul(INNER_CHUNK_OVERHEAD)
        .saturating_add(source_chunks.saturating_mul(SOURCE_CHUNK_OVERHEAD));
    (raw, overhead)
}

/// The shape of the biggest part of `array`'s shards with parts of at most `part_bytes`.
fn largest_part(array: &ArrayLayout, part_bytes: u64) -> Vec<u64> {
    array.split(part_bytes).largest_part_shape(&array.geometry)
}

/// Elements of the source chunks that a part of extent `part` can overlap. Per dimension: parts
/// start at multiples of `g` (the gcd of the part extent and the shard shape) from a source chunk
/// boundary, so a part starting `s - g` into a chunk of `s` covers the most chunks. Never more than
/// the array.
fn source_footprint(geometry: &ShardGeometry, source_chunk: &[u64], part: &[u64]) -> u64 {
    (0..part.len())
        .map(|d| {
            let (extent, chunk) = (part[d], source_chunk[d].max(1));
            let g = gcd(gcd(extent, geometry.shard_shape()[d]), chunk);
            let chunks = (chunk - g + extent).div_ceil(chunk);
            chunks.saturating_mul(chunk).min(
                geometry.array_shape()[d]
                    .div_ceil(chunk)
                    .saturating_mul(chunk),
            )
        })
        .fold(1, u64::saturating_mul)
}

/// Elements of the decoded source chunks a part of extent `part` can overlap, and how many chunks
/// that is at most. On a rectilinear grid, chunks of different edges follow no common alignment:
/// per dimension, the first chunk a part meets can start up to the largest edge less one before it
/// and the last end as far after it (never past the chunks that cover the array), and the part
/// meets at most one chunk more than the smallest edge divides into it.
fn array_footprint(array: &ArrayLayout, part: &[u64]) -> (u64, u64) {
    let Some(grid) = &array.source_grid else {
        let source_chunk = &array.source_repr.shape;
        let footprint = source_footprint(&array.geometry, source_chunk, part);
        let chunk = source_chunk
            .iter()
            .fold(1u64, |a, &c| a.saturating_mul(c.max(1)));
        return (footprint, footprint / chunk);
    };
    let (largest, smallest) = (grid.largest_chunk(), grid.smallest_chunk());
    let (covered, chunks) = (grid.covered_extent(), grid.grid_shape());
    (0..part.len()).fold((1u64, 1u64), |(elements, count), d| {
        let (extent, large, small) = (part[d], largest[d].max(1), smallest[d].max(1));
        let span = extent
            .saturating_add((large - 1).saturating_mul(2))
            .min(covered[d].max(large));
        let n = (extent.div_ceil(small) + 1).min(chunks[d].max(1));
        (elements.saturating_mul(span), count.saturating_mul(n))
    })
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Bytes of the decoded source chunks one shard keeps between its parts: they all meet one slab of
/// the part grid (`ShardSplit::slab_shape`).
fn kept_bytes(array: &ArrayLayout, part_bytes: u64) -> u64 {
    let split = array.split(part_bytes);
    if split.parts() < 2 || !array.can_keep_source_chunks() {
        return 0;
    }
    let slab = split.slab_shape(&array.geometry);
    array_footprint(array, &slab)
        .0
        .saturating_mul(array.element_size() as u64)
}

/// Decoded bytes of the source chunks that a shard of `array` hands to the next one (see
/// [`Options::keep_source_chunks`]): those straddling their common boundary, at most one face of the
/// shard deep in source chunks.
fn handed_bytes(array: &ArrayLayout) -> u64 {
    if !array.can_hand_over_source_chunks() {
        return 0;
    }
    let shard = array.geometry.shard_shape();
    (0..shard.len())
        .filter(|&d| array.source_chunks_straddle_shards(d))
        .map(|d| {
            let mut face = shard.to_vec();
            face[d] = 1;
            array_footprint(array, &face).0
        })
        .max()
        .unwrap_or(0)
        .saturating_mul(array.element_size() as u64)
}

/// Bytes of the decoded source chunks one shard keeps between its parts when it keeps them only
/// for a part within one row ahead (see [`Options::keep_within_rows`]). Each one kept after part
/// `p` meets a part `x <= p` and a part `y > p` at most a row after `x`: if `x` lies in the row
/// before `p`'s, `y` lies in `p`'s row. So every kept chunk meets `p`'s row: one row's footprint.
fn kept_in_rows_bytes(array: &ArrayLayout, part_bytes: u64) -> u64 {
    let split = array.split(part_bytes);
    if split.parts() < 2 || !array.can_keep_source_chunks() {
        return 0;
    }
    let row = split.row_shape(&array.geometry);
    array_footprint(array, &row)
        .0
        .saturating_mul(array.element_size() as u64)
}

/// Bytes of the decoded source chunks one shard keeps between its parts when each is cut down
/// after every part to the box later parts need (see [`Options::trim_kept`]), on a regular grid
/// whose shards are cut along one of their first three dimensions (otherwise, as much as kept
/// whole: [`kept_bytes`]).
///
/// After part `p`, a kept chunk meets a part done and a part to come. If both lie in `p`'s row of
/// parts (the same inner chunk along every dimension before the cut but the last), it meets that
/// row: at most one row's footprint, whole. Otherwise, with the cut along the second or third
/// dimension, it straddles the boundary before or after `p`'s band (one inner chunk deep along the
/// first dimension), and what parts to come need of it lies past that boundary; cut along the
/// first, it straddles the boundary after `p`. Source chunks start a multiple of `g` (the gcd of
/// the inner chunk, the shard and the source chunk along the first dimension) before such a
/// boundary, so at most `c - g` of a chunk's `c` rows lie past it, and no two of these chunks
/// share a place across the shard's face. W6 (one shard of 128³ inner chunks from 256³ source
/// chunks): one row of 256³ chunks, and 128 rows of the face instead of a slab of 256.
fn kept_in_bands_bytes(array: &ArrayLayout, part_bytes: u64) -> u64 {
    let whole = kept_bytes(array, part_bytes);
    let split = array.split(part_bytes);
    if whole == 0 || array.source_grid.is_some() || split.cut_dimension() > 2 {
        return whole;
    }
    let geometry = &array.geometry;
    let (shard, inner, chunk) = (
        geometry.shard_shape(),
        geometry.inner_shape(),
        &array.source_repr.shape,
    );
    let (Some(&i0), Some(&s0), Some(&c0)) = (inner.first(), shard.first(), chunk.first()) else {
        return whole;
    };
    let c0 = c0.max(1);
    let depth = c0 - gcd(gcd(i0, s0), c0);
    let mut face = shard.to_vec();
    face[0] = 1;
    // Along the first dimension, a face one element deep meets one chunk: `c0` of its footprint.
    let across = (array_footprint(array, &face).0 / c0).saturating_mul(depth);
    let row = match split.cut_dimension() {
        0 => 0,
        _ => array_footprint(array, &split.row_shape(geometry)).0,
    };
    row.saturating_add(across)
        .saturating_mul(array.element_size() as u64)
        .min(whole)
}

/// Decoded bytes of the source chunks that shards of `array` keep for the shards up to one slab of
/// the shard grid after them (see [`Options::keep_across_slab`]): along each dimension that source
/// chunks straddle, one face of source chunks across the rest of the array, as deep as a shard in
/// the dimensions before it (in C order, the shards not yet converted beyond that face are those of
/// the current slab, row, ...).
fn kept_across_slab_bytes(array: &ArrayLayout) -> u64 {
    if !array.can_hand_over_source_chunks() || array.slab_window() < 2 {
        return handed_bytes(array);
    }
    let (shard, whole) = (array.geometry.shard_shape(), array.geometry.array_shape());
    (0..shard.len())
        .filter(|&d| array.source_chunks_straddle_shards(d))
        .map(|d| {
            let face: Vec<u64> = (0..shard.len())
                .map(|k| match k.cmp(&d) {
                    std::cmp::Ordering::Less => shard[k].min(whole[k]),
                    std::cmp::Ordering::Equal => 1,
                    std::cmp::Ordering::Greater => whole[k],
                })
                .collect();
            array_footprint(array, &face).0
        })
        .fold(0u64, u64::saturating_add)
        .saturating_mul(array.element_size() as u64)
}

/// Whether parts of at most `part_bytes` need no source chunk that another part needs too: the
/// decoded source chunks a part overlaps are no bigger than the part.
fn reads_each_source_chunk_once(array: &ArrayLayout, part_bytes: u64) -> bool {
    let part = largest_part(array, part_bytes);
    array_footprint(array, &part).0 <= product(&part)
}

pub(crate) use zshard_core::HumanBytes;

#[cfg(test)]
mod tests {
    use super::*;
    use zshard_core::{ChunkRepr, DataType, FillValue};

    #[test]
    fn source_footprint_counts_the_chunks_a_part_can_straddle() {
        let g = ShardGeometry::new(&[2048, 1000, 1000], &[2048, 512, 512], &[128, 64, 64])
            .expect("test");
        // 128 inside chunks of 256, parts on multiples of 128: one chunk. 64 in chunks of 100: two.
        assert_eq!(
            source_footprint(&g, &[256, 100, 100], &[128, 64, 64]),
            256 * 200 * 200
        );
        // Aligned multiples cover exactly their chunks.
        assert_eq!(
            source_footprint(&g, &[128, 64, 64], &[256, 128, 64]),
            256 * 128 * 64
        );
        // Never more than the array (rounded up to whole chunks).
        assert_eq!(
            source_footprint(&g, &[4096, 1000, 1000], &[128, 64, 64]),
            4096 * 1000 * 1000
        );
    }

    /// On a rectilinear grid (months of 28 to 31 days; edges of 10 and 30), a part at any offset
    /// meets no more decoded elements nor chunks than the estimate says. The regular grid's estimate
    /// for its largest chunk, 31 x 30, counted 31 x 30 elements for a 31 x 20 part; one at row 31,
    /// column 0 meets chunks of 28 + 31 rows by 10 + 30 columns.
    #[test]
    fn a_rectilinear_footprint_bounds_every_part() {
        let grid = zshard_core::RectilinearGrid::from_configuration(
            &serde_json::json!({"kind": "inline", "chunk_shapes": [[31, 28, 31, 30], [10, 30]]}),
            &[120, 40],
        )
        .expect("grid");
        let mut array = layout(&[120, 40], &[124, 40], &[31, 20], &grid.largest_chunk());
        array.source_grid = Some(std::sync::Arc::new(grid.clone()));
        for part in [[31u64, 20u64], [1, 1], [62, 40], [124, 40], [7, 5]] {
            let (elements, chunks) = array_footprint(&array, &part);
            let mut seen = (0u64, 0u64);
            for row in 0..120 {
                for col in 0..40 {
                    let region = zshard_core::Region {
                        start: vec![row, col],
                        shape: part.to_vec(),
                    };
                    let met = grid.chunks_overlapping(&region);
                    let decoded: u64 = met
                        .iter()
                        .map(|c| product(&grid.chunk_shape(c).expect("in the grid")))
                        .sum();
                    seen = (seen.0.max(decoded), seen.1.max(met.len() as u64));
                }
            }
            assert!(
                seen.0 <= elements && seen.1 <= chunks,
                "part {part:?}: met {seen:?}, estimated ({elements}, {chunks})"
            );
        }
        // The 31 x 20 part's worst case: 59 rows of 40 columns in 4 chunks.
        let (elements, chunks) = array_footprint(&array, &[31, 20]);
        assert!(elements >= 59 * 40 && chunks >= 4, "({elements}, {chunks})");
    }

    fn repr(shape: &[u64], data_type: DataType) -> ChunkRepr {
        ChunkRepr {
            shape: shape.to_vec(),
            data_type,
            fill_value: FillValue::zero(data_type),
        }
    }

    /// A float32 array of `shape` in shards of `shard` with inner chunks of `inner`, read from source
    /// chunks of `source`.
    fn layout(shape: &[u64], shard: &[u64], inner: &[u64], source: &[u64]) -> ArrayLayout {
        ArrayLayout {
            geometry: ShardGeometry::new(shape, shard, inner).expect("geometry"),
            source_repr: repr(source, DataType::Float32),
            source_grid: None,
            inner_repr: repr(inner, DataType::Float32),
            passthrough: false,
        }
    }

    #[test]
    fn a_shard_counts_its_bytes_inside_the_array() {
        // float32: a whole 1024² shard, an edge shard larger than its 100 x 300 array, one element.
        assert_eq!(
            layout(&[8192, 8192], &[1024, 1024], &[256, 256], &[512, 512]).shard_bytes(),
            4 << 20
        );
        assert_eq!(
            layout(&[100, 300], &[1024, 1024], &[64, 64], &[64, 64]).shard_bytes(),
            4 * 100 * 300
        );
        assert_eq!(
            layout(&[10, 10], &[1, 1], &[1, 1], &[5, 5]).shard_bytes(),
            4
        );
    }

    fn request(threads: usize, limit: Option<u64>) -> BudgetRequest {
        BudgetRequest {
            threads,
            limit,
            upload_buffers: 0,
            io_threads: 2,
            resident: 0,
        }
    }

    #[test]
    fn without_a_limit_every_thread_and_whole_shards_up_to_the_default_part_size() {
        // Shards of 4, 16 and 128 MiB, source chunks inside the shards. The channel capacity is what
        // it was for whole shards: as many as fit in 32 MiB, at least one, at most one per worker.
        for (shard, capacity) in [([1024, 1024], 8), ([2048, 2048], 2), ([4096, 8192], 1)] {
            let array = layout(&[8192, 8192], &shard, &[256, 256], &[512, 512]);
            let budget = budget(std::slice::from_ref(&array), &request(8, None)).expect("budget");
            let options = budget.options();
            assert_eq!(
                (options.threads, options.part_bytes, options.io_threads),
                (8, DEFAULT_PART_BYTES, 2)
            );
            assert!(options.keep_source_chunks);
            assert_eq!(options.channel_capacity, capacity, "shard {shard:?}");
            assert_eq!(budget.limit, None);
        }
    }

    #[test]
    fn a_limit_shrinks_parts_then_threads_and_refuses_what_cannot_fit() {
        let array = layout(&[8192, 8192], &[4096, 8192], &[256, 256], &[512, 512]);
        let arrays = std::slice::from_ref(&array);
        let roomy = budget(arrays, &request(8, Some(64 << 30))).expect("budget");
        assert_eq!(roomy.threads, 8);
        assert!(roomy.estimated_peak <= 64 << 30);
        let tight = budget(arrays, &request(8, Some(256 << 20))).expect("budget");
        assert!(tight.estimated_peak <= 256 << 20, "{tight:?}");
        assert!(tight.part_bytes < roomy.part_bytes || tight.threads < roomy.threads);
        assert!(tight.parts_per_shard(&array) > 1);
        assert_eq!(tight.array_peak(&array), tight.estimated_peak);
        let err = budget(arrays, &request(8, Some(1 << 20))).expect_err("too small");
        assert!(matches!(err, Error::MemoryLimit { limit, .. } if limit == 1 << 20));
        let message =
            zshard_core::setting::spelled(zshard_core::Spelling::Flag, || err.to_string());
        assert!(
            message.contains("more than the memory limit of 1.00 MiB")
                && message.contains("--memory-limit"),
            "{message}"
        );
    }

    /// A uint8 array as [`layout`] makes a float32 one.
    fn layout_u8(shape: &[u64], shard: &[u64], inner: &[u64], source: &[u64]) -> ArrayLayout {
        ArrayLayout {
            source_repr: repr(source, DataType::UInt8),
            inner_repr: repr(inner, DataType::UInt8),
            ..layout(shape, shard, inner, source)
        }
    }

    #[test]
    fn one_shard_over_the_limit_keeps_the_next_bands_rows_and_reads_each_chunk_once() {
        // W6 at --scale medium (issue 43): 1024²x512 uint8 in one shard of 128³ inner chunks from
        // 256³ source chunks, 512 MiB. A slab of source chunks (256 MiB) does not fit beside the
        // messages; kept within rows, each chunk was read twice. Cut down to what later parts
        // need, one row of chunks (256x256x512) and 128 rows of the face (128x1024x512) are kept.
        let w6m = layout_u8(&[1024, 1024, 512], &[1024, 1024, 512], &[128; 3], &[256; 3]);
        let arrays = std::slice::from_ref(&w6m);
        let fitted = budget(arrays, &request(2, Some(512 << 20))).expect("budget");
        assert!(fitted.trim_kept && !fitted.keep_within_rows, "{fitted:?}");
        // Beside 96 MiB kept, the messages that fill the channels fit: the window is not narrowed.
        assert_eq!(fitted.max_in_flight, None, "{fitted:?}");
        assert!(fitted.keeps_source_chunks(&w6m));
        assert!(fitted.estimated_peak <= 512 << 20, "{fitted:?}");
        assert_eq!(
            kept_in_bands_bytes(&w6m, fitted.part_bytes),
            (256 * 256 * 512) + (128 * 1024 * 512)
        );
        assert!(kept_in_bands_bytes(&w6m, fitted.part_bytes) < kept_bytes(&w6m, fitted.part_bytes));
        // W6 at full scale (2048²x1024): its face of 128 rows (256 MiB) and the messages that fill
        // the channels (21 of 16 MiB) exceed 512 MiB; with the fewest messages in flight that keep
        // every thread busy (8 with 2 threads and 2 I/O threads) they fit, and each chunk is read
        // once instead of once per row of bands (within rows).
        let w6 = layout_u8(
            &[2048, 2048, 1024],
            &[2048, 2048, 1024],
            &[128; 3],
            &[256; 3],
        );
        let full = budget(std::slice::from_ref(&w6), &request(2, Some(512 << 20))).expect("budget");
        assert!(full.trim_kept && !full.keep_within_rows, "{full:?}");
        assert!(full.keeps_source_chunks(&w6));
        assert_eq!(full.max_in_flight, Some(2 * 2 + 2 * 2), "{full:?}");
        assert!(full.estimated_peak <= 512 << 20, "{full:?}");
        assert_eq!(messages_in_flight(&full.options()), 8);
        // Without narrowing, the same keeping would not fit.
        let wide = estimate(
            std::slice::from_ref(&w6),
            2,
            full.part_bytes,
            2,
            Keep::Bands,
            false,
        );
        assert!(wide.peak() > 512 << 20, "{wide:?}");
        // Under a limit that fits neither, the window is not narrowed for less keeping.
        let tight =
            budget(std::slice::from_ref(&w6), &request(2, Some(400 << 20))).expect("budget");
        assert!(
            !tight.trim_kept && tight.max_in_flight.is_none(),
            "{tight:?}"
        );
    }

    /// What a shard keeps cut down (the boxes of kept chunks that later parts need) never exceeds
    /// `kept_in_bands_bytes`, after any part, for parts cut along each of the first three
    /// dimensions and source chunks larger, smaller and not aligned with the inner chunks.
    #[test]
    fn what_is_kept_cut_down_stays_within_its_estimate() {
        let cases: [([u64; 3], [u64; 3], [u64; 3]); 5] = [
            ([16, 16, 8], [2, 2, 2], [4, 4, 4]),
            ([16, 16, 8], [2, 2, 2], [3, 5, 4]),
            ([12, 12, 12], [4, 4, 4], [3, 3, 3]),
            ([20, 12, 12], [2, 3, 4], [6, 5, 7]),
            ([18, 9, 10], [3, 3, 2], [4, 2, 10]),
        ];
        for (shard, inner, chunk) in cases {
            let array = layout_u8(&shard, &shard, &inner, &chunk);
            let geometry = &array.geometry;
            let origin = [0u64; 3];
            let inner_chunks: u64 = geometry.chunks_per_shard().iter().product();
            for max in [1, 2, 3, 4, 7, inner_chunks / 2] {
                let part_bytes = max * product(&inner);
                let split = array.split(part_bytes);
                let bound = kept_in_bands_bytes(&array, part_bytes);
                let chunks = geometry
                    .array_region()
                    .chunks_overlapping(&array.source_repr.shape);
                for p in 0..split.parts() {
                    let kept: u64 = chunks
                        .iter()
                        .map(|coord| {
                            let region = array.source_chunk_region(coord);
                            let parts = split.parts_meeting_each(geometry, &origin, &region);
                            if !parts.iter().any(|&q| q <= p) {
                                return 0;
                            }
                            let after: Vec<zshard_core::Region> = parts
                                .iter()
                                .filter(|&&q| q > p)
                                .filter_map(|&q| {
                                    split.region(geometry, &origin, q).intersect(&region)
                                })
                                .collect();
                            if after.is_empty() {
                                return 0;
                            }
                            (0..3)
                                .map(|d| {
                                    let lo = after.iter().map(|r| r.start[d]).min().unwrap_or(0);
                                    let hi = after.iter().map(|r| r.end()[d]).max().unwrap_or(0);
                                    hi - lo
                                })
                                .product::<u64>()
                        })
                        .sum();
                    assert!(
                        kept <= bound,
                        "{shard:?} {inner:?} {chunk:?}, parts of {max}: {kept} > {bound} after part {p}"
                    );
                }
            }
        }
    }

    #[test]
    fn human_bytes_reads_like_the_progress_bar() {
        let text = |n| HumanBytes(n).to_string();
        assert_eq!(text(15), "15 B");
        assert_eq!(text(1_500), "1.46 KiB");
        assert_eq!(text(1_500_000_000), "1.40 GiB");
        assert_eq!(text(5 << 29), "2.50 GiB");
    }
}
