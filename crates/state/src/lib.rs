//! The destination protocol of zshard: what a conversion keeps under `DST/.zshard/` so that it
//! resumes, so that workers share a destination, and so that `zshard status` can tell how far it has
//! come. `zshard-convert` runs conversions on top of it; this crate knows nothing of sources, codecs
//! or the pipeline, only of the destination's keys and records.
//!
//! ```
//! use zshard_state::{status, Partition, Phase};
//! use zshard_store::{IoRuntime, Store};
//!
//! // Worker 2 of 3 owns every third shard of the global enumeration, from the third.
//! let worker = Partition::parse("2/3").unwrap();
//! assert!(worker.owns(2) && worker.owns(5) && !worker.owns(3));
//! assert_eq!(worker.tag(), "w2of3");
//!
//! // An empty destination holds no conversion.
//! let dir = tempfile::tempdir().unwrap();
//! let dst = Store::open(dir.path().to_str().unwrap(), IoRuntime::new(1).unwrap(), true).unwrap();
//! assert_eq!(status(&dst).unwrap().phase, Phase::NotStarted);
//! ```
//!
//! The records, by key:
//!
//! What makes a conversion resumable and safe to spread over workers, kept under `DST/.zshard/`:
//!
//! - `claim.json`: the options of the conversion that owns the destination, created with a
//!   create-only write before anything else is written, so that two runs with different options can
//!   never both write into one destination; runs with the same options join it (they write the same
//!   bytes), and a rerun after a kill finds its own claim and resumes.
//! - `options/<worker>.json`: the conversion each worker was started with (source and every output
//!   `zarr.json`). A run with different options into the same destination is refused.
//! - `done/<worker>-<run>-<seq>.txt`: shards written, one
//!   `array-path<TAB>i,j,...<TAB>size<TAB>crc32c<TAB>version` per line (the crc32c of the object in 8
//!   hex digits, the version the store gave it when it was written, its ETag as listings show it;
//!   records of earlier versions have neither, or no version);
//!   `empty/<worker>-<run>-<seq>.txt`: shards found to hold only the fill value (so never written),
//!   one `array-path<TAB>i,j,...` per line. Both are flushed in batches, and a run compacts its own
//!   batches as they accumulate (see [`ShardLog::compact`]): four files of as many batches each are
//!   merged into the key of the newest, which then starts with a line naming the batches it holds
//!   ([`BATCHES`]), so that a worker's records stay a few files (at 10^6 shards, 6 instead of 100)
//!   and a resume or `status` reads few objects.
//! - `manifest/<worker>-<run>-<seq>.txt`: the manifest of the shards of the `done` file of the same
//!   name, one `array-path<TAB>i,j,...<TAB>size<TAB>crc32c<TAB>kind:h,h,...` per line: besides the
//!   object's crc32c, the crc32c of each inner chunk's decoded values (`kind` `d`), or of its stored
//!   bytes for an array copied through (`e`), 8 hex digits each, `-` for an empty chunk (see
//!   `manifest.rs`). With `--keep-manifest` the records are merged into `manifest.tsv` (same lines,
//!   the latest record of each shard), which stays after the conversion finishes.
//! - `uploads/<worker>/<run>-<seq>.json`: multipart uploads in flight (object path and upload id),
//!   so that the next run of the worker, or `finalize`, aborts those a kill left open.
//!
//! On an object store each request costs a round trip, so the requests that do not depend on each
//! other go out side by side (see [`prepare`] and [`survey`]): a run pays about four round trips
//! before its first chunk is fetched whatever the destination holds, and a resume finds what is
//! done from one listing per array and the record files, never from a request per shard.
//!
//! Resume trusts a listed shard only when a record of this conversion names it with the listed size
//! and the listed version (the ETag the store gave the object when it was written, which the listing
//! names at no cost: an object written again since, by anyone, has another). Records without a version
//! (earlier versions of zshard) are proven as before: on local disk by the shard index (crc32c, every
//! inner chunk inside the object; a read per shard), on an object store by the size alone. On local
//! disk a shard whose version differs (written again, or a destination copied elsewhere) is read as a
//! stream and kept only when its crc32c is one its records give it and its index holds; on an object
//! store it is converted again. Every record file ends with a checksum line (`sealed.rs`), and a
//! record counts only from the worker that owns its shard. Anything else at one of our shard keys (a shard
//! whose record was lost to a kill, junk, a truncated copy, bytes of the same length) is removed and
//! converted again.
//! Every key is written by one worker only. Once the metadata
//! is written the conversion is complete, its metadata is the record of that, and the state folder is
//! removed (Zarr readers would otherwise list it as an unknown member of the root group).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{json, Value};
use zshard_core::{
    linear_index, ChunkKeyEncoding, IndexEncoding, IndexLocation, Setting, ShardIndex,
};
use zshard_store::{PutNew, Store, Visit};

use crate::owned::{owned_keys, ChunkKeys};

// One file per concern: `claim` (claiming, checking holdings), `overwrite` (--overwrite, clearing),
// `survey` (reading what DST holds), `resume` (verdicts on listed shards), `shard_log` (writing and
// compacting records), `uploads` (multipart uploads in flight); around them `lease` (live runs),
// `sealed` (the checksum line of record files), `ahead` (the options record written ahead), `owned`
// (which keys are zshard's), `manifest` (the checksum records and their merge), `partition` (which
// worker owns a shard), `status` (the read side: `zshard status`), `events` (what a run tells its
// observer) and `outputs` (what the protocol knows of a plan).
mod ahead;
mod claim;
mod error;
mod events;
mod lease;
mod made_from;
mod manifest;
mod outputs;
mod overwrite;
mod owned;
mod partition;
mod recorded;
mod resume;
mod sealed;
mod shard_log;
mod status;
mod survey;
mod uploads;

// The files of the protocol name each other's items through the crate root (`use super::*`).
use made_from::*;
use overwrite::*;
use shard_log::*;
use survey::*;

pub use ahead::WriteAhead;
pub use claim::{check_recorded, holds_a_run, keep_manifest_marker, prepare, Prepared};
pub use error::{one_line, Error, Result};
pub use events::{Observer, Work};
pub use lease::{host_name, Lease, DEFAULT_LEASE_STALE_AFTER};
pub use made_from::{
    gather_kept, has_kept_records, is_kept_records, is_source_versions, kept_current, kept_key,
    kept_records_intact, kept_written, record_update, recorded_inner_digests,
    reusable_inner_digests, shards_to_update, source_versions_key, update_counts, ArrayChanges,
    Digests, Kept, RecordFiles, UpdateCounts,
};
pub use manifest::{
    add_document, merge, parse_into, read_records, to_text, ChunkHashes, Entry, Manifest,
};
pub use outputs::{owner_below, OutputArray, Outputs, Owner};
pub use overwrite::{clear, clear_state_file};
pub use partition::Partition;
pub use recorded::{check_plannable, recorded_conversion, RecordedArray, RecordedConversion};
pub use resume::{done_shards, Resume};
pub use shard_log::{RecordLimits, ShardLog, DEFAULT_CHECKPOINT_INTERVAL};
pub use status::{
    read_status, status, ArrayStatus, LeaseStatus, Phase, Rate, Status, Totals, UpdateStatus,
    WorkerStatus, RATE_WINDOW_MS,
};
pub use survey::{survey, survey_finished, Survey};
pub use uploads::{abort_recorded_uploads, recording_uploads};

/// The folder of a conversion's state.
pub const STATE_DIR: &str = ".zshard";
pub(crate) const OPTIONS_DIR: &str = ".zshard/options";
pub(crate) const EMPTY_DIR: &str = ".zshard/empty";
const UPLOADS_DIR: &str = ".zshard/uploads";
/// The records of shards written.
pub const DONE_DIR: &str = ".zshard/done";
/// What an update (a run over a finished conversion whose source changed) set out to write, one
/// file per worker, for `status` (see `made_from.rs`).
pub(crate) const UPDATE_DIR: &str = ".zshard/update";
/// The manifest records, one file per `done` file.
pub const MANIFEST_DIR: &str = ".zshard/manifest";
/// Left by a worker run with `--keep-manifest`, so that `finalize` keeps the manifest without the
/// flag (removed with the rest of the state).
const KEEP_MANIFEST: &str = ".zshard/keep-manifest";

/// The merged manifest that `--keep-manifest` keeps after the conversion finishes.
pub const MANIFEST: &str = ".zshard/manifest.tsv";
pub(crate) const CLAIM: &str = ".zshard/claim.json";
/// Present while `--overwrite` clears a destination.
const OVERWRITING: &str = ".zshard/overwriting";

/// What identifies a conversion: its source and every array's output metadata, as the JSON text
/// recorded in the claim and the options records. Held as that text for the whole run: as a JSON
/// value, 30,000 small arrays took 300 MB (issue 31), their text a tenth of it. A record is compared
/// by its text first, and as JSON only when the text differs (a record an earlier version wrote
/// pretty-printed, or another conversion's).
#[derive(Debug, Clone)]
pub struct Fingerprint(Bytes, TracksSources, std::sync::OnceLock<u64>);

/// Whether every shard's records name what it was made from (see `made_from.rs`): a recorded
/// conversion whose arrays differ from this one only in shape and attributes (the source grew, or
/// its attributes changed) is then the same conversion, brought up to date, since a record made
/// from another version of the source never counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TracksSources(bool);

/// How a claim records who makes an array's shards (see [`Owner`]); `None` for the global rule.
fn owner_json(owner: &Owner) -> Option<Value> {
    match owner {
        Owner::Global => None,
        Owner::Finalize => Some(json!("finalize")),
        Owner::Below { level0, scale, .. } => Some(json!({"level0": level0, "scale": scale})),
    }
}

impl Fingerprint {
    /// The fingerprint of converting the source `source_id` (its location) into `plan`.
    pub fn new(source_id: &str, plan: &Outputs) -> Result<Fingerprint> {
        /// The arrays, each made a JSON value only while it is written.
        struct Arrays<'a>(&'a Outputs<'a>);
        impl serde::Serialize for Arrays<'_> {
            fn serialize<S: serde::Serializer>(
                &self,
                serializer: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                serializer.collect_seq(self.0.arrays.iter().enumerate().map(|(i, a)| {
                    let mut array = json!({"path": a.path, "zarr.json": a.output.to_json()});
                    // Who makes a pyramid level's shards, for `status` (which reads no plan).
                    if let (Some(owner), Value::Object(array)) =
                        (owner_json(self.0.owner(i)), &mut array)
                    {
                        array.insert("owner".into(), owner);
                    }
                    array
                }))
            }
        }
        // Members in the order a JSON value sorts them.
        #[derive(serde::Serialize)]
        struct Document<'a> {
            arrays: Arrays<'a>,
            source: &'a str,
            zshard_state: u32,
        }
        let text = serde_json::to_vec(&Document {
            arrays: Arrays(plan),
            source: source_id,
            zshard_state: 1,
        })
        .map_err(|source| Error::Serialize {
            what: "the conversion's options",
            source,
        })?;
        Ok(Fingerprint(
            Bytes::from(text),
            TracksSources(false),
            std::sync::OnceLock::new(),
        ))
    }

    /// This fingerprint, for a run whose records name what each shard was made from when
    /// `tracks` (see [`TracksSources`]).
    pub fn tracking_sources(self, tracks: bool) -> Fingerprint {
        Fingerprint(self.0, TracksSources(tracks), self.2)
    }

    /// The text recorded for this conversion.
    pub fn text(&self) -> Bytes {
        self.0.clone()
    }

    /// Whether `recorded` (a claim or options record) records this conversion.
    fn recorded_in(&self, recorded: &[u8]) -> std::result::Result<bool, serde_json::Error> {
        if recorded == &self.0[..] {
            return Ok(true);
        }
        let recorded: Value = serde_json::from_slice(recorded)?;
        let ours = self.value();
        if recorded == ours {
            return Ok(true);
        }
        Ok(self.1 .0 && without_contents(recorded) == without_contents(ours))
    }

    /// What identifies the conversion whatever the source's shape and attributes (see
    /// [`TracksSources`]): the head line of the records it keeps (see `made_from.rs`).
    /// Made once: every array's kept records are checked against it, and at 30,000 arrays the
    /// fingerprint's JSON is megabytes.
    pub(crate) fn conversion_id(&self) -> u64 {
        *self.2.get_or_init(|| {
            let options = without_contents(self.value());
            zshard_core::stable_hash(&serde_json::to_vec(&options).unwrap_or_default())
        })
    }

    /// What identifies this conversion whatever the source's shape and attributes, as text (16
    /// hex digits), when its records name what each shard was made from: a commit of it into an
    /// Icechunk repository is brought up to date by a later one with the same identity.
    pub fn update_id(&self) -> Option<String> {
        self.1 .0.then(|| format!("{:016x}", self.conversion_id()))
    }

    /// As a JSON value, for [`differences`] (a failure's message) and Icechunk commits' records.
    pub fn value(&self) -> Value {
        serde_json::from_slice(&self.0).unwrap_or(Value::Null)
    }
}

/// A fingerprint without what an update may change: each array's shape and attributes, and for a
/// pyramid's levels who makes their shards (it follows the shapes, see [`Owner`]).
fn without_contents(mut fingerprint: Value) -> Value {
    if let Some(arrays) = fingerprint.get_mut("arrays").and_then(Value::as_array_mut) {
        for array in arrays {
            if let Some(doc) = array.get_mut("zarr.json") {
                *doc = without_shape_and_attributes(doc.take());
            }
            if let Some(fields) = array.as_object_mut() {
                fields.remove("owner");
            }
        }
    }
    fingerprint
}

/// An array's `zarr.json` without its shape and attributes (what an update may change).
pub(crate) fn without_shape_and_attributes(mut doc: Value) -> Value {
    if let Some(fields) = doc.as_object_mut() {
        fields.remove("shape");
        fields.remove("attributes");
    }
    doc
}

/// The key `key` below the node at `path` (the root's path is empty).
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}/{key}")
    }
}

/// Whether `key` lies below the folder `dir`.
pub fn in_dir(key: &str, dir: &str) -> bool {
    key.strip_prefix(dir)
        .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::resume::{verdict, RecordedShard, Verdict};
    use super::{batch_stamps, in_dir, RecordLimits, ShardLog, DONE_DIR, EMPTY_DIR, MANIFEST_DIR};
    use super::{recorded_index, shard_coord, version_id, ListedShard};
    use crate::manifest::{ChunkHashes, Entry};
    use crate::Partition;
    use std::collections::BTreeMap;
    use zshard_store::{IoRuntime, Store};

    fn store(dir: &std::path::Path) -> Store {
        let runtime = IoRuntime::new(1).expect("runtime");
        Store::open(dir.to_str().expect("utf-8"), runtime, true).expect("open")
    }

    /// Every record file under `dir`, read.
    fn files(store: &Store, dir: &str) -> BTreeMap<String, String> {
        let keys = store.list_keys(dir).expect("list");
        keys.iter()
            .zip(store.get_many(&keys))
            .map(|(key, read)| {
                let bytes = read.expect("get").expect("listed");
                (
                    key.clone(),
                    String::from_utf8(bytes.to_vec()).expect("utf-8"),
                )
            })
            .collect()
    }

    /// How many record lines of the files name each shard of array `a` (coordinate text), and the
    /// records the files' batch stamps count.
    fn recorded(files: &BTreeMap<String, String>) -> (BTreeMap<String, usize>, u64) {
        let mut shards = BTreeMap::new();
        let mut stamped = 0;
        for file in files.values() {
            // Every file's checksum holds (the other run's has none: an earlier version's).
            let body = crate::sealed::unseal(&bytes::Bytes::from(file.clone()))
                .unwrap_or_else(|| panic!("the checksum of {file:?}"));
            let text = String::from_utf8_lossy(&body);
            for (number, line) in text.lines().enumerate() {
                if let Some(stamps) = batch_stamps(line) {
                    assert_eq!(number, 0, "a batch line after the first: {text}");
                    stamped += stamps.iter().map(|s| s.records).sum::<u64>();
                    continue;
                }
                let coord = line.split('\t').nth(1).expect("a record line");
                *shards.entry(coord.to_string()).or_default() += 1;
            }
        }
        (shards, stamped)
    }

    fn entry(i: u64) -> Entry {
        Entry {
            size: 10 + i,
            crc32c: i as u32,
            kind: ChunkHashes::Decoded,
            chunks: vec![Some(i as u32)],
        }
    }

    fn limits(fail_before_removal: bool) -> RecordLimits {
        RecordLimits {
            flush_entries: 1,
            compact_at: 4,
            fail_before_removal,
        }
    }

    #[test]
    fn compaction_merges_a_runs_batches_by_fours_keeping_every_record_once() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dst = store(tmp.path());
        // Another run's batch: never touched by this run's compaction.
        let other = format!("{DONE_DIR}/w0of1-1-000000.txt");
        dst.put(&other, bytes::Bytes::from_static(b"a\t99\t1\t00000000\n"))
            .expect("put");
        let mut log = ShardLog::written(
            dst.clone(),
            Partition::ALL,
            limits(false),
            super::DEFAULT_CHECKPOINT_INTERVAL,
        );
        for i in 0..21u64 {
            log.record("a", &[i], Some(&entry(i)), Some("v"), (None, None))
                .expect("record");
        }
        // 21 batches: one file of 16, one of 4, one of 1 (and the other run's).
        let done = files(&dst, DONE_DIR);
        assert_eq!(done.len(), 4, "{done:#?}");
        assert!(done.contains_key(&other));
        let (shards, stamped) = recorded(&done);
        assert_eq!(shards.len(), 22);
        assert!(shards.values().all(|&n| n == 1), "{shards:?}");
        // The stamps of the two compacted files: 16 + 4 batches of one record.
        assert_eq!(stamped, 20);
        let compacted: Vec<usize> = done
            .values()
            .filter_map(|text| batch_stamps(text.lines().next()?))
            .map(|stamps| stamps.len())
            .collect();
        assert_eq!(compacted, [16, 4]);
        // Each merged into the newest's key, which its manifest file shares.
        let manifests = files(&dst, MANIFEST_DIR);
        let names = |files: &BTreeMap<String, String>| -> Vec<String> {
            files
                .keys()
                .filter(|k| **k != other)
                .map(|k| k.rsplit('/').next().unwrap_or(k).to_string())
                .collect()
        };
        assert_eq!(names(&done), names(&manifests));
        let merged: Vec<(String, bytes::Bytes)> = manifests
            .iter()
            .map(|(k, v)| (k.clone(), bytes::Bytes::from(v.clone())))
            .collect();
        let manifest = crate::manifest::merge(&merged);
        assert_eq!(manifest.len(), 21);
        for i in 0..21u64 {
            assert_eq!(
                manifest[&("a".to_string(), i.to_string())],
                entry(i),
                "shard {i}"
            );
        }
    }

    #[test]
    fn a_compaction_interrupted_before_its_removals_loses_no_record() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dst = store(tmp.path());
        let mut log = ShardLog::written(
            dst.clone(),
            Partition::ALL,
            limits(true),
            super::DEFAULT_CHECKPOINT_INTERVAL,
        );
        for i in 0..3u64 {
            log.record("a", &[i], Some(&entry(i)), None, (None, None))
                .expect("record");
        }
        // The fourth batch makes four files to merge: the merged one is written, then it fails.
        let failed = log.record("a", &[3], Some(&entry(3)), None, (None, None));
        assert!(failed.is_err(), "the simulated failure");
        let done = files(&dst, DONE_DIR);
        let (shards, _) = recorded(&done);
        // Every record is there, those merged twice (in the merged file and in their own).
        let expected: BTreeMap<String, usize> = [(0, 2), (1, 2), (2, 2), (3, 1)]
            .into_iter()
            .map(|(i, n)| (i.to_string(), n))
            .collect();
        assert_eq!(shards, expected, "{done:#?}");
        // Every manifest file still has its `done` file (its shards stay checkpointed).
        let manifests = files(&dst, MANIFEST_DIR);
        for key in manifests.keys() {
            let name = key.rsplit('/').next().unwrap_or(key);
            assert!(done.contains_key(&format!("{DONE_DIR}/{name}")), "{key}");
        }
        // (A resume counts each shard once: conversion_tests.rs.)
        assert!(files(&dst, EMPTY_DIR).is_empty());
        assert!(done.keys().all(|k| in_dir(k, DONE_DIR)));
    }

    #[test]
    fn shard_coordinates_of_keys() {
        assert_eq!(shard_coord("", "c/1/2", &[3, 3]), Some(vec![1, 2]));
        assert_eq!(shard_coord("a/b", "a/b/c/1/2", &[3, 3]), Some(vec![1, 2]));
        assert_eq!(shard_coord("", "c", &[]), Some(vec![]));
        assert_eq!(shard_coord("a", "a/c", &[]), Some(vec![]));
        assert_eq!(shard_coord("", "c/3/0", &[3, 3]), None);
        assert_eq!(shard_coord("", "c/1/2#17", &[3, 3]), None);
        assert_eq!(shard_coord("", "c/1", &[3, 3]), None);
        assert_eq!(shard_coord("a", "ab/c/1/2", &[3, 3]), None);
        assert_eq!(shard_coord("a", "b/c/1/2", &[3, 3]), None);
        assert_eq!(shard_coord("", "c/1/2/notes.txt", &[3, 3]), None);
    }

    #[test]
    fn recorded_coordinates() {
        assert_eq!(recorded_index("1,2", &[3, 3]), Some(5));
        assert_eq!(recorded_index("", &[]), Some(0));
        assert_eq!(recorded_index("3,0", &[3, 3]), None);
        assert_eq!(recorded_index("1", &[3, 3]), None);
        assert_eq!(recorded_index("1,2,0", &[3, 3]), None);
        assert_eq!(recorded_index("1,x", &[3, 3]), None);
        assert_eq!(recorded_index(",1", &[3, 3]), None);
        // C order, as `linear_index` gives it.
        let grid = [3, 5, 2];
        assert_eq!(
            recorded_index("2,4,1", &grid),
            Some(zshard_core::linear_index(&[2, 4, 1], &grid))
        );
        assert_eq!(recorded_index("2,4,1", &grid), Some(2 * 10 + 4 * 2 + 1));
    }

    #[test]
    fn versions_compare_as_the_store_names_them_in_puts_and_listings() {
        // Azure sends ETags quoted and lists them bare; S3 multipart ETags end in the part count.
        assert_eq!(
            version_id("\"0x8DB1C2D3E4F5A6B\""),
            version_id("0x8DB1C2D3E4F5A6B")
        );
        assert_eq!(
            version_id("W/\"0x8DB1C2D3E4F5A6B\""),
            version_id("0x8DB1C2D3E4F5A6B")
        );
        assert_eq!(
            version_id("\"9b2cf535f27731c9-2\""),
            version_id("\"9b2cf535f27731c9-2\"")
        );
        assert_ne!(
            version_id("\"9b2cf535f27731c9-2\""),
            version_id("\"9b2cf535f27731c9\"")
        );
        assert_ne!(
            version_id("0x8DB1C2D3E4F5A6B"),
            version_id("0x8DB1C2D3E4F5A6C")
        );

        let listed = ListedShard {
            index: 0,
            size: 100,
            version: version_id("0x8DB1C2D3E4F5A6B"),
        };
        let record = |size, version: Option<&str>| RecordedShard {
            size: Some(size),
            crc32c: None,
            version: version.map(version_id),
        };
        let of = |records: &[RecordedShard]| verdict(records.iter(), &listed);
        assert_eq!(
            of(&[record(100, Some("\"0x8DB1C2D3E4F5A6B\""))]),
            Verdict::Versioned
        );
        assert_eq!(
            of(&[record(100, Some("\"0x8DB1C2D3E4F5A6C\""))]),
            Verdict::VersionDiffers
        );
        // A record of the object that is there proves it, whatever other records say.
        let rewritten = [
            record(100, Some("0x1")),
            record(100, Some("0x8DB1C2D3E4F5A6B")),
        ];
        assert_eq!(of(&rewritten), Verdict::Versioned);
        assert_eq!(
            of(&[record(100, Some("0x1")), record(100, None)]),
            Verdict::Unversioned
        );
        assert_eq!(
            of(&[record(99, Some("0x8DB1C2D3E4F5A6B"))]),
            Verdict::Unrecorded
        );
        assert_eq!(of(&[]), Verdict::Unrecorded);
    }

    #[test]
    fn the_listed_shards_are_held_in_24_bytes_each_in_c_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let dst = store(dir.path());
        // 2 x 1500 shards: keys sort as c/0/0, c/0/1, c/0/10, ... (not C order), and the count
        // is no power of two (a table grown by doubling keeps spare room).
        let grid = [2u64, 1500];
        let mut puts = Vec::new();
        for i in 0..grid[0] {
            for j in 0..grid[1] {
                let size = ((i * grid[1] + j) % 7 + 1) as usize;
                puts.push((format!("a/c/{i}/{j}"), bytes::Bytes::from(vec![0u8; size])));
            }
        }
        // Neither is a shard of the grid: left out.
        puts.push(("a/c/2/0".into(), bytes::Bytes::from_static(b"x")));
        puts.push(("a/c/0/01".into(), bytes::Bytes::from_static(b"x")));
        puts.push(("a/zarr.json".into(), bytes::Bytes::from_static(b"{}")));
        for (key, body) in puts {
            dst.put(&key, body).expect("put");
        }
        let listed = dst
            .block_on(super::shard_keys(&dst, "a", &grid))
            .expect("listed");
        assert_eq!(listed.len(), 3000);
        let misplaced = listed.iter().zip(0u64..).find(|(s, i)| s.index != *i);
        assert_eq!(misplaced, None, "the first shard out of C order");
        for shard in &listed {
            assert_eq!(shard.size, shard.index % 7 + 1, "{shard:?}");
        }
        // What the survey counts in the run's memory budget: the entries, no spare room.
        let survey = super::Survey {
            shards: vec![listed],
            ..Default::default()
        };
        assert_eq!(
            survey.memory_bytes(),
            3000 * std::mem::size_of::<ListedShard>() as u64
        );
        assert_eq!(std::mem::size_of::<ListedShard>(), 24);
    }
}
