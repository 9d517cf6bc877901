//! What `plan` answers: per array its shapes, chunk and shard counts, codecs, raw sizes and the
//! memory a worker needs, from metadata alone.

use serde_json::{json, Value};
use zshard_core::{grid_shape, product};
use zshard_kerchunk::ReadStats;

use crate::plan::{array_name, Plan, PlannedArray};
use zshard_pipeline::Budget;

/// A checked plan and the budget it runs with.
#[derive(Debug)]
pub struct PlanReport {
    /// Every array and group the conversion writes.
    pub plan: Plan,
    budget: Budget,
    source: String,
    destination: String,
    /// Requests made for a kerchunk reference set while planning (none for other inputs).
    pub reference_reads: Option<ReadStats>,
    /// Where the memory limit came from: given, or which of the machine's limits the default is
    /// half of.
    memory_limit_source: String,
    /// The chunks of an Icechunk source by kind (none for other inputs).
    pub icechunk_chunks: Option<zshard_icechunk::ChunkCounts>,
    /// An Icechunk output: the branch committed to and the repository's spec version (none for
    /// plain Zarr).
    pub icechunk_output: Option<(String, zshard_icechunk::DestinationSpec)>,
    /// What the whole job (every worker's shards) would request from storage.
    pub cost: Option<Cost>,
    /// How long the job's storage traffic would take and what its requests would cost, with what
    /// that assumes (none where no cost was counted).
    pub estimate: Option<crate::plan::estimate::Estimate>,
    /// The destination holds a finished conversion that keeps what each shard was made from: what a
    /// run would bring up to date (none otherwise).
    pub update: Option<UpdatePlan>,
}

/// What rerunning a finished conversion would bring up to date, from one listing of the source and
/// the destination's kept records (no chunk read).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct UpdatePlan {
    /// Per array, in hierarchy order.
    pub arrays: Vec<ArrayUpdate>,
    /// What the update would request from storage: one GET per source chunk of each shard to
    /// write (raw sizes: at most), one PUT per shard to write and per metadata document.
    pub cost: Cost,
}

/// What an update would do to one array, and why.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct ArrayUpdate {
    /// The array's path in the hierarchy.
    pub path: String,
    /// Shards whose source chunks changed, appeared or disappeared, or whose extent changed.
    pub shards_to_rewrite: u64,
    /// Shards the finished conversion does not have (the array grew, or is new).
    pub shards_to_add: u64,
    /// Shards beyond the array's extent now (it shrank), which zshard wrote: removed.
    pub shards_to_remove: u64,
    /// The shape differs from the destination's.
    pub shape_changed: bool,
    /// The attributes differ from the destination's.
    pub attributes_changed: bool,
    /// Inner chunks of the shards to rewrite and add that are converted from the source: those
    /// made from source chunks that changed, appeared or disappeared, or whose extent changed.
    pub inner_chunks_to_convert: u64,
    /// Inner chunks of the shards to rewrite copied, encoded, from the shards as they stand (their
    /// source chunks did not change).
    pub inner_chunks_to_copy: u64,
}

impl UpdatePlan {
    /// The update of `plan` that `changes` (per array, from the destination's kept records) call
    /// for, and its cost: one GET per source chunk of the inner chunks each shard to write converts,
    /// two for a shard that copies some (its index, then their bytes in ranges coalesced), one PUT
    /// per shard, per metadata document and per array's kept records. `copies` names the inner
    /// chunks a shard copies (array, shard coordinate).
    pub(crate) fn of(
        plan: &Plan,
        jobs: &[zshard_pipeline::ArrayJob],
        changes: &[zshard_state::ArrayChanges],
        copies: &dyn Fn(usize, &[u64]) -> Vec<u64>,
    ) -> UpdatePlan {
        let mut update = UpdatePlan::default();
        for (i, ((array, job), change)) in plan.arrays.iter().zip(jobs).zip(changes).enumerate() {
            let grid = array.geometry.shard_grid();
            let shard_raw =
                product(&array.output.shard_shape) * array.output.data_type.size() as u64;
            let inside = array.geometry.array_region();
            let (mut convert, mut copy) = (0, 0);
            for &index in change.rewrite.iter().chain(&change.add) {
                let shard = zshard_core::unravel_index(index, &grid);
                let copied = copies(i, &shard);
                let mut sources = std::collections::HashSet::new();
                for inner in 0..array.geometry.chunks_per_shard().iter().product::<u64>() {
                    let region = array
                        .geometry
                        .inner_region(&shard, inner)
                        .intersect(&inside);
                    let Some(region) = region else { continue };
                    if copied.binary_search(&inner).is_ok() {
                        continue;
                    }
                    convert += 1;
                    sources.extend(job.layout.source_chunks_overlapping(&region));
                }
                copy += copied.len() as u64;
                update.cost.get_requests += sources.len() as u64;
                if !copied.is_empty() {
                    update.cost.get_requests += 2;
                }
                update.cost.get_bytes += shard_raw;
                update.cost.put_requests += 1;
                update.cost.put_bytes += shard_raw;
            }
            update.arrays.push(ArrayUpdate {
                path: array.path.clone(),
                shards_to_rewrite: change.rewrite.len() as u64,
                shards_to_add: change.add.len() as u64,
                shards_to_remove: change.remove,
                shape_changed: change.shape_changed,
                attributes_changed: change.attributes_changed,
                inner_chunks_to_convert: convert,
                inner_chunks_to_copy: copy,
            });
        }
        if !update.is_empty() {
            update.cost.put_requests += (2 * plan.arrays.len() + plan.groups.len()) as u64;
        }
        update
    }

    /// Whether the update would write nothing.
    pub fn is_empty(&self) -> bool {
        self.arrays.iter().all(|a| {
            a.shards_to_rewrite + a.shards_to_add + a.shards_to_remove == 0
                && !a.shape_changed
                && !a.attributes_changed
        })
    }
}

/// The requests and bytes a whole conversion would take from storage: a cost estimate a migration
/// can be budgeted with. GETs of a kerchunk reference set are counted from its byte ranges (of a
/// Parquet set, for arrays of at most 64 reference files, which the plan reads: see
/// `zshard_kerchunk`'s `PLANNED_RECORD_FILES`), coalesced as an unpartitioned run's fetchers
/// coalesce them when the window has room (a run
/// partitioned over workers reads shards that are not neighbours, so it coalesces less); other
/// sources count one GET per source chunk and its raw size (an upper bound: missing chunks cost a
/// GET that finds nothing, compressed chunks fewer bytes). PUTs count one per shard (a shard of
/// only fill is not written), its multipart parts (with the create and complete requests) on
/// object stores when its raw size exceeds the part size, and one per metadata document; PUT
/// bytes are raw sizes, an upper bound for compressing codecs.
///
/// Beside those counts of data (issue 44): the bytes the source chunks are stored in (from one
/// listing of each array's chunks, or its references' lengths) next to their raw upper bound, and
/// every request of the job by kind on each side, the listings, HEADs and the state's files
/// (claim, records, manifest: see `plan/estimate.rs`) included. An update's
/// cost ([`UpdatePlan::cost`]) counts its data alone: its other fields are 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct Cost {
    /// GET requests for source chunks.
    pub get_requests: u64,
    /// Bytes those GETs request.
    pub get_bytes: u64,
    /// Whether every array's GETs were counted from its references' byte ranges (else some are one
    /// per source chunk, an upper bound).
    pub gets_from_references: bool,
    /// PUT requests (shards, multipart parts, metadata documents).
    pub put_requests: u64,
    /// Bytes those PUTs send (raw sizes: an upper bound).
    pub put_bytes: u64,
    /// Raw (decoded) bytes of every source chunk the job reads: an upper bound on what it reads.
    pub raw_bytes_in: u64,
    /// Bytes the source chunks the job reads are stored in: from one listing of each array's
    /// stored chunks (an already sharded source's shards, indexes included; an Icechunk
    /// repository's manifests), or the byte ranges its references name, coalesced as the run
    /// reads them. `None` when some array's cannot be told (a source that cannot be listed).
    pub stored_bytes_in: Option<u64>,
    /// Every request the job makes of the source, by kind: the chunks' GETs (as `get_requests`)
    /// and the listings that tell what each chunk is (a run lists each array's chunks once when
    /// its source names their versions).
    pub source_requests: crate::plan::estimate::Requests,
    /// Every request the job makes of the destination, by kind: the shards' and documents' PUTs
    /// (as `put_requests`) and the state's (`state_requests`).
    pub destination_requests: crate::plan::estimate::Requests,
    /// The state's requests by file (part of `destination_requests`; none for an Icechunk output,
    /// which keeps no zshard state, and whose commit is not counted).
    pub state_requests: crate::plan::estimate::StateRequests,
}

impl Cost {
    /// The cost of `plan`: `reads` per array (`None` where its reader cannot tell unread), shards
    /// of more than `part_size` raw bytes uploaded in parts when `multipart` (an object store).
    pub(crate) fn of(
        plan: &Plan,
        reads: &[Option<zshard_core::PlannedReads>],
        part_size: u64,
        multipart: bool,
    ) -> Cost {
        let mut cost = Cost {
            gets_from_references: !plan.arrays.is_empty(),
            ..Cost::default()
        };
        for (i, a) in plan.arrays.iter().enumerate() {
            let size = a.output.data_type.size() as u64;
            let raw = product(&a.source.shape) * size;
            let made = plan.made_from_above(&a.path).is_some();
            match reads.get(i).copied().flatten() {
                // A pyramid level made from the level above reads nothing.
                _ if made => {}
                Some(reads) => {
                    cost.get_requests += reads.requests;
                    cost.get_bytes += reads.bytes;
                    cost.raw_bytes_in += raw;
                }
                None => {
                    cost.raw_bytes_in += raw;
                    cost.gets_from_references = false;
                    cost.get_requests += product(&a.source.rectilinear.as_ref().map_or_else(
                        || grid_shape(&a.source.shape, &a.source.chunk_shape),
                        |grid| grid.grid_shape(),
                    ));
                    cost.get_bytes += raw;
                }
            }
            let shards = a.geometry.shard_count();
            let shard_raw = product(&a.output.shard_shape) * size;
            let per_shard = if multipart && part_size > 0 && shard_raw > part_size {
                shard_raw.div_ceil(part_size) + 2
            } else {
                1
            };
            cost.put_requests += shards * per_shard + 1;
            cost.put_bytes += raw;
        }
        cost.put_requests += plan.groups.len() as u64;
        cost
    }
}

impl PlanReport {
    /// What readers will see differently in the output than in the source (see
    /// [`Observer::warning`](crate::Observer::warning)), one message per thing, naming the array.
    pub fn warnings(&self) -> Vec<String> {
        self.plan.reader_warnings(&self.source)
    }

    pub(crate) fn new(
        plan: Plan,
        budget: Budget,
        source: String,
        destination: String,
        reference_reads: Option<ReadStats>,
    ) -> Self {
        PlanReport {
            plan,
            budget,
            source,
            destination,
            reference_reads,
            memory_limit_source: String::new(),
            icechunk_chunks: None,
            icechunk_output: None,
            cost: None,
            estimate: None,
            update: None,
        }
    }

    pub(crate) fn with_memory_limit_source(self, source: String) -> Self {
        PlanReport {
            memory_limit_source: source,
            ..self
        }
    }

    /// Where the memory limit came from, e.g. `default: half of 8589934592 bytes, from
    /// SLURM_MEM_PER_NODE` or `given (--memory-limit)`.
    pub fn memory_limit_source(&self) -> &str {
        &self.memory_limit_source
    }

    /// Worker threads per CPU stage the conversion would use.
    pub fn threads(&self) -> usize {
        self.budget.threads
    }

    /// Threads fetching chunks and threads writing shards (each) the conversion would use.
    pub fn io_threads(&self) -> usize {
        self.budget.io_threads
    }

    /// The memory limit the budget was made for, in bytes.
    pub fn memory_limit(&self) -> Option<u64> {
        self.budget.limit
    }

    /// The source, as messages name it.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The destination, as given.
    pub fn destination(&self) -> &str {
        &self.destination
    }

    /// Each array of the plan as its JSON document in [`PlanReport::to_json`]'s `arrays`, made one
    /// at a time (a plan of 30,000 arrays as one JSON value took hundreds of MB; issue 31).
    pub fn array_docs(&self) -> impl Iterator<Item = Value> + '_ {
        self.plan.arrays.iter().map(|a| {
            describe(
                a,
                &array_name(&self.source, &a.path),
                &self.budget,
                &self.plan,
            )
        })
    }

    /// The `totals` of [`PlanReport::to_json`], summed array by array.
    pub fn totals(&self) -> Value {
        let (mut arrays, mut shards, mut chunks, mut bytes_in, mut bytes_out, mut peak) =
            (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
        for a in self.array_docs() {
            let u = |k: &str| a[k].as_u64().unwrap_or(0);
            arrays += 1;
            shards += u("shards");
            chunks += u("source_chunks");
            bytes_in += u("estimated_bytes_in");
            bytes_out += u("estimated_bytes_out");
            peak = peak.max(u("estimated_peak_memory_per_worker"));
        }
        json!({"arrays": arrays, "shards": shards, "source_chunks": chunks,
               "estimated_bytes_in": bytes_in, "estimated_bytes_out": bytes_out,
               "estimated_peak_memory_per_worker": peak})
    }

    /// The plan as a JSON document (what `zshard plan --json` prints).
    pub fn to_json(&self) -> Value {
        let arrays: Vec<Value> = self.array_docs().collect();
        let mut doc = json!({
            "source": self.source,
            "destination": self.destination,
            "threads": self.budget.threads,
            "io_threads": self.budget.io_threads,
            "memory_limit": self.budget.limit,
            "memory_limit_source": self.memory_limit_source,
            "part_bytes": self.budget.part_bytes,
            "arrays": arrays,
            "groups": self.plan.groups.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            "warnings": self.warnings(),
            // Arrays left out (`--on-unsupported skip`): path and reason.
            "skipped_arrays": self.plan.skipped,
            "totals": self.totals(),
        });
        if let Some(cost) = &self.cost {
            doc["cost"] = json!(cost);
        }
        if let Some(estimate) = &self.estimate {
            doc["estimate"] = json!(estimate);
        }
        if let Some(update) = &self.update {
            doc["update"] = json!(update);
        }
        if let Some(c) = self.icechunk_chunks {
            doc["icechunk_chunks"] =
                json!({"native": c.native, "inline": c.inline, "virtual": c.virtual_});
        }
        if let Some((branch, spec)) = &self.icechunk_output {
            doc["icechunk_output"] = json!({"branch": branch, "spec_version": spec.version.number(),
                                            "repository_exists": spec.exists});
        }
        doc
    }
}

fn describe(a: &PlannedArray, name: &str, budget: &Budget, plan: &Plan) -> Value {
    let size = a.output.data_type.size() as u64;
    let raw = product(&a.source.shape) * size;
    let layout = a.layout();
    let made = plan.made_from_above(&a.path);
    json!({
        // A level of a pyramid this conversion makes (`--pyramid`) from the level above, read from
        // no source chunk; `null` for an array read from its source.
        "made_from": made.map(|(above, reduction)| json!({"path": above, "downsample": reduction.name()})),
        "path": a.path,
        "name": name,
        "shape": a.source.shape,
        "data_type": a.output.data_type.to_v3_json(),
        "fill_value": a.output.fill_value.to_v3_json(a.output.data_type),
        // On a rectilinear grid: its largest chunk (which memory is sized by); the grid is
        // `source_chunk_grid`.
        "source_chunk_shape": a.source.chunk_shape,
        // `null` for a regular grid; a rectilinear one by its chunks per dimension and the smallest
        // and largest edge of each.
        "source_chunk_grid": a.source.rectilinear.as_ref().map(|grid| json!({
            "name": "rectilinear",
            "chunks": grid.grid_shape(),
            "smallest_chunk": grid.smallest_chunk(),
            "largest_chunk": grid.largest_chunk(),
        })),
        // An already sharded source is read by inner chunk: these are its inner chunks.
        "source_shard_shape": a.source.sharded.as_ref().map(|s| s.shard_shape.clone()),
        "source_chunks": if made.is_some() { 0 } else { product(&a.source.rectilinear.as_ref().map_or_else(
            || grid_shape(&a.source.shape, &a.source.chunk_shape),
            |grid| grid.grid_shape()
        )) },
        "source_codecs": a.source.codecs,
        // Names of the dimensions (null when the source gives none), which shapes by name refer to.
        "dimension_names": a.output.dimension_names,
        // Its place in a multiscale (OME-Zarr) pyramid, whose levels' shapes follow the first's.
        "pyramid": a.level.as_ref().map(|l| json!({"group": l.group, "level": l.level})),
        "inner_chunk_shape": a.output.inner_shape,
        "shard_shape": a.output.shard_shape,
        "shards": a.geometry.shard_count(),
        "inner_chunks_per_shard": product(&a.geometry.chunks_per_shard()),
        "index_location": a.output.index_location.as_str(),
        "output_codecs": a.output.inner_codecs,
        "passthrough": a.passthrough,
        // `--compressor source` could not keep the source's codecs: why (the default was used).
        "compressor_fallback": a.compressor_fallback,
        // Compressed sizes depend on the data, which plan never reads: these are raw sizes, an upper
        // bound on the data read and, for compressing codecs, on the data written.
        "estimated_bytes_in": if made.is_some() { 0 } else { raw },
        "estimated_bytes_out": raw,
        "parts_per_shard": budget.parts_per_shard(&layout),
        // Whether a source chunk under several parts of a shard is read once (kept between them).
        "source_chunks_kept_between_parts": budget.keeps_source_chunks(&layout),
        "estimated_peak_memory_per_worker": budget.array_peak(&layout),
        "warnings": a.source.warnings,
    })
}
