//! Kill -9 at ten moments spread over a conversion, then resume: every time the output equals an
//! uninterrupted run byte for byte (so keys and decoded values too), with no leftovers.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use common::{expected, files, read_v3, write_v2};
use serde_json::json;
use zshard_core::DataType;

fn command(src: &Path, dst: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zshard"));
    c.args([
        "convert",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
    ])
    .args([
        "--shard-shape",
        "128,128",
        "--chunk-shape",
        "32,32",
        "--compressor",
        "gzip:9",
        "--threads",
        "1",
        "--quiet",
    ])
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    c
}

#[test]
fn kill_at_ten_points_then_resume_equals_an_uninterrupted_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    let shape = [2048u64, 1024];
    // The first 128 rows hold only the fill value, so some shards are recorded as empty, not written.
    let data = expected(DataType::UInt16, &shape, 128 * 1024);
    write_v2(
        &src,
        DataType::UInt16,
        &shape,
        &[32, 32],
        json!({"id": "gzip", "level": 1}),
        &data,
    );

    // The kill points are spread over the faster of two uninterrupted runs: the first one also pays
    // for a cold page cache and binary, and kills timed on it land after later runs have finished.
    let mut duration = std::time::Duration::MAX;
    for attempt in 0..2 {
        let dir = tmp.path().join(format!("reference{attempt}"));
        let started = Instant::now();
        let out = command(&src, &dir).output().expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        duration = duration.min(started.elapsed());
    }
    let reference_dir = tmp.path().join("reference1");
    let reference = files(&reference_dir);
    assert_eq!(read_v3(&reference_dir).0, data);

    let mut interrupted = 0;
    for point in 0..10u32 {
        let dst = tmp.path().join(format!("run{point}"));
        let mut child = command(&src, &dst).spawn().expect("spawn");
        std::thread::sleep(duration.mul_f64(0.05 + 0.09 * f64::from(point)));
        let killed = child.try_wait().expect("wait").is_none();
        child.kill().ok(); // SIGKILL
        child.wait().expect("reap");
        let shards_before = files(&dst).len();
        interrupted += usize::from(killed && !dst.join("zarr.json").exists());
        let out = command(&src, &dst).output().expect("resume");
        assert!(
            out.status.success(),
            "point {point}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let resumed = files(&dst);
        assert_eq!(
            resumed.keys().collect::<Vec<_>>(),
            reference.keys().collect::<Vec<_>>(),
            "point {point}: keys"
        );
        assert!(
            resumed == reference,
            "point {point}: shard bytes differ from the uninterrupted run"
        );
        eprintln!(
            "kill point {point}: at {:?} of {duration:?}, {shards_before} file(s) present after the kill, {} after resume",
            duration.mul_f64(0.05 + 0.09 * f64::from(point)),
            resumed.len()
        );
    }
    // The points must really interrupt conversions, or this test proves nothing.
    assert!(
        interrupted >= 5,
        "only {interrupted} of 10 kills landed mid-run"
    );
}
