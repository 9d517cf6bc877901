//! Opening a repository: its storage from a zshard location, and a reference (branch, tag or
//! snapshot id) resolved to a version.

use std::collections::HashMap;
use std::sync::Arc;

use icechunk::repository::VersionInfo;
use icechunk::Repository;
use zshard_store::{IoRuntime, Location};

use crate::error::{boxed, Error, Result};

/// The storage of the repository at `location` (a local folder; object stores are not supported yet).
pub(crate) fn storage(
    location: &str,
    runtime: &IoRuntime,
) -> Result<Arc<dyn icechunk::Storage + Send + Sync>> {
    let parsed = Location::parse(location).map_err(|e| Error::Open {
        repo: location.to_string(),
        source: boxed(e),
    })?;
    let Some(path) = parsed.local_path() else {
        return Err(Error::Open {
            repo: location.to_string(),
            source: "only local repositories are supported (object store repositories are not yet)"
                .into(),
        });
    };
    let path = path.to_path_buf();
    let storage = runtime
        .block_on(icechunk::ObjectStorage::new_local_filesystem(&path))
        .map_err(|e| Error::Open {
            repo: location.to_string(),
            source: boxed(e),
        })?;
    Ok(Arc::new(storage))
}

/// Opens the existing repository at `location`.
pub(crate) fn open(location: &str, runtime: &IoRuntime) -> Result<Repository> {
    let storage = storage(location, runtime)?;
    runtime
        .block_on(Repository::open(None, storage, HashMap::new()))
        .map_err(|e| Error::Open {
            repo: location.to_string(),
            source: boxed(e),
        })
}

/// The version `reference` names: a branch, else a tag, else a snapshot id.
pub(crate) fn version(
    repo: &Repository,
    location: &str,
    reference: &str,
    runtime: &IoRuntime,
) -> Result<VersionInfo> {
    let error = |reason: String| Error::Reference {
        repo: location.to_string(),
        reference: reference.to_string(),
        reason,
    };
    let branches = runtime
        .block_on(repo.list_branches())
        .map_err(|e| error(e.to_string()))?;
    if branches.contains(reference) {
        return Ok(VersionInfo::BranchTipRef(reference.to_string()));
    }
    let tags = runtime
        .block_on(repo.list_tags())
        .map_err(|e| error(e.to_string()))?;
    if tags.contains(reference) {
        return Ok(VersionInfo::TagRef(reference.to_string()));
    }
    let id = icechunk::format::SnapshotId::try_from(reference).map_err(|_| {
        let names = |set: &std::collections::BTreeSet<String>| {
            set.iter().cloned().collect::<Vec<_>>().join(", ")
        };
        error(format!(
            "branches: {}; tags: {}",
            names(&branches),
            names(&tags)
        ))
    })?;
    Ok(VersionInfo::SnapshotId(id))
}
