//! The source-format-independent model of an array that readers produce.

use serde_json::{Map, Value};

use crate::codec::{ChunkRepr, CodecSpec};
use crate::dtype::DataType;
use crate::fill::FillValue;

/// How chunk grid coordinates become store keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ChunkKeyEncoding {
    /// v3 `default`: `c/1/2` (or `c.1.2`); `c` for a 0-d array.
    Default { separator: char },
    /// v3 `v2` and Zarr v2 itself: `1.2` (or `1/2`); `0` for a 0-d array.
    V2 { separator: char },
}

impl ChunkKeyEncoding {
    pub fn key(&self, coord: &[u64]) -> String {
        let join = |sep: char| {
            coord
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(&sep.to_string())
        };
        match *self {
            ChunkKeyEncoding::Default { .. } if coord.is_empty() => "c".to_string(),
            ChunkKeyEncoding::Default { separator } => format!("c{separator}{}", join(separator)),
            ChunkKeyEncoding::V2 { .. } if coord.is_empty() => "0".to_string(),
            ChunkKeyEncoding::V2 { separator } => join(separator),
        }
    }

    pub fn to_v3_json(&self) -> Value {
        let (name, sep) = match *self {
            ChunkKeyEncoding::Default { separator } => ("default", separator),
            ChunkKeyEncoding::V2 { separator } => ("v2", separator),
        };
        serde_json::json!({"name": name, "configuration": {"separator": sep.to_string()}})
    }
}

/// One array of a source, whatever format it came from. Chunks decode (through `codecs`) into
/// little-endian C-order elements of `chunk_shape`.
#[derive(Clone, Debug, PartialEq)]
pub struct ArrayMeta {
    pub shape: Vec<u64>,
    pub data_type: DataType,
    pub fill_value: FillValue,
    /// The shape of the source's stored chunks (for an already sharded v3 source: its shard shape).
    pub chunk_shape: Vec<u64>,
    /// The source chain as v3 codecs (v2 compressors, byte order and order F are translated).
    pub codecs: Vec<CodecSpec>,
    pub chunk_key_encoding: ChunkKeyEncoding,
    pub attributes: Map<String, Value>,
    pub dimension_names: Option<Vec<Option<String>>>,
}

impl ArrayMeta {
    /// The representation of one decoded source chunk.
    pub fn chunk_repr(&self) -> ChunkRepr {
        ChunkRepr {
            shape: self.chunk_shape.clone(),
            data_type: self.data_type,
            fill_value: self.fill_value.clone(),
        }
    }
}

/// What a node of a hierarchy is.
#[derive(Clone, Debug, PartialEq)]
pub enum NodeKind {
    Group { attributes: Map<String, Value> },
    Array(Box<ArrayMeta>),
}

/// A group or array at `path` (`""` for the root, `a/b` below it).
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub path: String,
    pub kind: NodeKind,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        let d = ChunkKeyEncoding::Default { separator: '/' };
        assert_eq!(d.key(&[1, 23]), "c/1/23");
        assert_eq!(d.key(&[]), "c");
        assert_eq!(
            ChunkKeyEncoding::Default { separator: '.' }.key(&[0, 4]),
            "c.0.4"
        );
        let v2 = ChunkKeyEncoding::V2 { separator: '.' };
        assert_eq!(v2.key(&[3, 0, 1]), "3.0.1");
        assert_eq!(v2.key(&[]), "0");
        assert_eq!(ChunkKeyEncoding::V2 { separator: '/' }.key(&[3, 0]), "3/0");
    }
}
