//! `zshard run JOB.toml`: declarative jobs for scheduled ETL. A job holds one or more conversions;
//! settings at the top level apply to every conversion and array unless a conversion or an
//! `[conversions.arrays."path"]` table sets its own. See `pipelines/*.toml` for commented examples.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::Deserialize;

use zshard_convert::{
    parse_size, Compressor, Conversion, Layout, Layouts, LevelShapes, OmeMetadata, Partition,
    ReferenceOptions, Selection, ShapeSpec, SourceFormat, SourceOptions, Verification,
};
use zshard_store::{Location, StoreOptions};

use crate::args::{SourceArgs, StorageArgs};

/// Settings that may appear at the top level, in a conversion, or (the layout ones) for one array.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Settings {
    /// `[48, 720]`, `{ time = 48, lat = 720 }` or `"time=48,lat=720"`, as `--shard-shape`.
    shard_shape: Option<ShapeSpec>,
    chunk_shape: Option<ShapeSpec>,
    compressor: Option<String>,
    index_location: Option<String>,
    /// `passthrough = false` is `--no-passthrough`.
    passthrough: Option<bool>,
    // How the source is read: a conversion's (or every conversion's), never one array's.
    source_format: Option<String>,
    ref_root: Option<String>,
    allow_ref_prefix: Option<Vec<String>>,
    ref_coalesce_gap: Option<String>,
    include: Option<Vec<String>>,
    exclude: Option<Vec<String>>,
    /// `"refuse"` or `"skip"`, as `--on-unsupported`.
    on_unsupported: Option<String>,
}

/// `[storage]`: the storage flags of `zshard convert` (job keys win over the flags).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StorageSettings {
    s3_endpoint: Option<String>,
    s3_region: Option<String>,
    s3_path_style: Option<bool>,
    anonymous: Option<bool>,
    retries: Option<usize>,
    retry_timeout: Option<u64>,
    max_requests: Option<usize>,
    part_size: Option<String>,
    io_threads: Option<usize>,
}

impl StorageSettings {
    /// `flags` with what the job sets in place of theirs.
    fn over(&self, flags: &StorageArgs) -> anyhow::Result<(StoreOptions, Option<usize>)> {
        let mut options = flags.options();
        let set = |slot: &mut Option<String>, value: &Option<String>| {
            if value.is_some() {
                slot.clone_from(value);
            }
        };
        set(&mut options.s3_endpoint, &self.s3_endpoint);
        set(&mut options.s3_region, &self.s3_region);
        options.s3_path_style = self.s3_path_style.unwrap_or(options.s3_path_style);
        options.anonymous = self.anonymous.unwrap_or(options.anonymous);
        options.retries = self.retries.or(options.retries);
        if let Some(seconds) = self.retry_timeout {
            options.retry_timeout = std::time::Duration::from_secs(seconds);
        }
        options.max_requests = self.max_requests.unwrap_or(options.max_requests).max(1);
        if let Some(size) = &self.part_size {
            let size = parse_size(size).context("storage.part_size")?;
            options.part_size = usize::try_from(size).unwrap_or(usize::MAX);
        }
        Ok((options, self.io_threads.or(flags.io_threads)))
    }
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
            passthrough: or(&self.passthrough, &base.passthrough),
            source_format: or(&self.source_format, &base.source_format),
            ref_root: or(&self.ref_root, &base.ref_root),
            allow_ref_prefix: or(&self.allow_ref_prefix, &base.allow_ref_prefix),
            ref_coalesce_gap: or(&self.ref_coalesce_gap, &base.ref_coalesce_gap),
            include: or(&self.include, &base.include),
            exclude: or(&self.exclude, &base.exclude),
            on_unsupported: or(&self.on_unsupported, &base.on_unsupported),
        }
    }

    /// The source keys set here, which one array cannot have.
    fn source_keys(&self) -> Vec<&'static str> {
        [
            ("source_format", self.source_format.is_some()),
            ("ref_root", self.ref_root.is_some()),
            ("allow_ref_prefix", self.allow_ref_prefix.is_some()),
            ("ref_coalesce_gap", self.ref_coalesce_gap.is_some()),
            ("include", self.include.is_some()),
            ("exclude", self.exclude.is_some()),
            ("on_unsupported", self.on_unsupported.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, set)| set.then_some(key))
        .collect()
    }

    /// How the source is read; relative local paths resolve against `base` (the job's folder).
    fn source_options(&self, base: &Path) -> anyhow::Result<SourceOptions> {
        let format = self
            .source_format
            .as_deref()
            .map(str::parse::<SourceFormat>)
            .transpose()?;
        let given = self.ref_root.is_some()
            || self.allow_ref_prefix.is_some()
            || self.ref_coalesce_gap.is_some();
        let defaults = ReferenceOptions::default();
        let coalesce_gap = match &self.ref_coalesce_gap {
            None => defaults.coalesce_gap,
            Some(gap) => crate::args::ref_coalesce_gap(gap)
                .map_err(|e| anyhow::anyhow!("ref_coalesce_gap: {e}"))?,
        };
        let prefixes = self.allow_ref_prefix.iter().flatten();
        let references = ReferenceOptions {
            ref_root: self
                .ref_root
                .as_deref()
                .map(|r| resolve(base, r))
                .transpose()?,
            allow_prefixes: prefixes
                .map(|p| resolve_prefix(base, p))
                .collect::<anyhow::Result<_>>()?,
            coalesce_gap,
            ..defaults
        };
        Ok(SourceOptions {
            format,
            references: given.then_some(references),
            selection: Selection {
                include: self.include.clone().unwrap_or_default(),
                exclude: self.exclude.clone().unwrap_or_default(),
            },
            // Job files name no Icechunk reference yet: the branch main.
            reference: None,
            on_unsupported: zshard_convert::OnUnsupported::from_option(
                self.on_unsupported.as_deref(),
            )?,
        })
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
            passthrough: self.passthrough.unwrap_or(true),
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
    /// Shapes of a pyramid level of every multiscale image, by level (`[conversions.levels.1]`).
    #[serde(default)]
    levels: BTreeMap<String, LevelSettings>,
    /// `upgrade` or `keep` (see `--ome`); the job's when not given.
    ome: Option<String>,
}

/// `--level-shapes` in a job file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LevelSettings {
    shard_shape: Vec<u64>,
    chunk_shape: Option<Vec<u64>>,
}

/// The level shapes of a conversion, by level number.
fn per_level(
    levels: &BTreeMap<String, LevelSettings>,
) -> anyhow::Result<BTreeMap<usize, LevelShapes>> {
    levels
        .iter()
        .map(|(level, shapes)| {
            let level = level
                .parse::<usize>()
                .with_context(|| format!("levels.{level}: not a level number"))?;
            let shapes = LevelShapes {
                shard_shape: shapes.shard_shape.clone(),
                chunk_shape: shapes.chunk_shape.clone(),
            };
            Ok((level, shapes))
        })
        .collect()
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
    #[serde(default)]
    storage: StorageSettings,
    /// `ome = "keep"` is `--ome keep` for every conversion.
    ome: Option<String>,
    #[serde(flatten)]
    settings: Settings,
    conversions: Vec<ConversionSpec>,
}

fn consolidate_by_default() -> bool {
    true
}

/// Relative paths in a job file are relative to the file's folder, so jobs can be moved whole; local
/// paths come out absolute and normalized (no `.` or `..`), as errors then show them.
fn resolve(base: &Path, location: &str) -> anyhow::Result<String> {
    let resolved = Location::parse(location)?.resolve_against(base);
    Ok(match resolved.resolved_path() {
        Some(path) => path.to_string_lossy().into_owned(),
        None => resolved.to_string(),
    })
}

/// An `allow_ref_prefix`: a local one resolves as a path does, keeping a final `/` (which makes it
/// name a folder's contents rather than any name that starts with it).
fn resolve_prefix(base: &Path, prefix: &str) -> anyhow::Result<String> {
    if prefix.contains("://") {
        return Ok(prefix.to_string());
    }
    let mut resolved = resolve(base, prefix)?;
    if prefix.ends_with('/') && !resolved.ends_with('/') {
        resolved.push('/');
    }
    Ok(resolved)
}

/// The conversions of the job file at `path`, with `storage` flags where the job's `[storage]`
/// does not set a key.
pub fn load(
    path: &Path,
    partition: Partition,
    storage: &StorageArgs,
) -> anyhow::Result<Vec<Conversion>> {
    // Absolute and normalized, so that messages name the file wherever zshard was started.
    let path = &std::fs::canonicalize(path)
        .with_context(|| format!("cannot read job file {}", path.display()))?;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read job file {}", path.display()))?;
    let job: JobFile =
        toml::from_str(&text).with_context(|| format!("job file {}", path.display()))?;
    if job.conversions.is_empty() {
        bail!("job file {} has no [[conversions]]", path.display());
    }
    let (store_options, io_threads) = job
        .storage
        .over(storage)
        .with_context(|| format!("job file {}", path.display()))?;
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
                    if let Some(key) = s.source_keys().first() {
                        bail!("array {p}: {key} applies to a whole conversion, not to one array");
                    }
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
                per_level: per_level(&c.levels)?,
            };
            if let Some(ome) = c.ome.as_ref().or(job.ome.as_ref()) {
                conversion.ome = ome
                    .parse::<OmeMetadata>()
                    .map_err(anyhow::Error::msg)
                    .context("ome")?;
            }
            conversion.threads = threads;
            conversion.memory_limit = memory_limit;
            conversion.partition = partition;
            conversion.overwrite = job.overwrite;
            conversion.consolidate = job.consolidate;
            conversion.source_options = settings.source_options(&base)?;
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
    let mut all = load(path, partition, storage)?;
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

/// `zshard verify JOB.toml`: a verification of each conversion of the job, reading its source as
/// the conversion did.
pub fn verifications(
    path: &str,
    source: &SourceArgs,
    storage: &StorageArgs,
    threads: Option<usize>,
) -> anyhow::Result<Vec<Verification>> {
    if source.given() {
        bail!("job file {path}: give the source options in the job file, not as flags beside it");
    }
    let conversions = load(Path::new(path), Partition::ALL, storage)?;
    Ok(conversions
        .into_iter()
        .map(|c| {
            let mut v = Verification::of(&c);
            v.threads = threads.unwrap_or(c.threads);
            v
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The storage flags as the command line gives them when none is set.
    fn storage_flags() -> StorageArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Flags {
            #[command(flatten)]
            storage: StorageArgs,
        }
        Flags::parse_from(["zshard"]).storage
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
        let all = load(&job, Partition::ALL, &storage_flags()).expect("valid job");
        let c = &all[0];
        assert_eq!(c.threads, 3);
        assert!(c.consolidate);
        assert_eq!(c.source, dir.path().join("in.zarr").to_string_lossy());
        assert_eq!(c.destination, "/abs/out.zarr");
        assert_eq!(c.layouts.default.shard_shape, Some(vec![20, 20].into()));
        assert_eq!(c.layouts.default.compressor, Compressor::Gzip { level: 5 });
        let ab = &c.layouts.per_array["a/b"];
        assert_eq!(ab.compressor, Compressor::None);
        assert_eq!(ab.chunk_shape, Some(vec![10, 10].into()));
        std::fs::write(
            &job,
            "shard_shape = { time = 48, lat = 720 }\n[[conversions]]\nsource = \"a\"\ndestination = \"b\"\nchunk_shape = \"lon=1440\"\n",
        )
        .expect("write");
        let all = load(&job, Partition::ALL, &storage_flags()).expect("valid job");
        assert_eq!(
            all[0].layouts.default.shard_shape,
            Some("time=48,lat=720".parse().expect("shape"))
        );
        assert_eq!(
            all[0].layouts.default.chunk_shape,
            Some(ShapeSpec::ByName([("lon".to_string(), 1440)].into()))
        );
        std::fs::write(
            &job,
            "shard_shape = \"time=48,720\"\n[[conversions]]\nsource = \"a\"\ndestination = \"b\"\n",
        )
        .expect("write");
        let e = load(&job, Partition::ALL, &storage_flags()).expect_err("mixed forms");
        assert!(
            format!("{e:#}").contains("mixes extents by position and by dimension name"),
            "{e:#}"
        );
        std::fs::write(
            &job,
            "consolidate = false\n[[conversions]]\nsource = \"a\"\ndestination = \"b\"\n",
        )
        .expect("write");
        let all = load(&job, Partition::ALL, &storage_flags()).expect("valid job");
        assert!(!all[0].consolidate);
        assert_eq!(all[0].ome, OmeMetadata::Upgrade);
        std::fs::write(
            &job,
            r#"
ome = "keep"
[[conversions]]
source = "a"
destination = "b"
[conversions.levels.2]
shard_shape = [1, 64, 64]
chunk_shape = [1, 32, 32]
"#,
        )
        .expect("write");
        let all = load(&job, Partition::ALL, &storage_flags()).expect("valid job");
        assert_eq!(all[0].ome, OmeMetadata::Keep);
        assert_eq!(
            all[0].layouts.per_level[&2],
            LevelShapes {
                shard_shape: vec![1, 64, 64],
                chunk_shape: Some(vec![1, 32, 32])
            }
        );
        std::fs::write(
            &job,
            "[[conversions]]\nsource = \"a\"\ndestination = \"b\"\nshard_shap = [1]\n",
        )
        .expect("write");
        assert!(load(&job, Partition::ALL, &storage_flags()).is_err());
    }

    #[test]
    fn source_and_storage_keys() {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = std::fs::canonicalize(dir.path()).expect("canonical");
        let job = base.join("job.toml");
        std::fs::write(
            &job,
            r#"
source_format = "kerchunk-json"
ref_root = "refs/../data"
allow_ref_prefix = ["local/", "http://127.0.0.1:8000/"]
ref_coalesce_gap = "off"
include = ["a/*"]
compressor = "source"
on_unsupported = "skip"
[storage]
retries = 3
part_size = "8MiB"
io_threads = 4
[[conversions]]
source = "refs.json"
destination = "out.zarr"
exclude = ["a/b"]
passthrough = false
"#,
        )
        .expect("write");
        let all = load(&job, Partition::ALL, &storage_flags()).expect("valid job");
        let c = &all[0];
        let options = &c.source_options;
        assert_eq!(options.format, Some(SourceFormat::KerchunkJson));
        let references = options.references.as_ref().expect("reference options");
        let data = base.join("data").to_string_lossy().into_owned();
        assert_eq!(references.ref_root.as_deref(), Some(data.as_str()));
        assert_eq!(
            references.allow_prefixes,
            [
                format!("{}/", base.join("local").to_string_lossy()),
                "http://127.0.0.1:8000/".to_string()
            ]
        );
        assert_eq!(references.coalesce_gap, None);
        assert_eq!(options.selection.include, ["a/*"]);
        assert_eq!(options.selection.exclude, ["a/b"]);
        assert_eq!(options.on_unsupported, zshard_convert::OnUnsupported::Skip);
        assert!(!c.layouts.default.passthrough);
        assert_eq!(c.layouts.default.compressor, Compressor::Source);
        assert_eq!(c.store_options.retries, Some(3));
        assert_eq!(c.store_options.part_size, 8 << 20);
        assert_eq!(c.io_threads, Some(4));

        std::fs::write(
            &job,
            "[[conversions]]\nsource = \"a\"\ndestination = \"b\"\n[conversions.arrays.\"x\"]\ninclude = [\"y\"]\n",
        )
        .expect("write");
        let e = load(&job, Partition::ALL, &storage_flags()).expect_err("per-array include");
        assert!(
            format!("{e:#}")
                .contains("array x: include applies to a whole conversion, not to one array"),
            "{e:#}"
        );
    }
}
