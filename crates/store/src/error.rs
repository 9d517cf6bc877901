/// Errors of storage access. Every variant names the location it concerns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("invalid location {location:?}: {reason}")]
    InvalidLocation { location: String, reason: String },

    #[error("{operation} {location}")]
    Request {
        operation: &'static str,
        location: String,
        #[source]
        source: Box<object_store::Error>,
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
