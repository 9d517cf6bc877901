//! Totals of a run, summed in one place: a run adds each shard's [`ShardOutcome`], and callers that
//! keep totals per array or per run add [`Stats`] together.

use std::ops::AddAssign;

use crate::job::ShardOutcome;

/// Totals of a run (or of any set of shards). Serializes as its six counts, in this order.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct Stats {
    /// Shards stored in the output.
    pub shards_written: u64,
    /// Shards of only the fill value: recorded, not written.
    pub shards_empty: u64,
    /// Source chunk reads, missing chunks included (see [`ShardOutcome::chunks_read`]).
    pub chunks_read: u64,
    /// Source chunks that did not exist and read as the fill value.
    pub chunks_missing: u64,
    /// Encoded bytes of the source chunks read.
    pub bytes_read: u64,
    /// Bytes stored in the output, shard indexes included.
    pub bytes_written: u64,
}

impl AddAssign<&ShardOutcome> for Stats {
    /// Counts one shard.
    fn add_assign(&mut self, outcome: &ShardOutcome) {
        if outcome.written {
            self.shards_written += 1;
        } else {
            self.shards_empty += 1;
        }
        self.chunks_read += outcome.chunks_read;
        self.chunks_missing += outcome.chunks_missing;
        self.bytes_read += outcome.bytes_read;
        self.bytes_written += outcome.bytes_written;
    }
}

impl AddAssign<&Stats> for Stats {
    fn add_assign(&mut self, other: &Stats) {
        self.shards_written += other.shards_written;
        self.shards_empty += other.shards_empty;
        self.chunks_read += other.chunks_read;
        self.chunks_missing += other.chunks_missing;
        self.bytes_read += other.bytes_read;
        self.bytes_written += other.bytes_written;
    }
}

impl AddAssign for Stats {
    fn add_assign(&mut self, other: Stats) {
        *self += &other;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::ShardTask;

    fn outcome(written: bool, n: u64) -> ShardOutcome {
        ShardOutcome {
            task: ShardTask::new(0, vec![n]),
            bytes_read: 100 * n,
            chunks_read: 10 * n,
            chunks_missing: n,
            inner_chunks_copied: 0,
            bytes_written: if written { 1000 * n } else { 0 },
            written,
            crc32c: 0,
            version: None,
            chunk_hashes: Vec::new(),
        }
    }

    #[test]
    fn outcomes_and_totals_add_up_count_by_count() {
        let mut a = Stats::default();
        a += &outcome(true, 1);
        a += &outcome(false, 2);
        let expected = Stats {
            shards_written: 1,
            shards_empty: 1,
            chunks_read: 30,
            chunks_missing: 3,
            bytes_read: 300,
            bytes_written: 1000,
        };
        assert_eq!(a, expected);
        let mut b = Stats::default();
        b += &outcome(true, 3);
        let mut total = a.clone();
        total += b;
        assert_eq!(
            total,
            Stats {
                shards_written: 2,
                shards_empty: 1,
                chunks_read: 60,
                chunks_missing: 6,
                bytes_read: 600,
                bytes_written: 4000,
            }
        );
        total += &Stats::default();
        assert_eq!(total.shards_written, 2);
    }

    #[test]
    fn serializes_as_its_counts_in_report_order() {
        let stats = Stats {
            shards_written: 1,
            shards_empty: 2,
            chunks_read: 3,
            chunks_missing: 4,
            bytes_read: 5,
            bytes_written: 6,
        };
        assert_eq!(
            serde_json::to_string(&stats).expect("json"),
            r#"{"shards_written":1,"shards_empty":2,"chunks_read":3,"chunks_missing":4,"bytes_read":5,"bytes_written":6}"#
        );
    }
}
