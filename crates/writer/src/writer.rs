use bytes::Bytes;
use serde_json::{Map, Value};
use zshard_core::{
    shard_index_for, ChunkKeyEncoding, ChunkLocation, IndexEncoding, IndexLocation, ShardIndex,
    ShardSink, ShardStream, Stored,
};
use zshard_store::{Store, Upload};

use crate::error::{Error, Result};
use crate::metadata::{
    consolidated_group_json, group_json, ShardedArrayMetadata, OUTPUT_KEY_ENCODING,
};

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

    fn write_shard(&self, shard: &[u64], inner: &[Option<Bytes>]) -> zshard_core::Result<Stored> {
        // A shard of nothing but the fill value is not stored: readers take a missing shard as fill.
        if inner.iter().all(Option::is_none) {
            return Ok(Stored::NOTHING);
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
        let mut stored = Stored::of_parts(parts.iter().map(|p| &p[..]));
        stored.version = self
            .store
            .put_parts_versioned(&self.keys.key(shard), parts)
            .map_err(|e| zshard_core::Error::Write {
                key: self.shard_key(shard),
                source: Box::new(e),
            })?;
        Ok(stored)
    }

    fn begin_shard(
        &self,
        shard: &[u64],
        chunks: usize,
    ) -> zshard_core::Result<Box<dyn ShardStream + '_>> {
        Ok(Box::new(StreamedShard {
            writer: self,
            shard: shard.to_vec(),
            entries: Vec::with_capacity(chunks),
            chunks,
            upload: None,
            crc32c: 0,
        }))
    }
}

/// A shard written as its parts arrive: inner chunks go straight to the store (see [`Store::upload`])
/// and only their index entries stay in memory. The index, known at the end, is written last when it
/// goes at the end, or into space reserved before the chunks when it goes at the start.
struct StreamedShard<'a> {
    writer: &'a ShardWriter,
    shard: Vec<u64>,
    entries: Vec<Option<ChunkLocation>>,
    chunks: usize,
    /// Opened at the first stored chunk: a shard of only empty chunks is never written.
    upload: Option<Upload>,
    /// The crc32c of the chunks appended so far (the manifest's checksum of the object, once the
    /// index is put in its place).
    crc32c: u32,
}

impl StreamedShard<'_> {
    fn index_len(&self) -> u64 {
        IndexEncoding::default().byte_len(self.chunks) as u64
    }

    fn error(&self, e: zshard_store::Error) -> zshard_core::Error {
        zshard_core::Error::Write {
            key: self.writer.shard_key(&self.shard),
            source: Box::new(e),
        }
    }
}

impl ShardStream for StreamedShard<'_> {
    fn append(&mut self, inner: &[Option<Bytes>]) -> zshard_core::Result<()> {
        if self.entries.len() + inner.len() > self.chunks {
            return Err(zshard_core::Error::Write {
                key: self.writer.shard_key(&self.shard),
                source: format!("more than the shard's {} inner chunks", self.chunks).into(),
            });
        }
        if self.upload.is_none() && inner.iter().any(Option::is_some) {
            let reserved = match self.writer.index_location {
                IndexLocation::Start => self.index_len(),
                IndexLocation::End => 0,
            };
            let key = self.writer.keys.key(&self.shard);
            let upload = self
                .writer
                .store
                .upload(&key, reserved)
                .map_err(|e| self.error(e))?;
            self.upload = Some(upload);
        }
        let base = match self.writer.index_location {
            IndexLocation::Start => self.index_len(),
            IndexLocation::End => 0,
        };
        let Some(upload) = self.upload.as_mut() else {
            // Only empty chunks so far.
            self.entries.extend(inner.iter().map(|_| None));
            return Ok(());
        };
        let mut offset = base + upload.appended();
        let mut pieces = Vec::with_capacity(inner.len());
        for chunk in inner {
            self.entries.push(chunk.as_ref().map(|chunk| {
                let location = ChunkLocation {
                    offset,
                    nbytes: chunk.len() as u64,
                };
                offset += chunk.len() as u64;
                pieces.push(chunk.clone());
                location
            }));
        }
        let appended = upload.append_all(&pieces);
        for piece in &pieces {
            self.crc32c = zshard_core::crc32c_append(self.crc32c, piece);
        }
        appended.map_err(|e| self.error(e))
    }

    fn finish(mut self: Box<Self>) -> zshard_core::Result<Stored> {
        let Some(upload) = self.upload.take() else {
            return Ok(Stored::NOTHING);
        };
        if self.entries.len() != self.chunks {
            return Err(zshard_core::Error::Write {
                key: self.writer.shard_key(&self.shard),
                source: format!(
                    "{} of the shard's {} inner chunks were written",
                    self.entries.len(),
                    self.chunks
                )
                .into(),
            });
        }
        let entries = std::mem::take(&mut self.entries);
        let index = ShardIndex::new(entries).encode(IndexEncoding::default());
        let crc32c = match self.writer.index_location {
            IndexLocation::End => zshard_core::crc32c_append(self.crc32c, &index),
            IndexLocation::Start => zshard_core::crc32c_combine(
                zshard_core::crc32c(&index),
                self.crc32c,
                upload.appended(),
            ),
        };
        let (bytes, version) = upload
            .finish_versioned(&Bytes::from(index))
            .map_err(|e| self.error(e))?;
        Ok(Stored {
            bytes,
            crc32c,
            version,
        })
    }
}

/// The bytes of a `zarr.json` document as zshard writes it (pretty-printed, with a final newline), for
/// callers that write several documents side by side.
pub fn document_bytes(doc: &Value) -> Bytes {
    let mut text = serde_json::to_vec_pretty(doc).unwrap_or_default();
    text.push(b'\n');
    Bytes::from(text)
}

fn put_json(store: &Store, path: &str, doc: &Value) -> Result<()> {
    let key = if path.is_empty() {
        "zarr.json".to_string()
    } else {
        format!("{path}/zarr.json")
    };
    store
        .put(&key, document_bytes(doc))
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

/// Writes the `zarr.json` of the group at `path` with `members` (the documents of every node below
/// it, by path relative to it) consolidated into it; see [`consolidated_group_json`].
pub fn write_consolidated_group_metadata(
    store: &Store,
    path: &str,
    attributes: &Map<String, Value>,
    members: impl IntoIterator<Item = (String, Value)>,
) -> Result<()> {
    put_json(store, path, &consolidated_group_json(attributes, members))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zshard_core::ShardReader;
    use zshard_store::IoRuntime;

    fn chunks() -> Vec<Option<Bytes>> {
        (0..7u8)
            .map(|i| (i % 3 != 1).then(|| Bytes::from(vec![i; 10 + i as usize])))
            .collect()
    }

    #[test]
    fn a_shard_streamed_in_parts_equals_the_shard_written_whole() {
        let dir = tempfile::tempdir().expect("test");
        let runtime = IoRuntime::new(1).expect("test");
        let store = Store::open(dir.path().to_str().expect("test"), runtime, false).expect("test");
        let inner = chunks();
        for location in [IndexLocation::Start, IndexLocation::End] {
            let writer = ShardWriter::new(store.child(location.as_str()), location);
            let whole = writer.write_shard(&[0, 0], &inner).expect("test");
            let mut stream = writer.begin_shard(&[0, 1], inner.len()).expect("test");
            for part in inner.chunks(3) {
                stream.append(part).expect("test");
            }
            let streamed = stream.finish().expect("test");
            assert_eq!(
                (streamed.bytes, streamed.crc32c),
                (whole.bytes, whole.crc32c)
            );
            // Each names the version its object has in the store's listings (a resume compares them).
            let listed = store.list_objects(location.as_str()).expect("test");
            for (stored, key) in [(&whole, "c/0/0"), (&streamed, "c/0/1")] {
                let key = format!("{}/{key}", location.as_str());
                let object = listed.iter().find(|o| o.key == key).expect("test");
                assert_eq!(stored.version.as_deref(), Some(object.version.as_str()));
            }
            assert_eq!(
                whole.crc32c,
                zshard_core::crc32c(
                    &store
                        .get(&format!("{}/c/0/0", location.as_str()))
                        .expect("test")
                        .expect("test")
                )
            );
            let a = store
                .get(&format!("{}/c/0/0", location.as_str()))
                .expect("test");
            let b = store
                .get(&format!("{}/c/0/1", location.as_str()))
                .expect("test");
            assert_eq!(a, b, "{location:?}");
            let bytes = b.expect("test");
            let reader = ShardReader::new(&bytes, inner.len(), location, IndexEncoding::default())
                .expect("test");
            for (i, chunk) in inner.iter().enumerate() {
                assert_eq!(reader.chunk(i), chunk.as_deref(), "{location:?} chunk {i}");
            }
        }
    }

    #[test]
    fn streamed_shards_of_only_empty_chunks_or_abandoned_are_not_stored() {
        let dir = tempfile::tempdir().expect("test");
        let runtime = IoRuntime::new(1).expect("test");
        let store = Store::open(dir.path().to_str().expect("test"), runtime, false).expect("test");
        let writer = ShardWriter::new(store.clone(), IndexLocation::End);
        let mut empty = writer.begin_shard(&[1], 4).expect("test");
        empty.append(&[None, None]).expect("test");
        empty.append(&[None, None]).expect("test");
        assert_eq!(empty.finish().expect("test"), Stored::NOTHING);
        let mut abandoned = writer.begin_shard(&[2], 4).expect("test");
        abandoned.append(&chunks()[..2]).expect("test");
        drop(abandoned);
        let mut short = writer.begin_shard(&[3], 4).expect("test");
        short.append(&chunks()[..2]).expect("test");
        assert!(short.finish().is_err());
        let mut long = writer.begin_shard(&[4], 1).expect("test");
        assert!(long.append(&chunks()[..2]).is_err());
        drop(long);
        assert_eq!(store.list_keys("").expect("test"), Vec::<String>::new());
    }
}
