//! The core of zshard: the array model, data types, fill values, chunk and shard geometry, the codec
//! traits and chain, the typed `sharding_indexed` configuration and its binary shard index format,
//! the layout of variable-length strings, and the reader/sink seams of the pipeline.
//!
//! Everything here is pure code over bytes: no I/O, so it is unit-testable and fuzzable.
//!
//! ```
//! use zshard_core::{assemble_shard, IndexEncoding, IndexLocation, ShardGeometry, ShardReader};
//!
//! // A 100x100 array in 64x64 shards of 32x32 inner chunks: 2x2 shards of 2x2 inner chunks.
//! let geometry = ShardGeometry::new(&[100, 100], &[64, 64], &[32, 32]).unwrap();
//! assert_eq!(geometry.shard_grid(), vec![2, 2]);
//!
//! // A shard with two stored inner chunks and two empty ones, index at the end.
//! let inner = vec![Some(vec![1u8, 2]), None, None, Some(vec![3u8])];
//! let shard = assemble_shard(&inner, IndexLocation::End, IndexEncoding::default());
//! let reader = ShardReader::new(&shard, 4, IndexLocation::End, IndexEncoding::default()).unwrap();
//! assert_eq!(reader.chunk(3), Some(&[3u8][..]));
//! assert_eq!(reader.chunk(1), None);
//! ```

mod checksum;
mod codec;
pub mod downsample;
mod dtype;
mod error;
mod fill;
mod geometry;
mod grid;
mod human;
mod io;
mod meta;
mod minifloat;
pub mod setting;
mod shard_index;
mod sharding;
mod structs;
mod vlen;

pub use checksum::{crc32c, crc32c_append, crc32c_combine};
pub use codec::{
    ArrayToArrayCodec, ArrayToBytesCodec, BytesToBytesCodec, ChunkRepr, CodecChain, CodecSpec,
};
pub use dtype::{swap_byte_order, utf32_decode, utf32_encode, DataType, Endian, TimeUnit};
pub use error::{chain_text, BoxError, Error, Result};
pub use fill::{json_float, FillValue};
pub use geometry::{
    auto_shard_shape, auto_shard_shape_around, c_order, checked_byte_size, copy_region, grid_shape,
    inverse_permutation, level_shapes, linear_index, product, strides, transpose, unravel_index,
    Region, ShardGeometry, ShardSplit, AUTO_SHARD_MAX_CHUNKS, AUTO_SHARD_TARGET_BYTES,
    MAX_BUFFER_BYTES,
};
pub use grid::RectilinearGrid;
pub use human::HumanBytes;
pub use io::{
    hash_table_bytes, stable_hash, version_hash, ChunkReader, ChunkVersions, ChunkVersionsBuilder,
    KnownVersions, PlannedReads, ShardSink, ShardStream, Stored, VersionsFrom,
};
pub use meta::{ArrayMeta, ChunkKeyEncoding, Node, NodeKind, SourceShards};
pub use minifloat::SmallFloat;
pub use setting::{Setting, Spelling};
pub use shard_index::{
    assemble_shard, shard_index_for, ChunkLocation, IndexEncoding, IndexLocation, ShardIndex,
    ShardReader, EMPTY,
};
pub use sharding::{ShardingConfig, SHARDING_CODEC};
pub use structs::{struct_from_v2, StructField, StructType, MAX_STRUCT_TYPES};
pub use vlen::{vlen_encode, vlen_ranges, StringChunkData, StringHandle, StringTable};
