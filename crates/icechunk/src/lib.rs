//! Icechunk repositories as a zshard input and output.
//!
//! [`Source`] opens a repository at a branch, tag or snapshot and yields its hierarchy and, per
//! array, a [`zshard_core::ChunkReader`]: native chunks are read from the repository, inline ones
//! from its manifests, and virtual ones (byte ranges of other files) through zshard's policy for
//! untrusted targets, as kerchunk targets are. [`publish`] commits a finished conversion, staged in
//! a local folder, to a branch of a repository in one commit.
//!
//! The format is Icechunk's spec version 1, as the `icechunk` crate 0.3.24 (under the Python
//! package icechunk 1.1.x) reads and writes it. Built without the feature `icechunk`, the types
//! stay and every entry point fails with [`Error::Unavailable`].

use zshard_store::Location;

#[cfg(feature = "icechunk")]
mod chunks;
#[cfg(feature = "icechunk")]
mod destination;
mod error;
#[cfg(feature = "icechunk")]
mod repo;
#[cfg(feature = "icechunk")]
mod source;
#[cfg(not(feature = "icechunk"))]
mod unavailable;

#[cfg(feature = "icechunk")]
pub use destination::{create_if_missing, forget_stored_shards, publish, store_staged_shards};
pub use error::{Error, Result};
#[cfg(feature = "icechunk")]
pub use source::Source;
#[cfg(not(feature = "icechunk"))]
pub use unavailable::{
    create_if_missing, forget_stored_shards, publish, store_staged_shards, Source,
};

use error::boxed;

/// The name of the folder, inside a repository's folder, where conversions into it are staged.
pub const STAGING: &str = ".zshard-staging";

/// The object, inside the staging folder, naming the commit a publication makes: written before
/// committing, so that a run killed after the commit finds it on the branch instead of committing
/// twice. Removed last, after everything else staged.
pub const COMMIT_RECORD: &str = ".zshard-commit.json";

/// Where a conversion into the repository at `location` stages its output: the location of the
/// folder (or object prefix) [`STAGING`] beside the repository's own objects, which Icechunk never
/// lists.
pub fn staging_location(location: &str) -> Result<String> {
    let parsed = zshard_store::Location::parse(location).map_err(|e| Error::Open {
        repo: location.to_string(),
        source: boxed(e),
    })?;
    Ok(match parsed.local_path() {
        Some(path) => path.join(STAGING).to_string_lossy().into_owned(),
        None => parsed.join(STAGING).as_str().to_string(),
    })
}

/// What a publication committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The branch committed to.
    pub branch: String,
    /// The new snapshot's id.
    pub snapshot: String,
    /// Nodes added or replaced.
    pub nodes: usize,
    /// Chunks (shards) written.
    pub chunks: usize,
    /// Of those, the shards the commit itself stored in the repository's chunk storage; the others
    /// were stored by the workers of a partitioned run as they finished.
    pub stored_at_commit: usize,
    /// The commit had been made by an earlier run of the same conversion (killed after
    /// committing); nothing was committed now.
    pub already_committed: bool,
}

/// How many chunks of each kind an input holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkCounts {
    /// Chunks stored in the repository.
    pub native: u64,
    /// Chunks stored inside the manifests.
    pub inline: u64,
    /// References into other files.
    pub virtual_: u64,
}

/// Whether `location` holds an Icechunk repository (a local folder with its `repo` file or `refs`
/// folder). Remote locations are not detected: name the format.
pub fn is_repository(location: &str) -> bool {
    let Ok(parsed) = Location::parse(location) else {
        return false;
    };
    parsed.local_path().is_some_and(|path| {
        let has = |name: &str| path.join(name).is_dir();
        // Also `refs/` beside the repository's `config.yaml`, before any snapshot folder exists.
        has_repository_folders(has) || (has(REFS) && path.join("config.yaml").is_file())
    })
}

/// The folder of a repository's branches and tags.
const REFS: &str = "refs";

/// Whether a folder whose subfolders `has` answers for holds an Icechunk repository's folders
/// (`refs/` and `snapshots/`): how a local folder is detected, and how a remote source that is not
/// Zarr is recognised as a repository given without its format.
pub fn has_repository_folders(has: impl Fn(&str) -> bool) -> bool {
    has(REFS) && has("snapshots")
}
