//! Pyramid levels made while the run converts the level above (issue 41), in the assemble stage.
//!
//! Every inner chunk of a level that has a level below it is reduced (a map, on rayon) into a
//! block of the level below while it is in memory, on its way to the encoder; the blocks go to
//! this assembler, keyed by the shard of the level below that they fall in (the one piece of
//! state). A shard whose every element has arrived is cut into inner chunks and parts and goes
//! to the encoder like any shard, and is itself reduced into the level below it. The source is
//! read once; no level is read back from the output. Shards of the level below wait here until
//! the last shard of the level above that covers them is done: with tasks in C order that is at
//! most a slab of them (see the memory model in `zshard-convert`).

use std::collections::HashMap;

use rayon::prelude::*;
use zshard_core::downsample::{downsample, downsampled_shape};
use zshard_core::{copy_region, product, Region, StringTable};

use super::message::{Assembled, ReadCounts, ShardKey, ShardPart};
use super::RunContext;
use crate::error::{Error, Result};
use crate::job::ShardTask;

/// The shards of derived levels being assembled, and which jobs are made from which.
pub(super) struct Pyramid {
    /// By job: the jobs derived from it.
    children: HashMap<usize, Vec<usize>>,
    open: HashMap<ShardKey, OpenShard>,
}

/// A shard of a derived level that is still waiting for blocks.
struct OpenShard {
    /// The whole shard, C order, the fill value where no block has come (or none will: past the
    /// array's end).
    buffer: Vec<u8>,
    /// Elements inside the array that no block has brought yet.
    remaining: u64,
}

/// A block of a derived level: its region there, and its values (`None`: the fill value).
type Block = (Region, Option<Vec<u8>>);

impl Pyramid {
    pub(super) fn new(ctx: &RunContext<'_>) -> Self {
        let mut children: HashMap<usize, Vec<usize>> = HashMap::new();
        for (index, array) in ctx.arrays.iter().enumerate() {
            if let Some(derived) = &array.job.derived {
                children.entry(derived.from).or_default().push(index);
            }
        }
        Pyramid {
            children,
            open: HashMap::new(),
        }
    }

    /// Whether any job is made from the job `array`.
    pub(super) fn feeds(&self, array: usize) -> bool {
        self.children.contains_key(&array)
    }

    /// Reduces the inner chunks of `assembled` into the levels below its array: returns the parts of
    /// the shards of those levels (and of the levels below them) that it completes.
    pub(super) fn feed(
        &mut self,
        ctx: &RunContext<'_>,
        assembled: &Assembled,
    ) -> Result<Vec<Assembled>> {
        let parent = assembled.part.task.array;
        let mut out = Vec::new();
        for child in self.children.get(&parent).cloned().unwrap_or_default() {
            let blocks = inner_blocks(ctx, child, assembled)?;
            for (region, data) in blocks {
                self.place(ctx, child, &region, data.as_deref(), &mut out)?;
            }
        }
        Ok(out)
    }

    /// Puts a block into the shards of `child` it falls in, completing those it fills.
    fn place(
        &mut self,
        ctx: &RunContext<'_>,
        child: usize,
        block: &Region,
        data: Option<&[u8]>,
        out: &mut Vec<Assembled>,
    ) -> Result<()> {
        let layout = &ctx.array(child).job.layout;
        let geometry = &layout.geometry;
        let element = layout.element_size();
        let array = geometry.array_region();
        for shard in block.chunks_overlapping(geometry.shard_shape()) {
            let region = geometry.shard_region(&shard);
            let Some(overlap) = block.intersect(&region) else {
                continue;
            };
            let key = (child, shard.clone());
            let open = self.open.entry(key.clone()).or_insert_with(|| OpenShard {
                buffer: layout
                    .inner_repr
                    .fill_value
                    .repeat(product(geometry.shard_shape()) as usize),
                remaining: region
                    .intersect(&array)
                    .map_or(0, |inside| product(&inside.shape)),
            });
            if let Some(data) = data {
                copy_region(
                    data,
                    &block.shape,
                    &block.start,
                    &mut open.buffer,
                    geometry.shard_shape(),
                    &region.start,
                    &overlap,
                    element,
                );
            }
            open.remaining = open.remaining.saturating_sub(product(&overlap.shape));
            if open.remaining == 0 {
                if let Some(done) = self.open.remove(&key) {
                    self.complete(ctx, child, shard, done.buffer, out)?;
                }
            }
        }
        Ok(())
    }

    /// A shard of `array` that every block has reached: its parts for the encoder, and its blocks
    /// for the levels below it.
    fn complete(
        &mut self,
        ctx: &RunContext<'_>,
        array: usize,
        shard: Vec<u64>,
        buffer: Vec<u8>,
        out: &mut Vec<Assembled>,
    ) -> Result<()> {
        let run_array = ctx.array(array);
        let layout = &run_array.job.layout;
        let geometry = &layout.geometry;
        let element = layout.element_size();
        let region = geometry.shard_region(&shard);
        let inside = region.intersect(&geometry.array_region());
        for child in self.children.get(&array).cloned().unwrap_or_default() {
            let Some(inside) = &inside else { continue };
            let block = reduce(ctx, child, &buffer, geometry.shard_shape(), inside)?;
            self.place(ctx, child, &block.0, block.1.as_deref(), out)?;
        }
        let fill = &layout.inner_repr.fill_value;
        let inner_elements = product(geometry.inner_shape()) as usize;
        let count = product(&geometry.chunks_per_shard());
        let mut inner: Vec<Option<Vec<u8>>> = (0..count)
            .into_par_iter()
            .map(|i| {
                let chunk = geometry.inner_region(&shard, i);
                let covered = chunk.intersect(inside.as_ref()?)?;
                let mut data = fill.repeat(inner_elements);
                copy_region(
                    &buffer,
                    geometry.shard_shape(),
                    &region.start,
                    &mut data,
                    geometry.inner_shape(),
                    &chunk.start,
                    &covered,
                    element,
                );
                (!fill.fills(&data)).then_some(data)
            })
            .collect();
        let parts = run_array.split.parts();
        let mut cut = Vec::with_capacity(parts as usize);
        for index in (0..parts).rev() {
            let range = run_array.split.inner_range(index);
            let tail = inner.split_off(range.start as usize);
            cut.push(Assembled {
                part: ShardPart {
                    task: ShardTask::new(array, shard.clone()),
                    index,
                    count: parts,
                    // Made from the level above, not from source chunks: nothing to hand over.
                    earlier: Vec::new().into(),
                    later: Vec::new().into(),
                    chain: None,
                    permit: None,
                },
                first_inner: range.start,
                inner: tail,
                copied: Vec::new(),
                strings: StringTable::default(),
                read: ReadCounts::default(),
            });
        }
        out.extend(cut.into_iter().rev());
        Ok(())
    }
}

/// The blocks of `child` that the inner chunks of `assembled` (of the level above) reduce to, one per
/// inner chunk inside the array, on rayon.
fn inner_blocks(ctx: &RunContext<'_>, child: usize, assembled: &Assembled) -> Result<Vec<Block>> {
    let geometry = &ctx.array(assembled.part.task.array).job.layout.geometry;
    let array = geometry.array_region();
    assembled
        .inner
        .par_iter()
        .enumerate()
        .filter_map(|(i, data)| {
            let chunk =
                geometry.inner_region(&assembled.part.task.shard, assembled.first_inner + i as u64);
            let covered = chunk.intersect(&array)?;
            Some(match data {
                Some(data) => reduce(ctx, child, data, geometry.inner_shape(), &covered),
                // Only the fill value: every reduction of it is the fill value.
                None => block_region(ctx, child, &covered).map(|region| (region, None)),
            })
        })
        .collect()
}

/// The block of `child` that `data` (a buffer of `shape` of the level above whose first element is
/// at `covered.start`, holding values in `covered`) reduces to.
fn reduce(
    ctx: &RunContext<'_>,
    child: usize,
    data: &[u8],
    shape: &[u64],
    covered: &Region,
) -> Result<Block> {
    let job = ctx.array(child).job;
    let region = block_region(ctx, child, covered)?;
    let Some(derived) = &job.derived else {
        return Ok((region, None));
    };
    let values = downsample(
        job.layout.inner_repr.data_type,
        derived.reduction,
        data,
        shape,
        &covered.shape,
        &derived.factors,
        derived.masked.as_deref(),
    )
    .map_err(|source| Error::Downsample {
        array: job.name.clone(),
        region: format!("{:?}+{:?}", covered.start, covered.shape),
        source: Box::new(source),
    })?;
    Ok((region, Some(values)))
}

/// Where the values of `covered` (of the level above) land in `child`.
fn block_region(ctx: &RunContext<'_>, child: usize, covered: &Region) -> Result<Region> {
    let job = ctx.array(child).job;
    let factors = job
        .derived
        .as_ref()
        .map_or_else(|| vec![1; covered.start.len()], |d| d.factors.clone());
    // Blocks never straddle two buffers: the planner gives every level inner chunks and shards of
    // even extent along the axes that shrink (or one chunk for the whole axis).
    if covered
        .start
        .iter()
        .zip(&factors)
        .any(|(start, factor)| start % factor != 0)
    {
        return Err(Error::Downsample {
            array: job.name.clone(),
            region: format!("{:?}+{:?}", covered.start, covered.shape),
            source: Box::new(zshard_core::Error::InvalidGeometry {
                reason: format!(
                    "the region of the level above starts at an odd element along an axis that \
                     shrinks (factors {factors:?})"
                ),
            }),
        });
    }
    Ok(Region {
        start: covered
            .start
            .iter()
            .zip(&factors)
            .map(|(s, f)| s / f)
            .collect(),
        shape: downsampled_shape(&covered.shape, &factors),
    })
}
