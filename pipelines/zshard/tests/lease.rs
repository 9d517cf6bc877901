//! Issue 15, remaining gap 1: a live run holds a lease on its destination, and `--overwrite` by
//! another run refuses while it is fresh (naming its holder) and takes it over once stale (a run
//! killed with `kill -9`).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{files, write_v2};
use serde_json::json;
use zshard_core::DataType;

/// The staleness bound the first runs are given (`ZSHARD_LEASE_STALE_SECONDS`).
const STALE_SECONDS: f64 = 2.0;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A 2048x2048 uint16 array in 64x64 chunks of pseudo-random values 0..4: gzip level 9 on one
/// thread takes about 3 s to convert it.
fn large_source(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    let shape = [2048u64, 2048];
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let data: Vec<u8> = (0..shape[0] * shape[1])
        .flat_map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 62) as u16).to_le_bytes()
        })
        .collect();
    write_v2(
        &src,
        DataType::UInt16,
        &shape,
        &[64, 64],
        json!({"id": "gzip", "level": 1}),
        &data,
    );
    src
}

/// A slow conversion (gzip level 9, one thread) with a lease stale after [`STALE_SECONDS`].
fn slow_convert(src: &Path, dst: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_zshard"))
        .args(["convert", s(src), s(dst), "--shard-shape", "256,256"])
        .args(["--chunk-shape", "64,64", "--compressor", "gzip:9"])
        .args(["--threads", "1", "--quiet"])
        .env("ZSHARD_LEASE_STALE_SECONDS", STALE_SECONDS.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start zshard")
}

/// `zshard convert --overwrite` with other options (fast).
fn overwrite(src: &Path, dst: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zshard"))
        .args(["convert", s(src), s(dst), "--overwrite", "--quiet"])
        .args(["--shard-shape", "512,512", "--chunk-shape", "128,128"])
        .args(["--compressor", "zstd:1"])
        .output()
        .expect("run zshard")
}

fn verify(src: &Path, dst: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zshard"))
        .args(["verify", s(src), s(dst), "--quiet"])
        .output()
        .expect("run zshard")
}

/// Waits until the run has published a shard (so it holds its lease and is writing).
fn wait_for_a_shard(child: &mut Child, dst: &Path) {
    let start = Instant::now();
    while !files(dst).keys().any(|k| k.starts_with("c/")) {
        if let Some(status) = child.try_wait().expect("wait") {
            panic!("the conversion ended ({status}) before writing a shard");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no shard in 60 s"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn overwrite_refuses_while_a_run_is_live_and_the_run_finishes_and_verifies() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = large_source(tmp.path());
    let dst = tmp.path().join("dst");
    let mut first = slow_convert(&src, &dst);
    wait_for_a_shard(&mut first, &dst);
    let refused = overwrite(&src, &dst);
    let message = stderr(&refused);
    assert_eq!(refused.status.code(), Some(1), "{message}");
    for part in [
        "--overwrite refused: a live run holds".to_string(),
        format!("pid {}", first.id()),
        "started 20".to_string(),
        format!("considered stale {STALE_SECONDS:.1} s after its last renewal"),
    ] {
        assert!(message.contains(&part), "{part:?} not in {message}");
    }
    let out = first.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let verified = verify(&src, &dst);
    assert_eq!(verified.status.code(), Some(0), "{}", stderr(&verified));
    // Finished: no lease (nor any other state) is left.
    assert!(!dst.join(".zshard").exists());
    let layout = std::fs::read_to_string(dst.join("zarr.json")).expect("zarr.json");
    assert!(layout.contains("\"gzip\""), "{layout}");
}

#[test]
fn overwrite_takes_over_the_lease_of_a_killed_run_once_it_is_stale() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = large_source(tmp.path());
    let dst = tmp.path().join("dst");
    let mut first = slow_convert(&src, &dst);
    wait_for_a_shard(&mut first, &dst);
    first.kill().expect("kill -9");
    let killed_at = Instant::now();
    first.wait().expect("wait");
    let refused = overwrite(&src, &dst);
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("--overwrite refused: a live run holds"),
        "{}",
        stderr(&refused)
    );
    // The killed run's lease is left, not renewed.
    assert_eq!(
        std::fs::read_dir(dst.join(".zshard/leases"))
            .expect("leases")
            .count(),
        1
    );
    let stale = Duration::from_secs_f64(STALE_SECONDS + 0.5);
    std::thread::sleep(stale.saturating_sub(killed_at.elapsed()));
    let taken = overwrite(&src, &dst);
    assert_eq!(taken.status.code(), Some(0), "{}", stderr(&taken));
    let verified = verify(&src, &dst);
    assert_eq!(verified.status.code(), Some(0), "{}", stderr(&verified));
    assert!(!dst.join(".zshard").exists());
    let layout = std::fs::read_to_string(dst.join("zarr.json")).expect("zarr.json");
    assert!(layout.contains("\"zstd\""), "{layout}");
}
