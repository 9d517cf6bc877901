//! The zarr-extensions registry's data types and codecs with zarrs as the producer and the reader
//! (issue 42): zarrs (0.23, the Rust Zarr library) writes one array per data type and codec chain,
//! zshard converts it, and zarrs reads the output back: every element must be the source's, bit for
//! bit (the bits a sub-byte type has), and the fill value the same. No Python package writes most of
//! these types (tensorstore 0.1.86 has neither `float8_e4m3`, the unsigned sub-byte types, the
//! 6-bit floats nor any `complex_*` but the numpy two), nor `packbits`, `bitround` or `reshape`.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::zshard;
use serde_json::{json, Value};
use zarrs::array::{Array, ArrayBytes, ArrayMetadata, ArraySubset};
use zarrs::filesystem::FilesystemStore;

const SHAPE: [u64; 2] = [23, 17];
const CHUNKS: [u64; 2] = [5, 4];

/// A registered data type: its name, a fill value other than zero where it has one, the bytes of an
/// element in memory, and the bits of each byte that hold the value.
struct Type {
    name: &'static str,
    fill: Value,
    size: usize,
    bits: u8,
    signed: bool,
}

const fn t(name: &'static str, size: usize, bits: u8) -> (&'static str, usize, u8) {
    (name, size, bits)
}

/// Every data type of the registry that zarrs writes, with its element size and bits
/// (`float8_e4m3fn` and its complex type it has not; tensorstore writes the first in
/// tests/interop/test_ml_dtypes.py). `float8_e8m0fnu` is left out: zarrs reads its fill value only
/// in hex, and zshard writes it as a number, as tensorstore (its producer, tested there) does; its
/// complex type is in (tensorstore has none, and zshard writes its fill value in hex).
const TYPES: [(&str, usize, u8); 31] = [
    t("bfloat16", 2, 8),
    t("float8_e3m4", 1, 8),
    t("float8_e4m3", 1, 8),
    t("float8_e4m3b11fnuz", 1, 8),
    t("float8_e4m3fnuz", 1, 8),
    t("float8_e5m2", 1, 8),
    t("float8_e5m2fnuz", 1, 8),
    t("float6_e2m3fn", 1, 6),
    t("float6_e3m2fn", 1, 6),
    t("float4_e2m1fn", 1, 4),
    t("int4", 1, 4),
    t("uint4", 1, 4),
    t("int2", 1, 2),
    t("uint2", 1, 2),
    t("complex_bfloat16", 4, 8),
    t("complex_float16", 4, 8),
    t("complex_float32", 8, 8),
    t("complex_float64", 16, 8),
    t("complex_float8_e3m4", 2, 8),
    t("complex_float8_e4m3", 2, 8),
    t("complex_float8_e5m2", 2, 8),
    t("complex_float8_e8m0fnu", 2, 8),
    t("complex_float8_e4m3fn", 2, 8),
    t("complex_float8_e4m3b11fnuz", 2, 8),
    t("complex_float8_e4m3fnuz", 2, 8),
    t("complex_float8_e5m2fnuz", 2, 8),
    t("complex_float6_e2m3fn", 2, 6),
    t("complex_float6_e3m2fn", 2, 6),
    t("complex_float4_e2m1fn", 2, 4),
    t("r8", 1, 8),
    t("r24", 3, 8),
];

fn types() -> Vec<Type> {
    TYPES
        .iter()
        .map(|&(name, size, bits)| Type {
            name,
            fill: fill_value(name),
            size,
            bits,
            signed: name.starts_with("int"),
        })
        .collect()
}

/// A fill value of `name` other than zero, in the registry's JSON forms: NaN and infinities by
/// name, the 8-, 6- and 4-bit floats by their bits in hex (the form zarrs reads), complex values as
/// pairs.
fn fill_value(name: &str) -> Value {
    let part = name.trim_start_matches("complex_");
    let real = match part {
        "int4" => json!(-3),
        "int2" => json!(-2),
        "uint4" => json!(9),
        "uint2" => json!(3),
        "bfloat16" => json!("NaN"),
        "float16" | "float32" => json!(1.5),
        "float64" => json!("-Infinity"),
        "r8" => json!([7]),
        "r24" => json!([1, 2, 255]),
        small if small.starts_with("float8") => json!("0xa5"),
        small if small.starts_with("float6") => json!("0x25"),
        _ => json!("0x0b"),
    };
    let imaginary = match part {
        "bfloat16" | "float16" | "float32" | "float64" => json!(-2.0),
        _ => json!("0x03"),
    };
    match name.starts_with("complex_") {
        true => json!([real, imaginary]),
        false => real,
    }
}

/// Elements of `ty` in zarrs' memory layout: random bits, sign-extended for the signed sub-byte
/// integers (as zarrs holds an `int4` in an `i8`).
fn elements(ty: &Type, count: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..count * ty.size)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let byte = (state >> 24) as u8 & mask(ty.bits);
            match ty.signed && byte >> (ty.bits - 1) & 1 == 1 {
                true => byte | !mask(ty.bits),
                false => byte,
            }
        })
        .collect()
}

fn mask(bits: u8) -> u8 {
    match bits {
        8 => 0xFF,
        n => (1u8 << n) - 1,
    }
}

/// The codec chains zarrs writes each type with: `bytes` (big-endian where it matters) and
/// `packbits`, each followed by a compressor as a producer would.
fn chains(ty: &Type) -> Vec<(&'static str, Value)> {
    let zstd = json!({"name": "zstd", "configuration": {"level": 1, "checksum": false}});
    // Raw bits have no byte order, and no packing.
    if ty.name.starts_with('r') {
        return vec![("bytes", json!([{"name": "bytes"}, zstd]))];
    }
    let bytes = match ty.size {
        1 => json!({"name": "bytes"}),
        _ => json!({"name": "bytes", "configuration": {"endian": "big"}}),
    };
    // zarrs 0.23 leaves the padding byte out for whole-byte components (the registry says it is
    // always there): zshard reads both, and writes the registry's form, which zarrs cannot read, so
    // whole-byte types are packed without a padding byte here.
    let padding = match ty.bits {
        8 => "none",
        _ => "first_byte",
    };
    let mut chains = vec![
        (
            "bytes",
            json!([bytes, {"name": "zstd", "configuration": {"level": 1, "checksum": false}}]),
        ),
        (
            "packbits",
            json!([{"name": "packbits", "configuration": {"padding_encoding": padding}}, {"name": "crc32c"}]),
        ),
    ];
    if ty.name == "bfloat16" {
        chains.push((
            "bitround",
            json!([{"name": "bitround", "configuration": {"keepbits": 3}}, {"name": "bytes", "configuration": {"endian": "little"}}]),
        ));
    }
    if ty.name == "int4" {
        chains.push((
            "reshape",
            json!([{"name": "reshape", "configuration": {"shape": [[0, 1]]}}, {"name": "packbits"}]),
        ));
    }
    chains
}

fn metadata(ty: &Type, codecs: &Value) -> Value {
    json!({
        "zarr_format": 3,
        "node_type": "array",
        "shape": SHAPE,
        "data_type": ty.name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": CHUNKS}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": ty.fill,
        "codecs": codecs,
    })
}

/// zarrs writes `ty` with `codecs` into `dir`: every chunk but the first (which reads as the fill
/// value).
/// Types no Zarr library has, with one of the same layout zarrs has: zarrs writes and reads the
/// stand-in, and the documents name the type (a fixture built from the registry's text, whose bytes
/// zarrs makes).
const STAND_INS: [(&str, &str); 1] = [("complex_float8_e4m3fn", "complex_float8_e4m3")];

/// `dir`'s `zarr.json` with its data type `from` renamed `to`, when it is `from`: whether it was.
fn rename_type(dir: &Path, from: &str, to: &str) -> bool {
    let path = dir.join("zarr.json");
    let mut meta: Value =
        serde_json::from_slice(&std::fs::read(&path).expect("zarr.json")).expect("json");
    if meta["data_type"] != from {
        return false;
    }
    meta["data_type"] = json!(to);
    std::fs::write(&path, meta.to_string()).expect("zarr.json written");
    true
}

fn write_source(dir: &Path, ty: &Type, codecs: &Value, seed: u64) -> Result<(), String> {
    let store = Arc::new(FilesystemStore::new(dir).expect("store"));
    let mut doc = metadata(ty, codecs);
    let stand_in = STAND_INS.iter().find(|(name, _)| *name == ty.name);
    if let Some((_, zarrs_name)) = stand_in {
        doc["data_type"] = json!(zarrs_name);
    }
    let meta: ArrayMetadata = serde_json::from_value(doc).expect("metadata");
    let array = Array::new_with_metadata(store, "/", meta)
        .map_err(|e| format!("zarrs makes {} with {codecs}: {e}", ty.name))?;
    array.store_metadata().expect("metadata stored");
    let chunk_elements = (CHUNKS[0] * CHUNKS[1]) as usize;
    for i in 0..SHAPE[0].div_ceil(CHUNKS[0]) {
        for j in 0..SHAPE[1].div_ceil(CHUNKS[1]) {
            if i + j == 0 {
                continue;
            }
            let data = elements(ty, chunk_elements, seed + i * 100 + j);
            array
                .store_chunk(&[i, j], ArrayBytes::new_flen(data))
                .map_err(|e| format!("zarrs writes {} chunk {i},{j}: {e}", ty.name))?;
        }
    }
    if let Some((name, zarrs_name)) = stand_in {
        rename_type(dir, zarrs_name, name);
    }
    Ok(())
}

/// The whole array at `dir` as zarrs reads it, and its fill value's bytes.
fn read(dir: &Path) -> Result<(Vec<u8>, Vec<u8>), String> {
    let renamed: Vec<_> = STAND_INS
        .iter()
        .filter(|(name, zarrs_name)| rename_type(dir, name, zarrs_name))
        .collect();
    let read = read_as_zarrs_names(dir);
    for (name, zarrs_name) in renamed {
        rename_type(dir, zarrs_name, name);
    }
    read
}

fn read_as_zarrs_names(dir: &Path) -> Result<(Vec<u8>, Vec<u8>), String> {
    let store = Arc::new(FilesystemStore::new(dir).expect("store"));
    let array = Array::open(store, "/").map_err(|e| format!("zarrs opens {dir:?}: {e}"))?;
    let all: ArrayBytes<'static> = array
        .retrieve_array_subset(&ArraySubset::new_with_shape(SHAPE.to_vec()))
        .map_err(|e| format!("zarrs reads {dir:?}: {e}"))?;
    let bytes = all.into_fixed().expect("fixed size").to_vec();
    Ok((bytes, array.fill_value().as_ne_bytes().to_vec()))
}

/// The bits of each byte that hold a value (the registry says the others are ignored).
fn significant(bytes: &[u8], bits: u8) -> Vec<u8> {
    bytes.iter().map(|b| b & mask(bits)).collect()
}

/// One conversion of `ty` written with `codecs`, read back: `Err` says what differs.
fn case(dir: &Path, n: usize, ty: &Type, chain_name: &str, codecs: &Value) -> Vec<String> {
    let src = dir.join(format!("{}-{chain_name}", ty.name));
    let source = write_source(&src, ty, codecs, n as u64 * 7 + 1).and_then(|()| read(&src));
    let (expected, fill) = match source {
        Ok(read) => read,
        Err(e) => return vec![e],
    };
    let mut failures = Vec::new();
    for compressor in ["source", "zstd:3"] {
        let case = format!("{} {chain_name} --compressor {compressor}", ty.name);
        let dst = dir.join(format!("{}-{chain_name}-{compressor}.out", ty.name));
        let out = zshard(&[
            "convert",
            src.to_str().expect("utf-8"),
            dst.to_str().expect("utf-8"),
            "--quiet",
            "--shard-shape",
            "10,8",
            "--chunk-shape",
            "5,4",
            "--compressor",
            compressor,
        ]);
        if !out.status.success() {
            failures.push(format!("{case}: {}", String::from_utf8_lossy(&out.stderr)));
            continue;
        }
        let (got, got_fill) = match read(&dst) {
            Ok(read) => read,
            Err(e) => {
                failures.push(format!("{case}: {e}"));
                continue;
            }
        };
        if significant(&got, ty.bits) != significant(&expected, ty.bits) {
            failures.push(format!("{case}: elements differ"));
        }
        if significant(&got_fill, ty.bits) != significant(&fill, ty.bits) {
            failures.push(format!("{case}: fill value {got_fill:?}, not {fill:?}"));
        }
        let meta: Value =
            serde_json::from_slice(&std::fs::read(dst.join("zarr.json")).expect("zarr.json"))
                .expect("json");
        // The registry's aliases are written by their core names.
        let name = match ty.name {
            "complex_float32" => "complex64",
            "complex_float64" => "complex128",
            name => name,
        };
        if meta["data_type"] != name {
            failures.push(format!("{case}: written as {}", meta["data_type"]));
        }
    }
    failures
}

#[test]
fn every_registered_type_and_codec_written_by_zarrs_reads_back_equal_in_zarrs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut failures = Vec::new();
    let mut cases = 0;
    for (n, ty) in types().iter().enumerate() {
        for (chain_name, codecs) in chains(ty) {
            failures.extend(case(tmp.path(), n, ty, chain_name, &codecs));
            cases += 1;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // Two chains a type, one for raw bits, and the bitround and reshape ones.
    assert_eq!(cases, 2 * (TYPES.len() - 2) + 2 + 2);
}
