//! The two seams of the pipeline: where encoded chunks come from and where shards go. Readers and
//! writers implement them; the stages see nothing else of the outside world.

use std::fmt::Debug;
use std::sync::Arc;

use bytes::Bytes;

use crate::error::Result;

/// A source of encoded chunks of one array, addressed by chunk grid coordinates.
pub trait ChunkReader: Send + Sync + Debug {
    /// The key of a chunk, for messages (for example `temperature/0.3`).
    fn chunk_key(&self, coord: &[u64]) -> String;

    /// Reads several chunks at once, so that an implementation can overlap or coalesce requests.
    /// `Ok(None)` is a chunk that does not exist (it holds the fill value). The result has one entry per
    /// coordinate, in order.
    ///
    /// `max_len` is the most bytes a stored chunk can take (the source chain's
    /// [`CodecChain::max_stored_len`](crate::CodecChain::max_stored_len) for a chunk): a chunk
    /// stored in more fails, naming both sizes, without being read whole (at most `max_len + 1`
    /// bytes of it are), whatever its object, file, member or reference states, so that no input
    /// makes a run allocate more than its chunks can need. `u64::MAX` reads without a bound.
    fn read_chunks(&self, coords: &[Vec<u64>], max_len: u64) -> Vec<Result<Option<Bytes>>>;

    /// Whether one call of [`ChunkReader::read_chunks`] with more chunks can take fewer requests
    /// than several calls with fewer (nearby byte ranges of one file coalesce into one request, as
    /// for references into HDF5 files): the pipeline then reads the chunks of several shards in
    /// flight with one call. `false` by default.
    fn coalesces_reads(&self) -> bool {
        false
    }

    /// The requests and bytes that [`ChunkReader::read_chunks`] of `coords` would take, when the
    /// reader knows without reading (references name their byte ranges); `None` by default.
    fn planned_reads(&self, coords: &[Vec<u64>], max_len: u64) -> Option<PlannedReads> {
        let _ = (coords, max_len);
        None
    }

    /// The version of every stored chunk of an array whose chunk grid has `grid` chunks along each
    /// dimension, from what a listing of its store (or its references) names at no cost per chunk,
    /// so that a later run can tell which chunks changed without reading them; `Ok(None)` when the
    /// reader cannot tell (the default), and then a finished conversion cannot be brought up to
    /// date, only converted again. (The grid lets an object store's listing run in segments side by
    /// side, see `zshard_store::Store::list_objects_split`.)
    fn chunk_versions(&self, grid: &[u64]) -> Result<Option<ChunkVersions>> {
        let _ = grid;
        Ok(None)
    }

    /// Whether [`ChunkReader::chunk_versions`] gives versions (known without listing): `false` by
    /// default.
    fn names_versions(&self) -> bool {
        false
    }

    /// The version of the whole source that [`ChunkReader::chunk_versions`] lists (an Icechunk
    /// snapshot id), when it has one: versions listed at it can be kept and handed back to
    /// [`ChunkReader::chunk_versions_since`] by a later run. `None` by default.
    fn source_version(&self) -> Option<String> {
        None
    }

    /// [`ChunkReader::chunk_versions`], given the versions listed by an earlier run (`known`, at
    /// [`KnownVersions::source_version`]): a source that can tell what changed since (Icechunk's
    /// diff between two snapshots) reads only that, and none at all when its version is the same.
    /// The versions are those a listing would give; [`VersionsFrom`] says how they were found.
    /// The default lists.
    fn chunk_versions_since(
        &self,
        grid: &[u64],
        known: Option<&KnownVersions>,
    ) -> Result<(Option<ChunkVersions>, VersionsFrom)> {
        let _ = known;
        Ok((
            self.chunk_versions(grid)?,
            VersionsFrom::Listed { why: None },
        ))
    }
}

/// How [`ChunkReader::chunk_versions_since`] found the versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionsFrom {
    /// The source's version is the one known: the known versions, nothing read.
    Unchanged,
    /// From the known versions and what the source says changed since (`chunks` chunks looked up).
    Changed {
        /// The changed chunks of the array looked up.
        chunks: u64,
    },
    /// Listed whole; `why`, when versions were known but could not be brought forward.
    Listed {
        /// Why the known versions were not used.
        why: Option<String>,
    },
}

/// Versions listed at one version of a whole source (see [`ChunkReader::source_version`]), as an
/// earlier run kept them (see [`KnownVersions::to_bytes`]).
#[derive(Debug, Clone)]
pub struct KnownVersions {
    /// The source they were listed from (a repository's location as a conversion records it):
    /// versions kept for another source are none of this one's, whatever its version.
    pub location: String,
    /// The array of that source they are the versions of (its path in the source).
    pub array: String,
    /// The source's version they were listed at.
    pub source_version: String,
    /// The versions.
    pub versions: ChunkVersions,
}

/// The first line of [`KnownVersions::to_bytes`]. Files of version 1 named no source: read as
/// none (the next run lists, and keeps a file of this version).
const KNOWN_VERSIONS_HEADER: &str = "zshard source versions 2";

impl KnownVersions {
    /// Whether these versions were kept for the array `array` of the source at `location`.
    pub fn describe(&self, location: &str, array: &str) -> bool {
        self.location == location && self.array == array
    }

    /// As kept: five text lines (a header, the source's location and the array's path as JSON
    /// strings, the source's version, the grid and stored bytes), then 16 bytes a stored chunk
    /// (index and version, little-endian), then a checksum of all that (8 bytes), so that a
    /// damaged file reads as none rather than as other versions.
    pub fn to_bytes(&self) -> Bytes {
        let grid: Vec<String> = self.versions.grid.iter().map(u64::to_string).collect();
        let stored_bytes = self
            .versions
            .stored_bytes
            .map_or("-".to_string(), |b| b.to_string());
        // JSON strings: a location or path holding a line break stays on its line.
        let quoted = |text: &str| serde_json::Value::from(text).to_string();
        let mut out = format!(
            "{KNOWN_VERSIONS_HEADER}\n{}\n{}\n{}\n{}\t{stored_bytes}\n",
            quoted(&self.location),
            quoted(&self.array),
            self.source_version,
            grid.join(",")
        )
        .into_bytes();
        for (index, version) in &self.versions.stored {
            out.extend_from_slice(&index.to_le_bytes());
            out.extend_from_slice(&version.to_le_bytes());
        }
        let sum = stable_hash(&out);
        out.extend_from_slice(&sum.to_le_bytes());
        Bytes::from(out)
    }

    /// What [`KnownVersions::to_bytes`] wrote; `None` for anything else or a damaged copy.
    pub fn from_bytes(bytes: &[u8]) -> Option<KnownVersions> {
        let (body, sum) = bytes.split_at_checked(bytes.len().checked_sub(8)?)?;
        if stable_hash(body).to_le_bytes() != sum {
            return None;
        }
        let mut lines = body.splitn(6, |&b| b == b'\n');
        let header = std::str::from_utf8(lines.next()?).ok()?;
        if header != KNOWN_VERSIONS_HEADER {
            return None;
        }
        let location: String = serde_json::from_slice(lines.next()?).ok()?;
        let array: String = serde_json::from_slice(lines.next()?).ok()?;
        let source_version = std::str::from_utf8(lines.next()?).ok()?.to_string();
        let shape = std::str::from_utf8(lines.next()?).ok()?;
        let entries = lines.next()?;
        if entries.len() % 16 != 0 {
            return None;
        }
        let (grid, stored_bytes) = shape.split_once('\t')?;
        let grid = match grid {
            "" => Vec::new(),
            grid => grid
                .split(',')
                .map(|n| n.parse().ok())
                .collect::<Option<Vec<u64>>>()?,
        };
        let stored_bytes = match stored_bytes {
            "-" => None,
            n => Some(n.parse().ok()?),
        };
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default());
        let stored: Vec<(u64, u64)> = entries
            .chunks_exact(16)
            .map(|e| (word(&e[..8]), word(&e[8..])))
            .collect();
        // Sorted by index, each once, as a listing builds them.
        if stored.windows(2).any(|w| w[0].0 >= w[1].0) {
            return None;
        }
        Some(KnownVersions {
            location,
            array,
            source_version,
            versions: ChunkVersions {
                stored,
                grid,
                object_of: None,
                stored_bytes,
            },
        })
    }
}

/// What the stored chunks of an array are (see [`ChunkReader::chunk_versions`]): by the coordinate
/// of the object that stores them, a stable 64-bit hash of its version (a local file's inode,
/// modification time and size; an ETag; a reference's target, offset and length). A chunk with no
/// entry is not stored (it reads as the fill value). Made by a [`ChunkVersionsBuilder`].
///
/// Held for the whole run, so kept small: 16 bytes per stored object (its C-order index in the
/// chunk grid and its version hash, sorted by index), see [`ChunkVersions::memory_bytes`].
///
/// ```
/// use zshard_core::ChunkVersions;
///
/// let mut listed = ChunkVersions::builder(&[2, 3]);
/// listed.insert(vec![1, 2], "\"etag-a\"");
/// listed.insert(vec![0, 1], "etag-b");
/// listed.insert(vec![5, 0], "beyond the grid: no chunk of the array");
/// let versions = listed.build();
/// assert_eq!(versions.len(), 2);
/// assert_eq!(versions.of(&[1, 2]), Some(zshard_core::version_hash("etag-a")));
/// assert_eq!(versions.of(&[0, 0]), None);
/// ```
#[derive(Clone, Default)]
pub struct ChunkVersions {
    /// (C-order index of the object's coordinate in the grid, version hash), sorted by index.
    stored: Vec<(u64, u64)>,
    /// The chunk grid the coordinates are indexes in.
    grid: Vec<u64>,
    /// For a source stored in shards: the coordinate of the stored object (the shard) holding a
    /// chunk, `None` outside the shard grid; the chunk's own coordinate otherwise.
    object_of: Option<ObjectOf>,
    /// The bytes the listed objects are stored in, when the listing says (see
    /// [`ChunkVersionsBuilder::add_stored_bytes`]): what reading them all takes, for `plan`'s cost.
    stored_bytes: Option<u64>,
}

/// The stored object that holds a chunk (see [`ChunkVersions::stored_in`]).
type ObjectOf = Arc<dyn Fn(&[u64]) -> Option<Vec<u64>> + Send + Sync>;

impl Debug for ChunkVersions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkVersions")
            .field("stored", &self.stored.len())
            .field("grouped", &self.object_of.is_some())
            .field("stored_bytes", &self.stored_bytes)
            .finish()
    }
}

/// A listing's objects as they come (in the store's key order), made into [`ChunkVersions`] by
/// [`ChunkVersionsBuilder::build`].
#[derive(Debug, Default)]
pub struct ChunkVersionsBuilder {
    versions: ChunkVersions,
}

impl ChunkVersionsBuilder {
    /// Records the object at `coord` with the version `version` as its store names it. The quotes
    /// and weak marker some stores add in one place and not another (Azure lists ETags bare and
    /// sends them quoted) are left out.
    pub fn insert(&mut self, coord: Vec<u64>, version: &str) {
        self.insert_hashed(coord, version_hash(version));
    }

    /// Records the object that a listing of an array's folder names `key` (relative to the array)
    /// with the version `version` and `size` bytes, when `key` is the chunk key of `encoding` of a
    /// chunk of the grid (see [`ChunkKeyEncoding::coordinates`](crate::ChunkKeyEncoding::coordinates):
    /// a key spelled otherwise, as `00.0` beside `0.0`, is no chunk, and neither hides nor replaces
    /// the chunk's version); metadata documents and anything else are left out.
    pub fn insert_listed(
        &mut self,
        encoding: crate::ChunkKeyEncoding,
        key: &str,
        version: &str,
        size: u64,
    ) {
        let grid = &self.versions.grid;
        let index = encoding
            .coordinates(key, grid.len())
            .and_then(|coord| index_in(&coord, grid));
        if let Some(index) = index {
            self.versions.stored.push((index, version_hash(version)));
            self.add_stored_bytes(size);
        }
    }

    /// Records the object at `coord` with an already hashed version (see [`stable_hash`]). An
    /// object outside the grid (a chunk left beyond a shrunk array's end) holds no chunk of the
    /// array and is left out.
    pub fn insert_hashed(&mut self, coord: Vec<u64>, version: u64) {
        if let Some(index) = index_in(&coord, &self.versions.grid) {
            self.versions.stored.push((index, version));
        }
    }

    /// Counts `bytes` more as stored by the listed objects (an object's size as its listing names
    /// it, a reference's length): a listing that says no sizes leaves
    /// [`ChunkVersions::stored_bytes`] unknown.
    pub fn add_stored_bytes(&mut self, bytes: u64) {
        let versions = &mut self.versions;
        versions.stored_bytes = Some(versions.stored_bytes.unwrap_or(0) + bytes);
    }

    /// The versions, in index order (an object listed twice keeps its last version).
    pub fn build(mut self) -> ChunkVersions {
        let stored = &mut self.versions.stored;
        // Stable, so that of two entries for one index the later stays last, and is kept.
        stored.sort_by_key(|&(index, _)| index);
        stored.reverse();
        stored.dedup_by_key(|&mut (index, _)| index);
        stored.reverse();
        stored.shrink_to_fit();
        self.versions
    }
}

/// The C-order index of `coord` in `grid`; `None` outside it (or for a grid of more than 2^64
/// chunks, which no store holds).
fn index_in(coord: &[u64], grid: &[u64]) -> Option<u64> {
    if coord.len() != grid.len() {
        return None;
    }
    coord.iter().zip(grid).try_fold(0u64, |index, (&c, &n)| {
        (c < n).then_some(())?;
        index.checked_mul(n)?.checked_add(c)
    })
}

impl ChunkVersions {
    /// A listing of the objects of a grid of `grid` objects along each dimension. For a source
    /// stored in shards, the chunk grid is given too: a shard's coordinate is never past its
    /// first chunk's, so it has an index in the chunk grid (see [`ChunkVersions::stored_in`]).
    pub fn builder(grid: &[u64]) -> ChunkVersionsBuilder {
        ChunkVersionsBuilder {
            versions: ChunkVersions {
                grid: grid.to_vec(),
                ..ChunkVersions::default()
            },
        }
    }

    /// The versions a listing of an array's folder names: of its `objects` (key relative to the
    /// array, version as the store names it, size), those whose key is a chunk key of `encoding` on
    /// a grid of `grid` chunks (metadata documents and anything else are left out).
    pub fn listed<'a>(
        encoding: crate::ChunkKeyEncoding,
        grid: &[u64],
        objects: impl IntoIterator<Item = (&'a str, &'a str, u64)>,
    ) -> ChunkVersions {
        let mut versions = ChunkVersions::builder(grid);
        for (key, version, size) in objects {
            versions.insert_listed(encoding, key, version, size);
        }
        versions.build()
    }

    /// Chunks are stored several to an object (a source stored in shards): `object_of` names the
    /// object's coordinate for a chunk's, and a chunk has its object's version.
    pub fn stored_in(
        mut self,
        object_of: impl Fn(&[u64]) -> Option<Vec<u64>> + Send + Sync + 'static,
    ) -> Self {
        self.object_of = Some(Arc::new(object_of));
        self
    }

    /// The version of the object holding chunk `coord`; `None` when it is not stored.
    pub fn of(&self, coord: &[u64]) -> Option<u64> {
        let index = match &self.object_of {
            Some(object_of) => index_in(&object_of(coord)?, &self.grid)?,
            None => index_in(coord, &self.grid)?,
        };
        let at = self
            .stored
            .binary_search_by_key(&index, |&(index, _)| index)
            .ok()?;
        Some(self.stored[at].1)
    }

    /// The bytes the listed objects are stored in (compressed sizes, an already sharded source's
    /// indexes included); `None` when the listing did not say. 0 for a listing of no objects.
    pub fn stored_bytes(&self) -> Option<u64> {
        match self.stored.is_empty() {
            true => Some(self.stored_bytes.unwrap_or(0)),
            false => self.stored_bytes,
        }
    }

    /// The grid these versions index (chunks along each dimension).
    pub fn grid(&self) -> &[u64] {
        &self.grid
    }

    /// These versions with the chunks at `changed` (coordinates in the grid) set to the version
    /// given, or removed (`None`: no longer stored); coordinates outside the grid are ignored. The
    /// stored bytes stay those listed (an estimate once chunks changed).
    pub fn with_changes(
        mut self,
        changed: impl IntoIterator<Item = (Vec<u64>, Option<u64>)>,
    ) -> Self {
        let changes: std::collections::HashMap<u64, Option<u64>> = changed
            .into_iter()
            .filter_map(|(coord, version)| Some((index_in(&coord, &self.grid)?, version)))
            .collect();
        if changes.is_empty() {
            return self;
        }
        let mut merged: Vec<(u64, u64)> = self
            .stored
            .iter()
            .filter(|(index, _)| !changes.contains_key(index))
            .copied()
            .chain(
                changes
                    .iter()
                    .filter_map(|(&index, v)| Some((index, (*v)?))),
            )
            .collect();
        merged.sort_unstable_by_key(|&(index, _)| index);
        self.stored = merged;
        self
    }

    /// How many stored objects were listed.
    pub fn len(&self) -> usize {
        self.stored.len()
    }

    /// Whether no object is stored.
    pub fn is_empty(&self) -> bool {
        self.stored.is_empty()
    }

    /// The bytes these versions hold in memory (for the run's memory budget: they are kept until
    /// the last shard is recorded).
    pub fn memory_bytes(&self) -> u64 {
        let entry = std::mem::size_of::<(u64, u64)>() as u64;
        (self.stored.capacity() as u64).saturating_mul(entry)
    }
}

/// The bytes a hash table of std's (`HashMap`, `HashSet`: a SwissTable) takes for `capacity`
/// entries (its `capacity()`) of `entry` bytes each, about, for memory budgets: its buckets are a
/// power of two, at most 7/8 of them used, each the entry and one control byte. What the entries
/// point to (a `String`'s text, a `Vec`'s elements) is not counted.
pub fn hash_table_bytes(capacity: usize, entry: usize) -> u64 {
    if capacity == 0 {
        return 0;
    }
    let buckets = (capacity as u64)
        .saturating_mul(8)
        .div_ceil(7)
        .next_power_of_two();
    buckets.saturating_mul(entry as u64 + 1)
}

/// The hash of an object's version (ETag) as compared between a record and a listing: without the
/// quotes and weak marker that some stores add in one place and not the other (Azure lists ETags
/// bare and sends them quoted).
pub fn version_hash(version: &str) -> u64 {
    let bare = version
        .strip_prefix("W/")
        .unwrap_or(version)
        .trim_matches('"');
    stable_hash(bare.as_bytes())
}

/// A hash of `bytes` that stays the same across platforms, builds and versions of zshard (XXH64,
/// seed 0), for what is recorded in one run and compared in a later one.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    twox_hash::XxHash64::oneshot(0, bytes)
}

/// What reading chunks takes from storage (see [`ChunkReader::planned_reads`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct PlannedReads {
    /// Requests (GETs).
    pub requests: u64,
    /// Bytes requested.
    pub bytes: u64,
}

impl std::ops::AddAssign for PlannedReads {
    fn add_assign(&mut self, other: PlannedReads) {
        self.requests += other.requests;
        self.bytes += other.bytes;
    }
}

/// What a [`ShardSink`] stored for one shard: the object's size and the crc32c (Castagnoli) of its
/// bytes, as a manifest records them, and the object's version as the store named it. Both numbers
/// are 0 when nothing was stored (a shard of only empty inner chunks).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Stored {
    /// Bytes stored, index included.
    pub bytes: u64,
    /// The crc32c of the stored object's bytes, in order.
    pub crc32c: u32,
    /// The version the store gave the object when it was written (its ETag: an S3 object's digest,
    /// a local file's inode, modification time and size), as the store's listings show it; `None`
    /// when nothing was stored or the store names none.
    pub version: Option<String>,
}

impl Stored {
    /// Nothing stored.
    pub const NOTHING: Stored = Stored {
        bytes: 0,
        crc32c: 0,
        version: None,
    };

    /// The object made of `parts`, in order.
    pub fn of_parts<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> Stored {
        let mut stored = Stored::NOTHING;
        for part in parts {
            stored.crc32c = crate::crc32c_append(stored.crc32c, part);
            stored.bytes += part.len() as u64;
        }
        stored
    }
}

/// A destination for the shards of one array.
pub trait ShardSink: Send + Sync + Debug {
    /// The key of a shard, for messages.
    fn shard_key(&self, shard: &[u64]) -> String;

    /// Stores a shard from its encoded inner chunks (C order, `None` = empty). The shard must become
    /// visible under its key only once complete. Called for every shard, also when every inner chunk
    /// is empty (a writer then stores nothing). Returns what was stored.
    fn write_shard(&self, shard: &[u64], inner: &[Option<Bytes>]) -> Result<Stored>;

    /// Starts a shard of `chunks` inner chunks that arrives in parts (consecutive runs of its C-order
    /// inner chunks, in order), for shards too big to hold at once. Dropping the stream before
    /// [`ShardStream::finish`] abandons the shard: nothing appears under its key. The default collects
    /// the parts and calls [`ShardSink::write_shard`] at the end; writers override it to stream.
    fn begin_shard(&self, shard: &[u64], chunks: usize) -> Result<Box<dyn ShardStream + '_>> {
        Ok(Box::new(CollectedShard {
            sink: self,
            shard: shard.to_vec(),
            inner: Vec::with_capacity(chunks),
        }))
    }
}

/// A shard being written part by part (see [`ShardSink::begin_shard`]).
pub trait ShardStream: Send {
    /// Appends the next inner chunks (C order, `None` = empty).
    fn append(&mut self, inner: &[Option<Bytes>]) -> Result<()>;

    /// Completes the shard (it becomes visible under its key; a shard of only empty chunks is not
    /// stored, as with `write_shard`). Returns what was stored.
    fn finish(self: Box<Self>) -> Result<Stored>;
}

/// The default [`ShardStream`]: keeps every part and writes the shard whole.
struct CollectedShard<'a, S: ShardSink + ?Sized> {
    sink: &'a S,
    shard: Vec<u64>,
    inner: Vec<Option<Bytes>>,
}

impl<S: ShardSink + ?Sized> ShardStream for CollectedShard<'_, S> {
    fn append(&mut self, inner: &[Option<Bytes>]) -> Result<()> {
        self.inner.extend_from_slice(inner);
        Ok(())
    }

    fn finish(self: Box<Self>) -> Result<Stored> {
        self.sink.write_shard(&self.shard, &self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_listed_out_of_order_are_found_and_the_last_listed_wins() {
        let mut listed = ChunkVersions::builder(&[4, 5]);
        for (i, coord) in [[3, 4], [0, 0], [2, 1], [0, 0], [1, 3]].iter().enumerate() {
            listed.insert_hashed(coord.to_vec(), i as u64);
        }
        listed.insert_hashed(vec![4, 0], 99); // past the grid
        listed.insert_hashed(vec![1], 99); // another rank
        let versions = listed.build();
        assert_eq!(versions.len(), 4);
        assert_eq!(versions.of(&[0, 0]), Some(3));
        assert_eq!(versions.of(&[3, 4]), Some(0));
        assert_eq!(versions.of(&[2, 1]), Some(2));
        assert_eq!(versions.of(&[1, 3]), Some(4));
        assert_eq!(versions.of(&[1, 4]), None);
        assert_eq!(versions.of(&[4, 0]), None);
        assert_eq!(versions.memory_bytes(), 4 * 16);
    }

    #[test]
    fn a_key_not_spelled_as_zarr_spells_it_neither_hides_nor_replaces_the_chunk() {
        let v2 = crate::ChunkKeyEncoding::V2 { separator: '.' };
        let default = crate::ChunkKeyEncoding::Default { separator: '/' };
        for (encoding, real, strays) in [
            (v2, "0.1", ["00.1", "0.01", "000.1"]),
            (default, "c/0/1", ["c/00/1", "c/0/01", "c/0/001"]),
        ] {
            // The strays listed before and after the real chunk: the store's key order puts
            // `00.1` first, a listing in segments may bring it last.
            let mut objects = vec![(strays[0], "stray-a", 1000)];
            objects.push((real, "real", 10));
            objects.extend(strays[1..].iter().map(|&key| (key, "stray-b", 1000)));
            let versions = ChunkVersions::listed(encoding, &[2, 2], objects.iter().copied());
            assert_eq!(versions.len(), 1, "{encoding:?}");
            assert_eq!(versions.of(&[0, 1]), Some(version_hash("real")));
            assert_eq!(versions.stored_bytes(), Some(10));
            // Only strays: no chunk stored.
            let strays = ChunkVersions::listed(encoding, &[2, 2], objects[2..].iter().copied());
            assert_eq!(strays.of(&[0, 1]), None);
            assert_eq!(strays.stored_bytes(), Some(0));
        }
    }

    #[test]
    fn a_hash_tables_bytes_grow_with_its_entries() {
        assert_eq!(hash_table_bytes(0, 8), 0);
        let mut set = std::collections::HashSet::new();
        let mut last = 0;
        for n in [1u64, 10, 100, 10_000] {
            set.extend(0..n);
            let bytes = hash_table_bytes(set.capacity(), 8);
            // At least the entries and their control bytes, at most twice that and a little more.
            assert!(
                bytes >= n * 9 && bytes <= (n * 9 * 16).div_ceil(7) + 144,
                "{n}: {bytes}"
            );
            assert!(bytes > last);
            last = bytes;
        }
    }

    #[test]
    fn a_chunk_has_the_version_of_the_shard_holding_it() {
        let mut listed = ChunkVersions::builder(&[4, 4]);
        listed.insert_hashed(vec![1, 0], 7);
        let versions = listed
            .build()
            .stored_in(|c: &[u64]| Some(c.iter().map(|c| c / 2).collect()));
        assert_eq!(versions.of(&[2, 1]), Some(7));
        assert_eq!(versions.of(&[3, 0]), Some(7));
        assert_eq!(versions.of(&[1, 1]), None);
    }

    #[test]
    fn known_versions_read_back_and_take_changes_as_a_listing_would_give_them() {
        let mut listed = ChunkVersions::builder(&[3, 4]);
        for (coord, version) in [([0u64, 1u64], 11u64), ([1, 0], 12), ([2, 3], 13)] {
            listed.insert_hashed(coord.to_vec(), version);
        }
        listed.add_stored_bytes(300);
        let known = KnownVersions {
            location: "/data/repo\nwith a line break".to_string(),
            array: "group/a".to_string(),
            source_version: "SNAP1".to_string(),
            versions: listed.build(),
        };
        let bytes = known.to_bytes();
        let back = KnownVersions::from_bytes(&bytes).expect("reads back");
        assert_eq!(back.source_version, "SNAP1");
        assert!(back.describe("/data/repo\nwith a line break", "group/a"));
        assert!(!back.describe("/data/repo\nwith a line break", "group/b"));
        assert!(!back.describe("/data/other", "group/a"));
        assert_eq!(back.versions.grid(), &[3, 4]);
        assert_eq!(back.versions.stored_bytes(), Some(300));
        assert_eq!(back.versions.of(&[2, 3]), Some(13));
        // A damaged copy reads as none.
        let mut damaged = bytes.to_vec();
        damaged[30] ^= 1;
        assert!(KnownVersions::from_bytes(&damaged).is_none());
        assert!(KnownVersions::from_bytes(b"short").is_none());
        // Changed, added, removed, and one outside the grid.
        let changed = back.versions.with_changes([
            (vec![1, 0], Some(99)),
            (vec![0, 0], Some(5)),
            (vec![2, 3], None),
            (vec![7, 7], Some(1)),
        ]);
        assert_eq!(changed.len(), 3);
        assert_eq!(changed.of(&[0, 0]), Some(5));
        assert_eq!(changed.of(&[0, 1]), Some(11));
        assert_eq!(changed.of(&[1, 0]), Some(99));
        assert_eq!(changed.of(&[2, 3]), None);
    }
}
