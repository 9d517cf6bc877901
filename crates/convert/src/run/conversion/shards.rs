//! Which shards a run converts: this worker's shards not done yet, with the shards of a
//! pyramid's lower levels that they feed.

use super::*;
use zshard_state::Outputs;

/// This worker's shards that are not done yet, in enumeration order.
pub(super) fn pending<'a>(
    jobs: &'a [ArrayJob],
    owners: &'a Outputs<'a>,
    partition: Partition,
    done: &'a [HashSet<u64>],
) -> impl Iterator<Item = ShardTask> + 'a {
    ShardTask::all(jobs)
        .enumerate()
        .filter_map(move |(global, task)| {
            let grid = jobs[task.array].layout.geometry.shard_grid();
            let index = linear_index(&task.shard, &grid);
            let owned = owns(owners, partition, &task, index, global as u64);
            (owned && !done[task.array].contains(&index)).then_some(task)
        })
}

/// Whether `partition` makes `task`'s shard (C-order `index` in its array, `global` in the global
/// enumeration), by the rule of `owners` (see [`zshard_state::Owner`]).
fn owns(owners: &Outputs, partition: Partition, task: &ShardTask, index: u64, global: u64) -> bool {
    owners.owns(partition, task.array, index, global.saturating_sub(index))
}

/// The shards this run converts: those of `partition` not `done`, and, in a conversion that makes a
/// pyramid, also those done whose blocks a shard of a lower level not done yet still needs (the
/// lower levels are made from level 0 as it is converted, never read back). Shards of the lower
/// levels are never tasks: the pipeline makes them.
pub(super) fn to_run<'a>(
    jobs: &'a [ArrayJob],
    owners: &'a Outputs<'a>,
    partition: Partition,
    done: &'a [HashSet<u64>],
) -> impl Iterator<Item = ShardTask> + 'a {
    ShardTask::all(jobs)
        .enumerate()
        .filter_map(move |(global, task)| {
            let job = &jobs[task.array];
            if job.derived.is_some() {
                return None;
            }
            let grid = job.layout.geometry.shard_grid();
            let index = linear_index(&task.shard, &grid);
            if !owns(owners, partition, &task, index, global as u64) {
                return None;
            }
            let undone = !done[task.array].contains(&index);
            (undone || feeds_undone(jobs, done, &task)).then_some(task)
        })
}

/// `tasks` and the shards of the pyramid levels the pipeline makes from them: those whose every
/// shard of the level above is a task or made (for the work ahead).
pub(super) fn with_made(
    jobs: &[ArrayJob],
    tasks: impl Iterator<Item = ShardTask>,
) -> Vec<ShardTask> {
    let mut all: Vec<ShardTask> = tasks.collect();
    if jobs.iter().all(|job| job.derived.is_none()) {
        return all;
    }
    let mut made: Vec<HashSet<u64>> = vec![HashSet::new(); jobs.len()];
    for task in &all {
        let grid = jobs[task.array].layout.geometry.shard_grid();
        made[task.array].insert(linear_index(&task.shard, &grid));
    }
    // Levels come after the level above them in the plan.
    for (index, job) in jobs.iter().enumerate() {
        let Some(derived) = &job.derived else {
            continue;
        };
        let above = &jobs[derived.from].layout.geometry;
        let above_grid = above.shard_grid();
        let geometry = &job.layout.geometry;
        let grid = geometry.shard_grid();
        for linear in 0..zshard_core::product(&grid) {
            let shard = zshard_core::unravel_index(linear, &grid);
            let Some(region) = geometry
                .shard_region(&shard)
                .intersect(&geometry.array_region())
            else {
                continue;
            };
            let up = zshard_core::Region {
                start: region
                    .start
                    .iter()
                    .zip(&derived.factors)
                    .map(|(s, f)| s * f)
                    .collect(),
                shape: region
                    .shape
                    .iter()
                    .zip(&derived.factors)
                    .map(|(n, f)| n * f)
                    .collect(),
            };
            let Some(up) = up.intersect(&above.array_region()) else {
                continue;
            };
            let fed = up
                .chunks_overlapping(above.shard_shape())
                .iter()
                .all(|s| made[derived.from].contains(&linear_index(s, &above_grid)));
            if fed {
                made[index].insert(linear);
                all.push(ShardTask::new(index, shard));
            }
        }
    }
    all
}

/// Whether a shard of a level below `task`'s array that `task`'s shard brings blocks to is not done.
pub(super) fn feeds_undone(jobs: &[ArrayJob], done: &[HashSet<u64>], task: &ShardTask) -> bool {
    let geometry = &jobs[task.array].layout.geometry;
    let Some(mut region) = geometry
        .shard_region(&task.shard)
        .intersect(&geometry.array_region())
    else {
        return false;
    };
    let mut above = task.array;
    while let Some((below, job)) = jobs
        .iter()
        .enumerate()
        .find(|(_, j)| j.derived.as_ref().is_some_and(|d| d.from == above))
    {
        let Some(derived) = &job.derived else {
            break;
        };
        let end: Vec<u64> = region
            .end()
            .iter()
            .zip(&derived.factors)
            .map(|(e, f)| e.div_ceil(*f))
            .collect();
        let start: Vec<u64> = region
            .start
            .iter()
            .zip(&derived.factors)
            .map(|(s, f)| s / f)
            .collect();
        let shape = end.iter().zip(&start).map(|(e, s)| e - s).collect();
        region = zshard_core::Region { start, shape };
        let below_geometry = &job.layout.geometry;
        let grid = below_geometry.shard_grid();
        let shards = region.chunks_overlapping(below_geometry.shard_shape());
        if shards
            .iter()
            .any(|shard| !done[below].contains(&linear_index(shard, &grid)))
        {
            return true;
        }
        above = below;
    }
    false
}
