//! The settings of zshard by typed name, and how each front end spells them.
//!
//! Library messages name a setting with a [`Setting`] (never with a command-line flag); its
//! `Display` spells it the way the front end in use does: `--memory-limit` on the command line,
//! `memory_limit=` in Python, `memory_limit` in a job file or for a Rust caller (the default). A
//! front end picks its [`Spelling`] once for the process ([`set_spelling`]); [`spelled`] picks one
//! for the current thread only (tests, or rendering one message another way).

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};

/// A setting of a conversion, verification or listing, by its typed name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Setting {
    /// The source (SRC).
    Source,
    /// The destination (DST).
    Destination,
    /// The shard shape.
    ShardShape,
    /// The inner chunk shape.
    ChunkShape,
    /// The inner chunks' codecs.
    Compressor,
    /// Where each shard's index goes.
    IndexLocation,
    /// Copying source chunks without decoding where they fit.
    Passthrough,
    /// Shapes of pyramid levels.
    LevelShapes,
    /// Consolidating a hierarchy's metadata.
    Consolidate,
    /// What becomes of OME-Zarr metadata.
    Ome,
    /// The source's kind.
    SourceFormat,
    /// The root of kerchunk reference targets.
    RefRoot,
    /// Reference target prefixes read besides the root.
    AllowRefPrefix,
    /// The gap below which reference reads are coalesced.
    RefCoalesceGap,
    /// Missing kerchunk Parquet record files are errors.
    StrictRefs,
    /// Arrays to convert.
    Include,
    /// Arrays to leave out.
    Exclude,
    /// The Icechunk branch, tag or snapshot read.
    SourceRef,
    /// What becomes of arrays zshard does not read.
    OnUnsupported,
    /// An S3-compatible endpoint.
    S3Endpoint,
    /// The S3 region.
    S3Region,
    /// Path-style S3 requests.
    S3PathStyle,
    /// Unsigned requests.
    Anonymous,
    /// Retries of one request.
    Retries,
    /// How long a request is retried.
    RetryTimeout,
    /// Storage requests in flight per batch.
    MaxRequests,
    /// The part size of multipart uploads.
    PartSize,
    /// Threads fetching chunks and writing shards.
    IoThreads,
    /// The output's kind (Zarr or Icechunk).
    OutputFormat,
    /// The Icechunk branch written.
    Branch,
    /// The Icechunk commit message.
    Message,
    /// The Icechunk spec version of a new repository.
    IcechunkSpec,
    /// Worker threads per CPU stage.
    Threads,
    /// Peak memory not to exceed.
    MemoryLimit,
    /// Replacing what the destination holds.
    Overwrite,
    /// Keeping the checksum manifest after the conversion finishes.
    KeepManifest,
    /// How often the shards written are recorded and (on local disk) made durable by a checkpoint.
    CheckpointInterval,
    /// Where the JSON report goes.
    Report,
    /// This worker's share of the shards.
    Worker,
    /// The number of workers.
    Workers,
    /// The fraction of shards a verification checks.
    Sample,
    /// A verification against the output's kept checksum manifest instead of the source.
    Manifest,
    /// How often a status is read again until the conversion is finished.
    Watch,
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
    /// Every setting.
    pub const ALL: &'static [Setting] = &[
        Setting::Source,
        Setting::Destination,
        Setting::ShardShape,
        Setting::ChunkShape,
        Setting::Compressor,
        Setting::IndexLocation,
        Setting::Passthrough,
        Setting::LevelShapes,
        Setting::Consolidate,
        Setting::Ome,
        Setting::SourceFormat,
        Setting::RefRoot,
        Setting::AllowRefPrefix,
        Setting::RefCoalesceGap,
        Setting::StrictRefs,
        Setting::Include,
        Setting::Exclude,
        Setting::SourceRef,
        Setting::OnUnsupported,
        Setting::S3Endpoint,
        Setting::S3Region,
        Setting::S3PathStyle,
        Setting::Anonymous,
        Setting::Retries,
        Setting::RetryTimeout,
        Setting::MaxRequests,
        Setting::PartSize,
        Setting::IoThreads,
        Setting::OutputFormat,
        Setting::Branch,
        Setting::Message,
        Setting::IcechunkSpec,
        Setting::Threads,
        Setting::MemoryLimit,
        Setting::Overwrite,
        Setting::KeepManifest,
        Setting::CheckpointInterval,
        Setting::Report,
        Setting::Worker,
        Setting::Workers,
        Setting::Sample,
        Setting::Manifest,
        Setting::Watch,
    ];

    /// The model's name of the setting: its field, its job-file key and its Python keyword.
    pub const fn key(self) -> &'static str {
        match self {
            Setting::Source => "source",
            Setting::Destination => "destination",
            Setting::ShardShape => "shard_shape",
            Setting::ChunkShape => "chunk_shape",
            Setting::Compressor => "compressor",
            Setting::IndexLocation => "index_location",
            Setting::Passthrough => "passthrough",
            Setting::LevelShapes => "level_shapes",
            Setting::Consolidate => "consolidate",
            Setting::Ome => "ome",
            Setting::SourceFormat => "source_format",
            Setting::RefRoot => "ref_root",
            Setting::AllowRefPrefix => "allow_ref_prefix",
            Setting::RefCoalesceGap => "ref_coalesce_gap",
            Setting::StrictRefs => "strict_refs",
            Setting::Include => "include",
            Setting::Exclude => "exclude",
            Setting::SourceRef => "source_ref",
            Setting::OnUnsupported => "on_unsupported",
            Setting::S3Endpoint => "s3_endpoint",
            Setting::S3Region => "s3_region",
            Setting::S3PathStyle => "s3_path_style",
            Setting::Anonymous => "anonymous",
            Setting::Retries => "retries",
            Setting::RetryTimeout => "retry_timeout",
            Setting::MaxRequests => "max_requests",
            Setting::PartSize => "part_size",
            Setting::IoThreads => "io_threads",
            Setting::OutputFormat => "output_format",
            Setting::Branch => "branch",
            Setting::Message => "message",
            Setting::IcechunkSpec => "icechunk_spec",
            Setting::Threads => "threads",
            Setting::MemoryLimit => "memory_limit",
            Setting::Overwrite => "overwrite",
            Setting::KeepManifest => "keep_manifest",
            Setting::CheckpointInterval => "checkpoint_interval",
            Setting::Report => "report",
            Setting::Worker => "worker",
            Setting::Workers => "workers",
            Setting::Sample => "sample",
            Setting::Manifest => "manifest",
            Setting::Watch => "watch",
        }
    }

    /// The setting named `key` (see [`Setting::key`]).
    pub fn from_key(key: &str) -> Option<Setting> {
        Self::ALL.iter().copied().find(|s| s.key() == key)
    }

    /// Which part of the options model holds the setting.
    pub const fn group(self) -> Group {
        use Setting::*;
        match self {
            Source | Destination => Group::Location,
            ShardShape | ChunkShape | Compressor | IndexLocation | Passthrough => Group::Layout,
            LevelShapes | Consolidate | Ome => Group::Conversion,
            SourceFormat | RefRoot | AllowRefPrefix | RefCoalesceGap | StrictRefs | Include
            | Exclude | SourceRef | OnUnsupported => Group::Source,
            S3Endpoint | S3Region | S3PathStyle | Anonymous | Retries | RetryTimeout
            | MaxRequests | PartSize | IoThreads => Group::Storage,
            OutputFormat | Branch | Message | IcechunkSpec => Group::Output,
            Threads | MemoryLimit | Overwrite | KeepManifest | CheckpointInterval | Report
            | Worker | Workers => Group::Run,
            Sample | Manifest => Group::Verify,
            Watch => Group::Status,
        }
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

    const fn to_u8(self) -> u8 {
        match self {
            Spelling::Key => 0,
            Spelling::Flag => 1,
            Spelling::Keyword => 2,
            Spelling::JobKey => 3,
        }
    }

    const fn from_u8(n: u8) -> Spelling {
        match n {
            1 => Spelling::Flag,
            2 => Spelling::Keyword,
            3 => Spelling::JobKey,
            _ => Spelling::Key,
        }
    }
}

/// The process's spelling (a front end's), see [`set_spelling`].
static PROCESS: AtomicU8 = AtomicU8::new(Spelling::Key.to_u8());

thread_local! {
    /// This thread's spelling while in [`spelled`].
    static THREAD: Cell<Option<Spelling>> = const { Cell::new(None) };
}

/// Makes `spelling` the way settings are spelled in this process's messages (a front end calls it
/// once, before it runs anything).
pub fn set_spelling(spelling: Spelling) {
    PROCESS.store(spelling.to_u8(), Ordering::Relaxed);
}

/// How settings are spelled now, on this thread.
pub fn spelling() -> Spelling {
    THREAD
        .with(Cell::get)
        .unwrap_or_else(|| Spelling::from_u8(PROCESS.load(Ordering::Relaxed)))
}

/// Runs `f` with settings spelled by `spelling` on this thread (messages made on other threads keep
/// the process's spelling); the previous one is restored afterwards, also when `f` panics.
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

    #[test]
    fn spelled_is_scoped_to_the_thread_and_restored() {
        spelled(Spelling::Flag, || {
            assert_eq!(Setting::Worker.to_string(), "--worker");
            spelled(Spelling::Keyword, || {
                assert_eq!(Setting::Worker.to_string(), "worker=")
            });
            assert_eq!(Setting::Worker.to_string(), "--worker");
            let other = std::thread::spawn(spelling).join().expect("thread");
            assert_ne!(other, Spelling::Flag, "the override is this thread's only");
        });
    }
}
