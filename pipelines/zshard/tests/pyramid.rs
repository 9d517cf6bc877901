//! `convert --pyramid` (issue 41): a single array becomes an OME-Zarr 0.5 multiscale image whose
//! levels are made in the same pass over the source. Every level is compared with a recomputation
//! here, from the level above as written (a block's reduction over the elements it has).

mod common;

use std::path::Path;

use common::{read_v3, write_v2, zshard};
use serde_json::{json, Value};
use zshard_core::{c_order, linear_index, product, DataType};

/// Writes a Zarr v2 array with dimension names (`_ARRAY_DIMENSIONS`) holding `values` as `dtype`.
fn source(
    dir: &Path,
    dtype: DataType,
    shape: &[u64],
    chunks: &[u64],
    names: &[&str],
    values: &[f64],
) {
    let data: Vec<u8> = values
        .iter()
        .flat_map(|&v| match dtype {
            DataType::UInt8 => vec![v as u8],
            DataType::UInt16 => (v as u16).to_le_bytes().to_vec(),
            DataType::Float32 => (v as f32).to_le_bytes().to_vec(),
            other => panic!("no test values for {other}"),
        })
        .collect();
    write_v2(
        dir,
        dtype,
        shape,
        chunks,
        json!({"id": "zstd", "level": 1}),
        &data,
    );
    let attrs = json!({"_ARRAY_DIMENSIONS": names});
    std::fs::write(dir.join(".zattrs"), attrs.to_string()).expect("write .zattrs");
}

/// The values of the output array at `dir` as f64, with its shape.
fn level(dir: &Path) -> (Vec<f64>, Vec<u64>) {
    let (bytes, doc) = read_v3(dir);
    let shape: Vec<u64> = serde_json::from_value(doc["shape"].clone()).expect("shape");
    let values = match doc["data_type"].as_str() {
        Some("uint8") => bytes.iter().map(|&b| b as f64).collect(),
        Some("uint16") => bytes
            .chunks(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as f64)
            .collect(),
        Some("float32") => bytes
            .chunks(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64)
            .collect(),
        other => panic!("no test reading of {other:?}"),
    };
    (values, shape)
}

/// The level below `values` (of `shape`), by `how` over each block of `factors`, over the elements a
/// block has; NaN and `masked` take no part in mean, min and max (a block of only those is
/// `masked`, or NaN). Integers round halves away from zero.
fn reduce(
    values: &[f64],
    shape: &[u64],
    factors: &[u64],
    how: &str,
    masked: Option<f64>,
    int: bool,
) -> (Vec<f64>, Vec<u64>) {
    let out_shape: Vec<u64> = shape
        .iter()
        .zip(factors)
        .map(|(n, f)| n.div_ceil(*f))
        .collect();
    let out = c_order(&out_shape)
        .map(|at| {
            let block: Vec<f64> = c_order(factors)
                .filter_map(|offset| {
                    let coord: Vec<u64> = (0..shape.len())
                        .map(|d| at[d] * factors[d] + offset[d])
                        .collect();
                    coord
                        .iter()
                        .zip(shape)
                        .all(|(c, n)| c < n)
                        .then(|| values[linear_index(&coord, shape) as usize])
                })
                .collect();
            let kept: Vec<f64> = block
                .iter()
                .copied()
                .filter(|v| !v.is_nan() && Some(*v) != masked)
                .collect();
            match how {
                "nearest" => block[0],
                "mode" => {
                    let mut best = block[0];
                    let mut count = 0;
                    for v in &block {
                        let n = block.iter().filter(|w| *w == v).count();
                        if n > count {
                            (best, count) = (*v, n);
                        }
                    }
                    best
                }
                // Only masked elements: the masked value, or NaN when only NaN.
                _ if kept.is_empty() => match masked {
                    Some(m) if block.contains(&m) => m,
                    _ => f64::NAN,
                },
                "min" => kept.iter().copied().fold(f64::INFINITY, f64::min),
                "max" => kept.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                _ => {
                    let mean = kept.iter().sum::<f64>() / kept.len() as f64;
                    if int {
                        mean.round()
                    } else {
                        (mean as f32) as f64
                    }
                }
            }
        })
        .collect();
    (out, out_shape)
}

/// Converts `src` into `dst` with `args`, checks every level against [`reduce`] of the one above
/// and returns the group's `multiscales[0]` and every level's shape.
fn check_pyramid(
    src: &Path,
    dst: &Path,
    args: &[&str],
    factors: &[u64],
    how: &str,
    masked: Option<f64>,
    int: bool,
) -> (Value, Vec<Vec<u64>>) {
    let mut all = vec![
        "convert",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
    ];
    all.extend_from_slice(args);
    let out = zshard(&all);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let group: Value =
        serde_json::from_slice(&std::fs::read(dst.join("zarr.json")).expect("group zarr.json"))
            .expect("json");
    assert_eq!(group["attributes"]["ome"]["version"], "0.5");
    let multiscale = group["attributes"]["ome"]["multiscales"][0].clone();
    let datasets = multiscale["datasets"].as_array().expect("datasets").clone();
    let mut shapes = Vec::new();
    let (mut above, mut above_shape) = level(&dst.join("0"));
    shapes.push(above_shape.clone());
    for (k, dataset) in datasets.iter().enumerate().skip(1) {
        assert_eq!(dataset["path"], k.to_string());
        let (expected, expected_shape) = reduce(&above, &above_shape, factors, how, masked, int);
        let (values, shape) = level(&dst.join(k.to_string()));
        assert_eq!(shape, expected_shape, "level {k}'s shape");
        for (i, (v, e)) in values.iter().zip(&expected).enumerate() {
            assert!(
                v == e || (v.is_nan() && e.is_nan()),
                "level {k}, element {i} of {shape:?}: {v}, expected {e}"
            );
        }
        shapes.push(shape);
        (above, above_shape) = (values, expected_shape);
    }
    (multiscale, shapes)
}

fn ramp(shape: &[u64], f: impl Fn(u64) -> f64) -> Vec<f64> {
    (0..product(shape)).map(f).collect()
}

#[test]
fn a_2d_image_of_odd_size_becomes_a_pyramid_level_by_level() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    let shape = [100, 77];
    // Values from 1: 0 is the fill value, which xarray masks in a Zarr v2 array (tested below).
    let values = ramp(&shape, |i| 1.0 + ((i * 7919) % 60000) as f64);
    source(
        &src,
        DataType::UInt16,
        &shape,
        &[16, 16],
        &["y", "x"],
        &values,
    );
    let (multiscale, shapes) = check_pyramid(
        &src,
        &dst,
        &["--pyramid", "auto", "--shard-shape", "32,32"],
        &[2, 2],
        "mean",
        Some(0.0),
        true,
    );
    // auto: until the level fits one 16 x 16 inner chunk.
    assert_eq!(
        shapes,
        [vec![100, 77], vec![50, 39], vec![25, 20], vec![13, 10]]
    );
    assert_eq!(
        multiscale["axes"],
        json!([{"name": "y", "type": "space"}, {"name": "x", "type": "space"}])
    );
    assert_eq!(multiscale["type"], "mean");
    assert_eq!(
        multiscale["datasets"][1]["coordinateTransformations"],
        json!([{"type": "scale", "scale": [2.0, 2.0]}, {"type": "translation", "translation": [0.5, 0.5]}])
    );
    // Every level is sharded: shards of the same region of the image, within the level.
    let zarr = |k: &str| -> Value {
        serde_json::from_slice(&std::fs::read(dst.join(k).join("zarr.json")).expect("zarr.json"))
            .expect("json")
    };
    assert_eq!(
        zarr("1")["chunk_grid"]["configuration"]["chunk_shape"],
        json!([16, 16])
    );
    assert_eq!(zarr("1")["codecs"][0]["name"], "sharding_indexed");
    assert_eq!(zarr("0")["dimension_names"], json!(["y", "x"]));
}

#[test]
fn channels_never_shrink_and_z_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let shape = [3, 40, 30];
    let values = ramp(&shape, |i| 1.0 + ((i * 31) % 251) as f64);
    let src = dir.path().join("cyx");
    source(
        &src,
        DataType::UInt8,
        &shape,
        &[1, 8, 8],
        &["c", "y", "x"],
        &values,
    );
    let (multiscale, shapes) = check_pyramid(
        &src,
        &dir.path().join("cyx-out"),
        &["--pyramid", "3"],
        &[1, 2, 2],
        "mean",
        Some(0.0),
        true,
    );
    assert_eq!(shapes, [vec![3, 40, 30], vec![3, 20, 15], vec![3, 10, 8]]);
    assert_eq!(
        multiscale["axes"][0],
        json!({"name": "c", "type": "channel"})
    );
    assert_eq!(
        multiscale["datasets"][2]["coordinateTransformations"][0]["scale"],
        json!([1.0, 4.0, 4.0])
    );
    let shape = [10, 12, 14];
    let values = ramp(&shape, |i| 1.0 + ((i * 17) % 97) as f64);
    let src = dir.path().join("zyx");
    source(
        &src,
        DataType::UInt16,
        &shape,
        &[4, 4, 4],
        &["z", "y", "x"],
        &values,
    );
    for how in ["max", "min", "nearest"] {
        let (_, shapes) = check_pyramid(
            &src,
            &dir.path().join(format!("zyx-{how}")),
            &["--pyramid", "3", "--downsample", how],
            &[2, 2, 2],
            how,
            Some(0.0),
            true,
        );
        assert_eq!(shapes, [vec![10, 12, 14], vec![5, 6, 7], vec![3, 3, 4]]);
    }
}

#[test]
fn nan_and_the_fill_value_do_not_pull_the_mean() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    let shape = [33, 34];
    // NaN in every fifth element, the fill value (0, which xarray masks) in every seventh.
    let values = ramp(&shape, |i| match (i % 5, i % 7) {
        (0, _) => f64::NAN,
        (_, 0) => 0.0,
        _ => (i as f64) * 0.25 - 50.0,
    });
    source(
        &src,
        DataType::Float32,
        &shape,
        &[8, 8],
        &["y", "x"],
        &values,
    );
    check_pyramid(
        &src,
        &dst,
        &["--pyramid", "4"],
        &[2, 2],
        "mean",
        Some(0.0),
        false,
    );
}

#[test]
fn labels_reduce_by_mode() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    let shape = [24, 24];
    // Square labels 1 to 9 of 8 x 8 offset by 3: blocks straddle two, three or four labels.
    let values = ramp(&shape, |i| {
        let (y, x) = ((i / 24 + 3) / 8, (i % 24 + 3) / 8);
        (1 + y * 3 + x) as f64
    });
    source(&src, DataType::UInt8, &shape, &[8, 8], &["y", "x"], &values);
    let (multiscale, _) = check_pyramid(
        &src,
        &dst,
        &["--pyramid", "3", "--downsample", "mode"],
        &[2, 2],
        "mode",
        None,
        true,
    );
    assert_eq!(multiscale["type"], "mode");
}

#[test]
fn what_a_pyramid_cannot_be_made_with_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    source(
        &src,
        DataType::UInt8,
        &[16, 16],
        &[8, 8],
        &["y", "x"],
        &ramp(&[16, 16], |i| i as f64),
    );
    let unnamed = dir.path().join("unnamed");
    write_v2(
        &unnamed,
        DataType::UInt8,
        &[16, 16],
        &[8, 8],
        json!(null),
        &[1; 256],
    );
    let odd = dir.path().join("odd");
    source(
        &odd,
        DataType::UInt8,
        &[20, 20],
        &[5, 5],
        &["y", "x"],
        &ramp(&[20, 20], |i| i as f64),
    );
    let cases: &[(&Path, &[&str], &str)] = &[
        (&src, &["--downsample", "max"], "--pyramid"),
        (&src, &["--pyramid", "0"], "at least 1"),
        (&unnamed, &["--pyramid", "2"], "x, y or z"),
        (&odd, &["--pyramid", "2"], "odd along dimension 0"),
    ];
    for (i, (source, args, says)) in cases.iter().enumerate() {
        let dst = dir.path().join(format!("dst{i}"));
        let mut all = vec![
            "convert",
            source.to_str().expect("utf-8"),
            dst.to_str().expect("utf-8"),
        ];
        all.extend_from_slice(args);
        let out = zshard(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(!dst.join("zarr.json").exists(), "{args:?} wrote metadata");
    }
}

#[test]
fn kill_then_resume_equals_an_uninterrupted_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    let shape = [2048, 2048];
    source(
        &src,
        DataType::UInt16,
        &shape,
        &[32, 32],
        &["y", "x"],
        &ramp(&shape, |i| 1.0 + (i % 65000) as f64),
    );
    let command = |dst: &Path| {
        let mut c = std::process::Command::new(common::binary());
        c.args([
            "convert",
            src.to_str().expect("utf-8"),
            dst.to_str().expect("utf-8"),
        ])
        .args([
            "--pyramid",
            "5",
            "--shard-shape",
            "128,128",
            "--chunk-shape",
            "32,32",
        ])
        .args(["--compressor", "gzip:9", "--threads", "1", "--quiet"])
        // Shards are recorded as done as they are written: a kill finds some done, some not.
        .args(["--checkpoint-interval", "10ms"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
        c
    };
    let reference = dir.path().join("reference");
    let out = command(&reference).output().expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reference = common::files(&reference);
    // Killed once so many of level 0's 256 shards are written: by progress, not at fractions of
    // an uninterrupted run's time (under load one run takes several times as long as the next,
    // and kills timed so landed after the end). Every shard and record a kill can stop at is
    // covered by `faults.rs::killed_at_every_rename_of_a_pyramid_then_rerun_equals_an_uninterrupted_run`.
    let level0_written = |dst: &Path| -> usize {
        let rows = std::fs::read_dir(dst.join("0/c")).into_iter().flatten();
        rows.flatten()
            .filter_map(|row| std::fs::read_dir(row.path()).ok())
            .flat_map(|shards| shards.flatten())
            .filter(|shard| !shard.file_name().to_string_lossy().contains('#'))
            .count()
    };
    let mut interrupted = 0;
    for (point, written) in [1usize, 40, 80, 120, 160, 200].into_iter().enumerate() {
        let dst = dir.path().join(format!("run{point}"));
        let mut child = command(&dst).spawn().expect("spawn");
        while child.try_wait().expect("wait").is_none() && level0_written(&dst) < written {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let killed = child.try_wait().expect("wait").is_none();
        child.kill().ok(); // SIGKILL
        child.wait().expect("reap");
        interrupted += usize::from(killed && !dst.join("zarr.json").exists());
        let out = command(&dst).output().expect("resume");
        assert!(
            out.status.success(),
            "point {point}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let resumed = common::files(&dst);
        let missing: Vec<&String> = reference
            .keys()
            .filter(|k| !resumed.contains_key(*k))
            .take(5)
            .collect();
        let extra: Vec<&String> = resumed
            .keys()
            .filter(|k| !reference.contains_key(*k))
            .take(5)
            .collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "point {point}: missing {missing:?}, extra {extra:?}"
        );
        assert!(
            resumed == reference,
            "point {point}: bytes differ from the uninterrupted run"
        );
    }
    eprintln!("pyramid: {interrupted} of 6 kills landed mid-run");
    assert!(
        interrupted >= 5,
        "only {interrupted} of 6 kills landed mid-run"
    );
}

#[test]
fn a_finished_pyramid_made_otherwise_is_refused_and_the_same_is_complete() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    source(
        &src,
        DataType::UInt8,
        &[32, 32],
        &[8, 8],
        &["y", "x"],
        &ramp(&[32, 32], |i| 1.0 + (i % 200) as f64),
    );
    let run = |args: &[&str]| {
        let mut all = vec![
            "convert",
            src.to_str().expect("utf-8"),
            dst.to_str().expect("utf-8"),
        ];
        all.extend_from_slice(args);
        zshard(&all)
    };
    let out = run(&["--pyramid", "3"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before = common::files(&dst);
    let out = run(&["--pyramid", "3"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already complete"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for other in [
        &["--pyramid", "2"][..],
        &["--pyramid", "3", "--downsample", "max"],
        &["--pyramid", "3", "--ome", "0.6"],
    ] {
        let out = run(other);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("--overwrite"),
            "{other:?}: {stderr}"
        );
        assert!(
            common::files(&dst) == before,
            "{other:?} changed the output"
        );
    }
    let out = run(&["--pyramid", "2", "--overwrite"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !dst.join("2").exists(),
        "the level that --pyramid 2 does not make is gone"
    );
}

#[test]
fn an_ome_zarr_image_of_one_level_gets_its_levels() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (src, dst) = (dir.path().join("image.ome.zarr"), dir.path().join("dst"));
    let shape = [2, 30, 21];
    // Zeros are pixels here: an image's fill value masks nothing.
    let values = ramp(&shape, |i| ((i * 37) % 300) as f64);
    source(
        &src.join("0"),
        DataType::UInt16,
        &shape,
        &[1, 8, 8],
        &["c", "y", "x"],
        &values,
    );
    std::fs::remove_file(src.join("0").join(".zattrs"))
        .expect("no dimension names: the axes name them");
    std::fs::write(src.join(".zgroup"), r#"{"zarr_format": 2}"#).expect("write .zgroup");
    let attrs = json!({
        "multiscales": [{
            "version": "0.4",
            "name": "cells",
            "axes": [
                {"name": "c", "type": "channel"},
                {"name": "y", "type": "space", "unit": "micrometer"},
                {"name": "x", "type": "space", "unit": "micrometer"},
            ],
            "datasets": [{"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1.0, 0.5, 0.5]}]}],
        }],
        "omero": {"channels": [{"label": "DAPI"}, {"label": "GFP"}]},
    });
    std::fs::write(src.join(".zattrs"), attrs.to_string()).expect("write .zattrs");
    let (multiscale, shapes) = check_pyramid(
        &src,
        &dst,
        &["--pyramid", "3"],
        &[1, 2, 2],
        "mean",
        None,
        true,
    );
    assert_eq!(shapes, [vec![2, 30, 21], vec![2, 15, 11], vec![2, 8, 6]]);
    assert_eq!(multiscale["name"], "cells");
    assert_eq!(
        multiscale["axes"][1],
        json!({"name": "y", "type": "space", "unit": "micrometer"})
    );
    assert_eq!(
        multiscale["datasets"][1]["coordinateTransformations"],
        json!([{"type": "scale", "scale": [1.0, 1.0, 1.0]}, {"type": "translation", "translation": [0.0, 0.25, 0.25]}])
    );
    let group: Value =
        serde_json::from_slice(&std::fs::read(dst.join("zarr.json")).expect("zarr.json"))
            .expect("json");
    assert_eq!(
        group["attributes"]["ome"]["omero"]["channels"][1]["label"],
        "GFP"
    );
    // The levels below are checked against their recomputation from the image's one level.
    let (ok, stderr) = run(&[
        "verify",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
    ]);
    assert!(ok, "{stderr}");
}

/// Runs zshard with `args`, returning whether it succeeded and its stderr.
fn run(args: &[&str]) -> (bool, String) {
    let out = zshard(args);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn verify_checks_every_level_against_a_recomputation_from_the_source() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_str().expect("utf-8").to_string();
    let shape = [64, 64];
    let values = ramp(&shape, |i| 1.0 + ((i * 7919) % 60000) as f64);
    source(
        &dir.path().join("src"),
        DataType::UInt16,
        &shape,
        &[16, 16],
        &["y", "x"],
        &values,
    );
    // The same image but for one element, which changes a block's mean at every level below.
    let mut other = values.clone();
    other[5 * 64 + 5] += 1000.0;
    source(
        &dir.path().join("other"),
        DataType::UInt16,
        &shape,
        &[16, 16],
        &["y", "x"],
        &other,
    );
    for (src, dst) in [("src", "dst"), ("other", "other-dst")] {
        let (ok, stderr) = run(&[
            "convert",
            &path(src),
            &path(dst),
            "--pyramid",
            "3",
            "--shard-shape",
            "32,32",
            "--chunk-shape",
            "8,8",
            "--keep-manifest",
        ]);
        assert!(ok, "{stderr}");
    }
    let (ok, stderr) = run(&["verify", &path("src"), &path("dst")]);
    assert!(ok, "a correct pyramid verifies: {stderr}");
    let (ok, stderr) = run(&["verify", &path("other"), &path("other-dst")]);
    assert!(ok, "{stderr}");
    let (ok, stderr) = run(&["verify", "--manifest", &path("dst")]);
    assert!(ok, "its manifest holds: {stderr}");

    // Level 2's shard from the other image: right for that image, wrong for this one.
    let shard = |dst: &str, level: &str| dir.path().join(dst).join(level).join("c/0/0");
    std::fs::copy(shard("other-dst", "2"), shard("dst", "2")).expect("copy the shard");
    let (ok, stderr) = run(&["verify", &path("src"), &path("dst")]);
    assert!(!ok, "an altered level 2 shard verified: {stderr}");
    let mismatches: Vec<&str> = stderr.lines().filter(|l| l.contains("mismatch:")).collect();
    assert_eq!(mismatches.len(), 1, "{stderr}");
    assert!(
        mismatches[0].contains("level 2")
            && mismatches[0].contains("dst/2/c/0/0")
            && mismatches[0].contains("inner chunk 0:")
            && mismatches[0].contains("1 element(s) differ"),
        "{stderr}"
    );
    let (ok, stderr) = run(&["verify", "--manifest", &path("dst")]);
    assert!(!ok, "the manifest names the altered shard: {stderr}");
    assert!(stderr.contains("2/c/0/0"), "{stderr}");

    // Level 2 restored, level 1's first shard from the other image: only level 1 is wrong.
    let (ok, stderr) = run(&[
        "convert",
        &path("src"),
        &path("fresh"),
        "--pyramid",
        "3",
        "--shard-shape",
        "32,32",
        "--chunk-shape",
        "8,8",
    ]);
    assert!(ok, "{stderr}");
    std::fs::copy(shard("fresh", "2"), shard("dst", "2")).expect("restore level 2");
    std::fs::copy(shard("other-dst", "1"), shard("dst", "1")).expect("copy the shard");
    let (ok, stderr) = run(&["verify", &path("src"), &path("dst")]);
    assert!(!ok, "an altered level 1 shard verified: {stderr}");
    let mismatches: Vec<&str> = stderr.lines().filter(|l| l.contains("mismatch:")).collect();
    assert_eq!(mismatches.len(), 1, "{stderr}");
    assert!(
        mismatches[0].contains("level 1") && mismatches[0].contains("dst/1/c/0/0"),
        "{stderr}"
    );
}

/// The files of `dst` that differ from `reference`'s (missing, extra, other bytes), a few of each.
fn differences(reference: &std::collections::BTreeMap<String, Vec<u8>>, dst: &Path) -> Vec<String> {
    let made = common::files(dst);
    let mut differ: Vec<String> = reference
        .iter()
        .filter(|(k, v)| made.get(*k) != Some(*v))
        .map(|(k, _)| format!("{k} (missing or other bytes)"))
        .collect();
    differ.extend(
        made.keys()
            .filter(|k| !reference.contains_key(*k))
            .map(|k| format!("{k} (extra)")),
    );
    differ.truncate(8);
    differ
}

/// Converts `src` into `dst` as `workers` workers (each with `args`), then finalizes; the workers
/// write no shard of the level `finalize_makes` (`finalize` does), and `status` then says only
/// `finalize` is left.
fn by_workers(src: &Path, dst: &Path, args: &[&str], workers: u32, finalize_makes: &str) {
    for index in 0..workers {
        let worker = format!("{index}/{workers}");
        let mut all = vec![
            "convert",
            src.to_str().expect("utf-8"),
            dst.to_str().expect("utf-8"),
            "--worker",
            &worker,
            "--quiet",
        ];
        all.extend_from_slice(args);
        let (ok, stderr) = run(&all);
        assert!(ok, "worker {worker}: {stderr}");
        assert!(!dst.join("zarr.json").exists(), "a worker wrote metadata");
    }
    let above: u32 = finalize_makes.parse().expect("a level number");
    assert!(
        dst.join((above - 1).to_string()).join("c").exists(),
        "the workers made level {}",
        above - 1
    );
    assert!(
        !dst.join(finalize_makes).exists(),
        "a worker wrote level {finalize_makes}"
    );
    let out = zshard(&["status", dst.to_str().expect("utf-8"), "--json"]);
    let status: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
    assert_eq!(status["finalize_waits_for"], json!([]), "{status}");
    assert_eq!(status["finished"], true, "only finalize is left: {status}");
    assert!(status["finalize_makes"].as_u64() > Some(0), "{status}");
    let table = String::from_utf8_lossy(&zshard(&["status", dst.to_str().expect("utf-8")]).stdout)
        .into_owned();
    let said = format!(
        "every worker is done: run `zshard finalize {}`, which makes the {} shard(s) of the \
         pyramid level(s) no worker makes, then the metadata",
        dst.display(),
        status["finalize_makes"]
    );
    assert!(table.contains(&said), "{table}");
    let (ok, stderr) = run(&["finalize", dst.to_str().expect("utf-8"), "--quiet"]);
    assert!(ok, "finalize: {stderr}");
}

/// A pyramid made by workers: the source's shape, its chunks and dimensions, the options, the
/// workers, and the first level `finalize` makes.
type Case<'a> = (
    &'a [u64],
    &'a [u64],
    &'a [&'a str],
    &'a [&'a str],
    u32,
    &'a str,
);

/// Issue 41: `--worker I/N` + `finalize` make the same pyramid as one run, file for file: each
/// worker makes its level-0 shards and the lower shards they alone feed, and `finalize` the small
/// levels whose shards several workers' regions feed (here levels 3 and 4 of `auto`, whose shards
/// of one inner chunk cover 2 x 2 level-0 shards, and the last levels of an odd-sized image).
#[test]
fn workers_and_finalize_make_the_pyramid_of_one_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases: &[Case] = &[
        (
            &[256, 256],
            &[16, 16],
            &["y", "x"],
            &[
                "--pyramid",
                "auto",
                "--shard-shape",
                "64,64",
                "--chunk-shape",
                "16,16",
            ],
            2,
            "3",
        ),
        (
            &[200, 300],
            &[16, 16],
            &["y", "x"],
            &[
                "--pyramid",
                "5",
                "--shard-shape",
                "64,64",
                "--chunk-shape",
                "16,16",
                "--keep-manifest",
            ],
            3,
            "3",
        ),
        (
            &[2, 64, 96, 80],
            &[1, 16, 16, 16],
            &["c", "z", "y", "x"],
            &[
                "--pyramid",
                "4",
                "--shard-shape",
                "1,32,32,32",
                "--chunk-shape",
                "1,8,8,8",
            ],
            3,
            "3",
        ),
    ];
    for (i, (shape, chunks, names, args, workers, finalize_makes)) in cases.iter().enumerate() {
        let src = dir.path().join(format!("src{i}"));
        let values = ramp(shape, |e| 1.0 + ((e * 7919) % 60000) as f64);
        source(&src, DataType::UInt16, shape, chunks, names, &values);
        let one = dir.path().join(format!("one{i}"));
        let mut all = vec![
            "convert",
            src.to_str().expect("utf-8"),
            one.to_str().expect("utf-8"),
            "--quiet",
        ];
        all.extend_from_slice(args);
        let (ok, stderr) = run(&all);
        assert!(ok, "case {i}: {stderr}");
        let reference = common::files(&one);
        let shared = dir.path().join(format!("shared{i}"));
        by_workers(&src, &shared, args, *workers, finalize_makes);
        let differ = differences(&reference, &shared);
        assert!(differ.is_empty(), "case {i}: {differ:?}");
        let (ok, stderr) = run(&[
            "verify",
            src.to_str().expect("utf-8"),
            shared.to_str().expect("utf-8"),
        ]);
        assert!(ok, "case {i}: verify: {stderr}");
        // The kept manifest names every level's shards, as one run's does.
        let manifest = |dst: &Path| std::fs::read(dst.join(".zshard/manifest.tsv")).ok();
        assert_eq!(manifest(&shared), manifest(&one), "case {i}: the manifests");
        if !args.contains(&"--keep-manifest") {
            assert!(
                !shared.join(".zshard").exists(),
                "case {i}: finalize left its state"
            );
        }
    }
}

/// A worker of a pyramid killed with `kill -9` and run again, then `finalize` killed and run
/// again: the same files as one uninterrupted run. `status` between the workers and `finalize`
/// says every worker is done and `finalize` waits for none.
#[test]
fn a_killed_pyramid_worker_and_finalize_resume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    let shape = [1024, 1024];
    source(
        &src,
        DataType::UInt16,
        &shape,
        &[32, 32],
        &["y", "x"],
        &ramp(&shape, |i| 1.0 + (i % 65000) as f64),
    );
    let args = [
        "--pyramid",
        "auto",
        "--shard-shape",
        "128,128",
        "--chunk-shape",
        "16,16",
        "--compressor",
        "gzip:9",
        "--threads",
        "1",
        "--checkpoint-interval",
        "10ms",
        "--quiet",
    ];
    let command = |dst: &Path, worker: Option<&str>| {
        let mut c = std::process::Command::new(common::binary());
        match worker {
            Some(worker) => {
                c.args([
                    "convert",
                    src.to_str().expect("utf-8"),
                    dst.to_str().expect("utf-8"),
                    "--worker",
                    worker,
                ])
                .args(args);
            }
            None => {
                c.args(["finalize", dst.to_str().expect("utf-8"), "--quiet"]);
            }
        }
        c.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        c
    };
    let one = dir.path().join("one");
    let mut all = vec![
        "convert",
        src.to_str().expect("utf-8"),
        one.to_str().expect("utf-8"),
    ];
    all.extend_from_slice(&args);
    let (ok, stderr) = run(&all);
    assert!(ok, "{stderr}");
    let reference = common::files(&one);
    // How long worker 1 takes uninterrupted, to kill it midway.
    let timed = dir.path().join("timed");
    let started = std::time::Instant::now();
    let out = command(&timed, Some("1/2")).output().expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let duration = started.elapsed();
    let out = command(&timed, Some("0/2")).output().expect("run");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let started = std::time::Instant::now();
    let out = command(&timed, None).output().expect("finalize");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let finalizing = started.elapsed();
    for point in 0..3u32 {
        let dst = dir.path().join(format!("run{point}"));
        let out = command(&dst, Some("0/2")).output().expect("worker 0");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut child = command(&dst, Some("1/2")).spawn().expect("spawn");
        std::thread::sleep(duration.mul_f64(0.2 + 0.25 * f64::from(point)));
        child.kill().ok(); // SIGKILL
        child.wait().expect("reap");
        let out = command(&dst, Some("1/2")).output().expect("rerun");
        assert!(
            out.status.success(),
            "point {point}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        // Level 0's 8 x 8 shards alternate between the workers, and so do the 4 levels whose
        // shards each level-0 shard alone feeds; levels 4 to 6 (16 + 4 + 1 shards) are
        // finalize's. (A shard that a resume proved by its manifest record is not recorded as
        // done again, so `shards_done` can fall short of what the workers made.)
        let out = zshard(&["status", dst.to_str().expect("utf-8"), "--json"]);
        let status: Value = serde_json::from_slice(&out.stdout).expect("status JSON");
        let planned: Vec<&Value> = status["workers"]
            .as_array()
            .expect("workers")
            .iter()
            .map(|w| &w["shards_planned"])
            .collect();
        assert_eq!(
            planned,
            [&json!(128), &json!(128)],
            "point {point}: {status}"
        );
        assert_eq!(status["totals"]["shards_planned"], 277, "{status}");
        assert_eq!(status["finalize_makes"], 21, "{status}");
        // finalize killed once on its way, then run again (unless it had finished).
        if point == 1 {
            let mut child = command(&dst, None).spawn().expect("spawn finalize");
            std::thread::sleep(finalizing.mul_f64(0.6));
            child.kill().ok();
            child.wait().expect("reap");
        }
        if dst.join(".zshard/claim.json").exists() {
            let out = command(&dst, None).output().expect("finalize");
            assert!(
                out.status.success(),
                "point {point}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let differ = differences(&reference, &dst);
        assert!(differ.is_empty(), "point {point}: {differ:?}");
    }
}

/// A rerun after the source changed (issue 40) brings every level up to date, as it does a single
/// array: a changed chunk rewrites the shards of each level made from it; a row appended to an odd
/// extent also changes the last row of each lower level (its last element then stands for one more
/// row of level 0), even where no stored chunk and no lower level's shape changed.
#[test]
fn a_rerun_after_the_source_changed_brings_every_level_up_to_date() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (src, dst) = (dir.path().join("src"), dir.path().join("dst"));
    let report = dir.path().join("report.json");
    let (shape, chunks) = ([39u64, 36], [8u64, 8]);
    let mut values = ramp(&shape, |i| 1.0 + (i % 200) as f64);
    source(
        &src,
        DataType::UInt16,
        &shape,
        &chunks,
        &["y", "x"],
        &values,
    );
    // By mode: the mean leaves out the fill value (0), which the rows appended below hold.
    let args = [
        "--pyramid",
        "3",
        "--downsample",
        "mode",
        "--shard-shape",
        "16,16",
        "--report",
        report.to_str().expect("utf-8"),
    ];
    let convert = |values: &[f64], shape: &[u64]| -> Value {
        check_pyramid(&src, &dst, &args, &[2, 2], "mode", None, true);
        assert_eq!(level(&dst.join("0")), (values.to_vec(), shape.to_vec()));
        serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json")
    };
    let update_source = |values: &[f64], shape: &[u64]| {
        let data: Vec<u8> = values
            .iter()
            .flat_map(|&v| (v as u16).to_le_bytes())
            .collect();
        let compressor = json!({"id": "zstd", "level": 1});
        common::update_v2(&src, DataType::UInt16, shape, &chunks, compressor, &data)
    };
    convert(&values, &shape);

    // One element of chunk (0, 0): level 0's shard (0, 0) and the shard of each level below it.
    values[3 * 36 + 5] = 7777.0;
    assert_eq!(update_source(&values, &shape), ["0.0"]);
    let report = convert(&values, &shape);
    assert_eq!(report["status"], "ok");
    assert_eq!(report["update"]["shards_rewritten"], 3, "{report}");
    assert_eq!(report["update"]["shards_added"], 0, "{report}");

    // One row more, of zeros: chunk row 4 (rows 32..40, stored padded with zeros) keeps its bytes
    // and every level but 0 keeps its shape, yet level 1's last row now stands for rows 38 and 39 of
    // level 0, not 38 alone (its mode becomes 0), and level 2's for level 1's rows 18 and 19.
    let grown = [40u64, 36];
    values.extend([0.0; 36]);
    assert_eq!(update_source(&values, &grown), Vec::<String>::new());
    let report = convert(&values, &grown);
    assert_eq!(report["status"], "ok");
    // The last row of shards of each level: 3 of level 0 (16 x 16), 3 of level 1 (20 x 18 in
    // 8 x 8) and 2 of level 2 (10 x 9).
    assert_eq!(report["update"]["shards_rewritten"], 8, "{report}");
    assert_eq!(report["update"]["shards_added"], 0, "{report}");

    // Nothing changed: complete, nothing written.
    let before = common::files(&dst);
    let out = zshard(&[
        "convert",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
        "--pyramid",
        "3",
        "--downsample",
        "mode",
        "--shard-shape",
        "16,16",
    ]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already complete"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(common::files(&dst) == before);
}

/// Issues 40 and 41 together: an update of a pyramid split over workers + `finalize` (one changed
/// chunk, rows appended) ends as one run over the changed source makes it, file for file, and the
/// workers rewrite only what the change reaches.
#[test]
fn workers_and_finalize_split_an_update_of_a_pyramid() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (src, shared) = (dir.path().join("src"), dir.path().join("shared"));
    let (shape, chunks) = ([200u64, 260], [16u64, 16]);
    let mut values = ramp(&shape, |e| 1.0 + ((e * 7919) % 60000) as f64);
    source(
        &src,
        DataType::UInt16,
        &shape,
        &chunks,
        &["y", "x"],
        &values,
    );
    let args = [
        "--pyramid",
        "5",
        "--shard-shape",
        "64,64",
        "--chunk-shape",
        "16,16",
    ];
    by_workers(&src, &shared, &args, 2, "3");

    // One element of chunk (2, 3), and 24 rows more.
    values[(40 * 260 + 50) as usize] = 7.0;
    let grown = [224u64, 260];
    values.extend(ramp(&[24, 260], |e| 3.0 + (e % 500) as f64));
    let data: Vec<u8> = values
        .iter()
        .flat_map(|&v| (v as u16).to_le_bytes())
        .collect();
    let compressor = json!({"id": "zstd", "level": 1});
    common::update_v2(&src, DataType::UInt16, &grown, &chunks, compressor, &data);

    let mut written = 0;
    for index in 0..2 {
        let worker = format!("{index}/2");
        let report = dir.path().join(format!("report{index}.json"));
        let mut all = vec![
            "convert",
            src.to_str().expect("utf-8"),
            shared.to_str().expect("utf-8"),
            "--worker",
            &worker,
            "--quiet",
            "--report",
            report.to_str().expect("utf-8"),
        ];
        all.extend_from_slice(&args);
        let (ok, stderr) = run(&all);
        assert!(ok, "worker {worker}: {stderr}");
        let report: Value =
            serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("json");
        assert_eq!(report["status"], "ok", "{report}");
        written += report["totals"]["shards_written"].as_u64().expect("count");
    }
    let (ok, stderr) = run(&["finalize", shared.to_str().expect("utf-8"), "--quiet"]);
    assert!(ok, "finalize: {stderr}");
    // The workers make levels 0 to 2: 4 x 5, 2 x 3 and 1 x 2 shards (224 rows stay in 4 shard
    // rows); an update rewrites the changed chunk's shard, the last row and the lower shards
    // above them (with the level-0 shards that feed those), not all 28.
    assert!(written < 28, "the workers wrote {written} shards");

    let one = dir.path().join("one");
    let mut all = vec![
        "convert",
        src.to_str().expect("utf-8"),
        one.to_str().expect("utf-8"),
        "--quiet",
    ];
    all.extend_from_slice(&args);
    let (ok, stderr) = run(&all);
    assert!(ok, "{stderr}");
    let differ = differences(&common::files(&one), &shared);
    assert!(differ.is_empty(), "{differ:?}");
    assert_eq!(level(&shared.join("0")), (values, grown.to_vec()));
    let (ok, stderr) = run(&[
        "verify",
        src.to_str().expect("utf-8"),
        shared.to_str().expect("utf-8"),
    ]);
    assert!(ok, "verify: {stderr}");
}

/// Issue 41: `finalize SRC DST` given the workers' options again (`--shard-shape`, `--chunk-shape`,
/// `--compressor`) applies them as `convert` does, to level 0 alone (the levels below follow it),
/// and makes the pyramid of one run; an option given otherwise than the workers' is refused naming
/// it.
#[test]
fn finalize_given_the_workers_options_again_makes_the_pyramid_of_one_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_str().expect("utf-8").to_string();
    let shape = [256, 256];
    source(
        &dir.path().join("src"),
        DataType::UInt16,
        &shape,
        &[16, 16],
        &["y", "x"],
        &ramp(&shape, |e| 1.0 + ((e * 7919) % 60000) as f64),
    );
    let args = [
        "--pyramid",
        "auto",
        "--shard-shape",
        "64,64",
        "--chunk-shape",
        "16,16",
        "--compressor",
        "zstd:3",
        "--quiet",
    ];
    let with = |first: &[&str]| -> Vec<String> {
        first
            .iter()
            .chain(&args)
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    let run_owned = |all: Vec<String>| run(&all.iter().map(String::as_str).collect::<Vec<_>>());
    let (ok, stderr) = run_owned(with(&["convert", &path("src"), &path("one")]));
    assert!(ok, "{stderr}");
    for worker in ["0/2", "1/2"] {
        let (ok, stderr) = run_owned(with(&[
            "convert",
            &path("src"),
            &path("dst"),
            "--worker",
            worker,
        ]));
        assert!(ok, "worker {worker}: {stderr}");
    }
    // Other shapes than the workers' are refused, naming the option given otherwise.
    for (option, other) in [("--shard-shape", "128,128"), ("--chunk-shape", "32,32")] {
        let mut given = with(&["finalize", &path("src"), &path("dst")]);
        let at = given.iter().position(|a| a == option).expect("given") + 1;
        given[at] = other.to_string();
        let (ok, stderr) = run_owned(given);
        assert!(!ok, "{option} {other} was accepted");
        assert!(stderr.contains(option), "{option}: {stderr}");
        assert!(!dir.path().join("dst/zarr.json").exists(), "{stderr}");
    }
    let (ok, stderr) = run_owned(with(&["finalize", &path("src"), &path("dst")]));
    assert!(ok, "finalize SRC DST with the workers' options: {stderr}");
    let differ = differences(
        &common::files(&dir.path().join("one")),
        &dir.path().join("dst"),
    );
    assert!(differ.is_empty(), "{differ:?}");
}

/// An OME-Zarr 0.4 pyramid of three levels at `dir`, made by 2x2 means of `base` (square, uint16).
fn ome_pyramid(dir: &Path, base: u64) {
    let mut values = ramp(&[base, base], |e| 1.0 + ((e * 7919) % 60000) as f64);
    let mut datasets = Vec::new();
    for level in 0..3u32 {
        let side = base >> level;
        source(
            &dir.join(level.to_string()),
            DataType::UInt16,
            &[side, side],
            &[16, 16],
            &["y", "x"],
            &values,
        );
        let scale = f64::from(1u32 << level);
        datasets.push(json!({"path": level.to_string(),
            "coordinateTransformations": [{"type": "scale", "scale": [scale, scale]}]}));
        let next = side / 2;
        values = (0..next * next)
            .map(|i| {
                let (y, x) = (i / next * 2, i % next * 2);
                let at = |y: u64, x: u64| values[(y * side + x) as usize];
                ((at(y, x) + at(y, x + 1) + at(y + 1, x) + at(y + 1, x + 1)) / 4.0).round()
            })
            .collect();
    }
    std::fs::write(dir.join(".zgroup"), r#"{"zarr_format": 2}"#).expect("zgroup");
    let attributes = json!({"multiscales": [{"version": "0.4", "name": "image",
        "axes": [{"name": "y", "type": "space"}, {"name": "x", "type": "space"}],
        "datasets": datasets}]});
    std::fs::write(dir.join(".zattrs"), attributes.to_string()).expect("zattrs");
}

/// Issue 41: an existing OME-Zarr pyramid converted by workers, then `finalize SRC DST` given the
/// workers' shapes again: as `convert` applies them, they are level 0's and the levels below follow
/// it (not every level's), so finalize makes the output of one run; shapes given otherwise than
/// the workers' are refused naming the option. The same with `--level-shapes`.
#[test]
fn finalize_of_an_ome_pyramid_given_the_workers_shapes_again_makes_the_output_of_one_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = |name: &str| dir.path().join(name).to_str().expect("utf-8").to_string();
    ome_pyramid(&dir.path().join("src"), 256);
    let args = [
        "--shard-shape",
        "64,64",
        "--chunk-shape",
        "16,16",
        "--compressor",
        "zstd:3",
        "--quiet",
    ];
    let with = |first: &[&str]| -> Vec<String> {
        first
            .iter()
            .chain(&args)
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    let run_owned = |all: Vec<String>| run(&all.iter().map(String::as_str).collect::<Vec<_>>());
    let (ok, stderr) = run_owned(with(&["convert", &path("src"), &path("one")]));
    assert!(ok, "{stderr}");
    // The levels below level 0 have shapes of their own, derived from level 0's.
    let level2: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("one/2/zarr.json")).expect("read"))
            .expect("json");
    assert_ne!(
        level2["chunk_grid"]["configuration"]["chunk_shape"],
        json!([64, 64]),
        "{level2}"
    );
    for worker in ["0/2", "1/2"] {
        let (ok, stderr) = run_owned(with(&[
            "convert",
            &path("src"),
            &path("dst"),
            "--worker",
            worker,
        ]));
        assert!(ok, "worker {worker}: {stderr}");
    }
    for (option, other) in [("--shard-shape", "128,128"), ("--chunk-shape", "32,32")] {
        let mut given = with(&["finalize", &path("src"), &path("dst")]);
        let at = given.iter().position(|a| a == option).expect("given") + 1;
        given[at] = other.to_string();
        let (ok, stderr) = run_owned(given);
        assert!(!ok, "{option} {other} was accepted");
        assert!(stderr.contains(option), "{option}: {stderr}");
        assert!(!dir.path().join("dst/zarr.json").exists(), "{stderr}");
    }
    let (ok, stderr) = run_owned(with(&["finalize", &path("src"), &path("dst")]));
    assert!(ok, "finalize SRC DST with the workers' shapes: {stderr}");
    let differ = differences(
        &common::files(&dir.path().join("one")),
        &dir.path().join("dst"),
    );
    assert!(differ.is_empty(), "{differ:?}");

    // The same with `--level-shapes` for levels 0 and 1 (level 2 derives its shapes from level 0's).
    let levels = [
        "--level-shapes",
        "0:64,64/16,16",
        "--level-shapes",
        "1:64,64/32,32",
        "--quiet",
    ];
    let with = |first: &[&str]| -> Vec<String> {
        first
            .iter()
            .chain(&levels)
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    let (ok, stderr) = run_owned(with(&["convert", &path("src"), &path("one-levels")]));
    assert!(ok, "{stderr}");
    for worker in ["0/2", "1/2"] {
        let (ok, stderr) = run_owned(with(&[
            "convert",
            &path("src"),
            &path("dst-levels"),
            "--worker",
            worker,
        ]));
        assert!(ok, "worker {worker}: {stderr}");
    }
    let (ok, stderr) = run_owned(with(&["finalize", &path("src"), &path("dst-levels")]));
    assert!(
        ok,
        "finalize SRC DST with the workers' level shapes: {stderr}"
    );
    let differ = differences(
        &common::files(&dir.path().join("one-levels")),
        &dir.path().join("dst-levels"),
    );
    assert!(differ.is_empty(), "{differ:?}");
}
