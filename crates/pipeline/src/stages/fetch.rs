//! The fetch stage: I/O threads that take the next parts, read their source chunks and send them on.
//!
//! A reader whose reads coalesce ([`ChunkReader::coalesces_reads`], references into files) gets the
//! chunks of several consecutive parts of one array in one call, so that byte ranges of one file
//! that lie in different shards (a row of HDF5 chunks spanning several output shards) are one
//! request. Each part of such a batch holds its own place in the window, taken only when one is
//! free at once: a fetcher never waits for a place while it holds parts.
//!
//! [`ChunkReader::coalesces_reads`]: zshard_core::ChunkReader::coalesces_reads

use std::collections::HashMap;
use std::iter::Peekable;
use std::sync::Mutex;

use crossbeam_channel::Sender;
use zshard_core::{ChunkReader, PlannedReads};

use super::message::{Copied, Fetched, Msg, ReadCounts, ShardPart};
use super::{RunArray, RunContext};
use crate::error::Error;

/// Parts of one array read with one call at most (when its reader coalesces): a quarter of the
/// window of messages in flight, at most this many.
pub(super) const MAX_BATCH: usize = 16;

/// Parts read with one call at most, for a window of `window` messages.
pub(super) fn batch_size(window: usize) -> usize {
    (window / 4).clamp(1, MAX_BATCH)
}

/// Takes parts from `parts` until they run out, the run is cancelled or the decoder has stopped.
pub(super) fn stage<I: Iterator<Item = ShardPart>>(
    ctx: &RunContext<'_>,
    parts: &Mutex<Peekable<I>>,
    out: Sender<Msg<Fetched>>,
) {
    loop {
        if ctx.is_cancelled() {
            break;
        }
        // The permit first: parts are then taken in the order their permits were granted.
        let Some(permit) = ctx.window.acquire(|| ctx.is_cancelled()) else {
            break;
        };
        let batch = match parts.lock() {
            Ok(mut parts) => take_batch(ctx, &mut parts, permit),
            Err(_) => Vec::new(),
        };
        let Some(first) = batch.first() else { break };
        let array = ctx.array(first.task.array);
        for fetched in fetch(array, batch) {
            if out.send(fetched).is_err() {
                return;
            }
        }
    }
}

/// The next part (with `permit`) and, when its array's reader coalesces reads, the parts of the same
/// array after it for which a place in the window is free now, up to the batch size.
fn take_batch<I: Iterator<Item = ShardPart>>(
    ctx: &RunContext<'_>,
    parts: &mut Peekable<I>,
    permit: crate::window::Permit,
) -> Vec<ShardPart> {
    let Some(mut first) = parts.next() else {
        return Vec::new();
    };
    first.permit = Some(permit);
    let array = first.task.array;
    let mut batch = vec![first];
    if !ctx.array(array).job.reader.coalesces_reads() {
        return batch;
    }
    while batch.len() < ctx.fetch_batch && parts.peek().is_some_and(|p| p.task.array == array) {
        let Some(permit) = ctx.window.try_acquire() else {
            break;
        };
        let Some(mut part) = parts.next() else { break };
        part.permit = Some(permit);
        batch.push(part);
    }
    batch
}

/// The source chunks `part` reads: those of its region; when the shard keeps source chunks, only
/// those no earlier part of it needed; when it follows shards that hand chunks over, only those
/// none of them needed.
fn chunks_of(array: &RunArray<'_>, part: &ShardPart) -> Vec<Vec<u64>> {
    let job = array.job;
    if !part.task.reuse.is_empty() {
        return chunks_converted(array, part);
    }
    let region = array
        .split
        .region(&job.layout.geometry, &part.task.shard, part.index)
        .intersect(&job.layout.geometry.array_region());
    let mut coords = region.map_or_else(Vec::new, |r| job.layout.source_chunks_overlapping(&r));
    if !part.earlier.is_empty() {
        // Source chunks that a shard before this one within the window needed too come from the
        // assembler, kept by that shard.
        coords.retain(|coord| {
            part.earlier
                .iter()
                .all(|earlier| array.parts_needing(earlier, coord).is_none())
        });
    }
    if array.keep {
        // Source chunks that an earlier part of the shard needed too come from the assembler's keep.
        coords.retain(|coord| array.part_reads(&part.task.shard, coord, part.index));
    }
    coords
}

/// The source chunks of the inner chunks of `part` that its shard converts (those it does not copy,
/// see `ShardTask::reuse`), each once, in the order first needed. Every part reads its own: a shard
/// that copies keeps no source chunks between parts (those it keeps are read again, never missed).
fn chunks_converted(array: &RunArray<'_>, part: &ShardPart) -> Vec<Vec<u64>> {
    let geometry = &array.job.layout.geometry;
    let inside = geometry.array_region();
    let mut seen = std::collections::HashSet::new();
    let mut coords = Vec::new();
    for inner in array.split.inner_range(part.index) {
        if part.task.reuses(inner) {
            continue;
        }
        let Some(region) = geometry
            .inner_region(&part.task.shard, inner)
            .intersect(&inside)
        else {
            continue;
        };
        for coord in array.job.layout.source_chunks_overlapping(&region) {
            if seen.insert(coord.clone()) {
                coords.push(coord);
            }
        }
    }
    coords
}

/// Reads the inner chunks of `part` that its shard copies from the previous output (see
/// `ShardTask::reuse`), encoded, adding their bytes to `read`.
fn copy_previous(array: &RunArray<'_>, part: &ShardPart) -> Result<(Copied, ReadCounts), Error> {
    let mut read = ReadCounts::default();
    let job = array.job;
    let range = array.split.inner_range(part.index);
    let inner: Vec<u64> = part
        .task
        .reuse
        .iter()
        .copied()
        .filter(|i| range.contains(i))
        .collect();
    if inner.is_empty() {
        return Ok((Vec::new(), read));
    }
    let Some(previous) = &job.previous else {
        return Err(Error::Read {
            array: job.name.clone(),
            key: job.sink.shard_key(&part.task.shard),
            source: Box::new(zshard_core::Error::Read {
                key: job.sink.shard_key(&part.task.shard),
                source: "inner chunks to copy, but no previous output to copy them from".into(),
            }),
        });
    };
    let geometry = &job.layout.geometry;
    let per_shard = geometry.chunks_per_shard();
    let coords: Vec<Vec<u64>> = inner
        .iter()
        .map(|&i| {
            zshard_core::unravel_index(i, &per_shard)
                .iter()
                .zip(&part.task.shard)
                .zip(&per_shard)
                .map(|((local, shard), n)| shard * n + local)
                .collect()
        })
        .collect();
    let results = previous.read_chunks(&coords, array.max_inner_len);
    if results.len() != coords.len() {
        // A reader that answers for fewer chunks than asked: those would be written as empty.
        return Err(Error::Read {
            array: job.name.clone(),
            key: job.sink.shard_key(&part.task.shard),
            source: Box::new(zshard_core::Error::Read {
                key: job.sink.shard_key(&part.task.shard),
                source: format!(
                    "the previous output answered for {} of {} inner chunks to copy",
                    results.len(),
                    coords.len()
                )
                .into(),
            }),
        });
    }
    let mut copied = Vec::with_capacity(inner.len());
    for ((i, coord), result) in inner.into_iter().zip(&coords).zip(results) {
        let bytes = result.map_err(|source| Error::Read {
            array: job.name.clone(),
            key: previous.chunk_key(coord),
            source: Box::new(source),
        })?;
        read.copied += 1;
        read.bytes += bytes.as_ref().map_or(0, |b| b.len() as u64);
        copied.push((i, bytes));
    }
    Ok((copied, read))
}

/// [`copy_previous`] of every part of `batch`, in order.
fn copy_previous_all(
    array: &RunArray<'_>,
    batch: &[ShardPart],
) -> Vec<Result<(Copied, ReadCounts), Error>> {
    batch
        .iter()
        .map(|part| copy_previous(array, part))
        .collect()
}

/// The chunks of every part of `batch`, each once, and for each part the positions of its chunks
/// in that list.
fn union_of(array: &RunArray<'_>, batch: &[ShardPart]) -> (Vec<Vec<u64>>, Vec<Vec<usize>>) {
    let mut all: Vec<Vec<u64>> = Vec::new();
    let mut seen: HashMap<Vec<u64>, usize> = HashMap::new();
    let positions = batch
        .iter()
        .map(|part| {
            chunks_of(array, part)
                .into_iter()
                .map(|coord| {
                    *seen.entry(coord.clone()).or_insert_with(|| {
                        all.push(coord);
                        all.len() - 1
                    })
                })
                .collect()
        })
        .collect();
    (all, positions)
}

/// Reads the source chunks of the parts of `batch` (one array's) with one call of its reader, and
/// hands each part its own.
fn fetch(array: &RunArray<'_>, batch: Vec<ShardPart>) -> Vec<Msg<Fetched>> {
    let job = array.job;
    let (coords, positions) = union_of(array, &batch);
    // The inner chunks a rewritten shard copies come from the previous output, beside the source
    // chunks it converts: on an object store each is a chain of round trips (the old shard's
    // index, then its byte ranges), which would otherwise follow the source's.
    let copies_beside = batch.iter().any(|part| !part.task.reuse.is_empty()) && !coords.is_empty();
    let (mut results, copies) = if copies_beside {
        std::thread::scope(|scope| {
            let copies = scope.spawn(|| copy_previous_all(array, &batch));
            let results = job.reader.read_chunks(&coords, array.max_chunk_len);
            let copies = copies
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            (results, copies)
        })
    } else {
        let results = job.reader.read_chunks(&coords, array.max_chunk_len);
        (results, copy_previous_all(array, &batch))
    };
    batch
        .into_iter()
        .zip(positions)
        .zip(copies)
        .map(|((part, positions), copies)| {
            let mut chunks = Vec::with_capacity(positions.len());
            let mut read = ReadCounts::default();
            for at in positions {
                let coord = &coords[at];
                let failed = |source: zshard_core::Error| Error::Read {
                    array: job.name.clone(),
                    key: job.reader.chunk_key(coord),
                    source: Box::new(source),
                };
                let bytes = match results.get_mut(at) {
                    Some(Ok(bytes)) => bytes.clone(),
                    Some(slot) => {
                        // The error goes to this part; a later part of the batch that needs the
                        // same chunk gets its text.
                        let text = slot
                            .as_ref()
                            .err()
                            .map(|e| zshard_core::chain_text(e))
                            .unwrap_or_default();
                        let again = Err(zshard_core::Error::Read {
                            key: job.reader.chunk_key(coord),
                            source: text.into(),
                        });
                        let error = std::mem::replace(slot, again).err();
                        return Err(failed(error.unwrap_or_else(|| zshard_core::Error::Read {
                            key: job.reader.chunk_key(coord),
                            source: "no error".into(),
                        })));
                    }
                    None => {
                        return Err(failed(zshard_core::Error::Read {
                            key: job.reader.chunk_key(coord),
                            source: "the reader returned no result for it".into(),
                        }))
                    }
                };
                read.chunks += 1;
                match &bytes {
                    Some(b) => read.bytes += b.len() as u64,
                    None => read.missing += 1,
                }
                chunks.push((coord.clone(), bytes));
            }
            let (copied, copy_read) = copies?;
            read += copy_read;
            Ok(Fetched {
                part,
                chunks,
                copied,
                read,
            })
        })
        .collect()
}

/// The reads of `parts` (one array's, in order) as the stage makes them, batched as it batches
/// them when every place in the window is free, from what the reader knows unread (see
/// [`ChunkReader::planned_reads`]); `None` when the reader cannot tell.
pub(super) fn planned<I: Iterator<Item = ShardPart>>(
    array: &RunArray<'_>,
    parts: I,
    batch: usize,
) -> Option<PlannedReads> {
    let reader: &dyn ChunkReader = array.job.reader.as_ref();
    let batch = if reader.coalesces_reads() {
        batch.max(1)
    } else {
        1
    };
    let mut planned = PlannedReads::default();
    let mut pending: Vec<ShardPart> = Vec::with_capacity(batch);
    let mut flush = |pending: &mut Vec<ShardPart>| -> Option<()> {
        if pending.is_empty() {
            return Some(());
        }
        let (coords, _) = union_of(array, pending);
        planned += reader.planned_reads(&coords, array.max_chunk_len)?;
        pending.clear();
        Some(())
    };
    for part in parts {
        pending.push(part);
        if pending.len() == batch {
            flush(&mut pending)?;
        }
    }
    flush(&mut pending)?;
    Some(planned)
}
