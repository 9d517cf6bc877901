//! numcodecs' object codecs `json2` and `msgpack2` (the first filter of a Zarr v2 `|O` array), read
//! when the objects are strings: decoding yields the `vlen-utf8` layout of a `string` chunk, which is
//! what zshard writes them as. numcodecs encodes a chunk as one list: the chunk's elements (nested
//! lists, one level per axis, from numpy's `tolist`), then its dtype string and its shape
//! (`numcodecs/json.py`, `numcodecs/msgpacks.py`). Anything but a string in it (a number, `null`, a
//! list as an element) is refused: zarr-python 3.1 has no data type for such arrays.

use std::sync::Arc;

use zshard_core::{vlen_encode, ArrayToBytesCodec, ChunkRepr, CodecSpec, DataType, Error, Result};

use crate::error::invalid;
use crate::registry::Codec;

/// The two formats, as their numcodecs ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Json2,
    MsgPack2,
}

impl Format {
    fn id(self) -> &'static str {
        match self {
            Format::Json2 => "json2",
            Format::MsgPack2 => "msgpack2",
        }
    }
}

/// Decodes numcodecs `json2` / `msgpack2` chunks of strings; never writes them.
#[derive(Debug)]
pub(crate) struct ObjectCodec {
    format: Format,
    config: Option<serde_json::Map<String, serde_json::Value>>,
}

/// Builds `numcodecs.json2` (UTF-8 or ASCII text only: the encoding numcodecs writes by default).
pub(crate) fn build_json2(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let encoding = spec.get("encoding").and_then(serde_json::Value::as_str);
    if !matches!(encoding, None | Some("utf-8" | "utf8" | "ascii")) {
        return Err(invalid(
            &spec.name,
            format!("text encoding {encoding:?} is not supported (utf-8)"),
        ));
    }
    build_for(spec, repr, Format::Json2)
}

/// Builds `numcodecs.msgpack2`; `raw: true` decodes strings to Python bytes, which are not strings.
pub(crate) fn build_msgpack2(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    if spec.get("raw").and_then(serde_json::Value::as_bool) == Some(true) {
        return Err(invalid(
            &spec.name,
            "raw: true decodes every string as bytes objects, which have no Zarr v3 data type here",
        ));
    }
    build_for(spec, repr, Format::MsgPack2)
}

fn build_for(spec: &CodecSpec, repr: &ChunkRepr, format: Format) -> crate::Result<Codec> {
    if repr.data_type != DataType::String {
        return Err(invalid(
            &spec.name,
            format!("decodes object arrays of strings, not {}", repr.data_type),
        ));
    }
    Ok(Codec::ArrayToBytes(Arc::new(ObjectCodec {
        format,
        config: spec.configuration.clone(),
    })))
}

/// A decoded document, seen as numcodecs' lists of items (JSON and MessagePack alike).
trait Tree {
    fn list(&self) -> Option<&[Self]>
    where
        Self: Sized;
    fn text(&self) -> Option<&str>;
    fn whole(&self) -> Option<u64>;
    fn kind(&self) -> &'static str;
}

impl Tree for serde_json::Value {
    fn list(&self) -> Option<&[Self]> {
        self.as_array().map(Vec::as_slice)
    }
    fn text(&self) -> Option<&str> {
        self.as_str()
    }
    fn whole(&self) -> Option<u64> {
        self.as_u64()
    }
    fn kind(&self) -> &'static str {
        match self {
            serde_json::Value::Null => "null",
            serde_json::Value::Bool(_) => "a boolean",
            serde_json::Value::Number(_) => "a number",
            serde_json::Value::String(_) => "a string",
            serde_json::Value::Array(_) => "a list",
            serde_json::Value::Object(_) => "an object",
        }
    }
}

impl Tree for rmpv::Value {
    fn list(&self) -> Option<&[Self]> {
        self.as_array().map(Vec::as_slice)
    }
    fn text(&self) -> Option<&str> {
        self.as_str()
    }
    fn whole(&self) -> Option<u64> {
        self.as_u64()
    }
    fn kind(&self) -> &'static str {
        match self {
            rmpv::Value::Nil => "nil",
            rmpv::Value::Boolean(_) => "a boolean",
            rmpv::Value::Integer(_) | rmpv::Value::F32(_) | rmpv::Value::F64(_) => "a number",
            rmpv::Value::String(s) if s.is_str() => "a string",
            rmpv::Value::String(_) => "a string that is not UTF-8",
            rmpv::Value::Binary(_) => "bytes",
            rmpv::Value::Array(_) => "a list",
            rmpv::Value::Map(_) => "a map",
            rmpv::Value::Ext(..) => "an extension type",
        }
    }
}

impl ObjectCodec {
    fn error(&self, reason: impl Into<String>) -> Error {
        Error::codec(self.format.id(), reason)
    }

    /// The strings of a chunk of `count` elements, in C order.
    fn strings<'a, T: Tree>(&self, document: &'a T, count: usize) -> Result<Vec<&'a [u8]>> {
        let items = document
            .list()
            .filter(|items| items.len() >= 2)
            .ok_or_else(|| self.error("not a list of items, dtype and shape"))?;
        let (elements, shape) = items.split_at(items.len() - 2);
        let shape = shape[1]
            .list()
            .and_then(|dims| dims.iter().map(Tree::whole).collect::<Option<Vec<u64>>>())
            .ok_or_else(|| self.error("the shape at the end is not a list of sizes"))?;
        let elements_in_shape = shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        if elements_in_shape != Some(count as u64) {
            return Err(self.error(format!(
                "shape {shape:?} does not hold the chunk's {count} elements"
            )));
        }
        let mut out = Vec::with_capacity(count);
        if shape.is_empty() {
            // A 0-d chunk: numcodecs stores its one element as the only item.
            self.flatten(elements, &[1], &mut out)?;
        } else {
            self.flatten(elements, &shape, &mut out)?;
        }
        Ok(out)
    }

    /// Appends the strings of `items`, nested one list per axis of `shape`, in C order.
    fn flatten<'a, T: Tree>(
        &self,
        items: &'a [T],
        shape: &[u64],
        out: &mut Vec<&'a [u8]>,
    ) -> Result<()> {
        let Some((&length, inner)) = shape.split_first() else {
            return Ok(());
        };
        if items.len() as u64 != length {
            return Err(self.error(format!(
                "a list of {} items where the shape has {length}",
                items.len()
            )));
        }
        for item in items {
            if inner.is_empty() {
                let text = item.text().ok_or_else(|| {
                    self.error(format!(
                        "element {} is {}, not a string: only object arrays of strings convert",
                        out.len(),
                        item.kind()
                    ))
                })?;
                out.push(text.as_bytes());
            } else {
                let list = item.list().ok_or_else(|| {
                    self.error(format!("{} where a list was expected", item.kind()))
                })?;
                self.flatten(list, inner, out)?;
            }
        }
        Ok(())
    }
}

impl ArrayToBytesCodec for ObjectCodec {
    fn encode(&self, _data: Vec<u8>, _repr: &ChunkRepr) -> Result<Vec<u8>> {
        Err(self.error("zshard reads this object codec but writes strings with vlen-utf8"))
    }

    fn decode(&self, encoded: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        let count = repr.elements() as usize;
        match self.format {
            Format::Json2 => {
                let document: serde_json::Value = serde_json::from_slice(&encoded)
                    .map_err(|e| self.error(format!("not valid JSON ({e})")))?;
                vlen_encode(count, self.strings(&document, count)?.into_iter())
            }
            Format::MsgPack2 => {
                let document = rmpv::decode::read_value(&mut encoded.as_slice())
                    .map_err(|e| self.error(format!("not valid MessagePack ({e})")))?;
                vlen_encode(count, self.strings(&document, count)?.into_iter())
            }
        }
    }

    fn max_encoded_len(&self, repr: &ChunkRepr) -> usize {
        crate::vlen_utf8::MAX_STRING_CHUNK_BYTES
            .saturating_add((repr.elements() as usize).saturating_mul(8))
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new(
            format!("numcodecs.{}", self.format.id()),
            serde_json::Value::Object(self.config.clone().unwrap_or_default()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zshard_core::{vlen_ranges, FillValue};

    fn repr(shape: &[u64]) -> ChunkRepr {
        ChunkRepr {
            shape: shape.to_vec(),
            data_type: DataType::String,
            fill_value: FillValue::zero(DataType::String),
        }
    }

    fn strings(layout: &[u8], count: usize) -> Vec<String> {
        vlen_ranges(layout, count)
            .expect("layout")
            .into_iter()
            .map(|r| String::from_utf8(layout[r].to_vec()).expect("utf8"))
            .collect()
    }

    fn codec(format: Format) -> ObjectCodec {
        ObjectCodec {
            format,
            config: None,
        }
    }

    #[test]
    fn json2_decodes_nested_lists_in_c_order() {
        // numcodecs.JSON().encode(np.array([["a", "é"], ["", "dd"]], dtype=object))
        let encoded = br#"[["a","\u00e9"],["","dd"],"|O",[2,2]]"#.to_vec();
        let out = codec(Format::Json2)
            .decode(encoded, &repr(&[2, 2]))
            .expect("decodes");
        assert_eq!(strings(&out, 4), ["a", "é", "", "dd"]);
    }

    #[test]
    fn json2_refuses_what_is_not_strings() {
        let c = codec(Format::Json2);
        let err = c
            .decode(br#"["a",1,"|O",[2]]"#.to_vec(), &repr(&[2]))
            .expect_err("a number");
        assert!(err.to_string().contains("element 1 is a number"), "{err}");
        assert!(c
            .decode(br#"["a","b","|O",[3]]"#.to_vec(), &repr(&[3]))
            .is_err());
        assert!(c
            .decode(br#"["a","b","|O",[2]]"#.to_vec(), &repr(&[3]))
            .is_err());
        assert!(c
            .decode(br#"[["a"],"|O",[1]]"#.to_vec(), &repr(&[1]))
            .is_err());
        assert!(c.decode(b"[".to_vec(), &repr(&[1])).is_err());
        assert!(c.decode(br#"[]"#.to_vec(), &repr(&[1])).is_err());
        assert!(c.encode(Vec::new(), &repr(&[1])).is_err());
    }

    #[test]
    fn msgpack2_decodes_strings() {
        // msgpack.packb(["x", "yz", "|O", [2]], use_bin_type=True)
        let encoded = vec![
            0x94, 0xa1, b'x', 0xa2, b'y', b'z', 0xa2, b'|', b'O', 0x91, 0x02,
        ];
        let out = codec(Format::MsgPack2)
            .decode(encoded, &repr(&[2]))
            .expect("decodes");
        assert_eq!(strings(&out, 2), ["x", "yz"]);
        // Binary (bytes objects) are not strings.
        let binary = vec![0x93, 0xc4, 0x01, b'x', 0xa2, b'|', b'O', 0x91, 0x01];
        let err = codec(Format::MsgPack2)
            .decode(binary, &repr(&[1]))
            .expect_err("bytes");
        assert!(err.to_string().contains("element 0 is bytes"), "{err}");
    }

    #[test]
    fn builds_for_strings_only() {
        let spec = CodecSpec::new("numcodecs.msgpack2", serde_json::json!({"raw": true}));
        assert!(build_msgpack2(&spec, &repr(&[1])).is_err());
        let spec = CodecSpec::new("numcodecs.json2", serde_json::json!({"encoding": "utf-16"}));
        assert!(build_json2(&spec, &repr(&[1])).is_err());
        let mut bytes = repr(&[1]);
        bytes.data_type = DataType::Bytes;
        let spec = CodecSpec::new("numcodecs.json2", serde_json::json!({}));
        assert!(build_json2(&spec, &bytes).is_err());
        assert!(build_json2(&spec, &repr(&[1])).is_ok());
    }
}
