//! `cast_value` (zarr-extensions): an array→array codec that converts each element's value into another
//! numeric type, with a rounding mode, an out-of-range mode (`clamp`, `wrap`, or none: an error) and a
//! `scalar_map` of values mapped explicitly in each direction.
//!
//! The conversion itself is the `zarr-cast-value` crate, the casting core that zarr-python 3.2+ calls
//! through the `cast-value-rs` package, so every element (NaN, infinities, values out of range,
//! half-way roundings) decodes exactly as zarr-python decodes it. This module only reads the
//! configuration and moves little-endian bytes in and out of typed slices.

use std::sync::Arc;

use serde_json::Value;
use zarr_cast_value::{
    convert_slice_float_to_float, convert_slice_float_to_int, convert_slice_int_to_float,
    convert_slice_int_to_int, f16, CastError, CastFloat, CastInt, CastInto, FloatToFloatConfig,
    FloatToIntConfig, IntToFloatConfig, IntToIntConfig, MapEntry, OutOfRangeMode, RoundingMode,
};
use zshard_core::{
    json_float, ArrayToArrayCodec, ChunkRepr, CodecSpec, DataType, Error, FillValue, Result,
};

use crate::error::invalid;
use crate::numeric::NumDt;
use crate::registry::Codec;

const NAME: &str = "cast_value";

/// What a conversion needs besides the values: the modes and the scalar map of its direction.
struct Settings<'a> {
    rounding: RoundingMode,
    out_of_range: Option<OutOfRangeMode>,
    /// `[input, output]` pairs as JSON, in the types of this direction's input and output.
    map: &'a [(Value, Value)],
}

/// An element type read from and written to little-endian bytes, and read from JSON as zarr-python
/// reads a `scalar_map` entry.
trait Elem: Copy + Sized {
    const SIZE: usize;
    const ZERO: Self;
    fn read(bytes: &[u8]) -> Self;
    fn write(self, out: &mut [u8]);
    fn from_json(value: &Value) -> Option<Self>;
}

/// A JSON integer (or a float with an integral value, which zarr-python reads as that integer).
fn json_int(value: &Value) -> Option<i128> {
    let n = value.as_number()?;
    if let Some(i) = n.as_i64() {
        return Some(i128::from(i));
    }
    if let Some(u) = n.as_u64() {
        return Some(i128::from(u));
    }
    let f = n.as_f64()?;
    // Beyond 2^64 no integer type holds it; the bound keeps the cast below exact.
    (f.fract() == 0.0 && f.abs() <= 1.9e19).then_some(f as i128)
}

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            const ZERO: Self = 0;
            fn read(bytes: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(bytes);
                <$t>::from_le_bytes(a)
            }
            fn write(self, out: &mut [u8]) {
                out.copy_from_slice(&self.to_le_bytes());
            }
            fn from_json(value: &Value) -> Option<Self> {
                json_int(value).and_then(|i| <$t>::try_from(i).ok())
            }
        }
    )*};
}
int_elem!(i8, i16, i32, i64, u8, u16, u32, u64);

impl Elem for f32 {
    const SIZE: usize = 4;
    const ZERO: Self = 0.0;
    fn read(bytes: &[u8]) -> Self {
        f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
    }
    fn write(self, out: &mut [u8]) {
        out.copy_from_slice(&self.to_le_bytes());
    }
    fn from_json(value: &Value) -> Option<Self> {
        // A Python float into f32, as cast-value-rs takes it (rounded to nearest).
        json_float(value).map(|f| f as f32)
    }
}

impl Elem for f64 {
    const SIZE: usize = 8;
    const ZERO: Self = 0.0;
    fn read(bytes: &[u8]) -> Self {
        let mut a = [0u8; 8];
        a.copy_from_slice(bytes);
        f64::from_le_bytes(a)
    }
    fn write(self, out: &mut [u8]) {
        out.copy_from_slice(&self.to_le_bytes());
    }
    fn from_json(value: &Value) -> Option<Self> {
        json_float(value)
    }
}

impl Elem for f16 {
    const SIZE: usize = 2;
    const ZERO: Self = f16::ZERO;
    fn read(bytes: &[u8]) -> Self {
        f16::from_le_bytes([bytes[0], bytes[1]])
    }
    fn write(self, out: &mut [u8]) {
        out.copy_from_slice(&self.to_le_bytes());
    }
    fn from_json(value: &Value) -> Option<Self> {
        // cast-value-rs reads a float16 entry as an f32 first, then rounds that to float16.
        json_float(value).map(|f| f16::from_f32(f as f32))
    }
}

fn read_all<T: Elem>(input: &[u8]) -> Vec<T> {
    input.chunks_exact(T::SIZE).map(T::read).collect()
}

fn write_all<T: Elem>(values: &[T]) -> Vec<u8> {
    let mut out = vec![0u8; values.len() * T::SIZE];
    for (v, o) in values.iter().zip(out.chunks_exact_mut(T::SIZE)) {
        v.write(o);
    }
    out
}

fn entries<S: Elem, D: Elem>(
    map: &[(Value, Value)],
) -> std::result::Result<Vec<MapEntry<S, D>>, String> {
    map.iter()
        .map(|(k, v)| match (S::from_json(k), D::from_json(v)) {
            (Some(src), Some(tgt)) => Ok(MapEntry { src, tgt }),
            (None, _) => Err(format!(
                "scalar_map key {k} is not a value of the input type"
            )),
            (_, None) => Err(format!(
                "scalar_map value {v} is not a value of the output type"
            )),
        })
        .collect()
}

type Converted = std::result::Result<Vec<u8>, String>;

fn run<S: Elem, D: Elem>(
    input: &[u8],
    convert: impl FnOnce(&[S], &mut [D]) -> std::result::Result<(), CastError>,
) -> Converted {
    let src = read_all::<S>(input);
    let mut dst = vec![D::ZERO; src.len()];
    convert(&src, &mut dst).map_err(|e| e.to_string())?;
    Ok(write_all(&dst))
}

fn int_to_int<S, D>(input: &[u8], s: &Settings<'_>) -> Converted
where
    S: Elem + CastInt + CastInto<D>,
    D: Elem + CastInt,
{
    let config = IntToIntConfig {
        map_entries: entries::<S, D>(s.map)?,
        out_of_range: s.out_of_range,
    };
    run(input, |a, b| convert_slice_int_to_int(a, b, &config))
}

fn int_to_float<S, D>(input: &[u8], s: &Settings<'_>) -> Converted
where
    S: Elem + CastInt + CastInto<D>,
    D: Elem + CastFloat,
{
    let config = IntToFloatConfig {
        map_entries: entries::<S, D>(s.map)?,
        rounding: s.rounding,
        out_of_range: s.out_of_range,
    };
    run(input, |a, b| convert_slice_int_to_float(a, b, &config))
}

fn float_to_int<S, D>(input: &[u8], s: &Settings<'_>) -> Converted
where
    S: Elem + CastFloat + CastInto<D> + 'static,
    D: Elem + CastInt + 'static,
{
    let config = FloatToIntConfig {
        map_entries: entries::<S, D>(s.map)?,
        rounding: s.rounding,
        out_of_range: s.out_of_range,
    };
    run(input, |a, b| convert_slice_float_to_int(a, b, &config))
}

fn float_to_float<S, D>(input: &[u8], s: &Settings<'_>) -> Converted
where
    S: Elem + CastFloat + CastInto<D> + 'static,
    D: Elem + CastFloat + 'static,
{
    let config = FloatToFloatConfig {
        map_entries: entries::<S, D>(s.map)?,
        rounding: s.rounding,
        out_of_range: s.out_of_range,
    };
    run(input, |a, b| convert_slice_float_to_float(a, b, &config))
}

macro_rules! pair {
    (int, int, $s:ty, $d:ty, $i:expr, $set:expr) => {
        int_to_int::<$s, $d>($i, $set)
    };
    (int, float, $s:ty, $d:ty, $i:expr, $set:expr) => {
        int_to_float::<$s, $d>($i, $set)
    };
    (float, int, $s:ty, $d:ty, $i:expr, $set:expr) => {
        float_to_int::<$s, $d>($i, $set)
    };
    (float, float, $s:ty, $d:ty, $i:expr, $set:expr) => {
        float_to_float::<$s, $d>($i, $set)
    };
}

macro_rules! from {
    ($kind:ident, $s:ty, $to:expr, $i:expr, $set:expr) => {
        match $to {
            NumDt::I8 => pair!($kind, int, $s, i8, $i, $set),
            NumDt::I16 => pair!($kind, int, $s, i16, $i, $set),
            NumDt::I32 => pair!($kind, int, $s, i32, $i, $set),
            NumDt::I64 => pair!($kind, int, $s, i64, $i, $set),
            NumDt::U8 => pair!($kind, int, $s, u8, $i, $set),
            NumDt::U16 => pair!($kind, int, $s, u16, $i, $set),
            NumDt::U32 => pair!($kind, int, $s, u32, $i, $set),
            NumDt::U64 => pair!($kind, int, $s, u64, $i, $set),
            NumDt::F16 => pair!($kind, float, $s, f16, $i, $set),
            NumDt::F32 => pair!($kind, float, $s, f32, $i, $set),
            NumDt::F64 => pair!($kind, float, $s, f64, $i, $set),
        }
    };
}

/// Converts whole little-endian elements of `from` in `input` into elements of `to`.
fn convert(input: &[u8], from: NumDt, to: NumDt, s: &Settings<'_>) -> Converted {
    match from {
        NumDt::I8 => from!(int, i8, to, input, s),
        NumDt::I16 => from!(int, i16, to, input, s),
        NumDt::I32 => from!(int, i32, to, input, s),
        NumDt::I64 => from!(int, i64, to, input, s),
        NumDt::U8 => from!(int, u8, to, input, s),
        NumDt::U16 => from!(int, u16, to, input, s),
        NumDt::U32 => from!(int, u32, to, input, s),
        NumDt::U64 => from!(int, u64, to, input, s),
        NumDt::F16 => from!(float, f16, to, input, s),
        NumDt::F32 => from!(float, f32, to, input, s),
        NumDt::F64 => from!(float, f64, to, input, s),
    }
}

#[derive(Debug)]
pub(crate) struct CastValueCodec {
    /// The type of the decoded elements (the codec's input when encoding).
    decoded: DataType,
    /// `data_type`: the type of the encoded elements.
    encoded: DataType,
    rounding: RoundingMode,
    out_of_range: Option<OutOfRangeMode>,
    encode_map: Vec<(Value, Value)>,
    decode_map: Vec<(Value, Value)>,
    /// The configuration as read, for [`ArrayToArrayCodec::spec`].
    configuration: Value,
}

const MODES: &str = "nearest-even, towards-zero, towards-positive, towards-negative, nearest-away";

fn scalar_map(
    config: &serde_json::Map<String, Value>,
    direction: &str,
) -> crate::Result<Vec<(Value, Value)>> {
    let Some(map) = config.get("scalar_map") else {
        return Ok(Vec::new());
    };
    let map = map
        .as_object()
        .ok_or_else(|| invalid(NAME, "scalar_map must be an object"))?;
    if let Some(other) = map.keys().find(|k| *k != "encode" && *k != "decode") {
        return Err(invalid(
            NAME,
            format!("scalar_map has an unknown member {other:?}"),
        ));
    }
    let Some(list) = map.get(direction) else {
        return Ok(Vec::new());
    };
    let items = list.as_array().ok_or_else(|| {
        invalid(
            NAME,
            format!("scalar_map.{direction} must be a list of pairs"),
        )
    })?;
    let mut out: Vec<(Value, Value)> = Vec::with_capacity(items.len());
    for item in items {
        match item.as_array().map(Vec::as_slice) {
            Some([k, v]) => {
                // The spec reads a repeated key's first pair, zarr-python 3.4 its last: refused, so
                // that no reader disagrees with what zshard decodes.
                if out.iter().any(|(seen, _)| seen == k) {
                    return Err(invalid(
                        NAME,
                        format!("scalar_map.{direction} repeats the key {k}"),
                    ));
                }
                out.push((k.clone(), v.clone()));
            }
            _ => {
                return Err(invalid(
                    NAME,
                    format!("scalar_map.{direction} entry {item} is not an [input, output] pair"),
                ))
            }
        }
    }
    Ok(out)
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let config = spec
        .configuration
        .as_ref()
        .ok_or_else(|| invalid(NAME, "missing configuration (data_type)"))?;
    if let Some(other) = config
        .keys()
        .find(|k| !["data_type", "rounding", "out_of_range", "scalar_map"].contains(&k.as_str()))
    {
        return Err(invalid(
            NAME,
            format!("unknown configuration member {other:?}"),
        ));
    }
    let numeric = |d: DataType| NumDt::of(d).is_some();
    if !numeric(repr.data_type) {
        return Err(invalid(
            NAME,
            format!(
                "cannot cast {} elements (integers and float16/32/64 only)",
                repr.data_type
            ),
        ));
    }
    let target = config
        .get("data_type")
        .ok_or_else(|| invalid(NAME, "missing data_type"))?;
    let encoded = DataType::from_v3_json(target)
        .ok()
        .filter(|d| numeric(*d))
        .ok_or_else(|| {
            invalid(
                NAME,
                format!("data_type {target} is not an integer or float16/32/64 type"),
            )
        })?;
    let rounding = match config.get("rounding") {
        None => RoundingMode::NearestEven,
        Some(v) => v
            .as_str()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| invalid(NAME, format!("rounding {v} is not one of {MODES}")))?,
    };
    let out_of_range = match config.get("out_of_range") {
        None => None,
        Some(v) => Some(
            v.as_str()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| invalid(NAME, format!("out_of_range {v} is not clamp or wrap")))?,
        ),
    };
    if out_of_range == Some(OutOfRangeMode::Wrap) && !NumDt::of(encoded).is_some_and(NumDt::is_int)
    {
        return Err(invalid(
            NAME,
            format!("out_of_range wrap needs an integer data_type, not {encoded}"),
        ));
    }
    let codec = CastValueCodec {
        decoded: repr.data_type,
        encoded,
        rounding,
        out_of_range,
        encode_map: scalar_map(config, "encode")?,
        decode_map: scalar_map(config, "decode")?,
        configuration: Value::Object(config.clone()),
    };
    // Every scalar_map entry must be a value of its types, in both directions.
    for (map, from, to, direction) in [
        (&codec.encode_map, repr.data_type, encoded, "encode"),
        (&codec.decode_map, encoded, repr.data_type, "decode"),
    ] {
        let (from, to) = (codec.num(from)?, codec.num(to)?);
        let settings = codec.settings(map);
        convert(&[], from, to, &settings)
            .map_err(|e| invalid(NAME, format!("scalar_map.{direction}: {e}")))?;
    }
    Ok(Codec::ArrayToArray(Arc::new(codec)))
}

impl CastValueCodec {
    fn num(&self, d: DataType) -> Result<NumDt> {
        NumDt::of(d).ok_or_else(|| Error::codec(NAME, format!("cannot cast {d} elements")))
    }

    fn settings<'a>(&self, map: &'a [(Value, Value)]) -> Settings<'a> {
        Settings {
            rounding: self.rounding,
            out_of_range: self.out_of_range,
            map,
        }
    }

    fn check_input(&self, decoded: &ChunkRepr) -> Result<()> {
        if decoded.data_type == self.decoded {
            Ok(())
        } else {
            Err(Error::codec(
                NAME,
                format!(
                    "built for {} elements, given {}",
                    self.decoded, decoded.data_type
                ),
            ))
        }
    }

    /// Converts in the encoding direction (decoded type to `data_type`).
    fn encode_values(&self, data: &[u8]) -> Result<Vec<u8>> {
        let (from, to) = (self.num(self.decoded)?, self.num(self.encoded)?);
        convert(data, from, to, &self.settings(&self.encode_map)).map_err(|e| {
            Error::codec(
                NAME,
                format!("encoding {} as {}: {e}", self.decoded, self.encoded),
            )
        })
    }
}

impl ArrayToArrayCodec for CastValueCodec {
    fn encoded_repr(&self, decoded: &ChunkRepr) -> Result<ChunkRepr> {
        self.check_input(decoded)?;
        // The fill value is cast as the elements are; one that cannot be is an error (zarr-python
        // refuses such an array when it opens it).
        let fill = self
            .encode_values(decoded.fill_value.as_bytes())
            .map_err(|e| {
                Error::codec(
                    NAME,
                    format!(
                        "the fill value {} cannot be cast to {}: {e}",
                        decoded.fill_value.to_v3_json(self.decoded),
                        self.encoded
                    ),
                )
            })?;
        Ok(ChunkRepr {
            shape: decoded.shape.clone(),
            data_type: self.encoded,
            fill_value: FillValue::from_bytes(fill),
        })
    }

    fn encode(&self, data: Vec<u8>, decoded: &ChunkRepr) -> Result<Vec<u8>> {
        self.check_input(decoded)?;
        if data.len() != decoded.byte_len() {
            return Err(Error::DecodedSize {
                expected: decoded.byte_len(),
                actual: data.len(),
            });
        }
        self.encode_values(&data)
    }

    fn decode(&self, data: Vec<u8>, decoded: &ChunkRepr) -> Result<Vec<u8>> {
        self.check_input(decoded)?;
        let expected = (decoded.elements() as usize).saturating_mul(self.encoded.size());
        if data.len() != expected {
            return Err(Error::DecodedSize {
                expected,
                actual: data.len(),
            });
        }
        let (from, to) = (self.num(self.encoded)?, self.num(self.decoded)?);
        convert(&data, from, to, &self.settings(&self.decode_map)).map_err(|e| {
            Error::codec(
                NAME,
                format!("decoding {} into {}: {e}", self.encoded, self.decoded),
            )
        })
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new(NAME, self.configuration.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn codec(decoded: DataType, config: Value) -> crate::Result<Arc<dyn ArrayToArrayCodec>> {
        let repr = ChunkRepr {
            shape: vec![4],
            data_type: decoded,
            fill_value: FillValue::zero(decoded),
        };
        match build(&CodecSpec::new(NAME, config), &repr)? {
            Codec::ArrayToArray(c) => Ok(c),
            _ => panic!("cast_value is an array-to-array codec"),
        }
    }

    fn repr(d: DataType, n: u64) -> ChunkRepr {
        ChunkRepr {
            shape: vec![n],
            data_type: d,
            fill_value: FillValue::zero(d),
        }
    }

    fn f64s(v: &[f64]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn rounding_modes_on_half_way_values() {
        let input = f64s(&[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, -2.6]);
        for (mode, want) in [
            ("nearest-even", [0i8, 2, 2, 0, -2, -2, 2, -3]),
            ("nearest-away", [1, 2, 3, -1, -2, -3, 2, -3]),
            ("towards-zero", [0, 1, 2, 0, -1, -2, 2, -2]),
            ("towards-positive", [1, 2, 3, 0, -1, -2, 3, -2]),
            ("towards-negative", [0, 1, 2, -1, -2, -3, 2, -3]),
        ] {
            let c = codec(
                DataType::Float64,
                json!({"data_type": "int8", "rounding": mode}),
            )
            .expect("valid");
            let out = c
                .encode(input.clone(), &repr(DataType::Float64, 8))
                .expect(mode);
            let got: Vec<i8> = out.iter().map(|&b| b as i8).collect();
            assert_eq!(got, want, "{mode}");
        }
    }

    #[test]
    fn out_of_range_modes() {
        let input = f64s(&[128.0, -129.0, 300.0]);
        let r = repr(DataType::Float64, 3);
        let none = codec(DataType::Float64, json!({"data_type": "int8"})).expect("valid");
        let e = none
            .encode(input.clone(), &r)
            .expect_err("out of range")
            .to_string();
        assert!(e.contains("out of range"), "{e}");
        let clamp = codec(
            DataType::Float64,
            json!({"data_type": "int8", "out_of_range": "clamp"}),
        )
        .expect("valid");
        assert_eq!(
            clamp.encode(input.clone(), &r).expect("clamps"),
            vec![127, 128, 127]
        );
        let wrap = codec(
            DataType::Float64,
            json!({"data_type": "int8", "out_of_range": "wrap"}),
        )
        .expect("valid");
        // 128 -> -128, -129 -> 127, 300 -> 44.
        assert_eq!(wrap.encode(input, &r).expect("wraps"), vec![0x80, 127, 44]);
        assert!(codec(
            DataType::Int32,
            json!({"data_type": "float32", "out_of_range": "wrap"})
        )
        .is_err());
    }

    #[test]
    fn nan_needs_a_scalar_map_to_become_an_integer() {
        let r = repr(DataType::Float64, 2);
        let plain = codec(
            DataType::Float64,
            json!({"data_type": "uint8", "out_of_range": "clamp"}),
        )
        .expect("valid");
        assert!(plain.encode(f64s(&[f64::NAN, 1.0]), &r).is_err());
        let mapped = codec(
            DataType::Float64,
            json!({"data_type": "uint8", "scalar_map": {"encode": [["NaN", 0]], "decode": [[0, "NaN"]]}}),
        )
        .expect("valid");
        let enc = mapped.encode(f64s(&[f64::NAN, 7.0]), &r).expect("maps NaN");
        assert_eq!(enc, vec![0, 7]);
        let dec = mapped.decode(enc, &r).expect("decodes");
        let back: Vec<f64> = dec.chunks_exact(8).map(f64::read).collect();
        assert!(back[0].is_nan());
        assert_eq!(back[1], 7.0);
    }

    #[test]
    fn float_narrowing_keeps_nan_and_clamps_to_infinity() {
        let r = repr(DataType::Float64, 3);
        let c = codec(
            DataType::Float64,
            json!({"data_type": "float16", "out_of_range": "clamp"}),
        )
        .expect("valid");
        let out = c.encode(f64s(&[1e6, f64::NAN, -0.0]), &r).expect("casts");
        let h: Vec<f16> = out.chunks_exact(2).map(f16::read).collect();
        assert_eq!(h[0], f16::INFINITY);
        assert!(h[1].is_nan());
        assert!(h[2].is_sign_negative() && h[2] == f16::ZERO);
        let strict = codec(DataType::Float64, json!({"data_type": "float16"})).expect("valid");
        assert!(strict.encode(f64s(&[1e6, 0.0, 0.0]), &r).is_err());
    }

    #[test]
    fn bad_configurations_are_refused() {
        for (d, config) in [
            (DataType::Float32, json!({})),
            (DataType::Float32, json!({"data_type": "bool"})),
            (DataType::Float32, json!({"data_type": "complex64"})),
            (DataType::Bool, json!({"data_type": "uint8"})),
            (
                DataType::Float32,
                json!({"data_type": "uint8", "rounding": "up"}),
            ),
            (
                DataType::Float32,
                json!({"data_type": "uint8", "out_of_range": "saturate"}),
            ),
            (DataType::Float32, json!({"data_type": "uint8", "extra": 1})),
            (
                DataType::Float32,
                json!({"data_type": "uint8", "scalar_map": {"encode": [["NaN", 256]]}}),
            ),
            (
                DataType::Float32,
                json!({"data_type": "uint8", "scalar_map": {"encode": [["NaN"]]}}),
            ),
            (
                DataType::Float32,
                json!({"data_type": "uint8", "scalar_map": {"decode": [[0, "x"]]}}),
            ),
            (
                DataType::Float32,
                json!({"data_type": "uint8", "scalar_map": {"encode": [[1, 1], [1, 2]]}}),
            ),
            (
                DataType::Float32,
                json!({"data_type": "uint8", "scalar_map": {"both": []}}),
            ),
            (
                DataType::Float32,
                json!({"data_type": "uint8", "scalar_map": {"decode": [[1.5, 0]]}}),
            ),
        ] {
            assert!(codec(d, config.clone()).is_err(), "{d} {config}");
        }
    }

    #[test]
    fn the_fill_value_is_cast_or_refused() {
        let c = codec(DataType::Float32, json!({"data_type": "uint8"})).expect("valid");
        let mut r = repr(DataType::Float32, 2);
        r.fill_value = FillValue::from_bytes(f32::NAN.to_le_bytes().to_vec());
        let e = c
            .encoded_repr(&r)
            .expect_err("NaN has no uint8")
            .to_string();
        assert!(e.contains("fill value \"NaN\""), "{e}");
        r.fill_value = FillValue::from_bytes(7.5f32.to_le_bytes().to_vec());
        assert_eq!(
            c.encoded_repr(&r).expect("casts").fill_value.as_bytes(),
            &[8]
        );
    }

    #[test]
    fn a_chunk_of_the_wrong_size_is_refused() {
        let c = codec(DataType::Float32, json!({"data_type": "uint8"})).expect("valid");
        assert!(c
            .decode(vec![1, 2, 3], &repr(DataType::Float32, 4))
            .is_err());
    }
}
