//! N5 containers as a zshard input.
//!
//! An N5 container is a folder tree: every folder is a group, and `attributes.json` holds a node's
//! attributes; a dataset is a folder whose attributes have `dimensions`, `blockSize`, `dataType` and
//! `compression` (raw, gzip, bzip2, blosc, xz, lz4 or zstd), and its blocks are stored under
//! `i/j/k` (grid position, first axis first). The root's `attributes.json` holds the format
//! version under `n5`.
//!
//! [`Container::nodes`] gives the hierarchy in the core's model, with the axis order tensorstore's
//! `n5` driver shows (its shape is `dimensions`), and [`Container::reader`] a
//! [`zshard_core::ChunkReader`] per dataset that decodes each block's header and payload
//! ([`BlockDecoder`]) into a full chunk: elements first axis fastest, big endian (the chain of the
//! array is `transpose` + big-endian `bytes`, see [`Dataset::array_meta`]); edge blocks, stored
//! with their actual extents, are padded with 0 (N5's value for data no block holds).
//!
//! ```
//! use zshard_n5::{encode_raw_block, parse_attributes, Attributes, BlockDecoder};
//!
//! let doc = br#"{"dimensions": [3, 2], "blockSize": [2, 2], "dataType": "uint8",
//!                "compression": {"type": "raw"}}"#;
//! let Attributes::Dataset(dataset) = parse_attributes("a/attributes.json", doc).unwrap() else {
//!     panic!("a dataset")
//! };
//! let decoder = BlockDecoder::new("a/attributes.json", &dataset).unwrap();
//! // The edge block at grid position (1, 0) holds one column of 1x2 elements.
//! let block = encode_raw_block(&[1, 2], &[7, 8]);
//! assert_eq!(decoder.decode("a/1/0", &block).unwrap(), vec![7, 0, 8, 0]);
//! ```

mod block;
mod container;
mod error;
mod lz4_block;
mod meta;

pub use block::{encode_raw_block, parse_header, BlockDecoder, BlockHeader};
pub use container::{detect, Container, ATTRIBUTES};
pub use error::{Error, Result};
pub use lz4_block::encode as encode_lz4_block;
pub use meta::{is_n5_root, parse_attributes, Attributes, Compression, Dataset, RESERVED_KEYS};
