//! What a run does with each shard the pipeline finishes: tells the observer and the report, and
//! records it in the destination's state (written with its size, checksums and version; all-fill
//! shards as empty), so that a rerun skips it. A failure to record does not stop the pipeline: the
//! first one is kept and the run fails with it once the pipeline is done.

use std::collections::HashMap;
use std::sync::Mutex;

use zshard_core::linear_index;
use zshard_pipeline::{ArrayLayout, ShardOutcome};
use zshard_state::{ChunkHashes, Entry, Observer, ShardLog};
use zshard_store::Store;

use crate::error::{Error, Result};
use crate::plan::Plan;
use crate::run::conversion::Conversion;
use crate::run::digests::{encode_inner, inner_digests, names_inner_digests, Listed};
use crate::run::report::ReportBuilder;

/// Record files to write: key and contents.
pub(crate) type RecordFiles = Vec<(String, bytes::Bytes)>;

/// The records of one run's shards, as they are done.
pub(crate) struct Recorder<'a> {
    destination: &'a Store,
    plan: &'a Plan,
    observer: &'a dyn Observer,
    builder: &'a Mutex<ReportBuilder>,
    /// The records of shards written, and of all-fill shards.
    logs: Mutex<(ShardLog, ShardLog)>,
    /// Objects found at shard keys that no record proves ours, by (array, shard index).
    untrusted: &'a HashMap<(usize, u64), String>,
    /// The first failure to record.
    error: Mutex<Option<Error>>,
    /// What each shard is made from (its record says so, see `digests.rs`).
    listed: &'a Listed,
    /// Each array's layout, for its inner chunks' digests.
    layouts: Vec<ArrayLayout>,
    /// Per array, whether its records name its inner chunks' digests (see `names_inner_digests`).
    names_inner: Vec<bool>,
}

impl<'a> Recorder<'a> {
    /// The recorder of `conversion`'s run (as its worker, [`Conversion::partition`]) into
    /// `destination`.
    pub(crate) fn new(
        conversion: &Conversion,
        destination: &'a Store,
        plan: &'a Plan,
        observer: &'a dyn Observer,
        builder: &'a Mutex<ReportBuilder>,
        untrusted: &'a HashMap<(usize, u64), String>,
        listed: &'a Listed,
    ) -> Self {
        let (limits, interval) = conversion.record_log();
        // Written shards are recorded with their size, so that a resumed run can prove them ours.
        let partition = conversion.partition;
        let written = ShardLog::written(destination.clone(), partition, limits, interval);
        let empty = ShardLog::empty(destination.clone(), partition, limits, interval);
        let layouts: Vec<ArrayLayout> = plan.arrays.iter().map(|a| a.layout()).collect();
        Recorder {
            destination,
            plan,
            observer,
            builder,
            logs: Mutex::new((written, empty)),
            untrusted,
            error: Mutex::new(None),
            listed,
            names_inner: layouts.iter().map(names_inner_digests).collect(),
            layouts,
        }
    }

    /// A shard is done: told, added to the report, recorded.
    pub(crate) fn shard_done(&self, outcome: &ShardOutcome) {
        self.observer.shard_done(outcome);
        if let Ok(mut b) = self.builder.lock() {
            b.add(outcome);
        }
        if let (Err(e), Ok(mut slot)) = (self.record(outcome), self.error.lock()) {
            slot.get_or_insert(e);
        }
    }

    fn record(&self, outcome: &ShardOutcome) -> Result<()> {
        let array = &self.plan.arrays[outcome.task.array];
        let mut logs = self
            .logs
            .lock()
            .map_err(|_| Error::Poisoned { what: "the record" })?;
        let (written, empty) = &mut *logs;
        let index = linear_index(&outcome.task.shard, &array.geometry.shard_grid());
        let digest = self.listed.digests.get(outcome.task.array, index);
        // What each inner chunk is made from, for an update to copy those that stay the same (an
        // all-fill shard has nothing to copy: its record stays short, however sparse the array).
        let inner = match (digest, self.listed.versions.get(outcome.task.array)) {
            (Some(_), Some(Some(versions)))
                if outcome.written && self.names_inner[outcome.task.array] =>
            {
                Some(encode_inner(&inner_digests(
                    &self.layouts[outcome.task.array],
                    versions,
                    &outcome.task.shard,
                )))
            }
            _ => None,
        };
        let digests = (digest, inner.as_deref());
        if outcome.written {
            let entry = Entry {
                size: outcome.bytes_written,
                crc32c: outcome.crc32c,
                // A copied-through array's manifest hashes its stored bytes.
                kind: if array.passthrough {
                    ChunkHashes::Encoded
                } else {
                    ChunkHashes::Decoded
                },
                chunks: outcome.chunk_hashes.clone(),
            };
            return written
                .record(
                    &array.path,
                    &outcome.task.shard,
                    Some(&entry),
                    outcome.version.as_deref(),
                    digests,
                )
                .map_err(Error::from);
        }
        // An object we could not trust sits where no shard belongs.
        if let Some(key) = self.untrusted.get(&(outcome.task.array, index)) {
            self.destination.delete(key)?;
        }
        empty
            .record(&array.path, &outcome.task.shard, None, None, digests)
            .map_err(Error::from)
    }

    /// The last records of the run, as record files still to write, and the first failure to
    /// record, if any.
    pub(crate) fn finish(self) -> Result<(RecordFiles, Option<Error>)> {
        let records = {
            let mut logs = self
                .logs
                .lock()
                .map_err(|_| Error::Poisoned { what: "the record" })?;
            let (written, empty) = &mut *logs;
            written
                .take_batch()
                .into_iter()
                .chain(empty.take_batch())
                .collect()
        };
        Ok((records, self.error.into_inner().ok().flatten()))
    }
}
