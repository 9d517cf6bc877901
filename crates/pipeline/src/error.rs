use crate::budget::HumanBytes;

/// A failure of a run: of one shard's conversion, naming the array and the chunk or shard key, of its
/// threads, or of its memory budget.
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

    /// [`budget`](crate::budget) finds no thread count and part size under the memory limit.
    #[error("the conversion needs about {} of memory even with one thread and parts of one inner chunk, more than the memory limit of {}; the source chunks (or inner chunks) are too big for it: use a higher --memory-limit or smaller --chunk-shape", HumanBytes(*.needed), HumanBytes(*.limit))]
    MemoryLimit { needed: u64, limit: u64 },

    #[error("cannot start worker threads")]
    ThreadPool {
        #[source]
        source: rayon::ThreadPoolBuildError,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
