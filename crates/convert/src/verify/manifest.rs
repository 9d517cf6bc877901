//! The checksum manifest: for every shard a conversion writes, its size, the crc32c of the stored
//! object and the crc32c of each inner chunk's decoded values. Recorded beside the `done` records
//! (see `state.rs`), merged into `.zshard/manifest.tsv` when the conversion finishes with
//! `--keep-manifest`, and checked by `zshard verify --manifest DST` without reading the source: a
//! shard missing, of another size (truncated), with other bytes (a corrupted byte, the bytes of
//! another shard), and objects at shard keys that the manifest does not name are each reported.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use zshard_core::{ChunkRepr, NodeKind, ShardReader};
use zshard_store::{IoRuntime, Location, Store, StoreOptions};
use zshard_zarr::open_hierarchy;

use crate::error::{Error, Result};
use crate::run::state::{in_dir, join, MANIFEST, MANIFEST_DIR};
use crate::verify::{output_array, Mismatches, Verified};

/// How a manifest hashes inner chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkHashes {
    /// The crc32c of each inner chunk's decoded values (`d`).
    Decoded,
    /// The crc32c of each inner chunk's stored bytes, for an array whose source chunks were copied
    /// through undecoded (`e`).
    Encoded,
    /// Not a shard: a metadata document the conversion wrote (`m`, no chunk hashes), recorded
    /// under its key with [`DOCUMENT`] for a coordinate.
    Document,
}

/// The coordinate text of a manifest line that records a metadata document (no shard has it).
const DOCUMENT: &str = "-";

/// Records in `manifest` the document at `key` as written: `size` bytes of crc32c `crc`.
pub(crate) fn add_document(manifest: &mut Manifest, key: &str, size: u64, crc: u32) {
    let entry = Entry {
        size,
        crc32c: crc,
        kind: ChunkHashes::Document,
        chunks: Vec::new(),
    };
    manifest.insert((key.to_string(), DOCUMENT.to_string()), entry);
}

/// What the manifest records of one written shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The object's size in bytes.
    pub(crate) size: u64,
    /// The crc32c of the object's bytes.
    pub(crate) crc32c: u32,
    /// What `chunks` hash.
    pub(crate) kind: ChunkHashes,
    /// Per inner chunk (C order), its hash; `None` for an empty chunk.
    pub(crate) chunks: Vec<Option<u32>>,
}

impl Entry {
    /// Appends the manifest line of this shard (array `path`, coordinate `coord` as `i,j,...`).
    pub(crate) fn write_line(&self, path: &str, coord: &str, out: &mut String) {
        use std::fmt::Write;
        let kind = match self.kind {
            ChunkHashes::Decoded => 'd',
            ChunkHashes::Encoded => 'e',
            ChunkHashes::Document => 'm',
        };
        // Writing into a String cannot fail.
        let _ = write!(
            out,
            "{path}\t{coord}\t{}\t{:08x}\t{kind}:",
            self.size, self.crc32c
        );
        for (i, hash) in self.chunks.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            match hash {
                Some(hash) => {
                    let _ = write!(out, "{hash:08x}");
                }
                None => out.push('-'),
            }
        }
        out.push('\n');
    }

    /// A manifest line: array path, coordinate text and the entry; `None` for a line that is not
    /// one.
    fn parse_line(line: &str) -> Option<(String, String, Entry)> {
        let mut fields = line.split('\t');
        let path = fields.next()?;
        let coord = fields.next()?;
        let size = fields.next()?.parse().ok()?;
        let crc32c = u32::from_str_radix(fields.next()?, 16).ok()?;
        let (kind, hashes) = fields.next()?.split_once(':')?;
        let kind = match kind {
            "d" => ChunkHashes::Decoded,
            "e" => ChunkHashes::Encoded,
            "m" => ChunkHashes::Document,
            _ => return None,
        };
        let chunks = if hashes.is_empty() {
            Vec::new()
        } else {
            hashes
                .split(',')
                .map(|h| match h {
                    "-" => Some(None),
                    h => u32::from_str_radix(h, 16).ok().map(Some),
                })
                .collect::<Option<Vec<_>>>()?
        };
        Some((
            path.to_string(),
            coord.to_string(),
            Entry {
                size,
                crc32c,
                kind,
                chunks,
            },
        ))
    }
}

/// Manifest entries by (array path, coordinate text).
pub(crate) type Manifest = BTreeMap<(String, String), Entry>;

/// The order of a per-worker manifest file `<worker>-<run>-<seq>.txt`: by run (its start, in
/// nanoseconds), then sequence number; files that are not named so come first.
fn file_order(key: &str) -> (u128, u64) {
    let name = key.rsplit('/').next().unwrap_or(key);
    let stem = name.strip_suffix(".txt").unwrap_or(name);
    let mut parts = stem.rsplitn(3, '-');
    let seq = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let run = parts.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    (run, seq)
}

/// Merges manifest files (key, contents): a shard recorded more than once (written again by a
/// later run) keeps its latest record.
pub(crate) fn merge(files: &[(String, Bytes)]) -> Manifest {
    let mut ordered: Vec<&(String, Bytes)> = files.iter().collect();
    ordered.sort_by_key(|(key, _)| file_order(key));
    let mut manifest = Manifest::new();
    for (key, bytes) in ordered {
        // A damaged file is left out: its shards are not vouched for (see `sealed.rs`).
        match crate::run::sealed::unseal(bytes) {
            Some(records) => parse_into(&records, &mut manifest),
            None => tracing::warn!(
                "{key}: the manifest record's checksum does not match; its records are left out"
            ),
        }
    }
    manifest
}

fn parse_into(bytes: &[u8], manifest: &mut Manifest) {
    for line in String::from_utf8_lossy(bytes).lines() {
        if let Some((path, coord, entry)) = Entry::parse_line(line) {
            manifest.insert((path, coord), entry);
        }
    }
}

/// The text of a merged manifest.
pub(crate) fn to_text(manifest: &Manifest) -> Bytes {
    let mut text = String::new();
    for ((path, coord), entry) in manifest {
        entry.write_line(path, coord, &mut text);
    }
    Bytes::from(text)
}

/// The per-worker manifest files under the destination's state, read (one listing, then the files
/// side by side), with `pending` (files about to be written) over them.
pub(crate) fn read_records(
    dst: &Store,
    pending: &[(String, Bytes)],
) -> Result<Vec<(String, Bytes)>> {
    let keys: Vec<String> = dst
        .list_keys(MANIFEST_DIR)?
        .into_iter()
        .filter(|key| !pending.iter().any(|(k, _)| k == key))
        .collect();
    let mut files = Vec::new();
    for (key, read) in keys.iter().zip(dst.get_many(&keys)) {
        if let Some(bytes) = read? {
            files.push((key.clone(), bytes));
        }
    }
    files.extend(
        pending
            .iter()
            .filter(|(key, _)| in_dir(key, MANIFEST_DIR))
            .cloned(),
    );
    Ok(files)
}

/// `zshard verify --manifest DST`: the output checked against the manifest its conversion kept,
/// without the source.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ManifestVerification {
    /// The sharded Zarr v3 output.
    pub destination: String,
    /// How storage is reached.
    pub store_options: StoreOptions,
    /// Shards read side by side.
    pub io_threads: Option<usize>,
}

impl ManifestVerification {
    /// A check of `destination` against its manifest.
    pub fn new(destination: impl Into<String>) -> Self {
        ManifestVerification {
            destination: destination.into(),
            store_options: StoreOptions::default(),
            io_threads: None,
        }
    }

    /// Checks every shard the manifest names (size from the listing, then the crc32c of its bytes;
    /// for one that differs, which inner chunks do) and every object at the output arrays' chunk
    /// keys that it does not name. An error means the check could not be made (no manifest, no
    /// output metadata); differences are in the result.
    pub fn run(&self) -> Result<Verified> {
        let location = Location::parse(&self.destination)?;
        let runtime = IoRuntime::with_options(2, self.store_options.clone())?;
        let dst = Store::open_location(&location, runtime, false)?;
        let (manifest, kept) = match dst.get(MANIFEST)? {
            Some(bytes) => {
                let mut manifest = Manifest::new();
                parse_into(&bytes, &mut manifest);
                (manifest, true)
            }
            // An unfinished conversion: its per-worker records.
            None => (merge(&read_records(&dst, &[])?), false),
        };
        // A kept manifest may name no shard: an output of the fill value alone.
        if manifest.is_empty() && !kept {
            return Err(Error::Destination {
                reason: format!(
                    "{} holds no manifest ({} nor {MANIFEST_DIR}/); convert with {} to keep one",
                    dst.url(""),
                    MANIFEST,
                    zshard_core::Setting::KeepManifest
                ),
            });
        }
        let nodes = open_hierarchy(&dst)?;
        let mut mismatches = Mismatches::default();
        let mut arrays = 0;
        let mut checked = 0u64;
        // Every shard of the manifest, by key: (array path, coordinate, entry).
        let mut by_key: HashMap<String, (&str, &str, &Entry)> = HashMap::new();
        let mut documents = Vec::new();
        for ((path, coord), entry) in &manifest {
            if entry.kind == ChunkHashes::Document {
                documents.push((path.clone(), entry));
                continue;
            }
            let key = join(path, &shard_key(coord));
            by_key.insert(key, (path, coord, entry));
        }
        // The metadata documents as written (manifests of earlier versions name none): a changed
        // `fill_value` or attribute changes what readers see as much as a changed shard.
        let keys: Vec<String> = documents.iter().map(|(key, _)| key.clone()).collect();
        for ((key, entry), read) in documents.iter().zip(dst.get_many(&keys)) {
            match read? {
                None => mismatches.push(format!(
                    "{}: missing: the manifest records a metadata document of {} bytes",
                    dst.url(key),
                    entry.size
                )),
                Some(bytes)
                    if (bytes.len() as u64, crc32c::crc32c(&bytes))
                        != (entry.size, entry.crc32c) =>
                {
                    mismatches.push(format!(
                        "{}: the metadata document differs from the one the conversion wrote",
                        dst.url(key)
                    ));
                }
                Some(_) => {}
            }
        }
        // The keys whose bytes have a crc32c, to name a shard that holds another's bytes.
        let mut by_crc: HashMap<(u64, u32), Vec<&str>> = HashMap::new();
        for (key, (_, _, entry)) in &by_key {
            by_crc
                .entry((entry.size, entry.crc32c))
                .or_default()
                .push(key.as_str());
        }
        let mut listed: HashMap<String, u64> = HashMap::new();
        let mut output_arrays = HashMap::new();
        for node in &nodes {
            let NodeKind::Array(meta) = &node.kind else {
                continue;
            };
            arrays += 1;
            let folder = join(&node.path, "c");
            for (key, size) in dst.list_sizes(&folder)? {
                if !by_key.contains_key(&key) {
                    mismatches.push(format!(
                        "{}: stray object: not in the manifest (written by no run of this conversion)",
                        dst.url(&key)
                    ));
                }
                listed.insert(key, size);
            }
            output_arrays.insert(node.path.clone(), meta.clone());
        }
        for key in dst.staged_keys("")? {
            mismatches.push(format!(
                "{}: stray object: staged file of an interrupted write",
                dst.url(&key)
            ));
        }
        let mut to_read = Vec::new();
        let mut keys: Vec<&String> = by_key.keys().collect();
        keys.sort();
        for key in keys {
            let (path, _, entry) = by_key[key.as_str()];
            if !output_arrays.contains_key(path) {
                mismatches.push(format!(
                    "{}: the manifest names a shard of array {path:?}, which the output does not hold",
                    dst.url(key)
                ));
                continue;
            }
            match listed.get(key.as_str()) {
                None => mismatches.push(format!(
                    "{}: missing: the manifest records a shard of {} bytes",
                    dst.url(key),
                    entry.size
                )),
                Some(_) => to_read.push(key.clone()),
            }
        }
        // Checksums are streamed (a check holds no shard whole); only a shard whose bytes differ
        // is read whole, one at a time, to say which inner chunks do.
        let store = dst
            .clone()
            .with_concurrency(self.io_threads.unwrap_or(8).max(1));
        for (key, read) in to_read.iter().zip(store.checksums(&to_read)) {
            checked += 1;
            let (path, _, entry) = by_key[key.as_str()];
            let Some((size, crc)) = read? else {
                mismatches.push(format!("{}: missing (removed while checked)", dst.url(key)));
                continue;
            };
            if (size, crc) == (entry.size, entry.crc32c) {
                continue;
            }
            let others: Vec<&&str> = by_crc
                .get(&(size, crc))
                .into_iter()
                .flatten()
                .filter(|other| **other != key.as_str())
                .collect();
            if let Some(other) = others.first() {
                mismatches.push(format!(
                    "{}: holds the bytes the manifest records for {} (shards swapped or copied)",
                    dst.url(key),
                    dst.url(other)
                ));
                continue;
            }
            if size != entry.size {
                mismatches.push(format!(
                    "{}: {size} bytes where the manifest records {} (truncated or replaced)",
                    dst.url(key),
                    entry.size
                ));
                continue;
            }
            let Some(bytes) = dst.get(key)? else {
                mismatches.push(format!("{}: missing (removed while checked)", dst.url(key)));
                continue;
            };
            let chunks = differing_chunks(&output_arrays[path], entry, &bytes);
            mismatches.push(format!(
                "{}: its bytes differ from the manifest's checksum ({chunks})",
                dst.url(key)
            ));
        }
        Ok(Verified {
            destination: dst.url(""),
            shards_checked: checked,
            arrays,
            mismatches,
            reference_reads: None,
            skipped_arrays: Vec::new(),
            warnings: Vec::new(),
        })
    }
}

/// The shard key (below its array) of the coordinate text `i,j,...`, as the writer keys shards.
fn shard_key(coord: &str) -> String {
    let parsed: Option<Vec<u64>> = if coord.is_empty() {
        Some(Vec::new())
    } else {
        coord.split(',').map(|c| c.parse().ok()).collect()
    };
    match parsed {
        Some(coord) => zshard_writer::OUTPUT_KEY_ENCODING.key(&coord),
        // Never written so; a key no listing shows, so reported missing.
        None => format!("c/{coord}"),
    }
}

/// Which inner chunks of a shard whose bytes differ from the manifest hold other values, in a few
/// words: decoded (or, copied through, stored) and hashed against the manifest's hashes.
fn differing_chunks(meta: &zshard_core::ArrayMeta, entry: &Entry, bytes: &Bytes) -> String {
    let output = match output_array(meta.clone()) {
        Ok(output) => output,
        Err(e) => return format!("its array's layout is not read: {e}"),
    };
    let reader = match ShardReader::new(
        bytes,
        entry.chunks.len(),
        output.index_location,
        output.index_encoding,
    ) {
        Ok(reader) => reader,
        Err(e) => return format!("its index does not hold: {e}"),
    };
    let repr = ChunkRepr {
        shape: output.inner_shape.clone(),
        data_type: meta.data_type,
        fill_value: meta.fill_value.clone(),
    };
    let mut differing = Vec::new();
    for (i, expected) in entry.chunks.iter().enumerate() {
        let actual = match reader.chunk(i) {
            None => None,
            Some(stored) => match entry.kind {
                // (A document has no inner chunks: never here.)
                ChunkHashes::Encoded | ChunkHashes::Document => Some(crc32c::crc32c(stored)),
                ChunkHashes::Decoded => match output.inner_chain.decode(stored, &repr) {
                    Ok(values) => Some(crc32c::crc32c(&values)),
                    Err(_) => Some(expected.map_or(0, |h| !h)),
                },
            },
        };
        if actual != *expected {
            differing.push(i);
        }
    }
    match differing.as_slice() {
        [] => "every inner chunk decodes to the values the manifest records; the difference is outside them".into(),
        [one] => format!("inner chunk {one} holds other values"),
        many => format!(
            "inner chunks {} hold other values",
            many.iter()
                .take(10)
                .map(usize::to_string)
                .collect::<Vec<_>>()
                .join(", ")
                + if many.len() > 10 { ", ..." } else { "" }
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(size: u64) -> Entry {
        Entry {
            size,
            crc32c: 0xdead_beef,
            kind: ChunkHashes::Decoded,
            chunks: vec![Some(1), None, Some(0xffff_ffff)],
        }
    }

    #[test]
    fn lines_round_trip() {
        let mut text = String::new();
        entry(17).write_line("a/b", "1,2", &mut text);
        assert_eq!(text, "a/b\t1,2\t17\tdeadbeef\td:00000001,-,ffffffff\n");
        assert_eq!(
            Entry::parse_line(text.trim_end()),
            Some(("a/b".into(), "1,2".into(), entry(17)))
        );
        assert_eq!(Entry::parse_line("a\t1\t17"), None);
        assert_eq!(Entry::parse_line("a\t1\t17\tzz\td:"), None);
    }

    #[test]
    fn a_later_record_of_a_shard_wins() {
        let line = |size| {
            let mut text = String::new();
            entry(size).write_line("", "0", &mut text);
            Bytes::from(text)
        };
        // Listed out of order: the run started later wins, then the later batch of a run.
        let files = vec![
            (format!("{MANIFEST_DIR}/w0of1-200-000000.txt"), line(3)),
            (format!("{MANIFEST_DIR}/w0of1-100-000001.txt"), line(2)),
            (format!("{MANIFEST_DIR}/w0of1-100-000000.txt"), line(1)),
        ];
        let merged = merge(&files);
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[&(String::new(), "0".to_string())].size, 3);
        let merged = merge(&files[1..]);
        assert_eq!(merged[&(String::new(), "0".to_string())].size, 2);
    }
}
