//! The binary shard format of the `sharding_indexed` codec: encoded inner chunks followed (or
//! preceded) by an index of `(offset, nbytes)` pairs, one per inner chunk in C order.

use serde::{Deserialize, Serialize};

use crate::dtype::Endian;
use crate::error::{Error, Result};

/// Where the index sits in a shard (`"start"` or `"end"` in metadata).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IndexLocation {
    /// Before the first inner chunk; inner chunk offsets count the index's bytes.
    Start,
    /// After the last inner chunk (the default, and what zshard writes).
    #[default]
    End,
}

impl IndexLocation {
    /// The metadata spelling, `"start"` or `"end"`.
    pub fn as_str(self) -> &'static str {
        match self {
            IndexLocation::Start => "start",
            IndexLocation::End => "end",
        }
    }

    /// Parses the metadata spelling; `None` for anything but `"start"` and `"end"`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "start" => Some(IndexLocation::Start),
            "end" => Some(IndexLocation::End),
            _ => None,
        }
    }
}

/// How the index is encoded: the `bytes` codec's byte order, optionally followed by `crc32c` (see
/// [`IndexEncoding::from_codecs`] for the metadata).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexEncoding {
    /// Byte order of the 64-bit offsets and sizes.
    pub endian: Endian,
    /// Whether a little-endian CRC-32C of the entries follows them.
    pub crc32c: bool,
}

impl Default for IndexEncoding {
    /// `bytes` (little endian) + `crc32c`, as the specification recommends and zshard writes.
    fn default() -> Self {
        IndexEncoding {
            endian: Endian::Little,
            crc32c: true,
        }
    }
}

impl IndexEncoding {
    /// Encoded size of an index over `chunks` inner chunks (saturating: a count too large for memory
    /// gives a size no buffer has, so decoding it fails instead of overflowing).
    pub fn byte_len(&self, chunks: usize) -> usize {
        chunks
            .saturating_mul(16)
            .saturating_add(if self.crc32c { 4 } else { 0 })
    }
}

/// Where an inner chunk's bytes are in the shard; `None` for an empty inner chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkLocation {
    /// Byte offset of the encoded inner chunk from the start of the shard.
    pub offset: u64,
    /// Length of the encoded inner chunk in bytes.
    pub nbytes: u64,
}

/// The decoded shard index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardIndex {
    entries: Vec<Option<ChunkLocation>>,
}

/// The marker of an empty inner chunk, for both offset and nbytes.
pub const EMPTY: u64 = u64::MAX;

impl ShardIndex {
    /// An index over `entries`, one per inner chunk in C order of the shard's chunk grid.
    pub fn new(entries: Vec<Option<ChunkLocation>>) -> Self {
        ShardIndex { entries }
    }

    /// The entries, one per inner chunk in C order; `None` for an empty inner chunk.
    pub fn entries(&self) -> &[Option<ChunkLocation>] {
        &self.entries
    }

    /// The encoded index: 16 bytes per entry ([`EMPTY`] twice for an empty one), then the checksum
    /// if `encoding` has one.
    pub fn encode(&self, encoding: IndexEncoding) -> Vec<u8> {
        let mut out = Vec::with_capacity(encoding.byte_len(self.entries.len()));
        for entry in &self.entries {
            let (offset, nbytes) = entry.map_or((EMPTY, EMPTY), |l| (l.offset, l.nbytes));
            for v in [offset, nbytes] {
                match encoding.endian {
                    Endian::Little => out.extend_from_slice(&v.to_le_bytes()),
                    Endian::Big => out.extend_from_slice(&v.to_be_bytes()),
                }
            }
        }
        if encoding.crc32c {
            let sum = crate::crc32c(&out);
            out.extend_from_slice(&sum.to_le_bytes());
        }
        out
    }

    /// Decodes an encoded index of `chunks` entries, verifying the checksum.
    pub fn decode(bytes: &[u8], chunks: usize, encoding: IndexEncoding) -> Result<Self> {
        let expected = encoding.byte_len(chunks);
        if bytes.len() != expected {
            return Err(Error::ShardIndex {
                reason: format!("index is {} bytes, expected {expected}", bytes.len()),
            });
        }
        let body = &bytes[..chunks * 16];
        if encoding.crc32c {
            let mut stored = [0u8; 4];
            stored.copy_from_slice(&bytes[chunks * 16..]);
            let stored = u32::from_le_bytes(stored);
            let actual = crate::crc32c(body);
            if stored != actual {
                return Err(Error::ShardIndex {
                    reason: format!(
                        "crc32c mismatch: stored {stored:#010x}, computed {actual:#010x}"
                    ),
                });
            }
        }
        let read = |b: &[u8]| {
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            match encoding.endian {
                Endian::Little => u64::from_le_bytes(a),
                Endian::Big => u64::from_be_bytes(a),
            }
        };
        let mut entries = Vec::with_capacity(chunks);
        for pair in body.chunks_exact(16) {
            let (offset, nbytes) = (read(&pair[..8]), read(&pair[8..]));
            entries.push(if offset == EMPTY && nbytes == EMPTY {
                None
            } else {
                Some(ChunkLocation { offset, nbytes })
            });
        }
        Ok(ShardIndex { entries })
    }

    /// Checks that every entry lies inside a shard of `shard_len` bytes, outside the index, and that no
    /// two inner chunks overlap.
    pub fn validate(&self, shard_len: u64, index_len: u64, location: IndexLocation) -> Result<()> {
        let (data_start, data_end) = match location {
            IndexLocation::Start => (index_len, shard_len),
            IndexLocation::End => (0, shard_len.saturating_sub(index_len)),
        };
        let mut spans: Vec<(u64, u64, usize)> = Vec::new();
        for (i, entry) in self.entries.iter().enumerate() {
            let Some(loc) = entry else { continue };
            let end = loc
                .offset
                .checked_add(loc.nbytes)
                .ok_or_else(|| Error::ShardIndex {
                    reason: format!(
                        "inner chunk {i}: offset {} + nbytes {} overflows",
                        loc.offset, loc.nbytes
                    ),
                })?;
            if loc.offset < data_start || end > data_end {
                return Err(Error::ShardIndex {
                    reason: format!(
                        "inner chunk {i}: bytes {}..{end} lie outside the data area {data_start}..{data_end}",
                        loc.offset
                    ),
                });
            }
            spans.push((loc.offset, end, i));
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            if w[1].0 < w[0].1 {
                return Err(Error::ShardIndex {
                    reason: format!("inner chunks {} and {} overlap", w[0].2, w[1].2),
                });
            }
        }
        Ok(())
    }
}

/// Lays out a shard from its encoded inner chunks (C order; `None` = empty): the chunks back to back in
/// order, with the index before or after them.
pub fn assemble_shard<B: AsRef<[u8]>>(
    inner: &[Option<B>],
    location: IndexLocation,
    encoding: IndexEncoding,
) -> Vec<u8> {
    let index = shard_index_for(inner, location, encoding);
    let data_len: usize = inner.iter().flatten().map(|c| c.as_ref().len()).sum();
    let mut out = Vec::with_capacity(index.len() + data_len);
    if location == IndexLocation::Start {
        out.extend_from_slice(&index);
    }
    for chunk in inner.iter().flatten() {
        out.extend_from_slice(chunk.as_ref());
    }
    if location == IndexLocation::End {
        out.extend_from_slice(&index);
    }
    out
}

/// The encoded index of a shard whose stored inner chunks are laid out back to back in C order, with
/// the index before or after them (as [`assemble_shard`] does), for writers that send the pieces
/// without copying them into one buffer.
pub fn shard_index_for<B: AsRef<[u8]>>(
    inner: &[Option<B>],
    location: IndexLocation,
    encoding: IndexEncoding,
) -> Vec<u8> {
    let index_len = encoding.byte_len(inner.len());
    let mut offset = match location {
        IndexLocation::Start => index_len as u64,
        IndexLocation::End => 0,
    };
    let entries = inner
        .iter()
        .map(|chunk| {
            chunk.as_ref().map(|c| {
                let loc = ChunkLocation {
                    offset,
                    nbytes: c.as_ref().len() as u64,
                };
                offset += loc.nbytes;
                loc
            })
        })
        .collect();
    ShardIndex::new(entries).encode(encoding)
}

/// A shard read back: its index and the bytes of each inner chunk.
#[derive(Debug)]
pub struct ShardReader<'a> {
    bytes: &'a [u8],
    index: ShardIndex,
}

impl<'a> ShardReader<'a> {
    /// Parses and validates the index of a shard holding `chunks` inner chunks.
    pub fn new(
        bytes: &'a [u8],
        chunks: usize,
        location: IndexLocation,
        encoding: IndexEncoding,
    ) -> Result<Self> {
        let index_len = encoding.byte_len(chunks);
        if bytes.len() < index_len {
            return Err(Error::ShardIndex {
                reason: format!(
                    "shard is {} bytes, smaller than its {index_len}-byte index",
                    bytes.len()
                ),
            });
        }
        let index_bytes = match location {
            IndexLocation::Start => &bytes[..index_len],
            IndexLocation::End => &bytes[bytes.len() - index_len..],
        };
        let index = ShardIndex::decode(index_bytes, chunks, encoding)?;
        index.validate(bytes.len() as u64, index_len as u64, location)?;
        Ok(ShardReader { bytes, index })
    }

    /// The shard's decoded and validated index.
    pub fn index(&self) -> &ShardIndex {
        &self.index
    }

    /// The encoded bytes of inner chunk `i`, or `None` when it is empty.
    pub fn chunk(&self, i: usize) -> Option<&'a [u8]> {
        let loc = self.index.entries.get(i).copied().flatten()?;
        // validate() guarantees the range is inside the shard.
        self.bytes
            .get(loc.offset as usize..(loc.offset + loc.nbytes) as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks() -> Vec<Option<Vec<u8>>> {
        vec![Some(vec![1, 2, 3]), None, Some(vec![]), Some(vec![9; 5])]
    }

    #[test]
    fn end_layout_and_offsets() {
        let enc = IndexEncoding::default();
        let shard = assemble_shard(&chunks(), IndexLocation::End, enc);
        assert_eq!(shard.len(), 8 + 4 * 16 + 4);
        let reader = ShardReader::new(&shard, 4, IndexLocation::End, enc).expect("valid shard");
        assert_eq!(
            reader.index().entries(),
            &[
                Some(ChunkLocation {
                    offset: 0,
                    nbytes: 3
                }),
                None,
                Some(ChunkLocation {
                    offset: 3,
                    nbytes: 0
                }),
                Some(ChunkLocation {
                    offset: 3,
                    nbytes: 5
                }),
            ]
        );
        assert_eq!(reader.chunk(0), Some(&[1u8, 2, 3][..]));
        assert_eq!(reader.chunk(1), None);
        assert_eq!(reader.chunk(3), Some(&[9u8; 5][..]));
        // Empty entries are 2^64-1 twice, little endian.
        assert_eq!(&shard[8 + 16..8 + 32], &[0xff; 16]);
        // The checksum is crc32c of the 64 index bytes, little endian, at the very end.
        let sum = crate::crc32c(&shard[8..8 + 64]).to_le_bytes();
        assert_eq!(&shard[shard.len() - 4..], &sum);
    }

    #[test]
    fn start_layout_offsets_include_index() {
        let enc = IndexEncoding::default();
        let shard = assemble_shard(&chunks(), IndexLocation::Start, enc);
        let reader = ShardReader::new(&shard, 4, IndexLocation::Start, enc).expect("valid shard");
        assert_eq!(
            reader.index().entries()[0],
            Some(ChunkLocation {
                offset: 68,
                nbytes: 3
            })
        );
        assert_eq!(&shard[68..71], &[1, 2, 3]);
        assert_eq!(reader.chunk(3), Some(&[9u8; 5][..]));
    }

    #[test]
    fn corrupt_index_is_rejected() {
        let enc = IndexEncoding::default();
        let mut shard = assemble_shard(&chunks(), IndexLocation::End, enc);
        let n = shard.len();
        shard[n - 10] ^= 1;
        assert!(matches!(
            ShardReader::new(&shard, 4, IndexLocation::End, enc),
            Err(Error::ShardIndex { .. })
        ));
        assert!(ShardReader::new(&shard[..10], 4, IndexLocation::End, enc).is_err());
    }

    #[test]
    fn out_of_range_and_overlapping_entries_are_rejected() {
        let enc = IndexEncoding {
            endian: Endian::Little,
            crc32c: false,
        };
        let bad = ShardIndex::new(vec![Some(ChunkLocation {
            offset: 0,
            nbytes: 100,
        })]);
        let mut shard = vec![0u8; 10];
        shard.extend(bad.encode(enc));
        assert!(ShardReader::new(&shard, 1, IndexLocation::End, enc).is_err());
        let overlap = ShardIndex::new(vec![
            Some(ChunkLocation {
                offset: 0,
                nbytes: 6,
            }),
            Some(ChunkLocation {
                offset: 5,
                nbytes: 5,
            }),
        ]);
        let mut shard = vec![0u8; 10];
        shard.extend(overlap.encode(enc));
        assert!(ShardReader::new(&shard, 2, IndexLocation::End, enc).is_err());
        let huge = ShardIndex::new(vec![Some(ChunkLocation {
            offset: u64::MAX - 1,
            nbytes: 5,
        })]);
        let mut shard = vec![0u8; 10];
        shard.extend(huge.encode(enc));
        assert!(ShardReader::new(&shard, 1, IndexLocation::End, enc).is_err());
    }

    #[test]
    fn absurd_chunk_counts_are_errors() {
        // Found by the shard_index fuzz target: 16 * chunks overflowed instead of failing.
        let enc = IndexEncoding::default();
        let shard = assemble_shard(&chunks(), IndexLocation::End, enc);
        for n in [usize::MAX / 16 + 1, usize::MAX] {
            assert_eq!(enc.byte_len(n), usize::MAX);
            assert!(ShardReader::new(&shard, n, IndexLocation::End, enc).is_err());
            assert!(ShardReader::new(&shard, n, IndexLocation::Start, enc).is_err());
            assert!(ShardIndex::decode(&shard, n, enc).is_err());
        }
    }

    #[test]
    fn big_endian_index() {
        let enc = IndexEncoding {
            endian: Endian::Big,
            crc32c: true,
        };
        let shard = assemble_shard(&chunks(), IndexLocation::End, enc);
        let reader = ShardReader::new(&shard, 4, IndexLocation::End, enc).expect("valid shard");
        assert_eq!(reader.chunk(3), Some(&[9u8; 5][..]));
    }
}
