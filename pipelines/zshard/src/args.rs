//! The command line's flags shared by several subcommands, as clap reads them: the low level of the
//! command line (ripgrep's `LowArgs`). `lower.rs` maps them into the library's options model in one
//! place; nothing here builds a library value and no default is written here.
//!
//! A flag's description and value name are its setting's ([`Setting::help`],
//! [`Setting::value_name`]), set on the command by [`with_settings`]; only a command that says more
//! of a flag than the setting does (`plan --threads`) writes its own. The flags of a [`FlagGroup`]
//! ([`LayoutFlags`], [`WholeFlags`], [`SourceFlags`], [`StorageFlags`], [`OutputFlags`],
//! [`RunFlags`], [`ShareFlags`]) are made from the settings alone and read by the model's serde:
//! adding a setting adds its flag and its lowering. Only the flags a command describes itself
//! (`plan --threads`, `verify --ome`, ...) are clap fields.

use std::marker::PhantomData;

use clap::{Arg, ArgAction, ArgMatches};
use serde_json::{Map, Value};
use zshard_convert::options::Options;
use zshard_convert::{parse_size, Setting};
use zshard_core::setting::Group;

/// `cli` with every flag of a setting described as the setting is (its help and value name), unless
/// the command describes it itself.
pub fn with_settings(cli: clap::Command) -> clap::Command {
    // `-h` keeps each flag on one line: its short help beside it, never moved below it for the
    // width of a terminal (clap's guess without one is 100 columns); `--help` puts the long text
    // below each flag anyway.
    let cli = cli.mut_args(described).term_width(0);
    let names: Vec<String> = cli
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    names
        .iter()
        .fold(cli, |cli, name| cli.mut_subcommand(name, with_settings))
}

fn described(arg: Arg) -> Arg {
    let Some(setting) = arg.get_long().and_then(setting_of) else {
        return arg;
    };
    let arg = match (setting.value_name(), arg.get_action().takes_values()) {
        (Some(value), true) => arg.value_name(value),
        _ => arg,
    };
    if arg.get_help().is_some() {
        return arg;
    }
    described_by(arg, setting)
}

/// `arg` with `setting`'s texts: one line for `-h`, the whole help for `--help` (as ripgrep keeps a
/// `doc_short` beside its `doc_long`).
fn described_by(arg: Arg, setting: Setting) -> Arg {
    let arg = arg.long_help(short_help(setting));
    match setting.short_help() {
        "" => arg.help(short_help(setting)),
        short => arg.help(short),
    }
}

/// The setting whose flag is `--long`.
fn setting_of(long: &str) -> Option<Setting> {
    Setting::ALL
        .iter()
        .copied()
        .find(|s| s.flag().strip_prefix("--") == Some(long))
}

/// The help as clap's derive makes it of a one-paragraph doc comment: without its final period.
fn short_help(setting: Setting) -> &'static str {
    let help = setting.help();
    match help.strip_suffix('.') {
        Some(short) if !short.ends_with('.') => short,
        _ => help,
    }
}

/// A group of flags made from the settings' definitions alone (ripgrep's `Flag`): each value is
/// kept by the setting's key and read by the options model's serde, as a job file's is, so adding
/// a setting of the group adds its flag, its help and its lowering.
pub trait FlagGroup {
    /// Whether `setting`'s flag is one of the group's.
    fn takes(setting: Setting) -> bool;

    /// The `--help` heading of the group's flags (`None`: the command's own).
    const HEADING: Option<&'static str> = None;

    /// Whether a flag whose value is a location completes file names in the shells (`--report`;
    /// `--ref-root` never has).
    const COMPLETES_PATHS: bool = false;
}

/// The values of a [`FlagGroup`]'s flags that were given, by the settings' keys.
#[derive(Debug, Clone)]
pub struct SettingFlags<G>(pub(crate) Map<String, Value>, PhantomData<G>);

impl<G> Default for SettingFlags<G> {
    fn default() -> Self {
        SettingFlags(Map::new(), PhantomData)
    }
}

impl<G> SettingFlags<G> {
    /// Flags with these values, by the settings' keys.
    pub(crate) fn of(values: Map<String, Value>) -> Self {
        SettingFlags(values, PhantomData)
    }

    /// The part of the options model the flags give (`RunOptions`, `StorageOptions`). Each value
    /// was read by the model as the flags were parsed.
    pub(crate) fn model<T: serde::de::DeserializeOwned>(&self) -> zshard_convert::Result<T> {
        serde_json::from_value(Value::Object(self.0.clone())).map_err(|e| {
            zshard_convert::Error::Options {
                reason: e.to_string(),
            }
        })
    }
}

/// `convert`'s flags of how the run goes: its settings of the run but the threads and the
/// worker's share, which other commands take too (with their own help).
#[derive(Debug, Clone, Default)]
pub struct Run;

impl FlagGroup for Run {
    fn takes(s: Setting) -> bool {
        s.group() == Group::Run
            && s.taken_by("convert")
            && !matches!(s, Setting::Threads | Setting::Worker | Setting::Workers)
    }

    const COMPLETES_PATHS: bool = true;
}

/// `convert`'s flags of how the run goes.
pub type RunFlags = SettingFlags<Run>;

/// The `--help` heading of the storage flags: where everything else comes from.
const STORAGE: &str = "Storage (these flags override the environment: AWS_*, AZURE_*, GOOGLE_*, STORAGE_EMULATOR_HOST, HTTPS_PROXY, HTTP_PROXY, NO_PROXY, SSL_CERT_FILE; see docs/cloud.md)";

/// The flags of reaching storage (both the source and the destination).
///
/// Everything else comes from each cloud's standard environment, and these flags override it:
/// S3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION / AWS_DEFAULT_REGION,
/// AWS_ENDPOINT_URL (with AWS_ALLOW_HTTP=true for http://), AWS_VIRTUAL_HOSTED_STYLE_REQUEST;
/// Azure: AZURE_STORAGE_ACCOUNT_NAME, AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN,
/// AZURE_STORAGE_ENDPOINT (with AZURE_ALLOW_HTTP=true), AZURE_STORAGE_USE_EMULATOR with
/// AZURITE_BLOB_STORAGE_URL; GCS: GOOGLE_SERVICE_ACCOUNT, GOOGLE_APPLICATION_CREDENTIALS,
/// GOOGLE_BASE_URL, STORAGE_EMULATOR_HOST; all: HTTPS_PROXY, HTTP_PROXY, NO_PROXY, SSL_CERT_FILE
/// (a CA bundle), and <PREFIX>_TIMEOUT / _CONNECT_TIMEOUT / _PROXY_URL (e.g. AWS_PROXY_URL).
#[derive(Debug, Clone, Default)]
pub struct Storage;

impl FlagGroup for Storage {
    fn takes(s: Setting) -> bool {
        s.group() == Group::Storage
    }

    const HEADING: Option<&'static str> = Some(STORAGE);
}

/// The storage flags, lowered to `StorageOptions`.
pub type StorageFlags = SettingFlags<Storage>;

/// The flags of how the source is read.
#[derive(Debug, Clone, Default)]
pub struct Input;

impl FlagGroup for Input {
    fn takes(s: Setting) -> bool {
        s.group() == Group::Source
    }
}

/// The source flags, lowered to `SourceOptions` (each one alone: see `lower::source`).
pub type SourceFlags = SettingFlags<Input>;

impl<G: FlagGroup> SettingFlags<G> {
    /// The settings given, in their definitions' order.
    pub(crate) fn given(&self) -> Vec<Setting> {
        flags_of::<G>()
            .filter(|s| self.0.contains_key(s.key()))
            .collect()
    }
}

/// Whether the value of `setting`'s flag is read by the library as it lowers, a conversion error
/// (exit 1) rather than a usage error: the source's kind and `--on-unsupported`, the shapes (whose
/// dimension names are checked against the arrays) and the worker (checked with the environment's
/// job array).
fn read_when_lowered(setting: Setting) -> bool {
    matches!(
        setting,
        Setting::SourceFormat
            | Setting::OnUnsupported
            | Setting::ShardShape
            | Setting::ChunkShape
            | Setting::Worker
    )
}

/// The settings of the group `G`, in their definitions' order.
pub(crate) fn flags_of<G: FlagGroup>() -> impl Iterator<Item = Setting> {
    Setting::ALL.iter().copied().filter(|s| G::takes(*s))
}

/// The flag of `setting`: a switch, or a flag whose value the options model reads (so that a value
/// it refuses is a usage error naming the flag, as clap's own parsers make).
fn flag<G: FlagGroup>(setting: Setting) -> Arg {
    // clap takes a `'static` name (without its `string` feature); a few are made per command built.
    let long: &'static str = setting.flag().trim_start_matches('-').to_string().leak();
    let arg = described_by(Arg::new(setting.key()).long(long), setting);
    match setting.value_name() {
        None => arg.action(ArgAction::SetTrue),
        Some(value) => {
            let arg = arg.value_name(value).action(match setting.python_type() {
                // A list: the flag is repeated.
                "Strings" => ArgAction::Append,
                _ => ArgAction::Set,
            });
            let arg = match read_when_lowered(setting) {
                true => {
                    arg.value_parser(|text: &str| Ok::<_, String>(Value::String(text.to_string())))
                }
                false => arg.value_parser(move |text: &str| model_value(setting, text)),
            };
            // A path: shells complete file names.
            match setting.python_type() {
                "Location" if G::COMPLETES_PATHS => arg.value_hint(clap::ValueHint::AnyPath),
                _ => arg,
            }
        }
    }
}

/// `text` as the value of `setting` in the options model: as text, else as the number it reads as.
/// A whole number (Python's `int`) is read as clap reads one, so that its error says the same.
fn model_value(setting: Setting, text: &str) -> Result<Value, String> {
    let read = |value: &Value| {
        let document = Value::Object(Map::from_iter([(setting.key().to_string(), value.clone())]));
        serde_json::from_value::<Options>(document).map(|_| ())
    };
    if setting.python_type() == "Strings" {
        let item = Value::String(text.to_string());
        return read(&Value::Array(vec![item.clone()]))
            .map(|()| item)
            .map_err(|e| e.to_string());
    }
    if setting.python_type() == "int" {
        let n = Value::from(text.parse::<u64>().map_err(|e| e.to_string())?);
        return read(&n).map(|()| n).map_err(|e| e.to_string());
    }
    let as_text = Value::String(text.to_string());
    let Err(e) = read(&as_text) else {
        return Ok(as_text);
    };
    match serde_json::from_str::<serde_json::Number>(text.trim()) {
        Ok(n) if read(&Value::Number(n.clone())).is_ok() => Ok(Value::Number(n)),
        _ => Err(e.to_string()),
    }
}

impl<G: FlagGroup> clap::Args for SettingFlags<G> {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        flags_of::<G>().fold(cmd, |cmd, s| {
            let arg = flag::<G>(s);
            cmd.arg(match G::HEADING {
                Some(heading) => arg.help_heading(heading),
                None => arg,
            })
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

impl<G: FlagGroup> clap::FromArgMatches for SettingFlags<G> {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let mut values = Map::new();
        for setting in flags_of::<G>() {
            let key = setting.key();
            let value = match setting.value_name() {
                // A switch turns its setting off when it is a `--no-` flag.
                None => matches
                    .get_flag(key)
                    .then(|| Value::Bool(!setting.flag().starts_with("--no-"))),
                // A list: every value given.
                Some(_) if setting.python_type() == "Strings" => matches
                    .get_many::<Value>(key)
                    .map(|values| Value::Array(values.cloned().collect())),
                Some(_) => matches.get_one::<Value>(key).cloned(),
            };
            if let Some(value) = value {
                values.insert(key.to_string(), value);
            }
        }
        Ok(SettingFlags(values, PhantomData))
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// A size flag (`512MiB`, `4G`, `2GB`).
pub fn size(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// Options that decide the output; `convert`, `plan` and `finalize` must be given the same ones.
#[derive(clap::Args, Debug, Clone)]
pub struct LayoutArgs {
    /// Source: a Zarr, kerchunk, Icechunk, zip or N5 path or URL
    ///
    /// Source: a Zarr v2 or v3 array or group, a kerchunk reference set (JSON or Parquet), an
    /// Icechunk repository, a zip store or an N5 container (a path or a file://, s3://, gs://,
    /// az:// or http(s):// URL). `plan` and `finalize` also take a job file (JOB.toml) alone here,
    /// and `finalize` DST alone (the source and options its claim records); `convert` runs a job
    /// file with `zshard run JOB.toml`.
    pub(crate) src: String,
    /// Destination: the sharded Zarr v3 output (a path or URL)
    ///
    /// Destination of the sharded Zarr v3 array or group (a path or a file://, s3://, gs:// or
    /// az:// URL).
    pub(crate) dst: Option<String>,
    #[command(flatten)]
    pub(crate) layout: LayoutFlags,
    #[command(flatten)]
    pub(crate) whole: WholeFlags,
    #[command(flatten)]
    pub(crate) source: SourceFlags,
    #[command(flatten)]
    pub(crate) storage: StorageFlags,
    #[command(flatten)]
    pub(crate) output: OutputFlags,
}

/// The flags of an array's layout (shapes, codecs, index, passthrough).
#[derive(Debug, Clone, Default)]
pub struct Layout;

impl FlagGroup for Layout {
    fn takes(s: Setting) -> bool {
        s.group() == Group::Layout
    }
}

/// The layout flags, lowered to `LayoutOptions`.
pub type LayoutFlags = SettingFlags<Layout>;

/// The flags of a whole conversion's output (pyramid levels, consolidation, OME metadata).
#[derive(Debug, Clone, Default)]
pub struct Whole;

impl FlagGroup for Whole {
    fn takes(s: Setting) -> bool {
        s.group() == Group::Conversion
    }
}

/// The flags of a whole conversion's output.
pub type WholeFlags = SettingFlags<Whole>;

/// The flags of what kind of output DST is (a Zarr store, or an Icechunk commit).
#[derive(Debug, Clone, Default)]
pub struct Output;

impl FlagGroup for Output {
    fn takes(s: Setting) -> bool {
        s.group() == Group::Output
    }
}

/// The output flags, lowered to `OutputOptions`.
pub type OutputFlags = SettingFlags<Output>;

/// The flags of which share of the shards this process converts (`convert` and `run`).
#[derive(Debug, Clone, Default)]
pub struct Share;

impl FlagGroup for Share {
    fn takes(s: Setting) -> bool {
        matches!(s, Setting::Worker | Setting::Workers)
    }
}

/// `--worker` and `--workers`.
pub type ShareFlags = SettingFlags<Share>;

impl ShareFlags {
    /// `--worker I/N` as given (checked as the partition is resolved).
    pub(crate) fn worker(&self) -> Option<String> {
        self.0
            .get(Setting::Worker.key())
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    /// `--workers N`.
    pub(crate) fn workers(&self) -> Option<u64> {
        self.0.get(Setting::Workers.key()).and_then(Value::as_u64)
    }

    /// The flags `--worker worker --workers workers` would give.
    pub(crate) fn of_share(worker: Option<String>, workers: Option<u64>) -> Self {
        let mut values = Map::new();
        if let Some(worker) = worker {
            values.insert(Setting::Worker.key().into(), Value::String(worker));
        }
        if let Some(workers) = workers {
            values.insert(Setting::Workers.key().into(), Value::from(workers));
        }
        SettingFlags::of(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zshard_convert::options::CoalesceGap;

    /// A flag's help is its setting's, except where a command says more of it (listed here).
    #[test]
    fn every_flag_of_a_setting_is_described_by_it() {
        let own = [
            ("plan", Setting::Threads),
            ("plan", Setting::MemoryLimit),
            ("finalize", Setting::KeepManifest),
            ("verify", Setting::MemoryLimit),
            ("verify", Setting::Ome),
        ];
        let cli = crate::command();
        let mut described = 0;
        for command in cli.get_subcommands() {
            for arg in command.get_arguments() {
                let Some(setting) = arg.get_long().and_then(setting_of) else {
                    continue;
                };
                let help = arg.get_help().map(ToString::to_string);
                let long = arg.get_long_help().map(ToString::to_string);
                let name = command.get_name();
                if own.contains(&(name, setting)) {
                    assert_ne!(
                        help.as_deref(),
                        Some(setting.short_help()),
                        "{name} {setting:?}"
                    );
                } else {
                    assert_eq!(
                        help.as_deref(),
                        Some(setting.short_help()),
                        "{name} {setting:?}"
                    );
                    assert_eq!(
                        long.as_deref(),
                        Some(short_help(setting)),
                        "{name} {setting:?}"
                    );
                    // One line of `-h` each (issue 44, point 10).
                    assert!(!setting.short_help().contains('\n'), "{setting:?}");
                    described += 1;
                }
                let values: Vec<String> = arg
                    .get_value_names()
                    .unwrap_or_default()
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                if arg.get_action().takes_values() {
                    let value = values.first().map(String::as_str);
                    assert_eq!(value, setting.value_name(), "{name} {setting:?}");
                }
            }
        }
        assert!(described > 80, "{described}");
    }

    /// The flags made from the settings alone give the model what a job file's keys give it.
    #[test]
    fn run_flags_read_as_the_job_keys() {
        use clap::FromArgMatches;
        let cli = <RunFlags as clap::Args>::augment_args(clap::Command::new("t"));
        let matches = cli
            .try_get_matches_from([
                "t",
                "--overwrite",
                "--checkpoint-interval",
                "500ms",
                "--memory-limit",
                "4GiB",
                "--report",
                "r.json",
            ])
            .expect("parses");
        let flags = RunFlags::from_arg_matches(&matches).expect("reads");
        let run: zshard_convert::options::RunOptions =
            serde_json::from_value(Value::Object(flags.0)).expect("the model reads it");
        let job = [
            (Setting::Overwrite, Value::Bool(true)),
            (Setting::CheckpointInterval, "500ms".into()),
            (Setting::MemoryLimit, "4GiB".into()),
            (Setting::Report, "r.json".into()),
        ]
        .map(|(s, value)| (s.key().to_string(), value));
        let job: zshard_convert::options::RunOptions =
            serde_json::from_value(Value::Object(Map::from_iter(job))).expect("a job's keys");
        assert_eq!(run, job);
        assert_eq!(run.keep_manifest, None, "a switch not given is not set");
        let refused = clap::Command::new("t")
            .args(flags_of::<Run>().map(flag::<Run>))
            .try_get_matches_from(["t", "--checkpoint-interval", "2h"])
            .expect_err("out of range");
        assert!(
            refused
                .to_string()
                .contains("is a duration from 10ms to 1h"),
            "{refused}"
        );
    }

    /// The storage flags are the storage settings' own, on every command that takes them, and give
    /// the model what a job file's `[storage]` keys give it.
    #[test]
    fn storage_flags_are_the_storage_settings_and_read_as_the_job_keys() {
        use clap::FromArgMatches;
        let storage: Vec<Setting> = Setting::ALL
            .iter()
            .copied()
            .filter(|s| s.group() == Group::Storage)
            .collect();
        let cli = crate::command();
        for command in cli.get_subcommands() {
            let name = command.get_name();
            let flags: Vec<Setting> = command
                .get_arguments()
                .filter_map(|a| a.get_long().and_then(setting_of))
                .filter(|s| s.group() == Group::Storage)
                .collect();
            let taken: Vec<Setting> = storage
                .iter()
                .copied()
                .filter(|s| s.taken_by(name) || (name == "run" && s.taken_by("convert")))
                .collect();
            assert_eq!(flags, taken, "{name}");
            for arg in command.get_arguments().filter(|a| {
                a.get_long()
                    .and_then(setting_of)
                    .is_some_and(|s| s.group() == Group::Storage)
            }) {
                assert_eq!(arg.get_help_heading(), Some(STORAGE), "{name}");
            }
        }
        let cli = <StorageFlags as clap::Args>::augment_args(clap::Command::new("t"));
        let matches = cli
            .try_get_matches_from([
                "t",
                "--s3-endpoint",
                "http://127.0.0.1:9000",
                "--anonymous",
                "--retries",
                "3",
                "--part-size",
                "8MiB",
                "--io-threads",
                "4",
            ])
            .expect("parses");
        let flags = StorageFlags::from_arg_matches(&matches).expect("reads");
        let options: zshard_convert::options::StorageOptions = flags.model().expect("reads");
        let job: zshard_convert::options::StorageOptions = toml::from_str(
            "s3_endpoint = \"http://127.0.0.1:9000\"\nanonymous = true\nretries = 3\n\
             part_size = \"8MiB\"\nio_threads = 4\n",
        )
        .expect("a job's [storage]");
        assert_eq!(options, job);
        assert_eq!(
            options.part_size,
            Some(zshard_convert::options::Size(8 << 20))
        );
        assert_eq!(options.s3_path_style, None, "a switch not given is not set");
        let refused = clap::Command::new("t")
            .args(flags_of::<Storage>().map(flag::<Storage>))
            .try_get_matches_from(["t", "--retries", "x"])
            .expect_err("not a number");
        assert!(
            refused
                .to_string()
                .contains("invalid value 'x' for '--retries <N>': invalid digit found in string"),
            "{refused}"
        );
    }

    /// `convert -h` fits one screen: one line per flag (issue 44, point 10); `--help` has each
    /// flag's whole text and the examples.
    #[test]
    fn convert_short_help_fits_one_screen() {
        let mut cli = crate::command();
        let convert = cli.find_subcommand_mut("convert").expect("convert");
        let short = convert.render_help().to_string();
        let lines = short.lines().count();
        assert!(lines <= 60, "{lines} lines:\n{short}");
        assert!(short.contains("--shard-shape"), "{short}");
        let long = convert.render_long_help().to_string();
        let shard_help = short_help(Setting::ShardShape);
        assert!(long.contains(shard_help), "{long}");
        assert!(long.contains("Examples:"), "{long}");
    }

    /// `--ref-coalesce-gap` reads as the model reads the job key: a size, or `off`.
    #[test]
    fn coalesce_gap_values() {
        let gap = |text: &str| {
            let value = model_value(Setting::RefCoalesceGap, text)?;
            let flags = SourceFlags::of(Map::from_iter([("ref_coalesce_gap".into(), value)]));
            let options: zshard_convert::options::SourceOptions =
                flags.model().map_err(|e| e.to_string())?;
            Ok::<_, String>(options.ref_coalesce_gap)
        };
        assert_eq!(gap("off"), Ok(Some(CoalesceGap(None))));
        assert_eq!(gap("64KiB"), Ok(Some(CoalesceGap(Some(65536)))));
        assert_eq!(gap("0"), Ok(Some(CoalesceGap(Some(0)))));
        assert!(gap("lots").is_err());
    }
}
