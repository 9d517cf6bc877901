//! The memory limit of a conversion: its default from this machine, the upload buffers outside the
//! pipeline, and the budget that keeps a plan under it (the model is `zshard_pipeline::budget`).

use zshard_pipeline::{Budget, BudgetRequest};
use zshard_store::Location;

use crate::error::{Error, Result};
use crate::plan::{array_name, Plan};

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

/// The memory limit of this process's cgroup: v2 (`memory.max`, "max" when unlimited) or v1
/// (`memory.limit_in_bytes`, a huge number when unlimited, which the machine's memory then undercuts).
fn cgroup_limit() -> Option<u64> {
    [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .filter_map(|path| std::fs::read_to_string(path).ok())
    .find_map(|text| text.trim().parse().ok())
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

/// What a conversion holds outside the pipeline, for its budget.
pub(crate) struct Outside {
    /// See [`upload_buffers`].
    pub(crate) upload_buffers: u64,
    /// What the input holds for the whole run (a kerchunk set's references).
    pub(crate) resident: u64,
}

/// The pipeline's budget for `plan` (of the source at `source`) under `limit` (the default limit
/// when `None`). A refusal names the array it is about.
pub(crate) fn budget(
    plan: &Plan,
    source: &str,
    wanted: usize,
    limit: Option<u64>,
    outside: Outside,
    io_threads: usize,
) -> Result<Budget> {
    let request = BudgetRequest {
        threads: wanted,
        limit: Some(limit.unwrap_or_else(default_limit)),
        upload_buffers: outside.upload_buffers,
        io_threads,
        resident: outside.resident,
    };
    zshard_pipeline::budget(&plan.layouts(), &request).map_err(|e| match &e {
        zshard_pipeline::Error::MemoryLimit {
            array: Some(index), ..
        } => match plan.arrays.get(*index) {
            Some(array) => Error::Array {
                array: array_name(source, &array.path),
                source: Box::new(e.into()),
            },
            None => e.into(),
        },
        _ => e.into(),
    })
}
