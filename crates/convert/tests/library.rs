//! The conversion through `zshard-convert` alone, without the binary: plan, a partitioned run,
//! finalize refusing while shards are missing, a resume that skips what is done, verify (and verify
//! finding damage), a rerun that has nothing to do, and options that conflict with the destination.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use zshard_convert::{Conversion, Error, Layout, Observer, Partition, ShardOutcome, Verification};
use zshard_core::{c_order, grid_shape, NodeKind};

const SHAPE: [u64; 2] = [40, 60];
const CHUNKS: [u64; 2] = [10, 15];

/// Element (i, j) of the source: distinct for every position, so a misplaced chunk shows.
fn value(i: u64, j: u64) -> u16 {
    (i * 1000 + j) as u16
}

/// An uncompressed uint16 Zarr v2 array; chunk (0, 0) is left out, so it reads as the fill value 0.
fn write_source(dir: &Path) {
    std::fs::create_dir_all(dir).expect("create source");
    let zarray = json!({"zarr_format": 2, "shape": SHAPE, "chunks": CHUNKS, "dtype": "<u2",
        "compressor": null, "fill_value": 0, "order": "C", "filters": null});
    std::fs::write(dir.join(".zarray"), zarray.to_string()).expect("write .zarray");
    for coord in c_order(&grid_shape(&SHAPE, &CHUNKS)) {
        if coord == [0, 0] {
            continue;
        }
        let mut bytes = Vec::new();
        for i in 0..CHUNKS[0] {
            for j in 0..CHUNKS[1] {
                let (gi, gj) = (coord[0] * CHUNKS[0] + i, coord[1] * CHUNKS[1] + j);
                bytes.extend_from_slice(&value(gi, gj).to_le_bytes());
            }
        }
        std::fs::write(dir.join(format!("{}.{}", coord[0], coord[1])), bytes).expect("chunk");
    }
}

/// Reads element (i, j) of the sharded output through its own metadata and codecs.
fn read_output(dir: &Path) -> Vec<Vec<u16>> {
    let doc = std::fs::read(dir.join("zarr.json")).expect("zarr.json");
    let NodeKind::Array(meta) = zshard_zarr::parse_v3_node("out", &doc)
        .expect("valid zarr.json")
        .kind
    else {
        panic!("the output is an array");
    };
    let repr = meta.chunk_repr();
    let chain = zshard_codecs::build_chain(&meta.codecs, &repr).expect("output codecs");
    let mut out = vec![vec![0u16; SHAPE[1] as usize]; SHAPE[0] as usize];
    for shard in c_order(&grid_shape(&meta.shape, &meta.chunk_shape)) {
        let key = dir.join(meta.chunk_key_encoding.key(&shard));
        let Ok(bytes) = std::fs::read(&key) else {
            continue;
        };
        let decoded = chain.decode(&bytes, &repr).expect("shard decodes");
        let (rows, cols) = (meta.chunk_shape[0], meta.chunk_shape[1]);
        for (n, pair) in decoded.chunks_exact(2).enumerate() {
            let (i, j) = (
                shard[0] * rows + n as u64 / cols,
                shard[1] * cols + n as u64 % cols,
            );
            if i < SHAPE[0] && j < SHAPE[1] {
                out[i as usize][j as usize] = u16::from_le_bytes([pair[0], pair[1]]);
            }
        }
    }
    out
}

fn expected() -> Vec<Vec<u16>> {
    (0..SHAPE[0])
        .map(|i| {
            (0..SHAPE[1])
                .map(|j| {
                    if i < CHUNKS[0] && j < CHUNKS[1] {
                        0
                    } else {
                        value(i, j)
                    }
                })
                .collect()
        })
        .collect()
}

/// Counts what the run reports as it goes.
#[derive(Default)]
struct Counter {
    pending: AtomicU64,
    done: AtomicU64,
}

impl Observer for Counter {
    fn started(&self, pending_shards: u64) {
        self.pending.store(pending_shards, Ordering::Relaxed);
    }
    fn shard_done(&self, _outcome: &ShardOutcome) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }
}

fn conversion(src: &Path, dst: &Path) -> Conversion {
    let mut c = Conversion::new(src.to_string_lossy(), dst.to_string_lossy());
    c.layouts.default = Layout {
        shard_shape: Some(vec![20, 30].into()),
        chunk_shape: Some(vec![10, 15].into()),
        ..Layout::default()
    };
    c.threads = 2;
    c
}

/// A temporary folder holding the source `src.zarr`, and the path of the output `dst.zarr` in it.
fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (src, dst) = (tmp.path().join("src.zarr"), tmp.path().join("dst.zarr"));
    write_source(&src);
    (tmp, src, dst)
}

#[test]
fn plan_partition_finalize_resume_verify() {
    let (_tmp, src, dst) = setup();
    let full = conversion(&src, &dst);

    // Plan: metadata only, nothing written.
    let plan = full.plan().expect("plan");
    let doc = plan.to_json();
    assert_eq!(doc["totals"]["shards"], 4);
    assert_eq!(doc["totals"]["source_chunks"], 16);
    assert_eq!(doc["arrays"][0]["shard_shape"], json!([20, 30]));
    assert_eq!(doc["arrays"][0]["passthrough"], false);
    assert!(!dst.exists(), "plan writes nothing");

    // Worker 0 of 2 converts its two shards and writes no metadata.
    let mut worker = full.clone();
    worker.partition = Partition::new(0, 2).expect("valid worker");
    let counter = Counter::default();
    let report = worker.convert(&counter).expect("worker 0");
    assert_eq!(counter.pending.load(Ordering::Relaxed), 2);
    assert_eq!(counter.done.load(Ordering::Relaxed), 2);
    assert_eq!(report.totals.stats.shards_written, 2);
    assert!(!dst.join("zarr.json").exists());

    // Finalize refuses while worker 1's shards are missing, naming the first.
    match full.finalize() {
        Err(Error::NotDone { missing, key, .. }) => {
            assert_eq!(missing, 2);
            assert!(key.ends_with("c/0/1"), "{key}");
        }
        other => panic!("finalize must refuse, got {other:?}"),
    }

    // An unpartitioned run resumes: it converts only the two missing shards.
    let report = full.convert(&()).expect("resume");
    assert_eq!(report.totals.shards_skipped, 2);
    assert_eq!(report.totals.stats.shards_written, 2);
    assert_eq!(
        report.totals.stats.chunks_missing, 0,
        "chunk (0,0) is in worker 0's shard"
    );
    assert_eq!(read_output(&dst), expected());

    // Verify: every element equals the source. Then damage one shard and verify again.
    let verification = Verification::new(src.to_string_lossy(), dst.to_string_lossy());
    let verified = verification.run().expect("verify runs");
    assert_eq!(verified.mismatches.count, 0, "{:?}", verified.mismatches);
    assert_eq!(verified.shards_checked, 4);
    let shard = dst.join("c/1/1");
    let mut bytes = std::fs::read(&shard).expect("shard");
    bytes.truncate(bytes.len() - 3);
    std::fs::write(&shard, &bytes).expect("damage");
    let verified = verification.run().expect("verify runs");
    assert_eq!(verified.mismatches.count, 1, "{:?}", verified.mismatches);
    assert!(verified.mismatches.first[0].contains("c/1/1"));
}

#[test]
fn a_complete_destination_is_left_alone_and_other_options_are_refused() {
    let (tmp, src, dst) = setup();
    let c = conversion(&src, &dst);
    let first = c.convert(&()).expect("first run");
    assert!(!first.already_complete);
    let again = c.convert(&()).expect("second run");
    assert!(again.already_complete);
    assert_eq!(again.totals.shards_skipped, 4);

    let mut other = c.clone();
    other.layouts.default.chunk_shape = Some(vec![5, 5].into());
    other.layouts.default.shard_shape = Some(vec![10, 10].into());
    let err = other.convert(&()).expect_err("other options");
    assert!(matches!(err, Error::Destination { .. }), "{err}");
    assert!(
        err.to_string().contains("differs from this conversion"),
        "{err}"
    );
    assert_eq!(
        read_output(&dst),
        expected(),
        "the refused run changed nothing"
    );

    // Source inside the destination, and a bad layout, are refused before anything is written.
    let inside = conversion(&src, tmp.path());
    assert!(matches!(inside.convert(&()), Err(Error::Overlap { .. })));
    let mut bad = conversion(&src, &tmp.path().join("bad.zarr"));
    bad.layouts.default.chunk_shape = Some(vec![7, 15].into());
    let err = bad.convert(&()).expect_err("7 does not divide 20");
    assert!(matches!(err, Error::Array { .. }), "{err}");
    assert!(!tmp.path().join("bad.zarr").exists());
}

/// Issue 15, point 1: a shard the destination holds without a record of the run that wrote it is
/// never taken for done.
#[test]
fn shards_without_a_record_of_their_conversion_are_not_trusted() {
    let (tmp, src, dst) = setup();
    // Junk at a shard key of a fresh destination.
    std::fs::create_dir_all(dst.join("c/0")).expect("mkdir");
    std::fs::write(dst.join("c/0/0"), b"junk!").expect("junk");
    let err = conversion(&src, &dst).convert(&()).expect_err("junk");
    assert!(matches!(err, Error::Destination { .. }), "{err}");
    assert!(err.to_string().contains("c/0/0"), "{err}");
    assert_eq!(std::fs::read(dst.join("c/0/0")).expect("kept"), b"junk!");

    // A finished conversion whose zarr.json was removed, converted again with other options.
    let other = tmp.path().join("other.zarr");
    conversion(&src, &other).convert(&()).expect("first");
    std::fs::remove_file(other.join("zarr.json")).expect("remove zarr.json");
    let mut again = conversion(&src, &other);
    again.layouts.default.shard_shape = Some(vec![40, 60].into());
    again.layouts.default.index_location = zshard_core::IndexLocation::Start;
    let err = again
        .convert(&())
        .expect_err("shards of another conversion");
    assert!(matches!(err, Error::Destination { .. }), "{err}");

    // --overwrite replaces them, and the result reads back right.
    again.overwrite = true;
    again.convert(&()).expect("overwrite");
    assert_eq!(read_output(&other), expected());
}

/// Cancels its conversion once `after` shards are done, as a signal handler or Python's
/// `KeyboardInterrupt` would from another thread.
struct CancelAfter {
    cancel: zshard_convert::Cancel,
    after: u64,
    done: AtomicU64,
}

impl Observer for CancelAfter {
    fn shard_done(&self, _outcome: &ShardOutcome) {
        if self.done.fetch_add(1, Ordering::SeqCst) + 1 == self.after {
            self.cancel.cancel();
        }
    }
}

/// Issue 15, point 9: a cancelled conversion stops with `Error::Cancelled`, publishes no shard it did
/// not finish and no metadata, reports `cancelled`, and the same conversion then resumes it.
#[test]
fn a_cancelled_conversion_reports_it_and_resumes() {
    let (tmp, src, dst) = setup();
    let report_path = tmp.path().join("report.json");
    let mut c = conversion(&src, &dst);
    c.threads = 1;
    c.io_threads = Some(1);
    c.report_path = Some(report_path.clone());
    let observer = CancelAfter {
        cancel: c.cancel.clone(),
        after: 1,
        done: AtomicU64::new(0),
    };
    let err = c.convert(&observer).expect_err("cancelled");
    assert!(matches!(err, Error::Cancelled), "{err}");
    assert_eq!(err.kind(), "cancelled");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&report_path).expect("report")).expect("json");
    assert_eq!(report["status"], json!("cancelled"));
    assert_eq!(report["error"]["kind"], json!("cancelled"));
    let finished = report["totals"]["shards_written"].as_u64().unwrap_or(0)
        + report["totals"]["shards_empty"].as_u64().unwrap_or(0);
    assert!(
        (1..4).contains(&finished),
        "stopped after {finished} of 4 shards"
    );
    assert!(
        !dst.join("zarr.json").exists(),
        "no metadata after a cancel"
    );

    // A cancelled handle stops the next run before it writes anything.
    assert!(matches!(c.convert(&()), Err(Error::Cancelled)));

    c.cancel = zshard_convert::Cancel::new();
    let resumed = c.convert(&()).expect("resume");
    assert_eq!(resumed.totals.shards_skipped, finished);
    assert_eq!(resumed.status, zshard_convert::Status::Ok);
    assert_eq!(read_output(&dst), expected());
}

/// A library error names a setting as the front end in use spells it: the command's flag, Python's
/// keyword, a job file's key. Nothing in the library spells it as a flag of its own.
#[test]
fn errors_name_settings_as_each_front_end_spells_them() {
    use zshard_convert::{one_line, spelled, Spelling};
    let (_tmp, src, dst) = setup();
    let mut c = conversion(&src, &dst);
    c.memory_limit = Some(1024);
    let e = c.plan().expect_err("1 KiB holds no shard");
    let cli = spelled(Spelling::Flag, || one_line(&e));
    let python = spelled(Spelling::Keyword, || one_line(&e));
    let job = spelled(Spelling::JobKey, || one_line(&e));
    assert!(cli.contains("or use a --memory-limit of at least"), "{cli}");
    assert!(
        python.contains("or use a memory_limit= of at least"),
        "{python}"
    );
    assert!(!python.contains("--"), "{python}");
    assert!(job.contains("or use a memory_limit of at least"), "{job}");
    // A message made eagerly (here on this thread) takes the spelling of the moment.
    c.memory_limit = None;
    c.partition = Partition::new(0, 2).expect("partition");
    c.convert(&()).expect("worker 0 of 2");
    c.overwrite = true;
    let refused = |spelling| spelled(spelling, || one_line(&c.convert(&()).expect_err("refused")));
    let (cli, python) = (refused(Spelling::Flag), refused(Spelling::Keyword));
    assert!(
        cli.contains("--overwrite cannot be combined with a partitioned run"),
        "{cli}"
    );
    assert!(
        python.contains("overwrite=True cannot be combined with a partitioned run"),
        "{python}"
    );
}
