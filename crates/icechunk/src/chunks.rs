//! Shards put into a repository's chunk storage ahead of its commit. Each staged shard is copied
//! to `chunks/ID` of the repository under a fresh chunk id, on the server (or as a hard link in a
//! local folder), so its bytes never pass through zshard again; the ids are recorded in the staging
//! folder, and the commit only sets references to them. Partitioned workers store their own shards
//! as they finish, so that `finalize` moves no shard data at all.
//!
//! A chunk object is invisible until a commit references it: a run killed before committing leaves
//! at most unreferenced objects, which Icechunk's garbage collection removes.

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use icechunk::format::ChunkId;
use serde::{Deserialize, Serialize};
use zshard_store::{ListedObject, Store as Staging};

use crate::COMMIT_RECORD;

/// The folder, inside the staging folder, of the records of stored chunks.
pub(crate) const CHUNK_RECORDS: &str = ".zshard-chunks";

/// Shards copied before their ids are recorded: a run killed meanwhile leaves at most this many
/// unreferenced copies.
const RECORD_BATCH: usize = 1024;

/// Where a staged shard is stored in the repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct StoredChunk {
    /// The chunk id (Crockford base32, as Icechunk names chunk objects).
    pub id: String,
    /// The object's length in bytes (the staged shard's).
    pub length: u64,
    /// The staged shard's version when it was copied (see [`ListedObject::version`]): a shard
    /// written again since (another run's, an `--overwrite`) has another, and is stored again.
    pub staged_version: String,
}

/// One record: staged shard keys and where they are stored.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    chunks: BTreeMap<String, StoredChunk>,
}

/// The path, in the repository's objects, of a chunk object.
pub(crate) fn chunk_key(id: &str) -> String {
    format!("chunks/{id}")
}

/// Whether a staged key is a node's `zarr.json`.
pub(crate) fn is_metadata(key: &str) -> bool {
    key == "zarr.json" || key.ends_with("/zarr.json")
}

/// Keys a listing page holds: a worker's listing is cut every this many of its shards.
const LISTING_PAGE: usize = 1000;

/// The staged objects: documents first, parents before children, then shards; zshard's own state
/// (`.zshard/`, the records, the commit record) and staged temporary files (`KEY#N`) left out.
pub(crate) fn staged_objects(staging: &Staging) -> zshard_store::Result<Vec<ListedObject>> {
    staged_objects_around(staging, &HashSet::new())
}

/// [`staged_objects`], the listing of an object store cut at every [`LISTING_PAGE`]-th of `keys`
/// so that its pages are fetched side by side: a worker's share of a large conversion is found in
/// a few round trips instead of one per page of every worker's shards.
pub(crate) fn staged_objects_around(
    staging: &Staging,
    keys: &HashSet<String>,
) -> zshard_store::Result<Vec<ListedObject>> {
    let mut objects: Vec<ListedObject> = staging
        .list_objects_split("", &listing_splits(keys))?
        .into_iter()
        .filter(|o| !o.key.split('/').any(|part| part.starts_with('.')))
        .filter(|o| zshard_store::staged_base(&o.key).is_none())
        .collect();
    objects.sort_by(|a, b| {
        let order = |key: &String| (!is_metadata(key), key.matches('/').count(), key.clone());
        order(&a.key).cmp(&order(&b.key))
    });
    Ok(objects)
}

/// The recorded stored chunks that still hold the staged shards (`staged`: key → object) and whose
/// chunk object is still in the repository. A record that does not parse, or names another size
/// or version of the shard, is ignored, and so is one whose object is gone (an Icechunk garbage
/// collection removes objects no snapshot references): those shards are stored again.
pub(crate) fn recorded(
    staging: &Staging,
    repository: &Staging,
    staged: &HashMap<&str, &ListedObject>,
) -> zshard_store::Result<HashMap<String, StoredChunk>> {
    let names: Vec<String> = staging
        .list_keys(CHUNK_RECORDS)?
        .into_iter()
        .filter(|name| !name.ends_with(PENDING_SUFFIX))
        .collect();
    let mut stored = HashMap::new();
    for bytes in staging.get_many(&names) {
        let Some(bytes) = bytes? else { continue };
        let Ok(record) = serde_json::from_slice::<Record>(&bytes) else {
            continue;
        };
        for (key, chunk) in record.chunks {
            let current = staged.get(key.as_str());
            if current.is_some_and(|o| o.size == chunk.length && o.version == chunk.staged_version)
            {
                stored.insert(key, chunk);
            }
        }
    }
    let keys: Vec<String> = stored.keys().cloned().collect();
    let objects: Vec<String> = keys.iter().map(|k| chunk_key(&stored[k].id)).collect();
    for (key, exists) in keys.iter().zip(repository.exist_many(&objects)?) {
        if !exists {
            stored.remove(key);
        }
    }
    Ok(stored)
}

/// Copies the staged shards `shards` into the chunk storage of the repository whose objects
/// `repository` holds (where the staging folder is at `inside`), and records them in the staging
/// folder under names starting with `writer`, in batches.
pub(crate) fn store(
    staging: &Staging,
    (repository, inside): (&Staging, &str),
    shards: &[&ListedObject],
    writer: &str,
) -> zshard_store::Result<HashMap<String, StoredChunk>> {
    let mut stored = HashMap::new();
    let run = unique_suffix();
    // A local copy is a hard link made as `chunks/ID#N` and renamed over `chunks/ID`: a run killed
    // in between leaves the link, which only the ids named ahead can tell from another writer's.
    let local = repository.local_path("").is_some();
    for (batch, shards) in shards.chunks(RECORD_BATCH).enumerate() {
        let mut record = Record::default();
        let mut pairs = Vec::with_capacity(shards.len());
        for shard in shards {
            let id = ChunkId::random().to_string();
            pairs.push((format!("{inside}/{}", shard.key), chunk_key(&id)));
            let chunk = StoredChunk {
                id,
                length: shard.size,
                staged_version: shard.version.clone(),
            };
            record.chunks.insert(shard.key.clone(), chunk);
        }
        let pending = format!("{CHUNK_RECORDS}/{writer}-{run}-{batch}{PENDING_SUFFIX}");
        if local {
            let ids = Pending {
                ids: record.chunks.values().map(|c| c.id.clone()).collect(),
            };
            let json = serde_json::to_vec(&ids).unwrap_or_default();
            staging.put(&pending, Bytes::from(json))?;
        }
        repository.copy_many(&pairs)?;
        let name = format!("{CHUNK_RECORDS}/{writer}-{run}-{batch}.json");
        // Strings and numbers always serialize; an empty record would only store them again.
        let json = serde_json::to_vec(&record).unwrap_or_default();
        staging.put(&name, Bytes::from(json))?;
        if local {
            staging.delete(&pending)?;
        }
        stored.extend(record.chunks);
    }
    Ok(stored)
}

/// How the name of a record of chunk ids about to be copied ends (see [`Pending`]).
const PENDING_SUFFIX: &str = ".pending";

/// The chunk ids a batch is about to copy into a local repository, recorded before the copy and
/// removed once the batch's [`Record`] is written: a run killed meanwhile leaves it, naming the
/// staged links (`chunks/ID#N`) that only this conversion can have made.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Pending {
    ids: Vec<String>,
}

/// In a local repository (`repository`), removes the staged links of chunk copies that runs of
/// `writer` (every writer when `None`) were killed while making, as their pending records name
/// them (see [`Pending`]), then those records. Copies renamed into place stay: unreferenced until
/// a commit names them, Icechunk's garbage collection removes them.
pub(crate) fn remove_killed_copies(
    staging: &Staging,
    repository: &Staging,
    writer: Option<&str>,
) -> zshard_store::Result<()> {
    if repository.local_path("").is_none() {
        return Ok(());
    }
    let prefix = writer.map(|w| format!("{CHUNK_RECORDS}/{w}-"));
    let names: Vec<String> = staging
        .list_keys(CHUNK_RECORDS)?
        .into_iter()
        .filter(|name| name.ends_with(PENDING_SUFFIX))
        .filter(|name| prefix.as_ref().is_none_or(|p| name.starts_with(p.as_str())))
        .collect();
    for bytes in staging.get_many(&names) {
        let Some(bytes) = bytes? else { continue };
        // A record cut short by the kill names nothing for sure: its links stay.
        let Ok(pending) = serde_json::from_slice::<Pending>(&bytes) else {
            continue;
        };
        for id in pending.ids {
            // Only an id as Icechunk names chunks: nothing else in `chunks/` is touched.
            if ChunkId::try_from(id.as_str()).is_err() {
                continue;
            }
            repository.remove_staged_of(&chunk_key(&id))?;
        }
    }
    staging.delete_many(&names)
}

/// Removes every record of stored chunks (the shards they name may be replaced).
pub(crate) fn forget(staging: &Staging) -> zshard_store::Result<()> {
    let names = staging.list_keys(CHUNK_RECORDS)?;
    staging.delete_many(&names)
}

/// The staged shards among `keys` (all when `None`) that are not yet stored.
pub(crate) fn unstored<'a>(
    objects: &'a [ListedObject],
    keys: Option<&HashSet<String>>,
    stored: &HashMap<String, StoredChunk>,
) -> Vec<&'a ListedObject> {
    objects
        .iter()
        .filter(|o| !is_metadata(&o.key) && o.key != COMMIT_RECORD)
        .filter(|o| keys.is_none_or(|keys| keys.contains(&o.key)))
        .filter(|o| !stored.contains_key(&o.key))
        .collect()
}

/// A suffix that no other run's records share: the process and the time.
fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
}

/// Every [`LISTING_PAGE`]-th of `keys` in order, the first left out (nothing precedes it).
fn listing_splits(keys: &HashSet<String>) -> Vec<String> {
    let mut sorted: Vec<&String> = keys.iter().collect();
    sorted.sort();
    sorted
        .into_iter()
        .step_by(LISTING_PAGE)
        .skip(1)
        .cloned()
        .collect()
}

/// The node path and chunk coordinates of a shard key of Zarr v3's default encoding with `/`
/// (`a/b/c/1/2`; `c/1/2` for an array at the root; `a/c` for a 0-d array), as Icechunk reads keys.
pub(crate) fn chunk_coordinates(key: &str) -> Option<(String, Vec<u32>)> {
    // Keys of arrays with dimensions end in a number: one ending in `c` is a 0-d array's.
    if key == "c" {
        return Some(("/".to_string(), Vec::new()));
    }
    if let Some(node) = key.strip_suffix("/c") {
        return Some((format!("/{node}"), Vec::new()));
    }
    let (node, coords) = match key.rsplit_once("/c/") {
        Some((node, coords)) => (node, coords),
        None => ("", key.strip_prefix("c/")?),
    };
    let coords = coords
        .split('/')
        .map(|c| c.parse().ok())
        .collect::<Option<Vec<u32>>>()?;
    Some((format!("/{node}"), coords))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::STAGING;

    #[test]
    fn shard_keys_give_the_node_and_coordinates() {
        let parsed = |key| chunk_coordinates(key);
        assert_eq!(parsed("a/b/c/1/2"), Some(("/a/b".into(), vec![1, 2])));
        assert_eq!(parsed("c/0/7"), Some(("/".into(), vec![0, 7])));
        // An array named `c`.
        assert_eq!(parsed("g/c/c/3"), Some(("/g/c".into(), vec![3])));
        assert_eq!(parsed("c/c/3"), Some(("/c".into(), vec![3])));
        assert_eq!(parsed("a/c"), Some(("/a".into(), vec![])));
        assert_eq!(parsed("c"), Some(("/".into(), vec![])));
        assert_eq!(parsed("a/c/1.2"), None);
        assert_eq!(parsed("a/0/1"), None);
    }

    #[test]
    fn zero_dimensional_arrays_under_a_folder_named_c() {
        let parsed = |key| chunk_coordinates(key);
        assert_eq!(parsed("g/c/c"), Some(("/g/c".into(), vec![])));
        assert_eq!(parsed("c/c"), Some(("/c".into(), vec![])));
        assert_eq!(parsed("g/c/h/c"), Some(("/g/c/h".into(), vec![])));
    }

    #[test]
    fn a_workers_listing_is_cut_every_page_of_its_keys() {
        let keys: HashSet<String> = (0..2500).map(|i| format!("a/c/{i:05}")).collect();
        assert_eq!(listing_splits(&keys), ["a/c/01000", "a/c/02000"]);
        let few: HashSet<String> = (0..999).map(|i| format!("a/c/{i}")).collect();
        assert!(listing_splits(&few).is_empty());
    }

    fn listed(key: &str, size: u64) -> ListedObject {
        ListedObject {
            key: key.to_string(),
            size,
            version: "v1".to_string(),
            modified_ms: 0,
        }
    }

    #[test]
    fn shards_not_stored_are_those_of_the_keys_without_a_record() {
        let objects = [
            listed("zarr.json", 2),
            listed("a/c/0", 5),
            listed("a/c/1", 6),
        ];
        let chunk = StoredChunk {
            id: "X".into(),
            length: 5,
            staged_version: "v1".into(),
        };
        let stored: HashMap<String, StoredChunk> = [("a/c/0".to_string(), chunk)].into();
        let keys = |found: Vec<&ListedObject>| -> Vec<String> {
            found.into_iter().map(|o| o.key.clone()).collect()
        };
        assert_eq!(keys(unstored(&objects, None, &stored)), ["a/c/1"]);
        let mine: HashSet<String> = ["a/c/0".to_string()].into();
        assert!(unstored(&objects, Some(&mine), &stored).is_empty());
    }

    /// A staging folder inside a repository folder with shard `a/c/0` staged and stored.
    fn stored_shard() -> (tempfile::TempDir, Staging, Staging) {
        let dir = tempfile::tempdir().expect("tempdir");
        let runtime = zshard_store::IoRuntime::new(1).expect("runtime");
        let root = dir.path().to_string_lossy().into_owned();
        let repository = Staging::open(&root, runtime.clone(), false).expect("repository");
        let staging = repository.child(STAGING);
        staging
            .put("a/c/0", Bytes::from_static(b"shard"))
            .expect("put");
        let objects = staged_objects(&staging).expect("list");
        let shards: Vec<&ListedObject> = objects.iter().collect();
        store(&staging, (&repository, STAGING), &shards, "w0of1").expect("store");
        (dir, staging, repository)
    }

    fn recorded_now(staging: &Staging, repository: &Staging) -> Vec<String> {
        let objects = staged_objects(staging).expect("list");
        let staged: HashMap<&str, &ListedObject> =
            objects.iter().map(|o| (o.key.as_str(), o)).collect();
        let mut keys: Vec<String> = recorded(staging, repository, &staged)
            .expect("recorded")
            .into_keys()
            .collect();
        keys.sort();
        keys
    }

    #[test]
    fn a_record_holds_while_the_shard_and_its_copy_are_unchanged() {
        let (_dir, staging, repository) = stored_shard();
        assert_eq!(recorded_now(&staging, &repository), ["a/c/0"]);
    }

    #[test]
    fn a_shard_written_again_with_the_same_size_is_stored_again() {
        let (_dir, staging, repository) = stored_shard();
        // Another run's shard: same length, other bytes, written by a rename as every write is.
        staging
            .put("a/c/0", Bytes::from_static(b"other"))
            .expect("put");
        assert!(recorded_now(&staging, &repository).is_empty());
    }

    #[test]
    fn a_copy_collected_since_is_stored_again() {
        let (_dir, staging, repository) = stored_shard();
        let copies = repository.list_keys("chunks").expect("list");
        assert_eq!(copies.len(), 1);
        repository.delete(&copies[0]).expect("delete");
        assert!(recorded_now(&staging, &repository).is_empty());
    }
}
