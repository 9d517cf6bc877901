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
use icechunk::format::snapshot::NodeData;
use icechunk::format::{ChunkId, ChunkIndices, Path as IcechunkPath, SnapshotId};
use icechunk::repository::VersionInfo;
use icechunk::session::SessionErrorKind;
use icechunk::{Repository, Store};
use tokio::sync::RwLock;
use zshard_store::{IoRuntime, ListedObject, Store as Staging};

use crate::chunks::{self, is_metadata, StoredChunk};
use crate::error::{boxed, Error, Result};
use crate::repo;
use crate::{DestinationSpec, Kept, OnBranch, Published, SpecVersion, COMMIT_RECORD, STAGING};

/// Creates an empty repository at `location` when there is none, in spec version `spec` (default
/// 2), before anything is staged in its folder (Icechunk creates repositories only in empty
/// folders). An existing repository is written in its own version: asking for another fails with
/// [`Error::VersionMismatch`].
pub fn create_if_missing(
    location: &str,
    spec: Option<SpecVersion>,
    runtime: &Arc<IoRuntime>,
) -> Result<DestinationSpec> {
    let location = crate::split_node(location).0;
    let storage = repo::storage(location, runtime)?;
    if let Some(found) = repo::detect(location, &storage, runtime)? {
        let existing = existing(location, found, spec)?;
        remove_linked_leftovers(location)?;
        return Ok(existing);
    }
    let version = spec.unwrap_or_default();
    // A creation killed before its last object (`repo`, or spec 1's branch main) leaves a folder
    // that Icechunk refuses to create in, or (when only staged copies are left, which its check
    // does not see) creates in beside them: what that creation wrote goes first.
    if !remove_half_made(location, runtime)? {
        // Made meanwhile by another run (a worker started beside this one).
        if let Some(found) = repo::detect(location, &storage, runtime)? {
            let existing = existing(location, found, spec)?;
            remove_linked_leftovers(location)?;
            return Ok(existing);
        }
    }
    runtime
        .block_on(
            Repository::create(storage)
                .spec_version(repo::spec_version_bin(version))
                .execute(),
        )
        .map_err(|e| repo::open_failure(location, e))?;
    remove_linked_leftovers(location)?;
    Ok(DestinationSpec {
        version,
        exists: false,
    })
}

/// The keys a repository's creation writes before the object that makes it a repository (spec 2's
/// `repo`, spec 1's `refs/branch.main/ref.json`), and the local store's staged copies of those
/// (`KEY#N`): the initial snapshot and its transaction log, whose id is the same in every
/// repository. A location holding only such keys is a creation killed halfway.
fn is_half_made_key(key: &str) -> bool {
    let initial = icechunk::format::snapshot::Snapshot::INITIAL_SNAPSHOT_ID.to_string();
    let written = [
        format!("snapshots/{initial}"),
        format!("transactions/{initial}"),
    ];
    let staged = ["repo", "refs/branch.main/ref.json"];
    match zshard_store::staged_base(key) {
        Some(base) => written.iter().any(|k| k == base) || staged.contains(&base),
        None => written.iter().any(|k| k == key),
    }
}

/// How long a half-made repository must stay as it is before it is taken for a creation killed
/// halfway (a live creation writes its few objects within milliseconds).
const HALF_MADE_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Removes what a creation killed halfway left at `location` (see [`is_half_made_key`]) and
/// returns true; when anything else is there (or nothing), or it changes meanwhile (see
/// [`HALF_MADE_GRACE`]), touches nothing and returns false.
fn remove_half_made(location: &str, runtime: &Arc<IoRuntime>) -> Result<bool> {
    let fail = |e: zshard_store::Error| Error::Write {
        repo: location.to_string(),
        what: "removing a repository creation killed halfway".to_string(),
        source: boxed(e),
    };
    let missing = zshard_store::Location::parse(location)
        .ok()
        .and_then(|parsed| parsed.local_path().map(|folder| !folder.is_dir()));
    if missing == Some(true) {
        return Ok(false);
    }
    let store = Staging::open(location, runtime.clone(), false).map_err(fail)?;
    let listing = || -> zshard_store::Result<(Vec<String>, Vec<String>)> {
        let mut keys = store.list_keys("")?;
        keys.sort();
        Ok((keys, store.staged_keys("")?))
    };
    let (keys, staged) = listing().map_err(fail)?;
    if keys.is_empty() && staged.is_empty() {
        return Ok(false);
    }
    if !keys.iter().chain(&staged).all(|k| is_half_made_key(k)) {
        return Ok(false);
    }
    // Another run (a worker started beside this one) may be creating the repository right now:
    // its creation moves on within the grace, a killed one does not.
    std::thread::sleep(HALF_MADE_GRACE);
    if listing().map_err(fail)? != (keys.clone(), staged) {
        return Ok(false);
    }
    store.delete_many(&keys).map_err(fail)?;
    store.remove_staged_below("").map_err(fail)?;
    for folder in ["snapshots", "transactions", "refs"] {
        store.remove_empty_folders(folder).map_err(fail)?;
    }
    Ok(true)
}

/// In a local repository, removes the staged copies (`KEY#N`) of its objects that are the very
/// file of the object (one hard link of two): Icechunk writes an object that must not exist yet
/// by linking its staged copy into place and then removing the copy, and a run killed in between
/// leaves the copy. Removing such a copy removes no data; copies that are files of their own (a
/// write still under way, or one that never got its object) stay. Only the repository's own
/// objects are looked at (`repo`, `config.yaml`, `refs/`, `snapshots/`, `transactions/`,
/// `manifests/`), never the chunks or anything else in the folder.
fn remove_linked_leftovers(location: &str) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Some(root) = zshard_store::Location::parse(location)
        .ok()
        .and_then(|parsed| parsed.local_path().map(std::path::Path::to_path_buf))
    else {
        return Ok(());
    };
    let mut folders = vec![root.clone()];
    for name in ["snapshots", "transactions", "manifests"] {
        folders.push(root.join(name));
    }
    // `refs/branch.NAME/` and `refs/tag.NAME/`, one level each.
    if let Ok(entries) = std::fs::read_dir(root.join("refs")) {
        folders.extend(
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path()),
        );
    }
    for folder in folders {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(base) = zshard_store::staged_base(&name) else {
                continue;
            };
            if folder == root && !matches!(base, "repo" | "config.yaml") {
                continue;
            }
            let (Ok(copy), Ok(object)) = (
                std::fs::symlink_metadata(entry.path()),
                std::fs::symlink_metadata(folder.join(base)),
            ) else {
                continue;
            };
            let same = copy.is_file()
                && object.is_file()
                && copy.dev() == object.dev()
                && copy.ino() == object.ino();
            if same {
                std::fs::remove_file(entry.path()).map_err(|e| Error::Write {
                    repo: location.to_string(),
                    what: format!("removing {}", entry.path().display()),
                    source: boxed(e),
                })?;
            }
        }
    }
    Ok(())
}

/// The spec version a conversion into `location` writes, asking for `spec`, without writing: the
/// repository's own when there is one, else `spec` (default 2). Refuses as [`create_if_missing`]
/// does.
pub fn destination_spec(
    location: &str,
    spec: Option<SpecVersion>,
    runtime: &IoRuntime,
) -> Result<DestinationSpec> {
    let location = crate::split_node(location).0;
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
    kept: &Kept,
    runtime: &Arc<IoRuntime>,
) -> Result<Published> {
    publish_with(
        staged,
        location,
        branch,
        message,
        (conversion, kept),
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
    (conversion, kept): (&serde_json::Value, &Kept),
    runtime: &Arc<IoRuntime>,
    before_commit: F,
) -> Result<Published>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let (location, node) = crate::split_node(location);
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
                remove_killed_snapshot_writes(location, &token)?;
                remove_linked_leftovers(location)?;
                return Ok(published);
            }
            token
        }
        None => write_token(&staging)
            .map_err(|e| write_error("recording the commit in the staging folder", boxed(e)))?,
    };
    let stored = store_unstored(
        &staging,
        (location, &node),
        &objects,
        None,
        "commit",
        runtime,
    )
    .map_err(|e| write_error("storing the staged shards as chunks", boxed(e)))?;
    published.stored_at_commit = stored.now;
    let session = runtime
        .block_on(repository.writable_session(branch))
        .map_err(|e| write_error(&format!("opening branch {branch:?}"), boxed(e.kind)))?;
    let store = runtime.block_on(Store::from_session(Arc::new(RwLock::new(session))));
    // Inside the repository, the staged nodes are under `node` (a conversion into `REPO#/PATH`).
    let written = kept.written.as_ref().map(|written| {
        written
            .iter()
            .map(|(path, coords)| (under(&node, path), coords.clone()))
            .collect::<HashMap<_, _>>()
    });
    let kept_records: HashMap<String, String> = kept
        .records
        .iter()
        .map(|(path, digest)| (under(&node, path), digest.clone()))
        .collect();
    let arrays = write_session(
        &store,
        &staging,
        (&objects, &stored.chunks),
        (&node, written.as_ref()),
        runtime,
    )
    .map_err(|(what, e)| write_error(&what, e))?;
    runtime.block_on(before_commit());
    let record = serde_json::json!({
        "fingerprint": digest(conversion.to_string().as_bytes()),
        "arrays": arrays,
        "update": kept.update_id,
        "kept": kept_records,
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
    remove_killed_snapshot_writes(location, &token)?;
    remove_linked_leftovers(location)?;
    Ok(published)
}

/// The chunk coordinates each array holds after an update, by array path (see [`Kept::written`]).
type Written = HashMap<String, HashSet<Vec<u32>>>;

/// An error of writing the session: what was being written, and why.
type WriteError = (String, Box<dyn std::error::Error + Send + Sync>);

/// Writes the staged documents into the session and references the stored chunks: arrays being
/// replaced are deleted first (they lose every chunk of their former shape; groups stay with
/// whatever else they hold), then documents, parents before children (a chunk needs its array),
/// then one reference per shard. An update (`written`, see [`Kept::written`]) replaces no array:
/// the chunks the branch holds outside `written` are removed first (while the array has its former
/// shape, which they are inside), the documents then change shape and attributes in place, and
/// the staged shards replace or add their chunks. Returns the digest of every array document
/// written, by the array's path (the root's is empty).
fn write_session(
    store: &Store,
    staging: &Staging,
    (objects, stored): (&[ListedObject], &HashMap<String, StoredChunk>),
    (node, written): (&str, Option<&Written>),
    runtime: &IoRuntime,
) -> std::result::Result<serde_json::Map<String, serde_json::Value>, WriteError> {
    let staged: Vec<String> = objects
        .iter()
        .filter(|o| is_metadata(&o.key))
        .map(|o| o.key.clone())
        .collect();
    let mut bytes = Vec::with_capacity(staged.len());
    for (key, read) in staged.iter().zip(staging.get_many(&staged)) {
        match read {
            Ok(Some(read)) => bytes.push(read),
            Ok(None) => return Err((key.clone(), "the staged object vanished".into())),
            Err(e) => return Err((key.clone(), boxed(e))),
        }
    }
    // The keys inside the repository: under `node`, whose missing ancestors become groups
    // (first: parents before children).
    let ancestors = ancestors(node);
    let mut documents: Vec<String> = ancestors
        .iter()
        .map(|ancestor| under(ancestor, "zarr.json"))
        .collect();
    documents.extend(staged.iter().map(|key| under(node, key)));
    let group = Bytes::from_static(br#"{"zarr_format":3,"node_type":"group","attributes":{}}"#);
    bytes.splice(0..0, ancestors.iter().map(|_| group.clone()));
    let arrays = documents
        .iter()
        .zip(&bytes)
        .filter(|(_, bytes)| is_array_document(bytes))
        .map(|(key, bytes)| (node_of(key).to_string(), digest(bytes).into()))
        .collect();
    let references = objects
        .iter()
        .filter(|o| !is_metadata(&o.key))
        .map(|o| reference(&o.key, node, stored))
        .collect::<std::result::Result<Vec<_>, WriteError>>()?;
    let nodes: Vec<(String, bool)> = documents
        .iter()
        .zip(&bytes)
        .map(|(key, bytes)| (node_of(key).to_string(), is_array_document(bytes)))
        .collect();
    runtime.block_on(async {
        {
            let session = store.session();
            let session = session.read().await;
            if let Some((path, found, wanted)) = first_conflict(&session, &nodes).await {
                let key = if path == "/" {
                    "zarr.json".to_string()
                } else {
                    format!("{}/zarr.json", path.trim_start_matches('/'))
                };
                let reason = format!(
                    "the branch holds {found} at {path}, where this conversion writes {wanted}"
                );
                return Err((key, reason.into()));
            }
        }
        if let Some(written) = written {
            remove_unwritten(store, written).await?;
        }
        for (key, bytes) in documents.iter().zip(&bytes) {
            let node = node_of(key);
            if written.is_none()
                && !node.is_empty()
                && is_array_document(bytes)
                && store.exists(key).await.unwrap_or(false)
            {
                store
                    .delete_dir(node)
                    .await
                    .map_err(|e| (node.to_string(), boxed(e.kind)))?;
            }
        }
        for (index, (key, bytes)) in documents.iter().zip(bytes).enumerate() {
            // An ancestor that the branch holds already stays as it is.
            if index < ancestors.len() && store.exists(key).await.unwrap_or(false) {
                continue;
            }
            let mut bytes = bytes;
            if !is_array_document(&bytes) {
                if let Ok(node) = IcechunkPath::try_from(format!("/{}", node_of(key)).as_str()) {
                    let session = store.session();
                    let existing = session.read().await.get_node(&node).await.ok();
                    if let Some(merged) = existing
                        .filter(|n| matches!(n.node_data, NodeData::Group))
                        .and_then(|n| merged_group(&n.user_data, &bytes))
                    {
                        bytes = merged;
                    }
                }
            }
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

/// Removes, from each array of `written` that the session holds, every chunk whose coordinates
/// are not among the array's `written` ones (see [`Kept::written`]).
async fn remove_unwritten(
    store: &Store,
    written: &HashMap<String, HashSet<Vec<u32>>>,
) -> std::result::Result<(), WriteError> {
    let session = store.session();
    let mut session = session.write().await;
    for (path, keep) in written {
        let failed = |e: icechunk::session::SessionError| (format!("/{path}"), boxed(e.kind));
        let node = IcechunkPath::try_from(format!("/{path}").as_str())
            .map_err(|e| (format!("/{path}"), e.to_string().into()))?;
        if session.get_array(&node).await.is_err() {
            continue;
        }
        let mut gone = Vec::new();
        {
            let coordinates = session.chunk_coordinates(&node).await.map_err(failed)?;
            let mut coordinates = std::pin::pin!(coordinates);
            while let Some(coord) = coordinates.next().await {
                let coord = coord.map_err(failed)?;
                if !keep.contains(&coord.0) {
                    gone.push(coord);
                }
            }
        }
        for coord in gone {
            session
                .set_chunk_ref(node.clone(), coord, None)
                .await
                .map_err(failed)?;
        }
    }
    Ok(())
}

/// How a node kind is named in messages.
fn kind_words(array: bool) -> &'static str {
    if array {
        "an array"
    } else {
        "a group"
    }
}

/// The first of `nodes` (path, whether the conversion writes an array there) that `session`
/// holds as the other kind: its path as Icechunk names it, what is there, and what was wanted.
async fn first_conflict(
    session: &icechunk::session::Session,
    nodes: &[(String, bool)],
) -> Option<(String, &'static str, &'static str)> {
    for (path, array) in nodes {
        let Ok(node) = IcechunkPath::try_from(format!("/{path}").as_str()) else {
            continue;
        };
        let Ok(found) = session.get_node(&node).await else {
            continue;
        };
        let found_array = matches!(found.node_data, NodeData::Array { .. });
        if found_array != *array {
            return Some((
                format!("/{path}"),
                kind_words(found_array),
                kind_words(*array),
            ));
        }
    }
    None
}

/// Refuses, before anything is converted, a conversion into the repository at `location` whose
/// arrays (`arrays`) or groups (`groups`; paths without a leading `/`, the root's empty) are nodes
/// of the other kind on `branch` (on `main` when the branch does not exist yet: it is made from
/// there), as [`Error::NodeConflict`]. A location without a repository has no nodes.
pub fn check_nodes(
    location: &str,
    branch: &str,
    arrays: &[String],
    groups: &[String],
    runtime: &Arc<IoRuntime>,
) -> Result<()> {
    let (location, node) = crate::split_node(location);
    let storage = repo::storage(location, runtime)?;
    if repo::detect(location, &storage, runtime)?.is_none() {
        return Ok(());
    }
    let repository = repo::open(location, runtime)?;
    let nodes: Vec<(String, bool)> = arrays
        .iter()
        .map(|p| (under(&node, p), true))
        .chain(groups.iter().map(|p| (under(&node, p), false)))
        .chain(ancestors(&node).into_iter().map(|p| (p, false)))
        .collect();
    let found = runtime
        .block_on(async {
            let branches = repository.list_branches().await.map_err(boxed)?;
            let tip = if branches.contains(branch) {
                branch
            } else if branches.contains("main") {
                "main"
            } else {
                return Ok(None);
            };
            let version = VersionInfo::BranchTipRef(tip.to_string());
            let session = repository.readonly_session(&version).await.map_err(boxed)?;
            Ok(first_conflict(&session, &nodes)
                .await
                .map(|conflict| (tip.to_string(), conflict)))
        })
        .map_err(|e: Box<dyn std::error::Error + Send + Sync>| Error::Write {
            repo: location.to_string(),
            what: format!("reading branch {branch:?}"),
            source: e,
        })?;
    match found {
        Some((branch, (path, found, wanted))) => Err(Error::NodeConflict {
            repo: location.to_string(),
            branch,
            path,
            found,
            wanted,
        }),
        None => Ok(()),
    }
}

/// A group's document `staged` with the attributes of the group's document `existing` (the
/// branch's) kept, the staged group's own set over them: a conversion adds its group's attributes
/// and never drops the repository's. `None` when either is not a JSON object.
fn merged_group(existing: &[u8], staged: &[u8]) -> Option<Bytes> {
    let existing: serde_json::Value = serde_json::from_slice(existing).ok()?;
    let mut staged: serde_json::Value = serde_json::from_slice(staged).ok()?;
    let mut attributes = existing.get("attributes")?.as_object()?.clone();
    if let Some(own) = staged.get("attributes").and_then(|a| a.as_object()) {
        attributes.extend(own.clone());
    }
    staged
        .as_object_mut()?
        .insert("attributes".to_string(), attributes.into());
    serde_json::to_vec(&staged).ok().map(Bytes::from)
}

/// `path` (a node path or key; the root's empty) under the node path `node`.
fn under(node: &str, path: &str) -> String {
    match (node.is_empty(), path.is_empty()) {
        (true, _) => path.to_string(),
        (false, true) => node.to_string(),
        (false, false) => format!("{node}/{path}"),
    }
}

/// The node paths above `node` (the root's empty first; none for the root itself): the groups a
/// conversion into `REPO#/PATH` needs there.
fn ancestors(node: &str) -> Vec<String> {
    if node.is_empty() {
        return Vec::new();
    }
    let parts: Vec<&str> = node.split('/').collect();
    (0..parts.len()).map(|n| parts[..n].join("/")).collect()
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
    under_node: &str,
    stored: &HashMap<String, StoredChunk>,
) -> std::result::Result<Reference, WriteError> {
    let fail = |reason: &str| (key.to_string(), reason.to_string().into());
    let (node, coords) = chunks::chunk_coordinates(&under(under_node, key))
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
    // A conversion into a node path (`REPO#/PATH`) stages in `STAGING/PATH`.
    let staging = crate::staging_location(location)?;
    if staged == staging || staged.starts_with(&format!("{staging}/")) {
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
    (location, node): (&str, &str),
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
    chunks::remove_killed_copies(staging, &repository, Some(writer))?;
    let mut recorded = chunks::recorded(staging, &repository, &staged)?;
    let unstored = chunks::unstored(objects, keys, &recorded);
    if !unstored.is_empty() {
        // The staging folder inside the repository (`STAGING/PATH` for `REPO#/PATH`).
        let inside = under(STAGING, node);
        recorded.extend(chunks::store(
            staging,
            (&repository, &inside),
            &unstored,
            writer,
        )?);
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
    let (location, node) = crate::split_node(location);
    let write_error = |e: zshard_store::Error| Error::Write {
        repo: location.to_string(),
        what: "storing the staged shards as chunks".to_string(),
        source: boxed(e),
    };
    check_staging(staged, location)?;
    let staging = Staging::open(staged, runtime.clone(), false).map_err(write_error)?;
    let objects = chunks::staged_objects_around(&staging, keys).map_err(write_error)?;
    let stored = store_unstored(
        &staging,
        (location, &node),
        &objects,
        Some(keys),
        writer,
        runtime,
    )
    .map_err(write_error)?;
    Ok(stored.now)
}

/// Before an `--overwrite` conversion into the staging folder `staged` of the repository at
/// `location`: forgets the shards stored ahead of the commit (they are about to be replaced; the
/// commit then stores every shard it finds unrecorded) and the token of an earlier publication (a
/// run killed after committing another conversion: this one must commit its own output, not find
/// that commit and drop it).
pub fn forget_stored_shards(staged: &str, location: &str, runtime: &Arc<IoRuntime>) -> Result<()> {
    let location = crate::split_node(location).0;
    let forget = || {
        // A staging folder not made yet is made now, as the conversion is about to.
        let staging = Staging::open(staged, runtime.clone(), true)?;
        let repository = Staging::open(location, runtime.clone(), false)?;
        chunks::remove_killed_copies(&staging, &repository, None)?;
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
    let location = crate::split_node(location).0;
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
    (conversion, update_id): (&serde_json::Value, Option<&str>),
    arrays: &[String],
    groups: &[String],
    runtime: &Arc<IoRuntime>,
) -> Result<OnBranch> {
    let (location, node) = crate::split_node(location);
    let repository = repo::open(location, runtime)?;
    let ours = digest(conversion.to_string().as_bytes());
    // The nodes inside the repository (under `node`, for `REPO#/PATH`); `kept` is returned by the
    // conversion's own paths.
    let (given, arrays): (&[String], Vec<String>) =
        (arrays, arrays.iter().map(|p| under(&node, p)).collect());
    let groups: Vec<String> = groups.iter().map(|p| under(&node, p)).collect();
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
            for path in &arrays {
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
            // The same conversion: the same fingerprint, or (over a source that names its chunks'
            // versions) the same update identity, whatever the shape and attributes then.
            let same = |record: &serde_json::Value| {
                record["fingerprint"].as_str() == Some(&ours)
                    || update_id.is_some_and(|id| record["update"].as_str() == Some(id))
            };
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
            for path in &groups {
                groups_there &= document(path).await.is_some();
            }
            let all_ours = writers.iter().all(Option::is_some);
            let newest = match writers.first() {
                Some(Some((snapshot, record))) => Some((snapshot.clone(), record)),
                Some(None) => None,
                // A conversion of groups only: its commit is the one with its fingerprint.
                None => recorded
                    .iter()
                    .find(|(_, record)| same(record))
                    .map(|(snapshot, record)| (snapshot.clone(), record)),
            };
            match newest {
                Some((snapshot, record)) if all_ours && groups_there => {
                    // The very conversion (its fingerprint), or only the same update identity: an
                    // earlier version of it over a source whose shape or attributes changed since.
                    let exact_fingerprint =
                        |r: &serde_json::Value| r["fingerprint"].as_str() == Some(ours.as_str());
                    let exact = if writers.is_empty() {
                        exact_fingerprint(record)
                    } else {
                        writers.iter().flatten().all(|(_, r)| exact_fingerprint(r))
                    };
                    // Each array's kept records as the commit that wrote its document kept them.
                    let kept = arrays
                        .iter()
                        .zip(given)
                        .zip(&writers)
                        .filter_map(|((path, own), writer)| {
                            let (_, record) = writer.as_ref()?;
                            let digest = record["kept"][path.as_str()].as_str()?;
                            Some((own.clone(), digest.to_string()))
                        })
                        .collect();
                    Ok(OnBranch::Same {
                        snapshot,
                        kept,
                        exact,
                    })
                }
                _ => Ok(OnBranch::Nothing),
            }
        })
        .map_err(|e: Box<dyn std::error::Error + Send + Sync>| Error::Write {
            repo: location.to_string(),
            what: format!("reading branch {branch:?}"),
            source: e,
        })
}

/// The newest snapshot of a zshard conversion's commit on any branch of the repository at
/// `location` (the recent history of each branch, newest first), `None` when there is no
/// repository there or no branch holds such a commit: how `status` tells a conversion committed.
pub fn zshard_commit(location: &str, runtime: &Arc<IoRuntime>) -> Result<Option<String>> {
    let location = crate::split_node(location).0;
    let storage = repo::storage(location, runtime)?;
    if repo::detect(location, &storage, runtime)?.is_none() {
        return Ok(None);
    }
    let repository = repo::open(location, runtime)?;
    runtime
        .block_on(async {
            let mut newest: Option<(i64, String)> = None;
            for branch in repository.list_branches().await.map_err(boxed)? {
                let version = VersionInfo::BranchTipRef(branch);
                let ancestry = repository.ancestry(&version).await.map_err(boxed)?;
                let mut ancestry = std::pin::pin!(ancestry.take(ANCESTRY_SEARCH));
                while let Some(info) = ancestry.next().await {
                    let info = info.map_err(boxed)?;
                    if info.metadata.contains_key(CONVERSION_PROPERTY) {
                        let stamp = info.flushed_at.timestamp_micros();
                        if newest.as_ref().is_none_or(|(t, _)| *t < stamp) {
                            newest = Some((stamp, info.id.to_string()));
                        }
                        break;
                    }
                }
            }
            Ok(newest.map(|(_, id)| id))
        })
        .map_err(|e: Box<dyn std::error::Error + Send + Sync>| Error::Write {
            repo: location.to_string(),
            what: "reading the branches".to_string(),
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
    use icechunk::format::format_constants::FileTypeBin;
    let (version, body) = decoded(bytes, FileTypeBin::RepoInfo)?;
    let info = icechunk::format::serializers::deserialize_repo_info(version, body).ok()?;
    let tip = info.resolve_branch(branch).ok()?;
    let snapshot = info.find_snapshot(&tip).ok()?;
    Some(snapshot.metadata.get(TOKEN_PROPERTY)?.as_str()?.to_string())
}

/// The spec version and decoded body of an Icechunk object of kind `kind` in `bytes` (its header:
/// file type, compression, spec version; then its zstd body, read by icechunk's own format code),
/// `None` when the bytes are no such object or decode to more than an object of zshard's commits
/// holds.
fn decoded(
    bytes: &[u8],
    kind: icechunk::format::format_constants::FileTypeBin,
) -> Option<(icechunk::format::format_constants::SpecVersionBin, Vec<u8>)> {
    use icechunk::format::format_constants::{
        parse_file_header, CompressionAlgorithmBin, ICECHUNK_FILE_HEADER_LEN,
    };
    // What a repository object or snapshot may hold decoded, at most (a file that decodes to more
    // is left).
    const DECODED_MAX: u64 = 64 << 20;
    let header = parse_file_header(bytes).ok()?;
    if header.file_type != kind || !matches!(header.compression, CompressionAlgorithmBin::Zstd) {
        return None;
    }
    let mut body = Vec::new();
    let decoder = zstd::stream::read::Decoder::new(bytes.get(ICECHUNK_FILE_HEADER_LEN..)?).ok()?;
    std::io::Read::read_to_end(
        &mut std::io::Read::take(decoder, DECODED_MAX + 1),
        &mut body,
    )
    .ok()?;
    if body.len() as u64 > DECODED_MAX {
        return None;
    }
    Some((header.spec_version, body))
}

/// In a local repository, removes the staged copies that a commit of this publication (`token`)
/// killed before renaming them into place left: a snapshot (`snapshots/ID#N`) whose properties
/// carry `token`, and the staged copies of that snapshot's transaction log and manifests. Copies
/// that do not decode as such a snapshot (cut short, or another writer's) stay.
fn remove_killed_snapshot_writes(location: &str, token: &str) -> Result<()> {
    use icechunk::format::format_constants::FileTypeBin;
    let Some(root) = zshard_store::Location::parse(location)
        .ok()
        .and_then(|parsed| parsed.local_path().map(std::path::Path::to_path_buf))
    else {
        return Ok(());
    };
    let remove = |path: &std::path::Path| {
        std::fs::remove_file(path).map_err(|e| Error::Write {
            repo: location.to_string(),
            what: format!("removing {}", path.display()),
            source: boxed(e),
        })
    };
    let Ok(entries) = std::fs::read_dir(root.join("snapshots")) else {
        return Ok(());
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if zshard_store::staged_base(&name).is_none()
            || !entry.file_type().is_ok_and(|t| t.is_file())
            || entry.metadata().map_or(true, |m| m.len() >= 64 << 20)
        {
            continue;
        }
        let Some(snapshot) = std::fs::read(entry.path())
            .ok()
            .and_then(|bytes| decoded(&bytes, FileTypeBin::Snapshot))
            .and_then(|(version, body)| {
                icechunk::format::serializers::deserialize_snapshot(version, body).ok()
            })
        else {
            continue;
        };
        let ours = snapshot
            .metadata()
            .ok()
            .and_then(|m| Some(m.get(TOKEN_PROPERTY)?.as_str()? == token))
            .unwrap_or(false);
        if !ours {
            continue;
        }
        let id = snapshot.id().to_string();
        for path in staged_copies(&root.join("transactions"), &id) {
            remove(&path)?;
        }
        for manifest in snapshot.manifest_files().flatten() {
            for path in staged_copies(&root.join("manifests"), &manifest.id.to_string()) {
                remove(&path)?;
            }
        }
        remove(&entry.path())?;
    }
    Ok(())
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
        let first = publish(
            &staged,
            &location,
            "main",
            "zshard",
            &json!({}),
            &Kept::default(),
            &runtime,
        )
        .expect("first");
        assert!(!first.already_committed);
        assert_eq!((first.nodes, first.chunks), (2, 1));
        // As after a run killed between its commit and removing the staging folder.
        let again = publish(
            &staged,
            &location,
            "main",
            "zshard",
            &json!({}),
            &Kept::default(),
            &runtime,
        )
        .expect("again");
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
                (conversion, None),
                &arrays,
                &[String::new()],
                &runtime,
            )
            .expect("on branch")
        };
        assert_eq!(held(&ours, &["a"], "main"), OnBranch::Nothing);
        let published = publish(
            &staged,
            &location,
            "main",
            "zshard",
            &ours,
            &Kept::default(),
            &runtime,
        )
        .expect("publish");
        let same = OnBranch::Same {
            snapshot: published.snapshot.clone(),
            kept: HashMap::new(),
            exact: true,
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
        let first = publish(
            &staged,
            &location,
            "main",
            "first",
            &json!({}),
            &Kept::default(),
            &runtime,
        )
        .expect("first");
        // As before an --overwrite run into a staging folder left by a run killed after committing.
        forget_stored_shards(&staged, &location, &runtime).expect("forget");
        let again = publish(
            &staged,
            &location,
            "main",
            "second",
            &json!({}),
            &Kept::default(),
            &runtime,
        )
        .expect("again");
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
            (&json!({}), &Kept::default()),
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
            (&json!({}), &Kept::default()),
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
            let published = publish(
                &staged,
                &location,
                "main",
                "zshard",
                &json!({}),
                &Kept::default(),
                &runtime,
            )
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

    /// The files of the folder `root` whose names end as the local store's staged copies (`#N`).
    fn staged_files(root: &FsPath) -> Vec<String> {
        let mut found = Vec::new();
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).expect("read_dir").flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    let rel = path.strip_prefix(root).expect("below").to_string_lossy();
                    if zshard_store::staged_base(&rel).is_some() {
                        found.push(rel.into_owned());
                    }
                }
            }
        }
        found.sort();
        found
    }

    /// The initial snapshot's id, the same in every repository.
    fn initial() -> String {
        icechunk::format::snapshot::Snapshot::INITIAL_SNAPSHOT_ID.to_string()
    }

    /// A repository of `spec` at `location` as a creation killed before its last object leaves it:
    /// the snapshot (and spec 2's transaction log) written, one of them still under its staged
    /// name, the last object only as a staged copy cut short.
    fn half_made(location: &str, spec: SpecVersion, runtime: &Arc<IoRuntime>) {
        create_if_missing(location, Some(spec), runtime).expect("create");
        let folder = FsPath::new(location);
        let snapshot = folder.join("snapshots").join(initial());
        std::fs::rename(
            &snapshot,
            folder.join("snapshots").join(format!("{}#1", initial())),
        )
        .expect("stage the snapshot");
        let last = match spec {
            SpecVersion::V1 => folder.join("refs/branch.main/ref.json"),
            SpecVersion::V2 => folder.join("repo"),
        };
        std::fs::remove_file(&last).expect("remove the last object");
        let mut staged = last.into_os_string();
        staged.push("#1");
        std::fs::write(staged, b"cut sh").expect("staged copy");
    }

    #[test]
    fn a_creation_killed_halfway_is_redone() {
        for spec in [SpecVersion::V1, SpecVersion::V2] {
            let dir = tempfile::tempdir().expect("tempdir");
            let location = dir.path().join("repo").to_string_lossy().into_owned();
            let runtime = IoRuntime::new(2).expect("runtime");
            half_made(&location, spec, &runtime);
            let made = create_if_missing(&location, Some(spec), &runtime).expect("redone");
            assert_eq!(
                made,
                DestinationSpec {
                    version: spec,
                    exists: false
                }
            );
            assert_eq!(staged_files(FsPath::new(&location)), Vec::<String>::new());
            let storage = repo::storage(&location, &runtime).expect("storage");
            assert_eq!(
                repo::detect(&location, &storage, &runtime).expect("detect"),
                Some(spec)
            );
            let staged = crate::staging_location(&location).expect("staging");
            stage(FsPath::new(&staged), 7);
            publish(
                &staged,
                &location,
                "main",
                "zshard",
                &json!({}),
                &Kept::default(),
                &runtime,
            )
            .expect("publish");
            assert_eq!(
                history(&location, &runtime),
                ["zshard", "Repository initialized"]
            );
        }
    }

    #[test]
    fn a_half_made_creation_beside_other_files_is_refused_and_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let location = dir.path().join("repo").to_string_lossy().into_owned();
        let runtime = IoRuntime::new(2).expect("runtime");
        half_made(&location, SpecVersion::V2, &runtime);
        let folder = FsPath::new(&location);
        std::fs::write(folder.join("notes.txt"), b"mine").expect("write");
        let before = staged_files(folder);
        let err = create_if_missing(&location, None, &runtime).expect_err("refused");
        assert!(err.to_string().contains("no Icechunk repository"), "{err}");
        assert_eq!(staged_files(folder), before);
        assert_eq!(
            std::fs::read(folder.join("notes.txt")).expect("kept"),
            b"mine"
        );
        assert!(folder.join("transactions").join(initial()).is_file());
    }

    #[test]
    fn staged_copies_left_linked_to_their_objects_are_removed_by_a_rerun() {
        for spec in [SpecVersion::V1, SpecVersion::V2] {
            let (_dir, staged, location, runtime) = setup_in(Some(spec));
            publish(
                &staged,
                &location,
                "main",
                "zshard",
                &json!({}),
                &Kept::default(),
                &runtime,
            )
            .expect("publish");
            let folder = FsPath::new(&location);
            // As a write killed between linking its staged copy into place and removing it.
            let mut linked = vec![format!("snapshots/{}", initial())];
            linked.push(match spec {
                SpecVersion::V1 => "refs/branch.main/ref.json".to_string(),
                SpecVersion::V2 => "repo".to_string(),
            });
            for key in &linked {
                std::fs::hard_link(folder.join(key), folder.join(format!("{key}#1")))
                    .expect("link");
            }
            // A staged copy that is a file of its own (a write under way) stays, and so does a
            // file named like one outside the repository's objects.
            std::fs::write(folder.join("snapshots/AAAAAAAAAAAAAAAAAAAA#3"), b"x").expect("own");
            std::fs::write(folder.join("notes#1"), b"x").expect("other");
            std::fs::hard_link(
                folder.join(format!("snapshots/{}", initial())),
                folder.join("snap#2"),
            )
            .expect("link elsewhere");
            create_if_missing(&location, None, &runtime).expect("rerun");
            assert_eq!(
                staged_files(folder),
                ["notes#1", "snap#2", "snapshots/AAAAAAAAAAAAAAAAAAAA#3"],
                "{spec}"
            );
            assert_eq!(
                history(&location, &runtime),
                ["zshard", "Repository initialized"]
            );
        }
    }

    #[test]
    fn a_snapshot_a_killed_commit_left_staged_is_removed_by_the_rerun_with_its_log_and_manifests() {
        for spec in [SpecVersion::V1, SpecVersion::V2] {
            let (_dir, staged, location, runtime) = setup_in(Some(spec));
            let first = publish(
                &staged,
                &location,
                "main",
                "zshard",
                &json!({}),
                &Kept::default(),
                &runtime,
            )
            .expect("publish");
            let folder = FsPath::new(&location);
            // As a commit killed after writing its snapshot, transaction log and manifest under
            // their staged names (copies of the objects this commit made, not links of them).
            let mut copies = vec![
                format!("snapshots/{}", first.snapshot),
                format!("transactions/{}", first.snapshot),
            ];
            for entry in std::fs::read_dir(folder.join("manifests")).expect("manifests") {
                let name = entry
                    .expect("entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned();
                copies.push(format!("manifests/{name}"));
            }
            assert_eq!(copies.len(), 3, "{copies:?}");
            for key in &copies {
                std::fs::copy(folder.join(key), folder.join(format!("{key}#1"))).expect("copy");
            }
            // Another writer's staged snapshot (the initial one carries no token) stays.
            let other = format!("snapshots/{}#2", initial());
            std::fs::copy(
                folder.join(format!("snapshots/{}", initial())),
                folder.join(&other),
            )
            .expect("copy");
            let again = publish(
                &staged,
                &location,
                "main",
                "zshard",
                &json!({}),
                &Kept::default(),
                &runtime,
            )
            .expect("again");
            assert!(again.already_committed);
            assert_eq!(staged_files(folder), [other], "{spec}");
        }
    }

    #[test]
    fn chunk_copies_a_killed_run_left_staged_are_removed_by_its_rerun() {
        let (_dir, staged, location, runtime) = setup();
        let folder = FsPath::new(&location);
        let staging_folder = FsPath::new(&staged);
        // As a commit killed between linking a shard's copy and renaming it into place: the ids
        // were named ahead in a pending record, the record of stored chunks never written.
        let id = ChunkId::random().to_string();
        std::fs::create_dir_all(folder.join("chunks")).expect("mkdir");
        std::fs::hard_link(
            staging_folder.join("a/c/0"),
            folder.join(format!("chunks/{id}#0")),
        )
        .expect("link");
        let records = staging_folder.join(chunks::CHUNK_RECORDS);
        std::fs::create_dir_all(&records).expect("mkdir");
        std::fs::write(
            records.join("commit-1-2-0.pending"),
            json!({ "ids": [id] }).to_string(),
        )
        .expect("pending");
        // Another writer's pending copy (a worker's) is not this run's.
        let other = ChunkId::random().to_string();
        std::fs::hard_link(
            staging_folder.join("a/c/0"),
            folder.join(format!("chunks/{other}#0")),
        )
        .expect("link");
        std::fs::write(
            records.join("w1of2-1-2-0.pending"),
            json!({ "ids": [other] }).to_string(),
        )
        .expect("pending");
        let published = publish(
            &staged,
            &location,
            "main",
            "zshard",
            &json!({}),
            &Kept::default(),
            &runtime,
        )
        .expect("publish");
        assert_eq!(published.stored_at_commit, 1);
        assert_eq!(staged_files(folder), [format!("chunks/{other}#0")]);
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
