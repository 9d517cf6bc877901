//! The output side of zshard: [`ShardWriter`] lays out shards in the `sharding_indexed` binary format
//! (index `bytes` little endian + `crc32c`, at the start or end). A shard is stored either whole
//! ([`ShardSink::write_shard`](zshard_core::ShardSink::write_shard)) or part by part as the pipeline
//! delivers it ([`ShardSink::begin_shard`](zshard_core::ShardSink::begin_shard): inner chunks go to
//! the store as they arrive and only the index entries stay in memory); either way it appears under
//! its key only when complete, and a shard of nothing but the fill value is not stored at all.
//! [`write_array_metadata`] and [`write_group_metadata`] write the Zarr v3 `zarr.json` documents,
//! which the caller writes after the data; [`ShardedArrayMetadata`] builds the array's document.
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
//! assert_eq!(written.bytes, 3 + 2 * 16 + 4);
//! assert!(dir.path().join("temperature/c/0/1").is_file());
//! ```

mod error;
mod metadata;
mod writer;

pub use error::{Error, Result};
pub use metadata::{
    consolidated_group_bytes, consolidated_group_json, group_json, ShardedArrayMetadata,
    OUTPUT_KEY_ENCODING,
};
pub use writer::{
    document_bytes, write_array_metadata, write_consolidated_group_metadata, write_group_metadata,
    ShardWriter,
};
