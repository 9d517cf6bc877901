//! An N5 container in a store: its groups and datasets, and a chunk reader per dataset.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use zshard_core::{ArrayMeta, ChunkKeyEncoding, ChunkReader, ChunkVersions, Node, NodeKind};
use zshard_store::{Store, Visit};

use crate::block::BlockDecoder;
use crate::error::{Error, Result};
use crate::meta::{is_n5_root, parse_attributes, Attributes};

/// The metadata document of every N5 group and dataset.
pub const ATTRIBUTES: &str = "attributes.json";

/// Whether `store`'s location holds an N5 container: an `attributes.json` with the `n5` version or
/// a dataset's keys (one read; a missing or unreadable document is "no").
pub fn detect(store: &Store) -> Result<bool> {
    Ok(store
        .get(ATTRIBUTES)?
        .and_then(|doc| serde_json::from_slice(&doc).ok())
        .is_some_and(|doc| is_n5_root(&doc)))
}

/// An opened N5 container.
#[derive(Debug)]
pub struct Container {
    store: Store,
    /// The block decoders of the datasets [`Container::nodes`] found, by path.
    decoders: Mutex<HashMap<String, Arc<BlockDecoder>>>,
}

impl Container {
    /// Opens the container at `store`'s location (its root `attributes.json` must say N5).
    pub fn open(store: Store) -> Result<Container> {
        if !detect(&store)? {
            return Err(Error::NotN5 {
                location: store.url(""),
            });
        }
        Ok(Container {
            store,
            decoders: Mutex::new(HashMap::new()),
        })
    }

    /// Whether the container is read over the network.
    pub fn is_remote(&self) -> bool {
        self.store.location().is_remote()
    }

    /// The container's location, for messages.
    pub fn url(&self) -> String {
        self.store.url("")
    }

    /// Every group and dataset, parents before children, sorted by path. Every folder is a group
    /// (N5 needs no `attributes.json` for one), but a folder without `attributes.json` is listed
    /// only when a dataset lies below it; a dataset's folder is not walked (it holds blocks).
    pub fn nodes(&self) -> Result<Vec<Node>> {
        let mut nodes = Vec::new();
        self.walk("", &mut nodes)?;
        if nodes.is_empty() {
            // The root's attributes.json was read when opening; an empty container is a group.
            nodes.push(group(""));
        }
        nodes.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(nodes)
    }

    /// Adds the node at `path` and those below it; returns whether anything was added.
    fn walk(&self, path: &str, nodes: &mut Vec<Node>) -> Result<bool> {
        let key = join(path, ATTRIBUTES);
        let attributes = match self.store.get(&key)? {
            Some(doc) => Some(parse_attributes(&self.store.url(&key), &doc)?),
            None => None,
        };
        let group_attributes = match attributes {
            Some(Attributes::Dataset(dataset)) => {
                let decoder = BlockDecoder::new(&self.store.url(&key), &dataset)?;
                self.decoders
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(path.to_string(), Arc::new(decoder));
                nodes.push(Node {
                    path: path.to_string(),
                    kind: NodeKind::Array(Box::new(dataset.array_meta())),
                });
                return Ok(true);
            }
            Some(Attributes::Group(attributes)) => Some(attributes),
            None => None,
        };
        let at = nodes.len();
        let mut below = false;
        for child in self.store.list_children(path)? {
            below |= self.walk(&join(path, &child), nodes)?;
        }
        if group_attributes.is_some() || below {
            let mut node = group(path);
            node.kind = NodeKind::Group {
                attributes: group_attributes.unwrap_or_default(),
            };
            nodes.insert(at, node);
            return Ok(true);
        }
        Ok(false)
    }

    /// The reader of the blocks of the dataset at `path` (described by `meta`).
    pub fn reader(&self, path: &str, meta: &ArrayMeta) -> Arc<dyn ChunkReader> {
        let known = self
            .decoders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(path)
            .cloned();
        let decoder = OnceLock::new();
        if let Some(known) = known {
            let _ = decoder.set(known);
        }
        Arc::new(N5ChunkReader {
            store: self.store.child(path),
            encoding: meta.chunk_key_encoding,
            decoder,
        })
    }
}

fn group(path: &str) -> Node {
    Node {
        path: path.to_string(),
        kind: NodeKind::Group {
            attributes: Default::default(),
        },
    }
}

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}/{child}")
    }
}

/// Reads the blocks of one dataset by grid position and decodes them into full chunks (see
/// [`BlockDecoder::decode`]); a missing block is a missing chunk (0s).
#[derive(Debug)]
struct N5ChunkReader {
    store: Store,
    encoding: ChunkKeyEncoding,
    /// Set by [`Container::nodes`]; otherwise read from the dataset's `attributes.json` when first
    /// needed.
    decoder: OnceLock<Arc<BlockDecoder>>,
}

impl N5ChunkReader {
    fn decoder(&self) -> Result<Arc<BlockDecoder>> {
        if let Some(decoder) = self.decoder.get() {
            return Ok(Arc::clone(decoder));
        }
        let url = self.store.url(ATTRIBUTES);
        let doc = self.store.get(ATTRIBUTES)?.ok_or_else(|| Error::Metadata {
            key: url.clone(),
            reason: "missing".into(),
        })?;
        let Attributes::Dataset(dataset) = parse_attributes(&url, &doc)? else {
            return Err(Error::Metadata {
                key: url,
                reason: "not a dataset".into(),
            });
        };
        let decoder = Arc::new(BlockDecoder::new(&url, &dataset)?);
        Ok(Arc::clone(self.decoder.get_or_init(|| decoder)))
    }

    /// The core error for a failure on the block at `key`. The pipeline names the array and the
    /// block already, so a malformed block is a codec error of "n5" without the key again.
    fn read_error(&self, key: &str, source: Error) -> zshard_core::Error {
        match source {
            Error::Block { reason, .. } => zshard_core::Error::Codec {
                codec: "n5".into(),
                reason,
            },
            Error::Decompress {
                compression,
                source,
                ..
            } => zshard_core::Error::CodecLibrary {
                codec: format!("n5 {compression}"),
                source,
            },
            other => zshard_core::Error::Read {
                key: self.store.url(key),
                source: Box::new(other),
            },
        }
    }
}

impl ChunkReader for N5ChunkReader {
    fn chunk_key(&self, coord: &[u64]) -> String {
        self.store.url(&self.encoding.key(coord))
    }

    /// From one listing of the dataset's folder, as for a Zarr array: a local block file's inode,
    /// modification time and size, an object's ETag.
    fn chunk_versions(&self, grid: &[u64]) -> zshard_core::Result<Option<ChunkVersions>> {
        let splits = match self.store.location().is_remote() {
            true => self.encoding.listing_splits(grid),
            false => Vec::new(),
        };
        let folder = self.encoding.chunk_folder();
        // Page by page into the table, as for a Zarr array: the listing is never held whole.
        let mut versions = ChunkVersions::builder(grid);
        let encoding = self.encoding;
        self.store
            .visit_objects_split(folder, &splits, &mut |visit| match visit {
                Visit::Object(o) => versions.insert_listed(encoding, &o.key, &o.version, o.size),
                Visit::StartOver => versions = ChunkVersions::builder(grid),
            })
            .map_err(|e| self.read_error(folder, Error::from(e)))?;
        Ok(Some(versions.build()))
    }

    fn names_versions(&self) -> bool {
        true
    }

    /// `max_len` bounds the decoded block this reader returns; the stored block, which holds N5's
    /// header and compression, is bounded by [`BlockDecoder::max_block_len`] instead (unless
    /// `max_len` is `u64::MAX`: no bound).
    fn read_chunks(
        &self,
        coords: &[Vec<u64>],
        max_len: u64,
    ) -> Vec<zshard_core::Result<Option<Bytes>>> {
        let keys: Vec<String> = coords.iter().map(|c| self.encoding.key(c)).collect();
        let decoder = match self.decoder() {
            Ok(decoder) => decoder,
            Err(e) => {
                let reason = e.to_string();
                return keys
                    .iter()
                    .map(|key| {
                        Err(self.read_error(
                            key,
                            Error::Metadata {
                                key: self.store.url(ATTRIBUTES),
                                reason: reason.clone(),
                            },
                        ))
                    })
                    .collect();
            }
        };
        let max_block = match max_len {
            u64::MAX => u64::MAX,
            _ => decoder.max_block_len(),
        };
        self.store
            .get_many_bounded(&keys, max_block)
            .into_iter()
            .zip(&keys)
            .map(|(result, key)| match result {
                Ok(None) => Ok(None),
                Ok(Some(block)) => decoder
                    .decode(&self.store.url(key), &block)
                    .map(|full| Some(Bytes::from(full)))
                    .map_err(|e| self.read_error(key, e)),
                Err(e) => Err(self.read_error(key, Error::from(e))),
            })
            .collect()
    }
}
