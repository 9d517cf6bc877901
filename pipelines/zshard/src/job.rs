//! `zshard run JOB.toml`: declarative jobs for scheduled ETL. A job holds one or more conversions;
//! settings at the top level apply to every conversion and array unless a conversion or an
//! `[conversions.arrays."path"]` table sets its own. See `pipelines/*.toml` for commented examples.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Deserialize;

use crate::compressor::Compressor;
use crate::convert::{convert, Conversion};
use crate::partition::Partition;
use crate::plan::{Layout, Layouts};

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
        Settings {
            shard_shape: self
                .shard_shape
                .clone()
                .or_else(|| base.shard_shape.clone()),
            chunk_shape: self
                .chunk_shape
                .clone()
                .or_else(|| base.chunk_shape.clone()),
            compressor: self.compressor.clone().or_else(|| base.compressor.clone()),
            index_location: self
                .index_location
                .clone()
                .or_else(|| base.index_location.clone()),
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
    #[serde(flatten)]
    settings: Settings,
    conversions: Vec<ConversionSpec>,
}

/// A byte count parsed from `512MiB`, `4GiB`, `2GB`, `1000000`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

pub fn parse_size(s: &str) -> Result<Size, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let factor: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "kib" => 1024.0,
        "m" | "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "g" | "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "t" | "tb" => 1e12,
        "tib" => 1024f64.powi(4),
        other => {
            return Err(format!(
                "unknown size unit {other:?} in {s:?} (use e.g. 512MiB or 4GiB)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a size (use e.g. 512MiB or 4GiB)"))?;
    Ok(Size((value * factor) as u64))
}

/// Relative paths in a job file are relative to the file's folder, so jobs can be moved whole.
fn resolve(base: &Path, location: &str) -> String {
    if location.contains("://") || Path::new(location).is_absolute() {
        location.to_string()
    } else {
        base.join(location).to_string_lossy().into_owned()
    }
}

fn conversions(
    path: &Path,
    partition: Partition,
    storage: &crate::storage::StorageArgs,
    quiet: bool,
) -> anyhow::Result<Vec<Conversion>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read job file {}", path.display()))?;
    let job: JobFile =
        toml::from_str(&text).with_context(|| format!("job file {}", path.display()))?;
    if job.conversions.is_empty() {
        bail!("job file {} has no [[conversions]]", path.display());
    }
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let memory_limit = job
        .memory_limit
        .as_deref()
        .map(parse_size)
        .transpose()
        .map_err(anyhow::Error::msg)?;
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
            Ok(Conversion {
                source: resolve(&base, &c.source),
                destination: resolve(&base, &c.destination),
                layouts: Layouts {
                    default: settings.layout()?,
                    per_array,
                },
                threads,
                memory_limit: memory_limit.map(|m| m.0),
                quiet,
                partition,
                overwrite: job.overwrite,
                source_args: crate::source::SourceArgs::default(),
                storage: storage.clone(),
                report: job
                    .report
                    .as_ref()
                    .map(|r| PathBuf::from(resolve(&base, &r.replace("{n}", &n.to_string())))),
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()
        .with_context(|| format!("job file {}", path.display()))
}

pub fn run(
    path: &Path,
    partition: Partition,
    storage: &crate::storage::StorageArgs,
    quiet: bool,
) -> anyhow::Result<()> {
    // Every conversion is checked before the first one starts.
    let all = conversions(path, partition, storage, quiet)?;
    for c in &all {
        crate::convert::open(
            &c.source,
            &c.destination,
            &c.layouts,
            &c.source_args,
            &c.storage,
        )
        .with_context(|| format!("conversion {} -> {}", c.source, c.destination))?;
    }
    for c in &all {
        convert(c).with_context(|| format!("conversion {} -> {}", c.source, c.destination))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("512MiB"), Ok(Size(512 << 20)));
        assert_eq!(parse_size("4GiB"), Ok(Size(4 << 30)));
        assert_eq!(parse_size("2GB"), Ok(Size(2_000_000_000)));
        assert_eq!(parse_size("1000"), Ok(Size(1000)));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5 parsecs").is_err());
    }

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
        let all = conversions(&job, Partition::ALL, &Default::default(), true).expect("valid job");
        let c = &all[0];
        assert_eq!(c.threads, 3);
        assert_eq!(c.source, dir.path().join("in.zarr").to_string_lossy());
        assert_eq!(c.destination, "/abs/out.zarr");
        assert_eq!(c.layouts.default.shard_shape, Some(vec![20, 20]));
        assert_eq!(c.layouts.default.compressor, Compressor::Gzip { level: 5 });
        let ab = &c.layouts.per_array["a/b"];
        assert_eq!(ab.compressor, Compressor::None);
        assert_eq!(ab.chunk_shape, Some(vec![10, 10]));
        std::fs::write(
            &job,
            "[[conversions]]\nsource = \"a\"\ndestination = \"b\"\nshard_shap = [1]\n",
        )
        .expect("write");
        assert!(conversions(&job, Partition::ALL, &Default::default(), true).is_err());
    }
}
