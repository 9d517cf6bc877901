//! The settings of zshard by typed name, and how each front end spells them.
//!
//! Library messages name a setting with a [`Setting`] (never with a command-line flag); its
//! `Display` spells it the way the front end in use does: `--memory-limit` on the command line,
//! `memory_limit=` in Python, `memory_limit` in a job file or for a Rust caller (the default). A
//! front end runs what it asks of the library in [`spelled`], which picks its [`Spelling`] for the
//! current thread; the library's threads take their spawner's ([`inheriting`]). There is no
//! process-wide spelling: the command line run from Python (`cli_main`) and the Python functions
//! beside it each keep their own.

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

/// Defines [`Setting`] from one row per setting: everything a front end derives from it.
///
/// A row gives the setting's `key` (the model's field, the job-file key and the Python keyword;
/// the flag is `--key` with `-` for `_`), its `group`, the `commands` that take it (the names of
/// `zshard` commands and Python functions), its command-line `value` name (empty for a switch), its
/// Python annotation (`python`, a name from `zshard._options` or a builtin; empty for SRC and DST,
/// which are positional) and the texts of `zshard COMMAND -h` (`short`, one line), of `zshard
/// --help` (`help`) and of the Python docstring (`doc`). The command line sets a flag's help and value name from here, and
/// `crates/python/generate_api.py` reads these rows to write the Python signatures and stubs.
macro_rules! settings {
    ($(
        $(#[doc = $what:literal])*
        $variant:ident {
            key: $key:literal,
            group: $group:ident,
            commands: $commands:literal,
            value: $value:literal,
            python: $python:literal,
            short: $short:literal,
            help: $help:literal,
            doc: $doc:literal $(,)?
        }
    ),* $(,)?) => {
        /// A setting of a conversion, verification or listing, by its typed name.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Setting {
            $($(#[doc = $what])* $variant,)*
        }

        impl Setting {
            /// Every setting.
            pub const ALL: &'static [Setting] = &[$(Setting::$variant),*];

            /// The model's name of the setting: its field, its job-file key and its Python keyword.
            pub const fn key(self) -> &'static str {
                match self {
                    $(Setting::$variant => $key,)*
                }
            }

            /// Which part of the options model holds the setting.
            pub const fn group(self) -> Group {
                match self {
                    $(Setting::$variant => Group::$group,)*
                }
            }

            /// The commands that take the setting, by name (`convert plan finalize`): the `zshard`
            /// commands and the Python functions.
            pub const fn commands(self) -> &'static str {
                match self {
                    $(Setting::$variant => $commands,)*
                }
            }

            /// The name of the flag's value in `--help` (`SIZE`); `None` for a switch (and for SRC
            /// and DST, whose commands name them).
            pub const fn value_name(self) -> Option<&'static str> {
                let value = match self {
                    $(Setting::$variant => $value,)*
                };
                if value.is_empty() {
                    None
                } else {
                    Some(value)
                }
            }

            /// The flag's one line in `zshard COMMAND -h` (ripgrep's `doc_short`); [`Setting::help`]
            /// is the long text of `--help`.
            pub const fn short_help(self) -> &'static str {
                match self {
                    $(Setting::$variant => $short,)*
                }
            }

            /// The flag's description in `zshard --help` (a command may say more of its own).
            pub const fn help(self) -> &'static str {
                match self {
                    $(Setting::$variant => $help,)*
                }
            }

            /// The Python keyword's annotation (`Size`, `bool`), empty for SRC and DST.
            pub const fn python_type(self) -> &'static str {
                match self {
                    $(Setting::$variant => $python,)*
                }
            }

            /// The Python keyword's description in the docstrings.
            pub const fn python_doc(self) -> &'static str {
                match self {
                    $(Setting::$variant => $doc,)*
                }
            }
        }
    };
}

settings! {
    /// The source (SRC).
    Source {
        key: "source",
        group: Location,
        commands: "convert plan finalize verify ls",
        value: "",
        python: "",
        short: "",
        help: "",
        doc: "",
    },
    /// The destination (DST).
    Destination {
        key: "destination",
        group: Location,
        commands: "convert plan finalize verify status",
        value: "",
        python: "",
        short: "",
        help: "",
        doc: "",
    },
    /// The shard shape.
    ShardShape {
        key: "shard_shape",
        group: Layout,
        commands: "convert plan finalize",
        value: "a,b,...|name=a,...",
        python: "Shape",
        short: "Shard shape, e.g. 4096,4096 or time=48,lat=720 (default: automatic)",
        help: "Shard shape: one extent per dimension, e.g. 4096,4096, or extents by dimension \
              name for every array that has those dimensions, e.g. time=48,lat=720 (names from \
              dimension_names or _ARRAY_DIMENSIONS; dimensions not named are chosen \
              automatically, see `zshard convert --help`).",
        doc: "Shard shape: one extent per dimension, e.g. ``(4096, 4096)``, or extents by \
             dimension name for every array that has those dimensions, e.g. ``{'time': 48, \
             'lat': 720}`` (names from ``dimension_names`` or xarray's ``_ARRAY_DIMENSIONS``; a \
             name no array has is an error). Default: chosen per array (and for the dimensions \
             not named): grown from the inner chunk shape while the shard's uncompressed size \
             stays within 64 MiB and the shard does not extend past the array.",
    },
    /// The inner chunk shape.
    ChunkShape {
        key: "chunk_shape",
        group: Layout,
        commands: "convert plan finalize",
        value: "a,b,...|name=a,...",
        python: "Shape",
        short: "Inner chunk shape, e.g. 256,256 or lon=1440 (default: the source's)",
        help: "Inner chunk shape: e.g. 256,256, or by dimension name, e.g. lon=1440 (default, and \
              for dimensions not named: the source chunk shape).",
        doc: "Inner chunk shape, given as ``shard_shape``; each extent divides the shard's. \
             Default: the source's chunk shape (an already sharded source's inner chunk shape).",
    },
    /// The inner chunks' codecs.
    Compressor {
        key: "compressor",
        group: Layout,
        commands: "convert plan finalize",
        value: "SPEC",
        python: "Compressor",
        short: "Inner codecs: zstd:L, gzip:L, blosc:..., none, source or a JSON chain (default zstd:3)",
        help: "Inner chunk compressor: zstd:LEVEL, gzip:LEVEL, blosc:CNAME:CLEVEL:SHUFFLE (CNAME \
              blosclz|lz4|lz4hc|zlib|zstd, SHUFFLE noshuffle|shuffle|bitshuffle) or none; or the \
              whole inner codec chain as a JSON list of Zarr v3 codecs (see the examples); or \
              source: each array's own codecs where they are a valid Zarr v3 chain (plan names \
              the arrays that get the default instead). Default: zstd:3.",
        doc: "Inner chunk compressor: ``'zstd:LEVEL'``, ``'gzip:LEVEL'``, \
             ``'blosc:CNAME:CLEVEL:SHUFFLE'`` or ``'none'``; ``'source'`` keeps each array's own \
             codecs where they are a valid Zarr v3 chain; or the whole inner codec chain as a \
             list of Zarr v3 codecs (dicts, or names such as ``'crc32c'``). Default: \
             ``'zstd:3'``.",
    },
    /// Where each shard's index goes.
    IndexLocation {
        key: "index_location",
        group: Layout,
        commands: "convert plan finalize",
        value: "start|end",
        python: "IndexLocation",
        short: "Where each shard's index goes (default: end)",
        help: "Where each shard's index goes (default: end).",
        doc: "Where each shard's index goes. Default: ``'end'``.",
    },
    /// Copying source chunks without decoding where they fit.
    Passthrough {
        key: "passthrough",
        group: Layout,
        commands: "convert plan finalize",
        value: "",
        python: "bool",
        short: "Always decode and re-encode (no copying of chunks already encoded alike)",
        help: "Always decode and re-encode. By default, source chunks that already have the \
              output's inner chunk shape and codec chain are copied into the shards without \
              decoding.",
        doc: "``False`` always decodes and re-encodes. By default source chunks that already have \
             the output's inner chunk shape and codec chain are copied into the shards without \
             decoding.",
    },
    /// Shapes of pyramid levels.
    LevelShapes {
        key: "level_shapes",
        group: Conversion,
        commands: "convert plan finalize",
        value: "LEVEL:SHARD[/CHUNK]",
        python: "Strings",
        short: "Shapes of one OME-Zarr pyramid level, e.g. 2:1,256,256/1,64,64 (repeatable)",
        help: "Shapes of one level of every multiscale (OME-Zarr) pyramid, LEVEL:SHARD[/CHUNK] (0 \
              is the full resolution; repeatable), e.g. 2:1,256,256/1,64,64. By default each \
              level's shapes follow from the first level's through the level's scale factors.",
        doc: "Shapes of levels of every multiscale (OME-Zarr) pyramid, one \
             ``'LEVEL:SHARD[/CHUNK]'`` per level, e.g. ``['2:1,256,256/1,64,64']`` (level 0 is \
             the full resolution). By default each level's shapes follow from level 0's through \
             the level's scale factors.",
    },
    /// Consolidating a hierarchy's metadata.
    Consolidate {
        key: "consolidate",
        group: Conversion,
        commands: "convert plan finalize",
        value: "",
        python: "bool",
        short: "Do not consolidate a hierarchy's metadata into its root zarr.json",
        help: "Do not consolidate the metadata of a hierarchy into its root zarr.json. By default \
              it is, as zarr-python's consolidate_metadata does (xarray opens the output without \
              a warning).",
        doc: "``False`` does not consolidate the metadata of a hierarchy into its root \
             ``zarr.json``. By default it is, as zarr-python's ``consolidate_metadata`` does.",
    },
    /// Pyramid levels made from the source.
    Pyramid {
        key: "pyramid",
        group: Conversion,
        commands: "convert plan finalize",
        value: "N|auto",
        python: "Pyramid",
        short: "Make an OME-Zarr pyramid of N levels (auto: until one inner chunk)",
        help: "Make an OME-Zarr 0.5 (--ome 0.6: 0.6) multiscale image of N levels (level 0 is the \
              source; each further level halves every spatial axis: dimensions named x, y or z, \
              never channel or time), in the same pass over the source; auto: levels until the \
              spatial extent fits one inner chunk. Every level is sharded (shapes from \
              --level-shapes, else derived from level 0's). With --worker, each worker makes \
              its level-0 shards and the lower shards they alone feed, and finalize the smallest \
              levels. Into an Icechunk repository, one commit holds every level.",
        doc: "Make an OME-Zarr 0.5 (``ome='0.6'``: 0.6) multiscale image of this many levels \
             (level 0 is the source; each further level halves every spatial axis: dimensions \
             named x, y or z), in the same pass over the source; ``'auto'``: levels until the \
             spatial extent fits one inner chunk. Every level is sharded (shapes from \
             ``level_shapes``, else derived from level 0's).",
    },
    /// How a pyramid level is reduced from the one above.
    Downsample {
        key: "downsample",
        group: Conversion,
        commands: "convert plan finalize",
        value: "mean|mode|nearest|min|max",
        python: "Downsample",
        short: "With --pyramid: how a level is reduced from the one above (default mean)",
        help: "With --pyramid: how each 2x2 (2x2x2) block of a level becomes one element of the \
              next (default mean, rounded to nearest for integers; mode for label images). NaN \
              and the _FillValue do not count in mean, min and max.",
        doc: "With ``pyramid``: how each 2x2 (2x2x2) block of a level becomes one element of the \
             next: ``'mean'`` (the default; integers round to nearest), ``'mode'`` (the default \
             for label images), ``'nearest'``, ``'min'`` or ``'max'``. NaN and the ``_FillValue`` \
             do not count in mean, min and max.",
    },
    /// What becomes of OME-Zarr metadata.
    Ome {
        key: "ome",
        group: Conversion,
        commands: "convert plan finalize verify",
        value: "upgrade|keep|0.6",
        python: "OmeMetadata",
        short: "OME-Zarr metadata: upgrade 0.4 to 0.5 (the default), keep it, or write 0.6",
        help: "OME-Zarr metadata: upgrade (the default) writes a 0.4 image, plate or \
              bioformats2raw hierarchy as OME-Zarr 0.5 (attributes under `ome`, axes as \
              dimension_names); 0.5 and other versions are copied as they are. keep copies every \
              OME attribute as it is (a v2 array's fill value still becomes its `_FillValue` \
              attribute, as for every array, so that xarray masks it as before). 0.6 writes a \
              0.4 or 0.5 hierarchy, and a --pyramid image, as OME-Zarr 0.6 (RFC-5: each image's \
              axes in a coordinate system, each level's scale and translation one transformation \
              into it).",
        doc: "OME-Zarr metadata: ``'upgrade'`` (the default) writes a 0.4 image, plate or \
             bioformats2raw hierarchy as OME-Zarr 0.5 (0.5 and other versions are copied as they \
             are); ``'keep'`` copies every OME attribute as it is (a v2 array's fill value still \
             becomes its ``_FillValue`` attribute, as for every array, so that xarray masks it); \
             ``'0.6'`` writes a 0.4 or 0.5 hierarchy, and a ``pyramid`` image, as OME-Zarr 0.6 \
             (RFC-5 coordinate systems and transformations). :func:`verify` takes the value \
             the conversion was given.",
    },
    /// The source's kind.
    SourceFormat {
        key: "source_format",
        group: Source,
        commands: "convert plan finalize verify ls",
        value: "KIND",
        python: "SourceFormat",
        short: "Input kind: zarr (also in a zip), kerchunk-json, kerchunk-parquet, icechunk or n5 (detected)",
        help: "Input kind: zarr (a Zarr v2/v3 array or group), kerchunk-json (a kerchunk JSON \
              reference file, version 0 or 1, optionally .zst/.gz compressed), kerchunk-parquet \
              (a kerchunk Parquet reference folder), icechunk (an Icechunk repository) or n5 (an \
              N5 container). Detected when not given.",
        doc: "Input kind: ``'zarr'``, ``'kerchunk-json'`` (a kerchunk JSON reference file, \
             optionally .zst/.gz compressed), ``'kerchunk-parquet'``, ``'icechunk'`` (a \
             repository) or ``'n5'``. Default: detected.",
    },
    /// The root of kerchunk reference targets.
    RefRoot {
        key: "ref_root",
        group: Source,
        commands: "convert plan finalize verify ls",
        value: "DIR",
        python: "Location",
        short: "Kerchunk: the folder relative targets resolve against and local ones lie under",
        help: "Kerchunk references: the folder (or URL) that relative target paths resolve \
              against and that local targets must lie under (default: the folder of the \
              reference file, or of the Parquet reference folder).",
        doc: "Kerchunk references: the folder (or URL) that relative target paths resolve against \
             and that local targets must lie under. Default: the folder of the reference file \
             (or of the Parquet reference folder).",
    },
    /// Reference target prefixes read besides the root.
    AllowRefPrefix {
        key: "allow_ref_prefix",
        group: Source,
        commands: "convert plan finalize verify ls",
        value: "PREFIX",
        python: "Strings",
        short: "Kerchunk: also read targets starting with PREFIX (repeatable)",
        help: "Kerchunk references: also read targets that start with PREFIX, e.g. \
              http://127.0.0.1:8000/ or /data/ (repeatable; needed for http(s) targets on \
              loopback, link-local or private addresses and for local files outside --ref-root).",
        doc: "Kerchunk references: also read targets that start with these prefixes, e.g. \
             ``['http://127.0.0.1:8000/']`` (needed for http(s) targets on loopback, link-local \
             or private addresses and for local files outside ``ref_root``).",
    },
    /// The gap below which reference reads are coalesced.
    RefCoalesceGap {
        key: "ref_coalesce_gap",
        group: Source,
        commands: "convert plan finalize verify ls",
        value: "SIZE|off",
        python: "Size",
        short: "Kerchunk: byte ranges at most SIZE apart are read together (default 64KiB)",
        help: "Kerchunk references: byte ranges of one target file at most SIZE apart are read \
              with one request (default 64KiB); `off` reads every reference with its own \
              request.",
        doc: "Kerchunk references: byte ranges of one target file at most this far apart are read \
             with one request; ``'off'`` reads every reference with its own request. Default: 64 \
             KiB.",
    },
    /// Arrays to convert.
    Include {
        key: "include",
        group: Source,
        commands: "convert plan finalize verify ls",
        value: "GLOB",
        python: "Strings",
        short: "Only the arrays whose path matches GLOB (repeatable)",
        help: "Only the arrays whose path matches GLOB (repeatable), e.g. 'climate/*' or \
              '**/temp*' (`*` stays within one level, `**` crosses levels); a group's path \
              selects everything below it. The groups above a selected array are kept with their \
              attributes; a GLOB that matches no array is an error.",
        doc: "Only the arrays whose path matches one of these globs, e.g. ``'climate/*'`` or \
             ``'**/temp*'`` (``*`` stays within one level, ``**`` crosses levels; a group's path \
             selects everything below it); a glob that matches no array is an error.",
    },
    /// Arrays to leave out.
    Exclude {
        key: "exclude",
        group: Source,
        commands: "convert plan finalize verify ls",
        value: "GLOB",
        python: "Strings",
        short: "Leave out the arrays whose path matches GLOB (repeatable)",
        help: "Leave out the arrays whose path (or a group above them) matches GLOB (repeatable), \
              even when included.",
        doc: "Leave out the arrays whose path (or a group above them) matches one of these globs, \
             even when included.",
    },
    /// Missing kerchunk Parquet record files are errors.
    StrictRefs {
        key: "strict_refs",
        group: Source,
        commands: "convert plan finalize verify ls",
        value: "",
        python: "bool",
        short: "Kerchunk Parquet: a missing refs.<i>.parq file is an error",
        help: "Kerchunk Parquet references: a missing refs.<i>.parq file is an error (by default \
              it reads as a record without references, as kerchunk writes no file for one).",
        doc: "Kerchunk Parquet references: a missing ``refs.<i>.parq`` file is an error (by \
             default it reads as a record without references).",
    },
    /// The Icechunk branch, tag or snapshot read.
    SourceRef {
        key: "source_ref",
        group: Source,
        commands: "convert plan finalize verify ls",
        value: "REF",
        python: "str",
        short: "Icechunk source: the branch, tag or snapshot to read (default: main)",
        help: "Icechunk source: the branch, tag or snapshot id to read (default: the branch \
              main). --ref-root and --allow-ref-prefix apply to its virtual chunks (default \
              root: the folder holding the repository).",
        doc: "Icechunk source: the branch, tag or snapshot id to read. Default: the branch \
             ``main``.",
    },
    /// What becomes of arrays zshard does not read.
    OnUnsupported {
        key: "on_unsupported",
        group: Source,
        commands: "convert plan finalize verify ls",
        value: "refuse|skip",
        python: "OnUnsupported",
        short: "An array zshard cannot read: refuse (the default) or skip it",
        help: "What becomes of an array whose data type or codecs zshard does not read (a pickle \
              object array, an unknown codec): refuse (the default) stops before anything is \
              written, naming it; skip converts everything else and lists each skipped array \
              with its reason in the plan, the summary and the report.",
        doc: "What becomes of an array whose data type or codecs zshard does not read: \
             ``'refuse'`` (the default) fails before anything is written, naming it; ``'skip'`` \
             leaves it out and lists it in ``skipped_arrays``.",
    },
    /// An S3-compatible endpoint.
    S3Endpoint {
        key: "s3_endpoint",
        group: Storage,
        commands: "convert plan finalize verify ls status",
        value: "URL",
        python: "str",
        short: "Endpoint of an S3-compatible store, e.g. http://127.0.0.1:9000",
        help: "Endpoint of an S3-compatible store (MinIO, Ceph, ...), e.g. http://127.0.0.1:9000 \
              (overrides AWS_ENDPOINT_URL; an http:// endpoint needs no AWS_ALLOW_HTTP). \
              Credentials, session token and region otherwise come from AWS_* variables.",
        doc: "Endpoint of an S3-compatible store, e.g. ``'http://127.0.0.1:9000'`` (overrides \
             ``AWS_ENDPOINT_URL``).",
    },
    /// The S3 region.
    S3Region {
        key: "s3_region",
        group: Storage,
        commands: "convert plan finalize verify ls status",
        value: "REGION",
        python: "str",
        short: "S3 region (default: AWS_REGION, else us-east-1)",
        help: "S3 region (default: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1).",
        doc: "S3 region. Default: ``AWS_REGION`` / ``AWS_DEFAULT_REGION``, else ``us-east-1``.",
    },
    /// Path-style S3 requests.
    S3PathStyle {
        key: "s3_path_style",
        group: Storage,
        commands: "convert plan finalize verify ls status",
        value: "",
        python: "bool",
        short: "Path-style S3 requests (endpoint/bucket/key)",
        help: "Path-style S3 requests (endpoint/bucket/key), as most S3-compatible servers want \
              (the default with a custom endpoint unless AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true).",
        doc: "Path-style S3 requests (endpoint/bucket/key), as most S3-compatible servers want.",
    },
    /// Unsigned requests.
    Anonymous {
        key: "anonymous",
        group: Storage,
        commands: "convert plan finalize verify ls status",
        value: "",
        python: "bool",
        short: "Unsigned requests, for public buckets and containers",
        help: "Unsigned requests, for public buckets and containers (also \
              AWS_SKIP_SIGNATURE=true, ...).",
        doc: "Unsigned requests, for public buckets and containers.",
    },
    /// Retries of one request.
    Retries {
        key: "retries",
        group: Storage,
        commands: "convert plan finalize verify ls status",
        value: "N",
        python: "int",
        short: "Retries of one request at most (default: as --retry-timeout allows)",
        help: "Retries of one request at most (default: as many as --retry-timeout allows). \
              Transient storage failures (5xx, 429, timeouts, refused or reset connections) are \
              retried with exponential backoff and jitter; permanent ones (403, 404, missing \
              bucket) fail at once.",
        doc: "Retries of one request at most. Default: as many as ``retry_timeout`` allows.",
    },
    /// How long a request is retried.
    RetryTimeout {
        key: "retry_timeout",
        group: Storage,
        commands: "convert plan finalize verify ls status",
        value: "SECONDS",
        python: "int",
        short: "How long a request is retried, in seconds (default 120)",
        help: "How long a request is retried: no retry starts later than this after its first \
              attempt, so an outage shorter than this is ridden out (waits grow from 0.1 s to a \
              tenth of this, at most 10 s; default 120).",
        doc: "How long a request is retried, in seconds. Default: 120.",
    },
    /// Storage requests in flight per batch.
    MaxRequests {
        key: "max_requests",
        group: Storage,
        commands: "convert plan finalize verify ls status",
        value: "N",
        python: "int",
        short: "Storage requests in flight per batch (default 32)",
        help: "Storage requests in flight per batch (the chunks of one shard, the parts of one \
              upload; default 32).",
        doc: "Storage requests in flight per batch (at least 1). Default: 32.",
    },
    /// The part size of multipart uploads.
    PartSize {
        key: "part_size",
        group: Storage,
        commands: "convert plan finalize verify ls status",
        value: "SIZE",
        python: "Size",
        short: "Multipart upload part size for large shards (default 32MiB, min 5MiB)",
        help: "Shards larger than this are uploaded to object stores in parts of this size \
              (default 32MiB, min 5MiB: a smaller size is raised to it, with a warning).",
        doc: "Shards larger than this are uploaded to object stores in parts of this size (at \
             least 5 MiB). Default: ``'32MiB'``.",
    },
    /// Threads fetching chunks and writing shards.
    IoThreads {
        key: "io_threads",
        group: Storage,
        commands: "convert plan finalize verify ls status",
        value: "N",
        python: "int",
        short: "Threads fetching and threads writing, each (default: 2 local, 8+ remote)",
        help: "Threads fetching chunks and threads writing shards, each, at least 1 (default: 2 \
              for local paths, 8 when the source or destination is a remote store; a conversion \
              of small shards gets up to 32, as many as keep twice that many shards within 64 \
              MiB and the memory limit; more than 32 per core, at least 64, or than 1024, are \
              capped to that, with a warning).",
        doc: "Threads fetching chunks and threads writing shards, each (at least 1). Default: 2 \
             for local paths, 8 when the source or destination is remote; a conversion of small \
             shards gets up to 32, as many as keep twice that many shards within 64 MiB and the \
             memory limit. More than 32 per core (at least 64) or 1024 are capped to that, with a \
             warning.",
    },
    /// The output's kind (Zarr or Icechunk).
    OutputFormat {
        key: "output_format",
        group: Output,
        commands: "convert plan finalize",
        value: "zarr|icechunk",
        python: "OutputFormat",
        short: "Output kind: zarr, or icechunk (one commit to the repository DST)",
        help: "Output kind: zarr (plain sharded Zarr v3), or icechunk: commit the shards to a \
              branch of the Icechunk repository DST (created when missing) in one commit. A DST \
              that already is a repository is written as icechunk.",
        doc: "Output kind: ``'zarr'`` (plain sharded Zarr v3) or ``'icechunk'``: commit the \
             shards to a branch of the Icechunk repository ``dst`` (created when missing) in one \
             commit. Default: ``'icechunk'`` when ``dst`` already is a repository, else \
             ``'zarr'``.",
    },
    /// The Icechunk branch written.
    Branch {
        key: "branch",
        group: Output,
        commands: "convert plan finalize",
        value: "NAME",
        python: "str",
        short: "Icechunk output: the branch to commit to (default main)",
        help: "Icechunk output: the branch to commit to (default main; created from main when \
              missing).",
        doc: "Icechunk output: the branch to commit to (created from ``main`` when missing). \
             Default: ``'main'``.",
    },
    /// The Icechunk commit message.
    Message {
        key: "message",
        group: Output,
        commands: "convert plan finalize",
        value: "TEXT",
        python: "str",
        short: "Icechunk output: the commit message",
        help: "Icechunk output: the commit message (default: names zshard, the source and the \
              options).",
        doc: "Icechunk output: the commit message. Default: one naming zshard, the source and the \
             options.",
    },
    /// The Icechunk spec version of a new repository.
    IcechunkSpec {
        key: "icechunk_spec",
        group: Output,
        commands: "convert plan finalize",
        value: "1|2",
        python: "IcechunkSpec",
        short: "Icechunk output: spec version of a repository made (default 2)",
        help: "Icechunk output: the spec version of a repository zshard makes (default 2; 1 for \
              readers on icechunk 1.x). An existing repository is written in its own.",
        doc: "Icechunk output: the spec version of a new repository: ``2`` (the default; icechunk \
             2.x reads it) or ``1`` (for readers on icechunk 1.x). An existing repository is \
             written in its own version; asking for the other is refused.",
    },
    /// Worker threads per CPU stage.
    Threads {
        key: "threads",
        group: Run,
        commands: "convert plan verify",
        value: "N",
        python: "int",
        short: "Worker threads per CPU stage (default: the number of cores)",
        help: "Worker threads per CPU stage, at least 1 (default: the number of cores; more than \
              4 per core, or than 1024, are capped to that, with a warning).",
        doc: "Worker threads per CPU stage (at least 1). Default: the number of cores. More than \
             4 per core (or 1024) are capped to that, with a warning.",
    },
    /// Replacing what the destination holds.
    Overwrite {
        key: "overwrite",
        group: Run,
        commands: "convert",
        value: "",
        python: "bool",
        short: "Replace whatever DST holds (else other options are refused, the same resumed)",
        help: "Replace whatever DST holds (otherwise a DST from a run with other options is \
              refused, and one from a run with the same options is resumed).",
        doc: "Replace what ``dst`` holds (otherwise a ``dst`` from a run with other options is \
             refused, and one from a run with the same options is resumed).",
    },
    /// Keeping the checksum manifest after the conversion finishes.
    KeepManifest {
        key: "keep_manifest",
        group: Run,
        commands: "convert finalize",
        value: "",
        python: "bool",
        short: "Keep the checksum manifest, for `zshard verify --manifest DST`",
        help: "Keep the checksum manifest of every shard written (DST/.zshard/manifest.tsv) after \
              the conversion finishes, for `zshard verify --manifest DST`.",
        doc: "Keep the manifest of every shard written (its size and crc32c, and a hash of each \
             inner chunk's values) at ``dst/.zshard/manifest.tsv`` after the run, for ``zshard \
             verify --manifest`` to check the output without reading the source. By default it \
             is removed with the rest of the state.",
    },
    /// What `plan`'s time and price estimate assumes in place of its defaults.
    EstimateWith {
        key: "estimate_with",
        group: Run,
        commands: "plan",
        value: "FIGURES",
        python: "str",
        short: "The estimate's figures, e.g. bandwidth=1GB,latency=10ms,workers=16,put=0.005,get=0.0004",
        help: "What the time and price estimate assumes in place of its defaults (one worker per \
              --worker count, 100MB a second and 30 ms a request to object stores, S3 Standard's \
              us-east-1 request prices): comma-separated bandwidth=SIZE (bytes a second one worker \
              moves to or from an object store), latency=MS (20, 20ms or 0.02s), workers=N, and \
              put=USD, get=USD, delete=USD (per 1,000 PUT/LIST, GET/HEAD and DELETE requests; \
              prices not given stay S3 Standard's). The plan states every figure it used.",
        doc: "What the plan's time and price estimate assumes in place of its defaults: \
             comma-separated ``bandwidth=SIZE`` (bytes a second one worker moves to or from an \
             object store), ``latency=MS``, ``workers=N``, and ``put=USD``, ``get=USD``, \
             ``delete=USD`` (per 1,000 PUT/LIST, GET/HEAD and DELETE requests; those not given \
             stay S3 Standard's us-east-1 prices), e.g. ``'bandwidth=1GB,latency=10ms,workers=16'``. \
             Default: 100 MB/s, 30 ms, the worker count, S3 Standard.",
    },
    /// How often the shards written are recorded and (on local disk) made durable by a checkpoint.
    CheckpointInterval {
        key: "checkpoint_interval",
        group: Run,
        commands: "convert",
        value: "DURATION",
        python: "float | str",
        short: "How often shards written are recorded as done (default 10s)",
        help: "How often the shards written are recorded as done, e.g. 10s, 500ms or 2m (from \
              10ms to 1h; default 10s; records are also written every 10,000 shards). On local \
              disk shards are renamed into place without an fsync of their own, and each \
              recording follows a checkpoint: one syncfs of DST's filesystem. What a crash can \
              lose: a kill loses nothing written; a power loss or node crash can lose or damage \
              only the shards written after the last checkpoint, which a resume checks against \
              the manifest (size and crc32c) and rewrites if they do not match. Shorter: less to \
              check and rewrite after a crash, more syncs. On object stores a PUT is durable \
              when it returns: shards written after the last recording are converted again on \
              resume.",
        doc: "How often the shards written are recorded as done: seconds, or a duration such as \
             ``'10s'``, ``'500ms'``, ``'2m'`` (from 10 ms to 1 h). On local disk shards are \
             renamed into place without an fsync of their own, and each recording follows a \
             checkpoint (one ``syncfs`` of ``dst``'s filesystem): a power loss or node crash can \
             lose or damage only the shards written after the last checkpoint, which a resume \
             checks against the manifest (size and crc32c) and rewrites if they do not match; a \
             killed process loses nothing written. Shorter means less to check after a crash and \
             more syncs. Default: ``'10s'`` (records are also written every 10,000 shards).",
    },
    /// Peak memory not to exceed.
    MemoryLimit {
        key: "memory_limit",
        group: Run,
        commands: "convert plan verify",
        value: "SIZE",
        python: "Size",
        short: "Peak memory not to exceed, e.g. 512MiB or 4G (default: half the memory)",
        help: "Peak memory not to exceed, e.g. 512MiB or 4G (G and GiB: 2^30 bytes, GB: 10^9; \
              default: half of the machine's memory, or of the cgroup's limit). Shards bigger \
              than fits are processed and written in parts of whole inner chunks, so any shard \
              size fits; fewer threads are used if needed, and a conversion whose source chunks \
              cannot fit even then is refused before it starts.",
        doc: "Peak memory not to exceed, in bytes or as ``'512MiB'``, ``'4G'`` (G and GiB: 2**30 \
             bytes, GB: 10**9). Shards bigger than fits are processed in parts; a conversion \
             that cannot fit is refused before it starts. Default: half of the machine's memory \
             (or of the cgroup's limit). :func:`verify` compares shards in parts that fit it, as \
             a conversion writes them.",
    },
    /// Where the JSON report goes.
    Report {
        key: "report",
        group: Run,
        commands: "convert",
        value: "FILE.json",
        python: "Location",
        short: "Write a JSON report however the run ends ({worker}, {host}, {date} replaced)",
        help: "Write a JSON report however the run ends (status ok, failed, cancelled or \
              complete; the error; options, version, host, worker, times; counts per array and \
              in total, bytes, throughput). {worker}, {host} and {date} (the start, UTC, \
              20261124T155057Z) in FILE are replaced.",
        doc: "Write the run's JSON report to this file however the run ends; ``{worker}``, \
             ``{host}`` and ``{date}`` in it are replaced.",
    },
    /// This worker's share of the shards.
    Worker {
        key: "worker",
        group: Run,
        commands: "convert",
        value: "I/N",
        python: "Worker",
        short: "Convert only part I of N of the shards (0-based; SLURM/k8s index when absent)",
        help: "Convert only part I of N of all shards (0-based). Without it, a SLURM job array \
              (SLURM_ARRAY_TASK_ID/COUNT/MIN) or a Kubernetes Indexed Job (JOB_COMPLETION_INDEX \
              with --workers) decides; otherwise all shards. A partitioned run writes no \
              metadata: run `zshard finalize` once all workers are done.",
        doc: "Convert only share ``index`` of ``count`` of all shards: ``(index, count)`` or \
             ``'index/count'`` (0-based). A partitioned run writes no metadata: call \
             :func:`finalize` once every worker is done. Default: from a SLURM job array or a \
             Kubernetes Indexed Job (with ``workers``), else every shard.",
    },
    /// The number of workers.
    Workers {
        key: "workers",
        group: Run,
        commands: "convert",
        value: "N",
        python: "int",
        short: "Number of workers when the index comes from JOB_COMPLETION_INDEX",
        help: "Number of workers when the index comes from JOB_COMPLETION_INDEX.",
        doc: "Number of workers when the index comes from ``JOB_COMPLETION_INDEX``.",
    },
    /// The fraction of shards a verification checks.
    Sample {
        key: "sample",
        group: Verify,
        commands: "verify",
        value: "FRACTION",
        python: "float",
        short: "Check only this fraction of shards, e.g. 0.01 (default: all)",
        help: "Check only this fraction of shards (a deterministic sample), e.g. 0.01 (default: \
              all).",
        doc: "Check only this fraction of the shards, in (0, 1] (a deterministic sample), e.g. \
             ``0.01``. Default: 1 (every shard).",
    },
    /// A verification against the output's kept checksum manifest instead of the source.
    Manifest {
        key: "manifest",
        group: Verify,
        commands: "verify",
        value: "",
        python: "bool",
        short: "Check DST alone against the checksum manifest its conversion kept",
        help: "Check the output DST (given alone) against the checksum manifest its conversion \
              kept (--keep-manifest), without the source: every shard's size and crc32c, and \
              objects at chunk keys the manifest does not name.",
        doc: "Check the output alone against the checksum manifest its conversion kept \
             (``keep_manifest=True``), without reading the source: every shard's size and \
             crc32c, and objects at chunk keys the manifest does not name. The output is then \
             the one location given (``verify(dst, manifest=True)``).",
    },
    /// How often a status is read again until the conversion is finished.
    Watch {
        key: "watch",
        group: Status,
        commands: "status",
        value: "SECONDS",
        python: "float",
        short: "Read again every SECONDS (default 2) until the conversion is finished",
        help: "Read the status again every SECONDS (2 when given without a value) until the \
              conversion is finished (complete, or every shard done and no worker live), or \
              Ctrl-C; the table is redrawn, JSON is printed one line per reading.",
        doc: "Read the status again every this many seconds until the conversion is finished \
             (complete, or every shard done and no worker live), returning the last reading; \
             Ctrl-C (``KeyboardInterrupt``) stops waiting. By default the status is read once.",
    },
}

/// The group of a setting: which part of the options model holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Group {
    /// SRC and DST.
    Location,
    /// The output's layout (may be given per array in a job file).
    Layout,
    /// Of a whole conversion's output (pyramid levels, consolidation, OME metadata).
    Conversion,
    /// How the source is read.
    Source,
    /// How storage is reached.
    Storage,
    /// What kind of output is written.
    Output,
    /// How the run goes (threads, memory, partition, report).
    Run,
    /// Of a verification.
    Verify,
    /// Of a status view.
    Status,
}

impl Setting {
    /// The setting named `key` (see [`Setting::key`]).
    pub fn from_key(key: &str) -> Option<Setting> {
        Self::ALL.iter().copied().find(|s| s.key() == key)
    }

    /// Whether the command (or Python function) `name` takes the setting.
    pub fn taken_by(self, name: &str) -> bool {
        self.commands().split(' ').any(|c| c == name)
    }

    /// The command line's flag: `--memory-limit`; the two settings that are on by default are
    /// turned off by their flag (`--no-passthrough`, `--no-consolidate`); SRC and DST are positional.
    pub fn flag(self) -> Cow<'static, str> {
        match self {
            Setting::Source => "SRC".into(),
            Setting::Destination => "DST".into(),
            Setting::Passthrough => "--no-passthrough".into(),
            Setting::Consolidate => "--no-consolidate".into(),
            other => format!("--{}", other.key().replace('_', "-")).into(),
        }
    }

    /// The Python keyword argument: `memory_limit=`; the switches with the value that turns them
    /// on (`overwrite=True`, `passthrough=False`); SRC and DST are the positional `src` and `dst`.
    pub fn keyword(self) -> Cow<'static, str> {
        match self {
            Setting::Source => "src".into(),
            Setting::Destination => "dst".into(),
            Setting::Passthrough | Setting::Consolidate => format!("{}=False", self.key()).into(),
            Setting::StrictRefs
            | Setting::S3PathStyle
            | Setting::Anonymous
            | Setting::Overwrite
            | Setting::KeepManifest
            | Setting::Manifest => format!("{}=True", self.key()).into(),
            other => format!("{}=", other.key()).into(),
        }
    }
}

impl Setting {
    /// The setting given `value`, as the current front end writes it: `--worker "3/x"` on the
    /// command line, `worker="3/x"` in Python, `worker = "3/x"` in a job file or for a Rust caller.
    pub fn given(self, value: impl fmt::Display) -> String {
        match spelling() {
            Spelling::Flag => format!("{} {value}", self.flag()),
            Spelling::Keyword => format!("{}={value}", self.key()),
            spelling @ (Spelling::Key | Spelling::JobKey) => {
                format!("{} = {value}", spelling.of(self))
            }
        }
    }
}

/// How a front end spells a [`Setting`] in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Spelling {
    /// By key, `memory_limit`: Rust callers of the library (the default).
    #[default]
    Key,
    /// As the `zshard` command's flag, `--memory-limit` ([`Setting::flag`]).
    Flag,
    /// As a Python keyword argument, `memory_limit=` ([`Setting::keyword`]).
    Keyword,
    /// As a job file's key, `memory_limit` (storage keys in their table: `storage.part_size`); the
    /// settings a job file has no key for are `zshard run`'s and `verify`'s flags (`--worker`).
    JobKey,
}

impl Spelling {
    /// `setting` spelled this way.
    pub fn of(self, setting: Setting) -> Cow<'static, str> {
        match self {
            Spelling::Key => setting.key().into(),
            Spelling::Flag => setting.flag(),
            Spelling::Keyword => setting.keyword(),
            Spelling::JobKey if setting.group() == Group::Storage => {
                format!("storage.{}", setting.key()).into()
            }
            Spelling::JobKey
                if matches!(
                    setting,
                    Setting::Worker
                        | Setting::Workers
                        | Setting::Sample
                        | Setting::Manifest
                        | Setting::Watch
                ) =>
            {
                setting.flag()
            }
            Spelling::JobKey => setting.key().into(),
        }
    }
}

thread_local! {
    /// This thread's spelling while in [`spelled`].
    static THREAD: Cell<Option<Spelling>> = const { Cell::new(None) };
}

/// How settings are spelled now, on this thread: as [`spelled`] says, else by key.
pub fn spelling() -> Spelling {
    THREAD.with(Cell::get).unwrap_or_default()
}

/// Runs `f` with settings spelled by `spelling` on this thread (and the threads it starts through
/// [`inheriting`]); the previous one is restored afterwards, also when `f` panics.
pub fn spelled<R>(spelling: Spelling, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Spelling>);
    impl Drop for Restore {
        fn drop(&mut self) {
            THREAD.with(|t| t.set(self.0));
        }
    }
    let _restore = Restore(THREAD.with(|t| t.replace(Some(spelling))));
    f()
}

/// `f`, to run on another thread with this thread's spelling: a thread the library starts names
/// settings as the front end that started the work does.
pub fn inheriting<R>(f: impl FnOnce() -> R) -> impl FnOnce() -> R {
    let spelling = THREAD.with(Cell::get);
    move || match spelling {
        Some(spelling) => spelled(spelling, f),
        None => f(),
    }
}

/// The setting as the current front end spells it ([`spelling`]).
impl fmt::Display for Setting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&spelling().of(*self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_found_again() {
        for (i, s) in Setting::ALL.iter().enumerate() {
            assert_eq!(Setting::from_key(s.key()), Some(*s));
            assert!(Setting::ALL[..i].iter().all(|t| t.key() != s.key()));
        }
        assert_eq!(Setting::from_key("memory-limit"), None);
    }

    #[test]
    fn each_front_end_spells_a_setting_its_own_way() {
        let all = |spelling| spelled(spelling, || Setting::MemoryLimit.to_string());
        assert_eq!(all(Spelling::Flag), "--memory-limit");
        assert_eq!(all(Spelling::Keyword), "memory_limit=");
        assert_eq!(all(Spelling::JobKey), "memory_limit");
        assert_eq!(all(Spelling::Key), "memory_limit");
        let passthrough = |spelling| spelled(spelling, || Setting::Passthrough.to_string());
        assert_eq!(passthrough(Spelling::Flag), "--no-passthrough");
        assert_eq!(passthrough(Spelling::Keyword), "passthrough=False");
        assert_eq!(Spelling::JobKey.of(Setting::PartSize), "storage.part_size");
        assert_eq!(Spelling::JobKey.of(Setting::Worker), "--worker");
        assert_eq!(Spelling::Flag.of(Setting::Source), "SRC");
        assert_eq!(Spelling::Keyword.of(Setting::Overwrite), "overwrite=True");
    }

    /// Every setting but SRC and DST (whose commands describe them) has its help and its Python
    /// keyword; a switch has no value name, and the commands that take it are commands.
    #[test]
    fn every_setting_is_defined_for_every_front_end() {
        let commands = ["convert", "plan", "finalize", "verify", "ls", "status"];
        for s in Setting::ALL.iter().copied() {
            assert!(
                s.commands().split(' ').all(|c| commands.contains(&c)),
                "{s:?}"
            );
            if matches!(s, Setting::Source | Setting::Destination) {
                assert!(s.help().is_empty() && s.python_type().is_empty(), "{s:?}");
                continue;
            }
            assert!(
                s.help().ends_with('.') && s.python_doc().ends_with('.'),
                "{s:?}"
            );
            assert!(!s.python_type().is_empty(), "{s:?}");
            let switch = s.python_type() == "bool";
            assert_eq!(s.value_name().is_none(), switch, "{s:?}");
        }
        assert!(Setting::CheckpointInterval.taken_by("convert"));
        assert!(!Setting::CheckpointInterval.taken_by("plan"));
        assert_eq!(Setting::PartSize.value_name(), Some("SIZE"));
    }

    #[test]
    fn spelled_is_scoped_to_the_thread_and_restored() {
        spelled(Spelling::Flag, || {
            assert_eq!(Setting::Worker.to_string(), "--worker");
            spelled(Spelling::Keyword, || {
                assert_eq!(Setting::Worker.to_string(), "worker=")
            });
            assert_eq!(Setting::Worker.to_string(), "--worker");
            let other = std::thread::spawn(spelling).join().expect("thread");
            assert_eq!(other, Spelling::Key, "the override is this thread's only");
            let inherited = std::thread::spawn(inheriting(spelling));
            assert_eq!(inherited.join().expect("thread"), Spelling::Flag);
        });
        assert_eq!(spelling(), Spelling::Key, "nothing is left for the process");
    }
}
