//! `zshard verify --manifest DST`: an output checked against the checksum manifest its conversion
//! kept (the records and their merge are the destination protocol's, in `zshard-state`), without
//! reading the source: a shard missing, of another size (truncated), with other bytes (a corrupted
//! byte, the bytes of another shard), and objects at shard keys that the manifest does not name are
//! each reported.

use std::collections::HashMap;

use bytes::Bytes;
use zshard_core::{ChunkRepr, NodeKind, ShardReader};
use zshard_state::{
    join, merge, parse_into, read_records, ChunkHashes, Entry, Manifest, MANIFEST, MANIFEST_DIR,
};
use zshard_store::{IoRuntime, Location, Store, StoreOptions};
use zshard_zarr::open_hierarchy;

use crate::error::{Error, Result};
use crate::verify::{output_array, Mismatches, Verified};

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
                    if (bytes.len() as u64, zshard_core::crc32c(&bytes))
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
        let store = dst.clone().with_concurrency(
            crate::threads::capped_io_threads(self.io_threads.unwrap_or(8).max(1)).0,
        );
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
    if entry.chunks.is_empty() {
        // Written by an update that copied inner chunks without hashing them (no manifest was
        // to be kept then): the shard's size and crc32c are all the manifest vouches for.
        return "the manifest names no hashes of its inner chunks to say which differ".into();
    }
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
                ChunkHashes::Encoded | ChunkHashes::Document => Some(zshard_core::crc32c(stored)),
                ChunkHashes::Decoded => match output.inner_chain.decode(stored, &repr) {
                    Ok(values) => Some(zshard_core::crc32c(&values)),
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
