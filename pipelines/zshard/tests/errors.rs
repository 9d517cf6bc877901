//! Bad input and bad options: clear one-line errors, non-zero exit, nothing under a final name.

mod common;

use common::{expected, write_v2, zshard};
use serde_json::json;
use zshard_core::DataType;

fn listing(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(listing(&p));
            } else {
                out.push(p.to_string_lossy().into_owned());
            }
        }
    }
    out
}

#[test]
fn corrupted_chunk_names_its_key_and_leaves_no_shard() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    let dst = tmp.path().join("dst");
    let data = expected(DataType::UInt16, &[64, 64], 0);
    write_v2(
        &src,
        DataType::UInt16,
        &[64, 64],
        &[16, 16],
        json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}),
        &data,
    );
    let victim = src.join("2.3");
    let len = std::fs::metadata(&victim).expect("chunk exists").len() as usize;
    std::fs::write(&victim, vec![0x5a; len]).expect("corrupt");
    let out = zshard(&[
        "convert",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
        "--shard-shape",
        "32,32",
        "--chunk-shape",
        "16,16",
        "--threads",
        "2",
        "--quiet",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("2.3"), "names the chunk key: {stderr}");
    assert!(stderr.contains("blosc"), "names the codec: {stderr}");
    // Chunk (2,3) lies in shard (1,1).
    assert!(!dst.join("c/1/1").exists());
    assert!(
        !dst.join("zarr.json").exists(),
        "no metadata for a failed conversion"
    );
}

#[test]
fn truncated_chunk_is_an_error_not_a_panic() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    let data = expected(DataType::Float64, &[30], 0);
    write_v2(
        &src,
        DataType::Float64,
        &[30],
        &[10],
        json!({"id": "zstd", "level": 1}),
        &data,
    );
    let chunk = std::fs::read(src.join("1")).expect("chunk");
    std::fs::write(src.join("1"), &chunk[..chunk.len() / 2]).expect("truncate");
    let out = zshard(&[
        "convert",
        src.to_str().expect("utf-8"),
        tmp.path().join("dst").to_str().expect("utf-8"),
        "--quiet",
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("src/1"));
}

#[test]
fn bad_shapes_are_rejected_before_writing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    let data = expected(DataType::UInt8, &[40, 40], 0);
    write_v2(
        &src,
        DataType::UInt8,
        &[40, 40],
        &[10, 10],
        json!(null),
        &data,
    );
    for (args, needle) in [
        (vec!["--shard-shape", "20"], "1 dimensions"),
        (vec!["--chunk-shape", "10,10,10"], "3 dimensions"),
        (
            vec!["--shard-shape", "20,20", "--chunk-shape", "10,15"],
            "does not divide",
        ),
        (vec!["--shard-shape", "0,20"], "positive"),
        (vec!["--compressor", "lzma:3"], "unknown compressor"),
        (
            vec!["--index-location", "middle"],
            "expected `start` or `end`",
        ),
    ] {
        let dst = tmp.path().join("dst");
        let mut all = vec![
            "convert",
            src.to_str().expect("utf-8"),
            dst.to_str().expect("utf-8"),
            "--quiet",
        ];
        all.extend(args.iter());
        let out = zshard(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert_eq!(
            stderr.trim().lines().count(),
            1,
            "{args:?}: one line: {stderr}"
        );
        assert!(
            listing(&dst).is_empty(),
            "{args:?} wrote {:?}",
            listing(&dst)
        );
    }
}

#[test]
fn missing_source_and_unsupported_codec() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = zshard(&[
        "convert",
        tmp.path().join("nope").to_str().expect("utf-8"),
        tmp.path().join("d").to_str().expect("utf-8"),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope"));
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join(".zarray"), br#"{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<u2","compressor":{"id":"sz3"},"fill_value":0,"order":"C","filters":null}"#).expect("write");
    let out = zshard(&[
        "convert",
        src.to_str().expect("utf-8"),
        tmp.path().join("d").to_str().expect("utf-8"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("sz3") && stderr.contains("blosc"),
        "{stderr}"
    );
}

#[test]
fn source_and_destination_must_not_overlap() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let src = data.join("in.zarr");
    write_v2(
        &src,
        DataType::UInt8,
        &[4],
        &[2],
        json!(null),
        &expected(DataType::UInt8, &[4], 0),
    );
    let sneaky = data.join("new").join("..").join("in.zarr").join("out");
    for (dst, needle) in [
        (data.clone(), "inside the destination"),
        (tmp.path().to_path_buf(), "inside the destination"),
        (src.join("out"), "inside the source"),
        (sneaky, "inside the source"),
    ] {
        let out = zshard(&[
            "convert",
            src.to_str().expect("utf-8"),
            dst.to_str().expect("utf-8"),
            "--overwrite",
            "--quiet",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{dst:?}");
        assert!(stderr.contains(needle), "{dst:?}: {stderr}");
        assert!(src.join(".zarray").is_file(), "the source must survive");
    }
}

/// `zshard` with the AWS credentials of the environment removed and `env` set.
fn without_aws_credentials(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut command = std::process::Command::new(common::binary());
    command.args(args);
    for var in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_ROLE_ARN",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_PROFILE",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().copied());
    command.output().expect("run zshard")
}

/// Issue 44, point 3: S3 without credentials says so and where it looked (not only "Error performing
/// PUT http://169.254.169.254/latest/api/token ... 403"); an S3 source that is not there is reported
/// as the source that cannot be read, not through the N5 probe's `attributes.json`.
#[test]
fn s3_errors_say_what_is_wrong() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = common::small_source(tmp.path(), "src");
    let endpoint = common::empty_s3();
    // The metadata service of this test answers nothing (off EC2 it is unreachable or refuses).
    let out = without_aws_credentials(
        &[
            "plan",
            src.to_str().expect("utf-8"),
            "s3://bucket/out.zarr",
            "--s3-endpoint",
            &endpoint,
            "--retries",
            "0",
        ],
        &[
            ("AWS_METADATA_ENDPOINT", "http://127.0.0.1:9"),
            ("AWS_REGION", "us-east-1"),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "no AWS credentials found (looked in: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        ),
        "{stderr}"
    );
    let out = without_aws_credentials(
        &[
            "ls",
            "s3://bucket/missing.zarr",
            "--s3-endpoint",
            "http://127.0.0.1:9",
            "--anonymous",
            "--retries",
            "0",
        ],
        &[("AWS_REGION", "us-east-1")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot read the source s3://bucket/missing.zarr: "),
        "{stderr}"
    );
}
