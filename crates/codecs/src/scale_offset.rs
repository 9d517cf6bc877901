//! `scale_offset` (zarr-extensions): an array→array codec that stores `(x - offset) * scale` and decodes
//! `x / scale + offset`, in the arithmetic of the array's own data type.
//!
//! zarr-python 3.2+ defines what that arithmetic is, and this module repeats it element for element:
//! floats compute in their own width (numpy's float32 and float16 operations are correctly rounded, as
//! [`NumType`]'s are); integers decode only when every element divides exactly by `scale` (a remainder
//! is an error, as is a result outside the type's range), except that `int64` wraps on overflow as
//! numpy's int64 arithmetic does in zarr-python; `uint64` computes exactly and refuses out-of-range
//! results. `offset` and `scale` are read as fill values of the array's type.

use std::sync::Arc;

use serde_json::{Map, Value};
use zshard_core::{ArrayToArrayCodec, ChunkRepr, CodecSpec, DataType, Error, FillValue, Result};

use crate::error::invalid;
use crate::numeric::{ElemType, Kind, Num, NumType};
use crate::registry::Codec;

const NAME: &str = "scale_offset";

#[derive(Debug)]
pub(crate) struct ScaleOffsetCodec {
    data_type: DataType,
    elem: ElemType,
    offset: Num,
    scale: Num,
    configuration: Option<Map<String, Value>>,
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let data_type = repr.data_type;
    let elem = match data_type {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Float16
        | DataType::Float32
        | DataType::Float64 => ElemType::parse(NAME, "data type", &data_type.v2_typestr())?,
        other => {
            return Err(invalid(
                NAME,
                format!("cannot scale {other} elements (integers and floats only)"),
            ))
        }
    };
    if let Some(other) = spec
        .configuration
        .iter()
        .flat_map(|c| c.keys())
        .find(|k| *k != "offset" && *k != "scale")
    {
        return Err(invalid(
            NAME,
            format!("unknown configuration member {other:?}"),
        ));
    }
    let scalar = |key: &str, default: i64| -> crate::Result<Num> {
        match spec.get(key) {
            None => Ok(if elem.ty.is_float() {
                Num::F(default as f64)
            } else {
                Num::I(i128::from(default))
            }),
            Some(v) => {
                let fill = FillValue::from_v3_json(v, data_type).map_err(|_| {
                    invalid(NAME, format!("{key} {v} is not a value of {data_type}"))
                })?;
                Ok(elem.read(fill.as_bytes()))
            }
        }
    };
    let offset = scalar("offset", 0)?;
    let scale = scalar("scale", 1)?;
    if matches!(scale, Num::I(0)) || matches!(scale, Num::F(f) if f == 0.0) {
        return Err(invalid(NAME, "scale must not be zero"));
    }
    Ok(Codec::ArrayToArray(Arc::new(ScaleOffsetCodec {
        data_type,
        elem,
        offset,
        scale,
        configuration: spec.configuration.clone(),
    })))
}

/// The inclusive range of an integer type.
fn int_range(ty: NumType) -> (i128, i128) {
    let bits = 8 * ty.size as u32;
    if ty.kind == Kind::Int {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    }
}

impl ScaleOffsetCodec {
    fn ty(&self) -> NumType {
        self.elem.ty
    }

    fn ints(&self) -> (i128, i128) {
        let int = |n: Num| match n {
            Num::I(i) => i,
            Num::F(f) => f as i128,
        };
        (int(self.offset), int(self.scale))
    }

    /// A result that must fit the integer type (int64 wraps instead, as in zarr-python).
    fn fit(&self, exact: Option<i128>, wrapped: i64) -> std::result::Result<Num, String> {
        if self.data_type == DataType::Int64 {
            return Ok(Num::I(i128::from(wrapped)));
        }
        let (lo, hi) = int_range(self.ty());
        match exact {
            Some(v) if (lo..=hi).contains(&v) => Ok(Num::I(v)),
            _ => Err(format!(
                "produced {}, outside the range of {} [{lo}, {hi}]",
                exact.map_or("a value beyond 2^127".to_string(), |v| v.to_string()),
                self.data_type
            )),
        }
    }

    fn encode_one(&self, v: Num) -> std::result::Result<Num, String> {
        let t = self.ty();
        if t.is_float() {
            return Ok(t.mul(t.sub(v, self.offset), self.scale));
        }
        let (o, s) = self.ints();
        let Num::I(x) = v else {
            return Err("expected an integer".into());
        };
        // x - o fits i128 for 64-bit values; the product may not (uint64).
        let exact = (x - o).checked_mul(s);
        let wrapped = (x as i64).wrapping_sub(o as i64).wrapping_mul(s as i64);
        self.fit(exact, wrapped)
    }

    fn decode_one(&self, v: Num) -> std::result::Result<Num, String> {
        let t = self.ty();
        if t.is_float() {
            return Ok(t.add(t.div(v, self.scale), self.offset));
        }
        let (o, s) = self.ints();
        let Num::I(x) = v else {
            return Err("expected an integer".into());
        };
        if x % s != 0 {
            return Err(format!(
                "{x} is not a multiple of scale {s}: the result is not an integer of {}",
                self.data_type
            ));
        }
        let exact = Some(x / s + o);
        let wrapped = (x as i64).wrapping_div(s as i64).wrapping_add(o as i64);
        self.fit(exact, wrapped)
    }

    fn map(
        &self,
        data: &[u8],
        f: impl Fn(&Self, Num) -> std::result::Result<Num, String>,
        what: &str,
    ) -> Result<Vec<u8>> {
        let size = self.elem.size();
        if !data.len().is_multiple_of(size) {
            return Err(Error::codec(
                NAME,
                format!(
                    "{} bytes are not whole {} elements",
                    data.len(),
                    self.data_type
                ),
            ));
        }
        let mut out = vec![0u8; data.len()];
        for (src, dst) in data.chunks_exact(size).zip(out.chunks_exact_mut(size)) {
            let v = f(self, self.elem.read(src))
                .map_err(|reason| Error::codec(NAME, format!("{what}: {reason}")))?;
            self.elem.write(v, dst);
        }
        Ok(out)
    }

    fn check(&self, repr: &ChunkRepr, len: usize) -> Result<()> {
        if repr.data_type != self.data_type {
            return Err(Error::codec(
                NAME,
                format!(
                    "built for {} elements, given {}",
                    self.data_type, repr.data_type
                ),
            ));
        }
        if len != repr.byte_len() {
            return Err(Error::DecodedSize {
                expected: repr.byte_len(),
                actual: len,
            });
        }
        Ok(())
    }
}

impl ArrayToArrayCodec for ScaleOffsetCodec {
    fn encoded_repr(&self, decoded: &ChunkRepr) -> Result<ChunkRepr> {
        // The fill value goes through the codec as the elements do.
        let fill = self.map(
            decoded.fill_value.as_bytes(),
            Self::encode_one,
            "the fill value",
        )?;
        Ok(ChunkRepr {
            fill_value: FillValue::from_bytes(fill),
            ..decoded.clone()
        })
    }

    fn encode(&self, data: Vec<u8>, decoded: &ChunkRepr) -> Result<Vec<u8>> {
        self.check(decoded, data.len())?;
        self.map(&data, Self::encode_one, "encoding")
    }

    fn decode(&self, data: Vec<u8>, decoded: &ChunkRepr) -> Result<Vec<u8>> {
        self.check(decoded, data.len())?;
        self.map(&data, Self::decode_one, "decoding")
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec {
            name: NAME.to_string(),
            configuration: self.configuration.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn codec(d: DataType, config: Value) -> crate::Result<Arc<dyn ArrayToArrayCodec>> {
        match build(&CodecSpec::new(NAME, config), &repr(d, 1))? {
            Codec::ArrayToArray(c) => Ok(c),
            _ => panic!("scale_offset is an array-to-array codec"),
        }
    }

    fn repr(d: DataType, n: u64) -> ChunkRepr {
        ChunkRepr {
            shape: vec![n],
            data_type: d,
            fill_value: FillValue::zero(d),
        }
    }

    fn i16s(v: &[i16]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn floats_compute_in_their_own_width() {
        let c = codec(DataType::Float32, json!({"offset": 5, "scale": 0.1})).expect("valid");
        let r = repr(DataType::Float32, 3);
        let data: Vec<u8> = [23.0f32, f32::NAN, f32::INFINITY]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let out = c.decode(data, &r).expect("decodes");
        let got: Vec<f32> = out
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        // numpy: np.float32(23) / np.float32(0.1) + np.float32(5), each step rounded to float32.
        let want = (23.0f32 / 0.1f32) + 5.0f32;
        assert_eq!(got[0].to_bits(), want.to_bits());
        assert!(got[1].is_nan());
        assert_eq!(got[2], f32::INFINITY);
    }

    #[test]
    fn integers_divide_exactly_or_fail() {
        let c = codec(DataType::Int16, json!({"offset": 1000, "scale": 2})).expect("valid");
        let r = repr(DataType::Int16, 2);
        let out = c.decode(i16s(&[4, -6]), &r).expect("exact");
        assert_eq!(out, i16s(&[1002, 997]));
        let e = c
            .decode(i16s(&[3, 4]), &r)
            .expect_err("remainder")
            .to_string();
        assert!(e.contains("not a multiple of scale 2"), "{e}");
        // 30000 / 2 + 20000 does not fit int16.
        let far = codec(DataType::Int16, json!({"offset": 20000, "scale": 2})).expect("valid");
        let e = far
            .decode(i16s(&[30000, 0]), &r)
            .expect_err("overflow")
            .to_string();
        assert!(
            e.contains("produced 35000, outside the range of int16"),
            "{e}"
        );
        assert_eq!(
            c.encode(i16s(&[1002, 997]), &r).expect("encodes"),
            i16s(&[4, -6])
        );
        assert!(c.encode(i16s(&[-32000, 0]), &r).is_err());
    }

    #[test]
    fn int64_wraps_as_numpy_does() {
        let c = codec(DataType::Int64, json!({"offset": i64::MAX})).expect("valid");
        let r = repr(DataType::Int64, 1);
        let out = c.decode(1i64.to_le_bytes().to_vec(), &r).expect("wraps");
        assert_eq!(out, i64::MIN.to_le_bytes().to_vec());
        let u = codec(DataType::UInt64, json!({"offset": u64::MAX})).expect("valid");
        assert!(u
            .decode(1u64.to_le_bytes().to_vec(), &repr(DataType::UInt64, 1))
            .is_err());
    }

    #[test]
    fn bad_configurations_are_refused() {
        for (d, config) in [
            (DataType::Float32, json!({"scale": 0})),
            (DataType::Float32, json!({"scale": -0.0})),
            (DataType::Int8, json!({"offset": 1000})),
            (DataType::Int8, json!({"offset": 1.5})),
            (DataType::Int8, json!({"offset": "x"})),
            (DataType::Float32, json!({"scale": 2, "astype": "<u1"})),
            (DataType::Bool, json!({})),
            (DataType::Complex64, json!({})),
        ] {
            assert!(codec(d, config.clone()).is_err(), "{d} {config}");
        }
        assert!(codec(DataType::UInt8, json!(null)).is_ok());
    }

    #[test]
    fn the_fill_value_is_encoded_too() {
        let c = codec(DataType::Int16, json!({"offset": 10, "scale": 3})).expect("valid");
        let mut r = repr(DataType::Int16, 1);
        r.fill_value = FillValue::from_bytes(i16s(&[12]));
        assert_eq!(
            c.encoded_repr(&r).expect("fits").fill_value.as_bytes(),
            i16s(&[6]).as_slice()
        );
    }
}
