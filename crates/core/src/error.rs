use std::error::Error as StdError;

/// A boxed error from a lower layer (I/O, a codec library).
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Errors of the core model. Variants carry what the caller needs to name the problem; callers add the
/// array and chunk key when they wrap these.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A data type name (or v3 object) zshard does not know.
    #[error("unsupported data type {name:?} (supported: {supported})")]
    UnsupportedDataType {
        /// The name as the metadata spelled it (the JSON text for a v3 object).
        name: String,
        /// The names zshard accepts, comma-separated, for the message.
        supported: String,
    },

    /// A fill value that cannot be represented in the array's data type.
    #[error("invalid fill value {value} for data type {data_type}: {reason}")]
    InvalidFillValue {
        /// The fill value as JSON text.
        value: String,
        /// The data type's name.
        data_type: String,
        /// Why the value does not fit.
        reason: String,
    },

    /// Shapes that do not fit together (zero sizes, a shard not a multiple of its inner chunk, a
    /// buffer over [`MAX_BUFFER_BYTES`](crate::MAX_BUFFER_BYTES), ranks that differ).
    #[error("invalid geometry: {reason}")]
    InvalidGeometry {
        /// What is wrong, with the shapes involved.
        reason: String,
    },

    /// A chunk grid whose configuration breaks its specification (the `rectilinear` grid's edges).
    #[error("invalid chunk_grid: {reason}")]
    InvalidChunkGrid {
        /// What is wrong, with the element of the configuration at fault.
        reason: String,
    },

    /// A codec rejected its configuration or its input.
    #[error("codec {codec}: {reason}")]
    Codec {
        /// The codec's name (`zstd`, `numcodecs.delta`, ...).
        codec: String,
        /// What the codec rejected.
        reason: String,
    },

    /// The library behind a codec (zstd, blosc, ...) failed.
    #[error("codec {codec} failed")]
    CodecLibrary {
        /// The codec's name.
        codec: String,
        /// The library's error.
        #[source]
        source: BoxError,
    },

    /// A chain decoded a chunk to a size other than its representation's byte length.
    #[error("decoded size is {actual} bytes, expected {expected} bytes")]
    DecodedSize {
        /// The byte length the chunk's shape and data type call for.
        expected: usize,
        /// The byte length the codecs produced.
        actual: usize,
    },

    /// A `sharding_indexed` configuration that breaks the specification or that zshard cannot read;
    /// `field` is the member at fault (a path such as `chunk_shape[1]` inside it).
    #[error("sharding_indexed: invalid {field}: {reason}")]
    InvalidShardingConfig {
        /// The member of the configuration at fault, e.g. `chunk_shape[1]`.
        field: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A shard index that is truncated, fails its checksum or points outside its shard.
    #[error("shard index: {reason}")]
    ShardIndex {
        /// What is wrong with the index.
        reason: String,
    },

    /// A [`ChunkReader`](crate::ChunkReader) could not read an object.
    #[error("cannot read {key}")]
    Read {
        /// The key (or path) that was read.
        key: String,
        /// The reader's error.
        #[source]
        source: BoxError,
    },

    /// A [`ShardSink`](crate::ShardSink) could not write an object.
    #[error("cannot write {key}")]
    Write {
        /// The key that was written.
        key: String,
        /// The sink's error.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// Shorthand for a codec error with a reason.
    pub fn codec(codec: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Codec {
            codec: codec.into(),
            reason: reason.into(),
        }
    }
}

/// The result type of this crate, [`Error`] unless told otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error and its chain of causes on one line, outermost first.
pub fn chain_text(e: &(dyn StdError + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
