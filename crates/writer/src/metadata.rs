//! Zarr v3 metadata documents for the output (pure: builds JSON, writes nothing).

use serde_json::{json, Map, Value};
use zshard_core::{ChunkKeyEncoding, CodecSpec, DataType, FillValue, IndexEncoding, IndexLocation};

/// The chunk key encoding of every array zshard writes: `c/0/1`.
pub const OUTPUT_KEY_ENCODING: ChunkKeyEncoding = ChunkKeyEncoding::Default { separator: '/' };

/// What the `zarr.json` of a sharded output array says.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardedArrayMetadata {
    pub shape: Vec<u64>,
    pub data_type: DataType,
    pub fill_value: FillValue,
    pub shard_shape: Vec<u64>,
    pub inner_shape: Vec<u64>,
    /// The inner codecs (`bytes` first).
    pub inner_codecs: Vec<CodecSpec>,
    pub index_location: IndexLocation,
    pub attributes: Map<String, Value>,
    pub dimension_names: Option<Vec<Option<String>>>,
}

fn index_codecs(encoding: IndexEncoding) -> Value {
    let mut codecs =
        vec![json!({"name": "bytes", "configuration": {"endian": encoding.endian.as_str()}})];
    if encoding.crc32c {
        codecs.push(json!({"name": "crc32c"}));
    }
    Value::Array(codecs)
}

impl ShardedArrayMetadata {
    pub fn to_json(&self) -> Value {
        let mut doc = json!({
            "zarr_format": 3,
            "node_type": "array",
            "shape": self.shape,
            "data_type": self.data_type.to_v3_json(),
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": self.shard_shape}},
            "chunk_key_encoding": OUTPUT_KEY_ENCODING.to_v3_json(),
            "fill_value": self.fill_value.to_v3_json(self.data_type),
            "codecs": [{
                "name": "sharding_indexed",
                "configuration": {
                    "chunk_shape": self.inner_shape,
                    "codecs": self.inner_codecs,
                    "index_codecs": index_codecs(IndexEncoding::default()),
                    "index_location": self.index_location.as_str(),
                }
            }],
            "attributes": self.attributes,
        });
        if let (Some(names), Some(map)) = (&self.dimension_names, doc.as_object_mut()) {
            map.insert("dimension_names".into(), json!(names));
        }
        doc
    }
}

/// The `zarr.json` of a group.
pub fn group_json(attributes: &Map<String, Value>) -> Value {
    json!({"zarr_format": 3, "node_type": "group", "attributes": attributes})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_document() {
        let meta = ShardedArrayMetadata {
            shape: vec![100, 100],
            data_type: DataType::Float32,
            fill_value: FillValue::from_v3_json(&json!("NaN"), DataType::Float32).expect("fill"),
            shard_shape: vec![64, 64],
            inner_shape: vec![32, 32],
            inner_codecs: vec![CodecSpec::new("bytes", json!({"endian": "little"}))],
            index_location: IndexLocation::Start,
            attributes: Map::new(),
            dimension_names: Some(vec![Some("y".into()), Some("x".into())]),
        };
        let doc = meta.to_json();
        assert_eq!(doc["fill_value"], json!("NaN"));
        assert_eq!(
            doc["codecs"][0]["configuration"]["index_location"],
            json!("start")
        );
        assert_eq!(
            doc["codecs"][0]["configuration"]["index_codecs"][1]["name"],
            json!("crc32c")
        );
        assert_eq!(doc["dimension_names"], json!(["y", "x"]));
        assert_eq!(
            doc["chunk_key_encoding"]["configuration"]["separator"],
            json!("/")
        );
    }
}
