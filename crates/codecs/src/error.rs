/// Errors while building codecs from metadata (decoding errors are `zshard_core::Error`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("unsupported codec {name:?} (supported: {supported})")]
    UnknownCodec { name: String, supported: String },

    #[error("codec {codec}: invalid configuration: {reason}")]
    InvalidConfiguration { codec: String, reason: String },

    #[error("invalid codec chain: {reason}")]
    InvalidChain { reason: String },

    #[error(transparent)]
    Core(#[from] zshard_core::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn invalid(codec: &str, reason: impl Into<String>) -> Error {
    Error::InvalidConfiguration {
        codec: codec.to_string(),
        reason: reason.into(),
    }
}
