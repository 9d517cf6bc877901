//! Issue 15, remaining gap 3: signals during `finalize`, `plan` and `verify` stop them cleanly
//! (exit 128 + the signal, no staged leftovers), and a command line clap rejects still writes the
//! `--report` it names. Signals are delivered at an exact point with `strace -e inject=...:signal=`
//! (strace must be installed; tests/run.sh installs it).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{element, files, write_v2, zshard};
use serde_json::{json, Value};
use zshard_core::DataType;

const BIN: &str = env!("CARGO_BIN_EXE_zshard");
const RENAMES: &str = "rename,renameat,renameat2";

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A Zarr v2 group with arrays `a`, `b` and `c` (32x32 uint16 in 16x16 chunks).
fn group_source(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).expect("mkdir");
    std::fs::write(src.join(".zgroup"), br#"{"zarr_format": 2}"#).expect("zgroup");
    let data: Vec<u8> = (0..32 * 32)
        .flat_map(|i| element(DataType::UInt16, i + 1))
        .collect();
    for name in ["a", "b", "c"] {
        write_v2(
            &src.join(name),
            DataType::UInt16,
            &[32, 32],
            &[16, 16],
            Value::Null,
            &data,
        );
    }
    src
}

/// Runs zshard with `args` under strace, which sends `signal` to it when it first makes one of
/// `syscalls` on `path`.
fn signalled_at(path: &Path, syscalls: &str, signal: &str, args: &[&str]) -> Output {
    Command::new("strace")
        .args(["-f", "-qq", "-o", "/dev/null", "-P", s(path)])
        .arg(format!("--trace={syscalls}"))
        .arg(format!("--inject={syscalls}:signal={signal}:when=1"))
        .arg(BIN)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("strace is needed (tests/run.sh installs it): {e}"))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Keys of staged files (`KEY#<n>`) below `dir`.
fn staged(dir: &Path) -> Vec<String> {
    files(dir)
        .into_keys()
        .filter(|k| {
            k.rsplit_once('#')
                .is_some_and(|(_, n)| n.parse::<u32>().is_ok())
        })
        .collect()
}

#[test]
fn sigterm_during_finalize_stops_before_the_next_document_and_a_rerun_finishes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = group_source(tmp.path());
    let (reference, dst) = (tmp.path().join("reference"), tmp.path().join("dst"));
    let ok = |out: Output| assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    ok(zshard(&["convert", s(&src), s(&reference), "--quiet"]));
    for worker in ["0/2", "1/2"] {
        ok(zshard(&[
            "convert",
            s(&src),
            s(&dst),
            "--quiet",
            "--worker",
            worker,
        ]));
    }
    // SIGTERM as the first array's zarr.json is renamed into place.
    let out = signalled_at(
        &dst.join("a/zarr.json#1"),
        RENAMES,
        "TERM",
        &["finalize", s(&src), s(&dst)],
    );
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("zshard: stopped by SIGTERM: cancelled"),
        "{}",
        stderr(&out)
    );
    assert_eq!(staged(&dst), Vec::<String>::new(), "no staged leftovers");
    assert!(
        dst.join("a/zarr.json").exists(),
        "the document being written completed"
    );
    assert!(!dst.join("zarr.json").exists(), "stopped before the root's");
    assert!(dst.join(".zshard/claim.json").exists(), "the state is kept");
    assert_eq!(
        std::fs::read_dir(dst.join(".zshard/leases"))
            .map(|d| d.count())
            .unwrap_or(0),
        0,
        "the lease was released"
    );
    ok(zshard(&["finalize", s(&src), s(&dst), "--quiet"]));
    assert_eq!(
        files(&dst),
        files(&reference),
        "equals an uninterrupted run"
    );
    ok(zshard(&["verify", s(&src), s(&dst), "--quiet"]));
}

#[test]
fn sigint_during_plan_exits_130() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = group_source(tmp.path());
    let dst = tmp.path().join("dst");
    let out = signalled_at(
        &src.join("b/.zarray"),
        "openat",
        "INT",
        &["plan", s(&src), s(&dst)],
    );
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    assert!(!dst.exists(), "plan wrote nothing");
}

#[test]
fn sigterm_during_verify_exits_143() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = group_source(tmp.path());
    let dst = tmp.path().join("dst");
    let out = zshard(&["convert", s(&src), s(&dst), "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let before = files(&dst);
    let out = signalled_at(
        &dst.join("b/c/0/0"),
        "openat",
        "TERM",
        &["verify", s(&src), s(&dst)],
    );
    assert_eq!(out.status.code(), Some(143), "{}", stderr(&out));
    assert_eq!(files(&dst), before, "verify changed nothing");
}

fn read_json(path: &Path) -> Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("no report {}: {e}", path.display()));
    serde_json::from_slice(&bytes).expect("the report is JSON")
}

#[test]
fn usage_errors_write_a_failed_report_when_it_is_named() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    let report = tmp.path().join("report.json");
    let report_arg = format!("--report={}", s(&report));
    let cases: [(&str, Vec<&str>, &str); 3] = [
        (
            "invalid index location",
            vec![
                "convert",
                s(&src),
                "--report",
                s(&report),
                s(&dst),
                "--index-location",
                "middle",
            ],
            "invalid value 'middle' for '--index-location",
        ),
        (
            "unknown flag",
            vec![
                "convert",
                "--quiet",
                s(&src),
                s(&dst),
                &report_arg,
                "--shard-shap",
                "4,4",
            ],
            "unexpected argument '--shard-shap'",
        ),
        (
            "bad size, report before the positionals",
            vec![
                "convert",
                "--threads",
                "2",
                "--report",
                s(&report),
                "--memory-limit",
                "lots",
                s(&src),
                s(&dst),
            ],
            "invalid value 'lots' for '--memory-limit",
        ),
    ];
    for (case, args, message) in cases {
        let out = zshard(&args);
        assert_eq!(out.status.code(), Some(2), "{case}: {}", stderr(&out));
        assert!(stderr(&out).contains(message), "{case}: {}", stderr(&out));
        let r = read_json(&report);
        assert_eq!(r["status"], json!("failed"), "{case}: {r}");
        assert_eq!(r["error"]["kind"], json!("options"), "{case}: {r}");
        let text = r["error"]["message"].as_str().expect("message");
        assert!(text.contains(message), "{case}: {text}");
        assert_eq!(r["options"]["source"], json!(s(&src)), "{case}: {r}");
        assert_eq!(r["options"]["destination"], json!(s(&dst)), "{case}: {r}");
        std::fs::remove_file(&report).expect("remove the report");
    }
    // Without --report nothing is written; a usage error of another command writes no report.
    let out = zshard(&["convert", s(&src), s(&dst), "--index-location", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let out = zshard(&["plan", s(&src), "--report", s(&report)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!report.exists());
    assert!(!dst.exists() && !src.exists());
}
