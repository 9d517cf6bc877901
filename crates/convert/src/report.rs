//! What a run did: counts per array and in total, bytes, duration and throughput. The same value is
//! returned to the caller, written as `--report FILE.json`, and summarised by front ends.

use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use zshard_kerchunk::ReadStats;
use zshard_pipeline::{ShardOutcome, Stats};

use crate::error::{Error, Result};
use crate::partition::Partition;
use crate::plan::Plan;

/// Shard counts of one array, or of all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Shards of the array (all workers together).
    pub shards_total: u64,
    /// Done by an earlier run (found on resume), not converted again.
    pub shards_skipped: u64,
    /// What this run converted.
    #[serde(flatten)]
    pub stats: Stats,
}

impl std::ops::AddAssign<&Counts> for Counts {
    fn add_assign(&mut self, other: &Counts) {
        self.shards_total += other.shards_total;
        self.shards_skipped += other.shards_skipped;
        self.stats += &other.stats;
    }
}

/// Counts for one array.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ArrayReport {
    /// The array's path in the hierarchy (empty for a single array).
    pub path: String,
    /// Its counts.
    #[serde(flatten)]
    pub counts: Counts,
}

/// Where a worker stands in a partitioned run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Worker {
    /// This worker, from 0.
    pub index: u64,
    /// How many workers share the conversion.
    pub count: u64,
}

/// A run's report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The version of zshard that ran.
    pub zshard_version: &'static str,
    /// Whether the run converted everything it was given.
    pub succeeded: bool,
    /// The source's location.
    pub source: String,
    /// The destination's location.
    pub destination: String,
    /// This worker's share.
    pub worker: Worker,
    /// Start time, seconds since the Unix epoch.
    pub started_unix: f64,
    /// Wall-clock duration.
    pub duration_seconds: f64,
    /// Source bytes read per second.
    pub read_bytes_per_second: f64,
    /// Shard bytes written per second.
    pub written_bytes_per_second: f64,
    /// Retries of transient storage failures by zshard's retry layer (object_store also retries
    /// failed statuses internally; those are not counted).
    pub retries: u64,
    /// Counts of all arrays together.
    pub totals: Counts,
    /// Counts per array, in hierarchy order.
    pub arrays: Vec<ArrayReport>,
    /// The destination was already complete with these options: nothing was done.
    #[serde(skip)]
    pub already_complete: bool,
    /// Requests made for a kerchunk reference set (none for other inputs).
    #[serde(skip)]
    pub reference_reads: Option<ReadStats>,
}

impl Report {
    /// Writes the JSON report through a temporary file, so a reader never sees half of it.
    pub fn write_json(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_vec_pretty(self).map_err(|source| Error::Serialize {
            what: "the report",
            source,
        })?;
        // A name of this process's own: workers sharing a report path must not rename each other's file.
        let tmp = path.with_extension(format!("json.{}.partial", std::process::id()));
        let failed = |path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::File {
                action: "write report",
                path,
                source,
            }
        };
        std::fs::write(&tmp, text).map_err(failed(&tmp))?;
        std::fs::rename(&tmp, path).map_err(failed(path))
    }
}

/// A report being filled in while a run goes.
#[derive(Debug)]
pub(crate) struct ReportBuilder {
    source: String,
    destination: String,
    partition: Partition,
    started: Instant,
    started_unix: f64,
    arrays: Vec<ArrayReport>,
}

impl ReportBuilder {
    pub(crate) fn new(
        plan: &Plan,
        source: &str,
        destination: String,
        partition: Partition,
        skipped: &[u64],
    ) -> Self {
        let arrays = plan
            .arrays
            .iter()
            .zip(skipped)
            .map(|(a, &skipped)| ArrayReport {
                path: a.path.clone(),
                counts: Counts {
                    shards_total: a.geometry.shard_count(),
                    shards_skipped: skipped,
                    stats: Stats::default(),
                },
            })
            .collect();
        ReportBuilder {
            source: source.to_string(),
            destination,
            partition,
            started: Instant::now(),
            started_unix: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
            arrays,
        }
    }

    /// Counts a shard of array `array` that the pipeline finished.
    pub(crate) fn add(&mut self, outcome: &ShardOutcome) {
        if let Some(a) = self.arrays.get_mut(outcome.task.array) {
            a.counts.stats += outcome;
        }
    }

    pub(crate) fn finish(&self, succeeded: bool, retries: u64) -> Report {
        let seconds = self.started.elapsed().as_secs_f64();
        let mut totals = Counts::default();
        for a in &self.arrays {
            totals += &a.counts;
        }
        let per_second = |bytes: u64| {
            if seconds > 0.0 {
                bytes as f64 / seconds
            } else {
                0.0
            }
        };
        Report {
            zshard_version: env!("CARGO_PKG_VERSION"),
            succeeded,
            source: self.source.clone(),
            destination: self.destination.clone(),
            worker: Worker {
                index: self.partition.index,
                count: self.partition.count,
            },
            started_unix: self.started_unix,
            duration_seconds: seconds,
            read_bytes_per_second: per_second(totals.stats.bytes_read),
            written_bytes_per_second: per_second(totals.stats.bytes_written),
            retries,
            totals,
            arrays: self.arrays.clone(),
            already_complete: false,
            reference_reads: None,
        }
    }
}
