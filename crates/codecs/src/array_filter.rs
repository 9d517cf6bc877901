//! numcodecs filters placed before `bytes` in a v3 chain, as zarr-python 3 writes them
//! (`[numcodecs.delta, bytes, zstd]`): array→array codecs whose arithmetic is that of the v2 filter of
//! the same name. Decoded chunks are little-endian C-order elements, which is the byte layout the v2
//! filter sees in a little-endian array, so the filter's implementation is reused as is; only the
//! chunk representation after it (its element type, and for `packbits` its shape) is new.

use std::sync::Arc;

use zshard_core::{
    ArrayToArrayCodec, BytesToBytesCodec, ChunkRepr, CodecSpec, DataType, Error, FillValue, Result,
};

use crate::config::string;
use crate::error::invalid;

/// The numcodecs filters zarr-python 3 writes as array→array codecs.
pub(crate) const ARRAY_FILTERS: &[&str] = &[
    "numcodecs.delta",
    "numcodecs.fixedscaleoffset",
    "numcodecs.quantize",
    "numcodecs.astype",
    "numcodecs.packbits",
];

#[derive(Debug)]
pub(crate) struct ArrayFilter {
    filter: Arc<dyn BytesToBytesCodec>,
    /// Element type after encoding.
    encoded_type: DataType,
    /// `packbits` turns any shape into one axis of `1 + ceil(n / 8)` bytes.
    packs_bits: bool,
}

/// Wraps filter `filter` built from `spec` as an array→array codec for chunks of `repr`.
pub(crate) fn wrap(
    spec: &CodecSpec,
    filter: Arc<dyn BytesToBytesCodec>,
    repr: &ChunkRepr,
) -> crate::Result<ArrayFilter> {
    if repr.data_type.is_variable() {
        return Err(invalid(&spec.name, "cannot filter variable-length strings"));
    }
    let packs_bits = spec.name == "numcodecs.packbits";
    let encoded_type = if packs_bits {
        DataType::UInt8
    } else {
        let key = if spec.name == "numcodecs.astype" {
            "encode_dtype"
        } else if spec.get("astype").is_some() {
            "astype"
        } else {
            "dtype"
        };
        let text =
            string(spec, key).ok_or_else(|| invalid(&spec.name, format!("missing {key}")))?;
        DataType::from_v2_typestr(text)?.0
    };
    Ok(ArrayFilter {
        filter,
        encoded_type,
        packs_bits,
    })
}

impl ArrayToArrayCodec for ArrayFilter {
    fn encoded_repr(&self, decoded: &ChunkRepr) -> Result<ChunkRepr> {
        let shape = if self.packs_bits {
            vec![1 + decoded.elements().div_ceil(8)]
        } else {
            decoded.shape.clone()
        };
        Ok(ChunkRepr {
            shape,
            data_type: self.encoded_type,
            fill_value: FillValue::zero(self.encoded_type),
        })
    }

    fn encode(&self, data: Vec<u8>, _decoded: &ChunkRepr) -> Result<Vec<u8>> {
        self.filter.encode(&data)
    }

    fn decode(&self, data: Vec<u8>, decoded: &ChunkRepr) -> Result<Vec<u8>> {
        let expected = decoded.byte_len();
        let out = self.filter.decode(&data, expected)?;
        if out.len() != expected {
            return Err(Error::DecodedSize {
                expected,
                actual: out.len(),
            });
        }
        Ok(out)
    }

    fn spec(&self) -> CodecSpec {
        self.filter.spec()
    }
}
