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
    /// two for a shard that copies some (its index, then their bytes in ranges coalesced), one for
    /// a shard of one part (`parts`, per array) from a `remote` destination that copies enough of
    /// them to be read with its index ([`zshard_zarr::reads_shard_with_index`]), one PUT per shard,
    /// per metadata document and per array's kept records. `copies` names the inner
    /// chunks a shard copies (array, shard coordinate).
    pub(crate) fn of(
        plan: &Plan,
        jobs: &[zshard_pipeline::ArrayJob],
        changes: &[zshard_state::ArrayChanges],
        copies: &dyn Fn(usize, &[u64]) -> Vec<u64>,
        parts: &dyn Fn(usize) -> u64,
        remote: bool,
    ) -> UpdatePlan {
        let mut update = UpdatePlan::default();
        for (i, ((array, job), change)) in plan.arrays.iter().zip(jobs).zip(changes).enumerate() {
            let grid = array.geometry.shard_grid();
            let shard_raw =
                product(&array.output.shard_shape) * array.output.data_type.size() as u64;
            let inside = array.geometry.array_region();
            let (mut convert, mut copy) = (0, 0);
            let per_shard: u64 = array.geometry.chunks_per_shard().iter().product();
            let one_part = parts(i) == 1;
            let max_inner_len = job.max_inner_len();
            for &index in change.rewrite.iter().chain(&change.add) {
                let shard = zshard_core::unravel_index(index, &grid);
                let copied = copies(i, &shard);
                let mut sources = std::collections::HashSet::new();
                for inner in 0..per_shard {
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
                    let with_index = remote
                        && one_part
                        && zshard_zarr::reads_shard_with_index(
                            copied.len() as u64,
                            per_shard,
                            max_inner_len,
                        );
                    update.cost.get_requests += if with_index { 1 } else { 2 };
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
        self.array_plans().map(|a| json!(a))
    }

    /// Each array of the plan as its document, made one at a time.
    fn array_plans(&self) -> impl Iterator<Item = ArrayPlan> + '_ {
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
        json!(self.plan_totals())
    }

    fn plan_totals(&self) -> PlanTotals {
        let mut totals = PlanTotals::default();
        for a in self.array_plans() {
            totals.arrays += 1;
            totals.shards += a.shards;
            totals.source_chunks += a.source_chunks;
            totals.estimated_bytes_in += a.estimated_bytes_in;
            totals.estimated_bytes_out += a.estimated_bytes_out;
            totals.estimated_peak_memory_per_worker = totals
                .estimated_peak_memory_per_worker
                .max(a.estimated_peak_memory_per_worker);
        }
        totals
    }

    /// The plan as its document (what `zshard plan --json` prints, [`PlanReport::to_json`]).
    pub fn document(&self) -> PlanDocument {
        PlanDocument {
            source: self.source.clone(),
            destination: self.destination.clone(),
            threads: self.budget.threads,
            io_threads: self.budget.io_threads,
            memory_limit: self.budget.limit,
            memory_limit_source: self.memory_limit_source.clone(),
            part_bytes: self.budget.part_bytes,
            arrays: self.array_plans().collect(),
            groups: self.plan.groups.iter().map(|(p, _)| p.clone()).collect(),
            warnings: self.warnings(),
            skipped_arrays: self.plan.skipped.clone(),
            totals: self.plan_totals(),
            cost: self.cost,
            estimate: self.estimate.clone(),
            update: self.update.clone(),
            icechunk_chunks: self.icechunk_chunks.map(|c| IcechunkChunks {
                native: c.native,
                inline: c.inline,
                virtual_: c.virtual_,
            }),
            icechunk_output: self.icechunk_output.as_ref().map(|(branch, spec)| {
                IcechunkOutputPlan {
                    branch: branch.clone(),
                    spec_version: spec.version.number(),
                    repository_exists: spec.exists,
                }
            }),
        }
    }

    /// The plan as a JSON document (what `zshard plan --json` prints).
    pub fn to_json(&self) -> Value {
        json!(self.document())
    }
}

/// The plan document: what `zshard plan --json` prints and Python's `zshard.plan` reads.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct PlanDocument {
    /// The source's location.
    pub source: String,
    /// The destination's location.
    pub destination: String,
    /// Worker threads per CPU stage the conversion would use.
    pub threads: usize,
    /// Threads fetching chunks and threads writing shards, each.
    pub io_threads: usize,
    /// The memory limit the plan was made for, in bytes.
    pub memory_limit: Option<u64>,
    /// Where the memory limit came from (given, or which of the machine's limits the default is
    /// half of).
    pub memory_limit_source: String,
    /// The size of the parts shards are written in.
    pub part_bytes: u64,
    /// Every array converted, in hierarchy order.
    pub arrays: Vec<ArrayPlan>,
    /// Group paths written (the root is `""`).
    pub groups: Vec<String>,
    /// What readers will see differently in the output than in the source.
    pub warnings: Vec<String>,
    /// Arrays left out (`--on-unsupported skip`): path and reason.
    pub skipped_arrays: Vec<crate::SkippedArray>,
    /// Sums over the arrays.
    pub totals: PlanTotals,
    /// What the whole job would request from storage: the source's stored bytes beside their raw
    /// upper bound, and every request by kind on each side, the state's included.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// How long the job's storage traffic would take and what its requests would cost, with the
    /// assumptions the estimate is made from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub estimate: Option<crate::plan::estimate::Estimate>,
    /// What rerunning a finished conversion that keeps what each shard was made from would bring
    /// up to date.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update: Option<UpdatePlan>,
    /// An Icechunk source's chunks by kind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icechunk_chunks: Option<IcechunkChunks>,
    /// An Icechunk output: the branch committed to and the repository's spec version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icechunk_output: Option<IcechunkOutputPlan>,
}

/// The sums of a plan over its arrays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct PlanTotals {
    /// Arrays converted.
    pub arrays: u64,
    /// Shards written.
    pub shards: u64,
    /// Source chunks read.
    pub source_chunks: u64,
    /// Raw size read (upper bound).
    pub estimated_bytes_in: u64,
    /// Raw size written (upper bound for compressing codecs).
    pub estimated_bytes_out: u64,
    /// The largest array's peak memory per worker.
    pub estimated_peak_memory_per_worker: u64,
}

/// An Icechunk source's chunks by kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct IcechunkChunks {
    /// Chunks stored in the repository.
    pub native: u64,
    /// Chunks stored inside the manifests.
    pub inline: u64,
    /// References into other files.
    #[serde(rename = "virtual")]
    pub virtual_: u64,
}

/// Where a conversion into an Icechunk repository would commit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct IcechunkOutputPlan {
    /// The branch committed to.
    pub branch: String,
    /// The repository's spec version.
    pub spec_version: u8,
    /// Whether the repository exists already.
    pub repository_exists: bool,
}

/// One array of a plan document.
#[derive(Debug, Clone, PartialEq, serde::Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct ArrayPlan {
    /// For a level of a pyramid the conversion makes (`--pyramid`): the level above it is made
    /// from and the reduction; it reads no source chunk. `null` for an array read from its source.
    pub made_from: Option<MadeFrom>,
    /// Path in the hierarchy (empty for a single array).
    pub path: String,
    /// The array as messages name it (source and path).
    pub name: String,
    /// Extent per dimension.
    pub shape: Vec<u64>,
    /// The Zarr v3 `data_type` (a name, or an object for parametrised types).
    pub data_type: Value,
    /// The Zarr v3 fill value.
    pub fill_value: Value,
    /// The chunks the source is read by (an already sharded source's inner chunks; on a
    /// rectilinear grid, its largest chunk, which memory is sized by).
    pub source_chunk_shape: Vec<u64>,
    /// A rectilinear source grid: `chunks` per dimension, `smallest_chunk` and `largest_chunk`
    /// (`null` for a regular grid).
    pub source_chunk_grid: Option<RectilinearGrid>,
    /// An already sharded source's shard shape.
    pub source_shard_shape: Option<Vec<u64>>,
    /// Chunks in the source's grid (0 for a pyramid level made from the level above).
    pub source_chunks: u64,
    /// The source's codec chain as Zarr v3 codecs.
    #[schemars(with = "Vec<Value>")]
    pub source_codecs: Vec<zshard_core::CodecSpec>,
    /// Names of the dimensions (`null` when the source gives none), which shapes by name refer to.
    pub dimension_names: Option<Vec<Option<String>>>,
    /// Its place in a multiscale (OME-Zarr) pyramid, whose levels' shapes follow the first's.
    pub pyramid: Option<PyramidPlace>,
    /// The output's inner chunk shape.
    pub inner_chunk_shape: Vec<u64>,
    /// The output's shard shape.
    pub shard_shape: Vec<u64>,
    /// Shards in the output's grid.
    pub shards: u64,
    /// Inner chunks in one shard.
    pub inner_chunks_per_shard: u64,
    /// `start` or `end`.
    pub index_location: &'static str,
    /// The inner chunks' codec chain.
    #[schemars(with = "Vec<Value>")]
    pub output_codecs: Vec<zshard_core::CodecSpec>,
    /// Source chunks are copied into the shards without decoding.
    pub passthrough: bool,
    /// Why `--compressor source` could not keep the source's codecs (the default was used).
    pub compressor_fallback: Option<String>,
    /// Raw (uncompressed) size: an upper bound on the data read (compressed sizes depend on the
    /// data, which plan never reads).
    pub estimated_bytes_in: u64,
    /// Raw size: an upper bound on the data written by compressing codecs.
    pub estimated_bytes_out: u64,
    /// Parts a shard is processed and written in under the memory limit.
    pub parts_per_shard: u64,
    /// A source chunk under several parts of a shard is read once (kept between them).
    pub source_chunks_kept_between_parts: bool,
    /// A source chunk under several parts of a shard is kept between them only within one row of
    /// parts (the memory limit fits no more): it is read again for a part more than a row of parts
    /// after the last that needed it.
    pub source_chunks_kept_within_rows: bool,
    /// Bytes a worker needs at most for this array.
    pub estimated_peak_memory_per_worker: u64,
    /// What readers will see differently.
    pub warnings: Vec<String>,
}

/// The level of a pyramid a level is made from, and how.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct MadeFrom {
    /// The level above.
    pub path: String,
    /// The reduction (`mean`, `mode`, ...).
    pub downsample: &'static str,
}

/// A rectilinear source grid, by its chunks per dimension and the smallest and largest edge of each.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct RectilinearGrid {
    /// `rectilinear`.
    pub name: &'static str,
    /// Chunks per dimension.
    pub chunks: Vec<u64>,
    /// The smallest chunk edge per dimension.
    pub smallest_chunk: Vec<u64>,
    /// The largest chunk edge per dimension.
    pub largest_chunk: Vec<u64>,
}

/// An array's place in a multiscale (OME-Zarr) pyramid.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
#[non_exhaustive]
pub struct PyramidPlace {
    /// The multiscale group's path.
    pub group: String,
    /// The level (0 is the full resolution).
    pub level: usize,
}

fn describe(a: &PlannedArray, name: &str, budget: &Budget, plan: &Plan) -> ArrayPlan {
    let size = a.output.data_type.size() as u64;
    let raw = product(&a.source.shape) * size;
    let layout = a.layout();
    let made = plan.made_from_above(&a.path);
    ArrayPlan {
        made_from: made.map(|(above, reduction)| MadeFrom {
            path: above.to_string(),
            downsample: reduction.name(),
        }),
        path: a.path.clone(),
        name: name.to_string(),
        shape: a.source.shape.clone(),
        data_type: a.output.data_type.to_v3_json(),
        fill_value: a.output.fill_value.to_v3_json(a.output.data_type),
        source_chunk_shape: a.source.chunk_shape.clone(),
        source_chunk_grid: a.source.rectilinear.as_ref().map(|grid| RectilinearGrid {
            name: "rectilinear",
            chunks: grid.grid_shape(),
            smallest_chunk: grid.smallest_chunk(),
            largest_chunk: grid.largest_chunk(),
        }),
        source_shard_shape: a.source.sharded.as_ref().map(|s| s.shard_shape.clone()),
        // A pyramid level made from the level above reads no source chunk.
        source_chunks: if made.is_some() {
            0
        } else {
            product(&a.source.rectilinear.as_ref().map_or_else(
                || grid_shape(&a.source.shape, &a.source.chunk_shape),
                |grid| grid.grid_shape(),
            ))
        },
        source_codecs: a.source.codecs.clone(),
        dimension_names: a.output.dimension_names.clone(),
        pyramid: a.level.as_ref().map(|l| PyramidPlace {
            group: l.group.clone(),
            level: l.level,
        }),
        inner_chunk_shape: a.output.inner_shape.clone(),
        shard_shape: a.output.shard_shape.clone(),
        shards: a.geometry.shard_count(),
        inner_chunks_per_shard: product(&a.geometry.chunks_per_shard()),
        index_location: a.output.index_location.as_str(),
        output_codecs: a.output.inner_codecs.clone(),
        passthrough: a.passthrough,
        compressor_fallback: a.compressor_fallback.clone(),
        // Compressed sizes depend on the data, which plan never reads: these are raw sizes, an upper
        // bound on the data read and, for compressing codecs, on the data written.
        estimated_bytes_in: if made.is_some() { 0 } else { raw },
        estimated_bytes_out: raw,
        parts_per_shard: budget.parts_per_shard(&layout),
        source_chunks_kept_between_parts: budget.keeps_source_chunks(&layout),
        source_chunks_kept_within_rows: budget.keeps_source_chunks_within_rows(&layout),
        estimated_peak_memory_per_worker: budget.array_peak(&layout),
        warnings: a.source.warnings.clone(),
    }
}
