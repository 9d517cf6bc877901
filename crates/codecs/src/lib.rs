//! Codec implementations for zshard and the registry that builds codec chains from Zarr v3 metadata.
//!
//! Readers translate their source format's codecs into v3 [`CodecSpec`](zshard_core::CodecSpec)s;
//! [`build_chain`] turns those into a [`CodecChain`](zshard_core::CodecChain) that decodes chunks
//! into little-endian C-order elements. Adding a codec is one new module plus one line in the
//! registry.
//!
//! Besides the v3 codecs, the registry reads (and writes) numcodecs codecs under their zarr-python
//! v3 names `numcodecs.<id>`: the compressors `bz2`, `lzma`, `lz4`, `zlib`, and the Zarr v2 filters
//! `shuffle`, `delta`, `fixedscaleoffset`, `quantize`, `astype`, `packbits`, `bitround`, `crc32`,
//! `adler32`, `crc32c`, `fletcher32` and `jenkins_lookup3`, `categorize` (strings), and `pcodec` and
//! `zfpy` (decode only, a pure-Rust zfp decoder), array→bytes codecs in place of `bytes`. zarr-python 3 places the filters that compute on elements
//! (`delta`, `fixedscaleoffset`, `quantize`, `astype`, `packbits`, `bitround`) before `bytes`;
//! they are read there too, as array→array codecs. The zarr-extensions registry's codecs are read
//! under their registered names: `packbits`, `bitround`, `reshape`, `conditional`, `n5_default`
//! (decode only), `zfp` (decode only: zfp's blocks without header, through the same decoder as
//! `zfpy`), `scale_offset` and `cast_value`. Variable-length strings use `vlen-utf8`. Filters
//! are bytes→bytes codecs over the flattened elements in the element types their configuration
//! names (for example `"<i4"`), so a v2 array is the chain
//! `[transpose] bytes <filters in list order> <compressor>`; their arithmetic follows numpy's, so
//! they decode numcodecs' output bit for bit (tests/golden holds vectors written by numcodecs).
//!
//! ```
//! use serde_json::json;
//! use zshard_codecs::build_chain;
//! use zshard_core::{ChunkRepr, CodecSpec, DataType, FillValue};
//!
//! let repr = ChunkRepr { shape: vec![4, 4], data_type: DataType::UInt16, fill_value: FillValue::zero(DataType::UInt16) };
//! let chain = build_chain(
//!     &[CodecSpec::new("bytes", json!({"endian": "little"})), CodecSpec::new("zstd", json!({"level": 3}))],
//!     &repr,
//! ).unwrap();
//! let data: Vec<u8> = (0..32).collect();
//! let encoded = chain.encode(data.clone(), &repr).unwrap();
//! assert_eq!(chain.decode(&encoded, &repr).unwrap(), data);
//! ```

mod array_filter;
mod bitround;
mod blosc;
mod bounded;
mod bytes_codec;
mod bz2_codec;
mod cast;
mod cast_value;
mod categorize;
mod checksum32;
mod conditional;
mod config;
mod crc32c_codec;
mod deflate;
mod delta;
mod error;
mod fixedscaleoffset;
mod lz4_codec;
mod lzma_codec;
mod n5_default;
mod numeric;
mod object_codecs;
mod packbits;
mod packbits_ext;
mod pcodec_codec;
mod registry;
mod reshape;
mod scale_offset;
mod sharding;
mod shuffle;
mod transpose;
mod v2_filters;
mod vlen_utf8;
mod zfp;
mod zstd_codec;
mod zstd_context;

pub use array_filter::v3_form_problem;
pub use blosc::{CNAMES as BLOSC_CNAMES, SHUFFLES as BLOSC_SHUFFLES};
pub use bytes_codec::BytesCodec;
pub use error::{Error, Result};
pub use registry::{build_chain, build_codec, supported_codecs, Codec};
pub use transpose::TransposeCodec;
pub use v2_filters::v3_equivalent;
pub use vlen_utf8::MAX_STRING_CHUNK_BYTES;
