//! Zarr v3 metadata documents for the output (pure: builds JSON, writes nothing).

use serde_json::{json, Map, Value};
use zshard_core::{
    ChunkKeyEncoding, CodecSpec, DataType, FillValue, IndexEncoding, IndexLocation, ShardingConfig,
};

/// The chunk key encoding of every array zshard writes: `c/0/1`.
pub const OUTPUT_KEY_ENCODING: ChunkKeyEncoding = ChunkKeyEncoding::Default { separator: '/' };

/// What the `zarr.json` of a sharded output array says.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardedArrayMetadata {
    /// Extent of the array in elements.
    pub shape: Vec<u64>,
    /// The element type.
    pub data_type: DataType,
    /// The value of elements no shard stores; shards of nothing but it are not written.
    pub fill_value: FillValue,
    /// Extent of one shard in elements: the array's `chunk_grid` chunk shape.
    pub shard_shape: Vec<u64>,
    /// Extent of one inner chunk in elements; divides `shard_shape` in every dimension.
    pub inner_shape: Vec<u64>,
    /// The inner codecs (`bytes` first).
    pub inner_codecs: Vec<CodecSpec>,
    /// Where each shard's index goes.
    pub index_location: IndexLocation,
    /// User attributes, copied from the source.
    pub attributes: Map<String, Value>,
    /// The source's dimension names, written as `dimension_names` when present.
    pub dimension_names: Option<Vec<Option<String>>>,
}

impl ShardedArrayMetadata {
    /// The configuration of the array's one codec: zshard writes every index as `bytes` (little
    /// endian) + `crc32c`.
    pub fn sharding(&self) -> ShardingConfig {
        ShardingConfig::new(
            self.inner_shape.clone(),
            self.inner_codecs.clone(),
            IndexEncoding::default(),
            self.index_location,
        )
    }

    /// The array's `zarr.json` document: a regular grid of shards, `c/0/1` keys, one
    /// `sharding_indexed` codec.
    pub fn to_json(&self) -> Value {
        let mut doc = json!({
            "zarr_format": 3,
            "node_type": "array",
            "shape": self.shape,
            "data_type": self.data_type.to_v3_json(),
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": self.shard_shape}},
            "chunk_key_encoding": OUTPUT_KEY_ENCODING.to_v3_json(),
            "fill_value": self.fill_value.to_v3_json(self.data_type),
            "codecs": [self.sharding().to_codec_spec()],
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

/// The `zarr.json` of a group with the documents of every node below it consolidated into it, as
/// zarr-python 3.1's `consolidate_metadata` writes it (and `open_consolidated` and xarray read it):
/// one flat `consolidated_metadata.metadata` object keyed by paths relative to the group, depth
/// first then by name, each entry the node's own `zarr.json`; each group below carries an empty
/// consolidated marker of its own (its members are listed flat at the top).
pub fn consolidated_group_json(
    attributes: &Map<String, Value>,
    members: impl IntoIterator<Item = (String, Value)>,
) -> Value {
    let mut members: Vec<(String, Value)> = members.into_iter().collect();
    members.sort_by(|(a, _), (b, _)| (a.matches('/').count(), a).cmp(&(b.matches('/').count(), b)));
    let metadata: Map<String, Value> = members
        .into_iter()
        .map(|(path, mut doc)| {
            if let Some(group) = doc.as_object_mut().filter(|d| d["node_type"] == "group") {
                group
                    .entry("consolidated_metadata")
                    .or_insert_with(|| inline_consolidated(Map::new()));
            }
            (path, doc)
        })
        .collect();
    let mut doc = group_json(attributes);
    if let Some(map) = doc.as_object_mut() {
        map.insert(
            "consolidated_metadata".into(),
            inline_consolidated(metadata),
        );
    }
    doc
}

/// [`consolidated_group_json`] as the bytes of its `zarr.json` ([`crate::document_bytes`]'s), each
/// member's document made only while it is written: `paths[i]`'s document is `doc_of(i)`. Byte for
/// byte the same document, without holding every member's as a JSON value at once (30,000 arrays
/// took 300 MB that way; issue 31).
pub fn consolidated_group_bytes(
    attributes: &Map<String, Value>,
    paths: &[String],
    doc_of: impl Fn(usize) -> Value,
) -> bytes::Bytes {
    use serde::ser::{SerializeMap, Serializer};
    let mut order: Vec<usize> = (0..paths.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&paths[a], &paths[b]);
        (a.matches('/').count(), a).cmp(&(b.matches('/').count(), b))
    });
    struct Members<'a, F> {
        paths: &'a [String],
        order: Vec<usize>,
        doc_of: F,
    }
    impl<F: Fn(usize) -> Value> serde::Serialize for Members<'_, F> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(Some(self.order.len()))?;
            for &i in &self.order {
                let mut doc = (self.doc_of)(i);
                if let Some(group) = doc.as_object_mut().filter(|d| d["node_type"] == "group") {
                    group
                        .entry("consolidated_metadata")
                        .or_insert_with(|| inline_consolidated(Map::new()));
                }
                map.serialize_entry(&self.paths[i], &doc)?;
            }
            map.end()
        }
    }
    struct Consolidated<'a, F>(Members<'a, F>);
    impl<F: Fn(usize) -> Value> serde::Serialize for Consolidated<'_, F> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(Some(3))?;
            map.serialize_entry("kind", "inline")?;
            map.serialize_entry("must_understand", &false)?;
            map.serialize_entry("metadata", &self.0)?;
            map.end()
        }
    }
    // The members in the order of `group_json`, then the consolidated metadata.
    struct Document<'a, F> {
        attributes: &'a Map<String, Value>,
        consolidated: Consolidated<'a, F>,
    }
    impl<F: Fn(usize) -> Value> serde::Serialize for Document<'_, F> {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(Some(4))?;
            map.serialize_entry("zarr_format", &3)?;
            map.serialize_entry("node_type", "group")?;
            map.serialize_entry("attributes", self.attributes)?;
            map.serialize_entry("consolidated_metadata", &self.consolidated)?;
            map.end()
        }
    }
    let document = Document {
        attributes,
        consolidated: Consolidated(Members {
            paths,
            order,
            doc_of,
        }),
    };
    let mut text = serde_json::to_vec_pretty(&document).unwrap_or_default();
    text.push(b'\n');
    bytes::Bytes::from(text)
}

/// A `consolidated_metadata` member holding `metadata`.
fn inline_consolidated(metadata: Map<String, Value>) -> Value {
    json!({"kind": "inline", "must_understand": false, "metadata": metadata})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consolidated_bytes_are_the_consolidated_document() {
        let array = |n: u64| json!({"zarr_format": 3, "node_type": "array", "shape": [n]});
        let members = vec![
            ("b/x".to_string(), array(1)),
            ("a".to_string(), group_json(&Map::new())),
            ("b".to_string(), group_json(&Map::new())),
            ("a/y".to_string(), array(2)),
            ("c".to_string(), array(3)),
        ];
        let mut attributes = Map::new();
        attributes.insert("title".into(), json!("t"));
        let whole = crate::document_bytes(&consolidated_group_json(&attributes, members.clone()));
        let paths: Vec<String> = members.iter().map(|(p, _)| p.clone()).collect();
        let streamed = consolidated_group_bytes(&attributes, &paths, |i| members[i].1.clone());
        assert_eq!(
            String::from_utf8_lossy(&streamed),
            String::from_utf8_lossy(&whole)
        );
    }

    #[test]
    fn consolidated_group_document_lists_every_member_flat_as_zarr_python_does() {
        let attrs = |v: Value| v.as_object().cloned().unwrap_or_default();
        let array = sharded_uint16().to_json();
        let doc = consolidated_group_json(
            &attrs(json!({"title": "root"})),
            [
                ("a/b/z".to_string(), array.clone()),
                ("x".to_string(), array.clone()),
                ("a/b".to_string(), group_json(&Map::new())),
                ("a".to_string(), group_json(&attrs(json!({"k": 1})))),
                ("a/y".to_string(), array.clone()),
            ],
        );
        let empty = json!({"kind": "inline", "must_understand": false, "metadata": {}});
        assert_eq!(doc["attributes"], json!({"title": "root"}));
        assert_eq!(doc["node_type"], json!("group"));
        let consolidated = &doc["consolidated_metadata"];
        assert_eq!(consolidated["kind"], json!("inline"));
        assert_eq!(consolidated["must_understand"], json!(false));
        let metadata = consolidated["metadata"].as_object().expect("an object");
        let keys: Vec<&str> = metadata.keys().map(String::as_str).collect();
        assert_eq!(keys, ["a", "x", "a/b", "a/y", "a/b/z"]);
        assert_eq!(
            metadata["a"],
            json!({"zarr_format": 3, "node_type": "group", "attributes": {"k": 1},
                   "consolidated_metadata": empty})
        );
        assert_eq!(metadata["a/b"]["consolidated_metadata"], empty);
        assert_eq!(metadata["a/b/z"], array);
    }

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

    fn sharded_uint16() -> ShardedArrayMetadata {
        ShardedArrayMetadata {
            shape: vec![10, 7],
            data_type: DataType::UInt16,
            fill_value: FillValue::zero(DataType::UInt16),
            shard_shape: vec![8, 4],
            inner_shape: vec![4, 2],
            inner_codecs: vec![
                CodecSpec::new("bytes", json!({"endian": "little"})),
                CodecSpec::new("zstd", json!({"level": 3, "checksum": false})),
            ],
            index_location: IndexLocation::End,
            attributes: json!({"units": "K"})
                .as_object()
                .cloned()
                .unwrap_or_default(),
            dimension_names: None,
        }
    }

    /// The text zshard has always written (interoperability tests compare whole documents).
    #[test]
    fn array_document_text_is_unchanged() {
        let text = serde_json::to_string_pretty(&sharded_uint16().to_json()).expect("json");
        let expected = r#"{
  "zarr_format": 3,
  "node_type": "array",
  "shape": [
    10,
    7
  ],
  "data_type": "uint16",
  "chunk_grid": {
    "name": "regular",
    "configuration": {
      "chunk_shape": [
        8,
        4
      ]
    }
  },
  "chunk_key_encoding": {
    "name": "default",
    "configuration": {
      "separator": "/"
    }
  },
  "fill_value": 0,
  "codecs": [
    {
      "name": "sharding_indexed",
      "configuration": {
        "chunk_shape": [
          4,
          2
        ],
        "codecs": [
          {
            "name": "bytes",
            "configuration": {
              "endian": "little"
            }
          },
          {
            "name": "zstd",
            "configuration": {
              "level": 3,
              "checksum": false
            }
          }
        ],
        "index_codecs": [
          {
            "name": "bytes",
            "configuration": {
              "endian": "little"
            }
          },
          {
            "name": "crc32c"
          }
        ],
        "index_location": "end"
      }
    }
  ],
  "attributes": {
    "units": "K"
  }
}"#;
        assert_eq!(text, expected);
    }

    /// Reading the written configuration and writing it again gives the same JSON, member order
    /// included.
    #[test]
    fn written_sharding_configuration_round_trips() {
        for index_location in [IndexLocation::Start, IndexLocation::End] {
            let meta = ShardedArrayMetadata {
                index_location,
                ..sharded_uint16()
            };
            let doc = meta.to_json();
            let written = &doc["codecs"][0];
            let spec: CodecSpec = serde_json::from_value(written.clone()).expect("codec spec");
            let config = ShardingConfig::from_codec(&spec).expect("valid configuration");
            assert_eq!(config, meta.sharding());
            assert_eq!(
                serde_json::to_string(&config.to_codec_spec()).expect("json"),
                serde_json::to_string(written).expect("json")
            );
        }
    }
}
