//! The `attributes.json` of an N5 group or dataset, and how a dataset becomes the core's array model.
//!
//! N5 lists a dataset's `dimensions` and `blockSize` with the fastest-varying axis first and stores
//! each block's elements in that (column-major) order, big endian. zshard keeps the axis order as
//! tensorstore's `n5` driver shows it (its shape is `dimensions`), so a block is a Fortran-order
//! chunk: the chain is `transpose` (reversed axes) + big-endian `bytes`, as for a Zarr v2 `order: F`
//! array.

use serde::Deserialize;
use serde_json::{json, Map, Value};
use zshard_core::{checked_byte_size, ArrayMeta, ChunkKeyEncoding, CodecSpec, DataType, FillValue};

use crate::error::{Error, Result};

/// The keys of `attributes.json` that describe a dataset (not carried over as user attributes); `n5`
/// is the container's format version at the root.
pub const RESERVED_KEYS: &[&str] = &[
    "dimensions",
    "blockSize",
    "dataType",
    "compression",
    "compressionType",
    "n5",
];

/// How a dataset's blocks are compressed (the N5 `compression` object; its levels and block sizes
/// only matter when writing, so only what decoding needs is kept).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Compression {
    /// `raw`: the elements as they are.
    Raw,
    /// `gzip`: gzip, or zlib framing with `useZlib: true`.
    Gzip {
        /// Whether the stream is zlib (`useZlib`) rather than gzip.
        use_zlib: bool,
    },
    /// `bzip2`.
    Bzip2,
    /// `blosc` (c-blosc frames).
    Blosc,
    /// `xz` (the xz container).
    Xz,
    /// `lz4`: lz4-java's LZ4Block stream, as n5-java writes it.
    Lz4,
    /// `zstd` (zstd frames).
    Zstd,
}

impl Compression {
    /// The N5 `type` name.
    pub fn name(&self) -> &'static str {
        match self {
            Compression::Raw => "raw",
            Compression::Gzip { .. } => "gzip",
            Compression::Bzip2 => "bzip2",
            Compression::Blosc => "blosc",
            Compression::Xz => "xz",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }

    /// The zshard codec that decodes it (`None` for `raw` and `lz4`, which need none or their own).
    pub(crate) fn codec_spec(&self) -> Option<CodecSpec> {
        let (name, config) = match self {
            Compression::Raw | Compression::Lz4 => return None,
            Compression::Gzip { use_zlib: false } => ("gzip", json!({})),
            Compression::Gzip { use_zlib: true } => ("numcodecs.zlib", json!({})),
            Compression::Bzip2 => ("numcodecs.bz2", json!({})),
            Compression::Blosc => ("blosc", json!({})),
            Compression::Xz => ("numcodecs.lzma", json!({"format": 1})),
            Compression::Zstd => ("zstd", json!({})),
        };
        Some(CodecSpec::new(name, config))
    }
}

/// The dataset keys of `attributes.json` as N5 writes them.
#[derive(Deserialize)]
struct DatasetDoc {
    dimensions: Vec<u64>,
    #[serde(rename = "blockSize")]
    block_size: Vec<u64>,
    #[serde(rename = "dataType")]
    data_type: String,
    compression: Option<CompressionDoc>,
    /// N5 before 1.0 named the compression by type alone.
    #[serde(rename = "compressionType")]
    compression_type: Option<String>,
}

#[derive(Deserialize)]
struct CompressionDoc {
    #[serde(rename = "type")]
    kind: String,
    #[serde(rename = "useZlib", default)]
    use_zlib: bool,
}

/// One N5 dataset: what its `attributes.json` says.
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    /// Extent per axis, in N5's axis order (which zshard keeps, as tensorstore does).
    pub dimensions: Vec<u64>,
    /// Block extent per axis.
    pub block_size: Vec<u64>,
    /// The element type.
    pub data_type: DataType,
    /// How blocks are compressed.
    pub compression: Compression,
    /// Every other attribute (user attributes), in document order.
    pub attributes: Map<String, Value>,
}

/// What an `attributes.json` describes.
#[derive(Clone, Debug, PartialEq)]
pub enum Attributes {
    /// A group (no `dimensions`), with its user attributes.
    Group(Map<String, Value>),
    /// A dataset.
    Dataset(Box<Dataset>),
}

/// Whether a parsed `attributes.json` is the root of an N5 container: it has the `n5` version or
/// describes a dataset (tensorstore writes a lone dataset without `n5`).
pub fn is_n5_root(doc: &Value) -> bool {
    doc.get("n5").is_some() || (doc.get("dimensions").is_some() && doc.get("dataType").is_some())
}

/// Parses an `attributes.json` (`key` names it in messages).
pub fn parse_attributes(key: &str, bytes: &[u8]) -> Result<Attributes> {
    let metadata = |reason: String| Error::Metadata {
        key: key.to_string(),
        reason,
    };
    let doc: Value =
        serde_json::from_slice(bytes).map_err(|e| metadata(format!("invalid JSON: {e}")))?;
    let Value::Object(object) = doc else {
        return Err(metadata("not a JSON object".into()));
    };
    let user = || -> Map<String, Value> {
        object
            .iter()
            .filter(|(k, _)| !RESERVED_KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    if !object.contains_key("dimensions") {
        return Ok(Attributes::Group(user()));
    }
    let dataset: DatasetDoc = serde_json::from_value(Value::Object(object.clone()))
        .map_err(|e| metadata(format!("invalid dataset attributes: {e}")))?;
    let compression = match (dataset.compression, dataset.compression_type) {
        (Some(doc), _) => compression(key, &doc.kind, doc.use_zlib)?,
        (None, Some(kind)) => compression(key, &kind, false)?,
        // N5 defaults to raw when neither is given.
        (None, None) => Compression::Raw,
    };
    let data_type = data_type(&dataset.data_type).ok_or_else(|| {
        metadata(format!(
            "dataType {:?} is not supported (uint8..uint64, int8..int64, float32, float64)",
            dataset.data_type
        ))
    })?;
    check_geometry(key, &dataset.dimensions, &dataset.block_size, data_type)?;
    Ok(Attributes::Dataset(Box::new(Dataset {
        dimensions: dataset.dimensions,
        block_size: dataset.block_size,
        data_type,
        compression,
        attributes: user(),
    })))
}

fn compression(key: &str, kind: &str, use_zlib: bool) -> Result<Compression> {
    Ok(match kind {
        "raw" => Compression::Raw,
        "gzip" => Compression::Gzip { use_zlib },
        "bzip2" => Compression::Bzip2,
        "blosc" => Compression::Blosc,
        "xz" => Compression::Xz,
        "lz4" => Compression::Lz4,
        "zstd" => Compression::Zstd,
        other => {
            return Err(Error::UnsupportedCompression {
                key: key.to_string(),
                name: other.to_string(),
            })
        }
    })
}

/// N5's data type names (the numeric types; `object` blocks hold no array elements).
fn data_type(name: &str) -> Option<DataType> {
    Some(match name {
        "uint8" => DataType::UInt8,
        "uint16" => DataType::UInt16,
        "uint32" => DataType::UInt32,
        "uint64" => DataType::UInt64,
        "int8" => DataType::Int8,
        "int16" => DataType::Int16,
        "int32" => DataType::Int32,
        "int64" => DataType::Int64,
        "float32" => DataType::Float32,
        "float64" => DataType::Float64,
        _ => return None,
    })
}

/// At least one axis, equal ranks, blocks of at least one element per axis whose byte size fits
/// the buffers zshard allocates.
fn check_geometry(key: &str, dimensions: &[u64], block_size: &[u64], dt: DataType) -> Result<()> {
    let metadata = |reason: String| Error::Metadata {
        key: key.to_string(),
        reason,
    };
    if dimensions.is_empty() {
        return Err(metadata(
            "dimensions is empty (N5 datasets have at least one axis)".into(),
        ));
    }
    if dimensions.len() != block_size.len() {
        return Err(metadata(format!(
            "dimensions has {} axes but blockSize {}",
            dimensions.len(),
            block_size.len()
        )));
    }
    if block_size.contains(&0) {
        return Err(metadata(format!(
            "blockSize {block_size:?} has a zero extent"
        )));
    }
    if block_size.iter().any(|&b| u32::try_from(b).is_err()) {
        return Err(metadata(format!(
            "blockSize {block_size:?} does not fit the block header's 32-bit extents"
        )));
    }
    checked_byte_size("blockSize", block_size, dt.size())
        .map(|_| ())
        .map_err(|e| metadata(e.to_string()))
}

impl Dataset {
    /// The dataset as the core's array model: N5's axis order, blocks as Fortran-order big-endian
    /// chunks (see the module documentation) padded to `blockSize` by the reader, fill value 0 (what
    /// N5 reads for a missing block), keys `i/j/k`.
    pub fn array_meta(&self) -> ArrayMeta {
        let ndim = self.dimensions.len();
        let mut codecs = Vec::new();
        if ndim > 1 {
            codecs.push(CodecSpec::new(
                "transpose",
                json!({"order": (0..ndim).rev().collect::<Vec<_>>()}),
            ));
        }
        codecs.push(CodecSpec::new("bytes", json!({"endian": "big"})));
        ArrayMeta {
            shape: self.dimensions.clone(),
            data_type: self.data_type,
            fill_value: FillValue::zero(self.data_type),
            chunk_shape: self.block_size.clone(),
            codecs,
            chunk_key_encoding: ChunkKeyEncoding::V2 { separator: '/' },
            attributes: self.attributes.clone(),
            dimension_names: None,
            rectilinear: None,
            sharded: None,
            warnings: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dataset_as_tensorstore_writes_it() {
        let doc = br#"{"blockSize":[2,3],"compression":{"level":-1,"type":"gzip","useZlib":false},
            "dataType":"uint16","dimensions":[5,7],"resolution":[4,4]}"#;
        let Attributes::Dataset(ds) = parse_attributes("a/attributes.json", doc).expect("ok")
        else {
            panic!("a dataset")
        };
        assert_eq!(ds.dimensions, vec![5, 7]);
        assert_eq!(ds.block_size, vec![2, 3]);
        assert_eq!(ds.data_type, DataType::UInt16);
        assert_eq!(ds.compression, Compression::Gzip { use_zlib: false });
        assert_eq!(
            ds.attributes,
            json!({"resolution": [4, 4]})
                .as_object()
                .expect("ok")
                .clone()
        );
        let meta = ds.array_meta();
        assert_eq!(meta.shape, vec![5, 7]);
        assert_eq!(meta.chunk_shape, vec![2, 3]);
        let names: Vec<_> = meta.codecs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["transpose", "bytes"]);
        assert_eq!(meta.chunk_key_encoding.key(&[1, 2]), "1/2");
    }

    #[test]
    fn groups_old_compression_types_and_refusals() {
        let group =
            parse_attributes("attributes.json", br#"{"n5":"4.0.0","scale":2}"#).expect("ok");
        assert_eq!(
            group,
            Attributes::Group(json!({"scale": 2}).as_object().expect("ok").clone())
        );
        let old =
            br#"{"dimensions":[4],"blockSize":[4],"dataType":"int8","compressionType":"bzip2"}"#;
        let Attributes::Dataset(ds) = parse_attributes("x", old).expect("ok") else {
            panic!("a dataset")
        };
        assert_eq!(ds.compression, Compression::Bzip2);
        let err = |doc: &str| {
            parse_attributes("d/attributes.json", doc.as_bytes())
                .expect_err("an error")
                .to_string()
        };
        assert_eq!(
            err(r#"{"dimensions":[4],"blockSize":[4],"dataType":"int8","compression":{"type":"jpeg"}}"#),
            "d/attributes.json: compression \"jpeg\" is not supported (raw, gzip, bzip2, blosc, xz, lz4, zstd)"
        );
        assert!(
            err(r#"{"dimensions":[4],"blockSize":[4],"dataType":"object"}"#)
                .contains("dataType \"object\"")
        );
        assert!(
            err(r#"{"dimensions":[4,4],"blockSize":[4],"dataType":"int8"}"#)
                .contains("2 axes but blockSize 1")
        );
        assert!(
            err(r#"{"dimensions":[4],"blockSize":[0],"dataType":"int8"}"#).contains("zero extent")
        );
        assert!(err(r#"{"dimensions":[],"blockSize":[],"dataType":"int8"}"#)
            .contains("at least one axis"));
        assert!(err(r#"{"dimensions":[4],"dataType":"int8"}"#).contains("blockSize"));
        assert!(err("[1]").contains("not a JSON object"));
        assert!(is_n5_root(&json!({"n5": "2.0.0"})));
        assert!(is_n5_root(&json!({"dimensions": [1], "dataType": "int8"})));
        assert!(!is_n5_root(&json!({"zarr_format": 2})));
    }
}
