//! Reading a reference set: [`ReferenceSet`] and its options. Opening (detecting the layout, reading
//! and decompressing the reference file, the security policy) is in `open`, fetching (resolving and
//! checking targets, coalescing ranges into requests, sending them, counting) in `fetch`, and the
//! chunk readers of the JSON and Parquet layouts in `reader`.

mod external;
mod fetch;
mod open;
mod reader;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use zshard_core::Node;
use zshard_store::Store;
use zshard_zarr::SkippedArray;

use crate::error::{format, Error, Result};
use crate::refs::{ChunkIndex, JsonRefs};
use fetch::{Resolved, Shared};

pub use external::{ExternalChunk, ExternalRanges};
pub use open::{detect, is_json_name, is_parquet_metadata};

/// Default largest gap between two byte ranges of one target that are still read as one request
/// (the store's [`zshard_store::COALESCE_GAP`], 64 KiB).
pub const DEFAULT_COALESCE_GAP: u64 = zshard_store::COALESCE_GAP;

/// Default largest coalesced request (the store's [`zshard_store::MAX_REQUEST`], 64 MiB, the same
/// cap as the sharded-source reader's).
pub const DEFAULT_MAX_REQUEST: u64 = zshard_store::MAX_REQUEST;

/// Default number of decoded Parquet reference files kept per array.
pub const DEFAULT_PARQUET_CACHE: usize = 4;

/// How a reference set is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Where relative targets resolve and local targets must lie (default: the folder of the reference
    /// file, or the folder that holds a Parquet reference folder). A path or URL.
    pub ref_root: Option<String>,
    /// Targets starting with one of these (at a path boundary) are read whatever the other rules say.
    pub allow_prefixes: Vec<String>,
    /// Ranges of one target at most this far apart are read as one request; `None` reads every
    /// reference with its own request.
    pub coalesce_gap: Option<u64>,
    /// The largest coalesced request, in bytes.
    pub max_request: u64,
    /// Decoded Parquet reference files kept in memory per array.
    pub parquet_cache: usize,
    /// A Parquet set's missing `refs.<i>.parq` file is an error. Without it, a missing file reads as
    /// a record without references (its chunks read as the fill value), as kerchunk's writer (fsspec's
    /// `LazyReferenceMapper.flush`) writes a file only for records that hold a reference.
    pub strict_refs: bool,
    /// Arrays whose metadata holds a codec or data type zshard does not read are left out and listed
    /// by [`ReferenceSet::skipped`] (`--on-unsupported skip`); without it, opening the set fails.
    pub skip_unsupported: bool,
    /// The memory limit of the run reading the set (`--memory-limit`): references a JSON set's `gen`
    /// entries would generate are counted before any is made, and refused with their number when
    /// they alone would take more. `None`: only the fixed cap on generated references applies.
    pub memory_limit: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            ref_root: None,
            allow_prefixes: Vec::new(),
            coalesce_gap: Some(DEFAULT_COALESCE_GAP),
            max_request: DEFAULT_MAX_REQUEST,
            parquet_cache: DEFAULT_PARQUET_CACHE,
            strict_refs: false,
            skip_unsupported: false,
            memory_limit: None,
        }
    }
}

/// The layout of a reference set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A JSON file (version 0 or 1), possibly zstd or gzip compressed.
    Json,
    /// A folder in fsspec's `LazyReferenceMapper` layout (`.zmetadata` and `refs.<i>.parq` files).
    Parquet,
}

/// Counts of the reads made for chunks so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Chunk references looked up (inline and missing ones included).
    pub references: u64,
    /// Read requests sent to targets (ranged and whole-file).
    pub requests: u64,
    /// Bytes received from targets (coalescing gaps included).
    pub bytes: u64,
}

#[derive(Debug)]
enum Layout {
    Json {
        refs: Arc<JsonRefs>,
        targets: Arc<Vec<Option<Arc<Resolved>>>>,
        indexes: HashMap<String, Arc<ChunkIndex>>,
    },
    Parquet {
        /// Boxed: a store is larger than the JSON layout's handles.
        store: Box<Store>,
        record_size: u64,
        /// The real path of a local set's folder: its reference files must resolve inside it.
        real_root: Option<PathBuf>,
    },
}

/// An opened reference set: its hierarchy, and a chunk reader per array.
#[derive(Debug)]
pub struct ReferenceSet {
    shared: Arc<Shared>,
    layout: Layout,
    nodes: Vec<Node>,
    skipped: Vec<SkippedArray>,
}

impl ReferenceSet {
    /// The reference set's location, for messages.
    pub fn url(&self) -> String {
        self.shared.display.clone()
    }

    /// Every group and array, parents first, sorted by path.
    pub fn nodes(&self) -> Vec<Node> {
        self.nodes.clone()
    }

    /// The arrays left out because zshard does not read them ([`Options::skip_unsupported`]), by path.
    pub fn skipped(&self) -> &[SkippedArray] {
        &self.skipped
    }

    /// Number of chunk references of a JSON set (`None` for Parquet sets, which are read lazily).
    pub fn reference_count(&self) -> Option<usize> {
        match &self.layout {
            Layout::Json { refs, .. } => Some(refs.len()),
            Layout::Parquet { .. } => None,
        }
    }

    /// Whether chunks are read over the network: a JSON set any of whose targets is remote (they
    /// are all resolved when it is opened), or a Parquet set stored remotely (its targets are known
    /// only as its record files are read). A run then needs many reads in flight to cover the
    /// latency, even when the reference file itself is local.
    pub fn reads_remote_targets(&self) -> bool {
        match &self.layout {
            Layout::Json { targets, .. } => targets.iter().flatten().any(|t| t.is_remote()),
            Layout::Parquet { store, .. } => store.location().is_remote(),
        }
    }

    /// The reads made for chunks so far.
    pub fn stats(&self) -> ReadStats {
        self.shared.stats()
    }

    /// Bytes this set holds in memory while its chunks are read, for a memory budget: a JSON set's
    /// parsed references, their grid indexes and resolved targets; for a Parquet set, the decoded
    /// reference files each array's reader caches (`parquet_cache` files of `record_size` rows).
    pub fn memory_bytes(&self) -> u64 {
        match &self.layout {
            Layout::Json {
                refs,
                targets,
                indexes,
            } => {
                let resolved = targets.len() as u64 * RESOLVED_TARGET_BYTES;
                let indexes: u64 = indexes.values().map(|i| i.memory_bytes()).sum();
                refs.memory_bytes() + resolved + indexes
            }
            Layout::Parquet { record_size, .. } => {
                let arrays = self
                    .nodes
                    .iter()
                    .filter(|n| matches!(n.kind, zshard_core::NodeKind::Array(_)))
                    .count() as u64;
                let cached = self.shared.options.parquet_cache.max(1) as u64;
                arrays
                    .saturating_mul(cached)
                    .saturating_mul(*record_size)
                    .saturating_mul(PARQUET_ROW_BYTES)
            }
        }
    }
}

/// Refuses a reference file of a local Parquet set (`path`, `display` in messages) whose real path
/// leads out of the set's real folder `real_root` (a symbolic link). `Ok(false)` when it does not
/// exist.
pub(super) fn contained(path: &Path, real_root: &Path, display: &str) -> Result<bool> {
    match std::fs::canonicalize(path) {
        Ok(real) if real.starts_with(real_root) => Ok(true),
        Ok(real) => Err(format(
            display,
            format!(
                "is refused: it leads to {}, outside the reference set {}",
                real.display(),
                real_root.display()
            ),
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(Error::Io {
            file: display.to_string(),
            source,
        }),
    }
}

/// A resolved target (its store handle, key and names), about.
const RESOLVED_TARGET_BYTES: u64 = 512;

/// A decoded Parquet reference row: its `Ref` and its share of the row group's path strings, about.
const PARQUET_ROW_BYTES: u64 = 96;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parquet_refs::tests::write;
    use serde_json::json;
    use zshard_core::{ArrayMeta, NodeKind};
    use zshard_store::IoRuntime;

    pub(super) fn runtime() -> Arc<IoRuntime> {
        IoRuntime::new(1).expect("runtime")
    }

    /// The Parquet reference set at `root`, with the default options.
    fn open_parquet(root: &Path) -> crate::Result<ReferenceSet> {
        ReferenceSet::open(
            root.to_str().expect("utf-8"),
            Format::Parquet,
            &Options::default(),
            runtime(),
        )
    }

    fn array_meta(set: &ReferenceSet, path: &str) -> ArrayMeta {
        set.nodes()
            .into_iter()
            .find_map(|n| match n.kind {
                NodeKind::Array(m) if n.path == path => Some(*m),
                _ => None,
            })
            .expect("array")
    }

    /// A Parquet set next to `data.bin`: array `x` (10 chunks of 2 bytes, 4 rows per file).
    pub(super) fn parquet_set(dir: &Path, files: &[(u64, Vec<u8>)]) -> PathBuf {
        std::fs::write(dir.join("data.bin"), (0u8..32).collect::<Vec<_>>()).expect("data");
        let root = dir.join("refs.parq");
        std::fs::create_dir_all(root.join("x")).expect("mkdir");
        let zmetadata = json!({"record_size": 4, "metadata": {
            ".zgroup": {"zarr_format": 2},
            "x/.zarray": {"zarr_format": 2, "shape": [20], "chunks": [2], "dtype": "|u1",
                          "compressor": null, "fill_value": 9, "order": "C", "filters": null}}});
        std::fs::write(root.join(".zmetadata"), zmetadata.to_string()).expect("zmetadata");
        for (n, bytes) in files {
            std::fs::write(root.join(format!("x/refs.{n}.parq")), bytes).expect("refs");
        }
        root
    }

    #[test]
    fn parquet_rows_files_and_coalescing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data.bin");
        let data = data.to_str().expect("utf-8");
        // refs.1.parq is absent (as kerchunk leaves out a record without references): 4..8 are missing.
        let root = parquet_set(
            dir.path(),
            &[
                (
                    0,
                    write(&[
                        (Some(data), 0, 2, None),
                        (Some(data), 2, 2, None),
                        (None, 0, 0, None),
                        (None, 0, 0, Some(b"in")),
                    ]),
                ),
                (
                    2,
                    write(&[
                        (Some("data.bin"), 30, 2, None),
                        (Some(data), 4, 2, None),
                        (None, 0, 0, None),
                        (None, 0, 0, None),
                    ]),
                ),
            ],
        );
        let set = open_parquet(&root).expect("opens");
        let meta = array_meta(&set, "x");
        let reader = set.reader("x", &meta);
        let coords: Vec<Vec<u64>> = (0..10).map(|i| vec![i]).collect();
        let got: Vec<Result<Option<Vec<u8>>, String>> = reader
            .read_chunks(&coords, u64::MAX)
            .into_iter()
            .map(|r| {
                r.map(|b| b.map(|b| b.to_vec()))
                    .map_err(|e| zshard_core::chain_text(&e))
            })
            .collect();
        let got_ok = |i: usize| got[i].clone().expect("reads");
        assert_eq!(got_ok(0), Some(vec![0, 1]));
        assert_eq!(got_ok(1), Some(vec![2, 3]));
        assert_eq!(got_ok(2), None);
        assert_eq!(got_ok(3), Some(b"in".to_vec()));
        for r in &got[4..8] {
            assert_eq!(
                r,
                &Ok(None),
                "chunks of a record without a file are missing"
            );
        }
        let got: Vec<Option<Vec<u8>>> = (0..10)
            .map(|i| got[i].clone().unwrap_or_default())
            .collect();
        assert_eq!(got[8], Some(vec![30, 31]));
        assert_eq!(got[9], Some(vec![4, 5]));
        // 0..2 and 2..4 and 4..6 of data.bin coalesce; 30..32 is within 64 KiB too: one request.
        assert_eq!(set.stats().requests, 1);
        // The plan's count of those reads is the run's, from the same rows and the same coalescing.
        let stats = set.stats();
        assert_eq!(
            reader.planned_reads(&coords, u64::MAX),
            Some(zshard_core::PlannedReads {
                requests: stats.requests,
                bytes: stats.bytes,
            })
        );
        assert_eq!(reader.chunk_key(&[3]), "x/3");
    }

    #[test]
    fn parquet_grid_mismatch_and_refused_targets() {
        let dir = tempfile::tempdir().expect("tempdir");
        let short = write(&[(Some("data.bin"), 0, 2, None)]);
        let root = parquet_set(
            dir.path(),
            &[
                (0, short),
                (1, write(&[(Some("/etc/passwd"), 0, 2, None); 4])),
            ],
        );
        let set = open_parquet(&root).expect("opens");
        let meta = array_meta(&set, "x");
        let reader = set.reader("x", &meta);
        let error_of = |chunk: u64| match reader.read_chunks(&[vec![chunk]], u64::MAX).remove(0) {
            Ok(_) => panic!("chunk {chunk} must fail"),
            Err(e) => zshard_core::chain_text(&e),
        };
        let text = error_of(0);
        assert!(
            text.contains("refs.0.parq") && text.contains("has 1 rows"),
            "{text}"
        );
        let text = error_of(5);
        assert!(
            text.contains("x/5") && text.contains("/etc/passwd") && text.contains("refused"),
            "{text}"
        );
        assert_eq!(set.stats().requests, 0);

        // A file beyond the grid fails at open.
        std::fs::write(root.join("x/refs.5.parq"), write(&[(None, 0, 0, None)])).expect("write");
        let e = open_parquet(&root).expect_err("beyond");
        assert!(e.to_string().contains("refs.5.parq"), "{e}");
    }

    #[test]
    fn strict_refs_make_a_missing_record_file_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data.bin");
        let data = data.to_str().expect("utf-8");
        let rows = write(&[(Some(data), 0, 2, None); 4]);
        // refs.1.parq is missing.
        let root = parquet_set(dir.path(), &[(0, rows.clone()), (2, rows.clone())]);
        let strict = Options {
            strict_refs: true,
            ..Options::default()
        };
        let path = root.to_str().expect("utf-8");
        let want = format!(
            "{}: is missing ({}: every record file of array x must exist)",
            root.join("x/refs.1.parq").display(),
            zshard_core::Setting::StrictRefs
        );
        let e = ReferenceSet::open(path, Format::Parquet, &strict, runtime()).expect_err("strict");
        assert!(e.to_string().contains(&want), "{e}");
        // Without it, the record reads as one without references.
        let set = open_parquet(&root).expect("opens");
        let reader = set.reader("x", &array_meta(&set, "x"));
        assert!(matches!(
            reader.read_chunks(&[vec![4]], u64::MAX).remove(0),
            Ok(None)
        ));
        // A file that disappears after the set was opened is refused when it is needed.
        std::fs::write(root.join("x/refs.1.parq"), &rows).expect("write");
        let set = ReferenceSet::open(path, Format::Parquet, &strict, runtime()).expect("opens");
        std::fs::remove_file(root.join("x/refs.1.parq")).expect("remove");
        let reader = set.reader("x", &array_meta(&set, "x"));
        let read = |i: u64| {
            reader
                .read_chunks(&[vec![i]], u64::MAX)
                .remove(0)
                .map(|b| b.map(|b| b.to_vec()))
                .map_err(|e| zshard_core::chain_text(&e))
        };
        assert_eq!(read(0), Ok(Some(vec![0, 1])));
        let e = read(4).expect_err("strict");
        assert!(e.contains(&want), "{e}");
    }

    #[test]
    fn a_plan_counts_parquet_reads_only_for_arrays_of_few_reference_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (chunks, counted) in [(64u64, true), (65, false)] {
            // One reference per file; no file is there (records without references).
            let root = dir.path().join(format!("refs{chunks}.parq"));
            std::fs::create_dir_all(root.join("x")).expect("mkdir");
            let zmetadata = json!({"record_size": 1, "metadata": {
                ".zgroup": {"zarr_format": 2},
                "x/.zarray": {"zarr_format": 2, "shape": [chunks * 2], "chunks": [2], "dtype": "|u1",
                              "compressor": null, "fill_value": 9, "order": "C", "filters": null}}});
            std::fs::write(root.join(".zmetadata"), zmetadata.to_string()).expect("zmetadata");
            let set = open_parquet(&root).expect("opens");
            let reader = set.reader("x", &array_meta(&set, "x"));
            let planned = reader.planned_reads(&[vec![0]], u64::MAX);
            assert_eq!(planned.is_some(), counted, "{chunks} files");
        }
    }

    #[test]
    fn parquet_files_that_lead_out_of_the_set_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = dir.path().join("outside");
        std::fs::create_dir(&outside).expect("mkdir");
        std::fs::write(
            outside.join("refs.0.parq"),
            write(&[(Some("data.bin"), 0, 2, None); 4]),
        )
        .expect("write");
        let root = parquet_set(dir.path(), &[]);
        std::os::unix::fs::symlink(outside.join("refs.0.parq"), root.join("x/refs.0.parq"))
            .expect("symlink");
        let set = open_parquet(&root).expect("opens");
        let reader = set.reader("x", &array_meta(&set, "x"));
        let e = match reader.read_chunks(&[vec![0]], u64::MAX).remove(0) {
            Ok(_) => panic!("the link must be refused"),
            Err(e) => zshard_core::chain_text(&e),
        };
        let real = std::fs::canonicalize(outside.join("refs.0.parq")).expect("real");
        let want = format!(
            "{}: is refused: it leads to {}, outside the reference set",
            root.join("x/refs.0.parq").display(),
            real.display()
        );
        assert!(e.contains(&want), "{e}");
        assert_eq!(set.stats().requests, 0);

        // .zmetadata too, when the set is opened.
        std::fs::rename(root.join(".zmetadata"), outside.join(".zmetadata")).expect("move");
        std::os::unix::fs::symlink(outside.join(".zmetadata"), root.join(".zmetadata"))
            .expect("symlink");
        let e = open_parquet(&root).expect_err("refused");
        assert!(
            e.to_string()
                .contains(".zmetadata: is refused: it leads to"),
            "{e}"
        );
        // A link inside the set is read.
        std::fs::remove_file(root.join(".zmetadata")).expect("rm");
        std::fs::rename(outside.join(".zmetadata"), root.join("meta.json")).expect("move");
        std::os::unix::fs::symlink("meta.json", root.join(".zmetadata")).expect("symlink");
        assert!(open_parquet(&root).is_ok());
    }
}
