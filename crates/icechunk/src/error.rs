//! The crate's error type.

/// What can go wrong reading or writing an Icechunk repository.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The repository could not be opened (missing, unreadable, or of another format version).
    #[error("icechunk repository {repo}: cannot open: {source}")]
    Open {
        /// The repository's location.
        repo: String,
        /// Why.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The repository is of a spec version this zshard cannot read.
    #[error("icechunk repository {repo}: it is of Icechunk spec version {found}; this zshard reads and writes versions 1 and 2")]
    Version {
        /// The repository's location.
        repo: String,
        /// The version found.
        found: u8,
    },
    /// A spec version was asked for a repository that exists in another one.
    #[error("icechunk repository {repo}: it is of Icechunk spec version {found}, not {wanted}: the spec version asked for applies to new repositories (an existing one is written in its own; icechunk's migration changes it)")]
    VersionMismatch {
        /// The repository's location.
        repo: String,
        /// The repository's version.
        found: crate::SpecVersion,
        /// The version asked for.
        wanted: crate::SpecVersion,
    },
    /// `--source-ref` names no branch, tag or snapshot of the repository.
    #[error(
        "icechunk repository {repo}: {reference:?} is not a branch, tag or snapshot id: {reason}"
    )]
    Reference {
        /// The repository's location.
        repo: String,
        /// The reference given.
        reference: String,
        /// Why it does not resolve.
        reason: String,
    },
    /// A node's metadata could not be read or parsed.
    #[error("icechunk repository {repo}: node {path}: {source}")]
    Node {
        /// The repository's location.
        repo: String,
        /// The node's path.
        path: String,
        /// Why.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A virtual chunk's target is refused (repository container configuration or zshard's policy).
    #[error("icechunk repository {repo}: virtual chunk {key}: {reason}")]
    Virtual {
        /// The repository's location.
        repo: String,
        /// The chunk's key.
        key: String,
        /// Why it is refused.
        reason: String,
    },
    /// Writing into the repository failed.
    #[error("icechunk repository {repo}: {what}: {source}")]
    Write {
        /// The repository's location.
        repo: String,
        /// What was being done (the key or the step).
        what: String,
        /// Why.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Another session committed to the branch since this conversion started.
    #[error("icechunk repository {repo}: branch {branch:?} moved while committing (someone else committed to it) and the changes overlap: nothing was committed; rerun to convert onto its new tip ({reason})")]
    Conflict {
        /// The repository's location.
        repo: String,
        /// The branch.
        branch: String,
        /// What overlapped.
        reason: String,
    },
    /// A node of the conversion is of the other kind on the branch (a group where it writes an
    /// array, or an array where it writes a group).
    #[error("icechunk repository {repo}: branch {branch:?} holds {found} at {path}, where this conversion writes {wanted}: nothing was converted or committed; remove or rename that node on the branch, or convert into another branch or repository")]
    NodeConflict {
        /// The repository's location.
        repo: String,
        /// The branch (the one it is made from when it does not exist yet).
        branch: String,
        /// The node's path (`/` for the root).
        path: String,
        /// What the branch holds there ("a group", "an array").
        found: &'static str,
        /// What the conversion writes there.
        wanted: &'static str,
    },
    /// This zshard was built without the cargo feature `icechunk`.
    #[error("icechunk repository {repo}: this zshard was built without Icechunk support (cargo feature `icechunk`)")]
    Unavailable {
        /// The repository's location.
        repo: String,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Boxes any error as the `source` of an [`Error`].
pub(crate) fn boxed(
    e: impl std::error::Error + Send + Sync + 'static,
) -> Box<dyn std::error::Error + Send + Sync> {
    Box::new(e)
}
