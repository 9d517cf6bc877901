//! What each shard of a conversion is made from now (issue 40): a digest of the shard's region
//! (clipped to the array, so a grown or shrunk array changes its edge shards) and of the version
//! that one listing of the source gives each source chunk it covers
//! ([`zshard_core::ChunkReader::chunk_versions`]). Made here, where the source is known; the
//! destination protocol (`zshard_state`, its `made_from` module) records them with each shard and
//! compares them with what a finished conversion kept.

use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

use zshard_core::{stable_hash, ChunkVersions};
use zshard_pipeline::ArrayJob;
use zshard_state::Digests;

use crate::error::{Error, Result};

/// Whether every array's source names its chunks' versions: a conversion's records then say what
/// each shard was made from, and a finished one is brought up to date by a rerun.
pub(crate) fn tracked(jobs: &[ArrayJob]) -> bool {
    jobs.iter().all(|job| job.reader.names_versions())
}

/// As [`of`], with the versions of the arrays `listed` already (one per job; `None` for those to
/// list here), so that a plan lists each source once.
pub(crate) fn of_listed(jobs: &[ArrayJob], listed: Vec<Option<ChunkVersions>>) -> Result<Digests> {
    let arrays = jobs
        .iter()
        .zip(listed.into_iter().chain(std::iter::repeat_with(|| None)))
        .map(|(job, listed)| {
            let versions = match listed {
                Some(versions) => Some(versions),
                None => job.reader.chunk_versions(&job.layout.source_chunk_grid())?,
            };
            Ok(versions.map(|versions| array_digests(job, &versions)))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Digests::new(arrays))
}

/// The digests of every shard of `jobs` (one per array of the plan): one listing of each array's
/// source chunks (or its references), no chunk read.
pub(crate) fn of(jobs: &[ArrayJob]) -> Result<Digests> {
    let arrays = jobs
        .iter()
        .map(|job| {
            let versions = job.reader.chunk_versions(&job.layout.source_chunk_grid())?;
            Ok(versions.map(|versions| array_digests(job, &versions)))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Digests::new(arrays))
}

/// The digest of every shard of `job`'s array, in C order.
fn array_digests(job: &ArrayJob, versions: &ChunkVersions) -> Vec<u64> {
    let geometry = &job.layout.geometry;
    let grid = geometry.shard_grid();
    let array = geometry.array_region();
    (0..zshard_core::product(&grid))
        .map(|index| {
            let shard = zshard_core::unravel_index(index, &grid);
            let mut bytes: Vec<u8> = Vec::new();
            let Some(region) = geometry.shard_region(&shard).intersect(&array) else {
                return stable_hash(&bytes);
            };
            for n in region.start.iter().chain(&region.shape) {
                bytes.extend_from_slice(&n.to_le_bytes());
            }
            for coord in job.layout.source_chunks_overlapping(&region) {
                for c in &coord {
                    bytes.extend_from_slice(&c.to_le_bytes());
                }
                // Not stored: a marker no version's hash is likely to equal.
                let version = versions.of(&coord).unwrap_or(u64::MAX);
                bytes.extend_from_slice(&version.to_le_bytes());
            }
            stable_hash(&bytes)
        })
        .collect()
}

/// The digests being made on a thread of their own (a listing of the source, a round trip or more
/// on an object store) while the run claims and surveys the destination.
pub(crate) struct Pending {
    listing: Mutex<Option<JoinHandle<Result<Digests>>>>,
    digests: OnceLock<Digests>,
    failed: Mutex<Option<Error>>,
}

impl Pending {
    /// Starts listing the sources of `jobs`; digests of none when a source names no versions.
    pub(crate) fn start(jobs: Vec<ArrayJob>) -> Pending {
        let pending = Pending {
            listing: Mutex::new(None),
            digests: OnceLock::new(),
            failed: Mutex::new(None),
        };
        if !tracked(&jobs) {
            let _ = pending.digests.set(Digests::new(vec![None; jobs.len()]));
            return pending;
        }
        let listing = std::thread::Builder::new()
            .name("zshard-source-listing".to_string())
            .spawn(move || of(&jobs));
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
        if let Some(digests) = self.digests.get() {
            return Some(digests);
        }
        let handle = self.listing.lock().ok()?.take()?;
        let listed = handle.join().unwrap_or(Err(Error::Poisoned {
            what: "the source listing",
        }));
        match listed {
            Ok(digests) => Some(self.digests.get_or_init(|| digests)),
            Err(e) => {
                if let Ok(mut slot) = self.failed.lock() {
                    *slot = Some(e);
                }
                None
            }
        }
    }

    /// The digests, or why the listing failed.
    pub(crate) fn wait(&self) -> Result<&Digests> {
        if let Some(digests) = self.get() {
            return Ok(digests);
        }
        let failed = self.failed.lock().ok().and_then(|mut slot| slot.take());
        Err(failed.unwrap_or(Error::Poisoned {
            what: "the source listing",
        }))
    }
}
