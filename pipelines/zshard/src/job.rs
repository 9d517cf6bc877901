//! `zshard run JOB.toml`: declarative jobs for scheduled ETL. A job holds one or more conversions;
//! settings at the top level apply to every conversion and array unless a conversion or an
//! `[conversions.arrays."path"]` table sets its own. See `pipelines/*.toml` for commented examples.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Deserialize;

use zshard_convert::{parse_size, Compressor, Conversion, Layout, Layouts, Partition};
use zshard_store::{Location, StoreOptions};

use crate::args::StorageArgs;

/// Settings that may appear at the top level, in a conversion, or for one array.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    shard_shape: Option<Vec<u64>>,
    chunk_shape: Option<Vec<u64>>,
    compressor: Option<String>,
    index_location: Option<String>,
}

impl Settings {
    /// `self` where set, else `base`.
    fn over(&self, base: &Settings) -> Settings {
        fn or<T: Clone>(own: &Option<T>, base: &Option<T>) -> Option<T> {
            own.as_ref().or(base.as_ref()).cloned()
        }
        Settings {
            shard_shape: or(&self.shard_shape, &base.shard_shape),
            chunk_shape: or(&self.chunk_shape, &base.chunk_shape),
            compressor: or(&self.compressor, &base.compressor),
            index_location: or(&self.index_location, &base.index_location),
        }
    }

    fn layout(&self) -> anyhow::Result<Layout> {
        let compressor: Compressor = self.compressor.as_deref().unwrap_or("zstd:3").parse()?;
        let index_location = match self.index_location.as_deref() {
            None => zshard_core::IndexLocation::End,
            Some(s) => zshard_core::IndexLocation::parse(s)
                .with_context(|| format!("index_location {s:?} is not start or end"))?,
        };
        Ok(Layout {
            shard_shape: self.shard_shape.clone(),
            chunk_shape: self.chunk_shape.clone(),
            compressor,
            index_location,
            passthrough: true,
        })
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConversionSpec {
    source: String,
    destination: String,
    #[serde(flatten)]
    settings: Settings,
    #[serde(default)]
    arrays: BTreeMap<String, Settings>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobFile {
    /// Free text for people and logs.
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    threads: Option<usize>,
    memory_limit: Option<String>,
    /// A report per conversion: `{n}` becomes the conversion's number (from 0).
    report: Option<String>,
    #[serde(default)]
    overwrite: bool,
    /// `consolidate = false` is `--no-consolidate` for every conversion.
    #[serde(default = "consolidate_by_default")]
    consolidate: bool,
    #[serde(flatten)]
    settings: Settings,
    conversions: Vec<ConversionSpec>,
}

fn consolidate_by_default() -> bool {
    true
}

/// Relative paths in a job file are relative to the file's folder, so jobs can be moved whole.
fn resolve(base: &Path, location: &str) -> anyhow::Result<String> {
    Ok(Location::parse(location)?.resolve_against(base).to_string())
}

fn conversions(
    path: &Path,
    partition: Partition,
    store_options: &StoreOptions,
    io_threads: Option<usize>,
) -> anyhow::Result<Vec<Conversion>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read job file {}", path.display()))?;
    let job: JobFile =
        toml::from_str(&text).with_context(|| format!("job file {}", path.display()))?;
    if job.conversions.is_empty() {
        bail!("job file {} has no [[conversions]]", path.display());
    }
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let memory_limit = job.memory_limit.as_deref().map(parse_size).transpose()?;
    let threads = job
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    job.conversions
        .iter()
        .enumerate()
        .map(|(n, c)| {
            let settings = c.settings.over(&job.settings);
            let per_array = c
                .arrays
                .iter()
                .map(|(p, s)| {
                    Ok((
                        p.clone(),
                        s.over(&settings)
                            .layout()
                            .with_context(|| format!("array {p}"))?,
                    ))
                })
                .collect::<anyhow::Result<_>>()?;
            let mut conversion =
                Conversion::new(resolve(&base, &c.source)?, resolve(&base, &c.destination)?);
            conversion.layouts = Layouts {
                default: settings.layout()?,
                per_array,
            };
            conversion.threads = threads;
            conversion.memory_limit = memory_limit;
            conversion.partition = partition;
            conversion.overwrite = job.overwrite;
            conversion.consolidate = job.consolidate;
            conversion.lease_stale_after = crate::args::lease_stale_after()?;
            conversion.store_options = store_options.clone();
            conversion.io_threads = io_threads;
            conversion.report_path = job
                .report
                .as_ref()
                .map(|r| resolve(&base, &r.replace("{n}", &n.to_string())).map(PathBuf::from))
                .transpose()?;
            Ok(conversion)
        })
        .collect::<anyhow::Result<Vec<_>>>()
        .with_context(|| format!("job file {}", path.display()))
}

pub fn run(
    path: &Path,
    partition: Partition,
    storage: &StorageArgs,
    quiet: bool,
) -> anyhow::Result<()> {
    // Every conversion is checked before the first one starts.
    let mut all = conversions(path, partition, &storage.options(), storage.io_threads)?;
    // One signal stops the conversion under way and the ones after it.
    let cancel = zshard_convert::Cancel::new();
    for c in &mut all {
        c.cancel = cancel.clone();
    }
    for c in &all {
        if let Err(e) = c.check() {
            // The conversion that cannot start reports its failure like one that failed running.
            if let Err(report_error) = c.report_failure(&e) {
                eprintln!(
                    "zshard: warning: {}",
                    zshard_convert::one_line(&report_error)
                );
            }
            return Err(anyhow::Error::new(e)
                .context(format!("conversion {} -> {}", c.source, c.destination)));
        }
    }
    crate::signals::cancel_on_signals(cancel)?;
    for c in &all {
        crate::print::convert(c, quiet)
            .with_context(|| format!("conversion {} -> {}", c.source, c.destination))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_inherit_and_unknown_keys_are_errors() {
        let dir = tempfile::tempdir().expect("tempdir");
        let job = dir.path().join("job.toml");
        std::fs::write(
            &job,
            r#"
threads = 3
compressor = "gzip:5"
chunk_shape = [10, 10]
[[conversions]]
source = "in.zarr"
destination = "/abs/out.zarr"
shard_shape = [20, 20]
[conversions.arrays."a/b"]
compressor = "none"
"#,
        )
        .expect("write");
        let all =
            conversions(&job, Partition::ALL, &StoreOptions::default(), None).expect("valid job");
        let c = &all[0];
        assert_eq!(c.threads, 3);
        assert!(c.consolidate);
        assert_eq!(c.source, dir.path().join("in.zarr").to_string_lossy());
        assert_eq!(c.destination, "/abs/out.zarr");
        assert_eq!(c.layouts.default.shard_shape, Some(vec![20, 20]));
        assert_eq!(c.layouts.default.compressor, Compressor::Gzip { level: 5 });
        let ab = &c.layouts.per_array["a/b"];
        assert_eq!(ab.compressor, Compressor::None);
        assert_eq!(ab.chunk_shape, Some(vec![10, 10]));
        std::fs::write(
            &job,
            "consolidate = false\n[[conversions]]\nsource = \"a\"\ndestination = \"b\"\n",
        )
        .expect("write");
        let all =
            conversions(&job, Partition::ALL, &StoreOptions::default(), None).expect("valid job");
        assert!(!all[0].consolidate);
        std::fs::write(
            &job,
            "[[conversions]]\nsource = \"a\"\ndestination = \"b\"\nshard_shap = [1]\n",
        )
        .expect("write");
        assert!(conversions(&job, Partition::ALL, &StoreOptions::default(), None).is_err());
    }
}
