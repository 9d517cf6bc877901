//! The stages and their wiring. Each message is one part of a shard; errors travel inside messages to the
//! writer, which keeps the first one and tells the fetcher to stop.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use crossbeam_channel::{bounded, Receiver, Sender};
use rayon::iter::{
    IndexedParallelIterator, IntoParallelIterator, ParallelBridge, ParallelIterator,
};
use zshard_core::{
    copy_region, DataType, FillValue, Region, ShardSplit, ShardStream, StringHandle, StringTable,
};

use crate::error::{Error, Result};
use crate::job::{ArrayJob, Options, ShardOutcome, ShardTask, Stats};
use crate::window::{Permit, Window};

/// One part of one shard (see [`ShardSplit`]): the unit every message carries. A shard that fits the
/// part size is one part.
#[derive(Debug)]
struct ShardPart {
    task: ShardTask,
    index: u64,
    count: u64,
    /// This message's place in the window of messages in flight (see `window.rs`).
    _permit: Option<Permit>,
}

/// Encoded source chunks of one shard part, as read (`None` = missing chunk).
struct Fetched {
    part: ShardPart,
    chunks: Vec<(Vec<u64>, Option<Bytes>)>,
    read: ReadCounts,
}

/// Decoded source chunks of one shard part. Strings are handles into `strings`.
struct Decoded {
    part: ShardPart,
    chunks: Vec<(Vec<u64>, Option<Vec<u8>>)>,
    strings: StringTable,
    read: ReadCounts,
}

/// Raw inner chunks of one shard part, C order; `None` = empty (only fill value, or outside the
/// array). Strings are handles into `strings` until they are encoded.
struct Assembled {
    part: ShardPart,
    /// The C-order index within the shard of `inner[0]`.
    first_inner: u64,
    inner: Vec<Option<Vec<u8>>>,
    strings: StringTable,
    read: ReadCounts,
}

/// Encoded inner chunks of one shard part.
struct Encoded {
    part: ShardPart,
    inner: Vec<Option<Bytes>>,
    read: ReadCounts,
}

type Msg<T> = Result<T>;

/// Tells the other stages to stop when the thread holding it unwinds from a panic, so that a bug in
/// one stage does not leave the others converting the rest of the array before the run can end.
struct CancelOnPanic<'a>(&'a AtomicBool);

impl Drop for CancelOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Relaxed);
        }
    }
}

/// What reading one shard's source chunks took.
#[derive(Debug, Default, Clone, Copy)]
struct ReadCounts {
    bytes: u64,
    chunks: u64,
    missing: u64,
}

/// Converts every shard that `tasks` yields. Returns the totals, or the first error (after the shards
/// already under way have drained; a shard with an error is never written).
pub fn run(
    jobs: &[ArrayJob],
    tasks: impl Iterator<Item = ShardTask> + Send,
    options: &Options,
    progress: &(dyn Fn(&ShardOutcome) + Sync),
) -> Result<Stats> {
    let pool = |name: &'static str| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(options.threads.max(1))
            .thread_name(move |i| format!("zshard-{name}-{i}"))
            .build()
            .map_err(|source| Error::ThreadPool { source })
    };
    // Two pools: a decode worker blocked on a full channel must never hold a thread the encoder needs.
    let decode_pool = pool("decode")?;
    let encode_pool = pool("encode")?;
    let capacity = options.channel_capacity.max(1);
    let cancel = AtomicBool::new(false);
    let splits: Vec<ShardSplit> = jobs.iter().map(|j| split(j, options)).collect();
    let splits = &splits;
    let keeps: Vec<bool> = jobs
        .iter()
        .zip(splits)
        .map(|(job, split)| carries_source_chunks(job, split, options))
        .collect();
    let keeps = &keeps;
    let parts = tasks.flat_map(move |task| {
        let count = splits[task.array].parts();
        (0..count).map(move |index| ShardPart {
            task: task.clone(),
            index,
            count,
            _permit: None,
        })
    });
    let parts = std::sync::Mutex::new(parts);
    let window = Window::new(messages_in_flight(options));
    let state: WriteState = std::sync::Mutex::new((Stats::default(), None));
    let open_shards = OpenShards::default();

    let (fetched_tx, fetched_rx) = bounded::<Msg<Fetched>>(capacity);
    let (decoded_tx, decoded_rx) = bounded::<Msg<Decoded>>(capacity);
    let (assembled_tx, assembled_rx) = bounded::<Msg<Assembled>>(capacity);
    let (encoded_tx, encoded_rx) = bounded::<Msg<Encoded>>(capacity);

    std::thread::scope(|scope| {
        let cancel = &cancel;
        // Threads already started must not go on converting when the run cannot start completely.
        let spawn_failed = |source| {
            cancel.store(true, Ordering::Relaxed);
            Error::SpawnThread { source }
        };
        // Several fetchers and writers, so that storage round trips of different shards overlap.
        let parts = &parts;
        let window = &window;
        for i in 0..options.io_threads.max(1) {
            let out = fetched_tx.clone();
            std::thread::Builder::new()
                .name(format!("zshard-fetch-{i}"))
                .spawn_scoped(scope, move || {
                    fetch_stage(jobs, splits, keeps, parts, window, cancel, out)
                })
                .map_err(spawn_failed)?;
        }
        drop(fetched_tx);
        std::thread::Builder::new()
            .name("zshard-decode".into())
            .spawn_scoped(scope, move || {
                decode_pool
                    .install(|| map_stage(fetched_rx, &decoded_tx, cancel, |m| decode(jobs, m)))
            })
            .map_err(spawn_failed)?;
        std::thread::Builder::new()
            .name("zshard-assemble".into())
            .spawn_scoped(scope, move || {
                let _guard = CancelOnPanic(cancel);
                let mut assembler = Assembler::new(jobs, splits, keeps);
                for msg in decoded_rx {
                    if cancel.load(Ordering::Relaxed) {
                        continue;
                    }
                    let assembled = match msg {
                        Ok(decoded) => assembler.accept(decoded).into_iter().map(Ok).collect(),
                        Err(e) => vec![Err(e)],
                    };
                    if assembled.into_iter().any(|m| assembled_tx.send(m).is_err()) {
                        cancel.store(true, Ordering::Relaxed);
                        break;
                    }
                }
            })
            .map_err(spawn_failed)?;
        std::thread::Builder::new()
            .name("zshard-encode".into())
            .spawn_scoped(scope, move || {
                encode_pool
                    .install(|| map_stage(assembled_rx, &encoded_tx, cancel, |m| encode(jobs, m)))
            })
            .map_err(spawn_failed)?;
        let state = &state;
        let open_shards = &open_shards;
        let writers: Vec<_> = (1..options.io_threads.max(1))
            .map(|i| {
                let input = encoded_rx.clone();
                std::thread::Builder::new()
                    .name(format!("zshard-write-{i}"))
                    .spawn_scoped(scope, move || {
                        write_stage(jobs, input, cancel, progress, state, open_shards)
                    })
            })
            .collect::<std::io::Result<_>>()
            .map_err(spawn_failed)?;
        write_stage(jobs, encoded_rx, cancel, progress, state, open_shards);
        for writer in writers {
            // A writer only ends by panicking if a progress callback panicked; propagate that.
            if let Err(panic) = writer.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Ok(())
    })?;
    let (stats, first_error) = state.into_inner().unwrap_or_else(|p| p.into_inner());
    match first_error {
        Some(e) => Err(e),
        None => Ok(stats),
    }
}

/// Messages allowed between the fetchers and the writer: what the channels and stages hold when full
/// (four channels, an input and an output per worker of each pool, the fetch, assemble and write
/// threads), so the window only binds when the writer keeps parts waiting for a predecessor.
pub fn messages_in_flight(options: &Options) -> usize {
    4 * options.channel_capacity.max(1)
        + 4 * options.threads.max(1)
        + 2 * options.io_threads.max(1)
        + 1
}

/// How the shards of `job` are cut into parts of at most `options.part_bytes` raw inner chunk bytes.
fn split(job: &ArrayJob, options: &Options) -> zshard_core::ShardSplit {
    job.geometry
        .split_by_bytes(options.part_bytes, job.inner_repr.data_type.size())
}

fn fetch_stage<I: Iterator<Item = ShardPart>>(
    jobs: &[ArrayJob],
    splits: &[ShardSplit],
    keeps: &[bool],
    parts: &std::sync::Mutex<I>,
    window: &Arc<Window>,
    cancel: &AtomicBool,
    out: Sender<Msg<Fetched>>,
) {
    loop {
        if cancel.load(Ordering::Relaxed) {
            break;
        }
        // The permit first: parts are then taken in the order their permits were granted.
        let Some(permit) = window.acquire(cancel) else {
            break;
        };
        let next = match parts.lock() {
            Ok(mut parts) => parts.next(),
            Err(_) => None,
        };
        let Some(mut part) = next else { break };
        part._permit = Some(permit);
        let array = part.task.array;
        let fetched = fetch(&jobs[array], &splits[array], keeps[array], part);
        if out.send(fetched).is_err() {
            break;
        }
    }
}

/// A stateless stage: messages are taken by the pool's workers as they free up, so several shards are
/// processed at once, and each shard's chunks are spread over the pool too.
fn map_stage<I: Send, O: Send>(
    input: Receiver<Msg<I>>,
    output: &Sender<Msg<O>>,
    cancel: &AtomicBool,
    work: impl Fn(I) -> Msg<O> + Sync,
) {
    input.into_iter().par_bridge().for_each(|msg| {
        if cancel.load(Ordering::Relaxed) {
            return;
        }
        let _guard = CancelOnPanic(cancel);
        // A closed output means a later stage has stopped: stop the earlier ones too.
        if output.send(msg.and_then(&work)).is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
    });
}

/// Reads the source chunks of `part`; with `keep`, only those no earlier part of its shard needed.
fn fetch(job: &ArrayJob, split: &ShardSplit, keep: bool, part: ShardPart) -> Msg<Fetched> {
    let region = split
        .region(&job.geometry, &part.task.shard, part.index)
        .intersect(&job.geometry.array_region());
    let mut coords = region.map_or_else(Vec::new, |r| r.chunks_overlapping(&job.source_repr.shape));
    if keep {
        // Source chunks that an earlier part of the shard needed too come from the assembler's keep.
        coords.retain(|coord| {
            parts_needing(job, split, &part.task.shard, coord)
                .is_none_or(|(first, _)| first == part.index)
        });
    }
    let results = job.reader.read_chunks(&coords);
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

fn decode(jobs: &[ArrayJob], fetched: Fetched) -> Msg<Decoded> {
    let job = &jobs[fetched.part.task.array];
    let strings_of = job.source_repr.data_type.is_variable() && !job.passthrough;
    let count = job.source_repr.elements() as usize;
    let fill = job.source_repr.fill_value.as_bytes();
    let decoded = fetched
        .chunks
        .into_par_iter()
        .enumerate()
        .map(|(slot, (coord, bytes))| {
            let error = |source| Error::Decode {
                array: job.name.clone(),
                key: job.reader.chunk_key(&coord),
                source: Box::new(source),
            };
            let Some(b) = bytes else {
                return Ok((coord, None, None));
            };
            if job.passthrough {
                // The encoded bytes go to the shard as they are, but only once they are checked: a
                // truncated or garbled source chunk stops the run as it does without passthrough.
                // Frames that state their sizes are checked by their headers, others are decoded.
                // `Vec::from` does not copy an unshared buffer.
                job.source_chain
                    .check(&b, &job.source_repr)
                    .map_err(error)?;
                return Ok((coord, Some(Vec::from(b)), None));
            }
            let data = job
                .source_chain
                .decode(&b, &job.source_repr)
                .map_err(error)?;
            if !strings_of {
                return Ok((coord, Some(data), None));
            }
            // Reassembly moves fixed-size elements: strings travel as handles into the table.
            let (handles, strings) =
                StringTable::handles(slot, data, count, fill).map_err(error)?;
            Ok((coord, Some(handles), Some(strings)))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut strings = StringTable::with_slots(if strings_of { decoded.len() } else { 0 });
    let chunks = decoded
        .into_iter()
        .enumerate()
        .map(|(slot, (coord, data, chunk_strings))| {
            if let Some(chunk_strings) = chunk_strings {
                strings.insert(slot, chunk_strings);
            }
            (coord, data)
        })
        .collect();
    Ok(Decoded {
        part: fetched.part,
        chunks,
        strings,
        read: fetched.read,
    })
}

/// Decoded source chunks a shard keeps for its later parts, with the last part that needs each.
type KeptChunks = HashMap<Vec<u64>, (u64, Option<Vec<u8>>)>;

/// Whether an array's decoded source chunks can be kept between the parts of a shard (see
/// [`Options::keep_source_chunks`]): not when its chunks pass through encoded (each is one inner
/// chunk anyway), nor for variable-size types (strings are handles into their own message's table).
pub fn source_chunks_can_be_kept(passthrough: bool, source_type: DataType) -> bool {
    !passthrough && !source_type.is_variable()
}

/// Whether the parts of `job`'s shards share source chunks through the assembler: a source chunk
/// that straddles two parts is then read and decoded once, not once per part.
fn carries_source_chunks(job: &ArrayJob, split: &ShardSplit, options: &Options) -> bool {
    options.keep_source_chunks
        && split.parts() > 1
        && source_chunks_can_be_kept(job.passthrough, job.source_repr.data_type)
}

/// The first and last part of `shard` that need source chunk `coord`.
fn parts_needing(
    job: &ArrayJob,
    split: &ShardSplit,
    shard: &[u64],
    coord: &[u64],
) -> Option<(u64, u64)> {
    let chunk = Region::of_chunk(coord, &job.source_repr.shape, job.geometry.array_shape());
    split.parts_meeting(&job.geometry, shard, &chunk)
}

/// The reassembly stage, the one with state: it assembles the parts of a shard in order, keeping the
/// decoded source chunks that later parts need. Parts that arrive early wait; like the writer's, they
/// are within the window of messages in flight, and the part they wait for holds a permit.
struct Assembler<'a> {
    jobs: &'a [ArrayJob],
    splits: &'a [ShardSplit],
    keeps: &'a [bool],
    open: HashMap<(usize, Vec<u64>), OpenAssembly>,
}

#[derive(Default)]
struct OpenAssembly {
    next: u64,
    pending: BTreeMap<u64, Decoded>,
    kept: KeptChunks,
}

impl<'a> Assembler<'a> {
    fn new(jobs: &'a [ArrayJob], splits: &'a [ShardSplit], keeps: &'a [bool]) -> Self {
        Assembler {
            jobs,
            splits,
            keeps,
            open: HashMap::new(),
        }
    }

    /// Assembles `decoded` and the parts of its shard that waited for it; none while it waits itself.
    fn accept(&mut self, decoded: Decoded) -> Vec<Assembled> {
        let array = decoded.part.task.array;
        let (job, split) = (&self.jobs[array], &self.splits[array]);
        if !self.keeps[array] {
            return vec![assemble(job, split, decoded, None)];
        }
        let key = (array, decoded.part.task.shard.clone());
        let open = self.open.entry(key.clone()).or_default();
        open.pending.insert(decoded.part.index, decoded);
        let mut ready = Vec::new();
        while let Some(decoded) = open.pending.remove(&open.next) {
            let last = decoded.part.index + 1 == decoded.part.count;
            ready.push(assemble(job, split, decoded, Some(&mut open.kept)));
            open.next += 1;
            if last {
                self.open.remove(&key);
                break;
            }
        }
        ready
    }
}

/// Cuts the shard's inner chunks out of the decoded source chunks. Values cross source chunk
/// boundaries freely; what no source chunk covers keeps the fill value. Source chunks come from the
/// message or, read for an earlier part of the shard, from `kept`; those of the message that a later
/// part needs too go to `kept`, and those no later part needs leave it.
fn assemble(
    job: &ArrayJob,
    split: &ShardSplit,
    decoded: Decoded,
    kept: Option<&mut KeptChunks>,
) -> Assembled {
    let range = split.inner_range(decoded.part.index);
    if job.passthrough {
        return place_encoded(job, range, decoded);
    }
    let geometry = &job.geometry;
    let array_shape = geometry.array_shape();
    let source_shape = &job.source_repr.shape;
    let element = job.inner_repr.data_type.size();
    let handle_fill;
    let fill = if job.inner_repr.data_type.is_variable() {
        handle_fill = FillValue::from_bytes(StringHandle::FILL.to_le_bytes().to_vec());
        &handle_fill
    } else {
        &job.inner_repr.fill_value
    };
    let mut by_coord: HashMap<Vec<u64>, Option<Vec<u8>>> = decoded.chunks.into_iter().collect();
    // Source chunks that are exactly the inner chunks: each is used once and, inside the array,
    // becomes its inner chunk as it is (no fill, no copy).
    let same_grid = source_shape.as_slice() == geometry.inner_shape();
    let array = geometry.array_region();
    let first_inner = range.start;
    let inner = range
        .map(|i| {
            let region = geometry.inner_region(&decoded.part.task.shard, i);
            let covered = region.intersect(&array)?;
            if same_grid && covered == region {
                let data = by_coord
                    .remove(&region.first_chunk(source_shape))
                    .flatten()?;
                return (!fill.fills(&data)).then_some(data);
            }
            let mut buffer = fill.repeat(job.inner_repr.elements() as usize);
            for coord in covered.chunks_overlapping(source_shape) {
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
                let source = Region::of_chunk(&coord, source_shape, array_shape);
                let Some(overlap) = covered.intersect(&source) else {
                    continue;
                };
                copy_region(
                    data,
                    source_shape,
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
    if let Some(kept) = kept {
        let (shard, index) = (&decoded.part.task.shard, decoded.part.index);
        kept.retain(|_, (last, _)| *last > index);
        for (coord, data) in by_coord {
            if let Some((_, last)) = parts_needing(job, split, shard, &coord) {
                if last > index {
                    kept.insert(coord, (last, data));
                }
            }
        }
    }
    Assembled {
        part: decoded.part,
        first_inner,
        inner,
        strings: decoded.strings,
        read: decoded.read,
    }
}

/// Passthrough: each source chunk is one inner chunk, already encoded; it goes to its place in the
/// shard as it is. A missing source chunk is an empty inner chunk.
fn place_encoded(job: &ArrayJob, range: std::ops::Range<u64>, decoded: Decoded) -> Assembled {
    let per_shard = job.geometry.chunks_per_shard();
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
        strings: decoded.strings,
        read: decoded.read,
    }
}

fn encode(jobs: &[ArrayJob], assembled: Assembled) -> Msg<Encoded> {
    let job = &jobs[assembled.part.task.array];
    let shard = &assembled.part.task.shard;
    let strings = &assembled.strings;
    let string_fill = job.inner_repr.fill_value.as_bytes();
    let resolve = |raw: Vec<u8>| {
        if job.inner_repr.data_type.is_variable() {
            strings.resolve(&raw, string_fill)
        } else {
            Ok(raw)
        }
    };
    let inner = assembled
        .inner
        .into_par_iter()
        .enumerate()
        .map(|(i, raw)| match raw {
            None => Ok(None),
            Some(raw) if job.passthrough => Ok(Some(Bytes::from(raw))),
            Some(raw) => resolve(raw)
                .and_then(|raw| match &job.inner_chain {
                    None => Ok(raw),
                    Some(chain) => chain.encode(raw, &job.inner_repr),
                })
                .map(|b| Some(Bytes::from(b)))
                .map_err(|source| Error::Encode {
                    array: job.name.clone(),
                    key: job.sink.shard_key(shard),
                    inner: assembled.first_inner as usize + i,
                    source: Box::new(source),
                }),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Encoded {
        part: assembled.part,
        inner,
        read: assembled.read,
    })
}

type WriteState = std::sync::Mutex<(Stats, Option<Error>)>;

/// Shards that arrive in several parts and are being written, by (array, shard).
type OpenShards<'a> =
    std::sync::Mutex<HashMap<(usize, Vec<u64>), Arc<std::sync::Mutex<OpenShard<'a>>>>>;

/// A shard whose parts are being written in order. Parts that arrive early wait in `pending`; there
/// are at most as many as the pipeline holds in flight.
#[derive(Default)]
struct OpenShard<'a> {
    stream: Option<Box<dyn ShardStream + 'a>>,
    next: u64,
    pending: BTreeMap<u64, Encoded>,
    read: ReadCounts,
    written: bool,
    failed: bool,
}

fn write_stage<'a>(
    jobs: &'a [ArrayJob],
    input: Receiver<Msg<Encoded>>,
    cancel: &AtomicBool,
    progress: &(dyn Fn(&ShardOutcome) + Sync),
    state: &WriteState,
    open_shards: &OpenShards<'a>,
) {
    let _guard = CancelOnPanic(cancel);
    for msg in input {
        let outcome = msg.and_then(|encoded| {
            let job = &jobs[encoded.part.task.array];
            if encoded.part.count == 1 {
                write(job, encoded).map(Some)
            } else {
                write_part(job, encoded, open_shards)
            }
        });
        let mut guard = state.lock().unwrap_or_else(|p| p.into_inner());
        let (stats, first_error) = &mut *guard;
        match outcome {
            Ok(None) => {}
            Ok(Some(outcome)) => {
                stats.bytes_read += outcome.bytes_read;
                stats.chunks_read += outcome.chunks_read;
                stats.chunks_missing += outcome.chunks_missing;
                stats.bytes_written += outcome.bytes_written;
                if outcome.written {
                    stats.shards_written += 1;
                } else {
                    stats.shards_empty += 1;
                }
                drop(guard);
                progress(&outcome);
            }
            Err(e) => {
                cancel.store(true, Ordering::Relaxed);
                first_error.get_or_insert(e);
            }
        }
    }
}

fn write(job: &ArrayJob, encoded: Encoded) -> Result<ShardOutcome> {
    // The sink sees every shard, also those with only empty inner chunks: what to do with them (the
    // writer skips them) is its policy.
    let written = encoded.inner.iter().any(Option::is_some);
    let shard = &encoded.part.task.shard;
    let bytes_written = job
        .sink
        .write_shard(shard, &encoded.inner)
        .map_err(|source| write_error(job, shard, source))?;
    Ok(ShardOutcome {
        task: encoded.part.task,
        bytes_read: encoded.read.bytes,
        chunks_read: encoded.read.chunks,
        chunks_missing: encoded.read.missing,
        bytes_written,
        written,
    })
}

fn write_error(job: &ArrayJob, shard: &[u64], source: zshard_core::Error) -> Error {
    Error::Write {
        array: job.name.clone(),
        key: job.sink.shard_key(shard),
        source: Box::new(source),
    }
}

/// Streams one part of a shard that comes in several: the parts go to the sink in order, as soon as
/// each one's predecessors have. Returns the shard's outcome once its last part is written.
fn write_part<'a>(
    job: &'a ArrayJob,
    encoded: Encoded,
    open_shards: &OpenShards<'a>,
) -> Result<Option<ShardOutcome>> {
    let task = encoded.part.task.clone();
    let count = encoded.part.count;
    let key = (task.array, task.shard.clone());
    let entry = {
        let mut open = open_shards.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(open.entry(key.clone()).or_default())
    };
    let mut shard = entry.lock().unwrap_or_else(|p| p.into_inner());
    if shard.failed {
        return Ok(None);
    }
    shard.pending.insert(encoded.part.index, encoded);
    let written = append_ready(job, &task, &mut shard);
    if let Err(e) = written {
        // Dropping the stream abandons the shard: nothing appears under its key.
        shard.failed = true;
        shard.stream = None;
        shard.pending.clear();
        return Err(e);
    }
    if shard.next < count {
        return Ok(None);
    }
    let stream = shard.stream.take();
    let (read, written) = (shard.read, shard.written);
    drop(shard);
    open_shards
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&key);
    let bytes_written = match stream {
        Some(stream) => stream
            .finish()
            .map_err(|source| write_error(job, &task.shard, source))?,
        None => 0,
    };
    Ok(Some(ShardOutcome {
        task,
        bytes_read: read.bytes,
        chunks_read: read.chunks,
        chunks_missing: read.missing,
        bytes_written,
        written,
    }))
}

/// Appends the parts that are next in order.
fn append_ready<'a>(job: &'a ArrayJob, task: &ShardTask, shard: &mut OpenShard<'a>) -> Result<()> {
    while let Some(part) = shard.pending.remove(&shard.next) {
        if shard.stream.is_none() {
            let chunks = zshard_core::product(&job.geometry.chunks_per_shard()) as usize;
            let stream = job
                .sink
                .begin_shard(&task.shard, chunks)
                .map_err(|source| write_error(job, &task.shard, source))?;
            shard.stream = Some(stream);
        }
        if let Some(stream) = shard.stream.as_mut() {
            stream
                .append(&part.inner)
                .map_err(|source| write_error(job, &task.shard, source))?;
        }
        shard.read.bytes += part.read.bytes;
        shard.read.chunks += part.read.chunks;
        shard.read.missing += part.read.missing;
        shard.written |= part.inner.iter().any(Option::is_some);
        shard.next += 1;
    }
    Ok(())
}
