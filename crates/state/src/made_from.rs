//! What each shard was made from, so that a rerun of a finished conversion over a changed source
//! rewrites only the shards whose source changed (issue 40).
//!
//! A shard's *digest* (made by zshard-convert, which knows the source) is a hash of its region
//! (clipped to the array, so a grown or shrunk array changes its edge shards) and of the version of
//! every source chunk that overlaps it, as one listing of the source names them
//! (`ChunkReader::chunk_versions`: a local file's inode,
//! modification time and size, an object's ETag, a reference's target and range, an Icechunk
//! chunk's id). Every record of a shard carries the digest it was made with (`s:` field, see
//! [`ShardLog::record`]); a record counts only while its digest is the shard's digest now, so the
//! same check serves a resume and an update. When a conversion finishes, each array's records are
//! kept in the array's folder ([`KEPT`]), where no Zarr reader looks (a group lists its members,
//! an array does not), for the next run to compare against.

use super::*;

/// The file of an array's folder that keeps its shards' records after the conversion finishes.
pub(crate) const KEPT: &str = ".zshard-records";

/// Whether `key` is the kept records' file of an array (see [`kept_key`]).
pub fn is_kept_records(key: &str) -> bool {
    key.rsplit('/').next() == Some(KEPT)
}

/// The file of an array's folder that keeps the versions of its source chunks as last listed, for
/// a source that has a version as a whole (an Icechunk snapshot; see
/// `zshard_core::KnownVersions`): a rerun at the same snapshot reads no manifest, and one at a
/// later snapshot looks up only what Icechunk's diff says changed.
pub(crate) const SOURCE_VERSIONS: &str = ".zshard-source-versions";

/// The file keeping the source versions of the array at `array_path` (see [`SOURCE_VERSIONS`]).
pub fn source_versions_key(array_path: &str) -> String {
    join(array_path, SOURCE_VERSIONS)
}

/// Whether `key` is an array's source versions file (see [`source_versions_key`]).
pub fn is_source_versions(key: &str) -> bool {
    key.rsplit('/').next() == Some(SOURCE_VERSIONS)
}

/// Whether a kept records file (as stored, sealed) reads back intact.
pub fn kept_records_intact(body: &Bytes) -> bool {
    sealed::unseal(body).is_some()
}

/// The kept records' file of the array at `array_path`.
pub fn kept_key(array_path: &str) -> String {
    join(array_path, KEPT)
}

/// The first line of a kept records file: the conversion that kept them (see
/// [`Fingerprint::conversion_id`]), 16 hex digits.
const CONVERSION_LINE: &str = "#conversion\t";

/// Whether the kept records `body` were kept by `fingerprint`'s conversion.
pub(crate) fn kept_by(body: &[u8], fingerprint: &Fingerprint) -> bool {
    let first = body.split(|&b| b == b'\n').next().unwrap_or_default();
    let id = std::str::from_utf8(first)
        .ok()
        .and_then(|line| line.strip_prefix(CONVERSION_LINE))
        .and_then(|hex| u64::from_str_radix(hex, 16).ok());
    id == Some(fingerprint.conversion_id())
}

/// Record files to write: key and contents.
pub type RecordFiles = Vec<(String, Bytes)>;

/// The field of a record line that holds its shard's digest.
const DIGEST_FIELD: &str = "s:";

/// The field of a record line that holds the digests of its shard's inner chunks (each made from
/// the source chunks that inner chunk covers), as zshard-convert writes them: an update then copies
/// the inner chunks whose digest is unchanged from the shard as it stands (see
/// [`reusable_inner_digests`]). Opaque here.
const INNER_FIELD: &str = "i:";

/// Per array, per shard (C-order index): the digest of what the shard is made from now; `None` for
/// an array whose source cannot name its chunks' versions (it is never brought up to date, only
/// converted again with `--overwrite`).
#[derive(Debug, Default, Clone)]
pub struct Digests {
    arrays: Vec<Option<Vec<u64>>>,
}

impl Digests {
    /// Per array (in the plan's order), the digest of each shard in C order, or `None`.
    pub fn new(arrays: Vec<Option<Vec<u64>>>) -> Digests {
        Digests { arrays }
    }

    /// The bytes these digests hold in memory: 8 per shard.
    pub fn memory_bytes(&self) -> u64 {
        let shards: usize = self.arrays.iter().flatten().map(Vec::capacity).sum();
        (shards * std::mem::size_of::<u64>()) as u64
    }

    /// The digest of shard `index` of array `array` now, when its source names versions.
    pub fn get(&self, array: usize, index: u64) -> Option<u64> {
        let digests = self.arrays.get(array)?.as_ref()?;
        digests.get(usize::try_from(index).ok()?).copied()
    }

    /// Whether every array's source names its chunks' versions (records are then kept).
    pub fn all_known(&self) -> bool {
        self.arrays.iter().all(Option::is_some)
    }
}

/// The record field for `digest` (16 hex digits).
pub(crate) fn digest_field(digest: u64) -> String {
    format!("{DIGEST_FIELD}{digest:016x}")
}

/// The record field for the inner chunks' digests `inner` (as zshard-convert encodes them).
pub(crate) fn inner_field(inner: &str) -> String {
    format!("{INNER_FIELD}{inner}")
}

/// The most positional fields a record line has that [`RecordFields`] holds (zshard writes five:
/// path, coordinate, size, crc32c, version); further ones are left out.
const MAX_FIELDS: usize = 8;

/// The positional fields of a record line, its digest fields left out (see [`split_digest`]):
/// held in place, without an allocation per line (an update reads each kept line several times,
/// and a million-shard array keeps a million lines).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordFields<'a> {
    fields: [&'a str; MAX_FIELDS],
    count: usize,
}

impl<'a> RecordFields<'a> {
    /// Positional field `i` (0: the array's path, 1: the shard's coordinate, ...).
    pub(crate) fn get(&self, i: usize) -> Option<&'a str> {
        self.fields[..self.count.min(MAX_FIELDS)].get(i).copied()
    }

    /// The positional fields in order (the first [`MAX_FIELDS`]).
    pub(crate) fn iter(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.fields[..self.count.min(MAX_FIELDS)].iter().copied()
    }
}

/// A record line's fields without its digest fields, and the shard's digest: the digests may stand
/// anywhere after the coordinate, so that the positional fields read as they always have.
pub(crate) fn split_digest(line: &str) -> (RecordFields<'_>, Option<u64>) {
    let mut digest = None;
    let mut fields = RecordFields {
        fields: [""; MAX_FIELDS],
        count: 0,
    };
    for field in line.split('\t') {
        if let Some(hex) = field.strip_prefix(DIGEST_FIELD) {
            digest = u64::from_str_radix(hex, 16).ok();
        } else if !field.starts_with(INNER_FIELD) {
            if let Some(slot) = fields.fields.get_mut(fields.count) {
                *slot = field;
            }
            fields.count += 1;
        }
    }
    (fields, digest)
}

/// The text of a record file (or manifest): as it stands when it is UTF-8, as zshard writes it
/// (checked at the speed of `str::from_utf8`, several times that of a lossy reading), else with
/// each invalid sequence replaced, so that the lines around it still read.
pub(crate) fn record_text(body: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(body) {
        Ok(text) => std::borrow::Cow::Borrowed(text),
        Err(_) => String::from_utf8_lossy(body),
    }
}

/// The inner chunks' digests field of a record line (its text after `i:`), if it has one.
fn inner_digests_of(line: &str) -> Option<&str> {
    line.split('\t')
        .skip(2)
        .find_map(|field| field.strip_prefix(INNER_FIELD))
}

/// Per array, the shards whose kept record was made from other source chunks than now (`digests`)
/// and names its inner chunks' digests, with that field's text (see [`INNER_FIELD`]): an update
/// may copy their unchanged inner chunks from the destination rather than convert them again.
/// Only shards whose bytes stand as recorded: a written shard listed now with its recorded size and
/// version (a record without a version copies nothing), or an all-fill shard with no object at its key (each of its
/// inner chunks then reads as empty; zshard-convert names no inner digests for those today). A
/// shard replaced since is converted whole.
pub fn reusable_inner_digests(
    survey: &Survey,
    plan: &Outputs,
    digests: &Digests,
) -> Vec<HashMap<u64, String>> {
    inner_digests_kept(survey, plan, digests, true)
}

/// [`reusable_inner_digests`] for a survey that did not list the shards
/// ([`survey_finished`]): every shard is taken to stand as recorded, for `zshard plan`'s estimate.
pub fn recorded_inner_digests(
    survey: &Survey,
    plan: &Outputs,
    digests: &Digests,
) -> Vec<HashMap<u64, String>> {
    inner_digests_kept(survey, plan, digests, false)
}

/// The kept inner chunks' digests of the shards to rewrite, of those that stand as recorded when
/// `listed` (else of all).
fn inner_digests_kept(
    survey: &Survey,
    plan: &Outputs,
    digests: &Digests,
    listed_only: bool,
) -> Vec<HashMap<u64, String>> {
    plan.arrays
        .iter()
        .enumerate()
        .map(|(i, array)| {
            let Some(body) = survey.records.get(&kept_key(array.path)) else {
                return HashMap::new();
            };
            let grid = array.geometry.shard_grid();
            let listed: HashMap<u64, (u64, u64)> = survey
                .shards
                .get(i)
                .map(|shards| {
                    shards
                        .iter()
                        .map(|s| (s.index, (s.size, s.version)))
                        .collect()
                })
                .unwrap_or_default();
            let mut reusable = HashMap::new();
            for line in record_text(body).lines() {
                let Some(inner) = inner_digests_of(line) else {
                    continue;
                };
                let (fields, recorded) = split_digest(line);
                let Some(index) = fields.get(1).and_then(|c| recorded_index(c, &grid)) else {
                    continue;
                };
                let now = digests.get(i, index);
                if recorded.is_none() || now.is_none() || recorded == now {
                    continue;
                }
                let recorded_size = fields.get(2).and_then(|s| s.parse::<u64>().ok());
                let recorded_version = fields.get(4).map(version_id);
                let stands = match (recorded_size, listed.get(&index)) {
                    (Some(size), Some(&(listed_size, listed_version))) => {
                        // Without a recorded version a shard rewritten since at the same size
                        // would look the same: nothing is copied from it.
                        size == listed_size && recorded_version == Some(listed_version)
                    }
                    (Some(_), None) => false,
                    (None, listed) => listed.is_none(),
                };
                if stands || !listed_only {
                    reusable.insert(index, inner.to_string());
                }
            }
            reusable
        })
        .collect()
}

/// The kept records of every array, merged from `files` (record files as (key, contents), the
/// kept files and this conversion's `done`/`empty` files, unsealed): per array, the latest record
/// of each shard inside its grid whose digest is the shard's digest now, as the text of the file
/// to keep. A later record file wins over an earlier one (their names order them by run); the kept
/// file is older than any.
pub(crate) fn kept_records(
    plan: &Outputs,
    digests: &Digests,
    files: &[(String, Bytes)],
    fingerprint: &Fingerprint,
) -> Vec<(String, Bytes)> {
    let mut ordered: Vec<&(String, Bytes)> = files.iter().collect();
    ordered.sort_by_key(|(key, _)| record_order(key));
    let arrays: HashMap<&str, usize> = plan
        .arrays
        .iter()
        .enumerate()
        .map(|(i, a)| (a.path.as_str(), i))
        .collect();
    let mut latest: Vec<HashMap<u64, String>> = vec![HashMap::new(); plan.arrays.len()];
    for (_, bytes) in ordered {
        for line in record_text(bytes).lines() {
            let (fields, digest) = split_digest(line);
            let (Some(path), Some(coord)) = (fields.get(0), fields.get(1)) else {
                continue;
            };
            let Some(&i) = arrays.get(path) else {
                continue;
            };
            let grid = plan.arrays[i].geometry.shard_grid();
            let Some(index) = recorded_index(coord, &grid) else {
                continue;
            };
            match (digest, digests.get(i, index)) {
                (Some(recorded), Some(now)) if recorded == now => {
                    latest[i].insert(index, line.to_string());
                }
                // A record made from another source than the one now: not kept.
                _ => {
                    latest[i].remove(&index);
                }
            }
        }
    }
    plan.arrays
        .iter()
        .zip(latest)
        .map(|(array, lines)| {
            let mut lines: Vec<(u64, String)> = lines.into_iter().collect();
            lines.sort_unstable_by_key(|(index, _)| *index);
            let mut text = format!("{CONVERSION_LINE}{:016x}\n", fingerprint.conversion_id());
            for (_, line) in lines {
                text.push_str(&line);
                text.push('\n');
            }
            (kept_key(array.path), sealed::seal_text(text))
        })
        .collect()
}

/// Where a record file stands among the others: kept files first, then `done`/`empty` files by run
/// (`<worker>-<run>-<seq>.txt`, the run a time in nanoseconds) and sequence.
fn record_order(key: &str) -> (u128, u64) {
    if key.ends_with(KEPT) {
        return (0, 0);
    }
    let name = key.rsplit('/').next().unwrap_or(key);
    let name = name.strip_suffix(".txt").unwrap_or(name);
    let mut parts = name.rsplitn(3, '-');
    let seq = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let run = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    (run, seq)
}

/// Whether every shard of the plan has a kept record (in `survey`) made from what its source
/// holds now: nothing to update.
pub(crate) fn up_to_date(survey: &Survey, plan: &Outputs, digests: &Digests) -> bool {
    plan.arrays.iter().enumerate().all(|(i, array)| {
        let Some(kept) = kept_shards(survey, array, |index| digests.get(i, index)) else {
            return false;
        };
        (0..array.geometry.shard_count()).all(|index| kept.current.holds(index))
    })
}

/// One bit per shard of an array's grid (C-order index); an index beyond the grid holds nothing.
struct ShardBits(fixedbitset::FixedBitSet);

impl ShardBits {
    fn holds(&self, index: u64) -> bool {
        usize::try_from(index).is_ok_and(|index| self.0.contains(index))
    }

    fn set(&mut self, index: u64, value: bool) {
        if let Ok(index) = usize::try_from(index) {
            if index < self.0.len() {
                self.0.set(index, value);
            }
        }
    }

    fn indexes(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.ones().map(|index| index as u64)
    }
}

/// The shards (C-order indices in its grid now) that the kept records of `array` (as the survey
/// read them) name, and those of them whose record (a later line for a shard wins) was made from
/// what their source holds now (`now`, a shard's digest now); `None` without kept records.
struct KeptShards {
    named: ShardBits,
    current: ShardBits,
}

/// See [`KeptShards`]. A bit per shard, not a table of the records: at 10^8 shards a hash table of
/// them took some 6 GB for a moment, the bits take 25 MB.
fn kept_shards(
    survey: &Survey,
    array: &OutputArray,
    now: impl Fn(u64) -> Option<u64>,
) -> Option<KeptShards> {
    let body = survey.records.get(&kept_key(array.path))?;
    let grid = array.geometry.shard_grid();
    let shards = usize::try_from(array.geometry.shard_count()).ok()?;
    let mut kept = KeptShards {
        named: ShardBits(fixedbitset::FixedBitSet::with_capacity(shards)),
        current: ShardBits(fixedbitset::FixedBitSet::with_capacity(shards)),
    };
    for line in record_text(body).lines() {
        let (fields, digest) = split_digest(line);
        if let Some(index) = fields.get(1).and_then(|c| recorded_index(c, &grid)) {
            kept.named.set(index, true);
            kept.current
                .set(index, digest.is_some() && digest == now(index));
        }
    }
    Some(kept)
}

/// Per array, the shards whose kept record (in `survey`) was made from what their source holds
/// now (`digests`), whether their bytes are listed beside it or not: for a destination that keeps
/// its shards elsewhere (an Icechunk repository's chunk storage), these are done.
pub fn kept_current(survey: &Survey, plan: &Outputs, digests: &Digests) -> Vec<HashSet<u64>> {
    plan.arrays
        .iter()
        .enumerate()
        .map(|(i, array)| {
            kept_shards(survey, array, |index| digests.get(i, index))
                .map(|kept| kept.current.indexes().collect())
                .unwrap_or_default()
        })
        .collect()
}

/// Whether the survey found kept records for an array of the plan (the destination was finished
/// by a zshard that keeps them, over a source that names versions; an array without them, new to
/// the hierarchy or whose file was damaged, has all its shards converted).
pub fn has_kept_records(survey: &Survey, plan: &Outputs) -> bool {
    plan.arrays
        .iter()
        .any(|array| survey.records.contains_key(&kept_key(array.path)))
}

/// The kept records of every array once this conversion is done (see [`kept_records`]): from
/// every `done` and `empty` record file of the destination, the kept files, and `last` (this run's
/// last record files, not yet written). A listing and a round of reads.
/// Two rounds on an object store: the listing of the state beside the read of the kept manifest,
/// then the reads of the record files written since the survey (`surveyed`, which read the others).
pub fn gather_kept(
    dst: &Store,
    plan: &Outputs,
    digests: &Digests,
    (surveyed, last): (&Survey, &[(String, Bytes)]),
    fingerprint: &Fingerprint,
) -> Result<Kept> {
    let is_record = |key: &str| in_dir(key, DONE_DIR) || in_dir(key, EMPTY_DIR);
    // What the survey read at the start (the record files of earlier runs, the kept records) is
    // not read again: only the files written since, this run's.
    let (listed, manifest) = dst.block_on(async {
        futures::join!(dst.list_sizes_async(STATE_DIR), dst.get_async(MANIFEST))
    });
    let records: Vec<String> = listed?
        .into_iter()
        .map(|(key, _)| key)
        .filter(|key| is_record(key) && !surveyed.records.contains_key(key))
        .filter(|key| !last.iter().any(|(k, _)| k == key))
        .collect();
    let records_read = dst.get_many(&records);
    let mut files: Vec<(String, Bytes)> = surveyed
        .records
        .iter()
        .filter(|(key, _)| is_record(key))
        .map(|(key, body)| (key.clone(), body.clone()))
        .collect();
    // A damaged file is left out: the shards it alone names are converted again next time.
    for (key, read) in records.into_iter().zip(records_read) {
        if let Some(body) = read?.as_ref().and_then(sealed::unseal) {
            files.push((key, body));
        }
    }
    let mut beyond = Vec::new();
    for array in &plan.arrays {
        let key = kept_key(array.path);
        // The survey kept only the records this conversion kept (see `kept_by`).
        if let Some(body) = surveyed.records.get(&key) {
            beyond.extend(beyond_extent(array, body));
            files.push((key, body.clone()));
        }
    }
    for (key, bytes) in last.iter().filter(|(key, _)| is_record(key)) {
        if let Some(body) = sealed::unseal(bytes) {
            files.push((key.clone(), body));
        }
    }
    Ok(Kept {
        files: kept_records(plan, digests, &files, fingerprint),
        beyond,
        manifest: manifest?,
    })
}

/// What a finished conversion keeps (see [`gather_kept`]).
#[derive(Debug, Default)]
pub struct Kept {
    /// The kept records of every array, to write.
    pub files: RecordFiles,
    /// The keys of the shards the kept records name beyond each array's extent now (the array
    /// shrank): zshard wrote them, and they go once the metadata no longer reaches them.
    pub beyond: Vec<String>,
    /// The manifest an earlier run kept (`--keep-manifest`), to bring up to date.
    pub manifest: Option<Bytes>,
}

/// The keys of the written shards that kept records (`body`) name outside their array's shard grid
/// now.
fn beyond_extent(array: &OutputArray, body: &[u8]) -> Vec<String> {
    let grid = array.geometry.shard_grid();
    let mut keys = Vec::new();
    for line in record_text(body).lines() {
        let (fields, _) = split_digest(line);
        let (Some(path), Some(coord), Some(_size)) = (fields.get(0), fields.get(1), fields.get(2))
        else {
            continue;
        };
        if path != array.path {
            continue;
        }
        let coord: Option<Vec<u64>> = coord.split(',').map(|c| c.parse().ok()).collect();
        match coord {
            Some(coord) if coord.len() == grid.len() && !inside(&coord, &grid) => {
                keys.push(join(array.path, &SHARD_KEYS.key(&coord)));
            }
            _ => {}
        }
    }
    keys
}

/// What a run brings up to date: of its shards not done, those the finished conversion had
/// (rewritten) and those it did not (added).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpdateCounts {
    /// Shards a finished conversion's kept records name.
    pub shards_rewritten: u64,
    /// Shards they do not name (the array grew, or is new).
    pub shards_added: u64,
    /// Written shards they name beyond the array's extent now (it shrank), which the run removes
    /// (a worker's run removes none: `finalize` does).
    pub shards_removed: u64,
}

/// Records that this worker's run is an update setting out to write `shards` shards (those the
/// kept records' sources changed for, and new ones), for `status` to show its progress: the first
/// run of the update records it, and a resumed run keeps that (create-only write). The write goes
/// out beside the run's first reads: its shards wait for it ([`WriteAhead::before`]), so that no
/// shard of an update is written before the record that counts it.
pub fn record_update(dst: &Store, partition: Partition, shards: u64) -> Result<WriteAhead> {
    let key = join(UPDATE_DIR, &format!("{}.txt", partition.tag()));
    WriteAhead::start_new(dst, &key, sealed::seal_text(format!("shards\t{shards}\n")))
}

/// The shards an update's file (see [`record_update`], unsealed) says it set out to write.
pub(crate) fn update_shards(body: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(body).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix("shards\t"))
        .and_then(|n| n.trim().parse().ok())
}

/// The written shards (array path, coordinate text) that kept records (as [`gather_kept`] makes
/// them) name: what a kept manifest may vouch for.
pub fn kept_written(kept: &[(String, Bytes)]) -> HashSet<(String, String)> {
    let mut written = HashSet::new();
    for (_, sealed_body) in kept {
        let Some(body) = sealed::unseal(sealed_body) else {
            continue;
        };
        for line in record_text(&body).lines() {
            let (fields, _) = split_digest(line);
            if let (Some(path), Some(coord), Some(_size)) =
                (fields.get(0), fields.get(1), fields.get(2))
            {
                written.insert((path.to_string(), coord.to_string()));
            }
        }
    }
    written
}

/// What this run brings up to date (see [`UpdateCounts`]): of this worker's shards not done, those
/// a finished conversion's kept records name (rewritten) and the others (added); `None` when the
/// destination kept no records (a first conversion, or a resumed one).
pub fn update_counts(
    survey: &Survey,
    plan: &Outputs,
    partition: Partition,
    done: &[HashSet<u64>],
) -> Option<UpdateCounts> {
    if !has_kept_records(survey, plan) {
        return None;
    }
    let mut update = UpdateCounts::default();
    let mut first_global = 0u64;
    for (i, array) in plan.arrays.iter().enumerate() {
        let kept = kept_shards(survey, array, |_| None);
        if partition == Partition::ALL {
            if let Some(body) = survey.records.get(&kept_key(array.path)) {
                update.shards_removed += beyond_extent(array, body).len() as u64;
            }
        }
        for index in 0..array.geometry.shard_count() {
            let owned = plan.owns(partition, i, index, first_global);
            if !owned || done.get(i).is_some_and(|d| d.contains(&index)) {
                continue;
            }
            match kept.as_ref().is_some_and(|kept| kept.named.holds(index)) {
                true => update.shards_rewritten += 1,
                false => update.shards_added += 1,
            }
        }
        first_global += array.geometry.shard_count();
    }
    Some(update)
}

/// What an update would do to one array (see [`shards_to_update`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArrayChanges {
    /// Shards (C-order indices) whose kept record was made from other source chunks.
    pub rewrite: Vec<u64>,
    /// Shards no kept record names (the array grew, or is new).
    pub add: Vec<u64>,
    /// Written shards the kept records name beyond the array's extent now (it shrank).
    pub remove: u64,
    /// The destination's `zarr.json` has another shape (or there is none).
    pub shape_changed: bool,
    /// The destination's `zarr.json` has other attributes (or there is none).
    pub attributes_changed: bool,
}

/// What a run would bring up to date in a finished conversion, array by array, from the
/// destination's `survey` (read without a claim) and the shards' `digests` now.
pub fn shards_to_update(survey: &Survey, plan: &Outputs, digests: &Digests) -> Vec<ArrayChanges> {
    plan.arrays
        .iter()
        .enumerate()
        .map(|(i, array)| {
            let kept = kept_shards(survey, array, |index| digests.get(i, index));
            let mut changes = ArrayChanges::default();
            if let Some(body) = survey.records.get(&kept_key(array.path)) {
                changes.remove = beyond_extent(array, body).len() as u64;
            }
            let found: Option<Value> = survey
                .zarr_json(array.path)
                .and_then(|bytes| serde_json::from_slice(bytes).ok());
            let ours = array.output.to_json();
            let differs = |field: &str| {
                found
                    .as_ref()
                    .is_none_or(|doc| doc.get(field) != ours.get(field))
            };
            changes.shape_changed = differs("shape");
            changes.attributes_changed = differs("attributes");
            for index in 0..array.geometry.shard_count() {
                let (named, current) = kept.as_ref().map_or((false, false), |kept| {
                    (kept.named.holds(index), kept.current.holds(index))
                });
                match (named, current) {
                    (true, true) => {}
                    (true, false) => changes.rewrite.push(index),
                    (false, _) => changes.add.push(index),
                }
            }
            changes
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_field_reads_anywhere_after_the_coordinate() {
        let line = "a\t0,1\t12\t0000abcd\tv1\ts:00000000000000ff";
        let (fields, digest) = split_digest(line);
        assert_eq!(
            fields.iter().collect::<Vec<_>>(),
            vec!["a", "0,1", "12", "0000abcd", "v1"]
        );
        assert_eq!(digest, Some(255));
        let (fields, digest) = split_digest("a\t0,1");
        assert_eq!((fields.iter().count(), digest), (2, None));
        // Past the most fields held: the first ones read, and nothing beyond.
        let line = "a\t0,1\t2\t3\ts:00000000000000ff\t4\t5\t6\t7\t8\t9";
        let (fields, digest) = split_digest(line);
        assert_eq!(
            fields.iter().collect::<Vec<_>>(),
            vec!["a", "0,1", "2", "3", "4", "5", "6", "7"]
        );
        assert_eq!(
            (fields.get(7), fields.get(8), digest),
            (Some("7"), None, Some(255))
        );
        // The inner chunks' digests are not a positional field either.
        let line = "a\t0,1\t12\t0000abcd\tv1\ts:00000000000000ff\ti:AAAAAAAAAAA";
        let (fields, digest) = split_digest(line);
        assert_eq!(
            fields.iter().collect::<Vec<_>>(),
            vec!["a", "0,1", "12", "0000abcd", "v1"]
        );
        assert_eq!(digest, Some(255));
        assert_eq!(inner_digests_of(line), Some("AAAAAAAAAAA"));
        assert_eq!(inner_digests_of("a\t0,1\t12"), None);
    }

    #[test]
    fn a_record_file_with_a_bad_byte_still_reads_its_other_lines() {
        let text = record_text(b"a\t0,1\t12\n\xff\xfe\na\t0,2\t13\n");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            (lines[0], lines[2], lines.len()),
            ("a\t0,1\t12", "a\t0,2\t13", 3)
        );
        // Text as zshard writes it is read in place.
        assert!(matches!(
            record_text(b"a\t0,1\t12\n"),
            std::borrow::Cow::Borrowed("a\t0,1\t12\n")
        ));
    }

    #[test]
    fn shard_bits_hold_the_last_value_set_of_each_shard() {
        let mut bits = ShardBits(fixedbitset::FixedBitSet::with_capacity(192));
        for index in [0, 63, 64, 130, 191] {
            bits.set(index, true);
        }
        // A later record of a shard wins, as a later line did in the table of them.
        bits.set(64, false);
        // Outside the grid: neither held nor set.
        bits.set(192, true);
        assert_eq!(bits.indexes().collect::<Vec<_>>(), vec![0, 63, 130, 191]);
        assert!(bits.holds(130) && !bits.holds(64) && !bits.holds(192));
    }

    #[test]
    fn record_files_order_by_run_then_sequence_with_kept_files_first() {
        let mut keys = [
            ".zshard/done/w0of1-20-1.txt",
            "arr/.zshard-records",
            ".zshard/empty/w0of1-10-7.txt",
            ".zshard/done/w0of1-20-0.txt",
        ];
        keys.sort_by_key(|k| record_order(k));
        assert_eq!(
            keys,
            [
                "arr/.zshard-records",
                ".zshard/empty/w0of1-10-7.txt",
                ".zshard/done/w0of1-20-0.txt",
                ".zshard/done/w0of1-20-1.txt",
            ]
        );
    }
}
