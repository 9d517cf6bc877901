use serde_json::Value;

use crate::dtype::DataType;
use crate::error::{Error, Result};
use crate::minifloat::{SmallFloat, Unrepresentable};

/// The fill value of an array as the little-endian bytes of one element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FillValue {
    bytes: Vec<u8>,
}

impl FillValue {
    /// A fill value from the little-endian bytes of one element.
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        FillValue { bytes }
    }

    /// All-zero bytes: the fill value zarr-python assumes when a v2 array says `null`.
    /// For strings it is the empty string.
    pub fn zero(dtype: DataType) -> Self {
        let size = if dtype.is_variable() { 0 } else { dtype.size() };
        FillValue {
            bytes: vec![0; size],
        }
    }

    /// The little-endian bytes of one element; for strings, the UTF-8 bytes of the fill string.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Parses a Zarr v2 `.zarray` fill value: `null`, a number, a boolean, or one of "NaN", "Infinity",
    /// "-Infinity".
    ///
    /// A structured (struct) array's fill value is the base64 of one element as stored, in the
    /// array's byte order: the caller swaps a big-endian one.
    pub fn from_v2_json(value: &Value, dtype: DataType) -> Result<Self> {
        match (value, dtype) {
            (Value::Null, _) => Ok(Self::zero(dtype)),
            (Value::String(_), DataType::Struct(t)) => Self::bytes_from_json(value, 0)
                .filter(|f| f.bytes.len() == t.size())
                .ok_or_else(|| Error::InvalidFillValue {
                    value: value.to_string(),
                    data_type: dtype.to_string(),
                    reason: format!("expected the base64 of one element ({} bytes)", t.size()),
                }),
            _ => Self::from_json(value, dtype),
        }
    }

    /// Parses a Zarr v3 `zarr.json` fill value: a number, a boolean, "NaN", "Infinity", "-Infinity", a
    /// hexadecimal bit pattern "0x...", or `[real, imag]` for complex types.
    pub fn from_v3_json(value: &Value, dtype: DataType) -> Result<Self> {
        Self::from_json(value, dtype)
    }

    fn from_json(value: &Value, dtype: DataType) -> Result<Self> {
        let invalid = |reason: &str| Error::InvalidFillValue {
            value: value.to_string(),
            data_type: dtype.to_string(),
            reason: reason.to_string(),
        };
        if let DataType::NullTerminatedBytes(n) = dtype {
            return Self::bytes_from_json(value, n as usize)
                .ok_or_else(|| invalid("expected base64-encoded bytes"));
        }
        if let DataType::RawBits(n) = dtype {
            return Self::raw_bits_from_json(value, n as usize).ok_or_else(|| {
                invalid(&format!("expected a list of {n} bytes (integers 0 to 255)"))
            });
        }
        match dtype {
            DataType::Struct(t) => {
                // An object with a value for every field, by name (nested structs nest).
                let members = value
                    .as_object()
                    .ok_or_else(|| invalid("expected an object of field values"))?;
                if let Some(extra) = members
                    .keys()
                    .find(|k| !t.fields().iter().any(|f| &f.name == *k))
                {
                    return Err(invalid(&format!("{extra:?} is not a field")));
                }
                let mut bytes = Vec::with_capacity(t.size());
                for field in t.fields() {
                    let v = members
                        .get(&field.name)
                        .ok_or_else(|| invalid(&format!("no value for field {:?}", field.name)))?;
                    bytes.extend_from_slice(&Self::from_json(v, field.data_type)?.bytes);
                }
                return Ok(FillValue { bytes });
            }
            DataType::FixedLengthUtf32(n) => {
                return Self::utf32_from_json(value, n as usize)
                    .ok_or_else(|| invalid("expected a string of at most the array's length"))
            }
            DataType::String => {
                return Self::string_from_json(value)
                    .ok_or_else(|| invalid("expected a string or an integer"))
            }
            DataType::Bytes => {
                return Self::bytes_from_json(value, 0)
                    .ok_or_else(|| invalid("expected base64-encoded bytes"))
            }
            DataType::DateTime64(..) | DataType::TimeDelta64(..) => {
                let v = match value {
                    Value::String(s) if s == "NaT" => Some(i64::MIN),
                    other => int::<i64>(other),
                };
                return v
                    .map(|v| FillValue {
                        bytes: v.to_le_bytes().to_vec(),
                    })
                    .ok_or_else(|| invalid("expected a 64-bit integer or \"NaT\""));
            }
            _ => {}
        }
        if let Some(half) = dtype.complex_component() {
            let (re, im) = match value {
                Value::Array(parts) if parts.len() == 2 => (&parts[0], &parts[1]),
                Value::Array(_) => return Err(invalid("expected [real, imaginary]")),
                // A plain number is the real part, as numpy would cast it.
                other => (other, &Value::Null),
            };
            let mut bytes = Self::from_json(re, half)?.bytes;
            let im = if im.is_null() {
                Self::zero(half)
            } else {
                Self::from_json(im, half)?
            };
            bytes.extend_from_slice(&im.bytes);
            return Ok(FillValue { bytes });
        }
        if let Some(hex) = value.as_str().and_then(|s| s.strip_prefix("0x")) {
            let raw = u128::from_str_radix(hex, 16)
                .map_err(|_| invalid("bad hexadecimal bit pattern"))?;
            let size = dtype.size();
            if hex.len() > size * 2 || dtype.value_bits().is_some_and(|bits| raw >> bits != 0) {
                return Err(invalid("bit pattern is wider than the data type"));
            }
            return Ok(FillValue {
                bytes: raw.to_le_bytes()[..size].to_vec(),
            });
        }
        let bytes = match dtype {
            DataType::Bool => match value {
                Value::Bool(b) => Some(vec![u8::from(*b)]),
                Value::Number(n) if n.as_u64() == Some(0) => Some(vec![0]),
                Value::Number(n) if n.as_u64() == Some(1) => Some(vec![1]),
                _ => return Err(invalid("expected true or false")),
            },
            DataType::Int8 => int::<i8>(value).map(|v| v.to_le_bytes().to_vec()),
            DataType::Int16 => int::<i16>(value).map(|v| v.to_le_bytes().to_vec()),
            DataType::Int32 => int::<i32>(value).map(|v| v.to_le_bytes().to_vec()),
            DataType::Int64 => int::<i64>(value).map(|v| v.to_le_bytes().to_vec()),
            DataType::UInt8 => int::<u8>(value).map(|v| v.to_le_bytes().to_vec()),
            DataType::UInt16 => int::<u16>(value).map(|v| v.to_le_bytes().to_vec()),
            DataType::UInt32 => int::<u32>(value).map(|v| v.to_le_bytes().to_vec()),
            DataType::UInt64 => int::<u64>(value).map(|v| v.to_le_bytes().to_vec()),
            DataType::Float16 => {
                json_float(value).map(|v| half::f16::from_f64(v).to_le_bytes().to_vec())
            }
            // `as f32` rounds to nearest, as numpy does when casting a Python float.
            DataType::Float32 => json_float(value).map(|v| (v as f32).to_le_bytes().to_vec()),
            DataType::Float64 => json_float(value).map(|v| v.to_le_bytes().to_vec()),
            // In the low bits, the high ones zero, as tensorstore stores them with `bytes`.
            DataType::Int4 => int::<i8>(value)
                .filter(|v| (-8..=7).contains(v))
                .map(|v| vec![v as u8 & 0x0f]),
            DataType::UInt4 => int::<u8>(value).filter(|&v| v <= 15).map(|v| vec![v]),
            DataType::Int2 => int::<i8>(value)
                .filter(|v| (-2..=1).contains(v))
                .map(|v| vec![v as u8 & 0x03]),
            DataType::UInt2 => int::<u8>(value).filter(|&v| v <= 3).map(|v| vec![v]),
            DataType::BFloat16 => {
                json_float(value).map(|v| half::bf16::from_f64(v).to_le_bytes().to_vec())
            }
            DataType::SmallFloat(t) => {
                let v = json_float(value).ok_or_else(|| invalid("expected a number"))?;
                let code = t.encode(v).map_err(|why| {
                    invalid(match why {
                        Unrepresentable::NoNan => "the type has no NaN",
                        Unrepresentable::NoInfinity => "the type has no infinity",
                        Unrepresentable::Negative => "the type has no negative values",
                        Unrepresentable::OutOfRange => {
                            "beyond the largest finite value of the type"
                        }
                    })
                })?;
                Some(vec![code])
            }
            _ => None,
        }
        .ok_or_else(|| invalid("not representable in this data type"))?;
        Ok(FillValue { bytes })
    }

    /// A variable-length string: a JSON string, or a number as zarr-python 2 stored the default fill
    /// `0` of string arrays, which zarr-python 3.1 reads as its decimal text (`str(0)`, "0"). Only
    /// integers: Python and Rust spell some floats differently (`1e+16`, `1e16`).
    fn string_from_json(value: &Value) -> Option<Self> {
        let text = match value {
            Value::String(text) => text.clone(),
            Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
            _ => return None,
        };
        Some(FillValue {
            bytes: text.into_bytes(),
        })
    }

    /// Fixed-length bytes are written as base64 in both Zarr versions; the value is NUL-padded (or cut)
    /// to the element length, as numpy casts it. `length` 0 is variable-length bytes, kept as they are
    /// (`0`, the zero element zarr-python 2 wrote by default, is then the empty value).
    fn bytes_from_json(value: &Value, length: usize) -> Option<Self> {
        use base64::Engine;
        let mut bytes = match value {
            Value::String(text) => base64::engine::general_purpose::STANDARD
                .decode(text)
                .ok()?,
            Value::Number(n) if n.as_u64() == Some(0) => Vec::new(),
            _ => return None,
        };
        if length > 0 {
            bytes.resize(length, 0);
        }
        Some(FillValue { bytes })
    }

    /// Raw bits: a list of `length` integers 0 to 255 (the core spec), or their base64 text (as
    /// zarrs also reads).
    fn raw_bits_from_json(value: &Value, length: usize) -> Option<Self> {
        let bytes = match value {
            Value::Array(items) => items
                .iter()
                .map(|v| v.as_u64().and_then(|n| u8::try_from(n).ok()))
                .collect::<Option<Vec<u8>>>()?,
            Value::String(text) => {
                use base64::Engine;
                base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .ok()?
            }
            _ => return None,
        };
        (bytes.len() == length).then_some(FillValue { bytes })
    }

    /// numpy `U<n>` values are UTF-32 code units; a shorter string is NUL-padded, as numpy casts it.
    /// `0` is numpy's zero element, the empty string (zarr-python 2 wrote `0` for `U<n>` arrays).
    fn utf32_from_json(value: &Value, length: usize) -> Option<Self> {
        let text = match value {
            Value::Number(n) if n.as_u64() == Some(0) => "",
            other => other.as_str()?,
        };
        if text.chars().count() > length {
            return None;
        }
        let mut bytes = Vec::with_capacity(length * 4);
        crate::dtype::utf32_encode(text, length, &mut bytes);
        Some(FillValue { bytes })
    }

    /// The fill value as Zarr v3 JSON: numbers where exact, "NaN"/"Infinity"/"-Infinity" for special
    /// floats, and a hexadecimal bit pattern for NaNs with a non-default payload.
    pub fn to_v3_json(&self, dtype: DataType) -> Value {
        let b = &self.bytes;
        let arr = |n: usize| -> [u8; 8] {
            let mut a = [0u8; 8];
            a[..n].copy_from_slice(&b[..n]);
            a
        };
        match dtype {
            // A list of the bytes, as zarrs writes raw bits.
            DataType::RawBits(_) => Value::Array(b.iter().map(|&byte| byte.into()).collect()),
            DataType::NullTerminatedBytes(_) => {
                use base64::Engine;
                // numpy drops trailing NULs from bytes scalars; zarr-python writes what numpy holds.
                let end = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
                Value::String(base64::engine::general_purpose::STANDARD.encode(&b[..end]))
            }
            DataType::FixedLengthUtf32(_) => Value::String(crate::dtype::utf32_decode(b)),
            DataType::String => Value::String(String::from_utf8_lossy(b).into_owned()),
            DataType::Bytes => {
                use base64::Engine;
                Value::String(base64::engine::general_purpose::STANDARD.encode(b))
            }
            DataType::DateTime64(..) | DataType::TimeDelta64(..) => {
                i64::from_le_bytes(arr(8)).into()
            }
            DataType::Struct(t) => Value::Object(
                t.fields()
                    .iter()
                    .map(|f| {
                        let end = (f.offset + f.data_type.size()).min(b.len());
                        let part = FillValue::from_bytes(b[f.offset.min(end)..end].to_vec());
                        (f.name.clone(), part.to_v3_json(f.data_type))
                    })
                    .collect(),
            ),
            DataType::Bool => Value::Bool(b[0] != 0),
            DataType::Int8 => (b[0] as i8).into(),
            DataType::UInt8 => b[0].into(),
            DataType::Int16 => i16::from_le_bytes([b[0], b[1]]).into(),
            DataType::UInt16 => u16::from_le_bytes([b[0], b[1]]).into(),
            DataType::Int32 => i32::from_le_bytes([b[0], b[1], b[2], b[3]]).into(),
            DataType::UInt32 => u32::from_le_bytes([b[0], b[1], b[2], b[3]]).into(),
            DataType::Int64 => i64::from_le_bytes(arr(8)).into(),
            DataType::UInt64 => u64::from_le_bytes(arr(8)).into(),
            DataType::Float16 => {
                let v = half::f16::from_le_bytes([b[0], b[1]]);
                float_json(
                    v.to_f64(),
                    v.is_nan() && v.to_bits() != half::f16::NAN.to_bits(),
                    b,
                )
            }
            DataType::Float32 => {
                let v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                float_json(
                    f64::from(v),
                    v.is_nan() && v.to_bits() != f32::NAN.to_bits(),
                    b,
                )
            }
            DataType::Float64 => {
                let v = f64::from_le_bytes(arr(8));
                float_json(v, v.is_nan() && v.to_bits() != f64::NAN.to_bits(), b)
            }
            // The low bits, sign-extended: the high bits of a stored byte are ignored.
            DataType::Int4 => (((b[0] << 4) as i8) >> 4).into(),
            DataType::UInt4 => (b[0] & 0x0f).into(),
            DataType::Int2 => (((b[0] << 6) as i8) >> 6).into(),
            DataType::UInt2 => (b[0] & 0x03).into(),
            DataType::BFloat16 => {
                let v = half::bf16::from_le_bytes([b[0], b[1]]);
                float_json(
                    v.to_f64(),
                    v.is_nan() && v.to_bits() != half::bf16::NAN.to_bits(),
                    b,
                )
            }
            // A number as tensorstore writes this type: tensorstore 0.1.86 reads and writes its
            // numbers with another exponent bias than the registry's (0x7e, 0.5, as 9.2e18), and
            // is the producer of these arrays; zarrs 0.23 reads only hex for it.
            DataType::SmallFloat(t @ SmallFloat::E8M0FNU) => {
                let v = t.to_f64(b[0]);
                float_json(v, v.is_nan() && t.nan() != Some(b[0]), &b[..1])
            }
            // The bits in hex, the one form every reader of these types takes: zarrs 0.23 reads no
            // other (neither numbers nor "NaN"), tensorstore reads it as the core spec says.
            DataType::SmallFloat(t) => {
                let mask = u8::MAX >> (8 - t.bits());
                Value::String(format!("0x{:02x}", b[0] & mask))
            }
            // Both parts in hex, float8_e8m0fnu's too: tensorstore, whose numbers for that type
            // differ from the registry's, has no complex small floats; zarrs reads only hex.
            DataType::ComplexSmallFloat(t) => {
                let mask = u8::MAX >> (8 - t.bits());
                let hex = |byte: u8| Value::String(format!("0x{:02x}", byte & mask));
                Value::Array(vec![hex(b[0]), hex(b[1])])
            }
            DataType::Complex64
            | DataType::Complex128
            | DataType::ComplexBFloat16
            | DataType::ComplexFloat16 => {
                let half = dtype.size() / 2;
                let part = dtype.complex_component().unwrap_or(dtype);
                Value::Array(vec![
                    FillValue::from_bytes(b[..half].to_vec()).to_v3_json(part),
                    FillValue::from_bytes(b[half..2 * half].to_vec()).to_v3_json(part),
                ])
            }
        }
    }

    /// A buffer of `elements` copies of the fill value.
    pub fn repeat(&self, elements: usize) -> Vec<u8> {
        if self.bytes.iter().all(|&b| b == 0) {
            return vec![0; elements * self.bytes.len()];
        }
        self.bytes.repeat(elements)
    }

    /// Whether every element of `data` equals the fill value bit for bit (so `-0.0` is not `0.0`, and
    /// a NaN matches only the same NaN): an inner chunk for which this holds is stored as empty.
    pub fn fills(&self, data: &[u8]) -> bool {
        let unit = self.bytes.len();
        if unit == 0 || !data.len().is_multiple_of(unit) {
            return false;
        }
        if let Some(&first) = self.bytes.first() {
            if self.bytes.iter().all(|&b| b == first) {
                return data.iter().all(|&b| b == first);
            }
        }
        data.chunks_exact(unit)
            .all(|element| element == self.bytes.as_slice())
    }
}

fn int<T: TryFrom<i64> + TryFrom<u64>>(value: &Value) -> Option<T> {
    let n = value.as_number()?;
    if let Some(v) = n.as_i64() {
        return T::try_from(v).ok();
    }
    if let Some(v) = n.as_u64() {
        return T::try_from(v).ok();
    }
    // zarr-python writes integral floats such as 0.0 for some integer arrays.
    let f = n.as_f64()?;
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        #[allow(clippy::cast_possible_truncation)]
        return T::try_from(f as i64).ok();
    }
    None
}

/// A JSON float as Zarr writes it: a number, or one of the strings `NaN`, `Infinity`, `-Infinity`.
pub fn json_float(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.as_str() {
            "NaN" => Some(f64::NAN),
            "Infinity" => Some(f64::INFINITY),
            "-Infinity" => Some(f64::NEG_INFINITY),
            _ => None,
        },
        _ => None,
    }
}

fn float_json(v: f64, odd_nan: bool, bytes: &[u8]) -> Value {
    if odd_nan {
        let hex: String = bytes.iter().rev().map(|b| format!("{b:02x}")).collect();
        Value::String(format!("0x{hex}"))
    } else if v.is_nan() {
        Value::String("NaN".into())
    } else if v == f64::INFINITY {
        Value::String("Infinity".into())
    } else if v == f64::NEG_INFINITY {
        Value::String("-Infinity".into())
    } else {
        serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn v2_forms() {
        let f = |v: Value, d| FillValue::from_v2_json(&v, d).map(|f| f.bytes).ok();
        assert_eq!(f(json!(null), DataType::UInt16), Some(vec![0, 0]));
        assert_eq!(f(json!(7), DataType::Int16), Some(vec![7, 0]));
        assert_eq!(f(json!(-1), DataType::Int8), Some(vec![0xff]));
        assert_eq!(f(json!(300), DataType::UInt8), None);
        assert_eq!(
            f(json!("NaN"), DataType::Float32),
            Some(f32::NAN.to_le_bytes().to_vec())
        );
        assert_eq!(
            f(json!("-Infinity"), DataType::Float64),
            Some(f64::NEG_INFINITY.to_le_bytes().to_vec())
        );
        assert_eq!(f(json!(0.5), DataType::Float16), Some(vec![0x00, 0x38]));
        assert_eq!(f(json!(true), DataType::Bool), Some(vec![1]));
        let nat = DataType::DateTime64(crate::TimeUnit::Nanoseconds, 1);
        assert_eq!(f(json!("NaT"), nat), Some(i64::MIN.to_le_bytes().to_vec()));
        assert_eq!(f(json!(null), DataType::String), Some(vec![]));
        assert_eq!(f(json!("abc"), DataType::FixedLengthUtf32(2)), None);
        assert_eq!(
            f(json!("a"), DataType::FixedLengthUtf32(2)),
            Some(vec![97, 0, 0, 0, 0, 0, 0, 0])
        );
    }

    #[test]
    fn string_fill_values_as_zarr_python_2_wrote_them() {
        let f = |v: Value, d| FillValue::from_v2_json(&v, d).map(|f| f.bytes).ok();
        // zarr-python 2 stored the default 0 for |O string arrays; zarr-python 3.1 reads "0".
        assert_eq!(f(json!(0), DataType::String), Some(b"0".to_vec()));
        assert_eq!(f(json!(-12), DataType::String), Some(b"-12".to_vec()));
        assert_eq!(f(json!(""), DataType::String), Some(vec![]));
        assert_eq!(f(json!(0.5), DataType::String), None);
        assert_eq!(f(json!(0), DataType::FixedLengthUtf32(2)), Some(vec![0; 8]));
        assert_eq!(f(json!(0), DataType::Bytes), Some(vec![]));
        assert_eq!(f(json!(null), DataType::Bytes), Some(vec![]));
        assert_eq!(f(json!("YWIA"), DataType::Bytes), Some(b"ab\0".to_vec()));
        assert_eq!(f(json!("ab"), DataType::Bytes), None);
        assert_eq!(f(json!(1), DataType::Bytes), None);
    }

    #[test]
    fn v3_forms_round_trip() {
        for (v, d) in [
            (json!(0), DataType::UInt64),
            (json!(-5), DataType::Int32),
            (json!(1.5), DataType::Float32),
            (json!("NaN"), DataType::Float64),
            (json!("Infinity"), DataType::Float32),
            (json!("0x7fc00001"), DataType::Float32),
            (json!([1.0, "NaN"]), DataType::Complex128),
            (json!(false), DataType::Bool),
            (json!("YWI="), DataType::NullTerminatedBytes(4)),
            (json!(""), DataType::NullTerminatedBytes(2)),
            (json!("héllo"), DataType::FixedLengthUtf32(7)),
            (json!(""), DataType::FixedLengthUtf32(1)),
            (json!("naïve"), DataType::String),
            (json!("YWIA"), DataType::Bytes),
            (json!(""), DataType::Bytes),
            (
                json!(i64::MIN),
                DataType::DateTime64(crate::TimeUnit::Seconds, 1),
            ),
            (json!(-3), DataType::TimeDelta64(crate::TimeUnit::Days, 2)),
        ] {
            let fill = FillValue::from_v3_json(&v, d).expect("valid fill value");
            assert_eq!(fill.to_v3_json(d), v, "{d}");
        }
    }

    /// The ML types of the zarr-extensions registry (as tensorstore 0.1.86 writes them): fill values
    /// encoded per the registry, rounded to nearest as ml_dtypes casts, and refused where the type has
    /// no such value. Expected bytes are what tensorstore stores for the same JSON.
    #[test]
    fn ml_type_fill_values() {
        let f = |v: Value, name: &str| {
            let d = DataType::from_v3_name(name).expect("registered data type");
            FillValue::from_v3_json(&v, d).map(|f| f.bytes).ok()
        };
        assert_eq!(f(json!("NaN"), "bfloat16"), Some(vec![0xc0, 0x7f]));
        assert_eq!(f(json!("0x7fc1"), "bfloat16"), Some(vec![0xc1, 0x7f]));
        assert_eq!(f(json!("-Infinity"), "bfloat16"), Some(vec![0x80, 0xff]));
        assert_eq!(f(json!(0.1), "bfloat16"), Some(vec![0xcd, 0x3d]));
        assert_eq!(f(json!(1e39), "bfloat16"), Some(vec![0x80, 0x7f]));
        assert_eq!(f(json!("0x17fc0"), "bfloat16"), None);
        assert_eq!(f(json!("NaN"), "float8_e4m3fn"), Some(vec![0x7f]));
        assert_eq!(f(json!(448), "float8_e4m3fn"), Some(vec![0x7e]));
        assert_eq!(f(json!(0.1), "float8_e4m3fn"), Some(vec![0x1d]));
        assert_eq!(f(json!(-0.0), "float8_e4m3fn"), Some(vec![0x80]));
        assert_eq!(f(json!(1e-30), "float8_e4m3fn"), Some(vec![0x00]));
        assert_eq!(f(json!("0xff"), "float8_e4m3fn"), Some(vec![0xff]));
        // No infinity, and nothing above 448: refused rather than turned into NaN as a cast would.
        assert_eq!(f(json!("Infinity"), "float8_e4m3fn"), None);
        assert_eq!(f(json!(1000), "float8_e4m3fn"), None);
        assert_eq!(f(json!("0x100"), "float8_e4m3fn"), None);
        assert_eq!(f(json!("NaN"), "float8_e5m2"), Some(vec![0x7e]));
        assert_eq!(f(json!("Infinity"), "float8_e5m2"), Some(vec![0x7c]));
        assert_eq!(f(json!(1e6), "float8_e5m2"), Some(vec![0x7c]));
        assert_eq!(f(json!(2), "float8_e5m2"), Some(vec![0x40]));
        assert_eq!(f(json!("NaN"), "float8_e4m3fnuz"), Some(vec![0x80]));
        assert_eq!(f(json!(-0.0), "float8_e4m3fnuz"), Some(vec![0x00]));
        assert_eq!(f(json!(1), "float8_e4m3fnuz"), Some(vec![0x40]));
        assert_eq!(f(json!("-Infinity"), "float8_e4m3fnuz"), None);
        assert_eq!(f(json!("NaN"), "float8_e5m2fnuz"), Some(vec![0x80]));
        assert_eq!(f(json!(1), "float8_e5m2fnuz"), Some(vec![0x40]));
        assert_eq!(f(json!("NaN"), "float8_e4m3b11fnuz"), Some(vec![0x80]));
        assert_eq!(f(json!(1), "float8_e4m3b11fnuz"), Some(vec![0x58]));
        assert_eq!(f(json!("NaN"), "float8_e3m4"), Some(vec![0x78]));
        assert_eq!(f(json!(1), "float8_e3m4"), Some(vec![0x30]));
        assert_eq!(f(json!("NaN"), "float8_e4m3"), Some(vec![0x7c]));
        assert_eq!(f(json!("Infinity"), "float8_e4m3"), Some(vec![0x78]));
        assert_eq!(f(json!(1), "float8_e4m3"), Some(vec![0x38]));
        assert_eq!(f(json!("NaN"), "float8_e8m0fnu"), Some(vec![0xff]));
        assert_eq!(f(json!(0.5), "float8_e8m0fnu"), Some(vec![0x7e]));
        assert_eq!(f(json!(4), "float8_e8m0fnu"), Some(vec![0x81]));
        // tensorstore's default fill value for this type (which has no zero): its smallest value.
        assert_eq!(f(json!(0.0), "float8_e8m0fnu"), Some(vec![0x00]));
        assert_eq!(f(json!(-1), "float8_e8m0fnu"), None);
        assert_eq!(
            f(json!(["NaN", 1]), "complex_bfloat16"),
            Some(vec![0xc0, 0x7f, 0x80, 0x3f])
        );
        assert_eq!(
            f(json!([0.5, -2]), "complex_float16"),
            Some(vec![0x00, 0x38, 0x00, 0xc0])
        );
        assert_eq!(
            f(json!([1, "NaN"]), "complex_float8_e4m3fn"),
            Some(vec![0x38, 0x7f])
        );
        assert_eq!(
            f(json!([1, 2]), "complex_float32"),
            Some([1f32.to_le_bytes(), 2f32.to_le_bytes()].concat())
        );
    }

    /// Sub-byte integers: in range or refused; stored in the low bits with the high bits zero, as
    /// tensorstore writes them (`int4` -1 is `0x0f`), and read ignoring the high bits.
    #[test]
    fn sub_byte_integer_fill_values() {
        let d = |name: &str| DataType::from_v3_name(name).expect("registered data type");
        let f = |v: Value, name: &str| FillValue::from_v3_json(&v, d(name)).map(|f| f.bytes).ok();
        assert_eq!(f(json!(-1), "int4"), Some(vec![0x0f]));
        assert_eq!(f(json!(-8), "int4"), Some(vec![0x08]));
        assert_eq!(f(json!(7), "int4"), Some(vec![0x07]));
        assert_eq!(f(json!(8), "int4"), None);
        assert_eq!(f(json!(-9), "int4"), None);
        assert_eq!(f(json!(15), "uint4"), Some(vec![0x0f]));
        assert_eq!(f(json!(16), "uint4"), None);
        assert_eq!(f(json!(-1), "uint4"), None);
        assert_eq!(f(json!(-2), "int2"), Some(vec![0x02]));
        assert_eq!(f(json!(2), "int2"), None);
        assert_eq!(f(json!(3), "uint2"), Some(vec![0x03]));
        assert_eq!(f(json!(4), "uint2"), None);
        assert_eq!(f(json!("0x1f"), "int4"), None);
        assert_eq!(f(json!("0x1f"), "float4_e2m1fn"), None);
        for (v, name) in [
            (-1, "int4"),
            (-8, "int4"),
            (15, "uint4"),
            (-2, "int2"),
            (1, "int2"),
            (3, "uint2"),
        ] {
            let fill = FillValue::from_v3_json(&json!(v), d(name)).expect("valid fill value");
            assert_eq!(fill.to_v3_json(d(name)), json!(v), "{name}");
        }
        assert_eq!(
            FillValue::from_bytes(vec![0xff]).to_v3_json(d("int4")),
            json!(-1)
        );
        assert_eq!(
            FillValue::from_bytes(vec![0xf2]).to_v3_json(d("uint2")),
            json!(2)
        );
        assert_eq!(
            FillValue::from_bytes(vec![0xf1]).to_v3_json(d("float4_e2m1fn")),
            json!("0x01")
        );
    }

    /// Registry fill values come back as the JSON they were read from (shortest float text, the
    /// registry's NaN as "NaN", other NaN patterns in hex), but the 8-, 6- and 4-bit floats, whose
    /// bits are written in hex (the form zarrs reads): the same bits either way.
    #[test]
    fn ml_type_fill_values_round_trip() {
        for (v, name) in [
            (json!("NaN"), "bfloat16"),
            (json!("0x7fc1"), "bfloat16"),
            (json!(-1.5), "bfloat16"),
            (json!("Infinity"), "bfloat16"),
            (json!("NaN"), "float8_e4m3fn"),
            (json!("0xff"), "float8_e4m3fn"),
            (json!(-0.0), "float8_e4m3fn"),
            (json!(448.0), "float8_e4m3fn"),
            (json!(0.001953125), "float8_e4m3fn"),
            (json!("-Infinity"), "float8_e5m2"),
            (json!(57344.0), "float8_e5m2"),
            (json!("NaN"), "float8_e4m3fnuz"),
            (json!(240.0), "float8_e4m3fnuz"),
            (json!("NaN"), "float8_e5m2fnuz"),
            (json!("NaN"), "float8_e4m3b11fnuz"),
            (json!(15.5), "float8_e3m4"),
            (json!("NaN"), "float8_e4m3"),
            (json!(5.877471754111438e-39), "float8_e8m0fnu"),
            (json!("NaN"), "float8_e8m0fnu"),
            (json!([1.0, "NaN"]), "complex_bfloat16"),
            (json!([0.5, -0.0]), "complex_float8_e5m2"),
        ] {
            let d = DataType::from_v3_name(name).expect("registered data type");
            let fill = FillValue::from_v3_json(&v, d).expect("valid fill value");
            let written = fill.to_v3_json(d);
            match d {
                DataType::SmallFloat(SmallFloat::E8M0FNU) => assert_eq!(written, v, "{name}"),
                DataType::SmallFloat(_) => {
                    assert_eq!(written, json!(format!("0x{:02x}", fill.bytes[0])), "{name}")
                }
                DataType::ComplexSmallFloat(_) => {
                    let hex = |b: u8| json!(format!("0x{b:02x}"));
                    assert_eq!(written, json!([hex(fill.bytes[0]), hex(fill.bytes[1])]))
                }
                _ => assert_eq!(written, v, "{name}"),
            }
            let again = FillValue::from_v3_json(&written, d).expect("written form reads");
            assert_eq!(again.bytes, fill.bytes, "{name}");
        }
    }

    /// Raw bits: a list of the element's bytes (written so), or their base64 text; another length or
    /// a byte beyond 255 is refused.
    #[test]
    fn raw_bits_fill_values() {
        let r16 = DataType::RawBits(2);
        let fill = FillValue::from_v3_json(&json!([1, 255]), r16).expect("a list of bytes");
        assert_eq!(fill.bytes, vec![1, 255]);
        assert_eq!(fill.to_v3_json(r16), json!([1, 255]));
        let text = FillValue::from_v3_json(&json!("Af8="), r16).expect("base64");
        assert_eq!(text.bytes, vec![1, 255]);
        for bad in [
            json!([1]),
            json!([1, 2, 3]),
            json!([1, 256]),
            json!(7),
            json!("Af8A"),
        ] {
            let e = FillValue::from_v3_json(&bad, r16)
                .expect_err("refused")
                .to_string();
            assert!(e.contains("2 bytes"), "{bad}: {e}");
        }
    }

    #[test]
    fn fills_is_bitwise() {
        let zero = FillValue::from_v3_json(&json!(0.0), DataType::Float32).expect("fill");
        assert!(zero.fills(&[0; 16]));
        assert!(!zero.fills(&(-0.0f32).to_le_bytes()));
        let seven = FillValue::from_v3_json(&json!(7), DataType::UInt16).expect("fill");
        assert!(seven.fills(&seven.repeat(5)));
        assert!(!seven.fills(&[7, 0, 7, 1]));
        let nan = FillValue::from_v3_json(&json!("NaN"), DataType::Float64).expect("fill");
        assert!(nan.fills(&nan.repeat(3)));
    }
}
