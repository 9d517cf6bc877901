//! Round-trip matrix: {index start, end} × {inner = source chunk, inner smaller, inner not aligned}
//! × {1-D, 2-D, 3-D, shapes not divisible by the chunk} × {uint8, int16, uint16, float32, float64},
//! each converted by the binary and read back bit for bit through zshard's own shard decoder.

mod common;

use common::{expected, read_v3, shape_arg, write_v2, zshard};
use serde_json::json;
use zshard_core::{DataType, IndexEncoding, IndexLocation, ShardReader};

const DTYPES: [DataType; 5] = [
    DataType::UInt8,
    DataType::Int16,
    DataType::UInt16,
    DataType::Float32,
    DataType::Float64,
];

/// (name, array shape, source chunk shape)
const SHAPES: [(&str, &[u64], &[u64]); 4] = [
    ("1d", &[100], &[10]),
    ("2d", &[64, 48], &[16, 16]),
    ("3d", &[20, 18, 16], &[10, 6, 8]),
    ("2d-ragged", &[67, 45], &[16, 10]),
];

#[derive(Clone, Copy, Debug)]
enum Inner {
    SameAsSource,
    Smaller,
    NotAligned,
}

/// Inner and shard shapes for a source chunk shape.
fn layout(inner: Inner, chunks: &[u64]) -> (Vec<u64>, Vec<u64>) {
    let inner: Vec<u64> = match inner {
        Inner::SameAsSource => chunks.to_vec(),
        Inner::Smaller => chunks.iter().map(|c| (c / 2).max(1)).collect(),
        Inner::NotAligned => chunks.iter().map(|c| c + 3).collect(),
    };
    let shard = inner.iter().map(|i| i * 2).collect();
    (inner, shard)
}

const SOURCE_COMPRESSORS: [&str; 4] = [
    r#"{"id": "blosc", "cname": "zstd", "clevel": 5, "shuffle": 1, "blocksize": 0}"#,
    r#"{"id": "zstd", "level": 1}"#,
    r#"{"id": "gzip", "level": 1}"#,
    r#"{"id": "zlib", "level": 1}"#,
];
const OUTPUT_COMPRESSORS: [&str; 4] = ["zstd:3", "blosc:lz4:5:bitshuffle", "gzip:1", "none"];

#[test]
fn round_trip_matrix() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut case = 0usize;
    for location in ["start", "end"] {
        for inner_kind in [Inner::SameAsSource, Inner::Smaller, Inner::NotAligned] {
            for (name, shape, chunks) in SHAPES {
                for dtype in DTYPES {
                    case += 1;
                    let label = format!("{location}/{inner_kind:?}/{name}/{dtype}");
                    let src = tmp.path().join(format!("src{case}"));
                    let dst = tmp.path().join(format!("dst{case}"));
                    // The first 17 elements are the fill value, so the first source chunk(s) and inner
                    // chunk(s) can be missing or empty.
                    let data = expected(dtype, shape, 17);
                    let compressor: serde_json::Value =
                        serde_json::from_str(SOURCE_COMPRESSORS[case % 4]).expect("json");
                    write_v2(&src, dtype, shape, chunks, compressor, &data);
                    let (inner, shard) = layout(inner_kind, chunks);
                    let out = zshard(&[
                        "convert",
                        src.to_str().expect("utf-8"),
                        dst.to_str().expect("utf-8"),
                        "--shard-shape",
                        &shape_arg(&shard),
                        "--chunk-shape",
                        &shape_arg(&inner),
                        "--index-location",
                        location,
                        "--compressor",
                        OUTPUT_COMPRESSORS[case % 4],
                        "--threads",
                        if case.is_multiple_of(2) { "1" } else { "3" },
                        "--quiet",
                    ]);
                    assert!(
                        out.status.success(),
                        "{label}: {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    let (back, doc) = read_v3(&dst);
                    assert_eq!(back.len(), data.len(), "{label}");
                    if let Some(i) = (0..data.len()).find(|&i| back[i] != data[i]) {
                        panic!("{label}: first difference at byte {i}");
                    }
                    let sharding = &doc["codecs"][0]["configuration"];
                    assert_eq!(doc["data_type"], json!(dtype.v3_name()), "{label}");
                    assert_eq!(sharding["index_location"], json!(location), "{label}");
                    assert_eq!(
                        doc["chunk_grid"]["configuration"]["chunk_shape"],
                        json!(shard),
                        "{label}"
                    );
                    assert_eq!(sharding["chunk_shape"], json!(inner), "{label}");
                }
            }
        }
    }
}

#[test]
fn index_location_and_empty_inner_chunks_on_disk() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    // 1-D, 40 elements, chunks of 10; elements 0..20 are fill, so of the inner chunks of 5 in the first
    // shard of 20, all four are empty and the shard is not written; the second shard has 4 stored.
    let data = expected(DataType::UInt16, &[40], 20);
    write_v2(
        &src,
        DataType::UInt16,
        &[40],
        &[10],
        json!({"id": "zstd", "level": 1}),
        &data,
    );
    for (location, loc) in [("start", IndexLocation::Start), ("end", IndexLocation::End)] {
        let dst = tmp.path().join(location);
        let out = zshard(&[
            "convert",
            src.to_str().expect("utf-8"),
            dst.to_str().expect("utf-8"),
            "--shard-shape",
            "20",
            "--chunk-shape",
            "5",
            "--index-location",
            location,
            "--compressor",
            "none",
            "--quiet",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            !dst.join("c/0").exists(),
            "an all-fill shard must not be written"
        );
        let shard = std::fs::read(dst.join("c/1")).expect("second shard exists");
        // 4 uncompressed inner chunks of 5 uint16 plus a 4-entry index with checksum.
        assert_eq!(shard.len(), 4 * 10 + 4 * 16 + 4);
        let reader =
            ShardReader::new(&shard, 4, loc, IndexEncoding::default()).expect("valid shard");
        let first = reader.index().entries()[0].expect("stored");
        assert_eq!(
            first.offset,
            if loc == IndexLocation::Start { 68 } else { 0 }
        );
        assert_eq!(first.nbytes, 10);
        assert_eq!(reader.chunk(0), Some(&data[40..50]));
        assert_eq!(read_v3(&dst).0, data);
    }
}

#[test]
fn output_is_identical_for_any_thread_count() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    let data = expected(DataType::Float32, &[90, 70], 0);
    write_v2(
        &src,
        DataType::Float32,
        &[90, 70],
        &[20, 20],
        json!({"id": "gzip", "level": 1}),
        &data,
    );
    let run = |threads: &str| {
        let dst = tmp.path().join(format!("t{threads}"));
        let out = zshard(&[
            "convert",
            src.to_str().expect("utf-8"),
            dst.to_str().expect("utf-8"),
            "--shard-shape",
            "32,32",
            "--chunk-shape",
            "16,16",
            "--threads",
            threads,
            "--quiet",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut files = Vec::new();
        for i in 0..3 {
            for j in 0..3 {
                files.push(std::fs::read(dst.join(format!("c/{i}/{j}"))).expect("shard"));
            }
        }
        files
    };
    assert_eq!(run("1"), run("4"));
}

#[test]
fn array_names_with_special_characters_keep_their_data() {
    // Object-store paths escape characters such as `[`, `%` and spaces; names must map to the same
    // folder for reading chunks, writing shards and writing metadata.
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join(".zgroup"), br#"{"zarr_format": 2}"#).expect("write");
    let data = expected(DataType::Int16, &[30, 20], 0);
    for name in ["t[K]", "a b", "x%41y"] {
        write_v2(
            &src.join(name),
            DataType::Int16,
            &[30, 20],
            &[10, 10],
            json!({"id": "zstd", "level": 1}),
            &data,
        );
    }
    let dst = tmp.path().join("dst");
    let out = zshard(&[
        "convert",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in ["t[K]", "a b", "x%41y"] {
        assert_eq!(read_v3(&dst.join(name)).0, data, "{name}");
        assert!(
            dst.join(name).join("c").is_dir(),
            "{name}: shards under the array's own folder"
        );
    }
}

/// Writes a v3 array of one dimension at `dir` with `chunks` (key, encoded bytes).
fn write_v3_1d(dir: &std::path::Path, meta: serde_json::Value, chunks: &[(&str, &[u8])]) {
    std::fs::create_dir_all(dir.join("c")).expect("mkdir");
    std::fs::write(dir.join("zarr.json"), meta.to_string()).expect("zarr.json");
    for (key, bytes) in chunks {
        std::fs::write(dir.join("c").join(key), bytes).expect("chunk");
    }
}

/// Issue 42: an `int4` array stored with the zarr-extensions `packbits` codec (a source built from the
/// spec's text) and a big-endian `bfloat16` array with a NaN-payload fill value convert, read back bit
/// for bit; the int4 output stays packed under the default compressor.
#[test]
fn packbits_int4_and_big_endian_bfloat16_sources() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(
        src.join("zarr.json"),
        r#"{"zarr_format": 3, "node_type": "group"}"#,
    )
    .expect("group");
    let grid = |n: u64| json!({"name": "regular", "configuration": {"chunk_shape": [n]}});
    let packbits = json!({"name": "packbits", "configuration": {"padding_encoding": "first_byte"}});
    // int4 [-1, 2, -8, 7 | 1, 3, 5, -7 | never written]: two nibbles a byte, the first in the low half,
    // after a byte counting 0 padding bits.
    write_v3_1d(
        &src.join("q"),
        json!({"zarr_format": 3, "node_type": "array", "shape": [10], "data_type": "int4",
               "chunk_grid": grid(4), "fill_value": -3, "codecs": [packbits],
               "chunk_key_encoding": {"name": "default"}}),
        &[("0", &[0, 0x2f, 0x78]), ("1", &[0, 0x31, 0x95])],
    );
    // bfloat16 [1.0, -2.0, NaN with payload 0x7fc1], big-endian.
    write_v3_1d(
        &src.join("w"),
        json!({"zarr_format": 3, "node_type": "array", "shape": [3], "data_type": "bfloat16",
               "chunk_grid": grid(3), "fill_value": "0x7fc1",
               "codecs": [{"name": "bytes", "configuration": {"endian": "big"}}],
               "chunk_key_encoding": {"name": "default"}}),
        &[("0", &[0x3f, 0x80, 0xc0, 0x00, 0x7f, 0xc1])],
    );
    let dst = tmp.path().join("dst");
    let out = zshard(&[
        "convert",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (q, q_meta) = read_v3(&dst.join("q"));
    // Decoded int4 sits in the low bits of its byte; the unwritten chunk holds the fill value -3.
    assert_eq!(
        q,
        [0x0f, 0x02, 0x08, 0x07, 0x01, 0x03, 0x05, 0x09, 0x0d, 0x0d]
    );
    assert_eq!(q_meta["data_type"], "int4");
    assert_eq!(q_meta["fill_value"], -3);
    assert_eq!(q_meta["codecs"][0]["configuration"]["codecs"][0], packbits);
    let (w, w_meta) = read_v3(&dst.join("w"));
    assert_eq!(w, [0x80, 0x3f, 0x00, 0xc0, 0xc1, 0x7f]);
    assert_eq!(w_meta["data_type"], "bfloat16");
    assert_eq!(w_meta["fill_value"], "0x7fc1");
}
