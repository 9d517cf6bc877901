//! Reference sets in memory: the model ([`model`]: references, the chunk index, grid positions) and
//! the streaming parser of JSON reference files ([`parse`]) that builds it.

mod model;
mod parse;

pub(crate) use model::{chunk_grid, grid_len, ChunkIndex, JsonRefs, Kind, Ref, HELD_REF_BYTES};
