//! The messages between the stages. Each is one part of a shard (see [`ShardSplit`]); a shard that
//! fits the part size is one part. A message carries its own error: a stage that fails on a part
//! passes the error on in its place, and the writer keeps the first one.
//!
//! [`ShardSplit`]: zshard_core::ShardSplit

use std::sync::Arc;

use bytes::Bytes;
use zshard_core::StringTable;

use crate::error::Result;
use crate::job::ShardTask;
use crate::window::Permit;

/// A message, or the error that took its place.
pub(super) type Msg<T> = Result<T>;

/// A shard of a run: the index of its array and its grid position.
pub(super) type ShardKey = (usize, Vec<u64>);

/// One part of one shard: the unit every message carries.
#[derive(Debug)]
pub(super) struct ShardPart {
    pub(super) task: ShardTask,
    pub(super) index: u64,
    pub(super) count: u64,
    /// The shards of the same array before this one in the run's order, at most the array's
    /// window of shards back (see `RunArray::window`), when the array hands source chunks from
    /// shard to shard (see `RunArray::handoff`), in the run's order: the source chunks that any of
    /// them needs too are not read again but kept for it by the assembler.
    pub(super) earlier: Arc<[Vec<u64>]>,
    /// The shards of the same array after this one within the window, likewise, in the run's order:
    /// the decoded source chunks any of them needs are kept for them when this shard is complete.
    pub(super) later: Arc<[Vec<u64>]>,
    /// When the array hands source chunks over, the shard's place among those of its array that do
    /// (all but those that copy inner chunks), counted from 0 in the run's order: the assembler
    /// takes these shards one after another, so that a shard finds what the shards before it kept.
    pub(super) chain: Option<u64>,
    /// This message's place in the window of messages in flight (see `window.rs`).
    pub(super) permit: Option<Permit>,
}

impl ShardPart {
    /// The shard this is a part of.
    pub(super) fn shard_key(&self) -> ShardKey {
        (self.task.array, self.task.shard.clone())
    }

    /// Whether this is its shard's last part.
    pub(super) fn is_last(&self) -> bool {
        self.index + 1 == self.count
    }
}

/// What reading one part's (or, summed, one shard's) source chunks took.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct ReadCounts {
    pub(super) bytes: u64,
    pub(super) chunks: u64,
    pub(super) missing: u64,
    /// Inner chunks copied from the previous output (see `ShardTask::reuse`).
    pub(super) copied: u64,
}

impl std::ops::AddAssign for ReadCounts {
    fn add_assign(&mut self, other: ReadCounts) {
        self.bytes += other.bytes;
        self.chunks += other.chunks;
        self.missing += other.missing;
        self.copied += other.copied;
    }
}

/// Inner chunks of one shard part copied encoded from the previous output (see
/// `ShardTask::reuse`): C-order index within the shard, and the stored bytes (`None` = empty).
pub(super) type Copied = Vec<(u64, Option<Bytes>)>;

/// Encoded source chunks of one shard part, as read (`None` = missing chunk).
pub(super) struct Fetched {
    pub(super) part: ShardPart,
    pub(super) chunks: Vec<(Vec<u64>, Option<Bytes>)>,
    pub(super) copied: Copied,
    pub(super) read: ReadCounts,
}

/// Decoded source chunks of one shard part. Strings are handles into `strings`.
pub(super) struct Decoded {
    pub(super) part: ShardPart,
    pub(super) chunks: Vec<(Vec<u64>, Option<Vec<u8>>)>,
    pub(super) copied: Copied,
    pub(super) strings: StringTable,
    pub(super) read: ReadCounts,
}

/// Raw inner chunks of one shard part, C order; `None` = empty (only fill value, or outside the
/// array). Strings are handles into `strings` until they are encoded.
pub(super) struct Assembled {
    pub(super) part: ShardPart,
    /// The C-order index within the shard of `inner[0]`.
    pub(super) first_inner: u64,
    pub(super) inner: Vec<Option<Vec<u8>>>,
    /// The part's inner chunks copied encoded (their place in `inner` is `None`).
    pub(super) copied: Copied,
    pub(super) strings: StringTable,
    pub(super) read: ReadCounts,
}

/// Encoded inner chunks of one shard part.
pub(super) struct Encoded {
    pub(super) part: ShardPart,
    pub(super) inner: Vec<Option<Bytes>>,
    /// Per inner chunk, the crc32c of its decoded values (of its stored bytes when the array is
    /// copied through, see [`ShardOutcome::chunk_hashes`](crate::ShardOutcome)); `None` = empty.
    pub(super) hashes: Vec<Option<u32>>,
    pub(super) read: ReadCounts,
}
