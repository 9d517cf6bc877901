//! The command line's flags shared by several subcommands, as clap reads them: the low level of the
//! command line (ripgrep's `LowArgs`). `lower.rs` maps them into the library's options model in one
//! place; nothing here builds a library value and no default is written here.

use zshard_convert::options::CoalesceGap;
use zshard_convert::{parse_size, Compressor, LevelShapes, OmeMetadata};
use zshard_core::IndexLocation;

/// A size flag (`512MiB`, `4G`, `2GB`).
pub fn size(s: &str) -> Result<u64, String> {
    parse_size(s).map_err(|e| e.to_string())
}

/// `--ref-coalesce-gap`: a size, or `off` for one request per reference.
fn coalesce_gap(s: &str) -> Result<CoalesceGap, String> {
    s.parse().map_err(|e: zshard_convert::Error| e.to_string())
}

/// `--level-shapes LEVEL:SHARD[/CHUNK]`, e.g. `2:1,256,256/1,64,64`, read as the library reads it.
fn level_shapes(s: &str) -> Result<(usize, LevelShapes), String> {
    zshard_convert::options::parse_level_shapes(s).map_err(|e| zshard_convert::one_line(&e))
}

fn index_location(s: &str) -> Result<IndexLocation, String> {
    IndexLocation::parse(s).ok_or_else(|| format!("{s:?} is not start or end"))
}

/// Options that decide the output; `convert`, `plan` and `finalize` must be given the same ones.
#[derive(clap::Args, Debug, Clone)]
pub struct LayoutArgs {
    /// Source: a Zarr v2 or v3 array or group, or a kerchunk reference set (a path or a file://,
    /// s3://, gs://, az:// or http(s):// URL).
    pub(crate) src: String,
    /// Destination of the sharded Zarr v3 array or group (a path or a file://, s3://, gs:// or
    /// az:// URL). Without it, SRC is a job file (JOB.toml) that gives every conversion's options.
    pub(crate) dst: Option<String>,
    /// Shard shape: one extent per dimension, e.g. 4096,4096, or extents by dimension name for
    /// every array that has those dimensions, e.g. time=48,lat=720 (names from dimension_names or
    /// _ARRAY_DIMENSIONS; dimensions not named are chosen automatically, see `zshard convert --help`).
    #[arg(long, value_name = "a,b,...|name=a,...")]
    pub(crate) shard_shape: Option<String>,
    /// Inner chunk shape: e.g. 256,256, or by dimension name, e.g. lon=1440 (default, and for
    /// dimensions not named: the source chunk shape).
    #[arg(long, value_name = "a,b,...|name=a,...")]
    pub(crate) chunk_shape: Option<String>,
    /// Inner chunk compressor: zstd:LEVEL, gzip:LEVEL, blosc:CNAME:CLEVEL:SHUFFLE
    /// (CNAME blosclz|lz4|lz4hc|zlib|zstd, SHUFFLE noshuffle|shuffle|bitshuffle) or none; or the whole
    /// inner codec chain as a JSON list of Zarr v3 codecs (see the examples); or source: each
    /// array's own codecs where they are a valid Zarr v3 chain (plan names the arrays that get the
    /// default instead). Default: zstd:3.
    #[arg(long, value_name = "SPEC")]
    pub(crate) compressor: Option<Compressor>,
    /// Where each shard's index goes (default: end).
    #[arg(long, value_parser = index_location, value_name = "start|end")]
    pub(crate) index_location: Option<IndexLocation>,
    /// Always decode and re-encode. By default, source chunks that already have the output's inner
    /// chunk shape and codec chain are copied into the shards without decoding.
    #[arg(long)]
    pub(crate) no_passthrough: bool,
    /// Do not consolidate the metadata of a hierarchy into its root zarr.json. By default it is, as
    /// zarr-python's consolidate_metadata does (xarray opens the output without a warning).
    #[arg(long)]
    pub(crate) no_consolidate: bool,
    /// Shapes of one level of every multiscale (OME-Zarr) pyramid, LEVEL:SHARD[/CHUNK] (0 is the
    /// full resolution; repeatable), e.g. 2:1,256,256/1,64,64. By default each level's shapes follow
    /// from the first level's through the level's scale factors.
    #[arg(long, value_parser = level_shapes, value_name = "LEVEL:SHARD[/CHUNK]")]
    pub(crate) level_shapes: Vec<(usize, LevelShapes)>,
    /// OME-Zarr metadata: upgrade (the default) writes a 0.4 image, plate or bioformats2raw
    /// hierarchy as OME-Zarr 0.5 (attributes under `ome`, axes as dimension_names); 0.5 and other
    /// versions are copied as they are. keep copies every attribute as it is.
    #[arg(long, value_name = "upgrade|keep")]
    pub(crate) ome: Option<OmeMetadata>,
    #[command(flatten)]
    pub(crate) source: SourceArgs,
    #[command(flatten)]
    pub(crate) storage: StorageArgs,
    #[command(flatten)]
    pub(crate) output: OutputArgs,
}

/// What kind of output DST is.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct OutputArgs {
    /// Output kind: zarr (plain sharded Zarr v3), or icechunk: commit the shards to a branch of the
    /// Icechunk repository DST (created when missing) in one commit. A DST that already is a
    /// repository is written as icechunk.
    #[arg(long, value_name = "zarr|icechunk", value_parser = ["zarr", "icechunk"])]
    pub(crate) output_format: Option<String>,
    /// Icechunk output: the branch to commit to (default main; created from main when missing).
    #[arg(long, value_name = "NAME")]
    pub(crate) branch: Option<String>,
    /// Icechunk output: the commit message (default: names zshard, the source and the options).
    #[arg(long, value_name = "TEXT")]
    pub(crate) message: Option<String>,
    /// Icechunk output: the spec version of a repository zshard makes (default 2; 1 for readers on
    /// icechunk 1.x). An existing repository is written in its own.
    #[arg(long, value_name = "1|2")]
    pub(crate) icechunk_spec: Option<zshard_convert::SpecVersion>,
}

/// Which share of the shards this process converts.
#[derive(clap::Args, Debug, Clone)]
pub struct WorkerArgs {
    /// Convert only part I of N of all shards (0-based). Without it, a SLURM job array
    /// (SLURM_ARRAY_TASK_ID/COUNT/MIN) or a Kubernetes Indexed Job (JOB_COMPLETION_INDEX with
    /// --workers) decides; otherwise all shards. A partitioned run writes no metadata: run
    /// `zshard finalize` once all workers are done.
    #[arg(long, value_name = "I/N")]
    pub(crate) worker: Option<String>,
    /// Number of workers when the index comes from JOB_COMPLETION_INDEX.
    #[arg(long, value_name = "N")]
    pub(crate) workers: Option<u64>,
}

/// Options about the input.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SourceArgs {
    /// Input kind: zarr (a Zarr v2/v3 array or group), kerchunk-json (a kerchunk JSON reference file,
    /// version 0 or 1, optionally .zst/.gz compressed), kerchunk-parquet (a kerchunk Parquet
    /// reference folder), icechunk (an Icechunk repository) or n5 (an N5 container). Detected when
    /// not given.
    #[arg(long, value_name = "KIND")]
    pub(crate) source_format: Option<String>,
    /// Kerchunk references: the folder (or URL) that relative target paths resolve against and that
    /// local targets must lie under (default: the folder of the reference file, or of the Parquet
    /// reference folder).
    #[arg(long, value_name = "DIR")]
    pub(crate) ref_root: Option<String>,
    /// Kerchunk references: also read targets that start with PREFIX, e.g. http://127.0.0.1:8000/
    /// or /data/ (repeatable; needed for http(s) targets on loopback, link-local or private
    /// addresses and for local files outside --ref-root).
    #[arg(long = "allow-ref-prefix", value_name = "PREFIX")]
    pub(crate) allow_ref_prefix: Vec<String>,
    /// Kerchunk references: byte ranges of one target file at most SIZE apart are read with one
    /// request (default 64KiB); `off` reads every reference with its own request.
    #[arg(long, value_parser = coalesce_gap, value_name = "SIZE|off")]
    pub(crate) ref_coalesce_gap: Option<CoalesceGap>,
    /// Only the arrays whose path matches GLOB (repeatable), e.g. 'climate/*' or '**/temp*' (`*`
    /// stays within one level, `**` crosses levels); a group's path selects everything below it.
    /// The groups above a selected array are kept with their attributes; a GLOB that matches no
    /// array is an error.
    #[arg(long, value_name = "GLOB")]
    pub(crate) include: Vec<String>,
    /// Leave out the arrays whose path (or a group above them) matches GLOB (repeatable), even when
    /// included.
    #[arg(long, value_name = "GLOB")]
    pub(crate) exclude: Vec<String>,
    /// Kerchunk Parquet references: a missing refs.<i>.parq file is an error (by default it reads as
    /// a record without references, as kerchunk writes no file for one).
    #[arg(long)]
    pub(crate) strict_refs: bool,
    /// Icechunk source: the branch, tag or snapshot id to read (default: the branch main).
    /// --ref-root and --allow-ref-prefix apply to its virtual chunks (default root: the folder
    /// holding the repository).
    #[arg(long, value_name = "REF")]
    pub(crate) source_ref: Option<String>,

    /// What becomes of an array whose data type or codecs zshard does not read (a pickle object
    /// array, an unknown codec): refuse (the default) stops before anything is written, naming it;
    /// skip converts everything else and lists each skipped array with its reason in the plan, the
    /// summary and the report.
    #[arg(long, value_name = "refuse|skip")]
    pub(crate) on_unsupported: Option<String>,
}

/// The `--help` heading of the storage flags: where everything else comes from.
const STORAGE: &str = "Storage (these flags override the environment: AWS_*, AZURE_*, GOOGLE_*, STORAGE_EMULATOR_HOST, HTTPS_PROXY, HTTP_PROXY, NO_PROXY, SSL_CERT_FILE; see docs/cloud.md)";

/// Options about reaching storage (both the source and the destination).
///
/// Everything else comes from each cloud's standard environment, and these flags override it:
/// S3: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, AWS_REGION / AWS_DEFAULT_REGION,
/// AWS_ENDPOINT_URL (with AWS_ALLOW_HTTP=true for http://), AWS_VIRTUAL_HOSTED_STYLE_REQUEST;
/// Azure: AZURE_STORAGE_ACCOUNT_NAME, AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_TOKEN,
/// AZURE_STORAGE_ENDPOINT (with AZURE_ALLOW_HTTP=true), AZURE_STORAGE_USE_EMULATOR with
/// AZURITE_BLOB_STORAGE_URL; GCS: GOOGLE_SERVICE_ACCOUNT, GOOGLE_APPLICATION_CREDENTIALS,
/// GOOGLE_BASE_URL, STORAGE_EMULATOR_HOST; all: HTTPS_PROXY, HTTP_PROXY, NO_PROXY, SSL_CERT_FILE
/// (a CA bundle), and <PREFIX>_TIMEOUT / _CONNECT_TIMEOUT / _PROXY_URL (e.g. AWS_PROXY_URL).
#[derive(clap::Args, Debug, Clone)]
pub struct StorageArgs {
    /// Endpoint of an S3-compatible store (MinIO, Ceph, ...), e.g. http://127.0.0.1:9000 (overrides
    /// AWS_ENDPOINT_URL; an http:// endpoint needs no AWS_ALLOW_HTTP). Credentials, session token and
    /// region otherwise come from AWS_* variables.
    #[arg(long, help_heading = STORAGE, value_name = "URL")]
    pub(crate) s3_endpoint: Option<String>,
    /// S3 region (default: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1).
    #[arg(long, help_heading = STORAGE, value_name = "REGION")]
    pub(crate) s3_region: Option<String>,
    /// Path-style S3 requests (endpoint/bucket/key), as most S3-compatible servers want (the default
    /// with a custom endpoint unless AWS_VIRTUAL_HOSTED_STYLE_REQUEST=true).
    #[arg(long, help_heading = STORAGE)]
    pub(crate) s3_path_style: bool,
    /// Unsigned requests, for public buckets and containers (also AWS_SKIP_SIGNATURE=true, ...).
    #[arg(long, help_heading = STORAGE)]
    pub(crate) anonymous: bool,
    /// Retries of one request at most (default: as many as --retry-timeout allows). Transient storage
    /// failures (5xx, 429, timeouts, refused or reset connections) are retried with exponential
    /// backoff and jitter; permanent ones (403, 404, missing bucket) fail at once.
    #[arg(long, help_heading = STORAGE, value_name = "N")]
    pub(crate) retries: Option<usize>,
    /// How long a request is retried: no retry starts later than this after its first attempt, so an
    /// outage shorter than this is ridden out (waits grow from 0.1 s to a tenth of this, at most 10 s;
    /// default 120).
    #[arg(long, help_heading = STORAGE, value_name = "SECONDS")]
    pub(crate) retry_timeout: Option<u64>,
    /// Storage requests in flight per batch (the chunks of one shard, the parts of one upload;
    /// default 32).
    #[arg(long, help_heading = STORAGE, value_name = "N")]
    pub(crate) max_requests: Option<usize>,
    /// Shards larger than this are uploaded to object stores in parts of this size (default 32MiB,
    /// min 5MiB: a smaller size is raised to it, with a warning).
    #[arg(long, help_heading = STORAGE, value_parser = size, value_name = "SIZE")]
    pub(crate) part_size: Option<u64>,
    /// Threads fetching chunks and threads writing shards, each, at least 1 (default: 2 for local
    /// paths, 8 when the source or destination is a remote store; a conversion of small shards gets
    /// up to 32, as many as keep twice that many shards within 64 MiB and the memory limit).
    #[arg(long, help_heading = STORAGE, value_name = "N")]
    pub(crate) io_threads: Option<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_gap_values() {
        assert_eq!(coalesce_gap("off"), Ok(CoalesceGap(None)));
        assert_eq!(coalesce_gap("64KiB"), Ok(CoalesceGap(Some(65536))));
        assert_eq!(coalesce_gap("0"), Ok(CoalesceGap(Some(0))));
        assert!(coalesce_gap("lots").is_err());
    }

    #[test]
    fn level_shape_values() {
        let given = |shard: &[u64], chunk: Option<&[u64]>| LevelShapes {
            shard_shape: shard.to_vec(),
            chunk_shape: chunk.map(<[u64]>::to_vec),
        };
        assert_eq!(
            level_shapes("2:1,256,256/1,64,64"),
            Ok((2, given(&[1, 256, 256], Some(&[1, 64, 64]))))
        );
        assert_eq!(level_shapes("0:512,512"), Ok((0, given(&[512, 512], None))));
        assert!(level_shapes("512,512").is_err());
        assert!(level_shapes("x:512").is_err());
    }
}
