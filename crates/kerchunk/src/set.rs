//! The I/O side: opening reference files and folders, resolving targets to stores (with the checks
//! that need the file system), and reading chunks in coalesced, concurrent batches.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use serde_json::Value;
use zshard_core::{linear_index, ArrayMeta, ChunkReader, Node, NodeKind};
use zshard_store::{IoRuntime, Store};

use crate::coalesce::{coalesce, Wanted};
use crate::error::{format, Error, Result};
use crate::parquet_refs::{self, RefRows};
use crate::refs::{chunk_grid, grid_len, ChunkIndex, JsonRefs, Kind, Ref};
use crate::target::{self, Policy, Root, Target};
use crate::{lenient, meta};

/// Default largest gap between two byte ranges of one target that are still read as one request.
pub const DEFAULT_COALESCE_GAP: u64 = 64 * 1024;

/// Default largest coalesced request.
pub const DEFAULT_MAX_REQUEST: u64 = 256 * 1024 * 1024;

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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            ref_root: None,
            allow_prefixes: Vec::new(),
            coalesce_gap: Some(DEFAULT_COALESCE_GAP),
            max_request: DEFAULT_MAX_REQUEST,
            parquet_cache: DEFAULT_PARQUET_CACHE,
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

/// Whether `location` names a JSON reference file by its name.
pub fn is_json_name(location: &str) -> bool {
    let lower = location.trim_end_matches('/').to_ascii_lowercase();
    [".json", ".json.zst", ".json.zstd", ".json.gz"]
        .iter()
        .any(|ext| lower.ends_with(ext))
}

fn is_local(location: &str) -> bool {
    match target::scheme(location) {
        None => true,
        Some(s) => s.eq_ignore_ascii_case("file"),
    }
}

fn local_path(location: &str) -> Result<PathBuf> {
    if target::scheme(location).is_some() {
        let url = url::Url::parse(location).map_err(|e| format(location, e.to_string()))?;
        return url
            .to_file_path()
            .map_err(|()| format(location, "not a local file URL"));
    }
    Ok(PathBuf::from(location))
}

/// The parent folder URL and the file name of a remote location.
fn split_url(location: &str) -> (String, String) {
    let trimmed = location.trim_end_matches('/');
    match trimmed.rsplit_once('/') {
        Some((parent, name)) => (parent.to_string(), name.to_string()),
        None => (String::new(), trimmed.to_string()),
    }
}

/// Finds out whether `location` is a reference set: a JSON file (by name, or any local regular file),
/// or a folder whose `.zmetadata` has a `record_size` (the Parquet layout). `None` otherwise.
pub fn detect(location: &str, runtime: &Arc<IoRuntime>) -> Result<Option<Format>> {
    if is_json_name(location) {
        return Ok(Some(Format::Json));
    }
    let zmetadata = if is_local(location) {
        let path = local_path(location)?;
        if path.is_file() {
            return Ok(Some(Format::Json));
        }
        match std::fs::read(path.join(".zmetadata")) {
            Ok(bytes) => Some(Bytes::from(bytes)),
            Err(_) => None,
        }
    } else {
        match Store::open(location, runtime.clone(), false) {
            Ok(store) => store.get(".zmetadata").ok().flatten(),
            Err(_) => None,
        }
    };
    let parquet = zmetadata
        .and_then(|bytes| serde_json::from_slice::<Value>(&lenient::sanitize(&bytes)).ok())
        .is_some_and(|v| v.get("record_size").is_some() && v.get("metadata").is_some());
    Ok(parquet.then_some(Format::Parquet))
}

/// A target ready to read.
#[derive(Debug)]
struct Resolved {
    store: Store,
    /// Identifies the store (requests to one store are sent together).
    store_id: String,
    key: String,
    display: String,
    /// Known size (local files).
    len: Option<u64>,
}

/// What one chunk of a batch needs.
enum Want {
    Ready(Option<Bytes>),
    Failed(Error),
    Range {
        target: Arc<Resolved>,
        start: u64,
        end: u64,
    },
    Whole(Arc<Resolved>),
}

/// State shared by a reference set and its readers.
#[derive(Debug)]
struct Shared {
    display: String,
    runtime: Arc<IoRuntime>,
    policy: Policy,
    options: Options,
    stores: Mutex<HashMap<String, Store>>,
    resolved: Mutex<HashMap<String, Arc<Resolved>>>,
    references: AtomicU64,
    requests: AtomicU64,
    bytes: AtomicU64,
}

fn read_error(what: &str, source: impl Into<zshard_core::BoxError>) -> zshard_core::Error {
    zshard_core::Error::Read {
        key: what.to_string(),
        source: source.into(),
    }
}

impl Shared {
    fn store(&self, id: &str, location: &str) -> Result<Store> {
        let mut stores = self.stores.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = stores.get(id) {
            return Ok(s.clone());
        }
        let store =
            Store::open(location, self.runtime.clone(), false).map_err(|source| Error::Store {
                file: location.to_string(),
                source,
            })?;
        stores.insert(id.to_string(), store.clone());
        Ok(store)
    }

    /// Resolves and checks the target `url` of reference `key` (cached by URL).
    fn resolve(&self, key: &str, url: &str) -> Result<Arc<Resolved>> {
        self.resolve_with(url, || key.to_string())
    }

    /// As [`Shared::resolve`], with the key (for messages) computed only when needed.
    fn resolve_with(&self, url: &str, key: impl FnOnce() -> String) -> Result<Arc<Resolved>> {
        if let Some(r) = self
            .resolved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(url)
        {
            return Ok(r.clone());
        }
        let key = key();
        let key = key.as_str();
        let refused = |reason: String| Error::Refused {
            key: key.to_string(),
            target: url.to_string(),
            reason,
        };
        let resolved = match target::resolve(url, &self.policy).map_err(refused)? {
            Target::Local(path) => {
                let missing = |source| Error::MissingTarget {
                    key: key.to_string(),
                    target: path.display().to_string(),
                    source,
                };
                let real = std::fs::canonicalize(&path).map_err(missing)?;
                target::local_allowed(&real, &self.policy).map_err(|reason| {
                    refused(format!("it leads to {} ({reason})", real.display()))
                })?;
                let info = std::fs::metadata(&real).map_err(missing)?;
                if !info.is_file() {
                    return Err(refused("it is not a regular file".into()));
                }
                let text = real.to_string_lossy().into_owned();
                Resolved {
                    store: self.store("/", "/")?,
                    store_id: "/".into(),
                    key: text.trim_start_matches('/').to_string(),
                    display: text,
                    len: Some(info.len()),
                }
            }
            Target::Remote { base, key: object } => Resolved {
                store: self.store(&base, &base)?,
                display: format!("{base}/{object}"),
                store_id: base,
                key: object,
                len: None,
            },
        };
        let resolved = Arc::new(resolved);
        self.resolved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(url.to_string(), resolved.clone());
        Ok(resolved)
    }

    /// Reads what every chunk of a batch needs: ranges coalesced per target, requests to one store
    /// sent together with the store's bound on concurrent requests.
    fn fetch(&self, wants: Vec<Want>) -> Vec<zshard_core::Result<Option<Bytes>>> {
        self.references
            .fetch_add(wants.len() as u64, Ordering::Relaxed);
        let mut out: Vec<Option<zshard_core::Result<Option<Bytes>>>> =
            (0..wants.len()).map(|_| None).collect();
        // Targets of this batch; URLs that resolve to the same file share one.
        let mut targets: Vec<Arc<Resolved>> = Vec::new();
        let mut by_pointer: HashMap<*const Resolved, usize> = HashMap::new();
        let mut by_display: HashMap<String, usize> = HashMap::new();
        let mut target_id = |t: &Arc<Resolved>| {
            *by_pointer.entry(Arc::as_ptr(t)).or_insert_with(|| {
                *by_display.entry(t.display.clone()).or_insert_with(|| {
                    targets.push(t.clone());
                    targets.len() - 1
                })
            })
        };
        let mut ranges: Vec<Wanted> = Vec::new();
        let mut range_of: Vec<usize> = Vec::new();
        let mut wholes: Vec<(usize, usize)> = Vec::new();
        for (i, want) in wants.into_iter().enumerate() {
            match want {
                Want::Ready(b) => out[i] = Some(Ok(b)),
                Want::Failed(e) => out[i] = Some(Err(read_error("references", e))),
                Want::Range { target, start, end } => {
                    if let Some(len) = target.len.filter(|&len| end > len) {
                        out[i] = Some(Err(read_error(
                            &target.display,
                            Error::BeyondEnd {
                                target: target.display.clone(),
                                start,
                                end,
                                len,
                            },
                        )));
                        continue;
                    }
                    ranges.push(Wanted {
                        target: target_id(&target),
                        start,
                        end,
                    });
                    range_of.push(i);
                }
                Want::Whole(target) => wholes.push((i, target_id(&target))),
            }
        }
        let requests = coalesce(&ranges, self.options.coalesce_gap, self.options.max_request);
        // Requests grouped by store, so that each store's requests run concurrently.
        let mut by_store: HashMap<&str, Vec<usize>> = HashMap::new();
        for (r, request) in requests.iter().enumerate() {
            by_store
                .entry(targets[request.target].store_id.as_str())
                .or_default()
                .push(r);
        }
        for group in by_store.values() {
            let store = &targets[requests[group[0]].target].store;
            let batch: Vec<(String, std::ops::Range<u64>)> = group
                .iter()
                .map(|&r| {
                    let q = &requests[r];
                    (targets[q.target].key.clone(), q.start..q.end)
                })
                .collect();
            self.requests
                .fetch_add(batch.len() as u64, Ordering::Relaxed);
            for (&r, result) in group.iter().zip(store.get_ranges(&batch)) {
                let q = &requests[r];
                let t = &targets[q.target];
                match result {
                    Ok(bytes) => {
                        self.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                        for &m in &q.members {
                            let w = ranges[m];
                            let (from, to) =
                                ((w.start - q.start) as usize, (w.end - q.start) as usize);
                            out[range_of[m]] = Some(if to <= bytes.len() {
                                Ok(Some(bytes.slice(from..to)))
                            } else {
                                Err(read_error(
                                    &t.display,
                                    Error::BeyondEnd {
                                        target: t.display.clone(),
                                        start: w.start,
                                        end: w.end,
                                        len: q.start + bytes.len() as u64,
                                    },
                                ))
                            });
                        }
                    }
                    Err(e) => {
                        let text = zshard_core::chain_text(&e);
                        for &m in &q.members {
                            out[range_of[m]] = Some(Err(read_error(&t.display, text.clone())));
                        }
                    }
                }
            }
        }
        // Whole files, each read once.
        let mut files: Vec<usize> = wholes.iter().map(|&(_, t)| t).collect();
        files.sort_unstable();
        files.dedup();
        let mut contents: HashMap<usize, Result<Bytes, String>> = HashMap::new();
        let mut by_store: HashMap<&str, Vec<usize>> = HashMap::new();
        for &t in &files {
            by_store
                .entry(targets[t].store_id.as_str())
                .or_default()
                .push(t);
        }
        for group in by_store.values() {
            let store = &targets[group[0]].store;
            let keys: Vec<String> = group.iter().map(|&t| targets[t].key.clone()).collect();
            self.requests
                .fetch_add(keys.len() as u64, Ordering::Relaxed);
            for (&t, result) in group.iter().zip(store.get_many(&keys)) {
                let content = match result {
                    Ok(Some(bytes)) => {
                        self.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
                        Ok(bytes)
                    }
                    Ok(None) => Err("the target does not exist".to_string()),
                    Err(e) => Err(zshard_core::chain_text(&e)),
                };
                contents.insert(t, content);
            }
        }
        for (i, t) in wholes {
            out[i] = Some(match contents.get(&t) {
                Some(Ok(bytes)) => Ok(Some(bytes.clone())),
                Some(Err(text)) => Err(read_error(&targets[t].display, text.clone())),
                None => Err(read_error(&targets[t].display, "not read")),
            });
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(read_error("references", "not read"))))
            .collect()
    }

    /// Reads one whole reference (a metadata document stored in a target).
    fn read_one(&self, key: &str, url: &str, r: &Ref) -> Result<Vec<u8>> {
        let target = self.resolve(key, url)?;
        let want = match r.kind {
            Kind::Range => Want::Range {
                target,
                start: r.offset,
                end: r.offset.saturating_add(r.length),
            },
            _ => Want::Whole(target),
        };
        match self.fetch(vec![want]).pop() {
            Some(Ok(Some(bytes))) => Ok(bytes.to_vec()),
            Some(Err(e)) => Err(format(key, zshard_core::chain_text(&e))),
            _ => Err(format(key, "no data")),
        }
    }

    fn stats(&self) -> ReadStats {
        ReadStats {
            references: self.references.load(Ordering::Relaxed),
            requests: self.requests.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

/// The security policy: root and allowed prefixes made absolute (local ones canonical).
fn policy(default_root: Root, options: &Options) -> Result<Policy> {
    let local_root = |location: &str| -> Result<Root> {
        let path = local_path(location)?;
        let real = std::fs::canonicalize(&path).map_err(|source| Error::Io {
            file: path.display().to_string(),
            source,
        })?;
        Ok(Root::Local(real))
    };
    let root = match options.ref_root.as_deref() {
        None => default_root,
        Some(r) if is_local(r) => local_root(r)?,
        Some(r) => Root::Remote(r.trim_end_matches('/').to_string()),
    };
    let allow = options
        .allow_prefixes
        .iter()
        .map(|p| {
            if target::scheme(p).is_some() {
                return p.clone();
            }
            let absolute = std::path::absolute(p).unwrap_or_else(|_| PathBuf::from(p));
            // Canonical when it exists, so that it matches canonical target paths.
            let path =
                std::fs::canonicalize(&absolute).unwrap_or_else(|_| target::normalize(&absolute));
            let mut text = path.to_string_lossy().into_owned();
            if p.ends_with('/') && !text.ends_with('/') {
                text.push('/');
            }
            text
        })
        .collect();
    Ok(Policy { root, allow })
}

/// Streams a local reference file, decompressing zstd or gzip (recognised by their magic bytes).
fn open_local_reader(path: &Path, display: &str) -> Result<Box<dyn Read>> {
    let io = |source| Error::Io {
        file: display.to_string(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let head = reader.fill_buf().map_err(io)?;
    Ok(if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        // serde_json reads byte by byte: buffer the decoder's output.
        Box::new(BufReader::with_capacity(
            1 << 20,
            zstd::stream::read::Decoder::with_buffer(reader).map_err(io)?,
        ))
    } else if head.starts_with(&[0x1f, 0x8b]) {
        Box::new(BufReader::with_capacity(
            1 << 20,
            flate2::read::MultiGzDecoder::new(reader),
        ))
    } else {
        Box::new(reader)
    })
}

/// Decompresses an in-memory reference file when it is zstd or gzip.
fn decompress(bytes: Bytes, display: &str) -> Result<Vec<u8>> {
    let io = |source| Error::Io {
        file: display.to_string(),
        source,
    };
    let mut out = Vec::new();
    if bytes.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        zstd::stream::read::Decoder::new(&bytes[..])
            .and_then(|mut d| d.read_to_end(&mut out))
            .map_err(io)?;
    } else if bytes.starts_with(&[0x1f, 0x8b]) {
        flate2::read::MultiGzDecoder::new(&bytes[..])
            .read_to_end(&mut out)
            .map_err(io)?;
    } else {
        out = bytes.to_vec();
    }
    Ok(out)
}

#[derive(Debug)]
enum Layout {
    Json {
        refs: Arc<JsonRefs>,
        targets: Arc<Vec<Option<Arc<Resolved>>>>,
        indexes: HashMap<String, Arc<ChunkIndex>>,
    },
    Parquet {
        store: Store,
        record_size: u64,
    },
}

/// An opened reference set: its hierarchy, and a chunk reader per array.
#[derive(Debug)]
pub struct ReferenceSet {
    shared: Arc<Shared>,
    layout: Layout,
    nodes: Vec<Node>,
}

impl ReferenceSet {
    /// Opens the reference set at `location` (a JSON file, or a Parquet reference folder), checks
    /// every target of a JSON set against the security policy, and builds the hierarchy. No chunk
    /// data is read.
    pub fn open(
        location: &str,
        format: Format,
        options: &Options,
        runtime: Arc<IoRuntime>,
    ) -> Result<ReferenceSet> {
        match format {
            Format::Json => Self::open_json(location, options, runtime),
            Format::Parquet => Self::open_parquet(location, options, runtime),
        }
    }

    fn shared(
        display: String,
        runtime: Arc<IoRuntime>,
        policy: Policy,
        options: &Options,
    ) -> Shared {
        Shared {
            display,
            runtime,
            policy,
            options: options.clone(),
            stores: Mutex::new(HashMap::new()),
            resolved: Mutex::new(HashMap::new()),
            references: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    fn open_json(
        location: &str,
        options: &Options,
        runtime: Arc<IoRuntime>,
    ) -> Result<ReferenceSet> {
        let display = location.to_string();
        let (mut refs, root) = if is_local(location) {
            let path = local_path(location)?;
            let real = std::fs::canonicalize(&path).map_err(|source| Error::Io {
                file: display.clone(),
                source,
            })?;
            let parsed = match JsonRefs::parse(&display, open_local_reader(&real, &display)?) {
                Err(Error::Json { source, .. })
                    if source.classify() == serde_json::error::Category::Syntax =>
                {
                    // Maybe lenient JSON: read it whole and try again.
                    let mut bytes = Vec::new();
                    open_local_reader(&real, &display)?
                        .read_to_end(&mut bytes)
                        .map_err(|source| Error::Io {
                            file: display.clone(),
                            source,
                        })?;
                    JsonRefs::parse_lenient(&display, &bytes)?
                }
                other => other?,
            };
            let folder = real.parent().map(Path::to_path_buf).unwrap_or_default();
            (parsed, Root::Local(folder))
        } else {
            let (parent, name) = split_url(location);
            let store =
                Store::open(&parent, runtime.clone(), false).map_err(|source| Error::Store {
                    file: display.clone(),
                    source,
                })?;
            let bytes = store
                .get(&name)
                .map_err(|source| Error::Store {
                    file: display.clone(),
                    source,
                })?
                .ok_or_else(|| format(&display, "does not exist"))?;
            let bytes = decompress(bytes, &display)?;
            (
                JsonRefs::parse_lenient(&display, &bytes)?,
                Root::Remote(parent),
            )
        };
        let shared = Arc::new(Self::shared(
            display.clone(),
            runtime,
            policy(root, options)?,
            options,
        ));
        // Every target is checked before anything is read.
        let mut targets = Vec::with_capacity(refs.urls().len());
        for (id, url) in refs.urls().iter().enumerate() {
            targets.push(Some(shared.resolve(&refs.url_user(id as u32), url)?));
        }
        let mut documents = Vec::new();
        for (key, r) in refs.metadata() {
            let bytes = match r.kind {
                Kind::Inline => refs.inline(r).to_vec(),
                Kind::Missing => continue,
                Kind::Range | Kind::Whole => {
                    shared.read_one(key, &refs.urls()[r.target as usize], r)?
                }
            };
            documents.push((key.clone(), bytes));
        }
        let nodes = meta::nodes(&display, &documents)?;
        let arrays: Vec<(&str, &ArrayMeta)> = nodes
            .iter()
            .filter_map(|n| match &n.kind {
                NodeKind::Array(m) => Some((n.path.as_str(), m.as_ref())),
                NodeKind::Group { .. } => None,
            })
            .collect();
        let indexes = refs
            .index(&arrays)?
            .into_iter()
            .map(|(k, v)| (k, Arc::new(v)))
            .collect();
        Ok(ReferenceSet {
            shared,
            layout: Layout::Json {
                refs: Arc::new(refs),
                targets: Arc::new(targets),
                indexes,
            },
            nodes,
        })
    }

    fn open_parquet(
        location: &str,
        options: &Options,
        runtime: Arc<IoRuntime>,
    ) -> Result<ReferenceSet> {
        let display = location.trim_end_matches('/').to_string();
        let store =
            Store::open(location, runtime.clone(), false).map_err(|source| Error::Store {
                file: display.clone(),
                source,
            })?;
        let zkey = store.url(".zmetadata");
        let bytes = store
            .get(".zmetadata")
            .map_err(|source| Error::Store {
                file: zkey.clone(),
                source,
            })?
            .ok_or_else(|| format(&zkey, "does not exist (not a Parquet reference set)"))?;
        let zmetadata: Value = lenient::parse(&zkey, &bytes)?;
        let record_size = zmetadata
            .get("record_size")
            .and_then(Value::as_u64)
            .filter(|&n| n > 0)
            .ok_or_else(|| format(&zkey, "record_size must be a positive integer"))?;
        let Some(Value::Object(docs)) = zmetadata.get("metadata") else {
            return Err(format(&zkey, "metadata must be an object"));
        };
        let documents: Vec<(String, Vec<u8>)> = docs
            .iter()
            .map(|(k, v)| {
                let bytes = match v {
                    Value::String(s) => s.clone().into_bytes(),
                    other => other.to_string().into_bytes(),
                };
                (k.clone(), bytes)
            })
            .collect();
        let nodes = meta::nodes(&zkey, &documents)?;
        // The files of each array must fit its chunk grid.
        for node in &nodes {
            let NodeKind::Array(meta) = &node.kind else {
                continue;
            };
            let total = grid_len(&chunk_grid(meta)).unwrap_or(u64::MAX);
            let files = total.div_ceil(record_size);
            let keys = store.list_keys(&node.path).map_err(|source| Error::Store {
                file: store.url(&node.path),
                source,
            })?;
            for key in keys {
                let (parent, name) = key.rsplit_once('/').unwrap_or(("", key.as_str()));
                if parent != node.path {
                    continue;
                }
                let number = name
                    .strip_prefix("refs.")
                    .and_then(|n| n.strip_suffix(".parq"))
                    .and_then(|n| n.parse::<u64>().ok());
                if let Some(n) = number.filter(|&n| n >= files) {
                    return Err(format(
                        store.url(&key),
                        format!(
                            "is beyond the chunk grid of {} ({total} chunks, {record_size} per file: refs.0.parq to refs.{}.parq)",
                            if node.path.is_empty() { "the root array" } else { &node.path },
                            files.saturating_sub(1).min(n)
                        ),
                    ));
                }
            }
        }
        let root = if is_local(location) {
            let real =
                std::fs::canonicalize(local_path(location)?).map_err(|source| Error::Io {
                    file: display.clone(),
                    source,
                })?;
            Root::Local(real.parent().map(Path::to_path_buf).unwrap_or_default())
        } else {
            Root::Remote(split_url(&display).0)
        };
        let shared = Arc::new(Self::shared(
            display,
            runtime,
            policy(root, options)?,
            options,
        ));
        Ok(ReferenceSet {
            shared,
            layout: Layout::Parquet { store, record_size },
            nodes,
        })
    }

    /// The reference set's location, for messages.
    pub fn url(&self) -> String {
        self.shared.display.clone()
    }

    /// Every group and array, parents first, sorted by path.
    pub fn nodes(&self) -> Vec<Node> {
        self.nodes.clone()
    }

    /// Number of chunk references of a JSON set (`None` for Parquet sets, which are read lazily).
    pub fn reference_count(&self) -> Option<usize> {
        match &self.layout {
            Layout::Json { refs, .. } => Some(refs.len()),
            Layout::Parquet { .. } => None,
        }
    }

    /// The reads made for chunks so far.
    pub fn stats(&self) -> ReadStats {
        self.shared.stats()
    }

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
            Layout::Parquet { store, record_size } => Arc::new(ParquetReader {
                common,
                store: store.child(path),
                record_size: *record_size,
                cache: Mutex::new(VecDeque::new()),
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
        let key = self.encoding.key(coord);
        if self.path.is_empty() {
            key
        } else {
            format!("{}/{key}", self.path)
        }
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

    fn read_chunks(&self, coords: &[Vec<u64>]) -> Vec<zshard_core::Result<Option<Bytes>>> {
        let wants = coords
            .iter()
            .map(|coord| {
                let Some(entry) = self.common.position(coord).and_then(|l| self.index.get(l))
                else {
                    return Want::Ready(None);
                };
                let r = self.refs.entry(entry);
                let target = || {
                    self.targets
                        .get(r.target as usize)
                        .cloned()
                        .flatten()
                        .ok_or_else(|| format(self.refs.file(), "unresolved target"))
                };
                match r.kind {
                    Kind::Inline => Want::Ready(Some(self.refs.inline(&r))),
                    Kind::Missing => Want::Ready(None),
                    Kind::Whole => target().map_or_else(Want::Failed, Want::Whole),
                    Kind::Range => target().map_or_else(Want::Failed, |target| Want::Range {
                        target,
                        start: r.offset,
                        end: r.offset.saturating_add(r.length),
                    }),
                }
            })
            .collect();
        self.common.shared.fetch(wants)
    }
}

/// A decoded reference file, or `None` when the file does not exist (every chunk in it is missing).
type CachedFile = Arc<Option<RefRows>>;

#[derive(Debug)]
struct ParquetReader {
    common: ArrayCommon,
    store: Store,
    record_size: u64,
    cache: Mutex<VecDeque<(u64, CachedFile)>>,
}

impl ParquetReader {
    fn file(&self, n: u64) -> Result<CachedFile> {
        {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, f)) = cache.iter().find(|(m, _)| *m == n) {
                return Ok(f.clone());
            }
        }
        let name = format!("refs.{n}.parq");
        let display = self.store.url(&name);
        let rows = match self.store.get(&name).map_err(|source| Error::Store {
            file: display.clone(),
            source,
        })? {
            None => None,
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
                Some(rows)
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

    fn read_chunks(&self, coords: &[Vec<u64>]) -> Vec<zshard_core::Result<Option<Bytes>>> {
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
                let Some(rows) = file.as_ref() else {
                    return Want::Ready(None);
                };
                let Some(r) = rows.rows.get(row) else {
                    return Want::Ready(None);
                };
                let target = || {
                    let url = &rows.paths[r.target as usize];
                    self.common
                        .shared
                        .resolve_with(url, || self.common.key(coord))
                };
                match r.kind {
                    Kind::Inline => Want::Ready(Some(rows.inline(r))),
                    Kind::Missing => Want::Ready(None),
                    Kind::Whole => target().map_or_else(Want::Failed, Want::Whole),
                    Kind::Range => target().map_or_else(Want::Failed, |target| Want::Range {
                        target,
                        start: r.offset,
                        end: r.offset.saturating_add(r.length),
                    }),
                }
            })
            .collect();
        self.common.shared.fetch(wants)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parquet_refs::tests::write;
    use serde_json::json;

    fn runtime() -> Arc<IoRuntime> {
        IoRuntime::new(1).expect("runtime")
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
    fn parquet_set(dir: &Path, files: &[(u64, Vec<u8>)]) -> PathBuf {
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
        // refs.1.parq is absent: chunks 4..8 are missing.
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
        let set = ReferenceSet::open(
            root.to_str().expect("utf-8"),
            Format::Parquet,
            &Options::default(),
            runtime(),
        )
        .expect("opens");
        let meta = array_meta(&set, "x");
        let reader = set.reader("x", &meta);
        let coords: Vec<Vec<u64>> = (0..10).map(|i| vec![i]).collect();
        let got: Vec<Option<Vec<u8>>> = reader
            .read_chunks(&coords)
            .into_iter()
            .map(|r| r.expect("reads").map(|b| b.to_vec()))
            .collect();
        assert_eq!(got[0], Some(vec![0, 1]));
        assert_eq!(got[1], Some(vec![2, 3]));
        assert_eq!(got[2], None);
        assert_eq!(got[3], Some(b"in".to_vec()));
        assert!(got[4..8].iter().all(Option::is_none));
        assert_eq!(got[8], Some(vec![30, 31]));
        assert_eq!(got[9], Some(vec![4, 5]));
        // 0..2 and 2..4 and 4..6 of data.bin coalesce; 30..32 is within 64 KiB too: one request.
        assert_eq!(set.stats().requests, 1);
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
        let set = ReferenceSet::open(
            root.to_str().expect("utf-8"),
            Format::Parquet,
            &Options::default(),
            runtime(),
        )
        .expect("opens");
        let meta = array_meta(&set, "x");
        let reader = set.reader("x", &meta);
        let e = reader
            .read_chunks(&[vec![0]])
            .remove(0)
            .expect_err("1 row, 4 needed");
        let text = zshard_core::chain_text(&e);
        assert!(
            text.contains("refs.0.parq") && text.contains("has 1 rows"),
            "{text}"
        );
        let e = reader
            .read_chunks(&[vec![5]])
            .remove(0)
            .expect_err("refused");
        let text = zshard_core::chain_text(&e);
        assert!(
            text.contains("x/5") && text.contains("/etc/passwd") && text.contains("refused"),
            "{text}"
        );
        assert_eq!(set.stats().requests, 0);

        // A file beyond the grid fails at open.
        std::fs::write(root.join("x/refs.5.parq"), write(&[(None, 0, 0, None)])).expect("write");
        let e = ReferenceSet::open(
            root.to_str().expect("utf-8"),
            Format::Parquet,
            &Options::default(),
            runtime(),
        )
        .expect_err("beyond");
        assert!(e.to_string().contains("refs.5.parq"), "{e}");
    }

    #[test]
    fn detection() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rt = runtime();
        assert_eq!(
            detect("/nowhere/refs.JSON.zst", &rt).expect("ok"),
            Some(Format::Json)
        );
        let root = parquet_set(dir.path(), &[]);
        assert_eq!(
            detect(root.to_str().expect("utf-8"), &rt).expect("ok"),
            Some(Format::Parquet)
        );
        assert_eq!(
            detect(dir.path().join("data.bin").to_str().expect("utf-8"), &rt).expect("ok"),
            Some(Format::Json)
        );
        std::fs::write(
            dir.path().join(".zmetadata"),
            r#"{"metadata": {}, "zarr_consolidated_format": 1}"#,
        )
        .expect("write");
        assert_eq!(
            detect(dir.path().to_str().expect("utf-8"), &rt).expect("ok"),
            None
        );
    }
}
