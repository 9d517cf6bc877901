//! How much memory a conversion holds, and how it is kept under `--memory-limit`.
//!
//! The stages pass messages of one shard part each (see `zshard_pipeline::Options::part_bytes`): a
//! part's raw inner chunks, and the decoded source chunks it needs. The pipeline holds a bounded number
//! of messages, so the peak is that number times the biggest message, plus a fixed base. Under a limit
//! the part size shrinks first (down to one inner chunk), then the thread count.

use zshard_core::{product, ShardGeometry};
use zshard_pipeline::{Options, DEFAULT_PART_BYTES};

use crate::error::{Error, Result};
use crate::plan::{Plan, PlannedArray};

struct HumanBytes(u64);
impl std::fmt::Display for HumanBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} B", self.0)
    }
}

/// What the process holds whatever the data: code, runtimes, I/O and allocator slack (measured: a
/// conversion of a tiny array peaks near 30 MiB).
pub(crate) const BASE_BYTES: u64 = 48 << 20;

/// The memory limit when none is given: half of what this machine (or its cgroup) has, so that a job
/// never takes all of a node; 4 GiB when that cannot be read.
pub fn default_limit() -> u64 {
    let total = cgroup_limit()
        .into_iter()
        .chain(physical_memory())
        .min()
        .unwrap_or(8 << 30);
    total / 2
}

fn cgroup_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok()?;
    text.trim().parse().ok()
}

fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Threads and part size of a run, and the memory they are expected to need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Budget {
    pub threads: usize,
    pub part_bytes: u64,
    pub channel_capacity: usize,
    pub estimated_peak: u64,
    pub limit: u64,
    /// Part of `estimated_peak` for uploads of streamed shards (see [`upload_buffers`]).
    pub upload_buffers: u64,
    pub io_threads: usize,
    /// See `zshard_pipeline::Options::keep_source_chunks`.
    pub keep_source_chunks: bool,
}

impl Budget {
    /// The pipeline options of this budget.
    pub(crate) fn options(&self) -> Options {
        Options {
            threads: self.threads,
            channel_capacity: self.channel_capacity,
            io_threads: self.io_threads,
            part_bytes: self.part_bytes,
            keep_source_chunks: self.keep_source_chunks,
        }
    }
}

/// Raw bytes of the biggest part of `array`'s shards with parts of at most `part_bytes`, and of the
/// decoded source chunks that part overlaps.
fn message_bytes(array: &PlannedArray, part_bytes: u64) -> u64 {
    let element = element_size(array) as u64;
    let part = largest_part(array, part_bytes);
    let footprint = source_footprint(&array.geometry, &array.source.chunk_shape, &part);
    product(&part).max(footprint) * element
}

fn element_size(array: &PlannedArray) -> usize {
    array.output.data_type.size().max(1)
}

/// The shape of the biggest part of `array`'s shards with parts of at most `part_bytes`.
fn largest_part(array: &PlannedArray, part_bytes: u64) -> Vec<u64> {
    let geometry = &array.geometry;
    geometry
        .split_by_bytes(part_bytes, element_size(array))
        .largest_part_shape(geometry)
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
            (chunks * chunk).min(geometry.array_shape()[d].div_ceil(chunk) * chunk)
        })
        .product()
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Parts each shard of `array` is cut into with parts of at most `part_bytes`.
pub(crate) fn parts_per_shard(array: &PlannedArray, part_bytes: u64) -> u64 {
    array
        .geometry
        .split_by_bytes(part_bytes, element_size(array))
        .parts()
}

/// Estimated peak of converting `array` alone within `budget`.
pub(crate) fn array_peak(array: &PlannedArray, budget: &Budget) -> u64 {
    let (peak, _) = estimate(
        std::slice::from_ref(array),
        budget.threads,
        budget.part_bytes,
        budget.io_threads,
        budget.keep_source_chunks,
    );
    peak.saturating_add(budget.upload_buffers)
}

/// Buffers of shards streamed to an object store in parts: a multipart part being filled and one
/// in flight (`zshard_store::Upload`), for the (about two) shards open at a time. Local outputs write
/// each piece as it comes.
pub(crate) fn upload_buffers(destination: &str, part_size: usize) -> u64 {
    let remote = zshard_store::Location::parse(destination).is_ok_and(|l| l.is_remote());
    if remote {
        2 * 2 * part_size.max(5 << 20) as u64
    } else {
        0
    }
}

/// Messages the pipeline holds at most (its window, see `zshard_pipeline::messages_in_flight`).
fn messages_in_flight(threads: usize, capacity: usize, io_threads: usize) -> u64 {
    let options = Options {
        channel_capacity: capacity,
        io_threads,
        ..Options::with_threads(threads)
    };
    zshard_pipeline::messages_in_flight(&options) as u64
}

/// Parts are not made smaller than this for memory's sake alone: enough inner chunks to keep every
/// worker busy within one part.
const SMALL_PART_BYTES: u64 = 4 << 20;

/// Whether the pipeline can keep `array`'s decoded source chunks between the parts of a shard, so
/// that a source chunk under several parts is read once.
pub(crate) fn keeps_source_chunks(array: &PlannedArray) -> bool {
    zshard_pipeline::source_chunks_can_be_kept(array.passthrough, array.source.data_type)
}

/// Bytes of the decoded source chunks one shard keeps between its parts: they all meet one slab of
/// the part grid (`ShardSplit::slab_shape`).
fn kept_bytes(array: &PlannedArray, part_bytes: u64) -> u64 {
    let split = array
        .geometry
        .split_by_bytes(part_bytes, element_size(array));
    if split.parts() < 2 || !keeps_source_chunks(array) {
        return 0;
    }
    let slab = split.slab_shape(&array.geometry);
    source_footprint(&array.geometry, &array.source.chunk_shape, &slab)
        .saturating_mul(element_size(array) as u64)
}

/// Whether parts of at most `part_bytes` need no source chunk that another part needs too: the
/// decoded source chunks a part overlaps are no bigger than the part.
fn reads_each_source_chunk_once(array: &PlannedArray, part_bytes: u64) -> bool {
    let part = largest_part(array, part_bytes);
    source_footprint(&array.geometry, &array.source.chunk_shape, &part) <= product(&part)
}

/// Estimated peak of `threads` workers with parts of at most `part_bytes` (keeping source chunks
/// between parts with `keep`), and the channel capacity.
fn estimate(
    arrays: &[PlannedArray],
    threads: usize,
    part_bytes: u64,
    io_threads: usize,
    keep: bool,
) -> (u64, usize) {
    let message = arrays
        .iter()
        .map(|a| message_bytes(a, part_bytes))
        .max()
        .unwrap_or(0);
    let capacity = Options::for_shard_size(threads, message).channel_capacity;
    let in_flight = messages_in_flight(threads, capacity, io_threads);
    // The parts in flight are consecutive, so they span this many shards, each with its kept chunks.
    let kept = arrays
        .iter()
        .filter(|_| keep)
        .map(|a| {
            let open_shards = in_flight.div_ceil(parts_per_shard(a, part_bytes)) + 1;
            kept_bytes(a, part_bytes).saturating_mul(open_shards)
        })
        .max()
        .unwrap_or(0);
    let peak = BASE_BYTES
        .saturating_add(message.saturating_mul(in_flight))
        .saturating_add(kept);
    (peak, capacity)
}

/// The most threads (up to `wanted`) and the biggest parts (up to the default) whose estimated peak
/// fits `limit` (the default limit when `None`), keeping straddling source chunks between parts when
/// that fits too. Refuses when even one thread with parts of one inner chunk does not fit: the source
/// chunks are then too big for the limit.
pub(crate) fn budget(
    plan: &Plan,
    wanted: usize,
    limit: Option<u64>,
    upload_buffers: u64,
    io_threads: usize,
) -> Result<Budget> {
    let limit = limit.unwrap_or_else(default_limit);
    let part_sizes: Vec<u64> =
        std::iter::successors(Some(DEFAULT_PART_BYTES), |p| (*p > 1).then_some(p / 2)).collect();
    let peak_of = |threads, part_bytes, keep| {
        let (peak, capacity) = estimate(&plan.arrays, threads, part_bytes, io_threads, keep);
        (peak.saturating_add(upload_buffers), capacity)
    };
    for threads in (1..=wanted.max(1)).rev() {
        // Keeping costs about a slab of source chunks per open shard; a source chunk read once
        // instead of once per part is worth it (W3: 2.5 s and 0.2 GiB against 3.7 s and 1.35 GiB).
        for keep in [true, false] {
            let Some(mut part_bytes) = part_sizes
                .iter()
                .copied()
                .find(|&p| peak_of(threads, p, keep).0 <= limit)
            else {
                continue;
            };
            // Smaller parts hold less memory at the same speed as long as no source chunk has to be
            // read for two parts (W1, 2 threads: 413 MiB with whole 32 MiB shards, 105 MiB with 4 MiB
            // parts, the same CPU time), so shrink them down to SMALL_PART_BYTES while that holds:
            // always when straddling source chunks are kept, else while none straddles two parts.
            while part_bytes / 2 >= SMALL_PART_BYTES
                && peak_of(threads, part_bytes / 2, keep).0 <= limit
                && plan.arrays.iter().all(|a| {
                    (keep && keeps_source_chunks(a))
                        || reads_each_source_chunk_once(a, part_bytes / 2)
                })
            {
                part_bytes /= 2;
            }
            let (estimated_peak, channel_capacity) = peak_of(threads, part_bytes, keep);
            return Ok(Budget {
                threads,
                part_bytes,
                channel_capacity,
                estimated_peak,
                limit,
                upload_buffers,
                io_threads,
                keep_source_chunks: keep,
            });
        }
    }
    let (smallest, _) = peak_of(1, 1, false);
    Err(Error::Options { reason: format!(
        "the conversion needs about {} of memory even with one thread and parts of one inner chunk, more than the memory limit of {}; the source chunks (or inner chunks) are too big for it: use a higher --memory-limit or smaller --chunk-shape",
        HumanBytes(smallest),
        HumanBytes(limit)
    )})
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
