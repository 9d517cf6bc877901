//! Cheap rewrites (issue 40): a shard that an update rewrites because some of its source chunks
//! changed copies its other inner chunks, encoded, from the shard as it stands, instead of reading,
//! decoding and encoding them again. Each record names the digests of its shard's inner chunks
//! (see `digests.rs`); an inner chunk whose digest is the same now covers the same region and was
//! made from the same versions of the same source chunks, so its stored bytes are what converting
//! it again would write.
//!
//! Only into a Zarr destination whose shards stand as recorded (see
//! [`zshard_state::reusable_inner_digests`]), or from an Icechunk destination's shards at the
//! snapshot of zshard's commit of them (which holds them as recorded, see [`Reuse::for_commit`]),
//! read through the finished conversion's own `zarr.json` (metadata is written last, so it still
//! describes the shards being rewritten; an Icechunk destination's staging folder keeps it), with
//! the same inner chunk shape, shard shape and data type. Not for pyramids (their lower levels are
//! made from level 0's assembled chunks) nor for variable-size types.

use std::collections::HashMap;
use std::sync::Arc;

use zshard_core::{linear_index, ArrayMeta, ChunkVersions, NodeKind};
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
    pub(crate) fn for_run(
        jobs: &mut [ArrayJob],
        plan: &Plan,
        destination: Option<&Store>,
        survey: &Survey,
        listed: &Listed,
    ) -> Reuse {
        let Some(destination) = destination else {
            return Reuse {
                arrays: jobs.iter().map(|_| None).collect(),
            };
        };
        let recorded =
            zshard_state::reusable_inner_digests(survey, &plan.outputs(), &listed.digests);
        let mut reuse = Reuse::of(jobs, listed, recorded);
        for ((job, array), reused) in jobs.iter_mut().zip(&plan.arrays).zip(&mut reuse.arrays) {
            let meta = reused
                .as_ref()
                .and_then(|_| previous_meta(survey, &array.path, job));
            match meta {
                Some(meta) => {
                    job.previous = Some(zshard_zarr::array_chunk_reader(
                        destination,
                        &array.path,
                        &meta,
                    ))
                }
                None => *reused = None,
            }
        }
        reuse
    }

    /// For an update of a conversion committed into an Icechunk repository (`committed`, at the
    /// snapshot of zshard's commit, which holds the shards as the kept records in `survey`
    /// describe them): gives each array whose shards can be copied the reader of those shards.
    pub(crate) fn for_commit(
        jobs: &mut [ArrayJob],
        plan: &Plan,
        committed: &zshard_icechunk::Committed,
        survey: &Survey,
        listed: &Listed,
    ) -> Reuse {
        let recorded =
            zshard_state::recorded_inner_digests(survey, &plan.outputs(), &listed.digests);
        let mut reuse = Reuse::of(jobs, listed, recorded);
        for ((job, array), reused) in jobs.iter_mut().zip(&plan.arrays).zip(&mut reuse.arrays) {
            let reader = reused
                .as_ref()
                .and_then(|_| previous_meta(survey, &array.path, job))
                .and_then(|meta| committed.shard_reader(&array.path, &meta));
            match reader {
                Some(reader) => job.previous = Some(reader),
                None => *reused = None,
            }
        }
        reuse
    }

    /// What an update planned on a finished destination would copy (`zshard plan`): its survey
    /// lists no shards, so each is taken to stand as recorded.
    pub(crate) fn for_plan(
        jobs: &[ArrayJob],
        plan: &Plan,
        survey: &Survey,
        listed: &Listed,
    ) -> Reuse {
        let recorded =
            zshard_state::recorded_inner_digests(survey, &plan.outputs(), &listed.digests);
        let mut reuse = Reuse::of(jobs, listed, recorded);
        for ((job, array), reused) in jobs.iter().zip(&plan.arrays).zip(&mut reuse.arrays) {
            if previous_meta(survey, &array.path, job).is_none() {
                *reused = None;
            }
        }
        reuse
    }

    /// The arrays whose shards may copy inner chunks: `recorded` (per array, the kept inner
    /// digests of its shards to rewrite), decoded, where the conversion can copy at all.
    fn of(jobs: &[ArrayJob], listed: &Listed, recorded: Vec<HashMap<u64, String>>) -> Reuse {
        // A pyramid's lower levels are made from level 0's assembled inner chunks.
        let pyramid = jobs.iter().any(|job| job.derived.is_some());
        let arrays = jobs
            .iter()
            .zip(recorded)
            .zip(&listed.versions)
            .map(|((job, recorded), versions)| {
                let versions = versions.as_ref()?;
                if pyramid || recorded.is_empty() || job.layout.inner_repr.data_type.is_variable() {
                    return None;
                }
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

    /// The bytes this holds in memory, about (for the run's memory budget: it is kept until the
    /// pipeline ends): per shard the update may rewrite, its inner chunks' recorded digests,
    /// decoded (8 bytes per inner chunk: 128 KiB for a shard of 16,384), in a hash table entry. The
    /// versions are the listing's, counted with it.
    pub(crate) fn memory_bytes(&self) -> u64 {
        let entry = std::mem::size_of::<(u64, Vec<u64>)>();
        self.arrays
            .iter()
            .flatten()
            .map(|array| {
                let digests: usize = array.recorded.values().map(Vec::capacity).sum();
                zshard_core::hash_table_bytes(array.recorded.capacity(), entry)
                    .saturating_add((digests * std::mem::size_of::<u64>()) as u64)
            })
            .fold(0, u64::saturating_add)
    }

    /// One array whose shards `recorded` (C-order index) have these inner digests.
    #[cfg(test)]
    pub(crate) fn with_recorded(recorded: HashMap<u64, Vec<u64>>) -> Reuse {
        Reuse {
            arrays: vec![Some(ArrayReuse {
                recorded,
                versions: Arc::new(ChunkVersions::default()),
            })],
        }
    }

    /// `task` with the inner chunks its shard copies: those whose digest now is the recorded one.
    pub(crate) fn task(&self, jobs: &[ArrayJob], mut task: ShardTask) -> ShardTask {
        task.reuse = self.inner_to_copy(jobs, task.array, &task.shard);
        task
    }

    /// The inner chunks (C-order indices within the shard) that shard `shard` of array `array`
    /// copies; none for a shard converted whole.
    pub(crate) fn inner_to_copy(&self, jobs: &[ArrayJob], array: usize, shard: &[u64]) -> Vec<u64> {
        let Some(Some(reuse)) = self.arrays.get(array) else {
            return Vec::new();
        };
        let layout = &jobs[array].layout;
        let index = linear_index(shard, &layout.geometry.shard_grid());
        let Some(recorded) = reuse.recorded.get(&index) else {
            return Vec::new();
        };
        let now = inner_digests(layout, &reuse.versions, shard);
        if now.len() != recorded.len() {
            return Vec::new();
        }
        // Inner chunks past the array's end hold nothing to copy.
        let geometry = &layout.geometry;
        let inside = geometry.array_region();
        let in_array = |inner: u64| {
            geometry
                .inner_region(shard, inner)
                .intersect(&inside)
                .is_some()
        };
        (0u64..)
            .zip(now.iter().zip(recorded))
            .filter(|(inner, (now, recorded))| now == recorded && in_array(*inner))
            .map(|(inner, _)| inner)
            .collect()
    }
}

/// The metadata of the array at `path` as the finished conversion's `zarr.json` (in `survey`)
/// describes it, read by inner chunk, when its inner chunks are laid out and typed as `job` makes
/// them (the conversion's identity, which an update shares, fixes the codecs).
fn previous_meta(survey: &Survey, path: &str, job: &ArrayJob) -> Option<ArrayMeta> {
    let document = survey.zarr_json(path)?;
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
    same.then_some(meta)
}
