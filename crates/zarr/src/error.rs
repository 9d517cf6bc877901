/// Errors of reading Zarr metadata and hierarchies. Variants name the metadata key they concern.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("{key}: {reason}")]
    Metadata { key: String, reason: String },

    #[error("{key}: invalid JSON")]
    Json {
        key: String,
        #[source]
        source: serde_json::Error,
    },

    #[error("{key}")]
    Core {
        key: String,
        #[source]
        source: zshard_core::Error,
    },

    #[error("{location} is not a Zarr array or group (no zarr.json, .zarray or .zgroup there)")]
    NotZarr { location: String },

    #[error(transparent)]
    Store(#[from] zshard_store::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn metadata(key: &str, reason: impl Into<String>) -> Error {
    Error::Metadata {
        key: key.to_string(),
        reason: reason.into(),
    }
}
