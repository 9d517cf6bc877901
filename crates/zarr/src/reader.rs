//! Reading an array's chunks from its store by grid position: one object per chunk, or the inner
//! chunks of a source stored in shards, by ranged reads grouped with [`zshard_store::coalesce`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use zshard_core::{
    chain_text, product, ArrayMeta, BoxError, ChunkKeyEncoding, ChunkReader, ChunkVersions, Error,
    IndexLocation, Result, ShardIndex, SourceShards,
};
use zshard_store::{coalesce, RangeRequest, Store, Visit, COALESCE_GAP, MAX_REQUEST};

/// The reader of an array's chunks as `meta` describes them: by inner chunk for an array stored in
/// shards (`meta.sharded`, see [`ArrayMeta::read_by_inner_chunk`]), else one stored chunk per key.
/// `store` is located at the array's folder.
pub fn chunk_reader(store: Store, meta: &ArrayMeta) -> Arc<dyn ChunkReader> {
    match &meta.sharded {
        Some(shards) => Arc::new(ShardedChunkReader::new(
            store,
            meta.chunk_key_encoding,
            shards.clone(),
            &meta.chunk_shape,
        )),
        None => Arc::new(ZarrChunkReader::new(store, meta.chunk_key_encoding)),
    }
}

/// The reader of the chunks of the array at `path` of the hierarchy at `root`: [`chunk_reader`] over
/// the array's folder, or, for the v3 draft layout (its [`ChunkKeyEncoding::Draft`] keys), over its
/// folder below `data/root/`.
pub fn array_chunk_reader(root: &Store, path: &str, meta: &ArrayMeta) -> Arc<dyn ChunkReader> {
    let folder = match meta.chunk_key_encoding {
        ChunkKeyEncoding::Draft { .. } => crate::draft::data_prefix(path),
        _ => path.to_string(),
    };
    chunk_reader(root.child(&folder), meta)
}

/// Reads the stored chunks of one Zarr array (v2 or v3) by grid coordinates.
#[derive(Debug)]
pub struct ZarrChunkReader {
    store: Store,
    encoding: ChunkKeyEncoding,
}

impl ZarrChunkReader {
    /// `store` is located at the array's folder.
    pub fn new(store: Store, encoding: ChunkKeyEncoding) -> Self {
        ZarrChunkReader { store, encoding }
    }
}

impl ChunkReader for ZarrChunkReader {
    fn chunk_key(&self, coord: &[u64]) -> String {
        self.store.url(&self.encoding.key(coord))
    }

    fn read_chunks(&self, coords: &[Vec<u64>], max_len: u64) -> Vec<Result<Option<Bytes>>> {
        let keys: Vec<String> = coords.iter().map(|c| self.encoding.key(c)).collect();
        self.store
            .get_many_bounded(&keys, max_len)
            .into_iter()
            .zip(&keys)
            .map(|(result, key)| {
                result.map_err(|e| Error::Read {
                    key: self.store.url(key),
                    source: Box::new(e),
                })
            })
            .collect()
    }

    fn chunk_versions(&self, grid: &[u64]) -> Result<Option<ChunkVersions>> {
        let splits = match self.store.location().is_remote() {
            true => self.encoding.listing_splits(grid),
            false => Vec::new(),
        };
        listed_versions(&self.store, self.encoding, grid, &splits).map(Some)
    }

    fn names_versions(&self) -> bool {
        true
    }
}

/// The version of every object of the array folder `store` that is a chunk key of `encoding`
/// (metadata documents and anything else are left out), from one listing, in segments cut at
/// `splits` listed side by side on an object store.
fn listed_versions(
    store: &Store,
    encoding: ChunkKeyEncoding,
    grid: &[u64],
    splits: &[String],
) -> Result<ChunkVersions> {
    let folder = encoding.chunk_folder();
    // Page by page into the table (16 bytes per chunk): the listing's keys and versions, some 100
    // bytes per object, are never held all at once.
    let mut versions = ChunkVersions::builder(grid);
    store
        .visit_objects_split(folder, splits, &mut |visit| match visit {
            Visit::Object(o) => versions.insert_listed(encoding, &o.key, &o.version, o.size),
            Visit::StartOver => versions = ChunkVersions::builder(grid),
        })
        .map_err(|e| Error::Read {
            key: store.url(folder),
            source: Box::new(e),
        })?;
    Ok(versions.build())
}

/// Indexes of source shards kept for the next reads of the same shards (a few MiB at most: an index
/// is 16 bytes per inner chunk, and the parts being read span few shards at a time).
const KEPT_INDEXES: usize = 64;

/// The most a shard's index read takes beside the index (see [`ShardedChunkReader::edge_len`]).
const EDGE_MAX: u64 = 16 << 20;

/// Whether `wanted` of a shard's `chunks` inner chunks are enough of it to read it with its index.
fn mostly_wanted(wanted: u64, chunks: u64) -> bool {
    wanted.saturating_mul(2) >= chunks
}

/// Whether a read of `wanted` of the `chunks` inner chunks of one shard on an object store, each of
/// at most `max_len` bytes, comes with the shard's index in one request (the read takes up to what
/// all its inner chunks may take, see [`ShardedChunkReader`]); else the index and the chunks'
/// ranges are two requests or more. For an estimate of the requests (`zshard plan`).
pub fn reads_shard_with_index(wanted: u64, chunks: u64, max_len: u64) -> bool {
    mostly_wanted(wanted, chunks) && chunks.saturating_mul(max_len) <= EDGE_MAX
}

/// Bytes of a shard read with its index: `read`'s range, as one request of them.
#[derive(Debug)]
struct ShardEdge {
    read: RangeRequest,
    bytes: Bytes,
}

impl ShardEdge {
    /// The bytes `range` of the shard, when this edge holds all of them.
    fn slice(&self, range: &std::ops::Range<u64>) -> Option<Bytes> {
        let inside = self.read.range.start <= range.start && range.end <= self.read.range.end;
        inside.then(|| self.read.slice(&self.bytes, range, "").ok())?
    }
}

/// Reads the inner chunks of an array stored in shards (`sharding_indexed`, see
/// [`ArrayMeta::read_by_inner_chunk`]) by their grid position: the shard's index first (kept for the
/// shard's later reads), then only the byte ranges of the inner chunks asked for, neighbours in one
/// request. A missing shard, or an empty index entry, is a missing chunk.
#[derive(Debug)]
pub struct ShardedChunkReader {
    store: Store,
    encoding: ChunkKeyEncoding,
    shards: SourceShards,
    inner_shape: Vec<u64>,
    indexes: Mutex<HashMap<Vec<u64>, Arc<Option<ShardIndex>>>>,
}

impl ShardedChunkReader {
    /// `store` is located at the array's folder; inner chunks have the shape `inner_shape`.
    pub fn new(
        store: Store,
        encoding: ChunkKeyEncoding,
        shards: SourceShards,
        inner_shape: &[u64],
    ) -> Self {
        ShardedChunkReader {
            inner_shape: inner_shape.to_vec(),
            store,
            encoding,
            shards,
            indexes: Mutex::new(HashMap::new()),
        }
    }

    /// The shard holding inner chunk `coord`, the chunk's C-order index within it and the shard's
    /// inner chunks per dimension (see [`SourceShards::locate`]); `None` outside the shard grid.
    fn locate(&self, coord: &[u64]) -> Option<(Vec<u64>, u64, Vec<u64>)> {
        self.shards.locate(coord, &self.inner_shape)
    }

    /// The index of `shard`, `None` when the shard does not exist. When the index is not kept
    /// already, the read takes up to `edge` bytes more at the index's end of the shard, which come
    /// back beside the index (see [`ShardEdge`]).
    fn index(
        &self,
        shard: &[u64],
        per_shard: &[u64],
        edge: u64,
    ) -> Result<(Arc<Option<ShardIndex>>, Option<ShardEdge>)> {
        let kept = self.indexes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(index) = kept.get(shard) {
            return Ok((Arc::clone(index), None));
        }
        drop(kept);
        let chunks = product(per_shard) as usize;
        let encoding = self.shards.index_encoding;
        let index_len = encoding.byte_len(chunks);
        let key = self.encoding.key(shard);
        let error = |source: BoxError| Error::Read {
            key: format!("{} (shard index)", self.store.url(&key)),
            source,
        };
        let at_end = self.shards.index_location == IndexLocation::End;
        let read = self
            .store
            .get_edge_sized(&key, edge.saturating_add(index_len as u64), at_end)
            .map_err(|e| error(Box::new(e)))?;
        let (index, edge) = match read {
            Some((bytes, size)) => {
                // A shard shorter than its index gives the decoder all it has, which it refuses.
                let index_bytes = match (bytes.len().checked_sub(index_len), at_end) {
                    (Some(start), true) => bytes.slice(start..),
                    (Some(_), false) => bytes.slice(..index_len),
                    (None, _) => bytes.clone(),
                };
                let index = ShardIndex::decode(&index_bytes, chunks, encoding)
                    .map_err(|e| error(Box::new(e)))?;
                // Suffix bytes end at the object's end (a read of another version fails).
                let start = if at_end {
                    size.saturating_sub(bytes.len() as u64)
                } else {
                    0
                };
                let read = RangeRequest {
                    range: start..start.saturating_add(bytes.len() as u64),
                    members: Vec::new(),
                };
                (Some(index), Some(ShardEdge { read, bytes }))
            }
            None => (None, None),
        };
        let index = Arc::new(index);
        let mut kept = self.indexes.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() >= KEPT_INDEXES {
            kept.clear();
        }
        kept.insert(shard.to_vec(), Arc::clone(&index));
        Ok((index, edge))
    }

    /// How many bytes the index read of a shard takes beside its index when `members` of its
    /// `chunks` inner chunks are wanted, each of at most `max_len` bytes (see
    /// [`reads_shard_with_index`]): on an object store, where every request is a round trip, a
    /// shard of which at least half the inner chunks are wanted is read from its index's end up to
    /// what all its inner chunks may take, at most [`EDGE_MAX`]. The bytes held are at most twice
    /// what the chunks asked for may hold.
    fn edge_len(&self, members: usize, chunks: u64, max_len: u64) -> u64 {
        if !self.store.location().is_remote() || !mostly_wanted(members as u64, chunks) {
            return 0;
        }
        chunks.saturating_mul(max_len).min(EDGE_MAX)
    }

    /// Reads the inner chunks `members` (slot in the batch, index in the shard) of one shard; an
    /// inner chunk whose index entry states more than `max_len` bytes is refused unread.
    fn read_shard(
        &self,
        (shard, per_shard): (&[u64], &[u64]),
        members: &[(usize, u64)],
        max_len: u64,
        out: &mut [Result<Option<Bytes>>],
    ) {
        let edge = self.edge_len(members.len(), product(per_shard), max_len);
        let (index, edge) = match self.index(shard, per_shard, edge) {
            Ok(read) => read,
            Err(e) => {
                // Every chunk of the shard fails with the index; the first error carries its cause.
                let text = match &e {
                    Error::Read { source, .. } => chain_text(source.as_ref()),
                    other => chain_text(other),
                };
                for &(slot, _) in members {
                    out[slot] = Err(Error::Read {
                        key: format!(
                            "{} (shard index)",
                            self.store.url(&self.encoding.key(shard))
                        ),
                        source: text.clone().into(),
                    });
                }
                return;
            }
        };
        let Some(index) = index.as_ref() else {
            for &(slot, _) in members {
                out[slot] = Ok(None);
            }
            return;
        };
        // (slot, byte range) of every stored chunk.
        let mut wanted: Vec<(usize, std::ops::Range<u64>)> = Vec::with_capacity(members.len());
        for &(slot, inner) in members {
            match index.entries().get(inner as usize).copied().flatten() {
                None => out[slot] = Ok(None),
                Some(at) if at.nbytes > max_len => {
                    out[slot] = Err(Error::Read {
                        key: self.store.url(&self.encoding.key(shard)),
                        source: Box::new(zshard_store::Error::TooLarge {
                            location: format!("inner chunk {inner}"),
                            len: at.nbytes,
                            at_least: false,
                            max: max_len,
                        }),
                    })
                }
                Some(at) => match at.offset.checked_add(at.nbytes) {
                    Some(end) => match edge.as_ref().and_then(|e| e.slice(&(at.offset..end))) {
                        Some(bytes) => out[slot] = Ok(Some(bytes)),
                        None => wanted.push((slot, at.offset..end)),
                    },
                    None => {
                        out[slot] = Err(Error::Read {
                            key: self.store.url(&self.encoding.key(shard)),
                            source: format!(
                                "inner chunk {inner}: offset {} + {} bytes overflows",
                                at.offset, at.nbytes
                            )
                            .into(),
                        })
                    }
                },
            }
        }
        if wanted.is_empty() {
            return;
        }
        let ranges: Vec<std::ops::Range<u64>> = wanted.iter().map(|(_, r)| r.clone()).collect();
        let requests = coalesce(&ranges, Some(COALESCE_GAP), MAX_REQUEST);
        let key = self.encoding.key(shard);
        let url = self.store.url(&key);
        let batch: Vec<(String, std::ops::Range<u64>)> = requests
            .iter()
            .map(|r| (key.clone(), r.range.clone()))
            .collect();
        for (request, result) in requests.iter().zip(self.store.get_ranges(&batch)) {
            for &member in &request.members {
                let (slot, range) = &wanted[member];
                out[*slot] = match &result {
                    Ok(bytes) => request
                        .slice(bytes, range, "the shard")
                        .map(Some)
                        .map_err(|e| Error::Read {
                            key: url.clone(),
                            source: Box::new(e),
                        }),
                    Err(e) => Err(Error::Read {
                        key: url.clone(),
                        source: chain_text(e).into(),
                    }),
                };
            }
        }
    }
}

/// A shard's coordinates, its inner chunks per dimension and the chunks of a batch in it: (slot in
/// the batch, index in the shard).
type ShardMembers = (Vec<u64>, Vec<u64>, Vec<(usize, u64)>);

impl ChunkReader for ShardedChunkReader {
    fn chunk_key(&self, coord: &[u64]) -> String {
        match self.locate(coord) {
            Some((shard, inner, _)) => format!(
                "{} (inner chunk {inner})",
                self.store.url(&self.encoding.key(&shard))
            ),
            None => format!(
                "{} (inner chunk {coord:?}, outside the shard grid)",
                self.store.url("")
            ),
        }
    }

    fn read_chunks(&self, coords: &[Vec<u64>], max_len: u64) -> Vec<Result<Option<Bytes>>> {
        let mut out: Vec<Result<Option<Bytes>>> = coords.iter().map(|_| Ok(None)).collect();
        // Shards in the order they are first needed, each with its chunks' slots. A chunk outside
        // the shard grid (past the array's end) is missing.
        let mut shards: Vec<ShardMembers> = Vec::new();
        for (slot, coord) in coords.iter().enumerate() {
            let Some((shard, inner, per_shard)) = self.locate(coord) else {
                continue;
            };
            match shards.iter_mut().find(|(s, _, _)| *s == shard) {
                Some((_, _, members)) => members.push((slot, inner)),
                None => shards.push((shard, per_shard, vec![(slot, inner)])),
            }
        }
        for (shard, per_shard, members) in &shards {
            self.read_shard((shard, per_shard), members, max_len, &mut out);
        }
        out
    }

    /// By shard: an inner chunk has the version of the shard holding it, so a shard written again
    /// upstream changes every chunk in it.
    fn chunk_versions(&self, grid: &[u64]) -> Result<Option<ChunkVersions>> {
        // A shard's coordinate is never past its first chunk's: the chunk grid indexes the shards too.
        // The listing is cut on the shard grid, as a chunk-per-object array's is on its chunk grid.
        let splits = match self.store.location().is_remote() {
            true => self
                .shards
                .listing_splits(self.encoding, grid, &self.inner_shape),
            false => Vec::new(),
        };
        let versions = listed_versions(&self.store, self.encoding, grid, &splits)?;
        let (shards, inner_shape) = (self.shards.clone(), self.inner_shape.clone());
        Ok(Some(versions.stored_in(move |coord| {
            shards
                .locate(coord, &inner_shape)
                .map(|(shard, _, _)| shard)
        })))
    }

    fn names_versions(&self) -> bool {
        true
    }
}
