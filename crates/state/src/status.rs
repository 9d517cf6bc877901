//! How far a conversion into a destination has come, from the destination alone (`zshard status`):
//! the plan recorded in its state (the claim, else a worker's options record: every output
//! `zarr.json` gives the shape and the shard shape), the shards recorded done and all-fill, the
//! workers' leases. Read-only and cheap: one listing of the state folder beside one read of the root
//! `zarr.json`, then the state's small records side by side; never a shard, never a listing of the
//! shards (so a shard counts as done when a record names it; `finalize` also checks its object).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use zshard_store::Store;

use crate::error::{Error, Result};
use crate::lease::LEASES_DIR;
use crate::partition::Partition;
use crate::{in_dir, CLAIM, DONE_DIR, EMPTY_DIR, MANIFEST, OPTIONS_DIR, STATE_DIR, UPDATE_DIR};

/// Where a conversion stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Phase {
    /// No state and no metadata: nothing has been converted into the destination.
    NotStarted,
    /// State is there: workers are converting, were interrupted, or wait for `finalize`.
    InProgress,
    /// The metadata is written and the state removed.
    Complete,
}

/// One array of the recorded plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct ArrayStatus {
    /// Its path in the hierarchy (empty at the root).
    pub path: String,
    /// Shards it has (the shard grid's size).
    pub shards_planned: u64,
    /// Shards recorded written or all fill (each once).
    pub shards_done: u64,
    /// Of those, shards recorded written.
    pub shards_written: u64,
    /// Of those, shards recorded all fill (never written).
    pub shards_empty: u64,
    /// The recorded sizes of the written shards.
    pub bytes_written: u64,
}

/// The totals over every array.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Totals {
    /// Shards of every array.
    pub shards_planned: u64,
    /// Shards done (recorded written or all fill).
    pub shards_done: u64,
    /// Bytes of the shards recorded written.
    pub bytes_written: u64,
}

/// The progress of an update: a run over a finished conversion whose source changed, writing only
/// the shards made from what changed (see `made_from.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct UpdateStatus {
    /// Shards the update set out to write (over every worker that started it).
    pub shards_to_update: u64,
    /// Of those, the shards recorded done.
    pub shards_done: u64,
}

/// A worker's lease (see `lease.rs`): held while a run converts or finalizes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct LeaseStatus {
    /// The lease object's key.
    pub key: String,
    /// The host and process holding it.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// When the run started (RFC 3339).
    pub started: String,
    /// When it was last renewed, in milliseconds since the Unix epoch.
    pub renewed_ms: u64,
    /// Milliseconds since then, by this host's clock.
    pub age_ms: u64,
    /// After how long without renewal it is stale.
    pub stale_after_ms: u64,
    /// Renewed within `stale_after_ms` by a run that still runs: its run is live.
    pub live: bool,
    /// Held by a process of this host that no longer runs (killed before it could remove it): not
    /// live however recently it was renewed.
    #[serde(default)]
    pub ended: bool,
}

/// One worker (`--worker I/N`; `w0of1` is an unpartitioned run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct WorkerStatus {
    /// Its tag in the state's keys, `w<I>of<N>`.
    pub worker: String,
    /// I.
    pub index: u64,
    /// N.
    pub count: u64,
    /// Whether it has recorded its options (it has started).
    pub started: bool,
    /// Shards it owns.
    pub shards_planned: u64,
    /// Of those, shards done.
    pub shards_done: u64,
    /// Its leases: one per run of it that is converting, or was killed and could not remove it.
    pub leases: Vec<LeaseStatus>,
    /// Whether any of its leases is live.
    pub live: bool,
}

/// How fast shards were recorded done lately (from the modification times of the record batches,
/// which workers store every 10 s, or the times a compacted record file names for each batch it
/// holds), and when the rest would be done at that pace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Rate {
    /// The window the rate is measured over, in seconds, ending now.
    pub window_s: u64,
    /// Shards recorded done (written or all fill) per second within the window.
    pub shards_per_s: f64,
    /// Bytes of shards recorded written per second within the window.
    pub bytes_per_s: f64,
    /// Seconds until every planned shard is done at this rate; `None` when none was done in the
    /// window.
    pub eta_s: Option<u64>,
}

/// The window [`Rate`] is measured over.
pub const RATE_WINDOW_MS: u64 = 120_000;

/// A batch of records: when it was stored, its shards and their bytes.
#[derive(Debug, Clone, Copy)]
struct Batch {
    modified_ms: u64,
    shards: u64,
    bytes: u64,
}

/// The rate of the batches stored within `window_ms` before `now_ms`, with `remaining` shards left.
fn rate(batches: &[Batch], now_ms: u64, window_ms: u64, remaining: u64) -> Rate {
    let since = now_ms.saturating_sub(window_ms);
    let (shards, bytes) =
        batches
            .iter()
            .filter(|b| b.modified_ms > since)
            .fold((0u64, 0u64), |(s, b), batch| {
                (
                    s.saturating_add(batch.shards),
                    b.saturating_add(batch.bytes),
                )
            });
    let seconds = window_ms as f64 / 1000.0;
    let shards_per_s = shards as f64 / seconds;
    Rate {
        window_s: window_ms / 1000,
        shards_per_s,
        bytes_per_s: bytes as f64 / seconds,
        eta_s: (shards > 0).then(|| (remaining as f64 / shards_per_s).ceil() as u64),
    }
}

/// What a destination shows of a conversion into it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Status {
    /// The destination.
    pub destination: String,
    /// Where the conversion stands.
    pub phase: Phase,
    /// The recorded plan's arrays, in the order workers enumerate their shards (empty unless in
    /// progress).
    pub arrays: Vec<ArrayStatus>,
    /// Over every array.
    pub totals: Totals,
    /// The workers that partition the conversion (from their records, leases and options), in order.
    pub workers: Vec<WorkerStatus>,
    /// The workers whose shards are not all done, which `finalize` waits for (their tags).
    pub finalize_waits_for: Vec<String>,
    /// Shards of the pyramid levels that no worker makes and `finalize` does (issue 41; counted in
    /// the totals planned).
    #[serde(default)]
    pub finalize_makes: u64,
    /// Lines of record files that could not be read, each naming its key and line (not counted).
    pub unreadable: Vec<String>,
    /// The pace of the last [`RATE_WINDOW_MS`] and the time left at it (while in progress, with a
    /// recorded plan).
    pub rate: Option<Rate>,
    /// Nothing moves on by itself ([`Status::is_finished`] when it was read).
    pub finished: bool,
    /// While an update is in progress: how far it has come (the totals count every shard of the
    /// arrays, most of them done before it started).
    pub update: Option<UpdateStatus>,
    /// What else the destination shows: when it holds no conversion, Zarr v2 metadata (a source
    /// given for DST, say); for an Icechunk repository, where the conversion is staged and what
    /// commits it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Status {
    /// A destination that holds no conversion (yet): nothing planned, nothing done.
    pub fn not_started(destination: String) -> Status {
        Status {
            destination,
            phase: Phase::NotStarted,
            arrays: Vec::new(),
            totals: Totals::default(),
            workers: Vec::new(),
            finalize_waits_for: Vec::new(),
            finalize_makes: 0,
            unreadable: Vec::new(),
            rate: None,
            finished: false,
            update: None,
            note: None,
        }
    }

    /// Whether the conversion will not move on by itself: complete, never started, or every
    /// planned shard recorded done with no worker live (what is left is `finalize`). A conversion
    /// with workers still live, shards left, or no plan recorded yet is not finished.
    pub fn is_finished(&self) -> bool {
        match self.phase {
            Phase::InProgress => {
                self.rate.is_some()
                    && self.finalize_waits_for.is_empty()
                    && self.totals.shards_done.saturating_add(self.finalize_left())
                        >= self.totals.shards_planned
                    && !self.workers.iter().any(|w| w.live)
            }
            _ => true,
        }
    }

    /// The shards left to `finalize` of a partitioned run ([`Status::finalize_makes`]); none
    /// for an unpartitioned one, which makes them itself.
    pub fn finalize_left(&self) -> u64 {
        match self.workers.iter().any(|w| w.count > 1) {
            true => self.finalize_makes,
            false => 0,
        }
    }
}

/// The status of the conversion into `dst` (see the module's documentation).
pub fn status(dst: &Store) -> Result<Status> {
    let mut status = read_status(dst)?;
    status.finished = status.is_finished();
    Ok(status)
}

/// What the destination's state and root `zarr.json` say, without [`Status::finished`] worked out (an
/// Icechunk staging folder is read as it is, then shown as its repository).
pub fn read_status(dst: &Store) -> Result<Status> {
    let root = "zarr.json".to_string();
    let (listed, metadata) = dst.block_on(async {
        futures::join!(dst.list_objects_async(STATE_DIR), dst.get_async(&root))
    });
    let listed = listed?;
    let modified: HashMap<String, u64> = listed
        .iter()
        .map(|o| (o.key.clone(), o.modified_ms))
        .collect();
    let listed: Vec<String> = listed.into_iter().map(|o| o.key).collect();
    let metadata = metadata?;
    let mut status = Status::not_started(dst.url(""));
    let wanted: Vec<String> = listed
        .iter()
        .filter(|key| {
            *key == CLAIM
                || [OPTIONS_DIR, DONE_DIR, EMPTY_DIR, LEASES_DIR, UPDATE_DIR]
                    .iter()
                    .any(|dir| in_dir(key, dir))
        })
        .cloned()
        .collect();
    // The manifest that --keep-manifest keeps stays after the conversion finished.
    let in_progress = listed.iter().any(|key| key != MANIFEST);
    if wanted.is_empty() {
        status.phase = if in_progress {
            // Only uploads or an interrupted --overwrite's marker: state, but no plan to show.
            Phase::InProgress
        } else if metadata.is_some() {
            Phase::Complete
        } else {
            Phase::NotStarted
        };
        if status.phase == Phase::Complete {
            complete_arrays(dst, &mut status);
        }
        return Ok(status);
    }
    status.phase = Phase::InProgress;
    let mut read: BTreeMap<String, bytes::Bytes> = BTreeMap::new();
    for (key, found) in wanted.iter().zip(dst.get_many(&wanted)) {
        // A record removed meanwhile (a finalize clearing the state) is left out, and so is one
        // whose checksum fails (a resume converts its shards again).
        let Some(bytes) = found? else { continue };
        match crate::sealed::unseal(&bytes) {
            Some(body) => {
                read.insert(key.clone(), body);
            }
            None => status
                .unreadable
                .push(format!("{}: checksum does not match", dst.url(key))),
        }
    }
    let plan = recorded_plan(dst, &read)?;
    let Some(plan) = plan else {
        // Only leases (a run that has not claimed yet, or a finalize clearing): nothing planned.
        status.workers = workers(dst, &read, &listed, &[], &[], &mut status.unreadable)?;
        return Ok(status);
    };
    let mut done: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); plan.len()];
    let mut written: Vec<HashMap<u64, u64>> = vec![HashMap::new(); plan.len()];
    let mut empty: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); plan.len()];
    let mut batches = Vec::new();
    for (key, bytes) in &read {
        let is_done = in_dir(key, DONE_DIR);
        if !is_done && !in_dir(key, EMPTY_DIR) {
            continue;
        }
        let mut batch = Batch {
            modified_ms: modified.get(key).copied().unwrap_or(0),
            shards: 0,
            bytes: 0,
        };
        let text = crate::made_from::record_text(bytes);
        // A compacted file names the batches it holds, each flushed at its own time (its
        // modification time is the compaction's).
        let stamps = text.lines().next().and_then(crate::batch_stamps);
        let compacted = stamps.is_some();
        for stamp in stamps.into_iter().flatten() {
            batches.push(Batch {
                modified_ms: stamp.ms,
                shards: stamp.records,
                bytes: stamp.bytes,
            });
        }
        for (number, line) in text.lines().enumerate() {
            if compacted && number == 0 {
                continue;
            }
            match parse_record(line, is_done, &plan) {
                Some((array, index, size)) => {
                    batch.shards += 1;
                    // Sizes are read from files: a garbled one must not overflow a sum.
                    batch.bytes = batch.bytes.saturating_add(size.unwrap_or(0));
                    done[array].insert(index);
                    match size {
                        Some(size) => {
                            written[array].insert(index, size);
                        }
                        None => {
                            empty[array].insert(index);
                        }
                    }
                }
                None => status
                    .unreadable
                    .push(format!("{} line {}", dst.url(key), number + 1)),
            }
        }
        if !compacted {
            batches.push(batch);
        }
    }
    for (i, array) in plan.iter().enumerate() {
        let entry = ArrayStatus {
            path: array.path.clone(),
            shards_planned: array.shards(),
            shards_done: done[i].len() as u64,
            shards_written: written[i].len() as u64,
            shards_empty: empty[i].len() as u64,
            bytes_written: written[i]
                .values()
                .fold(0u64, |sum, &size| sum.saturating_add(size)),
        };
        let totals = &mut status.totals;
        totals.shards_planned = totals.shards_planned.saturating_add(entry.shards_planned);
        totals.shards_done = totals.shards_done.saturating_add(entry.shards_done);
        totals.bytes_written = totals.bytes_written.saturating_add(entry.bytes_written);
        status.arrays.push(entry);
    }
    // An update's own records are the only ones in the state (a finished conversion's were removed
    // with it, and kept beside each array): they count its progress.
    let to_update = read
        .iter()
        .filter(|(key, _)| in_dir(key, UPDATE_DIR))
        .filter_map(|(_, body)| crate::made_from::update_shards(body))
        .fold(0u64, u64::saturating_add);
    let mut remaining =
        status.totals.shards_planned - status.totals.shards_done.min(status.totals.shards_planned);
    if read.keys().any(|key| in_dir(key, UPDATE_DIR)) {
        let done = status.totals.shards_done.min(to_update);
        status.update = Some(UpdateStatus {
            shards_to_update: to_update,
            shards_done: done,
        });
        remaining = to_update - done;
    }
    let now_ms = crate::lease::now_millis();
    status.rate = Some(rate(&batches, now_ms, RATE_WINDOW_MS, remaining));
    status.workers = workers(dst, &read, &listed, &plan, &done, &mut status.unreadable)?;
    status.finalize_makes = plan
        .iter()
        .filter(|p| p.owner == crate::Owner::Finalize)
        .map(Planned::shards)
        .sum();
    // An unpartitioned run writes the metadata itself: finalize waits for none of it.
    status.finalize_waits_for = status
        .workers
        .iter()
        .filter(|w| w.count > 1 && w.shards_done < w.shards_planned)
        .map(|w| w.worker.clone())
        .collect();
    // A time left needs a run that is converting.
    if !status.workers.iter().any(|w| w.live) {
        if let Some(rate) = status.rate.as_mut() {
            rate.eta_s = None;
        }
    }
    Ok(status)
}

/// The arrays of a finished conversion, from its metadata (its state is gone): every shard of each
/// is done. Bytes are not counted (that would list every shard). A hierarchy that does not read
/// (not zshard's output) leaves the list empty.
fn complete_arrays(dst: &Store, status: &mut Status) {
    let Ok(nodes) = zshard_zarr::open_hierarchy(dst) else {
        return;
    };
    for node in nodes {
        let zshard_core::NodeKind::Array(meta) = node.kind else {
            continue;
        };
        let shard = meta
            .sharded
            .as_ref()
            .map_or(&meta.chunk_shape, |s| &s.shard_shape);
        let shards = meta
            .shape
            .iter()
            .zip(shard)
            .try_fold(1u64, |n, (extent, edge)| {
                n.checked_mul(extent.div_ceil((*edge).max(1)))
            })
            .unwrap_or(u64::MAX);
        status.totals.shards_planned = status.totals.shards_planned.saturating_add(shards);
        status.totals.shards_done = status.totals.shards_done.saturating_add(shards);
        status.arrays.push(ArrayStatus {
            path: node.path,
            shards_planned: shards,
            shards_done: shards,
            shards_written: 0,
            shards_empty: 0,
            bytes_written: 0,
        });
    }
}

/// An array of the recorded plan: its path and shard grid.
#[derive(Debug, Clone)]
struct Planned {
    path: String,
    grid: Vec<u64>,
    /// Its shard shape.
    shard: Vec<u64>,
    /// Who makes its shards, as the claim records it (see [`Owner`]).
    owner: crate::Owner,
}

impl Planned {
    fn shards(&self) -> u64 {
        zshard_core::product(&self.grid)
    }
}

/// The plan that the claim (else the first options record) holds; `None` when neither was read.
fn recorded_plan(
    dst: &Store,
    read: &BTreeMap<String, bytes::Bytes>,
) -> Result<Option<Vec<Planned>>> {
    let key = read
        .keys()
        .find(|key| *key == CLAIM)
        .or_else(|| read.keys().find(|key| in_dir(key, OPTIONS_DIR)));
    let Some(key) = key else {
        return Ok(None);
    };
    let recorded: Value = serde_json::from_slice(&read[key]).map_err(|source| Error::State {
        key: dst.url(key),
        source,
    })?;
    let garbled = |what: &str| Error::Destination {
        reason: format!("{} is not a zshard state record: {what}", dst.url(key)),
    };
    let arrays = recorded["arrays"]
        .as_array()
        .ok_or_else(|| garbled("no list of arrays"))?;
    let mut plan = Vec::new();
    // Every shard of the plan has a global number (see `partition.rs`), which must fit.
    let mut total = 0u64;
    for array in arrays {
        let path = array["path"]
            .as_str()
            .ok_or_else(|| garbled("an array without a path"))?;
        let doc = &array["zarr.json"];
        let numbers = |value: &Value| -> Option<Vec<u64>> {
            value.as_array()?.iter().map(Value::as_u64).collect()
        };
        let shape = numbers(&doc["shape"])
            .ok_or_else(|| garbled(&format!("array {path:?} has no shape")))?;
        let shard = numbers(&doc["chunk_grid"]["configuration"]["chunk_shape"])
            .filter(|s| s.len() == shape.len() && s.iter().all(|&e| e > 0))
            .ok_or_else(|| {
                garbled(&format!(
                    "array {path:?} has no regular chunk grid of its rank"
                ))
            })?;
        let grid: Vec<u64> = shape
            .iter()
            .zip(&shard)
            .map(|(n, s)| n.div_ceil(*s))
            .collect();
        let countable = grid
            .iter()
            .try_fold(1u64, |count, &n| count.checked_mul(n))
            .and_then(|count| total.checked_add(count));
        let Some(sum) = countable else {
            return Err(garbled(&format!(
                "array {path:?} has more shards than can be counted"
            )));
        };
        total = sum;
        let owner = match &array["owner"] {
            Value::Null => crate::Owner::Global,
            Value::String(made) if made == "finalize" => crate::Owner::Finalize,
            below => {
                let level0 = below["level0"]
                    .as_u64()
                    .and_then(|l| usize::try_from(l).ok())
                    .filter(|&l| l < plan.len())
                    .ok_or_else(|| garbled(&format!("array {path:?} has no level 0 before it")))?;
                let scale = numbers(&below["scale"])
                    .filter(|s| s.len() == shape.len())
                    .ok_or_else(|| garbled(&format!("array {path:?} has no scale")))?;
                crate::Owner::Below {
                    level0,
                    level0_first: plan[..level0].iter().map(Planned::shards).sum(),
                    scale,
                }
            }
        };
        plan.push(Planned {
            path: path.to_string(),
            grid,
            shard,
            owner,
        });
    }
    Ok(Some(plan))
}

/// A record line (`path<TAB>i,j,...[<TAB>size[<TAB>crc32c[<TAB>version]]]`, see `state::ShardLog`) of an array of `plan`:
/// (array, C-order shard index, size); `None` when it does not parse or names no shard of the plan.
/// A record of a written shard (`with_size`) must give its size.
fn parse_record(
    line: &str,
    with_size: bool,
    plan: &[Planned],
) -> Option<(usize, u64, Option<u64>)> {
    // What the shard was made from (`s:`, see `made_from.rs`) says nothing of progress.
    let (fields, _digest) = crate::made_from::split_digest(line);
    let mut fields = fields.iter();
    let (path, coord) = (fields.next()?, fields.next()?);
    let size = match fields.next() {
        Some(size) => Some(size.parse::<u64>().ok()?),
        None => None,
    };
    // A written shard's record carries the object's crc32c after its size, then the version the
    // store gave it (earlier versions' records do not).
    if with_size {
        if let Some(crc) = fields.next() {
            u32::from_str_radix(crc, 16).ok()?;
            let _version = fields.next();
        }
    }
    if fields.next().is_some() || size.is_some() != with_size {
        return None;
    }
    let array = plan.iter().position(|a| a.path == path)?;
    let grid = &plan[array].grid;
    Some((array, crate::survey::recorded_index(coord, grid)?, size))
}

/// `w<I>of<N>` as (I, N).
fn parse_tag(tag: &str) -> Option<(u64, u64)> {
    let partition = Partition::parse_tag(tag)?;
    Some((partition.index, partition.count))
}

/// The worker tag that starts the file name of a key (`<tag>-...` or `<tag>.json`).
fn tag_of(key: &str) -> Option<(u64, u64)> {
    let partition = Partition::of_file(key)?;
    Some((partition.index, partition.count))
}

/// Every worker that the state names (options records, record files, leases), with every other
/// worker of the same N, each with its shards (`done` per array) and leases.
fn workers(
    dst: &Store,
    read: &BTreeMap<String, bytes::Bytes>,
    listed: &[String],
    plan: &[Planned],
    done: &[BTreeSet<u64>],
    unreadable: &mut Vec<String>,
) -> Result<Vec<WorkerStatus>> {
    let now = crate::lease::now_millis();
    let mut leases: BTreeMap<(u64, u64), Vec<LeaseStatus>> = BTreeMap::new();
    let mut counts = BTreeSet::new();
    for (key, bytes) in read.iter().filter(|(key, _)| in_dir(key, LEASES_DIR)) {
        // A damaged lease is shown as such; it holds up nothing (see `lease::fresh`).
        let seen = match crate::lease::seen(dst, key, bytes, now) {
            Ok(seen) => seen,
            Err(error) => {
                unreadable.push(crate::error::one_line(&error));
                continue;
            }
        };
        let Some(tag) = parse_tag(&seen.worker) else {
            continue;
        };
        counts.insert(tag.1);
        leases.entry(tag).or_default().push(LeaseStatus {
            key: key.clone(),
            host: seen.host,
            pid: seen.pid,
            started: seen.started,
            renewed_ms: seen.renewed_ms,
            age_ms: seen.age_ms,
            stale_after_ms: seen.stale_after_ms,
            live: seen.fresh && !seen.ended,
            ended: seen.ended,
        });
    }
    let started: BTreeSet<(u64, u64)> = listed
        .iter()
        .filter(|key| in_dir(key, OPTIONS_DIR))
        .filter_map(|key| tag_of(key))
        .collect();
    for key in listed
        .iter()
        .filter(|key| in_dir(key, OPTIONS_DIR) || in_dir(key, DONE_DIR) || in_dir(key, EMPTY_DIR))
    {
        if let Some((_, count)) = tag_of(key) {
            counts.insert(count);
        }
    }
    // Shard g of the global enumeration (every array's shards in turn) is worker g mod N's (see
    // `partition.rs`): worker I of N plans the shards I, I + N, ... below the total, and its done
    // ones are counted in one pass over the done shards, whatever N (at most MAX_WORKERS).
    let total: u64 = plan.iter().map(Planned::shards).sum();
    let globals: Vec<u64> = plan
        .iter()
        .scan(0u64, |first, array| {
            let this = *first;
            *first += array.shards();
            Some(this)
        })
        .collect();
    // A pyramid made by workers (issue 41): its lower levels' shards are their level-0 shard's
    // owner's, and the smallest levels no worker's (`finalize` makes them).
    let owner = |array: usize, shard: u64| -> Option<u64> {
        let planned = &plan[array];
        match &planned.owner {
            crate::Owner::Global => Some(globals[array] + shard),
            crate::Owner::Finalize => None,
            crate::Owner::Below {
                level0,
                level0_first,
                scale,
            } => {
                let base = &plan[*level0];
                let number = crate::owner_below(
                    &planned.shard,
                    &planned.grid,
                    &base.shard,
                    &base.grid,
                    scale,
                    shard,
                );
                Some(level0_first + number)
            }
        }
    };
    let by_rule = plan.iter().all(|p| p.owner == crate::Owner::Global);
    let mut workers = Vec::new();
    for count in counts {
        let mut finished_by: HashMap<u64, u64> = HashMap::new();
        for (array, shards) in done.iter().enumerate() {
            for &shard in shards {
                // An unpartitioned run makes every shard.
                if let Some(number) = owner(array, shard).or((count == 1).then_some(0)) {
                    *finished_by.entry(number % count).or_default() += 1;
                }
            }
        }
        // Without a pyramid, worker I of N plans the shards I, I + N, ... (no pass over them).
        let mut planned_by: HashMap<u64, u64> = HashMap::new();
        if !by_rule {
            for (array, planned) in plan.iter().enumerate() {
                for shard in 0..planned.shards() {
                    if let Some(number) = owner(array, shard).or((count == 1).then_some(0)) {
                        *planned_by.entry(number % count).or_default() += 1;
                    }
                }
            }
        }
        for index in 0..count {
            let planned = match by_rule {
                true => total.saturating_sub(index).div_ceil(count),
                false => planned_by.get(&index).copied().unwrap_or(0),
            };
            let finished = finished_by.get(&index).copied().unwrap_or(0);
            let leases = leases.remove(&(index, count)).unwrap_or_default();
            workers.push(WorkerStatus {
                worker: format!("w{index}of{count}"),
                index,
                count,
                started: started.contains(&(index, count)),
                shards_planned: planned,
                shards_done: finished,
                live: leases.iter().any(|l| l.live),
                leases,
            });
        }
    }
    Ok(workers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use zshard_store::IoRuntime;

    fn store(dir: &std::path::Path) -> Store {
        let runtime = IoRuntime::new(1).expect("runtime");
        Store::open(dir.to_str().expect("utf-8"), runtime, true).expect("open")
    }

    const CLAIM_TEXT: &str = r#"{"zshard_state": 1, "source": "s", "arrays": [
        {"path": "a", "zarr.json": {"shape": [10, 4], "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 4]}}}},
        {"path": "b", "zarr.json": {"shape": [5], "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1]}}}}]}"#;

    fn put(store: &Store, key: &str, text: &str) {
        store
            .put(key, bytes::Bytes::from(text.to_string()))
            .expect("put");
    }

    #[test]
    fn the_rate_counts_the_batches_of_the_window() {
        let batch = |modified_ms, shards, bytes| Batch {
            modified_ms,
            shards,
            bytes,
        };
        // 100 s ago (in), 130 s ago (out), 10 s ago (in): 30 shards in 120 s.
        let batches = [
            batch(900_000, 10, 1000),
            batch(870_000, 50, 5000),
            batch(990_000, 20, 2000),
        ];
        let r = rate(&batches, 1_000_000, 120_000, 60);
        assert_eq!(r.window_s, 120);
        assert_eq!(r.shards_per_s, 0.25);
        assert_eq!(r.bytes_per_s, 25.0);
        assert_eq!(r.eta_s, Some(240));
        let idle = rate(&batches, 2_000_000, 120_000, 60);
        assert_eq!((idle.shards_per_s, idle.eta_s), (0.0, None));
    }

    #[test]
    fn counts_records_once_and_names_garbled_lines() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dst = store(tmp.path());
        assert_eq!(status(&dst).expect("status").phase, Phase::NotStarted);
        put(&dst, CLAIM, CLAIM_TEXT);
        put(&dst, ".zshard/options/w0of2.json", CLAIM_TEXT);
        // a: grid 3x1 (global 0..3), b: grid 5 (global 3..8). Worker 0 of 2 owns 0, 2, 4, 6.
        put(
            &dst,
            ".zshard/done/w0of2-1-000000.txt",
            "a\t0,0\t100\na\t2,0\t50\nb\t1\t7\nb\t3\t8\n",
        );
        // A shard recorded twice (a rerun), a garbled size, a coordinate outside the grid, an
        // unknown array, a truncated line, junk.
        put(
            &dst,
            ".zshard/done/w0of2-2-000000.txt",
            "a\t0,0\t100\na\t1,0\tlots\na\t3,0\t1\nzz\t0\t1\na\n\u{fffd}\n",
        );
        put(&dst, ".zshard/empty/w0of2-2-000000.txt", "b\t1\nb\t0\tx\n");
        let s = status(&dst).expect("status");
        assert_eq!(s.phase, Phase::InProgress);
        let a = &s.arrays[0];
        assert_eq!(
            (
                a.shards_planned,
                a.shards_done,
                a.shards_written,
                a.shards_empty,
                a.bytes_written
            ),
            (3, 2, 2, 0, 150)
        );
        let b = &s.arrays[1];
        assert_eq!(
            (
                b.shards_planned,
                b.shards_done,
                b.shards_written,
                b.shards_empty,
                b.bytes_written
            ),
            (5, 2, 2, 1, 15)
        );
        assert_eq!(
            s.totals,
            Totals {
                shards_planned: 8,
                shards_done: 4,
                bytes_written: 165
            }
        );
        assert_eq!(s.unreadable.len(), 6, "{:?}", s.unreadable);
        assert!(
            s.unreadable[0].ends_with(".zshard/done/w0of2-2-000000.txt line 2"),
            "{:?}",
            s.unreadable
        );
        let tags: Vec<(&str, bool, u64, u64)> = s
            .workers
            .iter()
            .map(|w| {
                (
                    w.worker.as_str(),
                    w.started,
                    w.shards_planned,
                    w.shards_done,
                )
            })
            .collect();
        // Done: a0 (g0, w0), a2 (g2, w0), b1 (g4, w0), b3 (g6, w0).
        assert_eq!(tags, [("w0of2", true, 4, 4), ("w1of2", false, 4, 0)]);
        assert_eq!(s.finalize_waits_for, ["w1of2"]);
    }

    #[test]
    fn finished_means_nothing_moves_on_by_itself() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dst = store(tmp.path());
        assert!(status(&dst).expect("status").is_finished(), "not started");
        put(&dst, CLAIM, CLAIM_TEXT);
        put(&dst, ".zshard/options/w0of1.json", CLAIM_TEXT);
        assert!(!status(&dst).expect("status").is_finished(), "shards left");
        put(
            &dst,
            ".zshard/done/w0of1-1-000000.txt",
            "a\t0,0\t1\na\t1,0\t1\na\t2,0\t1\nb\t0\t1\nb\t1\t1\nb\t2\t1\nb\t3\t1\nb\t4\t1\n",
        );
        let done = status(&dst).expect("status");
        assert!(done.is_finished() && done.finished, "all done");
        let lease =
            crate::lease::Lease::acquire(&dst, crate::Partition::ALL, Duration::from_secs(60))
                .expect("lease");
        assert!(
            !status(&dst).expect("status").is_finished(),
            "a live worker"
        );
        lease.release().expect("release");
    }

    #[test]
    fn garbled_json_names_its_key() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dst = store(tmp.path());
        put(&dst, CLAIM, "{\"arrays\": [");
        let e = status(&dst).expect_err("garbled claim").to_string();
        assert!(e.contains(".zshard/claim.json"), "{e}");
        put(
            &dst,
            CLAIM,
            r#"{"arrays": [{"path": "a", "zarr.json": {"shape": [3]}}]}"#,
        );
        let e = status(&dst).expect_err("no grid").to_string();
        assert!(
            e.contains(".zshard/claim.json") && e.contains("\"a\""),
            "{e}"
        );
        put(&dst, CLAIM, CLAIM_TEXT);
        put(&dst, ".zshard/leases/w1of2-h-1-1.json", "not a lease");
        // A garbled lease holds up nothing (issue 45, row 11): shown, not fatal.
        let shown = status(&dst).expect("garbled lease");
        assert!(
            shown.unreadable.len() == 1
                && shown.unreadable[0].contains(".zshard/leases/w1of2-h-1-1.json"),
            "{shown:?}"
        );
    }

    #[test]
    fn leases_are_live_or_stale() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dst = store(tmp.path());
        put(&dst, CLAIM, CLAIM_TEXT);
        let lease = crate::lease::Lease::acquire(
            &dst,
            crate::Partition { index: 1, count: 3 },
            Duration::from_secs(60),
        )
        .expect("lease");
        put(
            &dst,
            ".zshard/leases/w0of3-h-1-1.json",
            r#"{"host": "h", "pid": 1, "worker": "w0of3", "started": "2026-11-24T00:00:00Z", "renewed_ms": 1000, "stale_after_ms": 60000}"#,
        );
        let s = status(&dst).expect("status");
        let live: Vec<(&str, bool, usize)> = s
            .workers
            .iter()
            .map(|w| (w.worker.as_str(), w.live, w.leases.len()))
            .collect();
        assert_eq!(
            live,
            [("w0of3", false, 1), ("w1of3", true, 1), ("w2of3", false, 0)]
        );
        assert_eq!(s.workers[0].leases[0].renewed_ms, 1000);
        assert_eq!(s.finalize_waits_for, ["w0of3", "w1of3", "w2of3"]);
        lease.release().expect("release");
    }
}
