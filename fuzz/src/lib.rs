//! Check functions of the zshard fuzz targets. Each takes the fuzzer's bytes, derives a
//! configuration and an encoded input from them, calls the library, and panics (a crash for
//! libFuzzer) when the library panics, over-allocates, or breaks one of its promises.
//!
//! The modules other than `probe` only use the zshard crates and serde_json, so
//! `crates/codecs/tests/fuzz_regressions.rs` can include them with `#[path]` and replay
//! `fuzz/regressions/` under plain `cargo test`, with a no-op `probe`.

pub mod codecs;
pub mod input;
pub mod kerchunk;
pub mod metadata;
pub mod n5;
pub mod objects;
pub mod probe;
pub mod seeds;
pub mod shard;
pub mod zip;

/// The entry point of each fuzz target, by target name.
pub mod checks {
    pub use crate::codecs::{codec_decode, filter_decode};
    pub use crate::kerchunk::kerchunk_json;
    pub use crate::metadata::{draft_metadata, v2_metadata, v3_metadata};
    pub use crate::objects::object_decode;
    pub use crate::n5::n5_block;
    pub use crate::shard::shard_index;
    pub use crate::zip::zip_directory;
}
