use crate::budget::{HumanBytes, MemoryUse};

/// A failure of a run: of one shard's conversion, naming the array and the chunk or shard key, of its
/// threads, or of its memory budget.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The reader could not fetch a source chunk.
    #[error("array {array}: cannot read chunk {key}")]
    Read {
        /// The array's name ([`ArrayJob::name`](crate::ArrayJob::name)).
        array: String,
        /// The source chunk's key (or grid position) as the reader names it.
        key: String,
        /// The reader's error.
        #[source]
        source: Box<zshard_core::Error>,
    },

    /// A source chunk did not decode through the source chain.
    #[error("array {array}: cannot decode chunk {key}")]
    Decode {
        /// The array's name ([`ArrayJob::name`](crate::ArrayJob::name)).
        array: String,
        /// The source chunk's key as the reader names it.
        key: String,
        /// The codec's error.
        #[source]
        source: Box<zshard_core::Error>,
    },

    /// An inner chunk did not encode through the output's inner chain.
    #[error("array {array}: cannot encode inner chunk {inner} of shard {key}")]
    Encode {
        /// The array's name ([`ArrayJob::name`](crate::ArrayJob::name)).
        array: String,
        /// The shard's key as the sink names it.
        key: String,
        /// The inner chunk's C-order index within the shard.
        inner: usize,
        /// The codec's error.
        #[source]
        source: Box<zshard_core::Error>,
    },

    /// The sink could not store a shard (or a part of it).
    #[error("array {array}: cannot write shard {key}")]
    Write {
        /// The array's name ([`ArrayJob::name`](crate::ArrayJob::name)).
        array: String,
        /// The shard's key as the sink names it.
        key: String,
        /// The sink's error.
        #[source]
        source: Box<zshard_core::Error>,
    },

    /// A source chunk an inner chunk needs was neither read for its shard nor kept for it by an
    /// earlier one: the read and reassembly plans disagree (a defect of zshard, never of the data),
    /// and the inner chunk is not written as fill in its place.
    #[error("array {array}: shard {key}: source chunk {chunk} was neither read nor kept for it (a zshard defect: please report it)")]
    Reassembly {
        /// The array's name ([`ArrayJob::name`](crate::ArrayJob::name)).
        array: String,
        /// The shard's key as the sink names it.
        key: String,
        /// The source chunk's grid position.
        chunk: String,
    },

    /// A region of a pyramid level did not reduce into the level below it.
    #[error("array {array}: cannot downsample the region {region} of the level above")]
    Downsample {
        /// The name of the level being made ([`ArrayJob::name`](crate::ArrayJob::name)).
        array: String,
        /// The region of the level above, `start+shape`.
        region: String,
        /// Why.
        #[source]
        source: Box<zshard_core::Error>,
    },

    /// A fetch, assemble or write thread could not be spawned.
    #[error("cannot start a pipeline thread")]
    SpawnThread {
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// [`budget`](crate::budget) finds no thread count and part size under the memory limit.
    #[error("the conversion needs about {} of memory even with one thread and parts of one inner chunk, more than the memory limit of {}: {cause}; or use a {} of at least {}", HumanBytes(*.needed), HumanBytes(*.limit), zshard_core::Setting::MemoryLimit, HumanBytes(*.needed))]
    MemoryLimit {
        /// Index (in the layouts given to [`budget`](crate::budget)) of the array whose smallest run
        /// needs the most; `None` when what the source holds is the cause.
        array: Option<usize>,
        /// Estimated peak in bytes of the smallest run: one thread, parts of one inner chunk.
        needed: u64,
        /// The limit in bytes it had to fit.
        limit: u64,
        /// What needs the most memory.
        cause: MemoryUse,
    },

    /// The run was stopped through its [`Cancel`](crate::Cancel) handle before every shard was done.
    #[error("the run was cancelled before every shard was done")]
    Cancelled,

    /// A rayon pool of decode or encode workers could not be built.
    #[error("cannot start worker threads")]
    ThreadPool {
        /// rayon's error.
        #[source]
        source: rayon::ThreadPoolBuildError,
    },
}

impl Error {
    /// What kind of failure this is: `read`, `decode`, `encode`, `downsample`, `write`, `memory`,
    /// `cancelled` or `system` (threads that could not be started, or a defect of zshard).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Read { .. } => "read",
            Error::Decode { .. } => "decode",
            Error::Encode { .. } => "encode",
            Error::Downsample { .. } => "downsample",
            Error::Write { .. } => "write",
            Error::MemoryLimit { .. } => "memory",
            Error::Cancelled => "cancelled",
            Error::SpawnThread { .. } | Error::ThreadPool { .. } | Error::Reassembly { .. } => {
                "system"
            }
        }
    }
}

/// The result type of this crate, [`Error`] unless told otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;
