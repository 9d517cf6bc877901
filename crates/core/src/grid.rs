//! The zarr-extensions `rectilinear` chunk grid: per dimension, a list of chunk edge lengths.
//!
//! The configuration (`{"kind": "inline", "chunk_shapes": [...]}`) gives each dimension either a
//! bare integer (a regular step, repeated until it covers the extent) or a list whose elements are
//! edge lengths or run-length pairs `[edge, count]`. The edges must cover the extent and may overhang
//! it (by several chunks even). Chunks are stored whole, as regular edge chunks are: a chunk that
//! crosses the array's end decodes to its full edges.
//!
//! The grid is kept as runs of equal edges, cut to the chunks that meet the array, so a run-length
//! pair of a billion chunks costs one entry and a lookup is a binary search.

use serde_json::Value;

use crate::error::{Error, Result};
use crate::geometry::{c_order, Region};

/// `count` chunks of edge `edge`, the first at element `start`, the `first`-th chunk of its axis.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Run {
    edge: u64,
    count: u64,
    start: u64,
    first: u64,
}

/// The chunks of one dimension: runs in order, covering `0..extent` (none for an empty extent).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Axis {
    runs: Vec<Run>,
    /// Number of chunks that meet `0..extent`.
    chunks: u64,
    /// The first declared edge (the chunk extent of an axis of no chunks).
    first_edge: u64,
}

impl Axis {
    /// The run holding chunk `index` (which must be below `chunks`).
    fn run_of_chunk(&self, index: u64) -> Option<&Run> {
        let i = self.runs.partition_point(|r| r.first <= index);
        self.runs.get(i.checked_sub(1)?)
    }

    /// The chunk holding element `position`, clamped to the last chunk.
    fn chunk_at(&self, position: u64) -> u64 {
        let i = self.runs.partition_point(|r| r.start <= position);
        match i.checked_sub(1).and_then(|i| self.runs.get(i)) {
            Some(run) => {
                (run.first + (position - run.start) / run.edge).min(self.chunks.saturating_sub(1))
            }
            None => 0,
        }
    }

    /// Start and (full) edge of chunk `index`.
    fn chunk(&self, index: u64) -> Option<(u64, u64)> {
        let run = self.run_of_chunk(index)?;
        (index < run.first + run.count)
            .then(|| (run.start + (index - run.first) * run.edge, run.edge))
    }

    fn largest_edge(&self) -> u64 {
        self.runs
            .iter()
            .map(|r| r.edge)
            .max()
            .unwrap_or(self.first_edge)
    }

    /// The edge of every chunk when they are all equal (the axis is regular).
    fn regular_edge(&self) -> Option<u64> {
        match self.runs.as_slice() {
            [] => Some(self.first_edge),
            [run] => Some(run.edge),
            _ => None,
        }
    }
}

/// The runs of one dimension as its declared edges are read (see [`RectilinearGrid::axis`]).
struct AxisBuilder {
    d: usize,
    extent: u64,
    runs: Vec<Run>,
    /// Where the next chunk starts, and its index.
    start: u64,
    first: u64,
    first_edge: Option<u64>,
}

impl AxisBuilder {
    /// `count` chunks of `edge` next.
    fn push(&mut self, edge: u64, count: u64) -> Result<()> {
        self.first_edge.get_or_insert(edge);
        if self.start >= self.extent {
            return Ok(());
        }
        // Only the chunks that meet the array: the rest overhang it and are never read.
        let count = count.min((self.extent - self.start).div_ceil(edge));
        let end = count
            .checked_mul(edge)
            .and_then(|n| n.checked_add(self.start))
            .ok_or_else(|| {
                invalid(format!(
                    "chunk_shapes[{}]: the chunks end past 2^64 elements",
                    self.d
                ))
            })?;
        match self.runs.last_mut() {
            Some(last) if last.edge == edge => last.count += count,
            _ => self.runs.push(Run {
                edge,
                count,
                start: self.start,
                first: self.first,
            }),
        }
        self.start = end;
        self.first += count;
        Ok(())
    }

    fn finish(mut self) -> Result<Axis> {
        let (d, start, extent) = (self.d, self.start, self.extent);
        if start < extent {
            return Err(invalid(format!(
                "chunk_shapes[{d}]: the edges sum to {start}, less than the array's extent {extent} in dimension {d}"
            )));
        }
        // Held for the whole run: without the room the list grew into.
        self.runs.shrink_to_fit();
        Ok(Axis {
            runs: self.runs,
            chunks: self.first,
            first_edge: self.first_edge.unwrap_or(1),
        })
    }
}

/// A rectilinear chunk grid over an array of a given shape (see the module documentation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RectilinearGrid {
    axes: Vec<Axis>,
    extents: Vec<u64>,
}

/// An invalid `rectilinear` configuration: `reason` names the member at fault.
fn invalid(reason: String) -> Error {
    Error::InvalidChunkGrid {
        reason: format!("rectilinear {reason}"),
    }
}

/// A positive integer of the configuration, or why it is not one (`what` names it).
fn positive(value: &Value, what: &dyn Fn() -> String) -> Result<u64> {
    match value.as_u64() {
        Some(n) if n > 0 => Ok(n),
        _ => Err(invalid(format!(
            "{} is {value}, expected a positive integer",
            what()
        ))),
    }
}

impl RectilinearGrid {
    /// Parses the `configuration` of a `rectilinear` chunk grid for an array of `shape`. Refuses
    /// (naming the dimension and the element) a `kind` other than `inline`, a number of dimensions
    /// other than the array's, edges or counts that are not positive integers, an empty list, edges
    /// that do not cover the extent and chunks that end past 2^64 elements.
    pub fn from_configuration(configuration: &Value, shape: &[u64]) -> Result<RectilinearGrid> {
        match configuration.get("kind") {
            Some(Value::String(kind)) if kind == "inline" => {}
            Some(other) => {
                return Err(invalid(format!(
                    "kind {other} is not supported (\"inline\")"
                )))
            }
            None => return Err(invalid("configuration has no kind".into())),
        }
        let Some(Value::Array(dims)) = configuration.get("chunk_shapes") else {
            return Err(invalid(
                "configuration.chunk_shapes must be a list with one entry per dimension".into(),
            ));
        };
        if dims.len() != shape.len() {
            return Err(invalid(format!(
                "chunk_shapes has {} entries, the array has {} dimensions (shape {shape:?})",
                dims.len(),
                shape.len()
            )));
        }
        let axes = dims
            .iter()
            .zip(shape)
            .enumerate()
            .map(|(d, (spec, &extent))| Self::axis(d, spec, extent))
            .collect::<Result<Vec<_>>>()?;
        Ok(RectilinearGrid {
            axes,
            extents: shape.to_vec(),
        })
    }

    /// One dimension's edges (`spec`: a bare step or a list of edges and run-length pairs), each
    /// checked and folded into the runs as it is read: no list of the declared edges is made
    /// beside them (a grid may declare millions).
    fn axis(d: usize, spec: &Value, extent: u64) -> Result<Axis> {
        let mut axis = AxisBuilder {
            d,
            extent,
            runs: Vec::new(),
            start: 0,
            first: 0,
            first_edge: None,
        };
        match spec {
            Value::Array(items) if items.is_empty() => {
                return Err(invalid(format!("chunk_shapes[{d}] is an empty list")))
            }
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let (edge, count) = match item {
                        Value::Array(pair) => match pair.as_slice() {
                            [edge, count] => (
                                positive(edge, &|| format!("chunk_shapes[{d}][{i}][0] (an edge)"))?,
                                positive(count, &|| format!("chunk_shapes[{d}][{i}][1] (a count)"))?,
                            ),
                            _ => return Err(invalid(format!(
                                "chunk_shapes[{d}][{i}] is {item}, expected an edge or a pair [edge, count]"
                            ))),
                        },
                        _ => (positive(item, &|| format!("chunk_shapes[{d}][{i}]"))?, 1),
                    };
                    axis.push(edge, count)?;
                }
            }
            step => {
                let step = positive(step, &|| format!("chunk_shapes[{d}]"))?;
                axis.push(step, extent.div_ceil(step).max(1))?;
            }
        }
        axis.finish()
    }

    /// Number of dimensions.
    pub fn ndim(&self) -> usize {
        self.axes.len()
    }

    /// Number of chunks that meet the array along each dimension.
    pub fn grid_shape(&self) -> Vec<u64> {
        self.axes.iter().map(|a| a.chunks).collect()
    }

    /// The largest edge along each dimension: the shape that holds any of its chunks.
    pub fn largest_chunk(&self) -> Vec<u64> {
        self.axes.iter().map(Axis::largest_edge).collect()
    }

    /// The smallest edge along each dimension (of the chunks that meet the array).
    pub fn smallest_chunk(&self) -> Vec<u64> {
        self.axes
            .iter()
            .map(|a| a.runs.iter().map(|r| r.edge).min().unwrap_or(a.first_edge))
            .collect()
    }

    /// Per dimension, where the last chunk that meets the array ends: the chunks cover `0..end`,
    /// past the array's extent when the last one overhangs it.
    pub fn covered_extent(&self) -> Vec<u64> {
        self.axes
            .iter()
            .map(|a| {
                a.runs.last().map_or(0, |r| {
                    r.start.saturating_add(r.count.saturating_mul(r.edge))
                })
            })
            .collect()
    }

    /// The chunk shape when every chunk has the same one (a regular grid written as rectilinear).
    pub fn as_regular(&self) -> Option<Vec<u64>> {
        self.axes.iter().map(Axis::regular_edge).collect()
    }

    /// The edges of each dimension's chunks, in order, run-length pairs expanded (tests and
    /// messages; a dimension may hold many chunks).
    pub fn edges(&self, dim: usize) -> Vec<u64> {
        self.axes.get(dim).map_or_else(Vec::new, |a| {
            a.runs
                .iter()
                .flat_map(|r| std::iter::repeat_n(r.edge, r.count as usize))
                .collect()
        })
    }

    /// The chunk that holds element `position` (inside the array) of each dimension.
    pub fn chunk_containing(&self, position: &[u64]) -> Vec<u64> {
        self.axes
            .iter()
            .zip(position)
            .map(|(a, &p)| a.chunk_at(p))
            .collect()
    }

    /// The full (stored) shape of chunk `coord`, `None` outside the grid.
    pub fn chunk_shape(&self, coord: &[u64]) -> Option<Vec<u64>> {
        self.chunk_bounds(coord).map(|r| r.shape)
    }

    /// The full (unclipped) region of chunk `coord`, `None` outside the grid.
    pub fn chunk_bounds(&self, coord: &[u64]) -> Option<Region> {
        if coord.len() != self.axes.len() {
            return None;
        }
        let (start, shape) = self
            .axes
            .iter()
            .zip(coord)
            .map(|(a, &c)| a.chunk(c))
            .collect::<Option<Vec<_>>>()?
            .into_iter()
            .unzip();
        Some(Region { start, shape })
    }

    /// The region of chunk `coord` clipped to the array (empty outside the grid).
    pub fn chunk_region(&self, coord: &[u64]) -> Region {
        match self.chunk_bounds(coord) {
            Some(mut region) => {
                for ((n, s), e) in region
                    .shape
                    .iter_mut()
                    .zip(&region.start)
                    .zip(&self.extents)
                {
                    *n = (*n).min(e.saturating_sub(*s));
                }
                region
            }
            None => Region {
                start: vec![0; self.axes.len()],
                shape: vec![0; self.axes.len()],
            },
        }
    }

    /// Coordinates of every chunk that overlaps `region` (clipped to the array), in C order.
    pub fn chunks_overlapping(&self, region: &Region) -> Vec<Vec<u64>> {
        let array = Region {
            start: vec![0; self.extents.len()],
            shape: self.extents.clone(),
        };
        let Some(region) = region.intersect(&array) else {
            return Vec::new();
        };
        let first = self.chunk_containing(&region.start);
        let last_element: Vec<u64> = region.end().iter().map(|e| e - 1).collect();
        let last = self.chunk_containing(&last_element);
        let counts: Vec<u64> = last.iter().zip(&first).map(|(l, f)| l - f + 1).collect();
        c_order(&counts)
            .map(|offset| offset.iter().zip(&first).map(|(o, f)| o + f).collect())
            .collect()
    }

    /// Whether every chunk edge along each dimension is a multiple of `inner` (the inner chunks of a
    /// source stored in shards on this grid then lie on one regular grid of `inner`).
    pub fn divisible_by(&self, inner: &[u64]) -> bool {
        inner.len() == self.axes.len()
            && self.axes.iter().zip(inner).all(|(a, &i)| {
                i > 0 && a.runs.iter().all(|r| r.edge % i == 0) && a.first_edge % i == 0
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn grid(chunk_shapes: Value, shape: &[u64]) -> Result<RectilinearGrid> {
        RectilinearGrid::from_configuration(
            &json!({"kind": "inline", "chunk_shapes": chunk_shapes}),
            shape,
        )
    }

    fn refused(chunk_shapes: Value, shape: &[u64]) -> String {
        grid(chunk_shapes, shape).expect_err("refused").to_string()
    }

    /// The spec's example: every form of a dimension's edges over an extent of 6.
    #[test]
    fn parses_every_form_of_the_spec_example() {
        let g = grid(
            json!([4, [1, 2, 3], [[4, 2]], [[1, 3], 3], [4, 4, 4]]),
            &[6, 6, 6, 6, 6],
        )
        .expect("parses");
        let edges: Vec<Vec<u64>> = (0..5).map(|d| g.edges(d)).collect();
        // The overhanging third chunk of the last dimension never meets the array.
        assert_eq!(
            edges,
            vec![
                vec![4, 4],
                vec![1, 2, 3],
                vec![4, 4],
                vec![1, 1, 1, 3],
                vec![4, 4]
            ]
        );
        assert_eq!(g.grid_shape(), vec![2, 3, 2, 4, 2]);
        assert_eq!(g.largest_chunk(), vec![4, 3, 4, 3, 4]);
        assert_eq!(g.as_regular(), None);
    }

    #[test]
    fn positions_map_to_chunks_and_chunks_to_extents() {
        // Months of 31, 28, 31 and 30 days, then run-length 2 x 5; 10 x 3 along the other axis.
        let g = grid(json!([[31, 28, 31, 30, [5, 2]], [[3, 3], 1]]), &[130, 10]).expect("parses");
        assert_eq!(g.grid_shape(), vec![6, 4]);
        let months = [
            (0, 0),
            (30, 0),
            (31, 1),
            (58, 1),
            (59, 2),
            (89, 2),
            (90, 3),
            (119, 3),
        ];
        for (day, chunk) in months {
            assert_eq!(g.chunk_containing(&[day, 0])[0], chunk, "day {day}");
        }
        assert_eq!(g.chunk_containing(&[120, 9]), vec![4, 3]);
        assert_eq!(g.chunk_containing(&[129, 8]), vec![5, 2]);
        assert_eq!(g.chunk_shape(&[1, 3]), Some(vec![28, 1]));
        assert_eq!(g.chunk_shape(&[6, 0]), None);
        assert_eq!(g.chunk_shape(&[0, 4]), None);
        assert_eq!(g.chunk_shape(&[0]), None);
        assert_eq!(
            g.chunk_bounds(&[3, 2]),
            Some(Region {
                start: vec![90, 6],
                shape: vec![30, 3]
            })
        );
        let overlapping = g.chunks_overlapping(&Region {
            start: vec![29, 5],
            shape: vec![3, 2],
        });
        assert_eq!(
            overlapping,
            vec![vec![0, 1], vec![0, 2], vec![1, 1], vec![1, 2]]
        );
    }

    #[test]
    fn chunks_that_cross_the_end_are_whole_but_clipped_as_regions() {
        // 10 elements in edges of 4: the last chunk holds 2 of them, its buffer 4; the overhang of
        // whole chunks past the end is dropped.
        let g = grid(json!([[4, 4, 4, 4, 4]]), &[10]).expect("parses");
        assert_eq!(g.grid_shape(), vec![3]);
        assert_eq!(g.chunk_shape(&[2]), Some(vec![4]));
        assert_eq!(
            g.chunk_region(&[2]),
            Region {
                start: vec![8],
                shape: vec![2]
            }
        );
        assert_eq!(g.as_regular(), Some(vec![4]));
        // A region past the array's end meets only the chunks inside it.
        let past = Region {
            start: vec![6],
            shape: vec![100],
        };
        assert_eq!(g.chunks_overlapping(&past), vec![vec![1], vec![2]]);
        // A bare step is regular, an empty dimension has no chunk.
        let g = grid(json!([3, [[2, 4]]]), &[10, 0]).expect("parses");
        assert_eq!(g.grid_shape(), vec![4, 0]);
        assert_eq!(g.as_regular(), Some(vec![3, 2]));
    }

    #[test]
    fn huge_run_lengths_cost_one_entry() {
        let g = grid(
            json!([[[1, u64::MAX]], [[7, 3], [1000, 1_000_000_000_000u64]]]),
            &[1 << 40, 5021],
        )
        .expect("parses");
        // 3 chunks of 7, then 5 of 1000 cover 5021 elements.
        assert_eq!(g.grid_shape(), vec![1 << 40, 8]);
        assert_eq!(
            g.chunk_containing(&[(1 << 40) - 1, 5020]),
            vec![(1 << 40) - 1, 7]
        );
        assert_eq!(g.chunk_containing(&[7, 21]), vec![7, 3]);
        assert_eq!(g.chunk_shape(&[5, 7]), Some(vec![1, 1000]));
        assert_eq!(g.chunk_shape(&[5, 8]), None);
    }

    #[test]
    fn bad_configurations_are_refused_with_the_element_at_fault() {
        let cases = [
            (json!([[2, 0]]), vec![2], "chunk_shapes[0][1] is 0, expected a positive integer"),
            (json!([[2, -1]]), vec![2], "chunk_shapes[0][1] is -1, expected a positive integer"),
            (json!([[2.5]]), vec![2], "chunk_shapes[0][0] is 2.5, expected a positive integer"),
            (json!([0]), vec![2], "chunk_shapes[0] is 0, expected a positive integer"),
            (json!(["4"]), vec![2], "chunk_shapes[0] is \"4\", expected a positive integer"),
            (json!([[[3, 0]]]), vec![2], "chunk_shapes[0][0][1] (a count) is 0"),
            (json!([[[0, 3]]]), vec![2], "chunk_shapes[0][0][0] (an edge) is 0"),
            (json!([[[3, 1, 1]]]), vec![2], "chunk_shapes[0][0] is [3,1,1], expected an edge or a pair"),
            (json!([[]]), vec![2], "chunk_shapes[0] is an empty list"),
            (json!([[2, 2], [1]]), vec![4, 2], "chunk_shapes[1]: the edges sum to 1, less than the array's extent 2 in dimension 1"),
            (json!([[[2, 2]]]), vec![5], "sum to 4, less than the array's extent 5"),
            (json!([[2]]), vec![2, 2], "chunk_shapes has 1 entries, the array has 2 dimensions"),
            (json!([[u64::MAX - 1, 3]]), vec![u64::MAX], "end past 2^64 elements"),
        ];
        for (chunk_shapes, shape, expected) in cases {
            let error = refused(chunk_shapes.clone(), &shape);
            assert!(error.contains(expected), "{chunk_shapes}: {error}");
            assert!(
                error.starts_with("invalid chunk_grid: rectilinear "),
                "{error}"
            );
        }
        let config = |c: Value| RectilinearGrid::from_configuration(&c, &[4]);
        for (c, expected) in [
            (json!({"chunk_shapes": [[4]]}), "has no kind"),
            (
                json!({"kind": "file", "chunk_shapes": [[4]]}),
                "kind \"file\" is not supported",
            ),
            (json!({"kind": "inline"}), "chunk_shapes must be a list"),
            (
                json!({"kind": "inline", "chunk_shapes": {"0": 4}}),
                "chunk_shapes must be a list",
            ),
        ] {
            let error = config(c.clone()).expect_err("refused").to_string();
            assert!(error.contains(expected), "{c}: {error}");
        }
    }

    #[test]
    fn smallest_and_largest_edges_and_the_covered_extent() {
        // Months along time (the last chunk overhangs 100 by 20), a bare step of 7 over 20.
        let g = grid(json!([[31, 28, 31, 30], 7]), &[100, 20]).expect("grid");
        assert_eq!(g.smallest_chunk(), vec![28, 7]);
        assert_eq!(g.largest_chunk(), vec![31, 7]);
        assert_eq!(g.covered_extent(), vec![120, 21]);
        // Only the chunks that meet the array count: the 2 past 40 do not.
        let g = grid(json!([[[10, 4], 2, 1]]), &[40]).expect("grid");
        assert_eq!(
            (g.smallest_chunk(), g.covered_extent()),
            (vec![10], vec![40])
        );
    }

    #[test]
    fn divisibility_by_inner_chunks() {
        let g = grid(json!([[4, 8, [12, 2]], 6]), &[36, 20]).expect("parses");
        assert!(g.divisible_by(&[4, 3]));
        assert!(g.divisible_by(&[2, 6]));
        assert!(!g.divisible_by(&[8, 3]));
        assert!(!g.divisible_by(&[4, 4]));
        assert!(!g.divisible_by(&[4]));
    }
}
