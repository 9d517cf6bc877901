//! What each shard of a conversion is made from now (issue 40): a digest of the shard's region
//! (clipped to the array, so a grown or shrunk array changes its edge shards) and of the version
//! that one listing of the source gives each source chunk it covers
//! ([`zshard_core::ChunkReader::chunk_versions`]). Made here, where the source is known; the
//! destination protocol (`zshard_state`, its `made_from` module) records them with each shard and
//! compares them with what a finished conversion kept.

use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use base64::Engine;
use bytes::Bytes;
use zshard_core::{stable_hash, ChunkVersions, KnownVersions, Region, VersionsFrom};
use zshard_pipeline::{ArrayJob, ArrayLayout};
use zshard_state::Digests;
use zshard_store::Store;

use crate::error::{Error, Result};

/// Whether every array's source names its chunks' versions: a conversion's records then say what
/// each shard was made from, and a finished one is brought up to date by a rerun. A pyramid's lower
/// level is made from level 0, and follows the versions of level 0's source (see [`below`]).
pub(crate) fn tracked(jobs: &[ArrayJob]) -> bool {
    jobs.iter()
        .all(|job| job.derived.is_some() || job.reader.names_versions())
}

/// For a pyramid's lower level `job`: the level-0 job (its index in `jobs`) it is made from, and
/// per dimension how many of level 0's elements one of its elements stands for.
fn below(jobs: &[ArrayJob], job: &ArrayJob) -> Option<(usize, Vec<u64>)> {
    let mut factors = vec![1u64; job.layout.geometry.array_shape().len()];
    let (mut current, mut root) = (job, None);
    // At most one step per level: a cycle (none is planned) ends the walk rather than loops.
    for _ in 0..=jobs.len() {
        let Some(derived) = &current.derived else {
            return root.map(|root| (root, factors));
        };
        for (f, d) in factors.iter_mut().zip(&derived.factors) {
            *f = f.saturating_mul(*d);
        }
        root = Some(derived.from);
        current = jobs.get(derived.from)?;
    }
    None
}

/// What one listing of the sources of a plan's arrays says: each shard's digest, and the versions
/// themselves, from which the digests of a shard's inner chunks are made as it is recorded (see
/// [`inner_digests`]).
#[derive(Debug)]
pub(crate) struct Listed {
    pub(crate) digests: Digests,
    /// Per array, its source chunks' versions; `None` when its source names none.
    pub(crate) versions: Vec<Option<Arc<ChunkVersions>>>,
    /// The versions to keep for the next run (key in the destination, contents; see
    /// [`KnownVersions`]): of the arrays whose source has a version as a whole (an Icechunk
    /// snapshot) other than the one kept.
    pub(crate) keep: Vec<(String, Bytes)>,
    /// How each array's versions were found, for arrays whose source has a version as a whole.
    pub(crate) found: Vec<Option<VersionsFrom>>,
}

impl Listed {
    /// What to tell the user of how the versions were found: the arrays whose kept versions could
    /// not be brought forward, and why.
    pub(crate) fn warnings(&self, paths: &[String]) -> Vec<String> {
        self.found
            .iter()
            .zip(paths)
            .filter_map(|(found, path)| match found {
                Some(VersionsFrom::Listed { why: Some(why) }) => Some(format!(
                    "array {}: every chunk's version listed again, not from what changed since the last run: {why}",
                    if path.is_empty() { "/" } else { path }
                )),
                _ => None,
            })
            .collect()
    }
}

impl Listed {
    /// The bytes this listing holds in memory (for the run's memory budget: it is kept until the
    /// last shard is recorded): the versions, 16 bytes per source chunk, and 8 per shard, and the
    /// versions to keep (as many again, for a source with a version as a whole).
    pub(crate) fn memory_bytes(&self) -> u64 {
        let versions: u64 = self
            .versions
            .iter()
            .flatten()
            .map(|v| v.memory_bytes())
            .sum();
        let keep: u64 = self.keep.iter().map(|(_, bytes)| bytes.len() as u64).sum();
        versions
            .saturating_add(self.digests.memory_bytes())
            .saturating_add(keep)
    }
}

/// The digests of every shard of `jobs` (one per array of the plan), with the versions: one
/// listing of each array's source chunks (or its references), no chunk read; the versions of the
/// arrays `already` listed (one per job; `None` for those to list here) are taken as they are, so
/// that a plan lists each source once.
pub(crate) fn listed_with(
    jobs: &[ArrayJob],
    already: Vec<Option<ChunkVersions>>,
) -> Result<Listed> {
    let versions = jobs
        .iter()
        .zip(already.into_iter().chain(std::iter::repeat_with(|| None)))
        .map(|(job, already)| {
            let versions = match already {
                Some(versions) => Some(versions),
                None => job.reader.chunk_versions(&job.layout.source_chunk_grid())?,
            };
            Ok(versions)
        })
        .collect::<Result<Vec<_>>>()?;
    let found = vec![None; jobs.len()];
    made(jobs, versions, found, Vec::new())
}

/// Which source versions files of a destination describe the arrays of this conversion (see
/// [`listed_since`]).
#[derive(Debug, Clone)]
pub(crate) struct KeptSources {
    /// Per job, the array's path in the destination (its versions file is there).
    pub(crate) paths: Vec<String>,
    /// The source as the conversion records it (a local path absolute): a file kept for another
    /// is not this source's.
    pub(crate) location: String,
    /// Per job, the path in the source the array is read from.
    pub(crate) arrays: Vec<String>,
    /// The files are not read (`--overwrite`: what an earlier conversion kept is replaced, and a
    /// run at the same snapshot keeps its own rather than none).
    pub(crate) ignored: bool,
}

/// [`listed_with`] for a run into `destination`, where an earlier run kept the versions it listed of
/// the arrays whose source has a version as a whole (at [`zshard_state::source_versions_key`] of
/// each array's path in `kept`): those are brought forward from what the source says changed
/// since (Icechunk's diff), or taken as they are when its version is the same, rather than listed.
/// A file that names another source or array than the one the job reads (see
/// [`KnownVersions::describe`]) is ignored as a missing one is: the array is listed whole.
pub(crate) fn listed_since(
    jobs: &[ArrayJob],
    destination: &Store,
    kept: &KeptSources,
) -> Result<Listed> {
    let versioned: Vec<Option<String>> = jobs.iter().map(|j| j.reader.source_version()).collect();
    let keys: Vec<String> = kept
        .paths
        .iter()
        .map(|path| zshard_state::source_versions_key(path))
        .collect();
    let known = kept_versions(jobs, destination, kept);
    let mut versions = Vec::with_capacity(jobs.len());
    let mut found = Vec::with_capacity(jobs.len());
    let mut keep = Vec::new();
    let arrays = kept.arrays.iter();
    for ((((job, version), known), key), array) in jobs
        .iter()
        .zip(&versioned)
        .zip(&known)
        .zip(&keys)
        .zip(arrays)
    {
        let grid = job.layout.source_chunk_grid();
        let Some(version) = version else {
            versions.push(job.reader.chunk_versions(&grid)?);
            found.push(None);
            continue;
        };
        let (listed, how) = job.reader.chunk_versions_since(&grid, known.as_ref())?;
        if let (Some(listed), false) = (&listed, how == VersionsFrom::Unchanged) {
            let kept = KnownVersions {
                location: kept.location.clone(),
                array: array.clone(),
                source_version: version.clone(),
                versions: listed.clone(),
            };
            keep.push((key.clone(), kept.to_bytes()));
        }
        versions.push(listed);
        found.push(Some(how));
    }
    made(jobs, versions, found, keep)
}

/// Per job, the versions an earlier run kept in `destination` for its array (see
/// [`listed_since`]): of the arrays whose source has a version as a whole, those whose file is
/// there, intact, and names this source and array. One round of reads; none when `kept` says
/// they are ignored.
pub(crate) fn kept_versions(
    jobs: &[ArrayJob],
    destination: &Store,
    kept: &KeptSources,
) -> Vec<Option<KnownVersions>> {
    let versioned: Vec<bool> = jobs
        .iter()
        .map(|j| !kept.ignored && j.reader.source_version().is_some())
        .collect();
    let wanted: Vec<String> = kept
        .paths
        .iter()
        .zip(&versioned)
        .filter(|(_, versioned)| **versioned)
        .map(|(path, _)| zshard_state::source_versions_key(path))
        .collect();
    // A file that is missing or damaged is listed again.
    let mut read = destination.get_many(&wanted).into_iter();
    versioned
        .iter()
        .zip(&kept.arrays)
        .map(|(versioned, array)| {
            if !versioned {
                return None;
            }
            let body = read.next()?.ok()??;
            KnownVersions::from_bytes(&body).filter(|known| known.describe(&kept.location, array))
        })
        .collect()
}

/// The digests of `jobs` from their source chunks' `versions`.
fn made(
    jobs: &[ArrayJob],
    versions: Vec<Option<ChunkVersions>>,
    found: Vec<Option<VersionsFrom>>,
    keep: Vec<(String, Bytes)>,
) -> Result<Listed> {
    let versions: Vec<Option<Arc<ChunkVersions>>> =
        versions.into_iter().map(|v| v.map(Arc::new)).collect();
    let digests = jobs
        .iter()
        .zip(&versions)
        .map(|(job, own)| match (own, below(jobs, job)) {
            (Some(own), _) => Some(array_digests(job, own, None)),
            (None, Some((root, factors))) => {
                let level0 = versions_of(&versions, root)?;
                Some(array_digests(
                    job,
                    level0,
                    Some((jobs.get(root)?, &factors)),
                ))
            }
            (None, None) => None,
        })
        .collect();
    Ok(Listed {
        digests: Digests::new(digests),
        versions,
        keep,
        found,
    })
}

/// The versions listed for job `index` of `versions`, when they were.
fn versions_of(versions: &[Option<Arc<ChunkVersions>>], index: usize) -> Option<&ChunkVersions> {
    versions.get(index)?.as_deref()
}

/// The digest of every shard of `job`'s array, in C order. For a pyramid's lower level, `below`
/// names the level-0 job and the factors (see [`below`]): a shard's digest is then made of its own
/// region and of the versions of level 0's source chunks under it.
fn array_digests(
    job: &ArrayJob,
    versions: &ChunkVersions,
    below: Option<(&ArrayJob, &[u64])>,
) -> Vec<u64> {
    let geometry = &job.layout.geometry;
    let grid = geometry.shard_grid();
    let array = geometry.array_region();
    (0..zshard_core::product(&grid))
        .map(|index| {
            let shard = zshard_core::unravel_index(index, &grid);
            let region = geometry.shard_region(&shard).intersect(&array);
            match below {
                None => region_digest(&job.layout, versions, region),
                Some((root, factors)) => {
                    let root_array = root.layout.geometry.array_region();
                    let under = region.as_ref().and_then(|r| {
                        let scaled = |v: &[u64]| {
                            v.iter()
                                .zip(factors)
                                .map(|(v, f)| v.saturating_mul(*f))
                                .collect()
                        };
                        Region {
                            start: scaled(&r.start),
                            shape: scaled(&r.shape),
                        }
                        .intersect(&root_array)
                    });
                    // The element that no mean, min or max counts (from the source's attributes,
                    // which an update may change while level 0's data stays).
                    let masked = job.derived.as_ref().and_then(|d| d.masked.as_deref());
                    let salt = masked.map_or_else(Vec::new, |m| [b"masked:", m].concat());
                    covered_digest(
                        region.as_ref(),
                        &root.layout,
                        versions,
                        (under.as_ref(), &salt),
                    )
                }
            }
        })
        .collect()
}

/// The digest of each inner chunk of `shard` of `job`'s array (C order within the shard), made as
/// a shard's is: from its region clipped to the array and the versions of the source chunks that
/// region covers. An update copies an inner chunk whose digest is the one recorded (see
/// `reuse.rs`).
pub(crate) fn inner_digests(
    layout: &ArrayLayout,
    versions: &ChunkVersions,
    shard: &[u64],
) -> Vec<u64> {
    let geometry = &layout.geometry;
    let array = geometry.array_region();
    (0..zshard_core::product(&geometry.chunks_per_shard()))
        .map(|inner| {
            let region = geometry.inner_region(shard, inner).intersect(&array);
            region_digest(layout, versions, region)
        })
        .collect()
}

/// The digest of `region` (`None`: outside the array) of `job`'s array: its corner and shape, and
/// each source chunk it covers with that chunk's version.
fn region_digest(layout: &ArrayLayout, versions: &ChunkVersions, region: Option<Region>) -> u64 {
    covered_digest(region.as_ref(), layout, versions, (region.as_ref(), &[]))
}

/// The digest of `region` (`None`: outside the array), made from the source chunks of `layout`
/// that `covered` overlaps (the region itself, or for a pyramid's lower level the region of level 0
/// under it), each with its version, and `salt` (what else a lower level's values follow; empty
/// for level 0 and single arrays, whose digests stay as records made before name them).
fn covered_digest(
    region: Option<&Region>,
    layout: &ArrayLayout,
    versions: &ChunkVersions,
    (covered, salt): (Option<&Region>, &[u8]),
) -> u64 {
    let mut bytes: Vec<u8> = Vec::new();
    let (Some(region), Some(covered)) = (region, covered) else {
        return stable_hash(&bytes);
    };
    for n in region.start.iter().chain(&region.shape) {
        bytes.extend_from_slice(&n.to_le_bytes());
    }
    bytes.extend_from_slice(salt);
    // Level 0's region under a lower level's: it grows at the array's end when level 0 grows by
    // an odd extent (the last element then stands for one more), while the level's region stays.
    if covered != region {
        for n in covered.start.iter().chain(&covered.shape) {
            bytes.extend_from_slice(&n.to_le_bytes());
        }
    }
    for coord in layout.source_chunks_overlapping(covered) {
        for c in &coord {
            bytes.extend_from_slice(&c.to_le_bytes());
        }
        // Not stored: a marker no version's hash is likely to equal.
        let version = versions.of(&coord).unwrap_or(u64::MAX);
        bytes.extend_from_slice(&version.to_le_bytes());
    }
    stable_hash(&bytes)
}

/// Inner chunks a shard has at most for its record to name their digests: a line of 11 characters
/// an inner chunk stays under 180 KB.
const MAX_INNER_DIGESTS: u64 = 1 << 14;

/// Raw bytes an inner chunk has at least for records to name its digest (11 characters): smaller
/// ones (one-element chunks) are converted whole, as before, rather than recorded one by one.
const MIN_INNER_CHUNK_BYTES: u64 = 32;

/// Whether the records of `layout`'s shards name their inner chunks' digests (see
/// [`inner_digests`]): not for shards of very many, or very small, inner chunks, whose records
/// would outgrow what a copy saves.
pub(crate) fn names_inner_digests(layout: &ArrayLayout) -> bool {
    let geometry = &layout.geometry;
    let inner_bytes = zshard_core::product(geometry.inner_shape())
        .saturating_mul(layout.inner_repr.data_type.size() as u64);
    zshard_core::product(&geometry.chunks_per_shard()) <= MAX_INNER_DIGESTS
        && inner_bytes >= MIN_INNER_CHUNK_BYTES
}

/// Inner chunks' digests as a record field holds them: their little-endian bytes in URL-safe
/// base64 without padding (no tab, no newline; 11 characters a chunk).
pub(crate) fn encode_inner(digests: &[u64]) -> String {
    let bytes: Vec<u8> = digests.iter().flat_map(|d| d.to_le_bytes()).collect();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The inner chunks' digests of a record field (see [`encode_inner`]); `None` when it is damaged.
pub(crate) fn decode_inner(text: &str) -> Option<Vec<u64>> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()?;
    if bytes.len() % 8 != 0 {
        return None;
    }
    Some(
        bytes
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or_default()))
            .collect(),
    )
}

/// The digests being made on a thread of their own (a listing of the source, a round trip or more
/// on an object store) while the run claims and surveys the destination.
pub(crate) struct Pending {
    listing: Mutex<Option<JoinHandle<Result<Listed>>>>,
    listed: OnceLock<Listed>,
    failed: Mutex<Option<Error>>,
}

impl Pending {
    /// Starts listing the sources of `jobs` (see [`listed_since`]: with the versions `kept` in
    /// `destination`); digests of none when a source names no versions.
    pub(crate) fn start(jobs: Vec<ArrayJob>, destination: Store, kept: KeptSources) -> Pending {
        let pending = Pending {
            listing: Mutex::new(None),
            listed: OnceLock::new(),
            failed: Mutex::new(None),
        };
        if !tracked(&jobs) {
            let _ = pending.listed.set(Listed {
                digests: Digests::new(vec![None; jobs.len()]),
                versions: vec![None; jobs.len()],
                keep: Vec::new(),
                found: vec![None; jobs.len()],
            });
            return pending;
        }
        let listing = std::thread::Builder::new()
            .name("zshard-source-listing".to_string())
            .spawn(move || listed_since(&jobs, &destination, &kept));
        match listing {
            Ok(handle) => {
                if let Ok(mut slot) = pending.listing.lock() {
                    *slot = Some(handle);
                }
            }
            Err(e) => {
                if let Ok(mut slot) = pending.failed.lock() {
                    *slot = Some(Error::Thread {
                        what: "the source listing",
                        source: e,
                    });
                }
            }
        }
        pending
    }

    /// The digests, once the listing is done; `None` when it failed (see [`Pending::wait`]).
    pub(crate) fn get(&self) -> Option<&Digests> {
        self.get_listed().map(|listed| &listed.digests)
    }

    /// What the listing said, once it is done; `None` when it failed.
    fn get_listed(&self) -> Option<&Listed> {
        if let Some(listed) = self.listed.get() {
            return Some(listed);
        }
        let handle = self.listing.lock().ok()?.take()?;
        let listed = handle.join().unwrap_or(Err(Error::Poisoned {
            what: "the source listing",
        }));
        match listed {
            Ok(listed) => Some(self.listed.get_or_init(|| listed)),
            Err(e) => {
                if let Ok(mut slot) = self.failed.lock() {
                    *slot = Some(e);
                }
                None
            }
        }
    }

    /// What the listing said, or why it failed.
    pub(crate) fn wait(&self) -> Result<&Listed> {
        if let Some(listed) = self.get_listed() {
            return Ok(listed);
        }
        let failed = self.failed.lock().ok().and_then(|mut slot| slot.take());
        Err(failed.unwrap_or(Error::Poisoned {
            what: "the source listing",
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inner_digests_read_back_as_written_and_damage_reads_as_none() {
        let digests = [0u64, 1, u64::MAX, 0x0123_4567_89ab_cdef];
        let text = encode_inner(&digests);
        assert!(!text.contains(['\t', '\n', '\r', '=']), "{text}");
        assert_eq!(text.len(), 43, "11 characters a digest, less the padding");
        assert_eq!(decode_inner(&text), Some(digests.to_vec()));
        assert_eq!(decode_inner(&text[..text.len() - 1]), None);
        assert_eq!(decode_inner("not base64!"), None);
        assert_eq!(decode_inner(""), Some(Vec::new()));
    }
}
