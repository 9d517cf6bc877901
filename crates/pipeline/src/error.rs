/// A failure of one shard's conversion, naming the array and the chunk or shard key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("array {array}: cannot read chunk {key}")]
    Read {
        array: String,
        key: String,
        #[source]
        source: Box<zshard_core::Error>,
    },

    #[error("array {array}: cannot decode chunk {key}")]
    Decode {
        array: String,
        key: String,
        #[source]
        source: Box<zshard_core::Error>,
    },

    #[error("array {array}: cannot encode inner chunk {inner} of shard {key}")]
    Encode {
        array: String,
        key: String,
        inner: usize,
        #[source]
        source: Box<zshard_core::Error>,
    },

    #[error("array {array}: cannot write shard {key}")]
    Write {
        array: String,
        key: String,
        #[source]
        source: Box<zshard_core::Error>,
    },

    #[error("cannot start a pipeline thread")]
    SpawnThread {
        #[source]
        source: std::io::Error,
    },

    #[error("cannot start worker threads")]
    ThreadPool {
        #[source]
        source: rayon::ThreadPoolBuildError,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
