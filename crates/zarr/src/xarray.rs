//! What xarray needs in Zarr v3 to mask an array as it masks the Zarr v2 source.
//!
//! xarray reads the two formats differently (xarray 2026.9, `ZarrStore.open_store_variable`):
//! - Zarr v2: a non-null `.zarray` `fill_value` *is* the CF `_FillValue`, for every array, with or
//!   without CF attributes; only when it is `null` does a `_FillValue` attribute in `.zattrs` (as
//!   kerchunk and netCDF write it) count.
//! - Zarr v3: the array's `fill_value` is ignored for masking; only a `_FillValue` *attribute*
//!   counts, in the form of xarray's `FillValueCoder` (floats as base64 of a little-endian f64,
//!   integers and booleans as JSON, complex as two such base64 doubles). It cannot decode one on
//!   strings, bytes, datetime64 or timedelta64 arrays: the whole open fails.
//!
//! So every v2 array whose fill masks in xarray gets the attribute in v3, whatever its attributes
//! say, and no other `_FillValue` attribute is kept.

use base64::Engine;
use serde_json::{Map, Value};
use zshard_core::{DataType, FillValue};

/// The `_FillValue` attribute a Zarr v3 array needs so that xarray masks it as it masks its Zarr v2
/// source; see [`xarray_v3_fill_value`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum XarrayFill {
    /// xarray masks nothing in the v2 source (`fill_value` null and no `_FillValue` attribute): the
    /// v3 array has no `_FillValue` attribute.
    Unmasked,
    /// Write this value as the v3 attribute `_FillValue`.
    Attribute(Value),
    /// xarray masks the v2 source with `fill_value`, but cannot read a `_FillValue` attribute of this
    /// data type in v3 (strings, bytes, times) or the value does not fit the data type: the v3 array
    /// has no `_FillValue` attribute and reads unmasked in xarray.
    Unrepresentable {
        /// The v2 value that masks (the `fill_value`, or the `_FillValue` attribute).
        fill_value: Value,
    },
}

/// The `_FillValue` attribute xarray needs on the Zarr v3 form of a Zarr v2 array with `.zarray`
/// `fill_value`, `.zattrs` `attributes` and `data_type`, to mask the same elements.
///
/// The `.zarray` `fill_value` wins when it is not null (xarray then ignores the attribute); a
/// `_FillValue` attribute counts only when it is null. Any `_FillValue` attribute of the source is
/// replaced by the result (or dropped).
///
/// ```
/// use serde_json::{json, Map};
/// use zshard_core::DataType;
/// use zshard_zarr::{xarray_v3_fill_value, XarrayFill};
///
/// let none = Map::new();
/// assert_eq!(xarray_v3_fill_value(&json!(-9999.0), &none, DataType::Float32),
///            XarrayFill::Attribute(json!("AAAAAICHw8A=")));
/// assert_eq!(xarray_v3_fill_value(&json!(-32768), &none, DataType::Int16),
///            XarrayFill::Attribute(json!(-32768)));
/// assert_eq!(xarray_v3_fill_value(&json!(null), &none, DataType::Float64), XarrayFill::Unmasked);
/// ```
pub fn xarray_v3_fill_value(
    fill_value: &Value,
    attributes: &Map<String, Value>,
    data_type: DataType,
) -> XarrayFill {
    let masking = if fill_value.is_null() {
        match attributes.get("_FillValue") {
            Some(attribute) if !attribute.is_null() => attribute,
            _ => return XarrayFill::Unmasked,
        }
    } else {
        fill_value
    };
    let unrepresentable = || XarrayFill::Unrepresentable {
        fill_value: masking.clone(),
    };
    // Parsed as the v2 reader parses fill values: "NaN"/"Infinity" strings, f2/f4 rounded to the
    // data type first (as zarr-python casts them) and widened afterwards.
    match FillValue::from_v2_json(masking, data_type) {
        Ok(fill) => fill_value_coder(&fill, data_type).map_or_else(unrepresentable, |attribute| {
            XarrayFill::Attribute(attribute)
        }),
        Err(_) => unrepresentable(),
    }
}

/// xarray's `FillValueCoder.encode`, for the data types whose attribute xarray can decode again.
fn fill_value_coder(fill: &FillValue, data_type: DataType) -> Option<Value> {
    let bytes = fill.as_bytes();
    let float = |data_type: DataType, bytes: &[u8]| {
        as_f64(&FillValue::from_bytes(bytes.to_vec()), data_type).map(base64_f64)
    };
    match data_type {
        DataType::Float16 | DataType::Float32 | DataType::Float64 => float(data_type, bytes),
        DataType::Complex64 | DataType::Complex128 => {
            let half = if data_type == DataType::Complex64 {
                DataType::Float32
            } else {
                DataType::Float64
            };
            let (re, im) = bytes.split_at(bytes.len() / 2);
            Some(Value::Array(vec![float(half, re)?, float(half, im)?]))
        }
        DataType::Bool
        | DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => Some(fill.to_v3_json(data_type)),
        _ => None,
    }
}

/// A float fill value widened to f64, as Python's `float()` widens a numpy float.
fn as_f64(fill: &FillValue, data_type: DataType) -> Option<f64> {
    let b = fill.as_bytes();
    Some(match data_type {
        DataType::Float16 => half::f16::from_le_bytes(b.get(..2)?.try_into().ok()?).to_f64(),
        DataType::Float32 => f64::from(f32::from_le_bytes(b.get(..4)?.try_into().ok()?)),
        DataType::Float64 => f64::from_le_bytes(b.get(..8)?.try_into().ok()?),
        _ => return None,
    })
}

/// `base64.standard_b64encode(struct.pack("<d", value))`.
fn base64_f64(value: f64) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(value.to_le_bytes()))
}

/// The element xarray masks in a Zarr v3 array with `attributes`, as one element's little-endian
/// bytes of `data_type`: its `_FillValue` attribute decoded as xarray's `FillValueCoder` writes it
/// (integers and booleans as JSON, floats as base64 of a little-endian f64). `None` without one, or
/// for one that does not decode (xarray would fail on it).
pub fn xarray_mask(attributes: &Map<String, Value>, data_type: DataType) -> Option<FillValue> {
    let attribute = attributes.get("_FillValue")?;
    match (attribute, data_type) {
        (Value::String(text), DataType::Float16 | DataType::Float32 | DataType::Float64) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .ok()?;
            let value = f64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
            Some(FillValue::from_bytes(match data_type {
                DataType::Float16 => half::f16::from_f64(value).to_le_bytes().to_vec(),
                DataType::Float32 => (value as f32).to_le_bytes().to_vec(),
                _ => value.to_le_bytes().to_vec(),
            }))
        }
        (Value::Number(_) | Value::Bool(_), _) => {
            FillValue::from_v3_json(attribute, data_type).ok()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn masks_decode_what_the_coder_writes() {
        for (fill, data_type) in [
            (json!(-9999.0), DataType::Float32),
            (json!(-32768), DataType::Int16),
            (json!(7), DataType::UInt16),
        ] {
            let mut attributes = Map::new();
            let XarrayFill::Attribute(value) = xarray_v3_fill_value(&fill, &attributes, data_type)
            else {
                panic!("{fill} masks");
            };
            attributes.insert("_FillValue".into(), value);
            let expected = FillValue::from_v2_json(&fill, data_type).expect("valid");
            assert_eq!(xarray_mask(&attributes, data_type), Some(expected));
        }
        assert_eq!(xarray_mask(&Map::new(), DataType::Float32), None);
    }
    use zshard_core::TimeUnit;

    fn attrs(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    fn fill(fill_value: Value, attributes: Value, data_type: DataType) -> XarrayFill {
        xarray_v3_fill_value(&fill_value, &attrs(attributes), data_type)
    }

    fn attribute(value: Value) -> XarrayFill {
        XarrayFill::Attribute(value)
    }

    #[test]
    fn floats_are_base64_little_endian_doubles_even_for_float32_and_float16() {
        // The values xarray's FillValueCoder writes (research: dump of xarray's own v3 output).
        for data_type in [DataType::Float16, DataType::Float32, DataType::Float64] {
            let f = |v: Value| fill(v, json!({}), data_type);
            assert_eq!(f(json!("NaN")), attribute(json!("AAAAAAAA+H8=")));
            assert_eq!(f(json!(-1)), attribute(json!("AAAAAAAA8L8=")));
            assert_eq!(f(json!(0.0)), attribute(json!("AAAAAAAAAAA=")));
            assert_eq!(f(json!("Infinity")), attribute(json!("AAAAAAAA8H8=")));
            assert_eq!(f(json!("-Infinity")), attribute(json!("AAAAAAAA8P8=")));
        }
        for data_type in [DataType::Float32, DataType::Float64] {
            assert_eq!(
                fill(json!(-9999.0), json!({}), data_type),
                attribute(json!("AAAAAICHw8A="))
            );
        }
        // float16 and float32 round first: -9999 is -10000 in float16, as numpy casts it, and 0.1
        // becomes float(np.float32(0.1)) = 0.10000000149011612.
        let b64 = |v: f64| json!(base64::engine::general_purpose::STANDARD.encode(v.to_le_bytes()));
        assert_eq!(
            fill(json!(-9999.0), json!({}), DataType::Float16),
            attribute(b64(-10000.0))
        );
        // float32 rounds first: 0.1 becomes float(np.float32(0.1)) = 0.10000000149011612.
        let rounded =
            base64::engine::general_purpose::STANDARD.encode(f64::from(0.1f32).to_le_bytes());
        assert_eq!(
            fill(json!(0.1), json!({}), DataType::Float32),
            attribute(json!(rounded))
        );
    }

    #[test]
    fn integers_and_booleans_are_json_and_complex_two_doubles() {
        assert_eq!(
            fill(json!(-32768), json!({"scale_factor": 0.5}), DataType::Int16),
            attribute(json!(-32768))
        );
        assert_eq!(
            fill(json!(255), json!({}), DataType::UInt8),
            attribute(json!(255))
        );
        assert_eq!(
            fill(json!(0), json!({}), DataType::UInt64),
            attribute(json!(0))
        );
        assert_eq!(
            fill(json!(false), json!({}), DataType::Bool),
            attribute(json!(false))
        );
        assert_eq!(
            fill(json!([1.0, -1.0]), json!({}), DataType::Complex64),
            attribute(json!(["AAAAAAAA8D8=", "AAAAAAAA8L8="]))
        );
    }

    #[test]
    fn the_zarray_fill_value_wins_and_the_attribute_counts_only_when_it_is_null() {
        let netcdf = json!({"_FillValue": -9999.0, "units": "K"});
        assert_eq!(
            fill(json!(null), netcdf.clone(), DataType::Float32),
            attribute(json!("AAAAAICHw8A="))
        );
        assert_eq!(
            fill(json!("NaN"), netcdf, DataType::Float32),
            attribute(json!("AAAAAAAA+H8="))
        );
        assert_eq!(
            fill(json!(null), json!({"_FillValue": "NaN"}), DataType::Float64),
            attribute(json!("AAAAAAAA+H8="))
        );
        assert_eq!(
            fill(json!(null), json!({"missing_value": 1}), DataType::Int32),
            XarrayFill::Unmasked
        );
        assert_eq!(
            fill(json!(null), json!({"_FillValue": null}), DataType::Int32),
            XarrayFill::Unmasked
        );
    }

    #[test]
    fn strings_bytes_and_times_cannot_carry_the_attribute() {
        for data_type in [
            DataType::String,
            DataType::FixedLengthUtf32(3),
            DataType::NullTerminatedBytes(2),
            DataType::DateTime64(TimeUnit::Nanoseconds, 1),
            DataType::TimeDelta64(TimeUnit::Seconds, 1),
        ] {
            assert_eq!(
                fill(json!(null), json!({}), data_type),
                XarrayFill::Unmasked,
                "{data_type}"
            );
        }
        assert_eq!(
            fill(json!(""), json!({}), DataType::FixedLengthUtf32(3)),
            XarrayFill::Unrepresentable {
                fill_value: json!("")
            }
        );
        assert_eq!(
            fill(
                json!("NaT"),
                json!({}),
                DataType::DateTime64(TimeUnit::Nanoseconds, 1)
            ),
            XarrayFill::Unrepresentable {
                fill_value: json!("NaT")
            }
        );
        // An attribute that does not fit the data type cannot be written either.
        assert_eq!(
            fill(json!(null), json!({"_FillValue": "x"}), DataType::Int32),
            XarrayFill::Unrepresentable {
                fill_value: json!("x")
            }
        );
    }
}
