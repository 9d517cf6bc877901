//! `zshard demo`: writes a small Zarr v2 dataset (a group of three arrays with different data types,
//! compressors, chunk layouts and missing chunks), converts it with the default options and says how
//! to open the result.

use std::path::Path;

use anyhow::Context;
use serde_json::{json, Value};
use zshard_codecs::build_chain;
use zshard_core::{c_order, grid_shape, product, Region};
use zshard_zarr::parse_v2_array;

struct DemoArray {
    path: &'static str,
    zarray: Value,
    zattrs: Value,
    /// Value of element `index` (C order) as little-endian bytes.
    value: fn(&[u64]) -> Vec<u8>,
    /// Chunks left out (so they read as the fill value).
    skip: fn(&[u64]) -> bool,
}

fn arrays() -> Vec<DemoArray> {
    vec![
        DemoArray {
            path: "climate/temperature",
            zarray: json!({"zarr_format": 2, "shape": [720, 1440], "chunks": [180, 180], "dtype": "<f4",
                "compressor": {"id": "blosc", "cname": "zstd", "clevel": 5, "shuffle": 1, "blocksize": 0},
                "fill_value": "NaN", "order": "C", "filters": null}),
            zattrs: json!({"_ARRAY_DIMENSIONS": ["lat", "lon"], "units": "K", "long_name": "surface temperature"}),
            value: |i| {
                let (lat, lon) = (i[0] as f32 / 4.0 - 90.0, i[1] as f32 / 4.0);
                let t = 288.0 - 30.0 * (lat.to_radians().sin().powi(2))
                    + 5.0 * (lon.to_radians() * 3.0).cos();
                t.to_le_bytes().to_vec()
            },
            skip: |_| false,
        },
        DemoArray {
            path: "terrain/elevation",
            zarray: json!({"zarr_format": 2, "shape": [1000, 1000], "chunks": [128, 128], "dtype": "<i2",
                "compressor": {"id": "zstd", "level": 3}, "fill_value": 0, "order": "C", "filters": null,
                "dimension_separator": "/"}),
            zattrs: json!({"_ARRAY_DIMENSIONS": ["y", "x"], "units": "m"}),
            value: |i| {
                let (y, x) = (i[0] as f64, i[1] as f64);
                let h = 800.0 * ((y / 130.0).sin() * (x / 170.0).cos()) + (x * 0.3);
                (h as i16).to_le_bytes().to_vec()
            },
            // The sea: chunks never written, read back as the fill value 0.
            skip: |c| c[0] >= 6 && c[1] <= 2,
        },
        DemoArray {
            path: "counts",
            zarray: json!({"zarr_format": 2, "shape": [64, 64, 64], "chunks": [16, 16, 16], "dtype": "|u1",
                "compressor": {"id": "gzip", "level": 5}, "fill_value": 0, "order": "F", "filters": null}),
            zattrs: json!({"description": "a 3-D array stored in Fortran order"}),
            value: |i| vec![((i[0] * 3 + i[1] * 5 + i[2] * 7) % 251) as u8],
            skip: |_| false,
        },
    ]
}

fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("cannot create {}", parent.display()))?;
    }
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

/// Writes the demo Zarr v2 group at `root`, encoding chunks with zshard's own codecs.
pub fn write_source(root: &Path) -> anyhow::Result<()> {
    write_file(&root.join(".zgroup"), br#"{"zarr_format": 2}"#)?;
    write_file(
        &root.join(".zattrs"),
        br#"{"title": "zshard demo dataset"}"#,
    )?;
    for group in ["climate", "terrain"] {
        write_file(&root.join(group).join(".zgroup"), br#"{"zarr_format": 2}"#)?;
    }
    for array in arrays() {
        let dir = root.join(array.path);
        let zarray = serde_json::to_vec_pretty(&array.zarray)?;
        write_file(&dir.join(".zarray"), &zarray)?;
        write_file(
            &dir.join(".zattrs"),
            &serde_json::to_vec_pretty(&array.zattrs)?,
        )?;
        let meta = parse_v2_array(array.path, &zarray, None)?;
        let repr = meta.chunk_repr();
        let chain = build_chain(&meta.codecs, &repr)?;
        for coord in c_order(&grid_shape(&meta.shape, &meta.chunk_shape)) {
            if (array.skip)(&coord) {
                continue;
            }
            let chunk = Region::of_chunk(&coord, &meta.chunk_shape, &meta.shape);
            let mut raw = meta.fill_value.repeat(product(&meta.chunk_shape) as usize);
            let size = meta.data_type.size();
            for local in c_order(&chunk.shape) {
                let global: Vec<u64> = local.iter().zip(&chunk.start).map(|(l, s)| l + s).collect();
                let at = zshard_core::linear_index(&local, &meta.chunk_shape) as usize * size;
                raw[at..at + size].copy_from_slice(&(array.value)(&global));
            }
            let encoded = chain.encode(raw, &repr)?;
            write_file(&dir.join(meta.chunk_key_encoding.key(&coord)), &encoded)?;
        }
    }
    Ok(())
}

pub fn demo(dir: &Path, threads: Option<usize>, quiet: bool) -> anyhow::Result<()> {
    let source = dir.join("source.zarr");
    let output = dir.join("sharded.zarr");
    for old in [&source, &output] {
        if old.exists() {
            std::fs::remove_dir_all(old)
                .with_context(|| format!("cannot remove {}", old.display()))?;
        }
    }
    write_source(&source)?;
    let mut options = zshard_convert::options::Options::new(
        source.to_string_lossy().into_owned(),
        output.to_string_lossy().into_owned(),
    );
    options.run.threads = threads;
    options.run.overwrite = Some(true);
    let (conversion, configured) = zshard_convert::Conversion::configured(&options);
    configured?;
    crate::print::convert(&conversion, quiet)?;
    let job = write_job(dir)?;
    let job = job.display();
    let out = output.display();
    let source = source.display();
    crate::print::stdout(&format!(
        "Demo source (Zarr v2): {source}\n\
         Sharded output (Zarr v3, sharding_indexed): {out}\n\
         Open it in Python (zarr-python 3):\n  \
         python -c \"import zarr; g = zarr.open_group('{out}', mode='r'); print(g.tree()); print(g['climate/temperature'][:3, :3])\"\n\
         The same source as a job with settings per array (works from any directory):\n  \
         zshard run {job}    # then: zshard verify {job}\n"
    ))
}

/// The repository's demo job, beside the demo data it converts.
const DEMO_JOB: &str = include_str!("../../demo-job.toml");

/// Writes `demo-job.toml` into `dir`: the repository's demo job with its paths relative to `dir`
/// (job paths resolve against the job file's folder), so it runs wherever the demo was made.
fn write_job(dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    let job = dir.join("demo-job.toml");
    let text = DEMO_JOB.replace("../zshard-demo/", "");
    write_file(&job, text.as_bytes())?;
    Ok(job)
}
