//! The sink of a verification: where a conversion would write a shard, it reads the stored shard
//! and compares each inner chunk with the source's, checking the shard's index on the way
//! (checksum, offsets and lengths inside the object, no overlapping inner chunks); a pyramid's
//! lower level is compared with its recomputation from the level above.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use zshard_core::downsample::Reduction;
use zshard_core::{
    unravel_index, ChunkKeyEncoding, ChunkRepr, CodecChain, IndexEncoding, IndexLocation,
    ShardGeometry, ShardIndex, ShardReader, ShardSink,
};
use zshard_store::{Store, COALESCE_GAP, MAX_REQUEST};

use super::verification::Mismatches;

/// Compares the source's raw inner chunks with the stored shard.
#[derive(Debug)]
pub(super) struct VerifySink {
    /// For a level of a pyramid made while converting: its number, and for a level below 0 how it
    /// is recomputed from the one above.
    pub(super) level: Option<(usize, Option<Reduction>)>,
    pub(super) store: Store,
    pub(super) keys: ChunkKeyEncoding,
    pub(super) geometry: ShardGeometry,
    pub(super) inner_repr: ChunkRepr,
    pub(super) inner_chain: CodecChain,
    pub(super) index_location: IndexLocation,
    pub(super) index_encoding: IndexEncoding,
    pub(super) mismatches: Arc<Mutex<Mismatches>>,
}

impl VerifySink {
    /// The level a message is about, when the output is a pyramid made while converting.
    fn level(&self) -> String {
        self.level
            .map_or_else(String::new, |(level, _)| format!("level {level}: "))
    }

    /// What the output's elements are compared with.
    fn expected(&self) -> String {
        match self.level {
            Some((level, Some(reduction))) => format!(
                "their recomputation from the source ({reduction} of level {})",
                level.saturating_sub(1)
            ),
            _ => "the source".into(),
        }
    }

    fn mismatch(&self, message: String) {
        if let Ok(mut m) = self.mismatches.lock() {
            m.push(message);
        }
    }

    fn compare(&self, shard: &[u64], i: usize, stored: Option<&[u8]>, expected: Option<&Bytes>) {
        let key = self.shard_key(shard);
        let fill;
        let expected: &[u8] = match expected {
            Some(e) => e,
            None => {
                fill = self
                    .inner_repr
                    .fill_value
                    .repeat(self.inner_repr.elements() as usize);
                &fill
            }
        };
        let actual = match stored {
            None => self
                .inner_repr
                .fill_value
                .repeat(self.inner_repr.elements() as usize),
            Some(bytes) => match self.inner_chain.decode(bytes, &self.inner_repr) {
                Ok(decoded) => decoded,
                Err(e) => {
                    return self.mismatch(format!(
                        "{key}: {}inner chunk {i} does not decode: {e}",
                        self.level()
                    ))
                }
            },
        };
        let size = self.inner_repr.data_type.size();
        let region = self.geometry.inner_region(shard, i as u64);
        // Only elements inside the array are compared: the spec leaves an edge chunk's padding
        // undefined, and a passthrough copy keeps whatever the source's writer left there.
        let Some(inside) = region.intersect(&self.geometry.array_region()) else {
            return;
        };
        let inside = inside.shape;
        let differs = |e: usize| {
            expected.get(e * size..(e + 1) * size) != actual.get(e * size..(e + 1) * size)
        };
        let elements = (0..expected.len() / size).filter(|&e| {
            inside == region.shape
                || unravel_index(e as u64, &region.shape)
                    .iter()
                    .zip(&inside)
                    .all(|(l, n)| l < n)
        });
        let mut differing = elements.filter(|&e| differs(e));
        let Some(first) = differing.next() else {
            return;
        };
        let differing = 1 + differing.count();
        let local = unravel_index(first as u64, &region.shape);
        let at: Vec<u64> = local
            .iter()
            .zip(&region.start)
            .map(|(l, s)| l + s)
            .collect();
        self.mismatch(format!(
            "{key}: {}inner chunk {i}: {differing} element(s) differ from {}, first at {at:?} ({} bytes {:02x?}, output {:02x?})",
            self.level(),
            self.expected(),
            match self.level {
                Some((_, Some(_))) => "recomputed",
                _ => "source",
            },
            &expected[first * size..(first + 1) * size],
            &actual[first * size..(first + 1) * size]
        ));
    }
}

impl ShardSink for VerifySink {
    fn shard_key(&self, shard: &[u64]) -> String {
        self.store.url(&self.keys.key(shard))
    }

    /// Compares a shard part by part as the pipeline makes it: the stored shard's index is read
    /// once, then each part's inner chunks by range, so a check holds a part of a shard, never a
    /// whole one (four 128 MiB shards took 1.06 GB when collected whole: issue 45, row 4).
    fn begin_shard(
        &self,
        shard: &[u64],
        chunks: usize,
    ) -> zshard_core::Result<Box<dyn zshard_core::ShardStream + '_>> {
        let key = self.keys.key(shard);
        let read_error = |e: zshard_store::Error| zshard_core::Error::Read {
            key: self.store.url(&key),
            source: Box::new(e),
        };
        let index_len = self.index_encoding.byte_len(chunks) as u64;
        let from_end = self.index_location == IndexLocation::End;
        let stored = match self
            .store
            .get_edge_sized(&key, index_len, from_end)
            .map_err(read_error)?
        {
            None => StoredShard::Missing,
            Some((bytes, size)) => match ShardIndex::decode(&bytes, chunks, self.index_encoding)
                .and_then(|index| {
                    index.validate(size, index_len, self.index_location)?;
                    Ok(index)
                }) {
                Ok(index) => StoredShard::Indexed(index),
                Err(e) => {
                    self.mismatch(format!("{}: {e}", self.shard_key(shard)));
                    StoredShard::Unreadable
                }
            },
        };
        Ok(Box::new(VerifyStream {
            sink: self,
            shard: shard.to_vec(),
            key,
            stored,
            next: 0,
            reported_missing: false,
        }))
    }

    fn write_shard(
        &self,
        shard: &[u64],
        expected: &[Option<Bytes>],
    ) -> zshard_core::Result<zshard_core::Stored> {
        let key = self.keys.key(shard);
        let object = self.store.get(&key).map_err(|e| zshard_core::Error::Read {
            key: self.store.url(&key),
            source: Box::new(e),
        })?;
        let Some(object) = object else {
            if expected.iter().any(Option::is_some) {
                self.mismatch(format!(
                    "{}: {}shard is missing but {} has data there",
                    self.shard_key(shard),
                    self.level(),
                    self.expected()
                ));
            }
            return Ok(zshard_core::Stored::NOTHING);
        };
        let reader = match ShardReader::new(
            &object,
            expected.len(),
            self.index_location,
            self.index_encoding,
        ) {
            Ok(r) => r,
            Err(e) => {
                self.mismatch(format!("{}: {e}", self.shard_key(shard)));
                return Ok(zshard_core::Stored::NOTHING);
            }
        };
        for (i, exp) in expected.iter().enumerate() {
            self.compare(shard, i, reader.chunk(i), exp.as_ref());
        }
        Ok(zshard_core::Stored::NOTHING)
    }
}

/// What a stored shard's index says, read when its check begins.
enum StoredShard {
    /// No object at the shard's key.
    Missing,
    /// An index that does not decode or names chunks outside the object (reported once).
    Unreadable,
    Indexed(ShardIndex),
}

/// A shard being compared part by part (see [`VerifySink::begin_shard`]).
struct VerifyStream<'a> {
    sink: &'a VerifySink,
    shard: Vec<u64>,
    key: String,
    stored: StoredShard,
    /// The C-order number of the next inner chunk to arrive.
    next: usize,
    reported_missing: bool,
}

impl zshard_core::ShardStream for VerifyStream<'_> {
    fn append(&mut self, expected: &[Option<Bytes>]) -> zshard_core::Result<()> {
        let first = self.next;
        self.next += expected.len();
        let index = match &self.stored {
            StoredShard::Indexed(index) => index,
            StoredShard::Unreadable => return Ok(()),
            StoredShard::Missing => {
                if !self.reported_missing && expected.iter().any(Option::is_some) {
                    self.reported_missing = true;
                    self.sink.mismatch(format!(
                        "{}: {}shard is missing but {} has data there",
                        self.sink.shard_key(&self.shard),
                        self.sink.level(),
                        self.sink.expected()
                    ));
                }
                return Ok(());
            }
        };
        let Some(locations) = index.entries().get(first..first + expected.len()) else {
            return Ok(());
        };
        // The part's stored chunks, in few requests (the one coalescer, as fetches use it).
        let wanted: Vec<std::ops::Range<u64>> = locations
            .iter()
            .flatten()
            .map(|l| l.offset..l.offset + l.nbytes)
            .collect();
        let plan = zshard_store::coalesce(&wanted, Some(COALESCE_GAP), MAX_REQUEST);
        let requests: Vec<(String, std::ops::Range<u64>)> = plan
            .iter()
            .map(|r| (self.key.clone(), r.range.clone()))
            .collect();
        let url = self.sink.store.url(&self.key);
        let read_error = |e: zshard_store::Error| zshard_core::Error::Read {
            key: url.clone(),
            source: Box::new(e),
        };
        let mut chunks: Vec<Option<Bytes>> = vec![None; wanted.len()];
        for (request, response) in plan.iter().zip(self.sink.store.get_ranges(&requests)) {
            let response = response.map_err(read_error)?;
            for &member in &request.members {
                let bytes = request
                    .slice(&response, &wanted[member], &url)
                    .map_err(read_error)?;
                chunks[member] = Some(bytes);
            }
        }
        let mut stored = chunks.into_iter();
        for (i, (location, exp)) in locations.iter().zip(expected).enumerate() {
            let chunk = location.and_then(|_| stored.next().flatten());
            self.sink
                .compare(&self.shard, first + i, chunk.as_deref(), exp.as_ref());
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> zshard_core::Result<zshard_core::Stored> {
        Ok(zshard_core::Stored::NOTHING)
    }
}
