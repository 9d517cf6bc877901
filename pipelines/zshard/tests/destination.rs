//! The destination contract (issue 15, points 1, 2 and 4): resume skips only shards it can prove it
//! wrote with these options, a destination is claimed atomically so that runs with different options
//! cannot both write, and `--overwrite` removes only what the old hierarchy and zshard's state describe.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{
    banded_source as source, binary, expected, files, read_v3, write_v2, zshard,
    SHARDS_OF_16 as SHAPES,
};
use serde_json::{json, Value};
use zshard_core::DataType;

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

fn convert(src: &Path, dst: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["convert", s(src), s(dst), "--quiet", "--threads", "2"];
    args.extend(SHAPES);
    args.extend(extra);
    zshard(&args)
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Asserts exit status 1 and a message holding every one of `parts`.
fn refused(out: &Output, parts: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for part in parts {
        assert!(stderr.contains(part), "{part:?} not in: {stderr}");
    }
}

fn verify(src: &Path, dst: &Path) -> Output {
    zshard(&["verify", s(src), s(dst), "--quiet"])
}

fn report(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).expect("report")).expect("json")
}

/// The shard keys (`c/...`) among `files`.
fn shard_keys(files: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    files
        .keys()
        .filter(|k| k.starts_with("c/"))
        .cloned()
        .collect()
}

/// The output of an uninterrupted conversion with `extra` options into a fresh destination.
fn reference(tmp: &Path, src: &Path, name: &str, extra: &[&str]) -> BTreeMap<String, Vec<u8>> {
    let dst = tmp.join(name);
    ok(&convert(src, &dst, extra));
    files(&dst)
}

/// Issue 15, point 1, first reproduction: a finished output whose `zarr.json` was removed, converted
/// again with other shapes and index location, is refused rather than taken for done; `--overwrite`
/// replaces it and the result verifies.
#[test]
fn other_options_after_zarr_json_was_removed_are_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let dst = tmp.path().join("dst");
    ok(&convert(&src, &dst, &[]));
    std::fs::remove_file(dst.join("zarr.json")).expect("remove zarr.json");
    let before = files(&dst);
    let other = [
        "--shard-shape",
        "32,32",
        "--chunk-shape",
        "16,16",
        "--index-location",
        "start",
    ];
    let mut args = vec!["convert", s(&src), s(&dst), "--quiet"];
    args.extend(other);
    refused(&zshard(&args), &["no record of the zshard conversion"]);
    assert_eq!(files(&dst), before, "a refused run changes nothing");
    args.push("--overwrite");
    ok(&zshard(&args));
    // With neither metadata nor state left, nothing proves that the first run's shards outside the
    // new 3 x 3 grid are zshard's (issue 31, row 18): they stay, and verify names them; without
    // them all is well.
    let outside: Vec<String> = files(&dst)
        .into_keys()
        .filter(|k| {
            let coord = k.strip_prefix("c/").map(|c| c.split('/'));
            coord.is_some_and(|mut c| c.any(|c| c.parse::<u64>().is_ok_and(|c| c >= 3)))
        })
        .collect();
    let first = outside
        .first()
        .expect("shards of the first run outside the new grid");
    refused(&verify(&src, &dst), &[&format!("{first}: stray object")]);
    for key in &outside {
        std::fs::remove_file(dst.join(key)).expect("remove");
    }
    ok(&verify(&src, &dst));
    let (values, doc) = read_v3(&dst);
    assert_eq!(values, expected(DataType::UInt16, &[96, 80], 2000));
    assert_eq!(
        doc["chunk_grid"]["configuration"]["chunk_shape"],
        json!([32, 32])
    );
}

/// Issue 15, point 1, second reproduction: 5 bytes of junk at `c/0/0` of a fresh destination.
#[test]
fn junk_at_a_shard_key_of_a_fresh_destination_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let dst = tmp.path().join("dst");
    std::fs::create_dir_all(dst.join("c/0")).expect("mkdir");
    std::fs::write(dst.join("c/0/0"), b"junk!").expect("junk");
    refused(&convert(&src, &dst, &[]), &["c/0/0", "cannot be trusted"]);
    assert_eq!(std::fs::read(dst.join("c/0/0")).expect("kept"), b"junk!");
    ok(&convert(&src, &dst, &["--overwrite"]));
    ok(&verify(&src, &dst));
    assert_eq!(files(&dst), reference(tmp.path(), &src, "reference", &[]));
}

/// Worker 0 of 2 converts its half and leaves its records; the rest of a test resumes from there.
fn half_done(tmp: &Path, src: &Path) -> PathBuf {
    let dst = tmp.join("dst");
    ok(&convert(src, &dst, &["--worker", "0/2"]));
    assert!(!dst.join("zarr.json").exists());
    dst
}

/// Shards recorded with their size are skipped by a resumed run: nothing is read again.
#[test]
fn recorded_shards_are_skipped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let dst = half_done(tmp.path(), &src);
    let written = shard_keys(&files(&dst)).len();
    assert!(written >= 5, "{written} shards");
    let path = tmp.path().join("report.json");
    ok(&convert(
        &src,
        &dst,
        &["--worker", "0/2", "--report", s(&path)],
    ));
    let second = report(&path);
    assert_eq!(second["totals"]["shards_skipped"], json!(15), "{second}");
    assert_eq!(second["totals"]["chunks_read"], json!(0), "{second}");
}

/// Issue 15, point 1: with a record of the conversion present, a shard replaced by junk and a
/// truncated shard are converted again (never skipped), junk at the key of a shard recorded as all
/// fill is removed, and the result equals an uninterrupted run byte for byte and verifies.
#[test]
fn a_shard_replaced_by_junk_or_truncated_is_converted_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let dst = half_done(tmp.path(), &src);
    let keys = shard_keys(&files(&dst));
    let (junk, truncated) = (&keys[0], &keys[1]);
    std::fs::write(dst.join(junk), b"junk!").expect("junk");
    let bytes = std::fs::read(dst.join(truncated)).expect("shard");
    std::fs::write(dst.join(truncated), &bytes[..bytes.len() - 10]).expect("truncate");
    // c/0/0 is worker 0's and holds only the fill value, so it was recorded, not written.
    assert!(!dst.join("c/0/0").exists());
    std::fs::create_dir_all(dst.join("c/0")).expect("mkdir");
    std::fs::write(dst.join("c/0/0"), b"junk at an empty shard").expect("junk");

    let path = tmp.path().join("report.json");
    ok(&convert(&src, &dst, &["--report", s(&path)]));
    let resumed = report(&path);
    // Worker 0's 15 shards were done; the two damaged ones and the all-fill one with junk at its key
    // were not skipped.
    assert_eq!(resumed["totals"]["shards_skipped"], json!(12), "{resumed}");
    assert!(
        !dst.join("c/0/0").exists(),
        "the junk at an all-fill shard's key is removed"
    );
    assert_eq!(files(&dst), reference(tmp.path(), &src, "reference", &[]));
    ok(&verify(&src, &dst));
}

/// Issue 31, row 14: a recorded shard replaced by bytes of the same length (random bytes, or an
/// index with a valid crc32c whose inner chunk lies outside the object) is converted again: resume
/// reads each recorded shard's index and trusts the size only when the index holds.
#[test]
fn a_recorded_shard_replaced_by_bytes_of_the_same_length_is_converted_again() {
    use zshard_core::{ChunkLocation, IndexEncoding, ShardIndex};
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let dst = half_done(tmp.path(), &src);
    let keys = shard_keys(&files(&dst));
    let (random, outside) = (&keys[0], &keys[1]);
    let len = std::fs::read(dst.join(random)).expect("shard").len();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let junk: Vec<u8> = (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    // Written under a new inode: an in-place write within the same tick of the file system's
    // coarse clock (about 4 ms) keeps inode, mtime and size, the local version, which no resume
    // that trusts versions can tell from the shard it recorded.
    let replace = |key: &str, bytes: &[u8]| {
        let staged = tmp.path().join("replacement");
        std::fs::write(&staged, bytes).expect("write");
        std::fs::rename(&staged, dst.join(key)).expect("replace");
    };
    replace(random, &junk);
    // 16x16 shards of 8x8 chunks: an index of 4 entries at the end, the first pointing past the end.
    let mut bytes = std::fs::read(dst.join(outside)).expect("shard");
    let encoding = IndexEncoding::default();
    let index_len = encoding.byte_len(4);
    let entries = vec![
        Some(ChunkLocation {
            offset: 0,
            nbytes: bytes.len() as u64 * 2,
        });
        4
    ];
    let at = bytes.len() - index_len;
    bytes[at..].copy_from_slice(&ShardIndex::new(entries).encode(encoding));
    replace(outside, &bytes);

    let path = tmp.path().join("report.json");
    ok(&convert(&src, &dst, &["--report", s(&path)]));
    let resumed = report(&path);
    assert_eq!(resumed["totals"]["shards_skipped"], json!(13), "{resumed}");
    assert_eq!(files(&dst), reference(tmp.path(), &src, "reference", &[]));
    ok(&verify(&src, &dst));
}

/// Issue 45, row 2: a done shard whose version changed since its record (written again after the
/// last checkpoint, then a power loss zeroed its middle but kept its index) is checked against its
/// recorded crc32c, not trusted on its index: it is converted again. Before the fix the resume
/// skipped it (its index is valid) and the output kept chunks that do not decode.
#[test]
fn a_recorded_shard_with_a_new_version_and_an_intact_index_is_checked_by_its_crc32c() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let dst = half_done(tmp.path(), &src);
    let keys = shard_keys(&files(&dst));
    let damaged = dst.join(&keys[0]);
    let mut bytes = std::fs::read(&damaged).expect("shard");
    // 16x16 shards of 8x8 chunks: the index (4 entries) at the end stays; the chunks are zeroed.
    let index_len = zshard_core::IndexEncoding::default().byte_len(4);
    let end = bytes.len() - index_len;
    bytes[..end].fill(0);
    // Written again under a new inode, as a rewrite after the last checkpoint is.
    let staged = tmp.path().join("rewritten");
    std::fs::write(&staged, &bytes).expect("rewrite");
    std::fs::rename(&staged, &damaged).expect("publish");

    let path = tmp.path().join("report.json");
    ok(&convert(&src, &dst, &["--report", s(&path)]));
    let resumed = report(&path);
    assert_eq!(resumed["totals"]["shards_skipped"], json!(14), "{resumed}");
    assert_eq!(files(&dst), reference(tmp.path(), &src, "reference", &[]));
    ok(&verify(&src, &dst));
}

/// Issue 45, row 3: one flipped digit in worker 0's record of all-fill shards made it name a data
/// shard of worker 1 (`c/1/2` for `c/0/2`), which worker 1 then skipped; `finalize` exited 0 with
/// it missing. A record file's checksum catches the flip (the file is left out: its shards are
/// converted again), and a record is believed only from the worker that owns its shard (which
/// catches it in a file without a checksum, as earlier versions wrote).
#[test]
fn a_damaged_record_of_all_fill_shards_never_makes_a_data_shard_skipped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let expected = reference(tmp.path(), &src, "reference", &[]);
    for sealed in [true, false] {
        let dst = tmp.path().join(format!("dst-{sealed}"));
        ok(&convert(&src, &dst, &["--worker", "0/2"]));
        let empty = dst.join(".zshard/empty");
        let records: Vec<PathBuf> = std::fs::read_dir(&empty)
            .expect("empty records")
            .map(|e| e.expect("entry").path())
            .collect();
        assert_eq!(records.len(), 1, "{records:?}");
        let text = std::fs::read_to_string(&records[0]).expect("record");
        assert!(text.contains("\t0,2\t"), "{text}");
        let mut damaged = text.replace("\t0,2\t", "\t1,2\t");
        if !sealed {
            // As an earlier version wrote it: no checksum line.
            let end = damaged.trim_end().rfind('\n').map_or(0, |at| at + 1);
            assert!(damaged[end..].starts_with("#crc32c\t"), "{damaged}");
            damaged.truncate(end);
        }
        std::fs::write(&records[0], damaged).expect("flip a digit");

        ok(&convert(&src, &dst, &["--worker", "1/2"]));
        assert!(dst.join("c/1/2").exists(), "worker 1 wrote its data shard");
        let finalize = || {
            let mut args = vec!["finalize", s(&src), s(&dst), "--quiet"];
            args.extend(SHAPES);
            zshard(&args)
        };
        let finalized = finalize();
        // Sealed, worker 0's damaged file is left out; unsealed, the line it does not own: either
        // way some of its all-fill shards are not done, until worker 0 runs again.
        refused(&finalized, &["c/0/"]);
        ok(&convert(&src, &dst, &["--worker", "0/2"]));
        ok(&finalize());
        assert_eq!(files(&dst), expected, "sealed: {sealed}");
        ok(&verify(&src, &dst));
    }
}

/// Issue 45, row 11: state files gone wrong (a garbled lease, a file under `.zshard/uploads/` that
/// records no upload, `.zshard` itself a file) blocked both a resume and `--overwrite`. A garbled
/// lease holds up nothing and `status` names it; a junk upload record is named by a resume and
/// removed by `--overwrite` with the rest of zshard's state; so is a file at `.zshard`.
#[test]
fn garbled_state_files_are_reported_and_overwrite_clears_them() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let expected = reference(tmp.path(), &src, "reference", &[]);

    let dst = half_done(tmp.path(), &src);
    let lease = dst.join(".zshard/leases/w1of2-somehost-4242-1.json");
    std::fs::create_dir_all(lease.parent().expect("folder")).expect("mkdir");
    std::fs::write(&lease, b"{\"host\": \"somehost\", \"pid\": 42").expect("garbled lease");
    let status = zshard(&["status", s(&dst), "--json"]);
    ok(&status);
    let shown: Value = serde_json::from_slice(&status.stdout).expect("status JSON");
    assert!(
        shown["unreadable"].to_string().contains("w1of2-somehost"),
        "{shown:#}"
    );
    ok(&convert(&src, &dst, &["--worker", "1/2"]));

    let junk = dst.join(".zshard/uploads/w0of2/1-000000.json");
    std::fs::create_dir_all(junk.parent().expect("folder")).expect("mkdir");
    std::fs::write(&junk, b"not an upload").expect("junk upload record");
    refused(
        &convert(&src, &dst, &["--worker", "0/2"]),
        &["uploads/w0of2/1-000000.json"],
    );
    ok(&convert(&src, &dst, &["--overwrite"]));
    assert_eq!(files(&dst), expected);

    let dst = tmp.path().join("state-is-a-file");
    std::fs::create_dir_all(&dst).expect("mkdir");
    std::fs::write(dst.join(".zshard"), b"").expect("a file where the state goes");
    refused(&convert(&src, &dst, &[]), &[".zshard"]);
    ok(&convert(&src, &dst, &["--overwrite"]));
    assert_eq!(files(&dst), expected);
}

/// A shard published but not recorded (a kill between the write and the flush of its record) is
/// converted again rather than trusted.
#[test]
fn a_shard_without_a_record_is_converted_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let dst = half_done(tmp.path(), &src);
    let written = shard_keys(&files(&dst)).len() as u64;
    std::fs::remove_dir_all(dst.join(".zshard/done")).expect("drop the records of written shards");
    // Their manifest records go out in the same flush (a shard named by a manifest record alone
    // is checked by its checksum instead: tests/manifest.rs).
    std::fs::remove_dir_all(dst.join(".zshard/manifest")).expect("drop the manifest records");
    let path = tmp.path().join("report.json");
    ok(&convert(&src, &dst, &["--report", s(&path)]));
    let resumed = report(&path);
    // Only worker 0's shards recorded as all fill are skipped; its written ones are converted again.
    assert_eq!(
        resumed["totals"]["shards_skipped"],
        json!(15 - written),
        "{resumed}"
    );
    assert_eq!(files(&dst), reference(tmp.path(), &src, "reference", &[]));
}

/// A 2048x2048 uint16 array in 64x64 chunks: large enough that a conversion with gzip level 9 on one
/// thread takes a second or more, so that runs overlap.
fn big_source(dir: &Path) -> PathBuf {
    let src = dir.join("big");
    let data = expected(DataType::UInt16, &[2048, 2048], 0);
    write_v2(
        &src,
        DataType::UInt16,
        &[2048, 2048],
        &[64, 64],
        json!({"id": "zstd", "level": 1}),
        &data,
    );
    src
}

/// The options of run A and of run B (another compressor and shard shape) on the big source.
const A: [&str; 6] = [
    "--shard-shape",
    "256,256",
    "--chunk-shape",
    "64,64",
    "--compressor",
    "gzip:9",
];
const B: [&str; 6] = [
    "--shard-shape",
    "512,512",
    "--chunk-shape",
    "64,64",
    "--compressor",
    "gzip:1",
];

fn big_command(src: &Path, dst: &Path, options: &[&str]) -> Command {
    let mut c = Command::new(binary());
    c.args(["convert", s(src), s(dst), "--quiet", "--threads", "1"])
        .args(options)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

fn big_reference(
    tmp: &Path,
    src: &Path,
    name: &str,
    options: &[&str],
) -> BTreeMap<String, Vec<u8>> {
    let dst = tmp.join(name);
    ok(&big_command(src, &dst, options).output().expect("run"));
    files(&dst)
}

/// Waits until `path` exists (at most 30 s).
fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{path:?} never appeared"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Starts run A, waits for its claim and its first shard, and kills it (SIGKILL).
fn killed_run(src: &Path, dst: &Path) {
    // Its lease goes stale a second after the kill, for the --overwrite that replaces it.
    let mut child: Child = big_command(src, dst, &A)
        .env("ZSHARD_LEASE_STALE_SECONDS", "1")
        .spawn()
        .expect("spawn");
    wait_for(&dst.join("c/0/0"));
    child.kill().expect("kill"); // SIGKILL
    child.wait().expect("reap");
    assert!(dst.join(".zshard/claim.json").exists());
    assert!(
        !dst.join("zarr.json").exists(),
        "the kill landed after the end"
    );
}

const CLAIM_ERROR: &str = "is claimed by a conversion with different options";

/// Issue 15, point 2: two converts with different options started together into one destination:
/// exactly one writes (the other is refused by the claim and writes nothing), and the result is the
/// winner's uninterrupted output and verifies.
#[test]
fn concurrent_runs_with_different_options_cannot_both_write() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = big_source(tmp.path());
    let dst = tmp.path().join("dst");
    let a = big_command(&src, &dst, &A).spawn().expect("spawn A");
    let b = big_command(&src, &dst, &B).spawn().expect("spawn B");
    let (a, b) = (
        a.wait_with_output().expect("A"),
        b.wait_with_output().expect("B"),
    );
    let (winner, loser) = match (a.status.success(), b.status.success()) {
        (true, false) => (&A, &b),
        (false, true) => (&B, &a),
        _ => panic!(
            "exactly one run must succeed: A {:?} {}, B {:?} {}",
            a.status,
            String::from_utf8_lossy(&a.stderr),
            b.status,
            String::from_utf8_lossy(&b.stderr)
        ),
    };
    refused(loser, &[CLAIM_ERROR, "codecs", "claim.json"]);
    ok(&verify(&src, &dst));
    assert_eq!(
        files(&dst),
        big_reference(tmp.path(), &src, "reference", winner)
    );
}

/// Runs with the same options join one claim: both succeed and write the same bytes.
#[test]
fn concurrent_runs_with_the_same_options_both_succeed() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = big_source(tmp.path());
    let dst = tmp.path().join("dst");
    let first = big_command(&src, &dst, &A).spawn().expect("spawn");
    let second = big_command(&src, &dst, &A).spawn().expect("spawn");
    ok(&first.wait_with_output().expect("first"));
    ok(&second.wait_with_output().expect("second"));
    assert_eq!(
        files(&dst),
        big_reference(tmp.path(), &src, "reference", &A)
    );
    assert!(!dst.join(".zshard").exists());
}

/// The claim of a run killed by SIGKILL: a run with other options is refused (and writes nothing),
/// the same options resume it to exactly the uninterrupted output.
#[test]
fn a_killed_runs_claim_refuses_other_options_and_is_resumed_by_the_same() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = big_source(tmp.path());
    let dst = tmp.path().join("dst");
    killed_run(&src, &dst);
    let before = files(&dst);
    refused(
        &big_command(&src, &dst, &B).output().expect("B"),
        &[CLAIM_ERROR, "chunk_grid", "codecs"],
    );
    assert_eq!(files(&dst), before, "the refused run wrote nothing");
    ok(&big_command(&src, &dst, &A).output().expect("resume"));
    assert_eq!(
        files(&dst),
        big_reference(tmp.path(), &src, "reference", &A)
    );
    assert!(!dst.join(".zshard").exists());
}

/// `--overwrite` replaces a killed run with other options, including its shards at keys the new
/// conversion does not write (its recorded options describe them).
#[test]
fn overwrite_replaces_a_killed_run_with_other_options() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = big_source(tmp.path());
    let dst = tmp.path().join("dst");
    killed_run(&src, &dst);
    // A kill while a shard was written leaves it staged (`KEY#N`); this one is of a shard of the
    // killed run's grid outside this run's, which --overwrite must remove too (it once stayed).
    std::fs::create_dir_all(dst.join("c/0")).expect("mkdir");
    std::fs::write(dst.join("c/0/4#7"), b"half a shard").expect("staged");
    // Until the killed run's lease is stale, --overwrite refuses (see tests/lease.rs).
    std::thread::sleep(Duration::from_millis(1200));
    let mut options = B.to_vec();
    options.push("--overwrite");
    ok(&big_command(&src, &dst, &options).output().expect("B"));
    assert_eq!(
        files(&dst),
        big_reference(tmp.path(), &src, "reference", &B)
    );
    ok(&verify(&src, &dst));
}

/// With `files` of a destination and files added beside it: the expected listing.
fn with(
    mut files: BTreeMap<String, Vec<u8>>,
    extra: &[(&str, &[u8])],
) -> BTreeMap<String, Vec<u8>> {
    for (key, bytes) in extra {
        files.insert(key.to_string(), bytes.to_vec());
    }
    files
}

const NOTES: &[u8] = b"my notes, not zshard's\n";
const KEEP: &[u8] = b"keep me\n";

/// Issue 15, point 4: `--overwrite` removes the old conversion, and files beside it that zshard did
/// not write survive byte for byte.
#[test]
fn overwrite_keeps_files_zshard_did_not_write() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let dst = tmp.path().join("dst");
    std::fs::create_dir_all(dst.join("sub")).expect("mkdir");
    std::fs::write(dst.join("notes.txt"), NOTES).expect("notes");
    std::fs::write(dst.join("sub/keep.txt"), KEEP).expect("keep");
    ok(&convert(&src, &dst, &[]));
    // Issue 31, row 18: a file named like a chunk key outside the array's grid is no chunk of it.
    std::fs::create_dir_all(dst.join("c/9")).expect("mkdir");
    std::fs::write(dst.join("c/9/99"), KEEP).expect("out of the grid");
    let first = reference(tmp.path(), &src, "first", &[]);
    let extra: [(&str, &[u8]); 3] = [
        ("notes.txt", NOTES),
        ("sub/keep.txt", KEEP),
        ("c/9/99", KEEP),
    ];
    assert_eq!(files(&dst), with(first, &extra));

    // A partitioned worker never deletes.
    refused(
        &convert(&src, &dst, &["--overwrite", "--worker", "0/2"]),
        &["cannot be combined with a partitioned run"],
    );

    let other = ["--compressor", "gzip:1", "--index-location", "start"];
    let mut options = other.to_vec();
    options.push("--overwrite");
    ok(&convert(&src, &dst, &options));
    let second = reference(tmp.path(), &src, "second", &other);
    assert_eq!(files(&dst), with(second, &extra));
    // Readers never see the file outside the grid, but it sits where only chunks belong.
    refused(&verify(&src, &dst), &["c/9/99: stray object"]);
    std::fs::remove_file(dst.join("c/9/99")).expect("remove");
    ok(&verify(&src, &dst));
}

/// Issue 15, point 4: a destination holding a Zarr v2 array (or group) is refused with the key named;
/// `--overwrite` replaces it (its metadata and chunks go, other files stay).
#[test]
fn a_zarr_v2_destination_is_refused_and_replaced_with_overwrite() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = source(tmp.path());
    let expected_output = reference(tmp.path(), &src, "reference", &[]);

    // A v2 array at the root.
    let array = tmp.path().join("v2array");
    write_v2(
        &array,
        DataType::UInt16,
        &[20, 20],
        &[10, 10],
        Value::Null,
        &expected(DataType::UInt16, &[20, 20], 0),
    );
    let before = files(&array);
    assert!(before.contains_key("1.1"));
    refused(
        &convert(&src, &array, &[]),
        &[&format!("{}/.zarray", s(&array))],
    );
    assert_eq!(files(&array), before, "a refused run changes nothing");
    ok(&convert(&src, &array, &["--overwrite"]));
    assert_eq!(files(&array), expected_output);

    // A v2 group holding an array with a file of its own beside the chunks.
    let group = tmp.path().join("v2group");
    write_v2(
        &group.join("a"),
        DataType::UInt16,
        &[20, 20],
        &[10, 10],
        Value::Null,
        &expected(DataType::UInt16, &[20, 20], 0),
    );
    std::fs::write(group.join(".zgroup"), br#"{"zarr_format": 2}"#).expect(".zgroup");
    std::fs::write(group.join(".zattrs"), br#"{"title": "old"}"#).expect(".zattrs");
    std::fs::write(group.join("a/readme.txt"), KEEP).expect("readme");
    // Issue 31, row 18: chunk-like names outside the 2 x 2 grid are not the array's.
    std::fs::write(group.join("a/99.99"), KEEP).expect("out of the grid");
    std::fs::write(group.join("notes.txt"), NOTES).expect("notes");
    refused(
        &convert(&src, &group, &[]),
        &[&format!("{}/.zgroup", s(&group))],
    );
    ok(&convert(&src, &group, &["--overwrite"]));
    let extra: [(&str, &[u8]); 3] = [
        ("notes.txt", NOTES),
        ("a/readme.txt", KEEP),
        ("a/99.99", KEEP),
    ];
    assert_eq!(files(&group), with(expected_output, &extra));
}

/// A Zarr v2 group at `dir` holding the array `a` (the banded source) and `named` (a small array).
fn group_source(dir: &Path, named: &str) -> PathBuf {
    let group = dir.join("group");
    let array = source(dir);
    std::fs::create_dir_all(&group).expect("mkdir");
    std::fs::rename(&array, group.join("a")).expect("move");
    write_v2(
        &group.join(named),
        DataType::UInt16,
        &[20, 20],
        &[10, 10],
        json!({"id": "zstd", "level": 1}),
        &expected(DataType::UInt16, &[20, 20], 0),
    );
    std::fs::write(group.join(".zgroup"), br#"{"zarr_format": 2}"#).expect(".zgroup");
    group
}

fn is_link(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// Issue 31, row 1: `--overwrite` never removes through a symbolic link in the old hierarchy: a link
/// to the source group, to an unrelated v3 array, and to a file at one of an array's chunk keys all
/// stay, and so does everything they lead to, byte for byte.
#[test]
fn overwrite_never_removes_through_links() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = group_source(tmp.path(), "b");
    let dst = tmp.path().join("dst");
    ok(&convert(&src, &dst, &[]));
    // An unrelated v3 array (zshard's output of another source) and a file elsewhere.
    let other = tmp.path().join("other.zarr");
    ok(&convert(&src.join("b"), &other, &[]));
    let secret = tmp.path().join("secret.bin");
    std::fs::write(&secret, b"not zshard's").expect("secret");
    std::os::unix::fs::symlink(&src, dst.join("raw")).expect("link to the source");
    std::os::unix::fs::symlink(&other, dst.join("other")).expect("link to an array");
    std::fs::create_dir_all(dst.join("a/c/9")).expect("mkdir");
    std::os::unix::fs::symlink(&secret, dst.join("a/c/9/9")).expect("link at a chunk key");
    let (src_before, other_before) = (files(&src), files(&other));
    assert!(src_before.len() > 40, "{}", src_before.len());

    ok(&convert(
        &src,
        &dst,
        &["--overwrite", "--compressor", "zstd:5"],
    ));
    assert_eq!(files(&src), src_before, "the source is untouched");
    assert_eq!(files(&other), other_before, "the linked array is untouched");
    assert_eq!(std::fs::read(&secret).expect("secret"), b"not zshard's");
    for link in ["raw", "other", "a/c/9/9"] {
        assert!(is_link(&dst.join(link)), "{link} is still a link");
    }
    // verify names the link at a chunk key as a stray object of the array; without it, all is well.
    refused(&verify(&src, &dst), &["a/c/9/9", "stray object"]);
    std::fs::remove_file(dst.join("a/c/9/9")).expect("unlink");
    ok(&verify(&src, &dst));
}

/// Issue 31, row 1: a conversion that would write through a link (a node's folder or its chunks'
/// folder is one) is refused before anything is written there.
#[test]
fn writing_through_a_link_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = group_source(tmp.path(), "b");
    for (case, link) in [("array", "b"), ("chunks", "a/c"), ("state", ".zshard")] {
        let dst = tmp.path().join(format!("dst-{case}"));
        let elsewhere = tmp.path().join(format!("elsewhere-{case}"));
        std::fs::create_dir_all(&elsewhere).expect("mkdir");
        let at = dst.join(link);
        std::fs::create_dir_all(at.parent().expect("parent")).expect("mkdir");
        std::os::unix::fs::symlink(&elsewhere, &at).expect("link");
        for extra in [&[][..], &["--overwrite"][..]] {
            refused(&convert(&src, &dst, extra), &["symbolic link", s(&at)]);
            assert_eq!(
                std::fs::read_dir(&elsewhere).expect("list").count(),
                0,
                "{case}: nothing written through the link"
            );
        }
        assert!(!dst.join("zarr.json").exists(), "{case}");
    }
}

/// Issue 31, row 17: odd names are refused up front with the path, before anything is written: an
/// array whose name holds a tab (it failed the whole listing with object_store's message), and one
/// named like a staged file (`zarr.json#1`: it failed at cleanup, after everything was written).
#[test]
fn odd_source_names_are_refused_up_front() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for (dir, name, parts) in [
        ("tab", "a\tb", &[r#""a\tb""#, "rename it"][..]),
        ("staged", "zarr.json#1", &["zarr.json#1", "reserved"][..]),
    ] {
        let case = tmp.path().join(dir);
        let src = group_source(&case, name);
        let dst = case.join("dst");
        refused(&convert(&src, &dst, &[]), parts);
        assert!(
            !dst.join("zarr.json").exists(),
            "{name:?}: nothing published"
        );
        assert!(!dst.join(".zshard").exists(), "{name:?}: nothing written");
    }
    // A staged-looking name, left out, lets the rest convert.
    let src = tmp.path().join("staged/group");
    let dst = tmp.path().join("staged/dst");
    ok(&convert(&src, &dst, &["--exclude", "zarr.json#1"]));
    assert!(dst.join("a/zarr.json").exists());
}

/// Issue 31, row 2: a source node whose name zshard reserves for its state (`.zshard`, and
/// `.zshard-...` of an Icechunk output) is refused with its name, never silently lost.
#[test]
fn a_source_node_with_a_reserved_name_is_refused() {
    let tmp = tempfile::tempdir().expect("tempdir");
    for name in [".zshard", ".zshard-staging"] {
        let case = tmp.path().join(name.trim_start_matches('.'));
        let src = group_source(&case, name);
        let dst = case.join("dst");
        refused(&convert(&src, &dst, &[]), &[name, "reserved"]);
        assert!(!dst.join("zarr.json").exists(), "{name}: nothing published");
        refused(&zshard(&["plan", s(&src), s(&dst)]), &[name, "reserved"]);
        // Left out, the rest converts.
        ok(&convert(&src, &dst, &["--exclude", name]));
        assert!(dst.join("a/zarr.json").exists() && !dst.join(name).exists());
    }
}
