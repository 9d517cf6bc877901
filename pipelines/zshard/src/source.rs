//! Where a conversion reads from. Every input kind yields the same two things: the hierarchy of groups
//! and arrays (as the source-independent model) and, per array, a reader of its encoded chunks by grid
//! position. Stages and writers never learn which kind it was.

use std::sync::Arc;

use zshard_core::{ArrayMeta, ChunkReader, Node, NodeKind};
use zshard_kerchunk::{Format, ReferenceSet};
use zshard_store::{IoRuntime, Store};
use zshard_zarr::{chunk_reader, open_hierarchy};

/// Environment variable: when set, the read requests made for a kerchunk reference set are printed
/// to stderr when it is closed (one line).
pub const KERCHUNK_STATS_ENV: &str = "ZSHARD_KERCHUNK_STATS";

/// `--ref-coalesce-gap`: a size, or `off` for one request per reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CoalesceGap(pub Option<u64>);

fn parse_gap(s: &str) -> Result<CoalesceGap, String> {
    if s.trim().eq_ignore_ascii_case("off") {
        return Ok(CoalesceGap(None));
    }
    crate::job::parse_size(s).map(|size| CoalesceGap(Some(size.0)))
}

/// Command-line options about the input.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SourceArgs {
    /// Input kind: zarr (a Zarr v2/v3 array or group), kerchunk-json (a kerchunk JSON reference file,
    /// version 0 or 1, optionally .zst/.gz compressed) or kerchunk-parquet (a kerchunk Parquet
    /// reference folder). Detected when not given.
    #[arg(long, value_name = "KIND")]
    pub source_format: Option<String>,
    /// Kerchunk references: the folder (or URL) that relative target paths resolve against and that
    /// local targets must lie under (default: the folder of the reference file, or of the Parquet
    /// reference folder).
    #[arg(long, value_name = "DIR")]
    pub ref_root: Option<String>,
    /// Kerchunk references: also read targets that start with PREFIX, e.g. http://127.0.0.1:8000/
    /// or /data/ (repeatable; needed for http(s) targets on loopback, link-local or private
    /// addresses and for local files outside --ref-root).
    #[arg(long = "allow-ref-prefix", value_name = "PREFIX")]
    pub allow_ref_prefix: Vec<String>,
    /// Kerchunk references: byte ranges of one target file at most SIZE apart are read with one
    /// request (default 64KiB); `off` reads every reference with its own request.
    #[arg(long, value_parser = parse_gap, value_name = "SIZE|off")]
    pub ref_coalesce_gap: Option<CoalesceGap>,
}

impl SourceArgs {
    fn kerchunk_options(&self) -> zshard_kerchunk::Options {
        let defaults = zshard_kerchunk::Options::default();
        zshard_kerchunk::Options {
            ref_root: self.ref_root.clone(),
            allow_prefixes: self.allow_ref_prefix.clone(),
            coalesce_gap: self
                .ref_coalesce_gap
                .map_or(defaults.coalesce_gap, |gap| gap.0),
            ..defaults
        }
    }

    fn has_reference_options(&self) -> bool {
        self.ref_root.is_some()
            || !self.allow_ref_prefix.is_empty()
            || self.ref_coalesce_gap.is_some()
    }
}

/// An opened kerchunk reference set.
#[derive(Debug)]
pub struct References(ReferenceSet);

impl Drop for References {
    fn drop(&mut self) {
        if std::env::var_os(KERCHUNK_STATS_ENV).is_some() {
            let s = self.0.stats();
            eprintln!(
                "zshard: kerchunk {}: {} chunk reference(s) read with {} request(s), {} byte(s)",
                self.0.url(),
                s.references,
                s.requests,
                s.bytes
            );
        }
    }
}

/// An opened input.
#[derive(Debug)]
pub enum Input {
    /// A Zarr v2 or v3 array or group.
    Zarr(Store),
    /// A kerchunk reference set (JSON or Parquet).
    Kerchunk(References),
}

impl Input {
    /// Opens `location` as the kind `args` names, or the kind detected there: a `.json`,
    /// `.json.zst` or `.json.gz` file (or any other local file) is a JSON reference set, a folder whose
    /// `.zmetadata` has a `record_size` a Parquet reference set, anything else Zarr.
    pub fn open(
        location: &str,
        args: &SourceArgs,
        runtime: Arc<IoRuntime>,
    ) -> anyhow::Result<Input> {
        let format = match args.source_format.as_deref() {
            Some("zarr") => None,
            Some("kerchunk-json") => Some(Format::Json),
            Some("kerchunk-parquet") => Some(Format::Parquet),
            None => zshard_kerchunk::detect(location, &runtime)?,
            Some(other) => anyhow::bail!(
                "--source-format {other:?} is not supported (zarr, kerchunk-json, kerchunk-parquet)"
            ),
        };
        match format {
            None if args.has_reference_options() => anyhow::bail!(
                "--ref-root, --allow-ref-prefix and --ref-coalesce-gap apply to kerchunk reference sets, but {location} is read as Zarr (see --source-format)"
            ),
            None => Ok(Input::Zarr(Store::open(location, runtime, false)?)),
            Some(format) => Ok(Input::Kerchunk(References(ReferenceSet::open(
                location,
                format,
                &args.kerchunk_options(),
                runtime,
            )?))),
        }
    }

    /// The input's location, for messages.
    pub fn url(&self) -> String {
        match self {
            Input::Zarr(store) => store.url(""),
            Input::Kerchunk(refs) => refs.0.url(),
        }
    }

    /// Every group and array of the input.
    pub fn nodes(&self) -> anyhow::Result<Vec<Node>> {
        match self {
            // Already sharded arrays are read by inner chunk (see `ArrayMeta::read_by_inner_chunk`).
            Input::Zarr(store) => Ok(open_hierarchy(store)?
                .into_iter()
                .map(|mut node| {
                    if let NodeKind::Array(meta) = node.kind {
                        node.kind = NodeKind::Array(Box::new(meta.read_by_inner_chunk()));
                    }
                    node
                })
                .collect()),
            Input::Kerchunk(refs) => Ok(refs.0.nodes()),
        }
    }

    /// The reader of the encoded chunks of the array at `path`.
    pub fn reader(&self, path: &str, meta: &ArrayMeta) -> Arc<dyn ChunkReader> {
        match self {
            Input::Zarr(store) => chunk_reader(store.child(path), meta),
            Input::Kerchunk(refs) => refs.0.reader(path, meta),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_gap_values() {
        assert_eq!(parse_gap("off"), Ok(CoalesceGap(None)));
        assert_eq!(parse_gap("64KiB"), Ok(CoalesceGap(Some(65536))));
        assert_eq!(parse_gap("0"), Ok(CoalesceGap(Some(0))));
        assert!(parse_gap("lots").is_err());
    }
}
