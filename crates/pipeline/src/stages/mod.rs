//! The stages and their wiring:
//!
//! fetch (I/O threads) → decode (rayon) → assemble (one thread) → encode (rayon) → write (I/O threads).
//!
//! A message is one part of a shard (see [`message`]). The channels between the stages are bounded
//! ([`Options::channel_capacity`]: at most one message per worker when the budget sizes them), the
//! stateless stages (decode, encode) are maps on their own rayon pool, and errors travel inside
//! messages to the writer, which keeps the first one and tells the fetchers to stop. Everything the
//! stages share lives in one [`RunContext`].

mod assemble;
mod decode;
mod encode;
mod fetch;
mod in_order;
mod message;
mod pyramid;
mod write;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{Scope, ScopedJoinHandle};

use crossbeam_channel::{bounded, Receiver, Sender};
use rayon::iter::{ParallelBridge, ParallelIterator};
use zshard_core::{Region, ShardSplit};

use crate::cancel::Cancel;
use crate::error::{Error, Result};
use crate::job::{ArrayJob, Options, PartOutcome, Progress, ShardOutcome, ShardTask};
use crate::stats::Stats;
use crate::window::Window;
use message::{Assembled, Decoded, Encoded, Fetched, Msg, ReadCounts, ShardPart};

/// Converts every shard that `tasks` yields. Returns the totals, or the first error (after the shards
/// already under way have drained; a shard with an error is never written), or [`Error::Cancelled`]
/// once [`Options::cancel`] is cancelled (shards not complete by then are abandoned, never published).
pub fn run(
    jobs: &[ArrayJob],
    tasks: impl Iterator<Item = ShardTask> + Send,
    options: &Options,
    progress: &(dyn Fn(&ShardOutcome) + Sync),
) -> Result<Stats> {
    run_observed(jobs, tasks, options, &progress)
}

/// [`run`], telling `progress` about every part written as well as every shard done.
pub fn run_observed(
    jobs: &[ArrayJob],
    tasks: impl Iterator<Item = ShardTask> + Send,
    options: &Options,
    progress: &dyn Progress,
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
    let context = RunContext::new(jobs, options, progress);
    let ctx = &context;
    let parts = Mutex::new(parts_of(ctx, tasks).peekable());
    let capacity = options.channel_capacity.max(1);
    let (fetched_tx, fetched_rx) = bounded::<Msg<Fetched>>(capacity);
    let (decoded_tx, decoded_rx) = bounded::<Msg<Decoded>>(capacity);
    let (assembled_tx, assembled_rx) = bounded::<Msg<Assembled>>(capacity);
    let (encoded_tx, encoded_rx) = bounded::<Msg<Encoded>>(capacity);
    let writer = write::Writer::default();

    std::thread::scope(|scope| {
        // Threads already started must not go on converting when the run cannot start completely.
        let spawn_failed = |source| {
            ctx.cancel();
            Error::SpawnThread { source }
        };
        // Several fetchers and writers, so that storage round trips of different shards overlap.
        let parts = &parts;
        for i in 0..options.io_threads.max(1) {
            let out = fetched_tx.clone();
            spawn(scope, format!("zshard-fetch-{i}"), move || {
                fetch::stage(ctx, parts, out)
            })
            .map_err(spawn_failed)?;
        }
        drop(fetched_tx);
        spawn(scope, "zshard-decode".into(), move || {
            decode_pool.install(|| {
                map_stage(ctx, fetched_rx, &decoded_tx, |m| {
                    decode::decode(ctx.array(m.part.task.array), m, &ctx.external)
                })
            })
        })
        .map_err(spawn_failed)?;
        spawn(scope, "zshard-assemble".into(), move || {
            assemble::stage(ctx, decoded_rx, &assembled_tx)
        })
        .map_err(spawn_failed)?;
        spawn(scope, "zshard-encode".into(), move || {
            encode_pool.install(|| {
                map_stage(ctx, assembled_rx, &encoded_tx, |m| {
                    encode::encode(ctx.array(m.part.task.array), m, &ctx.external)
                })
            })
        })
        .map_err(spawn_failed)?;
        let writer = &writer;
        let writers: Vec<_> = (1..options.io_threads.max(1))
            .map(|i| {
                let input = encoded_rx.clone();
                spawn(scope, format!("zshard-write-{i}"), move || {
                    writer.stage(ctx, input)
                })
            })
            .collect::<std::io::Result<_>>()
            .map_err(spawn_failed)?;
        writer.stage(ctx, encoded_rx);
        for writer in writers {
            // A writer only ends by panicking if a progress callback panicked; propagate that.
            if let Err(panic) = writer.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Ok(())
    })?;
    drop(parts);
    context.finish()
}

/// The parts of the shards of `tasks`, in order, each naming the shards of its array within its
/// window before and after its own when the array hands source chunks from shard to shard.
fn parts_of<'c>(
    ctx: &'c RunContext<'_>,
    tasks: impl Iterator<Item = ShardTask> + 'c,
) -> impl Iterator<Item = ShardPart> + 'c {
    let window = ctx.arrays.iter().map(|a| a.window).max().unwrap_or(0);
    let mut tasks = tasks.fuse();
    // The tasks after the current one (up to the widest window) and the ones before it, with their
    // positions in the run's order.
    let mut ahead: VecDeque<(u64, ShardTask)> = VecDeque::new();
    let mut behind: VecDeque<(u64, ShardTask)> = VecDeque::new();
    let mut position = 0u64;
    let mut chains = vec![0u64; ctx.arrays.len()];
    std::iter::from_fn(move || {
        while ahead.len() <= window {
            let Some(task) = tasks.next() else { break };
            ahead.push_back((position, task));
            position += 1;
        }
        let (at, task) = ahead.pop_front()?;
        let array = ctx.array(task.array);
        // A shard that copies inner chunks reads only the source chunks of the others: it neither
        // hands source chunks over nor takes them.
        let linked = |(other_at, other): &(u64, ShardTask)| {
            array.handoff
                && other.array == task.array
                && other.reuse.is_empty()
                && task.reuse.is_empty()
                && other_at.abs_diff(at) <= array.window as u64
        };
        let earlier: Arc<[Vec<u64>]> = behind
            .iter()
            .filter(|t| linked(t))
            .map(|(_, t)| t.shard.clone())
            .collect();
        let later: Arc<[Vec<u64>]> = ahead
            .iter()
            .filter(|t| linked(t))
            .map(|(_, t)| t.shard.clone())
            .collect();
        let chain = (array.handoff && task.reuse.is_empty()).then(|| {
            let seq = &mut chains[task.array];
            *seq += 1;
            *seq - 1
        });
        behind.push_back((at, task.clone()));
        if behind.len() > window {
            behind.pop_front();
        }
        Some((task, earlier, later, chain))
    })
    .flat_map(|(task, earlier, later, chain)| {
        let count = ctx.array(task.array).split.parts();
        (0..count).map(move |index| ShardPart {
            task: task.clone(),
            index,
            count,
            earlier: Arc::clone(&earlier),
            later: Arc::clone(&later),
            chain,
            permit: None,
        })
    })
}

/// The reads from storage that converting every shard of `jobs` would take, per job (`None` for a
/// job whose reader cannot tell unread, see [`zshard_core::ChunkReader::planned_reads`]; such a
/// job's shards are not even enumerated), with the fetch stage's batches when the window has room:
/// for a plan's cost estimate. Reads no chunk.
pub fn planned_reads(
    jobs: &[ArrayJob],
    options: &Options,
) -> Vec<Option<zshard_core::PlannedReads>> {
    let progress = |_: &ShardOutcome| {};
    let context = RunContext::new(jobs, options, &progress);
    jobs.iter()
        .enumerate()
        .map(|(array, job)| {
            job.reader.planned_reads(&[], u64::MAX)?;
            let grid = job.layout.geometry.shard_grid();
            let tasks = (0..zshard_core::product(&grid))
                .map(|i| ShardTask::new(array, zshard_core::unravel_index(i, &grid)));
            fetch::planned(
                context.array(array),
                parts_of(&context, tasks),
                context.fetch_batch,
            )
        })
        .collect()
}

/// Starts one thread of the run, naming settings in its messages as the thread that started the run
/// does.
fn spawn<'scope>(
    scope: &'scope Scope<'scope, '_>,
    name: String,
    work: impl FnOnce() + Send + 'scope,
) -> std::io::Result<ScopedJoinHandle<'scope, ()>> {
    std::thread::Builder::new()
        .name(name)
        .spawn_scoped(scope, zshard_core::setting::inheriting(work))
}

/// What every stage of one run shares, so that each takes one reference instead of many: the arrays
/// with how their shards are cut (from the options), the flag that stops the run, the window of
/// messages in flight, the progress callback and the totals.
struct RunContext<'a> {
    arrays: Vec<RunArray<'a>>,
    /// Set by the stages themselves: after an error, or when a later stage has stopped.
    cancel: AtomicBool,
    /// Set from outside the run ([`Options::cancel`]).
    external: Cancel,
    window: Arc<Window>,
    /// Parts a fetcher reads with one call at most, when the reader coalesces reads.
    fetch_batch: usize,
    progress: &'a dyn Progress,
    /// The totals of the shards written, and the first error.
    result: Mutex<(Stats, Option<Error>)>,
}

impl<'a> RunContext<'a> {
    fn new(jobs: &'a [ArrayJob], options: &'a Options, progress: &'a dyn Progress) -> Self {
        RunContext {
            arrays: jobs.iter().map(|job| RunArray::new(job, options)).collect(),
            cancel: AtomicBool::new(false),
            external: options.cancel.clone(),
            window: Window::new(messages_in_flight(options)),
            fetch_batch: fetch::batch_size(messages_in_flight(options)),
            progress,
            result: Mutex::new((Stats::default(), None)),
        }
    }

    fn array(&self, index: usize) -> &RunArray<'a> {
        &self.arrays[index]
    }

    /// Whether the stages should stop taking work: after an error, or when cancelled from outside.
    fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.external.is_cancelled()
    }

    /// Whether the run was cancelled from outside: the writer then abandons shards not yet complete
    /// instead of finishing them, so that the run stops within a bounded time.
    fn is_cancelled_from_outside(&self) -> bool {
        self.external.is_cancelled()
    }

    /// Tells every stage to stop taking new work.
    fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// Cancels the run if the calling thread unwinds from a panic before the guard is dropped.
    fn cancel_on_panic(&self) -> CancelOnPanic<'_> {
        CancelOnPanic(&self.cancel)
    }

    /// Counts a completed shard and reports it, or keeps the first error and stops the run.
    fn record(&self, outcome: Result<Option<ShardOutcome>>) {
        let mut result = self.result.lock().unwrap_or_else(|p| p.into_inner());
        let (stats, first_error) = &mut *result;
        match outcome {
            Ok(None) => {}
            Ok(Some(outcome)) => {
                *stats += &outcome;
                drop(result);
                self.progress.shard_done(&outcome);
            }
            Err(e) => {
                self.cancel();
                first_error.get_or_insert(e);
            }
        }
    }

    /// Reports a part of a shard written: `inner` its encoded inner chunks, `read` what reading its
    /// source chunks took.
    fn part_done(&self, part: &ShardPart, inner: &[Option<bytes::Bytes>], read: ReadCounts) {
        let array = self.array(part.task.array);
        let geometry = &array.job.layout.geometry;
        // Inner chunks of the padding past the array's end are no work done.
        let inner_chunks =
            geometry.chunks_inside(&array.split.region(geometry, &part.task.shard, part.index));
        self.progress.part_done(&PartOutcome {
            task: part.task.clone(),
            index: part.index,
            count: part.count,
            inner_chunks,
            raw_bytes: inner_chunks * array.inner_chunk_bytes,
            bytes_read: read.bytes,
            chunks_read: read.chunks,
            bytes_written: inner.iter().flatten().map(|b| b.len() as u64).sum(),
        });
    }

    /// The run's totals, or its first error, or [`Error::Cancelled`] when cancelled from outside.
    fn finish(self) -> Result<Stats> {
        let cancelled = self.is_cancelled_from_outside();
        let (stats, first_error) = self.result.into_inner().unwrap_or_else(|p| p.into_inner());
        match first_error {
            Some(e) => Err(e),
            None if cancelled => Err(Error::Cancelled),
            None => Ok(stats),
        }
    }
}

/// One job of a run, with how its shards are cut into parts and whether the parts share source chunks.
struct RunArray<'a> {
    job: &'a ArrayJob,
    split: ShardSplit,
    /// Whether the parts of a shard share source chunks through the assembler: a source chunk that
    /// straddles two parts is then read and decoded once, not once per part.
    keep: bool,
    /// With `keep`: how many parts ahead a part must need a source chunk for it to be kept
    /// ([`Options::keep_within_rows`]: one row of parts); `None`: kept until the last part that needs
    /// it.
    keep_window: Option<u64>,
    /// With `keep` and no `keep_window`: whether kept source chunks are cut down to what later parts
    /// need ([`Options::trim_kept`]).
    trim: bool,
    /// Whether consecutive shards of the array in the run's order share source chunks through the
    /// assembler: a source chunk that straddles the boundary between a shard and the next one is
    /// then read and decoded once, not once per shard (issue 43: a rechunk to shards that source
    /// chunks straddle decoded up to twice as many chunks as the source holds).
    handoff: bool,
    /// With `handoff`: how many shards later in the run's order (of any array) a shard of this
    /// array may hand source chunks to, and how many earlier it may take them from (see
    /// [`Options::keep_across_slab`]): one slab of the shard grid and one more, or 1.
    window: usize,
    /// Raw bytes of one inner chunk, for progress by bytes.
    inner_chunk_bytes: u64,
    /// The most bytes a stored source chunk can take (the source chain's bound for a chunk of
    /// `source_repr`, the largest chunk on a rectilinear grid, with room for bytes its codecs skip;
    /// see `CodecChain::max_stored_len`): the one bound every reader gets.
    max_chunk_len: u64,
    /// Likewise for an inner chunk of the output, which an update may copy from the previous
    /// output (see `ShardTask::reuse`).
    max_inner_len: u64,
}

impl<'a> RunArray<'a> {
    fn new(job: &'a ArrayJob, options: &Options) -> Self {
        let split = job.layout.split(options.part_bytes);
        let keep =
            options.keep_source_chunks && split.parts() > 1 && job.layout.can_keep_source_chunks();
        let keep_window = options.keep_within_rows.then(|| split.parts_per_row());
        let trim = keep && options.trim_kept && keep_window.is_none();
        // The budget counts what a shard hands to the next with what it keeps (see `budget.rs`).
        let handoff = options.keep_source_chunks && job.layout.can_hand_over_source_chunks();
        let window = match handoff {
            false => 0,
            true if options.keep_across_slab => job.layout.slab_window(),
            true => 1,
        };
        let inner_chunk_bytes = zshard_core::product(job.layout.geometry.inner_shape())
            * job.layout.element_size() as u64;
        // A chain whose bound cannot be computed cannot decode either; its reads go unbounded and
        // the decoder names the problem.
        let max_chunk_len = job
            .source_chain
            .max_stored_len(&job.layout.source_repr)
            .unwrap_or(u64::MAX);
        let max_inner_len = job.max_inner_len();
        RunArray {
            job,
            split,
            keep,
            keep_window,
            trim,
            handoff,
            window,
            inner_chunk_bytes,
            max_chunk_len,
            max_inner_len,
        }
    }

    /// The first and last part of `shard` that need source chunk `coord`.
    fn parts_needing(&self, shard: &[u64], coord: &[u64]) -> Option<(u64, u64)> {
        let geometry = &self.job.layout.geometry;
        let chunk = self.job.layout.source_chunk_region(coord);
        self.split.parts_meeting(geometry, shard, &chunk)
    }

    /// Whether a part of `shard` among `parts` needs source chunk `coord`.
    fn part_needs(&self, shard: &[u64], coord: &[u64], parts: std::ops::Range<u64>) -> bool {
        let geometry = &self.job.layout.geometry;
        let chunk = self.job.layout.source_chunk_region(coord);
        parts.into_iter().any(|p| {
            self.split
                .region(geometry, shard, p)
                .intersect(&chunk)
                .is_some()
        })
    }

    /// Whether part `index` of `shard` reads source chunk `coord` when the shard keeps source chunks
    /// between its parts: the first part that needs it does, and with a window, a part that needs it
    /// when none within the window before it did.
    fn part_reads(&self, shard: &[u64], coord: &[u64], index: u64) -> bool {
        match self.keep_window {
            None => self
                .parts_needing(shard, coord)
                .is_none_or(|(first, _)| first == index),
            Some(window) => !self.part_needs(shard, coord, index.saturating_sub(window)..index),
        }
    }

    /// The box of source chunk `coord` (array coordinates, within the array) that the parts of
    /// `shard` after part `index` need: the smallest box holding each such part's overlap with it.
    /// `None` when none needs it.
    fn needed_after(&self, shard: &[u64], coord: &[u64], index: u64) -> Option<Region> {
        let geometry = &self.job.layout.geometry;
        let chunk = self.job.layout.source_chunk_region(coord);
        self.split
            .parts_meeting_each(geometry, shard, &chunk)
            .into_iter()
            .filter(|&p| p > index)
            .filter_map(|p| self.split.region(geometry, shard, p).intersect(&chunk))
            .reduce(|a, b| {
                let (start, end): (Vec<u64>, Vec<u64>) = a
                    .start
                    .iter()
                    .zip(a.end())
                    .zip(b.start.iter().zip(b.end()))
                    .map(|((&s0, e0), (&s1, e1))| (s0.min(s1), e0.max(e1)))
                    .unzip();
                let shape = end.iter().zip(&start).map(|(e, s)| e - s).collect();
                Region { start, shape }
            })
    }

    /// The part of `shard` after part `index` until which source chunk `coord` is kept between the
    /// shard's parts (the last that needs it, or with a window the next within it), if any.
    fn kept_until(&self, shard: &[u64], coord: &[u64], index: u64) -> Option<u64> {
        match self.keep_window {
            None => self
                .parts_needing(shard, coord)
                .map(|(_, last)| last)
                .filter(|&last| last > index),
            Some(window) => {
                let end = index.saturating_add(window).min(self.split.parts() - 1);
                (index + 1..=end).find(|&p| self.part_needs(shard, coord, p..p + 1))
            }
        }
    }
}

/// Messages allowed between the fetchers and the writer: what the channels and stages hold when full
/// (four channels, an input and an output per worker of each pool, the fetch, assemble and write
/// threads), so the window only binds when the writer keeps parts waiting for a predecessor; or
/// fewer, down to [`narrow_window`], when [`Options::max_in_flight`] says so.
pub(crate) fn messages_in_flight(options: &Options) -> usize {
    let full = 4 * options.channel_capacity.max(1)
        + 4 * options.threads.max(1)
        + 2 * options.io_threads.max(1)
        + 1;
    match options.max_in_flight {
        Some(at_most) => at_most.clamp(narrow_window(options).min(full), full),
        None => full,
    }
}

/// The fewest messages in flight that keep every thread of the stages busy: one per fetch and write
/// thread and per worker of each pool. Fewer would leave a stage idle while the oldest part waits;
/// the window, whatever its size, never deadlocks (see `window.rs`).
pub(crate) fn narrow_window(options: &Options) -> usize {
    2 * options.threads.max(1) + 2 * options.io_threads.max(1)
}

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

/// A stateless stage: messages are taken by the pool's workers as they free up, so several shards are
/// processed at once, and each shard's chunks are spread over the pool too.
fn map_stage<I: Send, O: Send>(
    ctx: &RunContext<'_>,
    input: Receiver<Msg<I>>,
    output: &Sender<Msg<O>>,
    work: impl Fn(I) -> Msg<O> + Sync,
) {
    input.into_iter().par_bridge().for_each(|msg| {
        if ctx.is_cancelled() {
            return;
        }
        let _guard = ctx.cancel_on_panic();
        // A closed output means a later stage has stopped: stop the earlier ones too.
        if output.send(msg.and_then(&work)).is_err() {
            ctx.cancel();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_holds_what_the_channels_and_stages_hold() {
        // The options of the integration test `a_slow_part_does_not_let_the_fetchers_run_ahead`,
        // which expects a window of 17.
        let options = Options {
            channel_capacity: 1,
            io_threads: 2,
            part_bytes: 16,
            ..Options::with_threads(2)
        };
        assert_eq!(messages_in_flight(&options), 4 + 2 * 2 * 2 + 2 * 2 + 1);
        assert_eq!(messages_in_flight(&options), 17);
        // Narrowed, never below one message per thread of the stages nor above the full window.
        let at_most = |n| Options {
            max_in_flight: Some(n),
            ..options.clone()
        };
        assert_eq!(narrow_window(&options), 2 * 2 + 2 * 2);
        assert_eq!(messages_in_flight(&at_most(10)), 10);
        assert_eq!(messages_in_flight(&at_most(1)), 8);
        assert_eq!(messages_in_flight(&at_most(100)), 17);
    }
}
