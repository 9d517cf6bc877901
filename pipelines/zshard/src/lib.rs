//! The `zshard` command line, as a library: the `zshard` binary and the Python package's `zshard`
//! command both call [`main`], and the Python module builds its conversions with [`request`] from
//! the same flags, so every front end shares their names, defaults and checks.

use std::ffi::OsString;
use std::path::PathBuf;

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
        /// What the conversion was given: with upgrade (the default), an OME-Zarr 0.4 source is
        /// compared in its 0.5 form.
        #[arg(long, default_value = "upgrade", value_name = "upgrade|keep")]
        ome: zshard_convert::OmeMetadata,
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
            let conversion =
                convert_conversion(&layout, threads, &workers, overwrite, memory_limit, report)?;
            signals::cancel_on_signals(conversion.cancel.clone())?;
            print::convert(&conversion, quiet)
        }
        Command::Finalize { layout, quiet } => {
            let finalized = layout.conversion()?.finalize()?;
            print::finalized(&finalized, quiet);
            Ok(())
        }
        Command::Plan {
            layout,
            threads,
            memory_limit,
            json,
        } => {
            let conversion = plan_conversion(&layout, threads, memory_limit)?;
            print::plan(&conversion.plan()?, json)
        }
        Command::Verify {
            src,
            dst,
            source,
            storage,
            sample,
            threads,
            ome,
            quiet,
        } => {
            let mut verification = verification(src, dst, &source, &storage, sample, threads)?;
            verification.ome = ome;
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

/// The conversion `zshard convert` runs. Options that do not parse are a failed run too: the report
/// (if one is asked for) says so.
fn convert_conversion(
    layout: &LayoutArgs,
    threads: Option<usize>,
    workers: &WorkerArgs,
    overwrite: bool,
    memory_limit: Option<u64>,
    report: Option<PathBuf>,
) -> zshard_convert::Result<Conversion> {
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
        if let Err(report_error) = conversion.report_failure(&e) {
            eprintln!("zshard: warning: {}", one_line(&report_error));
        }
        return Err(e);
    }
    Ok(conversion)
}

/// The conversion `zshard plan` plans.
fn plan_conversion(
    layout: &LayoutArgs,
    threads: Option<usize>,
    memory_limit: Option<u64>,
) -> zshard_convert::Result<Conversion> {
    let mut conversion = layout.conversion()?;
    conversion.threads = threads.unwrap_or_else(default_threads);
    conversion.memory_limit = memory_limit;
    Ok(conversion)
}

/// The verification `zshard verify` runs.
fn verification(
    src: String,
    dst: String,
    source: &SourceArgs,
    storage: &StorageArgs,
    sample: f64,
    threads: Option<usize>,
) -> zshard_convert::Result<Verification> {
    let mut verification = Verification::new(src, dst);
    verification.source_options = source.options()?;
    verification.store_options = storage.options();
    verification.io_threads = storage.io_threads;
    verification.sample = sample;
    verification.threads = threads.unwrap_or_else(default_threads);
    Ok(verification)
}

/// What a `convert`, `plan`, `finalize` or `verify` command line asks for, ready to run.
#[derive(Debug)]
#[non_exhaustive]
pub enum Request {
    /// `zshard convert`: run [`Conversion::convert`].
    Convert(Box<Conversion>),
    /// `zshard plan`: run [`Conversion::plan`].
    Plan(Box<Conversion>),
    /// `zshard finalize`: run [`Conversion::finalize`].
    Finalize(Box<Conversion>),
    /// `zshard verify`: run [`Verification::run`].
    Verify(Box<Verification>),
}

/// Why a command line does not make a [`Request`].
#[derive(Debug)]
#[non_exhaustive]
pub enum RequestError {
    /// A flag that does not exist, a value that does not parse, or a subcommand that is not a request
    /// (the message, on one line).
    Usage(String),
    /// Options that parse but do not hold (a worker, a source format, ...).
    Options(zshard_convert::Error),
}

/// The conversion or verification that `args` (a `zshard` command line, program name first) asks
/// for, with every option checked as the command checks it; nothing is run.
pub fn request<I, T>(args: I) -> Result<Request, RequestError>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = Cli::try_parse_from(args).map_err(|e| RequestError::Usage(clap_message(&e)))?;
    let request = match cli.command {
        Command::Convert {
            layout,
            threads,
            workers,
            overwrite,
            memory_limit,
            report,
            quiet: _,
        } => convert_conversion(&layout, threads, &workers, overwrite, memory_limit, report)
            .map(|c| Request::Convert(Box::new(c))),
        Command::Plan {
            layout,
            threads,
            memory_limit,
            json: _,
        } => plan_conversion(&layout, threads, memory_limit).map(|c| Request::Plan(Box::new(c))),
        Command::Finalize { layout, quiet: _ } => {
            layout.conversion().map(|c| Request::Finalize(Box::new(c)))
        }
        Command::Verify {
            src,
            dst,
            source,
            storage,
            sample,
            threads,
            ome,
            quiet: _,
        } => verification(src, dst, &source, &storage, sample, threads).map(|mut v| {
            v.ome = ome;
            Request::Verify(Box::new(v))
        }),
        Command::Run { .. } | Command::Demo { .. } => {
            return Err(RequestError::Usage(
                "only convert, plan, finalize and verify are requests".into(),
            ))
        }
    };
    request.map_err(RequestError::Options)
}

/// clap's message on one line: its first paragraph (the usage and tips after the blank line are
/// dropped), without its `error: ` prefix.
fn clap_message(e: &clap::Error) -> String {
    let text = e.to_string();
    let message: Vec<&str> = text
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty())
        .collect();
    message.join(" ").trim_start_matches("error: ").to_string()
}

/// Parses the command line; usage errors become one line (`--help` and `--version` print as usual).
fn parse_cli(args: impl IntoIterator<Item = OsString>) -> Result<Cli, u8> {
    Cli::try_parse_from(args).map_err(|e| {
        use clap::error::ErrorKind;
        if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
            || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
        eprintln!("zshard: error: {} (see zshard --help)", clap_message(&e));
        2
    })
}

/// Runs the `zshard` command with `args` (the program name first, as `std::env::args_os` gives it)
/// and returns its exit status: 0, 1 on failure, 2 on a usage error, 128 + the signal when stopped
/// by one.
pub fn main(args: impl IntoIterator<Item = OsString>) -> u8 {
    let cli = match parse_cli(args) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    match run(cli) {
        Ok(()) => 0,
        Err(e) => match signals::received() {
            // Stopped by a signal: exit as a shell reports a process that the signal ended.
            Some(signal) => {
                eprintln!(
                    "zshard: stopped by {}: {}",
                    signals::name(signal),
                    one_line(e.as_ref())
                );
                u8::try_from(signals::exit_code(signal)).unwrap_or(u8::MAX)
            }
            None => {
                eprintln!("zshard: error: {}", one_line(e.as_ref()));
                1
            }
        },
    }
}
