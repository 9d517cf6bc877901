//! What a run did: how it ended (and why), with what options, where and when, and counts per array
//! and in total, bytes, duration and throughput. The same value is returned to the caller, written as
//! `--report FILE.json` on every exit of `convert` (success, failure, cancel, a no-op rerun), and
//! summarised by front ends.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::{json, Value};
use zshard_kerchunk::ReadStats;
use zshard_pipeline::{ShardOutcome, Stats};
use zshard_store::IoRuntime;

use crate::error::{Error, Result};
use crate::plan::input::SkippedArray;
use crate::plan::{Layout, Plan};
use crate::run::conversion::Conversion;
use zshard_state::Partition;

/// The commit zshard was built from, when it was built from a git checkout (see `build.rs`).
pub const GIT_COMMIT: Option<&str> = option_env!("ZSHARD_GIT_COMMIT");

/// Shard counts of one array, or of all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ArrayReport {
    /// The array's path in the hierarchy (empty for a single array).
    pub path: String,
    /// Its counts.
    #[serde(flatten)]
    pub counts: Counts,
}

/// Where a worker stands in a partitioned run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Worker {
    /// This worker, from 0.
    pub index: u64,
    /// How many workers share the conversion.
    pub count: u64,
}

impl From<Partition> for Worker {
    fn from(p: Partition) -> Self {
        Worker {
            index: p.index,
            count: p.count,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
// Named apart from the status document's `Status` (zshard-state) in the result schema.
#[schemars(rename = "RunStatus")]
#[non_exhaustive]
pub enum Status {
    /// It converted every shard it was given (and wrote the metadata, unless partitioned).
    Ok,
    /// It stopped on an error (see [`Report::error`]); a rerun resumes.
    Failed,
    /// It was cancelled (a signal, [`Conversion::cancel`]); a rerun resumes.
    Cancelled,
    /// The destination was already complete with these options: nothing was done, and the counts
    /// say what is there (every shard skipped).
    Complete,
}

impl Status {
    /// The status of a run that ended with `ending`: the report's, or that of its error (the one
    /// mapping the report and a front end's log share).
    pub fn of_run(ending: std::result::Result<&Report, &Error>) -> Status {
        match ending {
            Ok(report) => report.status,
            Err(Error::Cancelled) => Status::Cancelled,
            Err(_) => Status::Failed,
        }
    }

    /// The word the report gives it (`ok`, `failed`, `cancelled`, `complete`).
    pub fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
            Status::Complete => "complete",
        }
    }
}

/// Why a run did not finish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Failure {
    /// What kind of failure it is ([`Error::kind`]): `options`, `source`, `destination`, `read`, ...
    pub kind: &'static str,
    /// The error and its causes on one line ([`one_line`](crate::one_line)).
    pub message: String,
}

impl Failure {
    fn of(error: &Error) -> Self {
        Failure {
            kind: error.kind(),
            message: crate::one_line(error),
        }
    }
}

/// The options a run was started with.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct ReportedOptions {
    /// The source as given.
    pub source: String,
    /// The destination as given.
    pub destination: String,
    /// The default layout and the per-array ones: shapes (`null`: automatic), compressor spec,
    /// index location, passthrough; and the shapes given per pyramid level.
    pub layouts: Value,
    /// Worker threads per CPU stage asked for.
    pub threads: usize,
    /// The memory limit in bytes (`null`: the default, half of the machine's or cgroup's memory).
    pub memory_limit: Option<u64>,
    /// Fetch and write threads asked for (`null`: the default).
    pub io_threads: Option<usize>,
    /// This worker's share of the shards.
    pub partition: Worker,
    /// Whether the destination was to be replaced.
    pub overwrite: bool,
    /// How often the shards written were recorded, each time after a checkpoint on local disk, in
    /// seconds (see [`Conversion::checkpoint_interval`]).
    pub checkpoint_interval_seconds: f64,
}

impl ReportedOptions {
    fn of(conversion: &Conversion) -> Self {
        let per_array: serde_json::Map<String, Value> = conversion
            .layouts
            .per_array
            .iter()
            .map(|(path, layout)| (path.clone(), layout_json(layout)))
            .collect();
        ReportedOptions {
            source: conversion.source.clone(),
            destination: conversion.destination.clone(),
            layouts: json!({"default": layout_json(&conversion.layouts.default), "per_array": per_array,
                             "per_level": per_level(&conversion.layouts.per_level)}),
            threads: conversion.threads,
            memory_limit: conversion.memory_limit,
            io_threads: conversion.io_threads,
            partition: conversion.partition.into(),
            overwrite: conversion.overwrite,
            checkpoint_interval_seconds: conversion.record_log().1.as_secs_f64(),
        }
    }
}

/// `--level-shapes` by level.
fn per_level(levels: &std::collections::BTreeMap<usize, crate::LevelShapes>) -> Value {
    let levels = levels.iter().map(|(level, shapes)| {
        let shapes = json!({"shard_shape": shapes.shard_shape, "chunk_shape": shapes.chunk_shape});
        (level.to_string(), shapes)
    });
    Value::Object(levels.collect())
}

fn layout_json(layout: &Layout) -> Value {
    json!({
        "shard_shape": layout.shard_shape,
        "chunk_shape": layout.chunk_shape,
        "compressor": layout.compressor.to_string(),
        "index_location": layout.index_location.as_str(),
        "passthrough": layout.passthrough,
    })
}

/// A run's report.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// How the run ended.
    pub status: Status,
    /// Why it failed or stopped (`null` for `ok` and `complete`).
    pub error: Option<Failure>,
    /// Whether the run converted everything it was given (`ok` or `complete`).
    pub succeeded: bool,
    /// The version of zshard that ran.
    pub zshard_version: &'static str,
    /// The git commit it was built from, when known at build time.
    pub git_commit: Option<&'static str>,
    /// The machine it ran on.
    pub host: String,
    /// The source's location.
    pub source: String,
    /// The destination's location (as resolved once it was opened, else as given).
    pub destination: String,
    /// This worker's share.
    pub worker: Worker,
    /// The options the run was started with.
    pub options: ReportedOptions,
    /// Start time, RFC 3339 (UTC).
    pub started: String,
    /// End time, RFC 3339 (UTC).
    pub ended: String,
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
    /// Counts of all arrays together (none when the run failed before planning).
    pub totals: Counts,
    /// Counts per array, in hierarchy order.
    pub arrays: Vec<ArrayReport>,
    /// Arrays left out because zshard does not read them (`--on-unsupported skip`), with why.
    pub skipped_arrays: Vec<SkippedArray>,
    /// What a run over a finished conversion brought up to date (`null` for a first conversion,
    /// and for a destination already up to date).
    pub update: Option<Update>,
    /// The destination was already complete with these options: nothing was done
    /// (`status` is `complete`).
    #[serde(skip)]
    pub already_complete: bool,
    /// Requests made for a kerchunk reference set (none for other inputs).
    #[serde(skip)]
    pub reference_reads: Option<ReadStats>,
    /// The commit made into an Icechunk repository (none for other outputs, and for a worker's run).
    #[serde(skip)]
    pub published: Option<crate::Published>,
    /// Shards a worker of a conversion into an Icechunk repository stored in its chunk storage
    /// ahead of the commit (those of earlier runs of the worker not counted).
    #[serde(skip)]
    pub stored_in_repository: Option<usize>,
    /// Every planned array's path and shard grid, in hierarchy order (what a worker's share is
    /// worked out from).
    #[serde(skip)]
    pub(crate) shard_grids: Vec<(String, Vec<u64>)>,
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
        // A template such as `logs/{host}/run.json` names a folder that may not exist yet.
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(failed(parent))?;
        }
        std::fs::write(&tmp, text).map_err(failed(&tmp))?;
        std::fs::rename(&tmp, path).map_err(failed(path))
    }
}

/// The machine's host name (empty when it cannot be read).
pub(crate) use zshard_state::host_name;

/// `template` with `{worker}` (the worker's index, from 0), `{host}` (the host name) and `{date}` (the
/// run's start, UTC, as `20261124T155057Z`) replaced; other text, braces included, is kept.
pub(crate) fn expand_path(
    template: &Path,
    partition: Partition,
    host: &str,
    started: DateTime<Utc>,
) -> PathBuf {
    let text = template.to_string_lossy();
    if !text.contains('{') {
        return template.to_path_buf();
    }
    let expanded = text
        .replace("{worker}", &partition.index.to_string())
        .replace("{host}", host)
        .replace("{date}", &started.format("%Y%m%dT%H%M%SZ").to_string());
    PathBuf::from(expanded)
}

/// What a run over a finished conversion brought up to date: the shards whose source chunks
/// changed (or whose extent did, as the array grew or shrank), and those new to the output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Update {
    /// Shards written again (or found all fill now, and removed): their source chunks changed.
    pub shards_rewritten: u64,
    /// Shards the finished conversion did not have (the array grew, or is new to the hierarchy).
    pub shards_added: u64,
    /// Shards it had beyond the array's extent now (the array shrank), removed (by `finalize` after
    /// workers, whose own reports count none).
    pub shards_removed: u64,
    /// Inner chunks of the rewritten shards copied, encoded, from the shards as they stood (their
    /// source chunks did not change), not converted again.
    pub inner_chunks_copied: u64,
}

/// A report being filled in while a run goes: the options and start from the beginning, the arrays
/// once planned, the counts as shards complete.
#[derive(Debug)]
pub(crate) struct ReportBuilder {
    update: Option<Update>,
    options: ReportedOptions,
    partition: Partition,
    host: String,
    destination: String,
    started: Instant,
    started_at: DateTime<Utc>,
    arrays: Vec<ArrayReport>,
    skipped_arrays: Vec<SkippedArray>,
    runtime: Option<Arc<IoRuntime>>,
    shard_grids: Vec<(String, Vec<u64>)>,
}

impl ReportBuilder {
    /// Starts the report of a run of `conversion` now.
    pub(crate) fn new(conversion: &Conversion) -> Self {
        ReportBuilder {
            update: None,
            options: ReportedOptions::of(conversion),
            partition: conversion.partition,
            host: host_name(),
            destination: conversion.destination.clone(),
            started: Instant::now(),
            started_at: Utc::now(),
            arrays: Vec::new(),
            skipped_arrays: Vec::new(),
            shard_grids: Vec::new(),
            runtime: None,
        }
    }

    /// The plan is made and the destination opened: the arrays, with the shards an earlier run did.
    pub(crate) fn planned(
        &mut self,
        plan: &Plan,
        destination: String,
        skipped: &[u64],
        runtime: Arc<IoRuntime>,
    ) {
        self.arrays = plan
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
        self.skipped_arrays = plan.skipped.clone();
        self.shard_grids = plan
            .arrays
            .iter()
            .map(|a| (a.path.clone(), a.geometry.shard_grid()))
            .collect();
        self.destination = destination;
        self.runtime = Some(runtime);
    }

    /// Counts a shard of array `array` that the pipeline finished.
    pub(crate) fn add(&mut self, outcome: &ShardOutcome) {
        if let Some(a) = self.arrays.get_mut(outcome.task.array) {
            a.counts.stats += outcome;
        }
        if let Some(update) = &mut self.update {
            update.inner_chunks_copied += outcome.inner_chunks_copied;
        }
    }

    /// The run brought a finished conversion up to date (see [`Update`]).
    pub(crate) fn updated(&mut self, update: Option<Update>) {
        self.update = update;
    }

    /// Where the report goes: `template` with its placeholders expanded (see [`expand_path`]).
    pub(crate) fn path(&self, template: &Path) -> PathBuf {
        expand_path(template, self.partition, &self.host, self.started_at)
    }

    /// The report of the run ending now: `Ok(status)` or the error it stopped on.
    pub(crate) fn finish(&self, ending: std::result::Result<Status, &Error>) -> Report {
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
        let (status, error) = match ending {
            Ok(status) => (status, None),
            Err(e) => (Status::of_run(Err(e)), Some(Failure::of(e))),
        };
        let rfc3339 = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Millis, true);
        Report {
            status,
            error,
            succeeded: matches!(status, Status::Ok | Status::Complete),
            zshard_version: env!("CARGO_PKG_VERSION"),
            git_commit: GIT_COMMIT,
            host: self.host.clone(),
            source: self.options.source.clone(),
            destination: self.destination.clone(),
            worker: self.partition.into(),
            options: self.options.clone(),
            started: rfc3339(self.started_at),
            ended: rfc3339(Utc::now()),
            started_unix: self.started_at.timestamp_micros() as f64 / 1e6,
            duration_seconds: seconds,
            read_bytes_per_second: per_second(totals.stats.bytes_read),
            written_bytes_per_second: per_second(totals.stats.bytes_written),
            retries: self.runtime.as_ref().map_or(0, |r| r.retries()),
            totals,
            arrays: self.arrays.clone(),
            skipped_arrays: self.skipped_arrays.clone(),
            update: self.update,
            already_complete: status == Status::Complete,
            reference_reads: None,
            published: None,
            stored_in_repository: None,
            shard_grids: self.shard_grids.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    /// A log names a status with the report's word (issue 44, point 5).
    #[test]
    fn status_words_are_the_reports() {
        for status in [
            Status::Ok,
            Status::Failed,
            Status::Cancelled,
            Status::Complete,
        ] {
            let json = serde_json::to_value(status).expect("serializes");
            assert_eq!(json, serde_json::Value::from(status.word()));
        }
        assert_eq!(Status::of_run(Err(&Error::Cancelled)), Status::Cancelled);
    }

    #[test]
    fn report_paths_expand_worker_host_and_date() {
        let started = Utc
            .with_ymd_and_hms(2026, 11, 24, 15, 50, 57)
            .single()
            .expect("a valid time");
        let worker = Partition {
            index: 3,
            count: 16,
        };
        let path = expand_path(
            Path::new("/logs/{host}/run-{worker}-{date}-{n}.json"),
            worker,
            "node7",
            started,
        );
        assert_eq!(
            path,
            PathBuf::from("/logs/node7/run-3-20261124T155057Z-{n}.json")
        );
        assert_eq!(
            expand_path(Path::new("plain.json"), worker, "node7", started),
            PathBuf::from("plain.json")
        );
    }
}
