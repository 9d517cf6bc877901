//! Byte ranges of other files named by an input that is not a reference set (an Icechunk
//! repository's virtual chunks), read under the same security policy, coalescing and counting as a
//! reference set's targets: the one place untrusted targets are resolved and read.

use std::sync::Arc;

use bytes::Bytes;
use zshard_store::IoRuntime;

use super::fetch::{Shared, Want};
use super::open::policy_for;
use super::{Options, ReadStats};
use crate::error::Result;

/// What one chunk of a batch read through [`ExternalRanges`] is.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum ExternalChunk {
    /// Already known: its bytes, or `None` for a missing chunk (the fill value).
    Known(Option<Bytes>),
    /// Bytes `offset..offset + length` of the file at `url` (a URL or an absolute path); `key` names
    /// the chunk in messages.
    Range {
        /// The chunk's key, for messages.
        key: String,
        /// The target file.
        url: String,
        /// First byte.
        offset: u64,
        /// Number of bytes.
        length: u64,
    },
}

/// Reads byte ranges of untrusted target files: local targets only under `ref_root` (default: the
/// folder given to [`ExternalRanges::new`]) or an allowed prefix, remote ones only with the schemes a
/// reference set allows, nearby ranges of one target coalesced into one request.
#[derive(Debug)]
pub struct ExternalRanges {
    shared: Arc<Shared>,
}

impl ExternalRanges {
    /// Ranges named by the input `display` (for messages), with `default_root` (a local folder or a
    /// URL) where targets must lie unless `options` say otherwise.
    pub fn new(
        display: &str,
        default_root: &str,
        options: &Options,
        runtime: Arc<IoRuntime>,
    ) -> Result<ExternalRanges> {
        let policy = policy_for(default_root, options)?;
        Ok(ExternalRanges {
            shared: Arc::new(Shared::new(display.to_string(), runtime, policy, options)),
        })
    }

    /// Checks that the target `url` of chunk `key` may be read, without reading it.
    pub fn check(&self, key: &str, url: &str) -> Result<()> {
        self.shared.resolve(key, url).map(|_| ())
    }

    /// Reads a batch of chunks: one result per entry, in order. A chunk cannot be longer than
    /// `max_len` bytes (see [`zshard_core::ChunkReader::read_chunks`]): a longer range is refused
    /// unread.
    pub fn read(
        &self,
        chunks: Vec<ExternalChunk>,
        max_len: u64,
    ) -> Vec<zshard_core::Result<Option<Bytes>>> {
        let wants = chunks
            .into_iter()
            .map(|chunk| match chunk {
                ExternalChunk::Known(bytes) => Want::Ready(bytes),
                ExternalChunk::Range {
                    key,
                    url,
                    offset,
                    length,
                } => match self.shared.resolve(&key, &url) {
                    Ok(target) => Want::Range {
                        target,
                        start: offset,
                        end: offset.saturating_add(length),
                    },
                    Err(e) => Want::Failed(e),
                },
            })
            .collect();
        self.shared.fetch(wants, max_len)
    }

    /// The reads made so far.
    pub fn stats(&self) -> ReadStats {
        self.shared.stats()
    }
}
