/// Errors of reading a reference set. Every variant names the reference key or the file it concerns;
/// the message is one line (the causes follow in `source`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The reference file (or a metadata document in it) is not valid JSON.
    #[error("{file}: invalid JSON")]
    Json {
        /// The reference file, folder or document, as given.
        file: String,
        /// The underlying failure.
        #[source]
        source: serde_json::Error,
    },

    /// The reference file or folder does not have the structure of a reference set.
    #[error("{file}: {reason}")]
    Format {
        /// The reference file or folder, as given.
        file: String,
        /// What is wrong, for people.
        reason: String,
    },

    /// One reference is malformed, or does not fit the array it belongs to.
    #[error("reference {key}: {reason}")]
    Reference {
        /// The reference key (`array/0.1`).
        key: String,
        /// What is wrong, for people.
        reason: String,
    },

    /// A template or `gen` expression does not render.
    #[error("reference {key}: template {template:?} does not render: {reason}")]
    Template {
        /// The reference key (`array/0.1`), or the field of `templates`/`gen`.
        key: String,
        /// The template text as written.
        template: String,
        /// What is wrong, for people.
        reason: String,
    },

    /// The target of a reference is not allowed by the security policy.
    #[error("reference {key}: target {target} is refused: {reason}")]
    Refused {
        /// The reference key (`array/0.1`), or the field of `templates`/`gen`.
        key: String,
        /// The target as the reference names it.
        target: String,
        /// What is wrong, for people.
        reason: String,
    },

    /// The target file of a reference does not exist (or cannot be inspected).
    #[error("reference {key}: target {target} does not exist")]
    MissingTarget {
        /// The reference key (`array/0.1`), or the field of `templates`/`gen`.
        key: String,
        /// The target as the reference names it.
        target: String,
        /// The underlying failure.
        #[source]
        source: std::io::Error,
    },

    /// A request for a target (or a reference file) failed.
    #[error("cannot read {file}")]
    Store {
        /// The reference file, folder or document, as given.
        file: String,
        /// The underlying failure.
        #[source]
        source: zshard_store::Error,
    },

    /// A local reference file cannot be read.
    #[error("cannot read {file}")]
    Io {
        /// The reference file, folder or document, as given.
        file: String,
        /// The underlying failure.
        #[source]
        source: std::io::Error,
    },

    /// A Parquet reference file cannot be decoded.
    #[error("{file}: invalid Parquet reference file")]
    Parquet {
        /// The reference file, folder or document, as given.
        file: String,
        /// The underlying failure.
        #[source]
        source: parquet::errors::ParquetError,
    },

    /// A Zarr metadata document of the reference set is invalid or unsupported.
    #[error("{file}")]
    Metadata {
        /// The reference file, folder or document, as given.
        file: String,
        /// The underlying failure.
        #[source]
        source: zshard_zarr::Error,
    },
}

/// A result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn reference(key: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::Reference {
        key: key.into(),
        reason: reason.into(),
    }
}

pub(crate) fn format(file: impl Into<String>, reason: impl Into<String>) -> Error {
    Error::Format {
        file: file.into(),
        reason: reason.into(),
    }
}
