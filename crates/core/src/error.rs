use std::error::Error as StdError;

/// A boxed error from a lower layer (I/O, a codec library).
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Errors of the core model. Variants carry what the caller needs to name the problem; callers add the
/// array and chunk key when they wrap these.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("unsupported data type {name:?} (supported: {supported})")]
    UnsupportedDataType { name: String, supported: String },

    #[error("invalid fill value {value} for data type {data_type}: {reason}")]
    InvalidFillValue {
        value: String,
        data_type: String,
        reason: String,
    },

    #[error("invalid geometry: {reason}")]
    InvalidGeometry { reason: String },

    #[error("codec {codec}: {reason}")]
    Codec { codec: String, reason: String },

    #[error("codec {codec} failed")]
    CodecLibrary {
        codec: String,
        #[source]
        source: BoxError,
    },

    #[error("decoded size is {actual} bytes, expected {expected} bytes")]
    DecodedSize { expected: usize, actual: usize },

    /// A `sharding_indexed` configuration that breaks the specification or that zshard cannot read;
    /// `field` is the member at fault (a path such as `chunk_shape[1]` inside it).
    #[error("sharding_indexed: invalid {field}: {reason}")]
    InvalidShardingConfig { field: String, reason: String },

    #[error("shard index: {reason}")]
    ShardIndex { reason: String },

    #[error("cannot read {key}")]
    Read {
        key: String,
        #[source]
        source: BoxError,
    },

    #[error("cannot write {key}")]
    Write {
        key: String,
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
