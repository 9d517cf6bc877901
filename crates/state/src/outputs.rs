//! What the protocol needs to know of a conversion's plan: the output arrays (their paths, shard
//! grids and `zarr.json`) and the groups. Borrowed from the plan (`zshard-convert` builds it with
//! `Plan::outputs`), so the protocol sits below the planner and holds no copy of it.

use zshard_core::ShardGeometry;
use zshard_writer::ShardedArrayMetadata;

/// The nodes a conversion writes, in hierarchy order.
#[derive(Debug, Clone, Default)]
pub struct Outputs<'a> {
    /// The arrays, in hierarchy order (a shard's global index counts through them in this order).
    pub arrays: Vec<OutputArray<'a>>,
    /// The groups' paths (the root's is empty).
    pub groups: Vec<&'a String>,
    /// Per array, which worker makes its shards; an array past the end (or an empty list) is
    /// [`Owner::Global`]'s.
    pub owners: Vec<Owner>,
}

/// One array a conversion writes.
#[derive(Debug, Clone, Copy)]
pub struct OutputArray<'a> {
    /// Its path in the hierarchy (empty for a single array).
    pub path: &'a String,
    /// Its shards and inner chunks.
    pub geometry: &'a ShardGeometry,
    /// Its `zarr.json`.
    pub output: &'a ShardedArrayMetadata,
}

/// Which worker of a partitioned run makes an array's shards (see `partition.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Owner {
    /// Shard `g` of the global enumeration is worker `g mod N`'s.
    #[default]
    Global,
    /// A level of a pyramid made while converting (issue 41), each of whose shards is made from
    /// the blocks of one level-0 shard alone: its shards are that level-0 shard's owner's, who
    /// makes them in its own pass. The level-0 shard is the one holding element `start * scale`,
    /// `start` being the first element of the shard.
    Below {
        /// Level 0's index among the arrays.
        level0: usize,
        /// The global number of level 0's first shard.
        level0_first: u64,
        /// Per dimension: how many level-0 elements one element of this level spans.
        scale: Vec<u64>,
    },
    /// A level of a pyramid whose shards are made from the blocks of several level-0 shards: no
    /// worker makes them, `finalize` does (an unpartitioned run makes everything).
    Finalize,
}

impl Outputs<'_> {
    /// How the owner of array `array`'s shards is found.
    pub fn owner(&self, array: usize) -> &Owner {
        static GLOBAL: Owner = Owner::Global;
        self.owners.get(array).unwrap_or(&GLOBAL)
    }

    /// Whether `partition` makes shard `index` (C order) of array `array`, whose first shard has
    /// the global number `first_global`.
    pub fn owns(
        &self,
        partition: crate::Partition,
        array: usize,
        index: u64,
        first_global: u64,
    ) -> bool {
        match self.owner_number(array, index, first_global) {
            Some(global) => partition.owns(global),
            None => partition.is_all(),
        }
    }

    /// The global number whose worker makes shard `index` of array `array` (see [`Owner`]);
    /// `None` for a shard `finalize` makes.
    pub fn owner_number(&self, array: usize, index: u64, first_global: u64) -> Option<u64> {
        match self.owner(array) {
            Owner::Global => Some(first_global.saturating_add(index)),
            Owner::Finalize => None,
            Owner::Below {
                level0,
                level0_first,
                scale,
            } => {
                let this = self.arrays.get(array)?.geometry;
                let base = self.arrays.get(*level0)?.geometry;
                let number = owner_below(
                    this.shard_shape(),
                    &this.shard_grid(),
                    base.shard_shape(),
                    &base.shard_grid(),
                    scale,
                    index,
                );
                Some(level0_first.saturating_add(number))
            }
        }
    }
}

/// The C-order index of the shard (of shape `base_shard`, on `base_grid`) holding element
/// `start * scale`, `start` being the first element of shard `index` of a grid of `shard`-shaped
/// shards (see [`Owner::Below`]).
pub fn owner_below(
    shard: &[u64],
    grid: &[u64],
    base_shard: &[u64],
    base_grid: &[u64],
    scale: &[u64],
    index: u64,
) -> u64 {
    let coord = zshard_core::unravel_index(index, grid);
    let base: Vec<u64> = coord
        .iter()
        .zip(shard)
        .zip(scale)
        .zip(base_shard)
        .zip(base_grid)
        .map(|((((c, s), f), b), n)| {
            (c.saturating_mul(*s).saturating_mul(*f) / (*b).max(1)).min(n.saturating_sub(1))
        })
        .collect();
    zshard_core::linear_index(&base, base_grid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lower_level_shard_belongs_to_the_level_0_shard_under_its_start() {
        // Level 2 of a 256 x 200 image: shards of 16 x 16 on a 4 x 4 grid (64 x 50 elements); level
        // 0's shards of 64 x 64 on a 4 x 4 grid. Level 2's shard (1, 3) starts at (16, 48), which is
        // level 0's (64, 192): its shard (1, 3).
        let owner = |index| owner_below(&[16, 16], &[4, 4], &[64, 64], &[4, 4], &[4, 4], index);
        assert_eq!(owner(7), 7);
        assert_eq!(owner(0), 0);
        // Clamped to the grid: a start past level 0's last shard is in that shard.
        assert_eq!(owner_below(&[32], &[2], &[64], &[1], &[2], 1), 0);
    }
}
