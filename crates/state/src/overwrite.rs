//! `--overwrite`: removing what an earlier conversion or Zarr hierarchy left in the destination
//! (only keys zshard owns, see `owned.rs`), and clearing a finished conversion's state.

use super::*;

/// A file (not a folder) at `.zshard` in a local destination, where zshard keeps its state: a resume
/// cannot go on (every state write would fail) and is refused naming it; `overwrite` removes it, as
/// zshard's own name (see `owned.rs`).
pub fn clear_state_file(dst: &Store, overwrite: bool) -> Result<()> {
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

/// What the claim does about the `--overwrite` marker beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Marker {
    /// Refuse when it is there (an `--overwrite` was interrupted).
    Check,
    /// This run's `--overwrite` wrote it and has cleared the destination: remove it beside the
    /// claim's write (a round trip saved; interrupted in between, the marker stays and later runs
    /// refuse until an `--overwrite` finishes, which is what it is for).
    Remove,
    /// Nothing to do (this run's `--overwrite` found nothing to remove).
    Ignore,
}

/// For `--overwrite`: removes zshard's state, the Zarr hierarchy the destination holds and the chunk
/// keys of its arrays and of this conversion's, and nothing else (see `owned.rs`); refuses while
/// another run holds a fresh lease. One listing of the destination with the claim and the plan's
/// own metadata documents read beside it, then (only when the listing names more) the other leases,
/// recorded options and metadata documents in one round of reads, then the removals side by side
/// after the marker's write. The marker is left for the claim to remove ([`Marker::Remove`]).
pub(super) fn remove_owned(
    dst: &Store,
    plan: &Outputs,
    partition: Partition,
    own_lease: &str,
) -> Result<Marker> {
    let is_wanted = |key: &str| {
        // This run's own lease says nothing about other runs.
        (in_dir(key, crate::lease::LEASES_DIR) && key != own_lease)
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
        .filter(|(key, _)| in_dir(key, crate::lease::LEASES_DIR));
    crate::lease::refuse_live_leases(dst, Some(own_lease), leases)?;
    let mut roots = vec![String::new()];
    roots.extend(plan.arrays.iter().map(|a| a.path.clone()));
    roots.extend(plan.groups.iter().map(|p| (*p).clone()));
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
    // A run killed while writing a shard locally leaves it staged as `KEY#N`, which listings hide:
    // those of the keys the old and this conversion own go too (a shard of the old grid may lie
    // outside this one's), and no other.
    let staged = dst.staged_keys("")?;
    let bases: BTreeSet<String> = staged
        .iter()
        .filter_map(|key| zshard_store::staged_base(key))
        .map(str::to_string)
        .collect();
    for base in owned_keys(&bases, &roots, &arrays, &document) {
        dst.remove_staged_of(&base)?;
    }
    Ok(Marker::Remove)
}

/// The arrays that zshard's recorded options (claim and per-worker records, as `read`) describe,
/// with their chunk keys: an interrupted conversion has shards but no metadata yet.
pub(super) fn recorded_arrays(
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
pub fn clear(dst: &Store, listed: Option<Vec<String>>, also: &[String]) -> Result<()> {
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
