/// Errors of storage access. Every variant names the location it concerns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("invalid location {location:?}: {reason}")]
    InvalidLocation { location: String, reason: String },

    /// A location with a `scheme://` prefix that is not a valid URL.
    #[error("invalid location {location:?}")]
    InvalidUrl {
        location: String,
        #[source]
        source: url::ParseError,
    },

    /// A `file://` URL that names no local path (another host, say).
    #[error("invalid location {location:?}: not a local file URL")]
    NotAFileUrl { location: String },

    /// A local location that must exist (a source) cannot be resolved.
    #[error("cannot resolve {location}")]
    Resolve {
        location: String,
        #[source]
        source: std::io::Error,
    },

    #[error("{operation} {location}")]
    Request {
        operation: &'static str,
        location: String,
        #[source]
        source: Box<object_store::Error>,
    },

    /// A ranged read returned fewer bytes than a wanted range needs: the object ends at `len`.
    #[error("{location}: bytes {start}..{end} are beyond its end ({len} bytes)")]
    RangePastEnd {
        location: String,
        start: u64,
        end: u64,
        len: u64,
    },

    #[error("{operation} {location}")]
    Io {
        operation: &'static str,
        location: String,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot create {location}")]
    CreateDir {
        location: String,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot start the I/O runtime")]
    Runtime {
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
