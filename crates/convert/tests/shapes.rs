//! Shapes by dimension name through the library: resolved per array (named extents where the array
//! has the name, the default rule elsewhere), and names no array has refused, for the default layout
//! against the whole source and for an array's own layout against that array.

use std::path::Path;

use serde_json::json;
use zshard_convert::{Conversion, Layout, ShapeSpec};

/// A Zarr v2 group as xarray writes it: `field` (time 40 x lat 60, chunks 10 x 15) and `time` (40,
/// chunks 10), named by `_ARRAY_DIMENSIONS`, and `raw` (20, chunks 5) without names. No chunk is
/// stored: planning reads metadata only.
fn write_source(dir: &Path) {
    let array = |name: &str, shape: &[u64], chunks: &[u64], dims: Option<&[&str]>| {
        let folder = dir.join(name);
        std::fs::create_dir_all(&folder).expect("create array");
        let zarray = json!({"zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": "<f4",
            "compressor": null, "fill_value": null, "order": "C", "filters": null});
        std::fs::write(folder.join(".zarray"), zarray.to_string()).expect("write .zarray");
        let attrs = dims.map_or_else(|| json!({}), |d| json!({"_ARRAY_DIMENSIONS": d}));
        std::fs::write(folder.join(".zattrs"), attrs.to_string()).expect("write .zattrs");
    };
    std::fs::create_dir_all(dir).expect("create group");
    std::fs::write(dir.join(".zgroup"), r#"{"zarr_format": 2}"#).expect("write .zgroup");
    array("field", &[40, 60], &[10, 15], Some(&["time", "lat"]));
    array("time", &[40], &[10], Some(&["time"]));
    array("raw", &[20], &[5], None);
}

fn conversion(dir: &Path, shard: &str, chunk: Option<&str>) -> Conversion {
    let mut c = Conversion::new(
        dir.join("src").to_str().expect("utf-8"),
        dir.join("out").to_str().expect("utf-8"),
    );
    c.layouts.default = Layout {
        shard_shape: Some(shard.parse().expect("shape")),
        chunk_shape: chunk.map(|c| c.parse().expect("shape")),
        ..Layout::default()
    };
    c.threads = 1;
    c
}

#[test]
fn named_extents_apply_where_the_name_is_and_the_default_rule_elsewhere() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write_source(&tmp.path().join("src"));
    let plan = conversion(tmp.path(), "time=20", Some("lat=30"))
        .plan()
        .expect("plan");
    let shapes: Vec<(&str, &[u64], &[u64])> = plan
        .plan
        .arrays
        .iter()
        .map(|a| {
            (
                a.path.as_str(),
                a.output.inner_shape.as_slice(),
                a.output.shard_shape.as_slice(),
            )
        })
        .collect();
    // field: inner (10 from the source, 30 named), shard (20 named, lat grown to the whole 60);
    // raw has no names: the default rule (its source chunk, grown to the whole array).
    assert_eq!(
        shapes,
        vec![
            ("field", &[10, 30][..], &[20, 60][..]),
            ("raw", &[5][..], &[20][..]),
            ("time", &[10][..], &[20][..]),
        ]
    );
}

#[test]
fn names_no_array_has_are_refused_naming_the_known_ones() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write_source(&tmp.path().join("src"));
    let source = tmp.path().join("src");
    // Messages name settings as the command line's flags here (`zshard` spells them so).
    let flags = |c: &zshard_convert::Conversion| {
        zshard_convert::spelled(zshard_convert::Spelling::Flag, || {
            zshard_convert::one_line(&c.plan().expect_err("refused"))
        })
    };
    let e = flags(&conversion(tmp.path(), "tme=16", None));
    assert_eq!(
        e,
        format!(
            "--shard-shape: no dimension named tme in any array of {}; the dimension names are: lat, time",
            source.display()
        )
    );
    // An array's own layout is checked against that array: `time` has no `lat`.
    let mut c = conversion(tmp.path(), "time=20", None);
    let own = Layout {
        chunk_shape: Some(ShapeSpec::ByName([("lat".to_string(), 5)].into())),
        ..Layout::default()
    };
    c.layouts.per_array.insert("time".into(), own);
    let e = flags(&c);
    assert_eq!(
        e,
        "--chunk-shape: no dimension named lat in the array \"time\"; the dimension names are: time"
    );
}

#[test]
fn a_positional_shape_that_misses_an_array_points_to_shapes_by_name() {
    let tmp = tempfile::tempdir().expect("tempdir");
    write_source(&tmp.path().join("src"));
    let e = zshard_convert::spelled(zshard_convert::Spelling::Flag, || {
        zshard_convert::one_line(
            &conversion(tmp.path(), "20", None)
                .plan()
                .expect_err("ranks differ"),
        )
    });
    assert_eq!(
        e,
        "array field: --shard-shape [20] has 1 dimensions, but the array has 2 (shape [40, 60]); \
         arrays of different ranks take extents by dimension name, e.g. --shard-shape time=10"
    );
}
