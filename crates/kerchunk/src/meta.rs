//! The hierarchy of a reference set from its metadata documents (`.zgroup`, `.zattrs`, `.zarray`,
//! `zarr.json`), through the Zarr parsers of `zshard-zarr`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};
use zshard_core::{Node, NodeKind};
use zshard_zarr::{
    parse_v2_array, parse_v2_attributes, parse_v3_node, SkippedArray, V2_COMPRESSORS,
};

use crate::error::{format, reference, Error, Result};
use crate::lenient;

/// Refuses node paths that would leave the output root or are not plain relative paths.
pub(crate) fn check_path(key: &str, path: &str) -> Result<()> {
    if path.is_empty() {
        return Ok(());
    }
    let bad = path.starts_with('/')
        || path.split('/').any(|s| {
            s.is_empty()
                || s == "."
                || s == ".."
                || s.contains('\\')
                || s.chars().any(char::is_control)
        });
    if bad {
        return Err(reference(
            key,
            format!(
                "node path {path:?} would escape the output root or is not a plain relative path"
            ),
        ));
    }
    Ok(())
}

/// Older reference sets put the compressor last in `filters` with `compressor: null` (kerchunk does
/// for HDF5 deflate); that is the same chain as the compressor in its own field.
pub(crate) fn normalize_zarray(zarray: &mut Value) {
    let Some(object) = zarray.as_object_mut() else {
        return;
    };
    if !object.get("compressor").is_none_or(Value::is_null) {
        return;
    }
    let Some(Value::Array(filters)) = object.get_mut("filters") else {
        return;
    };
    let last_is_compressor = filters
        .last()
        .and_then(|f| f.get("id"))
        .and_then(Value::as_str)
        .is_some_and(|id| V2_COMPRESSORS.contains(&id));
    if !last_is_compressor {
        return;
    }
    let compressor = filters.pop();
    if filters.is_empty() {
        object.insert("filters".into(), Value::Null);
    }
    if let Some(c) = compressor {
        object.insert("compressor".into(), c);
    }
}

fn split(key: &str) -> (&str, &str) {
    key.rsplit_once('/').unwrap_or(("", key))
}

/// The bytes of a metadata document given inline in a reference set: a JSON string is the document's
/// text, any other JSON value is the document itself.
pub(crate) fn document_bytes(value: &Value) -> Vec<u8> {
    match value {
        Value::String(s) => s.clone().into_bytes(),
        other => other.to_string().into_bytes(),
    }
}

/// Builds every node from the documents (`(key, bytes)`, later entries winning), and with
/// `skip_unsupported` leaves out the arrays whose metadata is valid but holds a codec or data type
/// zshard does not read, listing each with its reason, as [`zshard_zarr::open_hierarchy_skipping`]
/// does for stores. `file` names the reference set in errors.
pub(crate) fn nodes_skipping(
    file: &str,
    documents: &[(String, Vec<u8>)],
    skip_unsupported: bool,
) -> Result<(Vec<Node>, Vec<SkippedArray>)> {
    let mut skipped = Vec::new();
    let nodes = build_nodes(file, documents, |path, error| {
        match error.unsupported_reason() {
            Some(_) if skip_unsupported => {
                skipped.push(SkippedArray {
                    path: path.to_string(),
                    reason: error.to_string(),
                });
                Ok(())
            }
            _ => Err(Error::Metadata {
                file: file.to_string(),
                source: error,
            }),
        }
    })?;
    Ok((nodes, skipped))
}

#[cfg(test)]
pub(crate) fn nodes(file: &str, documents: &[(String, Vec<u8>)]) -> Result<Vec<Node>> {
    nodes_skipping(file, documents, false).map(|(nodes, _)| nodes)
}

/// The nodes of `documents`; `refused` decides about an array or node whose metadata fails to parse
/// (an error stops, `Ok` leaves the node out).
fn build_nodes(
    file: &str,
    documents: &[(String, Vec<u8>)],
    mut refused: impl FnMut(&str, zshard_zarr::Error) -> Result<()>,
) -> Result<Vec<Node>> {
    let mut docs: BTreeMap<&str, &[u8]> = BTreeMap::new();
    for (key, bytes) in documents {
        docs.insert(key.as_str(), bytes.as_slice());
    }
    // Consolidated metadata fills in documents that are not there on their own.
    let mut consolidated: Vec<(String, Vec<u8>)> = Vec::new();
    if let Some(bytes) = docs.get(".zmetadata") {
        let value: Value = lenient::parse(&format!("{file}: .zmetadata"), bytes)?;
        if let Some(Value::Object(entries)) = value.get("metadata") {
            for (key, doc) in entries {
                if !docs.contains_key(key.as_str()) {
                    let bytes = match doc {
                        Value::String(s) => s.clone().into_bytes(),
                        other => other.to_string().into_bytes(),
                    };
                    consolidated.push((key.clone(), bytes));
                }
            }
        }
    }
    for (key, bytes) in &consolidated {
        docs.insert(key.as_str(), bytes.as_slice());
    }

    let paths: BTreeSet<&str> = docs
        .keys()
        .filter_map(|k| {
            let (path, leaf) = split(k);
            matches!(leaf, ".zarray" | ".zgroup" | ".zattrs" | "zarr.json").then_some(path)
        })
        .collect();
    let metadata_error = |source| Error::Metadata {
        file: file.to_string(),
        source,
    };
    let key_of = |path: &str, leaf: &str| {
        if path.is_empty() {
            leaf.to_string()
        } else {
            format!("{path}/{leaf}")
        }
    };
    let mut nodes: BTreeMap<String, NodeKind> = BTreeMap::new();
    for &path in &paths {
        let doc = |leaf: &str| docs.get(key_of(path, leaf).as_str()).copied();
        let named = ["zarr.json", ".zarray", ".zgroup", ".zattrs"]
            .into_iter()
            .map(|leaf| key_of(path, leaf))
            .find(|k| docs.contains_key(k.as_str()))
            .unwrap_or_else(|| path.to_string());
        check_path(&named, path)?;
        let strict = |leaf: &str, bytes: &[u8]| -> Result<Vec<u8>> {
            let key = key_of(path, leaf);
            let value: Value = lenient::parse(&format!("{file}: {key}"), bytes)?;
            Ok(value.to_string().into_bytes())
        };
        let attrs = match doc(".zattrs") {
            Some(bytes) => Some(strict(".zattrs", bytes)?),
            None => None,
        };
        let kind = if let Some(bytes) = doc("zarr.json") {
            let key = key_of(path, "zarr.json");
            match parse_v3_node(&key, &strict("zarr.json", bytes)?) {
                Ok(parsed) => parsed.kind,
                Err(error) => {
                    refused(path, error)?;
                    continue;
                }
            }
        } else if let Some(bytes) = doc(".zarray") {
            let key = key_of(path, ".zarray");
            let mut value: Value = lenient::parse(&format!("{file}: {key}"), bytes)?;
            normalize_zarray(&mut value);
            match parse_v2_array(&key, value.to_string().as_bytes(), attrs.as_deref()) {
                Ok(meta) => NodeKind::Array(Box::new(meta)),
                Err(error) => {
                    refused(path, error)?;
                    continue;
                }
            }
        } else {
            let attributes = match &attrs {
                Some(a) => {
                    parse_v2_attributes(&key_of(path, ".zattrs"), a).map_err(metadata_error)?
                }
                None => Map::new(),
            };
            NodeKind::Group { attributes }
        };
        nodes.insert(path.to_string(), kind);
    }
    if nodes.is_empty() {
        return Err(format(
            file,
            "no Zarr metadata (.zgroup, .zarray or zarr.json) in the reference set",
        ));
    }
    if matches!(nodes.get(""), Some(NodeKind::Array(_))) && nodes.len() > 1 {
        return Err(format(
            file,
            "the reference set has an array at its root and other nodes below it",
        ));
    }
    // Groups that hold nodes but have no document of their own.
    let ancestors: Vec<String> = nodes
        .keys()
        .flat_map(|p| {
            let mut out = vec![String::new()];
            let mut acc = String::new();
            let parts: Vec<&str> = p.split('/').collect();
            for part in &parts[..parts.len().saturating_sub(1)] {
                if !acc.is_empty() {
                    acc.push('/');
                }
                acc.push_str(part);
                out.push(acc.clone());
            }
            out
        })
        .collect();
    for path in ancestors {
        if let Some(NodeKind::Array(_)) = nodes.get(&path) {
            return Err(format(file, format!("array {path:?} has nodes below it")));
        }
        nodes.entry(path).or_insert_with(|| NodeKind::Group {
            attributes: Map::new(),
        });
    }
    if matches!(nodes.get(""), Some(NodeKind::Array(_))) && nodes.len() > 1 {
        return Err(format(
            file,
            "the reference set has an array at its root and other nodes below it",
        ));
    }
    Ok(nodes
        .into_iter()
        .map(|(path, kind)| Node { path, kind })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn docs(entries: &[(&str, Value)]) -> Vec<(String, Vec<u8>)> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), document_bytes(v)))
            .collect()
    }

    fn zarray(extra: Value) -> Value {
        let mut base = json!({"zarr_format": 2, "shape": [10], "chunks": [5], "dtype": "<f4",
            "compressor": null, "fill_value": "NaN", "order": "C", "filters": null});
        if let (Some(b), Some(e)) = (base.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        base
    }

    #[test]
    fn unsupported_arrays_are_refused_or_skipped_with_their_reason() {
        let d = docs(&[
            (".zgroup", json!({"zarr_format": 2})),
            ("a/.zarray", zarray(json!({}))),
            ("b/.zarray", zarray(json!({"compressor": {"id": "grib"}}))),
            ("c/.zarray", zarray(json!({"shape": "ten"}))),
        ]);
        let reason = r#"b/.zarray: compressor "grib" is not supported"#;
        let err = nodes("refs.json", &d[..3]).expect_err("refused");
        let chain = format!(
            "{err}: {}",
            std::error::Error::source(&err).map_or(String::new(), |s| s.to_string())
        );
        assert!(chain.contains(reason), "{chain}");
        let (built, skipped) = nodes_skipping("refs.json", &d[..3], true).expect("skips");
        let paths: Vec<&str> = built.iter().map(|n| n.path.as_str()).collect();
        assert_eq!(paths, ["", "a"]);
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].path, "b");
        assert!(
            skipped[0].reason.starts_with(reason),
            "{}",
            skipped[0].reason
        );
        // Broken metadata still fails when skipping: only unsupported arrays are left out.
        assert!(nodes_skipping("refs.json", &d, true).is_err());
    }

    #[test]
    fn hierarchy_with_implicit_groups_and_attributes() {
        let nodes = nodes(
            "refs.json",
            &docs(&[
                (".zgroup", json!({"zarr_format": 2})),
                (".zattrs", json!({"title": "t"})),
                ("a/b/x/.zarray", zarray(json!({}))),
                (
                    "a/b/x/.zattrs",
                    json!({"_ARRAY_DIMENSIONS": ["t"], "units": "K"}),
                ),
                ("a/b/.zgroup", json!({"zarr_format": 2})),
            ]),
        )
        .expect("builds");
        let paths: Vec<&str> = nodes.iter().map(|n| n.path.as_str()).collect();
        assert_eq!(paths, ["", "a", "a/b", "a/b/x"]);
        let NodeKind::Array(meta) = &nodes[3].kind else {
            panic!("array expected")
        };
        assert_eq!(meta.dimension_names, Some(vec![Some("t".into())]));
        assert_eq!(meta.attributes["units"], json!("K"));
        let NodeKind::Group { attributes } = &nodes[0].kind else {
            panic!("group expected")
        };
        assert_eq!(attributes["title"], json!("t"));
    }

    #[test]
    fn compressor_in_filters_and_lenient_metadata() {
        let mut z = zarray(
            json!({"filters": [{"id": "shuffle", "elementsize": 4}, {"id": "zlib", "level": 4}]}),
        );
        normalize_zarray(&mut z);
        assert_eq!(z["compressor"], json!({"id": "zlib", "level": 4}));
        assert_eq!(z["filters"], json!([{"id": "shuffle", "elementsize": 4}]));
        let mut only = zarray(json!({"filters": [{"id": "zlib", "level": 1}]}));
        normalize_zarray(&mut only);
        assert_eq!(only["filters"], Value::Null);
        // A compressor already set is left alone (the filter is then rejected by the Zarr parser).
        let mut both = zarray(json!({"compressor": {"id": "zstd"}, "filters": [{"id": "zlib"}]}));
        normalize_zarray(&mut both);
        assert_eq!(both["filters"], json!([{"id": "zlib"}]));

        let text = r#"{"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": "<f8",
            "compressor": null, "fill_value": NaN, "order": "C", "filters": [{"id": "shuffle", "elementsize": 8}, {"id": "zlib", "level": 4},],}"#;
        let nodes = nodes("r", &[("v/.zarray".into(), text.as_bytes().to_vec())]).expect("lenient");
        let NodeKind::Array(meta) = &nodes[1].kind else {
            panic!("array expected")
        };
        let names: Vec<&str> = meta.codecs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["bytes", "numcodecs.shuffle", "numcodecs.zlib"]);
    }

    #[test]
    fn v3_documents_and_consolidated_fallback() {
        let v3 = json!({"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "uint8",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
            "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
            "fill_value": 0, "codecs": [{"name": "bytes"}]});
        let nodes3 = nodes(
            "r",
            &docs(&[
                ("zarr.json", json!({"zarr_format": 3, "node_type": "group"})),
                ("v/zarr.json", v3),
            ]),
        )
        .expect("v3");
        assert!(matches!(nodes3[1].kind, NodeKind::Array(_)));

        let consolidated = json!({"metadata": {".zgroup": {"zarr_format": 2}, "x/.zarray": zarray(json!({}))},
            "zarr_consolidated_format": 1});
        let n = nodes("r", &docs(&[(".zmetadata", consolidated)])).expect("consolidated");
        assert_eq!(n.len(), 2);
    }

    #[test]
    fn bad_hierarchies() {
        let err =
            |d: Vec<(String, Vec<u8>)>| nodes("refs.json", &d).expect_err("fails").to_string();
        let e = err(docs(&[("../x/.zarray", zarray(json!({})))]));
        assert!(e.contains("escape"), "{e}");
        let e = err(docs(&[("a//x/.zgroup", json!({"zarr_format": 2}))]));
        assert!(e.contains("escape"), "{e}");
        let e = err(docs(&[("x/0", json!("data"))]));
        assert!(e.contains("no Zarr metadata"), "{e}");
        let e = err(docs(&[("x/.zarray", zarray(json!({"dtype": "|S3"})))]));
        assert!(e.contains("refs.json"), "{e}");
        let e = err(docs(&[
            (".zarray", zarray(json!({}))),
            ("y/.zgroup", json!({"zarr_format": 2})),
        ]));
        assert!(e.contains("root"), "{e}");
        let e = err(docs(&[("x/.zarray", json!("{not json"))]));
        assert!(e.contains("x/.zarray"), "{e}");
    }
}
