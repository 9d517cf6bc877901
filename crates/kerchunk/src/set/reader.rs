//! The chunk readers: a chunk's grid position leads to its reference (through the JSON set's chunk
//! index, or the row of a Parquet reference file, decoded files cached per array), and
//! [`Want::of`] turns references into what `fetch` reads.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use zshard_core::{linear_index, unravel_index, ArrayMeta, ChunkReader, ChunkVersions};
use zshard_store::Store;

use super::fetch::{Resolved, Shared, Want};
use super::{Layout, ReferenceSet};
use crate::error::{format, Error, Result};
use crate::parquet_refs::{self, RefRows};
use crate::refs::{chunk_grid, grid_len, ChunkIndex, JsonRefs};

impl ReferenceSet {
    /// The reader of the chunks of the array at `path` with metadata `meta`.
    pub fn reader(&self, path: &str, meta: &ArrayMeta) -> Arc<dyn ChunkReader> {
        let grid = chunk_grid(meta);
        let common = ArrayCommon {
            shared: self.shared.clone(),
            path: path.to_string(),
            encoding: meta.chunk_key_encoding,
            grid,
        };
        match &self.layout {
            Layout::Json {
                refs,
                targets,
                indexes,
            } => Arc::new(JsonReader {
                common,
                refs: refs.clone(),
                targets: targets.clone(),
                index: indexes
                    .get(path)
                    .cloned()
                    .unwrap_or_else(|| Arc::new(ChunkIndex::Sparse(Vec::new()))),
            }),
            Layout::Parquet {
                store,
                record_size,
                real_root,
            } => Arc::new(ParquetReader {
                common,
                store: store.child(path),
                record_size: *record_size,
                real_root: real_root.clone(),
                cache: Mutex::new(VecDeque::new()),
                loads: AtomicU64::new(0),
            }),
        }
    }
}

#[derive(Debug)]
struct ArrayCommon {
    shared: Arc<Shared>,
    path: String,
    encoding: zshard_core::ChunkKeyEncoding,
    grid: Vec<u64>,
}

impl ArrayCommon {
    fn key(&self, coord: &[u64]) -> String {
        self.encoding.key_under(&self.path, coord)
    }

    /// The version of every chunk of the grid (see [`Want::version`]), asking `wants` a batch of
    /// coordinates at a time; `None` for a grid too large to enumerate.
    /// Whether the grid is small enough to enumerate its chunks' references (see
    /// [`MAX_VERSIONED_CHUNKS`]).
    fn enumerable(&self) -> bool {
        grid_len(&self.grid).is_some_and(|n| n <= MAX_VERSIONED_CHUNKS)
    }

    fn versions(
        &self,
        wants: impl Fn(&[Vec<u64>]) -> Vec<Want>,
    ) -> zshard_core::Result<Option<ChunkVersions>> {
        const BATCH: u64 = 4096;
        let Some(total) = grid_len(&self.grid).filter(|&n| n <= MAX_VERSIONED_CHUNKS) else {
            return Ok(None);
        };
        let mut versions = ChunkVersions::builder(&self.grid);
        let mut targets = std::collections::HashMap::new();
        let mut start = 0;
        while start < total {
            let end = (start + BATCH).min(total);
            let coords: Vec<Vec<u64>> =
                (start..end).map(|i| unravel_index(i, &self.grid)).collect();
            let batch = wants(&coords);
            super::fetch::target_versions(&batch, &mut targets)?;
            for (coord, want) in coords.into_iter().zip(batch) {
                if let Some(version) = want.version(&targets) {
                    versions.insert_hashed(coord, version);
                }
            }
            start = end;
        }
        Ok(Some(versions.build()))
    }

    fn position(&self, coord: &[u64]) -> Option<u64> {
        let inside =
            coord.len() == self.grid.len() && coord.iter().zip(&self.grid).all(|(c, n)| c < n);
        inside.then(|| linear_index(coord, &self.grid))
    }
}

#[derive(Debug)]
struct JsonReader {
    common: ArrayCommon,
    refs: Arc<JsonRefs>,
    targets: Arc<Vec<Option<Arc<Resolved>>>>,
    index: Arc<ChunkIndex>,
}

impl ChunkReader for JsonReader {
    fn chunk_key(&self, coord: &[u64]) -> String {
        self.common.key(coord)
    }

    fn read_chunks(
        &self,
        coords: &[Vec<u64>],
        max_len: u64,
    ) -> Vec<zshard_core::Result<Option<Bytes>>> {
        self.common.shared.fetch(self.wants(coords), max_len)
    }

    fn coalesces_reads(&self) -> bool {
        self.common.shared.options.coalesce_gap.is_some()
    }

    fn planned_reads(
        &self,
        coords: &[Vec<u64>],
        max_len: u64,
    ) -> Option<zshard_core::PlannedReads> {
        Some(self.common.shared.planned(self.wants(coords), max_len))
    }

    fn chunk_versions(&self, _grid: &[u64]) -> zshard_core::Result<Option<ChunkVersions>> {
        self.common.versions(|coords| self.wants(coords))
    }

    fn names_versions(&self) -> bool {
        self.common.enumerable()
    }
}

impl JsonReader {
    /// What reading the chunks at `coords` takes, one entry per chunk.
    fn wants(&self, coords: &[Vec<u64>]) -> Vec<Want> {
        coords
            .iter()
            .map(|coord| {
                let Some(entry) = self.common.position(coord).and_then(|l| self.index.get(l))
                else {
                    return Want::Ready(None);
                };
                let r = self.refs.entry(entry);
                Want::of(
                    &r,
                    || self.refs.inline(&r),
                    || {
                        self.targets
                            .get(r.target as usize)
                            .cloned()
                            .flatten()
                            .ok_or_else(|| format(self.refs.file(), "unresolved target"))
                    },
                )
            })
            .collect()
    }
}

/// The most chunks of an array whose references are enumerated for their versions (see
/// [`ArrayCommon::versions`]): a grid of more (mostly missing chunks, at 16 bytes of bookkeeping each
/// when present) is not brought up to date, only converted again.
const MAX_VERSIONED_CHUNKS: u64 = 1 << 28;

/// A decoded reference file.
type CachedFile = Arc<RefRows>;

#[derive(Debug)]
struct ParquetReader {
    common: ArrayCommon,
    store: Store,
    record_size: u64,
    /// The real path of a local set's folder (see [`super::contained`]).
    real_root: Option<PathBuf>,
    cache: Mutex<VecDeque<(u64, CachedFile)>>,
    /// Reference files read so far (the cache's misses).
    loads: AtomicU64,
}

/// Reference files a plan reads at most per array to count the GETs of a Parquet reference set
/// from its byte ranges (files read again after they left the cache count again); an array that
/// needs more is counted one GET per chunk (an upper bound), so that a plan of a set of millions
/// of references reads no more than this many files of each array (the run's cache bounds the
/// memory, as it does the run's).
pub(crate) const PLANNED_RECORD_FILES: u64 = 64;

impl ParquetReader {
    fn file(&self, n: u64) -> Result<CachedFile> {
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, f)) = cache.iter().find(|(m, _)| *m == n) {
                return Ok(f.clone());
            }
        }
        self.loads.fetch_add(1, Ordering::Relaxed);
        let name = format!("refs.{n}.parq");
        let display = self.store.url(&name);
        let exists = match (&self.real_root, self.store.local_path(&name)) {
            (Some(real_root), Some(path)) => super::contained(&path, real_root, &display)?,
            _ => true,
        };
        let bytes = match exists {
            true => self.store.get(&name).map_err(|source| Error::Store {
                file: display.clone(),
                source,
            })?,
            false => None,
        };
        let local = self.store.local_path(&name);
        // Absent only when nothing is there: a folder (or other non-file) at the name is unreadable.
        if let (None, Some(path)) = (&bytes, &local) {
            if std::fs::symlink_metadata(path).is_ok() {
                return Err(format(&display, "is not a readable file"));
            }
        }
        let rows = match bytes {
            None if self.common.shared.options.strict_refs => {
                return Err(format(
                    &display,
                    super::open::missing_record(&self.common.path),
                ));
            }
            // kerchunk's writer leaves out the file of a record without a single reference
            // (fsspec then reads its chunks as missing): an absent file is such a record.
            None => RefRows::default(),
            Some(bytes) => {
                let rows = parquet_refs::decode(&display, bytes)?;
                let total = grid_len(&self.common.grid).unwrap_or(u64::MAX);
                let needed = self.record_size.min(total - n * self.record_size);
                let have = rows.rows.len() as u64;
                if have < needed || have > self.record_size {
                    return Err(format(
                        &display,
                        format!(
                            "has {have} rows, but the chunk grid {:?} ({total} chunks, record_size {}) needs {needed}",
                            self.common.grid, self.record_size
                        ),
                    ));
                }
                rows
            }
        };
        let file = Arc::new(rows);
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.push_back((n, file.clone()));
        while cache.len() > self.common.shared.options.parquet_cache.max(1) {
            cache.pop_front();
        }
        Ok(file)
    }
}

impl ChunkReader for ParquetReader {
    fn chunk_key(&self, coord: &[u64]) -> String {
        self.common.key(coord)
    }

    fn coalesces_reads(&self) -> bool {
        self.common.shared.options.coalesce_gap.is_some()
    }

    fn read_chunks(
        &self,
        coords: &[Vec<u64>],
        max_len: u64,
    ) -> Vec<zshard_core::Result<Option<Bytes>>> {
        self.common.shared.fetch(self.wants(coords).0, max_len)
    }

    fn chunk_versions(&self, _grid: &[u64]) -> zshard_core::Result<Option<ChunkVersions>> {
        self.chunk_versions_of()
    }

    fn names_versions(&self) -> bool {
        self.common.enumerable()
    }

    /// As for JSON references: the byte ranges of the rows of `coords`, coalesced as
    /// [`ChunkReader::read_chunks`] coalesces them; `None` when the array has more than
    /// [`PLANNED_RECORD_FILES`] reference files, once that many were read, or when one of them
    /// cannot be read (the run reports it).
    fn planned_reads(
        &self,
        coords: &[Vec<u64>],
        max_len: u64,
    ) -> Option<zshard_core::PlannedReads> {
        let files = grid_len(&self.common.grid)?.div_ceil(self.record_size);
        if files > PLANNED_RECORD_FILES {
            return None;
        }
        let (wants, readable) = self.wants(coords);
        if !readable || self.loads.load(Ordering::Relaxed) > PLANNED_RECORD_FILES {
            return None;
        }
        Some(self.common.shared.planned(wants, max_len))
    }
}

impl ParquetReader {
    /// What reading the chunks at `coords` takes, one entry per chunk, and whether every reference
    /// file they need could be read.
    fn chunk_versions_of(&self) -> zshard_core::Result<Option<ChunkVersions>> {
        self.common.versions(|coords| self.wants(coords).0)
    }

    fn wants(&self, coords: &[Vec<u64>]) -> (Vec<Want>, bool) {
        let mut files: HashMap<u64, Result<CachedFile, String>> = HashMap::new();
        let wants = coords
            .iter()
            .map(|coord| {
                let Some(linear) = self.common.position(coord) else {
                    return Want::Ready(None);
                };
                let (n, row) = (
                    linear / self.record_size,
                    (linear % self.record_size) as usize,
                );
                let file = files
                    .entry(n)
                    .or_insert_with(|| self.file(n).map_err(|e| zshard_core::chain_text(&e)));
                let file = match file {
                    Ok(f) => f.clone(),
                    Err(text) => {
                        return Want::Failed(format(
                            self.store.url(&format!("refs.{n}.parq")),
                            text.clone(),
                        ))
                    }
                };
                let rows = file.as_ref();
                let Some(r) = rows.rows.get(row) else {
                    return Want::Ready(None);
                };
                Want::of(
                    r,
                    || rows.inline(r),
                    || {
                        let url = &rows.paths[r.target as usize];
                        self.common
                            .shared
                            .resolve_with(url, || self.common.key(coord))
                    },
                )
            })
            .collect();
        (wants, files.values().all(Result::is_ok))
    }
}
