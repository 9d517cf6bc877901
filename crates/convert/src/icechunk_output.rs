//! Converting into an Icechunk repository: the conversion runs as usual into a staging folder inside
//! the repository's folder (so an interrupted run resumes, and workers share it). The staged shards
//! are then copied into the repository's chunk storage without passing through zshard (on the
//! server, or as hard links), by each worker for its own shards or by the commit; once every shard
//! and document is there, one commit references them and the staging folder is removed. Nothing is
//! visible on the branch before that commit.

use std::collections::HashSet;

use crate::conversion::{Conversion, Finalized, Observer};
use crate::error::Result;
use crate::partition::Partition;
use crate::report::{Report, Status};

/// Where and how a conversion into an Icechunk repository commits.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IcechunkOutput {
    /// The branch to commit to (created from `main`'s tip when missing).
    pub branch: String,
    /// The commit message; `None`: one naming zshard, the source and the options.
    pub message: Option<String>,
    /// The Icechunk spec version of a repository the conversion makes (`None`: 2). An existing
    /// repository is written in its own version; asking for another one is refused.
    pub spec: Option<SpecVersion>,
}

impl Default for IcechunkOutput {
    fn default() -> Self {
        IcechunkOutput {
            branch: "main".to_string(),
            message: None,
            spec: None,
        }
    }
}

pub use zshard_icechunk::{DestinationSpec, Published, SpecVersion};

impl Conversion {
    /// The same conversion, writing plain Zarr into the staging folder of the repository.
    fn staged(&self) -> Result<Conversion> {
        let mut staged = self.clone();
        staged.destination = zshard_icechunk::staging_location(&self.destination)?;
        staged.icechunk = None;
        // Icechunk keeps every node's document itself; a consolidated root would hide the
        // repository's other nodes from zarr-python.
        staged.consolidate = false;
        Ok(staged)
    }

    /// The commit message: the one given, or one naming zshard, the source and the options.
    fn commit_message(&self, output: &IcechunkOutput) -> String {
        output.message.clone().unwrap_or_else(|| {
            let layout = &self.layouts.default;
            let shape = |s: &Option<crate::ShapeSpec>| {
                s.as_ref().map_or("auto".to_string(), ToString::to_string)
            };
            format!(
                "zshard {} convert {}: shard shape {}, chunk shape {}, compressor {}",
                env!("CARGO_PKG_VERSION"),
                self.source,
                shape(&layout.shard_shape),
                shape(&layout.chunk_shape),
                layout.compressor,
            )
        })
    }

    /// [`Conversion::convert`] into a repository: converts into the staging folder, then (when this
    /// run covers every shard) commits it.
    pub(crate) fn convert_into_icechunk(
        &self,
        output: &IcechunkOutput,
        observer: &dyn Observer,
    ) -> Result<Report> {
        let staged = self.staged()?;
        let runtime = zshard_store::IoRuntime::with_options(2, self.store_options.clone())?;
        zshard_icechunk::create_if_missing(&self.destination, output.spec, &runtime)?;
        // (An --overwrite worker is refused by the conversion itself.)
        if self.overwrite && self.partition == Partition::ALL {
            // The staged shards are about to be replaced: copies stored ahead would be stale, and
            // an earlier run's commit token names another conversion.
            zshard_icechunk::forget_stored_shards(
                &staged.destination,
                &self.destination,
                &runtime,
            )?;
        }
        let mut report = staged.convert(observer)?;
        if !matches!(report.status, Status::Ok | Status::Complete) {
            return Ok(report);
        }
        if self.partition == Partition::ALL {
            report.published = Some(self.publish(&staged, output)?);
        } else {
            // This worker's shards go into the repository's chunk storage now, side by side with
            // the other workers', so that `finalize` only references them.
            let keys = shard_keys(&report.shard_grids, self.partition);
            let writer = format!("w{}of{}", self.partition.index, self.partition.count);
            report.stored_in_repository = Some(zshard_icechunk::store_staged_shards(
                &staged.destination,
                &self.destination,
                &keys,
                &writer,
                &runtime,
            )?);
        }
        Ok(report)
    }

    /// [`Conversion::finalize`] into a repository: finalizes the staging folder, then commits it.
    pub(crate) fn finalize_into_icechunk(&self, output: &IcechunkOutput) -> Result<Finalized> {
        let staged = self.staged()?;
        // Only checks the spec version asked for: the repository was made by the conversion.
        let runtime = zshard_store::IoRuntime::with_options(2, self.store_options.clone())?;
        zshard_icechunk::create_if_missing(&self.destination, output.spec, &runtime)?;
        let mut finalized = staged.finalize()?;
        finalized.published = Some(self.publish(&staged, output)?);
        Ok(finalized)
    }

    /// Commits the staged output, then removes the staging folder (all of it written by zshard).
    fn publish(&self, staged: &Conversion, output: &IcechunkOutput) -> Result<Published> {
        let runtime = zshard_store::IoRuntime::with_options(2, self.store_options.clone())?;
        let published = zshard_icechunk::publish(
            &staged.destination,
            &self.destination,
            &output.branch,
            &self.commit_message(output),
            &runtime,
        )?;
        remove_staging(&staged.destination, runtime)?;
        Ok(published)
    }
}

/// The keys (relative to the destination) of every shard of `partition`, as the writer names them,
/// for arrays given by path and shard grid in hierarchy order (the order that assigns shards to
/// workers).
fn shard_keys(grids: &[(String, Vec<u64>)], partition: Partition) -> HashSet<String> {
    let mut global = 0u64;
    let mut keys = HashSet::new();
    for (path, grid) in grids {
        for index in 0..zshard_core::product(grid) {
            if partition.owns(global) {
                let shard = zshard_core::unravel_index(index, grid);
                keys.insert(zshard_writer::OUTPUT_KEY_ENCODING.key_under(path, &shard));
            }
            global += 1;
        }
    }
    keys
}

/// Removes the staging folder, or every object under the staging prefix of a remote repository.
/// The commit record goes last: a run killed while removing finds it, and its commit on the branch,
/// and does not commit again.
fn remove_staging(location: &str, runtime: std::sync::Arc<zshard_store::IoRuntime>) -> Result<()> {
    let staging = zshard_store::Store::open(location, runtime, false)?;
    let record = zshard_icechunk::COMMIT_RECORD;
    let Some(folder) = staging.local_path("") else {
        let keys: Vec<String> = staging
            .list_keys("")?
            .into_iter()
            .filter(|key| key != record)
            .collect();
        staging.delete_many(&keys)?;
        staging.delete(record)?;
        return Ok(());
    };
    let remove_error = |path: std::path::PathBuf| {
        move |source| crate::error::Error::File {
            action: "remove the staging folder",
            path,
            source,
        }
    };
    let entries = std::fs::read_dir(&folder).map_err(remove_error(folder.clone()))?;
    for entry in entries {
        let path = entry.map_err(remove_error(folder.clone()))?.path();
        if path.file_name().is_some_and(|name| name == record) {
            continue;
        }
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(remove_error(path))?;
    }
    std::fs::remove_dir_all(&folder).map_err(remove_error(folder.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workers_shard_keys_follow_the_global_order_across_arrays() {
        let grids = [("a".to_string(), vec![2, 2]), (String::new(), vec![3])];
        let mut keys: Vec<String> = shard_keys(&grids, Partition::new(1, 2).expect("partition"))
            .into_iter()
            .collect();
        keys.sort();
        // Global shards 1, 3 and 5: a's (0, 1) and (1, 1), then the root array's 1.
        assert_eq!(keys, ["a/c/0/1", "a/c/1/1", "c/1"]);
        assert_eq!(shard_keys(&grids, Partition::ALL).len(), 7);
    }
}
