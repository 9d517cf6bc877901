//! Rerunning the same conversion after its source changed brings the destination up to date
//! (issue 40): only the shards whose source chunks changed, appeared or disappeared are written
//! again, the metadata follows a new shape or new attributes, and nothing is written when nothing
//! changed. Values are compared element by element with the changed source.

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use common::{expected, read_v3, update_v2, write_v2, zshard};
use serde_json::{json, Value};
use zshard_core::DataType;

const SHAPE: [u64; 2] = [96, 80];
const CHUNKS: [u64; 2] = [8, 8];
/// 3 x 3 shards of 32 x 32 (the last column 16 wide): 9 shards of up to 16 source chunks.
const SHARDS: &str = "32,32";

fn compressor() -> Value {
    json!({"id": "zstd", "level": 3})
}

/// The source at `dir/src` holding `data` of `shape`.
fn source(dir: &Path, shape: &[u64], data: &[u8]) -> PathBuf {
    let src = dir.join("src");
    write_v2(&src, DataType::UInt16, shape, &CHUNKS, compressor(), data);
    src
}

/// `zshard convert SRC DST --shard-shape 32,32 --report REPORT`, which must succeed; the report.
fn convert(src: &Path, dst: &Path, extra: &[&str]) -> Value {
    let report = dst.with_extension("report.json");
    let mut args = vec![
        "convert",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
        "--shard-shape",
        SHARDS,
        "--quiet",
        "--report",
        report.to_str().expect("utf-8"),
    ];
    args.extend_from_slice(extra);
    let out = zshard(&args);
    assert!(
        out.status.success(),
        "convert failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(&report).expect("report")).expect("report json")
}

/// Every file below `dir` (zshard's own records included) with its inode, modification time and
/// bytes: what a rewrite changes.
fn identities(dir: &Path) -> BTreeMap<String, (u64, i64, i64, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(folder) = stack.pop() {
        for entry in std::fs::read_dir(&folder).expect("read_dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let meta = std::fs::metadata(&path).expect("metadata");
            let rel = path.strip_prefix(dir).expect("below").to_string_lossy();
            out.insert(
                rel.into_owned(),
                (
                    meta.ino(),
                    meta.mtime(),
                    meta.mtime_nsec(),
                    std::fs::read(&path).expect("read"),
                ),
            );
        }
    }
    out
}

/// The keys whose file is new, gone, or another file (inode, modification time or bytes).
fn changed_files(
    before: &BTreeMap<String, (u64, i64, i64, Vec<u8>)>,
    after: &BTreeMap<String, (u64, i64, i64, Vec<u8>)>,
) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .cloned()
        .collect()
}

fn update_counts(report: &Value) -> (u64, u64) {
    let update = &report["update"];
    (
        update["shards_rewritten"]
            .as_u64()
            .expect("shards_rewritten"),
        update["shards_added"].as_u64().expect("shards_added"),
    )
}

/// Inner chunks an update copied from the shards it rewrote.
fn copied(report: &Value) -> u64 {
    report["update"]["inner_chunks_copied"]
        .as_u64()
        .expect("inner_chunks_copied")
}

#[test]
fn one_changed_chunk_rewrites_exactly_its_shard() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut data = expected(DataType::UInt16, &SHAPE, 0);
    let src = source(tmp.path(), &SHAPE, &data);
    let dst = tmp.path().join("dst.zarr");
    convert(&src, &dst, &[]);
    let before = identities(&dst);

    // One element of source chunk (5, 4): rows 40..48, columns 32..40, so shard (1, 1).
    let at = (44 * SHAPE[1] + 35) as usize * 2;
    data[at..at + 2].copy_from_slice(&7777u16.to_le_bytes());
    let written = update_v2(&src, DataType::UInt16, &SHAPE, &CHUNKS, compressor(), &data);
    assert_eq!(written, vec!["5.4".to_string()]);

    let report = convert(&src, &dst, &[]);
    assert_eq!(report["status"], "ok");
    assert_eq!(update_counts(&report), (1, 0));
    assert_eq!(report["totals"]["shards_written"], 1);
    // Cheap rewrite: the changed source chunk is read, the shard's 15 other inner chunks are
    // copied encoded from the shard as it stood.
    assert_eq!(report["totals"]["chunks_read"], 1);
    assert_eq!(copied(&report), 15);
    // The shard, and the records that say what it was made from (and the metadata document,
    // written last): no other shard.
    let changed = changed_files(&before, &identities(&dst));
    assert!(changed.contains(&"c/1/1".to_string()), "{changed:?}");
    assert!(
        changed
            .iter()
            .all(|k| ["c/1/1", "zarr.json", ".zshard-records"].contains(&k.as_str())),
        "{changed:?}"
    );
    assert_eq!(read_v3(&dst).0, data, "the output holds the changed value");
}

#[test]
fn nothing_changed_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = expected(DataType::UInt16, &SHAPE, 1000);
    let src = source(tmp.path(), &SHAPE, &data);
    let dst = tmp.path().join("dst.zarr");
    convert(&src, &dst, &[]);
    let before = identities(&dst);
    let report = convert(&src, &dst, &[]);
    assert_eq!(report["status"], "complete");
    assert_eq!(report["totals"]["chunks_read"], 0);
    assert_eq!(
        changed_files(&before, &identities(&dst)),
        Vec::<String>::new()
    );
}

#[test]
fn appended_rows_add_shards_and_grow_the_metadata() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = expected(DataType::UInt16, &SHAPE, 0);
    let src = source(tmp.path(), &SHAPE, &data);
    let dst = tmp.path().join("dst.zarr");
    convert(&src, &dst, &[]);
    let before = identities(&dst);

    // 30 rows more: rows 96..126, so shard row 3 is new (96..128) and nothing before it changes.
    let grown = [126u64, 80];
    let mut more = data.clone();
    more.extend((0..30 * 80).flat_map(|i| (i as u16 ^ 0x5a5a).to_le_bytes()));
    update_v2(&src, DataType::UInt16, &grown, &CHUNKS, compressor(), &more);

    let report = convert(&src, &dst, &[]);
    assert_eq!(report["status"], "ok");
    assert_eq!(update_counts(&report), (0, 3));
    let after = identities(&dst);
    let changed = changed_files(&before, &after);
    assert!(
        changed
            .iter()
            .all(|k| k.starts_with("c/3/") || k == "zarr.json" || k == ".zshard-records"),
        "only the new row of shards and the metadata: {changed:?}"
    );
    let (values, meta) = read_v3(&dst);
    assert_eq!(meta["shape"], json!(grown));
    assert_eq!(values, more);
}

#[test]
fn a_deleted_chunk_reads_as_the_fill_value() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut data = expected(DataType::UInt16, &SHAPE, 0);
    let src = source(tmp.path(), &SHAPE, &data);
    let dst = tmp.path().join("dst.zarr");
    convert(&src, &dst, &[]);

    // Chunk (0, 0) now holds only zeros: the producer removes it.
    for row in 0..8 {
        let start = row * SHAPE[1] as usize * 2;
        data[start..start + 16].fill(0);
    }
    let written = update_v2(&src, DataType::UInt16, &SHAPE, &CHUNKS, compressor(), &data);
    assert_eq!(written, vec!["0.0".to_string()]);
    let report = convert(&src, &dst, &[]);
    assert_eq!(update_counts(&report), (1, 0));
    assert_eq!(read_v3(&dst).0, data);
}

#[test]
fn changed_attributes_rewrite_the_metadata_only() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = expected(DataType::UInt16, &SHAPE, 0);
    let src = source(tmp.path(), &SHAPE, &data);
    std::fs::write(src.join(".zattrs"), r#"{"units": "K"}"#).expect("attrs");
    let dst = tmp.path().join("dst.zarr");
    convert(&src, &dst, &[]);
    let before = identities(&dst);

    std::fs::write(src.join(".zattrs"), r#"{"units": "degC"}"#).expect("attrs");
    let report = convert(&src, &dst, &[]);
    assert_eq!(report["status"], "ok");
    assert_eq!(update_counts(&report), (0, 0));
    let changed = changed_files(&before, &identities(&dst));
    assert!(
        changed
            .iter()
            .all(|k| k == "zarr.json" || k == ".zshard-records"),
        "no shard is written again: {changed:?}"
    );
    let (_, meta) = read_v3(&dst);
    assert_eq!(meta["attributes"]["units"], "degC");
}

#[test]
fn changed_options_are_still_refused_without_overwrite() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = expected(DataType::UInt16, &SHAPE, 0);
    let src = source(tmp.path(), &SHAPE, &data);
    let dst = tmp.path().join("dst.zarr");
    convert(&src, &dst, &[]);
    let before = identities(&dst);
    let out = zshard(&[
        "convert",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
        "--shard-shape",
        "16,16",
        "--quiet",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--overwrite"), "{stderr}");
    assert_eq!(
        changed_files(&before, &identities(&dst)),
        Vec::<String>::new()
    );
}

#[test]
fn workers_and_finalize_split_an_update() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut data = expected(DataType::UInt16, &SHAPE, 0);
    let src = source(tmp.path(), &SHAPE, &data);
    let dst = tmp.path().join("dst.zarr");
    convert(&src, &dst, &[]);
    let before = identities(&dst);

    // One element in shard (0, 0) and one in shard (2, 2).
    for (row, col) in [(3u64, 3u64), (70, 70)] {
        let at = (row * SHAPE[1] + col) as usize * 2;
        data[at..at + 2].copy_from_slice(&4242u16.to_le_bytes());
    }
    update_v2(&src, DataType::UInt16, &SHAPE, &CHUNKS, compressor(), &data);
    let mut written = 0;
    for worker in ["0/2", "1/2"] {
        let report = convert(&src, &dst, &["--worker", worker]);
        written += report["totals"]["shards_written"].as_u64().expect("count");
    }
    assert_eq!(written, 2);
    // `status` shows the update's progress beside the totals of every shard.
    let shown = zshard(&["status", dst.to_str().expect("utf-8"), "--json"]);
    assert!(shown.status.success());
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("status JSON");
    assert_eq!(
        shown["update"],
        json!({"shards_to_update": 2, "shards_done": 2}),
        "{shown:#}"
    );
    let text = zshard(&["status", dst.to_str().expect("utf-8")]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("update: 2 of 2 shard(s) to rewrite or add done"),
        "{text}"
    );
    let out = zshard(&[
        "finalize",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
        "--shard-shape",
        SHARDS,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(read_v3(&dst).0, data);
    assert!(!dst.join(".zshard").exists(), "the update's state is gone");
    let changed = changed_files(&before, &identities(&dst));
    assert!(
        changed
            .iter()
            .all(|k| ["c/0/0", "c/2/2", "zarr.json", ".zshard-records"].contains(&k.as_str())),
        "{changed:?}"
    );
    // And the next run finds it up to date.
    let report = convert(&src, &dst, &[]);
    assert_eq!(report["status"], "complete");
}

#[test]
fn a_shrunk_array_loses_only_the_shards_zshard_wrote_beyond_it() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = expected(DataType::UInt16, &SHAPE, 0);
    let src = source(tmp.path(), &SHAPE, &data);
    let dst = tmp.path().join("dst.zarr");
    convert(&src, &dst, &[]);
    // A file zshard did not write, beside the shards: it stays.
    std::fs::write(dst.join("c").join("notes.txt"), "mine").expect("write");

    // 40 rows: shard row 1 (32..64) is cut at 40, rows 2 (64..96) goes.
    let shrunk = [40u64, 80];
    let kept = data[..(40 * 80 * 2)].to_vec();
    update_v2(
        &src,
        DataType::UInt16,
        &shrunk,
        &CHUNKS,
        compressor(),
        &kept,
    );
    for row in 5..12 {
        for col in 0..10 {
            let _ = std::fs::remove_file(src.join(format!("{row}.{col}")));
        }
    }
    let report = convert(&src, &dst, &[]);
    assert_eq!(report["status"], "ok");
    assert_eq!(update_counts(&report), (3, 0), "the cut row of shards");
    assert_eq!(
        report["update"]["shards_removed"], 3,
        "the row beyond: {report}"
    );
    assert!(
        !dst.join("c/2").exists()
            || std::fs::read_dir(dst.join("c/2"))
                .expect("dir")
                .next()
                .is_none()
    );
    assert!(dst.join("c/notes.txt").exists());
    let (values, meta) = read_v3(&dst);
    assert_eq!(meta["shape"], json!(shrunk));
    assert_eq!(values, kept);
}

#[test]
fn overwrite_converts_everything_again_and_replaces_the_kept_records() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = expected(DataType::UInt16, &SHAPE, 0);
    let src = source(tmp.path(), &SHAPE, &data);
    let dst = tmp.path().join("dst.zarr");
    convert(&src, &dst, &[]);
    let report = convert(&src, &dst, &["--overwrite"]);
    assert_eq!(report["status"], "ok");
    assert_eq!(report["totals"]["shards_written"], 9, "{report}");
    assert_eq!(report["update"], Value::Null);
    assert_eq!(convert(&src, &dst, &[])["status"], "complete");
}

#[test]
fn plan_on_a_finished_destination_says_what_an_update_would_do() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut data = expected(DataType::UInt16, &SHAPE, 0);
    let src = source(tmp.path(), &SHAPE, &data);
    let dst = tmp.path().join("dst.zarr");
    convert(&src, &dst, &[]);
    let plan = |dst: &Path| -> Value {
        let out = zshard(&[
            "plan",
            src.to_str().expect("utf-8"),
            dst.to_str().expect("utf-8"),
            "--shard-shape",
            SHARDS,
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("plan json")
    };
    let up_to_date = plan(&dst);
    assert_eq!(up_to_date["update"]["arrays"][0]["shards_to_rewrite"], 0);
    assert_eq!(up_to_date["update"]["cost"]["get_requests"], 0);
    let at = (44 * SHAPE[1] + 35) as usize * 2;
    data[at..at + 2].copy_from_slice(&1u16.to_le_bytes());
    update_v2(&src, DataType::UInt16, &SHAPE, &CHUNKS, compressor(), &data);
    let before = identities(&dst);
    let changed = plan(&dst);
    let array = &changed["update"]["arrays"][0];
    assert_eq!(array["shards_to_rewrite"], 1, "{changed}");
    assert_eq!(array["shards_to_add"], 0);
    assert_eq!(array["shape_changed"], false);
    // The changed source chunk, and the shard's index and its 15 other inner chunks (coalesced).
    assert_eq!(array["inner_chunks_to_convert"], 1, "{changed}");
    assert_eq!(array["inner_chunks_to_copy"], 15);
    assert_eq!(changed["update"]["cost"]["get_requests"], 1 + 2);
    assert_eq!(
        changed_files(&before, &identities(&dst)),
        Vec::<String>::new(),
        "plan writes nothing"
    );
    // A destination that does not exist yet has no update to plan.
    assert_eq!(plan(&tmp.path().join("none"))["update"], Value::Null);
}

/// Copies the folder `from` to `to` (files only, preserving nothing but bytes).
fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).expect("read_dir").flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            std::fs::create_dir_all(&target).expect("mkdir");
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// Kill -9 at several moments of an update, then the same command again: every time the output
/// equals an uninterrupted update's, byte for byte, and the next run finds nothing to do.
#[test]
fn kill_during_an_update_then_rerun_equals_an_uninterrupted_update() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let shape = [1024u64, 512];
    let chunks = [8u64, 8];
    let mut data = expected(DataType::UInt16, &shape, 0);
    let src = tmp.path().join("src");
    write_v2(&src, DataType::UInt16, &shape, &chunks, compressor(), &data);
    let finished = tmp.path().join("finished");
    let args = |dst: &Path| -> Vec<String> {
        [
            "convert",
            src.to_str().expect("utf-8"),
            dst.to_str().expect("utf-8"),
            "--shard-shape",
            "64,64",
            "--compressor",
            "gzip:9",
            "--threads",
            "1",
            "--quiet",
        ]
        .map(String::from)
        .to_vec()
    };
    let run = |dst: &Path| {
        let out = std::process::Command::new(common::binary())
            .args(args(dst))
            .output()
            .expect("run");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&finished);
    // Every element of the second half of the rows changes: 64 of the 128 shards.
    for v in data[shape[1] as usize * 2 * 512..].chunks_mut(2) {
        let x = u16::from_le_bytes([v[0], v[1]]) ^ 0x0f0f;
        v.copy_from_slice(&x.to_le_bytes());
    }
    update_v2(&src, DataType::UInt16, &shape, &chunks, compressor(), &data);

    let reference_dir = tmp.path().join("reference");
    std::fs::create_dir_all(&reference_dir).expect("mkdir");
    copy_dir(&finished, &reference_dir);
    let started = std::time::Instant::now();
    run(&reference_dir);
    let duration = started.elapsed();
    let reference = common::files(&reference_dir);
    assert_eq!(read_v3(&reference_dir).0, data);

    let mut interrupted = 0;
    for point in 0..6u32 {
        let dst = tmp.path().join(format!("run{point}"));
        std::fs::create_dir_all(&dst).expect("mkdir");
        copy_dir(&finished, &dst);
        let mut child = std::process::Command::new(common::binary())
            .args(args(&dst))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(duration.mul_f64(0.1 + 0.15 * f64::from(point)));
        interrupted += usize::from(child.try_wait().expect("wait").is_none());
        child.kill().ok();
        child.wait().expect("reap");
        run(&dst);
        assert!(
            common::files(&dst) == reference,
            "point {point}: the output differs from an uninterrupted update"
        );
        let out = std::process::Command::new(common::binary())
            .args(args(&dst).iter().filter(|a| *a != "--quiet"))
            .output()
            .expect("run");
        assert!(out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("already complete"),
            "point {point}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        interrupted >= 3,
        "only {interrupted} of 6 kills landed mid-update"
    );
}

#[test]
fn verify_and_the_kept_manifest_hold_after_an_update() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut data = expected(DataType::UInt16, &SHAPE, 0);
    let src = source(tmp.path(), &SHAPE, &data);
    let dst = tmp.path().join("dst.zarr");
    // Re-encoded (not copied through): the manifest hashes decoded values, so a copy is decoded
    // for it.
    convert(&src, &dst, &["--keep-manifest", "--compressor", "zstd:1"]);
    let at = (10 * SHAPE[1] + 70) as usize * 2;
    data[at..at + 2].copy_from_slice(&9u16.to_le_bytes());
    update_v2(&src, DataType::UInt16, &SHAPE, &CHUNKS, compressor(), &data);
    let report = convert(&src, &dst, &["--keep-manifest", "--compressor", "zstd:1"]);
    assert_eq!(update_counts(&report), (1, 0));
    for args in [
        vec![
            "verify",
            src.to_str().expect("utf-8"),
            dst.to_str().expect("utf-8"),
        ],
        vec!["verify", "--manifest", dst.to_str().expect("utf-8")],
    ] {
        let out = zshard(&args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The manifest names every shard, the rewritten one with its new checksum.
    let manifest = std::fs::read_to_string(dst.join(".zshard/manifest.tsv")).expect("manifest");
    let shards = manifest.lines().filter(|l| !l.contains("\tm:")).count();
    assert_eq!(shards, 9, "{manifest}");
    // The next update, without the flag, keeps the manifest up to date all the same: the inner
    // chunks it copies are hashed for it (they are not when no manifest is kept).
    let at = (50 * SHAPE[1] + 5) as usize * 2;
    data[at..at + 2].copy_from_slice(&11u16.to_le_bytes());
    update_v2(&src, DataType::UInt16, &SHAPE, &CHUNKS, compressor(), &data);
    let report = convert(&src, &dst, &["--compressor", "zstd:1"]);
    assert_eq!(update_counts(&report), (1, 0));
    assert_eq!(copied(&report), 15);
    let manifest = std::fs::read_to_string(dst.join(".zshard/manifest.tsv")).expect("manifest");
    // Shard (1, 0): rows 32..64, columns 0..32, 16 inner chunks of 8 x 8, each hashed.
    let line = manifest
        .lines()
        .find(|l| l.split('\t').nth(1) == Some("1,0"))
        .expect("shard (1, 0) in the manifest");
    let hashes = line
        .rsplit('\t')
        .next()
        .and_then(|field| field.strip_prefix("d:"))
        .unwrap_or_default();
    assert_eq!(
        hashes.split(',').filter(|h| h.len() == 8).count(),
        16,
        "{line}"
    );
    let out = zshard(&["verify", "--manifest", dst.to_str().expect("utf-8")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_rechunked_update_converts_only_the_inner_chunks_its_changed_source_chunk_covers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut data = expected(DataType::UInt16, &SHAPE, 0);
    let src = source(tmp.path(), &SHAPE, &data);
    let dst = tmp.path().join("dst.zarr");
    // Inner chunks of 4 x 4: each 8 x 8 source chunk covers four, a 32 x 32 shard holds 64.
    convert(&src, &dst, &["--chunk-shape", "4,4"]);

    // Source chunk (5, 4), in shard (1, 1).
    let at = (44 * SHAPE[1] + 35) as usize * 2;
    data[at..at + 2].copy_from_slice(&4321u16.to_le_bytes());
    update_v2(&src, DataType::UInt16, &SHAPE, &CHUNKS, compressor(), &data);

    let report = convert(&src, &dst, &["--chunk-shape", "4,4"]);
    assert_eq!(update_counts(&report), (1, 0));
    assert_eq!(report["totals"]["chunks_read"], 1);
    assert_eq!(
        copied(&report),
        60,
        "the four inner chunks of the changed source chunk are made"
    );
    assert_eq!(read_v3(&dst).0, data);
    let verified = zshard(&[
        "verify",
        src.to_str().expect("utf-8"),
        dst.to_str().expect("utf-8"),
    ]);
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stderr)
    );
}

#[test]
fn grown_columns_copy_the_edge_shards_inner_chunks_that_stay_the_same() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = expected(DataType::UInt16, &SHAPE, 0);
    let src = source(tmp.path(), &SHAPE, &data);
    let dst = tmp.path().join("dst.zarr");
    convert(&src, &dst, &[]);

    // 8 columns more: 80 -> 88. The last shard column (64..96) held 16 columns, now 24: each of
    // its three shards keeps its 8 inner chunks (4 rows x 2) and gains 4.
    let grown = [96u64, 88];
    let mut more = Vec::with_capacity((96 * 88 * 2) as usize);
    for row in 0..96usize {
        more.extend_from_slice(&data[row * 160..row * 160 + 160]);
        more.extend((0..8u16).flat_map(|c| (row as u16 * 8 + c).to_le_bytes()));
    }
    update_v2(&src, DataType::UInt16, &grown, &CHUNKS, compressor(), &more);

    let report = convert(&src, &dst, &[]);
    assert_eq!(update_counts(&report), (3, 0));
    assert_eq!(
        report["totals"]["chunks_read"], 12,
        "the new column of source chunks only"
    );
    assert_eq!(copied(&report), 24);
    let (values, meta) = read_v3(&dst);
    assert_eq!(meta["shape"], json!(grown));
    assert_eq!(values, more);
}

#[test]
fn a_shard_replaced_since_it_was_recorded_is_converted_whole() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut data = expected(DataType::UInt16, &SHAPE, 0);
    let src = source(tmp.path(), &SHAPE, &data);
    let dst = tmp.path().join("dst.zarr");
    convert(&src, &dst, &[]);

    let at = (44 * SHAPE[1] + 35) as usize * 2;
    data[at..at + 2].copy_from_slice(&7777u16.to_le_bytes());
    update_v2(&src, DataType::UInt16, &SHAPE, &CHUNKS, compressor(), &data);
    // The shard to rewrite was replaced by junk of its size (a new file): nothing in it is copied.
    let shard = dst.join("c/1/1");
    let size = std::fs::metadata(&shard).expect("shard").len() as usize;
    std::fs::remove_file(&shard).expect("remove");
    std::fs::write(&shard, vec![0x5au8; size]).expect("junk");

    let report = convert(&src, &dst, &[]);
    assert_eq!(update_counts(&report), (1, 0));
    assert_eq!(report["totals"]["chunks_read"], 16);
    assert_eq!(copied(&report), 0);
    assert_eq!(read_v3(&dst).0, data);
}

/// A key that is not the chunk key of its grid position as Zarr writes it (`00.0` beside `0.0`) is
/// no chunk: Zarr readers never read it. It neither replaces the real chunk's version (a stray
/// file appearing rewrites nothing) nor hides it (the real chunk changing is still seen), and a
/// stray beside the shards of the destination is left alone.
#[test]
fn a_stray_key_spelled_otherwise_neither_replaces_nor_hides_a_chunk() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut data = expected(DataType::UInt16, &SHAPE, 0);
    let src = source(tmp.path(), &SHAPE, &data);
    let dst = tmp.path().join("dst.zarr");
    convert(&src, &dst, &[]);

    // Listed after `0.0` in key order (`.` sorts before `0`), so the last listed under the old
    // parsing; and one in the destination that reads as shard (0, 1) when leading zeros are read.
    std::fs::write(src.join("00.0"), b"not a chunk").expect("stray");
    std::fs::write(dst.join("c/0/01"), b"not a shard either").expect("stray");
    let before = identities(&dst);
    let report = convert(&src, &dst, &[]);
    assert_eq!(report["status"], "complete", "{report}");
    assert_eq!(report["totals"]["chunks_read"], 0);
    assert_eq!(
        changed_files(&before, &identities(&dst)),
        Vec::<String>::new()
    );

    // The real chunk (0, 0) changes, the stray does not: shard (0, 0) is rewritten.
    data[0..2].copy_from_slice(&4242u16.to_le_bytes());
    let written = update_v2(&src, DataType::UInt16, &SHAPE, &CHUNKS, compressor(), &data);
    assert_eq!(written, vec!["0.0".to_string()]);
    let report = convert(&src, &dst, &[]);
    assert_eq!(report["status"], "ok", "{report}");
    assert_eq!(update_counts(&report), (1, 0));
    assert_eq!(report["totals"]["chunks_read"], 1);
    assert_eq!(read_v3(&dst).0, data, "the output holds the changed value");
    assert_eq!(
        std::fs::read(dst.join("c/0/01")).expect("the stray is left"),
        b"not a shard either"
    );
    assert!(src.join("00.0").exists());
}
