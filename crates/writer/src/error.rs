/// Errors of writing output.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("cannot write {key}")]
    Write {
        key: String,
        #[source]
        source: zshard_store::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
