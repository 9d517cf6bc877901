//! The zshard conversion as a library: every front end (the `zshard` command, job files, Python)
//! calls this crate, and only translates options and prints.
//!
//! A [`Conversion`] says where from, where to and how ([`Layout`], [`ReadOptions`],
//! [`StoreOptions`], memory limit, threads, [`Partition`]); [`Conversion::plan`] answers what it
//! would do from metadata alone, [`Conversion::convert`] converts (resuming an interrupted run with
//! the same options), [`Conversion::finalize`] writes the metadata after a partitioned run, and
//! [`Verification`] compares an output with its source element by element.
//!
//! ```
//! use zshard_convert::{Conversion, Layout, Verification};
//!
//! // A 4x6 uint8 Zarr v2 array in 2x3 chunks, stored uncompressed.
//! let dir = tempfile::tempdir().unwrap();
//! let src = dir.path().join("src.zarr");
//! std::fs::create_dir(&src).unwrap();
//! std::fs::write(src.join(".zarray"), r#"{"zarr_format": 2, "shape": [4, 6], "chunks": [2, 3],
//!     "dtype": "|u1", "compressor": null, "fill_value": 0, "order": "C", "filters": null}"#).unwrap();
//! for (i, j) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
//!     std::fs::write(src.join(format!("{i}.{j}")), [1 + i * 2 + j; 6]).unwrap();
//! }
//!
//! // Into one shard of 2x3 inner chunks, zstd level 3 (the default layout with a shard shape).
//! let dst = dir.path().join("dst.zarr");
//! let mut conversion = Conversion::new(src.to_str().unwrap(), dst.to_str().unwrap());
//! conversion.layouts.default = Layout { shard_shape: Some(vec![4, 6].into()), ..Layout::default() };
//! conversion.threads = 2;
//!
//! let plan = conversion.plan().unwrap();
//! assert_eq!(plan.plan.arrays[0].geometry.shard_count(), 1);
//!
//! let report = conversion.convert(&()).unwrap();
//! assert_eq!(report.totals.stats.shards_written, 1);
//! assert_eq!(report.totals.stats.chunks_read, 4);
//! assert!(dst.join("zarr.json").exists());
//!
//! let verified = Verification::new(src.to_str().unwrap(), dst.to_str().unwrap()).run().unwrap();
//! assert_eq!(verified.mismatches.count, 0);
//! ```

// The crate's rooms (see docs/architecture.md): `plan` (what a conversion will do, from
// metadata), `run` (converting: conversion, state, lease) and `verify` (checking an output);
// besides them the options model, the one error type and the small parsers.
mod compressor;
mod error;
pub mod options;
mod plan;
mod run;
mod size;
mod threads;
mod verify;

pub use compressor::Compressor;
pub use error::{one_line, Error, Result};
pub use plan::estimate::{Assumptions, Estimate, Prices, Requests, StateRequests, Stated};
pub use plan::input::{OnUnsupported, ReadOptions, SkippedArray, SourceFormat, DEFAULT_SOURCE_REF};
pub use plan::listing::{list, ListedArray, Listing};
pub use plan::plan_report::{
    ArrayPlan, ArrayUpdate, Cost, IcechunkChunks, IcechunkOutputPlan, MadeFrom, PlanDocument,
    PlanReport, PlanTotals, PyramidPlace, RectilinearGrid, UpdatePlan,
};
pub use plan::pyramid::{PyramidLevels, PyramidOptions};
pub use plan::selection::Selection;
pub use plan::shape::ShapeSpec;
pub use plan::{Layout, Layouts, LevelShapes, Plan, PlannedArray, PyramidLevel};
pub use run::conversion::{Conversion, Finalized};
pub use run::icechunk_output::{DestinationSpec, IcechunkOutput, Published, SpecVersion};
pub use run::memory::{default_limit, memory_default, MemoryDefault, MemorySource};
pub use run::report::{
    ArrayReport, Counts, Failure, Report, ReportedOptions, Status, Update, Worker, GIT_COMMIT,
};
pub use run::status;
pub use size::parse_size;
pub use threads::{
    capped_io_threads, capped_threads, default_threads, max_io_threads, max_threads,
    IO_THREADS_PER_CPU, MAX_THREADS, MIN_IO_THREADS_CAP, THREADS_PER_CPU,
};
pub use verify::manifest::ManifestVerification;
pub use verify::{Mismatches, Verification, Verified};
pub use zshard_core::downsample::Reduction;
pub use zshard_core::setting::{inheriting, spelled, Setting, Spelling};
pub use zshard_kerchunk::{Options as ReferenceOptions, ReadStats};
pub use zshard_pipeline::{Cancel, PartOutcome, ShardOutcome, Stats};
pub use zshard_state::{
    Observer, Partition, Work, DEFAULT_CHECKPOINT_INTERVAL, DEFAULT_LEASE_STALE_AFTER,
};
pub use zshard_store::{ListedCount, StoreOptions};
pub use zshard_zarr::ome::OmeMetadata;
