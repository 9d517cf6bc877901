//! The adversarial classes that must keep holding: mutated metadata documents (v2 `.zarray` and v3
//! `zarr.json`, sharded or not) are refused with exit code 1 and one line naming the source, never a
//! panic (exit 101) or a signal, and nothing is published under the destination's final names.

mod common;

use std::path::Path;

use common::{expected, read_v3, write_v2, zshard};
use serde_json::{json, Value};
use zshard_core::DataType;

/// A valid v2 array at `dir`: 32x32 uint16 in 8x8 zstd chunks.
fn valid_v2(dir: &Path) -> Value {
    let data = expected(DataType::UInt16, &[32, 32], 0);
    write_v2(
        dir,
        DataType::UInt16,
        &[32, 32],
        &[8, 8],
        json!({"id": "zstd", "level": 1}),
        &data,
    );
    serde_json::from_slice(&std::fs::read(dir.join(".zarray")).expect(".zarray")).expect("json")
}

/// Converts `src` into a fresh destination and asserts the refusal contract.
fn assert_refused(src: &Path, dst: &Path, case: &str) {
    let out = zshard(&[
        "convert",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
        "--shard-shape",
        "16,16",
        "--chunk-shape",
        "8,8",
        "--threads",
        "2",
        "--quiet",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{case}: exit code; stderr: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{case}: {stderr}");
    assert_eq!(
        stderr.trim().lines().count(),
        1,
        "{case}: one line: {stderr}"
    );
    assert!(
        stderr.contains(src.file_name().and_then(|n| n.to_str()).expect("name")),
        "{case}: the error names the source: {stderr}"
    );
    assert!(
        !dst.join("zarr.json").exists(),
        "{case}: no metadata published for a refused conversion"
    );
}

/// Replaces `member` of a metadata document (or removes it with `None`).
fn mutate(doc: &Value, member: &str, value: Option<Value>) -> Vec<u8> {
    let mut doc = doc.clone();
    let map = doc.as_object_mut().expect("object");
    match value {
        Some(v) => map.insert(member.to_string(), v),
        None => map.remove(member),
    };
    serde_json::to_vec(&doc).expect("json")
}

fn v2_mutations(doc: &Value) -> Vec<(String, Vec<u8>)> {
    let mut cases: Vec<(String, Vec<u8>)> = [
        ("shape", Some(json!("x"))),
        ("shape", Some(json!([-1, 32]))),
        ("shape", Some(json!([32]))),
        ("shape", Some(json!([32.5, 32]))),
        ("shape", None),
        ("chunks", Some(json!([0, 8]))),
        ("chunks", Some(json!([8, -8]))),
        ("chunks", Some(json!([8, 8, 8]))),
        ("chunks", Some(json!(["a", 8]))),
        ("dtype", Some(json!("<q9"))),
        ("dtype", Some(json!(""))),
        ("dtype", Some(json!(5))),
        ("dtype", Some(json!("<u4"))),
        ("compressor", Some(json!({"id": "no-such-codec"}))),
        ("compressor", Some(json!({"id": "zstd", "level": "high"}))),
        ("compressor", Some(json!("zstd"))),
        ("compressor", Some(json!({"id": "blosc"}))),
        ("filters", Some(json!([{"id": "delta", "dtype": "<f9"}]))),
        ("filters", Some(json!({"id": "delta"}))),
        ("fill_value", Some(json!("abc"))),
        ("fill_value", Some(json!([1, 2]))),
        ("fill_value", Some(json!(70000))),
        ("order", Some(json!("X"))),
        ("zarr_format", Some(json!(7))),
        ("dimension_separator", Some(json!("::"))),
    ]
    .into_iter()
    .map(|(member, value)| {
        (
            format!(".zarray {member} = {value:?}"),
            mutate(doc, member, value),
        )
    })
    .collect();
    for (name, bytes) in [
        ("empty .zarray", Vec::new()),
        (
            "truncated .zarray",
            br#"{"zarr_format": 2, "shape": [3"#.to_vec(),
        ),
        ("binary .zarray", vec![0xff, 0xfe, 0x00, 0x9c, 0x22]),
        ("nested .zarray", "[".repeat(100_000).into_bytes()),
        ("array .zarray", b"[1, 2, 3]".to_vec()),
    ] {
        cases.push((name.to_string(), bytes));
    }
    cases
}

#[test]
fn mutated_v2_metadata_is_refused_cleanly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    let doc = valid_v2(&src);
    let cases = v2_mutations(&doc);
    for (i, (case, bytes)) in cases.iter().enumerate() {
        std::fs::write(src.join(".zarray"), bytes).expect("mutate");
        assert_refused(&src, &tmp.path().join(format!("dst{i}")), case);
    }
    assert_eq!(cases.len(), 30);
}

#[test]
fn mutated_v3_sharded_metadata_is_refused_cleanly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let v2 = tmp.path().join("v2");
    valid_v2(&v2);
    let src = tmp.path().join("sharded");
    let out = zshard(&[
        "convert",
        v2.to_str().expect("utf-8"),
        src.to_str().expect("utf-8"),
        "--shard-shape",
        "16,16",
        "--chunk-shape",
        "8,8",
        "--quiet",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value =
        serde_json::from_slice(&std::fs::read(src.join("zarr.json")).expect("zarr.json"))
            .expect("json");
    let sharding = |config: Value| json!([{"name": "sharding_indexed", "configuration": config}]);
    let cases: Vec<(String, Vec<u8>)> = [
        ("zarr_format", Some(json!(2))),
        ("node_type", Some(json!("table"))),
        ("node_type", None),
        ("shape", Some(json!([32, -32]))),
        ("data_type", Some(json!("uint128"))),
        ("data_type", Some(json!({"name": "no_such_type"}))),
        ("chunk_grid", Some(json!({"name": "irregular", "configuration": {}}))),
        ("chunk_grid", Some(json!({"name": "regular", "configuration": {"chunk_shape": [0, 16]}}))),
        ("chunk_grid", Some(json!({"name": "regular", "configuration": {"chunk_shape": [16]}}))),
        ("chunk_key_encoding", Some(json!({"name": "hexadecimal"}))),
        ("fill_value", Some(json!("NaN"))),
        ("fill_value", Some(json!(1e300))),
        ("codecs", Some(json!([]))),
        ("codecs", Some(json!([{"name": "no_such_codec"}]))),
        ("codecs", Some(sharding(json!({"chunk_shape": [0, 8], "codecs": [{"name": "bytes"}], "index_codecs": [{"name": "bytes"}]})))),
        ("codecs", Some(sharding(json!({"chunk_shape": [5, 8], "codecs": [{"name": "bytes"}], "index_codecs": [{"name": "bytes"}]})))),
        ("codecs", Some(sharding(json!({"chunk_shape": [8, 8], "codecs": [{"name": "bytes"}], "index_codecs": [{"name": "gzip", "configuration": {"level": 1}}]})))),
        ("codecs", Some(sharding(json!({"chunk_shape": [8, 8], "codecs": [], "index_codecs": [{"name": "bytes"}]})))),
        ("codecs", Some(sharding(json!({"chunk_shape": [8, 8]})))),
        ("storage_transformers", Some(json!([{"name": "unknown_transformer"}]))),
    ]
    .into_iter()
    .map(|(member, value)| (format!("zarr.json {member} = {value:?}"), mutate(&doc, member, value)))
    .collect();
    for (i, (case, bytes)) in cases.iter().enumerate() {
        std::fs::write(src.join("zarr.json"), bytes).expect("mutate");
        assert_refused(&src, &tmp.path().join(format!("dst{i}")), case);
    }
    assert_eq!(cases.len(), 20);
}

/// How a stored chunk is damaged.
fn damage(chunk: &[u8], how: &str) -> Vec<u8> {
    match how {
        "empty" => Vec::new(),
        "one byte" => chunk[..1].to_vec(),
        "truncated" => chunk[..chunk.len() / 2].to_vec(),
        "junk" => (0..chunk.len()).map(|i| (i * 131 + 7) as u8).collect(),
        "doubled" => [chunk, chunk].concat(),
        other => panic!("no damage {other}"),
    }
}

/// The array zarr-python reads where numcodecs decodes a damaged chunk to a full chunk (checked with
/// numcodecs 0.16): zlib and Blosc ignore bytes after their stream, and uncompressed bytes of the right
/// length are data. Every other damage fails in numcodecs or leaves a chunk of the wrong size.
fn what_numcodecs_reads(
    compressor: &Value,
    how: &str,
    data: &[u8],
    chunk: &[u8],
) -> Option<Vec<u8>> {
    let id = compressor.get("id").and_then(Value::as_str);
    match (id, how) {
        (Some("zlib" | "blosc"), "doubled") => Some(data.to_vec()),
        (None, "junk") => {
            // Chunk (1,2) covers rows 8..16 and columns 16..24 of the 32x32 uint16 array.
            let junk = damage(chunk, how);
            let mut values = data.to_vec();
            for row in 0..8 {
                let at = ((8 + row) * 32 + 16) * 2;
                values[at..at + 16].copy_from_slice(&junk[row * 16..row * 16 + 16]);
            }
            Some(values)
        }
        _ => None,
    }
}

#[test]
fn damaged_chunks_are_refused_with_their_key_for_every_compressor() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let compressors = [
        json!({"id": "zstd", "level": 1}),
        json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}),
        json!({"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0}),
        json!({"id": "gzip", "level": 1}),
        json!({"id": "zlib", "level": 1}),
        json!({"id": "bz2", "level": 1}),
        json!({"id": "lzma", "preset": 1}),
        json!({"id": "lz4", "acceleration": 1}),
        json!(null),
    ];
    let damages = ["empty", "one byte", "truncated", "junk", "doubled"];
    let mut refused = 0;
    for (c, compressor) in compressors.iter().enumerate() {
        for how in damages {
            let case = format!("{compressor} chunk {how}");
            let src = tmp.path().join(format!("src{c}-{}", how.replace(' ', "_")));
            let data = expected(DataType::UInt16, &[32, 32], 0);
            write_v2(
                &src,
                DataType::UInt16,
                &[32, 32],
                &[8, 8],
                compressor.clone(),
                &data,
            );
            let chunk = std::fs::read(src.join("1.2")).expect("chunk 1.2");
            std::fs::write(src.join("1.2"), damage(&chunk, how)).expect("damage");
            let dst = tmp.path().join(format!("dst{c}-{}", how.replace(' ', "_")));
            let out = zshard(&[
                "convert",
                src.to_str().expect("utf-8"),
                dst.to_str().expect("utf-8"),
                "--shard-shape",
                "16,16",
                "--chunk-shape",
                "8,8",
                "--quiet",
            ]);
            let stderr = String::from_utf8_lossy(&out.stderr);
            if let Some(values) = what_numcodecs_reads(compressor, how, &data, &chunk) {
                assert_eq!(out.status.code(), Some(0), "{case}: {stderr}");
                assert_eq!(
                    read_v3(&dst).0,
                    values,
                    "{case}: the values zarr-python reads"
                );
                continue;
            }
            assert_eq!(
                out.status.code(),
                Some(1),
                "{case}: exit code; stderr: {stderr}"
            );
            assert!(!stderr.contains("panicked"), "{case}: {stderr}");
            assert!(
                stderr.contains("1.2"),
                "{case}: names the chunk key: {stderr}"
            );
            // Chunk (1,2) lies in shard (0,1); a failed run publishes neither it nor the metadata.
            assert!(!dst.join("c/0/1").exists(), "{case}: no shard published");
            assert!(
                !dst.join("zarr.json").exists(),
                "{case}: no metadata published"
            );
            refused += 1;
        }
    }
    assert_eq!(refused, compressors.len() * damages.len() - 4);
}

/// Asserts exit status 1, a message holding every one of `parts`, and no metadata under `dst`.
fn refused_naming(out: &std::process::Output, dst: &Path, case: &str, parts: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{case}: {stderr}");
    for part in parts {
        assert!(stderr.contains(part), "{case}: {part:?} not in {stderr}");
    }
    assert!(!dst.join("zarr.json").exists(), "{case}: nothing published");
}

/// Issue 31, row 7: a zstd chunk whose frame names a dictionary is refused with its key, with
/// passthrough (it was copied, and zarr-python and tensorstore then failed with "Dictionary
/// mismatch") and without it.
#[test]
fn a_zstd_frame_naming_a_dictionary_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    let data = expected(DataType::UInt16, &[32, 32], 0);
    let zstd = json!({"id": "zstd", "level": 3});
    write_v2(&src, DataType::UInt16, &[32, 32], &[8, 8], zstd, &data);
    let mut frame = std::fs::read(src.join("1.2")).expect("chunk");
    assert_eq!(frame[4] & 0x03, 0, "no dictionary yet");
    frame[4] |= 0x01;
    let at = 5 + usize::from(frame[4] & 0x20 == 0);
    frame.insert(at, 7);
    std::fs::write(src.join("1.2"), &frame).expect("write");
    for (i, extra) in [&["--compressor", "zstd:3"][..], &["--no-passthrough"][..]]
        .iter()
        .enumerate()
    {
        let dst = tmp.path().join(format!("dst{i}"));
        let mut args = vec![
            "convert",
            src.to_str().expect("utf-8"),
            dst.to_str().expect("utf-8"),
            "--chunk-shape",
            "8,8",
            "--quiet",
        ];
        args.extend(extra.iter());
        refused_naming(
            &zshard(&args),
            &dst,
            &format!("{extra:?}"),
            &["1.2", "ictionary"],
        );
    }
}

/// Issue 31, row 18: a garbled `.zattrs` beside a valid `.zarray` is reported as the `.zattrs`
/// (it was reported as the `.zarray`).
#[test]
fn a_garbled_zattrs_is_named_as_itself() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    valid_v2(&src);
    std::fs::write(src.join(".zattrs"), b"{garbled").expect("garble");
    let dst = tmp.path().join("dst");
    let out = zshard(&[
        "convert",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
        "--quiet",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("{}/.zattrs: invalid JSON", src.display())),
        "{stderr}"
    );
    assert!(!stderr.contains(".zarray"), "{stderr}");
}

/// Issue 31, row 16: zstd chunks with a skippable frame before (or after) the real frame are valid
/// zstd: passthrough converts them (it refused them: "a block of the frame states 532480 bytes") and
/// drops the skippable frames, which numcodecs refuses at the start of a chunk.
#[test]
fn a_zstd_chunk_with_a_skippable_frame_converts_without_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    let data = expected(DataType::UInt16, &[32, 32], 0);
    let zstd = json!({"id": "zstd", "level": 3});
    write_v2(&src, DataType::UInt16, &[32, 32], &[8, 8], zstd, &data);
    let skippable = |len: u32| {
        let mut frame = 0x184d_2a50_u32.to_le_bytes().to_vec();
        frame.extend(len.to_le_bytes());
        frame.extend(vec![0x5a; len as usize]);
        frame
    };
    for (key, before) in [("1.2", true), ("0.0", false)] {
        let chunk = std::fs::read(src.join(key)).expect("chunk");
        let mut bytes = if before {
            skippable(532_472)
        } else {
            Vec::new()
        };
        bytes.extend(&chunk);
        if !before {
            bytes.extend(skippable(3));
        }
        std::fs::write(src.join(key), &bytes).expect("write");
    }
    for (i, extra) in [&["--compressor", "zstd:3"][..], &["--no-passthrough"][..]]
        .iter()
        .enumerate()
    {
        let dst = tmp.path().join(format!("dst{i}"));
        let mut args = vec![
            "convert",
            src.to_str().expect("utf-8"),
            dst.to_str().expect("utf-8"),
            "--shard-shape",
            "16,16",
            "--chunk-shape",
            "8,8",
            "--quiet",
        ];
        args.extend(extra.iter());
        let out = zshard(&args);
        assert!(
            out.status.success(),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(read_v3(&dst).0, data, "{extra:?}");
        for shard in ["c/0/1", "c/0/0"] {
            let bytes = std::fs::read(dst.join(shard)).expect("shard");
            assert!(
                !bytes.windows(4).any(|w| w == 0x184d_2a50_u32.to_le_bytes()),
                "{extra:?}: {shard} holds a skippable frame"
            );
        }
    }
}

/// Issue 31, rows 15 and 4: a chunk that is a FIFO (the read blocked beyond SIGTERM) or a link to
/// `/dev/zero` (read without end, 6.3 GB in 16 s) is refused at once with its key.
#[test]
fn a_chunk_that_is_no_regular_file_is_refused_with_its_key() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for special in ["fifo", "zero"] {
        let src = tmp.path().join(format!("src-{special}"));
        let data = expected(DataType::UInt16, &[32, 32], 0);
        write_v2(
            &src,
            DataType::UInt16,
            &[32, 32],
            &[8, 8],
            json!(null),
            &data,
        );
        let chunk = src.join("1.2");
        std::fs::remove_file(&chunk).expect("rm");
        if special == "fifo" {
            let made = std::process::Command::new("mkfifo")
                .arg(&chunk)
                .status()
                .expect("mkfifo");
            assert!(made.success());
        } else {
            std::os::unix::fs::symlink("/dev/zero", &chunk).expect("link");
        }
        let dst = tmp.path().join(format!("dst-{special}"));
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_zshard"))
            .args([
                "convert",
                src.to_str().expect("utf-8"),
                dst.to_str().expect("utf-8"),
            ])
            .arg("--quiet")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn");
        // Before the fix the FIFO's read never returned: a hung run fails the test, not CI's clock.
        let started = std::time::Instant::now();
        while child.try_wait().expect("wait").is_none() {
            if started.elapsed() > std::time::Duration::from_secs(30) {
                let _ = child.kill();
                panic!("{special}: still reading after 30 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = child.wait_with_output().expect("output");
        refused_naming(&out, &dst, special, &["1.2", "not a regular file"]);
    }
}
