//! The checksum manifest: for every shard a conversion writes, its size, the crc32c of the stored
//! object and the crc32c of each inner chunk's decoded values. Recorded beside the `done` records
//! (see `state.rs`), merged into `.zshard/manifest.tsv` when the conversion finishes with
//! `--keep-manifest`, and checked by `zshard verify --manifest DST` (in `zshard-convert`) without
//! reading the source.

use std::collections::BTreeMap;

use bytes::Bytes;
use zshard_store::Store;

use crate::error::Result;
use crate::{in_dir, MANIFEST_DIR};

/// How a manifest hashes inner chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkHashes {
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
pub fn add_document(manifest: &mut Manifest, key: &str, size: u64, crc: u32) {
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
pub struct Entry {
    /// The object's size in bytes.
    pub size: u64,
    /// The crc32c of the object's bytes.
    pub crc32c: u32,
    /// What `chunks` hash.
    pub kind: ChunkHashes,
    /// Per inner chunk (C order), its hash; `None` for an empty chunk.
    pub chunks: Vec<Option<u32>>,
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
pub type Manifest = BTreeMap<(String, String), Entry>;

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
pub fn merge(files: &[(String, Bytes)]) -> Manifest {
    let mut ordered: Vec<&(String, Bytes)> = files.iter().collect();
    ordered.sort_by_key(|(key, _)| file_order(key));
    let mut manifest = Manifest::new();
    for (key, bytes) in ordered {
        // A damaged file is left out: its shards are not vouched for (see `sealed.rs`).
        match crate::sealed::unseal(bytes) {
            Some(records) => parse_into(&records, &mut manifest),
            None => tracing::warn!(
                "{key}: the manifest record's checksum does not match; its records are left out"
            ),
        }
    }
    manifest
}

/// Adds the records of a manifest file (or of the merged `manifest.tsv`) to `manifest`, a later
/// line of a shard over an earlier; lines that do not parse are skipped.
pub fn parse_into(bytes: &[u8], manifest: &mut Manifest) {
    for line in crate::made_from::record_text(bytes).lines() {
        if let Some((path, coord, entry)) = Entry::parse_line(line) {
            manifest.insert((path, coord), entry);
        }
    }
}

/// The text of a merged manifest.
pub fn to_text(manifest: &Manifest) -> Bytes {
    let mut text = String::new();
    for ((path, coord), entry) in manifest {
        entry.write_line(path, coord, &mut text);
    }
    Bytes::from(text)
}

/// The per-worker manifest files under the destination's state, read (one listing, then the files
/// side by side), with `pending` (files about to be written) over them.
pub fn read_records(dst: &Store, pending: &[(String, Bytes)]) -> Result<Vec<(String, Bytes)>> {
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
