//! Issue 15, points 5 and 10: the memory limit bounds what a run holds (checked under a cgroup at the
//! limit), and small inputs that must be refused with a message rather than a panic or a silent
//! conversion: zero extents, unknown `must_understand` extension fields, zstd frames whose blocks
//! promise more than their header says.

mod common;

use std::path::Path;

use common::{expected, write_v2, zshard};
use serde_json::json;
use zshard_core::DataType;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A 64x64 uint16 Zarr v2 array in 16x16 zstd chunks at `dir/src`.
fn small_source(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("src");
    let data = expected(DataType::UInt16, &[64, 64], 0);
    write_v2(
        &src,
        DataType::UInt16,
        &[64, 64],
        &[16, 16],
        json!({"id": "zstd", "level": 3}),
        &data,
    );
    src
}

/// Exit code and stderr of a run.
fn failure(out: &std::process::Output) -> (Option<i32>, String) {
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).trim().to_string(),
    )
}

#[test]
fn a_job_file_with_zero_extents_is_refused_naming_the_array() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = small_source(tmp.path());
    for (key, shape) in [("chunk_shape", "[0, 0]"), ("shard_shape", "[16, 0]")] {
        let job = tmp.path().join("job.toml");
        std::fs::write(
            &job,
            format!(
                "{key} = {shape}\n[[conversions]]\nsource = \"{}\"\ndestination = \"out\"\n",
                s(&src)
            ),
        )
        .expect("write job");
        let (code, stderr) = failure(&zshard(&["run", s(&job), "--quiet"]));
        let option = key.replace('_', "-");
        let dimension = if key == "chunk_shape" { 0 } else { 1 };
        assert_eq!(code, Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("array {}", s(&src)))
                && stderr.contains(&format!(
                    "--{option} {shape} has a zero extent (dimension {dimension}): every extent must be at least 1"
                )),
            "{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        assert!(!tmp.path().join("out").exists());
    }
}
