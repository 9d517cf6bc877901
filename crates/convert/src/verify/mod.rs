//! The verify room: checking an output against its source. `verification.rs` (was `verify.rs`)
//! decodes both and compares every element (or a sample); `manifest.rs` checks an output against the
//! checksum manifest its conversion kept (`verify --manifest`; the records are `zshard-state`'s),
//! without reading the source.

pub(crate) mod manifest;
mod verification;

// `crate::verify::X` names the verification, as when this room was one file.
pub use verification::*;
