//! The `struct` data type (zarr-extensions; zarr-python 3.2+, tensorstore): elements that are records of
//! named, typed fields packed without padding, in declaration order, each field in the byte order of
//! the `bytes` codec. The legacy name `structured`, with fields as `[name, data_type]` pairs, is read
//! too and written as `struct`.
//!
//! [`DataType`] is `Copy`, so a struct type is interned: each distinct field list is stored once for
//! the life of the process and [`DataType::Struct`] holds a `'static` reference to it. The number of
//! distinct struct types is bounded ([`MAX_STRUCT_TYPES`]), so metadata cannot grow that store without
//! limit.

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, PoisonError};

use serde_json::{json, Map, Value};

use crate::dtype::{DataType, Endian};
use crate::error::{Error, Result};

/// How many distinct struct types one process keeps (a conversion has a handful).
pub const MAX_STRUCT_TYPES: usize = 4096;

/// How deeply struct fields may nest.
const MAX_DEPTH: usize = 16;

/// One field of a struct: its name, its type and its byte offset in the element.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct StructField {
    /// The field's name, unique within its struct.
    pub name: String,
    /// The field's type: any fixed-size type, a struct included.
    pub data_type: DataType,
    /// Where the field starts in an element, in bytes.
    pub offset: usize,
}

/// A struct data type: its fields in declaration order.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct StructType {
    fields: Vec<StructField>,
    size: usize,
}

impl StructType {
    /// The fields, in declaration (and storage) order.
    pub fn fields(&self) -> &[StructField] {
        &self.fields
    }

    /// Bytes of one element: the sum of the fields' sizes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The v3 `data_type` document, `{"name": "struct", "configuration": {"fields": [...]}}`, with each
    /// field as `{"name", "data_type"}` (as zarr-python writes it).
    pub fn to_v3_json(&self) -> Value {
        let fields: Vec<Value> = self
            .fields
            .iter()
            .map(|f| json!({"name": f.name, "data_type": f.data_type.to_v3_json()}))
            .collect();
        json!({"name": "struct", "configuration": {"fields": fields}})
    }

    /// Reverses the byte order of every multi-byte unit of every field of the elements in `buf`.
    pub fn swap_bytes(&self, buf: &mut [u8]) {
        if self.size == 0 {
            return;
        }
        for element in buf.chunks_exact_mut(self.size) {
            for f in &self.fields {
                f.data_type
                    .swap_bytes(&mut element[f.offset..f.offset + f.data_type.size()]);
            }
        }
    }

    /// The largest unit byte order applies to in any field (1 when byte order means nothing).
    pub fn max_swap_unit(&self) -> usize {
        self.fields
            .iter()
            .map(|f| f.data_type.swap_unit())
            .max()
            .unwrap_or(1)
    }
}

fn refuse(value: &Value, reason: impl Into<String>) -> Error {
    Error::UnsupportedDataType {
        name: value.to_string(),
        supported: format!("a struct data type: {}", reason.into()),
    }
}

/// Parses the configuration of a `struct` (or legacy `structured`) data type document `doc`.
pub(crate) fn parse(doc: &Value, legacy: bool) -> Result<DataType> {
    parse_at(doc, legacy, 0)
}

fn parse_at(doc: &Value, legacy: bool, depth: usize) -> Result<DataType> {
    if depth > MAX_DEPTH {
        return Err(refuse(
            doc,
            format!("fields nest deeper than {MAX_DEPTH} levels"),
        ));
    }
    let config = doc
        .get("configuration")
        .and_then(Value::as_object)
        .ok_or_else(|| refuse(doc, "missing configuration"))?;
    if let Some(other) = config.keys().find(|k| *k != "fields") {
        return Err(refuse(
            doc,
            format!("unknown configuration member {other:?}"),
        ));
    }
    let list = config
        .get("fields")
        .and_then(Value::as_array)
        .filter(|l| !l.is_empty())
        .ok_or_else(|| refuse(doc, "configuration.fields must be a non-empty list"))?;
    let mut fields = Vec::with_capacity(list.len());
    for item in list {
        let (name, field_type) = match item {
            Value::Object(o) => {
                if let Some(other) = o.keys().find(|k| *k != "name" && *k != "data_type") {
                    return Err(refuse(doc, format!("field member {other:?} is unknown")));
                }
                (o.get("name"), o.get("data_type"))
            }
            // `structured` wrote fields as [name, data_type].
            Value::Array(pair) if legacy && pair.len() == 2 => (pair.first(), pair.get(1)),
            other => {
                return Err(refuse(
                    doc,
                    format!("field {other} is not {{\"name\", \"data_type\"}}"),
                ))
            }
        };
        let name = name
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| refuse(doc, format!("field {item} has no non-empty name")))?;
        let field_type =
            field_type.ok_or_else(|| refuse(doc, format!("field {name:?} has no data_type")))?;
        let data_type = field_data_type(field_type, depth)
            .map_err(|e| refuse(doc, format!("field {name:?}: {e}")))?;
        fields.push((name.to_string(), data_type));
    }
    build(doc, fields)
}

/// The struct type of `fields` (names and types in order), checked: names unique, every type of a
/// fixed size, elements within 4 GiB; interned (see [`MAX_STRUCT_TYPES`]). `doc` is named in errors.
fn build(doc: &Value, named: Vec<(String, DataType)>) -> Result<DataType> {
    let mut fields: Vec<StructField> = Vec::with_capacity(named.len());
    let mut size = 0usize;
    for (name, data_type) in named {
        if fields.iter().any(|f| f.name == name) {
            return Err(refuse(doc, format!("field name {name:?} is repeated")));
        }
        if data_type.is_variable() {
            return Err(refuse(
                doc,
                format!("field {name:?} has the variable-length type {data_type}"),
            ));
        }
        fields.push(StructField {
            name,
            data_type,
            offset: size,
        });
        size = size
            .checked_add(data_type.size())
            .filter(|&s| s <= u32::MAX as usize)
            .ok_or_else(|| refuse(doc, "elements are larger than 4 GiB"))?;
    }
    intern(StructType { fields, size })
        .map(DataType::Struct)
        .ok_or_else(|| {
            refuse(
                doc,
                format!("more than {MAX_STRUCT_TYPES} distinct struct types in one run"),
            )
        })
}

/// Parses a Zarr v2 structured `dtype` (numpy's array-interface description: a list of
/// `[name, typestr]`, a nested list in place of the typestr for a nested record) into a struct type
/// and the byte order of its fields. Fields of more than one byte must share one byte order (the v3
/// `bytes` codec has one); subarray fields (`[name, typestr, shape]`) and empty names are refused.
pub fn struct_from_v2(descr: &Value) -> Result<(DataType, Endian)> {
    let mut endian = None;
    let data_type = v2_fields(descr, &mut endian, 0)?;
    Ok((data_type, endian.unwrap_or(Endian::Little)))
}

fn v2_fields(descr: &Value, endian: &mut Option<Endian>, depth: usize) -> Result<DataType> {
    if depth > MAX_DEPTH {
        return Err(refuse(
            descr,
            format!("fields nest deeper than {MAX_DEPTH} levels"),
        ));
    }
    let list = descr
        .as_array()
        .filter(|l| !l.is_empty())
        .ok_or_else(|| refuse(descr, "a v2 structured dtype must be a non-empty list"))?;
    let mut fields = Vec::with_capacity(list.len());
    for item in list {
        let (name, field) = match item.as_array().map(Vec::as_slice) {
            Some([Value::String(name), field]) if !name.is_empty() => (name, field),
            Some([_, _, _]) => {
                return Err(refuse(
                    descr,
                    format!("subarray field {item} is not supported"),
                ))
            }
            _ => {
                return Err(refuse(
                    descr,
                    format!("field {item} is not [name, typestr]"),
                ))
            }
        };
        let data_type = match field {
            Value::String(typestr) => {
                let (data_type, order) = DataType::from_v2_typestr(typestr)
                    .map_err(|e| refuse(descr, format!("field {name:?}: {e}")))?;
                if data_type.swap_unit() > 1 {
                    match endian {
                        Some(seen) if *seen != order => {
                            return Err(refuse(
                                descr,
                                format!(
                                "field {name:?} has another byte order than the fields before it"
                            ),
                            ))
                        }
                        _ => *endian = Some(order),
                    }
                }
                data_type
            }
            nested => v2_fields(nested, endian, depth + 1)?,
        };
        fields.push((name.clone(), data_type));
    }
    build(descr, fields)
}

/// A field's type: a name, an object with a configuration, or (zarr-extensions #63) an object with
/// only a name.
fn field_data_type(value: &Value, depth: usize) -> Result<DataType> {
    if let Value::Object(o) = value {
        match o.get("name").and_then(Value::as_str) {
            Some(name @ ("struct" | "structured")) => {
                return parse_at(value, name == "structured", depth + 1)
            }
            Some(name)
                if o.len() == 1 || o.get("configuration") == Some(&Value::Object(Map::new())) =>
            {
                if let Ok(d) = DataType::from_v3_name(name) {
                    return Ok(d);
                }
            }
            _ => {}
        }
    }
    DataType::from_v3_json(value)
}

fn intern(t: StructType) -> Option<&'static StructType> {
    static TYPES: OnceLock<Mutex<HashSet<&'static StructType>>> = OnceLock::new();
    let mut types = TYPES
        .get_or_init(|| Mutex::new(HashSet::new()))
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    if let Some(&known) = types.get(&t) {
        return Some(known);
    }
    if types.len() >= MAX_STRUCT_TYPES {
        return None;
    }
    let leaked: &'static StructType = Box::leak(Box::new(t));
    types.insert(leaked);
    Some(leaked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(fields: Value) -> Value {
        json!({"name": "struct", "configuration": {"fields": fields}})
    }

    #[test]
    fn v2_structured_dtypes() {
        let (t, endian) = struct_from_v2(&json!([
            ["x", ">f4"],
            ["p", [["a", ">u2"], ["s", "|S3"]]],
            ["f", "|u1"]
        ]))
        .expect("nested, big-endian");
        assert_eq!(endian, Endian::Big);
        assert_eq!(t.size(), 4 + 2 + 3 + 1);
        assert_eq!(
            t.to_v3_json(),
            json!({"name": "struct", "configuration": {"fields": [
                {"name": "x", "data_type": "float32"},
                {"name": "p", "data_type": {"name": "struct", "configuration": {"fields": [
                    {"name": "a", "data_type": "uint16"},
                    {"name": "s", "data_type": {"name": "null_terminated_bytes", "configuration": {"length_bytes": 3}}}]}}},
                {"name": "f", "data_type": "uint8"}]}})
        );
        for bad in [
            json!([["a", "<i4"], ["b", ">f8"]]),
            json!([["a", "<i4", [2]]]),
            json!([["a", "|O"]]),
            json!([]),
            json!([["a", "<i4"], ["a", "<i4"]]),
        ] {
            assert!(struct_from_v2(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn parses_nested_fields_with_offsets_and_writes_them_back() {
        let doc = st(json!([
            {"name": "id", "data_type": "int32"},
            {"name": "flags", "data_type": "uint8"},
            {"name": "p", "data_type": st(json!([
                {"name": "x", "data_type": "float32"},
                {"name": "t", "data_type": {"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 1}}}
            ]))},
            {"name": "s", "data_type": {"name": "null_terminated_bytes", "configuration": {"length_bytes": 3}}}
        ]));
        let d = DataType::from_v3_json(&doc).expect("valid struct");
        let DataType::Struct(t) = d else {
            panic!("a struct")
        };
        assert_eq!(d.size(), 4 + 1 + (4 + 8) + 3);
        let offsets: Vec<usize> = t.fields().iter().map(|f| f.offset).collect();
        assert_eq!(offsets, vec![0, 4, 5, 17]);
        assert_eq!(d.to_v3_json(), doc);
        // The same document is the same (interned) type.
        assert_eq!(DataType::from_v3_json(&doc).ok(), Some(d));
        assert_eq!(d.swap_unit(), 8);
    }

    #[test]
    fn legacy_structured_pairs_and_name_only_objects() {
        let legacy = json!({"name": "structured", "configuration": {"fields": [["x", "float32"], ["y", {"name": "int16"}]]}});
        let d = DataType::from_v3_json(&legacy).expect("legacy form");
        assert_eq!(
            d.to_v3_json(),
            st(json!([{"name": "x", "data_type": "float32"}, {"name": "y", "data_type": "int16"}]))
        );
    }

    #[test]
    fn fill_values_are_objects_of_field_values() {
        use crate::FillValue;
        let d = DataType::from_v3_json(&st(json!([
            {"name": "x", "data_type": "float32"},
            {"name": "p", "data_type": st(json!([
                {"name": "a", "data_type": "uint8"},
                {"name": "b", "data_type": "float64"}
            ]))}
        ])))
        .expect("valid");
        let v = json!({"x": 1.5, "p": {"a": 3, "b": "NaN"}});
        let fill = FillValue::from_v3_json(&v, d).expect("valid fill");
        let mut want = 1.5f32.to_le_bytes().to_vec();
        want.push(3);
        want.extend_from_slice(&f64::NAN.to_le_bytes());
        assert_eq!(fill.as_bytes(), want.as_slice());
        assert_eq!(fill.to_v3_json(d), v);
        for bad in [
            json!({"x": 1.5}),
            json!({"x": 1.5, "p": {"a": 3, "b": 0}, "z": 1}),
            json!({"x": 1.5, "p": {"a": 300, "b": 0}}),
            json!([1.5, [3, 0]]),
            json!(0),
        ] {
            assert!(FillValue::from_v3_json(&bad, d).is_err(), "{bad}");
        }
    }

    #[test]
    fn byte_order_swaps_each_field() {
        let d = DataType::from_v3_json(&st(json!([
            {"name": "a", "data_type": "uint16"},
            {"name": "b", "data_type": "uint8"},
            {"name": "c", "data_type": "complex64"}
        ])))
        .expect("valid");
        let mut b: Vec<u8> = (0..11).collect();
        d.swap_bytes(&mut b);
        assert_eq!(b, vec![1, 0, 2, 6, 5, 4, 3, 10, 9, 8, 7]);
    }

    #[test]
    fn bad_documents_are_refused() {
        for doc in [
            json!({"name": "struct"}),
            json!({"name": "struct", "configuration": {}}),
            st(json!([])),
            st(json!([{"name": "", "data_type": "int8"}])),
            st(json!([{"name": "a", "data_type": "int8"}, {"name": "a", "data_type": "int16"}])),
            st(json!([{"name": "a", "data_type": "string"}])),
            st(json!([{"name": "a", "data_type": "float128"}])),
            st(json!([{"name": "a"}])),
            st(json!([{"name": "a", "data_type": "int8", "extra": 1}])),
            st(json!([["a", "int8"]])),
            st(json!([{"name": "a", "data_type": st(json!([]))}])),
            json!({"name": "struct", "configuration": {"fields": [{"name": "a", "data_type": "int8"}], "x": 1}}),
        ] {
            assert!(DataType::from_v3_json(&doc).is_err(), "{doc}");
        }
        // Deep nesting is refused, not followed.
        let mut deep = json!("int8");
        for _ in 0..40 {
            deep = st(json!([{"name": "a", "data_type": deep}]));
        }
        assert!(DataType::from_v3_json(&deep).is_err());
    }
}
