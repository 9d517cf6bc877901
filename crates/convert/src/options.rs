//! The options model: every setting of `convert`, `plan`, `finalize`, `verify` and `ls`, typed, with
//! serde, as a front end hands it to the library.
//!
//! Every front end lowers into this model once: the command line maps its flags into it, a job file
//! deserializes into it (the model plus per-array tables), and the result builds the runtime types
//! with [`Conversion::from_options`] and [`Verification::from_options`]. A field is `None` when the
//! setting was not given, so levels merge ([`LayoutOptions::over`]) and "given or not" checks keep
//! working; the defaults are resolved in one place, the `resolve` functions here, from the runtime
//! types' own `Default`s ([`Layout::default`], [`StoreOptions::default`], ...). The keys are
//! [`Setting::key`]s: the job file's keys and the Python keywords.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use zshard_core::{IndexLocation, Setting};
use zshard_store::StoreOptions;
use zshard_zarr::ome::OmeMetadata;

use crate::error::{Error, Result};
use crate::plan::input::{OnUnsupported, ReadOptions, SourceFormat};
use crate::plan::selection::Selection;
use crate::plan::{Layout, Layouts, LevelShapes};
use crate::run::icechunk_output::{IcechunkOutput, SpecVersion};
use crate::threads::check_threads;
use crate::{Compressor, Conversion, ManifestVerification, ShapeSpec, Verification};
use zshard_state::Partition;

mod values;
pub use values::{
    lease_stale_after, parse_level_shapes, CheckpointInterval, CoalesceGap, Interval, Size,
    LEASE_VARIABLE,
};
use values::{ome, text};

/// The layout of arrays: given for every array of a conversion, or (in a job file) for one array.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LayoutOptions {
    /// Shard shape, by position or by dimension name (`None`: chosen).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard_shape: Option<ShapeSpec>,
    /// Inner chunk shape (`None`: the source's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub chunk_shape: Option<ShapeSpec>,
    /// The inner chunks' codecs: a spec (`zstd:3`) or a Zarr v3 codec list.
    #[serde(with = "text", skip_serializing_if = "Option::is_none")]
    pub compressor: Option<Compressor>,
    /// Where each shard's index goes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index_location: Option<IndexLocation>,
    /// Copy source chunks that already fit without decoding them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub passthrough: Option<bool>,
}

/// How the source is read.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SourceOptions {
    /// The source's kind (`None`: detected).
    #[serde(with = "text", skip_serializing_if = "Option::is_none")]
    pub source_format: Option<SourceFormat>,
    /// Kerchunk references: the root of relative and local targets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ref_root: Option<String>,
    /// Kerchunk references: prefixes of targets read besides the root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_ref_prefix: Option<Vec<String>>,
    /// Kerchunk references: the gap below which reads of one target are coalesced, or `off`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ref_coalesce_gap: Option<CoalesceGap>,
    /// Kerchunk Parquet references: a missing record file is an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strict_refs: Option<bool>,
    /// Only the arrays matching these globs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub include: Option<Vec<String>>,
    /// Leave out the arrays matching these globs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exclude: Option<Vec<String>>,
    /// The Icechunk branch, tag or snapshot read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_ref: Option<String>,
    /// What becomes of arrays zshard does not read.
    #[serde(with = "text", skip_serializing_if = "Option::is_none")]
    pub on_unsupported: Option<OnUnsupported>,
}

/// How storage is reached (the source's and the destination's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageOptions {
    /// An S3-compatible endpoint.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_endpoint: Option<String>,
    /// The S3 region.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_region: Option<String>,
    /// Path-style S3 requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub s3_path_style: Option<bool>,
    /// Unsigned requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub anonymous: Option<bool>,
    /// Retries of one request at most.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<usize>,
    /// How long a request is retried, in seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_timeout: Option<u64>,
    /// Storage requests in flight per batch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_requests: Option<usize>,
    /// The part size of multipart uploads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub part_size: Option<Size>,
    /// Threads fetching chunks and threads writing shards, each.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub io_threads: Option<usize>,
}

/// What kind of output is written.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutputOptions {
    /// `zarr` or `icechunk` (`None`: Zarr, unless the destination is a repository).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_format: Option<OutputFormat>,
    /// Icechunk output: the branch committed to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Icechunk output: the commit message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Icechunk output: the spec version of a repository made.
    #[serde(with = "text", skip_serializing_if = "Option::is_none")]
    pub icechunk_spec: Option<SpecVersion>,
}

/// The kind of output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    /// Plain sharded Zarr v3.
    Zarr,
    /// A commit to an Icechunk repository.
    Icechunk,
}

/// How the run goes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunOptions {
    /// Worker threads per CPU stage (`None`: one per core).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// Peak memory not to exceed (`None`: half of the machine's or cgroup's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<Size>,
    /// Replace what the destination holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overwrite: Option<bool>,
    /// Keep the checksum manifest after the conversion finishes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_manifest: Option<bool>,
    /// How often the shards written are recorded, each time after a checkpoint on local disk
    /// (`None`: [`DEFAULT_CHECKPOINT_INTERVAL`](crate::DEFAULT_CHECKPOINT_INTERVAL)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoint_interval: Option<CheckpointInterval>,
    /// Where the JSON report goes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<PathBuf>,
    /// This worker's share of the shards, `I/N`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The number of workers when the index comes from `JOB_COMPLETION_INDEX`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<u64>,
    /// What `plan`'s estimate assumes in place of its defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate_with: Option<crate::Stated>,
}

/// One conversion as a front end gives it: everything `convert`, `plan` and `finalize` take. The
/// groups are flattened, so the keys are flat, as job files and Python keywords give them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Options {
    /// The source: a path or URL.
    pub source: String,
    /// The destination: a path or URL.
    pub destination: String,
    /// The layout of every array without its own.
    #[serde(flatten)]
    pub layout: LayoutOptions,
    /// Layouts of single arrays, by path, over `layout`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub arrays: BTreeMap<String, LayoutOptions>,
    /// Shapes of pyramid levels, by level (a job file's table, or `LEVEL:SHARD[/CHUNK]` texts).
    #[serde(
        deserialize_with = "values::level_shapes::deserialize",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub level_shapes: BTreeMap<usize, LevelShapes>,
    /// Consolidate a hierarchy's metadata into its root.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consolidate: Option<bool>,
    /// What becomes of OME-Zarr metadata.
    #[serde(with = "ome", skip_serializing_if = "Option::is_none")]
    pub ome: Option<OmeMetadata>,
    /// Make a multiscale pyramid of this many levels (or `auto`) from the source array.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pyramid: Option<crate::PyramidLevels>,
    /// How a pyramid level is reduced from the one above.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub downsample: Option<crate::Reduction>,
    /// How the source is read.
    #[serde(flatten)]
    pub input: SourceOptions,
    /// How storage is reached.
    #[serde(flatten)]
    pub storage: StorageOptions,
    /// What kind of output is written.
    #[serde(flatten)]
    pub output: OutputOptions,
    /// How the run goes.
    #[serde(flatten)]
    pub run: RunOptions,
    /// The arrays of `arrays` whose shapes are those given for the whole conversion, filled in
    /// there by [`Options::with_recorded`] (over each array's recorded layout): not shapes of
    /// their own, so a lower level of a multiscale pyramid derives its shapes from its first
    /// level's instead, as `convert` does (see [`Layouts::shapes_given_to_all`]). Not an option:
    /// no front end gives it.
    #[serde(skip)]
    pub shapes_given_to_all: std::collections::BTreeSet<String>,
}

/// What `verify` takes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct VerifyOptions {
    /// The source that was converted.
    pub source: String,
    /// The output.
    pub destination: String,
    /// How the source is read.
    #[serde(flatten)]
    pub input: SourceOptions,
    /// How storage is reached.
    #[serde(flatten)]
    pub storage: StorageOptions,
    /// What the conversion did with OME-Zarr metadata.
    #[serde(with = "ome", skip_serializing_if = "Option::is_none")]
    pub ome: Option<OmeMetadata>,
    /// Worker threads per CPU stage.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub threads: Option<usize>,
    /// Peak memory not to exceed (default: as `convert`'s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<Size>,
    /// The fraction of shards checked, in (0, 1].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sample: Option<f64>,
    /// Check the output alone against the checksum manifest its conversion kept, not against the
    /// source (the output is `destination`, or `source` when no destination is given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub manifest: Option<bool>,
}

/// What `status` takes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StatusOptions {
    /// The destination of the conversion.
    pub destination: String,
    /// How storage is reached.
    #[serde(flatten)]
    pub storage: StorageOptions,
    /// Read the status again every this many seconds until the conversion is finished (see
    /// [`Status::is_finished`](crate::status::Status::is_finished)); `None`: once.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub watch: Option<Interval>,
}

impl StatusOptions {
    /// Status options for `destination`, nothing else given.
    pub fn new(destination: impl Into<String>) -> Self {
        StatusOptions {
            destination: destination.into(),
            ..StatusOptions::default()
        }
    }

    /// The status these options ask for (the destination, reached with the storage options).
    pub fn status(&self) -> Result<crate::status::Status> {
        self.storage.check()?;
        crate::status::status_of(&self.destination, &self.storage.store_options())
    }

    /// [`StatusOptions::status`] for a destination that a job names: one that does not exist yet
    /// is a conversion not started (a job's later conversions), not an error as a mistyped DST is.
    pub fn status_in_job(&self) -> Result<crate::status::Status> {
        self.storage.check()?;
        crate::status::status_in_job(&self.destination, &self.storage.store_options())
    }

    /// The status a reading of these options shows: with `watch`, a destination that does not
    /// exist yet is a conversion not started (the watch was begun before the run), as in a job.
    pub fn status_read(&self, in_job: bool) -> Result<crate::status::Status> {
        match in_job || self.watch.is_some() {
            true => self.status_in_job(),
            false => self.status(),
        }
    }

    /// Whether a watch that read `status` is over: the conversion is finished
    /// ([`crate::status::Status::is_finished`]) and has started; a watch begun before the run
    /// waits for it.
    pub fn watch_is_over(status: &crate::status::Status) -> bool {
        status.is_finished() && status.phase != crate::status::Phase::NotStarted
    }
}

fn or<T: Clone>(own: &Option<T>, base: &Option<T>) -> Option<T> {
    own.as_ref().or(base.as_ref()).cloned()
}

impl LayoutOptions {
    /// These options where given, else `base`'s.
    pub fn over(&self, base: &LayoutOptions) -> LayoutOptions {
        LayoutOptions {
            shard_shape: or(&self.shard_shape, &base.shard_shape),
            chunk_shape: or(&self.chunk_shape, &base.chunk_shape),
            compressor: or(&self.compressor, &base.compressor),
            index_location: or(&self.index_location, &base.index_location),
            passthrough: or(&self.passthrough, &base.passthrough),
        }
    }

    /// The layout, with [`Layout::default`]'s values where nothing is given: the one place the
    /// layout's defaults are read.
    pub fn resolve(&self) -> Layout {
        let default = Layout::default();
        Layout {
            shard_shape: self.shard_shape.clone(),
            chunk_shape: self.chunk_shape.clone(),
            compressor: self.compressor.clone().unwrap_or(default.compressor),
            index_location: self.index_location.unwrap_or(default.index_location),
            passthrough: self.passthrough.unwrap_or(default.passthrough),
        }
    }

    /// The settings given here.
    pub fn given(&self) -> Vec<Setting> {
        [
            (Setting::ShardShape, self.shard_shape.is_some()),
            (Setting::ChunkShape, self.chunk_shape.is_some()),
            (Setting::Compressor, self.compressor.is_some()),
            (Setting::IndexLocation, self.index_location.is_some()),
            (Setting::Passthrough, self.passthrough.is_some()),
        ]
        .into_iter()
        .filter_map(|(s, given)| given.then_some(s))
        .collect()
    }
}

impl SourceOptions {
    /// These options where given, else `base`'s.
    pub fn over(&self, base: &SourceOptions) -> SourceOptions {
        SourceOptions {
            source_format: or(&self.source_format, &base.source_format),
            ref_root: or(&self.ref_root, &base.ref_root),
            allow_ref_prefix: or(&self.allow_ref_prefix, &base.allow_ref_prefix),
            ref_coalesce_gap: or(&self.ref_coalesce_gap, &base.ref_coalesce_gap),
            strict_refs: or(&self.strict_refs, &base.strict_refs),
            include: or(&self.include, &base.include),
            exclude: or(&self.exclude, &base.exclude),
            source_ref: or(&self.source_ref, &base.source_ref),
            on_unsupported: or(&self.on_unsupported, &base.on_unsupported),
        }
    }

    /// The settings given here.
    pub fn given(&self) -> Vec<Setting> {
        [
            (Setting::SourceFormat, self.source_format.is_some()),
            (Setting::RefRoot, self.ref_root.is_some()),
            (Setting::AllowRefPrefix, self.allow_ref_prefix.is_some()),
            (Setting::RefCoalesceGap, self.ref_coalesce_gap.is_some()),
            (Setting::StrictRefs, self.strict_refs.is_some()),
            (Setting::Include, self.include.is_some()),
            (Setting::Exclude, self.exclude.is_some()),
            (Setting::SourceRef, self.source_ref.is_some()),
            (Setting::OnUnsupported, self.on_unsupported.is_some()),
        ]
        .into_iter()
        .filter_map(|(s, given)| given.then_some(s))
        .collect()
    }

    /// How the source is read; the reference options are kept (and refused for a Zarr source) only
    /// when one of them is given.
    pub fn resolve(&self) -> ReadOptions {
        let given = self.ref_root.is_some()
            || self.allow_ref_prefix.is_some()
            || self.ref_coalesce_gap.is_some()
            || self.strict_refs.is_some();
        let defaults = crate::ReferenceOptions::default();
        ReadOptions {
            format: self.source_format,
            references: given.then(|| crate::ReferenceOptions {
                ref_root: self.ref_root.clone(),
                allow_prefixes: self.allow_ref_prefix.clone().unwrap_or_default(),
                coalesce_gap: self
                    .ref_coalesce_gap
                    .map_or(defaults.coalesce_gap, |gap| gap.0),
                strict_refs: self.strict_refs.unwrap_or(defaults.strict_refs),
                ..defaults
            }),
            selection: Selection {
                include: self.include.clone().unwrap_or_default(),
                exclude: self.exclude.clone().unwrap_or_default(),
            },
            reference: self.source_ref.clone(),
            on_unsupported: self.on_unsupported.unwrap_or_default(),
            // The conversion sets its own.
            memory_limit: None,
        }
    }
}

impl StorageOptions {
    /// These options where given, else `base`'s.
    pub fn over(&self, base: &StorageOptions) -> StorageOptions {
        StorageOptions {
            s3_endpoint: or(&self.s3_endpoint, &base.s3_endpoint),
            s3_region: or(&self.s3_region, &base.s3_region),
            s3_path_style: or(&self.s3_path_style, &base.s3_path_style),
            anonymous: or(&self.anonymous, &base.anonymous),
            retries: or(&self.retries, &base.retries),
            retry_timeout: or(&self.retry_timeout, &base.retry_timeout),
            max_requests: or(&self.max_requests, &base.max_requests),
            part_size: or(&self.part_size, &base.part_size),
            io_threads: or(&self.io_threads, &base.io_threads),
        }
    }

    /// Refuses counts of 0 (`io_threads`, `max_requests`), as Python does, with the same words:
    /// before, `--max-requests 0` was silently taken for 1.
    pub fn check(&self) -> Result<()> {
        check_threads(Setting::IoThreads, self.io_threads)?;
        check_threads(Setting::MaxRequests, self.max_requests)
    }

    /// How stores are reached, with [`StoreOptions::default`]'s values where nothing is given.
    pub fn store_options(&self) -> StoreOptions {
        let default = StoreOptions::default();
        StoreOptions {
            s3_endpoint: self.s3_endpoint.clone(),
            s3_region: self.s3_region.clone(),
            s3_path_style: self.s3_path_style.unwrap_or(default.s3_path_style),
            anonymous: self.anonymous.unwrap_or(default.anonymous),
            retries: self.retries,
            retry_timeout: self
                .retry_timeout
                .map_or(default.retry_timeout, Duration::from_secs),
            max_requests: self.max_requests.unwrap_or(default.max_requests).max(1),
            part_size: self.part_size.map_or(default.part_size, |s| {
                usize::try_from(s.0).unwrap_or(usize::MAX)
            }),
            ..default
        }
    }
}

impl OutputOptions {
    /// These options where given, else `base`'s.
    pub fn over(&self, base: &OutputOptions) -> OutputOptions {
        OutputOptions {
            output_format: or(&self.output_format, &base.output_format),
            branch: or(&self.branch, &base.branch),
            message: or(&self.message, &base.message),
            icechunk_spec: or(&self.icechunk_spec, &base.icechunk_spec),
        }
    }

    /// The settings given here.
    pub fn given(&self) -> Vec<Setting> {
        [
            (Setting::OutputFormat, self.output_format.is_some()),
            (Setting::Branch, self.branch.is_some()),
            (Setting::Message, self.message.is_some()),
            (Setting::IcechunkSpec, self.icechunk_spec.is_some()),
        ]
        .into_iter()
        .filter_map(|(s, given)| given.then_some(s))
        .collect()
    }

    /// The Icechunk output asked for (`None` for plain Zarr, or when the destination decides).
    pub fn icechunk(&self) -> Result<Option<IcechunkOutput>> {
        let icechunk = self.output_format == Some(OutputFormat::Icechunk);
        let icechunk_settings =
            self.branch.is_some() || self.message.is_some() || self.icechunk_spec.is_some();
        if !icechunk && icechunk_settings && self.output_format.is_some() {
            return Err(Error::Options {
                reason: format!(
                    "{}, {} and {} apply to {}",
                    Setting::Branch,
                    Setting::Message,
                    Setting::IcechunkSpec,
                    Setting::OutputFormat.given("icechunk")
                ),
            });
        }
        Ok((icechunk || icechunk_settings).then(|| {
            let mut output = IcechunkOutput::default();
            if let Some(branch) = &self.branch {
                output.branch = branch.clone();
            }
            output.message = self.message.clone();
            output.spec = self.icechunk_spec;
            output
        }))
    }
}

impl RunOptions {
    /// These options where given, else `base`'s.
    pub fn over(&self, base: &RunOptions) -> RunOptions {
        RunOptions {
            threads: or(&self.threads, &base.threads),
            memory_limit: or(&self.memory_limit, &base.memory_limit),
            overwrite: or(&self.overwrite, &base.overwrite),
            keep_manifest: or(&self.keep_manifest, &base.keep_manifest),
            checkpoint_interval: or(&self.checkpoint_interval, &base.checkpoint_interval),
            report: or(&self.report, &base.report),
            worker: or(&self.worker, &base.worker),
            workers: or(&self.workers, &base.workers),
            estimate_with: or(&self.estimate_with, &base.estimate_with),
        }
    }
}

impl Options {
    /// These options where given, else `base`'s (a job file's conversion over the job's top level);
    /// the per-array layouts and level shapes are this conversion's own.
    pub fn over(&self, base: &Options) -> Options {
        Options {
            source: self.source.clone(),
            destination: self.destination.clone(),
            layout: self.layout.over(&base.layout),
            arrays: self.arrays.clone(),
            level_shapes: self.level_shapes.clone(),
            consolidate: or(&self.consolidate, &base.consolidate),
            ome: or(&self.ome, &base.ome),
            pyramid: or(&self.pyramid, &base.pyramid),
            downsample: or(&self.downsample, &base.downsample),
            input: self.input.over(&base.input),
            storage: self.storage.over(&base.storage),
            output: self.output.over(&base.output),
            run: self.run.over(&base.run),
            shapes_given_to_all: self.shapes_given_to_all.clone(),
        }
    }

    /// A conversion of `source` into `destination` with nothing else given.
    pub fn new(source: impl Into<String>, destination: impl Into<String>) -> Self {
        Options {
            source: source.into(),
            destination: destination.into(),
            ..Options::default()
        }
    }

    /// The verification of what this conversion writes: its source read as the conversion reads
    /// it and compared as it was written. Every field is named, so one added to [`VerifyOptions`]
    /// must be decided here.
    pub fn verification(&self) -> VerifyOptions {
        VerifyOptions {
            source: self.source.clone(),
            destination: self.destination.clone(),
            input: self.input.clone(),
            storage: self.storage.clone(),
            ome: self.ome,
            threads: self.run.threads,
            memory_limit: self.run.memory_limit,
            sample: None,
            manifest: None,
        }
    }

    /// The layouts: the default one, each array's over it, and the pyramid levels'.
    pub fn layouts(&self) -> Layouts {
        Layouts {
            default: self.layout.resolve(),
            per_array: self
                .arrays
                .iter()
                .map(|(path, own)| (path.clone(), own.over(&self.layout).resolve()))
                .collect(),
            per_level: self.level_shapes.clone(),
            shapes_given_to_all: self.shapes_given_to_all.clone(),
        }
    }
}

impl Conversion {
    /// The conversion these options describe, every default resolved here.
    pub fn from_options(options: &Options) -> Result<Conversion> {
        let (conversion, configured) = Conversion::configured(options);
        configured.map(|()| conversion)
    }

    /// The conversion these options describe, and beside it the error of a setting that does not
    /// hold: the settings that hold are set all the same, so that the report of the failure shows
    /// them. The one construction of a conversion of every front end (command line, job file,
    /// Python).
    pub fn configured(options: &Options) -> (Conversion, Result<()>) {
        let mut conversion = Conversion::new(&options.source, &options.destination);
        let configured = conversion.configure(options);
        (conversion, configured)
    }

    /// Sets what `options` give (all but the source and destination); the settings that hold are
    /// set even when a later one does not, so that the report of the failure shows them.
    pub fn configure(&mut self, options: &Options) -> Result<()> {
        // A conversion's own defaults are those of `Conversion::new`.
        let default = Conversion::new("", "");
        let run = &options.run;
        check_threads(Setting::Threads, run.threads)?;
        options.storage.check()?;
        self.threads = run.threads.unwrap_or(default.threads);
        self.memory_limit = run.memory_limit.map(|s| s.0);
        self.overwrite = run.overwrite.unwrap_or(default.overwrite);
        self.keep_manifest = run.keep_manifest.unwrap_or(default.keep_manifest);
        self.estimate_with = run.estimate_with.clone().unwrap_or_default();
        self.checkpoint_interval = run
            .checkpoint_interval
            .map_or(default.checkpoint_interval, CheckpointInterval::duration);
        self.report_path.clone_from(&run.report);
        self.ome = options.ome.unwrap_or_default();
        self.pyramid = match (options.pyramid, options.downsample) {
            (Some(levels), downsample) => Some(crate::PyramidOptions { levels, downsample }),
            (None, Some(_)) => {
                return Err(Error::Options {
                    reason: format!(
                        "{} says how pyramid levels are made: give {} too",
                        Setting::Downsample,
                        Setting::Pyramid
                    ),
                })
            }
            (None, None) => None,
        };
        self.store_options = options.storage.store_options();
        self.io_threads = options.storage.io_threads;
        self.consolidate = options.consolidate.unwrap_or(default.consolidate);
        self.lease_stale_after = lease_stale_after(|k| std::env::var(k).ok())?;
        self.source_options = options.input.resolve();
        self.layouts = options.layouts();
        self.icechunk = options.output.icechunk()?;
        self.partition = match &run.worker {
            Some(_) => Partition::resolve(run.worker.as_deref(), run.workers, |_| None)?,
            None => Partition::ALL,
        };
        Ok(())
    }
}

impl VerifyOptions {
    /// With `manifest`, the check of the output against its kept manifest (the output is the
    /// destination, or the source when only one location is given); `None` without it. The source's
    /// settings and `sample` mean nothing then and are refused.
    pub fn manifest_verification(&self) -> Result<Option<ManifestVerification>> {
        if self.manifest != Some(true) {
            return Ok(None);
        }
        let output = match (self.source.is_empty(), self.destination.is_empty()) {
            (_, true) => &self.source,
            (true, false) => &self.destination,
            (false, false) => {
                return Err(Error::Options {
                    reason: format!(
                        "{} checks the output alone, without its source: give only the output",
                        Setting::Manifest
                    ),
                })
            }
        };
        let refused: Vec<Setting> = self
            .input
            .given()
            .into_iter()
            .chain(self.ome.map(|_| Setting::Ome))
            .chain(self.sample.map(|_| Setting::Sample))
            .collect();
        if let Some(first) = refused.first() {
            return Err(Error::Options {
                reason: format!(
                    "{first} is about the source, which {} does not read",
                    Setting::Manifest
                ),
            });
        }
        self.storage.check()?;
        let mut verification = ManifestVerification::new(output.as_str());
        verification.store_options = self.storage.store_options();
        verification.io_threads = self.storage.io_threads;
        Ok(Some(verification))
    }
}

impl Verification {
    /// The verification these options describe, every default resolved here.
    pub fn from_options(options: &VerifyOptions) -> Verification {
        let mut verification = Verification::new(&options.source, &options.destination);
        verification.source_options = options.input.resolve();
        verification.store_options = options.storage.store_options();
        verification.io_threads = options.storage.io_threads;
        verification.ome = options.ome.unwrap_or_default();
        verification.threads = options.threads.unwrap_or(verification.threads);
        verification.memory_limit = options.memory_limit.map(|size| size.0);
        if let Some(sample) = options.sample {
            verification.sample = sample;
        }
        verification
    }
}

/// What a front end asks of the library: a command of `zshard`, a function of its Python module.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Action {
    /// Convert ([`Options`]).
    Convert,
    /// Plan a conversion from metadata alone ([`Options`] without the run's partition, overwrite
    /// and report).
    Plan,
    /// Finalize a partitioned conversion ([`Options`] without the run's settings).
    Finalize,
    /// Verify an output against its source ([`VerifyOptions`]).
    Verify,
    /// List the arrays of a source (its [`SourceOptions`] and [`StorageOptions`]).
    List,
    /// How far a conversion into a destination has come ([`StatusOptions`]).
    Status,
}

impl Action {
    /// Every action.
    pub const ALL: &'static [Action] = &[
        Action::Convert,
        Action::Plan,
        Action::Finalize,
        Action::Verify,
        Action::List,
        Action::Status,
    ];

    /// The action's name: the command, the Python function (`ls` lists).
    pub const fn name(self) -> &'static str {
        match self {
            Action::Convert => "convert",
            Action::Plan => "plan",
            Action::Finalize => "finalize",
            Action::Verify => "verify",
            Action::List => "ls",
            Action::Status => "status",
        }
    }

    /// The action named `name` ([`Action::name`]).
    pub fn from_name(name: &str) -> Option<Action> {
        Self::ALL.iter().copied().find(|a| a.name() == name)
    }

    /// Whether the action takes `setting` (its definition says, [`Setting::commands`]).
    pub fn takes(self, setting: Setting) -> bool {
        setting.taken_by(self.name())
    }

    /// The settings the action takes (SRC and DST too), in [`Setting::ALL`]'s order.
    pub fn settings(self) -> Vec<Setting> {
        Setting::ALL
            .iter()
            .copied()
            .filter(|s| self.takes(*s))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_given_resolves_to_the_runtime_defaults() {
        let options = Options::new("a.zarr", "b.zarr");
        let c = Conversion::from_options(&options).expect("defaults hold");
        let plain = Conversion::new("a.zarr", "b.zarr");
        assert_eq!(c.layouts, plain.layouts);
        assert_eq!(c.layouts.default.compressor, Compressor::DEFAULT);
        assert_eq!(c.layouts.default.index_location, IndexLocation::End);
        assert!(c.layouts.default.passthrough);
        assert_eq!(c.store_options, StoreOptions::default());
        assert_eq!(c.io_threads, None);
        assert_eq!(c.threads, crate::default_threads());
        assert_eq!(c.memory_limit, None);
        assert_eq!(c.partition, Partition::ALL);
        assert!(!c.overwrite && c.consolidate);
        assert_eq!(c.ome, OmeMetadata::Upgrade);
        assert_eq!(c.icechunk, None);
        assert!(c.source_options.references.is_none());
        assert_eq!(c.source_options.on_unsupported, OnUnsupported::Refuse);
        let v = Verification::from_options(&options.verification());
        assert_eq!(
            (v.sample, v.threads, v.ome),
            (1.0, crate::default_threads(), OmeMetadata::Upgrade)
        );
    }

    /// A setting that does not hold is returned beside the conversion, which has the others.
    #[test]
    fn a_configured_conversion_keeps_the_settings_that_hold() {
        let options: Options = serde_json::from_value(serde_json::json!({
            "source": "s", "destination": "d", "worker": "5/2", "report": "r.json", "threads": 3,
        }))
        .expect("valid");
        let (conversion, configured) = Conversion::configured(&options);
        let e = configured.expect_err("5/2 is no share");
        assert!(e.to_string().contains("worker"), "{e}");
        assert_eq!(conversion.report_path, Some(PathBuf::from("r.json")));
        assert_eq!((conversion.threads, conversion.source.as_str()), (3, "s"));
        assert!(Conversion::from_options(&options).is_err());
    }

    #[test]
    fn a_job_shaped_document_round_trips() {
        let document = serde_json::json!({
            "source": "in.zarr",
            "destination": "out.zarr",
            "shard_shape": {"time": 48, "lat": 720},
            "chunk_shape": [10, 10],
            "compressor": "gzip:5",
            "index_location": "start",
            "passthrough": false,
            "arrays": {"a/b": {"compressor": "none"}},
            "level_shapes": {"2": {"shard_shape": [1, 64, 64], "chunk_shape": [1, 32, 32]}},
            "consolidate": false,
            "ome": "keep",
            "source_format": "kerchunk-json",
            "ref_coalesce_gap": "off",
            "include": ["a/*"],
            "on_unsupported": "skip",
            "part_size": "8MiB",
            "retry_timeout": 30,
            "output_format": "icechunk",
            "icechunk_spec": 1,
            "memory_limit": 1024,
            "worker": "1/4",
        });
        let options: Options = serde_json::from_value(document).expect("valid");
        assert_eq!(options.run.memory_limit, Some(Size(1024)));
        assert_eq!(options.storage.part_size, Some(Size(8 << 20)));
        assert_eq!(options.input.ref_coalesce_gap, Some(CoalesceGap(None)));
        assert_eq!(options.output.icechunk_spec, Some(SpecVersion::V1));
        let again: Options =
            serde_json::from_value(serde_json::to_value(&options).expect("serializes"))
                .expect("reads back");
        assert_eq!(again, options);
        let c = Conversion::from_options(&options).expect("holds");
        assert_eq!(c.layouts.default.compressor, Compressor::Gzip { level: 5 });
        let ab = &c.layouts.per_array["a/b"];
        assert_eq!(ab.compressor, Compressor::None);
        assert_eq!(ab.chunk_shape, Some(vec![10, 10].into()), "inherited");
        assert_eq!(c.layouts.per_level[&2].shard_shape, [1, 64, 64]);
        assert_eq!(c.ome, OmeMetadata::Keep);
        assert_eq!(c.store_options.part_size, 8 << 20);
        assert_eq!(c.store_options.retry_timeout, Duration::from_secs(30));
        assert_eq!(c.partition, Partition::new(1, 4).expect("1/4"));
        assert_eq!(
            c.icechunk.as_ref().map(|i| i.spec),
            Some(Some(SpecVersion::V1))
        );
        // A key the model does not have is refused, naming it.
        let typo = serde_json::json!({"source": "a", "destination": "b", "shard_shap": [1]});
        let e = serde_json::from_value::<Options>(typo).expect_err("unknown key");
        assert!(e.to_string().contains("shard_shap"), "{e}");
    }

    #[test]
    fn a_verification_reads_the_source_as_its_conversion_did() {
        let document = serde_json::json!({
            "source": "in", "destination": "out", "ome": "keep", "threads": 3,
            "source_format": "zarr", "include": ["x"], "anonymous": true, "io_threads": 5,
        });
        let options: Options = serde_json::from_value(document).expect("valid");
        let v = Verification::from_options(&options.verification());
        let c = Conversion::from_options(&options).expect("holds");
        let of = Verification::of(&c);
        assert_eq!(v.ome, OmeMetadata::Keep);
        // OME-Zarr 0.6 is written (and compared) as `ome = "0.6"` asks, and said back the same way.
        let v06: Options = serde_json::from_value(
            serde_json::json!({"source": "in", "destination": "out", "ome": "0.6"}),
        )
        .expect("valid");
        assert_eq!(v06.ome, Some(OmeMetadata::V06));
        assert_eq!(
            serde_json::to_value(&v06).expect("serializes")["ome"],
            serde_json::json!("0.6")
        );
        assert_eq!(
            Verification::from_options(&v06.verification()).ome,
            OmeMetadata::V06
        );
        assert_eq!(
            (v.ome, v.threads, v.io_threads),
            (of.ome, of.threads, of.io_threads)
        );
        assert_eq!(v.store_options, of.store_options);
        assert_eq!(v.source_options.selection.include, ["x"]);
        assert_eq!(v.source_options.format, Some(SourceFormat::Zarr));
    }

    /// The settings of each action are the keys its model reads: a key it does not take is an
    /// unknown field of the model's serde, one it takes is not.
    #[test]
    fn the_settings_of_an_action_are_the_keys_of_its_model() {
        fn unknown<T: serde::de::DeserializeOwned>(key: &str) -> bool {
            let document = serde_json::json!({ key: null });
            serde_json::from_value::<T>(document)
                .err()
                .is_some_and(|e| e.to_string().contains("unknown field"))
        }
        for setting in Setting::ALL.iter().copied() {
            let key = setting.key();
            // The conversion's model is plan's too: a job file planned and then run reads the
            // same keys (plan's estimate figures mean nothing to a run, which reads past them).
            assert_eq!(
                Action::Convert.takes(setting) || Action::Plan.takes(setting),
                !unknown::<Options>(key),
                "{key}"
            );
            assert_eq!(
                Action::Verify.takes(setting),
                !unknown::<VerifyOptions>(key),
                "{key}"
            );
            assert_eq!(
                Action::Status.takes(setting),
                !unknown::<StatusOptions>(key),
                "{key}"
            );
            for action in [Action::Finalize, Action::List] {
                assert!(
                    !action.takes(setting) || Action::Convert.takes(setting),
                    "{action:?} {key}"
                );
            }
        }
        assert!(Action::List.takes(Setting::Source) && !Action::List.takes(Setting::Destination));
        assert!(Action::Plan.takes(Setting::MemoryLimit) && !Action::Plan.takes(Setting::Worker));
        assert!(
            Action::Plan.takes(Setting::EstimateWith)
                && !Action::Convert.takes(Setting::EstimateWith)
        );
        assert!(!Action::Finalize.takes(Setting::Threads));
        assert_eq!(Action::from_name("ls"), Some(Action::List));
    }

    #[test]
    fn a_watch_interval_is_positive_seconds() {
        let read = |value: serde_json::Value| {
            serde_json::from_value::<StatusOptions>(
                serde_json::json!({"destination": "d", "watch": value}),
            )
            .map(|o| o.watch.map(Interval::duration))
        };
        assert_eq!(
            read(serde_json::json!(2)).expect("2"),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            read(serde_json::json!("0.5s")).expect("0.5s"),
            Some(Duration::from_millis(500))
        );
        for bad in [
            serde_json::json!(0),
            serde_json::json!(-1),
            serde_json::json!("x"),
            serde_json::json!(true),
        ] {
            let e = read(bad.clone()).expect_err("refused");
            assert!(e.to_string().contains("watch"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_checkpoint_interval_is_a_duration_the_conversion_gets() {
        let read = |value: serde_json::Value| {
            serde_json::from_value::<Options>(serde_json::json!({
                "source": "s", "destination": "d", "checkpoint_interval": value,
            }))
        };
        for (given, expected) in [
            (serde_json::json!("500ms"), Duration::from_millis(500)),
            (serde_json::json!("2m"), Duration::from_secs(120)),
            (serde_json::json!(" 3 "), Duration::from_secs(3)),
            (serde_json::json!(1.5), Duration::from_millis(1500)),
            (serde_json::json!(3600), Duration::from_secs(3600)),
        ] {
            let options = read(given.clone()).expect("valid");
            let c = Conversion::from_options(&options).expect("holds");
            assert_eq!(c.checkpoint_interval, expected, "{given}");
            // It reads back from what it writes (a job file written from the model).
            let again: Options =
                serde_json::from_value(serde_json::to_value(&options).expect("serializes"))
                    .expect("reads back");
            assert_eq!(again, options, "{given}");
        }
        let default = Conversion::from_options(&Options::new("s", "d")).expect("holds");
        assert_eq!(
            default.checkpoint_interval,
            crate::DEFAULT_CHECKPOINT_INTERVAL
        );
        for bad in [
            serde_json::json!(0),
            serde_json::json!("0s"),
            serde_json::json!(-1),
            serde_json::json!("5ms"),
            serde_json::json!("2h"),
            serde_json::json!(1e300),
            serde_json::json!("soon"),
            serde_json::json!(true),
        ] {
            let e = read(bad.clone()).expect_err("refused");
            assert!(e.to_string().contains("checkpoint_interval"), "{bad}: {e}");
        }
        let e = zshard_core::setting::spelled(zshard_core::Spelling::Flag, || {
            "0".parse::<CheckpointInterval>().expect_err("zero")
        });
        assert!(
            e.to_string()
                .contains("--checkpoint-interval is a duration from 10ms to 1h"),
            "{e}"
        );
    }

    #[test]
    fn a_manifest_verification_checks_the_output_alone() {
        let options = |document: serde_json::Value| -> VerifyOptions {
            serde_json::from_value(document).expect("valid")
        };
        let alone =
            options(serde_json::json!({"source": "out.zarr", "manifest": true, "io_threads": 3}));
        let v = alone
            .manifest_verification()
            .expect("holds")
            .expect("manifest");
        assert_eq!(
            (v.destination.as_str(), v.io_threads),
            ("out.zarr", Some(3))
        );
        let as_dst = options(serde_json::json!({"destination": "out.zarr", "manifest": true}));
        let v = as_dst
            .manifest_verification()
            .expect("holds")
            .expect("manifest");
        assert_eq!(v.destination, "out.zarr");
        assert!(
            options(serde_json::json!({"source": "a", "destination": "b"}))
                .manifest_verification()
                .expect("holds")
                .is_none()
        );
        for refused in [
            serde_json::json!({"source": "a", "destination": "b", "manifest": true}),
            serde_json::json!({"source": "a", "manifest": true, "sample": 0.5}),
            serde_json::json!({"source": "a", "manifest": true, "include": ["x"]}),
        ] {
            let e = options(refused.clone())
                .manifest_verification()
                .expect_err("refused");
            assert!(e.to_string().contains("manifest"), "{refused}: {e}");
        }
    }

    #[test]
    fn level_shapes_read_as_text() {
        assert_eq!(
            parse_level_shapes("2:1,256,256/1,64,64").expect("valid"),
            (
                2,
                LevelShapes {
                    shard_shape: vec![1, 256, 256],
                    chunk_shape: Some(vec![1, 64, 64])
                }
            )
        );
        assert_eq!(
            parse_level_shapes(" 1 : 4,4").expect("valid").1.chunk_shape,
            None
        );
        for bad in ["x", "a:1,2", "1:y=2", "1:0,2", "1:2/"] {
            let e = zshard_core::setting::spelled(zshard_core::Spelling::Keyword, || {
                parse_level_shapes(bad).expect_err(bad).to_string()
            });
            assert!(e.starts_with("level_shapes= "), "{e}");
        }
    }

    #[test]
    fn an_error_of_the_model_names_the_setting_as_the_front_end_spells_it() {
        let output = OutputOptions {
            output_format: Some(OutputFormat::Zarr),
            branch: Some("dev".into()),
            ..OutputOptions::default()
        };
        let message = |spelling| {
            zshard_core::setting::spelled(spelling, || {
                output
                    .icechunk()
                    .expect_err("zarr with a branch")
                    .to_string()
            })
        };
        assert!(message(zshard_core::Spelling::Flag)
            .contains("--branch, --message and --icechunk-spec apply to --output-format icechunk"));
        assert!(message(zshard_core::Spelling::Keyword)
            .contains("branch=, message= and icechunk_spec= apply to output_format=icechunk"));
    }
}
