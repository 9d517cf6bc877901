/// Errors of reading Zarr metadata and hierarchies. Variants name the metadata key they concern.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A metadata document that is valid JSON but not valid Zarr metadata (a wrong `zarr_format`, an
    /// unknown codec or filter, an unusable dtype).
    #[error("{key}: {reason}")]
    Metadata {
        /// The URL (or key) of the metadata document.
        key: String,
        /// What is wrong with it.
        reason: String,
    },

    /// Valid metadata of an array whose data type or codecs zshard does not read (a `pickle`
    /// object array, a codec it has no implementation of). `--on-unsupported skip` leaves such an
    /// array out instead of refusing the conversion.
    #[error("{key}: {reason}")]
    Unsupported {
        /// The URL (or key) of the metadata document.
        key: String,
        /// What is not supported, and why.
        reason: String,
    },

    /// A metadata document that is not JSON, or not of the shape its format requires.
    #[error("{key}: invalid JSON")]
    Json {
        /// The URL (or key) of the metadata document.
        key: String,
        /// serde_json's error, with line and column.
        #[source]
        source: serde_json::Error,
    },

    /// The core model rejected the metadata (a data type, fill value or geometry).
    #[error("{key}")]
    Core {
        /// The URL (or key) of the metadata document.
        key: String,
        /// The core model's error.
        #[source]
        source: zshard_core::Error,
    },

    /// A location with no Zarr metadata at its root.
    #[error("{location} is not a Zarr array or group (no zarr.json, .zarray or .zgroup there)")]
    NotZarr {
        /// The URL of the location.
        location: String,
    },

    /// OME-Zarr metadata that cannot be read or upgraded (`multiscales` of the wrong form, axes that
    /// do not fit an image's arrays).
    #[error("OME-Zarr metadata of {node}: {reason}")]
    Ome {
        /// The group or array, named with its kind and path.
        node: String,
        /// What is wrong with it.
        reason: String,
    },

    /// Reading from the store failed.
    #[error(transparent)]
    Store(#[from] zshard_store::Error),
}

/// The result type of this crate, [`Error`] unless told otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn metadata(key: &str, reason: impl Into<String>) -> Error {
    Error::Metadata {
        key: key.to_string(),
        reason: reason.into(),
    }
}

pub(crate) fn unsupported(key: &str, reason: impl Into<String>) -> Error {
    Error::Unsupported {
        key: key.to_string(),
        reason: reason.into(),
    }
}

impl Error {
    /// Why the array is not supported, when this error says the metadata is valid but holds a data
    /// type or codec zshard does not read (rather than being broken or unreachable).
    pub fn unsupported_reason(&self) -> Option<String> {
        match self {
            Error::Unsupported { reason, .. } => Some(reason.clone()),
            Error::Core {
                source: source @ zshard_core::Error::UnsupportedDataType { .. },
                ..
            } => Some(source.to_string()),
            _ => None,
        }
    }
}
