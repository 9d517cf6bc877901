//! Which shards this process converts: `--worker I/N`, or the array index that SLURM or a Kubernetes
//! Indexed Job gives it. Shard `g` of the global enumeration (arrays in hierarchy order, shards in C
//! order) belongs to worker `g mod N`, so parts are disjoint, cover everything, differ in size by at
//! most one shard, and spread every region of every array over all workers. The lower levels of a
//! pyramid made while converting follow their level-0 shards instead, or are made by `finalize`
//! (see [`Owner`](crate::Owner) and [`Outputs::owns`](crate::Outputs::owns)).

use zshard_core::Setting;

use crate::error::{Error, Result};

/// `--worker "3/x"` (quoted, as given).
fn worker(s: &str) -> String {
    Setting::Worker.given(format_args!("{s:?}"))
}

fn invalid(reason: String) -> Error {
    Error::Worker { reason }
}

/// One worker's share of the shards: worker `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    /// This worker, from 0.
    pub index: u64,
    /// How many workers share the conversion.
    pub count: u64,
}

impl Partition {
    /// Every shard: a single, unpartitioned run.
    pub const ALL: Partition = Partition { index: 0, count: 1 };

    /// The most workers a conversion is shared by: Kubernetes' limit for an Indexed Job's
    /// completions (SLURM's default array limit is 1,001). `zshard status` lists every worker, so a
    /// count beyond any scheduler's is a typo, not a plan.
    pub const MAX_WORKERS: u64 = 100_000;

    /// Parses `I/N` (0 <= I < N).
    pub fn parse(s: &str) -> Result<Partition> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| invalid(format!("{} is not I/N (e.g. 3/16)", worker(s))))?;
        let index: u64 = i
            .trim()
            .parse()
            .map_err(|_| invalid(format!("{}: bad index", worker(s))))?;
        let count: u64 = n
            .trim()
            .parse()
            .map_err(|_| invalid(format!("{}: bad count", worker(s))))?;
        Self::new(index, count).map_err(|e| invalid(format!("{}: {e}", Setting::Worker.given(s))))
    }

    /// Worker `index` of `count`; refused unless `index < count`.
    pub fn new(index: u64, count: u64) -> Result<Partition> {
        if count > Self::MAX_WORKERS {
            return Err(invalid(format!(
                "{count} workers: at most {} can share a conversion",
                Self::MAX_WORKERS
            )));
        }
        if count == 0 || index >= count {
            return Err(invalid(format!(
                "worker index {index} is not in 0..{count}"
            )));
        }
        Ok(Partition { index, count })
    }

    /// The partition a record file's name starts with (`w<I>of<N>`, see [`Partition::tag`]);
    /// `None` for any other name, or a count beyond [`Partition::MAX_WORKERS`].
    pub(crate) fn parse_tag(tag: &str) -> Option<Partition> {
        let (index, count) = tag.strip_prefix('w')?.split_once("of")?;
        Self::new(index.parse().ok()?, count.parse().ok()?).ok()
    }

    /// The partition that wrote the state file at `key` (named `<tag>-...` or `<tag>.json`).
    pub(crate) fn of_file(key: &str) -> Option<Partition> {
        let name = key.rsplit('/').next()?;
        Self::parse_tag(name.split(['-', '.']).next()?)
    }

    /// The partition from `--worker`, else from the environment of a SLURM job array
    /// (`SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN` of `SLURM_ARRAY_TASK_COUNT`) or of a Kubernetes
    /// Indexed Job (`JOB_COMPLETION_INDEX` of `--workers`), else everything.
    pub fn resolve(
        worker: Option<&str>,
        workers: Option<u64>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Partition> {
        if let Some(w) = worker {
            return Self::parse(w);
        }
        let number = |name: &str| -> Result<Option<u64>> {
            env(name)
                .map(|v| {
                    v.trim()
                        .parse::<u64>()
                        .map_err(|_| invalid(format!("{name}={v:?} is not a number")))
                })
                .transpose()
        };
        if let (Some(id), Some(count)) = (
            number("SLURM_ARRAY_TASK_ID")?,
            number("SLURM_ARRAY_TASK_COUNT")?,
        ) {
            let min = number("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let index = id.checked_sub(min).ok_or_else(|| {
                invalid("SLURM_ARRAY_TASK_ID is below SLURM_ARRAY_TASK_MIN".to_string())
            })?;
            return Self::new(index, count)
                .map_err(|e| invalid(format!("from the SLURM job array environment: {e}")));
        }
        if let Some(index) = number("JOB_COMPLETION_INDEX")? {
            let Some(count) = workers else {
                return Err(invalid(format!(
                    "JOB_COMPLETION_INDEX is set: give the number of workers with {}",
                    Setting::Workers.given("N")
                )));
            };
            return Self::new(index, count)
                .map_err(|e| invalid(format!("from JOB_COMPLETION_INDEX: {e}")));
        }
        if let Some(count) = workers {
            if count != 1 {
                return Err(invalid(format!(
                    "{} needs {}, a SLURM job array or JOB_COMPLETION_INDEX",
                    Setting::Workers.given(count),
                    Setting::Worker.given("I/N")
                )));
            }
        }
        Ok(Partition::ALL)
    }

    /// Whether shard `global_shard` of the global enumeration is this worker's.
    pub fn owns(&self, global_shard: u64) -> bool {
        global_shard % self.count == self.index
    }

    /// Whether this is an unpartitioned run.
    pub fn is_all(&self) -> bool {
        self.count == 1
    }

    /// A name for this worker's records, unique among the workers of a run.
    pub fn tag(&self) -> String {
        format!("w{}of{}", self.index, self.count)
    }
}

/// `I/N`, as [`Partition::parse`] reads it.
impl std::fmt::Display for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn parts_are_disjoint_and_cover_everything() {
        for n in [1u64, 3, 7] {
            let mut owners = vec![0u32; 1000];
            for i in 0..n {
                let p = Partition::parse(&format!("{i}/{n}")).expect("valid");
                for (g, o) in owners.iter_mut().enumerate() {
                    if p.owns(g as u64) {
                        *o += 1;
                    }
                }
            }
            assert!(owners.iter().all(|&o| o == 1), "N={n}");
        }
    }

    #[test]
    fn environment_and_errors() {
        let none = env(&[]);
        assert_eq!(
            Partition::resolve(None, None, &none).ok(),
            Some(Partition::ALL)
        );
        let slurm = env(&[
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
            ("SLURM_ARRAY_TASK_MIN", "3"),
        ]);
        assert_eq!(
            Partition::resolve(None, None, &slurm).ok(),
            Some(Partition { index: 2, count: 4 })
        );
        let k8s = env(&[("JOB_COMPLETION_INDEX", "6")]);
        assert_eq!(
            Partition::resolve(None, Some(7), &k8s).ok(),
            Some(Partition { index: 6, count: 7 })
        );
        assert!(Partition::resolve(None, None, &k8s).is_err());
        assert!(Partition::resolve(Some("3/3"), None, &none).is_err());
        assert!(Partition::resolve(Some("x"), None, &none).is_err());
        assert!(Partition::resolve(None, Some(4), &none).is_err());
        assert_eq!(
            Partition::resolve(Some("1/2"), None, &slurm).ok(),
            Some(Partition { index: 1, count: 2 })
        );
    }
}
