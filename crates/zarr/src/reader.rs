use bytes::Bytes;
use zshard_core::{ChunkKeyEncoding, ChunkReader, Error, Result};
use zshard_store::Store;

/// Reads the stored chunks of one Zarr array (v2 or v3) by grid coordinates.
#[derive(Debug)]
pub struct ZarrChunkReader {
    store: Store,
    encoding: ChunkKeyEncoding,
}

impl ZarrChunkReader {
    /// `store` is located at the array's folder.
    pub fn new(store: Store, encoding: ChunkKeyEncoding) -> Self {
        ZarrChunkReader { store, encoding }
    }
}

impl ChunkReader for ZarrChunkReader {
    fn chunk_key(&self, coord: &[u64]) -> String {
        self.store.url(&self.encoding.key(coord))
    }

    fn read_chunks(&self, coords: &[Vec<u64>]) -> Vec<Result<Option<Bytes>>> {
        let keys: Vec<String> = coords.iter().map(|c| self.encoding.key(c)).collect();
        self.store
            .get_many(&keys)
            .into_iter()
            .zip(&keys)
            .map(|(result, key)| {
                result.map_err(|e| Error::Read {
                    key: self.store.url(key),
                    source: Box::new(e),
                })
            })
            .collect()
    }
}
