//! Printing commands whose reader stops early (`zshard plan SRC DST | head -1`): they end quietly
//! with exit status 0, as ripgrep and fd do, instead of panicking on the broken pipe.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{expected, write_v2};
use serde_json::json;
use zshard_core::DataType;

/// A Zarr v2 group of `arrays` small arrays (`a000`, `a001`, ...) at `dir/group`.
fn group_source(dir: &Path, arrays: usize) -> PathBuf {
    let src = dir.join("group");
    std::fs::create_dir_all(&src).expect("group dir");
    std::fs::write(src.join(".zgroup"), br#"{"zarr_format": 2}"#).expect(".zgroup");
    let data = expected(DataType::UInt16, &[8, 8], 0);
    for i in 0..arrays {
        let array = src.join(format!("a{i:03}"));
        write_v2(
            &array,
            DataType::UInt16,
            &[8, 8],
            &[4, 4],
            json!({"id": "zstd", "level": 1}),
            &data,
        );
    }
    src
}

/// Runs zshard with its stdout a pipe that nobody reads any more: the reader (`true`) has exited
/// before zshard starts, so zshard's first write fails with EPIPE whatever the timing.
fn with_closed_stdout(args: &[&str]) -> Output {
    let mut reader = Command::new("true")
        .stdin(Stdio::piped())
        .spawn()
        .expect("spawn true");
    let write_end = reader.stdin.take().expect("the reader's stdin");
    assert!(reader.wait().expect("true").success());
    Command::new(env!("CARGO_BIN_EXE_zshard"))
        .args(args)
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::piped())
        .output()
        .expect("run zshard")
}

/// Runs `zshard ARGS | head -1` in bash with pipefail: zshard's exit status and head's line.
fn piped_to_head(args: &[&str]) -> (Output, String) {
    let output = Command::new("bash")
        .arg("-c")
        .arg(r#"set -o pipefail; "$0" "$@" | head -1"#)
        .arg(env!("CARGO_BIN_EXE_zshard"))
        .args(args)
        .output()
        .expect("run bash");
    let first = String::from_utf8_lossy(&output.stdout).into_owned();
    (output, first)
}

fn quiet_success(output: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{what}: stderr {stderr}");
    assert_eq!(stderr, "", "{what}: nothing on stderr");
}

#[test]
fn every_printing_command_ends_quietly_when_stdout_is_closed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = group_source(tmp.path(), 3);
    let src = src.to_str().expect("utf-8 path");
    let dst = tmp.path().join("dst");
    let dst = dst.to_str().expect("utf-8 path");
    let commands: [&[&str]; 7] = [
        &["plan", src, dst],
        &["plan", src, dst, "--json"],
        &["ls", src],
        &["ls", src, "--json"],
        &["completions", "bash"],
        &["man"],
        &["man", "convert"],
    ];
    for args in commands {
        quiet_success(&with_closed_stdout(args), &args.join(" "));
    }
    assert!(!Path::new(dst).exists(), "plan wrote nothing");
}

#[test]
fn plan_and_ls_piped_to_head_print_their_first_line_and_exit_0() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // 400 arrays: a plan (170 KB) and a JSON listing (130 KB) far larger than a pipe's buffer
    // (64 KiB), so head exits before zshard has written them.
    let src = group_source(tmp.path(), 400);
    let src = src.to_str().expect("utf-8 path");
    let dst = tmp.path().join("dst");
    let dst = dst.to_str().expect("utf-8 path");
    let (plan, first) = piped_to_head(&["plan", src, dst]);
    quiet_success(&plan, "plan | head -1");
    assert_eq!(first, "array a000\n");
    let (ls, first) = piped_to_head(&["ls", src, "--json"]);
    quiet_success(&ls, "ls --json | head -1");
    assert_eq!(first, "{\n");
}

/// A 1024x1024 uint16 Zarr v2 array at `dir/big`, slow enough to convert with gzip:9 on one thread
/// that a run can be caught in the middle.
fn big_source(dir: &Path) -> PathBuf {
    let src = dir.join("big");
    let data = expected(DataType::UInt16, &[1024, 1024], 0);
    write_v2(
        &src,
        DataType::UInt16,
        &[1024, 1024],
        &[64, 64],
        json!({"id": "zstd", "level": 1}),
        &data,
    );
    src
}

fn convert_command(src: &Path, dst: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_zshard"));
    command
        .arg("convert")
        .args([src, dst])
        .args(["--quiet", "--threads", "1", "--shard-shape", "128,128"])
        .args(["--chunk-shape", "64,64", "--compressor", "gzip:9"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Sends `signal` (`STOP`, `CONT`) to `child`.
fn signal(child: &std::process::Child, signal: &str) {
    let sent = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .expect("kill");
    assert!(sent.success(), "kill -{signal}");
}

/// A run stopped with SIGSTOP: continued and reaped however the test ends.
struct Stopped(Option<std::process::Child>);

impl Stopped {
    fn resume(mut self) -> Output {
        let child = self.0.take().expect("a stopped run");
        signal(&child, "CONT");
        child.wait_with_output().expect("reap")
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Waits until `path` exists (at most 60 s).
fn wait_for(path: &Path) {
    let start = std::time::Instant::now();
    while !path.exists() {
        assert!(start.elapsed().as_secs() < 60, "{path:?} never appeared");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Two runs with the same options (the claim admits both): run B starting while run A is live
/// (A's lease is fresh) leaves the staged files of A's writes in progress alone, where it used to
/// remove them as leftovers of an interrupted run; both finish with the uninterrupted output.
#[test]
fn a_run_keeps_the_staged_writes_of_another_live_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = big_source(tmp.path());
    let dst = tmp.path().join("dst");
    let reference = tmp.path().join("reference");
    let out = convert_command(&src, &reference)
        .output()
        .expect("reference");
    quiet_success(&out, "reference run");
    // Run A, stopped (SIGSTOP) once it writes shards: its lease stays fresh (60 s) meanwhile.
    let a = convert_command(&src, &dst).spawn().expect("spawn A");
    wait_for(&dst.join("c/0/0"));
    signal(&a, "STOP");
    let a = Stopped(Some(a));
    // A write of A in progress: the local backend's staged name of a shard A still has to write.
    let staged = dst.join("c/7/7#1");
    std::fs::create_dir_all(dst.join("c/7")).expect("shard folder");
    std::fs::write(&staged, b"half a shard").expect("staged file");
    let b = convert_command(&src, &dst).output().expect("run B");
    quiet_success(&b, "run B");
    assert_eq!(
        std::fs::read(&staged).ok().as_deref(),
        Some(&b"half a shard"[..]),
        "run B removed the staged write of the live run A"
    );
    quiet_success(&a.resume(), "run A");
    std::fs::remove_file(&staged).expect("A's planted write");
    assert_eq!(common::files(&dst), common::files(&reference));
}
