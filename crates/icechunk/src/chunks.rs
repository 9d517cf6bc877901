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
use zshard_store::Store as Staging;

use crate::{COMMIT_RECORD, STAGING};

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
}

/// One record: staged shard keys and where they are stored.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    chunks: BTreeMap<String, StoredChunk>,
}

/// Whether a staged key is a node's `zarr.json`.
pub(crate) fn is_metadata(key: &str) -> bool {
    key == "zarr.json" || key.ends_with("/zarr.json")
}

/// The staged keys with their sizes: documents first, parents before children, then shards;
/// zshard's own state (`.zshard/`, the records, the commit record) and staged temporary files
/// (`KEY#N`) left out.
pub(crate) fn staged_objects(staging: &Staging) -> zshard_store::Result<Vec<(String, u64)>> {
    let mut objects: Vec<(String, u64)> = staging
        .list_sizes("")?
        .into_iter()
        .filter(|(key, _)| !key.split('/').any(|part| part.starts_with('.')))
        .filter(|(key, _)| zshard_store::staged_base(key).is_none())
        .collect();
    objects.sort_by(|(a, _), (b, _)| {
        let order = |key: &String| (!is_metadata(key), key.matches('/').count(), key.clone());
        order(a).cmp(&order(b))
    });
    Ok(objects)
}

/// The recorded stored chunks that still match the staged shards (`staged`: key → size). A record
/// that does not parse, or names a size other than the staged one, is ignored: its shard is stored
/// again.
pub(crate) fn recorded(
    staging: &Staging,
    staged: &HashMap<&str, u64>,
) -> zshard_store::Result<HashMap<String, StoredChunk>> {
    let names = staging.list_keys(CHUNK_RECORDS)?;
    let mut stored = HashMap::new();
    for bytes in staging.get_many(&names) {
        let Some(bytes) = bytes? else { continue };
        let Ok(record) = serde_json::from_slice::<Record>(&bytes) else {
            continue;
        };
        for (key, chunk) in record.chunks {
            if staged.get(key.as_str()) == Some(&chunk.length) {
                stored.insert(key, chunk);
            }
        }
    }
    Ok(stored)
}

/// Copies the staged shards `shards` (key, size) into the chunk storage of the repository whose
/// objects `repository` holds, and records them in the staging folder under names starting with
/// `writer`, in batches.
pub(crate) fn store(
    staging: &Staging,
    repository: &Staging,
    shards: &[(String, u64)],
    writer: &str,
) -> zshard_store::Result<HashMap<String, StoredChunk>> {
    let mut stored = HashMap::new();
    let run = unique_suffix();
    for (batch, shards) in shards.chunks(RECORD_BATCH).enumerate() {
        let mut record = Record::default();
        let mut pairs = Vec::with_capacity(shards.len());
        for (key, length) in shards {
            let id = ChunkId::random().to_string();
            pairs.push((format!("{STAGING}/{key}"), format!("chunks/{id}")));
            let chunk = StoredChunk {
                id,
                length: *length,
            };
            record.chunks.insert(key.clone(), chunk);
        }
        repository.copy_many(&pairs)?;
        let name = format!("{CHUNK_RECORDS}/{writer}-{run}-{batch}.json");
        // Strings and numbers always serialize; an empty record would only store them again.
        let json = serde_json::to_vec(&record).unwrap_or_default();
        staging.put(&name, Bytes::from(json))?;
        stored.extend(record.chunks);
    }
    Ok(stored)
}

/// Removes every record of stored chunks (the shards they name may be replaced).
pub(crate) fn forget(staging: &Staging) -> zshard_store::Result<()> {
    let names = staging.list_keys(CHUNK_RECORDS)?;
    staging.delete_many(&names)
}

/// The staged shards among `keys` that are not yet stored.
pub(crate) fn unstored(
    objects: &[(String, u64)],
    keys: Option<&HashSet<String>>,
    stored: &HashMap<String, StoredChunk>,
) -> Vec<(String, u64)> {
    objects
        .iter()
        .filter(|(key, _)| !is_metadata(key) && key != COMMIT_RECORD)
        .filter(|(key, _)| keys.is_none_or(|keys| keys.contains(key)))
        .filter(|(key, _)| !stored.contains_key(key))
        .cloned()
        .collect()
}

/// A suffix that no other run's records share: the process and the time.
fn unique_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
}

/// The node path and chunk coordinates of a shard key of Zarr v3's default encoding with `/`
/// (`a/b/c/1/2`; `c/1/2` for an array at the root; `a/c` for a 0-d array), as Icechunk reads keys.
pub(crate) fn chunk_coordinates(key: &str) -> Option<(String, Vec<u32>)> {
    let (node, coords) = match key.rsplit_once("/c/") {
        Some((node, coords)) => (node, Some(coords)),
        None => match key.strip_prefix("c/") {
            Some(coords) => ("", Some(coords)),
            None if key == "c" => ("", None),
            None => (key.strip_suffix("/c")?, None),
        },
    };
    let coords = match coords {
        Some(coords) => coords
            .split('/')
            .map(|c| c.parse().ok())
            .collect::<Option<Vec<u32>>>()?,
        None => Vec::new(),
    };
    Some((format!("/{node}"), coords))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn shards_not_stored_are_those_of_the_keys_without_a_record() {
        let objects: Vec<(String, u64)> = [("zarr.json", 2), ("a/c/0", 5), ("a/c/1", 6)]
            .map(|(k, n)| (k.to_string(), n))
            .to_vec();
        let stored: HashMap<String, StoredChunk> = [(
            "a/c/0".to_string(),
            StoredChunk {
                id: "X".into(),
                length: 5,
            },
        )]
        .into();
        assert_eq!(unstored(&objects, None, &stored), [("a/c/1".into(), 6)]);
        let mine: HashSet<String> = ["a/c/0".to_string()].into();
        assert!(unstored(&objects, Some(&mine), &stored).is_empty());
    }
}
