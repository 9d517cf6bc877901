use crate::error::{Error, Result};

/// Byte order of multi-byte elements in an encoded chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endian {
    Little,
    Big,
}

impl Endian {
    pub fn as_str(self) -> &'static str {
        match self {
            Endian::Little => "little",
            Endian::Big => "big",
        }
    }
}

/// The element types zshard understands. In memory, decoded chunks always hold elements in little-endian
/// byte order and C (row-major) layout; codecs convert at the edges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DataType {
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    UInt8,
    UInt16,
    UInt32,
    UInt64,
    Float16,
    Float32,
    Float64,
    Complex64,
    Complex128,
    /// numpy `S<n>`: fixed-length bytes, NUL-padded (zarr-python's v3 `null_terminated_bytes`).
    NullTerminatedBytes(u32),
}

const ALL: [DataType; 14] = [
    DataType::Bool,
    DataType::Int8,
    DataType::Int16,
    DataType::Int32,
    DataType::Int64,
    DataType::UInt8,
    DataType::UInt16,
    DataType::UInt32,
    DataType::UInt64,
    DataType::Float16,
    DataType::Float32,
    DataType::Float64,
    DataType::Complex64,
    DataType::Complex128,
];

impl DataType {
    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DataType::Bool | DataType::Int8 | DataType::UInt8 => 1,
            DataType::Int16 | DataType::UInt16 | DataType::Float16 => 2,
            DataType::Int32 | DataType::UInt32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::UInt64 | DataType::Float64 | DataType::Complex64 => 8,
            DataType::Complex128 => 16,
            DataType::NullTerminatedBytes(n) => n as usize,
        }
    }

    /// Size of the unit that byte order applies to (complex numbers swap each half on its own).
    pub fn swap_unit(self) -> usize {
        match self {
            DataType::Complex64 => 4,
            DataType::Complex128 => 8,
            DataType::NullTerminatedBytes(_) => 1,
            other => other.size(),
        }
    }

    /// The Zarr v3 `data_type` name.
    pub fn v3_name(self) -> &'static str {
        match self {
            DataType::Bool => "bool",
            DataType::Int8 => "int8",
            DataType::Int16 => "int16",
            DataType::Int32 => "int32",
            DataType::Int64 => "int64",
            DataType::UInt8 => "uint8",
            DataType::UInt16 => "uint16",
            DataType::UInt32 => "uint32",
            DataType::UInt64 => "uint64",
            DataType::Float16 => "float16",
            DataType::Float32 => "float32",
            DataType::Float64 => "float64",
            DataType::Complex64 => "complex64",
            DataType::Complex128 => "complex128",
            DataType::NullTerminatedBytes(_) => "null_terminated_bytes",
        }
    }

    /// The Zarr v3 `data_type` document: a name, or a name with configuration for parametric types.
    pub fn to_v3_json(self) -> serde_json::Value {
        match self {
            DataType::NullTerminatedBytes(n) => serde_json::json!({
                "name": "null_terminated_bytes", "configuration": {"length_bytes": n}
            }),
            other => serde_json::Value::String(other.v3_name().to_string()),
        }
    }

    /// Parses a Zarr v3 `data_type` document (a name, or an object with a configuration).
    pub fn from_v3_json(value: &serde_json::Value) -> Result<Self> {
        match value {
            serde_json::Value::String(name) => Self::from_v3_name(name),
            serde_json::Value::Object(o)
                if o.get("name").and_then(|n| n.as_str()) == Some("null_terminated_bytes") =>
            {
                let length = o
                    .get("configuration")
                    .and_then(|c| c.get("length_bytes"))
                    .and_then(serde_json::Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|&n| n > 0);
                length.map(DataType::NullTerminatedBytes).ok_or_else(|| {
                    Error::UnsupportedDataType {
                        name: value.to_string(),
                        supported:
                            "null_terminated_bytes needs a positive configuration.length_bytes"
                                .into(),
                    }
                })
            }
            other => Err(Error::UnsupportedDataType {
                name: other.to_string(),
                supported: format!("{}, null_terminated_bytes", Self::supported()),
            }),
        }
    }

    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Float16 | DataType::Float32 | DataType::Float64
        )
    }

    pub fn is_complex(self) -> bool {
        matches!(self, DataType::Complex64 | DataType::Complex128)
    }

    fn supported() -> String {
        ALL.iter()
            .map(|d| d.v3_name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Parses a Zarr v3 `data_type` name.
    pub fn from_v3_name(name: &str) -> Result<Self> {
        ALL.iter()
            .copied()
            .find(|d| d.v3_name() == name)
            .ok_or_else(|| Error::UnsupportedDataType {
                name: name.to_string(),
                supported: Self::supported(),
            })
    }

    /// Parses a Zarr v2 / numpy type string such as `<u2`, `|b1` or `>f8`.
    pub fn from_v2_typestr(typestr: &str) -> Result<(Self, Endian)> {
        let unsupported = || Error::UnsupportedDataType {
            name: typestr.to_string(),
            supported: "|b1, |i1, |u1, |S<n> and <,> of i2 i4 i8 u2 u4 u8 f2 f4 f8 c8 c16"
                .to_string(),
        };
        let mut chars = typestr.chars();
        let order = chars.next().ok_or_else(unsupported)?;
        let endian = match order {
            '<' | '|' => Endian::Little,
            '>' => Endian::Big,
            _ => return Err(unsupported()),
        };
        let dtype = match chars.as_str() {
            "b1" => DataType::Bool,
            "i1" => DataType::Int8,
            "i2" => DataType::Int16,
            "i4" => DataType::Int32,
            "i8" => DataType::Int64,
            "u1" => DataType::UInt8,
            "u2" => DataType::UInt16,
            "u4" => DataType::UInt32,
            "u8" => DataType::UInt64,
            "f2" => DataType::Float16,
            "f4" => DataType::Float32,
            "f8" => DataType::Float64,
            "c8" => DataType::Complex64,
            "c16" => DataType::Complex128,
            s if s.starts_with('S') => match s[1..].parse::<u32>() {
                Ok(n) if n > 0 && order == '|' => DataType::NullTerminatedBytes(n),
                _ => return Err(unsupported()),
            },
            _ => return Err(unsupported()),
        };
        Ok((dtype, endian))
    }

    /// The little-endian numpy type string, used for Zarr v2 output (the demo dataset).
    pub fn v2_typestr(self) -> String {
        let code = match self {
            DataType::Bool => return "|b1".into(),
            DataType::Int8 => return "|i1".into(),
            DataType::UInt8 => return "|u1".into(),
            DataType::Int16 => "i2",
            DataType::Int32 => "i4",
            DataType::Int64 => "i8",
            DataType::UInt16 => "u2",
            DataType::UInt32 => "u4",
            DataType::UInt64 => "u8",
            DataType::Float16 => "f2",
            DataType::Float32 => "f4",
            DataType::Float64 => "f8",
            DataType::Complex64 => "c8",
            DataType::Complex128 => "c16",
            DataType::NullTerminatedBytes(n) => return format!("|S{n}"),
        };
        format!("<{code}")
    }
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataType::NullTerminatedBytes(n) => write!(f, "null_terminated_bytes({n})"),
            other => f.write_str(other.v3_name()),
        }
    }
}

/// Reverses the byte order of every `unit`-sized group in `buf` (no-op for single bytes).
pub fn swap_byte_order(buf: &mut [u8], unit: usize) {
    if unit > 1 {
        for element in buf.chunks_exact_mut(unit) {
            element.reverse();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_typestrings() {
        assert_eq!(
            DataType::from_v2_typestr("<u2").ok(),
            Some((DataType::UInt16, Endian::Little))
        );
        assert_eq!(
            DataType::from_v2_typestr(">f8").ok(),
            Some((DataType::Float64, Endian::Big))
        );
        assert_eq!(
            DataType::from_v2_typestr("|b1").ok(),
            Some((DataType::Bool, Endian::Little))
        );
        assert!(DataType::from_v2_typestr("<M8[ns]").is_err());
        assert_eq!(
            DataType::from_v2_typestr("|S3").ok(),
            Some((DataType::NullTerminatedBytes(3), Endian::Little))
        );
        let s3 = DataType::NullTerminatedBytes(3);
        assert_eq!(DataType::from_v3_json(&s3.to_v3_json()).ok(), Some(s3));
        assert_eq!(s3.v2_typestr(), "|S3");
        assert!(DataType::from_v2_typestr("|S0").is_err());
        for d in ALL {
            assert_eq!(DataType::from_v3_name(d.v3_name()).ok(), Some(d));
            assert_eq!(
                DataType::from_v2_typestr(&d.v2_typestr()).ok().map(|x| x.0),
                Some(d)
            );
        }
    }

    #[test]
    fn swap_complex_halves() {
        let mut b = vec![1, 2, 3, 4, 5, 6, 7, 8];
        swap_byte_order(&mut b, DataType::Complex64.swap_unit());
        assert_eq!(b, vec![4, 3, 2, 1, 8, 7, 6, 5]);
    }
}
