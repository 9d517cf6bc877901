//! Examples shown by each subcommand's `--help`, and the version text of `--version`.

use std::sync::OnceLock;

/// `zshard plan --help`.
pub const PLAN: &str = "\
Examples:
  # What converting a group would do (shapes, counts, codecs, passthrough, parts, peak memory):
  zshard plan climate.zarr climate-sharded.zarr --shard-shape 4096,4096

  # The same as JSON, with the memory limit a SLURM task with --mem=8G gets:
  SLURM_MEM_PER_NODE=8192 zshard plan climate.zarr climate-sharded.zarr --json

Destination:
  plan writes nothing, but reads DST as convert would: one listing of its state and shards and a
  read of its metadata and claim. It fails where convert would refuse DST: a bucket that does not
  exist, credentials that are missing or refused, an endpoint that does not answer, a claim or
  records of a conversion with other options, metadata that differs, or shards without records. A
  local DST that does not exist yet passes (convert makes it).

Cost:
  plan lists the source's chunks once (as convert does) for the bytes they are stored in, next to
  their raw upper bound, and counts every request by kind (LIST, HEAD, GET, PUT, DELETE) on each
  side, the state's (claim, records, manifest) included. Its time and price are an estimate, not a
  measurement, for one worker: 100 MB/s and 30 ms per request to an object store, 1 GB/s and
  0.1 ms locally, storage I/O only (no codec CPU time), S3 Standard's us-east-1 request prices
  (PUT/LIST $0.005, GET/HEAD $0.0004 per 1,000; no transfer or storage). --json gives the counts
  and the assumptions, to redo the sums with other figures.

Memory:
  Without --memory-limit the limit is half of the smallest of: the process's cgroup limit (v2
  memory.max or v1 memory.limit_in_bytes, its own cgroup from /proc/self/cgroup and its ancestors),
  SLURM_MEM_PER_NODE or SLURM_MEM_PER_CPU x SLURM_CPUS_ON_NODE (MiB), and the machine's memory;
  plan prints which one it used. Sizes: 8G and 8GiB are 8 x 2^30 bytes (as SLURM's --mem=8G),
  8GB is 8 x 10^9.";

/// `zshard finalize --help`.
pub const FINALIZE: &str = "\
Examples:
  # After every worker of a partitioned run (--worker I/N, a SLURM array, a Kubernetes Indexed Job)
  # is done: the source and the shape and codec options come from DST's claim (DST/.zshard/):
  zshard finalize /data/out.zarr

  # The same with the source named; options given must match those the workers were given, and
  # those not given (shapes, compressor, index location) are the workers'. Source options
  # (--include, --exclude, --source-format, reference options, --ome) are not recorded: give them
  # again as the workers had them:
  zshard finalize /data/in.zarr /data/out.zarr";

/// `zshard verify --help`.
pub const VERIFY: &str = "\
Examples:
  # Every element of every shard against the source:
  zshard verify era5.zarr era5-sharded.zarr

  # A deterministic 1% sample of the shards of an output on S3:
  zshard verify s3://raw/era5.zarr s3://analysis/era5-sharded.zarr --sample 0.01

  # Without the source: against the checksum manifest `convert --keep-manifest` kept:
  zshard verify --manifest s3://analysis/era5-sharded.zarr";

/// `zshard run --help`.
pub const RUN: &str = "\
Examples:
  # A job file (per-array shapes and codecs; paths relative to the file's folder):
  zshard run pipelines/demo-job.toml

  # Worker 3 of 16 of a job, printing a progress line every 2 minutes into the job's log:
  zshard run job.toml --worker 3/16 --progress log --log-interval 2m";

/// `zshard demo --help`.
pub const DEMO: &str = "\
Examples:
  zshard demo                      # into ./zshard-demo
  zshard demo --dir /tmp/demo --quiet";

/// `zshard completions --help`.
pub const COMPLETIONS: &str = "\
Examples:
  zshard completions bash > ~/.local/share/bash-completion/completions/zshard
  zshard completions zsh > ~/.zfunc/_zshard     # with fpath+=~/.zfunc before compinit
  zshard completions fish > ~/.config/fish/completions/zshard.fish";

/// `zshard man --help`.
pub const MAN: &str = "\
Examples:
  zshard man | man -l -
  zshard man > /usr/local/share/man/man1/zshard.1
  zshard man convert > /usr/local/share/man/man1/zshard-convert.1";

/// What this build can read and write: the storage back ends, input kinds and codecs compiled in.
fn features() -> String {
    // Icechunk is a feature of the build (on by default).
    let (icechunk_in, icechunk_out) = match cfg!(feature = "icechunk") {
        true => (", icechunk (spec 1 and 2)", ", icechunk (a commit)"),
        false => ("", ""),
    };
    format!(
        "stores: file, s3, gcs, azure, http(s) (read); inputs: zarr v2, zarr v3, zarr v3 draft sharding, zarr in zip (.zip, .ozx), kerchunk-json, kerchunk-parquet, n5{icechunk_in}; outputs: zarr v3 sharded{icechunk_out}; codecs: {}; data types: {}, {}",
        zshard_codecs::supported_codecs().join(", "),
        zshard_core::DataType::supported(),
        zshard_core::DataType::PARAMETRIC,
    )
}

/// `zshard -V`: the version and the git commit it was built from.
pub fn version() -> &'static str {
    static VERSION: OnceLock<String> = OnceLock::new();
    VERSION.get_or_init(|| {
        format!(
            "{} (commit {})",
            env!("CARGO_PKG_VERSION"),
            zshard_convert::GIT_COMMIT.unwrap_or("unknown")
        )
    })
}

/// `zshard --version`: [`version`] and the features of this build.
pub fn long_version() -> &'static str {
    static LONG: OnceLock<String> = OnceLock::new();
    LONG.get_or_init(|| format!("{}\n{}", version(), features()))
}

/// `zshard man [COMMAND]`: the manual page of `cli` or of its subcommand `name`, on stdout.
pub fn man(cli: clap::Command, name: Option<&str>) -> anyhow::Result<()> {
    let page = match name {
        None => clap_mangen::Man::new(cli),
        Some(name) => {
            let Some(sub) = cli.find_subcommand(name) else {
                anyhow::bail!("no command {name:?} (see zshard --help)");
            };
            let title = format!("zshard-{}", sub.get_name());
            clap_mangen::Man::new(sub.clone().bin_name(format!("zshard {name}"))).title(title)
        }
    };
    let mut roff = Vec::new();
    page.render(&mut roff)?;
    crate::print::stdout(&String::from_utf8_lossy(&roff))
}
