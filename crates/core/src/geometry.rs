//! Chunk grids, shard geometry and n-dimensional copies between C-order buffers.

use crate::error::{Error, Result};

/// Product of a shape's extents (1 for a zero-dimensional shape).
pub fn product(shape: &[u64]) -> u64 {
    shape.iter().product()
}

/// The largest buffer (a decoded chunk, inner chunk or shard) zshard agrees to describe: anything
/// larger is corrupt metadata or a mistyped shape, and could not be held in memory anyway.
pub const MAX_BUFFER_BYTES: u64 = 1 << 40;

/// The byte size of a C-order buffer of `shape` with `element_size`-byte elements, checked against
/// overflow and [`MAX_BUFFER_BYTES`]; `what` names the buffer in the error.
pub fn checked_byte_size(what: &str, shape: &[u64], element_size: usize) -> Result<usize> {
    let bytes = shape
        .iter()
        .try_fold(element_size as u64, |acc, &d| acc.checked_mul(d))
        .filter(|&b| b <= MAX_BUFFER_BYTES)
        .and_then(|b| usize::try_from(b).ok());
    bytes.ok_or_else(|| Error::InvalidGeometry {
        reason: format!(
            "{what} {shape:?} of {element_size}-byte elements is larger than {MAX_BUFFER_BYTES} bytes"
        ),
    })
}

/// Number of chunks along each dimension of a regular grid (the last ones may be partial).
pub fn grid_shape(array_shape: &[u64], chunk_shape: &[u64]) -> Vec<u64> {
    array_shape
        .iter()
        .zip(chunk_shape)
        .map(|(&a, &c)| a.div_ceil(c.max(1)))
        .collect()
}

/// Position of `coord` in the C-order enumeration of `shape`.
pub fn linear_index(coord: &[u64], shape: &[u64]) -> u64 {
    coord.iter().zip(shape).fold(0, |acc, (&c, &s)| acc * s + c)
}

/// The coordinate at C-order position `index` of `shape`.
pub fn unravel_index(mut index: u64, shape: &[u64]) -> Vec<u64> {
    let mut coord = vec![0; shape.len()];
    for (c, &s) in coord.iter_mut().zip(shape).rev() {
        *c = index % s.max(1);
        index /= s.max(1);
    }
    coord
}

/// Iterates every coordinate of `shape` in C order (one empty coordinate for a 0-d shape).
pub fn c_order(shape: &[u64]) -> impl Iterator<Item = Vec<u64>> + '_ {
    (0..product(shape)).map(move |i| unravel_index(i, shape))
}

/// An axis-aligned box of elements: a start coordinate and an extent per dimension.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    /// Coordinate of the first element, per dimension.
    pub start: Vec<u64>,
    /// Extent in elements, per dimension (same rank as `start`).
    pub shape: Vec<u64>,
}

impl Region {
    /// The exclusive end coordinate, `start + shape` per dimension.
    pub fn end(&self) -> Vec<u64> {
        self.start
            .iter()
            .zip(&self.shape)
            .map(|(s, n)| s + n)
            .collect()
    }

    /// The overlap of two regions, or `None` when they do not overlap.
    pub fn intersect(&self, other: &Region) -> Option<Region> {
        let mut start = Vec::with_capacity(self.start.len());
        let mut shape = Vec::with_capacity(self.start.len());
        for d in 0..self.start.len() {
            let lo = self.start[d].max(other.start[d]);
            let hi = (self.start[d] + self.shape[d]).min(other.start[d] + other.shape[d]);
            if hi <= lo {
                return None;
            }
            start.push(lo);
            shape.push(hi - lo);
        }
        Some(Region { start, shape })
    }

    /// The region of chunk `coord` in a regular grid, clipped to the array.
    pub fn of_chunk(coord: &[u64], chunk_shape: &[u64], array_shape: &[u64]) -> Region {
        let start: Vec<u64> = coord.iter().zip(chunk_shape).map(|(c, s)| c * s).collect();
        let shape = start
            .iter()
            .zip(chunk_shape)
            .zip(array_shape)
            .map(|((&st, &cs), &a)| cs.min(a.saturating_sub(st)))
            .collect();
        Region { start, shape }
    }

    /// Coordinates of the chunk of a regular grid that holds this region's first element.
    pub fn first_chunk(&self, chunk_shape: &[u64]) -> Vec<u64> {
        self.start
            .iter()
            .zip(chunk_shape)
            .map(|(s, c)| s / c)
            .collect()
    }

    /// Coordinates of every chunk of a regular grid that overlaps this region, in C order.
    pub fn chunks_overlapping(&self, chunk_shape: &[u64]) -> Vec<Vec<u64>> {
        if self.shape.contains(&0) {
            return Vec::new();
        }
        let first = self.first_chunk(chunk_shape);
        let counts: Vec<u64> = self
            .end()
            .iter()
            .zip(chunk_shape)
            .zip(&first)
            .map(|((e, c), f)| (e - 1) / c - f + 1)
            .collect();
        c_order(&counts)
            .map(|offset| offset.iter().zip(&first).map(|(o, f)| o + f).collect())
            .collect()
    }
}

/// Copies the elements of `region` (in array coordinates) from one C-order buffer to another.
/// `src_origin` and `dst_origin` are the array coordinates of each buffer's first element.
#[allow(clippy::too_many_arguments)]
pub fn copy_region(
    src: &[u8],
    src_shape: &[u64],
    src_origin: &[u64],
    dst: &mut [u8],
    dst_shape: &[u64],
    dst_origin: &[u64],
    region: &Region,
    element_size: usize,
) {
    let ndim = region.shape.len();
    if ndim == 0 {
        dst[..element_size].copy_from_slice(&src[..element_size]);
        return;
    }
    let src_strides = strides(src_shape, element_size);
    let dst_strides = strides(dst_shape, element_size);
    let row_bytes = region.shape[ndim - 1] as usize * element_size;
    let base = |origin: &[u64], strides: &[usize]| -> usize {
        (0..ndim)
            .map(|d| (region.start[d] - origin[d]) as usize * strides[d])
            .sum()
    };
    let outer = &region.shape[..ndim - 1];
    walk(
        outer,
        &src_strides[..ndim - 1],
        &dst_strides[..ndim - 1],
        (
            base(src_origin, &src_strides),
            base(dst_origin, &dst_strides),
        ),
        |s, d| dst[d..d + row_bytes].copy_from_slice(&src[s..s + row_bytes]),
    );
}

/// Calls `visit(a, b)` for every coordinate of `shape` in C order, where `a` and `b` are that
/// coordinate's offsets under strides `sa` and `sb` from `bases`. Offsets are updated incrementally,
/// without an allocation or a multiplication per step (this runs for every row of every inner chunk,
/// and for every element of a transposed chunk).
fn walk(
    shape: &[u64],
    sa: &[usize],
    sb: &[usize],
    bases: (usize, usize),
    mut visit: impl FnMut(usize, usize),
) {
    if shape.contains(&0) {
        return;
    }
    let mut coord = vec![0u64; shape.len()];
    let (mut a, mut b) = bases;
    loop {
        visit(a, b);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            coord[d] += 1;
            a += sa[d];
            b += sb[d];
            if coord[d] < shape[d] {
                break;
            }
            a -= sa[d] * shape[d] as usize;
            b -= sb[d] * shape[d] as usize;
            coord[d] = 0;
        }
    }
}

/// Byte strides of a C-order buffer.
pub fn strides(shape: &[u64], element_size: usize) -> Vec<usize> {
    let mut out = vec![element_size; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        out[d] = out[d + 1] * shape[d + 1] as usize;
    }
    out
}

/// Permutes the axes of a C-order buffer: output axis `i` is input axis `order[i]` (numpy's
/// `transpose(order)`).
pub fn transpose(src: &[u8], shape: &[u64], order: &[usize], element_size: usize) -> Vec<u8> {
    let out_shape: Vec<u64> = order.iter().map(|&o| shape[o]).collect();
    let src_strides = strides(shape, element_size);
    let permuted: Vec<usize> = order.iter().map(|&o| src_strides[o]).collect();
    let mut out = Vec::with_capacity(src.len());
    let unused = vec![0; out_shape.len()];
    walk(&out_shape, &permuted, &unused, (0, 0), |s, _| {
        out.extend_from_slice(&src[s..s + element_size]);
    });
    out
}

/// The inverse of a permutation.
pub fn inverse_permutation(order: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; order.len()];
    for (i, &o) in order.iter().enumerate() {
        inv[o] = i;
    }
    inv
}

/// The layout of a sharded array: the array's chunk grid is the shard grid, and each shard holds a
/// regular grid of inner chunks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardGeometry {
    array_shape: Vec<u64>,
    shard_shape: Vec<u64>,
    inner_shape: Vec<u64>,
}

impl ShardGeometry {
    /// Checks that all shapes have the array's rank, are positive, and that inner chunks divide shards.
    pub fn new(array_shape: &[u64], shard_shape: &[u64], inner_shape: &[u64]) -> Result<Self> {
        let ndim = array_shape.len();
        let bad = |reason: String| Err(Error::InvalidGeometry { reason });
        if shard_shape.len() != ndim {
            return bad(format!(
                "shard shape {shard_shape:?} has {} dimensions, the array has {ndim} (shape {array_shape:?})",
                shard_shape.len()
            ));
        }
        if inner_shape.len() != ndim {
            return bad(format!(
                "inner chunk shape {inner_shape:?} has {} dimensions, the array has {ndim} (shape {array_shape:?})",
                inner_shape.len()
            ));
        }
        if shard_shape.contains(&0) || inner_shape.contains(&0) {
            return bad(format!(
                "shard shape {shard_shape:?} and inner chunk shape {inner_shape:?} must be positive"
            ));
        }
        // Shard and inner chunk sizes must fit in memory arithmetic (element size checked by callers).
        checked_byte_size("shard shape", shard_shape, 1)?;
        if array_shape
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))
            .is_none()
        {
            return bad(format!(
                "array shape {array_shape:?} has more elements than fit in 64 bits"
            ));
        }
        // Shard regions are not clipped to the array: the last shard's end must fit in 64 bits too.
        if let Some(d) = (0..ndim).find(|&d| {
            array_shape[d]
                .div_ceil(shard_shape[d])
                .checked_mul(shard_shape[d])
                .is_none()
        }) {
            return bad(format!(
                "array shape {array_shape:?} in shards of {shard_shape:?}: the shards of dimension {d} end past 2^64 elements"
            ));
        }
        if let Some(d) = (0..ndim).find(|&d| !shard_shape[d].is_multiple_of(inner_shape[d])) {
            // A shard larger than the array is the likelier mistake: say so, and what covers it.
            let past_the_array = match shard_shape[d] > array_shape[d] {
                true => format!(
                    "; the shard is larger than the array there ({} > {}): a shard of {} covers the whole dimension",
                    shard_shape[d],
                    array_shape[d],
                    array_shape[d].div_ceil(inner_shape[d]).saturating_mul(inner_shape[d])
                ),
                false => String::new(),
            };
            return bad(format!(
                "inner chunk shape {inner_shape:?} does not divide shard shape {shard_shape:?} (dimension {d}: {} is not a multiple of {}){past_the_array}",
                shard_shape[d], inner_shape[d]
            ));
        }
        Ok(ShardGeometry {
            array_shape: array_shape.to_vec(),
            shard_shape: shard_shape.to_vec(),
            inner_shape: inner_shape.to_vec(),
        })
    }

    /// Extent of the whole array in elements.
    pub fn array_shape(&self) -> &[u64] {
        &self.array_shape
    }
    /// Extent of one shard in elements (the array's chunk shape in the written metadata).
    pub fn shard_shape(&self) -> &[u64] {
        &self.shard_shape
    }
    /// Extent of one inner chunk in elements; divides `shard_shape` in every dimension.
    pub fn inner_shape(&self) -> &[u64] {
        &self.inner_shape
    }

    /// Number of shards along each dimension.
    pub fn shard_grid(&self) -> Vec<u64> {
        grid_shape(&self.array_shape, &self.shard_shape)
    }

    /// Number of shards in the array (the product of [`shard_grid`](Self::shard_grid)).
    pub fn shard_count(&self) -> u64 {
        product(&self.shard_grid())
    }

    /// Inner chunks per shard along each dimension.
    pub fn chunks_per_shard(&self) -> Vec<u64> {
        self.shard_shape
            .iter()
            .zip(&self.inner_shape)
            .map(|(s, i)| s / i)
            .collect()
    }

    /// The full (unclipped) region a shard covers in array coordinates.
    pub fn shard_region(&self, shard: &[u64]) -> Region {
        Region {
            start: shard
                .iter()
                .zip(&self.shard_shape)
                .map(|(c, s)| c * s)
                .collect(),
            shape: self.shard_shape.clone(),
        }
    }

    /// The full (unclipped) region of inner chunk `inner` (C-order index within the shard).
    pub fn inner_region(&self, shard: &[u64], inner: u64) -> Region {
        let local = unravel_index(inner, &self.chunks_per_shard());
        Region {
            start: shard
                .iter()
                .zip(&self.shard_shape)
                .zip(local.iter().zip(&self.inner_shape))
                .map(|((c, s), (l, i))| c * s + l * i)
                .collect(),
            shape: self.inner_shape.clone(),
        }
    }

    /// The inner chunks of `region` (a box of whole inner chunks, such as a shard or a part of one)
    /// that start inside the array: those a shard stores. The padding of a shard past the array's end
    /// holds none, so progress does not count it.
    pub fn chunks_inside(&self, region: &Region) -> u64 {
        region
            .start
            .iter()
            .zip(&region.shape)
            .zip(self.array_shape.iter().zip(&self.inner_shape))
            .map(|((&start, &extent), (&array, &inner))| {
                let inner = inner.max(1);
                array
                    .saturating_sub(start)
                    .div_ceil(inner)
                    .min(extent / inner)
            })
            .product()
    }

    /// The whole array as a region.
    pub fn array_region(&self) -> Region {
        Region {
            start: vec![0; self.array_shape.len()],
            shape: self.array_shape.clone(),
        }
    }
}

/// How a shard is cut into parts for processing: each part is a box of whole inner chunks that is one
/// contiguous run of the shard's C-order inner chunk indices, so writing the parts in order lays the
/// chunks out exactly as writing the whole shard would. A big shard then never has to be in memory at
/// once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardSplit {
    chunks_per_shard: Vec<u64>,
    /// The dimension cut into blocks; the dimensions before it have extent 1 in a part, those after it
    /// are whole.
    dim: usize,
    /// Inner chunks along `dim` in a part (the last block of a row may be shorter).
    block: u64,
    blocks_per_row: u64,
    /// Inner chunks in one step along `dim` (the product of the later dimensions).
    tail: u64,
}

impl ShardSplit {
    /// Number of parts of each shard.
    pub fn parts(&self) -> u64 {
        product(&self.chunks_per_shard[..self.dim]) * self.blocks_per_row
    }

    /// The dimension cut into blocks of inner chunks: a part is one inner chunk deep along the
    /// dimensions before it and whole along those after it.
    pub fn cut_dimension(&self) -> usize {
        self.dim
    }

    /// Parts in one row: from a part to the one at the same place one step further along the last
    /// dimension before the cut (all the parts when the first dimension is cut).
    pub fn parts_per_row(&self) -> u64 {
        self.blocks_per_row
    }

    /// The shape of one row of parts (see [`ShardSplit::parts_per_row`]): one inner chunk along
    /// the dimensions before the cut, the whole shard along the others.
    pub fn row_shape(&self, geometry: &ShardGeometry) -> Vec<u64> {
        let inner = geometry.inner_shape();
        let mut shape = geometry.shard_shape().to_vec();
        for (d, extent) in shape.iter_mut().enumerate().take(self.dim) {
            *extent = inner[d];
        }
        shape
    }

    /// The C-order indices (within the shard) of part `part`'s inner chunks.
    pub fn inner_range(&self, part: u64) -> std::ops::Range<u64> {
        let (row, lo, hi) = self.row_block(part);
        let along = self.along();
        (row * along + lo) * self.tail..(row * along + hi) * self.tail
    }

    /// Inner chunks along the cut dimension (1 for a scalar array, whose one chunk is one part).
    fn along(&self) -> u64 {
        self.chunks_per_shard.get(self.dim).copied().unwrap_or(1)
    }

    /// The full (unclipped) region of part `part` of `shard`, in array coordinates.
    pub fn region(&self, geometry: &ShardGeometry, shard: &[u64], part: u64) -> Region {
        let (row, lo, hi) = self.row_block(part);
        let prefix = unravel_index(row, &self.chunks_per_shard[..self.dim]);
        let shard_start = geometry.shard_region(shard).start;
        let inner = geometry.inner_shape();
        let (start, shape) = (0..inner.len())
            .map(|d| {
                let (first, count) = match d.cmp(&self.dim) {
                    std::cmp::Ordering::Less => (prefix[d], 1),
                    std::cmp::Ordering::Equal => (lo, hi - lo),
                    std::cmp::Ordering::Greater => (0, self.chunks_per_shard[d]),
                };
                (shard_start[d] + first * inner[d], count * inner[d])
            })
            .unzip();
        Region { start, shape }
    }

    /// The shape (in elements) of a shard's biggest part, its first one.
    pub fn largest_part_shape(&self, geometry: &ShardGeometry) -> Vec<u64> {
        let origin = vec![0; geometry.array_shape().len()];
        self.region(geometry, &origin, 0).shape
    }

    /// The first and the last part of `shard` that meet `region` (array coordinates), or `None` when
    /// it misses the shard. Parts between the two need not meet it. A source chunk that several parts
    /// need is read for the first and kept until the last.
    pub fn parts_meeting(
        &self,
        geometry: &ShardGeometry,
        shard: &[u64],
        region: &Region,
    ) -> Option<(u64, u64)> {
        let shard_region = geometry.shard_region(shard);
        let overlap = region.intersect(&shard_region)?;
        let inner = geometry.inner_shape();
        if inner.is_empty() {
            return Some((0, 0));
        }
        let (mut first, mut last) = (0, 0);
        // Parts form a grid: one inner chunk per step in the dimensions before `dim`, blocks along it.
        for (d, &size) in inner.iter().enumerate().take(self.dim + 1) {
            let offset = overlap.start[d] - shard_region.start[d];
            let (lo, hi) = (offset / size, (offset + overlap.shape[d] - 1) / size);
            let (lo, hi, steps) = if d < self.dim {
                (lo, hi, self.chunks_per_shard[d])
            } else {
                (lo / self.block, hi / self.block, self.blocks_per_row)
            };
            first = first * steps + lo;
            last = last * steps + hi;
        }
        Some((first, last))
    }

    /// Every part of `shard` that meets `region` (array coordinates), ascending: the parts form a
    /// grid, and those meeting a box are a box of it, so this lists a handful for a source chunk
    /// rather than testing every part of the shard.
    pub fn parts_meeting_each(
        &self,
        geometry: &ShardGeometry,
        shard: &[u64],
        region: &Region,
    ) -> Vec<u64> {
        let shard_region = geometry.shard_region(shard);
        let Some(overlap) = region.intersect(&shard_region) else {
            return Vec::new();
        };
        let inner = geometry.inner_shape();
        if inner.is_empty() {
            return vec![0];
        }
        // Per dimension of the part grid: the first index met, how many, and the grid's extent.
        let ranges: Vec<(u64, u64, u64)> = inner
            .iter()
            .enumerate()
            .take(self.dim + 1)
            .map(|(d, &size)| {
                let offset = overlap.start[d] - shard_region.start[d];
                let (lo, hi) = (offset / size, (offset + overlap.shape[d] - 1) / size);
                if d < self.dim {
                    (lo, hi - lo + 1, self.chunks_per_shard[d])
                } else {
                    let (lo, hi) = (lo / self.block, hi / self.block);
                    (lo, hi - lo + 1, self.blocks_per_row)
                }
            })
            .collect();
        let counts: Vec<u64> = ranges.iter().map(|r| r.1).collect();
        c_order(&counts)
            .map(|at| {
                at.iter()
                    .zip(&ranges)
                    .fold(0, |index, (i, (lo, _, steps))| index * steps + lo + i)
            })
            .collect()
    }

    /// The extent of one step of the part grid along the first dimension, whole along the others:
    /// everything that a shard keeps between its parts meets one such slab (a kept source chunk meets
    /// both a part already done and one still to come, so it meets the slab of the part in between).
    pub fn slab_shape(&self, geometry: &ShardGeometry) -> Vec<u64> {
        let mut shape = geometry.shard_shape().to_vec();
        if let Some(first) = shape.first_mut() {
            let inner = geometry.inner_shape().first().copied().unwrap_or(1);
            *first = if self.dim == 0 {
                (self.block * inner).min(*first)
            } else {
                inner
            };
        }
        shape
    }

    /// The row (index over the dimensions before `dim`) and the block `lo..hi` along `dim` of a part.
    fn row_block(&self, part: u64) -> (u64, u64, u64) {
        let (row, block) = (part / self.blocks_per_row, part % self.blocks_per_row);
        let lo = block * self.block;
        let hi = (lo + self.block).min(self.along());
        (row, lo, hi)
    }
}

impl ShardGeometry {
    /// Cuts each shard into parts of at most `part_bytes` raw bytes of inner chunks of `element_size`
    /// bytes per element (at least one chunk per part).
    pub fn split_by_bytes(&self, part_bytes: u64, element_size: usize) -> ShardSplit {
        let chunk_bytes = product(&self.inner_shape).saturating_mul(element_size.max(1) as u64);
        self.split(part_bytes / chunk_bytes.max(1))
    }

    /// Cuts each shard into as few parts as possible of at most `max_chunks` inner chunks each (at least
    /// one chunk per part).
    pub fn split(&self, max_chunks: u64) -> ShardSplit {
        let chunks_per_shard = self.chunks_per_shard();
        let max_chunks = max_chunks.max(1);
        let tail_of = |d: usize| product(&chunks_per_shard[d + 1..]);
        // The outermost dimension whose later dimensions fit in one part; the last always does.
        let dim = (0..chunks_per_shard.len())
            .find(|&d| tail_of(d) <= max_chunks)
            .unwrap_or(0);
        if chunks_per_shard.is_empty() {
            return ShardSplit {
                chunks_per_shard,
                dim: 0,
                block: 1,
                blocks_per_row: 1,
                tail: 1,
            };
        }
        let tail = tail_of(dim);
        let along = chunks_per_shard[dim];
        let block = (max_chunks / tail).clamp(1, along);
        ShardSplit {
            blocks_per_row: along.div_ceil(block),
            chunks_per_shard,
            dim,
            block,
            tail,
        }
    }
}

/// Raw shard size (bytes) that the automatic shard shape aims for.
pub const AUTO_SHARD_TARGET_BYTES: u64 = 64 << 20;

/// Most inner chunks the automatic shard shape puts in a shard. A shard's index (16 bytes per inner
/// chunk) stays in memory until the shard is complete: with tiny inner chunks a 64 MiB shard would
/// hold millions of them, and its index would outweigh its data (one-element chunks: 8 times).
pub const AUTO_SHARD_MAX_CHUNKS: u64 = 1 << 20;

/// Picks a shard shape for `--shard-shape` when the user gives none: start from the inner chunk and
/// double the dimension with the fewest inner chunks per shard (the last dimension on ties), as long as
/// the shard's raw size stays within [`AUTO_SHARD_TARGET_BYTES`], its inner chunks within
/// [`AUTO_SHARD_MAX_CHUNKS`], and the shard does not grow past the array's extent rounded up to whole
/// inner chunks. Zero extents (refused by [`ShardGeometry::new`]) count as one.
pub fn auto_shard_shape(array_shape: &[u64], inner_shape: &[u64], element_size: usize) -> Vec<u64> {
    auto_shard_shape_around(
        array_shape,
        inner_shape,
        element_size,
        &vec![None; inner_shape.len()],
        AUTO_SHARD_MAX_CHUNKS,
    )
}

/// [`auto_shard_shape`] with some extents given (`Some`, kept as they are, as a shard shape given by
/// dimension name fixes only the named dimensions): only the other dimensions are grown, by the same
/// rule, counting the given extents in the shard's size and inner chunks, and up to `max_chunks`
/// inner chunks (at most [`AUTO_SHARD_MAX_CHUNKS`]; lower where the shard index of so many would
/// not fit a memory limit).
pub fn auto_shard_shape_around(
    array_shape: &[u64],
    inner_shape: &[u64],
    element_size: usize,
    given: &[Option<u64>],
    max_chunks: u64,
) -> Vec<u64> {
    let max_chunks = max_chunks.min(AUTO_SHARD_MAX_CHUNKS);
    let inner_shape: Vec<u64> = inner_shape.iter().map(|&i| i.max(1)).collect();
    let inner_shape = inner_shape.as_slice();
    let mut shard: Vec<u64> = inner_shape
        .iter()
        .zip(given)
        .map(|(&i, g)| g.unwrap_or(i))
        .collect();
    let limit: Vec<u64> = array_shape
        .iter()
        .zip(inner_shape)
        .map(|(&a, &i)| a.div_ceil(i).max(1).saturating_mul(i))
        .collect();
    loop {
        let bytes = shard
            .iter()
            .fold(element_size as u64, |acc, &n| acc.saturating_mul(n));
        let chunks = shard
            .iter()
            .zip(inner_shape)
            .fold(1u64, |acc, (s, i)| acc.saturating_mul(s.div_ceil(*i)));
        let candidate = (0..shard.len())
            .filter(|&d| given.get(d).is_some_and(Option::is_none) && shard[d] < limit[d])
            .min_by_key(|&d| (shard[d] / inner_shape[d], std::cmp::Reverse(d)));
        match candidate {
            Some(d)
                if bytes.saturating_mul(2) <= AUTO_SHARD_TARGET_BYTES
                    && chunks.saturating_mul(2) <= max_chunks =>
            {
                shard[d] = (shard[d] * 2).min(limit[d]);
            }
            _ => return shard,
        }
    }
}

/// The shard and inner chunk shapes of one level of a multiscale pyramid, from the first level's
/// (`first_shard`, `first_inner`, as resolved for it) and the level's downsampling `factors` per
/// dimension (how many first-level elements one element of this level spans; 2 for a level of half
/// the resolution). A shard covers about the same region of the image at every level: its extent is
/// the first level's divided by the factor, in whole inner chunks, at least one inner chunk. Inner
/// chunks keep the first level's shape (readers fetch the same amount per chunk at every level).
/// Neither is cut to the level's extent (Zarr lets a chunk reach past the array's end): the shapes
/// stay the same when the level grows or shrinks, so a rerun over a grown source brings a pyramid
/// up to date instead of finding its small levels laid out otherwise (issue 40). Factors that are
/// not positive numbers count as 1.
pub fn level_shapes(
    first_shard: &[u64],
    first_inner: &[u64],
    factors: &[f64],
    level_shape: &[u64],
) -> (Vec<u64>, Vec<u64>) {
    let dims = first_shard
        .iter()
        .zip(first_inner)
        .zip(factors)
        .zip(level_shape);
    dims.map(|(((&shard, &inner), &factor), _)| {
        let inner = inner.max(1);
        let factor = if factor.is_finite() && factor > 0.0 {
            factor
        } else {
            1.0
        };
        // Rounded down, so that a level's shard never holds more elements than the first level's.
        let wanted = ((shard as f64 / factor) / inner as f64).floor() as u64;
        (wanted.max(1) * inner, inner)
    })
    .unzip()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 44, point 8: a shard larger than its array, not a multiple of the inner chunk, says so.
    #[test]
    fn a_shard_larger_than_the_array_says_so() {
        let e = ShardGeometry::new(&[73, 144], &[100, 144], &[73, 144])
            .expect_err("73 does not divide 100")
            .to_string();
        assert!(
            e.contains("the shard is larger than the array there (100 > 73): a shard of 73 covers the whole dimension"),
            "{e}"
        );
        let e = ShardGeometry::new(&[730], &[100], &[30])
            .expect_err("30 does not divide 100")
            .to_string();
        assert!(!e.contains("larger than the array"), "{e}");
    }

    #[test]
    fn chunks_inside_leave_out_the_padding() {
        // Shards of 64 x 40 x 40 over 100 x 60 x 40, inner chunks of 16 x 10 x 20.
        let g = ShardGeometry::new(&[100, 60, 40], &[64, 40, 40], &[16, 10, 20]).expect("test");
        assert_eq!(g.chunks_inside(&g.shard_region(&[0, 0, 0])), 4 * 4 * 2);
        // Rows 64..128 hold 36 of the array's: 3 chunk rows; columns 40..80 hold 20: 2.
        assert_eq!(g.chunks_inside(&g.shard_region(&[1, 1, 0])), 3 * 2 * 2);
        let all: u64 = (0..2)
            .flat_map(|i| (0..2).map(move |j| [i, j, 0]))
            .map(|shard| g.chunks_inside(&g.shard_region(&shard)))
            .sum();
        assert_eq!(all, 7 * 6 * 2, "the array's own chunks, each once");
        let scalar = ShardGeometry::new(&[], &[], &[]).expect("scalar");
        assert_eq!(scalar.chunks_inside(&scalar.shard_region(&[])), 1);
    }

    #[test]
    fn pyramid_levels_get_shards_of_the_same_region_within_the_level() {
        // 4096^2 in 1024^2 shards of 256^2: half resolution halves the shard.
        let shapes = |factors: &[f64], level: &[u64]| {
            level_shapes(&[1, 1024, 1024], &[1, 256, 256], factors, level)
        };
        assert_eq!(
            shapes(&[1.0, 2.0, 2.0], &[3, 2048, 2048]),
            (vec![1, 512, 512], vec![1, 256, 256])
        );
        // Never smaller than one inner chunk.
        assert_eq!(
            shapes(&[1.0, 8.0, 8.0], &[3, 512, 512]),
            (vec![1, 256, 256], vec![1, 256, 256])
        );
        // Whatever the level's extent: a level of 100 columns keeps inner chunks of 256, and one
        // of 300 x 300 shards of 512 (the shapes stay when the level grows).
        assert_eq!(
            shapes(&[1.0, 16.0, 16.0], &[3, 256, 100]),
            (vec![1, 256, 256], vec![1, 256, 256])
        );
        assert_eq!(
            shapes(&[1.0, 2.0, 2.0], &[3, 300, 300]),
            (vec![1, 512, 512], vec![1, 256, 256])
        );
        assert_eq!(
            shapes(&[1.0, 2.0, 2.0], &[3, 2048, 2048]),
            shapes(&[1.0, 2.0, 2.0], &[3, 9, 10])
        );
        // A factor of 3 rounds down to whole inner chunks; a bad factor counts as 1.
        assert_eq!(
            shapes(&[f64::NAN, 3.0, 0.0], &[3, 4096, 4096]),
            (vec![1, 256, 1024], vec![1, 256, 256])
        );
    }

    #[test]
    fn parts_meeting_finds_the_first_and_last_part_a_region_meets() {
        let g = ShardGeometry::new(&[100, 60, 40], &[64, 40, 40], &[16, 10, 20]).expect("test");
        let shard = [1, 0, 0];
        for max in [1, 2, 3, 5, 8, 9, 16, 32] {
            let split = g.split(max);
            let slab = split.slab_shape(&g);
            // Source chunks of a grid that straddles the inner chunks.
            for coord in g.shard_region(&shard).chunks_overlapping(&[7, 13, 11]) {
                let chunk = Region::of_chunk(&coord, &[7, 13, 11], g.array_shape());
                let meets: Vec<u64> = (0..split.parts())
                    .filter(|&p| split.region(&g, &shard, p).intersect(&chunk).is_some())
                    .collect();
                let expected = meets.first().map(|&f| (f, meets[meets.len() - 1]));
                assert_eq!(
                    split.parts_meeting(&g, &shard, &chunk),
                    expected,
                    "max {max} {coord:?}"
                );
                assert_eq!(
                    split.parts_meeting_each(&g, &shard, &chunk),
                    meets,
                    "max {max} {coord:?}"
                );
                // Kept between parts `p` and `p + 1`: it meets the slab holding the end of part `p`.
                if let Some((first, last)) = expected {
                    for p in first..last {
                        let end = split.region(&g, &shard, p);
                        let slab = Region {
                            start: end
                                .start
                                .iter()
                                .enumerate()
                                .map(|(d, &s)| {
                                    if d == 0 {
                                        s
                                    } else {
                                        g.shard_region(&shard).start[d]
                                    }
                                })
                                .collect(),
                            shape: slab.clone(),
                        };
                        assert!(
                            slab.intersect(&chunk).is_some(),
                            "max {max} {coord:?} part {p}"
                        );
                    }
                }
            }
        }
        let outside = Region {
            start: vec![0, 0, 0],
            shape: vec![10, 10, 10],
        };
        assert_eq!(g.split(4).parts_meeting(&g, &shard, &outside), None);
    }

    #[test]
    fn shard_split_covers_the_shard_in_order() {
        let g = ShardGeometry::new(&[100, 60, 40], &[64, 40, 40], &[16, 10, 20]).expect("test");
        // 4 x 4 x 2 = 32 inner chunks per shard.
        for max in [1, 2, 3, 5, 8, 9, 16, 31, 32, 1000] {
            let split = g.split(max);
            let mut next = 0;
            for part in 0..split.parts() {
                let range = split.inner_range(part);
                assert_eq!(range.start, next, "max {max} part {part}");
                assert!(range.end > range.start && range.end - range.start <= max.max(1));
                next = range.end;
                // The part's region is exactly the union of its inner chunks' regions.
                let region = split.region(&g, &[1, 0, 0], part);
                let first = g.inner_region(&[1, 0, 0], range.start);
                assert_eq!(region.start, first.start);
                let cells: u64 = product(&region.shape);
                assert_eq!(cells, (range.end - range.start) * product(g.inner_shape()));
                for i in range.clone() {
                    let r = g.inner_region(&[1, 0, 0], i);
                    assert_eq!(
                        r.intersect(&region),
                        Some(r.clone()),
                        "max {max} part {part} chunk {i}"
                    );
                }
            }
            assert_eq!(next, 32, "max {max}");
        }
        assert_eq!(g.split(32).parts(), 1);
        assert_eq!(g.split(8).parts(), 4);
        assert_eq!(g.split(3).parts(), 16);
        assert_eq!(g.split(0).parts(), 32);
        // A scalar array: one chunk, one part.
        let scalar = ShardGeometry::new(&[], &[], &[]).expect("scalar");
        let split = scalar.split(1);
        assert_eq!(split.parts(), 1);
        assert_eq!(split.inner_range(0), 0..1);
        assert_eq!(split.region(&scalar, &[], 0).shape, Vec::<u64>::new());
    }

    #[test]
    fn grid_and_regions() {
        assert_eq!(grid_shape(&[10, 7], &[4, 7]), vec![3, 1]);
        assert_eq!(linear_index(&[1, 2], &[3, 4]), 6);
        assert_eq!(unravel_index(6, &[3, 4]), vec![1, 2]);
        assert_eq!(c_order(&[]).count(), 1);
        let r = Region::of_chunk(&[2, 0], &[4, 7], &[10, 7]);
        assert_eq!(
            r,
            Region {
                start: vec![8, 0],
                shape: vec![2, 7]
            }
        );
        let q = Region {
            start: vec![3, 5],
            shape: vec![6, 4],
        };
        assert_eq!(
            q.chunks_overlapping(&[4, 4]),
            vec![
                vec![0, 1],
                vec![0, 2],
                vec![1, 1],
                vec![1, 2],
                vec![2, 1],
                vec![2, 2]
            ]
        );
    }

    #[test]
    fn copy_between_buffers() {
        // 4x4 source holding 0..16 at origin (0,0); copy the 2x2 block at (1,1) into a 3x3 buffer at (1,0).
        let src: Vec<u8> = (0..16).collect();
        let mut dst = vec![0u8; 9];
        let region = Region {
            start: vec![1, 1],
            shape: vec![2, 2],
        };
        copy_region(
            &src,
            &[4, 4],
            &[0, 0],
            &mut dst,
            &[3, 3],
            &[1, 0],
            &region,
            1,
        );
        assert_eq!(dst, vec![0, 5, 6, 0, 9, 10, 0, 0, 0]);
    }

    #[test]
    fn transpose_matches_numpy() {
        // np.arange(6).reshape(2,3).T.ravel() == [0,3,1,4,2,5]
        let src: Vec<u8> = (0..6).collect();
        assert_eq!(transpose(&src, &[2, 3], &[1, 0], 1), vec![0, 3, 1, 4, 2, 5]);
        // np.arange(24).reshape(2,3,4).transpose(2,0,1)[1,1,2] == arange[1,2,1] == 21
        let src: Vec<u8> = (0..24).collect();
        let t = transpose(&src, &[2, 3, 4], &[2, 0, 1], 1);
        assert_eq!(t[linear_index(&[1, 1, 2], &[4, 2, 3]) as usize], 21);
        assert_eq!(inverse_permutation(&[2, 0, 1]), vec![1, 2, 0]);
    }

    #[test]
    fn geometry_validation() {
        assert!(ShardGeometry::new(&[100, 100], &[1 << 32, 1 << 32], &[1, 1]).is_err());
        assert!(checked_byte_size("chunk", &[1 << 20, 1 << 20], 8).is_err());
        assert_eq!(
            checked_byte_size("chunk", &[256, 256], 2).ok(),
            Some(131072)
        );
        assert!(ShardGeometry::new(&[100, 100], &[64], &[32, 32]).is_err());
        assert!(ShardGeometry::new(&[100, 100], &[64, 64], &[32, 30]).is_err());
        let g = ShardGeometry::new(&[100, 100], &[64, 64], &[32, 32]).expect("valid");
        assert_eq!(g.shard_grid(), vec![2, 2]);
        assert_eq!(g.inner_region(&[1, 0], 3).start, vec![96, 32]);
    }

    #[test]
    fn auto_shard_stays_within_array_and_target() {
        assert_eq!(
            auto_shard_shape(&[16384, 16384], &[256, 256], 2),
            vec![4096, 8192]
        );
        assert_eq!(auto_shard_shape(&[100], &[10], 8), vec![100]);
        assert_eq!(auto_shard_shape(&[1000, 7], &[64, 7], 1), vec![1024, 7]);
        let s = auto_shard_shape(&[1 << 20, 1 << 20], &[1000, 1000], 8);
        assert!(product(&s) * 8 <= AUTO_SHARD_TARGET_BYTES);
        // One-element chunks: 2^20 of them (a 16 MiB index), not 2^25 (64 MiB of uint16).
        assert_eq!(
            auto_shard_shape(&[1_000_000_000_000_000, 1], &[1, 1], 2),
            vec![1 << 20, 1]
        );
        // A zero extent does not divide by zero (the geometry refuses it).
        assert_eq!(auto_shard_shape(&[10, 10], &[0, 5], 1), vec![10, 10]);
    }

    #[test]
    fn auto_shard_shape_around_grows_only_the_dimensions_not_given() {
        // Time fixed at 48: only lat and lon grow, and the 64 MiB target counts the 48.
        let s = auto_shard_shape_around(
            &[1000, 721, 1440],
            &[24, 90, 180],
            1,
            &[Some(48), None, None],
            AUTO_SHARD_MAX_CHUNKS,
        );
        assert_eq!(s, vec![48, 720, 1440]);
        // Everything given: returned as given.
        assert_eq!(
            auto_shard_shape_around(&[10, 10], &[5, 5], 1, &[Some(5), Some(10)], 1),
            vec![5, 10]
        );
        // Nothing given: the automatic rule.
        assert_eq!(
            auto_shard_shape_around(&[16384, 16384], &[256, 256], 2, &[None, None], u64::MAX),
            auto_shard_shape(&[16384, 16384], &[256, 256], 2)
        );
        // A cap on the inner chunks: 10^15 x 1 in 1 x 1 chunks stops at 2^10 of them.
        assert_eq!(
            auto_shard_shape_around(&[1_000_000_000_000_000, 1], &[1, 1], 8, &[None, None], 1024),
            vec![1024, 1]
        );
    }

    #[test]
    fn shapes_whose_shards_end_past_64_bits_are_refused() {
        let e = ShardGeometry::new(&[u64::MAX - 5, 1], &[1 << 20, 1], &[1, 1])
            .expect_err("overflow")
            .to_string();
        assert!(e.contains("dimension 0") && e.contains("2^64"), "{e}");
        assert!(ShardGeometry::new(&[u64::MAX - 5, 1], &[1, 1], &[1, 1]).is_ok());
        assert!(ShardGeometry::new(&[10, 10], &[0, 10], &[1, 1]).is_err());
    }
}
