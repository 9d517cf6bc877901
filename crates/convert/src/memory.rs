//! The memory limit of a conversion: its default from this machine, the upload buffers outside the
//! pipeline, and the budget that keeps a plan under it (the model is `zshard_pipeline::budget`).

use zshard_pipeline::{Budget, BudgetRequest};
use zshard_store::Location;

use crate::error::Result;
use crate::plan::Plan;

/// The memory limit when none is given: half of what this machine (or its cgroup) has, so that a job
/// never takes all of a node; 4 GiB when that cannot be read.
pub fn default_limit() -> u64 {
    let total = cgroup_limit()
        .into_iter()
        .chain(physical_memory())
        .min()
        .unwrap_or(8 << 30);
    total / 2
}

fn cgroup_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/sys/fs/cgroup/memory.max").ok()?;
    text.trim().parse().ok()
}

fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Buffers of shards streamed to an object store in parts: a multipart part being filled and one
/// in flight (`zshard_store::Upload`), for the (about two) shards open at a time. Local outputs write
/// each piece as it comes.
pub(crate) fn upload_buffers(destination: &Location, part_size: usize) -> u64 {
    if destination.is_remote() {
        2 * 2 * part_size.max(5 << 20) as u64
    } else {
        0
    }
}

/// The pipeline's budget for `plan` under `limit` (the default limit when `None`).
pub(crate) fn budget(
    plan: &Plan,
    wanted: usize,
    limit: Option<u64>,
    upload_buffers: u64,
    io_threads: usize,
) -> Result<Budget> {
    let request = BudgetRequest {
        threads: wanted,
        limit: Some(limit.unwrap_or_else(default_limit)),
        upload_buffers,
        io_threads,
    };
    Ok(zshard_pipeline::budget(&plan.layouts(), &request)?)
}
