//! The errors of reading an N5 container.

/// Errors of reading an N5 container. Every variant names the document or block key it concerns; the
/// message is one line (the causes follow in `source`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An `attributes.json` that is not JSON, or whose dataset keys are malformed.
    #[error("{key}: {reason}")]
    Metadata {
        /// The document (`volume/raw/attributes.json`, as a URL or path).
        key: String,
        /// What is wrong, for people.
        reason: String,
    },

    /// A dataset whose `compression` zshard does not read.
    #[error(
        "{key}: compression {name:?} is not supported (raw, gzip, bzip2, blosc, xz, lz4, zstd)"
    )]
    UnsupportedCompression {
        /// The document naming it.
        key: String,
        /// The compression `type`.
        name: String,
    },

    /// A block that is malformed: a bad header, a size that does not fit the dataset, a payload that
    /// does not decompress to the elements the header states.
    #[error("block {key}: {reason}")]
    Block {
        /// The block's key (`volume/raw/0/3/1`, as a URL or path).
        key: String,
        /// What is wrong, for people.
        reason: String,
    },

    /// A block whose payload does not decompress.
    #[error("block {key}: cannot decompress ({compression})")]
    Decompress {
        /// The block's key.
        key: String,
        /// The compression `type`.
        compression: String,
        /// The codec's failure.
        #[source]
        source: Box<zshard_core::Error>,
    },

    /// A codec of the dataset's compression that cannot be built from its configuration.
    #[error("{key}: compression {compression}: invalid configuration")]
    Codec {
        /// The document naming it.
        key: String,
        /// The compression `type`.
        compression: String,
        /// The codec's refusal.
        #[source]
        source: Box<zshard_codecs::Error>,
    },

    /// A location that cannot be listed or read.
    #[error(transparent)]
    Store(Box<zshard_store::Error>),

    /// A location that holds no N5 container (no `attributes.json` with an `n5` version or a dataset).
    #[error("{location}: not an N5 container (no attributes.json with \"n5\" or \"dimensions\")")]
    NotN5 {
        /// The location, as given.
        location: String,
    },
}

impl From<zshard_store::Error> for Error {
    fn from(e: zshard_store::Error) -> Self {
        Error::Store(Box::new(e))
    }
}

/// The result of N5 operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;
