//! The run room: converting, resuming and spreading a conversion over workers. Read
//! `conversion.rs` first (plan, skip what is done, run the pipeline on this worker's shards, write
//! the metadata), then `state.rs` (what `DST/.zshard/` records so that a run resumes and workers
//! share a destination), `lease.rs` (live runs, so that `--overwrite` never removes a destination
//! in use) and `owned.rs` (which keys are zshard's). Around them: `ahead.rs` (the state write sent
//! ahead), `memory.rs` (the memory limit), `progress.rs` and `report.rs` (what a run tells and
//! returns), `status.rs` (`zshard status`) and `icechunk_output.rs` (publishing into Icechunk).

pub(crate) mod ahead;
pub(crate) mod conversion;
#[cfg(test)]
mod conversion_tests;
pub(crate) mod icechunk_output;
pub(crate) mod lease;
pub(crate) mod memory;
pub(crate) mod owned;
pub(crate) mod progress;
pub(crate) mod report;
pub(crate) mod sealed;
pub(crate) mod state;
pub mod status;
