//! Variable-length strings: the `vlen-utf8` chunk layout, and the handles the pipeline reassembles
//! instead of strings.
//!
//! A decoded string chunk is in numcodecs' `vlen-utf8` layout: a little-endian `u32` element count,
//! then for each element a little-endian `u32` byte length and that many bytes. Reassembly copies
//! fixed-size elements between chunks, so while a shard is being assembled every string is replaced
//! by an 8-byte [`StringHandle`] naming the source chunk and element it came from (or the fill value);
//! [`StringTable::resolve`] turns a chunk of handles back into the layout.

use std::ops::Range;

use crate::error::{Error, Result};

/// The size of one element count or string length in the layout.
const LEN: usize = 4;

/// Byte ranges of the strings of a chunk in the `vlen-utf8` layout, checking that it holds exactly
/// `count` elements that fit in `bytes` (as numcodecs does, bytes after the last element are ignored).
pub fn vlen_ranges(bytes: &[u8], count: usize) -> Result<Vec<Range<usize>>> {
    let bad = |reason: String| Error::codec("vlen-utf8", reason);
    let read_len = |at: usize| -> Result<usize> {
        bytes
            .get(at..at + LEN)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            .ok_or_else(|| bad(format!("truncated at byte {at} of {}", bytes.len())))
    };
    let stored = read_len(0)?;
    if stored != count {
        return Err(bad(format!(
            "chunk holds {stored} elements, expected {count}"
        )));
    }
    // Every element takes at least its length prefix, so a lying count cannot make us allocate.
    if count > (bytes.len() - LEN) / LEN {
        return Err(bad(format!(
            "{count} elements cannot fit in {} bytes",
            bytes.len()
        )));
    }
    let mut ranges = Vec::with_capacity(count);
    let mut at = LEN;
    for _ in 0..count {
        let len = read_len(at)?;
        let start = at + LEN;
        let end = start
            .checked_add(len)
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| bad(format!("element at byte {at} runs past the end")))?;
        ranges.push(start..end);
        at = end;
    }
    Ok(ranges)
}

/// Writes elements in the `vlen-utf8` layout.
pub fn vlen_encode<'a>(count: usize, elements: impl Iterator<Item = &'a [u8]>) -> Result<Vec<u8>> {
    let too_long = || Error::codec("vlen-utf8", "an element or the count exceeds 4 GiB");
    let mut out = Vec::with_capacity(LEN * (count + 1));
    out.extend_from_slice(&u32::try_from(count).map_err(|_| too_long())?.to_le_bytes());
    for element in elements {
        out.extend_from_slice(
            &u32::try_from(element.len())
                .map_err(|_| too_long())?
                .to_le_bytes(),
        );
        out.extend_from_slice(element);
    }
    Ok(out)
}

/// Where a string came from while its shard is assembled: (source chunk slot, element), packed into
/// 8 little-endian bytes so that reassembly can copy it like any fixed-size element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StringHandle(u64);

impl StringHandle {
    /// The handle of the fill value; also what reassembly fills uncovered elements with.
    pub const FILL: StringHandle = StringHandle(u64::MAX);

    /// The 8 bytes reassembly copies in place of the string.
    pub fn to_le_bytes(self) -> [u8; 8] {
        self.0.to_le_bytes()
    }

    fn from_le_slice(b: &[u8]) -> Self {
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[..8]);
        StringHandle(u64::from_le_bytes(a))
    }
}

/// The strings of one source chunk: its decoded layout and the range of each element.
#[derive(Debug)]
struct StringChunk {
    data: Vec<u8>,
    ranges: Vec<Range<usize>>,
}

/// The strings of the source chunks of one shard, addressed by [`StringHandle`]s.
#[derive(Debug, Default)]
pub struct StringTable {
    chunks: Vec<Option<StringChunk>>,
}

impl StringTable {
    /// A table with `slots` source chunks, none loaded yet.
    pub fn with_slots(slots: usize) -> Self {
        StringTable {
            chunks: (0..slots).map(|_| None).collect(),
        }
    }

    /// Turns a decoded chunk (in the layout, `count` elements) into handles for source chunk `slot`.
    /// Elements equal to `fill` get [`StringHandle::FILL`], so that all-fill inner chunks are seen as
    /// empty. Returns the handles and the chunk's strings to [`StringTable::insert`].
    pub fn handles(
        slot: usize,
        data: Vec<u8>,
        count: usize,
        fill: &[u8],
    ) -> Result<(Vec<u8>, StringChunkData)> {
        let ranges = vlen_ranges(&data, count)?;
        let slot = u32::try_from(slot)
            .map_err(|_| Error::codec("vlen-utf8", "too many source chunks in one shard"))?;
        let mut handles = Vec::with_capacity(count * 8);
        for (i, range) in ranges.iter().enumerate() {
            let handle = if &data[range.clone()] == fill {
                StringHandle::FILL
            } else {
                StringHandle(u64::from(slot) << 32 | i as u64)
            };
            handles.extend_from_slice(&handle.to_le_bytes());
        }
        Ok((handles, StringChunkData(StringChunk { data, ranges })))
    }

    /// Stores the strings of source chunk `slot` (from [`StringTable::handles`]).
    pub fn insert(&mut self, slot: usize, strings: StringChunkData) {
        if let Some(entry) = self.chunks.get_mut(slot) {
            *entry = Some(strings.0);
        }
    }

    /// The `vlen-utf8` layout of a chunk of handles.
    pub fn resolve(&self, handles: &[u8], fill: &[u8]) -> Result<Vec<u8>> {
        let count = handles.len() / 8;
        let lookup = |h: StringHandle| -> Result<&[u8]> {
            if h == StringHandle::FILL {
                return Ok(fill);
            }
            let (slot, element) = ((h.0 >> 32) as usize, (h.0 & 0xffff_ffff) as usize);
            self.chunks
                .get(slot)
                .and_then(Option::as_ref)
                .and_then(|c| c.ranges.get(element).map(|r| &c.data[r.clone()]))
                .ok_or_else(|| Error::codec("vlen-utf8", "string handle without a source"))
        };
        let strings = handles
            .chunks_exact(8)
            .map(|b| lookup(StringHandle::from_le_slice(b)))
            .collect::<Result<Vec<_>>>()?;
        vlen_encode(count, strings.into_iter())
    }
}

/// The strings of one decoded source chunk, on their way into a [`StringTable`].
#[derive(Debug)]
pub struct StringChunkData(StringChunk);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_round_trip_and_errors() {
        let items: [&[u8]; 3] = [b"ab", b"", "h\u{e9}".as_bytes()];
        let bytes = vlen_encode(3, items.iter().copied()).expect("encode");
        assert_eq!(&bytes[..8], &[3, 0, 0, 0, 2, 0, 0, 0]);
        let ranges = vlen_ranges(&bytes, 3).expect("ranges");
        let back: Vec<&[u8]> = ranges.iter().map(|r| &bytes[r.clone()]).collect();
        assert_eq!(back, items);
        assert!(vlen_ranges(&bytes, 4).is_err());
        assert!(vlen_ranges(&bytes[..bytes.len() - 1], 3).is_err());
        assert!(vlen_ranges(&[], 0).is_err());
        // A count far larger than the bytes could hold is refused before allocating.
        assert!(vlen_ranges(&[0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0], 0x7fff_ffff).is_err());
        let mut long_len = bytes.clone();
        long_len[4] = 0xff;
        assert!(vlen_ranges(&long_len, 3).is_err());
    }

    #[test]
    fn handles_resolve_across_chunks() {
        let a = vlen_encode(2, [&b"x"[..], b"fill"].into_iter()).expect("a");
        let b = vlen_encode(2, [&b"yy"[..], b"zzz"].into_iter()).expect("b");
        let mut table = StringTable::with_slots(2);
        let (ha, sa) = StringTable::handles(0, a, 2, b"fill").expect("a");
        let (hb, sb) = StringTable::handles(1, b, 2, b"fill").expect("b");
        assert_eq!(&ha[8..], &StringHandle::FILL.to_le_bytes());
        table.insert(0, sa);
        table.insert(1, sb);
        // An inner chunk mixing both sources and an uncovered (fill) element.
        let mut mixed = hb[8..].to_vec();
        mixed.extend_from_slice(&ha[..8]);
        mixed.extend_from_slice(&StringHandle::FILL.to_le_bytes());
        let out = table.resolve(&mixed, b"fill").expect("resolve");
        let expected = vlen_encode(3, [&b"zzz"[..], b"x", b"fill"].into_iter()).expect("e");
        assert_eq!(out, expected);
        assert!(StringTable::default().resolve(&ha[..8], b"").is_err());
    }
}
