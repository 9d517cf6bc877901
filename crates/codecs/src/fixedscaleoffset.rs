//! numcodecs `fixedscaleoffset` (v3 `numcodecs.fixedscaleoffset`): stores `around((x - offset) * scale)`
//! in `astype`; decoding computes `enc / scale + offset` and casts to `dtype`.
//!
//! numcodecs computes with numpy 2, where a Python number next to an array takes the array's type
//! (NEP 50): float arrays compute in their own width, integer arrays divide in float64. The types of
//! each step here follow that, so results match numcodecs bit for bit.

use std::sync::Arc;

use serde_json::{json, Value};
use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::error::invalid;
use crate::numeric::{
    check_converted_len, convert_len, dtype_pair, map_elements, ElemType, Kind, Num, NumType,
    FLOAT64,
};
use crate::registry::Codec;

const NAME: &str = "numcodecs.fixedscaleoffset";

/// A Python number from the configuration: whether it was an int matters to numpy's typing.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scalar {
    Int(i128),
    Float(f64),
}

impl Scalar {
    fn parse(spec: &CodecSpec, key: &str) -> crate::Result<Self> {
        let v = spec
            .get(key)
            .ok_or_else(|| invalid(NAME, format!("missing {key}")))?;
        if let Some(i) = v.as_i64() {
            Ok(Scalar::Int(i as i128))
        } else if let Some(u) = v.as_u64() {
            Ok(Scalar::Int(u as i128))
        } else if let Some(f) = v.as_f64() {
            Ok(Scalar::Float(f))
        } else {
            Err(invalid(NAME, format!("{key} must be a number, got {v}")))
        }
    }

    fn num(self) -> Num {
        match self {
            Scalar::Int(i) => Num::I(i),
            Scalar::Float(f) => Num::F(f),
        }
    }

    fn to_json(self) -> Value {
        match self {
            Scalar::Int(i) => i64::try_from(i)
                .map(Value::from)
                .unwrap_or_else(|_| Value::from(i as f64)),
            Scalar::Float(f) => json!(f),
        }
    }

    /// The type of `array <op> self` under NEP 50, or `None` where numpy raises because a Python int
    /// does not fit the integer array's type.
    fn weak_result(self, array: NumType) -> Option<NumType> {
        match (array.kind, self) {
            (Kind::Float, _) => Some(array),
            (_, Scalar::Float(_)) => Some(FLOAT64),
            (_, Scalar::Int(i)) => (array.cast(Num::I(i)) == Num::I(i)).then_some(array),
        }
    }
}

#[derive(Debug)]
pub(crate) struct FixedScaleOffsetCodec {
    offset: Scalar,
    scale: Scalar,
    dtype: ElemType,
    astype: ElemType,
}

pub(crate) fn build(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    let (dtype, astype) = dtype_pair(spec)?;
    if dtype.ty.kind == Kind::Bool || astype.ty.kind == Kind::Bool {
        return Err(invalid(NAME, "boolean types cannot be scaled"));
    }
    Ok(Codec::BytesToBytes(Arc::new(FixedScaleOffsetCodec {
        offset: Scalar::parse(spec, "offset")?,
        scale: Scalar::parse(spec, "scale")?,
        dtype,
        astype,
    })))
}

impl BytesToBytesCodec for FixedScaleOffsetCodec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        convert_len(NAME, decoded.len(), &self.dtype, &self.astype)?;
        let overflow = |s: Scalar| {
            Error::codec(
                NAME,
                format!(
                    "{} does not fit {} (numpy refuses it too)",
                    s.to_json(),
                    self.dtype.typestr()
                ),
            )
        };
        let t1 = self
            .offset
            .weak_result(self.dtype.ty)
            .ok_or_else(|| overflow(self.offset))?;
        let t2 = self
            .scale
            .weak_result(t1)
            .ok_or_else(|| overflow(self.scale))?;
        let (offset, scale) = (t1.cast(self.offset.num()), t2.cast(self.scale.num()));
        Ok(map_elements(decoded, &self.dtype, &self.astype, |v| {
            let shifted = t1.sub(t1.cast(v), offset);
            let scaled = t2.mul(t2.cast(shifted), scale);
            self.astype.ty.cast(t2.around(scaled))
        }))
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        check_converted_len(NAME, encoded, &self.astype, &self.dtype, max_decoded_len)?;
        // True division of integers is float64; float arrays keep their width.
        let t = if self.astype.ty.is_float() {
            self.astype.ty
        } else {
            FLOAT64
        };
        let (offset, scale) = (t.cast(self.offset.num()), t.cast(self.scale.num()));
        Ok(map_elements(encoded, &self.astype, &self.dtype, |v| {
            let x = t.add(t.div(t.cast(v), scale), offset);
            self.dtype.ty.cast(x)
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
            json!({
                "offset": self.offset.to_json(),
                "scale": self.scale.to_json(),
                "dtype": self.dtype.typestr(),
                "astype": self.astype.typestr(),
            }),
        )
    }
}
