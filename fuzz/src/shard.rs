//! `shard_index`: a shard of the `sharding_indexed` format with a geometry, index encoding and
//! inner chain taken from the input, read three ways: `ShardIndex::decode` + `validate` on the
//! index bytes, `ShardReader` (every inner chunk), and the `sharding_indexed` codec decoding the
//! whole shard.
//!
//! Promises checked: no panic; the reader accepts exactly the shards whose index decodes and
//! validates; an accepted index re-encodes to the same bytes; every non-empty entry's bytes are
//! inside the data area, do not overlap, and are what `chunk(i)` returns; an absurd inner chunk
//! count is an error; the codec's promises as in `codec_decode`.

use serde_json::json;
use zshard_codecs::build_chain;
use zshard_core::{
    ChunkRepr, CodecSpec, DataType, Endian, FillValue, IndexEncoding, IndexLocation, ShardIndex,
    ShardReader,
};

use crate::codecs::decode_and_check;
use crate::input::Input;

const DATA_TYPES: [DataType; 6] = [
    DataType::UInt8,
    DataType::Int16,
    DataType::Float32,
    DataType::Float64,
    DataType::Complex64,
    DataType::NullTerminatedBytes(3),
];

/// The configuration read from the front of the input.
#[derive(Debug)]
pub struct ShardCase {
    pub repr: ChunkRepr,
    pub specs: Vec<CodecSpec>,
    pub location: IndexLocation,
    pub encoding: IndexEncoding,
    pub chunks: usize,
    /// An inner chunk count to try besides the right one (absurd ones included).
    pub other_chunks: u64,
}

pub fn parse_shard(inp: &mut Input) -> ShardCase {
    let flags = inp.byte();
    let location = if flags & 1 == 0 {
        IndexLocation::End
    } else {
        IndexLocation::Start
    };
    let encoding = IndexEncoding {
        endian: if flags & 2 == 0 {
            Endian::Little
        } else {
            Endian::Big
        },
        crc32c: flags & 4 == 0,
    };
    let data_type = inp.pick(&DATA_TYPES);
    let ndim = 1 + inp.byte() as usize % 3;
    let mut inner = Vec::new();
    let mut shard = Vec::new();
    for _ in 0..ndim {
        let (i, n) = (1 + (inp.byte() % 4) as u64, 1 + (inp.byte() % 4) as u64);
        inner.push(i);
        shard.push(i * n);
    }
    let chunks = shard
        .iter()
        .zip(&inner)
        .map(|(s, i)| s / i)
        .product::<u64>() as usize;
    let endian = json!({"endian": "little"});
    let inner_codecs = match inp.byte() % 9 {
        0 => json!([{"name": "bytes", "configuration": endian}]),
        1 => json!([{"name": "bytes", "configuration": endian}, {"name": "crc32c"}]),
        2 => {
            json!([{"name": "bytes", "configuration": endian}, {"name": "zstd", "configuration": {"level": 1}}])
        }
        3 => {
            json!([{"name": "bytes", "configuration": endian}, {"name": "gzip", "configuration": {"level": 1}}])
        }
        4 => {
            json!([{"name": "bytes", "configuration": endian}, {"name": "numcodecs.lz4", "configuration": {}}])
        }
        5 => {
            json!([{"name": "bytes", "configuration": endian}, {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": data_type.size(), "blocksize": 0}}])
        }
        6 => {
            json!([{"name": "transpose", "configuration": {"order": (0..ndim).rev().collect::<Vec<_>>()}}, {"name": "bytes", "configuration": {"endian": "big"}}])
        }
        7 => json!([{"name": "sharding_indexed", "configuration": {
            "chunk_shape": vec![1; ndim],
            "codecs": [{"name": "bytes", "configuration": endian}],
            "index_codecs": [{"name": "bytes", "configuration": endian}],
            "index_location": "start"}}]),
        _ => {
            json!([{"name": "bytes", "configuration": {"endian": "big"}}, {"name": "numcodecs.crc32", "configuration": {}}])
        }
    };
    let mut index_codecs =
        vec![json!({"name": "bytes", "configuration": {"endian": encoding.endian.as_str()}})];
    if encoding.crc32c {
        index_codecs.push(json!({"name": "crc32c"}));
    }
    let spec = CodecSpec::new(
        "sharding_indexed",
        json!({
            "chunk_shape": inner,
            "codecs": inner_codecs,
            "index_codecs": index_codecs,
            "index_location": location.as_str(),
        }),
    );
    let other_chunks = match flags >> 3 & 3 {
        0 => chunks as u64 + 1,
        1 => inp.u64(),
        2 => u64::MAX / 16 + inp.byte() as u64,
        _ => 0,
    };
    let fill_value = if flags & 0x20 == 0 {
        FillValue::zero(data_type)
    } else {
        FillValue::from_bytes(vec![0xa5; data_type.size()])
    };
    ShardCase {
        repr: ChunkRepr {
            shape: shard,
            data_type,
            fill_value,
        },
        specs: vec![spec],
        location,
        encoding,
        chunks,
        other_chunks,
    }
}

fn index_slice(bytes: &[u8], index_len: usize, location: IndexLocation) -> Option<&[u8]> {
    let index_len = index_len.min(bytes.len());
    Some(match location {
        IndexLocation::Start => &bytes[..index_len],
        IndexLocation::End => &bytes[bytes.len() - index_len..],
    })
}

pub fn shard_index(data: &[u8]) {
    let mut inp = Input::new(data);
    let case = parse_shard(&mut inp);
    let bytes = inp.rest();
    let (chunks, location, encoding) = (case.chunks, case.location, case.encoding);
    let index_len = encoding.byte_len(chunks);

    // The index alone, then the reader; they must agree.
    let direct = index_slice(bytes, index_len, location)
        .map(|index| ShardIndex::decode(index, chunks, encoding))
        .and_then(Result::ok)
        .filter(|index| {
            bytes.len() >= index_len
                && index
                    .validate(bytes.len() as u64, index_len as u64, location)
                    .is_ok()
        });
    let reader = ShardReader::new(bytes, chunks, location, encoding);
    assert_eq!(
        direct.is_some(),
        reader.is_ok(),
        "ShardReader and ShardIndex::decode + validate disagree: {:?}",
        reader.as_ref().err()
    );
    if let Ok(reader) = &reader {
        let index = reader.index();
        assert_eq!(index.entries().len(), chunks);
        let stored = index_slice(bytes, index_len, location).unwrap_or_default();
        assert_eq!(
            index.encode(encoding),
            stored,
            "index does not re-encode to its bytes"
        );
        let (start, end) = match location {
            IndexLocation::Start => (index_len as u64, bytes.len() as u64),
            IndexLocation::End => (0, (bytes.len() - index_len) as u64),
        };
        let mut spans = Vec::new();
        for (i, entry) in index.entries().iter().enumerate() {
            let chunk = reader.chunk(i);
            match entry {
                None => assert!(chunk.is_none()),
                Some(loc) => {
                    let chunk = chunk.expect("a validated entry has bytes");
                    assert_eq!(chunk.len() as u64, loc.nbytes);
                    assert!(loc.offset >= start && loc.offset + loc.nbytes <= end);
                    let s = loc.offset as usize;
                    assert_eq!(chunk, &bytes[s..s + chunk.len()]);
                    spans.push((loc.offset, loc.offset + loc.nbytes));
                }
            }
        }
        spans.sort_unstable();
        assert!(
            spans.windows(2).all(|w| w[0].1 <= w[1].0),
            "overlapping inner chunks"
        );
        assert!(reader.chunk(chunks).is_none());
    }

    // Another inner chunk count: absurd ones must be refused, not overflow or allocate.
    if let Ok(other) = usize::try_from(case.other_chunks) {
        crate::probe::arm();
        let r = ShardReader::new(bytes, other, location, encoding);
        let peak = crate::probe::disarm();
        assert!(
            peak <= 2 * bytes.len() + 4096,
            "allocated {peak} bytes for {other} chunks"
        );
        if let Ok(r) = r {
            assert_eq!(r.index().entries().len(), other);
        }
    }

    // The whole shard through the codec.
    if let Ok(chain) = build_chain(&case.specs, &case.repr) {
        decode_and_check(&chain, &case.specs, &case.repr, bytes);
    }
}
