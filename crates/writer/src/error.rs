/// Errors of writing output metadata.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A metadata document could not be stored (shard writes report `zshard_core::Error::Write`,
    /// as the [`ShardSink`](zshard_core::ShardSink) contract wants).
    #[error("cannot write {key}")]
    Write {
        /// The URL of the document.
        key: String,
        /// The store's error.
        #[source]
        source: zshard_store::Error,
    },
}

/// The result type of this crate, [`Error`] unless told otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;
