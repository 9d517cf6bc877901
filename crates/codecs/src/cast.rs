//! numcodecs filters that store elements in another type: `astype` (v3 `numcodecs.astype`) and
//! `quantize` (v3 `numcodecs.quantize`), whose decoding is the same cast back (quantizing is lossy and
//! happens only when encoding).

use std::sync::Arc;

use serde_json::json;
use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Result};

use crate::config::{int, string};
use crate::error::invalid;
use crate::numeric::{check_converted_len, convert_len, dtype_pair, map_elements, ElemType, Num};
use crate::registry::Codec;

/// What happens to values when encoding, besides the cast.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// `astype`: the cast alone.
    AsType,
    /// `quantize`: `around(x * scale) / scale` in the decoded type first.
    Quantize { digits: i64, scale: f64 },
}

#[derive(Debug)]
pub(crate) struct CastCodec {
    mode: Mode,
    /// The type of the decoded elements.
    decoded: ElemType,
    /// The type of the stored elements.
    encoded: ElemType,
}

pub(crate) fn build_astype(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    let get = |key: &str| {
        string(spec, key)
            .ok_or_else(|| invalid(&spec.name, format!("missing {key}")))
            .and_then(|s| ElemType::parse(&spec.name, key, s))
    };
    Ok(Codec::BytesToBytes(Arc::new(CastCodec {
        mode: Mode::AsType,
        decoded: get("decode_dtype")?,
        encoded: get("encode_dtype")?,
    })))
}

/// The power of two numcodecs scales by for `digits` decimal digits, computed as it does.
fn quantize_scale(digits: i64) -> Option<f64> {
    let precision = 10f64.powf(-(digits as f64));
    let exp = precision.log10();
    let exp = if exp < 0.0 { exp.floor() } else { exp.ceil() };
    let bits = 10f64.powf(-exp).log2().ceil();
    let scale = 2f64.powf(bits);
    (exp.is_finite() && scale.is_finite()).then_some(scale)
}

pub(crate) fn build_quantize(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    let digits = int(spec, "digits", None)?;
    let (decoded, encoded) = dtype_pair(spec)?;
    if !decoded.ty.is_float() || !encoded.ty.is_float() {
        return Err(invalid(
            &spec.name,
            "only floating point data types are supported",
        ));
    }
    let scale = quantize_scale(digits)
        .ok_or_else(|| invalid(&spec.name, format!("digits {digits} is out of range")))?;
    Ok(Codec::BytesToBytes(Arc::new(CastCodec {
        mode: Mode::Quantize { digits, scale },
        decoded,
        encoded,
    })))
}

impl CastCodec {
    fn name(&self) -> &'static str {
        match self.mode {
            Mode::AsType => "numcodecs.astype",
            Mode::Quantize { .. } => "numcodecs.quantize",
        }
    }
}

impl BytesToBytesCodec for CastCodec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        convert_len(self.name(), decoded.len(), &self.decoded, &self.encoded)?;
        let ty = self.decoded.ty;
        Ok(match self.mode {
            Mode::AsType => map_elements(decoded, &self.decoded, &self.encoded, |v| {
                self.encoded.ty.cast(v)
            }),
            Mode::Quantize { scale, .. } => {
                // The Python float scale takes the array's float type (NEP 50).
                let scale = ty.cast(Num::F(scale));
                map_elements(decoded, &self.decoded, &self.encoded, |v| {
                    let q = ty.div(ty.around(ty.mul(scale, v)), scale);
                    self.encoded.ty.cast(q)
                })
            }
        })
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        check_converted_len(
            self.name(),
            encoded,
            &self.encoded,
            &self.decoded,
            max_decoded_len,
        )?;
        Ok(map_elements(encoded, &self.encoded, &self.decoded, |v| {
            self.decoded.ty.cast(v)
        }))
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        decoded_len
            .div_ceil(self.decoded.size())
            .saturating_mul(self.encoded.size())
    }

    fn spec(&self) -> CodecSpec {
        match self.mode {
            Mode::AsType => CodecSpec::new(
                self.name(),
                json!({"encode_dtype": self.encoded.typestr(), "decode_dtype": self.decoded.typestr()}),
            ),
            Mode::Quantize { digits, .. } => CodecSpec::new(
                self.name(),
                json!({"digits": digits, "dtype": self.decoded.typestr(), "astype": self.encoded.typestr()}),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::quantize_scale;

    #[test]
    fn quantize_scales_match_numcodecs() {
        // numcodecs: digits 1 -> 2**4, 2 -> 2**7, 3 -> 2**10.
        assert_eq!(quantize_scale(1), Some(16.0));
        assert_eq!(quantize_scale(2), Some(128.0));
        assert_eq!(quantize_scale(3), Some(1024.0));
        assert_eq!(quantize_scale(100_000), None);
    }
}
