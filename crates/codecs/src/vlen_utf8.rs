//! `vlen-utf8` and `vlen-bytes`: the array→bytes codecs of variable-length strings (v3 `string`, v2
//! `|O` arrays whose first filter is numcodecs' `vlen-utf8`) and bytes (v3 `variable_length_bytes`, v2
//! `|O` with `vlen-bytes`). numcodecs writes both in one byte layout, which is also the in-memory form
//! of a decoded chunk of either type (see [`zshard_core::vlen_ranges`]), so coding checks the layout
//! (and, for strings, the UTF-8 of every element, as numcodecs does when it builds Python strings) and
//! copies nothing else.

use std::sync::Arc;

use zshard_core::{vlen_ranges, ArrayToBytesCodec, ChunkRepr, CodecSpec, DataType, Error, Result};

use crate::error::invalid;
use crate::registry::Codec;

/// The most string bytes one chunk may decode to. String lengths are not in the metadata, so this is
/// the bound that keeps a chunk which lies about its size from exhausting memory.
pub const MAX_STRING_CHUNK_BYTES: usize = 1 << 30;

/// One of the two variable-length layouts: `vlen-utf8` (`utf8`) or `vlen-bytes`.
#[derive(Debug)]
pub(crate) struct VlenCodec {
    utf8: bool,
}

impl VlenCodec {
    fn name(&self) -> &'static str {
        if self.utf8 {
            "vlen-utf8"
        } else {
            "vlen-bytes"
        }
    }
}

/// Builds `vlen-utf8`, which encodes `string` arrays.
pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    build_for(spec, repr, DataType::String)
}

/// Builds `vlen-bytes`, which encodes `variable_length_bytes` arrays.
pub(crate) fn build_bytes(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    build_for(spec, repr, DataType::Bytes)
}

fn build_for(spec: &CodecSpec, repr: &ChunkRepr, data_type: DataType) -> crate::Result<Codec> {
    if repr.data_type != data_type {
        return Err(invalid(
            &spec.name,
            format!("encodes {data_type} arrays, not {}", repr.data_type),
        ));
    }
    Ok(Codec::ArrayToBytes(Arc::new(VlenCodec {
        utf8: data_type == DataType::String,
    })))
}

impl VlenCodec {
    /// Checks the layout holds the chunk's elements, each valid UTF-8 for strings.
    fn check(&self, data: &[u8], repr: &ChunkRepr) -> Result<()> {
        let ranges = vlen_ranges(data, repr.elements() as usize)?;
        if !self.utf8 {
            return Ok(());
        }
        for (i, range) in ranges.into_iter().enumerate() {
            if let Err(e) = std::str::from_utf8(&data[range]) {
                return Err(Error::codec(
                    self.name(),
                    format!("element {i} is not valid UTF-8 ({e})"),
                ));
            }
        }
        Ok(())
    }
}

impl ArrayToBytesCodec for VlenCodec {
    fn encode(&self, data: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        self.check(&data, repr)?;
        Ok(data)
    }

    fn decode(&self, encoded: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        self.check(&encoded, repr)?;
        Ok(encoded)
    }

    fn max_encoded_len(&self, repr: &ChunkRepr) -> usize {
        (repr.elements() as usize)
            .saturating_add(1)
            .saturating_mul(4)
            .saturating_add(MAX_STRING_CHUNK_BYTES)
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new(self.name(), serde_json::json!({}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zshard_core::{vlen_encode, FillValue};

    const UTF8: VlenCodec = VlenCodec { utf8: true };

    fn repr(n: u64) -> ChunkRepr {
        typed(n, DataType::String)
    }

    fn typed(n: u64, data_type: DataType) -> ChunkRepr {
        ChunkRepr {
            shape: vec![n],
            data_type,
            fill_value: FillValue::zero(data_type),
        }
    }

    #[test]
    fn checks_count_and_utf8() {
        let good = vlen_encode(2, ["a".as_bytes(), "\u{e9}t\u{e9}".as_bytes()].into_iter())
            .expect("encode");
        assert_eq!(UTF8.decode(good.clone(), &repr(2)).ok(), Some(good.clone()));
        assert!(UTF8.decode(good.clone(), &repr(3)).is_err());
        let bad = vlen_encode(1, [&[0xff_u8, 0xfe][..]].into_iter()).expect("encode");
        let err = UTF8.decode(bad, &repr(1)).expect_err("invalid UTF-8");
        assert!(err.to_string().contains("element 0"), "{err}");
    }

    #[test]
    fn bytes_take_any_element_and_only_their_type() {
        let raw = vlen_encode(2, [&[0xff_u8, 0][..], b""].into_iter()).expect("encode");
        let codec = VlenCodec { utf8: false };
        assert_eq!(
            codec.decode(raw.clone(), &typed(2, DataType::Bytes)).ok(),
            Some(raw)
        );
        assert_eq!(codec.spec().name, "vlen-bytes");
        let spec = CodecSpec::new("vlen-bytes", serde_json::json!({}));
        assert!(build_bytes(&spec, &typed(2, DataType::String)).is_err());
        assert!(build(&spec, &typed(2, DataType::Bytes)).is_err());
    }
}
