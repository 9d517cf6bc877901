//! Publishing a converted hierarchy into a repository: the shards and `zarr.json` documents of a
//! finished conversion (staged in a local folder) become the nodes and chunks of one session on a
//! branch, committed once. Until that commit nothing is visible on the branch, and only the nodes of
//! this conversion are added or replaced.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use icechunk::conflicts::detector::ConflictDetector;
use icechunk::format::manifest::{ChunkPayload, ChunkRef};
use icechunk::format::{ChunkId, ChunkIndices, Path as IcechunkPath, SnapshotId};
use icechunk::repository::VersionInfo;
use icechunk::session::SessionErrorKind;
use icechunk::{Repository, Store};
use tokio::sync::RwLock;
use zshard_store::{IoRuntime, ListedObject, Store as Staging};

use crate::chunks::{self, is_metadata, StoredChunk};
use crate::error::{boxed, Error, Result};
use crate::repo;
use crate::{DestinationSpec, OnBranch, Published, SpecVersion, COMMIT_RECORD, STAGING};

/// Creates an empty repository at `location` when there is none, in spec version `spec` (default
/// 2), before anything is staged in its folder (Icechunk creates repositories only in empty
/// folders). An existing repository is written in its own version: asking for another fails with
/// [`Error::VersionMismatch`].
pub fn create_if_missing(
    location: &str,
    spec: Option<SpecVersion>,
    runtime: &IoRuntime,
) -> Result<DestinationSpec> {
    let storage = repo::storage(location, runtime)?;
    if let Some(found) = repo::detect(location, &storage, runtime)? {
        return existing(location, found, spec);
    }
    let version = spec.unwrap_or_default();
    runtime
        .block_on(
            Repository::create(storage)
                .spec_version(repo::spec_version_bin(version))
                .execute(),
        )
        .map_err(|e| repo::open_failure(location, e))?;
    Ok(DestinationSpec {
        version,
        exists: false,
    })
}

/// The spec version a conversion into `location` writes, asking for `spec`, without writing: the
/// repository's own when there is one, else `spec` (default 2). Refuses as [`create_if_missing`]
/// does.
pub fn destination_spec(
    location: &str,
    spec: Option<SpecVersion>,
    runtime: &IoRuntime,
) -> Result<DestinationSpec> {
    let storage = repo::storage(location, runtime)?;
    match repo::detect(location, &storage, runtime)? {
        Some(found) => existing(location, found, spec),
        None => Ok(DestinationSpec {
            version: spec.unwrap_or_default(),
            exists: false,
        }),
    }
}

/// An existing repository of version `found`, when `wanted` does not ask for another.
fn existing(
    location: &str,
    found: SpecVersion,
    wanted: Option<SpecVersion>,
) -> Result<DestinationSpec> {
    match wanted {
        Some(wanted) if wanted != found => Err(Error::VersionMismatch {
            repo: location.to_string(),
            found,
            wanted,
        }),
        _ => Ok(DestinationSpec {
            version: found,
            exists: true,
        }),
    }
}

/// The snapshot property holding a publication's token (see [`COMMIT_RECORD`]).
const TOKEN_PROPERTY: &str = "zshard_commit";

/// The snapshot property recording which conversion a publication committed: `{"fingerprint":
/// SHA-256 of the conversion's fingerprint, "arrays": {path: SHA-256 of the array's zarr.json}}`
/// (digests, not the documents: spec 2 keeps every snapshot's properties in the one `repo` object
/// rewritten by each commit).
const CONVERSION_PROPERTY: &str = "zshard_conversion";

/// How far back a branch's history is searched for a publication's commit.
const ANCESTRY_SEARCH: usize = 1000;

/// Commits the Zarr v3 hierarchy staged at the location `staged` (the repository's staging folder,
/// [`crate::staging_location`]: its shards are copied into the repository's chunk storage from
/// there) to `branch` of the repository at
/// `location` (made by [`create_if_missing`]; the branch is created from `main`'s tip when missing),
/// in the repository's own spec version, as one commit with
/// `message`. Arrays of the repository at the staged arrays' paths are replaced; everything else
/// stays. When the branch moved meanwhile, the commit is rebased onto its new tip if the changes do
/// not overlap, else it fails with [`Error::Conflict`]. A publication of `staged` that already
/// committed (a run killed after its commit) is found on the branch and not committed again.
/// The commit records `conversion` (the conversion's fingerprint: source and every array's
/// document) as a digest, with a digest of each array document it commits, so that a rerun finds
/// it on the branch ([`on_branch`]). In a local repository, the branch reference that a run killed
/// while moving it left staged (`refs/branch.NAME/ref.json#N` in spec version 1, `repo#N` in spec
/// version 2, naming a snapshot of this publication) is removed.
pub fn publish(
    staged: &str,
    location: &str,
    branch: &str,
    message: &str,
    conversion: &serde_json::Value,
    runtime: &Arc<IoRuntime>,
) -> Result<Published> {
    publish_with(
        staged,
        location,
        branch,
        message,
        conversion,
        runtime,
        || async {},
    )
}

/// [`publish`], running `before_commit` between writing the session and committing it (tests
/// commit to the branch there, as another writer would).
fn publish_with<F, Fut>(
    staged: &str,
    location: &str,
    branch: &str,
    message: &str,
    conversion: &serde_json::Value,
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
    check_staging(staged, location)?;
    let staging = Staging::open(staged, runtime.clone(), false)
        .map_err(|e| write_error("opening the staged output", boxed(e)))?;
    let objects = chunks::staged_objects(&staging)
        .map_err(|e| write_error("listing the staged output", boxed(e)))?;
    let mut published = Published {
        branch: branch.to_string(),
        snapshot: String::new(),
        nodes: objects.iter().filter(|o| is_metadata(&o.key)).count(),
        chunks: objects.iter().filter(|o| !is_metadata(&o.key)).count(),
        stored_at_commit: 0,
        already_committed: false,
    };
    let repository = repo::open(location, runtime)?;
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
                remove_killed_ref_writes(location, branch, &repository, &token, runtime)?;
                return Ok(published);
            }
            token
        }
        None => write_token(&staging)
            .map_err(|e| write_error("recording the commit in the staging folder", boxed(e)))?,
    };
    let stored = store_unstored(&staging, location, &objects, None, "commit", runtime)
        .map_err(|e| write_error("storing the staged shards as chunks", boxed(e)))?;
    published.stored_at_commit = stored.now;
    let session = runtime
        .block_on(repository.writable_session(branch))
        .map_err(|e| write_error(&format!("opening branch {branch:?}"), boxed(e.kind)))?;
    let store = runtime.block_on(Store::from_session(Arc::new(RwLock::new(session))));
    let arrays = write_session(&store, &staging, &objects, &stored.chunks, runtime)
        .map_err(|(what, e)| write_error(&what, e))?;
    runtime.block_on(before_commit());
    let record = serde_json::json!({
        "fingerprint": digest(conversion.to_string().as_bytes()),
        "arrays": arrays,
    });
    let properties = [
        (
            TOKEN_PROPERTY.to_string(),
            serde_json::Value::from(token.as_str()),
        ),
        (CONVERSION_PROPERTY.to_string(), record),
    ];
    let snapshot = runtime
        .block_on(async {
            let session = store.session();
            let mut session = session.write().await;
            session
                .commit(message)
                .properties(properties.into_iter().collect())
                .rebase(&ConflictDetector, 3)
                .execute()
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
            other => write_error("committing", boxed(other)),
        })?;
    published.snapshot = snapshot.to_string();
    record_commit(&staging, &token, &published.snapshot)
        .map_err(|e| write_error("recording the commit in the staging folder", boxed(e)))?;
    remove_killed_ref_writes(location, branch, &repository, &token, runtime)?;
    Ok(published)
}

/// An error of writing the session: what was being written, and why.
type WriteError = (String, Box<dyn std::error::Error + Send + Sync>);

/// Writes the staged documents into the session and references the stored chunks: arrays being
/// replaced are deleted first (they lose every chunk of their former shape; groups stay with
/// whatever else they hold), then documents, parents before children (a chunk needs its array),
/// then one reference per shard. Returns the digest of every array document written, by the
/// array's path (the root's is empty).
fn write_session(
    store: &Store,
    staging: &Staging,
    objects: &[ListedObject],
    stored: &HashMap<String, StoredChunk>,
    runtime: &IoRuntime,
) -> std::result::Result<serde_json::Map<String, serde_json::Value>, WriteError> {
    let documents: Vec<String> = objects
        .iter()
        .filter(|o| is_metadata(&o.key))
        .map(|o| o.key.clone())
        .collect();
    let mut bytes = Vec::with_capacity(documents.len());
    for (key, read) in documents.iter().zip(staging.get_many(&documents)) {
        match read {
            Ok(Some(read)) => bytes.push(read),
            Ok(None) => return Err((key.clone(), "the staged object vanished".into())),
            Err(e) => return Err((key.clone(), boxed(e))),
        }
    }
    let arrays = documents
        .iter()
        .zip(&bytes)
        .filter(|(_, bytes)| is_array_document(bytes))
        .map(|(key, bytes)| (node_of(key).to_string(), digest(bytes).into()))
        .collect();
    let references = objects
        .iter()
        .filter(|o| !is_metadata(&o.key))
        .map(|o| reference(&o.key, stored))
        .collect::<std::result::Result<Vec<_>, WriteError>>()?;
    runtime.block_on(async {
        for (key, bytes) in documents.iter().zip(&bytes) {
            let node = node_of(key);
            if !node.is_empty()
                && is_array_document(bytes)
                && store.exists(key).await.unwrap_or(false)
            {
                store
                    .delete_dir(node)
                    .await
                    .map_err(|e| (node.to_string(), boxed(e.kind)))?;
            }
        }
        for (key, bytes) in documents.iter().zip(bytes) {
            store
                .set(key, bytes)
                .await
                .map_err(|e| (key.clone(), boxed(e.kind)))?;
        }
        let session = store.session();
        let mut session = session.write().await;
        for (key, node, coords, payload) in references {
            session
                .set_chunk_ref(node, ChunkIndices(coords), Some(payload))
                .await
                .map_err(|e| (key, boxed(e.kind)))?;
        }
        Ok::<_, WriteError>(())
    })?;
    Ok(arrays)
}

/// The path of the node whose `zarr.json` is at `key` (the root's is empty).
fn node_of(key: &str) -> &str {
    key.trim_end_matches("zarr.json").trim_end_matches('/')
}

/// The SHA-256 of `bytes`, in hex.
fn digest(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A shard's reference: its key, node, coordinates and stored chunk.
type Reference = (String, IcechunkPath, Vec<u32>, ChunkPayload);

/// The reference to the stored chunk of the shard `key`.
fn reference(
    key: &str,
    stored: &HashMap<String, StoredChunk>,
) -> std::result::Result<Reference, WriteError> {
    let fail = |reason: &str| (key.to_string(), reason.to_string().into());
    let (node, coords) = chunks::chunk_coordinates(key)
        .ok_or_else(|| fail("not a chunk key of Zarr v3's default encoding"))?;
    let node = IcechunkPath::try_from(node.as_str()).map_err(|_| fail("not a node path"))?;
    let chunk = stored
        .get(key)
        .ok_or_else(|| fail("the shard was not stored as a chunk"))?;
    let id = ChunkId::try_from(chunk.id.as_str()).map_err(fail)?;
    let payload = ChunkPayload::Ref(ChunkRef {
        id,
        offset: 0,
        length: chunk.length,
    });
    Ok((key.to_string(), node, coords, payload))
}

/// The stored chunks of a publication, and how many of them were stored by the call.
struct Stored {
    chunks: HashMap<String, StoredChunk>,
    now: usize,
}

/// Refuses a staging folder other than the repository's own: shards are copied into the
/// repository's chunk storage from `STAGING/KEY` of its location.
fn check_staging(staged: &str, location: &str) -> Result<()> {
    if crate::staging_location(location)? == staged {
        return Ok(());
    }
    Err(Error::Write {
        repo: location.to_string(),
        what: format!("staging in {staged}"),
        source: format!("conversions into a repository stage in its folder {STAGING}").into(),
    })
}

/// Stores the staged shards among `keys` (all when `None`) that no record names yet into the
/// repository at `location` (see `chunks.rs`), recording them under names starting with `writer`.
fn store_unstored(
    staging: &Staging,
    location: &str,
    objects: &[ListedObject],
    keys: Option<&HashSet<String>>,
    writer: &str,
    runtime: &Arc<IoRuntime>,
) -> zshard_store::Result<Stored> {
    // A worker looks only at its own shards: the records and copies of the others are theirs.
    let staged: HashMap<&str, &ListedObject> = objects
        .iter()
        .filter(|o| keys.is_none_or(|keys| keys.contains(&o.key)))
        .map(|o| (o.key.as_str(), o))
        .collect();
    let repository = Staging::open(location, runtime.clone(), false)?;
    let mut recorded = chunks::recorded(staging, &repository, &staged)?;
    let unstored = chunks::unstored(objects, keys, &recorded);
    if !unstored.is_empty() {
        recorded.extend(chunks::store(staging, &repository, &unstored, writer)?);
    }
    Ok(Stored {
        chunks: recorded,
        now: unstored.len(),
    })
}

/// Stores the staged shards `keys` (as the staging folder `staged` of the repository at
/// `location` names them; those not staged are left out) in the repository's chunk storage ahead
/// of the commit, recorded under names starting with `writer`, so that the commit only references
/// them. Shards recorded before are not stored again. Returns how many were stored now.
pub fn store_staged_shards(
    staged: &str,
    location: &str,
    keys: &HashSet<String>,
    writer: &str,
    runtime: &Arc<IoRuntime>,
) -> Result<usize> {
    let write_error = |e: zshard_store::Error| Error::Write {
        repo: location.to_string(),
        what: "storing the staged shards as chunks".to_string(),
        source: boxed(e),
    };
    check_staging(staged, location)?;
    let staging = Staging::open(staged, runtime.clone(), false).map_err(write_error)?;
    let objects = chunks::staged_objects_around(&staging, keys).map_err(write_error)?;
    let stored = store_unstored(&staging, location, &objects, Some(keys), writer, runtime)
        .map_err(write_error)?;
    Ok(stored.now)
}

/// Before an `--overwrite` conversion into the staging folder `staged` of the repository at
/// `location`: forgets the shards stored ahead of the commit (they are about to be replaced; the
/// commit then stores every shard it finds unrecorded) and the token of an earlier publication (a
/// run killed after committing another conversion: this one must commit its own output, not find
/// that commit and drop it).
pub fn forget_stored_shards(staged: &str, location: &str, runtime: &Arc<IoRuntime>) -> Result<()> {
    let forget = || {
        // A staging folder not made yet is made now, as the conversion is about to.
        let staging = Staging::open(staged, runtime.clone(), true)?;
        chunks::forget(&staging)?;
        staging.delete_many(&[COMMITTED_RECORD.to_string(), COMMIT_RECORD.to_string()])
    };
    forget().map_err(|e| Error::Write {
        repo: location.to_string(),
        what: "forgetting an earlier run's records in the staging folder".to_string(),
        source: boxed(e),
    })
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

/// The snapshot on `branch` that an earlier publication of the staging folder `staged` of the
/// repository at `location` committed, if its commit record is still there and the branch's
/// history holds that commit: a run killed after its commit, while removing the staging folder,
/// whose leftovers are to be removed rather than converted or committed again.
pub fn earlier_commit(
    staged: &str,
    location: &str,
    branch: &str,
    runtime: &Arc<IoRuntime>,
) -> Result<Option<String>> {
    check_staging(staged, location)?;
    let read_error = |e: Box<dyn std::error::Error + Send + Sync>| Error::Write {
        repo: location.to_string(),
        what: format!("reading branch {branch:?}"),
        source: e,
    };
    let local = zshard_store::Location::parse(staged)
        .ok()
        .and_then(|parsed| parsed.local_path().map(std::path::Path::to_path_buf));
    if local.is_some_and(|folder| !folder.is_dir()) {
        return Ok(None);
    }
    let staging = Staging::open(staged, runtime.clone(), false).map_err(|e| Error::Write {
        repo: location.to_string(),
        what: "opening the staging folder".to_string(),
        source: boxed(e),
    })?;
    let Some(token) = read_token(&staging) else {
        return Ok(None);
    };
    let repository = repo::open(location, runtime)?;
    runtime
        .block_on(async {
            if !repository
                .list_branches()
                .await
                .map_err(boxed)?
                .contains(branch)
            {
                return Ok(None);
            }
            find_commit(&repository, branch, &token).await
        })
        .map_err(read_error)
}

/// What `branch` of the repository at `location` holds of the conversion whose fingerprint is
/// `conversion` (arrays at `arrays`, groups at `groups`; the root's path is empty), from the
/// records zshard's commits carry (see [`CONVERSION_PROPERTY`]) and the branch tip's documents:
/// each array's document at the tip is matched to the newest of zshard's commits that wrote the
/// array; when that commit wrote this very document, zshard's output is still there.
pub fn on_branch(
    location: &str,
    branch: &str,
    conversion: &serde_json::Value,
    arrays: &[String],
    groups: &[String],
    runtime: &Arc<IoRuntime>,
) -> Result<OnBranch> {
    let repository = repo::open(location, runtime)?;
    let ours = digest(conversion.to_string().as_bytes());
    runtime
        .block_on(async {
            if !repository
                .list_branches()
                .await
                .map_err(boxed)?
                .contains(branch)
            {
                return Ok(OnBranch::Nothing);
            }
            let version = VersionInfo::BranchTipRef(branch.to_string());
            // zshard's commits on the branch, newest first: snapshot and record.
            let mut recorded: Vec<(String, serde_json::Value)> = Vec::new();
            let ancestry = repository.ancestry(&version).await.map_err(boxed)?;
            let mut ancestry = std::pin::pin!(ancestry.take(ANCESTRY_SEARCH));
            while let Some(info) = ancestry.next().await {
                let info = info.map_err(boxed)?;
                if let Some(record) = info.metadata.get(CONVERSION_PROPERTY) {
                    recorded.push((info.id.to_string(), record.clone()));
                }
            }
            if recorded.is_empty() {
                return Ok(OnBranch::Nothing);
            }
            let session = repository.readonly_session(&version).await.map_err(boxed)?;
            let document = |path: &str| {
                let node = IcechunkPath::try_from(format!("/{path}").as_str());
                let session = &session;
                async move {
                    match node {
                        Ok(node) => session.get_node(&node).await.ok().map(|n| n.user_data),
                        Err(_) => None,
                    }
                }
            };
            // Per array: the commit of zshard whose document is still there.
            let mut writers = Vec::with_capacity(arrays.len());
            for path in arrays {
                let Some(bytes) = document(path).await else {
                    writers.push(None);
                    continue;
                };
                let newest = recorded
                    .iter()
                    .find(|(_, record)| record["arrays"].get(path.as_str()).is_some());
                let written = newest.filter(|(_, record)| {
                    record["arrays"][path.as_str()].as_str() == Some(digest(&bytes).as_str())
                });
                writers.push(written);
            }
            let same = |record: &serde_json::Value| record["fingerprint"].as_str() == Some(&ours);
            for (path, writer) in arrays.iter().zip(&writers) {
                if let Some((snapshot, record)) = writer {
                    if !same(record) {
                        return Ok(OnBranch::Other {
                            path: path.clone(),
                            snapshot: snapshot.clone(),
                        });
                    }
                }
            }
            let mut groups_there = true;
            for path in groups {
                groups_there &= document(path).await.is_some();
            }
            let all_ours = writers.iter().all(Option::is_some);
            let snapshot = match writers.first() {
                Some(Some((snapshot, _))) => Some(snapshot.clone()),
                Some(None) => None,
                // A conversion of groups only: its commit is the one with its fingerprint.
                None => recorded
                    .iter()
                    .find(|(_, record)| same(record))
                    .map(|(snapshot, _)| snapshot.clone()),
            };
            match snapshot {
                Some(snapshot) if all_ours && groups_there => Ok(OnBranch::Same { snapshot }),
                _ => Ok(OnBranch::Nothing),
            }
        })
        .map_err(|e: Box<dyn std::error::Error + Send + Sync>| Error::Write {
            repo: location.to_string(),
            what: format!("reading branch {branch:?}"),
            source: e,
        })
}

/// In a local repository, removes what a run of this publication (`token`) killed while moving
/// `branch` left: the store's temporary copy of the branch reference, `refs/branch.NAME/ref.json#N`
/// in spec version 1, of the repository object, `repo#N` in spec version 2, when the branch it names
/// points at a snapshot that carries `token`. Any other file stays, and so does one that cannot be
/// read as such a reference.
fn remove_killed_ref_writes(
    location: &str,
    branch: &str,
    repository: &Repository,
    token: &str,
    runtime: &IoRuntime,
) -> Result<()> {
    let Some(folder) = zshard_store::Location::parse(location)
        .ok()
        .and_then(|parsed| parsed.local_path().map(std::path::Path::to_path_buf))
    else {
        return Ok(());
    };
    let token_of = |id: &SnapshotId| {
        runtime
            .block_on(repository.lookup_snapshot(id))
            .ok()
            .and_then(|info| Some(info.metadata.get(TOKEN_PROPERTY)?.as_str()?.to_string()))
    };
    let mut staged: Vec<(std::path::PathBuf, Option<String>)> = Vec::new();
    for path in staged_copies(
        &folder.join("refs").join(format!("branch.{branch}")),
        "ref.json",
    ) {
        let named = std::fs::read(&path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
            .and_then(|doc| doc.get("snapshot")?.as_str().map(str::to_string))
            .and_then(|id| SnapshotId::try_from(id.as_str()).ok());
        let token = named.as_ref().and_then(token_of);
        staged.push((path, token));
    }
    // A spec-2 copy names a snapshot that the repository object does not list yet (the commit did
    // not land): the copy's own list of snapshots describes it.
    for path in staged_copies(&folder, "repo") {
        // A repository object is small; a file of 64 MiB or more is none of these.
        let token = std::fs::metadata(&path)
            .ok()
            .filter(|meta| meta.len() < 64 << 20)
            .and_then(|_| std::fs::read(&path).ok())
            .and_then(|bytes| branch_tip_token(&bytes, branch));
        staged.push((path, token));
    }
    for (path, token_named) in staged {
        if token_named.as_deref() == Some(token) {
            std::fs::remove_file(&path).map_err(|e| Error::Write {
                repo: location.to_string(),
                what: format!("removing {}", path.display()),
                source: boxed(e),
            })?;
        }
    }
    Ok(())
}

/// The files of `folder` named `NAME#N` (N a number): the local store's temporary copies of
/// `NAME`, renamed over it once written.
fn staged_copies(folder: &std::path::Path, name: &str) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|entry| {
            let file_name = entry.file_name().to_string_lossy().into_owned();
            file_name
                .strip_prefix(name)
                .and_then(|rest| rest.strip_prefix('#'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                && entry.file_type().is_ok_and(|t| t.is_file())
        })
        .map(|entry| entry.path())
        .collect()
}

/// The commit token (zshard's property) of the snapshot that `branch` points at in the bytes of a
/// spec-2 repository object (`repo`): its header (file type, compression, spec version), its zstd
/// body and its flatbuffer are read by icechunk's own format code, and the snapshot's properties
/// come from the object's own list of snapshots. `None` when the bytes are not such an object, lack
/// the branch or the snapshot carries no token.
fn branch_tip_token(bytes: &[u8], branch: &str) -> Option<String> {
    use icechunk::format::format_constants::{
        parse_file_header, CompressionAlgorithmBin, FileTypeBin, ICECHUNK_FILE_HEADER_LEN,
    };
    // What a repository object may hold decoded, at most (a file that decodes to more is left).
    const REPO_INFO_MAX: u64 = 64 << 20;
    let header = parse_file_header(bytes).ok()?;
    if !matches!(header.file_type, FileTypeBin::RepoInfo)
        || !matches!(header.compression, CompressionAlgorithmBin::Zstd)
    {
        return None;
    }
    let mut body = Vec::new();
    let decoder = zstd::stream::read::Decoder::new(bytes.get(ICECHUNK_FILE_HEADER_LEN..)?).ok()?;
    std::io::Read::read_to_end(
        &mut std::io::Read::take(decoder, REPO_INFO_MAX + 1),
        &mut body,
    )
    .ok()?;
    if body.len() as u64 > REPO_INFO_MAX {
        return None;
    }
    let info =
        icechunk::format::serializers::deserialize_repo_info(header.spec_version, body).ok()?;
    let tip = info.resolve_branch(branch).ok()?;
    let snapshot = info.find_snapshot(&tip).ok()?;
    Some(snapshot.metadata.get(TOKEN_PROPERTY)?.as_str()?.to_string())
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
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
        let objects = chunks::staged_objects(&staging).expect("list");
        let keys: Vec<&str> = objects.iter().map(|o| o.key.as_str()).collect();
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
            let repository = Repository::open(storage).execute().await.expect("open");
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
        let storage = icechunk::new_local_filesystem_storage(&folder)
            .await
            .expect("storage");
        let repository = Repository::open(storage).execute().await.expect("open");
        let session = repository.writable_session("main").await.expect("session");
        let store = Store::from_session(Arc::new(RwLock::new(session))).await;
        let group = r#"{"zarr_format": 3, "node_type": "group", "attributes": {"by": "other"}}"#;
        store.set(key, Bytes::from(group)).await.expect("set");
        let session = store.session();
        let mut session = session.write().await;
        session
            .commit("other writer")
            .execute()
            .await
            .expect("commit");
    }

    fn setup() -> (tempfile::TempDir, String, String, Arc<IoRuntime>) {
        setup_in(None)
    }

    /// [`setup`] in a repository of spec version `spec` (default 2).
    fn setup_in(spec: Option<SpecVersion>) -> (tempfile::TempDir, String, String, Arc<IoRuntime>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let location = dir.path().join("repo").to_string_lossy().into_owned();
        let runtime = IoRuntime::new(2).expect("runtime");
        let made = create_if_missing(&location, spec, &runtime).expect("create");
        assert_eq!(
            made,
            DestinationSpec {
                version: spec.unwrap_or_default(),
                exists: false
            }
        );
        let staged = crate::staging_location(&location).expect("staging");
        stage(FsPath::new(&staged), 7);
        (dir, staged, location, runtime)
    }

    #[test]
    fn a_second_publication_of_the_same_staging_finds_the_first_commit() {
        let (_dir, staged, location, runtime) = setup();
        let first =
            publish(&staged, &location, "main", "zshard", &json!({}), &runtime).expect("first");
        assert!(!first.already_committed);
        assert_eq!((first.nodes, first.chunks), (2, 1));
        // As after a run killed between its commit and removing the staging folder.
        let again =
            publish(&staged, &location, "main", "zshard", &json!({}), &runtime).expect("again");
        assert!(again.already_committed);
        assert_eq!(again.snapshot, first.snapshot);
        assert_eq!(
            history(&location, &runtime),
            ["zshard", "Repository initialized"]
        );
    }

    #[test]
    fn the_branch_holds_a_publication_by_its_conversion() {
        let (_dir, staged, location, runtime) = setup();
        let ours = json!({"source": "/src", "arrays": [{"path": "a"}]});
        let held = |conversion: &serde_json::Value, arrays: &[&str], branch: &str| {
            let arrays: Vec<String> = arrays.iter().map(|a| a.to_string()).collect();
            on_branch(
                &location,
                branch,
                conversion,
                &arrays,
                &[String::new()],
                &runtime,
            )
            .expect("on branch")
        };
        assert_eq!(held(&ours, &["a"], "main"), OnBranch::Nothing);
        let published =
            publish(&staged, &location, "main", "zshard", &ours, &runtime).expect("publish");
        let same = OnBranch::Same {
            snapshot: published.snapshot.clone(),
        };
        assert_eq!(held(&ours, &["a"], "main"), same);
        // Another source or other options, at the array zshard committed: named with its commit.
        let other = json!({"source": "/elsewhere", "arrays": [{"path": "a"}]});
        assert_eq!(
            held(&other, &["a"], "main"),
            OnBranch::Other {
                path: "a".to_string(),
                snapshot: published.snapshot
            }
        );
        // An array that is not there, and a branch that does not exist: nothing.
        assert_eq!(held(&ours, &["a", "b"], "main"), OnBranch::Nothing);
        assert_eq!(held(&ours, &["a"], "dev"), OnBranch::Nothing);
    }

    #[test]
    fn after_forgetting_an_earlier_commit_the_staging_is_committed_again() {
        let (_dir, staged, location, runtime) = setup();
        let first =
            publish(&staged, &location, "main", "first", &json!({}), &runtime).expect("first");
        // As before an --overwrite run into a staging folder left by a run killed after committing.
        forget_stored_shards(&staged, &location, &runtime).expect("forget");
        let again =
            publish(&staged, &location, "main", "second", &json!({}), &runtime).expect("again");
        assert!(!again.already_committed);
        assert_ne!(again.snapshot, first.snapshot);
        assert_eq!(
            history(&location, &runtime),
            ["second", "first", "Repository initialized"]
        );
    }

    #[test]
    fn a_commit_meanwhile_elsewhere_in_the_repository_is_rebased_onto() {
        let (_dir, staged, location, runtime) = setup();
        let folder = PathBuf::from(&location);
        publish_with(
            &staged,
            &location,
            "main",
            "zshard",
            &json!({}),
            &runtime,
            || commit_elsewhere(folder, "other/zarr.json"),
        )
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
        let err = publish_with(
            &staged,
            &location,
            "main",
            "zshard",
            &json!({}),
            &runtime,
            || commit_elsewhere(folder, "a/zarr.json"),
        )
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

    #[test]
    fn repositories_are_made_in_the_version_asked_for_and_written_in_their_own() {
        for spec in [SpecVersion::V1, SpecVersion::V2] {
            let (_dir, staged, location, runtime) = setup_in(Some(spec));
            // Spec 1 keeps branches under refs/, spec 2 names them in the `repo` object.
            let folder = FsPath::new(&location);
            assert_eq!(folder.join("refs").is_dir(), spec == SpecVersion::V1);
            assert_eq!(folder.join("repo").is_file(), spec == SpecVersion::V2);
            let existing = DestinationSpec {
                version: spec,
                exists: true,
            };
            assert_eq!(
                destination_spec(&location, None, &runtime).expect("probe"),
                existing
            );
            assert_eq!(
                create_if_missing(&location, None, &runtime).expect("again"),
                existing
            );
            let other = match spec {
                SpecVersion::V1 => SpecVersion::V2,
                SpecVersion::V2 => SpecVersion::V1,
            };
            let refused = create_if_missing(&location, Some(other), &runtime).expect_err("other");
            assert!(
                matches!(refused, Error::VersionMismatch { found, wanted, .. } if found == spec && wanted == other),
                "{refused}"
            );
            let published = publish(&staged, &location, "main", "zshard", &json!({}), &runtime)
                .expect("publish");
            assert_eq!((published.nodes, published.chunks), (2, 1));
            assert_eq!(
                history(&location, &runtime),
                ["zshard", "Repository initialized"]
            );
            let storage = repo::storage(&location, &runtime).expect("storage");
            assert_eq!(
                repo::detect(&location, &storage, &runtime).expect("detect"),
                Some(spec)
            );
        }
    }

    #[test]
    fn a_folder_of_other_objects_is_no_repository_and_says_so() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("data.bin"), b"x").expect("write");
        let location = dir.path().to_string_lossy().into_owned();
        let runtime = IoRuntime::new(1).expect("runtime");
        let err = create_if_missing(&location, None, &runtime).expect_err("not clean");
        let text = err.to_string();
        assert!(text.contains(&location), "{text}");
        assert!(text.contains("no Icechunk repository"), "{text}");
        assert!(!text.contains("clean prefixes"), "{text}");
        let err = repo::open(&location, &runtime).expect_err("no repository");
        assert!(err.to_string().contains("spec version 2"), "{err}");
    }
}
