//! Cheap rewrites (issue 40): a shard that an update rewrites because some of its source chunks
//! changed copies its other inner chunks, encoded, from the shard as it stands, instead of reading,
//! decoding and encoding them again. Each record names the digests of its shard's inner chunks
//! (see `digests.rs`); an inner chunk whose digest is the same now covers the same region and was
//! made from the same versions of the same source chunks, so its stored bytes are what converting
//! it again would write.
//!
//! Only into a Zarr destination whose shards stand as recorded (see
//! [`zshard_state::reusable_inner_digests`]), read through the finished conversion's own
//! `zarr.json` (metadata is written last, so it still describes the shards being rewritten), with
//! the same inner chunk shape, shard shape and data type. Not for pyramids (their lower levels are
//! made from level 0's assembled chunks) nor for variable-size types.

use std::collections::HashMap;
use std::sync::Arc;

use zshard_core::{linear_index, ChunkVersions, NodeKind};
use zshard_pipeline::{ArrayJob, ShardTask};
use zshard_state::Survey;
use zshard_store::Store;

use crate::plan::Plan;
use crate::run::digests::{decode_inner, inner_digests, Listed};

/// Which inner chunks of the shards an update rewrites are copied (see the module doc).
pub(crate) struct Reuse {
    arrays: Vec<Option<ArrayReuse>>,
}

/// One array's part of [`Reuse`].
struct ArrayReuse {
    /// Per shard the update may rewrite (C-order index), its inner chunks' digests as recorded.
    recorded: HashMap<u64, Vec<u64>>,
    versions: Arc<ChunkVersions>,
}

impl Reuse {
    /// For a run into `destination` (a Zarr hierarchy; `None` for one that keeps its shards
    /// elsewhere, which copies nothing): gives each array of `jobs` whose shards can be copied from
    /// the reader of its output as it stands ([`ArrayJob::previous`]).
    pub(crate) fn plan(
        jobs: &mut [ArrayJob],
        plan: &Plan,
        destination: Option<&Store>,
        survey: &Survey,
        listed: &Listed,
    ) -> Reuse {
        let none = || Reuse {
            arrays: jobs.iter().map(|_| None).collect(),
        };
        let Some(destination) = destination else {
            return none();
        };
        if jobs.iter().any(|job| job.derived.is_some()) {
            return none();
        }
        let recorded =
            zshard_state::reusable_inner_digests(survey, &plan.outputs(), &listed.digests);
        let arrays = jobs
            .iter_mut()
            .zip(&plan.arrays)
            .zip(recorded)
            .zip(&listed.versions)
            .map(|(((job, array), recorded), versions)| {
                let versions = versions.as_ref()?;
                if recorded.is_empty() || job.layout.inner_repr.data_type.is_variable() {
                    return None;
                }
                let document = survey.zarr_json(&array.path)?;
                job.previous = Some(previous_output(destination, &array.path, document, job)?);
                let recorded = recorded
                    .into_iter()
                    .filter_map(|(index, text)| Some((index, decode_inner(&text)?)))
                    .collect();
                Some(ArrayReuse {
                    recorded,
                    versions: Arc::clone(versions),
                })
            })
            .collect();
        Reuse { arrays }
    }

    /// `task` with the inner chunks its shard copies: those whose digest now is the recorded one.
    pub(crate) fn task(&self, jobs: &[ArrayJob], mut task: ShardTask) -> ShardTask {
        let Some(Some(array)) = self.arrays.get(task.array) else {
            return task;
        };
        let layout = &jobs[task.array].layout;
        let index = linear_index(&task.shard, &layout.geometry.shard_grid());
        let Some(recorded) = array.recorded.get(&index) else {
            return task;
        };
        let now = inner_digests(layout, &array.versions, &task.shard);
        if now.len() != recorded.len() {
            return task;
        }
        // Inner chunks past the array's end hold nothing to copy.
        let geometry = &layout.geometry;
        let inside = geometry.array_region();
        let in_array = |inner: u64| {
            geometry
                .inner_region(&task.shard, inner)
                .intersect(&inside)
                .is_some()
        };
        task.reuse = (0u64..)
            .zip(now.iter().zip(recorded))
            .filter(|(inner, (now, recorded))| now == recorded && in_array(*inner))
            .map(|(inner, _)| inner)
            .collect();
        task
    }
}

/// The reader of the inner chunks of the array at `path` of `destination` as its `zarr.json`
/// (`document`) describes them, when they are laid out and encoded as `job` makes them.
fn previous_output(
    destination: &Store,
    path: &str,
    document: &[u8],
    job: &ArrayJob,
) -> Option<Arc<dyn zshard_core::ChunkReader>> {
    let parsed = zshard_zarr::parse_v3_node(path, document).ok()?;
    let NodeKind::Array(meta) = parsed.kind else {
        return None;
    };
    let meta = meta.read_by_inner_chunk();
    let geometry = &job.layout.geometry;
    let shards = meta.sharded.as_ref()?;
    let same = meta.chunk_shape == geometry.inner_shape()
        && shards.shard_shape == geometry.shard_shape()
        && shards.rectilinear.is_none()
        && meta.data_type == job.layout.inner_repr.data_type;
    same.then(|| zshard_zarr::array_chunk_reader(destination, path, &meta))
}
