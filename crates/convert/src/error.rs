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

    /// The source cannot be found (or resolved) on the local file system.
    #[error("source {location} does not exist")]
    SourceMissing {
        /// The source as given.
        location: String,
        /// Why it cannot be resolved.
        #[source]
        source: zshard_store::Error,
    },

    /// A node of the source whose name zshard reserves for its own state in the destination.
    #[error("{path}: the name {name:?} is reserved by zshard ({why}); leave the node out (exclude it) or rename it in the source")]
    ReservedName {
        /// The node's path in the hierarchy.
        path: String,
        /// The reserved segment of that path.
        name: String,
        /// What zshard uses such names for.
        why: &'static str,
    },

    /// Source and destination overlap.
    #[error("{reason}")]
    Overlap {
        /// Which one lies inside the other.
        reason: String,
    },

    /// A hierarchy of so many arrays that their plan alone (every array's metadata, layout and
    /// output document, held for the whole run) does not fit the memory limit: refused once the
    /// arrays are counted, before any is planned.
    #[error(
        "{location}: {arrays} arrays, whose plan takes about {} ({} each) for the whole run, more than the memory limit of {} ({}); raise it, or convert part of the hierarchy at a time ({} / {})",
        zshard_core::HumanBytes(*.bytes),
        zshard_core::HumanBytes(*.bytes_per_array),
        zshard_core::HumanBytes(*.limit),
        zshard_core::Setting::MemoryLimit,
        zshard_core::Setting::Include,
        zshard_core::Setting::Exclude
    )]
    TooManyArrays {
        /// The source.
        location: String,
        /// Its arrays (those selected).
        arrays: u64,
        /// What their plan takes, with what the source holds for the whole run.
        bytes: u64,
        /// What one array's plan takes, about.
        bytes_per_array: u64,
        /// The memory limit.
        limit: u64,
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

    /// An array of the output that `verify` cannot read as a sharded array.
    #[error("output array {array}")]
    OutputArray {
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

    /// A `--shard-shape` or `--chunk-shape` that does not parse.
    #[error("shape {text:?} {reason}")]
    Shape {
        /// The shape as given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A shape by dimension name naming a dimension that no array it applies to has (a misspelt name
    /// would otherwise silently leave the default shapes).
    #[error("{setting}: no dimension named {} in {scope}; {known}", names.join(", "))]
    UnknownDimension {
        /// The setting ([`Setting::ShardShape`](zshard_core::Setting), `ChunkShape`).
        setting: zshard_core::Setting,
        /// The names no array has.
        names: Vec<String>,
        /// The arrays it applies to (`any array of SRC`, `the array a/b`).
        scope: String,
        /// The names the arrays do have, as text.
        known: String,
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

    /// An Icechunk repository that cannot be read, written or committed to.
    #[error(transparent)]
    Icechunk(#[from] zshard_icechunk::Error),
    /// An N5 container that cannot be read.
    #[error(transparent)]
    N5(#[from] zshard_n5::Error),

    /// Metadata of the output that cannot be written.
    #[error(transparent)]
    Writer(#[from] zshard_writer::Error),

    /// A shard that could not be converted (the pipeline's error names the array and key).
    #[error(transparent)]
    Pipeline(zshard_pipeline::Error),

    /// The conversion was cancelled ([`Conversion::cancel`](crate::Conversion::cancel)) before it
    /// finished; what was done is kept, and the same conversion resumes it.
    #[error("cancelled before the conversion finished; rerun it to resume")]
    Cancelled,

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

    /// Records of done shards (written or all-fill) could not be stored.
    #[error("cannot record which shards are done")]
    Record {
        /// Why.
        #[source]
        source: Box<Error>,
    },

    /// An internal lock was poisoned by a panicking thread.
    #[error("a worker thread panicked while holding {what}")]
    Poisoned {
        /// What was locked.
        what: &'static str,
    },

    /// A thread of zshard's own (the lease renewal) could not be started.
    #[error("cannot start the thread of {what}")]
    Thread {
        /// What the thread does.
        what: &'static str,
        /// The operating system's complaint.
        #[source]
        source: std::io::Error,
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

    /// A failure of the destination protocol that none of the variants above names (its error type
    /// may grow; those it has today become the variants of the same name).
    #[error(transparent)]
    Protocol(zshard_state::Error),
}

/// A result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<zshard_pipeline::Error> for Error {
    /// A cancelled pipeline is a cancelled conversion; every other failure keeps its detail.
    fn from(e: zshard_pipeline::Error) -> Self {
        match e {
            zshard_pipeline::Error::Cancelled => Error::Cancelled,
            e => Error::Pipeline(e),
        }
    }
}

impl Error {
    /// The array the failure is about (its path in the hierarchy, or the source's location for a
    /// single array), when it is about one.
    pub fn array(&self) -> Option<&str> {
        match self {
            Error::Array { array, .. }
            | Error::OutputArray { array, .. }
            | Error::NotDone { array, .. }
            | Error::ReservedName { path: array, .. } => Some(array),
            Error::Pipeline(e) => pipeline_array_and_key(e).map(|(array, _)| array),
            Error::Record { source } => source.array(),
            _ => None,
        }
    }

    /// The chunk or shard key the failure is about, when it is about one.
    pub fn key(&self) -> Option<&str> {
        match self {
            Error::NotDone { key, .. } => Some(key),
            Error::Pipeline(e) => pipeline_array_and_key(e).map(|(_, key)| key),
            Error::Array { source, .. }
            | Error::OutputArray { source, .. }
            | Error::Record { source } => source.key(),
            _ => None,
        }
    }

    /// What kind of failure this is, for reports and front ends: `options` (options that do not fit
    /// the input), `source` (the source cannot be read as a hierarchy), `destination` (refused, or
    /// its state is unreadable), `storage` (a request failed), `read`, `decode`, `encode`, `write`
    /// (of one chunk or shard), `memory` (the memory limit is too low), `cancelled`, `file` (a local
    /// file such as the report), `icechunk` (an Icechunk repository), `system` (threads) or `internal`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Compressor { .. }
            | Error::Size { .. }
            | Error::Worker { .. }
            | Error::Options { .. }
            | Error::Layout { .. }
            | Error::Shape { .. }
            | Error::UnknownDimension { .. }
            | Error::Codecs { .. }
            | Error::Core(_) => "options",
            Error::Array { source, .. } | Error::OutputArray { source, .. } => source.kind(),
            Error::SourceMissing { .. }
            | Error::ReservedName { .. }
            | Error::Zarr(_)
            | Error::Kerchunk(_)
            | Error::N5(_) => "source",
            Error::Icechunk(_) => "icechunk",
            Error::Overlap { .. }
            | Error::Destination { .. }
            | Error::State { .. }
            | Error::NotDone { .. }
            | Error::Protocol(_) => "destination",
            Error::Store(_) | Error::Writer(_) | Error::Record { .. } => "storage",
            Error::Pipeline(e) => e.kind(),
            Error::Cancelled => "cancelled",
            Error::File { .. } => "file",
            Error::Thread { .. } => "system",
            Error::TooManyArrays { .. } => "memory",
            Error::Poisoned { .. } | Error::Serialize { .. } => "internal",
        }
    }
}

impl From<zshard_state::Error> for Error {
    /// The protocol's failures as this crate has always named them: the same variant, the same
    /// text, the same [`Error::kind`].
    fn from(e: zshard_state::Error) -> Self {
        use zshard_state::Error as State;
        match e {
            State::Worker { reason } => Error::Worker { reason },
            State::Destination { reason } => Error::Destination { reason },
            State::State { key, source } => Error::State { key, source },
            State::File {
                action,
                path,
                source,
            } => Error::File {
                action,
                path,
                source,
            },
            State::Poisoned { what } => Error::Poisoned { what },
            State::Thread { what, source } => Error::Thread { what, source },
            State::Serialize { what, source } => Error::Serialize { what, source },
            State::Core(e) => Error::Core(e),
            State::Store(e) => Error::Store(e),
            e => Error::Protocol(e),
        }
    }
}

/// The array and the chunk or shard key a pipeline failure names.
fn pipeline_array_and_key(e: &zshard_pipeline::Error) -> Option<(&str, &str)> {
    match e {
        zshard_pipeline::Error::Read { array, key, .. }
        | zshard_pipeline::Error::Decode { array, key, .. }
        | zshard_pipeline::Error::Encode { array, key, .. }
        | zshard_pipeline::Error::Write { array, key, .. } => Some((array, key)),
        _ => None,
    }
}

pub use zshard_state::one_line;

#[cfg(test)]
mod tests {
    #[test]
    fn array_and_key_of_nested_errors() {
        use super::Error;
        let not_done = Error::NotDone {
            missing: 2,
            array: "climate/t".into(),
            key: "c/0/1".into(),
        };
        assert_eq!(not_done.array(), Some("climate/t"));
        assert_eq!(not_done.key(), Some("c/0/1"));
        let decode = Error::Pipeline(zshard_pipeline::Error::Decode {
            array: "t".into(),
            key: "/src/t/0.1".into(),
            source: Box::new(zshard_core::Error::InvalidGeometry { reason: "x".into() }),
        });
        assert_eq!(decode.array(), Some("t"));
        assert_eq!(decode.key(), Some("/src/t/0.1"));
        let layout = Error::Array {
            array: "a".into(),
            source: Box::new(Error::Layout {
                reason: "no".into(),
            }),
        };
        assert_eq!((layout.array(), layout.key()), (Some("a"), None));
        assert_eq!(
            (Error::Cancelled.array(), Error::Cancelled.key()),
            (None, None)
        );
    }
}
