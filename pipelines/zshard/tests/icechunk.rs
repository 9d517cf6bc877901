//! Icechunk destinations (issue 45, rows 7, 8 and 13): a run killed while it creates the
//! repository or copies shards into it, then rerun; `status` of a conversion into a repository;
//! nodes of the other kind on the branch; the root group's attributes.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{banded_source, expected, write_v2, zshard, SHARDS_OF_16};
use serde_json::{json, Value};
use zshard_core::DataType;

/// The id of every repository's first snapshot (and of its transaction log).
const INITIAL: &str = "1CECHNKREP0F1RSTCMT0";

fn text(path: &Path) -> &str {
    path.to_str().expect("utf-8 path")
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A Zarr v2 group at `dir/name`: one uint16 64x64 array `array` and `attributes` on the root.
fn group_source(dir: &Path, name: &str, array: &str, attributes: Value) -> PathBuf {
    let src = dir.join(name);
    let data = expected(DataType::UInt16, &[64, 64], 0);
    write_v2(
        &src.join(array),
        DataType::UInt16,
        &[64, 64],
        &[16, 16],
        json!({"id": "zstd", "level": 1}),
        &data,
    );
    std::fs::write(src.join(".zgroup"), br#"{"zarr_format": 2}"#).expect("write");
    std::fs::write(src.join(".zattrs"), attributes.to_string()).expect("write");
    src
}

/// `zshard convert SRC DST` into an Icechunk repository, with `extra` options.
fn into_repo(src: &Path, dst: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "convert",
        text(src),
        text(dst),
        "--output-format",
        "icechunk",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(["--threads", "1", "--quiet"].iter().map(|s| s.to_string()));
    args.extend(SHARDS_OF_16.iter().chain(extra).map(|s| s.to_string()));
    args
}

fn run(args: &[String]) -> Output {
    Command::new(common::binary())
        .args(args)
        .output()
        .expect("run zshard")
}

/// The files below `root` named as the local store's staged copies (`NAME#N`).
fn staged_files(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if zshard_store::staged_base(&entry.file_name().to_string_lossy()).is_some() {
                found.push(
                    path.strip_prefix(root)
                        .expect("below")
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    found.sort();
    found
}

fn status(dst: &Path) -> Value {
    let out = zshard(&["status", text(dst), "--json"]);
    ok(&out, "status");
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

/// Runs `args` under strace, killed (SIGKILL) at the first link or rename onto `path` (from its
/// staged copy).
fn killed_at(path: &Path, args: &[String], trace: &Path) {
    let out = Command::new("strace")
        // strace matches a rename by its first path: the staged copy's (`NAME#1`).
        .args(["-f", "-qq", "-o", text(trace), "-P", text(path), "-P"])
        .arg(format!("{}#1", text(path)))
        .args([
            "-e",
            "inject=link,linkat,rename,renameat,renameat2:signal=KILL:when=1",
        ])
        .arg(common::binary())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("strace is needed (tests/run.sh installs it): {e}"));
    assert_eq!(
        out.status.signal(),
        Some(9),
        "not killed at {}: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_run_killed_while_creating_the_repository_is_finished_by_the_rerun() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = banded_source(tmp.path());
    // The objects a creation writes, the last one making the folder a repository.
    let cases: [(&str, &[&str]); 2] = [
        ("2", &["snapshots/INITIAL", "transactions/INITIAL", "repo"]),
        ("1", &["snapshots/INITIAL", "refs/branch.main/ref.json"]),
    ];
    for (spec, objects) in cases {
        for object in objects {
            let object = object.replace("INITIAL", INITIAL);
            let dst = tmp
                .path()
                .join(format!("repo-{spec}-{}", object.replace('/', "-")));
            let args = into_repo(&src, &dst, &["--icechunk-spec", spec]);
            killed_at(&dst.join(&object), &args, &tmp.path().join("trace"));
            let what = format!("spec {spec}, killed at {object}");
            ok(&run(&args), &format!("{what}: rerun"));
            assert_eq!(staged_files(&dst), Vec::<String>::new(), "{what}");
            // Only what the commit keeps for a later update stays staged: no shard.
            let staged: Vec<String> = common::files(&dst.join(".zshard-staging"))
                .into_keys()
                .filter(|k| !k.ends_with("zarr.json") && !k.ends_with(".zshard-records"))
                .filter(|k| k != ".zshard-kept-after-commit")
                .collect();
            assert_eq!(staged, Vec::<String>::new(), "{what}");
            // The repository holds the conversion: converted back, it equals the source.
            let back = tmp
                .path()
                .join(format!("back-{spec}-{}", object.replace('/', "-")));
            ok(
                &zshard(&["convert", text(&dst), text(&back), "--quiet"]),
                &what,
            );
            ok(&zshard(&["verify", text(&src), text(&back)]), &what);
        }
    }
}

#[test]
fn an_overwrite_rerun_of_a_half_made_repository_succeeds_and_other_files_are_kept() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = banded_source(tmp.path());
    let dst = tmp.path().join("repo");
    let args = into_repo(&src, &dst, &[]);
    killed_at(&dst.join("repo"), &args, &tmp.path().join("trace"));
    let mut overwrite = args.clone();
    overwrite.push("--overwrite".into());
    ok(&run(&overwrite), "--overwrite rerun");
    assert_eq!(staged_files(&dst), Vec::<String>::new());

    // A file of someone else's beside a half-made repository: refused, and nothing removed.
    let other = tmp.path().join("other");
    killed_at(
        &other.join("repo"),
        &into_repo(&src, &other, &[]),
        &tmp.path().join("trace"),
    );
    std::fs::write(other.join("notes.txt"), b"mine").expect("write");
    let out = run(&into_repo(&src, &other, &["--overwrite"]));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no Icechunk repository"), "{stderr}");
    assert_eq!(
        std::fs::read(other.join("notes.txt")).expect("kept"),
        b"mine"
    );
    assert!(other.join("snapshots").join(INITIAL).is_file());
}

/// Waits until a file named `chunks/ID#0` (a shard's copy linked but not renamed into place)
/// exists in `repo`.
fn wait_for_a_staged_chunk(repo: &Path) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        if staged_files(&repo.join("chunks"))
            .iter()
            .any(|f| f.ends_with("#0"))
        {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn chunk_copies_of_a_run_killed_while_copying_are_removed_by_its_rerun() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = banded_source(tmp.path());
    let dst = tmp.path().join("repo");
    let args = into_repo(&src, &dst, &[]);
    // Every hard link returns 1 s late: a shard's copy into `chunks/` is a link made under a
    // staged name, renamed into place after; the run is killed while it waits with the link made.
    let trace = tmp.path().join("trace");
    let mut child = Command::new("strace")
        .args(["-f", "-qq", "-o", text(&trace)])
        .args(["-e", "trace=link,linkat", "-e"])
        .arg("inject=link,linkat:delay_exit=1000000")
        .arg(common::binary())
        .args(&args)
        .spawn()
        .expect("strace");
    assert!(
        wait_for_a_staged_chunk(&dst),
        "no staged chunk copy appeared"
    );
    // zshard is strace's child.
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    let pid = std::fs::read_to_string(children).expect("strace's children");
    let pid = pid
        .split_whitespace()
        .next()
        .expect("zshard's pid")
        .to_string();
    let killed = Command::new("kill")
        .args(["-9", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let _ = child.wait();
    assert!(!staged_files(&dst.join("chunks")).is_empty());
    ok(&run(&args), "rerun");
    assert_eq!(staged_files(&dst), Vec::<String>::new());
}

#[test]
fn status_of_a_conversion_into_a_repository_follows_its_staging_and_commit() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = banded_source(tmp.path());
    let dst = tmp.path().join("repo");
    for worker in ["0/2", "1/2"] {
        ok(&run(&into_repo(&src, &dst, &["--worker", worker])), worker);
        let s = status(&dst);
        assert_eq!(s["phase"], "in_progress", "after worker {worker}: {s:#}");
        assert_eq!(s["totals"]["shards_planned"], 30, "{s:#}");
    }
    let s = status(&dst);
    assert_eq!(s["finalize_waits_for"], json!([]), "{s:#}");
    assert_eq!(s["totals"]["shards_done"], 30, "{s:#}");
    assert_eq!(s["finished"], true, "{s:#}");
    let mut finalize = into_repo(&src, &dst, &[]);
    finalize[0] = "finalize".into();
    finalize.retain(|a| a != "--threads" && a != "1");
    ok(&run(&finalize), "finalize");
    let s = status(&dst);
    assert_eq!(s["phase"], "complete", "{s:#}");
    assert_eq!(s["finished"], true, "{s:#}");
}

#[test]
fn an_array_where_the_branch_holds_a_group_is_refused_in_words_before_staging() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let group = group_source(tmp.path(), "group", "a", json!({"title": "first"}));
    let dst = tmp.path().join("repo");
    ok(&run(&into_repo(&group, &dst, &[])), "the group");
    // The banded source is one array at the root, where the repository now has a group.
    let array = banded_source(tmp.path());
    let out = run(&into_repo(&array, &dst, &[]));
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr
            .contains("branch \"main\" holds a group at /, where this conversion writes an array"),
        "{stderr}"
    );
    assert!(!stderr.contains("NodeSnapshot"), "{stderr}");
    // Refused before any shard was staged.
    let staged = dst.join(".zshard-staging");
    let shards: Vec<String> = common::files(&staged)
        .into_keys()
        .filter(|k| k.starts_with("c/"))
        .collect();
    assert_eq!(shards, Vec::<String>::new());
}

#[test]
fn converting_into_an_existing_repository_keeps_the_root_groups_attributes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let first = group_source(tmp.path(), "first", "a", json!({"title": "first"}));
    let second = group_source(tmp.path(), "second", "b", json!({"note": "second"}));
    let dst = tmp.path().join("repo");
    ok(&run(&into_repo(&first, &dst, &[])), "first");
    ok(&run(&into_repo(&second, &dst, &[])), "second");
    let back = tmp.path().join("back");
    ok(
        &zshard(&["convert", text(&dst), text(&back), "--quiet"]),
        "back",
    );
    let root: Value = serde_json::from_slice(&std::fs::read(back.join("zarr.json")).expect("root"))
        .expect("json");
    assert_eq!(
        root["attributes"],
        json!({"title": "first", "note": "second"}),
        "{root:#}"
    );
    assert!(back.join("a/zarr.json").is_file() && back.join("b/zarr.json").is_file());
}

/// Issue 41: the workers of one conversion into a repository are given one commit message, kept in
/// the staging folder for `finalize`. A worker given another one, or none where one is kept (a
/// rerun without `--message`), or one where the first worker was given none, is refused before it
/// converts anything, naming both; what was kept stays for `finalize`.
#[test]
fn workers_given_another_commit_message_are_refused_naming_both() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = banded_source(tmp.path());
    let dst = tmp.path().join("repo");
    let kept = tmp
        .path()
        .join("repo/.zshard-staging")
        .join(".zshard-message.txt");
    ok(
        &run(&into_repo(
            &src,
            &dst,
            &["--worker", "0/2", "--message", "first"],
        )),
        "worker 0",
    );
    let refused = |extra: &[&str], says: &[&str]| {
        let out = run(&into_repo(&src, &dst, extra));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} was accepted");
        for needle in says {
            assert!(stderr.contains(needle), "{extra:?}: {stderr}");
        }
    };
    let done = status(&dst)["totals"]["shards_done"].clone();
    refused(
        &["--worker", "1/2", "--message", "second"],
        &["--message \"first\"", "--message \"second\""],
    );
    assert_eq!(
        status(&dst)["totals"]["shards_done"],
        done,
        "the refused worker converted"
    );
    refused(
        &["--worker", "0/2"],
        &["--message \"first\"", "no --message"],
    );
    assert_eq!(std::fs::read_to_string(&kept).expect("kept"), "first");
    ok(
        &run(&into_repo(
            &src,
            &dst,
            &["--worker", "1/2", "--message", "first"],
        )),
        "worker 1",
    );
    let mut finalize = into_repo(&src, &dst, &[]);
    finalize[0] = "finalize".into();
    finalize.retain(|a| a != "--threads" && a != "1");
    // (The commit's message is read back in tests/interop/test_icechunk.py.)
    ok(&run(&finalize), "finalize");

    // The first worker given none: a later one given a message is refused as well.
    let other = tmp.path().join("other");
    ok(
        &run(&into_repo(&src, &other, &["--worker", "0/2"])),
        "worker 0",
    );
    let out = run(&into_repo(
        &src,
        &other,
        &["--worker", "1/2", "--message", "late"],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a message after none was accepted");
    assert!(
        stderr.contains("no --message") && stderr.contains("--message \"late\""),
        "{stderr}"
    );
    ok(
        &run(&into_repo(&src, &other, &["--worker", "1/2"])),
        "worker 1",
    );
}

/// Issue 41: an `--overwrite` run replaces the conversion that workers staged, and with it the
/// commit message they were given: killed before its commit, it leaves nothing of that message for
/// the workers of the conversion that replaced it to be refused by.
#[test]
fn an_overwrite_killed_before_its_commit_keeps_no_message_of_the_workers_it_replaced() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = banded_source(tmp.path());
    let dst = tmp.path().join("repo");
    ok(
        &run(&into_repo(
            &src,
            &dst,
            &["--worker", "0/2", "--message", "old"],
        )),
        "worker of the first conversion",
    );
    let other = ["--compressor", "zstd:5"];
    let overwrite = into_repo(&src, &dst, &[&other[..], &["--overwrite"]].concat());
    killed_at(
        &dst.join(".zshard-staging/c/5/4"),
        &overwrite,
        &tmp.path().join("trace"),
    );
    for worker in ["0/2", "1/2"] {
        let given = [&other[..], &["--worker", worker, "--message", "new"]].concat();
        ok(&run(&into_repo(&src, &dst, &given)), worker);
    }
    let kept = dst.join(".zshard-staging/.zshard-message.txt");
    assert_eq!(std::fs::read_to_string(kept).expect("kept"), "new");
}
