//! The one error type of the conversion library. Every variant names what it is about (the array, the
//! location, the key); causes from the other crates stay attached as `source`, so a front end prints
//! the whole chain (the command line joins it into one line).

use std::path::PathBuf;

/// Why a conversion, plan, finalize or verify could not be done.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A `--compressor` specification that is not one of the supported forms.
    #[error("{reason}")]
    Compressor {
        /// The specification as given.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A size that does not parse (`--memory-limit`, `--part-size`, ...).
    #[error("{text:?} is not a size (use e.g. 512MiB, 4G or 4GiB): {reason}")]
    Size {
        /// The text as given.
        text: String,
        /// What the parser said.
        reason: String,
    },

    /// A worker specification (`--worker I/N`, SLURM or Kubernetes environment) that does not hold.
    #[error("{reason}")]
    Worker {
        /// What is wrong with it.
        reason: String,
    },

    /// Options that do not fit the input (a kind that is not supported, reference options on Zarr, ...).
    #[error("{reason}")]
    Options {
        /// What does not fit.
        reason: String,
    },

    /// Source and destination overlap.
    #[error("{reason}")]
    Overlap {
        /// Which one lies inside the other.
        reason: String,
    },

    /// An array that cannot be converted with these options (checked before anything is written).
    #[error("array {array}")]
    Array {
        /// The array's path, or the source's location for a single array.
        array: String,
        /// Why.
        #[source]
        source: Box<Error>,
    },

    /// A shape or codec chain that does not fit an array.
    #[error("{reason}")]
    Layout {
        /// What does not fit.
        reason: String,
    },

    /// An array or chunk geometry the core model rejects.
    #[error(transparent)]
    Core(#[from] zshard_core::Error),

    /// A codec chain that cannot be built.
    #[error("{which} codecs")]
    Codecs {
        /// `source`, `output` or `inner`.
        which: &'static str,
        /// Why.
        #[source]
        source: zshard_codecs::Error,
    },

    /// Storage: opening, reading, listing or writing a location.
    #[error(transparent)]
    Store(#[from] zshard_store::Error),

    /// A Zarr hierarchy that cannot be read.
    #[error(transparent)]
    Zarr(#[from] zshard_zarr::Error),

    /// A kerchunk reference set that cannot be read.
    #[error(transparent)]
    Kerchunk(#[from] zshard_kerchunk::Error),

    /// Metadata of the output that cannot be written.
    #[error(transparent)]
    Writer(#[from] zshard_writer::Error),

    /// A shard that could not be converted (the pipeline's error names the array and key).
    #[error(transparent)]
    Pipeline(#[from] zshard_pipeline::Error),

    /// The destination holds something this conversion must not resume or overwrite.
    #[error("{reason}")]
    Destination {
        /// What it holds and what to do.
        reason: String,
    },

    /// A record of zshard's own resume state that cannot be read.
    #[error("{key} is not JSON")]
    State {
        /// The record's location.
        key: String,
        /// The parser's complaint.
        #[source]
        source: serde_json::Error,
    },

    /// Shards of a partitioned run that are not done when finalizing.
    #[error("{missing} shard(s) are not done yet (first: array {array}, shard {key}); rerun the workers that did not finish")]
    NotDone {
        /// How many shards are missing.
        missing: u64,
        /// The array of the first missing shard.
        array: String,
        /// The key of the first missing shard.
        key: String,
    },

    /// A file of the local machine (the report, a leftover of an interrupted write).
    #[error("cannot {action} {}", path.display())]
    File {
        /// `write report`, `remove`, ...
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's complaint.
        #[source]
        source: std::io::Error,
    },

    /// Records of empty shards could not be stored.
    #[error("cannot record empty shards")]
    Record {
        /// Why.
        #[source]
        source: Box<Error>,
    },

    /// `verify` found differences between the source and the output.
    #[error("{count} mismatch(es) in {checked} shard(s) checked of {destination}")]
    Mismatch {
        /// How many mismatches.
        count: usize,
        /// How many shards were checked.
        checked: u64,
        /// The output's location.
        destination: String,
    },

    /// An internal lock was poisoned by a panicking thread.
    #[error("a worker thread panicked while holding {what}")]
    Poisoned {
        /// What was locked.
        what: &'static str,
    },

    /// Serializing a document of zshard's own (state, report) failed.
    #[error("cannot serialize {what}")]
    Serialize {
        /// What was being serialized.
        what: &'static str,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
}

/// A result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
