//! numcodecs `delta` (v3 `numcodecs.delta`): stores the first element and then the differences of
//! adjacent elements, in `astype`.
//!
//! numcodecs decodes with `np.cumsum(enc, out=dec)`, which numpy evaluates in the promoted type of
//! `astype` and `dtype` before casting each running sum to `dtype`; decoding here does the same, so
//! narrow or mixed types (for example `dtype="<i2"`, `astype="|u1"`, or float differences of an
//! integer array) give numcodecs' bytes.

use std::sync::Arc;

use serde_json::json;
use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Result};

use crate::error::invalid;
use crate::numeric::{
    check_converted_len, convert_len, dtype_pair, map_elements, ElemType, Kind, NumType,
};
use crate::registry::Codec;

const NAME: &str = "numcodecs.delta";

#[derive(Debug)]
pub(crate) struct DeltaCodec {
    dtype: ElemType,
    astype: ElemType,
}

pub(crate) fn build(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    let (dtype, astype) = dtype_pair(spec)?;
    if dtype.ty.kind == Kind::Bool || astype.ty.kind == Kind::Bool {
        // numpy cannot subtract booleans, so numcodecs never wrote such data.
        return Err(invalid(NAME, "boolean types have no differences"));
    }
    Ok(Codec::BytesToBytes(Arc::new(DeltaCodec { dtype, astype })))
}

impl BytesToBytesCodec for DeltaCodec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        convert_len(NAME, decoded.len(), &self.dtype, &self.astype)?;
        // numcodecs: enc[0] = arr[0]; enc[1:] = np.diff(arr), differences in dtype, then cast.
        // (numpy 2 raises where arr[0] does not fit astype; here it wraps like the differences.)
        let ty = self.dtype.ty;
        let mut previous = None;
        Ok(map_elements(decoded, &self.dtype, &self.astype, |v| {
            let diff = match previous {
                None => v,
                Some(p) => ty.sub(v, p),
            };
            previous = Some(v);
            self.astype.ty.cast(diff)
        }))
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        check_converted_len(NAME, encoded, &self.astype, &self.dtype, max_decoded_len)?;
        let acc_type = NumType::promote(self.astype.ty, self.dtype.ty);
        let mut sum = None;
        Ok(map_elements(encoded, &self.astype, &self.dtype, |v| {
            let v = acc_type.cast(v);
            let s = match sum {
                None => v,
                Some(s) => acc_type.add(s, v),
            };
            sum = Some(s);
            self.dtype.ty.cast(s)
        }))
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        decoded_len
            .div_ceil(self.dtype.size())
            .saturating_mul(self.astype.size())
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new(
            NAME,
            json!({"dtype": self.dtype.typestr(), "astype": self.astype.typestr()}),
        )
    }
}
