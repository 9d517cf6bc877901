//! The output side of zshard: [`ShardWriter`] lays out shards in the `sharding_indexed` binary format
//! (index `bytes` little endian + `crc32c`, at the start or end) and stores each one whole, so a shard
//! never appears under its key half-written; [`write_array_metadata`] and [`write_group_metadata`]
//! write the Zarr v3 `zarr.json` documents, which the caller writes after the data.
//!
//! ```
//! use bytes::Bytes;
//! use zshard_core::{IndexLocation, ShardSink};
//! use zshard_store::{IoRuntime, Store};
//! use zshard_writer::ShardWriter;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path().to_str().unwrap(), IoRuntime::new(1).unwrap(), false).unwrap();
//! let writer = ShardWriter::new(store.child("temperature"), IndexLocation::End);
//! let written = writer.write_shard(&[0, 1], &[Some(Bytes::from_static(b"abc")), None]).unwrap();
//! assert_eq!(written, 3 + 2 * 16 + 4);
//! assert!(dir.path().join("temperature/c/0/1").is_file());
//! ```

mod error;
mod metadata;
mod writer;

pub use error::{Error, Result};
pub use metadata::{group_json, ShardedArrayMetadata, OUTPUT_KEY_ENCODING};
pub use writer::{write_array_metadata, write_group_metadata, ShardWriter};
