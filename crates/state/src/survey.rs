//! What the destination holds around a conversion, read side by side (the listing of the state
//! folder and of every array's shards, the metadata documents, the record files), and the keys
//! and coordinates of shards as listings name them.

use super::*;

/// What the destination holds around this conversion, read side by side: one listing of the state
/// folder, one of each array's shards and the metadata documents at the root and at every node of
/// the plan in one round, and every record file (options, done, empty) as soon as the state
/// folder's listing is in, beside the shard listings. Nothing here depends on another response of
/// the same round.
#[derive(Debug, Default)]
pub struct Survey {
    /// Every key below the state folder.
    pub(super) state: Vec<String>,
    /// The v2 `.zarray`/`.zgroup` and v3 `zarr.json` documents at the root and at the plan's nodes,
    /// by key (`None`: no such object).
    pub(super) documents: HashMap<String, Option<Bytes>>,
    /// Per array of the plan, the objects at its shard keys, in key order.
    pub(super) shards: Vec<Vec<ListedShard>>,
    /// The contents of the claim and of the record files (options, done, empty) that were still
    /// there when read, and of the records a finished conversion kept (by [`kept_key`]).
    pub(super) records: HashMap<String, Bytes>,
}

impl Survey {
    /// The bytes this survey holds in memory, about (for the run's memory budget: it is kept until
    /// the last shard is recorded). Mostly the record files read, whose size follows the shard count
    /// (and, with the inner chunks' digests, the inner chunk count) and the listed shards.
    pub fn memory_bytes(&self) -> u64 {
        let records: usize = self.records.iter().map(|(k, v)| k.len() + v.len()).sum();
        let documents: usize = self
            .documents
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Bytes::len))
            .sum();
        let shards: usize = self
            .shards
            .iter()
            .map(|s| s.capacity() * std::mem::size_of::<ListedShard>())
            .sum();
        let state: usize = self.state.iter().map(String::len).sum();
        (records + documents + shards + state) as u64
    }
}

/// What a finished conversion left for the next run to compare with: the metadata documents and
/// the kept records only (one round of reads: no listing of the state or of the shards), for
/// `zshard plan` to say what an update would do (see [`survey`] for the rest).
pub fn survey_finished(dst: &Store, plan: &Outputs, fingerprint: &Fingerprint) -> Result<Survey> {
    let documents = document_keys(plan);
    let kept: Vec<String> = plan.arrays.iter().map(|a| kept_key(a.path)).collect();
    let (read, kept_read) = dst.block_on(async {
        futures::join!(dst.get_many_async(&documents), dst.get_many_async(&kept))
    });
    let mut survey = Survey::default();
    for (key, found) in documents.into_iter().zip(read) {
        survey.documents.insert(key, found?);
    }
    for (key, found) in kept.into_iter().zip(kept_read) {
        if let Some(body) = found?.as_ref().and_then(sealed::unseal) {
            if kept_by(&body, fingerprint) {
                survey.records.insert(key, body);
            }
        }
    }
    Ok(survey)
}

/// Reads what [`Survey`] holds; the claim's contents only `with_claim` (a run that just claimed
/// knows them). The record files are read as soon as the state folder is listed, while the shard
/// listings (a thousand pages at a million shards) go on.
///
/// Records kept by a finished conversion count only when it was this one (`fingerprint`, but for
/// the source's shape and attributes).
pub fn survey(
    dst: &Store,
    plan: &Outputs,
    with_claim: bool,
    fingerprint: &Fingerprint,
) -> Result<Survey> {
    let documents = document_keys(plan);
    let kept: Vec<String> = plan.arrays.iter().map(|a| kept_key(a.path)).collect();
    let (state, read, shards, kept_read) = dst.block_on(async {
        let shards = plan.arrays.iter().map(|array| {
            let grid = array.geometry.shard_grid();
            async move { shard_keys(dst, array.path, &grid).await }
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
        futures::join!(
            state,
            dst.get_many_async(&documents),
            shards,
            dst.get_many_async(&kept)
        )
    });
    let (state, mut records) = state?;
    // The records a finished conversion kept in each array's folder (see `made_from.rs`).
    for (key, read) in kept.into_iter().zip(kept_read) {
        let Some(bytes) = read? else { continue };
        match sealed::unseal(&bytes) {
            Some(body) if kept_by(&body, fingerprint) => {
                records.insert(key, body);
            }
            Some(_) => {}
            None => tracing::warn!(
                "{}: the kept records' checksum does not match; the array's shards will be converted again",
                dst.url(&key)
            ),
        }
    }
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
pub(super) async fn read_records(
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
pub(super) fn uncheckpointed(key: &str, listed: &HashSet<&str>) -> bool {
    key.strip_prefix(MANIFEST_DIR)
        .and_then(|rest| rest.strip_prefix('/'))
        .is_some_and(|name| !listed.contains(join(DONE_DIR, name).as_str()))
}

/// The metadata documents whose presence decides what the destination holds: v2 `.zarray` and
/// `.zgroup` and v3 `zarr.json` at the root and at every node of the plan, each once.
pub(super) fn document_keys(plan: &Outputs) -> Vec<String> {
    let paths = std::iter::once("")
        .chain(plan.arrays.iter().map(|a| a.path.as_str()))
        .chain(plan.groups.iter().map(|p| p.as_str()));
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

/// A version (ETag) as compared between a record and a listing: a hash of it without the quotes
/// and weak marker that some stores add in one place and not the other (Azure lists ETags bare and
/// sends them quoted), so that a million of them take 8 bytes each.
pub(super) fn version_id(version: &str) -> u64 {
    zshard_core::version_hash(version)
}

/// An object at one of an array's shard keys, as a listing names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ListedShard {
    /// The shard's C-order index in its array's shard grid.
    pub(super) index: u64,
    pub(super) size: u64,
    /// Its version (see [`version_id`]).
    pub(super) version: u64,
}

/// The key of the shard of C-order index `index` in `grid` of the array at `array_path`.
pub(super) fn shard_key(array_path: &str, index: u64, grid: &[u64]) -> String {
    join(
        array_path,
        &SHARD_KEYS.key(&zshard_core::unravel_index(index, grid)),
    )
}

/// How the shards of every output array are keyed (the writer's encoding).
pub(super) const SHARD_KEYS: ChunkKeyEncoding = zshard_writer::OUTPUT_KEY_ENCODING;

/// The objects of the array at `array_path` that are shards of `grid`, in C order of their
/// indexes, each once.
///
/// The listing is visited page by page into the 24-byte entries: its keys and versions (some 150
/// bytes a shard) are never held all at once, which at 10^8 shards would be some 15 GB.
pub(super) async fn shard_keys(
    dst: &Store,
    array_path: &str,
    grid: &[u64],
) -> Result<Vec<ListedShard>> {
    let folder = join(array_path, SHARD_KEYS.chunk_folder());
    let mut shards: Vec<ListedShard> = Vec::new();
    dst.visit_objects_split_async(&folder, &listing_splits(array_path, grid), &mut |visit| {
        match visit {
            Visit::Object(object) => {
                if let Some(coord) = shard_coord(array_path, &object.key, grid) {
                    shards.push(ListedShard {
                        index: linear_index(&coord, grid),
                        size: object.size,
                        version: version_id(&object.version),
                    });
                }
            }
            Visit::StartOver => shards.clear(),
        }
    })
    .await?;
    shards.sort_unstable_by_key(|shard| shard.index);
    // A key names one shard: two entries of one index would be one object listed twice.
    shards.dedup_by_key(|shard| shard.index);
    // The table is kept for the whole run: not the spare half its growth may have left.
    shards.shrink_to_fit();
    Ok(shards)
}

/// The coordinate in `grid` of the shard that `key` (relative to the destination) names for the
/// array at `array_path`; `None` for any other key.
pub(super) fn shard_coord(array_path: &str, key: &str, grid: &[u64]) -> Option<Vec<u64>> {
    let relative = match array_path {
        "" => key,
        path => key.strip_prefix(path)?.strip_prefix('/')?,
    };
    SHARD_KEYS
        .coordinates(relative, grid.len())
        .filter(|coord| inside(coord, grid))
}

/// The C-order index in `grid` of the shard a record line's coordinate (`i,j,...`, as
/// [`ShardLog::record`] writes it) names, when it is inside the grid; without a vector per line
/// (an update reads each kept line several times).
pub(super) fn recorded_index(text: &str, grid: &[u64]) -> Option<u64> {
    let mut parts = (!text.is_empty())
        .then(|| text.split(','))
        .into_iter()
        .flatten();
    let mut index = 0u64;
    for &extent in grid {
        let c: u64 = parts.next()?.parse().ok()?;
        if c >= extent {
            return None;
        }
        index = index * extent + c;
    }
    parts.next().is_none().then_some(index)
}

pub(super) fn inside(coord: &[u64], grid: &[u64]) -> bool {
    coord.iter().zip(grid).all(|(c, g)| c < g)
}

/// The keys where the listing of an array's shards is cut so that its pages are fetched side by
/// side: the shard keys' own cuts ([`ChunkKeyEncoding::listing_splits`], about a page each, sorted
/// as the store sorts keys), under the array's folder.
pub(super) fn listing_splits(array_path: &str, grid: &[u64]) -> Vec<String> {
    SHARD_KEYS
        .listing_splits(grid)
        .iter()
        .map(|key| join(array_path, key))
        .collect()
}
