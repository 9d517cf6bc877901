//! The assemble stage, the one with state: one thread cuts each part's inner chunks out of its decoded
//! source chunks, in order within each shard, keeping the source chunks that later parts need.

use std::collections::HashMap;

use crossbeam_channel::{Receiver, Sender};
use zshard_core::{copy_region, FillValue, StringHandle};

use super::in_order::InOrder;
use super::message::{Assembled, Decoded, Msg, ShardKey};
use super::pyramid::Pyramid;
use super::{RunArray, RunContext};

/// Assembles the messages of `input` until it closes, the run is cancelled or the encoder has stopped.
pub(super) fn stage(
    ctx: &RunContext<'_>,
    input: Receiver<Msg<Decoded>>,
    output: &Sender<Msg<Assembled>>,
) {
    let _guard = ctx.cancel_on_panic();
    let mut assembler = Assembler::default();
    let mut pyramid = Pyramid::new(ctx);
    for msg in input {
        if ctx.is_cancelled() {
            continue;
        }
        let assembled = match msg {
            Ok(decoded) => {
                let array = ctx.array(decoded.part.task.array);
                let mut out = Vec::new();
                for part in assembler.accept(array, decoded) {
                    // The levels below are made from the part's inner chunks before they go on.
                    let below = match pyramid.feeds(part.part.task.array) {
                        true => pyramid.feed(ctx, &part),
                        false => Ok(Vec::new()),
                    };
                    out.push(Ok(part));
                    match below {
                        Ok(below) => out.extend(below.into_iter().map(Ok)),
                        Err(e) => out.push(Err(e)),
                    }
                }
                out
            }
            Err(e) => vec![Err(e)],
        };
        if assembled.into_iter().any(|m| output.send(m).is_err()) {
            ctx.cancel();
            break;
        }
    }
}

/// Decoded source chunks a shard keeps for its later parts, with the last part that needs each.
type KeptChunks = HashMap<Vec<u64>, (u64, Option<Vec<u8>>)>;

/// The shards whose parts share source chunks and are being assembled, by (array, shard). Parts that
/// arrive early wait; like the writer's, they are within the window of messages in flight, and the
/// part they wait for holds a permit. So do the parts of a shard that waits for the shard before it
/// to hand over the source chunks they share: that shard's parts were taken before its own.
#[derive(Default)]
struct Assembler {
    open: HashMap<ShardKey, OpenAssembly>,
    /// Source chunks a completed shard handed to the next shard of its array, by that shard, until
    /// its first part is assembled.
    handed: HashMap<ShardKey, KeptChunks>,
}

#[derive(Default)]
struct OpenAssembly {
    parts: InOrder<Decoded>,
    kept: KeptChunks,
    /// Whether the chunks the shard before it hands over have arrived (or it needs none).
    started: bool,
}

impl Assembler {
    /// Assembles `decoded` and the parts (of its shard and the shards after it) that waited for it;
    /// none while it waits itself.
    fn accept(&mut self, array: &RunArray<'_>, decoded: Decoded) -> Vec<Assembled> {
        if !array.keep && !array.handoff {
            return vec![assemble(array, decoded, None).0];
        }
        let key = decoded.part.shard_key();
        let started = decoded.part.prev.is_none();
        let open = self
            .open
            .entry(key.clone())
            .or_insert_with(|| OpenAssembly {
                started,
                ..OpenAssembly::default()
            });
        open.parts.insert(decoded.part.index, decoded);
        let mut ready = Vec::new();
        let mut next_key = Some(key);
        while let Some(key) = next_key.take() {
            let Some(open) = self.open.get_mut(&key) else {
                break;
            };
            if !open.started {
                let Some(handed) = self.handed.remove(&key) else {
                    break;
                };
                open.kept = handed;
                open.started = true;
            }
            let mut done = false;
            while let Some(decoded) = open.parts.pop_next() {
                let last = decoded.part.is_last();
                let next = decoded.part.next.clone();
                let (assembled, handed) = assemble(array, decoded, Some(&mut open.kept));
                ready.push(assembled);
                if last {
                    if let Some(next) = next {
                        let next = (key.0, next);
                        self.handed.insert(next.clone(), handed.unwrap_or_default());
                        next_key = Some(next);
                    }
                    done = true;
                    break;
                }
            }
            if done {
                self.open.remove(&key);
            }
        }
        ready
    }
}

/// Cuts the shard's inner chunks out of the decoded source chunks. Values cross source chunk
/// boundaries freely; what no source chunk covers keeps the fill value. Source chunks come from the
/// message or, read for an earlier part of the shard (or handed over by the shard before), from
/// `kept`; those of the message that a later part needs too go to `kept`, and those no later part
/// needs leave it. After the last part of a shard followed by another of its array, the source chunks
/// (of the message and `kept`) that the next shard needs are returned for it, with the last of its
/// parts that needs each.
fn assemble(
    array: &RunArray<'_>,
    decoded: Decoded,
    kept: Option<&mut KeptChunks>,
) -> (Assembled, Option<KeptChunks>) {
    let job = array.job;
    let range = array.split.inner_range(decoded.part.index);
    if job.layout.passthrough {
        return (place_encoded(array, range, decoded), None);
    }
    let geometry = &job.layout.geometry;
    let source_shape = &job.layout.source_repr.shape;
    let element = job.layout.inner_repr.data_type.size();
    let handle_fill;
    let fill = if job.layout.inner_repr.data_type.is_variable() {
        handle_fill = FillValue::from_bytes(StringHandle::FILL.to_le_bytes().to_vec());
        &handle_fill
    } else {
        &job.layout.inner_repr.fill_value
    };
    let mut by_coord: HashMap<Vec<u64>, Option<Vec<u8>>> = decoded.chunks.into_iter().collect();
    // Source chunks that are exactly the inner chunks: each is used once and, inside the array,
    // becomes its inner chunk as it is (no fill, no copy).
    let same_grid =
        job.layout.source_grid.is_none() && source_shape.as_slice() == geometry.inner_shape();
    let array_region = geometry.array_region();
    let first_inner = range.start;
    let inner = range
        .map(|i| {
            if decoded.part.task.reuses(i) {
                return None;
            }
            let region = geometry.inner_region(&decoded.part.task.shard, i);
            let covered = region.intersect(&array_region)?;
            if same_grid && covered == region {
                let data = by_coord
                    .remove(&region.first_chunk(source_shape))
                    .flatten()?;
                return (!fill.fills(&data)).then_some(data);
            }
            let mut buffer = fill.repeat(job.layout.inner_repr.elements() as usize);
            for coord in job.layout.source_chunks_overlapping(&covered) {
                let data = match by_coord.get(&coord) {
                    Some(data) => data,
                    None => match kept.as_deref().and_then(|k| k.get(&coord)) {
                        Some((_, data)) => data,
                        None => continue,
                    },
                };
                let Some(data) = data else {
                    continue;
                };
                let source = job.layout.source_chunk_region(&coord);
                let Some(overlap) = covered.intersect(&source) else {
                    continue;
                };
                copy_region(
                    data,
                    &job.layout.source_chunk_repr(&coord).shape,
                    &source.start,
                    &mut buffer,
                    &region.shape,
                    &region.start,
                    &overlap,
                    element,
                );
            }
            (!fill.fills(&buffer)).then_some(buffer)
        })
        .collect();
    let mut handed = None;
    if let Some(kept) = kept {
        let (shard, index) = (&decoded.part.task.shard, decoded.part.index);
        match decoded
            .part
            .next
            .as_ref()
            .filter(|_| decoded.part.is_last())
        {
            Some(next) => {
                let chunks = by_coord
                    .into_iter()
                    .chain(kept.drain().map(|(coord, (_, data))| (coord, data)));
                let mut to_next = KeptChunks::new();
                for (coord, data) in chunks {
                    if let Some((_, last)) = array.parts_needing(next, &coord) {
                        to_next.insert(coord, (last, data));
                    }
                }
                handed = Some(to_next);
            }
            None => {
                // What the next shard needs stays until this one is complete, whichever of its
                // parts needed it last.
                let next = decoded.part.next.as_ref();
                let next_needs =
                    |coord: &[u64]| next.is_some_and(|n| array.parts_needing(n, coord).is_some());
                kept.retain(|coord, (last, _)| *last > index || next_needs(coord));
                for (coord, data) in by_coord {
                    let last = array.parts_needing(shard, &coord).map(|(_, last)| last);
                    if last.is_some_and(|last| last > index) || next_needs(&coord) {
                        kept.insert(coord, (last.unwrap_or(index), data));
                    }
                }
            }
        }
    }
    let assembled = Assembled {
        part: decoded.part,
        first_inner,
        inner,
        copied: decoded.copied,
        strings: decoded.strings,
        read: decoded.read,
    };
    (assembled, handed)
}

/// Passthrough: each source chunk is one inner chunk, already encoded; it goes to its place in the
/// shard as it is. A missing source chunk is an empty inner chunk.
fn place_encoded(array: &RunArray<'_>, range: std::ops::Range<u64>, decoded: Decoded) -> Assembled {
    let per_shard = array.job.layout.geometry.chunks_per_shard();
    let mut inner: Vec<Option<Vec<u8>>> = vec![None; (range.end - range.start) as usize];
    for (coord, data) in decoded.chunks {
        let local: Vec<u64> = coord
            .iter()
            .zip(&decoded.part.task.shard)
            .zip(&per_shard)
            .map(|((c, s), n)| c - s * n)
            .collect();
        let index = zshard_core::linear_index(&local, &per_shard);
        if let Some(slot) = index
            .checked_sub(range.start)
            .and_then(|i| inner.get_mut(i as usize))
        {
            *slot = data;
        }
    }
    Assembled {
        part: decoded.part,
        first_inner: range.start,
        inner,
        copied: decoded.copied,
        strings: decoded.strings,
        read: decoded.read,
    }
}
