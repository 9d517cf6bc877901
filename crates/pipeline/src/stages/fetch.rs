//! The fetch stage: I/O threads that take the next part, read its source chunks and send them on.

use std::sync::Mutex;

use crossbeam_channel::Sender;

use super::message::{Fetched, Msg, ReadCounts, ShardPart};
use super::{RunArray, RunContext};
use crate::error::Error;

/// Takes parts from `parts` until they run out, the run is cancelled or the decoder has stopped.
pub(super) fn stage<I: Iterator<Item = ShardPart>>(
    ctx: &RunContext<'_>,
    parts: &Mutex<I>,
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
        let next = match parts.lock() {
            Ok(mut parts) => parts.next(),
            Err(_) => None,
        };
        let Some(mut part) = next else { break };
        part.permit = Some(permit);
        let fetched = fetch(ctx.array(part.task.array), part);
        if out.send(fetched).is_err() {
            break;
        }
    }
}

/// Reads the source chunks of `part`; when the shard keeps source chunks, only those no earlier part
/// of it needed.
fn fetch(array: &RunArray<'_>, part: ShardPart) -> Msg<Fetched> {
    let job = array.job;
    let region = array
        .split
        .region(&job.layout.geometry, &part.task.shard, part.index)
        .intersect(&job.layout.geometry.array_region());
    let mut coords = region.map_or_else(Vec::new, |r| job.layout.source_chunks_overlapping(&r));
    if array.keep {
        // Source chunks that an earlier part of the shard needed too come from the assembler's keep.
        coords.retain(|coord| {
            array
                .parts_needing(&part.task.shard, coord)
                .is_none_or(|(first, _)| first == part.index)
        });
    }
    let results = job.reader.read_chunks(&coords, array.max_chunk_len);
    let mut chunks = Vec::with_capacity(coords.len());
    let mut read = ReadCounts::default();
    for (coord, result) in coords.into_iter().zip(results) {
        let bytes = result.map_err(|source| Error::Read {
            array: job.name.clone(),
            key: job.reader.chunk_key(&coord),
            source: Box::new(source),
        })?;
        read.chunks += 1;
        match &bytes {
            Some(b) => read.bytes += b.len() as u64,
            None => read.missing += 1,
        }
        chunks.push((coord, bytes));
    }
    Ok(Fetched { part, chunks, read })
}
