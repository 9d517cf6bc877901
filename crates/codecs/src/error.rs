/// Errors while building codecs from metadata (decoding errors are `zshard_core::Error`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A codec name the registry does not know.
    #[error("unsupported codec {name:?} (supported: {supported})")]
    UnknownCodec {
        /// The name as the metadata spelled it.
        name: String,
        /// The names the registry knows, for the message.
        supported: String,
    },

    /// A codec of the zarr-extensions registry that zshard knows of and does not read.
    #[error("codec {codec} (zarr-extensions registry) is not supported: {reason}")]
    NotSupported {
        /// The codec's registered name.
        codec: String,
        /// Why, and what zshard reads instead.
        reason: String,
    },

    /// A known codec with a configuration it cannot work with (a missing or out-of-range member).
    #[error("codec {codec}: invalid configuration: {reason}")]
    InvalidConfiguration {
        /// The codec's name.
        codec: String,
        /// What is wrong with the configuration.
        reason: String,
    },

    /// Codecs in an order a chain cannot have: none or two array→bytes codecs, or a codec on the
    /// wrong side of it.
    #[error("invalid codec chain: {reason}")]
    InvalidChain {
        /// What is out of place, with the chain's codec names.
        reason: String,
    },

    /// An error of the core model while building a chain (a representation an array→array codec
    /// rejects).
    #[error(transparent)]
    Core(#[from] zshard_core::Error),
}

/// The result type of this crate, [`Error`] unless told otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn invalid(codec: &str, reason: impl Into<String>) -> Error {
    Error::InvalidConfiguration {
        codec: codec.to_string(),
        reason: reason.into(),
    }
}
