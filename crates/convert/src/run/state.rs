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
//! disk a shard whose version differs (a destination copied elsewhere has other inodes) has its index
//! read; on an object store it is converted again. Anything else at one of our shard keys (a shard
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
use zshard_store::{PutNew, Store};

use crate::error::{Error, Result};
use crate::plan::partition::Partition;
use crate::plan::Plan;
use crate::run::ahead::WriteAhead;
use crate::run::conversion::Observer;
use crate::run::owned::{owned_keys, ChunkKeys};
use crate::run::sealed;

/// The folder of a conversion's state.
pub(crate) const STATE_DIR: &str = ".zshard";
pub(crate) const OPTIONS_DIR: &str = ".zshard/options";
pub(crate) const EMPTY_DIR: &str = ".zshard/empty";
const UPLOADS_DIR: &str = ".zshard/uploads";
pub(crate) const DONE_DIR: &str = ".zshard/done";
pub(crate) const MANIFEST_DIR: &str = ".zshard/manifest";
/// Left by a worker run with `--keep-manifest`, so that `finalize` keeps the manifest without the
/// flag (removed with the rest of the state).
const KEEP_MANIFEST: &str = ".zshard/keep-manifest";

/// The marker [`KEEP_MANIFEST`] as a record to write (key and contents).
pub(crate) fn keep_manifest_marker() -> (String, Bytes) {
    let text =
        "a worker of this conversion was given --keep-manifest: finalize keeps the manifest\n";
    (KEEP_MANIFEST.to_string(), Bytes::from(text))
}

/// The merged manifest that `--keep-manifest` keeps after the conversion finishes.
pub(crate) const MANIFEST: &str = ".zshard/manifest.tsv";
pub(crate) const CLAIM: &str = ".zshard/claim.json";
/// Present while `--overwrite` clears a destination.
const OVERWRITING: &str = ".zshard/overwriting";

/// What identifies a conversion: its source and every array's output metadata, as the JSON text
/// recorded in the claim and the options records. Held as that text for the whole run: as a JSON
/// value, 30,000 small arrays took 300 MB (issue 31), their text a tenth of it. A record is compared
/// by its text first, and as JSON only when the text differs (a record an earlier version wrote
/// pretty-printed, or another conversion's).
#[derive(Debug, Clone)]
pub(crate) struct Fingerprint(Bytes);

impl Fingerprint {
    pub(crate) fn new(source_id: &str, plan: &Plan) -> Result<Fingerprint> {
        /// The arrays, each made a JSON value only while it is written.
        struct Arrays<'a>(&'a Plan);
        impl serde::Serialize for Arrays<'_> {
            fn serialize<S: serde::Serializer>(
                &self,
                serializer: S,
            ) -> std::result::Result<S::Ok, S::Error> {
                serializer.collect_seq(
                    self.0
                        .arrays
                        .iter()
                        .map(|a| json!({"path": a.path, "zarr.json": a.output.to_json()})),
                )
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
        Ok(Fingerprint(Bytes::from(text)))
    }

    /// The text recorded for this conversion.
    pub(crate) fn text(&self) -> Bytes {
        self.0.clone()
    }

    /// Whether `recorded` (a claim or options record) records this conversion.
    fn recorded_in(&self, recorded: &[u8]) -> std::result::Result<bool, serde_json::Error> {
        if recorded == &self.0[..] {
            return Ok(true);
        }
        let recorded: Value = serde_json::from_slice(recorded)?;
        Ok(recorded == self.value())
    }

    /// As a JSON value, for [`differences`] (a failure's message) and Icechunk commits' records.
    pub(crate) fn value(&self) -> Value {
        serde_json::from_slice(&self.0).unwrap_or(Value::Null)
    }
}

/// The key `key` below the node at `path` (the root's path is empty).
pub(crate) fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}/{key}")
    }
}

/// What a destination holds for this conversion.
#[derive(Debug)]
pub(crate) enum Prepared {
    /// Nothing yet, or an interrupted run with the same options: convert what is not done (what
    /// is done is in the survey).
    Run(Box<Survey>),
    /// The metadata this conversion writes is already there: it completed before.
    Complete,
}

/// Claims the destination for this conversion, checks what it holds against this run and records
/// its options. With `overwrite` (this run's lease key), what an earlier conversion or Zarr hierarchy
/// left there is removed first (single-process runs only: a worker must never delete what another one
/// wrote), unless another run holds a fresh lease on it.
///
/// Round trips on an object store: the claim (with the reads of an interrupted `--overwrite`'s
/// marker and of an existing claim beside it), then one round of listings and metadata reads (see
/// [`survey`]) and the record files in one more when there are any. The options record, only when
/// this worker has not recorded them before, is returned in flight: the run fetches meanwhile, and
/// its shard writes wait for it.
pub(crate) fn prepare(
    dst: &Store,
    plan: &Plan,
    fingerprint: &Fingerprint,
    partition: Partition,
    overwrite: Option<&str>,
    observer: &dyn Observer,
) -> Result<(Prepared, Option<Arc<WriteAhead>>)> {
    let marker = match overwrite {
        Some(own_lease) => remove_owned(dst, plan, partition, own_lease)?,
        None => Marker::Check,
    };
    // The claim comes before every check of what the destination holds: a run that finishes in
    // between (metadata written, state removed) is then seen by the checks, and a run that starts in
    // between finds this claim.
    let claim = claim(dst, fingerprint, marker, observer)?;
    let surveyed = survey(dst, plan, false).and_then(|survey| {
        let checked = check_holdings(dst, plan, fingerprint, &survey)?;
        Ok((checked, survey))
    });
    if claim == Claim::Created && !matches!(surveyed, Ok((Prepared::Run(_), _))) {
        // Nothing of this run is needed there: a complete conversion, or one we must not touch.
        dst.delete(CLAIM)?;
    }
    let (checked, survey) = surveyed?;
    if let Prepared::Complete = checked {
        return Ok((Prepared::Complete, None));
    }
    let own = join(OPTIONS_DIR, &format!("{}.json", partition.tag()));
    // An earlier run of this worker recorded the same options (every record was just checked to
    // equal them): writing them again would change nothing.
    let mut options = None;
    if !survey.records.contains_key(&own) {
        options = Some(Arc::new(WriteAhead::start(dst, &own, fingerprint.text())?));
    }
    Ok((Prepared::Run(Box::new(survey)), options))
}

/// What the destination holds around this conversion, read side by side: one listing of the state
/// folder, one of each array's shards and the metadata documents at the root and at every node of
/// the plan in one round, and every record file (options, done, empty) as soon as the state
/// folder's listing is in, beside the shard listings. Nothing here depends on another response of
/// the same round.
#[derive(Debug, Default)]
pub(crate) struct Survey {
    /// Every key below the state folder.
    state: Vec<String>,
    /// The v2 `.zarray`/`.zgroup` and v3 `zarr.json` documents at the root and at the plan's nodes,
    /// by key (`None`: no such object).
    documents: HashMap<String, Option<Bytes>>,
    /// Per array of the plan, the objects at its shard keys, in key order.
    shards: Vec<Vec<ListedShard>>,
    /// The contents of the claim and of the record files (options, done, empty) that were still
    /// there when read.
    records: HashMap<String, Bytes>,
}

impl Survey {
    /// Whether a worker asked to keep the manifest (see [`keep_manifest_marker`]).
    pub(crate) fn asks_to_keep_the_manifest(&self) -> bool {
        self.state.iter().any(|key| key == KEEP_MANIFEST)
    }
}

/// Reads what [`Survey`] holds; the claim's contents only `with_claim` (a run that just claimed
/// knows them). The record files are read as soon as the state folder is listed, while the shard
/// listings (a thousand pages at a million shards) go on.
pub(crate) fn survey(dst: &Store, plan: &Plan, with_claim: bool) -> Result<Survey> {
    let documents = document_keys(plan);
    let (state, read, shards) = dst.block_on(async {
        let shards = plan.arrays.iter().map(|array| {
            let grid = array.geometry.shard_grid();
            async move { shard_keys(dst, &array.path, &grid).await }
        });
        // The store's number of listings at a time: every listing in flight holds a buffer of
        // entries, and 30,000 arrays listed at once took 1.8 GB (issue 31).
        let shards = futures::StreamExt::collect::<Vec<_>>(futures::StreamExt::buffered(
            futures::stream::iter(shards),
            dst.concurrency(),
        ));
        let state = async {
            let state: Vec<String> = dst
                .list_sizes_async(STATE_DIR)
                .await?
                .into_iter()
                .map(|(key, _)| key)
                .collect();
            let records = read_records(dst, &state, with_claim).await?;
            Ok::<_, Error>((state, records))
        };
        futures::join!(state, dst.get_many_async(&documents), shards)
    });
    let (state, records) = state?;
    let documents = documents
        .into_iter()
        .zip(read)
        .map(|(key, found)| Ok((key, found?)))
        .collect::<Result<HashMap<_, _>>>()?;
    let shards = shards.into_iter().collect::<Result<Vec<_>>>()?;
    Ok(Survey {
        state,
        documents,
        shards,
        records,
    })
}

/// The record files (options, done, empty, the manifest files no checkpoint covers, and the claim
/// `with_claim`) among the `state` keys, read side by side: a long run leaves several, and each is a
/// round trip. Those gone since the listing are left out.
async fn read_records(
    dst: &Store,
    state: &[String],
    with_claim: bool,
) -> Result<HashMap<String, Bytes>> {
    let listed: HashSet<&str> = state.iter().map(String::as_str).collect();
    let record_keys: Vec<String> = state
        .iter()
        .filter(|key| {
            (with_claim && *key == CLAIM)
                || [OPTIONS_DIR, DONE_DIR, EMPTY_DIR]
                    .iter()
                    .any(|dir| in_dir(key, dir))
                || uncheckpointed(key, &listed)
        })
        .cloned()
        .collect();
    let mut records = HashMap::new();
    if !record_keys.is_empty() {
        for (key, read) in record_keys
            .iter()
            .zip(dst.get_many_async(&record_keys).await)
        {
            let Some(bytes) = read? else { continue };
            // A damaged record file is left out: its shards are converted again.
            match sealed::unseal(&bytes) {
                Some(body) => {
                    records.insert(key.clone(), body);
                }
                None => tracing::warn!(
                    "{}: the record file's checksum does not match; its shards will be converted again",
                    dst.url(key)
                ),
            }
        }
    }
    Ok(records)
}

/// Whether `key` is a manifest record whose shards no checkpoint covers: its `done` record of the
/// same name is not among the `listed` keys (a run stopped between the two, see [`ShardLog`]).
fn uncheckpointed(key: &str, listed: &HashSet<&str>) -> bool {
    key.strip_prefix(MANIFEST_DIR)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|name| !listed.contains(join(DONE_DIR, name).as_str()))
}

/// Whether the destination holds the recorded options of a conversion (one running, interrupted,
/// or a partitioned one waiting for `finalize`): one listing.
pub(crate) fn holds_a_run(dst: &Store) -> Result<bool> {
    Ok(!dst.list_keys(OPTIONS_DIR)?.is_empty())
}

/// A file (not a folder) at `.zshard` in a local destination, where zshard keeps its state: a resume
/// cannot go on (every state write would fail) and is refused naming it; `overwrite` removes it, as
/// zshard's own name (see `owned.rs`).
pub(crate) fn clear_state_file(dst: &Store, overwrite: bool) -> Result<()> {
    let Some(path) = dst.local_path(STATE_DIR) else {
        return Ok(());
    };
    match std::fs::symlink_metadata(&path) {
        Ok(found) if found.is_file() && overwrite => {
            std::fs::remove_file(&path).map_err(|source| Error::File {
                action: "remove",
                path,
                source,
            })
        }
        Ok(found) if found.is_file() => Err(Error::Destination {
            reason: format!(
                "{} is a file where zshard keeps its state folder; remove it, or use {} to replace it",
                dst.url(STATE_DIR),
                Setting::Overwrite
            ),
        }),
        _ => Ok(()),
    }
}

/// Whether `key` lies below the folder `dir`.
pub(crate) fn in_dir(key: &str, dir: &str) -> bool {
    key.strip_prefix(dir)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// The metadata documents whose presence decides what the destination holds: v2 `.zarray` and
/// `.zgroup` and v3 `zarr.json` at the root and at every node of the plan, each once.
fn document_keys(plan: &Plan) -> Vec<String> {
    let paths = std::iter::once("")
        .chain(plan.arrays.iter().map(|a| a.path.as_str()))
        .chain(plan.groups.iter().map(|(p, _)| p.as_str()));
    let mut keys: Vec<String> = Vec::new();
    let mut seen = BTreeSet::new();
    for path in paths {
        for document in [".zarray", ".zgroup", "zarr.json"] {
            let key = join(path, document);
            // The root is also the path of an array or group converted at the root: read it once.
            if seen.insert(key.clone()) {
                keys.push(key);
            }
        }
    }
    keys
}

/// What the claim does about the `--overwrite` marker beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    /// Refuse when it is there (an `--overwrite` was interrupted).
    Check,
    /// This run's `--overwrite` wrote it and has cleared the destination: remove it beside the
    /// claim's write (a round trip saved; interrupted in between, the marker stays and later runs
    /// refuse until an `--overwrite` finishes, which is what it is for).
    Remove,
    /// Nothing to do (this run's `--overwrite` found nothing to remove).
    Ignore,
}

/// How this run holds the destination's claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// This run created it.
    Created,
    /// A run with the same options (a live one, or a killed one being resumed) holds it.
    Joined,
}

/// The create-only write of `key` with the read of what it may find there, side by side. The read
/// only matters when the write finds an object, so it is abandoned (with any retry it is waiting for)
/// once the write has created one: a read racing the write can fail on some servers (s3s-fs answers
/// 500), and its retry would hold up the run for a backoff.
async fn create_beside_read(
    dst: &Store,
    key: &str,
    data: Bytes,
) -> (
    zshard_store::Result<PutNew>,
    zshard_store::Result<Option<Bytes>>,
) {
    use futures::future::{select, Either};
    let (write, read) = (dst.put_new_async(key, data), dst.get_async(key));
    futures::pin_mut!(write, read);
    match select(write, read).await {
        Either::Left((Ok(PutNew::Created), _)) => (Ok(PutNew::Created), Ok(None)),
        Either::Left((created, read)) => (created, read.await),
        Either::Right((existing, write)) => (write.await, existing),
    }
}

/// Makes this conversion the destination's owner, or joins the owner with the same options; refuses
/// when a conversion with other options holds it, and (with `check_overwriting`) when an
/// `--overwrite` was interrupted there. The create-only write goes out with the reads of the
/// existing claim and of the `--overwrite` marker beside it (or the marker's removal, see [`Marker`]),
/// so a resume costs one round trip here, not three: the reads are only used when the write finds a
/// claim, and a claim found then is the one read or a later one (the loop reads again when it
/// vanished).
fn claim(
    dst: &Store,
    fingerprint: &Fingerprint,
    marker: Marker,
    observer: &dyn Observer,
) -> Result<Claim> {
    let text = fingerprint.text();
    let ((created, existing), overwriting) = dst.block_on(async {
        futures::join!(create_beside_read(dst, CLAIM, text.clone()), async {
            match marker {
                Marker::Check => dst.get_async(OVERWRITING).await,
                Marker::Remove => dst.delete_async(OVERWRITING).await.map(|()| None),
                Marker::Ignore => Ok(None),
            }
        })
    });
    let overwriting = overwriting.inspect_err(|_| {
        if matches!(created, Ok(PutNew::Created)) {
            // Best effort: the error to report is the marker's.
            let _ = dst.delete(CLAIM);
        }
    })?;
    if overwriting.is_some() {
        if matches!(created, Ok(PutNew::Created)) {
            dst.delete(CLAIM)?;
        }
        return Err(Error::Destination {
            reason: format!(
                "an {o} of {} was interrupted; rerun with {o} to finish clearing it",
                dst.url(""),
                o = Setting::Overwrite
            ),
        });
    }
    // A claim removed between our write and our read (its run finished) is claimed again.
    let mut first = Some((created, existing));
    for _ in 0..3 {
        let (created, existing) = first
            .take()
            .unwrap_or_else(|| (dst.put_new(CLAIM, text.clone()), Ok(None)));
        match created? {
            PutNew::Created => return Ok(Claim::Created),
            PutNew::Exists => {}
            PutNew::Unsupported => {
                observer.warning(&format!(
                    "{} cannot write conditionally, so a concurrent run with other options into it would not be detected",
                    dst.url("")
                ));
                if dst.get(CLAIM)?.is_none() {
                    dst.put(CLAIM, text)?;
                    return Ok(Claim::Created);
                }
            }
        }
        // The claim read beside the write, or (when it was missing then) read again now.
        let bytes = match existing? {
            Some(bytes) => Some(bytes),
            None => dst.get(CLAIM)?,
        };
        let Some(bytes) = bytes else {
            continue;
        };
        let state_error = |source| Error::State {
            key: dst.url(CLAIM),
            source,
        };
        if fingerprint.recorded_in(&bytes).map_err(state_error)? {
            return Ok(Claim::Joined);
        }
        let claimed: Value = serde_json::from_slice(&bytes).map_err(state_error)?;
        return Err(Error::Destination {
            reason: format!(
                "{} is claimed by a conversion with different options ({}; see {}), running now or interrupted; rerun with its options to resume it, or use {} to replace it once no run writes into it",
                dst.url(""),
                differences(&claimed, &fingerprint.value()),
                dst.url(CLAIM),
                Setting::Overwrite
            ),
        });
    }
    Err(Error::Destination {
        reason: format!(
            "{} could not be claimed: its claim {} kept appearing and disappearing",
            dst.url(""),
            dst.url(CLAIM)
        ),
    })
}

/// What differs between two conversions' fingerprints, in a few words for a message.
fn differences(recorded: &Value, ours: &Value) -> String {
    if recorded.get("source") != ours.get("source") {
        return format!(
            "source {} instead of {}",
            recorded.get("source").unwrap_or(&Value::Null),
            ours.get("source").unwrap_or(&Value::Null)
        );
    }
    let arrays = |v: &Value| -> Vec<(String, Value)> {
        v.get("arrays")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .map(|a| {
                        let path = a.get("path").and_then(Value::as_str).unwrap_or("");
                        (path.to_string(), a["zarr.json"].clone())
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (theirs, mine) = (arrays(recorded), arrays(ours));
    for (path, doc) in &mine {
        let name = if path.is_empty() { "/" } else { path };
        let Some((_, other)) = theirs.iter().find(|(p, _)| p == path) else {
            return format!("array {name} is not part of it");
        };
        let fields: Vec<&str> = doc
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(field, value)| other.get(field.as_str()) != Some(value))
            .map(|(field, _)| field.as_str())
            .collect();
        if !fields.is_empty() {
            return format!("array {name}: {} differ", fields.join(", "));
        }
    }
    "other arrays".to_string()
}

/// Checks what the destination holds (`survey`, read after claiming it) against this conversion.
fn check_holdings(
    dst: &Store,
    plan: &Plan,
    fingerprint: &Fingerprint,
    survey: &Survey,
) -> Result<Prepared> {
    if let Some(key) = survey.first_v2_metadata() {
        return Err(Error::Destination {
            reason: format!(
                "{} holds Zarr v2 metadata ({}); use {} to replace it",
                dst.url(""),
                dst.url(key),
                Setting::Overwrite
            ),
        });
    }
    let recorded = survey.options_records().next().is_some();
    if !recorded && survey.has_metadata(plan) {
        if survey.metadata_matches(plan) {
            return Ok(Prepared::Complete);
        }
        return Err(Error::Destination {
            reason: format!(
                "{} already holds Zarr metadata that differs from this conversion (different options, or not written by zshard); use {} to replace it",
                dst.url(""),
                Setting::Overwrite
            ),
        });
    }
    if !recorded {
        // Every run records its options before it writes a shard, so a shard without a record was
        // not written by a run of this conversion (a finished one whose metadata was removed, or data
        // from elsewhere): resuming would take it for done.
        let first = survey.shards.iter().enumerate().find_map(|(i, shards)| {
            let array = plan.arrays.get(i)?;
            Some(shard_key(
                &array.path,
                shards.first()?.index,
                &array.geometry.shard_grid(),
            ))
        });
        if let Some(key) = first {
            return Err(Error::Destination {
                reason: format!(
                    "{} holds {} but no record of the zshard conversion that wrote it, so its shards cannot be trusted; use {} to replace it",
                    dst.url(""),
                    dst.url(&key),
                    Setting::Overwrite
                ),
            });
        }
    } else if let Some(key) = survey.conflicting_record(dst, fingerprint)? {
        return Err(Error::Destination {
            reason: format!(
                "{} holds a conversion with different options (see {}); rerun with the same options to resume it, or use {} to replace it",
                dst.url(""),
                dst.url(key),
                Setting::Overwrite
            ),
        });
    }
    Ok(Prepared::Run(Box::default()))
}

impl Survey {
    /// The first Zarr v2 `.zarray` or `.zgroup` at the root or at a node this conversion writes.
    fn first_v2_metadata(&self) -> Option<&str> {
        let mut found: Vec<&str> = self
            .documents
            .iter()
            .filter(|(key, doc)| {
                doc.is_some() && (key.ends_with(".zarray") || key.ends_with(".zgroup"))
            })
            .map(|(key, _)| key.as_str())
            .collect();
        found.sort_unstable();
        found.first().copied()
    }

    /// The `zarr.json` at `path`, if there is one.
    fn zarr_json(&self, path: &str) -> Option<&Bytes> {
        self.documents.get(&join(path, "zarr.json"))?.as_ref()
    }

    /// Whether any node of the plan already has a `zarr.json` in the destination.
    fn has_metadata(&self, plan: &Plan) -> bool {
        let mut paths = plan
            .arrays
            .iter()
            .map(|a| a.path.as_str())
            .chain(plan.groups.iter().map(|(p, _)| p.as_str()));
        paths.any(|path| self.zarr_json(path).is_some())
    }

    /// Whether every array's `zarr.json` in the destination is exactly the one this conversion
    /// writes and every group has one.
    fn metadata_matches(&self, plan: &Plan) -> bool {
        let arrays = plan.arrays.iter().all(|array| {
            self.zarr_json(&array.path).is_some_and(|bytes| {
                serde_json::from_slice::<Value>(bytes).unwrap_or(Value::Null)
                    == array.output.to_json()
            })
        });
        arrays
            && plan
                .groups
                .iter()
                .all(|(path, _)| self.zarr_json(path).is_some())
    }

    /// The keys of the per-worker options records, in listing order.
    fn options_records(&self) -> impl Iterator<Item = &String> {
        self.state.iter().filter(|key| in_dir(key, OPTIONS_DIR))
    }

    /// The key of a recorded conversion whose options differ from `fingerprint`, if any.
    fn conflicting_record(&self, dst: &Store, fingerprint: &Fingerprint) -> Result<Option<&str>> {
        for key in self.options_records() {
            let Some(bytes) = self.records.get(key) else {
                continue; // removed meanwhile
            };
            let same = fingerprint
                .recorded_in(bytes)
                .map_err(|source| Error::State {
                    key: dst.url(key),
                    source,
                })?;
            if !same {
                return Ok(Some(key));
            }
        }
        Ok(None)
    }

    /// The contents of the claim, if it was listed and read.
    fn claim(&self) -> Option<&Bytes> {
        self.records.get(CLAIM)
    }
}

/// For `--overwrite`: removes zshard's state, the Zarr hierarchy the destination holds and the chunk
/// keys of its arrays and of this conversion's, and nothing else (see `owned.rs`); refuses while
/// another run holds a fresh lease. One listing of the destination with the claim and the plan's
/// own metadata documents read beside it, then (only when the listing names more) the other leases,
/// recorded options and metadata documents in one round of reads, then the removals side by side
/// after the marker's write. The marker is left for the claim to remove ([`Marker::Remove`]).
fn remove_owned(dst: &Store, plan: &Plan, partition: Partition, own_lease: &str) -> Result<Marker> {
    let is_wanted = |key: &str| {
        // This run's own lease says nothing about other runs.
        (in_dir(key, crate::run::lease::LEASES_DIR) && key != own_lease)
            || key == CLAIM
            || in_dir(key, OPTIONS_DIR)
            || key
                .rsplit('/')
                .next()
                .is_some_and(|name| name == "zarr.json" || name == ".zarray")
    };
    // The documents the plan names and the claim are read beside the listing, which names the rest:
    // overwriting a finished conversion then costs one round trip here, not two.
    let guessed: Vec<String> = std::iter::once(CLAIM.to_string())
        .chain(document_keys(plan))
        .filter(|key| is_wanted(key))
        .collect();
    // A local listing that does not follow symbolic links: a link in the old hierarchy (to the
    // source, to another array) and what it leads to were not written here and stay.
    let (listed, guessed_reads) = dst.block_on(async {
        futures::join!(
            dst.list_sizes_without_links_async(""),
            dst.get_many_async(&guessed)
        )
    });
    let keys: BTreeSet<String> = listed?.into_iter().map(|(key, _)| key).collect();
    let wanted: BTreeSet<&String> = keys.iter().filter(|key| is_wanted(key)).collect();
    let mut read: HashMap<String, Bytes> = HashMap::new();
    // What the listing names decides; a guess it does not name is left out, as it was never read.
    for (key, found) in guessed.iter().zip(guessed_reads) {
        if wanted.contains(key) {
            if let Some(bytes) = found? {
                read.insert(key.clone(), bytes);
            }
        }
    }
    let rest: Vec<String> = wanted
        .into_iter()
        .filter(|key| !guessed.contains(*key))
        .cloned()
        .collect();
    if !rest.is_empty() {
        for (key, found) in rest.iter().zip(dst.get_many(&rest)) {
            if let Some(bytes) = found? {
                read.insert(key.clone(), bytes);
            }
        }
    }
    let leases = read
        .iter()
        .filter(|(key, _)| in_dir(key, crate::run::lease::LEASES_DIR));
    crate::run::lease::refuse_live_leases(dst, Some(own_lease), leases)?;
    let mut roots = vec![String::new()];
    roots.extend(plan.arrays.iter().map(|a| a.path.clone()));
    roots.extend(plan.groups.iter().map(|(p, _)| p.clone()));
    let mut arrays = recorded_arrays(&keys, &read);
    arrays.extend(plan.arrays.iter().filter_map(|a| {
        ChunkKeys::of_v3(&a.output.to_json()).map(|chunk_keys| (a.path.clone(), chunk_keys))
    }));
    let document = |key: &str| -> Option<Value> { serde_json::from_slice(read.get(key)?).ok() };
    let mut owned = owned_keys(&keys, &roots, &arrays, &document);
    owned.retain(|key| key != own_lease);
    if owned.is_empty() {
        return Ok(Marker::Ignore);
    }
    if !partition.is_all() {
        return Err(Error::Destination {
            reason: format!(
                "{} cannot be combined with a partitioned run; empty {} first",
                Setting::Overwrite,
                dst.url("")
            ),
        });
    }
    // Uploads that killed runs left open are recorded under the state folder, which is about to
    // go: abort them first (no other run is live, see above), or nothing would ever abort them.
    let uploads: Vec<String> = keys
        .iter()
        .filter(|key| in_dir(key, UPLOADS_DIR))
        .cloned()
        .collect();
    for key in &uploads {
        match dst.abort_uploads_recorded_in(std::slice::from_ref(key)) {
            // A file there that records no upload aborts nothing; it goes with the state.
            Err(zshard_store::Error::UploadRecord {
                location, reason, ..
            }) => {
                tracing::warn!("{location}: {reason}; removed with zshard's state");
            }
            aborted => {
                aborted?;
            }
        }
    }
    // The marker goes first and leaves last: if this is interrupted, old shards may remain, and a
    // later run must not take them for done ones of its own.
    dst.put(
        OVERWRITING,
        Bytes::from_static(b"an overwrite is clearing this destination\n"),
    )?;
    let owned: Vec<String> = owned.into_iter().filter(|k| k != OVERWRITING).collect();
    dst.delete_many(&owned)?;
    Ok(Marker::Remove)
}

/// The arrays that zshard's recorded options (claim and per-worker records, as `read`) describe,
/// with their chunk keys: an interrupted conversion has shards but no metadata yet.
fn recorded_arrays(
    keys: &BTreeSet<String>,
    read: &HashMap<String, Bytes>,
) -> Vec<(String, ChunkKeys)> {
    let mut arrays = Vec::new();
    let records = keys
        .iter()
        .filter(|k| *k == CLAIM || in_dir(k, OPTIONS_DIR));
    for key in records {
        let Some(bytes) = read.get(key) else {
            continue;
        };
        // A record we cannot read describes nothing we could remove.
        let Ok(recorded) = serde_json::from_slice::<Value>(bytes) else {
            continue;
        };
        for array in recorded["arrays"].as_array().into_iter().flatten() {
            if let (Some(path), Some(chunk_keys)) = (
                array["path"].as_str(),
                ChunkKeys::of_v3(&array["zarr.json"]),
            ) {
                arrays.push((path.to_string(), chunk_keys));
            }
        }
    }
    arrays
}

/// Removes the state folder once the metadata is written: the keys `listed` below it (a listing
/// made after this run's last write there, or `None` to list it now) and `also` (keys this run
/// wrote there since the listing began), side by side, then the claim.
pub(crate) fn clear(dst: &Store, listed: Option<Vec<String>>, also: &[String]) -> Result<()> {
    let listed = match listed {
        Some(keys) => keys,
        None => dst.list_keys(STATE_DIR)?,
    };
    // The claim goes last: while any state is left, the destination stays claimed.
    let mut keys: BTreeSet<String> = listed.into_iter().collect();
    keys.extend(also.iter().cloned());
    keys.remove(CLAIM);
    // Written only with `--keep-manifest`, to stay (an `--overwrite` removes it).
    keys.remove(MANIFEST);
    dst.delete_many(&keys.into_iter().collect::<Vec<_>>())?;
    dst.delete(CLAIM).map_err(Error::from)
}

/// Checks, without recording anything, that the destination's recorded options (`survey`) equal
/// `fingerprint`; `Complete` when it was finalized before with the same options.
pub(crate) fn check_recorded(
    dst: &Store,
    plan: &Plan,
    fingerprint: &Fingerprint,
    survey: &Survey,
) -> Result<Prepared> {
    if survey.options_records().next().is_none() {
        if survey.has_metadata(plan) && survey.metadata_matches(plan) {
            return Ok(Prepared::Complete);
        }
        return Err(Error::Destination {
            reason: format!(
                "{} holds no zshard conversion with these options (no {OPTIONS_DIR})",
                dst.url("")
            ),
        });
    }
    let state_error = |source| Error::State {
        key: dst.url(CLAIM),
        source,
    };
    let other_claim = match survey.claim() {
        Some(bytes) if !fingerprint.recorded_in(bytes).map_err(state_error)? => {
            Some(serde_json::from_slice::<Value>(bytes).map_err(state_error)?)
        }
        _ => None,
    };
    if let Some(claimed) = other_claim {
        return Err(Error::Destination {
            reason: format!(
                "{} was claimed by a conversion with different options ({}; see {})",
                dst.url(""),
                differences(&claimed, &fingerprint.value()),
                dst.url(CLAIM)
            ),
        });
    }
    if let Some(key) = survey.conflicting_record(dst, fingerprint)? {
        return Err(Error::Destination {
            reason: format!(
                "{} was converted with different options (see {})",
                dst.url(""),
                dst.url(key)
            ),
        });
    }
    Ok(Prepared::Run(Box::default()))
}

/// What an earlier run of this conversion left in the destination.
#[derive(Debug, Default)]
pub(crate) struct Resume {
    /// Shards done, per array, as C-order shard indices: listed shards that a record names with
    /// their listed size, and recorded all-fill shards that have no object.
    pub(crate) done: Vec<HashSet<u64>>,
    /// This worker's shards whose key holds an object not proven ours (no record, or another size):
    /// a shard whose record a kill lost, junk, a truncated copy. They are converted again, which
    /// replaces the object; one that turns out to hold only the fill value must have it removed.
    /// Keyed by (array, C-order shard index).
    pub(crate) untrusted: HashMap<(usize, u64), String>,
}

/// What is done (see [`Resume`]), from the survey's listing of each array's shards and zshard's
/// records (no request per shard). Leftover temporary files of interrupted local writes of
/// `partition`'s shards are removed, unless a run other than the one holding the lease `own_lease`
/// is live: they may be its writes in progress. (Object stores have no such files, so their leases
/// are not read here.)
pub(crate) fn done_shards(
    dst: &Store,
    plan: &Plan,
    partition: Partition,
    own_lease: &str,
    survey: &Survey,
) -> Result<Resume> {
    let local = dst.local_path("").is_some();
    let alone = local && !crate::run::lease::another_run_is_live(dst, own_lease)?;
    let written = records(survey, plan, DONE_DIR);
    let mut resume = Resume {
        done: vec![HashSet::new(); plan.arrays.len()],
        untrusted: HashMap::new(),
    };
    for (i, index) in records(survey, plan, EMPTY_DIR).shards() {
        resume.done[i].insert(index);
    }
    // A recorded size proves the object was ours once. The version the store gave it when it was
    // written (its ETag), recorded beside, proves it is still that object when the listing names the
    // same one: no request per shard. Without a recorded version (records of earlier versions), or
    // on local disk when the version differs (a destination copied elsewhere has other inodes), the
    // shard index is read (a few bytes per shard this worker owns) to prove the object was not
    // replaced since by bytes of the same length. On an object store a read per shard is what a
    // resume must not cost (a million shards at 20 ms): a shard whose listed version differs from
    // the recorded one is converted again, and one recorded without a version is trusted by its size.
    let check_indexes = dst.location().is_local();
    // Shards written since the last checkpoint of a run that stopped (their manifest records, but
    // no `done` record): on local disk their bytes may not have reached the disk, so each one is
    // read whole and trusted only when its crc32c is the manifest's. (On an object store such a
    // shard is converted again, as any shard without a record: a GET per shard is what a resume
    // must not cost there.)
    let unchecked = uncheckpointed_entries(survey, plan);
    let mut first_global = 0u64;
    let mut checks = Vec::new();
    // Shards read whole (as a stream) and trusted only when their crc32c is one recorded for them.
    let mut hash_checks: Vec<(String, Vec<u32>)> = Vec::new();
    // Per array, what each listed shard's records prove without a read.
    let mut verdicts: Vec<Vec<Verdict>> = Vec::with_capacity(plan.arrays.len());
    for (i, array) in plan.arrays.iter().enumerate() {
        let grid = array.geometry.shard_grid();
        let listed = survey.shards.get(i).map_or(&[][..], Vec::as_slice);
        let mut array_verdicts = Vec::with_capacity(listed.len());
        for shard in listed {
            let index = shard.index;
            let owned = partition.owns(first_global + index);
            let verdict = verdict(written.of(i, index), shard);
            if owned && check_indexes {
                // On local disk a shard whose version changed since its record (written again
                // after the last checkpoint, then damaged by a power loss that spared its index)
                // is proven by the crc32c its records give it; the index alone proves only a
                // record that has none.
                let crcs: Vec<u32> = match verdict {
                    Verdict::VersionDiffers => written
                        .of(i, index)
                        .filter(|r| r.size == Some(shard.size))
                        .filter_map(|r| r.crc32c)
                        .chain(unchecked.get(&(i, index, shard.size)).copied())
                        .collect(),
                    Verdict::Unrecorded => unchecked
                        .get(&(i, index, shard.size))
                        .copied()
                        .into_iter()
                        .collect(),
                    Verdict::Versioned | Verdict::Unversioned => Vec::new(),
                };
                // The index is checked whenever the bytes are: an object's crc32c cannot see its
                // index replaced by another of the same length (the index ends with its own
                // crc32c, and a CRC over a message that ends with its CRC is a constant), but the
                // index check sees the chunks it names.
                let key = || shard_key(&array.path, index, &grid);
                let index_check = !crcs.is_empty()
                    || matches!(verdict, Verdict::Unversioned | Verdict::VersionDiffers);
                if index_check {
                    checks.push((i, key(), shard.size));
                }
                if !crcs.is_empty() {
                    hash_checks.push((key(), crcs));
                }
            }
            array_verdicts.push(verdict);
        }
        verdicts.push(array_verdicts);
        first_global += array.geometry.shard_count();
    }
    let mut intact = intact_indexes(dst, plan, &checks)?;
    // Streamed: a check holds no shard whole, whatever the shards' sizes. A shard whose bytes were
    // checked is intact when its index and its crc32c both are.
    let keys: Vec<String> = hash_checks.iter().map(|(key, _)| key.clone()).collect();
    for ((key, crcs), read) in hash_checks.iter().zip(dst.checksums(&keys)) {
        // Unreadable: not proven, so converted again.
        let matches = matches!(read, Ok(Some((_, crc))) if crcs.contains(&crc));
        if !matches {
            intact.remove(key);
        }
    }
    let rechecked: HashSet<&String> = hash_checks.iter().map(|(key, _)| key).collect();
    let mut first_global = 0u64;
    for (i, array) in plan.arrays.iter().enumerate() {
        let grid = array.geometry.shard_grid();
        let listed = survey.shards.get(i).map_or(&[][..], Vec::as_slice);
        for (shard, verdict) in listed.iter().zip(&verdicts[i]) {
            let index = shard.index;
            let owned = partition.owns(first_global + index);
            // The key is made only for the shards whose proof needed a read, or that are not done.
            let key = || shard_key(&array.path, index, &grid);
            let proven = match verdict {
                Verdict::Versioned => true,
                // Another worker's shards are its to check.
                Verdict::Unversioned | Verdict::VersionDiffers if !owned => true,
                Verdict::Unversioned if !check_indexes => true,
                Verdict::Unversioned => intact.contains(&key()),
                Verdict::VersionDiffers => check_indexes && intact.contains(&key()),
                Verdict::Unrecorded => {
                    let key = key();
                    rechecked.contains(&key) && intact.contains(&key)
                }
            };
            if proven {
                resume.done[i].insert(index);
            } else {
                // Not done, even if recorded as all fill: an all-fill shard has no object.
                resume.done[i].remove(&index);
                if owned {
                    resume.untrusted.insert((i, index), key());
                }
            }
        }
        if alone {
            remove_staged_leftovers(dst, &array.path, &grid, |index| {
                partition.owns(first_global + index)
            })?;
        }
        first_global += array.geometry.shard_count();
    }
    Ok(resume)
}

/// What the records say of a listed shard, before any read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// A record names it with its listed size and version: it is the object a run of this
    /// conversion wrote.
    Versioned,
    /// A record names it with its listed size, but none with a version.
    Unversioned,
    /// Records name it with its listed size, each with another version than the listing's: the
    /// object was written again since (junk, another copy), or the destination was copied.
    VersionDiffers,
    /// No record names it with its listed size.
    Unrecorded,
}

/// What `records` (of one shard) prove of the listed `shard`.
fn verdict<'a>(records: impl Iterator<Item = &'a RecordedShard>, shard: &ListedShard) -> Verdict {
    let same_size = records.filter(|r| r.size == Some(shard.size));
    let mut found = Verdict::Unrecorded;
    for record in same_size {
        match record.version {
            Some(version) if version == shard.version => return Verdict::Versioned,
            Some(_) if found == Verdict::Unrecorded => found = Verdict::VersionDiffers,
            Some(_) => {}
            None => found = Verdict::Unversioned,
        }
    }
    found
}

/// The keys among `checks` (array, shard key, listed size) whose shard index is intact: its
/// crc32c matches and every inner chunk it names lies inside the object, outside the index, with no
/// two overlapping. Only the index is read (a range at the end or start of the object).
fn intact_indexes(
    dst: &Store,
    plan: &Plan,
    checks: &[(usize, String, u64)],
) -> Result<HashSet<String>> {
    let encoding = IndexEncoding::default();
    let mut requests = Vec::new();
    let mut expected = Vec::new();
    for (i, key, size) in checks {
        let array = &plan.arrays[*i];
        let Ok(chunks) = usize::try_from(zshard_core::product(&array.geometry.chunks_per_shard()))
        else {
            continue;
        };
        let index_len = encoding.byte_len(chunks) as u64;
        if index_len > *size {
            continue;
        }
        let location = array.output.index_location;
        let range = match location {
            IndexLocation::End => size - index_len..*size,
            IndexLocation::Start => 0..index_len,
        };
        requests.push((key.clone(), range));
        expected.push((key, *size, chunks, index_len, location));
    }
    let mut intact = HashSet::new();
    for ((key, size, chunks, index_len, location), read) in
        expected.into_iter().zip(dst.get_ranges(&requests))
    {
        // Unreadable (gone or shorter since it was listed): not proven, so converted again, and a
        // lasting fault shows there.
        let Ok(bytes) = read else { continue };
        let ok = ShardIndex::decode(&bytes, chunks, encoding)
            .and_then(|index| index.validate(size, index_len, location))
            .is_ok();
        if ok {
            intact.insert(key.clone());
        }
    }
    Ok(intact)
}

/// The manifest entries of the shards that no checkpoint covers (see [`uncheckpointed`]), as read
/// by the survey: (array, C-order shard index, size) to the object's crc32c.
fn uncheckpointed_entries(survey: &Survey, plan: &Plan) -> HashMap<(usize, u64, u64), u32> {
    let files: Vec<(String, Bytes)> = survey
        .records
        .iter()
        .filter(|(key, _)| in_dir(key, MANIFEST_DIR))
        .map(|(key, bytes)| (key.clone(), bytes.clone()))
        .collect();
    let mut found = HashMap::new();
    for ((path, coord), entry) in crate::verify::manifest::merge(&files) {
        let Some(i) = plan.arrays.iter().position(|a| a.path == path) else {
            continue;
        };
        let grid = plan.arrays[i].geometry.shard_grid();
        if let Some(coord) = recorded_coord(&coord, &grid) {
            found.insert((i, linear_index(&coord, &grid), entry.size), entry.crc32c);
        }
    }
    found
}

/// What one record line says of a shard: its size and the version the store gave it (see
/// [`version_id`]), each when the line has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RecordedShard {
    size: Option<u64>,
    /// The crc32c of the object as written (records of early versions have none).
    crc32c: Option<u32>,
    version: Option<u64>,
}

/// Recorded shards: (array, C-order shard index) to what each record of it says. Most shards have
/// one record (a million of them: a map of records, not of lists of them, takes a third of the
/// memory); the second and later records of a shard, written again by a later run, go aside.
#[derive(Debug, Default)]
struct Recorded {
    first: HashMap<(usize, u64), RecordedShard>,
    more: HashMap<(usize, u64), Vec<RecordedShard>>,
}

impl Recorded {
    fn insert(&mut self, shard: (usize, u64), record: RecordedShard) {
        match self.first.entry(shard) {
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(record);
            }
            std::collections::hash_map::Entry::Occupied(_) => {
                self.more.entry(shard).or_default().push(record);
            }
        }
    }

    /// The records of the shard of C-order index `index` of array `array`.
    fn of(&self, array: usize, index: u64) -> impl Iterator<Item = &RecordedShard> {
        let shard = (array, index);
        self.first
            .get(&shard)
            .into_iter()
            .chain(self.more.get(&shard).into_iter().flatten())
    }

    /// The shards recorded, (array, C-order index), each once.
    fn shards(self) -> impl Iterator<Item = (usize, u64)> {
        self.first.into_keys()
    }
}

/// The shards that the record files under `dir` (as read by the survey) name: (array, C-order
/// shard index) to the sizes and versions recorded (`None` in records without them). Lines of other
/// arrays or grids are ignored.
fn records(survey: &Survey, plan: &Plan, dir: &str) -> Recorded {
    let mut found = Recorded::default();
    // A record is believed only from the worker that owns its shard (the file's name says which):
    // a line another worker's file names was damaged, and must not make the owner skip it.
    let files = survey
        .records
        .iter()
        .filter(|(key, _)| in_dir(key, dir))
        .filter_map(|(key, bytes)| Some((Partition::of_file(key)?, bytes)));
    let mut first_global = 0u64;
    let arrays: HashMap<&str, (usize, Vec<u64>, u64)> = plan
        .arrays
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let first = first_global;
            first_global += a.geometry.shard_count();
            (a.path.as_str(), (i, a.geometry.shard_grid(), first))
        })
        .collect();
    for (writer, bytes) in files {
        for line in String::from_utf8_lossy(bytes).lines() {
            let mut fields = line.split('\t');
            let (Some(path), Some(coord)) = (fields.next(), fields.next()) else {
                continue;
            };
            let size = match fields.next().map(str::parse::<u64>) {
                None => None,
                Some(Ok(size)) => Some(size),
                Some(Err(_)) => continue,
            };
            // The object's crc32c, then its version.
            let crc32c = fields
                .next()
                .and_then(|crc| u32::from_str_radix(crc, 16).ok());
            let version = fields.next().map(version_id);
            let Some((i, grid, first)) = arrays.get(path) else {
                continue;
            };
            if let Some(coord) = recorded_coord(coord, grid) {
                let index = linear_index(&coord, grid);
                if !writer.owns(first + index) {
                    continue;
                }
                found.insert(
                    (*i, index),
                    RecordedShard {
                        size,
                        crc32c,
                        version,
                    },
                );
            }
        }
    }
    found
}

/// A version (ETag) as compared between a record and a listing: a hash of it without the quotes
/// and weak marker that some stores add in one place and not the other (Azure lists ETags bare and
/// sends them quoted), so that a million of them take 8 bytes each.
fn version_id(version: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let bare = version
        .strip_prefix("W/")
        .unwrap_or(version)
        .trim_matches('"');
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    bare.hash(&mut hasher);
    hasher.finish()
}

/// An object at one of an array's shard keys, as a listing names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ListedShard {
    /// The shard's C-order index in its array's shard grid.
    index: u64,
    size: u64,
    /// Its version (see [`version_id`]).
    version: u64,
}

/// The key of the shard of C-order index `index` in `grid` of the array at `array_path`.
fn shard_key(array_path: &str, index: u64, grid: &[u64]) -> String {
    join(
        array_path,
        &SHARD_KEYS.key(&zshard_core::unravel_index(index, grid)),
    )
}

/// How the shards of every output array are keyed (the writer's encoding).
const SHARD_KEYS: ChunkKeyEncoding = zshard_writer::OUTPUT_KEY_ENCODING;

/// The objects of the array at `array_path` that are shards of `grid`, in key order.
async fn shard_keys(dst: &Store, array_path: &str, grid: &[u64]) -> Result<Vec<ListedShard>> {
    let folder = join(array_path, SHARD_KEYS.chunk_folder());
    Ok(dst
        .list_objects_split_async(&folder, &listing_splits(array_path, grid))
        .await?
        .into_iter()
        .filter_map(|object| {
            let coord = shard_coord(array_path, &object.key, grid)?;
            Some(ListedShard {
                index: linear_index(&coord, grid),
                size: object.size,
                version: version_id(&object.version),
            })
        })
        .collect())
}

/// The coordinate in `grid` of the shard that `key` (relative to the destination) names for the
/// array at `array_path`; `None` for any other key.
fn shard_coord(array_path: &str, key: &str, grid: &[u64]) -> Option<Vec<u64>> {
    let relative = match array_path {
        "" => key,
        path => key.strip_prefix(path)?.strip_prefix('/')?,
    };
    SHARD_KEYS
        .coordinates(relative, grid.len())
        .filter(|coord| inside(coord, grid))
}

/// The coordinate of a record line (`i,j,...`, as [`ShardLog::record`] writes it) in `grid`.
fn recorded_coord(text: &str, grid: &[u64]) -> Option<Vec<u64>> {
    let coord: Vec<u64> = if text.is_empty() {
        Vec::new()
    } else {
        text.split(',')
            .map(|p| p.parse().ok())
            .collect::<Option<_>>()?
    };
    (coord.len() == grid.len() && inside(&coord, grid)).then_some(coord)
}

fn inside(coord: &[u64], grid: &[u64]) -> bool {
    coord.iter().zip(grid).all(|(c, g)| c < g)
}

/// Shard keys about a listing page apart (S3 lists 1000 keys a page), where the listing of an
/// array's shards is cut so that its pages are fetched side by side (see
/// [`Store::list_sizes_split`]): every `LIST_PAGE`-th shard in C order, so at most one key per page
/// of shards is held here however large the grid.
fn listing_splits(array_path: &str, grid: &[u64]) -> Vec<String> {
    const LIST_PAGE: u64 = 1000;
    let count = zshard_core::product(grid);
    (LIST_PAGE..count)
        .step_by(LIST_PAGE as usize)
        .map(|index| {
            join(
                array_path,
                &SHARD_KEYS.key(&zshard_core::unravel_index(index, grid)),
            )
        })
        .collect()
}

/// Removes the staged files of interrupted local writes (see [`Store::staged_keys`]) of the shards
/// of the array at `array_path` that `owned` selects. (An interrupted upload to an object store is
/// never visible at all.)
fn remove_staged_leftovers(
    dst: &Store,
    array_path: &str,
    grid: &[u64],
    owned: impl Fn(u64) -> bool,
) -> Result<()> {
    let folder = join(array_path, SHARD_KEYS.chunk_folder());
    let mut shards = BTreeSet::new();
    for staged in dst.staged_keys(&folder)? {
        let Some(shard) = zshard_store::staged_base(&staged) else {
            continue;
        };
        // Only staged writes of this array's shards, never of another file beside them.
        if let Some(coord) = shard_coord(array_path, shard, grid) {
            if owned(linear_index(&coord, grid)) {
                shards.insert(shard.to_string());
            }
        }
    }
    for shard in shards {
        dst.remove_staged_of(&shard)?;
    }
    Ok(())
}

/// Batches records of shards (written ones with their size, or all-fill ones) and stores each batch
/// under its own key, so that a batch is never rewritten while it may be its only copy; this run's
/// batches are compacted as they accumulate (see [`ShardLog::compact`]), so that a worker's records
/// stay a few files however many shards it writes.
#[derive(Debug)]
pub(crate) struct ShardLog {
    store: Store,
    /// `<worker>-<run>`; a batch is `<dir>/<name>-<seq>.txt`, its manifest records the file of the
    /// same name under [`MANIFEST_DIR`].
    name: String,
    dir: &'static str,
    seq: u64,
    pending: String,
    /// The manifest lines of the written shards in `pending`.
    manifest: String,
    entries: usize,
    /// The bytes of the written shards in `pending`.
    pending_bytes: u64,
    last_flush: Instant,
    /// This run's record files, oldest first, with the batches each holds (one, or many once
    /// compacted). Only this run's: no other process writes or removes them.
    files: Vec<RecordFile>,
    limits: RecordLimits,
    /// How long records are batched at most (the checkpoint interval).
    interval: Duration,
}

/// When records are flushed and compacted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RecordLimits {
    /// Records per batch file (a batch is also flushed every checkpoint interval).
    pub(crate) flush_entries: usize,
    /// How many of this run's record files holding as many batches each are merged into one.
    pub(crate) compact_at: usize,
    /// Tests: a compaction fails after writing the merged files, before removing the ones merged
    /// (what a kill there leaves).
    #[cfg(test)]
    pub(crate) fail_before_removal: bool,
}

impl Default for RecordLimits {
    fn default() -> Self {
        RecordLimits {
            flush_entries: FLUSH_ENTRIES,
            compact_at: COMPACT_AT,
            #[cfg(test)]
            fail_before_removal: false,
        }
    }
}

/// One of this run's record files: its sequence number and the batches it holds.
#[derive(Debug, Clone)]
struct RecordFile {
    seq: u64,
    batches: Vec<BatchStamp>,
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

const FLUSH_ENTRIES: usize = 10_000;

/// How often a run records the shards it has written (each time after a checkpoint on local disk),
/// unless [`crate::Conversion::checkpoint_interval`] says otherwise; records are also written every
/// 10,000 shards.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(10);
/// Merged by fours: a worker's records are at most three files per level (a level holding four
/// times the batches of the one below), each record rewritten once per level: at a million shards
/// (100 batches), 6 files, each record rewritten up to 3 times.
const COMPACT_AT: usize = 4;

impl ShardLog {
    /// Records of written shards, written (after a checkpoint) every `interval` at least.
    pub(crate) fn written(
        store: Store,
        partition: Partition,
        limits: RecordLimits,
        interval: Duration,
    ) -> Self {
        Self::new(store, DONE_DIR, partition, limits, interval)
    }

    /// Records of all-fill shards, written every `interval` at least.
    pub(crate) fn empty(
        store: Store,
        partition: Partition,
        limits: RecordLimits,
        interval: Duration,
    ) -> Self {
        Self::new(store, EMPTY_DIR, partition, limits, interval)
    }

    fn new(
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
    /// version the store gave the object (its ETag, see [`zshard_core::Stored::version`]).
    pub(crate) fn record(
        &mut self,
        array_path: &str,
        shard: &[u64],
        written: Option<&crate::verify::manifest::Entry>,
        version: Option<&str>,
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
    pub(crate) fn flush(&mut self) -> Result<()> {
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
    pub(crate) fn take_batch(&mut self) -> Vec<(String, Bytes)> {
        self.last_flush = Instant::now();
        if self.entries == 0 {
            return Vec::new();
        }
        let file = self.file_name(self.seq);
        self.files.push(RecordFile {
            seq: self.seq,
            batches: vec![BatchStamp {
                ms: crate::run::lease::now_millis(),
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
    fn file_name(&self, seq: u64) -> String {
        format!("{}-{seq:06}.txt", self.name)
    }

    /// Compaction: whenever this run's newest `compact_at` record files hold as many batches each,
    /// they are merged into one (see [`ShardLog::merge_newest`]), like the digits of a counter in
    /// base `compact_at`: a worker's records stay a few files, each record rewritten once per level.
    /// Only this run's files are merged: a worker's earlier runs left theirs compacted as far as
    /// they got, and no other process ever writes or removes this run's.
    fn compact(&mut self) -> Result<()> {
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
    fn merge_newest(&mut self, count: usize) -> Result<bool> {
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
        #[cfg(test)]
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
fn append_records(out: &mut Vec<u8>, body: &[u8]) {
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

/// Aborts the multipart uploads that earlier runs of `partition` left open (all of them for an
/// unpartitioned run, which owns every shard; a worker's own only, as other workers may be uploading
/// now), and returns `dst` recording the uploads of this run.
/// The records are those the survey listed (no request when there are none).
pub(crate) fn recording_uploads(
    dst: &Store,
    partition: Partition,
    survey: &Survey,
) -> Result<Store> {
    let own = format!("{UPLOADS_DIR}/{}", partition.tag());
    let earlier = if partition.is_all() {
        UPLOADS_DIR
    } else {
        &own
    };
    let recorded: Vec<String> = survey
        .state
        .iter()
        .filter(|key| in_dir(key, earlier))
        .cloned()
        .collect();
    if !recorded.is_empty() {
        dst.abort_uploads_recorded_in(&recorded)?;
    }
    Ok(dst.with_upload_records(&own))
}

/// Aborts every multipart upload recorded under the destination (before `finalize` writes the
/// metadata and removes the state folder, when no worker runs any more).
pub(crate) fn abort_recorded_uploads(dst: &Store) -> Result<()> {
    dst.abort_recorded_uploads(UPLOADS_DIR)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{batch_stamps, in_dir, RecordLimits, ShardLog, DONE_DIR, EMPTY_DIR, MANIFEST_DIR};
    use super::{
        recorded_coord, shard_coord, verdict, version_id, ListedShard, RecordedShard, Verdict,
    };
    use crate::verify::manifest::{ChunkHashes, Entry};
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
            let body = crate::run::sealed::unseal(&bytes::Bytes::from(file.clone()))
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
            log.record("a", &[i], Some(&entry(i)), Some("v"))
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
        let manifest = crate::verify::manifest::merge(&merged);
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
            log.record("a", &[i], Some(&entry(i)), None)
                .expect("record");
        }
        // The fourth batch makes four files to merge: the merged one is written, then it fails.
        let failed = log.record("a", &[3], Some(&entry(3)), None);
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
        assert_eq!(recorded_coord("1,2", &[3, 3]), Some(vec![1, 2]));
        assert_eq!(recorded_coord("", &[]), Some(vec![]));
        assert_eq!(recorded_coord("3,0", &[3, 3]), None);
        assert_eq!(recorded_coord("1", &[3, 3]), None);
        assert_eq!(recorded_coord("1,x", &[3, 3]), None);
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
}
