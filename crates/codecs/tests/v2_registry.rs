//! The Zarr v2 codecs zshard reads (zshard-zarr's `V2_COMPRESSORS` and `V2_FILTERS`) against the
//! registry: each becomes a codec the registry builds, and each `numcodecs.*` codec of the registry
//! is read from v2 metadata, so that neither list drifts from the other.

use std::collections::BTreeSet;

use serde_json::{json, Value};
use zshard_zarr::{parse_v2_array, V2_COMPRESSORS, V2_FILTERS};

/// The codec names of the v2 array `zarray` as zshard reads it.
fn codec_names(zarray: Value) -> Vec<String> {
    let document = zarray.to_string();
    let meta = parse_v2_array("a/.zarray", document.as_bytes(), None)
        .unwrap_or_else(|e| panic!("{document}: {e}"));
    meta.codecs.iter().map(|c| c.name.clone()).collect()
}

fn zarray(dtype: &str, compressor: Value, filters: Value) -> Value {
    json!({"zarr_format": 2, "shape": [4], "chunks": [2], "dtype": dtype,
           "compressor": compressor, "fill_value": 0, "order": "C", "filters": filters})
}

#[test]
fn the_v2_codec_lists_are_the_registrys() {
    let registry: BTreeSet<&str> = zshard_codecs::supported_codecs().into_iter().collect();
    let mut read = BTreeSet::new();
    let compressors = V2_COMPRESSORS
        .iter()
        .map(|id| zarray("<f8", json!({"id": id}), Value::Null));
    let filters = V2_FILTERS
        .iter()
        .map(|id| zarray("<f8", Value::Null, json!([{"id": id}])));
    // The filters that take the array itself: categorize (strings to integers) and the object codecs.
    let first = [
        zarray(
            "<U4",
            Value::Null,
            json!([{"id": "categorize", "labels": ["a"], "dtype": "<U4", "astype": "|u1"}]),
        ),
        zarray("|O", Value::Null, json!([{"id": "json2"}])),
        zarray("|O", Value::Null, json!([{"id": "msgpack2"}])),
    ];
    for document in compressors.chain(filters).chain(first) {
        for name in codec_names(document.clone()) {
            assert!(
                registry.contains(name.as_str()),
                "{document}: {name} is no codec of the registry"
            );
            read.insert(name);
        }
    }
    let unread: Vec<&&str> = registry
        .iter()
        .filter(|name| name.starts_with("numcodecs.") && !read.contains(**name))
        .collect();
    // numcodecs' own names of the v3 codecs (`numcodecs.zstd` is `zstd`): zarr-python 3 writes them
    // in v3 metadata only, a v2 array names them by their id.
    let v3_aliases = ["numcodecs.blosc", "numcodecs.gzip", "numcodecs.zstd"];
    assert_eq!(unread, v3_aliases.iter().collect::<Vec<_>>());
}
