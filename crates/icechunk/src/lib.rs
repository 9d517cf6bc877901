//! Icechunk repositories as a zshard input and output.
//!
//! [`Source`] opens a repository at a branch, tag or snapshot and yields its hierarchy and, per
//! array, a [`zshard_core::ChunkReader`]: native chunks are read from the repository, inline ones
//! from its manifests, and virtual ones (byte ranges of other files) through zshard's policy for
//! untrusted targets, as kerchunk targets are. [`publish`] commits a finished conversion, staged in
//! a local folder, to a branch of a repository in one commit.
//!
//! Repositories of Icechunk's spec versions 1 (icechunk 1.x) and 2 (icechunk 2.x) are read and
//! written in their own version, through the `icechunk` crate 2.3; new ones are made in the version
//! asked for ([`SpecVersion`], 2 by default). Built without the feature `icechunk`, the types stay
//! and every entry point fails with [`Error::Unavailable`].

use std::collections::{HashMap, HashSet};

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
pub use destination::{
    check_nodes, create_if_missing, destination_spec, earlier_commit, forget_stored_shards,
    on_branch, publish, store_staged_shards, zshard_commit,
};
pub use error::{Error, Result};
#[cfg(feature = "icechunk")]
pub use source::{Committed, Source};
#[cfg(not(feature = "icechunk"))]
pub use unavailable::{
    check_nodes, create_if_missing, destination_spec, earlier_commit, forget_stored_shards,
    on_branch, publish, store_staged_shards, zshard_commit, Committed, Source,
};

use error::boxed;

/// The name of the folder, inside a repository's folder, where conversions into it are staged.
pub const STAGING: &str = ".zshard-staging";

/// The object, inside the staging folder, naming the commit a publication makes: written before
/// committing, so that a run killed after the commit finds it on the branch instead of committing
/// twice. Removed last, after everything else staged.
pub const COMMIT_RECORD: &str = ".zshard-commit.json";

/// The object, inside the staging folder, holding the commit message the workers of a partitioned
/// conversion were given (`--message`): `finalize`, which makes the commit, uses it unless given
/// one itself. Removed with the rest of the staging folder after the commit.
pub const MESSAGE_RECORD: &str = ".zshard-message.txt";

/// Where a conversion into the repository at `location` stages its output: the location of the
/// folder (or object prefix) [`STAGING`] beside the repository's own objects, which Icechunk never
/// lists.
pub fn staging_location(location: &str) -> Result<String> {
    let (location, node) = split_node(location);
    let staging = staging_of_repository(location)?;
    // A conversion into a node path stages under its own folder: conversions into several node
    // paths of one repository keep apart.
    Ok(match node.is_empty() {
        true => staging,
        false => format!("{staging}/{node}"),
    })
}

/// The separator between a repository's location and a node path inside it: `REPO#/PATH` names the
/// node at `/PATH` of the repository at `REPO` as a conversion's destination.
pub const NODE_SEPARATOR: &str = "#/";

/// The repository's location and the node path (without leading or trailing `/`; the root's is
/// empty) that a destination `REPO#/PATH` names (see [`NODE_SEPARATOR`]); a location without one
/// names the root.
pub fn split_node(location: &str) -> (&str, String) {
    match location.rsplit_once(NODE_SEPARATOR) {
        Some((repository, node)) => (repository, node.trim_matches('/').to_string()),
        None => (location, String::new()),
    }
}

/// [`staging_location`] of the repository itself.
fn staging_of_repository(location: &str) -> Result<String> {
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

/// What a branch holds of a conversion, as the commits zshard made record it (see [`on_branch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnBranch {
    /// Nothing that zshard committed at the conversion's arrays (absent, replaced since by someone
    /// else, or committed by a zshard that did not record its conversions): convert and commit.
    Nothing,
    /// Every array of the conversion is as zshard committed it from this very conversion (the same
    /// source and options), in `snapshot`, and every group is there: a rerun has nothing to do.
    Same {
        /// The snapshot of that commit.
        snapshot: String,
        /// The digest of each array's kept records (see [`Kept::records`]) as that commit recorded
        /// them, by array path; empty for a commit of a zshard that kept none.
        kept: HashMap<String, String>,
        /// The commit is of this very conversion (its fingerprint); `false`: of the same
        /// conversion apart from the source's shape and attributes then (its update identity), which
        /// only an update from the kept records brings up to date.
        exact: bool,
    },
    /// The array at `path` is as zshard committed it in `snapshot` from a conversion with other
    /// options or another source.
    Other {
        /// The array's path.
        path: String,
        /// The snapshot of that commit.
        snapshot: String,
    },
}

/// What a commit of a conversion keeps so that a rerun over a changed source brings it up to date
/// (issue 40): the conversion's update identity and the digests of its arrays' kept records, in
/// the commit's record; and, for an update, the shards the arrays hold afterwards.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Kept {
    /// What identifies the conversion whatever the source's shape and attributes (a later commit
    /// with the same identity updates this one); `None` when its source names no versions.
    pub update_id: Option<String>,
    /// Per array path (the root's empty): the digest of the kept records staged beside its
    /// document, which say what each of its shards was made from.
    pub records: HashMap<String, String>,
    /// For an update of arrays the branch holds from this conversion: per array path, the chunk
    /// coordinates that hold a shard once the update is committed; every other chunk the branch
    /// holds there is removed (a shard that now holds only the fill value, or lies beyond a shrunk
    /// extent), and the others keep their references. `None`: the arrays are replaced whole.
    pub written: Option<HashMap<String, HashSet<Vec<u32>>>>,
}

impl Kept {
    /// What a commit keeps: `update_id` and the digests of the kept records.
    pub fn new(update_id: Option<String>, records: HashMap<String, String>) -> Kept {
        Kept {
            update_id,
            records,
            written: None,
        }
    }

    /// This, as an update whose arrays hold shards at `written` afterwards.
    pub fn updating(mut self, written: HashMap<String, HashSet<Vec<u32>>>) -> Kept {
        self.written = Some(written);
        self
    }
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

/// An Icechunk format ("spec") version: how a repository lays out its objects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SpecVersion {
    /// Version 1: branches and tags under `refs/`, `config.yaml`; read by icechunk 1.x and 2.x.
    V1,
    /// Version 2: one `repo` object naming branches, tags and snapshots; read by icechunk 2.x only.
    /// New repositories are made in it unless asked otherwise.
    #[default]
    V2,
}

impl SpecVersion {
    /// The version's number, as Icechunk names it.
    pub fn number(self) -> u8 {
        match self {
            SpecVersion::V1 => 1,
            SpecVersion::V2 => 2,
        }
    }
}

impl std::fmt::Display for SpecVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.number())
    }
}

impl std::str::FromStr for SpecVersion {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        match s {
            "1" => Ok(SpecVersion::V1),
            "2" => Ok(SpecVersion::V2),
            other => Err(format!(
                "icechunk spec version {other:?}: this zshard writes versions 1 and 2"
            )),
        }
    }
}

/// The Icechunk repository a conversion writes into, as `plan` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DestinationSpec {
    /// The spec version the commit is written in: the repository's own, or the one asked for when
    /// it is made.
    pub version: SpecVersion,
    /// Whether the repository exists already (else the conversion makes it).
    pub exists: bool,
}

/// Whether `location` holds an Icechunk repository: a local folder with the `repo` object and
/// `snapshots/` of spec version 2, or the folders of spec version 1 (see
/// [`has_repository_folders`]). Remote locations are not detected: name the format.
pub fn is_repository(location: &str) -> bool {
    let Ok(parsed) = Location::parse(split_node(location).0) else {
        return false;
    };
    parsed.local_path().is_some_and(|path| {
        let has = |name: &str| path.join(name).is_dir();
        // Spec 2 names everything in `repo`; spec 1 may have only `refs/` and `config.yaml`
        // before any snapshot folder exists.
        (path.join(REPO_INFO).is_file() && has(SNAPSHOTS))
            || has_repository_folders(has)
            || (has(REFS) && path.join("config.yaml").is_file())
    })
}

/// The folder of a spec-1 repository's branches and tags.
const REFS: &str = "refs";

/// The object naming a spec-2 repository's branches, tags and snapshots.
const REPO_INFO: &str = "repo";

/// The folder of a repository's snapshots (both spec versions).
const SNAPSHOTS: &str = "snapshots";

/// The folder of a repository's transaction logs: a spec-2 repository has one from its first
/// (empty) snapshot on.
const TRANSACTIONS: &str = "transactions";

/// Whether a folder whose subfolders `has` answers for holds an Icechunk repository's folders
/// (`snapshots/` beside `refs/` for spec 1, beside `transactions/` for spec 2, whose `repo` is an
/// object, not a folder): how a local folder is detected, and how a remote source that is not Zarr
/// is recognised as a repository given without its format (from a listing of folders only).
pub fn has_repository_folders(has: impl Fn(&str) -> bool) -> bool {
    has(SNAPSHOTS) && (has(REFS) || has(TRANSACTIONS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_path_follows_the_repository_after_its_separator() {
        assert_eq!(split_node("repo"), ("repo", String::new()));
        assert_eq!(split_node("repo#/"), ("repo", String::new()));
        assert_eq!(
            split_node("s3://b/r.icechunk#/images/a/"),
            ("s3://b/r.icechunk", "images/a".to_string())
        );
        let staging = staging_location("/data/r#/images/a").expect("staging");
        assert_eq!(staging, "/data/r/.zshard-staging/images/a");
        assert_eq!(
            staging_location("/data/r").expect("staging"),
            "/data/r/.zshard-staging"
        );
    }

    #[test]
    fn both_spec_versions_are_detected_from_their_folders() {
        let spec1 = ["refs", "snapshots", "manifests", "chunks"];
        let spec2 = ["snapshots", "transactions", "manifests", "chunks"];
        let zarr = ["snapshots", "c", "manifests"];
        let holds = |names: &[&str]| {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            move |n: &str| names.iter().any(|m| m == n)
        };
        assert!(has_repository_folders(holds(&spec1)));
        assert!(has_repository_folders(holds(&spec2)));
        assert!(!has_repository_folders(holds(&zarr)));
        assert!(!has_repository_folders(holds(&["refs"])));
    }

    #[test]
    fn a_local_spec2_repository_is_its_repo_object_and_snapshots() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        let location = root.to_string_lossy().into_owned();
        std::fs::create_dir(root.join("snapshots")).expect("mkdir");
        assert!(!is_repository(&location));
        std::fs::write(root.join("repo"), b"x").expect("write");
        assert!(is_repository(&location));
        // A folder named `repo` is not the object.
        let other = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(other.path().join("snapshots")).expect("mkdir");
        std::fs::create_dir(other.path().join("repo")).expect("mkdir");
        assert!(!is_repository(&other.path().to_string_lossy()));
    }

    #[test]
    fn spec_versions_parse_from_their_numbers() {
        assert_eq!("1".parse::<SpecVersion>(), Ok(SpecVersion::V1));
        assert_eq!("2".parse::<SpecVersion>(), Ok(SpecVersion::V2));
        assert!("3".parse::<SpecVersion>().is_err());
        assert_eq!(SpecVersion::default(), SpecVersion::V2);
        assert_eq!(SpecVersion::V1.to_string(), "1");
    }
}
