//! The verify room: checking an output against its source. `verification.rs` (was `verify.rs`)
//! decodes both and compares every element (or a sample); `manifest.rs` is the checksum manifest a
//! conversion writes and `verify --manifest` checks without reading the source.

pub(crate) mod manifest;
mod verification;

// `crate::verify::X` names the verification, as when this room was one file.
pub use verification::*;
