//! Zarr v3 metadata (`zarr.json`).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value};
use zshard_core::{
    ArrayMeta, ChunkKeyEncoding, CodecSpec, DataType, FillValue, NodeKind, RectilinearGrid,
};

use crate::error::{metadata, Error, Result};

#[derive(Deserialize)]
struct ZarrJson {
    zarr_format: u8,
    node_type: String,
    #[serde(default)]
    attributes: Map<String, Value>,
    shape: Option<Vec<u64>>,
    data_type: Option<Value>,
    chunk_grid: Option<Value>,
    chunk_key_encoding: Option<Value>,
    fill_value: Option<Value>,
    codecs: Option<Vec<CodecSpec>>,
    dimension_names: Option<Vec<Option<String>>>,
    #[serde(default)]
    storage_transformers: Vec<Value>,
    #[serde(default)]
    consolidated_metadata: Option<Value>,
}

/// A parsed `zarr.json`: the node and, for groups written with consolidated metadata, the documents of
/// the nodes below it by relative path.
#[derive(Debug)]
pub struct ParsedNode {
    /// The group or array this document describes.
    pub kind: NodeKind,
    /// The `consolidated_metadata.metadata` member of a group, by path relative to the group; `None`
    /// when the group has none.
    pub consolidated: Option<Map<String, Value>>,
}

/// What a document takes parsed, for each of its JSON values, about: serde_json's `Value` (32
/// bytes), the slack of the lists and maps that hold it, and the run of a rectilinear chunk grid
/// (32 bytes, and the room its list grew into) when the value is one of its edges. Measured: `plan`
/// of 100,000, 200,000 and 400,000 alternating edges peaked at 28, 42 and 71 MB, 140 bytes an edge.
pub const PARSED_BYTES_PER_VALUE: u64 = 160;

/// The JSON values of `bytes` (objects, lists, strings, numbers, literals; object keys are not
/// values), counted from its text without parsing it: a document of many small values (the edges of
/// a rectilinear chunk grid) takes far more parsed than its text (a 9 MB `zarr.json` of 4.5 million
/// edges took 445 MB). Text that is not JSON counts as well as it can; the parser refuses it later.
pub fn json_values(bytes: &[u8]) -> u64 {
    let (mut values, mut in_string, mut escaped, mut in_scalar, mut after_string) =
        (0u64, false, false, false, false);
    for &b in bytes {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => (in_string, after_string) = (false, true),
                _ => {}
            }
            continue;
        }
        let scalar = b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.');
        if in_scalar && scalar {
            continue;
        }
        in_scalar = false;
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => continue,
            // The string before was a key.
            b':' if after_string => values = values.saturating_sub(1),
            b'"' => (values, in_string) = (values + 1, true),
            b'{' | b'[' => values += 1,
            _ if scalar => (values, in_scalar) = (values + 1, true),
            _ => {}
        }
        after_string = false;
    }
    values
}

/// Refuses a document at `key` whose parsed form would take more than half of `memory_limit`
/// (the rest is the run's), counted from its text before it is parsed (see [`json_values`]).
pub fn check_parse_cost(key: &str, bytes: &[u8], memory_limit: u64) -> Result<()> {
    let values = json_values(bytes);
    let parsed = (bytes.len() as u64).saturating_add(values.saturating_mul(PARSED_BYTES_PER_VALUE));
    let allowed = memory_limit / 2;
    if parsed <= allowed {
        return Ok(());
    }
    Err(metadata(
        key,
        format!(
            "a document of {values} JSON values ({}), which take about {} parsed, more than the memory limit of {} ({}) allows for one document ({}); list equal edges of a rectilinear chunk_grid as run-length pairs [edge, count], or use a larger memory limit",
            zshard_core::HumanBytes(bytes.len() as u64),
            zshard_core::HumanBytes(parsed),
            zshard_core::HumanBytes(memory_limit),
            zshard_core::Setting::MemoryLimit,
            zshard_core::HumanBytes(allowed),
        ),
    ))
}

/// [`parse_node`], refusing first a document that would not fit `memory_limit` parsed (see
/// [`check_parse_cost`]); `None`: no limit.
pub fn parse_node_within(key: &str, bytes: &[u8], memory_limit: Option<u64>) -> Result<ParsedNode> {
    if let Some(limit) = memory_limit {
        check_parse_cost(key, bytes, limit)?;
    }
    parse_node(key, bytes)
}

/// Parses a `zarr.json` document read from `key` (named in errors) into a group or array.
pub fn parse_node(key: &str, bytes: &[u8]) -> Result<ParsedNode> {
    let value: Value = serde_json::from_slice(bytes).map_err(|source| Error::Json {
        key: key.to_string(),
        source,
    })?;
    parse_value(key, value)
}

/// The members of a `zarr.json` that zshard reads (those of arrays and of groups).
const KNOWN_MEMBERS: [&str; 12] = [
    "zarr_format",
    "node_type",
    "attributes",
    "shape",
    "data_type",
    "chunk_grid",
    "chunk_key_encoding",
    "fill_value",
    "codecs",
    "dimension_names",
    "storage_transformers",
    "consolidated_metadata",
];

/// Refuses a document with a member zshard does not know, unless it is an object that says
/// `"must_understand": false`: the v3 core spec ("Extensions", must_understand) requires readers to
/// fail on any other, as zarr-python does, since such a member may change what the data means.
fn check_extensions(key: &str, value: &Value) -> Result<()> {
    let Some(members) = value.as_object() else {
        return Ok(());
    };
    let ignorable = |v: &Value| v.get("must_understand") == Some(&Value::Bool(false));
    match members
        .iter()
        .find(|(name, v)| !KNOWN_MEMBERS.contains(&name.as_str()) && !ignorable(v))
    {
        Some((name, _)) => Err(metadata(
            key,
            format!(
                "unknown extension field {name:?} must be understood (only fields that are an object with \"must_understand\": false may be ignored)"
            ),
        )),
        None => Ok(()),
    }
}

pub(crate) fn parse_value(key: &str, value: Value) -> Result<ParsedNode> {
    check_extensions(key, &value)?;
    let z: ZarrJson = serde_json::from_value(value).map_err(|source| Error::Json {
        key: key.to_string(),
        source,
    })?;
    if z.zarr_format != 3 {
        return Err(metadata(
            key,
            format!("zarr_format is {}, expected 3", z.zarr_format),
        ));
    }
    let consolidated = z
        .consolidated_metadata
        .as_ref()
        .and_then(|c| c.get("metadata"))
        .and_then(Value::as_object)
        .cloned();
    match z.node_type.as_str() {
        "group" => Ok(ParsedNode {
            kind: NodeKind::Group {
                attributes: z.attributes,
            },
            consolidated,
        }),
        "array" => Ok(ParsedNode {
            kind: NodeKind::Array(Box::new(array(key, z)?)),
            consolidated: None,
        }),
        other => Err(metadata(
            key,
            format!("node_type {other:?} is not array or group"),
        )),
    }
}

fn array(key: &str, z: ZarrJson) -> Result<ArrayMeta> {
    let missing = |field: &str| metadata(key, format!("missing {field}"));
    let shape = z.shape.ok_or_else(|| missing("shape"))?;
    let core = |source| Error::Core {
        key: key.to_string(),
        source,
    };
    let data_type = match z.data_type.ok_or_else(|| missing("data_type"))? {
        other @ (Value::String(_) | Value::Object(_)) => {
            DataType::from_v3_json(&other).map_err(core)?
        }
        other => return Err(metadata(key, format!("data_type {other} is not supported"))),
    };
    crate::v2::check_element_size(key, data_type)?;
    let fill_value = FillValue::from_v3_json(
        &z.fill_value.ok_or_else(|| missing("fill_value"))?,
        data_type,
    )
    .map_err(core)?;
    let grid = z.chunk_grid.ok_or_else(|| missing("chunk_grid"))?;
    let (chunk_shape, rectilinear) = chunk_grid(key, &grid, &shape)?;
    crate::v2::check_sizes(key, &shape, &chunk_shape, data_type)?;
    let encoding = z
        .chunk_key_encoding
        .ok_or_else(|| missing("chunk_key_encoding"))?;
    let separator = |default: char| match encoding["configuration"]["separator"].as_str() {
        None => Ok(default),
        Some(".") => Ok('.'),
        Some("/") => Ok('/'),
        Some(other) => Err(metadata(
            key,
            format!("chunk key separator {other:?} is not . or /"),
        )),
    };
    let chunk_key_encoding = match encoding["name"].as_str() {
        Some("default") => ChunkKeyEncoding::Default {
            separator: separator('/')?,
        },
        Some("v2") => ChunkKeyEncoding::V2 {
            separator: separator('.')?,
        },
        _ => {
            return Err(metadata(
                key,
                format!("chunk_key_encoding {} is not supported", encoding["name"]),
            ))
        }
    };
    if !z.storage_transformers.is_empty() {
        return Err(metadata(key, "storage_transformers are not supported"));
    }
    if let Some(names) = &z.dimension_names {
        if names.len() != shape.len() {
            return Err(metadata(
                key,
                "dimension_names does not match the number of dimensions",
            ));
        }
    }
    let meta = ArrayMeta {
        shape,
        data_type,
        fill_value,
        chunk_shape,
        rectilinear,
        codecs: z.codecs.ok_or_else(|| missing("codecs"))?,
        chunk_key_encoding,
        attributes: z.attributes,
        dimension_names: z.dimension_names,
        sharded: None,
        warnings: Vec::new(),
    };
    check_rectilinear_shards(key, &meta)?;
    Ok(meta)
}

/// The chunk shape and, for a rectilinear grid whose chunks differ in shape, the grid, from a
/// `chunk_grid` document (`regular`, or zarr-extensions' `rectilinear`).
fn chunk_grid(
    key: &str,
    grid: &Value,
    shape: &[u64],
) -> Result<(Vec<u64>, Option<Arc<RectilinearGrid>>)> {
    match grid["name"].as_str() {
        Some("regular") => {
            let chunk_shape: Vec<u64> = grid["configuration"]["chunk_shape"]
                .as_array()
                .and_then(|a| a.iter().map(Value::as_u64).collect())
                .ok_or_else(|| {
                    metadata(
                        key,
                        "chunk_grid.configuration.chunk_shape must be a list of integers",
                    )
                })?;
            if chunk_shape.len() != shape.len() || chunk_shape.contains(&0) {
                return Err(metadata(
                    key,
                    format!("chunk shape {chunk_shape:?} does not fit shape {shape:?}"),
                ));
            }
            Ok((chunk_shape, None))
        }
        Some("rectilinear") => {
            let rectilinear = RectilinearGrid::from_configuration(&grid["configuration"], shape)
                .map_err(|e| metadata(key, e.to_string()))?;
            // Chunks all of one shape (bare steps, one run-length pair) are a regular grid.
            Ok(match rectilinear.as_regular() {
                Some(chunk_shape) => (chunk_shape, None),
                None => (rectilinear.largest_chunk(), Some(Arc::new(rectilinear))),
            })
        }
        _ => Err(metadata(
            key,
            format!(
                "chunk_grid {} is not supported (regular, rectilinear)",
                grid["name"]
            ),
        )),
    }
}

/// Refuses shards on a rectilinear grid with an edge that is not a multiple of the inner chunk's:
/// the `sharding_indexed` codec splits every shard into whole inner chunks.
fn check_rectilinear_shards(key: &str, meta: &ArrayMeta) -> Result<()> {
    let (Some(grid), Some(Ok(config))) = (&meta.rectilinear, meta.sharding()) else {
        return Ok(());
    };
    if grid.divisible_by(&config.chunk_shape) {
        return Ok(());
    }
    Err(metadata(
        key,
        format!(
            "invalid chunk_grid: a rectilinear shard edge is not a multiple of the inner chunk shape {:?}",
            config.chunk_shape
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_values_are_counted_from_the_text() {
        let doc = br#"{"a": [1, -2.5e3, "x:\"y", true, null], "b": {"c": {}}, "d": []}"#;
        // The object, the list and its five items, b's object and c's, d's list.
        assert_eq!(json_values(doc), 10);
        assert_eq!(json_values(b"  "), 0);
        assert_eq!(json_values(b"[1,2,[3,4]]"), 6);
        let edges = format!("[{}]", vec!["1"; 1000].join(","));
        assert_eq!(json_values(edges.as_bytes()), 1001);
        let e = check_parse_cost("a/zarr.json", edges.as_bytes(), 100 << 10).expect_err("refused");
        assert_eq!(
            e.to_string(),
            "a/zarr.json: a document of 1001 JSON values (1.95 KiB), which take about 158.36 KiB parsed, more than the memory limit of 100.00 KiB (memory_limit) allows for one document (50.00 KiB); list equal edges of a rectilinear chunk_grid as run-length pairs [edge, count], or use a larger memory limit"
        );
        assert!(check_parse_cost("a/zarr.json", edges.as_bytes(), 1 << 20).is_ok());
    }

    #[test]
    fn parses_sharded_array() {
        let doc = br#"{"zarr_format":3,"node_type":"array","shape":[100,50],"data_type":"float32",
          "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[64,64]}},
          "chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},
          "fill_value":"NaN","codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[32,32],
          "codecs":[{"name":"bytes","configuration":{"endian":"little"}}],
          "index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},"crc32c"],"index_location":"end"}}],
          "attributes":{"a":1},"dimension_names":["y",null]}"#;
        let node = parse_node("x/zarr.json", doc).expect("parses");
        let NodeKind::Array(meta) = node.kind else {
            panic!("expected an array")
        };
        assert_eq!(meta.chunk_shape, vec![64, 64]);
        assert_eq!(meta.codecs[0].name, "sharding_indexed");
        assert_eq!(meta.chunk_key_encoding.key(&[1, 0]), "c/1/0");
        assert_eq!(meta.dimension_names, Some(vec![Some("y".into()), None]));
    }

    #[test]
    fn unknown_fields_are_refused_unless_they_need_not_be_understood() {
        let doc = |extra: &str| {
            format!(
                r#"{{"zarr_format":3,"node_type":"array","shape":[4],"data_type":"uint8",
                "chunk_grid":{{"name":"regular","configuration":{{"chunk_shape":[2]}}}},
                "chunk_key_encoding":{{"name":"default"}},"fill_value":0,
                "codecs":[{{"name":"bytes"}}]{extra}}}"#
            )
        };
        let refused = "a/zarr.json: unknown extension field \"ext\" must be understood (only fields that are an object with \"must_understand\": false may be ignored)";
        for extra in [
            r#","ext":{"must_understand":true}"#,
            r#","ext":{"must_understand":true,"configuration":{}}"#,
            r#","ext":{"configuration":{}}"#,
            r#","ext":1"#,
            r#","ext":{"must_understand":"false"}"#,
        ] {
            let e = parse_node("a/zarr.json", doc(extra).as_bytes())
                .expect_err(extra)
                .to_string();
            assert_eq!(e, refused, "{extra}");
        }
        for extra in ["", r#","ext":{"must_understand":false,"anything":[1]}"#] {
            let node = parse_node("a/zarr.json", doc(extra).as_bytes()).expect(extra);
            assert!(matches!(node.kind, NodeKind::Array(_)));
        }
        let group = br#"{"zarr_format":3,"node_type":"group","ext":{"must_understand":true}}"#;
        let e = parse_node("g/zarr.json", group)
            .expect_err("group")
            .to_string();
        assert!(
            e.contains("g/zarr.json: unknown extension field \"ext\""),
            "{e}"
        );
    }

    #[test]
    fn refuses_huge_elements_before_allocating_the_fill_value() {
        // As in v2: one fixed_length_utf32 element of 4 GiB must not be allocated as a fill value.
        let doc = br#"{"zarr_format":3,"node_type":"array","shape":[4],
          "data_type":{"name":"fixed_length_utf32","configuration":{"length_bytes":4294967292}},
          "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[2]}},
          "chunk_key_encoding":{"name":"default"},"fill_value":"","codecs":[]}"#;
        let err = parse_node("z", doc).expect_err("refused");
        assert!(err.to_string().contains("more than"), "{err}");
    }

    fn rectilinear(chunk_shapes: &str, codecs: &str) -> String {
        format!(
            r#"{{"zarr_format":3,"node_type":"array","shape":[130,10],"data_type":"int32",
            "chunk_grid":{{"name":"rectilinear","configuration":{{"kind":"inline","chunk_shapes":{chunk_shapes}}}}},
            "chunk_key_encoding":{{"name":"default"}},"fill_value":0,"codecs":{codecs}}}"#
        )
    }

    const BYTES: &str = r#"[{"name":"bytes","configuration":{"endian":"little"}}]"#;

    fn array_of(doc: &str) -> ArrayMeta {
        match parse_node("a/zarr.json", doc.as_bytes())
            .expect("parses")
            .kind
        {
            NodeKind::Array(meta) => *meta,
            NodeKind::Group { .. } => panic!("expected an array"),
        }
    }

    #[test]
    fn parses_rectilinear_grids() {
        // As zarr-python 3.4 writes it: explicit edges, a run-length pair, a bare step.
        let meta = array_of(&rectilinear("[[31,28,31,30,[5,2]],4]", BYTES));
        let grid = meta.rectilinear.clone().expect("rectilinear");
        assert_eq!(grid.edges(0), vec![31, 28, 31, 30, 5, 5]);
        assert_eq!(grid.edges(1), vec![4, 4, 4]);
        // The largest chunk is what holds any of them.
        assert_eq!(meta.chunk_shape, vec![31, 4]);
        assert_eq!(meta.chunk_repr().shape, vec![31, 4]);
        // Chunks all of one shape are a regular grid (the overhanging last edge is stored whole).
        let regular = array_of(&rectilinear("[[[13,10]],[[4,2],4]]", BYTES));
        assert_eq!(regular.rectilinear, None);
        assert_eq!(regular.chunk_shape, vec![13, 4]);
    }

    #[test]
    fn bad_rectilinear_grids_are_refused_with_the_document() {
        for (chunk_shapes, reason) in [
            ("[[31,28],4]", "chunk_shapes[0]: the edges sum to 59, less than the array's extent 130 in dimension 0"),
            ("[[130],0]", "chunk_shapes[1] is 0, expected a positive integer"),
            ("[[130],[[2,0]]]", "chunk_shapes[1][0][1] (a count) is 0, expected a positive integer"),
            ("[[130]]", "chunk_shapes has 1 entries, the array has 2 dimensions (shape [130, 10])"),
            ("[[130],[]]", "chunk_shapes[1] is an empty list"),
        ] {
            let e = parse_node("a/zarr.json", rectilinear(chunk_shapes, BYTES).as_bytes())
                .expect_err(chunk_shapes)
                .to_string();
            assert_eq!(e, format!("a/zarr.json: invalid chunk_grid: rectilinear {reason}"));
        }
        // Shards must split into whole inner chunks: an edge of 28 is not a multiple of 10.
        let sharded = |inner: &str| {
            format!(
                r#"[{{"name":"sharding_indexed","configuration":{{"chunk_shape":{inner},
                "codecs":[{{"name":"bytes"}}],"index_codecs":[{{"name":"bytes"}}]}}}}]"#
            )
        };
        let e = parse_node(
            "a/zarr.json",
            rectilinear("[[60,40,30],[10]]", &sharded("[10,5]")).as_bytes(),
        );
        assert!(e.is_ok(), "{e:?}");
        let e = parse_node(
            "a/zarr.json",
            rectilinear("[[60,28,42],[10]]", &sharded("[10,5]")).as_bytes(),
        )
        .expect_err("28 rows are not whole inner chunks")
        .to_string();
        assert!(
            e.starts_with("a/zarr.json: invalid chunk_grid: a rectilinear shard edge is not a multiple of the inner chunk shape [10, 5]"),
            "{e}"
        );
        let e = parse_node(
            "a/zarr.json",
            rectilinear("[[130],[10]]", BYTES)
                .replace("rectilinear", "rectangular")
                .as_bytes(),
        )
        .expect_err("unknown grid")
        .to_string();
        assert_eq!(
            e,
            "a/zarr.json: chunk_grid \"rectangular\" is not supported (regular, rectilinear)"
        );
    }

    #[test]
    fn rejects_bad_documents() {
        assert!(parse_node("z", br#"{"zarr_format":2,"node_type":"group"}"#).is_err());
        assert!(parse_node("z", br#"{"zarr_format":3,"node_type":"array","shape":[4]}"#).is_err());
        assert!(parse_node("z", br#"{"zarr_format":3,"node_type":"array","shape":[4],"data_type":"uint8",
            "chunk_grid":{"name":"rectilinear"},"chunk_key_encoding":{"name":"default"},"fill_value":0,"codecs":[]}"#).is_err());
        assert!(parse_node("z", br#"{"zarr_format":3,"node_type":"array","shape":[4],"data_type":"uint8",
            "chunk_grid":{"name":"hexagonal"},"chunk_key_encoding":{"name":"default"},"fill_value":0,"codecs":[]}"#).is_err());
        assert!(matches!(
            parse_node(
                "z",
                br#"{"zarr_format":3,"node_type":"group","attributes":{"k":"v"}}"#
            )
            .map(|n| n.kind),
            Ok(NodeKind::Group { .. })
        ));
    }
}
