//! What makes a conversion resumable and safe to spread over workers, kept under `DST/.zshard/`:
//!
//! - `options/<worker>.json`: the conversion each worker was started with (source and every output
//!   `zarr.json`). A run with different options into the same destination is refused.
//! - `empty/<worker>-<run>-<seq>.txt`: shards found to hold only the fill value (so never written),
//!   one `array-path<TAB>i,j,...` per line, flushed in batches.
//! - `uploads/<worker>/<run>-<seq>.json`: multipart uploads in flight (object path and upload id),
//!   so that the next run of the worker, or `finalize`, aborts those a kill left open.
//!
//! A written shard needs no record: shard objects only ever appear complete, so listing them is enough.
//! Every key is written by one worker only. Once the metadata is written the conversion is complete,
//! its metadata is the record of that, and the state folder is removed (Zarr readers would otherwise
//! list it as an unknown member of the root group).

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde_json::{json, Value};
use zshard_core::linear_index;
use zshard_store::Store;

use crate::error::{Error, Result};
use crate::partition::Partition;
use crate::plan::Plan;

/// The folder of a conversion's state.
pub(crate) const STATE_DIR: &str = ".zshard";
const OPTIONS_DIR: &str = ".zshard/options";
const EMPTY_DIR: &str = ".zshard/empty";
const UPLOADS_DIR: &str = ".zshard/uploads";
/// Present while `--overwrite` clears a destination.
const OVERWRITING: &str = ".zshard/overwriting";

/// What identifies a conversion.
pub(crate) fn fingerprint(source_id: &str, plan: &Plan) -> Value {
    let arrays: Vec<Value> = plan
        .arrays
        .iter()
        .map(|a| json!({"path": a.path, "zarr.json": a.output.to_json()}))
        .collect();
    json!({"zshard_state": 1, "source": source_id, "arrays": arrays})
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}/{key}")
    }
}

/// What a destination holds for this conversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Prepared {
    /// Nothing yet, or an interrupted run with the same options: convert what is not done.
    Run,
    /// The metadata this conversion writes is already there: it completed before.
    Complete,
}

/// Checks the destination against this run and records its options. With `overwrite`, a destination
/// holding anything is cleared first (single-process runs only: a worker must never delete what another
/// one wrote).
pub(crate) fn prepare(
    dst: &Store,
    plan: &Plan,
    fingerprint: &Value,
    partition: Partition,
    overwrite: bool,
) -> Result<Prepared> {
    let records = dst.list_keys(OPTIONS_DIR)?;
    if overwrite {
        if !dst.list_keys("")?.is_empty() {
            if !partition.is_all() {
                return Err(Error::Destination {
                    reason: format!(
                        "--overwrite cannot be combined with a partitioned run; empty {} first",
                        dst.url("")
                    ),
                });
            }
            // The marker goes first and leaves last: if this is interrupted, old shards may remain, and
            // a later run must not take them for done ones of its own.
            dst.put(
                OVERWRITING,
                Bytes::from_static(b"an --overwrite is clearing this destination\n"),
            )?;
            for key in dst.list_keys("")? {
                if key != OVERWRITING {
                    dst.delete(&key)?;
                }
            }
            dst.delete(OVERWRITING)?;
        }
    } else if dst.get(OVERWRITING)?.is_some() {
        return Err(Error::Destination {
            reason: format!(
                "an --overwrite of {} was interrupted; rerun with --overwrite to finish clearing it",
                dst.url("")
            ),
        });
    } else if records.is_empty() && has_metadata(dst, plan)? {
        if metadata_matches(dst, plan)? {
            return Ok(Prepared::Complete);
        }
        return Err(Error::Destination {
            reason: format!(
                "{} already holds Zarr metadata that differs from this conversion (different options, or not written by zshard); use --overwrite to replace it",
                dst.url("")
            ),
        });
    } else if records.is_empty() {
        // Every run records its options before it writes a shard, so a shard without a record was
        // not written by a run of this conversion (a finished one whose metadata was removed, or data
        // from elsewhere): resuming would take it for done.
        if let Some(key) = first_shard(dst, plan)? {
            return Err(Error::Destination {
                reason: format!(
                    "{} holds {} but no record of the zshard conversion that wrote it, so its shards cannot be trusted; use --overwrite to replace it",
                    dst.url(""),
                    dst.url(&key)
                ),
            });
        }
    } else if let Some(key) = conflicting_record(dst, fingerprint)? {
        return Err(Error::Destination {
            reason: format!(
                "{} holds a conversion with different options (see {}); rerun with the same options to resume it, or use --overwrite to replace it",
                dst.url(""),
                dst.url(&key)
            ),
        });
    }
    let text = serde_json::to_vec_pretty(fingerprint).map_err(|source| Error::Serialize {
        what: "the conversion's options",
        source,
    })?;
    dst.put(
        &join(OPTIONS_DIR, &format!("{}.json", partition.tag())),
        Bytes::from(text),
    )?;
    Ok(Prepared::Run)
}

/// Whether any node of the plan already has a `zarr.json` in the destination.
fn has_metadata(dst: &Store, plan: &Plan) -> Result<bool> {
    let paths = plan
        .arrays
        .iter()
        .map(|a| a.path.as_str())
        .chain(plan.groups.iter().map(|(p, _)| p.as_str()));
    for path in paths {
        if dst.get(&join(path, "zarr.json"))?.is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether every array's `zarr.json` in the destination is exactly the one this conversion writes and
/// every group has one.
fn metadata_matches(dst: &Store, plan: &Plan) -> Result<bool> {
    for array in &plan.arrays {
        let Some(bytes) = dst.get(&join(&array.path, "zarr.json"))? else {
            return Ok(false);
        };
        let existing: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if existing != array.output.to_json() {
            return Ok(false);
        }
    }
    for (path, _) in &plan.groups {
        if dst.get(&join(path, "zarr.json"))?.is_none() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Removes the state folder once the metadata is written.
pub(crate) fn clear(dst: &Store) -> Result<()> {
    for key in dst.list_keys(".zshard")? {
        dst.delete(&key)?;
    }
    Ok(())
}

/// The key of a recorded conversion whose options differ from `fingerprint`, if any.
fn conflicting_record(dst: &Store, fingerprint: &Value) -> Result<Option<String>> {
    for key in dst.list_keys(OPTIONS_DIR)? {
        let Some(bytes) = dst.get(&key)? else {
            continue;
        };
        let recorded: Value = serde_json::from_slice(&bytes).map_err(|source| Error::State {
            key: dst.url(&key),
            source,
        })?;
        if &recorded != fingerprint {
            return Ok(Some(key));
        }
    }
    Ok(None)
}

/// Checks, without recording anything, that the destination's recorded options equal `fingerprint`;
/// `Complete` when it was finalized before with the same options.
pub(crate) fn check_recorded(dst: &Store, plan: &Plan, fingerprint: &Value) -> Result<Prepared> {
    if dst.list_keys(OPTIONS_DIR)?.is_empty() {
        if has_metadata(dst, plan)? && metadata_matches(dst, plan)? {
            return Ok(Prepared::Complete);
        }
        return Err(Error::Destination {
            reason: format!(
                "{} holds no zshard conversion with these options (no {OPTIONS_DIR})",
                dst.url("")
            ),
        });
    }
    if let Some(key) = conflicting_record(dst, fingerprint)? {
        return Err(Error::Destination {
            reason: format!(
                "{} was converted with different options (see {})",
                dst.url(""),
                dst.url(&key)
            ),
        });
    }
    Ok(Prepared::Run)
}

/// Shards already done, per array, as C-order shard indices: written shard objects plus recorded
/// all-fill shards. Leftover temporary files of interrupted writes of `partition`'s shards are removed.
pub(crate) fn done_shards(
    dst: &Store,
    plan: &Plan,
    partition: Partition,
) -> Result<Vec<HashSet<u64>>> {
    let mut done = vec![HashSet::new(); plan.arrays.len()];
    let mut first_global = 0u64;
    for (i, array) in plan.arrays.iter().enumerate() {
        let grid = array.geometry.shard_grid();
        let prefix = join(&array.path, "c");
        for (_, coord) in shard_keys(dst, &prefix, &grid)? {
            done[i].insert(linear_index(&coord, &grid));
        }
        remove_staged_leftovers(dst, &prefix, &grid, |index| {
            partition.owns(first_global + index)
        })?;
        first_global += array.geometry.shard_count();
    }
    for key in dst.list_keys(EMPTY_DIR)? {
        let Some(bytes) = dst.get(&key)? else {
            continue;
        };
        for line in String::from_utf8_lossy(&bytes).lines() {
            let Some((path, coord)) = line.split_once('\t') else {
                continue;
            };
            let Some(i) = plan.arrays.iter().position(|a| a.path == path) else {
                continue;
            };
            let grid = plan.arrays[i].geometry.shard_grid();
            if let Some(coord) = parse_coord(&coord.replace(',', "/"), &grid) {
                done[i].insert(linear_index(&coord, &grid));
            }
        }
    }
    Ok(done)
}

/// The keys below `prefix` (an array's `c`) that are shards of `grid`, with their coordinates.
fn shard_keys(dst: &Store, prefix: &str, grid: &[u64]) -> Result<Vec<(String, Vec<u64>)>> {
    Ok(dst
        .list_keys(prefix)?
        .into_iter()
        .filter_map(|key| {
            let coord = parse_coord(key[prefix.len()..].trim_start_matches('/'), grid)?;
            Some((key, coord))
        })
        .collect())
}

/// The first object at a shard key of the plan, if any.
fn first_shard(dst: &Store, plan: &Plan) -> Result<Option<String>> {
    for array in &plan.arrays {
        let prefix = join(&array.path, "c");
        let grid = array.geometry.shard_grid();
        if let Some((key, _)) = shard_keys(dst, &prefix, &grid)?.into_iter().next() {
            return Ok(Some(key));
        }
    }
    Ok(None)
}

/// Removes the temporary files of interrupted local writes of shards that `owned` selects. The local
/// backend stages each write as `<key>#<n>` and renames it when complete; listings hide such files, so
/// they are found on disk. (An interrupted upload to an object store is never visible at all.)
fn remove_staged_leftovers(
    dst: &Store,
    prefix: &str,
    grid: &[u64],
    owned: impl Fn(u64) -> bool,
) -> Result<()> {
    let Some(root) = dst.local_path(prefix) else {
        return Ok(());
    };
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let Ok(relative) = path.strip_prefix(&root) else {
                continue;
            };
            let relative = relative
                .to_string_lossy()
                .replace(std::path::MAIN_SEPARATOR, "/");
            // Only zshard's staged names (`<key>#<n>`), never another file beside a shard.
            let Some(base) = zshard_store::staged_base(&relative) else {
                continue;
            };
            if let Some(coord) = parse_coord(base, grid) {
                if owned(linear_index(&coord, grid)) {
                    std::fs::remove_file(&path).map_err(|source| Error::File {
                        action: "remove",
                        path: path.clone(),
                        source,
                    })?;
                }
            }
        }
    }
    Ok(())
}

/// Parses `i/j/...` into a coordinate inside `grid`.
fn parse_coord(text: &str, grid: &[u64]) -> Option<Vec<u64>> {
    let coord: Vec<u64> = if text.is_empty() {
        Vec::new()
    } else {
        text.split('/')
            .map(|p| p.parse().ok())
            .collect::<Option<_>>()?
    };
    (coord.len() == grid.len() && coord.iter().zip(grid).all(|(c, g)| c < g)).then_some(coord)
}

/// Batches records of all-fill shards and stores each batch under its own key.
#[derive(Debug)]
pub(crate) struct EmptyLog {
    store: Store,
    prefix: String,
    seq: u64,
    pending: String,
    entries: usize,
    last_flush: Instant,
}

const FLUSH_ENTRIES: usize = 10_000;
const FLUSH_INTERVAL: Duration = Duration::from_secs(10);

impl EmptyLog {
    pub(crate) fn new(store: Store, partition: Partition) -> Self {
        let run = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        EmptyLog {
            store,
            prefix: format!("{EMPTY_DIR}/{}-{run}", partition.tag()),
            seq: 0,
            pending: String::new(),
            entries: 0,
            last_flush: Instant::now(),
        }
    }

    pub(crate) fn record(&mut self, array_path: &str, shard: &[u64]) -> Result<()> {
        let coord: Vec<String> = shard.iter().map(u64::to_string).collect();
        self.pending
            .push_str(&format!("{array_path}\t{}\n", coord.join(",")));
        self.entries += 1;
        if self.entries >= FLUSH_ENTRIES || self.last_flush.elapsed() >= FLUSH_INTERVAL {
            self.flush()?;
        }
        Ok(())
    }

    pub(crate) fn flush(&mut self) -> Result<()> {
        self.last_flush = Instant::now();
        if self.entries == 0 {
            return Ok(());
        }
        let key = format!("{}-{:06}.txt", self.prefix, self.seq);
        self.store
            .put(&key, Bytes::from(std::mem::take(&mut self.pending)))?;
        self.seq += 1;
        self.entries = 0;
        Ok(())
    }
}

/// Aborts the multipart uploads that earlier runs of `partition` left open (all of them for an
/// unpartitioned run, which owns every shard; a worker's own only, as other workers may be uploading
/// now), and returns `dst` recording the uploads of this run.
pub(crate) fn recording_uploads(dst: &Store, partition: Partition) -> Result<Store> {
    let own = format!("{UPLOADS_DIR}/{}", partition.tag());
    let earlier = if partition.is_all() {
        UPLOADS_DIR
    } else {
        &own
    };
    dst.abort_recorded_uploads(earlier)?;
    Ok(dst.with_upload_records(&own))
}

/// Aborts every multipart upload recorded under the destination (before `finalize` writes the
/// metadata and removes the state folder, when no worker runs any more).
pub(crate) fn abort_recorded_uploads(dst: &Store) -> Result<()> {
    dst.abort_recorded_uploads(UPLOADS_DIR)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_coord;

    #[test]
    fn coordinates() {
        assert_eq!(parse_coord("1/2", &[3, 3]), Some(vec![1, 2]));
        assert_eq!(parse_coord("", &[]), Some(vec![]));
        assert_eq!(parse_coord("3/0", &[3, 3]), None);
        assert_eq!(parse_coord("1/2#17", &[3, 3]), None);
        assert_eq!(parse_coord("1", &[3, 3]), None);
    }
}
