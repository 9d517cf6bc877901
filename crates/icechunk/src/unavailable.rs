//! Built without the feature `icechunk`: the entry points exist and refuse, so callers need no
//! cfg of their own.

use std::collections::HashSet;
use std::sync::Arc;

use zshard_core::{ArrayMeta, ChunkReader, Node};
use zshard_kerchunk::{Options as ReferenceOptions, ReadStats};
use zshard_store::IoRuntime;

use crate::error::{Error, Result};
use crate::{ChunkCounts, DestinationSpec, OnBranch, Published, SpecVersion};

/// An opened repository: none can be opened in this build.
#[derive(Debug)]
pub enum Source {}

impl Source {
    /// Refuses: this build cannot read repositories.
    pub fn open(
        location: &str,
        _reference: &str,
        _references: &ReferenceOptions,
        _runtime: Arc<IoRuntime>,
    ) -> Result<Source> {
        Err(Error::Unavailable {
            repo: location.to_string(),
        })
    }

    /// Refuses: this build cannot read repositories.
    pub fn open_unscanned(
        location: &str,
        reference: &str,
        references: &ReferenceOptions,
        runtime: Arc<IoRuntime>,
    ) -> Result<Source> {
        Source::open(location, reference, references, runtime)
    }

    /// The repository and version, for messages.
    pub fn url(&self) -> String {
        match *self {}
    }

    /// Every group and array.
    pub fn nodes(&self) -> Vec<Node> {
        match *self {}
    }

    /// How many chunks of each kind the version holds.
    pub fn chunk_counts(&self) -> Result<ChunkCounts> {
        match *self {}
    }

    /// The repository's Icechunk spec version.
    pub fn spec_version(&self) -> SpecVersion {
        match *self {}
    }

    /// The reads of virtual chunk targets made so far.
    pub fn virtual_reads(&self) -> ReadStats {
        match *self {}
    }

    /// The reader of one array's chunks.
    pub fn reader(&self, _path: &str, _meta: &ArrayMeta) -> Arc<dyn ChunkReader> {
        match *self {}
    }
}

/// Refuses: this build cannot read repositories.
pub fn check_nodes(
    location: &str,
    _branch: &str,
    _arrays: &[String],
    _groups: &[String],
    _runtime: &Arc<IoRuntime>,
) -> Result<()> {
    Err(Error::Unavailable {
        repo: location.to_string(),
    })
}

/// Refuses: this build cannot write repositories.
pub fn create_if_missing(
    location: &str,
    _spec: Option<SpecVersion>,
    _runtime: &Arc<IoRuntime>,
) -> Result<DestinationSpec> {
    Err(Error::Unavailable {
        repo: location.to_string(),
    })
}

/// Refuses: this build cannot read repositories.
pub fn destination_spec(
    location: &str,
    _spec: Option<SpecVersion>,
    _runtime: &IoRuntime,
) -> Result<DestinationSpec> {
    Err(Error::Unavailable {
        repo: location.to_string(),
    })
}

/// Refuses: this build cannot write repositories.
pub fn publish(
    _staged: &str,
    location: &str,
    _branch: &str,
    _message: &str,
    _conversion: &serde_json::Value,
    _kept: &crate::Kept,
    _runtime: &Arc<IoRuntime>,
) -> Result<Published> {
    Err(Error::Unavailable {
        repo: location.to_string(),
    })
}

/// Refuses: this build cannot write repositories.
pub fn store_staged_shards(
    _staged: &str,
    location: &str,
    _keys: &HashSet<String>,
    _writer: &str,
    _runtime: &Arc<IoRuntime>,
) -> Result<usize> {
    Err(Error::Unavailable {
        repo: location.to_string(),
    })
}

/// Refuses: this build cannot write repositories.
pub fn forget_stored_shards(
    _staged: &str,
    location: &str,
    _runtime: &Arc<IoRuntime>,
) -> Result<()> {
    Err(Error::Unavailable {
        repo: location.to_string(),
    })
}

/// Refuses: this build cannot read repositories.
pub fn earlier_commit(
    _staged: &str,
    location: &str,
    _branch: &str,
    _runtime: &Arc<IoRuntime>,
) -> Result<Option<String>> {
    Err(Error::Unavailable {
        repo: location.to_string(),
    })
}

/// Refuses: this build cannot read repositories.
pub fn on_branch(
    location: &str,
    _branch: &str,
    _conversion: (&serde_json::Value, Option<&str>),
    _arrays: &[String],
    _groups: &[String],
    _runtime: &Arc<IoRuntime>,
) -> Result<OnBranch> {
    Err(Error::Unavailable {
        repo: location.to_string(),
    })
}

/// Nothing: this build cannot read repositories (`status` reports what the destination shows).
pub fn zshard_commit(_location: &str, _runtime: &Arc<IoRuntime>) -> Result<Option<String>> {
    Ok(None)
}

/// The shards a conversion committed into a repository: none can be opened in this build.
#[derive(Debug)]
pub enum Committed {}

impl Committed {
    /// Refuses: this build cannot read repositories.
    pub fn open(destination: &str, _snapshot: &str, _runtime: Arc<IoRuntime>) -> Result<Committed> {
        Err(Error::Unavailable {
            repo: destination.to_string(),
        })
    }

    /// The reader of one array's inner chunks.
    pub fn shard_reader(&self, _path: &str, _meta: &ArrayMeta) -> Option<Arc<dyn ChunkReader>> {
        match *self {}
    }
}
