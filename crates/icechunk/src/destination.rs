//! Publishing a converted hierarchy into a repository: the shards and `zarr.json` documents of a
//! finished conversion (staged in a local folder) become the nodes and chunks of one session on a
//! branch, committed once. Until that commit nothing is visible on the branch, and only the nodes of
//! this conversion are added or replaced.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use icechunk::conflicts::detector::ConflictDetector;
use icechunk::repository::VersionInfo;
use icechunk::session::SessionErrorKind;
use icechunk::{Repository, Store};
use tokio::sync::RwLock;
use zshard_store::{IoRuntime, Store as Staging};

use crate::error::{boxed, Error, Result};
use crate::repo;
use crate::{Published, COMMIT_RECORD};

/// Creates an empty repository at `location` when there is none, before anything is staged in its
/// folder (Icechunk creates repositories only in empty folders).
pub fn create_if_missing(location: &str, runtime: &IoRuntime) -> Result<()> {
    let storage = repo::storage(location, runtime)?;
    runtime.block_on(async {
        let open_error = |e: Box<dyn std::error::Error + Send + Sync>| Error::Open {
            repo: location.to_string(),
            source: e,
        };
        if !Repository::exists(storage.as_ref())
            .await
            .map_err(|e| open_error(boxed(e)))?
        {
            Repository::create(None, storage, HashMap::new())
                .await
                .map_err(|e| open_error(boxed(e)))?;
        }
        Ok(())
    })
}

/// The snapshot property holding a publication's token (see [`COMMIT_RECORD`]).
const TOKEN_PROPERTY: &str = "zshard_commit";

/// How far back a branch's history is searched for a publication's commit.
const ANCESTRY_SEARCH: usize = 1000;

/// Commits the Zarr v3 hierarchy staged at the location `staged` to `branch` of the repository at
/// `location` (created when missing, as is the branch, from `main`'s tip), as one commit with
/// `message`. Arrays of the repository at the staged arrays' paths are replaced; everything else
/// stays. When the branch moved meanwhile, the commit is rebased onto its new tip if the changes do
/// not overlap, else it fails with [`Error::Conflict`]. A publication of `staged` that already
/// committed (a run killed after its commit) is found on the branch and not committed again.
pub fn publish(
    staged: &str,
    location: &str,
    branch: &str,
    message: &str,
    runtime: &Arc<IoRuntime>,
) -> Result<Published> {
    publish_with(staged, location, branch, message, runtime, || async {})
}

/// Nothing to do around a rebase.
async fn noop() {}

/// Staged objects copied into the session at once.
const BATCH: usize = 32;

/// [`publish`], running `before_commit` between writing the session and committing it (tests
/// commit to the branch there, as another writer would).
fn publish_with<F, Fut>(
    staged: &str,
    location: &str,
    branch: &str,
    message: &str,
    runtime: &Arc<IoRuntime>,
    before_commit: F,
) -> Result<Published>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let write_error = |what: &str, e: Box<dyn std::error::Error + Send + Sync>| Error::Write {
        repo: location.to_string(),
        what: what.to_string(),
        source: e,
    };
    let staging = Staging::open(staged, runtime.clone(), false)
        .map_err(|e| write_error("opening the staged output", boxed(e)))?;
    let keys =
        staged_keys(&staging).map_err(|e| write_error("listing the staged output", boxed(e)))?;
    let mut published = Published {
        branch: branch.to_string(),
        snapshot: String::new(),
        nodes: keys.iter().filter(|k| is_metadata(k)).count(),
        chunks: keys.iter().filter(|k| !is_metadata(k)).count(),
        already_committed: false,
    };
    let storage = repo::storage(location, runtime)?;
    let repository = runtime
        .block_on(Repository::open_or_create(None, storage, HashMap::new()))
        .map_err(|e| Error::Open {
            repo: location.to_string(),
            source: boxed(e),
        })?;
    runtime
        .block_on(ensure_branch(&repository, branch))
        .map_err(|e| write_error(&format!("creating branch {branch:?}"), e))?;
    let token = match read_token(&staging) {
        Some(token) => {
            let found = runtime
                .block_on(find_commit(&repository, branch, &token))
                .map_err(|e| write_error(&format!("reading branch {branch:?}"), e))?;
            if let Some(snapshot) = found {
                published.snapshot = snapshot;
                published.already_committed = true;
                return Ok(published);
            }
            token
        }
        None => write_token(&staging)
            .map_err(|e| write_error("recording the commit in the staging folder", boxed(e)))?,
    };
    let session = runtime
        .block_on(repository.writable_session(branch))
        .map_err(|e| write_error(&format!("opening branch {branch:?}"), boxed(e)))?;
    let store = runtime.block_on(Store::from_session(Arc::new(RwLock::new(session))));
    write_session(&store, &staging, &keys, runtime).map_err(|(what, e)| write_error(&what, e))?;
    runtime.block_on(before_commit());
    let properties = [(
        TOKEN_PROPERTY.to_string(),
        serde_json::Value::from(token.as_str()),
    )];
    let snapshot = runtime
        .block_on(async {
            let session = store.session();
            let mut session = session.write().await;
            session
                .commit_rebasing(
                    &ConflictDetector,
                    3,
                    message,
                    Some(properties.into_iter().collect()),
                    |_| noop(),
                    |_| noop(),
                )
                .await
        })
        .map_err(|e| match e.kind {
            SessionErrorKind::Conflict { .. } | SessionErrorKind::RebaseFailed { .. } => {
                Error::Conflict {
                    repo: location.to_string(),
                    branch: branch.to_string(),
                    reason: e.kind.to_string(),
                }
            }
            _ => write_error("committing", boxed(e)),
        })?;
    published.snapshot = snapshot.to_string();
    record_commit(&staging, &token, &published.snapshot)
        .map_err(|e| write_error("recording the commit in the staging folder", boxed(e)))?;
    Ok(published)
}

/// An error of writing the session: what was being written, and why.
type WriteError = (String, Box<dyn std::error::Error + Send + Sync>);

/// Writes the staged documents and chunks into the session: arrays being replaced are deleted
/// first (they lose every chunk of their former shape; groups stay with whatever else they hold),
/// then parents before children, documents before chunks (a chunk needs its array).
fn write_session(
    store: &Store,
    staging: &Staging,
    keys: &[String],
    runtime: &IoRuntime,
) -> std::result::Result<(), WriteError> {
    let read = |batch: &[String]| -> std::result::Result<Vec<Bytes>, WriteError> {
        batch
            .iter()
            .zip(staging.get_many(batch))
            .map(|(key, bytes)| match bytes {
                Ok(Some(bytes)) => Ok(bytes),
                Ok(None) => Err((key.clone(), "the staged object vanished".into())),
                Err(e) => Err((key.clone(), boxed(e))),
            })
            .collect()
    };
    let documents: Vec<String> = keys.iter().filter(|k| is_metadata(k)).cloned().collect();
    for (key, bytes) in documents.iter().zip(read(&documents)?) {
        let node = key.trim_end_matches("zarr.json").trim_end_matches('/');
        if node.is_empty() || !is_array_document(&bytes) {
            continue;
        }
        runtime.block_on(async {
            if store.exists(key).await.unwrap_or(false) {
                store
                    .delete_dir(node)
                    .await
                    .map_err(|e| (node.to_string(), boxed(e)))?;
            }
            Ok::<_, WriteError>(())
        })?;
    }
    for batch in keys.chunks(BATCH) {
        let bytes = read(batch)?;
        runtime.block_on(async {
            // Documents come in order, parents first: one at a time; chunks all at once.
            for (key, bytes) in batch.iter().zip(bytes) {
                store
                    .set(key, bytes)
                    .await
                    .map_err(|e| (key.clone(), boxed(e)))?;
            }
            Ok::<_, WriteError>(())
        })?;
    }
    Ok(())
}

/// The token of an earlier publication of `staged` that may have committed.
fn read_token(staging: &Staging) -> Option<String> {
    let bytes = staging.get(COMMIT_RECORD).ok()??;
    let doc: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    doc.get("token")?.as_str().map(str::to_string)
}

/// Records a new token for this publication (the store writes it whole or not at all).
fn write_token(staging: &Staging) -> zshard_store::Result<String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let token = format!("{}-{nanos}", std::process::id());
    let doc = serde_json::json!({ "token": token });
    staging.put(COMMIT_RECORD, Bytes::from(doc.to_string()))?;
    Ok(token)
}

/// The object, beside the commit record, written once the commit is made: the token and the
/// snapshot, for whoever looks at a staging folder left by a run killed before removing it (a rerun
/// trusts only the branch's history).
const COMMITTED_RECORD: &str = ".zshard-committed.json";

/// Writes [`COMMITTED_RECORD`].
fn record_commit(staging: &Staging, token: &str, snapshot: &str) -> zshard_store::Result<()> {
    let doc = serde_json::json!({ "token": token, "snapshot": snapshot });
    staging.put(COMMITTED_RECORD, Bytes::from(doc.to_string()))
}

/// The id of the snapshot on `branch`'s recent history committed with `token`, if any.
async fn find_commit(
    repository: &Repository,
    branch: &str,
    token: &str,
) -> std::result::Result<Option<String>, Box<dyn std::error::Error + Send + Sync>> {
    let version = VersionInfo::BranchTipRef(branch.to_string());
    let ancestry = repository.ancestry(&version).await?;
    let mut ancestry = std::pin::pin!(ancestry.take(ANCESTRY_SEARCH));
    while let Some(info) = ancestry.next().await {
        let info = info?;
        if info.metadata.get(TOKEN_PROPERTY).and_then(|t| t.as_str()) == Some(token) {
            return Ok(Some(info.id.to_string()));
        }
    }
    Ok(None)
}

/// Creates `branch` at `main`'s tip when it does not exist.
async fn ensure_branch(
    repository: &Repository,
    branch: &str,
) -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
    if repository.list_branches().await?.contains(branch) {
        return Ok(());
    }
    let tip = repository.lookup_branch("main").await?;
    repository.create_branch(branch, &tip).await?;
    Ok(())
}

/// Whether a staged `zarr.json` describes an array.
fn is_array_document(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(bytes)
        .ok()
        .is_some_and(|doc| doc.get("node_type").and_then(|t| t.as_str()) == Some("array"))
}

fn is_metadata(key: &str) -> bool {
    key == "zarr.json" || key.ends_with("/zarr.json")
}

/// The staged keys: documents first, parents before children, then chunks; zshard's own state
/// (`.zshard/`, the commit record) and staged temporary files (`KEY#N`) left out.
fn staged_keys(staging: &Staging) -> zshard_store::Result<Vec<String>> {
    let mut keys: Vec<String> = staging
        .list_keys("")?
        .into_iter()
        .filter(|key| !key.split('/').any(|part| part.starts_with('.')))
        .filter(|key| zshard_store::staged_base(key).is_none())
        .collect();
    keys.sort_by_key(|key| (!is_metadata(key), key.matches('/').count(), key.clone()));
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path as FsPath, PathBuf};

    #[test]
    fn staged_documents_come_first_parents_before_children() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for (key, bytes) in [
            ("zarr.json", "{}"),
            ("a/zarr.json", "{}"),
            ("a/b/zarr.json", "{}"),
            ("a/b/c/0/0", "x"),
            ("a/c/0", "x"),
            (".zshard/state.json", "{}"),
            ("a/.tmp-shard", "x"),
        ] {
            let path = root.join(key);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, bytes).expect("write");
        }
        let runtime = IoRuntime::new(1).expect("runtime");
        let staging = Staging::open(&root.to_string_lossy(), runtime, false).expect("staging");
        let keys = staged_keys(&staging).expect("list");
        assert_eq!(
            keys,
            [
                "zarr.json",
                "a/zarr.json",
                "a/b/zarr.json",
                "a/c/0",
                "a/b/c/0/0"
            ]
        );
    }

    /// A staged hierarchy: a root group and array `a` (4 uint8, one chunk of `value`s).
    fn stage(root: &FsPath, value: u8) {
        let array = r#"{"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "uint8",
          "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
          "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
          "fill_value": 0, "codecs": [{"name": "bytes"}], "attributes": {}}"#;
        let group = r#"{"zarr_format": 3, "node_type": "group", "attributes": {}}"#;
        for (key, bytes) in [
            ("zarr.json", group.as_bytes().to_vec()),
            ("a/zarr.json", array.as_bytes().to_vec()),
            ("a/c/0", vec![value; 4]),
        ] {
            let path = root.join(key);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, bytes).expect("write");
        }
    }

    /// The messages of `branch`'s commits, newest first.
    fn history(location: &str, runtime: &IoRuntime) -> Vec<String> {
        let storage = repo::storage(location, runtime).expect("storage");
        runtime.block_on(async {
            let repository = Repository::open(None, storage, HashMap::new())
                .await
                .expect("open");
            let version = VersionInfo::BranchTipRef("main".to_string());
            let ancestry = repository.ancestry(&version).await.expect("ancestry");
            let infos: Vec<_> = ancestry.collect().await;
            infos
                .into_iter()
                .map(|info| info.expect("snapshot").message)
                .collect()
        })
    }

    /// Commits a node at `key` to main as another writer would.
    async fn commit_elsewhere(folder: PathBuf, key: &str) {
        let storage = icechunk::ObjectStorage::new_local_filesystem(&folder)
            .await
            .expect("storage");
        let repository = Repository::open(None, Arc::new(storage), HashMap::new())
            .await
            .expect("open");
        let session = repository.writable_session("main").await.expect("session");
        let store = Store::from_session(Arc::new(RwLock::new(session))).await;
        let group = r#"{"zarr_format": 3, "node_type": "group", "attributes": {"by": "other"}}"#;
        store.set(key, Bytes::from(group)).await.expect("set");
        let session = store.session();
        let mut session = session.write().await;
        session.commit("other writer", None).await.expect("commit");
    }

    fn setup() -> (tempfile::TempDir, String, String, Arc<IoRuntime>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let staged = dir.path().join("staged");
        stage(&staged, 7);
        let staged = staged.to_string_lossy().into_owned();
        let location = dir.path().join("repo").to_string_lossy().into_owned();
        let runtime = IoRuntime::new(2).expect("runtime");
        create_if_missing(&location, &runtime).expect("create");
        (dir, staged, location, runtime)
    }

    #[test]
    fn a_second_publication_of_the_same_staging_finds_the_first_commit() {
        let (_dir, staged, location, runtime) = setup();
        let first = publish(&staged, &location, "main", "zshard", &runtime).expect("first");
        assert!(!first.already_committed);
        assert_eq!((first.nodes, first.chunks), (2, 1));
        // As after a run killed between its commit and removing the staging folder.
        let again = publish(&staged, &location, "main", "zshard", &runtime).expect("again");
        assert!(again.already_committed);
        assert_eq!(again.snapshot, first.snapshot);
        assert_eq!(
            history(&location, &runtime),
            ["zshard", "Repository initialized"]
        );
    }

    #[test]
    fn a_commit_meanwhile_elsewhere_in_the_repository_is_rebased_onto() {
        let (_dir, staged, location, runtime) = setup();
        let folder = PathBuf::from(&location);
        publish_with(&staged, &location, "main", "zshard", &runtime, || {
            commit_elsewhere(folder, "other/zarr.json")
        })
        .expect("rebased");
        assert_eq!(
            history(&location, &runtime),
            ["zshard", "other writer", "Repository initialized"]
        );
    }

    #[test]
    fn a_commit_meanwhile_to_the_same_array_is_a_conflict_naming_the_branch() {
        let (_dir, staged, location, runtime) = setup();
        let folder = PathBuf::from(&location);
        let err = publish_with(&staged, &location, "main", "zshard", &runtime, || {
            commit_elsewhere(folder, "a/zarr.json")
        })
        .expect_err("conflict");
        assert!(
            matches!(&err, Error::Conflict { branch, .. } if branch == "main"),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("branch \"main\" moved while committing"),
            "{err}"
        );
        assert_eq!(
            history(&location, &runtime),
            ["other writer", "Repository initialized"]
        );
    }
}
