//! Opening a reference set: recognising its layout, reading (and decompressing) a JSON reference
//! file or a Parquet folder's `.zmetadata`, the security policy (root and allowed prefixes), the
//! hierarchy, and checking every target of a JSON set before anything is read.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use zshard_core::{ArrayMeta, NodeKind};
use zshard_store::{IoRuntime, Location, Store};

use super::fetch::Shared;
use super::{Format, Layout, Options, ReferenceSet};
use crate::error::{format, Error, Result};
use crate::refs::{chunk_grid, grid_len, JsonRefs, Kind};
use crate::target::{self, Policy, Root};
use crate::{lenient, meta};

/// Whether `location` names a JSON reference file by its name.
pub fn is_json_name(location: &str) -> bool {
    let lower = location.trim_end_matches('/').to_ascii_lowercase();
    [".json", ".json.zst", ".json.zstd", ".json.gz"]
        .iter()
        .any(|ext| lower.ends_with(ext))
}

/// `location` parsed by the store's rules (a path, a `file://` URL in any case, or a remote URL);
/// the error names it.
fn parse_location(location: &str) -> Result<Location> {
    Location::parse(location).map_err(|e| format(location, target::location_error(e)))
}

/// Finds out whether `location` is a reference set: a JSON file (by name, or any local regular file),
/// or a folder whose `.zmetadata` has a `record_size` (the Parquet layout). `None` otherwise.
pub fn detect(location: &str, runtime: &Arc<IoRuntime>) -> Result<Option<Format>> {
    if is_json_name(location) {
        return Ok(Some(Format::Json));
    }
    let zmetadata = if let Some(path) = parse_location(location)?.local_path() {
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
    Ok(zmetadata
        .filter(|bytes| is_parquet_metadata(bytes))
        .map(|_| Format::Parquet))
}

/// Whether a folder's `.zmetadata` (its bytes) is that of a Parquet reference set (it has
/// `record_size` and `metadata`), for a caller that has read it already.
pub fn is_parquet_metadata(zmetadata: &[u8]) -> bool {
    serde_json::from_slice::<Value>(&lenient::sanitize(zmetadata))
        .is_ok_and(|v| v.get("record_size").is_some() && v.get("metadata").is_some())
}

/// The security policy of targets named by an input whose default root is `default_root` (a local
/// folder, made canonical, or a URL).
pub(super) fn policy_for(default_root: &str, options: &Options) -> Result<Policy> {
    let root = match parse_location(default_root)?.local_path() {
        Some(path) => Root::Local(std::fs::canonicalize(path).map_err(|source| Error::Io {
            file: path.display().to_string(),
            source,
        })?),
        None => Root::Remote(default_root.trim_end_matches('/').to_string()),
    };
    policy(root, options)
}

/// The security policy: root and allowed prefixes made absolute (local ones canonical).
fn policy(default_root: Root, options: &Options) -> Result<Policy> {
    let root = match options.ref_root.as_deref() {
        None => default_root,
        Some(r) => match parse_location(r)?.local_path() {
            Some(path) => Root::Local(std::fs::canonicalize(path).map_err(|source| Error::Io {
                file: path.display().to_string(),
                source,
            })?),
            None => Root::Remote(r.trim_end_matches('/').to_string()),
        },
    };
    let allow = options
        .allow_prefixes
        .iter()
        .map(|p| {
            if target::is_url(p) {
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

    fn open_json(
        location: &str,
        options: &Options,
        runtime: Arc<IoRuntime>,
    ) -> Result<ReferenceSet> {
        let display = location.to_string();
        let (mut refs, root) = if let Some(path) = parse_location(location)?.local_path() {
            let real = std::fs::canonicalize(path).map_err(|source| Error::Io {
                file: display.clone(),
                source,
            })?;
            let parsed = match JsonRefs::parse(
                &display,
                open_local_reader(&real, &display)?,
                options.memory_limit,
            ) {
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
                    JsonRefs::parse_lenient(&display, &bytes, options.memory_limit)?
                }
                other => other?,
            };
            let folder = real.parent().map(Path::to_path_buf).unwrap_or_default();
            (parsed, Root::Local(folder))
        } else {
            let (parent, name) = parse_location(location)?.split_last();
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
                JsonRefs::parse_lenient(&display, &bytes, options.memory_limit)?,
                Root::Remote(parent),
            )
        };
        let shared = Arc::new(Shared::new(
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
        let (nodes, skipped) =
            meta::nodes_skipping(&display, &documents, options.skip_unsupported)?;
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
            skipped,
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
        let local = parse_location(location)?
            .local_path()
            .map(Path::to_path_buf);
        let real_root = match &local {
            Some(path) => Some(std::fs::canonicalize(path).map_err(|source| Error::Io {
                file: display.clone(),
                source,
            })?),
            None => None,
        };
        if let (Some(real_root), Some(path)) = (&real_root, store.local_path(".zmetadata")) {
            super::contained(&path, real_root, &zkey)?;
        }
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
            .map(|(k, v)| (k.clone(), meta::document_bytes(v)))
            .collect();
        let (nodes, skipped) = meta::nodes_skipping(&zkey, &documents, options.skip_unsupported)?;
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
            let mut present = std::collections::HashSet::new();
            for key in keys {
                let (parent, name) = key.rsplit_once('/').unwrap_or(("", key.as_str()));
                if parent != node.path {
                    continue;
                }
                let number = name
                    .strip_prefix("refs.")
                    .and_then(|n| n.strip_suffix(".parq"))
                    .and_then(|n| n.parse::<u64>().ok());
                present.extend(number);
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
            if options.strict_refs {
                if let Some(n) = (0..files).find(|n| !present.contains(n)) {
                    let key = meta_key(&node.path, &format!("refs.{n}.parq"));
                    return Err(format(store.url(&key), missing_record(&node.path)));
                }
            }
        }
        let root = if let Some(real) = &real_root {
            Root::Local(real.parent().map(Path::to_path_buf).unwrap_or_default())
        } else {
            Root::Remote(parse_location(&display)?.split_last().0)
        };
        let shared = Arc::new(Shared::new(
            display,
            runtime,
            policy(root, options)?,
            options,
        ));
        Ok(ReferenceSet {
            shared,
            layout: Layout::Parquet {
                store: Box::new(store),
                record_size,
                real_root,
            },
            nodes,
            skipped,
        })
    }
}

/// The key of `name` in the folder of the node at `path`.
fn meta_key(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}/{name}")
    }
}

/// Why a missing record file is refused under `strict_refs`.
pub(crate) fn missing_record(array: &str) -> String {
    let array = if array.is_empty() { "/" } else { array };
    format!(
        "is missing ({}: every record file of array {array} must exist)",
        zshard_core::Setting::StrictRefs
    )
}

#[cfg(test)]
mod tests {
    use super::super::tests::{parquet_set, runtime};
    use super::*;

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
