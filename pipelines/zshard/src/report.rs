//! `--report FILE.json` and the summary printed after every run.

use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use indicatif::HumanBytes;
use serde_json::{json, Value};
use zshard_pipeline::ShardOutcome;
use zshard_store::Store;

use crate::partition::Partition;
use crate::plan::Plan;

/// Counts for one array.
#[derive(Debug, Clone, Default)]
pub struct ArrayReport {
    pub path: String,
    pub shards_total: u64,
    /// Done by an earlier run (found on resume), not converted again.
    pub shards_skipped: u64,
    pub shards_written: u64,
    /// Only the fill value: recorded, not written.
    pub shards_empty: u64,
    pub chunks_read: u64,
    pub chunks_missing: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
}

impl ArrayReport {
    pub fn add(&mut self, outcome: &ShardOutcome) {
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

    fn to_json(&self) -> Value {
        json!({
            "path": self.path, "shards_total": self.shards_total, "shards_skipped": self.shards_skipped,
            "shards_written": self.shards_written, "shards_empty": self.shards_empty,
            "chunks_read": self.chunks_read, "chunks_missing": self.chunks_missing,
            "bytes_read": self.bytes_read, "bytes_written": self.bytes_written,
        })
    }
}

/// A run's report.
#[derive(Debug)]
pub struct Report {
    source: String,
    destination: String,
    partition: Partition,
    started: Instant,
    started_unix: f64,
    arrays: Vec<ArrayReport>,
    retries: u64,
}

impl Report {
    pub fn new(
        plan: &Plan,
        source: &str,
        destination: &Store,
        partition: Partition,
        skipped: &[u64],
    ) -> Self {
        let arrays = plan
            .arrays
            .iter()
            .zip(skipped)
            .map(|(a, &skipped)| ArrayReport {
                path: a.path.clone(),
                shards_total: a.geometry.shard_count(),
                shards_skipped: skipped,
                ..ArrayReport::default()
            })
            .collect();
        Report {
            source: source.to_string(),
            destination: destination.url(""),
            partition,
            started: Instant::now(),
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            arrays,
            retries: 0,
        }
    }

    /// Retries of transient storage failures by zshard's retry layer (object_store also retries
    /// failed statuses internally; those are not counted).
    pub fn set_retries(&mut self, retries: u64) {
        self.retries = retries;
    }

    pub fn arrays_mut(&mut self) -> &mut Vec<ArrayReport> {
        &mut self.arrays
    }

    fn total(&self) -> ArrayReport {
        let mut t = ArrayReport::default();
        for a in &self.arrays {
            t.shards_total += a.shards_total;
            t.shards_skipped += a.shards_skipped;
            t.shards_written += a.shards_written;
            t.shards_empty += a.shards_empty;
            t.chunks_read += a.chunks_read;
            t.chunks_missing += a.chunks_missing;
            t.bytes_read += a.bytes_read;
            t.bytes_written += a.bytes_written;
        }
        t
    }

    pub fn to_json(&self, succeeded: bool) -> Value {
        let seconds = self.started.elapsed().as_secs_f64();
        let total = self.total();
        let per_second = |bytes: u64| {
            if seconds > 0.0 {
                bytes as f64 / seconds
            } else {
                0.0
            }
        };
        let mut totals = total.to_json();
        if let Some(map) = totals.as_object_mut() {
            map.remove("path");
        }
        json!({
            "zshard_version": env!("CARGO_PKG_VERSION"),
            "succeeded": succeeded,
            "source": self.source,
            "destination": self.destination,
            "worker": {"index": self.partition.index, "count": self.partition.count},
            "started_unix": self.started_unix,
            "duration_seconds": seconds,
            "read_bytes_per_second": per_second(total.bytes_read),
            "written_bytes_per_second": per_second(total.bytes_written),
            "retries": self.retries,
            "totals": totals,
            "arrays": self.arrays.iter().map(ArrayReport::to_json).collect::<Vec<_>>(),
        })
    }

    /// Writes the JSON report (if asked for) through a temporary file, so a reader never sees half.
    pub fn finish(&self, succeeded: bool, path: Option<&Path>) -> anyhow::Result<()> {
        let Some(path) = path else { return Ok(()) };
        let text = serde_json::to_vec_pretty(&self.to_json(succeeded))?;
        // A name of this process's own: workers sharing a report path must not rename each other's file.
        let tmp = path.with_extension(format!("json.{}.partial", std::process::id()));
        std::fs::write(&tmp, text)
            .with_context(|| format!("cannot write report {}", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot write report {}", path.display()))
    }

    /// One paragraph for people.
    pub fn summary(&self) -> String {
        let t = self.total();
        let seconds = self.started.elapsed().as_secs_f64();
        let rate = if seconds > 0.0 {
            t.bytes_read as f64 / seconds
        } else {
            0.0
        };
        let skipped = if t.shards_skipped > 0 {
            format!(", {} already done and skipped", t.shards_skipped)
        } else {
            String::new()
        };
        format!(
            "zshard: converted {} array(s) into {}: {} shard(s) written, {} held only the fill value{skipped}; \
             read {} in {} chunk(s) ({} missing), wrote {}, in {seconds:.1} s ({}/s read)",
            self.arrays.len(),
            self.destination,
            t.shards_written,
            t.shards_empty,
            HumanBytes(t.bytes_read),
            t.chunks_read,
            t.chunks_missing,
            HumanBytes(t.bytes_written),
            HumanBytes(rate as u64),
        )
    }
}
