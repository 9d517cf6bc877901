//! `zshard status` for a destination given by name: the status read from the destination's state
//! (`zshard_state::status`), reached with storage options, and for an Icechunk repository from its
//! staging folder or its commits.

use zshard_store::{IoRuntime, Store, StoreOptions};

pub use zshard_state::{
    status, ArrayStatus, LeaseStatus, Phase, Rate, Status, Totals, WorkerStatus, RATE_WINDOW_MS,
};

use crate::error::Result;
use zshard_state::read_status;

/// [`status_of`] for a destination that a job names: one that does not exist yet is a conversion
/// not started (a job's later conversions), not an error as a mistyped DST is.
pub fn status_in_job(destination: &str, options: &StoreOptions) -> Result<Status> {
    let location = zshard_store::Location::parse(destination)?;
    if location.local_path().is_some_and(|path| !path.exists()) {
        let mut status = Status::not_started(location.to_string());
        status.finished = status.is_finished();
        return Ok(status);
    }
    status_of(destination, options)
}

/// The status of the conversion into `destination` (a path or URL), reached with `options`.
pub fn status_of(destination: &str, options: &StoreOptions) -> Result<Status> {
    let runtime = IoRuntime::with_options(2, options.clone())?;
    // `REPO#/PATH` (a conversion into a node path of an Icechunk repository) is shown from REPO.
    let store = Store::open(
        zshard_icechunk::split_node(destination).0,
        runtime.clone(),
        false,
    )?;
    let mut shown = status(&store)?;
    if shown.phase != Phase::NotStarted {
        return Ok(shown);
    }
    if let Some(icechunk) = icechunk_status(destination, &store, &runtime)? {
        return Ok(icechunk);
    }
    // A Zarr v2 dataset given for DST (its source, say) is not "without metadata".
    let v2 = [".zgroup", ".zarray"]
        .iter()
        .find(|key| matches!(store.get(key), Ok(Some(_))));
    if let Some(key) = v2 {
        shown.note = Some(format!(
            "it holds Zarr v2 metadata ({key}), not the Zarr v3 output of a zshard conversion: a source, not a destination?"
        ));
    }
    Ok(shown)
}

/// The status of a conversion into the Icechunk repository at `destination` (nothing of it shows
/// at the repository's own root): its staging folder's, as in progress until the commit (workers
/// converting or waiting for `finalize`, or staged but not committed yet), else complete when a
/// branch holds a commit of zshard. `None` when neither is there.
fn icechunk_status(
    destination: &str,
    store: &Store,
    runtime: &std::sync::Arc<IoRuntime>,
) -> Result<Option<Status>> {
    let staged = zshard_icechunk::staging_location(destination)?;
    let location = zshard_store::Location::parse(&staged)?;
    let absent = location.local_path().is_some_and(|folder| !folder.is_dir());
    if !absent {
        let staging = Store::open_location(&location, runtime.clone(), false)?;
        let mut shown = read_status(&staging)?;
        // What a commit kept for a later update (documents and records, no shard) is no run.
        let kept = shown.phase == Phase::Complete
            && crate::run::icechunk_output::holds_kept_after_commit(&staging)?;
        if shown.phase != Phase::NotStarted && !kept {
            // Named as given, node path included: the name `finalize` takes.
            let node = zshard_icechunk::split_node(destination).1;
            shown.destination = match node.is_empty() {
                true => store.url(""),
                false => format!("{}{}{node}", store.url(""), zshard_icechunk::NODE_SEPARATOR),
            };
            // Nothing staged is on a branch before the commit, which a partitioned run leaves to
            // `finalize`.
            let commits = match shown.workers.iter().any(|w| w.count > 1) {
                true => format!("`zshard finalize {}` commits it", shown.destination),
                false => "the run commits it (a rerun resumes it)".to_string(),
            };
            shown.note = Some(format!(
                "staged in {}: the repository holds none of it until {commits}",
                staging.url("")
            ));
            shown.finished = shown.is_finished();
            if shown.phase == Phase::Complete {
                // Staged whole but not committed: a run killed before its commit, which a rerun
                // or `finalize` makes.
                shown.phase = Phase::InProgress;
                shown.finished = true;
            }
            return Ok(Some(shown));
        }
    }
    // Probing for a repository is best effort: a destination that is none shows as not started.
    let local = zshard_store::Location::parse(zshard_icechunk::split_node(destination).0)?
        .local_path()
        .is_some();
    if local && !zshard_icechunk::is_repository(destination) {
        return Ok(None);
    }
    let Ok(Some(_)) = zshard_icechunk::zshard_commit(destination, runtime) else {
        return Ok(None);
    };
    let mut shown = read_status(store)?;
    shown.phase = Phase::Complete;
    shown.finished = true;
    Ok(Some(shown))
}
