//! The plan room: what a conversion will do, from metadata alone. Read `input.rs` (where a
//! conversion reads from: every source kind as one hierarchy of arrays), `selection.rs` (which
//! arrays), `layout.rs` (the layouts and the checked [`Plan`]; was `plan.rs`), then `shape.rs`,
//! `partition.rs` (which shards this worker takes), `plan_report.rs` (what `plan` answers) and
//! `listing.rs` (`zshard ls`).

pub(crate) mod estimate;
pub(crate) mod input;
mod layout;
pub(crate) mod listing;
pub(crate) mod plan_report;
pub(crate) mod pyramid;
pub(crate) mod selection;
pub(crate) mod shape;

// `crate::plan::X` names the layouts and the plan, as when this room was one file.
pub use layout::*;
