//! The `zshard` command line, as a library: the `zshard` binary and the Python package's `zshard`
//! command both call [`main`], and the Python module builds its conversions with [`request`] from
//! the same flags. The flags (`args.rs`, clap's structs) are lowered into the library's options
//! model in one place (`lower.rs`); a job file (`job.rs`) is read into the same model; the
//! conversions are built from it by the library's one [`Conversion::configured`], the
//! verifications in one place ([`verification`]), and every default is the library's.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod args;
mod demo;
mod help;
mod job;
mod logging;
mod lower;
mod print;
mod progress;
mod signals;
mod status;

use args::{LayoutArgs, ShareFlags, SourceFlags, StorageFlags};
use lower::First;
use zshard_convert::options::{Options, RunOptions, Size, StatusOptions, VerifyOptions};
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
  divide the --shard-shape entry; otherwise nothing is written. Or give extents by dimension name
  (dimension_names, xarray's _ARRAY_DIMENSIONS), which apply to every array with those dimensions:
  --shard-shape time=48,lat=720 --chunk-shape lon=1440; the dimensions not named keep the defaults
  above (the automatic shard shape grows only them), and a name no array has is an error.

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
    #[command(flatten)]
    progress: progress::ProgressArgs,
    #[command(flatten)]
    logging: logging::LoggingArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Convert a Zarr v2 or v3 array or group, a kerchunk reference set, an Icechunk repository, a
    /// zip store or an N5 container into sharded Zarr v3.
    #[command(
        after_help = "Examples, shapes, output and every option's details: zshard convert --help",
        after_long_help = CONVERT_HELP
    )]
    Convert {
        #[command(flatten)]
        layout: LayoutArgs,
        #[arg(long)]
        threads: Option<usize>,
        #[command(flatten)]
        workers: ShareFlags,
        #[command(flatten)]
        run: args::RunFlags,
        /// No progress bar and no summary.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Show what a conversion would do (per array: shapes, chunk and shard counts, codecs, sizes,
    /// peak memory) and what it would cost (the source's stored bytes, from one listing of its
    /// chunks; every request by kind, the state's included; an estimate of time and S3 request
    /// price, with what it assumes) without writing or reading any chunk; fails on everything
    /// convert would reject, the destination included (it lists and reads DST: a missing bucket,
    /// missing credentials, a claim of other options).
    #[command(after_help = help::PLAN)]
    Plan {
        #[command(flatten)]
        layout: LayoutArgs,
        /// Worker threads per CPU stage assumed for the memory estimate, at least 1 (default: the
        /// number of cores; more than 4 per core, or than 1024, are capped to that, with a warning).
        #[arg(long)]
        threads: Option<usize>,
        /// The memory limit convert would get (see `zshard convert --help`).
        #[arg(long, value_parser = args::size)]
        memory_limit: Option<u64>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
        // Described by its setting (`Setting::EstimateWith`).
        #[arg(long)]
        estimate_with: Option<zshard_convert::Stated>,
    },
    /// After a partitioned conversion: check that every shard is done, then write the metadata
    /// (`finalize DST` alone: the source and options recorded in DST's claim).
    #[command(after_help = help::FINALIZE)]
    Finalize {
        #[command(flatten)]
        layout: LayoutArgs,
        /// Keep the checksum manifest of every shard written (DST/.zshard/manifest.tsv), merged
        /// from the workers' records, for `zshard verify --manifest DST`.
        #[arg(long)]
        keep_manifest: bool,
        /// No summary.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Compare an output with its source element by element and check every shard index; exits
    /// non-zero on any mismatch, listing them per chunk.
    #[command(after_help = help::VERIFY)]
    Verify {
        /// The source that was converted, or a job file (JOB.toml) alone: each of its conversions;
        /// with --manifest, the output alone.
        src: String,
        /// The sharded Zarr v3 output.
        dst: Option<String>,
        #[command(flatten)]
        source: SourceFlags,
        #[command(flatten)]
        storage: StorageFlags,
        #[arg(long)]
        sample: Option<f64>,
        /// Peak memory not to exceed, e.g. 512MiB or 4G: shards are compared in parts that fit, as
        /// convert writes them (default: convert's, half of the machine's or the cgroup's memory).
        #[arg(long, value_parser = args::size)]
        memory_limit: Option<u64>,
        #[arg(long)]
        manifest: bool,
        #[arg(long)]
        threads: Option<usize>,
        /// What the conversion was given: with upgrade (the default), an OME-Zarr 0.4 source is
        /// compared in its 0.5 form, with 0.6 in its 0.6 form (a pyramid zshard made is recognised
        /// as 0.6 by itself). A job file says it itself (its `ome` key).
        #[arg(long)]
        ome: Option<zshard_convert::OmeMetadata>,
        /// No summary when everything matches.
        #[arg(long, short)]
        quiet: bool,
    },
    /// List the arrays of a source as convert reads them: path, data type, shape, chunks (an
    /// already sharded source's inner chunks and shards) and codecs, from metadata alone.
    Ls {
        /// A Zarr v2 or v3 array or group, or a kerchunk reference set (a path or URL).
        src: String,
        #[command(flatten)]
        source: SourceFlags,
        #[command(flatten)]
        storage: StorageFlags,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run a declarative job file (sources, destination, per-array shapes, compressor, ...); see
    /// the commented examples in pipelines/*.toml.
    #[command(after_help = help::RUN)]
    Run {
        /// The job file (TOML).
        job: PathBuf,
        #[command(flatten)]
        workers: ShareFlags,
        #[command(flatten)]
        storage: StorageFlags,
        /// No progress bar and no summary.
        #[arg(long, short)]
        quiet: bool,
    },
    /// Build a small sample Zarr v2 dataset, convert it, and show how to open the result.
    #[command(after_help = help::DEMO)]
    Demo {
        /// Folder for the demo's source and output.
        #[arg(long, default_value = "zshard-demo")]
        dir: PathBuf,
        #[arg(long)]
        threads: Option<usize>,
        /// No progress bar and no summary.
        #[arg(long, short)]
        quiet: bool,
    },
    /// How far a conversion into DST has come, from DST alone: per array shards done and planned
    /// and bytes written, per worker its shards and whether its lease is live or stale, and what
    /// `finalize` still waits for. Read-only; never reads a shard.
    #[command(after_help = status::HELP)]
    Status {
        /// The destination of the conversion (a path or a file://, s3://, gs:// or az:// URL), or a
        /// job file (JOB.toml): the destination of each of its conversions.
        dst: String,
        #[command(flatten)]
        storage: StorageFlags,
        #[arg(long, num_args = 0..=1, default_missing_value = "2")]
        watch: Option<zshard_convert::options::Interval>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print a shell completion script for bash, zsh, fish, elvish or powershell.
    #[command(after_help = help::COMPLETIONS)]
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) of zshard or of one of its commands, for `man -l -` or a man
    /// directory.
    #[command(after_help = help::MAN)]
    Man {
        /// A command (convert, plan, ...): its own page, zshard-COMMAND(1).
        command: Option<String>,
    },
}

/// An error of one conversion of a job file names the job and the conversion; with SRC DST it
/// stands as it is.
pub(crate) fn in_job<T>(
    job: Option<&str>,
    source: &str,
    destination: &str,
    result: zshard_convert::Result<T>,
) -> anyhow::Result<T> {
    match job {
        None => Ok(result?),
        Some(job) => result.with_context(|| {
            let job =
                std::fs::canonicalize(job).map_or_else(|_| job.into(), |p| p.display().to_string());
            format!("job file {job}: conversion {source} -> {destination}")
        }),
    }
}

/// Whether `command` runs the conversions of a job file, whose messages name settings by the job
/// file's keys (`chunk_shape`) rather than by the flags (`--chunk-shape`).
fn runs_a_job(command: &Command) -> bool {
    match command {
        Command::Plan { layout, .. } | Command::Finalize { layout, .. } => layout.dst.is_none(),
        Command::Verify { dst, manifest, .. } => dst.is_none() && !manifest,
        Command::Run { .. } => true,
        Command::Status { dst, .. } => dst.ends_with(".toml"),
        _ => false,
    }
}

/// The one place the command line builds a verification: from the options model.
fn verification(options: &VerifyOptions) -> Verification {
    Verification::from_options(options)
}

/// The conversions that plan and finalize run: SRC into DST as the flags say, or those of the job
/// file SRC when there is no DST (then only the storage flags may be given with it).
fn conversions(layout: &LayoutArgs) -> anyhow::Result<Vec<Options>> {
    let Some(dst) = &layout.dst else {
        refuse_options_beside_job(layout)?;
        let storage = lower::storage(&layout.storage)?;
        return job::load(layout.src.as_ref(), &storage, None);
    };
    let mut first = First::default();
    let options = lower::conversion(layout, dst, &mut first);
    first.result()?;
    Ok(vec![options])
}

/// The conversions that finalize runs: as [`conversions`], each completed from what its DST
/// records; a lone operand that is no job file is DST, whose claim gives the source and options.
fn finalized_conversions(layout: &LayoutArgs) -> anyhow::Result<Vec<Options>> {
    if layout.dst.is_none() && !layout.src.ends_with(".toml") {
        let mut first = First::default();
        let mut options = lower::conversion(layout, &layout.src, &mut first);
        first.result()?;
        options.source = String::new();
        return Ok(vec![options.with_recorded()?]);
    }
    let job = layout.dst.is_none().then_some(layout.src.as_str());
    conversions(layout)?
        .into_iter()
        .map(|options| {
            let recorded = options.with_recorded();
            in_job(job, &options.source, &options.destination, recorded)
        })
        .collect()
}

/// A job file holds the options; flags that would be ignored beside it are refused.
fn refuse_options_beside_job(layout: &LayoutArgs) -> anyhow::Result<()> {
    if !layout.src.ends_with(".toml") {
        anyhow::bail!("DST is missing: give SRC DST, or a job file (JOB.toml) alone");
    }
    if !lower::given_beside_job(layout).is_empty() {
        let src = &layout.src;
        let job =
            std::fs::canonicalize(src).map_or_else(|_| src.clone(), |p| p.display().to_string());
        anyhow::bail!(
            "job file {job}: give the conversion's options in the job file, not as flags beside it (only storage flags apply)"
        );
    }
    Ok(())
}

fn run(cli: Cli) -> anyhow::Result<()> {
    cli.progress.install();
    cli.logging.install();
    match one_request(cli.command) {
        Ok(Parsed::Request(request, printing)) => run_request(*request, printing),
        Ok(Parsed::Other(command)) if runs_a_job(&command) => {
            zshard_convert::spelled(zshard_convert::Spelling::JobKey, || run_command(*command))
        }
        Ok(Parsed::Other(command)) => run_command(*command),
        Err(RequestError::Usage(message)) => Err(anyhow::anyhow!(message)),
        Err(RequestError::Options(e)) => Err(e.into()),
    }
}

/// Runs one SRC DST request as its command does, and prints its outcome.
fn run_request(request: Request, printing: Printing) -> anyhow::Result<()> {
    match request {
        Request::Convert(conversion) => {
            signals::cancel_on_signals(conversion.cancel.clone())?;
            print::convert(&conversion, printing.quiet)
        }
        Request::Finalize(conversion) => {
            signals::cancel_on_signals(conversion.cancel.clone())?;
            print::finalized(&conversion.finalize()?, printing.quiet);
            Ok(())
        }
        Request::Plan(conversion) => {
            signals::exit_on_signals()?;
            print::plans(&[conversion.plan()?], printing.json)
        }
        Request::Verify(verification) => {
            signals::exit_on_signals()?;
            let verified = verification.run()?;
            print::verified(&verification.source, &verified, printing.quiet)
        }
        Request::List(list) => print::listing(&list.list()?, printing.json),
    }
}

/// Runs a command that is no single request: a job file's conversions, or a command of its own.
fn run_command(given: Command) -> anyhow::Result<()> {
    match given {
        Command::Convert { .. } => {
            anyhow::bail!(
                "DST is missing: give SRC DST (a job file runs with `zshard run JOB.toml`)"
            )
        }
        Command::Finalize {
            layout,
            keep_manifest,
            quiet,
        } => finalize(&layout, keep_manifest, quiet),
        Command::Plan {
            layout,
            threads,
            memory_limit,
            json,
            estimate_with,
        } => plan(&layout, (threads, memory_limit, estimate_with), json),
        Command::Verify {
            src,
            dst,
            source,
            storage,
            sample,
            manifest: true,
            threads,
            ome,
            quiet,
            ..
        } => {
            signals::exit_on_signals()?;
            let options = manifest_options(src, dst, &source, &storage, sample, threads, ome)?;
            verify_manifest(&options, quiet)
        }
        Command::Verify {
            src,
            source,
            storage,
            sample,
            threads,
            ome,
            quiet,
            ..
        } => {
            refuse_flags_beside_verify_job(&src, &source, ome)?;
            verify_job(&src, &storage, sample, threads, quiet)
        }
        Command::Ls { .. } => unreachable!("`ls` is always a request (one_request)"),
        Command::Run {
            job,
            workers,
            storage,
            quiet,
        } => {
            let worker = lower::worker(&workers)?;
            job::run(&job, worker, &lower::storage(&storage)?, quiet)
        }
        Command::Demo {
            dir,
            threads,
            quiet,
        } => demo::demo(&dir, threads, quiet),
        Command::Status {
            dst,
            storage,
            watch,
            json,
        } => status_command(&dst, &storage, watch, json),
        Command::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command(), "zshard", &mut script);
            print::stdout(&String::from_utf8_lossy(&script))
        }
        Command::Man { command: name } => help::man(command(), name.as_deref()),
    }
}

/// `zshard finalize`: the metadata of each conversion (of a job file, or SRC DST) written after a
/// partitioned run.
fn finalize(layout: &LayoutArgs, keep_manifest: bool, quiet: bool) -> anyhow::Result<()> {
    let job = layout.dst.is_none().then_some(layout.src.as_str());
    for mut options in finalized_conversions(layout)? {
        if keep_manifest {
            options.run.keep_manifest = Some(true);
        }
        let (conversion, configured) = Conversion::configured(&options);
        signals::cancel_on_signals(conversion.cancel.clone())?;
        let (source, destination) = (&conversion.source, &conversion.destination);
        let finalized = configured.and_then(|()| conversion.finalize());
        print::finalized(&in_job(job, source, destination, finalized)?, quiet);
    }
    Ok(())
}

/// `zshard plan`: what each conversion (of a job file, or SRC DST) would do.
fn plan(
    layout: &LayoutArgs,
    (threads, memory_limit, estimate_with): (
        Option<usize>,
        Option<u64>,
        Option<zshard_convert::Stated>,
    ),
    json: bool,
) -> anyhow::Result<()> {
    signals::exit_on_signals()?;
    let job = layout.dst.is_none().then_some(layout.src.as_str());
    let mut plans = Vec::new();
    for mut options in conversions(layout)? {
        // The flags win over the job file's settings.
        options.run.threads = threads.or(options.run.threads);
        options.run.memory_limit = memory_limit.map(Size).or(options.run.memory_limit);
        options.run.estimate_with = estimate_with.clone().or(options.run.estimate_with);
        let (conversion, configured) = Conversion::configured(&options);
        let plan = configured.and_then(|()| conversion.plan());
        let (source, destination) = (&conversion.source, &conversion.destination);
        plans.push(in_job(job, source, destination, plan)?);
    }
    print::plans(&plans, json)
}

/// The options of `zshard verify --manifest DST` (DST given as SRC, the one operand).
fn manifest_options(
    src: String,
    dst: Option<String>,
    source: &SourceFlags,
    storage: &StorageFlags,
    sample: Option<f64>,
    threads: Option<usize>,
    ome: Option<zshard_convert::OmeMetadata>,
) -> anyhow::Result<VerifyOptions> {
    let mut first = First::default();
    let options = VerifyOptions {
        source: src,
        destination: dst.unwrap_or_default(),
        input: lower::source(source, &mut first),
        storage: lower::storage(storage)?,
        ome,
        threads,
        memory_limit: None,
        sample,
        manifest: Some(true),
    };
    first.result()?;
    Ok(options)
}

/// `zshard verify --manifest DST`: the output checked against its kept manifest.
fn verify_manifest(options: &VerifyOptions, quiet: bool) -> anyhow::Result<()> {
    // The one construction of a manifest check (the Python module's too).
    let verification = options
        .manifest_verification()?
        .ok_or_else(|| anyhow::anyhow!("--manifest is given"))?;
    let verified = verification.run()?;
    print::verified_manifest(&verified, quiet)
}

/// A job file's verifications take their source options from the job file: flags beside it are
/// refused, as is a folder given for the job file.
fn refuse_flags_beside_verify_job(
    src: &str,
    source: &SourceFlags,
    ome: Option<zshard_convert::OmeMetadata>,
) -> anyhow::Result<()> {
    if ome.is_some() {
        anyhow::bail!("job file {src}: --ome is the job file's `ome` key, not a flag beside it");
    }
    if !source.given().is_empty() {
        anyhow::bail!(
            "job file {src}: give the source options in the job file, not as flags beside it"
        );
    }
    if std::path::Path::new(src).is_dir() {
        anyhow::bail!(
            "{src} is a folder, not a job file: give SRC and DST, or check the output alone against its kept manifest with `zshard verify --manifest {src}`"
        );
    }
    Ok(())
}

/// `zshard verify JOB.toml`: every conversion of the job file verified against its source.
fn verify_job(
    src: &str,
    storage: &StorageFlags,
    sample: Option<f64>,
    threads: Option<usize>,
    quiet: bool,
) -> anyhow::Result<()> {
    let verifications = job::verifications(src, &lower::storage(storage)?)?;
    signals::exit_on_signals()?;
    for mut options in verifications {
        // The flags win over the job file's settings.
        options.threads = threads.or(options.threads);
        options.sample = sample;
        let verification = verification(&options);
        let (source, destination) = (&verification.source, &verification.destination);
        let verified = in_job(Some(src), source, destination, verification.run())?;
        print::verified(&verification.source, &verified, quiet)?;
    }
    Ok(())
}

/// `zshard status DST` (or `JOB.toml`: each of its destinations), once or watched.
fn status_command(
    dst: &str,
    storage: &StorageFlags,
    watch: Option<zshard_convert::options::Interval>,
    json: bool,
) -> anyhow::Result<()> {
    let storage = lower::storage(storage)?;
    let watched = if dst.ends_with(".toml") {
        job::load(dst.as_ref(), &storage, None)?
            .into_iter()
            .map(|options| StatusOptions {
                destination: options.destination,
                storage: options.storage,
                watch,
            })
            .collect()
    } else {
        vec![StatusOptions {
            destination: dst.to_string(),
            storage,
            watch,
        }]
    };
    status::watch(&watched, dst.ends_with(".toml"), json)
}

/// The command line's definition, with the version, commit and features of this build.
fn command() -> clap::Command {
    args::with_settings(Cli::command())
        .version(help::version())
        .long_version(help::long_version())
}

/// The conversion `zshard convert` runs. Options that do not parse or hold are a failed run too:
/// the report (if one is asked for) says so.
/// `run` holds the run's flags but the worker's, which come from `workers`.
fn convert_conversion(
    layout: &LayoutArgs,
    dst: &str,
    workers: &ShareFlags,
    run: RunOptions,
) -> zshard_convert::Result<Conversion> {
    let mut first = First::default();
    let mut options = lower::conversion(layout, dst, &mut first);
    options.run = RunOptions {
        worker: first.take(lower::worker(workers)).flatten(),
        workers: workers.workers(),
        ..run
    };
    let (conversion, configured) = Conversion::configured(&options);
    if let Err(e) = first.result().and(configured) {
        if let Err(report_error) = conversion.report_failure(&e) {
            eprintln!("zshard: warning: {}", one_line(&report_error));
        }
        return Err(e);
    }
    Ok(conversion)
}

/// The conversion of SRC into DST that `layout` describes (a request needs both), with `run`'s
/// settings.
fn one_conversion(layout: &LayoutArgs, run: RunOptions) -> Result<Conversion, RequestError> {
    let dst = layout.dst.as_deref().ok_or_else(missing_dst)?;
    let mut first = First::default();
    let mut options = lower::conversion(layout, dst, &mut first);
    options.run = run;
    let (conversion, configured) = Conversion::configured(&options);
    first
        .result()
        .and(configured)
        .map_err(RequestError::Options)?;
    Ok(conversion)
}

fn missing_dst() -> RequestError {
    RequestError::Usage("DST is missing: a request converts SRC into DST".into())
}

/// What a `convert`, `plan`, `finalize`, `verify` or `ls` command line asks for, ready to run.
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
    /// `zshard ls`: run [`List::list`].
    List(Box<List>),
}

/// The listing `zshard ls SRC` asks for.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct List {
    /// SRC.
    pub source: String,
    /// How SRC is read (format, references, selection).
    pub options: zshard_convert::ReadOptions,
    /// How its store is reached.
    pub store_options: zshard_convert::StoreOptions,
}

impl List {
    /// The arrays and groups of the source ([`zshard_convert::list`]).
    pub fn list(&self) -> zshard_convert::Result<zshard_convert::Listing> {
        zshard_convert::list(&self.source, &self.options, &self.store_options)
    }
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
    match one_request(cli.command)? {
        Parsed::Request(request, _) => Ok(*request),
        Parsed::Other(command) => match *command {
            Command::Convert { .. }
            | Command::Plan { .. }
            | Command::Finalize { .. }
            | Command::Verify { .. } => Err(missing_dst()),
            _ => Err(RequestError::Usage(
                "only convert, plan, finalize, verify and ls are requests".into(),
            )),
        },
    }
}

/// The conversions of the job file `job`, as `zshard run JOB.toml` runs them (for the Python
/// module's `zshard.run`): every one configured and checked before the first starts, sharing one
/// cancel. `worker` (`I/N`) and `workers` are `--worker` and `--workers`; without them a SLURM job
/// array's or Kubernetes Indexed Job's share is taken, as the command does. A job file that does
/// not read or hold is a [`RequestError::Usage`] naming it, on one line.
pub fn job_conversions(
    job: &std::path::Path,
    worker: Option<String>,
    workers: Option<u64>,
) -> Result<Vec<Conversion>, RequestError> {
    let usage = |e: anyhow::Error| RequestError::Usage(one_line(e.as_ref()));
    let worker =
        lower::worker(&ShareFlags::of_share(worker, workers)).map_err(RequestError::Options)?;
    let storage = zshard_convert::options::StorageOptions::default();
    job::conversions(job, worker, &storage).map_err(usage)
}

/// How a command prints what it did: its flags that are no part of a [`Request`].
#[derive(Debug, Clone, Copy)]
struct Printing {
    quiet: bool,
    json: bool,
}

/// A parsed command: one SRC DST request (or `ls SRC`), or a command that is none (a job file,
/// `run`, ...).
enum Parsed {
    Request(Box<Request>, Printing),
    Other(Box<Command>),
}

/// The request a `convert`, `plan`, `finalize` or `verify` command with SRC and DST (or `ls` with
/// SRC) asks for, with every option checked; the one place both [`request`] and the command build
/// it.
fn one_request(command: Command) -> Result<Parsed, RequestError> {
    let request =
        |request, quiet, json| Ok(Parsed::Request(Box::new(request), Printing { quiet, json }));
    match command {
        Command::Convert {
            layout,
            threads,
            workers,
            run,
            quiet,
        } if layout.dst.is_some() => {
            let dst = layout.dst.as_deref().ok_or_else(missing_dst)?;
            // The values were read by the model as the flags were parsed.
            let run: RunOptions = run.model().map_err(RequestError::Options)?;
            let run = RunOptions { threads, ..run };
            let conversion =
                convert_conversion(&layout, dst, &workers, run).map_err(RequestError::Options)?;
            request(Request::Convert(Box::new(conversion)), quiet, false)
        }
        Command::Plan {
            layout,
            threads,
            memory_limit,
            json,
            estimate_with,
        } if layout.dst.is_some() => {
            let run = RunOptions {
                threads,
                memory_limit: memory_limit.map(Size),
                estimate_with,
                ..RunOptions::default()
            };
            let conversion = one_conversion(&layout, run)?;
            request(Request::Plan(Box::new(conversion)), false, json)
        }
        Command::Finalize {
            layout,
            keep_manifest,
            quiet,
        } if layout.dst.is_some() => {
            let run = RunOptions {
                keep_manifest: keep_manifest.then_some(true),
                ..RunOptions::default()
            };
            let dst = layout.dst.as_deref().ok_or_else(missing_dst)?;
            let mut first = First::default();
            let mut options = lower::conversion(&layout, dst, &mut first);
            first.result().map_err(RequestError::Options)?;
            options.run = run;
            // What is not given comes from the conversion DST records (its workers' options).
            let options = options.with_recorded().map_err(RequestError::Options)?;
            let conversion = Conversion::from_options(&options).map_err(RequestError::Options)?;
            request(Request::Finalize(Box::new(conversion)), quiet, false)
        }
        Command::Verify {
            manifest: true,
            dst: Some(_),
            ..
        } => Err(RequestError::Usage(
            "verify --manifest takes the output DST alone (the source is not read)".into(),
        )),
        Command::Verify {
            src,
            dst: Some(dst),
            source,
            storage,
            sample,
            threads,
            memory_limit,
            ome,
            quiet,
            manifest: false,
        } => {
            let mut first = First::default();
            let mut options = lower::verification(&src, &dst, &source, &storage, &mut first);
            first.result().map_err(RequestError::Options)?;
            options.ome = ome;
            options.threads = threads;
            options.memory_limit = memory_limit.map(Size);
            options.sample = sample;
            let verification = verification(&options);
            request(Request::Verify(Box::new(verification)), quiet, false)
        }
        Command::Ls {
            src,
            source,
            storage,
            json,
        } => {
            let mut first = First::default();
            let options = lower::source(&source, &mut first);
            let storage = first.take(lower::storage(&storage)).unwrap_or_default();
            first.take(storage.check());
            first.result().map_err(RequestError::Options)?;
            let list = List {
                source: src,
                options: options.resolve(),
                store_options: storage.store_options(),
            };
            request(Request::List(Box::new(list)), false, json)
        }
        other => Ok(Parsed::Other(Box::new(other))),
    }
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
fn parse_cli(args: Vec<OsString>) -> Result<Cli, u8> {
    let parsed = command()
        .try_get_matches_from(&args)
        .and_then(|matches| Cli::from_arg_matches(&matches));
    parsed.map_err(|e| {
        use clap::error::ErrorKind;
        if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion)
            || e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        {
            let _ = e.print();
            return if e.use_stderr() { 2 } else { 0 };
        }
        let message = format!("{} (see zshard --help)", clap_message(&e));
        eprintln!("zshard: error: {message}");
        // A command line that does not parse is a failed run too, when its report path can be found.
        let words = args
            .iter()
            .skip(1)
            .map(|a| a.to_string_lossy().into_owned());
        if let Some(conversion) = usage_failure(words.collect()) {
            let error = zshard_convert::Error::Options { reason: message };
            if let Err(report_error) = conversion.report_failure(&error) {
                eprintln!("zshard: warning: {}", one_line(&report_error));
            }
        }
        2
    })
}

fn usage_failure(args: Vec<String>) -> Option<Conversion> {
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
    let mut options = Options::new(
        positionals.first().cloned().unwrap_or_default(),
        positionals.get(1).cloned().unwrap_or_default(),
    );
    options.run.report = Some(PathBuf::from(report));
    // Only the report is wanted here: a setting that does not hold is beside the point.
    Some(Conversion::configured(&options).0)
}

/// Runs the `zshard` command with `args` (the program name first, as `std::env::args_os` gives it)
/// and returns its exit status: 0, 1 on failure, 2 on a usage error, 128 + the signal when stopped
/// by one.
pub fn main(args: impl IntoIterator<Item = OsString>) -> u8 {
    // Messages of the library name settings by this command's flags (`--memory-limit`).
    zshard_convert::spelled(zshard_convert::Spelling::Flag, || main_spelled(args))
}

fn main_spelled(args: impl IntoIterator<Item = OsString>) -> u8 {
    let cli = match parse_cli(args.into_iter().collect()) {
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
            u8::try_from(signals::exit_code(signal)).unwrap_or(u8::MAX)
        }
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
