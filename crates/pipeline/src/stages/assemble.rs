//! The assemble stage, the one with state: one thread cuts each part's inner chunks out of its decoded
//! source chunks, in order within each shard, keeping the source chunks that later parts need.

use std::collections::HashMap;

use crossbeam_channel::{Receiver, Sender};
use zshard_core::{copy_region, product, FillValue, Region, StringHandle};

use super::in_order::InOrder;
use super::message::{Assembled, Decoded, Msg, ShardKey};
use super::pyramid::Pyramid;
use super::{RunArray, RunContext};
use crate::error::{Error, Result};

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
                    let part = match part {
                        Ok(part) => part,
                        Err(e) => {
                            out.push(Err(e));
                            continue;
                        }
                    };
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

/// Decoded source chunks a shard keeps for its later parts, by grid position.
type KeptChunks = HashMap<Vec<u64>, Kept>;

/// A decoded source chunk a shard keeps for its later parts.
struct Kept {
    /// The last part of the shard that needs it.
    last: u64,
    /// Its values (`None`: a missing chunk, the fill value).
    data: Option<Vec<u8>>,
    /// When it was cut down to what later parts need ([`Options::trim_kept`]): the box (array
    /// coordinates) that `data` holds, in C order; `None`: the whole chunk.
    ///
    /// [`Options::trim_kept`]: crate::Options::trim_kept
    cut: Option<Region>,
}

impl Kept {
    fn whole(last: u64, data: Option<Vec<u8>>) -> Kept {
        Kept {
            last,
            data,
            cut: None,
        }
    }
}

/// Decoded source chunks that complete shards keep for shards after them, by grid position.
type CachedChunks = HashMap<Vec<u64>, Option<Vec<u8>>>;

/// The shards whose parts share source chunks and are being assembled, by (array, shard). Parts that
/// arrive early wait; like the writer's, they are within the window of messages in flight, and the
/// part they wait for holds a permit. So do the parts of a shard that waits for the shards before it
/// (of its array, that hand source chunks over) to be complete: those shards' parts were taken
/// before its own.
#[derive(Default)]
struct Assembler {
    open: HashMap<ShardKey, OpenAssembly>,
    /// Per array, how many of its shards that hand source chunks over are complete: the next one of
    /// them (see `ShardPart::chain`) may start.
    complete: HashMap<usize, u64>,
    /// Per array, the decoded source chunks that complete shards kept for the shards after them
    /// within the array's window, until the last of those that needs each is complete.
    kept: HashMap<usize, CachedChunks>,
    /// The open shards that wait for the shards before them, by array and place in the chain.
    waiting: HashMap<(usize, u64), ShardKey>,
}

#[derive(Default)]
struct OpenAssembly {
    parts: InOrder<Decoded>,
    kept: KeptChunks,
    /// Its place in its array's chain (see `ShardPart::chain`).
    chain: Option<u64>,
    /// Whether the shards before it are complete (or it waits for none), so that what they kept for
    /// it is in `Assembler::kept`.
    started: bool,
}

impl Assembler {
    /// Assembles `decoded` and the parts (of its shard and the shards after it) that waited for it;
    /// none while it waits itself.
    fn accept(&mut self, array: &RunArray<'_>, decoded: Decoded) -> Vec<Result<Assembled>> {
        if !array.keep && !array.handoff {
            return vec![assemble(array, decoded, None).0];
        }
        let index = decoded.part.task.array;
        let key = decoded.part.shard_key();
        let chain = decoded.part.chain;
        let waiting = &mut self.waiting;
        self.open
            .entry(key.clone())
            .or_insert_with(|| {
                if let Some(seq) = chain {
                    waiting.insert((index, seq), key.clone());
                }
                OpenAssembly {
                    chain,
                    started: chain.is_none(),
                    ..OpenAssembly::default()
                }
            })
            .parts
            .insert(decoded.part.index, decoded);
        let mut ready = Vec::new();
        let mut next_key = Some(key);
        while let Some(key) = next_key.take() {
            let Some(open) = self.open.get_mut(&key) else {
                break;
            };
            if !open.started {
                let complete = self.complete.get(&index).copied().unwrap_or(0);
                if open.chain != Some(complete) {
                    break;
                }
                self.waiting.remove(&(index, complete));
                // What the shards before it kept for it.
                let cached = self.kept.entry(index).or_default();
                let wanted: Vec<(Vec<u64>, u64)> = cached
                    .keys()
                    .filter_map(|coord| {
                        let (_, last) = array.parts_needing(&key.1, coord)?;
                        Some((coord.clone(), last))
                    })
                    .collect();
                for (coord, last) in wanted {
                    if let Some(data) = cached.remove(&coord) {
                        open.kept.insert(coord, Kept::whole(last, data));
                    }
                }
                open.started = true;
            }
            let cached = self.kept.entry(index).or_default();
            let mut done = false;
            let chain = open.chain;
            while let Some(decoded) = open.parts.pop_next() {
                let last = decoded.part.is_last();
                let (assembled, handed) = assemble(array, decoded, Some(&mut open.kept));
                ready.push(assembled);
                if last {
                    cached.extend(handed.unwrap_or_default());
                    if let Some(seq) = chain {
                        self.complete.insert(index, seq + 1);
                        // The next shard of the chain may have parts waiting.
                        next_key = self.waiting.get(&(index, seq + 1)).cloned();
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
/// message or, read for an earlier part of the shard (or kept by a shard before it), from `kept`;
/// those of the message that a later part needs too go to `kept`, and those no later part needs
/// leave it. After the last part of a shard, the source chunks (of the message and `kept`) that a
/// shard after it within the window (`ShardPart::later`) needs are returned, to be kept for it.
fn assemble(
    array: &RunArray<'_>,
    decoded: Decoded,
    kept: Option<&mut KeptChunks>,
) -> (Result<Assembled>, Option<CachedChunks>) {
    let job = array.job;
    let range = array.split.inner_range(decoded.part.index);
    if job.layout.passthrough {
        return (Ok(place_encoded(array, range, decoded)), None);
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
    // A source chunk neither in the message nor kept: the read and the keeping plans disagree.
    let mut missing: Option<Vec<u64>> = None;
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
                let (data, cut) = match by_coord.get(&coord) {
                    Some(data) => (data, None),
                    None => match kept.as_deref().and_then(|k| k.get(&coord)) {
                        Some(k) => (&k.data, k.cut.as_ref()),
                        None => {
                            missing.get_or_insert(coord);
                            continue;
                        }
                    },
                };
                let Some(data) = data else {
                    continue;
                };
                let source = job.layout.source_chunk_region(&coord);
                let Some(overlap) = covered.intersect(&source) else {
                    continue;
                };
                let repr;
                let (shape, origin) = match cut {
                    // Cut down to what the parts after the one that cut it need, which this one
                    // is: the overlap lies inside the box, else the keeping plan is wrong.
                    Some(cut) if overlap.intersect(cut).as_ref() != Some(&overlap) => {
                        missing.get_or_insert(coord);
                        continue;
                    }
                    Some(cut) => (&cut.shape, &cut.start),
                    None => {
                        repr = job.layout.source_chunk_repr(&coord);
                        (&repr.shape, &source.start)
                    }
                };
                copy_region(
                    data,
                    shape,
                    origin,
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
        let later = &decoded.part.later;
        let later_needs = |coord: &[u64]| {
            later
                .iter()
                .any(|shard| array.parts_needing(shard, coord).is_some())
        };
        if decoded.part.is_last() {
            // A chunk a later shard needs was never cut (see below).
            let chunks = by_coord
                .into_iter()
                .chain(kept.drain().map(|(coord, k)| (coord, k.data)));
            handed = Some(
                chunks
                    .filter(|(coord, _)| !later.is_empty() && later_needs(coord))
                    .collect(),
            );
        } else {
            // What a later shard needs stays until this one is complete, whichever of its parts
            // needed it last.
            for (coord, k) in kept.iter_mut() {
                if k.last <= index {
                    k.last = array.kept_until(shard, coord, index).unwrap_or(k.last);
                }
            }
            kept.retain(|coord, k| k.last > index || later_needs(coord));
            for (coord, data) in by_coord {
                let last = array.kept_until(shard, &coord, index);
                if last.is_some() || later_needs(&coord) {
                    kept.insert(coord, Kept::whole(last.unwrap_or(index), data));
                }
            }
            if array.trim {
                let part = array.split.region(geometry, shard, index);
                for (coord, k) in kept.iter_mut() {
                    // Only what this part met needs less now; what a later shard needs stays whole.
                    if k.data.is_some()
                        && job
                            .layout
                            .source_chunk_region(coord)
                            .intersect(&part)
                            .is_some()
                        && !later_needs(coord)
                    {
                        cut_down(array, shard, coord, index, k);
                    }
                }
            }
        }
    }
    if let Some(coord) = missing {
        let error = Error::Reassembly {
            array: job.name.clone(),
            key: job.sink.shard_key(&decoded.part.task.shard),
            chunk: format!("{coord:?}"),
        };
        return (Err(error), handed);
    }
    let assembled = Assembled {
        part: decoded.part,
        first_inner,
        inner,
        copied: decoded.copied,
        strings: decoded.strings,
        read: decoded.read,
    };
    (Ok(assembled), handed)
}

/// Cuts kept source chunk `coord` down to the box that the parts of `shard` after part `index`
/// need, when that is smaller than what it holds (issue 43: W6 keeps only the rows of each chunk
/// that the next band of parts needs, instead of reading the chunk again for it).
fn cut_down(array: &RunArray<'_>, shard: &[u64], coord: &[u64], index: u64, kept: &mut Kept) {
    let layout = &array.job.layout;
    let Some(data) = &kept.data else {
        return;
    };
    let Some(needed) = array.needed_after(shard, coord, index) else {
        return;
    };
    let repr;
    let (shape, origin) = match &kept.cut {
        Some(cut) => (&cut.shape, &cut.start),
        None => {
            repr = layout.source_chunk_repr(coord);
            (&repr.shape, &layout.source_chunk_region(coord).start)
        }
    };
    if product(&needed.shape) >= product(shape) {
        return;
    }
    let element = layout.inner_repr.data_type.size();
    let len = product(&needed.shape) as usize * element;
    let buffer = if !needed.shape.is_empty()
        && needed.shape[1..] == shape[1..]
        && needed.start[1..] == origin[1..]
    {
        // Whole along every dimension but the first (W6's next band of rows): one run of bytes.
        let from =
            (needed.start[0] - origin[0]) as usize * (product(&shape[1..]) as usize * element);
        // A buffer shorter than its shape says is left whole rather than cut (no panic here).
        let Some(run) = data.get(from..from + len) else {
            return;
        };
        run.to_vec()
    } else {
        let mut buffer = vec![0u8; len];
        copy_region(
            data,
            shape,
            origin,
            &mut buffer,
            &needed.shape,
            &needed.start,
            &needed,
            element,
        );
        buffer
    };
    kept.data = Some(buffer);
    kept.cut = Some(needed);
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
