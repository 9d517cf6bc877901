//! The stages and their wiring. Each message is one shard; errors travel inside messages to the
//! writer, which keeps the first one and tells the fetcher to stop.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use crossbeam_channel::{bounded, Receiver, Sender};
use rayon::iter::{
    IndexedParallelIterator, IntoParallelIterator, ParallelBridge, ParallelIterator,
};
use zshard_core::{copy_region, FillValue, Region, StringHandle, StringTable};

use crate::error::{Error, Result};
use crate::job::{ArrayJob, Options, ShardOutcome, ShardTask, Stats};

/// Encoded source chunks of one shard, as read (`None` = missing chunk).
struct Fetched {
    task: ShardTask,
    chunks: Vec<(Vec<u64>, Option<Bytes>)>,
    read: ReadCounts,
}

/// Decoded source chunks of one shard. Strings are handles into `strings`.
struct Decoded {
    task: ShardTask,
    chunks: Vec<(Vec<u64>, Option<Vec<u8>>)>,
    strings: StringTable,
    read: ReadCounts,
}

/// Raw inner chunks of one shard, C order; `None` = empty (only fill value, or outside the array).
/// Strings are handles into `strings` until they are encoded.
struct Assembled {
    task: ShardTask,
    inner: Vec<Option<Vec<u8>>>,
    strings: StringTable,
    read: ReadCounts,
}

/// Encoded inner chunks of one shard.
struct Encoded {
    task: ShardTask,
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
    let tasks = std::sync::Mutex::new(tasks);
    let state: WriteState = std::sync::Mutex::new((Stats::default(), None));

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
        let tasks = &tasks;
        for i in 0..options.io_threads.max(1) {
            let out = fetched_tx.clone();
            std::thread::Builder::new()
                .name(format!("zshard-fetch-{i}"))
                .spawn_scoped(scope, move || fetch_stage(jobs, tasks, cancel, out))
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
                for msg in decoded_rx {
                    if cancel.load(Ordering::Relaxed) {
                        continue;
                    }
                    let assembled = msg.map(|d| assemble(&jobs[d.task.array], d));
                    if assembled_tx.send(assembled).is_err() {
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
        let writers: Vec<_> = (1..options.io_threads.max(1))
            .map(|i| {
                let input = encoded_rx.clone();
                std::thread::Builder::new()
                    .name(format!("zshard-write-{i}"))
                    .spawn_scoped(scope, move || {
                        write_stage(jobs, input, cancel, progress, state)
                    })
            })
            .collect::<std::io::Result<_>>()
            .map_err(spawn_failed)?;
        write_stage(jobs, encoded_rx, cancel, progress, state);
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

fn fetch_stage<I: Iterator<Item = ShardTask>>(
    jobs: &[ArrayJob],
    tasks: &std::sync::Mutex<I>,
    cancel: &AtomicBool,
    out: Sender<Msg<Fetched>>,
) {
    loop {
        if cancel.load(Ordering::Relaxed) {
            break;
        }
        let next = match tasks.lock() {
            Ok(mut tasks) => tasks.next(),
            Err(_) => None,
        };
        let Some(task) = next else { break };
        if out.send(fetch(&jobs[task.array], task)).is_err() {
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

fn fetch(job: &ArrayJob, task: ShardTask) -> Msg<Fetched> {
    let region = job
        .geometry
        .shard_region(&task.shard)
        .intersect(&job.geometry.array_region());
    let coords = region.map_or_else(Vec::new, |r| r.chunks_overlapping(&job.source_repr.shape));
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
    Ok(Fetched { task, chunks, read })
}

fn decode(jobs: &[ArrayJob], fetched: Fetched) -> Msg<Decoded> {
    let job = &jobs[fetched.task.array];
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
            let data = job
                .source_chain
                .decode(&b, &job.source_repr)
                .map_err(error)?;
            if job.passthrough {
                // The encoded bytes go to the shard as they are, but only once they decode: a corrupt
                // source chunk stops the run as it does without passthrough. Decoding costs far less
                // than the encoding passthrough saves. `Vec::from` does not copy an unshared buffer.
                return Ok((coord, Some(Vec::from(b)), None));
            }
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
        task: fetched.task,
        chunks,
        strings,
        read: fetched.read,
    })
}

/// Cuts the shard's inner chunks out of the decoded source chunks. Values cross source chunk
/// boundaries freely; what no source chunk covers keeps the fill value.
fn assemble(job: &ArrayJob, decoded: Decoded) -> Assembled {
    if job.passthrough {
        return place_encoded(job, decoded);
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
    let by_coord: HashMap<&[u64], &Option<Vec<u8>>> = decoded
        .chunks
        .iter()
        .map(|(c, d)| (c.as_slice(), d))
        .collect();
    let count = zshard_core::product(&geometry.chunks_per_shard());
    let array = geometry.array_region();
    let inner = (0..count)
        .map(|i| {
            let region = geometry.inner_region(&decoded.task.shard, i);
            let covered = region.intersect(&array)?;
            let mut buffer = fill.repeat(job.inner_repr.elements() as usize);
            for coord in covered.chunks_overlapping(source_shape) {
                let Some(Some(data)) = by_coord.get(coord.as_slice()) else {
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
    Assembled {
        task: decoded.task,
        inner,
        strings: decoded.strings,
        read: decoded.read,
    }
}

/// Passthrough: each source chunk is one inner chunk, already encoded; it goes to its place in the
/// shard as it is. A missing source chunk is an empty inner chunk.
fn place_encoded(job: &ArrayJob, decoded: Decoded) -> Assembled {
    let per_shard = job.geometry.chunks_per_shard();
    let mut inner: Vec<Option<Vec<u8>>> = vec![None; zshard_core::product(&per_shard) as usize];
    for (coord, data) in decoded.chunks {
        let local: Vec<u64> = coord
            .iter()
            .zip(&decoded.task.shard)
            .zip(&per_shard)
            .map(|((c, s), n)| c - s * n)
            .collect();
        if let Some(slot) = inner.get_mut(zshard_core::linear_index(&local, &per_shard) as usize) {
            *slot = data;
        }
    }
    Assembled {
        task: decoded.task,
        inner,
        strings: decoded.strings,
        read: decoded.read,
    }
}

fn encode(jobs: &[ArrayJob], assembled: Assembled) -> Msg<Encoded> {
    let job = &jobs[assembled.task.array];
    let shard = &assembled.task.shard;
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
                    inner: i,
                    source: Box::new(source),
                }),
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Encoded {
        task: assembled.task,
        inner,
        read: assembled.read,
    })
}

type WriteState = std::sync::Mutex<(Stats, Option<Error>)>;

fn write_stage(
    jobs: &[ArrayJob],
    input: Receiver<Msg<Encoded>>,
    cancel: &AtomicBool,
    progress: &(dyn Fn(&ShardOutcome) + Sync),
    state: &WriteState,
) {
    let _guard = CancelOnPanic(cancel);
    for msg in input {
        let outcome = msg.and_then(|encoded| write(&jobs[encoded.task.array], encoded));
        let mut guard = state.lock().unwrap_or_else(|p| p.into_inner());
        let (stats, first_error) = &mut *guard;
        match outcome {
            Ok(outcome) => {
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
    let bytes_written = job
        .sink
        .write_shard(&encoded.task.shard, &encoded.inner)
        .map_err(|source| Error::Write {
            array: job.name.clone(),
            key: job.sink.shard_key(&encoded.task.shard),
            source: Box::new(source),
        })?;
    Ok(ShardOutcome {
        task: encoded.task,
        bytes_read: encoded.read.bytes,
        chunks_read: encoded.read.chunks,
        chunks_missing: encoded.read.missing,
        bytes_written,
        written,
    })
}
