//! `transpose`: permutes array axes (also how Zarr v2 `order: "F"` chunks are read).

use std::sync::Arc;

use serde_json::json;
use zshard_core::{
    inverse_permutation, transpose, ArrayToArrayCodec, ChunkRepr, CodecSpec, Result,
};

use crate::error::invalid;
use crate::registry::Codec;

/// The v3 `transpose` codec: encoding permutes the chunk's axes by `order` (axis `i` of the encoded
/// chunk is axis `order[i]` of the decoded one); decoding undoes it.
#[derive(Debug)]
pub struct TransposeCodec {
    order: Vec<usize>,
}

impl TransposeCodec {
    /// The permutation that reads Fortran-order chunks: reversed axes.
    pub fn fortran(ndim: usize) -> Self {
        TransposeCodec {
            order: (0..ndim).rev().collect(),
        }
    }
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let ndim = repr.shape.len();
    let order: Vec<usize> = match spec.get("order") {
        Some(serde_json::Value::String(s)) if s == "C" => (0..ndim).collect(),
        Some(serde_json::Value::String(s)) if s == "F" => (0..ndim).rev().collect(),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|v| v.as_u64().map(|x| x as usize))
            .collect::<Option<_>>()
            .ok_or_else(|| invalid("transpose", "order must be a list of axis numbers"))?,
        _ => return Err(invalid("transpose", "missing order")),
    };
    let mut seen = order.clone();
    seen.sort_unstable();
    if seen != (0..ndim).collect::<Vec<_>>() {
        return Err(invalid(
            "transpose",
            format!("order {order:?} is not a permutation of {ndim} axes"),
        ));
    }
    Ok(Codec::ArrayToArray(Arc::new(TransposeCodec { order })))
}

impl ArrayToArrayCodec for TransposeCodec {
    fn encoded_repr(&self, decoded: &ChunkRepr) -> Result<ChunkRepr> {
        Ok(ChunkRepr {
            shape: self.order.iter().map(|&o| decoded.shape[o]).collect(),
            ..decoded.clone()
        })
    }

    fn encode(&self, data: Vec<u8>, decoded: &ChunkRepr) -> Result<Vec<u8>> {
        Ok(transpose(
            &data,
            &decoded.shape,
            &self.order,
            decoded.data_type.size(),
        ))
    }

    fn decode(&self, data: Vec<u8>, decoded: &ChunkRepr) -> Result<Vec<u8>> {
        let encoded = self.encoded_repr(decoded)?;
        Ok(transpose(
            &data,
            &encoded.shape,
            &inverse_permutation(&self.order),
            decoded.data_type.size(),
        ))
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new("transpose", json!({"order": self.order}))
    }
}
