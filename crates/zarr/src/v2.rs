//! Zarr v2 metadata (`.zarray`, `.zattrs`), translated into the v3-style model.

use serde::Deserialize;
use serde_json::{json, Map, Value};
use zshard_core::{ArrayMeta, ChunkKeyEncoding, CodecSpec, DataType, Endian, FillValue};

use crate::error::{metadata, unsupported, Error, Result};
use crate::xarray::{xarray_v3_fill_value, XarrayFill};

#[derive(Deserialize)]
struct ZArray {
    zarr_format: u8,
    shape: Vec<u64>,
    chunks: Vec<u64>,
    dtype: Value,
    compressor: Option<Value>,
    #[serde(default)]
    fill_value: Value,
    #[serde(default = "default_order")]
    order: String,
    #[serde(default)]
    filters: Option<Vec<Value>>,
    #[serde(default)]
    dimension_separator: Option<String>,
}

fn default_order() -> String {
    "C".into()
}

/// The v2 compressors this build reads. numcodecs' checksums may stand as the compressor too, and
/// `pcodec` and `zfpy` encode the elements themselves (they take the place of `bytes`).
pub const V2_COMPRESSORS: [&str; 15] = [
    "blosc",
    "zstd",
    "gzip",
    "zlib",
    "bz2",
    "lzma",
    "lz4",
    "pcodec",
    "zfpy",
    "crc32",
    "adler32",
    "crc32c",
    "fletcher32",
    "jenkins_lookup3",
    "bitround",
];

/// v2 compressors that turn the elements into bytes (array→bytes codecs in v3).
const ELEMENT_COMPRESSORS: [&str; 2] = ["pcodec", "zfpy"];

/// The v2 filters this build reads. Each becomes the bytes-to-bytes codec `numcodecs.<id>` with the
/// same configuration, placed after `bytes` because numcodecs filters see the flattened elements
/// (zshard-codecs' tests hold both lists against its registry).
pub const V2_FILTERS: [&str; 12] = [
    "shuffle",
    "delta",
    "fixedscaleoffset",
    "quantize",
    "astype",
    "packbits",
    "crc32",
    "adler32",
    "crc32c",
    "fletcher32",
    "jenkins_lookup3",
    "bitround",
];

/// Parses a `.zarray` document (and the array's `.zattrs`, if any). `key` names the document in errors.
pub fn parse_array(key: &str, zarray: &[u8], zattrs: Option<&[u8]>) -> Result<ArrayMeta> {
    let z: ZArray = serde_json::from_slice(zarray).map_err(|source| Error::Json {
        key: key.to_string(),
        source,
    })?;
    // A garbled `.zattrs` is named as itself, not as the `.zarray` beside it.
    let attrs_key = key
        .strip_suffix(".zarray")
        .map_or_else(|| key.to_string(), |base| format!("{base}.zattrs"));
    array_from(
        key,
        z,
        zattrs
            .map(|a| parse_attributes(&attrs_key, a))
            .transpose()?
            .unwrap_or_default(),
        FillAttribute::Xarray,
    )
}

/// Parses `.zattrs` (an object).
pub fn parse_attributes(key: &str, bytes: &[u8]) -> Result<Map<String, Value>> {
    serde_json::from_slice(bytes).map_err(|source| Error::Json {
        key: key.to_string(),
        source,
    })
}

/// Whether the array gets the `_FillValue` attribute by which xarray masks what it masked in the
/// source (Zarr v2), or keeps its attributes as they are.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum FillAttribute {
    /// A Zarr v2 source: xarray masked it by its `fill_value` (see [`move_fill_value_to_attribute`]).
    Xarray,
    /// Attributes as they are (the v3 draft, whose metadata is v2's in other words).
    Unchanged,
}

/// Builds the model from an already parsed `.zarray` value (as found in `.zmetadata`).
pub(crate) fn array_from_value(
    key: &str,
    zarray: Value,
    attributes: Map<String, Value>,
) -> Result<ArrayMeta> {
    array_from_value_with(key, zarray, attributes, FillAttribute::Xarray)
}

/// [`array_from_value`] with the choice of `_FillValue` attribute.
pub(crate) fn array_from_value_with(
    key: &str,
    zarray: Value,
    attributes: Map<String, Value>,
    fill_attribute: FillAttribute,
) -> Result<ArrayMeta> {
    let z: ZArray = serde_json::from_value(zarray).map_err(|source| Error::Json {
        key: key.to_string(),
        source,
    })?;
    array_from(key, z, attributes, fill_attribute)
}

fn array_from(
    key: &str,
    z: ZArray,
    mut attributes: Map<String, Value>,
    fill_attribute: FillAttribute,
) -> Result<ArrayMeta> {
    if z.zarr_format != 2 {
        return Err(metadata(
            key,
            format!("zarr_format is {}, expected 2", z.zarr_format),
        ));
    }
    if z.chunks.len() != z.shape.len() || z.chunks.contains(&0) {
        return Err(metadata(
            key,
            format!("chunks {:?} do not fit shape {:?}", z.chunks, z.shape),
        ));
    }
    let core = |source| Error::Core {
        key: key.to_string(),
        source,
    };
    let (data_type, endian) = match &z.dtype {
        Value::String(typestr) => DataType::from_v2_typestr(typestr).map_err(core)?,
        // numpy's structured dtype: the v3 struct type.
        descr => zshard_core::struct_from_v2(descr).map_err(core)?,
    };
    let mut filters = z.filters.unwrap_or_default().into_iter().peekable();
    // An object array's type is its object codec's (the first filter), which decodes it.
    let object_codec = match data_type {
        DataType::String => Some(object_codec(key, filters.next().as_ref())?),
        _ => None,
    };
    let data_type = object_codec.as_ref().map_or(data_type, |(t, _)| *t);
    check_element_size(key, data_type)?;
    let mut fill_value = FillValue::from_v2_json(&z.fill_value, data_type).map_err(core)?;
    if let (DataType::Struct(t), Endian::Big, Value::String(_)) = (data_type, endian, &z.fill_value)
    {
        // The base64 of a big-endian element: fill values are kept little-endian.
        let mut bytes = fill_value.as_bytes().to_vec();
        t.swap_bytes(&mut bytes);
        fill_value = FillValue::from_bytes(bytes);
    }
    check_sizes(key, &z.shape, &z.chunks, data_type)?;

    let mut codecs = Vec::new();
    match z.order.as_str() {
        "C" => {}
        "F" if z.shape.len() > 1 => codecs.push(CodecSpec::new(
            "transpose",
            json!({"order": (0..z.shape.len()).rev().collect::<Vec<_>>()}),
        )),
        "F" => {}
        other => return Err(metadata(key, format!("order {other:?} is not C or F"))),
    }
    // The v2 filters list is in encoding order. The first filter may take the array itself: vlen-utf8
    // (strings to bytes, in place of `bytes`) or categorize (strings to integers, before `bytes`).
    // The others are bytes-to-bytes codecs over the flattened elements.
    let first_id = |f: &Value| f.get("id").and_then(Value::as_str).map(str::to_string);
    let mut array_to_bytes_type = (data_type, endian);
    if let Some((_, codec)) = object_codec {
        codecs.push(codec);
    }
    match filters.peek().and_then(first_id).as_deref() {
        Some("categorize") if !data_type.is_variable() => {
            if let Some(f) = filters.next() {
                let spec = numcodecs_spec("categorize", &f);
                let astype = spec.get("astype").and_then(Value::as_str).unwrap_or("|u1");
                array_to_bytes_type = DataType::from_v2_typestr(astype).map_err(core)?;
                codecs.push(spec);
            }
        }
        _ => {}
    }
    let compressor = z.compressor.filter(|c| !c.is_null());
    let element_compressor = compressor
        .as_ref()
        .and_then(|c| c.get("id").and_then(Value::as_str))
        .filter(|id| ELEMENT_COMPRESSORS.contains(id));
    if let Some(id) = element_compressor {
        // numcodecs hands pcodec and zfpy the chunk's elements (zarr-python 3 as the array itself); it is
        // the array→bytes codec, so elements must reach it unchanged.
        if filters.peek().is_some() || codecs.iter().any(|c| c.name != "transpose") {
            return Err(metadata(
                key,
                format!("compressor {id} after filters is not supported"),
            ));
        }
        if id == "zfpy" && z.order == "F" {
            // numcodecs' ZFPY refuses F-order chunks, so no writer makes such an array.
            return Err(metadata(
                key,
                "compressor zfpy with order F is not supported (numcodecs' zfpy takes C order only)",
            ));
        }
        if endian == Endian::Big && data_type.swap_unit() > 1 {
            return Err(metadata(
                key,
                format!(
                    "compressor {id} stores native (little-endian) numbers, not {}",
                    z.dtype
                ),
            ));
        }
    } else if !data_type.is_variable() {
        codecs.push(match array_to_bytes_type {
            (t, _) if t.swap_unit() == 1 => CodecSpec::new("bytes", json!({})),
            (_, e) => CodecSpec::new("bytes", json!({"endian": e.as_str()})),
        });
    }
    for filter in filters {
        codecs.push(filter_spec(key, &filter)?);
    }
    if let Some(compressor) = compressor {
        codecs.push(compressor_spec(key, &compressor, data_type)?);
    }
    let separator = match z.dimension_separator.as_deref() {
        None | Some(".") => '.',
        Some("/") => '/',
        Some(other) => {
            return Err(metadata(
                key,
                format!("dimension_separator {other:?} is not . or /"),
            ))
        }
    };
    let dimension_names = take_array_dimensions(&mut attributes, z.shape.len());
    let warnings = match fill_attribute {
        FillAttribute::Xarray => {
            move_fill_value_to_attribute(&z.fill_value, &mut attributes, data_type)
        }
        FillAttribute::Unchanged => Vec::new(),
    };
    Ok(ArrayMeta {
        shape: z.shape,
        data_type,
        fill_value,
        chunk_shape: z.chunks,
        codecs,
        chunk_key_encoding: ChunkKeyEncoding::V2 { separator },
        attributes,
        dimension_names,
        rectilinear: None,
        sharded: None,
        warnings,
    })
}

/// The object codecs of `|O` arrays that zshard reads, with the data type each decodes to.
pub(crate) const OBJECT_CODECS: [&str; 4] = ["vlen-utf8", "vlen-bytes", "json2", "msgpack2"];

/// The data type and array→bytes codec of an object (`|O`) array from its object codec, the
/// first filter; `pickle` and `vlen-array` are refused with the reason.
fn object_codec(key: &str, first: Option<&Value>) -> Result<(DataType, CodecSpec)> {
    let id = first.and_then(|f| f.get("id")).and_then(Value::as_str);
    match (id, first) {
        (Some("vlen-utf8"), _) => Ok((DataType::String, CodecSpec::new("vlen-utf8", json!({})))),
        (Some("vlen-bytes"), _) => Ok((DataType::Bytes, CodecSpec::new("vlen-bytes", json!({})))),
        (Some(id @ ("json2" | "msgpack2")), Some(f)) => {
            Ok((DataType::String, numcodecs_spec(id, f)))
        }
        (Some("pickle"), _) => Err(unsupported(
            key,
            "object array stored with the pickle codec: refused, because decoding pickle runs code \
             from the data (any Python callable it names); re-save it with vlen-utf8 or vlen-bytes",
        )),
        (Some("vlen-array"), _) => Err(unsupported(
            key,
            "object array stored with vlen-array (a numeric array per element): refused, because \
             Zarr v3 has no data type for it that zarr-python 3.1 or tensorstore read",
        )),
        _ => Err(unsupported(
            key,
            format!(
                "object (|O) array with first filter {}: supported object codecs are {} \
                 (pickle is refused: decoding it runs code from the data)",
                first.map_or("none".to_string(), Value::to_string),
                OBJECT_CODECS.join(", ")
            ),
        )),
    }
}

/// Gives the array the `_FillValue` attribute by which xarray masks in Zarr v3 what it masks in the
/// v2 source (any `_FillValue` attribute of the source is replaced); returns a warning when xarray
/// cannot be told in v3.
fn move_fill_value_to_attribute(
    fill_value: &Value,
    attributes: &mut Map<String, Value>,
    data_type: DataType,
) -> Vec<String> {
    let xarray = xarray_v3_fill_value(fill_value, attributes, data_type);
    attributes.shift_remove("_FillValue");
    match xarray {
        XarrayFill::Attribute(value) => {
            attributes.insert("_FillValue".into(), value);
            Vec::new()
        }
        XarrayFill::Unrepresentable { fill_value } => vec![format!(
            "xarray masks the Zarr v2 fill value {fill_value} of this {data_type} array, but \
             cannot read a _FillValue for it in Zarr v3: xarray reads the output unmasked"
        )],
        _ => Vec::new(),
    }
}

/// The largest element accepted (fixed-length strings of up to 4 Mi characters): a larger one is
/// corrupt metadata, and even the fill value, one element, would be a huge allocation.
pub(crate) const MAX_ELEMENT_BYTES: usize = 16 << 20;

/// Refuses data types whose elements are larger than [`MAX_ELEMENT_BYTES`]; checked before the fill
/// value is parsed.
pub(crate) fn check_element_size(key: &str, data_type: DataType) -> Result<()> {
    if data_type.size() > MAX_ELEMENT_BYTES {
        return Err(metadata(
            key,
            format!(
                "data type {data_type} has {}-byte elements, more than {MAX_ELEMENT_BYTES}",
                data_type.size()
            ),
        ));
    }
    Ok(())
}

/// Refuses shapes whose sizes overflow: a chunk must fit in memory, the array in 64-bit arithmetic.
pub(crate) fn check_sizes(
    key: &str,
    shape: &[u64],
    chunks: &[u64],
    data_type: DataType,
) -> Result<()> {
    zshard_core::checked_byte_size("chunk shape", chunks, data_type.size()).map_err(|source| {
        Error::Core {
            key: key.to_string(),
            source,
        }
    })?;
    let elements = shape
        .iter()
        .try_fold(data_type.size() as u64, |acc, &d| acc.checked_mul(d));
    if elements.is_none() {
        return Err(metadata(
            key,
            format!("shape {shape:?} is too large for 64-bit sizes"),
        ));
    }
    Ok(())
}

/// Moves xarray's `_ARRAY_DIMENSIONS` attribute into v3 `dimension_names` when it names every axis.
fn take_array_dimensions(
    attributes: &mut Map<String, Value>,
    ndim: usize,
) -> Option<Vec<Option<String>>> {
    let names: Vec<Option<String>> = attributes
        .get("_ARRAY_DIMENSIONS")?
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_string))
        .collect();
    if names.len() != ndim || names.iter().any(Option::is_none) {
        return None;
    }
    attributes.shift_remove("_ARRAY_DIMENSIONS");
    Some(names)
}

/// A numcodecs configuration without its `id`: the v3 `numcodecs.*` configuration.
fn numcodecs_spec(id: &str, c: &Value) -> CodecSpec {
    let mut config = c.as_object().cloned().unwrap_or_default();
    config.shift_remove("id");
    CodecSpec::new(format!("numcodecs.{id}"), Value::Object(config))
}

/// Translates a numcodecs filter configuration into its v3 `numcodecs.*` codec.
fn filter_spec(key: &str, f: &Value) -> Result<CodecSpec> {
    match f.get("id").and_then(Value::as_str) {
        Some(id) if V2_FILTERS.contains(&id) => Ok(numcodecs_spec(id, f)),
        _ => Err(unsupported(
            key,
            format!(
                "filter {f} is not supported (supported: {})",
                V2_FILTERS.join(", ")
            ),
        )),
    }
}

/// Translates a numcodecs compressor configuration into the v3 codec that decodes the same bytes.
fn compressor_spec(key: &str, c: &Value, data_type: DataType) -> Result<CodecSpec> {
    let id = c["id"].as_str().unwrap_or_default();
    let level = || c.get("level").cloned().unwrap_or(json!(1));
    Ok(match id {
        "blosc" => {
            let typesize = data_type.typesize();
            let shuffle = match c.get("shuffle").and_then(Value::as_i64).unwrap_or(1) {
                0 => "noshuffle",
                1 => "shuffle",
                2 => "bitshuffle",
                // numcodecs AUTOSHUFFLE: bit shuffle for single bytes, byte shuffle otherwise.
                -1 if typesize == 1 => "bitshuffle",
                -1 => "shuffle",
                other => {
                    return Err(metadata(
                        key,
                        format!("blosc shuffle {other} is not -1, 0, 1 or 2"),
                    ))
                }
            };
            CodecSpec::new(
                "blosc",
                json!({
                    "cname": c.get("cname").cloned().unwrap_or(json!("lz4")),
                    "clevel": c.get("clevel").cloned().unwrap_or(json!(5)),
                    "shuffle": shuffle,
                    "typesize": typesize,
                    "blocksize": c.get("blocksize").cloned().unwrap_or(json!(0)),
                }),
            )
        }
        "zstd" => CodecSpec::new(
            "zstd",
            json!({"level": level(), "checksum": c.get("checksum").cloned().unwrap_or(json!(false))}),
        ),
        "gzip" => CodecSpec::new("gzip", json!({"level": level()})),
        "zlib" => CodecSpec::new("numcodecs.zlib", json!({"level": level()})),
        "bz2" | "lzma" | "lz4" | "pcodec" | "zfpy" | "crc32" | "adler32" | "crc32c"
        | "fletcher32" | "jenkins_lookup3" | "bitround" => numcodecs_spec(id, c),
        other => {
            return Err(unsupported(
                key,
                format!(
                    "compressor {other:?} is not supported (supported: {})",
                    V2_COMPRESSORS.join(", ")
                ),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translates_a_typical_v2_array() {
        let zarray = br#"{"zarr_format":2,"shape":[10,20],"chunks":[5,5],"dtype":">f8",
            "compressor":{"id":"blosc","cname":"zstd","clevel":5,"shuffle":1,"blocksize":0},
            "fill_value":"NaN","order":"F","filters":null,"dimension_separator":"/"}"#;
        let zattrs = br#"{"_ARRAY_DIMENSIONS":["y","x"],"units":"K"}"#;
        let meta = parse_array("t/.zarray", zarray, Some(zattrs)).expect("parses");
        assert_eq!(meta.data_type, DataType::Float64);
        assert_eq!(meta.chunk_key_encoding.key(&[1, 2]), "1/2");
        let names: Vec<&str> = meta.codecs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["transpose", "bytes", "blosc"]);
        assert_eq!(meta.codecs[1].get("endian"), Some(&json!("big")));
        assert_eq!(meta.codecs[2].get("typesize"), Some(&json!(8)));
        assert_eq!(
            meta.dimension_names,
            Some(vec![Some("y".into()), Some("x".into())])
        );
        assert!(!meta.attributes.contains_key("_ARRAY_DIMENSIONS"));
        assert_eq!(meta.attributes["units"], json!("K"));
    }

    #[test]
    fn the_fill_value_xarray_masks_by_becomes_the_v3_fill_value_attribute() {
        let parse = |fill: &str, dtype: &str, zattrs: &str| {
            let zarray = format!(
                r#"{{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"{dtype}","compressor":null,"fill_value":{fill},"order":"C","filters":null}}"#
            );
            parse_array("v/.zarray", zarray.as_bytes(), Some(zattrs.as_bytes())).expect("parses")
        };
        // A .zattrs _FillValue that xarray ignores (the .zarray one wins) is replaced.
        let meta = parse("-9999.0", "<f4", r#"{"_FillValue": 1.0, "units": "K"}"#);
        assert_eq!(
            Value::Object(meta.attributes),
            json!({"units": "K", "_FillValue": "AAAAAICHw8A="})
        );
        assert!(meta.warnings.is_empty());
        // kerchunk/netCDF style: fill_value null, the attribute masks; the array fill stays zero.
        let meta = parse(
            "null",
            "<i2",
            r#"{"_FillValue": -32768, "scale_factor": 0.5}"#,
        );
        assert_eq!(
            Value::Object(meta.attributes),
            json!({"scale_factor": 0.5, "_FillValue": -32768})
        );
        assert_eq!(meta.fill_value, FillValue::zero(DataType::Int16));
        let meta = parse("null", "<f8", r#"{"units": "m"}"#);
        assert_eq!(Value::Object(meta.attributes), json!({"units": "m"}));
        // A fixed-length string fill xarray cannot read in v3: no attribute, a warning.
        let meta = parse(r#""ab""#, "<U2", r#"{"_FillValue": "ab"}"#);
        assert!(meta.attributes.is_empty());
        assert_eq!(meta.warnings.len(), 1);
        assert!(
            meta.warnings[0].contains(r#"fill value "ab""#),
            "{:?}",
            meta.warnings
        );
    }

    #[test]
    fn rejects_unsupported_and_malformed() {
        let bad = |s: &str| parse_array("a/.zarray", s.as_bytes(), None).is_err();
        assert!(bad(
            r#"{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<u2","compressor":{"id":"sz3"},"fill_value":0,"order":"C","filters":null}"#
        ));
        assert!(bad(
            r#"{"zarr_format":2,"shape":[4],"chunks":[2,2],"dtype":"<u2","compressor":null,"fill_value":0,"order":"C","filters":null}"#
        ));
        assert!(bad(
            r#"{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<M8[fortnight]","compressor":null,"fill_value":0,"order":"C","filters":null}"#
        ));
        // Objects other than vlen-utf8 strings (pickle, JSON, vlen-bytes) are not supported.
        assert!(bad(
            r#"{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"|O","compressor":null,"fill_value":"","order":"C","filters":[{"id":"pickle"}]}"#
        ));
        assert!(bad(
            r#"{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"|O","compressor":null,"fill_value":"","order":"C","filters":null}"#
        ));
        assert!(bad(
            r#"{"zarr_format":2,"shape":[4],"chunks":[0],"dtype":"<u2","compressor":null,"fill_value":0,"order":"C","filters":null}"#
        ));
        assert!(bad("{not json"));
        assert!(bad(
            r#"{"zarr_format":2,"shape":[4,4],"chunks":[4294967296,4294967296],"dtype":"<u2","compressor":null,"fill_value":0,"order":"C","filters":null}"#
        ));
        assert!(bad(
            r#"{"zarr_format":2,"shape":[18446744073709551615,16],"chunks":[2,2],"dtype":"<u2","compressor":null,"fill_value":0,"order":"C","filters":null}"#
        ));
        let err = parse_array("a/.zarray", br#"{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<u2","compressor":{"id":"sz3"},"fill_value":0,"order":"C","filters":null}"#, None)
            .expect_err("unsupported");
        assert!(err.to_string().contains("a/.zarray") && err.to_string().contains("blosc"));
        // Fill 0 of a unicode array is numpy's zero element (zarr-python 2 normalised it to "").
        let meta = parse_array("a/.zarray", br#"{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<U4","compressor":null,"fill_value":0,"order":"C","filters":[{"id":"categorize","labels":["a"],"dtype":"<U4","astype":"|u1"}]}"#, None)
            .expect("parses");
        assert_eq!(
            meta.fill_value,
            FillValue::zero(DataType::FixedLengthUtf32(4))
        );
        let err = parse_array("a/.zarray", br#"{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<u2","compressor":null,"fill_value":0,"order":"C","filters":[{"id":"pickle"}]}"#, None)
            .expect_err("unsupported");
        assert!(err.to_string().contains("pickle") && err.to_string().contains("delta"));
    }

    #[test]
    fn object_arrays_take_their_type_from_the_object_codec() {
        let parse = |filter: &str, fill: &str| {
            let zarray = format!(
                r#"{{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"|O","compressor":null,"fill_value":{fill},"order":"C","filters":[{filter}]}}"#
            );
            parse_array("o/.zarray", zarray.as_bytes(), None)
        };
        let bytes = parse(r#"{"id":"vlen-bytes"}"#, "\"YWI=\"").expect("vlen-bytes");
        assert_eq!(bytes.data_type, DataType::Bytes);
        assert_eq!(bytes.fill_value.as_bytes(), b"ab");
        assert_eq!(bytes.codecs[0].name, "vlen-bytes");
        let json2 = parse(r#"{"id":"json2","encoding":"utf-8"}"#, "0").expect("json2");
        assert_eq!(json2.data_type, DataType::String);
        assert_eq!(json2.fill_value.as_bytes(), b"0");
        assert_eq!(json2.codecs[0].name, "numcodecs.json2");
        assert_eq!(json2.codecs[0].get("encoding"), Some(&json!("utf-8")));
        let msgpack = parse(r#"{"id":"msgpack2","raw":false}"#, "null").expect("msgpack2");
        assert_eq!(msgpack.codecs[0].name, "numcodecs.msgpack2");
        for (filter, reason) in [
            (r#"{"id":"pickle","protocol":5}"#, "runs code from the data"),
            (
                r#"{"id":"vlen-array","dtype":"<i4"}"#,
                "Zarr v3 has no data type",
            ),
            (r#"{"id":"zlib"}"#, "supported object codecs are vlen-utf8"),
        ] {
            let err = parse(filter, "0").expect_err("refused");
            assert!(err.to_string().contains("o/.zarray"), "{err}");
            assert!(err.to_string().contains(reason), "{err}");
            assert!(err.unsupported_reason().is_some(), "{err}");
        }
        // Broken metadata is not "unsupported": --on-unsupported skip does not hide it.
        let err = parse_array("o/.zarray", b"{", None).expect_err("not JSON");
        assert!(err.unsupported_reason().is_none());
    }

    #[test]
    fn refuses_huge_elements_before_allocating_the_fill_value() {
        // Found by the v2_metadata fuzz target: "<U897804107" made parsing allocate a 3.6 GB fill
        // value (the chunk, 12 such elements, passed the 1 TiB buffer check).
        let zarray = br#"{"zarr_format":2,"shape":[9,7],"chunks":[4,3],"dtype":"<U897804107","compressor":null,"fill_value":null,"order":"C","filters":null}"#;
        let err = parse_array("a/.zarray", zarray, None).expect_err("refused");
        assert!(err.to_string().contains("more than"), "{err}");
        let zarray = br#"{"zarr_format":2,"shape":[9],"chunks":[4],"dtype":"|S16777216","compressor":null,"fill_value":null,"order":"C","filters":null}"#;
        assert!(parse_array("a/.zarray", zarray, None).is_ok());
        let zarray = br#"{"zarr_format":2,"shape":[9],"chunks":[4],"dtype":"|S16777217","compressor":null,"fill_value":null,"order":"C","filters":null}"#;
        assert!(parse_array("a/.zarray", zarray, None).is_err());
    }

    #[test]
    fn zfpy_compressor_replaces_bytes_in_c_order_only() {
        let zarray = |order: &str| {
            format!(
                r#"{{"zarr_format":2,"shape":[5,7],"chunks":[4,4],"dtype":"<f4","compressor":{{"id":"zfpy","mode":4,"compression_kwargs":{{"tolerance":0.01}},"tolerance":0.01,"rate":-1,"precision":-1}},"fill_value":0,"order":"{order}","filters":null}}"#
            )
        };
        let meta = parse_array("a/.zarray", zarray("C").as_bytes(), None).expect("zfpy");
        let names: Vec<_> = meta.codecs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["numcodecs.zfpy"]);
        assert_eq!(
            meta.codecs[0].get("tolerance").and_then(Value::as_f64),
            Some(0.01)
        );
        let err = parse_array("a/.zarray", zarray("F").as_bytes(), None).expect_err("F order");
        assert!(
            err.to_string()
                .contains("zfpy with order F is not supported"),
            "{err}"
        );
    }

    #[test]
    fn pcodec_compressor_replaces_bytes_and_checksums_compress() {
        let zarray = |dtype: &str, order: &str, compressor: &str, filters: &str| {
            format!(
                r#"{{"zarr_format":2,"shape":[4,3],"chunks":[2,2],"dtype":"{dtype}","compressor":{compressor},"fill_value":0,"order":"{order}","filters":{filters}}}"#
            )
        };
        let names = |z: String| {
            parse_array("a/.zarray", z.as_bytes(), None)
                .map(|m| m.codecs.iter().map(|c| c.name.clone()).collect::<Vec<_>>())
        };
        let pcodec = r#"{"id":"pcodec","level":8,"mode_spec":"auto","delta_spec":"auto","paging_spec":"equal_pages_up_to","delta_encoding_order":null,"equal_pages_up_to":262144}"#;
        assert_eq!(
            names(zarray("<i4", "C", pcodec, "null")).expect("pcodec"),
            ["numcodecs.pcodec"]
        );
        assert_eq!(
            names(zarray("<f8", "F", pcodec, "null")).expect("pcodec, F order"),
            ["transpose", "numcodecs.pcodec"]
        );
        let err = names(zarray(
            "<i4",
            "C",
            pcodec,
            r#"[{"id":"delta","dtype":"<i4"}]"#,
        ))
        .expect_err("pcodec after a filter");
        assert!(err.to_string().contains("pcodec after filters"), "{err}");
        let err = names(zarray(">i4", "C", pcodec, "null")).expect_err("big endian");
        assert!(err.to_string().contains(">i4"), "{err}");
        for id in [
            "adler32",
            "fletcher32",
            "crc32",
            "crc32c",
            "jenkins_lookup3",
        ] {
            let compressor = format!(r#"{{"id":"{id}"}}"#);
            assert_eq!(
                names(zarray("<u2", "C", &compressor, "null")).expect(id),
                ["bytes".to_string(), format!("numcodecs.{id}")]
            );
        }
        assert_eq!(
            names(zarray(
                "<f4",
                "C",
                r#"{"id":"zstd","level":1}"#,
                r#"[{"id":"bitround","keepbits":3}]"#
            ))
            .expect("bitround filter"),
            ["bytes", "numcodecs.bitround", "zstd"]
        );
    }

    #[test]
    fn translates_filters_in_encoding_order_and_new_compressors() {
        let zarray = br#"{"zarr_format":2,"shape":[10],"chunks":[5],"dtype":">i4",
            "compressor":{"id":"lzma","format":1,"check":-1,"preset":null,"filters":null},
            "fill_value":0,"order":"C",
            "filters":[{"id":"delta","dtype":">i4","astype":">i2"},{"id":"shuffle","elementsize":2},{"id":"crc32","location":"end"}]}"#;
        let meta = parse_array("t/.zarray", zarray, None).expect("parses");
        let names: Vec<&str> = meta.codecs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "bytes",
                "numcodecs.delta",
                "numcodecs.shuffle",
                "numcodecs.crc32",
                "numcodecs.lzma"
            ]
        );
        assert_eq!(meta.codecs[1].get("astype"), Some(&json!(">i2")));
        assert_eq!(meta.codecs[1].get("id"), None);
        assert_eq!(meta.codecs[3].get("location"), Some(&json!("end")));
        assert_eq!(meta.codecs[4].get("format"), Some(&json!(1)));
        for (id, name) in [("bz2", "numcodecs.bz2"), ("lz4", "numcodecs.lz4")] {
            let zarray = format!(
                r#"{{"zarr_format":2,"shape":[4],"chunks":[2],"dtype":"<u2","compressor":{{"id":"{id}"}},"fill_value":0,"order":"C","filters":[]}}"#
            );
            let meta = parse_array("t/.zarray", zarray.as_bytes(), None).expect("parses");
            assert_eq!(meta.codecs.last().map(|c| c.name.as_str()), Some(name));
        }
    }
}
