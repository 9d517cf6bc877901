//! The record log: batches of `done`/`empty` records and their manifest files, written after a
//! checkpoint and compacted by fours (see [`ShardLog`]).

use super::*;

/// Batches records of shards (written ones with their size, or all-fill ones) and stores each batch
/// under its own key, so that a batch is never rewritten while it may be its only copy; this run's
/// batches are compacted as they accumulate (see [`ShardLog::compact`]), so that a worker's records
/// stay a few files however many shards it writes.
#[derive(Debug)]
pub struct ShardLog {
    pub(super) store: Store,
    /// `<worker>-<run>`; a batch is `<dir>/<name>-<seq>.txt`, its manifest records the file of the
    /// same name under [`MANIFEST_DIR`].
    pub(super) name: String,
    pub(super) dir: &'static str,
    pub(super) seq: u64,
    pub(super) pending: String,
    /// The manifest lines of the written shards in `pending`.
    pub(super) manifest: String,
    pub(super) entries: usize,
    /// The bytes of the written shards in `pending`.
    pub(super) pending_bytes: u64,
    pub(super) last_flush: Instant,
    /// This run's record files, oldest first, with the batches each holds (one, or many once
    /// compacted). Only this run's: no other process writes or removes them.
    pub(super) files: Vec<RecordFile>,
    pub(super) limits: RecordLimits,
    /// How long records are batched at most (the checkpoint interval).
    pub(super) interval: Duration,
}

/// When records are flushed and compacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLimits {
    /// Records per batch file (a batch is also flushed every checkpoint interval).
    pub flush_entries: usize,
    /// How many of this run's record files holding as many batches each are merged into one.
    pub compact_at: usize,
    /// Tests: a compaction fails after writing the merged files, before removing the ones merged
    /// (what a kill there leaves). A field in every build, since `zshard-convert`'s tests set it
    /// (a `cfg(test)` of this crate is off when another crate's tests build it).
    #[doc(hidden)]
    pub fail_before_removal: bool,
}

impl Default for RecordLimits {
    fn default() -> Self {
        RecordLimits {
            flush_entries: FLUSH_ENTRIES,
            compact_at: COMPACT_AT,
            fail_before_removal: false,
        }
    }
}

/// One of this run's record files: its sequence number and the batches it holds.
#[derive(Debug, Clone)]
pub(super) struct RecordFile {
    pub(super) seq: u64,
    pub(super) batches: Vec<BatchStamp>,
}

/// When a batch of records was flushed, how many records it holds and the bytes of the shards they
/// name: what `zshard status` takes its rate from. A batch file's own modification time says it; a
/// compacted file says it for each batch it holds, in its first line ([`BATCHES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchStamp {
    /// Milliseconds since the Unix epoch.
    pub(crate) ms: u64,
    pub(crate) records: u64,
    pub(crate) bytes: u64,
}

/// The first line of a compacted record file: this marker, then `ms:records:bytes` of each batch it
/// holds, comma-separated. Readers of records skip it (it names no array and no coordinate).
pub(crate) const BATCHES: &str = "#batches\t";

/// The batches a compacted record file's first line (`line`) names; `None` for any other line.
pub(crate) fn batch_stamps(line: &str) -> Option<Vec<BatchStamp>> {
    let list = line.strip_prefix(BATCHES)?;
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(|stamp| {
            let mut parts = stamp.split(':').map(str::parse::<u64>);
            match (parts.next(), parts.next(), parts.next(), parts.next()) {
                (Some(Ok(ms)), Some(Ok(records)), Some(Ok(bytes)), None) => {
                    Some(BatchStamp { ms, records, bytes })
                }
                _ => None,
            }
        })
        .collect()
}

pub(super) const FLUSH_ENTRIES: usize = 10_000;

/// How often a run records the shards it has written (each time after a checkpoint on local disk),
/// unless its conversion is given another interval; records are also written every 10,000 shards.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(10);
/// Merged by fours: a worker's records are at most three files per level (a level holding four
/// times the batches of the one below), each record rewritten once per level: at a million shards
/// (100 batches), 6 files, each record rewritten up to 3 times.
pub(super) const COMPACT_AT: usize = 4;

impl ShardLog {
    /// Records of written shards, written (after a checkpoint) every `interval` at least.
    pub fn written(
        store: Store,
        partition: Partition,
        limits: RecordLimits,
        interval: Duration,
    ) -> Self {
        Self::new(store, DONE_DIR, partition, limits, interval)
    }

    /// Records of all-fill shards, written every `interval` at least.
    pub fn empty(
        store: Store,
        partition: Partition,
        limits: RecordLimits,
        interval: Duration,
    ) -> Self {
        Self::new(store, EMPTY_DIR, partition, limits, interval)
    }

    pub(super) fn new(
        store: Store,
        dir: &'static str,
        partition: Partition,
        limits: RecordLimits,
        interval: Duration,
    ) -> Self {
        let run = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        ShardLog {
            store,
            name: format!("{}-{run}", partition.tag()),
            dir,
            seq: 0,
            pending: String::new(),
            manifest: String::new(),
            entries: 0,
            pending_bytes: 0,
            last_flush: Instant::now(),
            files: Vec::new(),
            limits,
            interval,
        }
    }

    /// Records a shard; `written` is what was stored (`None` for an all-fill shard), `version` the
    /// version the store gave the object (its ETag, see [`zshard_core::Stored::version`]),
    /// `digest` what it was made from (see `made_from.rs`).
    pub fn record(
        &mut self,
        array_path: &str,
        shard: &[u64],
        written: Option<&crate::manifest::Entry>,
        version: Option<&str>,
        (digest, inner): (Option<u64>, Option<&str>),
    ) -> Result<()> {
        let coord: Vec<String> = shard.iter().map(u64::to_string).collect();
        let coord = coord.join(",");
        self.pending.push_str(array_path);
        self.pending.push('\t');
        self.pending.push_str(&coord);
        if let Some(entry) = written {
            self.pending
                .push_str(&format!("\t{}\t{:08x}", entry.size, entry.crc32c));
            // A version that would break the line is left out (the shard is then proven as
            // records without one are).
            if let Some(version) = version.filter(|v| !v.contains(['\t', '\n', '\r'])) {
                self.pending.push('\t');
                self.pending.push_str(version);
            }
            entry.write_line(array_path, &coord, &mut self.manifest);
            self.pending_bytes += entry.size;
        }
        if let Some(digest) = digest {
            self.pending.push('\t');
            self.pending.push_str(&digest_field(digest));
        }
        if let Some(inner) = inner.filter(|i| !i.contains(['\t', '\n', '\r'])) {
            self.pending.push('\t');
            self.pending.push_str(&inner_field(inner));
        }
        self.pending.push('\n');
        self.entries += 1;
        if self.entries >= self.limits.flush_entries || self.last_flush.elapsed() >= self.interval {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the records batched since the last flush: the manifest's first, then a checkpoint
    /// (see [`Store::checkpoint`]: the shards they name were written without an fsync of their
    /// own), then the `done` record, which so names only shards a checkpoint covers. Then compacts
    /// this run's record files when enough have accumulated.
    pub fn flush(&mut self) -> Result<()> {
        let batch = self.take_batch();
        if batch.is_empty() {
            return Ok(());
        }
        for (key, bytes) in batch {
            if in_dir(&key, DONE_DIR) {
                self.store.checkpoint()?;
            }
            self.store.put(&key, bytes)?;
        }
        self.compact()
    }

    /// The records batched since the last flush, as the record files to write (key and bytes: the
    /// manifest's, when shards were written, then the record file), for a caller that writes them
    /// side by side with other objects; empty when there are none.
    pub fn take_batch(&mut self) -> Vec<(String, Bytes)> {
        self.last_flush = Instant::now();
        if self.entries == 0 {
            return Vec::new();
        }
        let file = self.file_name(self.seq);
        self.files.push(RecordFile {
            seq: self.seq,
            batches: vec![BatchStamp {
                ms: crate::lease::now_millis(),
                records: self.entries as u64,
                bytes: self.pending_bytes,
            }],
        });
        self.seq += 1;
        self.entries = 0;
        self.pending_bytes = 0;
        let mut batch = Vec::new();
        if !self.manifest.is_empty() {
            batch.push((
                join(MANIFEST_DIR, &file),
                sealed::seal_text(std::mem::take(&mut self.manifest)),
            ));
        }
        batch.push((
            join(self.dir, &file),
            sealed::seal_text(std::mem::take(&mut self.pending)),
        ));
        batch
    }

    /// The name of this run's record file number `seq`.
    pub(super) fn file_name(&self, seq: u64) -> String {
        format!("{}-{seq:06}.txt", self.name)
    }

    /// Compaction: whenever this run's newest `compact_at` record files hold as many batches each,
    /// they are merged into one (see [`ShardLog::merge_newest`]), like the digits of a counter in
    /// base `compact_at`: a worker's records stay a few files, each record rewritten once per level.
    /// Only this run's files are merged: a worker's earlier runs left theirs compacted as far as
    /// they got, and no other process ever writes or removes this run's.
    pub(super) fn compact(&mut self) -> Result<()> {
        let at = self.limits.compact_at.max(2);
        while self.files.len() >= at {
            let newest = &self.files[self.files.len() - at..];
            if newest
                .iter()
                .any(|f| f.batches.len() != newest[0].batches.len())
            {
                break;
            }
            if !self.merge_newest(at)? {
                break;
            }
        }
        Ok(())
    }

    /// Merges this run's newest `count` record files (and their manifest files) into the key of the
    /// newest, then removes the others. Never loses a record when interrupted: the merged file is
    /// written whole or not at all over the newest (a local file is staged and renamed, an object
    /// is replaced by one PUT), and is durable (a checkpoint on local disk) before any other file
    /// is removed. Interrupted in between, the records are there twice, which a resume and
    /// `status` count once. Its name keeps the newest's place in the order of record files (the
    /// manifest's latest record of a shard wins) and pairs it with its manifest file as before
    /// (manifest files go first, so a `done` file never lacks the manifest file of its name while
    /// any is left). `false` when a file to merge is gone (a `finalize` or `--overwrite` clearing
    /// the state meanwhile): nothing is merged then.
    pub(super) fn merge_newest(&mut self, count: usize) -> Result<bool> {
        let first = self.files.len() - count;
        let names: Vec<String> = self.files[first..]
            .iter()
            .map(|f| self.file_name(f.seq))
            .collect();
        let records: Vec<String> = names.iter().map(|n| join(self.dir, n)).collect();
        let manifests: Vec<String> = if self.dir == DONE_DIR {
            names.iter().map(|n| join(MANIFEST_DIR, n)).collect()
        } else {
            Vec::new()
        };
        let keys: Vec<String> = records.iter().chain(&manifests).cloned().collect();
        let mut read = Vec::with_capacity(keys.len());
        for found in self.store.get_many(&keys) {
            read.push(found?);
        }
        let (record_files, manifest_files) = read.split_at(records.len());
        // A record file gone, or any file whose seal fails (never merged into a sealed file),
        // stops the merge. (A batch of all-fill shards has no manifest file.)
        let Some(record_bodies) = record_files
            .iter()
            .map(|file| file.as_ref().and_then(sealed::unseal))
            .collect::<Option<Vec<Bytes>>>()
        else {
            return Ok(false);
        };
        let Some(manifest_bodies) = manifest_files
            .iter()
            .flatten()
            .map(sealed::unseal)
            .collect::<Option<Vec<Bytes>>>()
        else {
            return Ok(false);
        };
        let stamps: Vec<BatchStamp> = self.files[first..]
            .iter()
            .flat_map(|f| f.batches.iter().copied())
            .collect();
        let mut merged = String::from(BATCHES);
        for (i, s) in stamps.iter().enumerate() {
            if i > 0 {
                merged.push(',');
            }
            merged.push_str(&format!("{}:{}:{}", s.ms, s.records, s.bytes));
        }
        merged.push('\n');
        let mut merged = merged.into_bytes();
        for body in &record_bodies {
            append_records(&mut merged, body);
        }
        let mut manifest = Vec::new();
        for body in &manifest_bodies {
            append_records(&mut manifest, body);
        }
        sealed::seal(&mut merged);
        let Some((newest_record, older_records)) = records.split_last() else {
            return Ok(false);
        };
        if let (Some(newest_manifest), false) = (manifests.last(), manifest.is_empty()) {
            sealed::seal(&mut manifest);
            self.store.put(newest_manifest, Bytes::from(manifest))?;
        }
        self.store.put(newest_record, Bytes::from(merged))?;
        // The merged files reach the disk before any file they replace is removed.
        self.store.checkpoint()?;
        if self.limits.fail_before_removal {
            return Err(Error::Destination {
                reason: "simulated failure between a compaction's write and its removals".into(),
            });
        }
        let older_manifests = manifests.split_last().map_or(&[][..], |(_, rest)| rest);
        self.store.delete_many(older_manifests)?;
        self.store.delete_many(older_records)?;
        let seq = self.files[self.files.len() - 1].seq;
        self.files.truncate(first);
        self.files.push(RecordFile {
            seq,
            batches: stamps,
        });
        Ok(true)
    }
}

/// Appends the record lines of a record file to `out`, without a compacted file's [`BATCHES`] line
/// (the merged file has one of its own), each line ended.
pub(super) fn append_records(out: &mut Vec<u8>, body: &[u8]) {
    let body = match body.strip_prefix(BATCHES.as_bytes()) {
        Some(rest) => rest
            .iter()
            .position(|&b| b == b'\n')
            .map_or(&[][..], |end| &rest[end + 1..]),
        None => body,
    };
    out.extend_from_slice(body);
    if !body.is_empty() && !body.ends_with(b"\n") {
        out.push(b'\n');
    }
}
