//! The `zshard` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod args;
mod demo;
mod job;
mod print;
mod progress;
mod signals;

use args::{LayoutArgs, SourceArgs, StorageArgs, WorkerArgs};
use zshard_convert::{one_line, Conversion, Verification};

const CONVERT_HELP: &str = "\
Examples:
  # A Zarr v2 array into 4096x4096 shards of 256x256 inner chunks, zstd level 3:
  zshard convert input.zarr output.zarr --shard-shape 4096,4096 --chunk-shape 256,256 --compressor zstd:3

  # A whole group (every array below it), index at the start of each shard, blosc:
  zshard convert climate.zarr climate-sharded.zarr --index-location start --compressor blosc:zstd:5:bitshuffle

  # Any inner codec chain, as Zarr v3 JSON (here: big-endian, gzip, with a checksum):
  zshard convert in.zarr out.zarr --compressor '[{\"name\": \"bytes\", \"configuration\": {\"endian\": \"big\"}},
    {\"name\": \"gzip\", \"configuration\": {\"level\": 6}}, \"crc32c\"]'

  # One 4 GiB shard on a small node: converted and written in parts, peak memory under 512 MiB:
  zshard convert volume.zarr volume-sharded.zarr --shard-shape 2048,2048,1024 \\
    --chunk-shape 128,128,128 --memory-limit 512MiB

Shapes:
  --chunk-shape defaults to the source chunk shape (for an already sharded v3 source: its inner chunk
  shape). --shard-shape defaults to an automatic choice: starting from the inner chunk shape, the
  dimension with the fewest inner chunks per shard is doubled (the last one on ties) while the shard's
  uncompressed size stays within 64 MiB and the shard does not extend past the array (rounded up to
  whole inner chunks). Both must have one entry per array dimension, and every --chunk-shape entry must
  divide the --shard-shape entry; otherwise nothing is written.

Output:
  Zarr v3, C order, little-endian `bytes` codec (`vlen-utf8` for strings) unless --compressor gives a
  chain; source byte orders and order F are converted on the way. Inner chunks holding only the fill value are not
  stored, and shards holding only such chunks are not written. Each shard appears under its key only
  when complete; zarr.json documents are written after all data.";

#[derive(Parser, Debug)]
#[command(
    name = "zshard",
    version,
    about = "Convert chunked arrays into sharded Zarr v3 (sharding_indexed)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Convert a Zarr v2 or v3 array or group into sharded Zarr v3.
    #[command(after_help = CONVERT_HELP)]
    Convert {
        #[command(flatten)]
        layout: LayoutArgs,
        /// Worker threads per CPU stage (default: the number of cores).
        #[arg(long, value_name = "N")]
        threads: Option<usize>,
        #[command(flatten)]
        workers: WorkerArgs,
        /// Replace whatever DST holds (otherwise a DST from a run with other options is refused,
        /// and one from a run with the same options is resumed).
        #[arg(long)]
        overwrite: bool,
        /// Peak memory not to exceed, e.g. 512MiB or 4G (G and GiB: 2^30 bytes, GB: 10^9; default: half of the machine's memory, or
        /// of the cgroup's limit). Shards bigger than fits are processed and written in parts of whole
        /// inner chunks, so any shard size fits; fewer threads are used if needed, and a conversion
        /// whose source chunks cannot fit even then is refused before it starts.
        #[arg(long, value_parser = args::size, value_name = "SIZE")]
        memory_limit: Option<u64>,
        /// Write a JSON report however the run ends (status ok, failed, cancelled or complete; the
        /// error; options, version, host, worker, times; counts per array and in total, bytes,
        /// throughput). {worker}, {host} and {date} (the start, UTC, 20261124T155057Z) in FILE are
        /// replaced.
        #[arg(long, value_name = "FILE.json")]
        report: Option<PathBuf>,
        /// No progress bar and no summary.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Show what a conversion would do (per array: shapes, chunk and shard counts, codecs, sizes,
    /// peak memory) without writing or reading any chunk; fails on everything convert would reject.
    Plan {
        #[command(flatten)]
        layout: LayoutArgs,
        /// Worker threads per CPU stage assumed for the memory estimate (default: the number of cores).
        #[arg(long, value_name = "N")]
        threads: Option<usize>,
        /// The memory limit convert would get (see `zshard convert --help`).
        #[arg(long, value_parser = args::size, value_name = "SIZE")]
        memory_limit: Option<u64>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// After a partitioned conversion: check that every shard is done, then write the metadata.
    Finalize {
        #[command(flatten)]
        layout: LayoutArgs,
        /// No summary.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Compare an output with its source element by element and check every shard index; exits
    /// non-zero on any mismatch, listing them per chunk.
    Verify {
        /// The source that was converted.
        src: String,
        /// The sharded Zarr v3 output.
        dst: String,
        #[command(flatten)]
        source: SourceArgs,
        #[command(flatten)]
        storage: StorageArgs,
        /// Check only this fraction of shards (a deterministic sample), e.g. 0.01.
        #[arg(long, default_value_t = 1.0, value_name = "FRACTION")]
        sample: f64,
        /// Worker threads per CPU stage (default: the number of cores).
        #[arg(long, value_name = "N")]
        threads: Option<usize>,
        /// No summary when everything matches.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Run a declarative job file (sources, destination, per-array shapes, compressor, ...); see
    /// the commented examples in pipelines/*.toml.
    Run {
        /// The job file (TOML).
        job: PathBuf,
        #[command(flatten)]
        workers: WorkerArgs,
        #[command(flatten)]
        storage: StorageArgs,
        /// No progress bar and no summary.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Build a small sample Zarr v2 dataset, convert it, and show how to open the result.
    Demo {
        /// Folder for the demo's source and output.
        #[arg(long, default_value = "zshard-demo")]
        dir: PathBuf,
        /// Worker threads per CPU stage (default: the number of cores).
        #[arg(long, value_name = "N")]
        threads: Option<usize>,
        /// No progress bar and no summary.
        #[arg(long, short)]
        quiet: bool,
    },
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Convert {
            layout,
            threads,
            workers,
            overwrite,
            memory_limit,
            report,
            quiet,
        } => {
            let mut conversion = Conversion::new(&layout.src, &layout.dst);
            conversion.threads = threads.unwrap_or_else(default_threads);
            conversion.memory_limit = memory_limit;
            conversion.overwrite = overwrite;
            conversion.report_path = report;
            let configured = layout
                .configure(&mut conversion)
                .and_then(|()| workers.partition())
                .map(|partition| conversion.partition = partition);
            if let Err(e) = configured {
                // Options that do not parse are a failed run too: its report says so.
                if let Err(report_error) = conversion.report_failure(&e) {
                    eprintln!("zshard: warning: {}", one_line(&report_error));
                }
                return Err(e.into());
            }
            signals::cancel_on_signals(conversion.cancel.clone())?;
            print::convert(&conversion, quiet)
        }
        Command::Finalize { layout, quiet } => {
            let conversion = layout.conversion()?;
            signals::cancel_on_signals(conversion.cancel.clone())?;
            let finalized = conversion.finalize()?;
            print::finalized(&finalized, quiet);
            Ok(())
        }
        Command::Plan {
            layout,
            threads,
            memory_limit,
            json,
        } => {
            let mut conversion = layout.conversion()?;
            conversion.threads = threads.unwrap_or_else(default_threads);
            conversion.memory_limit = memory_limit;
            signals::exit_on_signals()?;
            print::plan(&conversion.plan()?, json)
        }
        Command::Verify {
            src,
            dst,
            source,
            storage,
            sample,
            threads,
            quiet,
        } => {
            let mut verification = Verification::new(src, dst);
            verification.source_options = source.options()?;
            verification.store_options = storage.options();
            verification.io_threads = storage.io_threads;
            verification.sample = sample;
            verification.threads = threads.unwrap_or_else(default_threads);
            signals::exit_on_signals()?;
            print::verified(&verification.source, &verification.run()?, quiet)
        }
        Command::Run {
            job,
            workers,
            storage,
            quiet,
        } => job::run(&job, workers.partition()?, &storage, quiet),
        Command::Demo {
            dir,
            threads,
            quiet,
        } => demo::demo(&dir, threads.unwrap_or_else(default_threads), quiet),
    }
}

/// Parses the command line; usage errors become one line (`--help` and `--version` print as usual).
fn parse_cli() -> Result<Cli, ExitCode> {
    Cli::try_parse().map_err(|e| {
        use clap::error::ErrorKind;
        if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
            || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
        // clap's message is its first paragraph; the usage and tips after the blank line are dropped.
        let text = e.to_string();
        let message: Vec<&str> = text
            .lines()
            .map(str::trim)
            .skip_while(|l| l.is_empty())
            .take_while(|l| !l.is_empty())
            .collect();
        let message = message.join(" ");
        let message = message.trim_start_matches("error: ");
        eprintln!("zshard: error: {message} (see zshard --help)");
        // A command line that does not parse is a failed run too, when its report path can be found.
        if let Some(conversion) = usage_failure(std::env::args().skip(1).collect()) {
            let error = zshard_convert::Error::Options {
                reason: format!("{message} (see zshard --help)"),
            };
            if let Err(report_error) = conversion.report_failure(&error) {
                eprintln!("zshard: warning: {}", one_line(&report_error));
            }
        }
        ExitCode::from(2)
    })
}

/// For a `convert` command line that clap rejected: the conversion its report describes (SRC and DST
/// as far as they can be told, `--report` FILE), if it names a report. Flags are told apart from
/// their values with clap's own description of `convert`.
fn usage_failure(args: Vec<String>) -> Option<Conversion> {
    use clap::CommandFactory;
    let (command, rest) = args.split_first()?;
    if command != "convert" {
        return None;
    }
    let cli = Cli::command();
    let convert = cli.find_subcommand("convert")?;
    let takes_value = |long: &str| {
        convert
            .get_arguments()
            .find(|a| a.get_long() == Some(long))
            .is_some_and(|a| a.get_action().takes_values())
    };
    let (mut positionals, mut report) = (Vec::new(), None);
    let mut rest = rest.iter();
    while let Some(arg) = rest.next() {
        if let Some(long) = arg.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((name, value)) => (name, Some(value.to_string())),
                None => (long, None),
            };
            let value = match inline {
                None if takes_value(name) => rest.next().cloned(),
                value => value,
            };
            if name == "report" {
                report = value;
            }
        } else if !arg.starts_with('-') || arg == "-" {
            positionals.push(arg.clone());
        }
    }
    let report = report.filter(|r| !r.is_empty())?;
    let mut conversion = Conversion::new(
        positionals.first().cloned().unwrap_or_default(),
        positionals.get(1).cloned().unwrap_or_default(),
    );
    conversion.report_path = Some(PathBuf::from(report));
    Some(conversion)
}

fn main() -> ExitCode {
    let cli = match parse_cli() {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    let waits_for_signals = matches!(cli.command, Command::Plan { .. } | Command::Verify { .. });
    match run(cli) {
        // `plan` and `verify` exit at a signal, from the signal thread; one that arrived while they
        // were finishing must not turn into a success.
        Ok(()) if waits_for_signals && signals::received().is_some() => {
            let signal = signals::received().unwrap_or_default();
            eprintln!("zshard: stopped by {}", signals::name(signal));
            ExitCode::from(u8::try_from(signals::exit_code(signal)).unwrap_or(u8::MAX))
        }
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => match signals::received() {
            // Stopped by a signal: exit as a shell reports a process that the signal ended.
            Some(signal) => {
                eprintln!(
                    "zshard: stopped by {}: {}",
                    signals::name(signal),
                    one_line(e.as_ref())
                );
                ExitCode::from(u8::try_from(signals::exit_code(signal)).unwrap_or(u8::MAX))
            }
            None => {
                eprintln!("zshard: error: {}", one_line(e.as_ref()));
                ExitCode::FAILURE
            }
        },
    }
}
