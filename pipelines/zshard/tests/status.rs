//! `zshard status DST`: a partitioned conversion with one of its two workers done, then both, then
//! finalized; the JSON's numbers against what the destination holds.

mod common;

use common::{banded_source, files, zshard, SHARDS_OF_16};
use serde_json::Value;

fn status(dst: &str) -> Value {
    let out = zshard(&["status", dst, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status JSON")
}

fn run(args: &[&str]) {
    let out = zshard(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The shard objects the destination holds (key -> size).
fn shards(dst: &std::path::Path) -> Vec<u64> {
    files(dst)
        .into_iter()
        .filter(|(key, _)| key.starts_with("c/"))
        .map(|(_, bytes)| bytes.len() as u64)
        .collect()
}

#[test]
fn status_counts_what_the_workers_did() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = banded_source(tmp.path());
    let src = src.to_str().expect("utf-8");
    let dst_path = tmp.path().join("dst");
    let dst = dst_path.to_str().expect("utf-8");

    // A missing local destination is an error; an empty one holds no conversion yet.
    assert!(!zshard(&["status", dst]).status.success());
    std::fs::create_dir(&dst_path).expect("mkdir");
    let s = status(dst);
    assert_eq!(s["phase"], "not_started", "{s:#}");

    // Worker 0 of 2 converts its 15 shards (global indices 0, 2, ..., 28); worker 1 never runs.
    let convert = |worker: &str| {
        run(&[
            &["convert", src, dst, "--worker", worker, "-q"][..],
            &SHARDS_OF_16,
        ]
        .concat())
    };
    convert("0/2");
    let written = shards(&dst_path);
    // 96x80 in 16x16 shards: 30 shards; the first 2000 elements are the fill value, so the 5
    // shards of the first row hold only it and are not written (3 of them are worker 0's).
    assert_eq!(written.len(), 12);
    let s = status(dst);
    assert_eq!(s["phase"], "in_progress", "{s:#}");
    let array = &s["arrays"][0];
    assert_eq!(array["path"], "");
    assert_eq!(array["shards_planned"], 30);
    assert_eq!(array["shards_done"], 15);
    assert_eq!(array["shards_written"], written.len() as u64);
    assert_eq!(array["shards_empty"], 3);
    assert_eq!(array["bytes_written"], written.iter().sum::<u64>());
    assert_eq!(s["totals"]["shards_done"], 15);
    assert_eq!(s["totals"]["shards_planned"], 30);
    let workers: Vec<(String, bool, u64, u64, bool)> = s["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| {
            (
                w["worker"].as_str().expect("tag").to_string(),
                w["started"].as_bool().expect("started"),
                w["shards_planned"].as_u64().expect("planned"),
                w["shards_done"].as_u64().expect("done"),
                w["live"].as_bool().expect("live"),
            )
        })
        .collect();
    // Worker 0 ended and removed its lease: nothing is live.
    assert_eq!(
        workers,
        [
            ("w0of2".to_string(), true, 15, 15, false),
            ("w1of2".to_string(), false, 15, 0, false)
        ]
    );
    assert_eq!(s["finalize_waits_for"], serde_json::json!(["w1of2"]));
    assert_eq!(s["unreadable"], serde_json::json!([]));
    // Worker 0's records were stored just now: its 15 shards (and their bytes) over the 120 s
    // window, and the 15 left at that pace take 120 s.
    let rate = &s["rate"];
    assert_eq!(rate["window_s"], 120, "{rate}");
    assert_eq!(rate["shards_per_s"], 15.0 / 120.0, "{rate}");
    assert_eq!(
        rate["bytes_per_s"],
        written.iter().sum::<u64>() as f64 / 120.0,
        "{rate}"
    );
    // No run is converting (worker 0 ended, worker 1 never started): no time left is given
    // (issue 44, point 4).
    assert_eq!(rate["eta_s"], Value::Null, "{rate}");
    // The table says the same.
    let table = zshard(&["status", dst]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("finalize waits for worker(s): 1/2"),
        "{table}"
    );
    // With no worker live there is no pace to show (issue 44, point 4).
    assert!(!table.contains("time left"), "{table}");

    convert("1/2");
    let written = shards(&dst_path);
    assert_eq!(written.len(), 25);
    let s = status(dst);
    assert_eq!(s["totals"]["shards_done"], 30, "{s:#}");
    assert_eq!(s["arrays"][0]["shards_empty"], 5);
    assert_eq!(s["totals"]["bytes_written"], written.iter().sum::<u64>());
    assert_eq!(s["finalize_waits_for"], serde_json::json!([]));

    run(&[&["finalize", src, dst, "-q"][..], &SHARDS_OF_16].concat());
    let s = status(dst);
    assert_eq!(s["phase"], "complete", "{s:#}");
    // Its arrays and totals from the metadata (issue 44, point 4).
    assert_eq!(s["arrays"][0]["shards_done"], 30, "{s:#}");
    assert_eq!(s["totals"]["shards_planned"], 30, "{s:#}");
}

/// `zshard status JOB.toml`: the status of each conversion's destination, in the job's order; with
/// `--watch`, read again until every one is finished (here: when the second worker has run).
#[test]
fn status_of_a_job_file_and_watching_it_until_finished() {
    use std::io::BufRead as _;

    let tmp = tempfile::tempdir().expect("tempdir");
    let src = banded_source(tmp.path());
    let job = tmp.path().join("job.toml");
    std::fs::write(
        &job,
        format!(
            "shard_shape = [16, 16]\nchunk_shape = [8, 8]\n\n[[conversions]]\nsource = {:?}\ndestination = \"a.zarr\"\n\n[[conversions]]\nsource = {:?}\ndestination = \"b.zarr\"\n",
            src.to_str().expect("utf-8"),
            src.to_str().expect("utf-8"),
        ),
    )
    .expect("job");
    let job = job.to_str().expect("utf-8");
    run(&["run", job, "--worker", "0/2", "-q"]);

    let out = zshard(&["status", job, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let statuses: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let statuses = statuses.as_array().expect("a list, one per conversion");
    assert_eq!(statuses.len(), 2);
    for (s, name) in statuses.iter().zip(["a.zarr", "b.zarr"]) {
        assert!(
            s["destination"]
                .as_str()
                .expect("destination")
                .ends_with(name),
            "{s:#}"
        );
        assert_eq!(s["phase"], "in_progress");
        assert_eq!(s["totals"]["shards_done"], 15);
        assert_eq!(s["totals"]["shards_planned"], 30);
        assert_eq!(s["finalize_waits_for"], serde_json::json!(["w1of2"]));
        assert_eq!(s["finished"], false);
    }
    let table = zshard(&["status", job]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert_eq!(
        table.matches("finalize waits for worker(s): 1/2").count(),
        2,
        "{table}"
    );

    // Watching: one JSON line per reading, every 0.2 s, until both are finished.
    let binary = std::env::var_os("ZSHARD_BIN").map_or_else(
        || env!("CARGO_BIN_EXE_zshard").into(),
        std::path::PathBuf::from,
    );
    let mut watcher = std::process::Command::new(binary)
        .args(["status", job, "--json", "--watch", "0.2"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("watch");
    let stdout = watcher.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map(|line| line.expect("line"))
            .collect::<Vec<String>>()
    });
    std::thread::sleep(std::time::Duration::from_millis(1000));
    assert!(
        watcher.try_wait().expect("wait").is_none(),
        "the watch ended while worker 1 had not run"
    );
    run(&["run", job, "--worker", "1/2", "-q"]);
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = watcher.try_wait().expect("wait") {
            break status;
        }
        assert!(
            started.elapsed().as_secs() < 30,
            "the watch goes on after every shard is done"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success());
    let lines = reader.join().expect("reader");
    assert!(lines.len() >= 4, "{lines:?}");
    let first: Value = serde_json::from_str(&lines[0]).expect("JSON line");
    let last: Value = serde_json::from_str(lines.last().expect("a line")).expect("JSON line");
    assert_eq!(first[0]["totals"]["shards_done"], 15);
    for s in last.as_array().expect("list") {
        assert_eq!(s["totals"]["shards_done"], 30, "{s:#}");
        assert_eq!(s["finished"], true, "{s:#}");
        assert_eq!(s["finalize_waits_for"], serde_json::json!([]));
    }

    // A watch interval is positive seconds.
    let out = zshard(&["status", job, "--watch", "0"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--watch"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Issue 45, rows 6 and 11: state files that a crash, a typo or a disk fault garbled never make
/// `status` loop, run out of memory or panic. `--worker 3/4000000000` is refused by convert (status
/// then looped over every worker index); a junk record file name with such a count, record lines
/// with sizes past u64, and a claim whose shard count overflows are reported, never a panic.
#[test]
fn garbled_state_files_are_reported_by_status_without_a_panic_or_a_loop() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = banded_source(tmp.path());
    let src = src.to_str().expect("utf-8");
    let dst_path = tmp.path().join("dst");
    let dst = dst_path.to_str().expect("utf-8");

    let out = zshard(
        &[
            &["convert", src, dst, "--worker", "3/4000000000", "-q"][..],
            &SHARDS_OF_16,
        ]
        .concat(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("at most 100000"), "{stderr}");

    run(&[
        &["convert", src, dst, "--worker", "0/2", "-q"][..],
        &SHARDS_OF_16,
    ]
    .concat());
    let done = dst_path.join(".zshard/done");
    // A junk name with a huge worker count, and lines whose numbers overflow any sum.
    std::fs::write(done.join("w3of4000000000-1-000000.txt"), "c\t1,0\t5\n").expect("junk");
    std::fs::write(
        done.join("w0of2-2-000000.txt"),
        "\t1,1\t18446744073709551615\t00000000\n\t2,2\t18446744073709551615\t00000000\n\t2,2\t99999999999999999999999\t00000000\n",
    )
    .expect("overflowing sizes");
    let started = std::time::Instant::now();
    let s = status(dst);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "status took {:?}",
        started.elapsed()
    );
    let workers: Vec<&str> = s["workers"]
        .as_array()
        .expect("workers")
        .iter()
        .map(|w| w["worker"].as_str().expect("name"))
        .collect();
    assert_eq!(workers, ["w0of2", "w1of2"], "{s:#}");
    assert_eq!(
        s["totals"]["bytes_written"],
        u64::MAX,
        "saturated, not wrapped: {s:#}"
    );

    // A claim whose shard grid overflows: an error naming the file, not a panic.
    let claim = dst_path.join(".zshard/claim.json");
    let mut recorded: Value =
        serde_json::from_slice(&std::fs::read(&claim).expect("claim")).expect("json");
    recorded["arrays"][0]["zarr.json"]["shape"] = serde_json::json!([u64::MAX, u64::MAX]);
    recorded["arrays"][0]["zarr.json"]["chunk_grid"]["configuration"]["chunk_shape"] =
        serde_json::json!([1, 1]);
    std::fs::write(&claim, recorded.to_string()).expect("garble the claim");
    let out = zshard(&["status", dst, "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("claim.json") && stderr.contains("more shards than can be counted"),
        "{stderr}"
    );
}

/// Issue 45, row 8: a conversion finished with `--keep-manifest` is complete (its kept manifest
/// is no run in progress), so `--watch` returns; and a job's destination that does not exist yet is
/// a conversion not started, not a failure of the whole job's status.
#[test]
fn a_kept_manifest_is_complete_and_a_job_destination_not_made_yet_is_not_started() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = banded_source(tmp.path());
    let src = src.to_str().expect("utf-8");
    let dst_path = tmp.path().join("kept.zarr");
    let dst = dst_path.to_str().expect("utf-8");
    run(&[
        &["convert", src, dst, "--keep-manifest", "-q"][..],
        &SHARDS_OF_16,
    ]
    .concat());
    assert!(dst_path.join(".zshard/manifest.tsv").exists());
    let s = status(dst);
    assert_eq!(s["phase"], "complete", "{s:#}");
    assert_eq!(s["finished"], true, "{s:#}");
    let watched = zshard(&["status", dst, "--json", "--watch", "0.1"]);
    assert!(watched.status.success());

    let job = tmp.path().join("job.toml");
    std::fs::write(
        &job,
        format!("shard_shape = [16, 16]\nchunk_shape = [8, 8]\n[[conversions]]\nsource = {src:?}\ndestination = \"kept.zarr\"\n[[conversions]]\nsource = {src:?}\ndestination = \"later.zarr\"\n"),
    )
    .expect("job");
    let statuses = status(job.to_str().expect("utf-8"));
    assert_eq!(statuses[0]["phase"], "complete", "{statuses:#}");
    assert_eq!(statuses[1]["phase"], "not_started", "{statuses:#}");
}

/// Issue 44, point 4: a single run killed on this host is not shown `live` for a minute (its pid
/// is gone: its lease is "dead"), `finalize` waits for no unpartitioned run (it writes its own
/// metadata), and no time left is given when no run is converting.
#[test]
fn a_killed_single_run_is_dead_and_nothing_waits_for_finalize() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = banded_source(tmp.path());
    let src = src.to_str().expect("utf-8");
    let dst_path = tmp.path().join("dst");
    let dst = dst_path.to_str().expect("utf-8");
    // Half of the shards, recorded as a single run's (w0of1) records would be.
    run(&[
        &["convert", src, dst, "--worker", "0/2", "-q"][..],
        &SHARDS_OF_16,
    ]
    .concat());
    let state = dst_path.join(".zshard");
    for dir in ["options", "done", "empty"] {
        for entry in std::fs::read_dir(state.join(dir))
            .expect("records")
            .flatten()
        {
            let name = entry
                .file_name()
                .to_string_lossy()
                .replace("w0of2", "w0of1");
            std::fs::rename(entry.path(), state.join(dir).join(name)).expect("rename");
        }
    }
    // A lease renewed just now by a process of this host that has ended.
    let mut ended = std::process::Command::new("true").spawn().expect("true");
    let pid = ended.id();
    ended.wait().expect("wait");
    let host = String::from_utf8(std::fs::read("/proc/sys/kernel/hostname").expect("hostname"))
        .expect("utf-8")
        .trim()
        .to_string();
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    std::fs::create_dir_all(state.join("leases")).expect("mkdir");
    std::fs::write(
        state.join(format!("leases/w0of1-{host}-{pid}-1.json")),
        serde_json::json!({"host": host, "pid": pid, "worker": "w0of1",
            "started": "2026-12-06T00:00:00Z", "renewed_ms": now_ms, "stale_after_ms": 60000})
        .to_string(),
    )
    .expect("lease");

    let s = status(dst);
    assert_eq!(s["finalize_waits_for"], serde_json::json!([]), "{s:#}");
    assert_eq!(s["workers"][0]["worker"], "w0of1", "{s:#}");
    assert_eq!(s["workers"][0]["live"], false, "{s:#}");
    assert_eq!(s["workers"][0]["leases"][0]["ended"], true, "{s:#}");
    assert_eq!(s["rate"]["eta_s"], Value::Null, "{s:#}");
    assert_eq!(s["finished"], false, "shards are left: {s:#}");
    let table = String::from_utf8_lossy(&zshard(&["status", dst]).stdout).into_owned();
    assert!(
        table.contains("dead: no such process on this host"),
        "{table}"
    );
    assert!(
        table.contains("stopped with 15 shard(s) left: rerun the conversion to resume it"),
        "{table}"
    );
    assert!(!table.contains("finalize waits for"), "{table}");
}

/// Issue 44, point 4: a finished conversion keeps its arrays and totals in `status` (its state is
/// gone; they come from its metadata), so the last `--watch` line does not lose them.
#[test]
fn a_finished_conversion_shows_its_arrays_and_totals() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = banded_source(tmp.path());
    let dst_path = tmp.path().join("dst");
    let dst = dst_path.to_str().expect("utf-8");
    run(&[
        &["convert", src.to_str().expect("utf-8"), dst, "-q"][..],
        &SHARDS_OF_16,
    ]
    .concat());
    let s = status(dst);
    assert_eq!(s["phase"], "complete", "{s:#}");
    assert_eq!(s["totals"]["shards_planned"], 30, "{s:#}");
    assert_eq!(s["totals"]["shards_done"], 30, "{s:#}");
    assert_eq!(s["arrays"][0]["shards_planned"], 30, "{s:#}");
}

/// Issue 44, point 4: `status DST --watch` started before the run waits for it (DST does not exist
/// yet) instead of failing, and ends once the run is complete, its last reading with the totals. The
/// table of a finished conversion shows its arrays and totals too, and a stopped run (no worker
/// live) shows no rate.
#[test]
fn watching_before_the_run_starts_waits_for_it() {
    use std::io::BufRead as _;

    let tmp = tempfile::tempdir().expect("tempdir");
    let src = banded_source(tmp.path());
    let dst_path = tmp.path().join("dst");
    let dst = dst_path.to_str().expect("utf-8");
    let mut watcher = std::process::Command::new(common::binary())
        .args(["status", dst, "--json", "--watch", "0.2"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("watch");
    let stdout = watcher.stdout.take().expect("stdout");
    let reader = std::thread::spawn(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map(|line| line.expect("line"))
            .collect::<Vec<String>>()
    });
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let early = watcher.try_wait().expect("wait");
    if early.is_some() {
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut watcher.stderr.take().expect("stderr"), &mut stderr)
            .expect("stderr");
        panic!("the watch ended before the run started: {early:?} {stderr}");
    }
    run(&[
        &["convert", src.to_str().expect("utf-8"), dst, "-q"][..],
        &SHARDS_OF_16,
    ]
    .concat());
    let started = std::time::Instant::now();
    let ended = loop {
        if let Some(status) = watcher.try_wait().expect("wait") {
            break status;
        }
        assert!(started.elapsed().as_secs() < 30, "the watch goes on");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(ended.success());
    let lines = reader.join().expect("reader");
    let first: Value = serde_json::from_str(&lines[0]).expect("JSON line");
    assert_eq!(first["phase"], "not_started", "{first:#}");
    let last: Value = serde_json::from_str(lines.last().expect("a line")).expect("JSON line");
    assert_eq!(last["phase"], "complete", "{last:#}");
    assert_eq!(last["totals"]["shards_done"], 30, "{last:#}");

    let table = String::from_utf8_lossy(&zshard(&["status", dst]).stdout).into_owned();
    assert!(table.contains("total"), "{table}");
    assert!(table.contains("30"), "{table}");

    // A stopped worker: no rate, no time left.
    let stopped = tmp.path().join("stopped");
    let stopped = stopped.to_str().expect("utf-8");
    run(&[
        &[
            "convert",
            src.to_str().expect("utf-8"),
            stopped,
            "--worker",
            "0/2",
            "-q",
        ][..],
        &SHARDS_OF_16,
    ]
    .concat());
    let table = String::from_utf8_lossy(&zshard(&["status", stopped]).stdout).into_owned();
    assert!(!table.contains("rate"), "{table}");
    assert!(!table.contains("time left"), "{table}");
}

/// Issue 44, point 9: `status` on a Zarr v2 dataset (a source given for DST) says what it holds
/// rather than "no metadata".
#[test]
fn status_of_a_zarr_v2_dataset_says_so() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = banded_source(tmp.path());
    let src = src.to_str().expect("utf-8");
    let s = status(src);
    assert_eq!(s["phase"], "not_started", "{s:#}");
    let note = s["note"].as_str().unwrap_or_default();
    assert!(note.contains("Zarr v2 metadata (.zarray)"), "{s:#}");
    let table = String::from_utf8_lossy(&zshard(&["status", src]).stdout).into_owned();
    assert!(table.contains("note: it holds Zarr v2 metadata"), "{table}");
}
