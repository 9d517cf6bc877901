//! The source-format-independent model of an array that readers produce.

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::codec::{ChunkRepr, CodecSpec};
use crate::dtype::DataType;
use crate::fill::FillValue;
use crate::grid::RectilinearGrid;
use crate::shard_index::{IndexEncoding, IndexLocation};

/// How chunk grid coordinates become store keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkKeyEncoding {
    /// v3 `default`: `c/1/2` (or `c.1.2`); `c` for a 0-d array.
    Default {
        /// Between `c` and the coordinates, and between coordinates: `/` or `.`.
        separator: char,
    },
    /// v3 `v2` and Zarr v2 itself: `1.2` (or `1/2`); `0` for a 0-d array.
    V2 {
        /// Between coordinates: `.` or `/`.
        separator: char,
    },
    /// The pre-final Zarr v3 draft (zarr-python 2.11–2.18's experimental v3): `c1/2` (or `c1.2`), `c`
    /// for a 0-d array. Only read, never written.
    Draft {
        /// Between coordinates: `/` or `.`.
        separator: char,
    },
}

/// The keys an object store's listing returns per page (S3, GCS and Azure list 1,000 or 5,000).
const LISTING_PAGE: u64 = 1000;

/// The keys a listing segment is cut to hold: under a page, so that the spread of the sampled
/// segments and the few other objects of an array's folder (its metadata) rarely need a second page.
const SEGMENT_KEYS: u64 = 900;

/// Samples taken for each segment: a segment is made of this many sampled intervals, so that its
/// length varies far less than one interval's does (see [`ChunkKeyEncoding::listing_splits`]).
const SAMPLES_PER_SEGMENT: u64 = 18;

/// The most segments a listing is cut into (see [`ChunkKeyEncoding::listing_splits`]).
const MAX_LISTING_SEGMENTS: u64 = 1024;

impl ChunkKeyEncoding {
    /// The keys that cut the listing of an array's chunk keys (on an grid of `grid` chunks) into
    /// segments of a little under a listing page (`LISTING_PAGE`) each, to be listed side by side.
    ///
    /// The grid's keys in C order are sampled uniformly, the sample sorted as the store sorts keys,
    /// and every `SAMPLES_PER_SEGMENT`-th kept. One sample per segment would cut it at a sampled
    /// key's place in the store's order, which does not follow C order (`10.5` sorts before `100.3`):
    /// W11's 160,000 keys then fell into segments of up to 1,486 keys, 232 pages instead of 169.
    /// Sampling keeps this cheap for any grid (at most `SAMPLES_PER_SEGMENT` x
    /// `MAX_LISTING_SEGMENTS` keys are made); keys that are not stored only make a segment shorter.
    pub fn listing_splits(&self, grid: &[u64]) -> Vec<String> {
        let total = crate::product(grid);
        // At most MAX_LISTING_SEGMENTS segments: a sparse grid of 10^8 chunks would otherwise cost 10^5
        // listing requests however few chunks are stored.
        let segment = SEGMENT_KEYS.max(total / MAX_LISTING_SEGMENTS);
        if total <= LISTING_PAGE {
            return Vec::new();
        }
        let step = (segment / SAMPLES_PER_SEGMENT).max(1);
        let mut sample: Vec<String> = (step..total)
            .step_by(usize::try_from(step).unwrap_or(usize::MAX))
            .map(|index| self.key(&crate::unravel_index(index, grid)))
            .collect();
        sample.sort_unstable();
        sample.dedup();
        let every = usize::try_from(SAMPLES_PER_SEGMENT).unwrap_or(1);
        sample.into_iter().skip(every - 1).step_by(every).collect()
    }

    /// The store key (relative to the array) of the chunk at grid coordinate `coord`.
    pub fn key(&self, coord: &[u64]) -> String {
        let join = |sep: char| {
            coord
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(&sep.to_string())
        };
        match *self {
            ChunkKeyEncoding::Default { .. } if coord.is_empty() => "c".to_string(),
            ChunkKeyEncoding::Default { separator } => format!("c{separator}{}", join(separator)),
            ChunkKeyEncoding::V2 { .. } if coord.is_empty() => "0".to_string(),
            ChunkKeyEncoding::V2 { separator } => join(separator),
            ChunkKeyEncoding::Draft { separator } => format!("c{}", join(separator)),
        }
    }

    /// The store key of the chunk at `coord` under the array at `array_path` (no trailing `/`; empty for
    /// an array at the root), as kerchunk references and Icechunk repositories name chunks.
    ///
    /// ```
    /// use zshard_core::ChunkKeyEncoding;
    ///
    /// let v2 = ChunkKeyEncoding::V2 { separator: '.' };
    /// assert_eq!(v2.key_under("group/temp", &[1, 2]), "group/temp/1.2");
    /// assert_eq!(v2.key_under("", &[1, 2]), "1.2");
    /// ```
    pub fn key_under(&self, array_path: &str, coord: &[u64]) -> String {
        let key = self.key(coord);
        if array_path.is_empty() {
            key
        } else {
            format!("{array_path}/{key}")
        }
    }

    /// The grid coordinates that `key` names for an array of `ndim` dimensions: the inverse of
    /// [`key`](Self::key); `None` for a key of another shape, and for one whose numbers are not
    /// written as [`key`](Self::key) writes them (`00.0`, `c/01/0`, `+1.0`). Zarr readers read a chunk
    /// only under the key its coordinates make, so an object under another spelling is no chunk:
    /// read as one, a stray `00.0` beside `0.0` would hide or replace the real chunk in a listing
    /// (its version, its size), and a destination would take it for a shard of its own.
    pub fn coordinates(&self, key: &str, ndim: usize) -> Option<Vec<u64>> {
        let (coords, separator) = match *self {
            ChunkKeyEncoding::Default { .. } if ndim == 0 => return (key == "c").then(Vec::new),
            ChunkKeyEncoding::V2 { .. } if ndim == 0 => return (key == "0").then(Vec::new),
            ChunkKeyEncoding::Draft { .. } if ndim == 0 => return (key == "c").then(Vec::new),
            ChunkKeyEncoding::Default { separator } => {
                (key.strip_prefix('c')?.strip_prefix(separator)?, separator)
            }
            ChunkKeyEncoding::V2 { separator } => (key, separator),
            ChunkKeyEncoding::Draft { separator } => (key.strip_prefix('c')?, separator),
        };
        let coord = coords
            .split(separator)
            .map(|part| {
                // Digits only, and no leading zero but in `0` itself.
                let digits = !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
                let canonical = digits && (part == "0" || !part.starts_with('0'));
                canonical.then(|| part.parse().ok()).flatten()
            })
            .collect::<Option<Vec<u64>>>()?;
        (coord.len() == ndim).then_some(coord)
    }

    /// The folder (relative to the array) below which every chunk key lies, for listing them: `c`
    /// for `default` keys separated by `/`, the array's own folder (`""`) otherwise (`c.1.2`, `1.2`).
    pub fn chunk_folder(&self) -> &'static str {
        match *self {
            ChunkKeyEncoding::Default { separator: '/' } => "c",
            _ => "",
        }
    }

    /// The v3 `chunk_key_encoding` document. The draft's keys have none in Zarr v3 (it is only read):
    /// its document names it `draft`, which no v3 reader takes.
    pub fn to_v3_json(&self) -> Value {
        let (name, sep) = match *self {
            ChunkKeyEncoding::Default { separator } => ("default", separator),
            ChunkKeyEncoding::V2 { separator } => ("v2", separator),
            ChunkKeyEncoding::Draft { separator } => ("draft", separator),
        };
        serde_json::json!({"name": name, "configuration": {"separator": sep.to_string()}})
    }
}

/// One array of a source, whatever format it came from. Chunks decode (through `codecs`) into
/// little-endian C-order elements of `chunk_shape`.
#[derive(Clone, Debug, PartialEq)]
pub struct ArrayMeta {
    /// Extent of the array in elements, per dimension.
    pub shape: Vec<u64>,
    /// The element type.
    pub data_type: DataType,
    /// The value of elements that no chunk stores.
    pub fill_value: FillValue,
    /// The shape of the chunks the source is read by: its stored chunks, or, for a source stored in
    /// shards (see `sharded`), their inner chunks. On a rectilinear grid (`rectilinear`), the largest
    /// chunk edge of each dimension: a shape that holds any of its chunks.
    pub chunk_shape: Vec<u64>,
    /// The chunks the source is read by lie on this `rectilinear` grid (zarr-extensions), each with
    /// its own shape; `None`: on the regular grid of `chunk_shape`. A grid whose chunks all have the
    /// same shape is given as regular.
    pub rectilinear: Option<Arc<RectilinearGrid>>,
    /// The source chain as v3 codecs (v2 compressors, byte order and order F are translated); for a
    /// source stored in shards, the inner chunks' chain.
    pub codecs: Vec<CodecSpec>,
    /// How the (outer) chunk grid coordinates map to keys in the source store.
    pub chunk_key_encoding: ChunkKeyEncoding,
    /// User attributes (`.zattrs` in v2, `attributes` in v3), copied to the output.
    pub attributes: Map<String, Value>,
    /// Names of the dimensions (v3 `dimension_names`, xarray's `_ARRAY_DIMENSIONS` in v2), if given.
    pub dimension_names: Option<Vec<Option<String>>>,
    /// Set when the chunks are stored inside shards (see [`ArrayMeta::read_by_inner_chunk`]).
    pub sharded: Option<SourceShards>,
    /// What readers will see differently in the output than in the source, which the conversion
    /// cannot help (a Zarr v2 fill value xarray cannot be told about in v3); reported as warnings.
    pub warnings: Vec<String>,
}

/// How an already sharded source stores its (inner) chunks: in shards of `shard_shape` under the
/// array's chunk keys, each with an index of where its inner chunks are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceShards {
    /// Extent of one shard in elements; a multiple of the array's `chunk_shape` in every dimension.
    /// On a rectilinear shard grid (`rectilinear`), the largest shard edge of each dimension.
    pub shard_shape: Vec<u64>,
    /// The shards lie on this rectilinear grid, every edge a multiple of the inner chunk's (so the
    /// inner chunks still lie on one regular grid); `None`: on the regular grid of `shard_shape`.
    pub rectilinear: Option<Arc<RectilinearGrid>>,
    /// How the shard index entries are encoded (the `index_codecs`).
    pub index_encoding: IndexEncoding,
    /// Whether the index is at the start or end of each shard.
    pub index_location: IndexLocation,
}

impl SourceShards {
    /// Inner chunks per shard along each dimension, for inner chunks of `inner_shape`.
    pub fn chunks_per_shard(&self, inner_shape: &[u64]) -> Vec<u64> {
        self.shard_shape
            .iter()
            .zip(inner_shape)
            .map(|(s, i)| s / i.max(&1))
            .collect()
    }

    /// The grid of shards holding an inner chunk grid of `inner_grid` (inner chunks of
    /// `inner_shape`): one past the shard of its last inner chunk, on a regular or rectilinear shard
    /// grid alike. Empty along any dimension the array is empty in.
    pub fn shard_grid(&self, inner_grid: &[u64], inner_shape: &[u64]) -> Vec<u64> {
        if inner_grid.contains(&0) {
            return vec![0; inner_grid.len()];
        }
        let last: Vec<u64> = inner_grid.iter().map(|n| n - 1).collect();
        match self.locate(&last, inner_shape) {
            Some((shard, _, _)) => shard.iter().map(|s| s + 1).collect(),
            // Past the rectilinear grid's extent (the array's shape disagrees with it): the inner
            // grid bounds the shard grid, as a shard's coordinate is never past its first chunk's.
            None => inner_grid.to_vec(),
        }
    }

    /// The keys that cut the listing of the shards (keyed by `encoding`) holding an inner chunk grid
    /// of `inner_grid` into segments of about a listing page, to be listed side by side: as
    /// [`ChunkKeyEncoding::listing_splits`] cuts a chunk-per-object array's, on the shard grid (the
    /// keys stored are shard keys; splits on the inner chunk grid would sample keys of which all but
    /// a few name no object, and cut the listing into segments of many pages).
    pub fn listing_splits(
        &self,
        encoding: ChunkKeyEncoding,
        inner_grid: &[u64],
        inner_shape: &[u64],
    ) -> Vec<String> {
        encoding.listing_splits(&self.shard_grid(inner_grid, inner_shape))
    }

    /// The shard that holds the inner chunk `coord` (of inner chunks of `inner_shape`), the chunk's
    /// C-order index within it and the shard's inner chunks along each dimension; `None` for a
    /// coordinate outside the shard grid.
    pub fn locate(&self, coord: &[u64], inner_shape: &[u64]) -> Option<(Vec<u64>, u64, Vec<u64>)> {
        let Some(grid) = &self.rectilinear else {
            let per_shard = self.chunks_per_shard(inner_shape);
            let shard = coord
                .iter()
                .zip(&per_shard)
                .map(|(c, n)| c / n.max(&1))
                .collect();
            let local: Vec<u64> = coord
                .iter()
                .zip(&per_shard)
                .map(|(c, n)| c % n.max(&1))
                .collect();
            return Some((
                shard,
                crate::geometry::linear_index(&local, &per_shard),
                per_shard,
            ));
        };
        let element: Vec<u64> = coord
            .iter()
            .zip(inner_shape)
            .map(|(c, i)| c.checked_mul(*i))
            .collect::<Option<_>>()?;
        let shard = grid.chunk_containing(&element);
        let bounds = grid.chunk_bounds(&shard)?;
        let mut local = Vec::with_capacity(coord.len());
        let mut per_shard = Vec::with_capacity(coord.len());
        for d in 0..coord.len() {
            let inner = inner_shape[d].max(1);
            let offset = element[d].checked_sub(bounds.start[d])?;
            if offset >= bounds.shape[d] {
                return None;
            }
            local.push(offset / inner);
            per_shard.push(bounds.shape[d] / inner);
        }
        Some((
            shard,
            crate::geometry::linear_index(&local, &per_shard),
            per_shard,
        ))
    }
}

impl ArrayMeta {
    /// For an array whose only codec is `sharding_indexed` (with an index zshard reads), the same
    /// array read by inner chunk: `chunk_shape` and `codecs` become the inner chunks', and `sharded`
    /// says where they are. A part of a shard then costs the inner chunks it needs, not the shard;
    /// and inner chunks that are already what the output wants can be copied as they are. Any other
    /// array (or an invalid sharding configuration, reported when its chain is built) is unchanged.
    ///
    /// Shards on a rectilinear grid whose every edge is a multiple of the inner chunk's are read so
    /// too: their inner chunks lie on one regular grid.
    pub fn read_by_inner_chunk(self) -> ArrayMeta {
        if self.codecs.len() != 1 || self.sharded.is_some() {
            return self;
        }
        let Some(Ok(config)) = self.sharding() else {
            return self;
        };
        let Ok(index_encoding) = config.index_encoding() else {
            return self;
        };
        if config.chunks_per_shard(&self.chunk_shape).is_err() || config.codecs.is_empty() {
            return self;
        }
        if let Some(grid) = &self.rectilinear {
            if !grid.divisible_by(&config.chunk_shape) {
                return self;
            }
        }
        ArrayMeta {
            sharded: Some(SourceShards {
                shard_shape: self.chunk_shape.clone(),
                rectilinear: self.rectilinear.clone(),
                index_encoding,
                index_location: config.index_location,
            }),
            rectilinear: None,
            chunk_shape: config.chunk_shape,
            codecs: config.codecs,
            ..self
        }
    }

    /// The representation of a decoded source chunk: of its largest one on a rectilinear grid (each
    /// chunk's own is [`ChunkRepr::shape`] from [`RectilinearGrid::chunk_shape`]).
    pub fn chunk_repr(&self) -> ChunkRepr {
        ChunkRepr {
            shape: self.chunk_shape.clone(),
            data_type: self.data_type,
            fill_value: self.fill_value.clone(),
        }
    }
}

/// What a node of a hierarchy is.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeKind {
    /// A group, with its user attributes.
    Group {
        /// The group's attributes (`.zattrs` in v2, `attributes` in v3).
        attributes: Map<String, Value>,
    },
    /// An array and its metadata.
    Array(Box<ArrayMeta>),
}

/// A group or array at `path` (`""` for the root, `a/b` below it).
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Path of the node below the hierarchy's root, `""` for the root itself.
    pub path: String,
    /// Whether it is a group or an array, with its metadata.
    pub kind: NodeKind,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Endian;

    /// The segments the splits cut a full grid's keys into, as the store sorts keys.
    fn segment_lengths(encoding: ChunkKeyEncoding, grid: &[u64]) -> Vec<usize> {
        let splits = encoding.listing_splits(grid);
        assert!(splits.windows(2).all(|w| w[0] < w[1]), "sorted, distinct");
        let mut keys: Vec<String> = (0..crate::product(grid))
            .map(|i| encoding.key(&crate::unravel_index(i, grid)))
            .collect();
        keys.sort_unstable();
        let mut lengths = vec![0usize; splits.len() + 1];
        for key in &keys {
            // Segment i holds the keys in (splits[i - 1], splits[i]].
            let segment = splits.partition_point(|split| split < key);
            lengths[segment] += 1;
        }
        lengths
    }

    #[test]
    fn listing_splits_cut_the_keys_into_segments_of_about_a_page() {
        for (encoding, grid) in [
            (ChunkKeyEncoding::V2 { separator: '.' }, vec![400, 400]),
            (
                ChunkKeyEncoding::Default { separator: '/' },
                vec![37, 50, 60],
            ),
            (ChunkKeyEncoding::V2 { separator: '.' }, vec![100, 40, 40]),
            (ChunkKeyEncoding::V2 { separator: '/' }, vec![3000, 60]),
        ] {
            let lengths = segment_lengths(encoding, &grid);
            let total = crate::product(&grid) as usize;
            assert_eq!(lengths.iter().sum::<usize>(), total);
            assert_eq!(lengths.len(), total.div_ceil(900), "{grid:?}");
            // A sample of the keys, taken finely: every segment fits one page (it did not when one
            // key was sampled per segment: 1,486 keys in W11's).
            let longest = lengths.iter().copied().max().unwrap_or(0);
            assert!(longest <= 1000, "{grid:?}: {longest}");
        }
        // Fewer keys than a page: one listing.
        assert!(ChunkKeyEncoding::V2 { separator: '.' }
            .listing_splits(&[10, 10])
            .is_empty());
    }

    #[test]
    fn a_sharded_array_s_listing_is_cut_on_its_shard_grid() {
        let shards = SourceShards {
            shard_shape: vec![4, 4],
            rectilinear: None,
            index_encoding: IndexEncoding::default(),
            index_location: IndexLocation::End,
        };
        let encoding = ChunkKeyEncoding::Default { separator: '/' };
        // 402 x 399 inner chunks of 1 x 1 in shards of 4 x 4: 101 x 100 shards, the last partial.
        let (inner_grid, inner_shape) = ([402, 399], [1, 1]);
        assert_eq!(shards.shard_grid(&inner_grid, &inner_shape), vec![101, 100]);
        let splits = shards.listing_splits(encoding, &inner_grid, &inner_shape);
        assert_eq!(splits, encoding.listing_splits(&[101, 100]));
        // 10,100 shard keys, every segment within a page.
        assert_eq!(
            segment_lengths(encoding, &[101, 100]).len(),
            10_100_usize.div_ceil(900)
        );
        // Every split is a shard key of the grid.
        for split in &splits {
            let coord = encoding.coordinates(split, 2).expect("a chunk key");
            assert!(coord[0] < 101 && coord[1] < 100, "{split}");
        }
        // Under a page of shards: one listing, however many inner chunks.
        assert!(shards
            .listing_splits(encoding, &[120, 120], &[1, 1])
            .is_empty());
        assert!(shards
            .listing_splits(encoding, &[0, 120], &[1, 1])
            .is_empty());
    }

    fn sharded(sharding: Value) -> ArrayMeta {
        ArrayMeta {
            shape: vec![100, 50],
            data_type: crate::DataType::UInt16,
            fill_value: FillValue::zero(crate::DataType::UInt16),
            chunk_shape: vec![64, 64],
            codecs: vec![CodecSpec::new("sharding_indexed", sharding)],
            chunk_key_encoding: ChunkKeyEncoding::Default { separator: '/' },
            attributes: Map::new(),
            dimension_names: None,
            rectilinear: None,
            sharded: None,
            warnings: Vec::new(),
        }
    }

    #[test]
    fn a_sharded_array_is_read_by_inner_chunk() {
        let meta = sharded(serde_json::json!({
            "chunk_shape": [32, 16],
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "zstd"}],
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "big"}}],
            "index_location": "start"
        }))
        .read_by_inner_chunk();
        assert_eq!(meta.chunk_shape, vec![32, 16]);
        assert_eq!(meta.codecs.len(), 2);
        assert_eq!(meta.codecs[1].name, "zstd");
        let shards = meta.sharded.expect("sharded");
        assert_eq!(shards.shard_shape, vec![64, 64]);
        assert_eq!(shards.chunks_per_shard(&meta.chunk_shape), vec![2, 4]);
        assert_eq!(shards.index_location, IndexLocation::Start);
        assert_eq!(
            shards.index_encoding,
            IndexEncoding {
                endian: Endian::Big,
                crc32c: false
            }
        );
    }

    #[test]
    fn other_arrays_and_bad_sharding_configurations_are_left_as_they_are() {
        let good = serde_json::json!({
            "chunk_shape": [32, 32],
            "codecs": [{"name": "bytes"}],
            "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}]
        });
        // Index at the end when not given.
        let meta = sharded(good.clone()).read_by_inner_chunk();
        assert_eq!(
            meta.sharded.map(|s| s.index_location),
            Some(IndexLocation::End)
        );
        let mut after_another = sharded(good);
        after_another
            .codecs
            .push(CodecSpec::new("gzip", serde_json::json!({"level": 1})));
        let bad = [
            serde_json::json!({"chunk_shape": [30, 32], "codecs": [{"name": "bytes"}], "index_codecs": [{"name": "bytes"}]}),
            serde_json::json!({"chunk_shape": [32], "codecs": [{"name": "bytes"}], "index_codecs": [{"name": "bytes"}]}),
            serde_json::json!({"chunk_shape": [32, 32], "codecs": [{"name": "bytes"}], "index_codecs": [{"name": "zstd"}]}),
            serde_json::json!({"chunk_shape": [32, 32], "codecs": [], "index_codecs": [{"name": "bytes"}]}),
            serde_json::json!({"chunk_shape": [32, 32], "codecs": [{"name": "bytes"}], "index_codecs": [{"name": "bytes"}], "index_location": "middle"}),
        ];
        for meta in bad.into_iter().map(sharded).chain([after_another]) {
            let before = meta.clone();
            assert_eq!(meta.read_by_inner_chunk(), before);
        }
    }

    /// Unknown members of the configuration are ignored: such an array is still read by inner chunk.
    #[test]
    fn a_sharding_configuration_with_an_unknown_member_is_read_by_inner_chunk() {
        let meta = sharded(serde_json::json!({
            "chunk_shape": [32, 32],
            "codecs": [{"name": "bytes"}],
            "index_codecs": [{"name": "bytes"}],
            "index_size": 16
        }));
        let read = meta.read_by_inner_chunk();
        assert_eq!(read.chunk_shape, vec![32, 32]);
        assert!(read.sharded.is_some());
    }

    /// Shards on a rectilinear grid of rows 64, 32 and 128 (inner chunks of 32 rows): read by inner
    /// chunk on the regular grid of 32 x 16, each shard with its own number of them.
    #[test]
    fn rectilinear_shards_are_read_by_inner_chunk_when_their_edges_divide() {
        let sharding = serde_json::json!({
            "chunk_shape": [32, 16],
            "codecs": [{"name": "bytes"}],
            "index_codecs": [{"name": "bytes"}]
        });
        let grid = |rows: serde_json::Value| {
            crate::RectilinearGrid::from_configuration(
                &serde_json::json!({"kind": "inline", "chunk_shapes": [rows, [64]]}),
                &[200, 50],
            )
            .expect("grid")
        };
        let mut meta = sharded(sharding.clone());
        meta.shape = vec![200, 50];
        meta.chunk_shape = vec![128, 64];
        meta.rectilinear = Some(Arc::new(grid(serde_json::json!([64, 32, 128]))));
        let read = meta.clone().read_by_inner_chunk();
        assert_eq!(read.rectilinear, None);
        assert_eq!(read.chunk_shape, vec![32, 16]);
        let shards = read.sharded.expect("sharded");
        assert_eq!(shards.rectilinear, meta.rectilinear);
        // Inner row 2 is the first of the second shard; row 3 the first of the third, which holds
        // 4 rows of 4 columns.
        assert_eq!(
            shards.locate(&[1, 3], &[32, 16]),
            Some((vec![0, 0], 7, vec![2, 4]))
        );
        assert_eq!(
            shards.locate(&[2, 0], &[32, 16]),
            Some((vec![1, 0], 0, vec![1, 4]))
        );
        assert_eq!(
            shards.locate(&[6, 2], &[32, 16]),
            Some((vec![2, 0], 14, vec![4, 4]))
        );
        assert_eq!(shards.locate(&[7, 0], &[32, 16]), None);
        assert_eq!(shards.locate(&[u64::MAX, 0], &[32, 16]), None);
        // An edge of 48 rows is not whole inner chunks: left as it is.
        let mut odd = meta;
        odd.rectilinear = Some(Arc::new(grid(serde_json::json!([64, 48, 128]))));
        assert_eq!(odd.clone().read_by_inner_chunk(), odd);
    }

    #[test]
    fn coordinates_invert_keys() {
        let d = ChunkKeyEncoding::Default { separator: '/' };
        assert_eq!(d.coordinates("c/3/0", 2), Some(vec![3, 0]));
        assert_eq!(d.coordinates(&d.key(&[7, 11]), 2), Some(vec![7, 11]));
        assert_eq!(d.coordinates("c/3", 2), None);
        assert_eq!(d.coordinates("c/3/x", 2), None);
        assert_eq!(d.coordinates("c.3.0", 2), None);
        assert_eq!(d.coordinates("notes.txt", 2), None);
        assert_eq!(d.coordinates("c", 0), Some(vec![]));
        let v2 = ChunkKeyEncoding::V2 { separator: '.' };
        assert_eq!(v2.coordinates("3.0", 2), Some(vec![3, 0]));
        assert_eq!(v2.coordinates("3/0", 2), None);
        assert_eq!(v2.coordinates("0", 0), Some(vec![]));
        assert_eq!(v2.coordinates("99999999999999999999.0", 2), None);
        let draft = ChunkKeyEncoding::Draft { separator: '/' };
        assert_eq!(draft.coordinates("c3/0", 2), Some(vec![3, 0]));
        assert_eq!(draft.coordinates("c/3/0", 2), None);
        assert_eq!(draft.coordinates("3/0", 2), None);
        assert_eq!(draft.coordinates("c", 0), Some(vec![]));
        assert_eq!(draft.coordinates("c", 1), None);
    }

    #[test]
    fn keys_not_written_as_zarr_writes_them_name_no_chunk() {
        let d = ChunkKeyEncoding::Default { separator: '/' };
        assert_eq!(d.coordinates("c/0/10", 2), Some(vec![0, 10]));
        assert_eq!(d.coordinates("c/01/0", 2), None);
        assert_eq!(d.coordinates("c/00/0", 2), None);
        assert_eq!(d.coordinates("c/+1/0", 2), None);
        let v2 = ChunkKeyEncoding::V2 { separator: '.' };
        assert_eq!(v2.coordinates("0.0", 2), Some(vec![0, 0]));
        assert_eq!(v2.coordinates("00.0", 2), None);
        assert_eq!(v2.coordinates("0.007", 2), None);
        let draft = ChunkKeyEncoding::Draft { separator: '/' };
        assert_eq!(draft.coordinates("c03/0", 2), None);
        for encoding in [d, v2, draft] {
            for coord in [[0u64, 0], [10, 7], [100, 1000]] {
                assert_eq!(
                    encoding.coordinates(&encoding.key(&coord), 2),
                    Some(coord.to_vec())
                );
            }
        }
    }

    #[test]
    fn chunk_folders_hold_their_keys() {
        let encodings = [
            ChunkKeyEncoding::Default { separator: '/' },
            ChunkKeyEncoding::Default { separator: '.' },
            ChunkKeyEncoding::V2 { separator: '.' },
            ChunkKeyEncoding::V2 { separator: '/' },
        ];
        let folders: Vec<&str> = encodings.iter().map(|e| e.chunk_folder()).collect();
        assert_eq!(folders, ["c", "", "", ""]);
        for e in encodings {
            let key = e.key(&[4, 5]);
            let folder = e.chunk_folder();
            assert!(
                folder.is_empty() || key.starts_with(&format!("{folder}/")),
                "{key}"
            );
        }
    }

    #[test]
    fn keys() {
        let d = ChunkKeyEncoding::Default { separator: '/' };
        assert_eq!(d.key(&[1, 23]), "c/1/23");
        assert_eq!(d.key(&[]), "c");
        assert_eq!(
            ChunkKeyEncoding::Default { separator: '.' }.key(&[0, 4]),
            "c.0.4"
        );
        let v2 = ChunkKeyEncoding::V2 { separator: '.' };
        assert_eq!(v2.key(&[3, 0, 1]), "3.0.1");
        assert_eq!(v2.key(&[]), "0");
        assert_eq!(ChunkKeyEncoding::V2 { separator: '/' }.key(&[3, 0]), "3/0");
        let draft = ChunkKeyEncoding::Draft { separator: '/' };
        assert_eq!(draft.key(&[96, 18]), "c96/18");
        assert_eq!(draft.key(&[]), "c");
        assert_eq!(
            ChunkKeyEncoding::Draft { separator: '.' }.key(&[3, 0]),
            "c3.0"
        );
    }
}
