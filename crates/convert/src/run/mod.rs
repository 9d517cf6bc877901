//! The run room: converting, resuming and spreading a conversion over workers. Read
//! `conversion.rs` first (plan, skip what is done, run the pipeline on this worker's shards, write
//! the metadata); what `DST/.zshard/` records so that a run resumes and workers share a destination
//! (claim, leases, records, manifest, status) is the destination protocol, the crate `zshard-state`.
//! Around the conversion: `recorder.rs` (each shard done: told, reported, recorded), `memory.rs` (the memory limit), `progress.rs` and `report.rs` (what a run
//! tells and returns), `status.rs` (`zshard status` by name, Icechunk included) and
//! `icechunk_output.rs` (publishing into Icechunk).

pub(crate) mod conversion;
#[cfg(test)]
mod conversion_tests;
mod digests;
pub(crate) mod icechunk_output;
pub(crate) mod memory;
pub(crate) mod progress;
mod recorded;
mod recorder;
pub(crate) mod report;
pub(crate) mod reuse;
pub mod status;
