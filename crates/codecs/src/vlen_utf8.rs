//! `vlen-utf8`: the array→bytes codec of variable-length strings (v3 `string`, v2 `|O` arrays whose
//! first filter is numcodecs' `vlen-utf8`). Its byte layout is also the in-memory form of a decoded
//! string chunk (see [`zshard_core::vlen_ranges`]), so coding checks the layout and the UTF-8 of every
//! element, as numcodecs does when it builds Python strings, and copies nothing else.

use std::sync::Arc;

use zshard_core::{vlen_ranges, ArrayToBytesCodec, ChunkRepr, CodecSpec, DataType, Error, Result};

use crate::error::invalid;
use crate::registry::Codec;

const NAME: &str = "vlen-utf8";

/// The most string bytes one chunk may decode to. String lengths are not in the metadata, so this is
/// the bound that keeps a chunk which lies about its size from exhausting memory.
pub const MAX_STRING_CHUNK_BYTES: usize = 1 << 30;

#[derive(Debug)]
pub(crate) struct VlenUtf8Codec;

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    if repr.data_type != DataType::String {
        return Err(invalid(
            &spec.name,
            format!("encodes string arrays, not {}", repr.data_type),
        ));
    }
    Ok(Codec::ArrayToBytes(Arc::new(VlenUtf8Codec)))
}

/// Checks the layout holds the chunk's elements, each valid UTF-8.
fn check(data: &[u8], repr: &ChunkRepr) -> Result<()> {
    let ranges = vlen_ranges(data, repr.elements() as usize)?;
    for (i, range) in ranges.into_iter().enumerate() {
        if let Err(e) = std::str::from_utf8(&data[range]) {
            return Err(Error::codec(
                NAME,
                format!("element {i} is not valid UTF-8 ({e})"),
            ));
        }
    }
    Ok(())
}

impl ArrayToBytesCodec for VlenUtf8Codec {
    fn encode(&self, data: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        check(&data, repr)?;
        Ok(data)
    }

    fn decode(&self, encoded: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        check(&encoded, repr)?;
        Ok(encoded)
    }

    fn max_encoded_len(&self, repr: &ChunkRepr) -> usize {
        (repr.elements() as usize)
            .saturating_add(1)
            .saturating_mul(4)
            .saturating_add(MAX_STRING_CHUNK_BYTES)
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new(NAME, serde_json::json!({}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zshard_core::{vlen_encode, FillValue};

    fn repr(n: u64) -> ChunkRepr {
        ChunkRepr {
            shape: vec![n],
            data_type: DataType::String,
            fill_value: FillValue::zero(DataType::String),
        }
    }

    #[test]
    fn checks_count_and_utf8() {
        let good = vlen_encode(2, ["a".as_bytes(), "\u{e9}t\u{e9}".as_bytes()].into_iter())
            .expect("encode");
        assert_eq!(
            VlenUtf8Codec.decode(good.clone(), &repr(2)).ok(),
            Some(good.clone())
        );
        assert!(VlenUtf8Codec.decode(good.clone(), &repr(3)).is_err());
        let bad = vlen_encode(1, [&[0xff_u8, 0xfe][..]].into_iter()).expect("encode");
        let err = VlenUtf8Codec
            .decode(bad, &repr(1))
            .expect_err("invalid UTF-8");
        assert!(err.to_string().contains("element 0"), "{err}");
    }
}
