//! The compact in-memory form of a reference set, and the streaming parser of JSON reference files
//! (version 0 and 1) that builds it without ever holding the document as a `serde_json::Value`.
//!
//! Chunk references are kept as an interned key prefix (everything before the last `/`), a short
//! inline leaf, and a 24-byte [`Ref`]; target URLs are interned, inline data lives in one arena.
//! Once the arrays are known, [`JsonRefs::index`] maps every array's chunk grid positions to its
//! references and drops the keys.

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::sync::Arc;

use base64::Engine;
use bytes::Bytes;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::Value;
use zshard_core::{ArrayMeta, ChunkKeyEncoding};

use crate::error::{format, reference, Error, Result};
use crate::gen::{Gen, Generated};
use crate::template::Templates;

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
pub(crate) fn is_metadata_leaf(leaf: &str) -> bool {
    leaf.starts_with(".z") || leaf == "zarr.json"
}

/// Bit of `Key::prefix` marking an entry found at the top level of the document (a version 0 entry),
/// which a version 1 document ignores.
const TOP_LEVEL: u32 = 1 << 31;

/// The last segment of a key: up to 15 bytes inline (length in byte 15), longer ones in an arena
/// (byte 15 = 0xFF, offset in bytes 0..8, length in bytes 8..12).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Leaf([u8; 16]);

impl Leaf {
    fn new(leaf: &str, arena: &mut String) -> Leaf {
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

    fn get<'a>(&'a self, arena: &'a str) -> &'a str {
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

#[derive(Clone, Copy, Debug)]
struct Key {
    prefix: u32,
    leaf: Leaf,
}

/// Interned strings with stable ids.
#[derive(Debug, Default)]
struct Interner {
    ids: HashMap<Arc<str>, u32>,
    strings: Vec<Arc<str>>,
}

impl Interner {
    fn intern(&mut self, s: &str) -> u32 {
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
enum Use {
    Entry(u32),
    Metadata(u32),
}

/// A parsed JSON reference set.
#[derive(Debug)]
pub(crate) struct JsonRefs {
    file: String,
    prefixes: Vec<Arc<str>>,
    keys: Vec<Key>,
    refs: Vec<Ref>,
    long_leaves: String,
    urls: Vec<String>,
    first_use: Vec<Use>,
    inline: Bytes,
    metadata: Vec<(String, Ref)>,
    /// Entries found at the top level must be skipped (a version 1 document).
    skip_top_level: bool,
}

/// Where the chunks of one array are: grid position (C order) to entry.
#[derive(Debug)]
pub(crate) enum ChunkIndex {
    Dense(Vec<u32>),
    Sparse(Vec<(u64, u32)>),
}

const ABSENT: u32 = u32::MAX;

impl ChunkIndex {
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
pub(crate) fn chunk_position(
    encoding: ChunkKeyEncoding,
    grid: &[u64],
    key: &str,
) -> Option<Result<u64, String>> {
    let (body, sep) = match encoding {
        ChunkKeyEncoding::V2 { .. } if grid.is_empty() => {
            return (key == "0").then_some(Ok(0));
        }
        ChunkKeyEncoding::Default { .. } if grid.is_empty() => {
            return (key == "c").then_some(Ok(0));
        }
        ChunkKeyEncoding::V2 { separator } => (key, separator),
        ChunkKeyEncoding::Default { separator } => {
            (key.strip_prefix('c')?.strip_prefix(separator)?, separator)
        }
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
    /// Parses a JSON reference document from `reader`; `file` names it in errors.
    pub(crate) fn parse<R: Read>(file: &str, reader: R) -> Result<JsonRefs> {
        let mut builder = Builder::new(file);
        let mut de = serde_json::Deserializer::from_reader(reader);
        let json_error = |source| Error::Json {
            file: file.to_string(),
            source,
        };
        Document(&mut builder)
            .deserialize(&mut de)
            .map_err(json_error)?;
        de.end().map_err(json_error)?;
        builder.finish()
    }

    /// Parses a JSON reference document held in memory, accepting the lenient forms of
    /// [`crate::lenient`] (trailing commas, bare NaN/Infinity).
    pub(crate) fn parse_lenient(file: &str, bytes: &[u8]) -> Result<JsonRefs> {
        match JsonRefs::parse(file, bytes) {
            Err(Error::Json { source, .. })
                if source.classify() == serde_json::error::Category::Syntax =>
            {
                let fixed = crate::lenient::sanitize(bytes);
                if fixed == bytes {
                    return Err(Error::Json {
                        file: file.to_string(),
                        source,
                    });
                }
                JsonRefs::parse(file, fixed.as_slice())
            }
            other => other,
        }
    }

    pub(crate) fn file(&self) -> &str {
        &self.file
    }

    /// Number of chunk references (metadata documents not counted).
    pub(crate) fn len(&self) -> usize {
        self.refs.len()
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

    fn key_of(&self, entry: usize) -> String {
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

/// Accumulates a reference set while the JSON streams by.
struct Builder {
    file: String,
    prefixes: Interner,
    keys: Vec<Key>,
    refs: Vec<Ref>,
    long_leaves: String,
    urls: Interner,
    first_use: Vec<Use>,
    inline: Vec<u8>,
    metadata: Vec<(String, Ref, bool)>,
    version: Option<Value>,
    templates: Option<Value>,
    gen: Option<Value>,
    saw_refs: bool,
    key: String,
}

impl Builder {
    fn new(file: &str) -> Builder {
        Builder {
            file: file.to_string(),
            prefixes: Interner::default(),
            keys: Vec::new(),
            refs: Vec::new(),
            long_leaves: String::new(),
            urls: Interner::default(),
            first_use: Vec::new(),
            inline: Vec::new(),
            metadata: Vec::new(),
            version: None,
            templates: None,
            gen: None,
            saw_refs: false,
            key: String::new(),
        }
    }

    fn inline_ref(&mut self, data: &[u8]) -> Ref {
        let r = Ref {
            offset: self.inline.len() as u64,
            length: data.len() as u64,
            target: 0,
            kind: Kind::Inline,
        };
        self.inline.extend_from_slice(data);
        r
    }

    fn url(&mut self, url: &str) -> u32 {
        let id = self.urls.intern(url);
        if id as usize == self.first_use.len() {
            let next = if is_metadata_leaf(self.key.rsplit('/').next().unwrap_or_default()) {
                Use::Metadata(self.metadata.len() as u32)
            } else {
                Use::Entry(self.refs.len() as u32)
            };
            self.first_use.push(next);
        }
        id
    }

    /// Adds the reference `r` under the key in `self.key`.
    fn add(&mut self, r: Ref, top_level: bool) -> Result<(), String> {
        let key = std::mem::take(&mut self.key);
        let result = self.add_key(&key, r, top_level);
        self.key = key;
        result
    }

    fn add_key(&mut self, key: &str, r: Ref, top_level: bool) -> Result<(), String> {
        let (prefix, leaf) = key.rsplit_once('/').unwrap_or(("", key));
        if is_metadata_leaf(leaf) {
            self.metadata.push((key.to_string(), r, top_level));
            return Ok(());
        }
        if self.refs.len() >= (u32::MAX - 1) as usize {
            return Err("more than 4 billion references".into());
        }
        let mut prefix = self.prefixes.intern(prefix);
        if prefix & TOP_LEVEL != 0 {
            return Err("too many distinct key prefixes".into());
        }
        if top_level {
            prefix |= TOP_LEVEL;
        }
        let leaf = Leaf::new(leaf, &mut self.long_leaves);
        self.keys.push(Key { prefix, leaf });
        self.refs.push(r);
        Ok(())
    }

    fn finish(mut self) -> Result<JsonRefs> {
        let file = self.file.clone();
        let v1 = match &self.version {
            None => self.saw_refs,
            Some(v) if v.as_u64() == Some(1) => true,
            Some(v) => {
                return Err(format(
                    &file,
                    format!("reference set version {v} is not supported (0 or 1)"),
                ))
            }
        };
        let mut templates = match (v1, self.templates.take()) {
            (true, Some(Value::Object(t))) => {
                let mut entries = Vec::with_capacity(t.len());
                for (name, value) in &t {
                    match value {
                        Value::String(s) => entries.push((name.clone(), s.clone())),
                        other => entries.push((name.clone(), other.to_string())),
                    }
                }
                Templates::new(entries.iter().map(|(n, s)| (n.as_str(), s.as_str()))).map_err(
                    |(name, reason)| Error::Template {
                        key: format!("templates.{name}"),
                        template: t
                            .get(&name)
                            .map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_string))
                            .unwrap_or_default(),
                        reason,
                    },
                )?
            }
            (true, Some(other)) => {
                return Err(format(
                    &file,
                    format!("templates must be an object, not {other}"),
                ))
            }
            _ => Templates::default(),
        };
        // Render templated URLs (each distinct one once).
        let raw = std::mem::take(&mut self.urls.strings);
        let mut urls = Vec::with_capacity(raw.len());
        for (id, url) in raw.iter().enumerate() {
            if !url.contains("{{") {
                urls.push(url.to_string());
                continue;
            }
            let rendered = templates
                .render_once(url)
                .map_err(|reason| Error::Template {
                    key: self.use_key(id),
                    template: url.to_string(),
                    reason,
                })?;
            urls.push(rendered);
        }
        drop(raw);
        self.urls.ids = HashMap::new();
        let mut refs = JsonRefs {
            file,
            prefixes: Vec::new(),
            keys: Vec::new(),
            refs: Vec::new(),
            long_leaves: String::new(),
            urls,
            first_use: std::mem::take(&mut self.first_use),
            inline: Bytes::new(),
            metadata: Vec::new(),
            skip_top_level: v1,
        };
        if let (true, Some(gen)) = (v1, self.gen.take()) {
            let gens =
                Gen::parse_all(&gen, &mut templates).map_err(|(what, template, reason)| {
                    Error::Template {
                        key: what,
                        template,
                        reason,
                    }
                })?;
            let mut gen_urls: HashMap<String, u32> = HashMap::new();
            for g in &gens {
                g.expand(&templates, &mut |Generated { key, url, range }| {
                    let id = match gen_urls.get(&url) {
                        Some(&id) => id,
                        None => {
                            let id = refs.urls.len() as u32;
                            refs.urls.push(url.clone());
                            refs.first_use.push(Use::Entry(self.refs.len() as u32));
                            gen_urls.insert(url, id);
                            id
                        }
                    };
                    let r = match range {
                        Some((offset, length)) => Ref {
                            offset,
                            length,
                            target: id,
                            kind: Kind::Range,
                        },
                        None => Ref {
                            offset: 0,
                            length: 0,
                            target: id,
                            kind: Kind::Whole,
                        },
                    };
                    self.add_key(&key, r, false)
                        .map_err(|reason| (key.clone(), String::new(), reason))
                })
                .map_err(|(key, template, reason)| Error::Template {
                    key,
                    template,
                    reason,
                })?;
            }
        }
        refs.prefixes = std::mem::take(&mut self.prefixes.strings);
        refs.keys = std::mem::take(&mut self.keys);
        refs.refs = std::mem::take(&mut self.refs);
        refs.long_leaves = std::mem::take(&mut self.long_leaves);
        refs.inline = Bytes::from(std::mem::take(&mut self.inline));
        refs.metadata = std::mem::take(&mut self.metadata)
            .into_iter()
            .filter(|(_, _, top)| !(v1 && *top))
            .map(|(k, r, _)| (k, r))
            .collect();
        Ok(refs)
    }

    fn use_key(&self, url: usize) -> String {
        match self.first_use.get(url) {
            Some(Use::Entry(e)) => match self.keys.get(*e as usize) {
                Some(k) => {
                    let prefix = &self.prefixes.strings[(k.prefix & !TOP_LEVEL) as usize];
                    let leaf = k.leaf.get(&self.long_leaves);
                    if prefix.is_empty() {
                        leaf.to_string()
                    } else {
                        format!("{prefix}/{leaf}")
                    }
                }
                None => String::new(),
            },
            Some(Use::Metadata(m)) => self
                .metadata
                .get(*m as usize)
                .map(|(k, _, _)| k.clone())
                .unwrap_or_default(),
            None => String::new(),
        }
    }
}

/// The whole document: `{"version": 1, "templates": ..., "gen": ..., "refs": {...}}` or a version 0
/// map of references.
struct Document<'a>(&'a mut Builder);

impl<'de> DeserializeSeed<'de> for Document<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Document<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object of references")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let b = self.0;
        while map.next_key_seed(KeyInto(&mut b.key))?.is_some() {
            match b.key.as_str() {
                "version" => b.version = Some(map.next_value()?),
                "templates" => b.templates = Some(map.next_value()?),
                "gen" => b.gen = Some(map.next_value()?),
                "refs" => {
                    b.saw_refs = true;
                    map.next_value_seed(RefsMap(b))?;
                }
                _ => map.next_value_seed(Reference { b, top_level: true })?,
            }
        }
        Ok(())
    }
}

/// Reads a map key into a reused buffer.
struct KeyInto<'a>(&'a mut String);

impl<'de> DeserializeSeed<'de> for KeyInto<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyInto<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.0.clear();
        self.0.push_str(v);
        Ok(())
    }
}

/// The `refs` object of a version 1 document.
struct RefsMap<'a>(&'a mut Builder);

impl<'de> DeserializeSeed<'de> for RefsMap<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RefsMap<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("refs to be an object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let b = self.0;
        while map.next_key_seed(KeyInto(&mut b.key))?.is_some() {
            map.next_value_seed(Reference {
                b: &mut *b,
                top_level: false,
            })?;
        }
        Ok(())
    }
}

/// The value of one reference, whose key is in `b.key`.
struct Reference<'a> {
    b: &'a mut Builder,
    top_level: bool,
}

impl Reference<'_> {
    fn add<E: de::Error>(self, r: Ref) -> Result<(), E> {
        let b = self.b;
        b.add(r, self.top_level)
            .map_err(|reason| E::custom(format!("reference {}: {reason}", b.key)))
    }

    fn data<E: de::Error>(self, s: &str) -> Result<(), E> {
        let r = match s.strip_prefix("base64:") {
            Some(encoded) => {
                let decoded = BASE64.decode(encoded.trim_end()).map_err(|e| {
                    E::custom(format!("reference {}: invalid base64: {e}", self.b.key))
                })?;
                self.b.inline_ref(&decoded)
            }
            None => self.b.inline_ref(s.as_bytes()),
        };
        self.add(r)
    }
}

fn bad_list<E: de::Error>(key: &str, what: &str) -> E {
    E::custom(format!(
        "reference {key}: {what} (expected [url] or [url, offset, length])"
    ))
}

/// Base64 as Python's `b64decode` accepts it (padding optional).
const BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

impl<'de> DeserializeSeed<'de> for Reference<'_> {
    type Value = ();
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Reference<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "a string, an object, [url] or [url, offset, length] as the value of reference {}",
            self.b.key
        )
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.data(v)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<(), A::Error> {
        let value = Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        let text = serde_json::to_vec(&value).map_err(de::Error::custom)?;
        let r = self.b.inline_ref(&text);
        self.add(r)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some(target) = seq.next_element_seed(Url(&mut *self.b))? else {
            return Err(bad_list(&self.b.key, "empty list"));
        };
        let r = match seq.next_element::<Value>()? {
            None => Ref {
                offset: 0,
                length: 0,
                target,
                kind: Kind::Whole,
            },
            Some(offset) => {
                let Some(length) = seq.next_element::<Value>()? else {
                    return Err(bad_list(&self.b.key, "an offset without a length"));
                };
                if seq.next_element::<IgnoredAny>()?.is_some() {
                    return Err(bad_list(&self.b.key, "more than three elements"));
                }
                let (Some(offset), Some(length)) = (offset.as_u64(), length.as_u64()) else {
                    return Err(bad_list(
                        &self.b.key,
                        &format!(
                            "offset {offset} and length {length} must be non-negative integers"
                        ),
                    ));
                };
                if offset.checked_add(length).is_none() {
                    return Err(bad_list(&self.b.key, "offset + length overflows"));
                }
                Ref {
                    offset,
                    length,
                    target,
                    kind: Kind::Range,
                }
            }
        };
        self.add(r)
    }
}

/// The URL of a reference (a string), interned.
struct Url<'a>(&'a mut Builder);

impl<'de> DeserializeSeed<'de> for Url<'_> {
    type Value = u32;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<u32, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Url<'_> {
    type Value = u32;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "a URL string as the first element of reference {}",
            self.0.key
        )
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<u32, E> {
        Ok(self.0.url(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use zshard_zarr::parse_v2_array;

    fn parse(doc: &str) -> Result<JsonRefs> {
        JsonRefs::parse_lenient("refs.json", doc.as_bytes())
    }

    fn zarray(shape: &[u64], chunks: &[u64], sep: &str) -> ArrayMeta {
        let doc = json!({"zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": "<u2",
            "compressor": null, "fill_value": 0, "order": "C", "filters": null, "dimension_separator": sep});
        parse_v2_array("t", doc.to_string().as_bytes(), None).expect("valid")
    }

    /// What a key maps to, resolved the slow way (for tests).
    fn lookup(refs: &JsonRefs, key: &str) -> Option<Ref> {
        (0..refs.keys.len())
            .rev()
            .find(|&e| {
                refs.key_of(e) == key
                    && !(refs.skip_top_level && refs.keys[e].prefix & TOP_LEVEL != 0)
            })
            .map(|e| refs.refs[e])
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
    fn version_0_value_forms() {
        let refs = parse(
            r#"{".zgroup": "{\"zarr_format\": 2}",
                "a/.zattrs": {"units": "K", "scale": [1, 2]},
                "a/0": "base64:AAEC",
                "a/1": "plain",
                "a/2": ["s3://b/f.nc"],
                "a/3": ["s3://b/f.nc", 100, 50],
                "a/4": {"x": 1},
            }"#,
        )
        .expect("parses");
        let meta: Vec<&str> = refs.metadata().iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(meta, [".zgroup", "a/.zattrs"]);
        assert_eq!(
            &refs.inline(&refs.metadata()[1].1)[..],
            br#"{"units":"K","scale":[1,2]}"#
        );
        let get = |k: &str| lookup(&refs, k).expect("present");
        assert_eq!(&refs.inline(&get("a/0"))[..], &[0u8, 1, 2]);
        assert_eq!(&refs.inline(&get("a/1"))[..], b"plain");
        assert_eq!(&refs.inline(&get("a/4"))[..], br#"{"x":1}"#);
        let whole = get("a/2");
        assert_eq!(whole.kind, Kind::Whole);
        assert_eq!(refs.urls()[whole.target as usize], "s3://b/f.nc");
        let range = get("a/3");
        assert_eq!(
            (range.kind, range.offset, range.length, range.target),
            (Kind::Range, 100, 50, whole.target)
        );
        assert_eq!(refs.len(), 5);
        assert_eq!(refs.url_user(whole.target), "a/2");
    }

    #[test]
    fn version_1_templates_gen_and_ignored_top_level_keys() {
        let refs = parse(
            r#"{"version": 1, "extra": "ignored",
                "templates": {"u": "server.domain/path", "f": "{{c}}"},
                "gen": [{"key": "gen_key{{i}}", "url": "http://{{u}}_{{i}}",
                         "offset": "{{(i + 1) * 1000}}", "length": "1000",
                         "dimensions": {"i": {"stop": 5}}}],
                "refs": {"key0": "data", "key1": ["http://target_url", 10000, 100],
                         "key2": ["http://{{u}}", 10000, 100],
                         "key3": ["http://{{f(c='text')}}", 10000, 100]}}"#,
        )
        .expect("parses");
        let url = |k: &str| {
            let r = lookup(&refs, k).expect("present");
            (refs.urls()[r.target as usize].clone(), r.offset, r.length)
        };
        assert_eq!(url("key1"), ("http://target_url".into(), 10000, 100));
        assert_eq!(
            url("key2"),
            ("http://server.domain/path".into(), 10000, 100)
        );
        assert_eq!(url("key3"), ("http://text".into(), 10000, 100));
        assert_eq!(
            url("gen_key0"),
            ("http://server.domain/path_0".into(), 1000, 1000)
        );
        assert_eq!(
            url("gen_key4"),
            ("http://server.domain/path_4".into(), 5000, 1000)
        );
        assert!(lookup(&refs, "extra").is_none());
        assert_eq!(refs.len(), 4 + 5 + 1);
    }

    #[test]
    fn malformed_documents_name_the_key_or_file() {
        let err = |doc: &str| {
            let e = parse(doc).expect_err("fails");
            let source = std::error::Error::source(&e).map(|s| s.to_string());
            format!("{e}: {}", source.unwrap_or_default())
        };
        let e = err(r#"{"a/0": ["f", 1]}"#);
        assert!(e.contains("refs.json") && e.contains("a/0"), "{e}");
        let e = err(r#"{"a/0": ["f", -1, 2]}"#);
        assert!(e.contains("a/0"), "{e}");
        let e = err(r#"{"a/0": 12}"#);
        assert!(e.contains("a/0"), "{e}");
        let e = err(r#"{"a/0": "base64:!!"}"#);
        assert!(e.contains("a/0") && e.contains("base64"), "{e}");
        let e = err(r#"{"a/0": [3, 1, 2]}"#);
        assert!(e.contains("refs.json"), "{e}");
        let e = err(r#"{"version": 2, "refs": {}}"#);
        assert!(e.contains("version 2"), "{e}");
        let e = err(r#"{"version": 1, "refs": {"a/0": ["{{nope}}/f"]}}"#);
        assert!(e.contains("a/0") && e.contains("nope"), "{e}");
        let e = err(r#"{"a/0": ["f"] "#);
        assert!(e.contains("refs.json: invalid JSON"), "{e}");
        assert!(parse("[1, 2]").is_err());
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
