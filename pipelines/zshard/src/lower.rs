//! The one place the command line's flags become the library's options model, ripgrep's
//! `LowArgs -> HiArgs`: clap's structs (`args.rs`) are the low level, [`Options`] and
//! [`VerifyOptions`] the high level that builds the conversion or verification. No default is
//! written here: a flag not given stays `None`, and the library resolves it.

use zshard_convert::options::{Options, RunOptions, SourceOptions, StorageOptions, VerifyOptions};
use zshard_convert::{Error, Partition, Result, Setting};

use serde_json::Map;

use crate::args::{LayoutArgs, SettingFlags, ShareFlags, SourceFlags, StorageFlags};

/// The first error met while lowering; the settings that parse are lowered all the same, so that
/// the report of the failure shows them.
#[derive(Debug, Default)]
pub(crate) struct First(Option<Error>);

impl First {
    pub(crate) fn take<T>(&mut self, result: Result<T>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(e) => {
                self.0.get_or_insert(e);
                None
            }
        }
    }

    /// `Ok` when everything lowered.
    pub(crate) fn result(self) -> Result<()> {
        self.0.map_or(Ok(()), Err)
    }
}

/// The values of the flags `flags`, read by the options model each alone, so that one the library
/// refuses as it lowers (the source's kind, `--on-unsupported`, a shape: exit 1) is the first error
/// and the others still lower; then all of them together, as `T`.
fn read_each<T: serde::de::DeserializeOwned + Default>(
    flags: &Map<String, serde_json::Value>,
    first: &mut First,
) -> T {
    let mut read = Map::new();
    // In the settings' order, so that the first error is the first of them given.
    for key in Setting::ALL.iter().map(|s| s.key()) {
        let Some(value) = flags.get(key) else {
            continue;
        };
        let one = Map::from_iter([(key.to_string(), value.clone())]);
        if first
            .take(SettingFlags::<()>::of(one).model::<T>())
            .is_some()
        {
            read.insert(key.to_string(), value.clone());
        }
    }
    first
        .take(SettingFlags::<()>::of(read).model())
        .unwrap_or_default()
}

/// The source flags, made from the settings (each read alone: see [`read_each`]).
pub(crate) fn source(flags: &SourceFlags, first: &mut First) -> SourceOptions {
    read_each(&flags.0, first)
}

/// The storage flags: made from the settings, read by the model (see [`StorageFlags`]).
pub(crate) fn storage(flags: &StorageFlags) -> Result<StorageOptions> {
    flags.model()
}

/// The conversion of SRC into `dst` that the layout, conversion, source, storage and output flags
/// describe.
pub(crate) fn conversion(args: &LayoutArgs, dst: &str, first: &mut First) -> Options {
    let mut flags = args.layout.0.clone();
    flags.extend(args.whole.0.clone());
    flags.extend(args.output.0.clone());
    Options {
        source: args.src.clone(),
        destination: dst.to_string(),
        input: source(&args.source, first),
        storage: first.take(storage(&args.storage)).unwrap_or_default(),
        run: RunOptions::default(),
        ..read_each(&flags, first)
    }
}

/// The flags given beside a job file that the job file gives instead (only the storage flags apply).
pub(crate) fn given_beside_job(args: &LayoutArgs) -> Vec<Setting> {
    let mut given = args.layout.given();
    given.extend(args.whole.given());
    given.extend(args.source.given());
    given.extend(args.output.given());
    given.sort();
    given
}

/// The share of the shards `convert` or `run` converts: `--worker`, else the SLURM job array or
/// Kubernetes Indexed Job of the environment (`None`: all of them).
pub(crate) fn worker(flags: &ShareFlags) -> Result<Option<String>> {
    let given = flags.worker();
    let partition =
        Partition::resolve(given.as_deref(), flags.workers(), |k| std::env::var(k).ok())?;
    Ok(match given {
        Some(given) => Some(given),
        None => (!partition.is_all()).then(|| partition.to_string()),
    })
}

/// The verification of SRC against DST that the verify flags describe.
pub(crate) fn verification(
    src: &str,
    dst: &str,
    source_args: &SourceFlags,
    storage_args: &StorageFlags,
    first: &mut First,
) -> VerifyOptions {
    let storage = first.take(storage(storage_args)).unwrap_or_default();
    first.take(storage.check());
    VerifyOptions {
        source: src.to_string(),
        destination: dst.to_string(),
        input: source(source_args, first),
        storage,
        ..VerifyOptions::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use zshard_convert::{Conversion, OnUnsupported};

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        layout: LayoutArgs,
    }

    /// The options the flags `args` lower to, messages spelled as the command line spells them.
    fn lowered(args: &[&str]) -> (Options, Result<()>) {
        let flags = Flags::parse_from(["zshard"].iter().chain(args));
        zshard_convert::spelled(zshard_convert::Spelling::Flag, || {
            let mut first = First::default();
            let dst = flags.layout.dst.clone().unwrap_or_default();
            let options = conversion(&flags.layout, &dst, &mut first);
            (options, first.result())
        })
    }

    #[test]
    fn flags_not_given_stay_unset_and_the_library_resolves_them() {
        let (options, result) = lowered(&["a.zarr", "b.zarr"]);
        result.expect("lowers");
        assert_eq!(options, Options::new("a.zarr", "b.zarr"));
        let (options, _) = lowered(&[
            "a.zarr",
            "b.zarr",
            "--no-passthrough",
            "--compressor",
            "gzip:5",
            "--on-unsupported",
            "skip",
            "--part-size",
            "8MiB",
            "--ome",
            "keep",
        ]);
        let c = Conversion::from_options(&options).expect("holds");
        assert!(!c.layouts.default.passthrough);
        assert_eq!(
            c.layouts.default.compressor,
            zshard_convert::Compressor::Gzip { level: 5 }
        );
        assert_eq!(c.source_options.on_unsupported, OnUnsupported::Skip);
        assert_eq!(c.store_options.part_size, 8 << 20);
        assert_eq!(c.ome, zshard_convert::OmeMetadata::Keep);
    }

    #[test]
    fn a_flag_the_library_refuses_is_an_error_and_the_others_still_lower() {
        let (options, result) = lowered(&[
            "a.zarr",
            "b.zarr",
            "--on-unsupported",
            "maybe",
            "--shard-shape",
            "4,4",
        ]);
        let e = result.expect_err("maybe").to_string();
        assert!(
            e.contains(r#"--on-unsupported "maybe" is not supported"#),
            "{e}"
        );
        assert_eq!(options.layout.shard_shape, Some(vec![4, 4].into()));
    }

    /// `--level-shapes` is repeated, one level each, read by the model as a job file's table is.
    #[test]
    fn level_shapes_flags_become_the_table_by_level() {
        let (options, result) = lowered(&[
            "a.zarr",
            "b.zarr",
            "--level-shapes",
            "2:1,256,256/1,64,64",
            "--level-shapes",
            "0:512,512",
        ]);
        result.expect("lowers");
        let level = |shard: &[u64], chunk: Option<&[u64]>| zshard_convert::LevelShapes {
            shard_shape: shard.to_vec(),
            chunk_shape: chunk.map(<[u64]>::to_vec),
        };
        assert_eq!(
            options.level_shapes.into_iter().collect::<Vec<_>>(),
            [
                (0, level(&[512, 512], None)),
                (2, level(&[1, 256, 256], Some(&[1, 64, 64])))
            ]
        );
        for bad in ["512,512", "x:512", "1:x"] {
            let e = Flags::try_parse_from(["zshard", "a", "b", "--level-shapes", bad])
                .err()
                .expect(bad)
                .to_string();
            assert!(e.contains("--level-shapes"), "{bad}: {e}");
        }
    }

    /// A list's flag is repeated; every value is kept, in order, and a switch not given is unset.
    #[test]
    fn repeated_list_flags_keep_every_value() {
        let (options, result) = lowered(&[
            "a.zarr",
            "b.zarr",
            "--include",
            "x/*",
            "--exclude",
            "x/y",
            "--include",
            "z",
        ]);
        result.expect("lowers");
        assert_eq!(options.input.include, Some(vec!["x/*".into(), "z".into()]));
        assert_eq!(options.input.exclude, Some(vec!["x/y".into()]));
        assert_eq!(options.input.allow_ref_prefix, None);
        assert_eq!(options.input.strict_refs, None);
    }

    #[test]
    fn flags_beside_a_job_file_are_named() {
        let flags = Flags::parse_from(["zshard", "job.toml", "--ome", "keep", "--include", "x"]);
        assert_eq!(
            given_beside_job(&flags.layout),
            [Setting::Ome, Setting::Include]
        );
        let flags = Flags::parse_from(["zshard", "job.toml", "--retries", "3"]);
        assert!(given_beside_job(&flags.layout).is_empty());
    }

    /// Every job key against the SRC DST form: a job file giving one setting lowers to the same
    /// options as the command line giving its flag.
    #[test]
    fn every_job_key_is_the_flag_of_the_src_dst_form() {
        use std::collections::BTreeSet;
        let cases: &[(Setting, &str, &[&str])] = &[
            (
                Setting::ShardShape,
                "shard_shape = [4, 4]",
                &["--shard-shape", "4,4"],
            ),
            (
                Setting::ChunkShape,
                "chunk_shape = { lat = 2 }",
                &["--chunk-shape", "lat=2"],
            ),
            (
                Setting::Compressor,
                "compressor = \"gzip:5\"",
                &["--compressor", "gzip:5"],
            ),
            (
                Setting::IndexLocation,
                "index_location = \"start\"",
                &["--index-location", "start"],
            ),
            (
                Setting::Passthrough,
                "passthrough = false",
                &["--no-passthrough"],
            ),
            (
                Setting::LevelShapes,
                "[conversions.levels.1]\nshard_shape = [1, 64, 64]\nchunk_shape = [1, 32, 32]",
                &["--level-shapes", "1:1,64,64/1,32,32"],
            ),
            (
                Setting::Consolidate,
                "consolidate = false",
                &["--no-consolidate"],
            ),
            (Setting::Ome, "ome = \"keep\"", &["--ome", "keep"]),
            (
                Setting::Pyramid,
                "pyramid = \"auto\"",
                &["--pyramid", "auto"],
            ),
            (
                Setting::Downsample,
                "pyramid = 3\ndownsample = \"max\"",
                &["--pyramid", "3", "--downsample", "max"],
            ),
            (
                Setting::SourceFormat,
                "source_format = \"kerchunk-json\"",
                &["--source-format", "kerchunk-json"],
            ),
            (
                Setting::RefRoot,
                "ref_root = \"/refs\"",
                &["--ref-root", "/refs"],
            ),
            (
                Setting::AllowRefPrefix,
                "allow_ref_prefix = [\"http://h/\"]",
                &["--allow-ref-prefix", "http://h/"],
            ),
            (
                Setting::RefCoalesceGap,
                "ref_coalesce_gap = \"off\"",
                &["--ref-coalesce-gap", "off"],
            ),
            (
                Setting::StrictRefs,
                "strict_refs = true",
                &["--strict-refs"],
            ),
            (
                Setting::Include,
                "include = [\"a/*\"]",
                &["--include", "a/*"],
            ),
            (
                Setting::Exclude,
                "exclude = [\"a/b\"]",
                &["--exclude", "a/b"],
            ),
            (
                Setting::SourceRef,
                "source_ref = \"v1\"",
                &["--source-ref", "v1"],
            ),
            (
                Setting::OnUnsupported,
                "on_unsupported = \"skip\"",
                &["--on-unsupported", "skip"],
            ),
            (
                Setting::S3Endpoint,
                "[storage]\ns3_endpoint = \"http://x\"",
                &["--s3-endpoint", "http://x"],
            ),
            (
                Setting::S3Region,
                "[storage]\ns3_region = \"eu\"",
                &["--s3-region", "eu"],
            ),
            (
                Setting::S3PathStyle,
                "[storage]\ns3_path_style = true",
                &["--s3-path-style"],
            ),
            (
                Setting::Anonymous,
                "[storage]\nanonymous = true",
                &["--anonymous"],
            ),
            (
                Setting::Retries,
                "[storage]\nretries = 3",
                &["--retries", "3"],
            ),
            (
                Setting::RetryTimeout,
                "[storage]\nretry_timeout = 30",
                &["--retry-timeout", "30"],
            ),
            (
                Setting::MaxRequests,
                "[storage]\nmax_requests = 4",
                &["--max-requests", "4"],
            ),
            (
                Setting::PartSize,
                "[storage]\npart_size = \"8MiB\"",
                &["--part-size", "8MiB"],
            ),
            (
                Setting::IoThreads,
                "[storage]\nio_threads = 4",
                &["--io-threads", "4"],
            ),
            (
                Setting::OutputFormat,
                "output_format = \"icechunk\"",
                &["--output-format", "icechunk"],
            ),
            (Setting::Branch, "branch = \"dev\"", &["--branch", "dev"]),
            (Setting::Message, "message = \"m\"", &["--message", "m"]),
            (
                Setting::IcechunkSpec,
                "icechunk_spec = 1",
                &["--icechunk-spec", "1"],
            ),
        ];
        let dir = tempfile::tempdir().expect("tempdir");
        let job = dir.path().join("job.toml");
        for (setting, key, flags) in cases {
            std::fs::write(
                &job,
                format!("[[conversions]]\nsource = \"/a\"\ndestination = \"/b\"\n{key}\n"),
            )
            .expect("write");
            let from_job = crate::job::load(&job, &StorageOptions::default(), None)
                .unwrap_or_else(|e| panic!("{setting:?}: {e:#}"));
            let (from_flags, result) = lowered(&[&["/a", "/b"][..], flags].concat());
            result.unwrap_or_else(|e| panic!("{setting:?}: {e}"));
            assert_eq!(from_job, std::slice::from_ref(&from_flags), "{setting:?}");
            assert_ne!(from_flags, Options::new("/a", "/b"), "{setting:?} is given");
        }
        // The settings that are no key of a conversion here: SRC and DST, the run's settings of
        // `convert` (covered by the job's own tests), plan's estimate (covered by operations.rs)
        // and verify's.
        let elsewhere = [
            Setting::Source,
            Setting::Destination,
            Setting::Threads,
            Setting::MemoryLimit,
            Setting::Overwrite,
            Setting::KeepManifest,
            Setting::EstimateWith,
            Setting::CheckpointInterval,
            Setting::Report,
            Setting::Worker,
            Setting::Workers,
            Setting::Sample,
            Setting::Manifest,
            Setting::Watch,
        ];
        let covered: BTreeSet<Setting> = cases.iter().map(|c| c.0).chain(elsewhere).collect();
        let all: BTreeSet<Setting> = Setting::ALL.iter().copied().collect();
        assert_eq!(covered, all, "a setting without a case");
    }
}
