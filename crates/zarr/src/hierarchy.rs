//! Finding every group and array below a location, from consolidated metadata when present and by
//! listing group folders otherwise (array folders, which hold the chunks, are never listed).

use serde_json::{Map, Value};
use zshard_core::{Node, NodeKind};
use zshard_store::Store;

use crate::error::{metadata, Error, Result};
use crate::{draft, v2, v3};

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}/{child}")
    }
}

fn key(path: &str, document: &str) -> String {
    join(path, document)
}

/// Children of a group whose metadata documents are read together (with up to the store's
/// `--max-requests` in flight side by side): a walk of a remote hierarchy without consolidated metadata
/// pays a round trip per that many documents instead of one per document (1,000 arrays at 20 ms: 20 s
/// one by one), while holding one batch's documents for each level of groups being walked.
const CHILDREN_READ_TOGETHER: usize = 256;

/// The documents a Zarr v2 node may have, read together for each child of a group (the `.zgroup` of an
/// array too: one more request each, side by side, rather than a second round trip for groups).
const V2_DOCUMENTS: [&str; 3] = [".zarray", ".zgroup", ".zattrs"];

/// An array below the root left out of a hierarchy because zshard does not read its data type or
/// codecs ([`open_hierarchy_skipping`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedArray {
    /// The array's path in the hierarchy.
    pub path: String,
    /// Why it is not read (the metadata document and what it holds that is unsupported).
    pub reason: String,
}

/// Every node at and below the store's location, parents before children, sorted by path.
pub fn open_hierarchy(store: &Store) -> Result<Vec<Node>> {
    open_hierarchy_within(store, None)
}

/// [`open_hierarchy`], refusing a `zarr.json` that would take more than half of `memory_limit`
/// parsed before it is parsed (see [`check_parse_cost`](crate::v3::check_parse_cost)).
pub fn open_hierarchy_within(store: &Store, memory_limit: Option<u64>) -> Result<Vec<Node>> {
    let mut walk = Walk {
        memory_limit,
        ..Walk::default()
    };
    walk.open(store)?;
    Ok(walk.nodes)
}

/// As [`open_hierarchy`], but an array below the root whose metadata is valid and names a data type
/// or codec zshard does not read is left out and returned with the reason, instead of failing.
pub fn open_hierarchy_skipping(store: &Store) -> Result<(Vec<Node>, Vec<SkippedArray>)> {
    open_hierarchy_skipping_within(store, None)
}

/// [`open_hierarchy_skipping`] within `memory_limit` (see [`open_hierarchy_within`]).
pub fn open_hierarchy_skipping_within(
    store: &Store,
    memory_limit: Option<u64>,
) -> Result<(Vec<Node>, Vec<SkippedArray>)> {
    let mut walk = Walk {
        skip_unsupported: true,
        memory_limit,
        ..Walk::default()
    };
    walk.open(store)?;
    walk.skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((walk.nodes, walk.skipped))
}

/// The nodes found so far, and the arrays left out.
#[derive(Default)]
struct Walk {
    nodes: Vec<Node>,
    skipped: Vec<SkippedArray>,
    skip_unsupported: bool,
    /// Documents that would not fit it parsed are refused unparsed (`None`: no limit).
    memory_limit: Option<u64>,
}

impl Walk {
    /// Adds the node at `path` as parsed, or records it as a skipped array when its metadata is
    /// unsupported and skipping is on.
    fn node(&mut self, path: String, parsed: Result<NodeKind>) -> Result<()> {
        match parsed {
            Ok(kind) => self.nodes.push(Node { path, kind }),
            Err(error) => match error.unsupported_reason() {
                Some(_) if self.skip_unsupported => self.skipped.push(SkippedArray {
                    path,
                    reason: error.to_string(),
                }),
                _ => return Err(error),
            },
        }
        Ok(())
    }

    /// Reads the root's metadata and everything below it.
    fn open(&mut self, store: &Store) -> Result<()> {
        if let Some(doc) = store.get("zarr.json")? {
            if let Some(limit) = self.memory_limit {
                v3::check_parse_cost(&store.url("zarr.json"), &doc, limit)?;
            }
            if draft::is_draft_entry_point(&doc) {
                self.nodes = draft::open_hierarchy(store, &doc)?;
                return Ok(());
            }
            let root = v3::parse_node(&store.url("zarr.json"), &doc)?;
            let is_group = matches!(root.kind, NodeKind::Group { .. });
            self.nodes.push(Node {
                path: String::new(),
                kind: root.kind,
            });
            if is_group {
                match root.consolidated {
                    Some(children) => self.v3_consolidated(store, children)?,
                    None => self.walk_v3(store, "")?,
                }
            }
        } else if let Some(doc) = store.get(".zarray")? {
            let attrs = store.get(".zattrs")?;
            self.nodes.push(Node {
                path: String::new(),
                kind: NodeKind::Array(Box::new(v2::parse_array(
                    &store.url(".zarray"),
                    &doc,
                    attrs.as_deref(),
                )?)),
            });
        } else if store.get(".zgroup")?.is_some() {
            match store.get(".zmetadata")? {
                Some(doc) => self.v2_consolidated(store, &doc)?,
                None => {
                    let attributes = match store.get(".zattrs")? {
                        Some(a) => v2::parse_attributes(&store.url(".zattrs"), &a)?,
                        None => Map::new(),
                    };
                    self.nodes.push(Node {
                        path: String::new(),
                        kind: NodeKind::Group { attributes },
                    });
                    self.walk_v2(store, "")?;
                }
            }
        } else if store.location().is_zip() && !store.is_zip() {
            return Err(Error::ZipMissing {
                location: store.location().to_string(),
            });
        } else {
            return Err(Error::NotZarr {
                location: store.url(""),
            });
        }
        self.nodes.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(())
    }

    fn walk_v3(&mut self, store: &Store, path: &str) -> Result<()> {
        let children = store.list_children(path)?;
        for batch in children.chunks(CHILDREN_READ_TOGETHER) {
            let paths: Vec<String> = batch.iter().map(|child| join(path, child)).collect();
            let keys: Vec<String> = paths.iter().map(|p| key(p, "zarr.json")).collect();
            for ((child_path, doc_key), doc) in
                paths.into_iter().zip(&keys).zip(store.get_many(&keys))
            {
                let Some(doc) = doc? else {
                    continue;
                };
                let node = v3::parse_node_within(&store.url(doc_key), &doc, self.memory_limit)
                    .map(|n| n.kind);
                let is_group = matches!(node, Ok(NodeKind::Group { .. }));
                self.node(child_path.clone(), node)?;
                if is_group {
                    self.walk_v3(store, &child_path)?;
                }
            }
        }
        Ok(())
    }

    fn v3_consolidated(&mut self, store: &Store, children: Map<String, Value>) -> Result<()> {
        for (path, doc) in children {
            let node = v3::parse_value(&store.url(&key(&path, "zarr.json")), doc).map(|n| n.kind);
            self.node(path, node)?;
        }
        Ok(())
    }

    fn walk_v2(&mut self, store: &Store, path: &str) -> Result<()> {
        let children = store.list_children(path)?;
        for batch in children.chunks(CHILDREN_READ_TOGETHER) {
            let paths: Vec<String> = batch.iter().map(|child| join(path, child)).collect();
            let keys: Vec<String> = paths
                .iter()
                .flat_map(|p| V2_DOCUMENTS.map(|document| key(p, document)))
                .collect();
            let docs = store.get_many(&keys);
            // One result for each key, in order.
            debug_assert_eq!(docs.len(), keys.len());
            let mut docs = docs.into_iter();
            for child_path in paths {
                // In V2_DOCUMENTS' order.
                let (Some(array), Some(group), Some(attrs)) =
                    (docs.next(), docs.next(), docs.next())
                else {
                    break;
                };
                let attrs_key = key(&child_path, ".zattrs");
                if let Some(doc) = array? {
                    let attrs = attrs?;
                    let meta = v2::parse_array(
                        &store.url(&key(&child_path, ".zarray")),
                        &doc,
                        attrs.as_deref(),
                    );
                    self.node(child_path, meta.map(|m| NodeKind::Array(Box::new(m))))?;
                } else if group?.is_some() {
                    let attributes = match attrs? {
                        Some(a) => v2::parse_attributes(&store.url(&attrs_key), &a)?,
                        None => Map::new(),
                    };
                    self.nodes.push(Node {
                        path: child_path.clone(),
                        kind: NodeKind::Group { attributes },
                    });
                    self.walk_v2(store, &child_path)?;
                }
            }
        }
        Ok(())
    }

    fn v2_consolidated(&mut self, store: &Store, doc: &[u8]) -> Result<()> {
        let key = store.url(".zmetadata");
        let value: Value = serde_json::from_slice(doc).map_err(|source| Error::Json {
            key: key.clone(),
            source,
        })?;
        let documents = value
            .get("metadata")
            .and_then(Value::as_object)
            .ok_or_else(|| metadata(&key, "missing metadata object"))?;
        let attributes_of = |path: &str| -> Map<String, Value> {
            documents
                .get(&join(path, ".zattrs"))
                .and_then(Value::as_object)
                .cloned()
                .unwrap_or_default()
        };
        for (name, doc) in documents {
            let (path, file) = match name.rsplit_once('/') {
                Some((p, f)) => (p, f),
                None => ("", name.as_str()),
            };
            let kind = match file {
                ".zgroup" => Ok(NodeKind::Group {
                    attributes: attributes_of(path),
                }),
                ".zarray" => v2::array_from_value(
                    &format!("{key}[{name}]"),
                    doc.clone(),
                    attributes_of(path),
                )
                .map(|meta| NodeKind::Array(Box::new(meta))),
                _ => continue,
            };
            self.node(path.to_string(), kind)?;
        }
        Ok(())
    }
}
