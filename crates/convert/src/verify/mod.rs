//! The verify room: checking an output against its source. `verification.rs` (was `verify.rs`)
//! decodes both and compares every element (or a sample) through `sink.rs`, `extras.rs` finds what the output holds
//! beyond the hierarchy (strays, foreign files, stale consolidated entries); `manifest.rs` checks an output against the
//! checksum manifest its conversion kept (`verify --manifest`; the records are `zshard-state`'s),
//! without reading the source.

mod extras;
pub(crate) mod manifest;
mod pyramid;
mod sink;
mod verification;

// `crate::verify::X` names the verification, as when this room was one file.
pub use verification::*;
