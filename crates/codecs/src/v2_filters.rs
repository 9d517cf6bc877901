//! The Zarr v3 form of a Zarr v2 `fixedscaleoffset` or `astype` filter: `scale_offset` + `cast_value`
//! (zarr-extensions), which `--compressor source` writes so that such arrays keep their storage.
//!
//! zarr-extensions' `scale_offset` describes the conversion (`numcodecs.fixedscaleoffset` becomes
//! `scale_offset` with its scale and offset, then `cast_value` to `astype` with `out_of_range: wrap`), but
//! the two are not the same arithmetic: numcodecs decodes integers in float64 and casts to `dtype` once,
//! `scale_offset` computes in `dtype` (float32 rounds twice; integers must divide exactly). So the
//! conversion is only made where it is exact, and exactness is not assumed but checked: every value the
//! stored type can hold (all 2^8 or 2^16 bit patterns; wider stored types are not converted) is decoded
//! by the numcodecs filter and by the v3 codecs, which must agree bit for bit, and the v3 codecs must
//! encode each decoded value back to the stored one (so rewritten chunks hold what the source held).
//! The array's fill value must go through the v3 codecs too (`cast_value` has no value for NaN in an
//! integer type).

use serde_json::{json, Value};
use zshard_core::{ChunkRepr, CodecSpec, DataType, Endian};

use crate::registry::build_chain;

/// Stored types up to this many bytes are checked exhaustively.
const MAX_CHECKED_BYTES: usize = 2;

/// The v3 chain equivalent to `specs` (a Zarr v2 array's chain as zshard reads it:
/// `[transpose] bytes <filters> <compressors>`) for chunks of `repr`, when its only element filter is a
/// `fixedscaleoffset` or `astype` whose v3 form is exact: `Ok(Some(chain))`. `Ok(None)` when there is no
/// such filter to convert (the chain is left as it is); `Err(why)` when there is one and its v3 form is
/// not exact.
pub fn v3_equivalent(
    specs: &[CodecSpec],
    repr: &ChunkRepr,
) -> Result<Option<Vec<CodecSpec>>, String> {
    let Some(bytes_at) = specs.iter().position(|c| c.name == "bytes") else {
        return Ok(None);
    };
    let after = &specs[bytes_at + 1..];
    let filters: Vec<usize> = after
        .iter()
        .enumerate()
        .filter(|(_, c)| crate::array_filter::ARRAY_FILTERS.contains(&c.name.as_str()))
        .map(|(i, _)| bytes_at + 1 + i)
        .collect();
    let [at] = filters.as_slice() else {
        return Ok(None);
    };
    let filter = &specs[*at];
    if filter.name != "numcodecs.fixedscaleoffset" && filter.name != "numcodecs.astype" {
        return Ok(None);
    }
    // The filter must come right after `bytes` (nothing else reshapes the bytes in between).
    if *at != bytes_at + 1 {
        return Ok(None);
    }
    let why = |reason: String| {
        format!(
            "{} filter has no exact Zarr v3 form ({reason})",
            filter.name
        )
    };
    let (decoded_key, encoded_key) = if filter.name == "numcodecs.astype" {
        ("decode_dtype", "encode_dtype")
    } else {
        ("dtype", "astype")
    };
    let typestr = |key: &str| -> Result<Option<(DataType, Endian)>, String> {
        match filter.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => DataType::from_v2_typestr(s)
                .map(Some)
                .map_err(|_| why(format!("{key} {s:?} is not a numeric type"))),
            Some(other) => Err(why(format!("{key} {other} is not a type"))),
        }
    };
    let (decoded, _) =
        typestr(decoded_key)?.ok_or_else(|| why(format!("missing {decoded_key}")))?;
    let (encoded, encoded_endian) = typestr(encoded_key)?.unwrap_or((decoded, Endian::Little));
    if decoded != repr.data_type {
        return Err(why(format!(
            "its {decoded_key} {decoded} is not the array's {}",
            repr.data_type
        )));
    }
    if encoded.size() > MAX_CHECKED_BYTES {
        return Err(why(format!(
            "exactness is checked over every stored value, and {encoded} has too many to check"
        )));
    }
    let int = |d: DataType| crate::numeric::NumDt::of(d).is_some_and(|n| n.is_int());
    let mut array_codecs = Vec::new();
    if filter.name == "numcodecs.fixedscaleoffset" {
        array_codecs.push(CodecSpec::new(
            "scale_offset",
            json!({
                "offset": filter.get("offset").cloned().unwrap_or(json!(0)),
                "scale": filter.get("scale").cloned().unwrap_or(json!(1)),
            }),
        ));
    }
    if encoded != decoded {
        let mut config = serde_json::Map::new();
        config.insert("data_type".into(), encoded.to_v3_json());
        if filter.name == "numcodecs.astype" && (int(encoded) != int(decoded)) {
            // numpy's astype truncates floats into integers.
            config.insert("rounding".into(), json!("towards-zero"));
        }
        if int(encoded) {
            // numcodecs (numpy) wraps integers that do not fit.
            config.insert("out_of_range".into(), json!("wrap"));
        }
        array_codecs.push(CodecSpec::new("cast_value", Value::Object(config)));
    }
    let stored_bytes = if encoded.swap_unit() == 1 {
        CodecSpec::new("bytes", json!({}))
    } else {
        CodecSpec::new("bytes", json!({"endian": encoded_endian.as_str()}))
    };
    let mut v3: Vec<CodecSpec> = specs[..bytes_at].to_vec();
    v3.extend(array_codecs.iter().cloned());
    v3.push(stored_bytes.clone());
    v3.extend(specs[at + 1..].iter().cloned());

    // Exactness over every stored value, on the element codecs alone.
    let count = 1usize << (8 * encoded.size());
    let check = ChunkRepr {
        shape: vec![count as u64],
        data_type: repr.data_type,
        fill_value: repr.fill_value.clone(),
    };
    let v2_chain = build_chain(&[specs[bytes_at].clone(), filter.clone()], &check)
        .map_err(|e| why(e.to_string()))?;
    let mut v3_elements = array_codecs;
    v3_elements.push(stored_bytes);
    let v3_chain = build_chain(&v3_elements, &check).map_err(|e| why(e.to_string()))?;
    let stored: Vec<u8> = (0..count)
        .flat_map(|i| (i as u16).to_le_bytes().into_iter().take(encoded.size()))
        .collect();
    let by_numcodecs = v2_chain
        .decode(&stored, &check)
        .map_err(|e| why(format!("numcodecs' decoding fails: {e}")))?;
    let by_v3 = v3_chain
        .decode(&stored, &check)
        .map_err(|e| why(format!("some stored values do not decode: {e}")))?;
    let size = repr.data_type.size();
    if let Some(i) = (0..count)
        .find(|&i| by_numcodecs[i * size..(i + 1) * size] != by_v3[i * size..(i + 1) * size])
    {
        let raw = &stored[i * encoded.size()..(i + 1) * encoded.size()];
        return Err(why(format!(
            "the stored bytes {raw:?} decode to different {} values",
            repr.data_type
        )));
    }
    let again = v3_chain
        .encode(by_v3, &check)
        .map_err(|e| why(format!("decoded values do not encode back: {e}")))?;
    if again != stored {
        return Err(why(
            "some decoded values do not encode back to the stored ones".to_string(),
        ));
    }
    Ok(Some(v3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zshard_core::FillValue;

    fn repr(d: DataType, fill: FillValue) -> ChunkRepr {
        ChunkRepr {
            shape: vec![10],
            data_type: d,
            fill_value: fill,
        }
    }

    fn fso(offset: Value, scale: Value, dtype: &str, astype: &str) -> Vec<CodecSpec> {
        vec![
            CodecSpec::new("bytes", json!({"endian": "little"})),
            CodecSpec::new(
                "numcodecs.fixedscaleoffset",
                json!({"offset": offset, "scale": scale, "dtype": dtype, "astype": astype}),
            ),
            CodecSpec::new("numcodecs.zlib", json!({"level": 1})),
        ]
    }

    fn names(specs: &[CodecSpec]) -> Vec<&str> {
        specs.iter().map(|c| c.name.as_str()).collect()
    }

    #[test]
    fn float64_to_uint8_is_exact() {
        let r = repr(DataType::Float64, FillValue::zero(DataType::Float64));
        let chain = v3_equivalent(&fso(json!(1000), json!(10), "<f8", "|u1"), &r)
            .expect("exact")
            .expect("converted");
        assert_eq!(
            names(&chain),
            ["scale_offset", "cast_value", "bytes", "numcodecs.zlib"]
        );
        assert_eq!(
            chain[1]
                .configuration
                .as_ref()
                .map(|c| c["out_of_range"].clone()),
            Some(json!("wrap"))
        );
        let big = v3_equivalent(&fso(json!(0.5), json!(4), "<f8", ">i2"), &r)
            .expect("exact")
            .expect("converted");
        assert_eq!(big[2].get("endian"), Some(&json!("big")));
    }

    #[test]
    fn float32_arithmetic_is_not_exact() {
        // numcodecs decodes in float64 and rounds once; scale_offset rounds in float32 twice.
        let r = repr(DataType::Float32, FillValue::zero(DataType::Float32));
        let e =
            v3_equivalent(&fso(json!(0.1), json!(3.7), "<f4", "<u2"), &r).expect_err("not exact");
        assert!(e.contains("decode to different float32 values"), "{e}");
    }

    #[test]
    fn integers_that_do_not_divide_are_not_exact() {
        let r = repr(DataType::Int32, FillValue::zero(DataType::Int32));
        let e = v3_equivalent(&fso(json!(0), json!(2), "<i4", "<i2"), &r).expect_err("not exact");
        assert!(e.contains("do not decode"), "{e}");
    }

    #[test]
    fn a_nan_fill_value_has_no_integer_form() {
        let r = repr(
            DataType::Float64,
            FillValue::from_bytes(f64::NAN.to_le_bytes().to_vec()),
        );
        assert!(v3_equivalent(&fso(json!(0), json!(10), "<f8", "|u1"), &r).is_err());
    }

    #[test]
    fn wide_stored_types_and_other_filters_are_left_alone() {
        let r = repr(DataType::Float64, FillValue::zero(DataType::Float64));
        assert!(v3_equivalent(&fso(json!(0), json!(10), "<f8", "<i4"), &r).is_err());
        let delta = vec![
            CodecSpec::new("bytes", json!({"endian": "little"})),
            CodecSpec::new("numcodecs.delta", json!({"dtype": "<f8"})),
        ];
        assert_eq!(v3_equivalent(&delta, &r), Ok(None));
        let astype = vec![
            CodecSpec::new("bytes", json!({"endian": "little"})),
            CodecSpec::new(
                "numcodecs.astype",
                json!({"encode_dtype": "|u1", "decode_dtype": "<f8"}),
            ),
        ];
        let chain = v3_equivalent(&astype, &r)
            .expect("exact")
            .expect("converted");
        assert_eq!(names(&chain), ["cast_value", "bytes"]);
    }
}
