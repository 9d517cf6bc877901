//! numcodecs `categorize` (v3 `numcodecs.categorize`): strings stored as small integers, `i + 1` for
//! `labels[i]` and 0 for anything else, which decodes to the empty string as in numcodecs. zarr-python
//! writes it only as the first filter of Zarr v2 arrays of fixed-length unicode (`<U<n>`); it is read
//! as an array→array codec from the strings to the integer type `astype`.

use std::sync::Arc;

use zshard_core::{
    utf32_decode, utf32_encode, vlen_encode, vlen_ranges, ArrayToArrayCodec, ChunkRepr, CodecSpec,
    DataType, Error, FillValue, Result,
};

use crate::config::string;
use crate::error::invalid;
use crate::numeric::{ElemType, Kind, Num};
use crate::registry::Codec;

#[derive(Debug)]
pub(crate) struct CategorizeCodec {
    labels: Vec<String>,
    /// The stored integer type.
    astype: ElemType,
    /// The stored type as a data type, for the chunk representation after this codec.
    astype_data_type: DataType,
    /// The configuration as read, written back unchanged.
    spec: CodecSpec,
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    if !matches!(
        repr.data_type,
        DataType::FixedLengthUtf32(_) | DataType::String
    ) {
        return Err(invalid(
            &spec.name,
            format!("categorizes strings, not {}", repr.data_type),
        ));
    }
    let labels = spec
        .get("labels")
        .and_then(|l| l.as_array())
        .and_then(|l| {
            l.iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| invalid(&spec.name, "labels must be a list of strings"))?;
    let astype_text = string(spec, "astype").unwrap_or("|u1");
    let astype = ElemType::parse(&spec.name, "astype", astype_text)?;
    if !matches!(astype.ty.kind, Kind::Int | Kind::UInt) {
        return Err(invalid(&spec.name, "astype must be an integer type"));
    }
    let (astype_data_type, _) = DataType::from_v2_typestr(astype_text)?;
    Ok(Codec::ArrayToArray(Arc::new(CategorizeCodec {
        labels,
        astype,
        astype_data_type,
        spec: spec.clone(),
    })))
}

impl CategorizeCodec {
    /// The string of stored value `v`: `labels[v - 1]`, or empty.
    fn label(&self, v: Num) -> &str {
        match v {
            Num::I(i) if i >= 1 => self.labels.get((i - 1) as usize).map_or("", String::as_str),
            _ => "",
        }
    }
}

impl ArrayToArrayCodec for CategorizeCodec {
    fn encoded_repr(&self, decoded: &ChunkRepr) -> Result<ChunkRepr> {
        Ok(ChunkRepr {
            shape: decoded.shape.clone(),
            data_type: self.astype_data_type,
            fill_value: FillValue::zero(self.astype_data_type),
        })
    }

    fn encode(&self, data: Vec<u8>, decoded: &ChunkRepr) -> Result<Vec<u8>> {
        let strings: Vec<String> = match decoded.data_type {
            DataType::FixedLengthUtf32(n) => data
                .chunks_exact(n as usize * 4)
                .map(utf32_decode)
                .collect(),
            _ => {
                let ranges = vlen_ranges(&data, decoded.elements() as usize)?;
                ranges
                    .into_iter()
                    .map(|r| String::from_utf8_lossy(&data[r]).into_owned())
                    .collect()
            }
        };
        let size = self.astype.size();
        let mut out = vec![0u8; strings.len() * size];
        for (s, slot) in strings.iter().zip(out.chunks_exact_mut(size)) {
            let code = self.labels.iter().position(|l| l == s).map_or(0, |i| i + 1);
            self.astype.write(Num::I(code as i128), slot);
        }
        Ok(out)
    }

    fn decode(&self, data: Vec<u8>, decoded: &ChunkRepr) -> Result<Vec<u8>> {
        let size = self.astype.size();
        let count = decoded.elements() as usize;
        if data.len() != count * size {
            return Err(Error::DecodedSize {
                expected: count * size,
                actual: data.len(),
            });
        }
        let labels = data
            .chunks_exact(size)
            .map(|b| self.label(self.astype.read(b)));
        match decoded.data_type {
            DataType::FixedLengthUtf32(n) => {
                let mut out = Vec::with_capacity(decoded.byte_len());
                for label in labels {
                    utf32_encode(label, n as usize, &mut out);
                }
                Ok(out)
            }
            _ => vlen_encode(count, labels.map(str::as_bytes)),
        }
    }

    fn spec(&self) -> CodecSpec {
        self.spec.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn decodes_like_numcodecs() {
        let spec = CodecSpec::new(
            "numcodecs.categorize",
            json!({"labels": ["a", "bb"], "dtype": "<U2", "astype": "|u1"}),
        );
        let repr = ChunkRepr {
            shape: vec![4],
            data_type: DataType::FixedLengthUtf32(2),
            fill_value: FillValue::zero(DataType::FixedLengthUtf32(2)),
        };
        let Ok(Codec::ArrayToArray(codec)) = build(&spec, &repr) else {
            panic!("categorize builds");
        };
        let decoded = codec.decode(vec![1, 2, 0, 9], &repr).expect("decode");
        let mut expected = Vec::new();
        for s in ["a", "bb", "", ""] {
            utf32_encode(s, 2, &mut expected);
        }
        assert_eq!(decoded, expected);
        assert_eq!(codec.encode(decoded, &repr).ok(), Some(vec![1, 2, 0, 0]));
        assert!(codec.decode(vec![1, 2], &repr).is_err());
    }
}
