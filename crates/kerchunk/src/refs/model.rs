//! The compact in-memory form of a reference set: chunk references are kept as an interned key
//! prefix (everything before the last `/`), a short inline leaf, and a 24-byte [`Ref`]; target URLs
//! are interned, inline data lives in one arena. Once the arrays are known, [`JsonRefs::index`] maps
//! every array's chunk grid positions to its references ([`ChunkIndex`]) and drops the keys. The grid
//! helpers here also serve the Parquet layout, whose rows are [`Ref`]s too.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use zshard_core::{ArrayMeta, ChunkKeyEncoding};

use crate::error::{reference, Result};

/// What a reference holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Bytes `offset..offset + length` of the inline arena.
    Inline,
    /// The whole target file.
    Whole,
    /// Bytes `offset..offset + length` of the target.
    Range,
    /// No chunk (Parquet rows with neither path nor data): the fill value.
    Missing,
}

/// One reference. `target` indexes the URL table of its reference set (or of its Parquet file).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ref {
    pub offset: u64,
    pub length: u64,
    pub target: u32,
    pub kind: Kind,
}

impl Ref {
    pub(crate) const MISSING: Ref = Ref {
        offset: 0,
        length: 0,
        target: 0,
        kind: Kind::Missing,
    };
}

/// Whether a key's last segment names a metadata document rather than a chunk.
pub(super) fn is_metadata_leaf(leaf: &str) -> bool {
    leaf.starts_with(".z") || leaf == "zarr.json"
}

/// Bit of `Key::prefix` marking an entry found at the top level of the document (a version 0 entry),
/// which a version 1 document ignores.
pub(super) const TOP_LEVEL: u32 = 1 << 31;

/// The last segment of a key: up to 15 bytes inline (length in byte 15), longer ones in an arena
/// (byte 15 = 0xFF, offset in bytes 0..8, length in bytes 8..12).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Leaf([u8; 16]);

impl Leaf {
    pub(super) fn new(leaf: &str, arena: &mut String) -> Leaf {
        let mut bytes = [0u8; 16];
        if leaf.len() < 15 {
            bytes[..leaf.len()].copy_from_slice(leaf.as_bytes());
            bytes[15] = leaf.len() as u8;
            return Leaf(bytes);
        }
        bytes[..8].copy_from_slice(&(arena.len() as u64).to_le_bytes());
        bytes[8..12].copy_from_slice(&(leaf.len() as u32).to_le_bytes());
        bytes[15] = 0xFF;
        arena.push_str(leaf);
        Leaf(bytes)
    }

    pub(super) fn get<'a>(&'a self, arena: &'a str) -> &'a str {
        let n = self.0[15];
        if n != 0xFF {
            return std::str::from_utf8(&self.0[..usize::from(n)]).unwrap_or_default();
        }
        let mut offset = [0u8; 8];
        offset.copy_from_slice(&self.0[..8]);
        let mut len = [0u8; 4];
        len.copy_from_slice(&self.0[8..12]);
        let start = u64::from_le_bytes(offset) as usize;
        let end = start + u32::from_le_bytes(len) as usize;
        arena.get(start..end).unwrap_or_default()
    }
}

/// The least memory one chunk reference holds in a built set: the reference, its key and its entry
/// in its array's chunk index (its key's text and target URL come on top).
pub(crate) const HELD_REF_BYTES: u64 =
    (std::mem::size_of::<Ref>() + std::mem::size_of::<Key>() + std::mem::size_of::<u32>()) as u64;

#[derive(Clone, Copy, Debug)]
pub(super) struct Key {
    pub prefix: u32,
    pub leaf: Leaf,
}

/// Interned strings with stable ids.
#[derive(Debug, Default)]
pub(super) struct Interner {
    pub ids: HashMap<Arc<str>, u32>,
    pub strings: Vec<Arc<str>>,
}

impl Interner {
    pub(super) fn intern(&mut self, s: &str) -> u32 {
        if let Some(&id) = self.ids.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        let shared: Arc<str> = Arc::from(s);
        self.ids.insert(shared.clone(), id);
        self.strings.push(shared);
        id
    }
}

/// Which reference first used a URL, for messages.
#[derive(Clone, Copy, Debug)]
pub(super) enum Use {
    Entry(u32),
    Metadata(u32),
}

/// A parsed JSON reference set.
#[derive(Debug)]
pub(crate) struct JsonRefs {
    pub(super) file: String,
    pub(super) prefixes: Vec<Arc<str>>,
    pub(super) keys: Vec<Key>,
    pub(super) refs: Vec<Ref>,
    pub(super) long_leaves: String,
    pub(super) urls: Vec<String>,
    pub(super) first_use: Vec<Use>,
    pub(super) inline: Bytes,
    pub(super) metadata: Vec<(String, Ref)>,
    /// Entries found at the top level must be skipped (a version 1 document).
    pub(super) skip_top_level: bool,
}

/// Where the chunks of one array are: grid position (C order) to entry.
#[derive(Debug)]
pub(crate) enum ChunkIndex {
    Dense(Vec<u32>),
    Sparse(Vec<(u64, u32)>),
}

const ABSENT: u32 = u32::MAX;

impl ChunkIndex {
    /// Bytes it holds.
    pub(crate) fn memory_bytes(&self) -> u64 {
        match self {
            ChunkIndex::Dense(v) => (v.capacity() * std::mem::size_of::<u32>()) as u64,
            ChunkIndex::Sparse(v) => (v.capacity() * std::mem::size_of::<(u64, u32)>()) as u64,
        }
    }

    pub(crate) fn get(&self, linear: u64) -> Option<u32> {
        match self {
            ChunkIndex::Dense(v) => v
                .get(usize::try_from(linear).ok()?)
                .copied()
                .filter(|&e| e != ABSENT),
            ChunkIndex::Sparse(v) => v
                .binary_search_by_key(&linear, |(l, _)| *l)
                .ok()
                .map(|i| v[i].1),
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        match self {
            ChunkIndex::Dense(v) => v.iter().filter(|&&e| e != ABSENT).count(),
            ChunkIndex::Sparse(v) => v.len(),
        }
    }
}

/// The chunk grid of an array: chunks per dimension (at least one chunk for a 0-d array).
pub(crate) fn chunk_grid(meta: &ArrayMeta) -> Vec<u64> {
    meta.shape
        .iter()
        .zip(&meta.chunk_shape)
        .map(|(&s, &c)| s.div_ceil(c.max(1)))
        .collect()
}

/// Number of chunks of a grid, `None` on overflow.
pub(crate) fn grid_len(grid: &[u64]) -> Option<u64> {
    grid.iter().try_fold(1u64, |acc, &n| acc.checked_mul(n))
}

/// Parses a canonical non-negative integer (no sign, no leading zeros).
fn coordinate(s: &str) -> Option<u64> {
    let canonical =
        !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

/// The C-order position in `grid` of the chunk that `key` (relative to its array) names under
/// `encoding`; `None` when `key` is not a chunk key, `Some(Err)` when it lies outside the grid.
fn chunk_position(
    encoding: ChunkKeyEncoding,
    grid: &[u64],
    key: &str,
) -> Option<Result<u64, String>> {
    let (body, sep) = match encoding {
        ChunkKeyEncoding::V2 { .. } if grid.is_empty() => {
            return (key == "0").then_some(Ok(0));
        }
        ChunkKeyEncoding::Default { .. } | ChunkKeyEncoding::Draft { .. } if grid.is_empty() => {
            return (key == "c").then_some(Ok(0));
        }
        ChunkKeyEncoding::V2 { separator } => (key, separator),
        ChunkKeyEncoding::Default { separator } => {
            (key.strip_prefix('c')?.strip_prefix(separator)?, separator)
        }
        ChunkKeyEncoding::Draft { separator } => (key.strip_prefix('c')?, separator),
    };
    let mut linear: u64 = 0;
    let mut parts = body.split(sep);
    let mut outside = false;
    for &n in grid {
        let c = coordinate(parts.next()?)?;
        outside |= c >= n;
        linear = linear.wrapping_mul(n).wrapping_add(c);
    }
    if parts.next().is_some() {
        return None;
    }
    Some(if outside {
        Err(format!("{key} is outside the chunk grid {grid:?}"))
    } else {
        Ok(linear)
    })
}

impl JsonRefs {
    pub(crate) fn file(&self) -> &str {
        &self.file
    }

    /// Number of chunk references (metadata documents not counted).
    pub(crate) fn len(&self) -> usize {
        self.refs.len()
    }

    /// Bytes it holds: the references, their keys until [`JsonRefs::index`] drops them, the inline
    /// data and the target URLs.
    pub(crate) fn memory_bytes(&self) -> u64 {
        let refs = self.refs.capacity() * std::mem::size_of::<Ref>();
        let keys = self.keys.capacity() * std::mem::size_of::<Key>() + self.long_leaves.capacity();
        let urls: usize = self.urls.iter().map(|u| u.capacity() + 24).sum();
        let prefixes: usize = self.prefixes.iter().map(|p| p.len() + 16).sum();
        (refs + keys + self.inline.len() + urls + prefixes + self.first_use.capacity() * 8) as u64
    }

    /// The target URLs, indexed by `Ref::target`.
    pub(crate) fn urls(&self) -> &[String] {
        &self.urls
    }

    /// The key of the first reference that uses URL `url`, for messages.
    pub(crate) fn url_user(&self, url: u32) -> String {
        match self.first_use.get(url as usize) {
            Some(Use::Entry(e)) => self.key_of(*e as usize),
            Some(Use::Metadata(m)) => self
                .metadata
                .get(*m as usize)
                .map(|(k, _)| k.clone())
                .unwrap_or_default(),
            None => String::new(),
        }
    }

    pub(super) fn key_of(&self, entry: usize) -> String {
        match self.keys.get(entry) {
            Some(k) => {
                let prefix = &self.prefixes[(k.prefix & !TOP_LEVEL) as usize];
                let leaf = k.leaf.get(&self.long_leaves);
                if prefix.is_empty() {
                    leaf.to_string()
                } else {
                    format!("{prefix}/{leaf}")
                }
            }
            None => format!("#{entry}"),
        }
    }

    /// The metadata documents (`.zarray`, `.zattrs`, `.zgroup`, `zarr.json`, ...) by key, in order.
    pub(crate) fn metadata(&self) -> &[(String, Ref)] {
        &self.metadata
    }

    /// The bytes of an inline reference.
    pub(crate) fn inline(&self, r: &Ref) -> Bytes {
        let start = r.offset as usize;
        self.inline.slice(start..start + r.length as usize)
    }

    pub(crate) fn entry(&self, entry: u32) -> Ref {
        self.refs[entry as usize]
    }

    /// Maps the chunk grid of every array in `arrays` (path, metadata) to its references; a later
    /// entry for the same chunk replaces an earlier one, as in a JSON object. Keys that are not chunk
    /// keys of any array are ignored; a chunk key outside its array's grid is an error. The keys are
    /// dropped afterwards.
    pub(crate) fn index(
        &mut self,
        arrays: &[(&str, &ArrayMeta)],
    ) -> Result<HashMap<String, ChunkIndex>> {
        let by_path: HashMap<&str, usize> = arrays
            .iter()
            .enumerate()
            .map(|(i, (p, _))| (*p, i))
            .collect();
        let grids: Vec<Vec<u64>> = arrays.iter().map(|(_, m)| chunk_grid(m)).collect();
        // For each prefix: its array and the part of the chunk key that the prefix holds.
        let owners: Vec<Option<(usize, String)>> =
            self.prefixes.iter().map(|p| owner(p, &by_path)).collect();
        let mut counts = vec![0u64; arrays.len()];
        for key in &self.keys {
            if self.skip_top_level && key.prefix & TOP_LEVEL != 0 {
                continue;
            }
            if let Some((a, _)) = &owners[(key.prefix & !TOP_LEVEL) as usize] {
                counts[*a] += 1;
            }
        }
        let mut indexes: Vec<ChunkIndex> = grids
            .iter()
            .zip(&counts)
            .map(|(grid, &count)| match grid_len(grid) {
                Some(n) if n <= 2 * count + 65536 => ChunkIndex::Dense(vec![ABSENT; n as usize]),
                _ => ChunkIndex::Sparse(Vec::with_capacity(count as usize)),
            })
            .collect();
        let mut buf = String::new();
        for (entry, key) in self.keys.iter().enumerate() {
            if self.skip_top_level && key.prefix & TOP_LEVEL != 0 {
                continue;
            }
            let Some((a, head)) = &owners[(key.prefix & !TOP_LEVEL) as usize] else {
                continue;
            };
            let leaf = key.leaf.get(&self.long_leaves);
            let relative = if head.is_empty() {
                leaf
            } else {
                buf.clear();
                buf.push_str(head);
                buf.push('/');
                buf.push_str(leaf);
                &buf
            };
            let encoding = arrays[*a].1.chunk_key_encoding;
            match chunk_position(encoding, &grids[*a], relative) {
                None => {}
                Some(Err(reason)) => return Err(reference(self.key_of(entry), reason)),
                Some(Ok(linear)) => match &mut indexes[*a] {
                    ChunkIndex::Dense(v) => v[linear as usize] = entry as u32,
                    ChunkIndex::Sparse(v) => v.push((linear, entry as u32)),
                },
            }
        }
        for index in &mut indexes {
            if let ChunkIndex::Sparse(v) = index {
                // Stable: for equal positions, the later entry ends up last and is kept.
                v.sort_by_key(|(l, _)| *l);
                let mut deduped: Vec<(u64, u32)> = Vec::with_capacity(v.len());
                for &(l, e) in v.iter() {
                    match deduped.last_mut() {
                        Some(last) if last.0 == l => last.1 = e,
                        _ => deduped.push((l, e)),
                    }
                }
                *v = deduped;
            }
        }
        self.keys = Vec::new();
        self.long_leaves = String::new();
        Ok(arrays
            .iter()
            .map(|(p, _)| p.to_string())
            .zip(indexes)
            .collect())
    }
}

/// The array that owns chunk keys with `prefix`, and the part of the chunk key inside the prefix.
fn owner(prefix: &str, arrays: &HashMap<&str, usize>) -> Option<(usize, String)> {
    let mut candidate = prefix;
    loop {
        if let Some(&a) = arrays.get(candidate) {
            let head = prefix[candidate.len()..].trim_start_matches('/');
            return Some((a, head.to_string()));
        }
        if candidate.is_empty() {
            return None;
        }
        candidate = candidate.rfind('/').map_or("", |i| &candidate[..i]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use zshard_zarr::parse_v2_array;

    fn parse(doc: &str) -> Result<JsonRefs> {
        JsonRefs::parse_lenient("refs.json", doc.as_bytes(), None)
    }

    fn zarray(shape: &[u64], chunks: &[u64], sep: &str) -> ArrayMeta {
        let doc = json!({"zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": "<u2",
            "compressor": null, "fill_value": 0, "order": "C", "filters": null, "dimension_separator": sep});
        parse_v2_array("t", doc.to_string().as_bytes(), None).expect("valid")
    }

    #[test]
    fn leaves_round_trip() {
        let mut arena = String::new();
        for s in [
            "",
            "0",
            "0.1.2",
            "c/0",
            "123456789012345",
            "1234567890123456789",
            "x",
        ] {
            let leaf = Leaf::new(s, &mut arena);
            assert_eq!(leaf.get(&arena), s);
        }
    }

    #[test]
    fn chunk_positions() {
        let v2 = ChunkKeyEncoding::V2 { separator: '.' };
        assert_eq!(chunk_position(v2, &[3, 4], "2.3"), Some(Ok(11)));
        assert!(matches!(chunk_position(v2, &[3, 4], "3.0"), Some(Err(_))));
        assert_eq!(chunk_position(v2, &[3, 4], "2"), None);
        assert_eq!(chunk_position(v2, &[3, 4], "01.0"), None);
        assert_eq!(chunk_position(v2, &[3, 4], "1.0.0"), None);
        assert_eq!(chunk_position(v2, &[], "0"), Some(Ok(0)));
        let slash = ChunkKeyEncoding::Default { separator: '/' };
        assert_eq!(chunk_position(slash, &[2, 2], "c/1/1"), Some(Ok(3)));
        assert_eq!(chunk_position(slash, &[2, 2], "1/1"), None);
        assert_eq!(chunk_position(slash, &[], "c"), Some(Ok(0)));
    }

    #[test]
    fn index_maps_grids_and_later_entries_win() {
        let mut refs = parse(
            r#"{"a/0.0": ["f", 0, 1], "a/1.1": ["f", 1, 1], "a/1.1": ["f", 2, 1],
                "g/b/1/0": ["f", 3, 1], "g/b/junk": "x", "other/0": "y", "a/.zarray": "{}"}"#,
        )
        .expect("parses");
        let a = zarray(&[4, 4], &[2, 2], ".");
        let b = zarray(&[4, 4], &[2, 2], "/");
        let index = refs.index(&[("a", &a), ("g/b", &b)]).expect("indexes");
        let at = |p: &str, l: u64| index[p].get(l).map(|e| refs.entry(e).offset);
        assert_eq!(at("a", 0), Some(0));
        assert_eq!(at("a", 3), Some(2));
        assert_eq!(at("a", 1), None);
        assert_eq!(at("g/b", 2), Some(3));
        assert_eq!(index["a"].len(), 2);

        let mut outside = parse(r#"{"a/2.0": ["f", 0, 1]}"#).expect("parses");
        let e = outside
            .index(&[("a", &a)])
            .expect_err("outside")
            .to_string();
        assert!(e.contains("a/2.0") && e.contains("outside"), "{e}");
    }

    #[test]
    fn sparse_index_for_huge_grids() {
        let mut refs = parse(r#"{"x/999999999": ["f", 0, 1], "x/5": ["f", 1, 1]}"#).expect("ok");
        let x = zarray(&[10_000_000_000], &[10], ".");
        let index = refs.index(&[("x", &x)]).expect("indexes");
        assert!(matches!(index["x"], ChunkIndex::Sparse(_)));
        assert_eq!(
            index["x"].get(999_999_999).map(|e| refs.entry(e).offset),
            Some(0)
        );
        assert_eq!(index["x"].get(5).map(|e| refs.entry(e).offset), Some(1));
        assert_eq!(index["x"].get(6), None);
    }
}
