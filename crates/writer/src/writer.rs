use bytes::Bytes;
use serde_json::{Map, Value};
use zshard_core::{shard_index_for, ChunkKeyEncoding, IndexEncoding, IndexLocation, ShardSink};
use zshard_store::Store;

use crate::error::{Error, Result};
use crate::metadata::{group_json, ShardedArrayMetadata, OUTPUT_KEY_ENCODING};

/// Writes the shards of one array into its folder of the output store.
#[derive(Debug)]
pub struct ShardWriter {
    store: Store,
    keys: ChunkKeyEncoding,
    index_location: IndexLocation,
}

impl ShardWriter {
    /// `store` is located at the array's folder.
    pub fn new(store: Store, index_location: IndexLocation) -> Self {
        ShardWriter {
            store,
            keys: OUTPUT_KEY_ENCODING,
            index_location,
        }
    }
}

impl ShardSink for ShardWriter {
    fn shard_key(&self, shard: &[u64]) -> String {
        self.store.url(&self.keys.key(shard))
    }

    fn write_shard(&self, shard: &[u64], inner: &[Option<Bytes>]) -> zshard_core::Result<u64> {
        // A shard of nothing but the fill value is not stored: readers take a missing shard as fill.
        if inner.iter().all(Option::is_none) {
            return Ok(0);
        }
        // The shard goes out as its pieces: copying them into one buffer would double its memory.
        let index = Bytes::from(shard_index_for(
            inner,
            self.index_location,
            IndexEncoding::default(),
        ));
        let mut parts = Vec::with_capacity(inner.len() + 1);
        if self.index_location == IndexLocation::Start {
            parts.push(index.clone());
        }
        parts.extend(inner.iter().flatten().cloned());
        if self.index_location == IndexLocation::End {
            parts.push(index);
        }
        let len = parts.iter().map(|p| p.len() as u64).sum();
        self.store
            .put_parts(&self.keys.key(shard), parts)
            .map_err(|e| zshard_core::Error::Write {
                key: self.shard_key(shard),
                source: Box::new(e),
            })?;
        Ok(len)
    }
}

fn put_json(store: &Store, path: &str, doc: &Value) -> Result<()> {
    let key = if path.is_empty() {
        "zarr.json".to_string()
    } else {
        format!("{path}/zarr.json")
    };
    let mut text = serde_json::to_vec_pretty(doc).unwrap_or_default();
    text.push(b'\n');
    store
        .put(&key, Bytes::from(text))
        .map_err(|source| Error::Write {
            key: store.url(&key),
            source,
        })
}

/// Writes an array's `zarr.json` at `path` below the store's location.
pub fn write_array_metadata(store: &Store, path: &str, meta: &ShardedArrayMetadata) -> Result<()> {
    put_json(store, path, &meta.to_json())
}

/// Writes a group's `zarr.json` at `path` below the store's location.
pub fn write_group_metadata(
    store: &Store,
    path: &str,
    attributes: &Map<String, Value>,
) -> Result<()> {
    put_json(store, path, &group_json(attributes))
}
