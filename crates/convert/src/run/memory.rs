//! The memory limit of a conversion: its default from this machine, the upload buffers outside the
//! pipeline, and the budget that keeps a plan under it (the model is `zshard_pipeline::budget`).

use zshard_pipeline::{ArrayLayout, Budget, BudgetRequest};
use zshard_store::Location;

use crate::error::{Error, Result};
use crate::plan::{array_name, Plan};

/// The memory limit when none is given: half of the smallest memory this process may use (see
/// [`memory_default`]), so that a job never takes all of what it has; 4 GiB when nothing can be read.
pub fn default_limit() -> u64 {
    memory_default().limit
}

/// What the process may use at most, as found on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemorySource {
    /// `memory.max` of the process's cgroup (v2) or one of its ancestors, at this path.
    CgroupV2 {
        /// The file holding the limit.
        path: String,
    },
    /// `memory.limit_in_bytes` of the process's memory cgroup (v1) or one of its ancestors.
    CgroupV1 {
        /// The file holding the limit.
        path: String,
    },
    /// `SLURM_MEM_PER_NODE` (MiB): the job's memory on this node.
    SlurmPerNode,
    /// `SLURM_MEM_PER_CPU` (MiB) times `SLURM_CPUS_ON_NODE`.
    SlurmPerCpu {
        /// `SLURM_CPUS_ON_NODE` (1 when not set).
        cpus: u64,
    },
    /// `MemTotal` of `/proc/meminfo`: the machine.
    Machine,
    /// Nothing could be read: 8 GiB is assumed.
    Assumed,
}

impl std::fmt::Display for MemorySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemorySource::CgroupV2 { path } => write!(f, "cgroup v2 limit ({path})"),
            MemorySource::CgroupV1 { path } => write!(f, "cgroup v1 limit ({path})"),
            MemorySource::SlurmPerNode => write!(f, "SLURM_MEM_PER_NODE"),
            MemorySource::SlurmPerCpu { cpus } => {
                write!(f, "SLURM_MEM_PER_CPU x SLURM_CPUS_ON_NODE ({cpus})")
            }
            MemorySource::Machine => write!(f, "the machine's memory (/proc/meminfo)"),
            MemorySource::Assumed => write!(f, "nothing readable, 8 GiB assumed"),
        }
    }
}

/// The default memory limit and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryDefault {
    /// The limit: half of `available`.
    pub limit: u64,
    /// The smallest of the limits found, in bytes.
    pub available: u64,
    /// Which limit that was.
    pub source: MemorySource,
}

impl std::fmt::Display for MemoryDefault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "half of {} bytes, from {}", self.available, self.source)
    }
}

/// Where a conversion's memory limit came from: given, or the default of [`memory_default`].
pub(crate) fn limit_origin(given: Option<u64>) -> String {
    match given {
        Some(_) => format!("given ({})", zshard_core::Setting::MemoryLimit),
        None => format!("default: {}", memory_default()),
    }
}

/// A cgroup limit at or above this is "unlimited" (v1 writes a page-rounded `i64::MAX`).
const UNLIMITED: u64 = 1 << 62;

/// The default memory limit: half of the smallest of the process's cgroup limit (v2 or v1, its own
/// cgroup and its ancestors, from `/proc/self/cgroup`), the SLURM allocation on this node and the
/// machine's memory.
pub fn memory_default() -> MemoryDefault {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let cgroups = cgroup_limits(&own, std::path::Path::new("/sys/fs/cgroup"));
    let slurm = slurm_limit(|name| std::env::var(name).ok());
    let machine = physical_memory().map(|bytes| (bytes, MemorySource::Machine));
    smallest(cgroups.into_iter().chain(slurm).chain(machine))
}

/// Half of the smallest of `limits` (8 GiB assumed when there is none).
fn smallest(limits: impl Iterator<Item = (u64, MemorySource)>) -> MemoryDefault {
    let (available, source) = limits
        .min_by_key(|(bytes, _)| *bytes)
        .unwrap_or((8 << 30, MemorySource::Assumed));
    MemoryDefault {
        limit: available / 2,
        available,
        source,
    }
}

/// The memory limits of the cgroups named in `own` (the text of `/proc/self/cgroup`) under the
/// cgroup file system at `root`: v2 (`0::PATH`, `memory.max`) and v1 (`N:...memory...:PATH`,
/// `memory/memory.limit_in_bytes`). Each is the smallest along the path up to the root, since every
/// ancestor's limit applies too; unlimited ones are left out.
fn cgroup_limits(own: &str, root: &std::path::Path) -> Vec<(u64, MemorySource)> {
    let mut found = Vec::new();
    for line in own.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let relative = path.trim_start_matches('/');
        let limit = if controllers.is_empty() {
            smallest_along(&root.join(relative), root, "memory.max")
                .map(|(bytes, path)| (bytes, MemorySource::CgroupV2 { path }))
        } else if controllers.split(',').any(|c| c == "memory") {
            let mount = root.join("memory");
            smallest_along(&mount.join(relative), &mount, "memory.limit_in_bytes")
                .map(|(bytes, path)| (bytes, MemorySource::CgroupV1 { path }))
        } else {
            None
        };
        found.extend(limit);
    }
    found
}

/// The smallest limit in `file` in `dir` and its ancestors up to `top`, with the file it is in.
fn smallest_along(
    dir: &std::path::Path,
    top: &std::path::Path,
    file: &str,
) -> Option<(u64, String)> {
    dir.ancestors()
        .take_while(|d| d.starts_with(top))
        .filter_map(|d| {
            let path = d.join(file);
            let text = std::fs::read_to_string(&path).ok()?;
            // "max" (v2) does not parse: no limit there.
            let bytes: u64 = text.trim().parse().ok()?;
            (bytes < UNLIMITED).then(|| (bytes, path.display().to_string()))
        })
        .min_by_key(|(bytes, _)| *bytes)
}

/// SLURM's allocation on this node, from its job environment: `SLURM_MEM_PER_NODE`, or
/// `SLURM_MEM_PER_CPU` x `SLURM_CPUS_ON_NODE` (both in MiB, as SLURM sets them). `0` means "all of
/// the node's memory" to SLURM: no limit of its own.
fn slurm_limit(var: impl Fn(&str) -> Option<String>) -> Option<(u64, MemorySource)> {
    let mib =
        |name: &str| -> Option<u64> { var(name)?.trim().parse::<u64>().ok().filter(|&n| n > 0) };
    if let Some(per_node) = mib("SLURM_MEM_PER_NODE") {
        return Some((per_node.saturating_mul(1 << 20), MemorySource::SlurmPerNode));
    }
    let per_cpu = mib("SLURM_MEM_PER_CPU")?;
    let cpus = mib("SLURM_CPUS_ON_NODE").unwrap_or(1);
    Some((
        per_cpu.saturating_mul(cpus).saturating_mul(1 << 20),
        MemorySource::SlurmPerCpu { cpus },
    ))
}

/// `MemTotal` of `/proc/meminfo`.
fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The smallest part object stores take (S3's minimum for every part but the last); the store
/// raises a smaller `--part-size` to it.
pub(crate) const MIN_PART_SIZE: usize = 5 << 20;

/// What a stored shard of `array` may take beyond its raw bytes: its inner chunks as their codecs
/// may expand them (twice their bytes covers every codec's bound, and a copied chunk's stored
/// allowance), a frame's worth for each, and the index. `None` for variable-size values, whose bytes
/// the shard shape does not bound.
fn stored_shard_bound(array: &ArrayLayout) -> Option<u64> {
    if array.inner_repr.data_type.is_variable() {
        return None;
    }
    let chunks = zshard_core::product(&array.geometry.chunks_per_shard());
    Some(
        array
            .shard_bytes()
            .saturating_mul(2)
            .saturating_add(chunks.saturating_mul(64 + 16))
            .saturating_add(4 << 10),
    )
}

/// Buffers of shards sent to an object store, for the (about two) shards open at a time
/// (`zshard_store::Upload`): a shard of at most one part goes up in one PUT, holding its pieces until
/// it is complete; a larger one is a multipart upload holding a part being filled and one in flight.
/// So a shard takes at most two parts, and a small one no more than itself: 8 KiB shards no longer
/// count 128 MiB of 32 MiB parts. Local outputs write each piece as it comes.
pub(crate) fn upload_buffers(
    destination: &Location,
    part_size: usize,
    arrays: &[ArrayLayout],
) -> u64 {
    if !destination.is_remote() {
        return 0;
    }
    let two_parts = 2 * part_size.max(MIN_PART_SIZE) as u64;
    let per_shard = arrays
        .iter()
        .map(|array| stored_shard_bound(array).map_or(two_parts, |b| b.min(two_parts)))
        .max()
        .unwrap_or(0);
    2 * per_shard
}

/// Bytes one array's plan holds for the whole run, about: its source metadata, layout, codec
/// chains, output document, state record and fingerprint text. 30,000 empty Zarr v2 arrays (issue
/// 31) peaked at 198 MiB planned and 289 MiB converted, 7 and 10 KiB an array.
pub(crate) const PLAN_BYTES_PER_ARRAY: u64 = 10 << 10;

/// A plan from which its size alone is checked against the limit before it is made (3,277 arrays
/// and more): below, making it costs little, and the pipeline's budget refuses a limit too small.
pub(crate) const LARGE_PLAN_BYTES: u64 = 32 << 20;

/// What the plan of `arrays` arrays holds for the whole run (see [`PLAN_BYTES_PER_ARRAY`]).
pub(crate) fn plan_bytes(arrays: usize) -> u64 {
    (arrays as u64).saturating_mul(PLAN_BYTES_PER_ARRAY)
}

/// What a conversion holds outside the pipeline, for its budget.
#[derive(Clone, Copy)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_per_node_and_per_cpu_are_mebibytes() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            slurm_limit(env(&[("SLURM_MEM_PER_NODE", "8192")])),
            Some((8 << 30, MemorySource::SlurmPerNode))
        );
        assert_eq!(
            slurm_limit(env(&[
                ("SLURM_MEM_PER_CPU", "1024"),
                ("SLURM_CPUS_ON_NODE", "3")
            ])),
            Some((3 << 30, MemorySource::SlurmPerCpu { cpus: 3 }))
        );
        assert_eq!(slurm_limit(env(&[("SLURM_MEM_PER_NODE", "0")])), None);
        assert_eq!(slurm_limit(env(&[])), None);
    }

    #[test]
    fn cgroups_are_read_along_the_process_path_v1_and_v2() {
        let root = tempfile::tempdir().expect("tempdir");
        let r = root.path();
        let v2 = r.join("jobs/job_7/step_0");
        std::fs::create_dir_all(&v2).expect("mkdir");
        std::fs::write(r.join("jobs/memory.max"), "max\n").expect("write");
        std::fs::write(r.join("jobs/job_7/memory.max"), "3221225472\n").expect("write");
        std::fs::write(v2.join("memory.max"), "max\n").expect("write");
        let v1 = r.join("memory/slurm/uid_1/job_9");
        std::fs::create_dir_all(&v1).expect("mkdir");
        std::fs::write(
            r.join("memory/memory.limit_in_bytes"),
            "9223372036854771712",
        )
        .expect("write");
        std::fs::write(v1.join("memory.limit_in_bytes"), "2147483648").expect("write");
        let found = cgroup_limits(
            "12:cpu,cpuacct:/x\n4:memory:/slurm/uid_1/job_9\n0::/jobs/job_7/step_0\n",
            r,
        );
        assert_eq!(
            found,
            vec![
                (
                    2 << 30,
                    MemorySource::CgroupV1 {
                        path: v1.join("memory.limit_in_bytes").display().to_string()
                    }
                ),
                (
                    3 << 30,
                    MemorySource::CgroupV2 {
                        path: r.join("jobs/job_7/memory.max").display().to_string()
                    }
                ),
            ]
        );
        let chosen = smallest(found.into_iter().chain([(16 << 30, MemorySource::Machine)]));
        assert_eq!((chosen.limit, chosen.available), (1 << 30, 2 << 30));
        // Unlimited everywhere: nothing from cgroups.
        assert!(cgroup_limits("0::/jobs\n", r).is_empty());
    }
}
