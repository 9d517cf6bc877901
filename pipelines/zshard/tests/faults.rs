//! Interrupted writes and what `verify` checks (issue 15, point 8).
//!
//! Kill tests: a small conversion (a group, a subgroup, two arrays, two shards holding only the fill
//! value) is run once under `strace` to list its renames; then for each rename it is killed exactly
//! there (`strace -P <staged file> -e inject=rename:signal=KILL:when=1`), and at the write of each
//! metadata document and options record, rerun without faults, and the final tree must equal an
//! uninterrupted run's file for file and byte for byte (no staged `#1` file, no `.zshard/`), and
//! `zshard verify` must be clean. The same across `finalize` of a 2-worker run, plus seeded random-time
//! kills. strace must be installed (tests/run.sh installs it).

mod common;

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output};
use std::time::{Duration, Instant};

use common::{expected, write_v2};
use serde_json::{json, Value};
use zshard_core::DataType;

const BIN: &str = env!("CARGO_BIN_EXE_zshard");
const LAYOUT: [&str; 4] = ["--shard-shape", "32,32", "--chunk-shape", "16,16"];
const RENAMES: &str = "rename,renameat,renameat2";
const WRITES: &str = "write,pwrite64,writev";

/// Attributes that readers use to interpret values (xarray's CF decoding).
fn cf_attributes() -> Value {
    json!({"_ARRAY_DIMENSIONS": ["y", "x"], "_FillValue": -9999.0, "missing_value": -9999.0,
        "scale_factor": 0.5, "add_offset": 10.0, "units": "K", "calendar": "standard"})
}

/// A Zarr v2 group: `a` (uint16 64x64, its first 32 rows only the fill value, so two of its four
/// shards are never written) and `g/b` (float32 40x40 with CF attributes), in a subgroup.
fn source(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    let a_shape = [64u64, 64];
    let a = expected(DataType::UInt16, &a_shape, 32 * 64);
    let none = Value::Null;
    write_v2(
        &src.join("a"),
        DataType::UInt16,
        &a_shape,
        &[16, 16],
        none.clone(),
        &a,
    );
    let b = expected(DataType::Float32, &[40, 40], 0);
    write_v2(
        &src.join("g/b"),
        DataType::Float32,
        &[40, 40],
        &[16, 16],
        none,
        &b,
    );
    let write = |rel: &str, doc: Value| {
        std::fs::write(src.join(rel), serde_json::to_vec(&doc).expect("json")).expect("write")
    };
    write(".zgroup", json!({"zarr_format": 2}));
    write(".zattrs", json!({"title": "faults"}));
    write("g/.zgroup", json!({"zarr_format": 2}));
    write("g/b/.zattrs", cf_attributes());
    src
}

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

/// `zshard <command> SRC DST` with the test layout and `extra` options.
fn args(command: &str, src: &Path, dst: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = vec![command.to_string(), text(src).into(), text(dst).into()];
    args.extend(LAYOUT.iter().chain(extra).map(|s| s.to_string()));
    if command == "convert" {
        args.extend(["--threads".to_string(), "1".to_string()]);
    }
    args.push("--quiet".into());
    args
}

fn run(args: &[String]) -> Output {
    // ZSHARD_BIN: an older build, to show a test fails there.
    let bin = std::env::var_os("ZSHARD_BIN").map_or_else(|| BIN.into(), PathBuf::from);
    Command::new(bin).args(args).output().expect("run zshard")
}

fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs zshard under strace with `options`; the trace goes to `trace`.
fn strace(options: &[&str], trace: &Path, args: &[String]) -> ExitStatus {
    Command::new("strace")
        .args(["-f", "-qq", "-o", text(trace)])
        .args(options)
        .arg(BIN)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!("strace is needed for the kill tests (tests/run.sh installs it): {e}")
        })
        .status
}

/// The staged files renamed in a trace, in order (the first path of each rename).
fn renamed(trace: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(trace).expect("trace");
    text.lines()
        .filter(|l| l.contains("rename"))
        .filter_map(|l| l.split('"').nth(1).map(str::to_string))
        .collect()
}

/// Whether a staged file's name differs from run to run (batches of records carry the run's time).
fn per_run(path: &str) -> bool {
    let mut digits = 0;
    path.chars().any(|c| {
        digits = if c.is_ascii_digit() { digits + 1 } else { 0 };
        digits >= 10
    })
}

/// Every folder (`None`) and file (its bytes) below `dir`, `.zshard/` and staged files included.
fn tree(dir: &Path) -> BTreeMap<String, Option<Vec<u8>>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
        for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .expect("below")
                .display()
                .to_string();
            if path.is_dir() {
                out.insert(rel, None);
                walk(root, &path, out);
            } else if entry.file_name() == ".zshard-records" {
                // The records a finished conversion keeps name the versions (inode, modification
                // time) of its shards' files, which differ from run to run.
                continue;
            } else {
                out.insert(rel, Some(std::fs::read(&path).expect("read")));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for (rel, content) in tree(from) {
        match content {
            None => std::fs::create_dir_all(to.join(rel)).expect("mkdir"),
            Some(bytes) => std::fs::write(to.join(rel), bytes).expect("copy"),
        }
    }
}

/// How the final tree differs from the uninterrupted run's (files, bytes), and verify's complaints.
fn differences(
    reference: &BTreeMap<String, Option<Vec<u8>>>,
    src: &Path,
    dst: &Path,
    what: &str,
) -> Vec<String> {
    let got = tree(dst);
    let mut found = Vec::new();
    let extra: Vec<&String> = got.keys().filter(|k| !reference.contains_key(*k)).collect();
    let missing: Vec<&String> = reference.keys().filter(|k| !got.contains_key(*k)).collect();
    if !extra.is_empty() || !missing.is_empty() {
        found.push(format!("{what}: extra {extra:?}, missing {missing:?}"));
    }
    let changed: Vec<&String> = got
        .iter()
        .filter(|(k, v)| reference.get(*k).is_some_and(|r| r != *v))
        .map(|(k, _)| k)
        .collect();
    if !changed.is_empty() {
        found.push(format!("{what}: bytes differ in {changed:?}"));
    }
    let verified = run(&[
        "verify".into(),
        text(src).into(),
        text(dst).into(),
        "--quiet".into(),
    ]);
    if !verified.status.success() || !verified.stderr.is_empty() {
        found.push(format!(
            "{what}: verify: {:?} {}",
            verified.status,
            String::from_utf8_lossy(&verified.stderr)
        ));
    }
    found
}

fn assert_like_reference(
    reference: &BTreeMap<String, Option<Vec<u8>>>,
    src: &Path,
    dst: &Path,
    what: &str,
) {
    let found = differences(reference, src, dst, what);
    assert!(found.is_empty(), "{}", found.join("\n"));
}

/// Kills a run with `inject` (strace options), asserts it was killed, then reruns (without faults)
/// and collects how the result differs from the reference; every case runs, then the test fails
/// listing all that differed.
struct KillCase<'a> {
    src: &'a Path,
    reference: &'a BTreeMap<String, Option<Vec<u8>>>,
    scratch: &'a Path,
    failures: std::cell::RefCell<Vec<String>>,
}

impl KillCase<'_> {
    fn killed(&self, inject: &[&str], killed: &[String], what: &str) -> bool {
        let status = strace(inject, &self.scratch.join("kill.trace"), killed);
        if status.success() {
            return false;
        }
        assert_eq!(status.signal(), Some(9), "{what}: {status:?}");
        true
    }

    fn resume(&self, dst: &Path, rerun: &[Vec<String>], what: &str) {
        for args in rerun {
            assert_success(&run(args), &format!("{what}: rerun {}", args[0]));
        }
        let found = differences(self.reference, self.src, dst, what);
        self.failures.borrow_mut().extend(found);
    }

    fn assert_all_equal(&self, cases: usize) {
        let failures = self.failures.borrow();
        assert!(
            failures.is_empty(),
            "{} difference(s) in {cases} case(s):\n{}",
            failures.len(),
            failures.join("\n")
        );
    }
}

fn at_path(path: &str, syscalls: &str) -> Vec<String> {
    vec![
        "-P".into(),
        path.into(),
        "-e".into(),
        format!("trace={syscalls}"),
        "-e".into(),
        format!("inject={syscalls}:signal=KILL:when=1"),
    ]
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Staged files whose write is worth a kill too: metadata documents and options records.
fn is_metadata(path: &str) -> bool {
    path.ends_with("zarr.json#1") || path.contains("/.zshard/options/")
}

#[test]
fn killed_at_every_rename_then_rerun_equals_an_uninterrupted_run() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let reference_dir = tmp.path().join("reference");
    assert_success(
        &run(&args("convert", &src, &reference_dir, &[])),
        "reference",
    );
    let reference = tree(&reference_dir);
    assert!(reference
        .keys()
        .all(|k| !k.contains('#') && !k.starts_with(".zshard")));

    // Count: every staged file renamed by an uninterrupted run.
    let dst = tmp.path().join("dst");
    let counting = args("convert", &src, &dst, &[]);
    let trace = tmp.path().join("count.trace");
    assert!(strace(&["-e", &format!("trace={RENAMES}")], &trace, &counting).success());
    let renames = renamed(&trace);
    let base = format!("{}/", dst.display());
    let short: Vec<&str> = renames
        .iter()
        .map(|r| r.trim_start_matches(&base))
        .collect();
    // Options record, six shards, the record of done shards and of empty ones (as the destination
    // helper or this version writes them), and four documents.
    assert!(short.contains(&".zshard/options/w0of1.json#1"), "{short:?}");
    for key in [
        "a/c/1/0#1",
        "a/c/1/1#1",
        "g/b/c/1/1#1",
        "a/zarr.json#1",
        "g/zarr.json#1",
        "zarr.json#1",
    ] {
        assert!(short.contains(&key), "{key} not in {short:?}");
    }
    assert!(!short.iter().any(|k| k.starts_with("a/c/0/")), "{short:?}");
    let fresh = || {
        let _ = std::fs::remove_dir_all(&dst);
    };
    let case = KillCase {
        src: &src,
        reference: &reference,
        scratch: tmp.path(),
        failures: Default::default(),
    };
    let rerun = [counting.clone()];

    let mut at_renames = 0;
    for path in renames.iter().filter(|p| !per_run(p)) {
        fresh();
        let what = format!("killed at the rename of {path}");
        assert!(
            case.killed(&refs(&at_path(path, RENAMES)), &counting, &what),
            "{what}: not killed"
        );
        case.resume(&dst, &rerun, &what);
        at_renames += 1;
    }
    let mut at_writes = 0;
    for path in renames.iter().filter(|p| !per_run(p) && is_metadata(p)) {
        fresh();
        let what = format!("killed at the write of {path}");
        assert!(
            case.killed(&refs(&at_path(path, WRITES)), &counting, &what),
            "{what}: not killed"
        );
        case.resume(&dst, &rerun, &what);
        at_writes += 1;
    }
    // strace counts per thread: the n-th rename of whichever thread gets there first (this reaches
    // the per-run record files too).
    let mut nth = 0;
    for n in 1..=renames.len() {
        fresh();
        let what = format!("killed at a thread's rename number {n}");
        let inject = [
            "-e".to_string(),
            format!("trace={RENAMES}"),
            "-e".into(),
            format!("inject={RENAMES}:signal=KILL:when={n}"),
        ];
        if !case.killed(&refs(&inject), &counting, &what) {
            break;
        }
        case.resume(&dst, &rerun, &what);
        nth += 1;
    }
    // The state is removed last (deletes, no renames): kill at the deletes of the options record and
    // of the state's folders, then at a thread's n-th delete (which reaches the per-run records).
    let mut state_deletes = 0;
    for key in [".zshard/options/w0of1.json", ".zshard/options", ".zshard"] {
        fresh();
        let path = format!("{}/{key}", dst.display());
        let what = format!("killed at the delete of {key}");
        let inject = at_path(&path, "unlink,unlinkat,rmdir");
        assert!(
            case.killed(&refs(&inject), &counting, &what),
            "{what}: not killed"
        );
        case.resume(&dst, &rerun, &what);
        state_deletes += 1;
    }
    let mut deletes = 0;
    for n in 1..=renames.len() {
        fresh();
        let what = format!("killed at a thread's delete number {n}");
        let inject = [
            "-e".to_string(),
            "trace=unlink,unlinkat,rmdir".into(),
            "-e".into(),
            format!("inject=unlink,unlinkat,rmdir:signal=KILL:when={n}"),
        ];
        if !case.killed(&refs(&inject), &counting, &what) {
            break;
        }
        case.resume(&dst, &rerun, &what);
        deletes += 1;
    }
    eprintln!(
        "faults: {} renames in a run; killed at {at_renames} renames by name, {at_writes} metadata writes, {nth} n-th renames, {state_deletes} deletes of the state and {deletes} n-th deletes of a thread; {:.1} s",
        renames.len(),
        started.elapsed().as_secs_f64()
    );
    case.assert_all_equal(at_renames + at_writes + nth + state_deletes + deletes);
    assert_eq!(at_renames, renames.iter().filter(|p| !per_run(p)).count());
    assert!(
        at_renames >= 11 && at_writes >= 5 && nth >= 1 && deletes >= 1,
        "{at_renames} {at_writes} {nth}"
    );
}

#[test]
fn killed_during_finalize_of_two_workers_then_rerun_equals_an_uninterrupted_run() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let reference_dir = tmp.path().join("reference");
    assert_success(
        &run(&args("convert", &src, &reference_dir, &[])),
        "reference",
    );
    let reference = tree(&reference_dir);
    let workers_dir = tmp.path().join("workers");
    let worker =
        |i: usize, dst: &Path| args("convert", &src, dst, &["--worker", &format!("{i}/2")]);
    for i in 0..2 {
        assert_success(&run(&worker(i, &workers_dir)), "worker");
    }
    let dst = tmp.path().join("dst");
    let finalize = args("finalize", &src, &dst, &[]);
    copy_tree(&workers_dir, &dst);
    let trace = tmp.path().join("count.trace");
    assert!(strace(&["-e", &format!("trace={RENAMES}")], &trace, &finalize).success());
    assert_like_reference(&reference, &src, &dst, "finalize without faults");
    let renames = renamed(&trace);
    for key in [
        "a/zarr.json#1",
        "g/b/zarr.json#1",
        "g/zarr.json#1",
        "/zarr.json#1",
    ] {
        assert!(
            renames.iter().any(|r| r.ends_with(key)),
            "{key} not in {renames:?}"
        );
    }
    let case = KillCase {
        src: &src,
        reference: &reference,
        scratch: tmp.path(),
        failures: Default::default(),
    };
    let mut kills = 0;
    // A lease's name is new in every run (host, pid, time), so strace cannot be pointed at it.
    let renames: Vec<String> = renames.into_iter().filter(|p| !per_run(p)).collect();
    for (path, syscalls) in renames.iter().flat_map(|p| [(p, RENAMES), (p, WRITES)]) {
        let _ = std::fs::remove_dir_all(&dst);
        copy_tree(&workers_dir, &dst);
        let what = format!("finalize killed at {syscalls} of {path}");
        assert!(
            case.killed(&refs(&at_path(path, syscalls)), &finalize, &what),
            "{what}"
        );
        case.resume(&dst, std::slice::from_ref(&finalize), &what);
        kills += 1;
    }
    // Workers killed at each of their renames, then rerun, the other worker, and finalize.
    let mut worker_kills = 0;
    for i in 0..2 {
        let _ = std::fs::remove_dir_all(&dst);
        assert!(strace(
            &["-e", &format!("trace={RENAMES}")],
            &trace,
            &worker(i, &dst)
        )
        .success());
        for path in renamed(&trace).iter().filter(|p| !per_run(p)) {
            let _ = std::fs::remove_dir_all(&dst);
            let what = format!("worker {i} killed at the rename of {path}");
            assert!(
                case.killed(&refs(&at_path(path, RENAMES)), &worker(i, &dst), &what),
                "{what}"
            );
            case.resume(
                &dst,
                &[worker(i, &dst), worker(1 - i, &dst), finalize.clone()],
                &what,
            );
            worker_kills += 1;
        }
    }
    eprintln!(
        "faults: finalize killed at {kills} renames and writes, workers at {worker_kills} renames; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    case.assert_all_equal(kills + worker_kills);
    assert_eq!(kills, 2 * renames.len());
    assert!(worker_kills >= 8, "{worker_kills}");
}

#[test]
fn killed_at_random_times_then_rerun_equals_an_uninterrupted_run() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let reference_dir = tmp.path().join("reference");
    let started = Instant::now();
    assert_success(
        &run(&args("convert", &src, &reference_dir, &[])),
        "reference",
    );
    let duration = started.elapsed();
    let reference = tree(&reference_dir);
    // A seeded linear congruential generator: the same delays on every run of the test.
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut interrupted = 0;
    let mut failures = Vec::new();
    for kill in 0..8 {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let fraction = (seed >> 11) as f64 / (1u64 << 53) as f64;
        let dst = tmp.path().join(format!("run{kill}"));
        let convert = args("convert", &src, &dst, &[]);
        let mut child = Command::new(BIN).args(&convert).spawn().expect("spawn");
        std::thread::sleep(duration.mul_f64(fraction).max(Duration::from_micros(100)));
        let _ = child.kill();
        let status = child.wait().expect("reap");
        interrupted += usize::from(status.signal() == Some(9));
        assert_success(&run(&convert), "rerun");
        failures.extend(differences(
            &reference,
            &src,
            &dst,
            &format!("random kill {kill}"),
        ));
    }
    eprintln!(
        "faults: 8 random-time kills, {interrupted} landed before the run ended (run takes {:?})",
        duration
    );
    assert!(
        failures.is_empty(),
        "{} difference(s) in 8 cases:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Converts the test source into `dst` and returns the output location.
fn converted(tmp: &Path) -> (PathBuf, PathBuf) {
    converted_with(tmp, &[])
}

/// Converts the test source into `dst` with `extra` options and returns the output location.
fn converted_with(tmp: &Path, extra: &[&str]) -> (PathBuf, PathBuf) {
    let src = source(tmp);
    let dst = tmp.join("out");
    assert_success(&run(&args("convert", &src, &dst, extra)), "convert");
    (src, dst)
}

fn verify(src: &Path, dst: &Path) -> Output {
    run(&[
        "verify".into(),
        text(src).into(),
        text(dst).into(),
        "--quiet".into(),
    ])
}

/// Asserts verify fails (exit 1) with exactly `lines` as its mismatches, then the summary.
fn assert_mismatches(out: &Output, lines: &[String]) {
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mismatches: Vec<&str> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("zshard: mismatch: "))
        .collect();
    assert_eq!(mismatches, lines, "{stderr}");
    let summary = format!("zshard: error: {} mismatch(es) in ", lines.len());
    assert!(stderr.contains(&summary), "{stderr}");
}

#[test]
fn verify_reports_stray_objects_by_key() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, dst) = converted(tmp.path());
    let clean = verify(&src, &dst);
    assert_success(&clean, "verify of an untouched output");
    let put = |rel: &str| {
        let path = dst.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, b"junk").expect("write");
    };
    put("a/c/99/99");
    put("a/c/notes.txt");
    put("g/b/c/1/1#1");
    put(".zshard/options/w0of1.json");
    let d = dst.display();
    assert_mismatches(
        &verify(&src, &dst),
        &[
            format!("{d}/a/c/99/99: stray object: not a shard of the array's grid [2, 2]"),
            format!("{d}/a/c/notes.txt: stray object: not a shard of the array's grid [2, 2]"),
            format!("{d}/g/b/c/1/1#1: stray object: staged file of an interrupted write"),
            format!("{d}/.zshard/options/w0of1.json: stray object: state of an unfinished conversion (a finished one removes .zshard/)"),
        ],
    );
}

/// Issue 31, row 13: content the source lacks is reported. An array and a group in the output that
/// the source does not have, and an empty `.zshard/`, are mismatches; a file that is not part of the
/// Zarr hierarchy (a `readme.txt` beside an array's metadata) is a warning, not a mismatch: zshard
/// writes around such files and `--overwrite` keeps them (`destination.rs`,
/// `overwrite_keeps_files_zshard_did_not_write`).
#[test]
fn verify_reports_content_the_source_lacks() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, dst) = converted(tmp.path());
    let d = dst.display();
    std::fs::write(dst.join("a/readme.txt"), b"notes").expect("readme");
    let out = verify(&src, &dst);
    assert_success(&out, "verify with a readme.txt beside an array");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "zshard: warning: {d}/a/readme.txt: not part of the Zarr hierarchy"
        )),
        "{stderr}"
    );

    std::fs::create_dir(dst.join(".zshard")).expect("empty state folder");
    assert_mismatches(
        &verify(&src, &dst),
        &[format!("{d}/.zshard: stray object: the state folder of a conversion (a finished one removes .zshard/)")],
    );
    std::fs::remove_dir(dst.join(".zshard")).expect("rmdir");

    // A copy of an output array where the source has none, and a group.
    let copy = dst.join("g/extra");
    std::fs::create_dir_all(copy.join("c/0")).expect("mkdir");
    for rel in ["zarr.json", "c/0/0"] {
        std::fs::copy(dst.join("g/b").join(rel), copy.join(rel)).expect("copy");
    }
    std::fs::create_dir_all(dst.join("h")).expect("mkdir");
    std::fs::write(
        dst.join("h/zarr.json"),
        br#"{"zarr_format": 3, "node_type": "group", "attributes": {}}"#,
    )
    .expect("group");
    assert_mismatches(
        &verify(&src, &dst),
        &[
            "array g/extra: in the output, not in the source".to_string(),
            "group h: in the output, not in the source".to_string(),
        ],
    );
}

/// A change to an output `zarr.json`.
type Edit = Box<dyn Fn(&mut Value)>;

/// Rewrites `g/b/zarr.json` of a copy of the output with `edit` and returns verify's output.
fn verify_edited(src: &Path, dst: &Path, scratch: &Path, edit: impl Fn(&mut Value)) -> Output {
    verify_edited_doc(src, dst, scratch, "g/b/zarr.json", edit)
}

/// Rewrites the document `doc` of a copy of the output with `edit` and returns verify's output.
fn verify_edited_doc(
    src: &Path,
    dst: &Path,
    scratch: &Path,
    doc: &str,
    edit: impl Fn(&mut Value),
) -> Output {
    let _ = std::fs::remove_dir_all(scratch);
    copy_tree(dst, scratch);
    let doc_path = scratch.join(doc);
    let mut doc: Value =
        serde_json::from_slice(&std::fs::read(&doc_path).expect("read")).expect("json");
    edit(&mut doc);
    std::fs::write(&doc_path, serde_json::to_vec(&doc).expect("json")).expect("write");
    verify(src, scratch)
}

#[test]
fn verify_compares_what_readers_use_to_interpret_values() {
    let tmp = tempfile::tempdir().expect("tempdir");
    // Without consolidated metadata, so that an edited zarr.json is what readers see (with it, they
    // read the root's copy: see verify_reports_node_documents_that_differ_from_the_consolidated_copy).
    let (src, dst) = converted_with(tmp.path(), &["--no-consolidate"]);
    let doc: Value =
        serde_json::from_slice(&std::fs::read(dst.join("g/b/zarr.json")).expect("read"))
            .expect("json");
    assert_eq!(doc["dimension_names"], json!(["y", "x"]));
    assert_eq!(doc["attributes"]["scale_factor"], json!(0.5));
    let clean = verify(&src, &dst);
    assert_success(&clean, "verify of an untouched output with CF attributes");
    assert_eq!(String::from_utf8_lossy(&clean.stderr), "");

    let scratch = tmp.path().join("edited");
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "fill value",
            Box::new(|d| d["fill_value"] = json!(1.5)),
            "fill_value differs: source 0.0, output 1.5",
        ),
        (
            "data type",
            Box::new(|d| {
                d["data_type"] = json!("int32");
                d["fill_value"] = json!(0);
            }),
            "data_type differs: source float32, output int32",
        ),
        (
            "dimension names",
            Box::new(|d| {
                d.as_object_mut().map(|m| m.remove("dimension_names"));
            }),
            r#"dimension_names differs: source ["y","x"], output none"#,
        ),
        (
            "dropped attribute",
            Box::new(|d| {
                d["attributes"]
                    .as_object_mut()
                    .map(|m| m.remove("scale_factor"));
            }),
            r#"attribute "scale_factor" differs: source 0.5, output absent"#,
        ),
        (
            "changed attribute",
            Box::new(|d| d["attributes"]["units"] = json!("degC")),
            r#"attribute "units" differs: source "K", output "degC""#,
        ),
        (
            "changed _FillValue",
            Box::new(|d| d["attributes"]["_FillValue"] = json!(0.0)),
            // The source's as xarray reads it: the .zarray fill value 0.0 wins over its .zattrs -9999.0,
            // in xarray's v3 form (base64 of a little-endian f64).
            r#"attribute "_FillValue" differs: source "AAAAAAAAAAA=", output 0.0"#,
        ),
        (
            "changed add_offset",
            Box::new(|d| d["attributes"]["add_offset"] = json!(11.0)),
            r#"attribute "add_offset" differs: source 10.0, output 11.0"#,
        ),
    ];
    for (what, edit, message) in &cases {
        let out = verify_edited(&src, &dst, &scratch, edit);
        assert_mismatches(&out, &[format!("array g/b: {message}")]);
        eprintln!("faults: verify reports {what}");
    }
    let out = verify_edited_doc(&src, &dst, &scratch, "zarr.json", |d| {
        d["attributes"]["title"] = json!("other")
    });
    assert_mismatches(
        &out,
        &[format!(
            r#"group {}: attribute "title" differs: source "faults", output "other""#,
            src.display()
        )],
    );
}

#[test]
fn verify_reports_node_documents_that_differ_from_the_consolidated_copy() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, dst) = converted(tmp.path());
    let root: Value =
        serde_json::from_slice(&std::fs::read(dst.join("zarr.json")).expect("read")).expect("json");
    assert!(
        root["consolidated_metadata"]["metadata"]["g/b"].is_object(),
        "the output is consolidated: {root}"
    );
    assert_success(
        &verify(&src, &dst),
        "verify of an untouched consolidated output",
    );
    let scratch = tmp.path().join("edited");
    let out = verify_edited(&src, &dst, &scratch, |d| d["fill_value"] = json!(1.5));
    assert_mismatches(
        &out,
        &[format!(
            "{}: differs from its entry in the root's consolidated metadata, which readers use",
            scratch.join("g/b/zarr.json").display()
        )],
    );
    std::fs::remove_file(scratch.join("g/b/zarr.json")).expect("remove");
    let out = verify(&src, &scratch);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("g/b/zarr.json: is missing, but the root's consolidated metadata lists it"),
        "{stderr}"
    );
}

/// `--checkpoint-interval` reaches the run (issue 34): the `done` records of a worker (kept until
/// `finalize`) are written each time the interval has passed, each after a `syncfs`. Each shard's
/// rename is slowed by 30 ms (strace), so the 32 shards of worker 0/2 take about half a second:
/// with `10ms` nearly every shard gets its own record batch and checkpoint, with the default (10 s)
/// the run writes one batch at its end.
#[test]
fn the_checkpoint_interval_sets_how_often_shards_are_recorded_after_a_syncfs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    let shape = [64u64, 256];
    let data = expected(DataType::UInt16, &shape, 0);
    write_v2(
        &src,
        DataType::UInt16,
        &shape,
        &[16, 16],
        Value::Null,
        &data,
    );
    let convert = |name: &str, extra: &[&str]| -> (usize, usize) {
        let dst = tmp.path().join(name);
        let mut args = vec![
            "convert".to_string(),
            text(&src).into(),
            text(&dst).into(),
            "--shard-shape=16,16".into(),
            "--worker=0/2".into(),
            "--threads=1".into(),
            "--quiet".into(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let trace = tmp.path().join(format!("{name}.trace"));
        let traced = format!("trace=syncfs,{RENAMES}");
        let slowed = format!("inject={RENAMES}:delay_exit=30000");
        let status = strace(&["-e", &traced, "-e", &slowed], &trace, &args);
        assert!(status.success(), "{name}: {status:?}");
        let syncs = std::fs::read_to_string(&trace)
            .expect("trace")
            .lines()
            .filter(|l| l.contains("syncfs("))
            .count();
        // A batch file holds one batch; a compacted one (merged by fours) names its batches in its
        // first line, `#batches\t` then one `ms:records:bytes` each, comma-separated.
        let done = std::fs::read_dir(dst.join(".zshard/done"))
            .expect("the worker's done records")
            .map(|entry| {
                let text = std::fs::read_to_string(entry.expect("entry").path()).expect("record");
                match text
                    .lines()
                    .next()
                    .and_then(|l| l.strip_prefix("#batches\t"))
                {
                    Some(list) => list.split(',').filter(|s| !s.is_empty()).count(),
                    None => 1,
                }
            })
            .sum();
        (done, syncs)
    };
    let (done_default, syncs_default) = convert("default", &[]);
    let (done_short, syncs_short) = convert("short", &["--checkpoint-interval", "10ms"]);
    eprintln!("default: {done_default} done batches, {syncs_default} syncfs; 10ms: {done_short} done batches, {syncs_short} syncfs");
    assert_eq!(done_default, 1, "one batch at the end with the default");
    assert!(done_short >= 8, "{done_short} batches with 10ms");
    assert!(
        syncs_short >= done_short,
        "{syncs_short} syncfs for {done_short} batches"
    );
    assert!(syncs_short > syncs_default);
    // 0 and absurd values are refused before anything is written, naming the flag.
    for bad in ["0", "2h", "soon"] {
        let dst = tmp.path().join("refused");
        let out = run(&[
            "convert".into(),
            text(&src).into(),
            text(&dst).into(),
            "--checkpoint-interval".into(),
            bad.into(),
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{bad}");
        assert!(stderr.contains("--checkpoint-interval"), "{bad}: {stderr}");
        assert!(!dst.exists(), "{bad}");
    }
}

/// Issue 42, point 4: a passthrough edge chunk whose stored padding (past the array's end) is not the
/// fill value verifies clean: the spec leaves those values undefined, and the output holds the
/// source's bytes. A value inside the array that differs is still a mismatch, reported where it is.
#[test]
fn verify_compares_edge_chunks_only_within_the_array() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("c")).expect("mkdir");
    let meta = json!({"zarr_format": 3, "node_type": "array", "shape": [6, 3], "data_type": "uint8",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4, 2]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes"}], "attributes": {}});
    std::fs::write(src.join("zarr.json"), meta.to_string()).expect("zarr.json");
    // Chunk (1, 1) covers rows 4..6 and column 2 of the array: 2 of its 8 elements; the rest is
    // padding of 7s and 9s, as a writer that does not clear its buffer leaves it.
    for (key, chunk) in [
        ("0/0", [1u8, 2, 3, 4, 5, 6, 7, 8]),
        ("0/1", [9, 7, 10, 7, 11, 7, 12, 7]),
        ("1/0", [13, 14, 15, 16, 9, 9, 9, 9]),
        ("1/1", [17, 7, 18, 7, 9, 9, 9, 9]),
    ] {
        std::fs::create_dir_all(src.join("c").join(&key[..1])).expect("mkdir");
        std::fs::write(src.join("c").join(key), chunk).expect("chunk");
    }
    let dst = tmp.path().join("out");
    let convert = |dst: &Path| {
        run(&[
            "convert".into(),
            text(&src).into(),
            text(dst).into(),
            "--compressor".into(),
            "source".into(),
            "--shard-shape".into(),
            "8,4".into(),
            "--quiet".into(),
        ])
    };
    assert_success(&convert(&dst), "convert");
    assert_success(
        &verify(&src, &dst),
        "verify of padding that is not the fill value",
    );
    // A value inside the array (row 5, column 2: the second 18) differs: still reported.
    let out = tmp.path().join("changed");
    assert_success(&convert(&out), "convert");
    let shard = out.join("c/0/0");
    let mut bytes = std::fs::read(&shard).expect("shard");
    let at = bytes
        .windows(8)
        .position(|w| w == [17, 7, 18, 7, 9, 9, 9, 9])
        .expect("chunk (1, 1) stored as it is");
    bytes[at + 2] = 99;
    std::fs::write(&shard, &bytes).expect("write");
    let o = out.display();
    assert_mismatches(
        &verify(&src, &out),
        &[format!("{o}/c/0/0: inner chunk 3: 1 element(s) differ from the source, first at [5, 2] (source bytes [12], output [63])")],
    );
}

/// Issue 41: a `--pyramid` conversion killed at the rename of every shard of every level (and of its
/// records and documents), then rerun, equals an uninterrupted run file for file, and `verify` is
/// clean. Its levels are made while level 0 is converted, never read back: the lower levels' shards
/// fed by several level-0 shards (level 2 by 2x2, level 3 by all 4x4) are written after the levels
/// above them, or before, so a kill leaves each level's shards done, staged (`KEY#1`) or missing
/// in every combination a run goes through.
#[test]
fn killed_at_every_rename_of_a_pyramid_then_rerun_equals_an_uninterrupted_run() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    let shape = [128u64, 128];
    write_v2(
        &src,
        DataType::UInt16,
        &shape,
        &[16, 16],
        json!({"id": "zstd", "level": 1}),
        &expected(DataType::UInt16, &shape, 7),
    );
    std::fs::write(src.join(".zattrs"), r#"{"_ARRAY_DIMENSIONS": ["y", "x"]}"#).expect("write");
    // Level 0: 4x4 shards of 32; the levels below halve the shards down to the inner chunk (16):
    // level 1 4x4 shards of 16 (one per level-0 shard), level 2 2x2, level 3 one.
    let pyramid = ["--pyramid", "4", "--checkpoint-interval", "10ms"];
    let reference_dir = tmp.path().join("reference");
    assert_success(
        &run(&args("convert", &src, &reference_dir, &pyramid)),
        "reference",
    );
    let reference = tree(&reference_dir);
    let dst = tmp.path().join("dst");
    let counting = args("convert", &src, &dst, &pyramid);
    let trace = tmp.path().join("count.trace");
    assert!(strace(&["-e", &format!("trace={RENAMES}")], &trace, &counting).success());
    let renames = renamed(&trace);
    let base = format!("{}/", dst.display());
    let short: Vec<&str> = renames
        .iter()
        .map(|r| r.trim_start_matches(&base))
        .collect();
    for key in [
        "0/c/3/3#1",
        "1/c/3/3#1",
        "2/c/1/1#1",
        "3/c/0/0#1",
        "zarr.json#1",
    ] {
        assert!(short.contains(&key), "{key} not in {short:?}");
    }
    let case = KillCase {
        src: &src,
        reference: &reference,
        scratch: tmp.path(),
        failures: Default::default(),
    };
    let rerun = [counting.clone()];
    let mut at_renames = 0;
    for path in renames.iter().filter(|p| !per_run(p)) {
        let _ = std::fs::remove_dir_all(&dst);
        let what = format!("killed at the rename of {path}");
        assert!(
            case.killed(&refs(&at_path(path, RENAMES)), &counting, &what),
            "{what}: not killed"
        );
        case.resume(&dst, &rerun, &what);
        at_renames += 1;
    }
    eprintln!(
        "faults: a pyramid killed at each of its {at_renames} renames by name; {:.1} s",
        started.elapsed().as_secs_f64()
    );
    case.assert_all_equal(at_renames);
    assert!(at_renames >= 37, "{at_renames}: {short:?}");
}
