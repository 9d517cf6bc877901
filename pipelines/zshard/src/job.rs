//! `zshard run JOB.toml`: declarative jobs for scheduled ETL. A job file is the library's options
//! model ([`Options`], the keys are its settings): the top level applies to every conversion and
//! array unless a `[[conversions]]` table or an `[conversions.arrays."path"]` table sets its own;
//! `[storage]` holds the storage settings, `[conversions.levels.N]` a pyramid level's shapes. See
//! `pipelines/*.toml` for commented examples.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_json::{Map, Value};

use zshard_convert::options::{Options, StorageOptions, VerifyOptions};
use zshard_convert::{Setting, Spelling};
use zshard_core::setting::Group;
use zshard_store::Location;

/// A job file, read: the settings of every conversion, the `[storage]` table, and the conversions.
#[derive(Debug)]
struct JobFile {
    top: Options,
    storage: StorageOptions,
    conversions: Vec<Options>,
}

/// Where a key of a job file's table may not be, and why (`None`: it may).
fn misplaced(key: &str, table: Table) -> Option<String> {
    let setting = Setting::from_key(key)?;
    let group = setting.group();
    match (table, group) {
        (_, Group::Storage) if table != Table::Storage => {
            Some(format!("{key} is a key of the [storage] table"))
        }
        (_, _) if matches!(setting, Setting::Worker | Setting::Workers) => Some(format!(
            "{key} is no job key: give {} to zshard run",
            Spelling::Flag.of(setting)
        )),
        (Table::Top, Group::Location) => Some(format!("{key} belongs in a [[conversions]] table")),
        (Table::Array, group) if group != Group::Layout => Some(format!(
            "{key} applies to a whole conversion, not to one array"
        )),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    Top,
    Storage,
    Conversion,
    Array,
}

/// Refuses the keys of `table` that belong elsewhere, with where they go.
fn check_keys(map: &Map<String, Value>, table: Table) -> anyhow::Result<()> {
    for key in map.keys() {
        if let Some(why) = misplaced(key, table) {
            bail!("{why}");
        }
        if table == Table::Top && matches!(key.as_str(), "arrays" | "levels" | "level_shapes") {
            bail!("{key} belongs in a [[conversions]] table");
        }
    }
    Ok(())
}

/// The job file `text`: TOML, read into the options model through a value tree (so that pyramid
/// levels, `[conversions.levels.2]`, are numbers).
fn parse(text: &str) -> anyhow::Result<JobFile> {
    let toml: toml::Value = toml::from_str(text)?;
    let Value::Object(mut top) = serde_json::to_value(toml)? else {
        bail!("a job file is a table");
    };
    top.remove("description");
    let storage = match top.remove("storage") {
        None => StorageOptions::default(),
        Some(storage) => from_table(storage, "[storage]")?,
    };
    let conversions = match top.remove("conversions") {
        None => Vec::new(),
        Some(Value::Array(conversions)) => conversions,
        Some(_) => bail!("conversions is a list of tables ([[conversions]])"),
    };
    check_keys(&top, Table::Top)?;
    let top: Options = from_table(Value::Object(top), "the job's top level")?;
    let conversions = conversions
        .into_iter()
        .enumerate()
        .map(|(n, conversion)| {
            let Value::Object(mut conversion) = conversion else {
                bail!("conversions[{n}] is not a table");
            };
            check_keys(&conversion, Table::Conversion)?;
            if let Some(levels) = conversion.remove("levels") {
                conversion.insert("level_shapes".into(), levels);
            }
            if let Some(Value::Object(arrays)) = conversion.get("arrays") {
                for (path, table) in arrays {
                    if let Value::Object(table) = table {
                        check_keys(table, Table::Array).with_context(|| format!("array {path}"))?;
                    }
                }
            }
            let conversion: Options = from_table(
                Value::Object(conversion),
                &format!("[[conversions]] {}", n + 1),
            )?;
            Ok(conversion)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    Ok(JobFile {
        top,
        storage,
        conversions,
    })
}

/// A table of the job file as `T`; an error names the table and the key at fault. The options model
/// flattens its groups, which hides the key from serde's error, so on an error the key is found by
/// leaving keys out, one level at a time, until the table deserializes.
fn from_table<T: serde::de::DeserializeOwned>(value: Value, table: &str) -> anyhow::Result<T> {
    let error = match serde_json::from_value::<T>(value.clone()) {
        Ok(parsed) => return Ok(parsed),
        Err(error) => error,
    };
    let mut path: Vec<String> = Vec::new();
    while let Some(key) = key_at_fault::<T>(&value, &path) {
        path.push(key);
    }
    if path.is_empty() {
        bail!("{table}: {error}");
    }
    bail!("{table}, {}: {error}", path.join("."));
}

/// The key of the table at `path` in `root` without which `root` deserializes as `T`.
fn key_at_fault<T: serde::de::DeserializeOwned>(root: &Value, path: &[String]) -> Option<String> {
    let node = path.iter().try_fold(root, |node, key| node.get(key))?;
    let keys: Vec<String> = node.as_object()?.keys().cloned().collect();
    keys.into_iter().find(|key| {
        let mut without = root.clone();
        let parent = path
            .iter()
            .try_fold(&mut without, |node, key| node.get_mut(key));
        if let Some(Value::Object(map)) = parent {
            map.remove(key);
        }
        serde_json::from_value::<T>(without).is_ok()
    })
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

/// The location `key` of the conversion `entry`, which must be given and not empty: a missing one
/// would otherwise resolve to the job file's own folder.
fn required<'a>(entry: &str, key: &str, location: &'a str) -> anyhow::Result<&'a str> {
    if location.trim().is_empty() {
        bail!("{entry} has no {key}: every conversion names its source and destination");
    }
    Ok(location)
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

/// The conversions of the job file at `path`: each one's settings over the job's, the job's
/// `[storage]` over the storage `flags` (the job's keys win), paths resolved against the job's
/// folder, `{n}` in `report` the conversion's number, and `worker` the run's share.
pub fn load(
    path: &Path,
    flags: &StorageOptions,
    worker: Option<String>,
) -> anyhow::Result<Vec<Options>> {
    if path.is_dir() {
        bail!(
            "{} is a folder, not a job file: give SRC and DST, or one job file (JOB.toml)",
            path.display()
        );
    }
    // Absolute and normalized, so that messages name the file wherever zshard was started.
    let path = &std::fs::canonicalize(path)
        .with_context(|| format!("cannot read job file {}", path.display()))?;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read job file {}", path.display()))?;
    let job = parse(&text).with_context(|| format!("job file {}", path.display()))?;
    if job.conversions.is_empty() {
        bail!("job file {} has no [[conversions]]", path.display());
    }
    let base = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let storage = job.storage.over(flags);
    job.conversions
        .iter()
        .enumerate()
        .map(|(n, c)| {
            let entry = format!("[[conversions]] {}", n + 1);
            let mut options = c.over(&job.top);
            options.source = resolve(&base, required(&entry, "source", &c.source)?)?;
            options.destination = resolve(&base, required(&entry, "destination", &c.destination)?)?;
            options.storage = storage.clone();
            let input = &mut options.input;
            input.ref_root = input
                .ref_root
                .as_deref()
                .map(|r| resolve(&base, r).with_context(|| format!("{entry}, ref_root")))
                .transpose()?;
            input.allow_ref_prefix = input
                .allow_ref_prefix
                .as_ref()
                .map(|prefixes| {
                    prefixes
                        .iter()
                        .map(|p| resolve_prefix(&base, p))
                        .collect::<anyhow::Result<Vec<_>>>()
                })
                .transpose()
                .with_context(|| format!("{entry}, allow_ref_prefix"))?;
            options.run.report = options
                .run
                .report
                .as_ref()
                .map(|r| {
                    let report = r.to_string_lossy().replace("{n}", &n.to_string());
                    resolve(&base, &report).map(PathBuf::from)
                })
                .transpose()
                .with_context(|| format!("{entry}, report"))?;
            options.run.worker.clone_from(&worker);
            Ok(options)
        })
        .collect::<anyhow::Result<Vec<_>>>()
        .with_context(|| format!("job file {}", path.display()))
}

pub fn run(
    path: &Path,
    worker: Option<String>,
    storage: &StorageOptions,
    quiet: bool,
) -> anyhow::Result<()> {
    let all = conversions(path, worker, storage)?;
    crate::signals::cancel_on_signals(all.first().map(|c| c.cancel.clone()).unwrap_or_default())?;
    for c in &all {
        crate::print::convert(c, quiet)
            .with_context(|| format!("conversion {} -> {}", c.source, c.destination))?;
    }
    Ok(())
}

/// The conversions of the job file at `path` (as `zshard run` runs them, and Python's
/// `zshard.run`), every one checked before the first starts (one that cannot start writes its
/// failed report); they share one [`zshard_convert::Cancel`], so that a signal stops the one under
/// way and the ones after it.
pub fn conversions(
    path: &Path,
    worker: Option<String>,
    storage: &StorageOptions,
) -> anyhow::Result<Vec<zshard_convert::Conversion>> {
    let mut all = Vec::new();
    for options in load(path, storage, worker)? {
        let (conversion, configured) = zshard_convert::Conversion::configured(&options);
        let job = path.to_string_lossy();
        crate::in_job(
            Some(&job),
            &options.source,
            &options.destination,
            configured,
        )?;
        all.push(conversion);
    }
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
    Ok(all)
}

/// `zshard verify JOB.toml`: the verification of each conversion of the job, reading its source as
/// the conversion did and comparing as it wrote ([`Options::verification`]).
pub fn verifications(path: &str, storage: &StorageOptions) -> anyhow::Result<Vec<VerifyOptions>> {
    load(Path::new(path), storage, None)?
        .iter()
        .map(|o| {
            crate::in_job(Some(path), &o.source, &o.destination, o.storage.check())?;
            Ok(o.verification())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    use zshard_convert::options::Options;
    use zshard_convert::{
        Compressor, Conversion, LevelShapes, OmeMetadata, ShapeSpec, SourceFormat,
    };

    /// The conversions of the job file at `path`, built as `zshard run` builds them, with no
    /// storage flag given.
    fn load(path: &Path) -> anyhow::Result<Vec<Conversion>> {
        super::load(path, &StorageOptions::default(), None)?
            .iter()
            .map(|o: &Options| Ok(Conversion::from_options(o)?))
            .collect()
    }

    #[test]
    fn a_wrongly_typed_value_is_named_by_its_table_and_key() {
        let dir = tempfile::tempdir().expect("tempdir");
        let job = dir.path().join("job.toml");
        let cases = [
            ("threads = \"two\"\n", "the job's top level, threads: "),
            (
                "[[conversions]]\nsource = \"a\"\ndestination = \"b\"\n[[conversions]]\nsource = \"c\"\ndestination = \"d\"\nmemory_limit = [1]\n",
                "[[conversions]] 2, memory_limit: ",
            ),
            (
                "[[conversions]]\nsource = \"a\"\ndestination = \"b\"\n[conversions.arrays.\"x/y\"]\nchunk_shape = true\n",
                "[[conversions]] 1, arrays.x/y.chunk_shape: ",
            ),
        ];
        for (text, named) in cases {
            std::fs::write(&job, text).expect("write");
            let error = format!("{:#}", load(&job).expect_err(text));
            assert!(error.contains(named), "{text}: {error}");
        }
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
        let all = load(&job).expect("valid job");
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
        let all = load(&job).expect("valid job");
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
        let e = load(&job).expect_err("mixed forms");
        assert!(
            format!("{e:#}").contains("mixes extents by position and by dimension name"),
            "{e:#}"
        );
        std::fs::write(
            &job,
            "consolidate = false\n[[conversions]]\nsource = \"a\"\ndestination = \"b\"\n",
        )
        .expect("write");
        let all = load(&job).expect("valid job");
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
        let all = load(&job).expect("valid job");
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
        assert!(load(&job).is_err());
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
        let all = load(&job).expect("valid job");
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
        let e = load(&job).expect_err("per-array include");
        assert!(
            format!("{e:#}")
                .contains("array x: include applies to a whole conversion, not to one array"),
            "{e:#}"
        );
    }

    #[test]
    fn a_job_is_the_model_and_verifies_as_it_converted() {
        let dir = tempfile::tempdir().expect("tempdir");
        let job = dir.path().join("job.toml");
        std::fs::write(
            &job,
            r#"
ome = "keep"
threads = 3
source_ref = "v1"
[storage]
retries = 3
[[conversions]]
source = "a"
destination = "b"
include = ["x/*"]
"#,
        )
        .expect("write");
        let flags = StorageOptions {
            retries: Some(9),
            anonymous: Some(true),
            ..StorageOptions::default()
        };
        let all = super::load(&job, &flags, Some("1/2".into())).expect("valid job");
        let o = &all[0];
        assert_eq!(o.storage.retries, Some(3), "the job's [storage] wins");
        assert_eq!(o.storage.anonymous, Some(true), "flags fill in");
        assert_eq!(o.input.source_ref.as_deref(), Some("v1"));
        assert_eq!(o.run.worker.as_deref(), Some("1/2"));
        // The issue-32 bug: the verification of a job compares as the job wrote (`ome`).
        let v = super::verifications(&job.to_string_lossy(), &flags).expect("valid job");
        let v = zshard_convert::Verification::from_options(&v[0]);
        assert_eq!(v.ome, OmeMetadata::Keep);
        assert_eq!(v.threads, 3);
        assert_eq!(v.source_options.selection.include, ["x/*"]);
        assert_eq!(v.store_options.retries, Some(3));
        // A key in the wrong table says where it goes.
        for (text, wanted) in [
            ("retries = 1\n", "retries is a key of the [storage] table"),
            (
                "worker = \"0/2\"\n",
                "worker is no job key: give --worker to zshard run",
            ),
            (
                "source = \"x\"\n",
                "source belongs in a [[conversions]] table",
            ),
        ] {
            std::fs::write(
                &job,
                format!("{text}[[conversions]]\nsource = \"a\"\ndestination = \"b\"\n"),
            )
            .expect("write");
            let e = super::load(&job, &flags, None).expect_err(text);
            assert!(format!("{e:#}").contains(wanted), "{e:#}");
        }
    }
}
