//! Kerchunk reference sets as a zshard input.
//!
//! A reference set describes Zarr v2 (or v3) arrays whose chunks are byte ranges inside other files
//! (HDF5, netCDF, TIFF, GRIB...). [`ReferenceSet`] opens one, in either layout:
//!
//! - a JSON file, version 0 (the object is the map of references) or version 1 (`refs`,
//!   `templates` and `gen` with dimensions, whose strings are Jinja2 `{{ expression }}` strings
//!   rendered with `minijinja` under limits, see `template.rs`), plain or compressed with zstd or
//!   gzip; trailing commas and bare `NaN`/`Infinity` are accepted;
//! - a Parquet folder as fsspec's `LazyReferenceMapper` writes it (`.zmetadata` with `metadata` and
//!   `record_size`, `<array>/refs.<i>.parq`), read one file at a time as chunks need it.
//!
//! Its [`ReferenceSet::nodes`] are the hierarchy of groups and arrays, and
//! [`ReferenceSet::reader`] gives a [`zshard_core::ChunkReader`] per array that maps each chunk to its
//! reference (inline bytes, a whole file, a byte range, or nothing), coalesces nearby ranges of the
//! same target into one request with the store's coalescer (see [`Options::coalesce_gap`] and
//! [`Options::max_request`]) and reads with the store's bound on concurrent requests. Whether a
//! location is local or remote is decided by [`zshard_store::Location`].
//!
//! A reference set is untrusted: local targets are read only under the reference file's folder (or
//! [`Options::ref_root`]), remote ones only with the schemes s3, gs, az, http(s), and http(s) targets
//! on loopback, link-local or private addresses only when [`Options::allow_prefixes`] names them.
//! Every target of a JSON set is checked when it is opened, before anything is read.
//!
//! ```
//! use std::sync::Arc;
//! use zshard_core::{ChunkReader, NodeKind};
//! use zshard_kerchunk::{Format, Options, ReferenceSet};
//! use zshard_store::IoRuntime;
//!
//! let dir = tempfile::tempdir().unwrap();
//! // A data file with two 4-byte chunks of a uint8 array, after a 2-byte header.
//! std::fs::write(dir.path().join("data.bin"), b"HD\x01\x02\x03\x04\x05\x06\x07\x08").unwrap();
//! let refs = r#"{"version": 1, "templates": {"f": "data.bin"},
//!   "refs": {".zgroup": {"zarr_format": 2},
//!            "x/.zarray": {"zarr_format": 2, "shape": [12], "chunks": [4], "dtype": "|u1",
//!                          "compressor": null, "fill_value": 0, "order": "C", "filters": null},
//!            "x/0": ["{{f}}", 2, 4], "x/1": "base64:BQYHCA=="}}"#;
//! let path = dir.path().join("refs.json");
//! std::fs::write(&path, refs).unwrap();
//!
//! let set = ReferenceSet::open(path.to_str().unwrap(), Format::Json, &Options::default(),
//!     IoRuntime::new(1).unwrap()).unwrap();
//! let nodes = set.nodes();
//! let NodeKind::Array(meta) = &nodes[1].kind else { panic!("x is an array") };
//! let reader = set.reader("x", meta);
//! let chunks = reader.read_chunks(&[vec![0], vec![1], vec![2]], u64::MAX);
//! assert_eq!(chunks[0].as_ref().unwrap().as_deref(), Some(&[1u8, 2, 3, 4][..]));
//! assert_eq!(chunks[1].as_ref().unwrap().as_deref(), Some(&[5u8, 6, 7, 8][..]));
//! assert!(chunks[2].as_ref().unwrap().is_none()); // no reference: the fill value
//! ```

mod error;
mod gen;
mod lenient;
mod meta;
mod parquet_refs;
mod refs;
mod set;
mod target;
mod template;

pub use error::{Error, Result};
pub use set::{
    detect, is_json_name, is_parquet_metadata, ExternalChunk, ExternalRanges, Format, Options,
    ReadStats, ReferenceSet, DEFAULT_COALESCE_GAP, DEFAULT_MAX_REQUEST, DEFAULT_PARQUET_CACHE,
};
