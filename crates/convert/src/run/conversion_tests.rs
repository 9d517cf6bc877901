//! Unit tests of the decisions [`Conversion::run`](super::conversion::Conversion) takes: a whole
//! run writes every shard and then the metadata and removes its state; a worker of several writes
//! only its shards and leaves the metadata (and the state that proves its shards) to `finalize`; a
//! rerun skips the shards already done; a cancelled run stops before the metadata. A finished
//! conversion keeps what its shards were made from (`.zshard-records`) for the next run.

use std::path::Path;

use crate::{Conversion, Error, Layout, Partition, Status};

/// A 4x6 uint8 Zarr v2 array `src.zarr` in 2x3 chunks, stored uncompressed, in `dir`; converted
/// into shards of 2x6 (two shards, one per row of chunks).
fn conversion(dir: &Path) -> Conversion {
    let src = dir.join("src.zarr");
    std::fs::create_dir(&src).expect("mkdir");
    std::fs::write(
        src.join(".zarray"),
        r#"{"zarr_format": 2, "shape": [4, 6], "chunks": [2, 3], "dtype": "|u1",
            "compressor": null, "fill_value": 0, "order": "C", "filters": null}"#,
    )
    .expect("write");
    for (i, j) in [(0u8, 0u8), (0, 1), (1, 0), (1, 1)] {
        std::fs::write(src.join(format!("{i}.{j}")), [1 + i * 2 + j; 6]).expect("write");
    }
    let dst = dir.join("dst.zarr");
    let mut conversion =
        Conversion::new(src.to_str().expect("utf-8"), dst.to_str().expect("utf-8"));
    conversion.layouts.default = Layout {
        shard_shape: Some(vec![2, 6].into()),
        ..Layout::default()
    };
    conversion.threads = 1;
    conversion
}

/// The files below `dir`, relative to it, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir").flatten() {
            if entry.file_type().expect("type").is_dir() {
                stack.push(entry.path());
            } else if let Ok(rel) = entry.path().strip_prefix(dir) {
                found.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    found
}

#[test]
fn a_whole_run_writes_every_shard_then_the_metadata_and_removes_its_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conversion = conversion(dir.path());
    let report = conversion.convert(&()).expect("convert");
    assert_eq!(report.status, Status::Ok);
    assert_eq!(report.totals.stats.shards_written, 2);
    assert_eq!(report.totals.stats.chunks_read, 4);
    let dst = Path::new(&conversion.destination);
    assert_eq!(
        files(dst),
        [".zshard-records", "c/0/0", "c/1/0", "zarr.json"]
    );
}

#[test]
fn a_worker_of_two_leaves_the_metadata_to_finalize() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut conversion = conversion(dir.path());
    let dst = Path::new(&conversion.destination).to_path_buf();
    for index in 0..2 {
        conversion.partition = Partition::new(index, 2).expect("partition");
        let report = conversion.convert(&()).expect("convert");
        assert_eq!(report.status, Status::Ok, "worker {index}");
        assert_eq!(report.totals.stats.shards_written, 1, "worker {index}");
        // No metadata before `finalize`: an output without it is visibly unfinished.
        assert!(!dst.join("zarr.json").exists(), "worker {index}");
        assert!(dst.join(zshard_state::STATE_DIR).is_dir(), "worker {index}");
    }
    conversion.partition = Partition::ALL;
    conversion.finalize().expect("finalize");
    assert_eq!(
        files(&dst),
        [".zshard-records", "c/0/0", "c/1/0", "zarr.json"]
    );
}

#[test]
fn a_rerun_skips_the_shards_a_worker_wrote() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut conversion = conversion(dir.path());
    conversion.partition = Partition::new(1, 2).expect("partition");
    conversion.convert(&()).expect("worker 1");
    conversion.partition = Partition::ALL;
    let report = conversion.convert(&()).expect("convert");
    assert_eq!(report.status, Status::Ok);
    assert_eq!(report.totals.stats.shards_written, 1);
    let dst = Path::new(&conversion.destination);
    assert_eq!(
        files(dst),
        [".zshard-records", "c/0/0", "c/1/0", "zarr.json"]
    );
}

#[test]
fn a_cancelled_run_stops_before_writing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let conversion = conversion(dir.path());
    conversion.cancel.cancel();
    let error = conversion.convert(&()).expect_err("cancelled");
    assert!(matches!(error, Error::Cancelled), "{error}");
    let dst = Path::new(&conversion.destination);
    assert!(!dst.join("zarr.json").exists());
    assert!(!dst.join("c").exists());
}

/// A `rows`x6 uint8 Zarr v2 array in 1x3 chunks, converted into shards of 1x6 (one per row).
fn rows_conversion(dir: &Path, rows: u8) -> Conversion {
    let src = dir.join("rows.zarr");
    std::fs::create_dir(&src).expect("mkdir");
    std::fs::write(
        src.join(".zarray"),
        format!(
            r#"{{"zarr_format": 2, "shape": [{rows}, 6], "chunks": [1, 3], "dtype": "|u1",
                "compressor": null, "fill_value": 0, "order": "C", "filters": null}}"#
        ),
    )
    .expect("write");
    for i in 0..rows {
        for j in 0..2u8 {
            std::fs::write(src.join(format!("{i}.{j}")), [1 + i, 2 + j, (3 + i) ^ j])
                .expect("write");
        }
    }
    let dst = dir.join("rows-dst.zarr");
    let mut conversion =
        Conversion::new(src.to_str().expect("utf-8"), dst.to_str().expect("utf-8"));
    conversion.layouts.default = Layout {
        shard_shape: Some(vec![1, 6].into()),
        ..Layout::default()
    };
    conversion.threads = 1;
    conversion
}

/// The record files below the destination's `done` folder.
fn done_files(dst: &Path) -> Vec<String> {
    files(&dst.join(zshard_state::DONE_DIR))
}

#[test]
fn a_compaction_killed_before_removing_what_it_merged_loses_no_record() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut conversion = rows_conversion(dir.path(), 16);
    let dst = Path::new(&conversion.destination).to_path_buf();
    // Worker 0 of 2 (8 shards) records each shard in a batch of its own, merged by fours, and
    // fails after writing each merged file, before removing the files it merged.
    conversion.partition = Partition::new(0, 2).expect("partition");
    conversion.record_limits = zshard_state::RecordLimits {
        flush_entries: 1,
        compact_at: 4,
        fail_before_removal: true,
    };
    let error = conversion.convert(&()).expect_err("the simulated failure");
    assert!(matches!(error, Error::Record { .. }), "{error}");
    // Nothing removed: 8 batches, some records twice (merged, and in their own file).
    assert_eq!(done_files(&dst).len(), 8);
    // The rerun finds every shard of worker 0 done: none written again.
    conversion.record_limits = zshard_state::RecordLimits::default();
    let report = conversion.convert(&()).expect("rerun");
    assert_eq!(report.status, Status::Ok);
    assert_eq!(report.totals.stats.shards_written, 0);
    conversion.partition = Partition::new(1, 2).expect("partition");
    let report = conversion.convert(&()).expect("worker 1");
    assert_eq!(report.totals.stats.shards_written, 8);
    conversion.partition = Partition::ALL;
    conversion.finalize().expect("finalize");
    let verified = crate::Verification::new(&conversion.source, &conversion.destination)
        .run()
        .expect("verify");
    assert_eq!(verified.shards_checked, 16);
    assert_eq!(verified.mismatches.count, 0, "{:?}", verified.mismatches);
}

#[test]
fn a_workers_records_are_compacted_and_a_rerun_trusts_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut conversion = rows_conversion(dir.path(), 40);
    let dst = Path::new(&conversion.destination).to_path_buf();
    conversion.partition = Partition::new(0, 2).expect("partition");
    conversion.record_limits = zshard_state::RecordLimits {
        flush_entries: 1,
        compact_at: 4,
        ..Default::default()
    };
    let report = conversion.convert(&()).expect("worker 0");
    assert_eq!(report.totals.stats.shards_written, 20);
    // 20 batches: a file of 16 and one of 4.
    assert_eq!(done_files(&dst).len(), 2, "{:?}", done_files(&dst));
    let status =
        crate::status::status_of(&conversion.destination, &Default::default()).expect("status");
    assert_eq!(status.totals.shards_done, 20);
    // The compacted files' batch lines are no record lines, and their batches count in the rate.
    assert!(status.unreadable.is_empty(), "{:?}", status.unreadable);
    let rate = status.rate.expect("a rate");
    assert_eq!((rate.shards_per_s * rate.window_s as f64).round(), 20.0);
    let report = conversion.convert(&()).expect("rerun");
    assert_eq!(report.totals.stats.shards_written, 0);
    conversion.partition = Partition::new(1, 2).expect("partition");
    conversion.convert(&()).expect("worker 1");
    conversion.partition = Partition::ALL;
    conversion.finalize().expect("finalize");
    let verified = crate::Verification::new(&conversion.source, &conversion.destination)
        .run()
        .expect("verify");
    assert_eq!(verified.shards_checked, 40);
    assert_eq!(verified.mismatches.count, 0, "{:?}", verified.mismatches);
}

#[test]
fn what_the_listing_and_the_survey_hold_is_part_of_the_memory_budget() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut conversion = conversion(dir.path());
    conversion.memory_limit = Some(256 << 20);
    let opened = conversion.open().expect("open");
    let alone = conversion.budget_holding(&opened, 0).expect("budget");
    let held = 64 << 20;
    let holding = conversion.budget_holding(&opened, held).expect("budget");
    assert_eq!(holding.estimated_peak, alone.estimated_peak + held);
    // Held beyond the limit: refused, naming the limit, rather than killed past it.
    let e = conversion
        .budget_holding(&opened, 300 << 20)
        .expect_err("over the limit");
    assert!(e.to_string().contains("memory"), "{e}");
}
