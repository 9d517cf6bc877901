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
    "numcodecs.bitround",
];

/// Array-to-bytes codecs: what a v3 chain has exactly one of, after its array filters.
const ARRAY_TO_BYTES: &[&str] = &[
    "bytes",
    "vlen-utf8",
    "vlen-bytes",
    "sharding_indexed",
    "numcodecs.pcodec",
    "numcodecs.zfpy",
    "n5_default",
    "zfp",
];

/// Codecs zshard decodes but does not encode: a chain holding one cannot be written.
const DECODE_ONLY: &[&str] = &["numcodecs.zfpy", "n5_default", "zfp"];

/// Codecs zshard reads from Zarr v2 that no Zarr v3 reader (zarr-python 3.1) takes.
const NO_V3_CODEC: &[&str] = &[
    "numcodecs.categorize",
    "numcodecs.json2",
    "numcodecs.msgpack2",
];

/// Why the chain `specs` (as zshard reads a source: Zarr v2 filters in their v2 place) is not a
/// valid Zarr v3 chain, or `None` when it is one. Zarr v2 applies `delta`, `fixedscaleoffset`,
/// `quantize`, `astype` and `packbits` to the bytes after the byte order is set; v3 readers
/// (zarr-python 3) take them only as array codecs before `bytes`. `categorize`, `json2` and `msgpack2` have no v3 codec.
pub fn v3_form_problem(specs: &[CodecSpec]) -> Option<String> {
    if let Some(c) = specs
        .iter()
        .find(|c| NO_V3_CODEC.contains(&c.name.as_str()))
    {
        return Some(format!("{} has no Zarr v3 codec", c.name));
    }
    if let Some(c) = specs
        .iter()
        .find(|c| DECODE_ONLY.contains(&c.name.as_str()))
    {
        return Some(format!("{} is read but not written by zshard", c.name));
    }
    let array_to_bytes = specs
        .iter()
        .position(|c| ARRAY_TO_BYTES.contains(&c.name.as_str()))?;
    specs[array_to_bytes + 1..]
        .iter()
        .find(|c| ARRAY_FILTERS.contains(&c.name.as_str()))
        .map(|c| {
            format!(
                "{} follows {} (a Zarr v2 filter): Zarr v3 readers take it only before {}",
                c.name, specs[array_to_bytes].name, specs[array_to_bytes].name
            )
        })
}

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
    } else if spec.name == "numcodecs.bitround" {
        // Rounded floats are floats of the same type.
        repr.data_type
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
