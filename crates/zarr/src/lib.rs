//! Zarr v2 and v3 directory reader for zshard.
//!
//! [`open_hierarchy`] finds every group and array at a location (using consolidated metadata when
//! present) and translates their metadata into [`zshard_core::ArrayMeta`]: Zarr v2 compressors, byte
//! order and `order: "F"` become the equivalent v3 codecs, `_ARRAY_DIMENSIONS` becomes
//! `dimension_names`, and the fill value by which xarray masks a v2 array becomes the v3
//! `_FillValue` attribute xarray masks by ([`xarray_v3_fill_value`]). [`chunk_reader`] then gives the reader of an array's chunks by grid position:
//! a [`ZarrChunkReader`] (one stored chunk per key) or, for a source already stored in
//! `sharding_indexed` shards, a [`ShardedChunkReader`] that reads its inner chunks by ranged reads
//! through the shard index. The pre-final v3 layout of zarr-python 2.11–2.18 (with or without the
//! draft sharding storage transformer) is read too ([`draft`]). Metadata parsing ([`parse_v2_array`], [`parse_v3_node`]) is pure code
//! over bytes.
//!
//! ```
//! use zshard_zarr::parse_v2_array;
//!
//! let zarray = br#"{"zarr_format": 2, "shape": [100], "chunks": [10], "dtype": "<u2",
//!     "compressor": {"id": "zstd", "level": 3}, "fill_value": 0, "order": "C", "filters": null}"#;
//! let meta = parse_v2_array("a/.zarray", zarray, None).unwrap();
//! assert_eq!(meta.chunk_key_encoding.key(&[7]), "7");
//! assert_eq!(meta.codecs.last().unwrap().name, "zstd");
//! ```

pub mod draft;
mod error;
mod hierarchy;
pub mod ome;
mod reader;
mod v2;
mod v3;
mod xarray;

pub use error::{Error, Result};
pub use hierarchy::{
    open_hierarchy, open_hierarchy_skipping, open_hierarchy_skipping_within, open_hierarchy_within,
    SkippedArray,
};
pub use reader::{
    array_chunk_reader, chunk_reader, reads_shard_with_index, ShardedChunkReader, ZarrChunkReader,
};
pub use v2::{
    parse_array as parse_v2_array, parse_attributes as parse_v2_attributes, V2_COMPRESSORS,
    V2_FILTERS,
};
pub use v3::{
    check_parse_cost, json_values, parse_node as parse_v3_node,
    parse_node_within as parse_v3_node_within, ParsedNode, PARSED_BYTES_PER_VALUE,
};
pub use xarray::{xarray_mask, xarray_v3_fill_value, XarrayFill};
