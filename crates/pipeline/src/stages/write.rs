//! The write stage: I/O threads that hand finished shards to the sink. A shard of one part is written
//! at once; a shard of several is streamed, its parts appended in order as they become ready.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crossbeam_channel::Receiver;
use zshard_core::{ShardStream, Stored};

use super::in_order::InOrder;
use super::message::{Encoded, Msg, ReadCounts, ShardKey};
use super::RunContext;
use crate::error::{Error, Result};
use crate::job::{ArrayJob, ShardOutcome, ShardTask};

/// The shards that arrive in several parts and are being written, by (array, shard). Shared by the
/// writer threads: consecutive parts of one shard can reach different threads.
#[derive(Default)]
pub(super) struct Writer<'a> {
    open: Mutex<HashMap<ShardKey, Arc<Mutex<OpenShard<'a>>>>>,
}

/// A shard whose parts are being written in order.
#[derive(Default)]
struct OpenShard<'a> {
    stream: Option<Box<dyn ShardStream + 'a>>,
    parts: InOrder<Encoded>,
    read: ReadCounts,
    written: bool,
    failed: bool,
    hashes: Vec<Option<u32>>,
    /// Some part came without hashes (see `ArrayJob::hash_copied`): the shard names none.
    unhashed: bool,
}

impl<'a> Writer<'a> {
    /// Writes the messages of `input` until it closes, recording each shard's outcome in `ctx`.
    pub(super) fn stage(&self, ctx: &RunContext<'a>, input: Receiver<Msg<Encoded>>) {
        let _guard = ctx.cancel_on_panic();
        for msg in input {
            if ctx.is_cancelled_from_outside() {
                // Parts in flight are dropped: a shard not begun is not written, and one being
                // streamed is abandoned when the writer drops its stream at the end of the run.
                continue;
            }
            let outcome = msg.and_then(|encoded| {
                let job = ctx.array(encoded.part.task.array).job;
                if encoded.part.count == 1 {
                    write(ctx, job, encoded).map(Some)
                } else {
                    self.write_part(ctx, job, encoded)
                }
            });
            ctx.record(outcome);
        }
    }

    /// Streams one part of a shard that comes in several: the parts go to the sink in order, as soon
    /// as each one's predecessors have. Returns the shard's outcome once its last part is written.
    fn write_part(
        &self,
        ctx: &RunContext<'a>,
        job: &'a ArrayJob,
        encoded: Encoded,
    ) -> Result<Option<ShardOutcome>> {
        let task = encoded.part.task.clone();
        let count = encoded.part.count;
        let key = encoded.part.shard_key();
        let entry = {
            let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(open.entry(key.clone()).or_default())
        };
        let mut shard = entry.lock().unwrap_or_else(|p| p.into_inner());
        if shard.failed {
            return Ok(None);
        }
        shard.parts.insert(encoded.part.index, encoded);
        if let Err(e) = append_ready(ctx, job, &task, &mut shard) {
            // Dropping the stream abandons the shard: nothing appears under its key.
            shard.failed = true;
            shard.stream = None;
            shard.parts.clear();
            return Err(e);
        }
        if shard.parts.released() < count {
            return Ok(None);
        }
        let stream = shard.stream.take();
        let (read, written) = (shard.read, shard.written);
        let hashes = match shard.unhashed {
            true => Vec::new(),
            false => std::mem::take(&mut shard.hashes),
        };
        drop(shard);
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
        let stored = match stream {
            Some(stream) => stream
                .finish()
                .map_err(|source| write_error(job, &task.shard, source))?,
            None => Stored::NOTHING,
        };
        Ok(Some(outcome(task, read, stored, written, hashes)))
    }
}

/// Writes a shard of one part.
fn write(ctx: &RunContext<'_>, job: &ArrayJob, encoded: Encoded) -> Result<ShardOutcome> {
    // The sink sees every shard, also those with only empty inner chunks: what to do with them (the
    // writer skips them) is its policy.
    let written = encoded.inner.iter().any(Option::is_some);
    let shard = &encoded.part.task.shard;
    let stored = job
        .sink
        .write_shard(shard, &encoded.inner)
        .map_err(|source| write_error(job, shard, source))?;
    ctx.part_done(&encoded.part, &encoded.inner, encoded.read);
    Ok(outcome(
        encoded.part.task,
        encoded.read,
        stored,
        written,
        encoded.hashes,
    ))
}

fn outcome(
    task: ShardTask,
    read: ReadCounts,
    stored: Stored,
    written: bool,
    chunk_hashes: Vec<Option<u32>>,
) -> ShardOutcome {
    ShardOutcome {
        task,
        bytes_read: read.bytes,
        chunks_read: read.chunks,
        chunks_missing: read.missing,
        inner_chunks_copied: read.copied,
        bytes_written: stored.bytes,
        written,
        crc32c: stored.crc32c,
        version: stored.version,
        chunk_hashes,
    }
}

fn write_error(job: &ArrayJob, shard: &[u64], source: zshard_core::Error) -> Error {
    Error::Write {
        array: job.name.clone(),
        key: job.sink.shard_key(shard),
        source: Box::new(source),
    }
}

/// Appends the parts that are next in order, starting the shard's stream with the first.
fn append_ready<'a>(
    ctx: &RunContext<'a>,
    job: &'a ArrayJob,
    task: &ShardTask,
    shard: &mut OpenShard<'a>,
) -> Result<()> {
    while let Some(part) = shard.parts.pop_next() {
        if shard.stream.is_none() {
            let chunks = zshard_core::product(&job.layout.geometry.chunks_per_shard()) as usize;
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
        ctx.part_done(&part.part, &part.inner, part.read);
        shard.unhashed |= part.hashes.len() != part.inner.len();
        shard.hashes.extend_from_slice(&part.hashes);
        shard.read += part.read;
        shard.written |= part.inner.iter().any(Option::is_some);
    }
    Ok(())
}
