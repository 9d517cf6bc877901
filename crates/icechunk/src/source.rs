//! An Icechunk repository as a zshard input: its nodes at one version, and a chunk reader per array
//! that reads native chunks from the repository, inline chunks from its manifests, and virtual
//! chunks through zshard's policy for untrusted targets ([`ExternalRanges`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use futures::future::join_all;
use futures::StreamExt;
use icechunk::diff::Diff;
use icechunk::format::manifest::{ChunkPayload, VirtualChunkRef};
use icechunk::format::{ByteRange, ChunkIndices, Path, SnapshotId};
use icechunk::repository::VersionInfo;
use icechunk::session::Session;
use icechunk::Repository;
use zshard_core::{
    ArrayMeta, ChunkReader, ChunkVersions, IndexLocation, KnownVersions, Node, ShardIndex,
    SourceShards, VersionsFrom,
};
use zshard_kerchunk::{ExternalChunk, ExternalRanges, Options as ReferenceOptions};
use zshard_store::IoRuntime;

use crate::error::{boxed, Error, Result};
use crate::repo;
use crate::{ChunkCounts, SpecVersion};

/// An opened repository at one version.
#[derive(Debug)]
pub struct Source {
    location: String,
    reference: String,
    session: Arc<Session>,
    runtime: Arc<IoRuntime>,
    external: Arc<ExternalRanges>,
    nodes: Vec<Node>,
    /// Counted (and every virtual chunk's target checked) once asked for: a rerun whose source
    /// did not change reads no manifest.
    counts: OnceLock<ChunkCounts>,
    spec_version: SpecVersion,
    diffs: Arc<Diffs>,
}

/// The repository, for Icechunk's diff between the snapshot an earlier run listed and this one,
/// made once per earlier snapshot and shared by every array's reader.
struct Diffs {
    repository: Repository,
    made: Mutex<HashMap<String, std::result::Result<Arc<Diff>, String>>>,
}

impl std::fmt::Debug for Diffs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Diffs").finish_non_exhaustive()
    }
}

impl Source {
    /// Opens the repository at `location` at `reference` (a branch, tag or snapshot id). Virtual
    /// chunk targets must lie under `references.ref_root` (default: the folder holding the
    /// repository) or an allowed prefix, and match one of the repository's virtual chunk containers.
    ///
    /// Every chunk's manifest entry is read, to count them and check every virtual chunk's target
    /// before any is read; [`Source::open_unscanned`] leaves that for later.
    pub fn open(
        location: &str,
        reference: &str,
        references: &ReferenceOptions,
        runtime: Arc<IoRuntime>,
    ) -> Result<Source> {
        let source = Source::open_unscanned(location, reference, references, runtime)?;
        source.scanned()?;
        Ok(source)
    }

    /// [`Source::open`] reading no manifest: the nodes only. The chunks are counted (and virtual
    /// targets checked) when [`Source::chunk_counts`] asks; a conversion checks the targets of
    /// the chunks it lists or reads (see [`ChunkReader::chunk_versions`]), so that a rerun whose
    /// source did not change reads no manifest at all.
    pub fn open_unscanned(
        location: &str,
        reference: &str,
        references: &ReferenceOptions,
        runtime: Arc<IoRuntime>,
    ) -> Result<Source> {
        let repository = repo::open_reading(location, &runtime)?;
        let spec_version = repo::spec_version(repository.spec_version());
        let version = repo::version(&repository, location, reference, &runtime)?;
        let session = runtime
            .block_on(repository.readonly_session(&version))
            .map_err(|e| Error::Reference {
                repo: location.to_string(),
                reference: reference.to_string(),
                reason: e.kind.to_string(),
            })?;
        let parent = std::path::Path::new(location.trim_start_matches("file://"))
            .parent()
            .map(|p| p.to_string_lossy().into_owned())
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| ".".to_string());
        let external = ExternalRanges::new(location, &parent, references, runtime.clone())
            .map_err(|e| Error::Open {
                repo: location.to_string(),
                source: boxed(e),
            })?;
        let nodes = read_nodes(&session, location, &runtime)?;
        Ok(Source {
            location: location.to_string(),
            reference: reference.to_string(),
            session: Arc::new(session),
            runtime,
            external: Arc::new(external),
            nodes,
            counts: OnceLock::new(),
            spec_version,
            diffs: Arc::new(Diffs {
                repository,
                made: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The repository and version, for messages: `REPO@REF (snapshot ID, spec version N)`.
    pub fn url(&self) -> String {
        format!(
            "{}@{} (snapshot {}, spec version {})",
            self.location,
            self.reference,
            self.session.snapshot_id(),
            self.spec_version
        )
    }

    /// The repository's Icechunk spec version.
    pub fn spec_version(&self) -> SpecVersion {
        self.spec_version
    }

    /// Every group and array, parents first, sorted by path.
    pub fn nodes(&self) -> Vec<Node> {
        self.nodes.clone()
    }

    /// How many chunks of each kind the version holds (every manifest is read the first time,
    /// and every virtual chunk's target checked).
    pub fn chunk_counts(&self) -> Result<ChunkCounts> {
        self.scanned()
    }

    /// The counts, scanning the manifests once.
    fn scanned(&self) -> Result<ChunkCounts> {
        if let Some(counts) = self.counts.get() {
            return Ok(*counts);
        }
        let counts = scan(&self.session, &self.location, &self.external, &self.runtime)?;
        Ok(*self.counts.get_or_init(|| counts))
    }

    /// The reads of virtual chunk targets made so far.
    pub fn virtual_reads(&self) -> zshard_kerchunk::ReadStats {
        self.external.stats()
    }

    /// The reader of the encoded chunks of the array at `path` (`""` for a root array).
    pub fn reader(&self, path: &str, meta: &ArrayMeta) -> Arc<dyn ChunkReader> {
        Arc::new(IcechunkReader {
            location: self.location.clone(),
            path: path.to_string(),
            encoding: meta.chunk_key_encoding,
            session: self.session.clone(),
            runtime: self.runtime.clone(),
            external: self.external.clone(),
            diffs: self.diffs.clone(),
        })
    }
    /// The reader of the inner chunks of the shards of the array at `path` as zshard wrote them
    /// (`meta`, an output `zarr.json` read by inner chunk, see [`ArrayMeta::read_by_inner_chunk`]):
    /// an update of a conversion committed into this repository copies the inner chunks that did
    /// not change from them. `None` for an array not stored in shards.
    pub fn shard_reader(&self, path: &str, meta: &ArrayMeta) -> Option<Arc<dyn ChunkReader>> {
        let shards = meta.sharded.clone()?;
        Some(Arc::new(InnerChunkReader {
            location: self.location.clone(),
            path: path.to_string(),
            encoding: meta.chunk_key_encoding,
            session: self.session.clone(),
            runtime: self.runtime.clone(),
            shards,
            inner_shape: meta.chunk_shape.clone(),
        }))
    }
}

/// The shards a conversion committed into a repository, at the snapshot of that commit (which
/// holds them as its kept records describe them, whatever was committed since): an update copies
/// the inner chunks that did not change from them (see [`Source::shard_reader`]).
#[derive(Debug)]
pub struct Committed {
    source: Source,
    /// The node the conversion wrote under (`REPO#/PATH`), empty for the root.
    node: String,
}

impl Committed {
    /// The repository of the destination `destination` (`REPO` or `REPO#/PATH`) at `snapshot`.
    pub fn open(destination: &str, snapshot: &str, runtime: Arc<IoRuntime>) -> Result<Committed> {
        let (location, node) = crate::split_node(destination);
        let source =
            Source::open_unscanned(location, snapshot, &ReferenceOptions::default(), runtime)?;
        Ok(Committed { source, node })
    }

    /// The reader of the inner chunks of the shards of the conversion's array at `path` (see
    /// [`Source::shard_reader`]).
    pub fn shard_reader(&self, path: &str, meta: &ArrayMeta) -> Option<Arc<dyn ChunkReader>> {
        let path = match (self.node.is_empty(), path.is_empty()) {
            (true, _) => path.to_string(),
            (false, true) => self.node.clone(),
            (false, false) => format!("{}/{path}", self.node),
        };
        self.source.shard_reader(&path, meta)
    }
}

/// Counts the chunks of every array by kind, and checks every virtual chunk's target (against the
/// repository's virtual chunk containers and zshard's policy) before any chunk is read.
fn scan(
    session: &Session,
    location: &str,
    external: &ExternalRanges,
    runtime: &IoRuntime,
) -> Result<ChunkCounts> {
    runtime.block_on(async {
        let mut counts = ChunkCounts::default();
        let stream = session.all_chunks().await.map_err(|e| Error::Node {
            repo: location.to_string(),
            path: "/".to_string(),
            source: boxed(e.kind),
        })?;
        let mut stream = std::pin::pin!(stream);
        while let Some(item) = stream.next().await {
            let (path, info) = item.map_err(|e| Error::Node {
                repo: location.to_string(),
                path: "/".to_string(),
                source: boxed(e.kind),
            })?;
            match info.payload {
                ChunkPayload::Ref(_) => counts.native += 1,
                ChunkPayload::Inline(_) => counts.inline += 1,
                ChunkPayload::Virtual(reference) => {
                    counts.virtual_ += 1;
                    let array = path.to_string();
                    let key = virtual_key(&array, &info.coord);
                    check_virtual(session, (location, &key), external, &reference)?;
                }
                // Newer kinds of reference are refused when their chunk is read.
                _ => {}
            }
        }
        Ok(counts)
    })
}

/// The key of the chunk at `coord` of the array at `path` (an Icechunk path), for messages.
fn virtual_key(path: &str, coord: &ChunkIndices) -> String {
    let coord: Vec<String> = coord.0.iter().map(u32::to_string).collect();
    format!("{}/c/{}", path.trim_start_matches('/'), coord.join("/"))
}

/// Refuses a virtual chunk (`key` of the repository at `location`) whose target matches none of
/// the repository's virtual chunk containers or that zshard's policy does not read.
fn check_virtual(
    session: &Session,
    (location, key): (&str, &str),
    external: &ExternalRanges,
    reference: &VirtualChunkRef,
) -> Result<()> {
    let refused = |reason: String| Error::Virtual {
        repo: location.to_string(),
        key: key.to_string(),
        reason,
    };
    let url = virtual_target(session, reference).map_err(refused)?;
    external
        .check(key, target_path(&url))
        .map_err(|e| refused(zshard_core::chain_text(&e)))
}

/// The absolute URL of a virtual chunk's target, once it matches one of the repository's virtual
/// chunk containers: spec-2 repositories may name it relative to a container
/// (`vcc://NAME/PATH`), which is expanded against that container's prefix.
fn virtual_target(
    session: &Session,
    reference: &VirtualChunkRef,
) -> std::result::Result<String, String> {
    let named = reference.location.url();
    if session.matching_container(&reference.location).is_none() {
        return Err(format!(
            "target {named} matches none of the repository's virtual chunk containers"
        ));
    }
    session
        .resolve_virtual_location(&reference.location)
        .map_err(|e| format!("target {named}: {}", e.kind))
}

/// What zshard's policy reads for a virtual chunk location: a local path for `file://` URLs.
fn target_path(url: &str) -> &str {
    url.strip_prefix("file://").unwrap_or(url)
}

/// The nodes of `session`, their `zarr.json` parsed as any Zarr v3 source's.
fn read_nodes(session: &Session, location: &str, runtime: &IoRuntime) -> Result<Vec<Node>> {
    let error = |path: &str, source: Box<dyn std::error::Error + Send + Sync>| Error::Node {
        repo: location.to_string(),
        path: path.to_string(),
        source,
    };
    let snapshots = runtime.block_on(async {
        let iter = session
            .list_nodes(&Path::root())
            .await
            .map_err(|e| error("/", boxed(e.kind)))?;
        iter.map(|node| node.map_err(|e| error("/", boxed(e.kind))))
            .collect::<Result<Vec<_>>>()
    })?;
    let mut nodes = snapshots
        .into_iter()
        .map(|snapshot| {
            let path = snapshot
                .path
                .to_string()
                .trim_start_matches('/')
                .to_string();
            let key = if path.is_empty() {
                "zarr.json".to_string()
            } else {
                format!("{path}/zarr.json")
            };
            let parsed = zshard_zarr::parse_v3_node(&key, &snapshot.user_data)
                .map_err(|e| error(&path, boxed(e)))?;
            Ok(Node {
                path,
                kind: parsed.kind,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    nodes.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(nodes)
}

/// Reads one array's chunks from a session.
#[derive(Debug)]
struct IcechunkReader {
    location: String,
    path: String,
    encoding: zshard_core::ChunkKeyEncoding,
    session: Arc<Session>,
    runtime: Arc<IoRuntime>,
    external: Arc<ExternalRanges>,
    diffs: Arc<Diffs>,
}

/// What a chunk's manifest entry leads to, before reading.
enum Lookup {
    Ready(ExternalChunk),
    Native(ChunkIndices),
}

impl IcechunkReader {
    fn read_error(&self, coord: &[u64], e: impl std::fmt::Display) -> zshard_core::Error {
        zshard_core::Error::Read {
            key: format!("{}: {}", self.location, self.chunk_key(coord)),
            source: e.to_string().into(),
        }
    }

    fn array_path(&self) -> std::result::Result<Path, String> {
        Path::new(&format!("/{}", self.path)).map_err(|e| e.to_string())
    }

    /// Refuses a listed virtual chunk at `coord` whose target is not read (see [`check_virtual`]).
    fn check_listed(&self, coord: &ChunkIndices, payload: &ChunkPayload) -> Result<()> {
        match payload {
            ChunkPayload::Virtual(reference) => {
                let key = virtual_key(&format!("/{}", self.path), coord);
                check_virtual(
                    &self.session,
                    (&self.location, &key),
                    &self.external,
                    reference,
                )
            }
            _ => Ok(()),
        }
    }

    /// Icechunk's diff between snapshot `earlier` and this reader's (made once for every array);
    /// why not when it cannot be trusted to name every change: `earlier` is no longer an ancestor
    /// (expired, or the branch was reset), or snapshots between were expired (Icechunk then reads
    /// the pruned transaction logs, which an Icechunk before 2.1 may have deleted).
    fn diff_since(&self, earlier: &str) -> std::result::Result<Arc<Diff>, String> {
        let mut made = self
            .diffs
            .made
            .lock()
            .map_err(|_| "a diff failed on another thread".to_string())?;
        if let Some(diff) = made.get(earlier) {
            return diff.clone();
        }
        let now = self.session.snapshot_id().clone();
        let repository = &self.diffs.repository;
        let diff = self.runtime.block_on(async {
            let from = SnapshotId::try_from(earlier)
                .map_err(|_| format!("{earlier:?} is not a snapshot id"))?;
            let ancestry = repository
                .ancestry(&VersionInfo::SnapshotId(now.clone()))
                .await
                .map_err(|e| e.kind.to_string())?;
            let mut ancestry = std::pin::pin!(ancestry);
            let mut found = false;
            while let Some(info) = ancestry.next().await {
                let info = info.map_err(|e| e.kind.to_string())?;
                if info.id == from {
                    found = true;
                    break;
                }
                if !info.pruned_ancestor_tx_logs.is_empty() {
                    return Err(format!(
                        "snapshots between {earlier} and {now} were expired, and their changes may be missing from Icechunk's diff"
                    ));
                }
            }
            if !found {
                return Err(format!(
                    "snapshot {earlier} is no longer an ancestor of {now} (expired, or the branch was reset)"
                ));
            }
            repository
                .diff(&VersionInfo::SnapshotId(from), &VersionInfo::SnapshotId(now.clone()))
                .await
                .map(Arc::new)
                .map_err(|e| format!("icechunk's diff from {earlier} to {now}: {}", e.kind))
        });
        made.insert(earlier.to_string(), diff.clone());
        diff
    }

    /// What the manifest says about the chunk at `coord`; a native chunk whose manifest entry
    /// states more than `max_len` bytes is refused unread (a virtual one by the range reader).
    async fn lookup(
        &self,
        path: &Path,
        coord: &[u64],
        max_len: u64,
    ) -> std::result::Result<Lookup, String> {
        let indices = coord
            .iter()
            .map(|&c| {
                u32::try_from(c).map_err(|_| format!("chunk index {c} beyond icechunk's range"))
            })
            .collect::<std::result::Result<Vec<u32>, String>>()?;
        let indices = ChunkIndices(indices);
        let payload = self
            .session
            .get_chunk_ref(path, &indices)
            .await
            .map_err(|e| e.kind.to_string())?;
        Ok(match payload {
            None => Lookup::Ready(ExternalChunk::Known(None)),
            Some(ChunkPayload::Inline(bytes)) => Lookup::Ready(ExternalChunk::Known(Some(bytes))),
            Some(ChunkPayload::Ref(chunk)) if chunk.length > max_len => {
                return Err(zshard_store::Error::TooLarge {
                    location: format!("its chunk object {}", chunk.id),
                    len: chunk.length,
                    at_least: false,
                    max: max_len,
                }
                .to_string())
            }
            Some(ChunkPayload::Ref(_)) => Lookup::Native(indices),
            Some(ChunkPayload::Virtual(reference)) => {
                Lookup::Ready(self.virtual_chunk(coord, reference)?)
            }
            Some(_) => return Err("a kind of chunk reference this zshard cannot read".to_string()),
        })
    }

    /// A virtual chunk's range, once its target matches one of the repository's virtual chunk
    /// containers (zshard's own policy is applied when it is read).
    fn virtual_chunk(
        &self,
        coord: &[u64],
        reference: VirtualChunkRef,
    ) -> std::result::Result<ExternalChunk, String> {
        let url = virtual_target(&self.session, &reference)?;
        Ok(ExternalChunk::Range {
            key: format!("{} ({})", self.chunk_key(coord), url),
            url: target_path(&url).to_string(),
            offset: reference.offset,
            length: reference.length,
        })
    }

    async fn native(
        &self,
        path: &Path,
        indices: &ChunkIndices,
    ) -> std::result::Result<Option<Bytes>, String> {
        let reader = self
            .session
            .get_chunk_reader(path, indices, &ByteRange::ALL)
            .await
            .map_err(|e| e.kind.to_string())?;
        match reader {
            None => Ok(None),
            Some(read) => read.await.map(Some).map_err(|e| e.kind.to_string()),
        }
    }
}

impl ChunkReader for IcechunkReader {
    fn chunk_key(&self, coord: &[u64]) -> String {
        self.encoding.key_under(&self.path, coord)
    }

    fn read_chunks(
        &self,
        coords: &[Vec<u64>],
        max_len: u64,
    ) -> Vec<zshard_core::Result<Option<Bytes>>> {
        let path = match self.array_path() {
            Ok(p) => p,
            Err(e) => return coords.iter().map(|c| Err(self.read_error(c, &e))).collect(),
        };
        // Manifest lookups and native reads of the batch run together.
        let looked: Vec<_> = self.runtime.block_on(async {
            let lookups = join_all(coords.iter().map(|c| self.lookup(&path, c, max_len))).await;
            let path = &path;
            join_all(lookups.into_iter().map(|lookup| async move {
                match lookup {
                    Ok(Lookup::Native(indices)) => {
                        self.native(path, &indices).await.map(ExternalChunk::Known)
                    }
                    Ok(Lookup::Ready(chunk)) => Ok(chunk),
                    Err(e) => Err(e),
                }
            }))
            .await
        });
        // Virtual ranges are read together: nearby ranges of one target coalesce.
        let mut failed = Vec::new();
        let wants = looked
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                r.unwrap_or_else(|e| {
                    failed.push((i, e));
                    ExternalChunk::Known(None)
                })
            })
            .collect();
        let mut out = self.external.read(wants, max_len);
        for (i, e) in failed {
            out[i] = Err(self.read_error(&coords[i], e));
        }
        out
    }

    /// From the snapshot's manifests (no chunk is read): a native chunk by its object's id and
    /// range (a chunk written again gets a new id), a virtual one by its target, range and
    /// checksum, an inline one by its bytes. Every virtual chunk's target is checked as it is
    /// listed, so that a conversion refuses one before reading any chunk.
    fn chunk_versions(&self, grid: &[u64]) -> zshard_core::Result<Option<ChunkVersions>> {
        let path = self.array_path().map_err(|e| self.read_error(&[], e))?;
        self.runtime.block_on(async {
            let mut versions = ChunkVersions::builder(grid);
            let stream = self.session.array_chunk_iterator(&path).await;
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                let info = item.map_err(|e| self.read_error(&[], e.kind.to_string()))?;
                let coord: Vec<u64> = info.coord.0.iter().map(|&c| u64::from(c)).collect();
                self.check_listed(&info.coord, &info.payload)
                    .map_err(|e| self.read_error(&coord, e))?;
                // A kind this zshard cannot read: refused when its chunk is read.
                let Some((version, stored)) = payload_version(&info.payload) else {
                    continue;
                };
                versions.insert_hashed(coord, version);
                versions.add_stored_bytes(stored);
            }
            Ok(Some(versions.build()))
        })
    }

    fn source_version(&self) -> Option<String> {
        Some(self.session.snapshot_id().to_string())
    }

    /// The versions of `known` when this is the snapshot they were listed at (no manifest read);
    /// else, when that snapshot is an ancestor of this one, `known` with the chunks that
    /// Icechunk's diff between the two names looked up (the manifests holding them read); else,
    /// or when the array's shape or metadata changed, listed whole.
    fn chunk_versions_since(
        &self,
        grid: &[u64],
        known: Option<&KnownVersions>,
    ) -> zshard_core::Result<(Option<ChunkVersions>, VersionsFrom)> {
        let listed = |why: Option<String>| -> zshard_core::Result<_> {
            Ok((self.chunk_versions(grid)?, VersionsFrom::Listed { why }))
        };
        // Another shape: chunks beyond a shrink may have gone unnamed by the diff.
        let Some(known) = known.filter(|known| known.versions.grid() == grid) else {
            return listed(None);
        };
        if known.source_version == self.session.snapshot_id().to_string() {
            return Ok((Some(known.versions.clone()), VersionsFrom::Unchanged));
        }
        let diff = match self.diff_since(&known.source_version) {
            Ok(diff) => diff,
            Err(why) => return listed(Some(why)),
        };
        let path = self.array_path().map_err(|e| self.read_error(&[], e))?;
        // An array made again, moved, or whose metadata changed (a resize between the two
        // snapshots drops chunks no diff names): listed whole.
        let remade = !diff.moved_nodes.is_empty()
            || diff.new_arrays.contains(&path)
            || diff.deleted_arrays.contains(&path)
            || diff.updated_arrays.contains(&path);
        if remade {
            return listed(None);
        }
        let changed: Vec<&ChunkIndices> = diff
            .updated_chunks
            .get(&path)
            .map(|chunks| chunks.iter().collect())
            .unwrap_or_default();
        // Looked up one by one: past a quarter of the array, one listing costs less.
        let chunks = grid
            .iter()
            .fold(1u64, |n, &extent| n.saturating_mul(extent));
        if changed.len() as u64 > chunks / 4 + 16 {
            return listed(None);
        }
        let looked = self.runtime.block_on(join_all(
            changed
                .iter()
                .map(|indices| self.session.get_chunk_ref(&path, indices)),
        ));
        let mut changes = Vec::with_capacity(changed.len());
        for (indices, payload) in changed.iter().zip(looked) {
            let coord: Vec<u64> = indices.0.iter().map(|&c| u64::from(c)).collect();
            let payload = payload.map_err(|e| self.read_error(&coord, e.kind.to_string()))?;
            let version = match &payload {
                Some(payload) => {
                    self.check_listed(indices, payload)
                        .map_err(|e| self.read_error(&coord, e))?;
                    payload_version(payload).map(|(version, _)| version)
                }
                None => None,
            };
            changes.push((coord, version));
        }
        let chunks = changes.len() as u64;
        Ok((
            Some(known.versions.clone().with_changes(changes)),
            VersionsFrom::Changed { chunks },
        ))
    }

    fn names_versions(&self) -> bool {
        true
    }
}

/// A chunk's version (see [`ChunkReader::chunk_versions`]) and the bytes it is stored in; `None`
/// for a kind of reference this zshard cannot read.
fn payload_version(payload: &ChunkPayload) -> Option<(u64, u64)> {
    Some(match payload {
        ChunkPayload::Inline(bytes) => (
            zshard_core::stable_hash(bytes) ^ 0x696e_6c69_6e65,
            bytes.len() as u64,
        ),
        ChunkPayload::Ref(chunk) => (
            zshard_core::stable_hash(
                format!("{}\t{}\t{}", chunk.id, chunk.offset, chunk.length).as_bytes(),
            ),
            chunk.length,
        ),
        ChunkPayload::Virtual(reference) => (
            zshard_core::stable_hash(
                format!(
                    "{:?}\t{}\t{}\t{:?}",
                    reference.location, reference.offset, reference.length, reference.checksum
                )
                .as_bytes(),
            ),
            reference.length,
        ),
        _ => return None,
    })
}

/// Reads the inner chunks of the shards zshard committed into a repository (a destination's
/// output read back by an update that copies its unchanged inner chunks, see
/// [`Source::shard_reader`]): per shard, its index (a ranged read), then the span of the inner
/// chunks asked for (one more).
#[derive(Debug)]
struct InnerChunkReader {
    location: String,
    path: String,
    encoding: zshard_core::ChunkKeyEncoding,
    session: Arc<Session>,
    runtime: Arc<IoRuntime>,
    shards: SourceShards,
    inner_shape: Vec<u64>,
}

impl InnerChunkReader {
    fn read_error(&self, shard: &[u64], e: impl std::fmt::Display) -> zshard_core::Error {
        zshard_core::Error::Read {
            key: format!(
                "{}: {}",
                self.location,
                self.encoding.key_under(&self.path, shard)
            ),
            source: e.to_string().into(),
        }
    }

    /// Reads the inner chunks `members` (slot in the batch, index in the shard) of `shard`.
    async fn read_shard(
        &self,
        path: &Path,
        (shard, per_shard): (&[u64], &[u64]),
        members: &[(usize, u64)],
        max_len: u64,
    ) -> std::result::Result<Vec<(usize, Option<Bytes>)>, String> {
        let indices = shard
            .iter()
            .map(|&c| {
                u32::try_from(c).map_err(|_| format!("shard index {c} beyond icechunk's range"))
            })
            .collect::<std::result::Result<Vec<u32>, String>>()?;
        let indices = ChunkIndices(indices);
        let chunks = zshard_core::product(per_shard) as usize;
        let encoding = self.shards.index_encoding;
        let index_len = encoding.byte_len(chunks) as u64;
        let range = match self.shards.index_location {
            IndexLocation::End => ByteRange::Last(index_len),
            IndexLocation::Start => ByteRange::Bounded(0..index_len),
        };
        let read = |range: ByteRange| {
            let indices = &indices;
            async move {
                match self
                    .session
                    .get_chunk_reader(path, indices, &range)
                    .await
                    .map_err(|e| e.kind.to_string())?
                {
                    None => Ok(None),
                    Some(read) => read.await.map(Some).map_err(|e| e.kind.to_string()),
                }
            }
        };
        let Some(index) = read(range).await? else {
            return Ok(members.iter().map(|&(slot, _)| (slot, None)).collect());
        };
        let index = ShardIndex::decode(&index, chunks, encoding).map_err(|e| e.to_string())?;
        let mut wanted = Vec::with_capacity(members.len());
        let mut out = Vec::with_capacity(members.len());
        for &(slot, inner) in members {
            match index.entries().get(inner as usize).copied().flatten() {
                None => out.push((slot, None)),
                Some(at) if at.nbytes > max_len => {
                    return Err(format!(
                        "inner chunk {inner}: its index states {} bytes, more than the {max_len} it can take",
                        at.nbytes
                    ))
                }
                Some(at) => {
                    let end = at
                        .offset
                        .checked_add(at.nbytes)
                        .ok_or_else(|| format!("inner chunk {inner}: its range overflows"))?;
                    wanted.push((slot, at.offset..end));
                }
            }
        }
        let (Some(start), Some(end)) = (
            wanted.iter().map(|(_, r)| r.start).min(),
            wanted.iter().map(|(_, r)| r.end).max(),
        ) else {
            return Ok(out);
        };
        // One read of the span: the inner chunks an update copies are most of the shard.
        let span = read(ByteRange::Bounded(start..end))
            .await?
            .ok_or_else(|| "the shard is gone from the repository".to_string())?;
        for (slot, range) in wanted {
            let (from, to) = ((range.start - start) as usize, (range.end - start) as usize);
            if to > span.len() {
                return Err("the shard is shorter than its index says".to_string());
            }
            out.push((slot, Some(span.slice(from..to))));
        }
        Ok(out)
    }
}

/// A shard's coordinates, its inner chunks per dimension and the chunks of a batch in it: (slot in
/// the batch, index in the shard).
type ShardMembers = (Vec<u64>, Vec<u64>, Vec<(usize, u64)>);

impl ChunkReader for InnerChunkReader {
    fn chunk_key(&self, coord: &[u64]) -> String {
        match self.shards.locate(coord, &self.inner_shape) {
            Some((shard, inner, _)) => format!(
                "{}: {} (inner chunk {inner})",
                self.location,
                self.encoding.key_under(&self.path, &shard)
            ),
            None => format!("{}: {} (inner chunk {coord:?})", self.location, self.path),
        }
    }

    fn read_chunks(
        &self,
        coords: &[Vec<u64>],
        max_len: u64,
    ) -> Vec<zshard_core::Result<Option<Bytes>>> {
        let mut out: Vec<zshard_core::Result<Option<Bytes>>> =
            coords.iter().map(|_| Ok(None)).collect();
        let path = match Path::new(&format!("/{}", self.path)) {
            Ok(p) => p,
            Err(e) => {
                return coords
                    .iter()
                    .map(|c| Err(self.read_error(c, e.to_string())))
                    .collect()
            }
        };
        // Shards in the order first needed, each with its chunks' slots and indexes.
        let mut shards: Vec<ShardMembers> = Vec::new();
        for (slot, coord) in coords.iter().enumerate() {
            let Some((shard, inner, per_shard)) = self.shards.locate(coord, &self.inner_shape)
            else {
                continue;
            };
            match shards.iter_mut().find(|(s, _, _)| *s == shard) {
                Some((_, _, members)) => members.push((slot, inner)),
                None => shards.push((shard, per_shard, vec![(slot, inner)])),
            }
        }
        let read = self.runtime.block_on(join_all(shards.iter().map(
            |(shard, per_shard, members)| {
                self.read_shard(&path, (shard, per_shard), members, max_len)
            },
        )));
        for ((shard, _, members), result) in shards.iter().zip(read) {
            match result {
                Ok(chunks) => {
                    for (slot, bytes) in chunks {
                        out[slot] = Ok(bytes);
                    }
                }
                Err(e) => {
                    for &(slot, _) in members {
                        out[slot] = Err(self.read_error(shard, &e));
                    }
                }
            }
        }
        out
    }
}
