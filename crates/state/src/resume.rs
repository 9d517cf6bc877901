//! What an earlier run left done: the verdict on each listed shard from the records (size,
//! version, crc32c) and the reads that prove a shard whose records do not.

use super::*;

/// What an earlier run of this conversion left in the destination.
#[derive(Debug, Default)]
pub struct Resume {
    /// Shards done, per array, as C-order shard indices: listed shards that a record names with
    /// their listed size, and recorded all-fill shards that have no object.
    pub done: Vec<HashSet<u64>>,
    /// This worker's shards whose key holds an object not proven ours (no record, or another size):
    /// a shard whose record a kill lost, junk, a truncated copy. They are converted again, which
    /// replaces the object; one that turns out to hold only the fill value must have it removed.
    /// Keyed by (array, C-order shard index).
    pub untrusted: HashMap<(usize, u64), String>,
}

impl Resume {
    /// The bytes this holds in memory, about (for the run's memory budget: it is kept until the
    /// last shard is recorded): the done sets' hash tables, about 9 to 18 bytes per done shard
    /// (an update that rewrites few shards of a million holds a million done), and the untrusted
    /// shards' keys.
    pub fn memory_bytes(&self) -> u64 {
        let done: u64 = self
            .done
            .iter()
            .map(|set| zshard_core::hash_table_bytes(set.capacity(), std::mem::size_of::<u64>()))
            .sum();
        let entry = std::mem::size_of::<((usize, u64), String)>();
        let keys: usize = self.untrusted.values().map(String::capacity).sum();
        done.saturating_add(zshard_core::hash_table_bytes(
            self.untrusted.capacity(),
            entry,
        ))
        .saturating_add(keys as u64)
    }
}

/// What is done (see [`Resume`]), from the survey's listing of each array's shards and zshard's
/// records (no request per shard). Leftover temporary files of interrupted local writes of
/// `partition`'s shards are removed, unless a run other than the one holding the lease `own_lease`
/// is live: they may be its writes in progress. (Object stores have no such files, so their leases
/// are not read here.)
///
/// A record counts only while what it says its shard was made from is what the shard's source
/// chunks are now (`digests`, see `made_from.rs`): a shard whose source changed is not done.
pub fn done_shards(
    dst: &Store,
    plan: &Outputs,
    partition: Partition,
    own_lease: &str,
    survey: &Survey,
    digests: &Digests,
) -> Result<Resume> {
    let local = dst.local_path("").is_some();
    let alone = local && !crate::lease::another_run_is_live(dst, own_lease)?;
    let written = records(survey, plan, DONE_DIR, digests);
    let mut resume = Resume {
        done: vec![HashSet::new(); plan.arrays.len()],
        untrusted: HashMap::new(),
    };
    for (i, index) in records(survey, plan, EMPTY_DIR, digests).shards() {
        resume.done[i].insert(index);
    }
    // A recorded size proves the object was ours once. The version the store gave it when it was
    // written (its ETag), recorded beside, proves it is still that object when the listing names the
    // same one: no request per shard. Without a recorded version (records of earlier versions), the
    // shard index is read (a few bytes per shard this worker owns) to prove the object was not
    // replaced since by bytes of the same length; on local disk when the version differs (written
    // again, or a destination copied elsewhere with other inodes), the whole object is read as a
    // stream and checked against its recorded crc32c as well. On an object store a read per shard is what a
    // resume must not cost (a million shards at 20 ms): a shard whose listed version differs from
    // the recorded one is converted again, and one recorded without a version is trusted by its size.
    let check_indexes = dst.location().is_local();
    // Shards written since the last checkpoint of a run that stopped (their manifest records, but
    // no `done` record): on local disk their bytes may not have reached the disk, so each one is
    // read as a stream and trusted only when its crc32c is the manifest's. (On an object store such a
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
            let owned = plan.owns(partition, i, index, first_global);
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
                let key = || shard_key(array.path, index, &grid);
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
            let owned = plan.owns(partition, i, index, first_global);
            // The key is made only for the shards whose proof needed a read, or that are not done.
            let key = || shard_key(array.path, index, &grid);
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
            remove_staged_leftovers(dst, array.path, &grid, |index| {
                plan.owns(partition, i, index, first_global)
            })?;
        }
        first_global += array.geometry.shard_count();
    }
    Ok(resume)
}

/// What the records say of a listed shard, before any read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
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
pub(super) fn verdict<'a>(
    records: impl Iterator<Item = &'a RecordedShard>,
    shard: &ListedShard,
) -> Verdict {
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
pub(super) fn intact_indexes(
    dst: &Store,
    plan: &Outputs,
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
pub(super) fn uncheckpointed_entries(
    survey: &Survey,
    plan: &Outputs,
) -> HashMap<(usize, u64, u64), u32> {
    let files: Vec<(String, Bytes)> = survey
        .records
        .iter()
        .filter(|(key, _)| in_dir(key, MANIFEST_DIR))
        .map(|(key, bytes)| (key.clone(), bytes.clone()))
        .collect();
    let mut found = HashMap::new();
    for ((path, coord), entry) in crate::manifest::merge(&files) {
        let Some(i) = plan.arrays.iter().position(|a| *a.path == path) else {
            continue;
        };
        let grid = plan.arrays[i].geometry.shard_grid();
        if let Some(index) = recorded_index(&coord, &grid) {
            found.insert((i, index, entry.size), entry.crc32c);
        }
    }
    found
}

/// What one record line says of a shard: its size and the version the store gave it (see
/// [`version_id`]), each when the line has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RecordedShard {
    pub(super) size: Option<u64>,
    /// The crc32c of the object as written (records of early versions have none).
    pub(super) crc32c: Option<u32>,
    pub(super) version: Option<u64>,
}

/// Recorded shards: (array, C-order shard index) to what each record of it says. Most shards have
/// one record (a million of them: a map of records, not of lists of them, takes a third of the
/// memory); the second and later records of a shard, written again by a later run, go aside.
#[derive(Debug, Default)]
pub(super) struct Recorded {
    pub(super) first: HashMap<(usize, u64), RecordedShard>,
    pub(super) more: HashMap<(usize, u64), Vec<RecordedShard>>,
}

impl Recorded {
    pub(super) fn insert(&mut self, shard: (usize, u64), record: RecordedShard) {
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
    pub(super) fn of(&self, array: usize, index: u64) -> impl Iterator<Item = &RecordedShard> {
        let shard = (array, index);
        self.first
            .get(&shard)
            .into_iter()
            .chain(self.more.get(&shard).into_iter().flatten())
    }

    /// The shards recorded, (array, C-order index), each once.
    pub(super) fn shards(self) -> impl Iterator<Item = (usize, u64)> {
        self.first.into_keys()
    }
}

/// The shards that the record files under `dir` (as read by the survey) name, with the kept
/// records of a finished conversion (see `made_from.rs`: its written shards for [`DONE_DIR`], its
/// all-fill ones for [`EMPTY_DIR`]): (array, C-order shard index) to the sizes and versions
/// recorded (`None` in records without them). Lines of other arrays or grids are ignored, and so
/// are records made from other source chunks than `digests` says the shard's are now.
pub(super) fn records(survey: &Survey, plan: &Outputs, dir: &str, digests: &Digests) -> Recorded {
    let mut found = Recorded::default();
    // A record is believed only from the worker that owns its shard (the file's name says which):
    // a line another worker's file names was damaged, and must not make the owner skip it. Kept
    // records are the whole conversion's.
    let files = survey.records.iter().filter_map(|(key, bytes)| {
        if key.ends_with(KEPT) {
            return Some((Partition::ALL, bytes, true));
        }
        in_dir(key, dir).then_some(())?;
        Some((Partition::of_file(key)?, bytes, false))
    });
    let kept_kind = |written: bool| (dir == DONE_DIR) == written;
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
    for (writer, bytes, kept) in files {
        for line in record_text(bytes).lines() {
            let (fields, digest) = split_digest(line);
            let mut fields = fields.iter();
            let (Some(path), Some(coord)) = (fields.next(), fields.next()) else {
                continue;
            };
            let size = match fields.next().map(str::parse::<u64>) {
                None => None,
                Some(Ok(size)) => Some(size),
                Some(Err(_)) => continue,
            };
            // A kept file holds both kinds: written shards' lines have a size.
            if kept && !kept_kind(size.is_some()) {
                continue;
            }
            // The object's crc32c, then its version.
            let crc32c = fields
                .next()
                .and_then(|crc| u32::from_str_radix(crc, 16).ok());
            let version = fields.next().map(version_id);
            let Some((i, grid, first)) = arrays.get(path) else {
                continue;
            };
            if let Some(index) = recorded_index(coord, grid) {
                if !plan.owns(writer, *i, index, *first) {
                    continue;
                }
                if let (Some(recorded), Some(now)) = (digest, digests.get(*i, index)) {
                    if recorded != now {
                        continue;
                    }
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

/// Removes the staged files of interrupted local writes (see [`Store::staged_keys`]) of the shards
/// of the array at `array_path` that `owned` selects. (An interrupted upload to an object store is
/// never visible at all.)
pub(super) fn remove_staged_leftovers(
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
