use crate::error::{Error, Result};
use crate::minifloat::{SmallFloat, SMALL_FLOATS};
use crate::structs::StructType;

/// Byte order of multi-byte elements in an encoded chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endian {
    /// Least significant byte first (v3 `"little"`, v2 `<`).
    Little,
    /// Most significant byte first (v3 `"big"`, v2 `>`).
    Big,
}

impl Endian {
    /// The v3 `bytes` codec's spelling: `"little"` or `"big"`.
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
    /// `bool`: one byte, 0 or 1.
    Bool,
    /// `int8`: signed 8-bit integer.
    Int8,
    /// `int16`: signed 16-bit integer.
    Int16,
    /// `int32`: signed 32-bit integer.
    Int32,
    /// `int64`: signed 64-bit integer.
    Int64,
    /// `uint8`: unsigned 8-bit integer.
    UInt8,
    /// `uint16`: unsigned 16-bit integer.
    UInt16,
    /// `uint32`: unsigned 32-bit integer.
    UInt32,
    /// `uint64`: unsigned 64-bit integer.
    UInt64,
    /// `float16`: IEEE 754 half precision, 2 bytes.
    Float16,
    /// `float32`: IEEE 754 single precision, 4 bytes.
    Float32,
    /// `float64`: IEEE 754 double precision, 8 bytes.
    Float64,
    /// `complex64`: a float32 real part followed by a float32 imaginary part, 8 bytes.
    Complex64,
    /// `complex128`: a float64 real part followed by a float64 imaginary part, 16 bytes.
    Complex128,
    /// numpy `S<n>`: fixed-length bytes, NUL-padded (zarr-python's v3 `null_terminated_bytes`).
    NullTerminatedBytes(u32),
    /// `r<N>` (the core spec's raw bits, N a multiple of 8): N/8 bytes per element, moved as they
    /// are (no byte order); this holds N/8.
    RawBits(u32),
    /// numpy `U<n>`: `n` UTF-32 code units, NUL-padded (v3 `fixed_length_utf32`, `length_bytes` = 4n).
    FixedLengthUtf32(u32),
    /// numpy `M8[<scale><unit>]`: a signed 64-bit count of `scale` units since 1970; `i64::MIN` is NaT.
    DateTime64(TimeUnit, u32),
    /// numpy `m8[<scale><unit>]`: a signed 64-bit count of `scale` units; `i64::MIN` is NaT.
    TimeDelta64(TimeUnit, u32),
    /// Variable-length UTF-8 strings (v3 `string`, v2 `|O` with the `vlen-utf8` filter). Chunks of
    /// strings have no fixed byte size: codecs see them in the `vlen-utf8` layout (a little-endian u32
    /// count, then a u32 length and the bytes of each element), and [`DataType::size`] is the size of
    /// the 8-byte handle the pipeline moves instead of the string while it reassembles chunks.
    String,
    /// Variable-length bytes (zarr-python 3's v3 `variable_length_bytes`, v2 `|O` with the
    /// `vlen-bytes` filter): handled as [`DataType::String`] is, in the same layout, without UTF-8.
    Bytes,
    /// `int4` (zarr-extensions): -8..=7. With the `bytes` codec one element per byte, in its low 4
    /// bits; the high bits are ignored when read and kept as the source wrote them.
    Int4,
    /// `uint4` (zarr-extensions): 0..=15, one per byte as [`DataType::Int4`].
    UInt4,
    /// `int2` (zarr-extensions): -2..=1, one per byte in its low 2 bits.
    Int2,
    /// `uint2` (zarr-extensions): 0..=3, one per byte in its low 2 bits.
    UInt2,
    /// `bfloat16` (zarr-extensions; tensorstore, ml_dtypes): the upper half of a float32, 2 bytes.
    BFloat16,
    /// The zarr-extensions 8-, 6- and 4-bit floats (`float8_e4m3fn`, `float4_e2m1fn`, ...): one byte
    /// per element, as the `bytes` codec stores them (the narrower ones in its low bits).
    SmallFloat(SmallFloat),
    /// `complex_bfloat16` (zarr-extensions): a bfloat16 real part, then the imaginary part.
    ComplexBFloat16,
    /// `complex_float16` (zarr-extensions): a float16 real part, then the imaginary part.
    ComplexFloat16,
    /// `complex_float8_*`, `complex_float6_*`, `complex_float4_*` (zarr-extensions): two bytes.
    ComplexSmallFloat(SmallFloat),
    /// `struct` (zarr-extensions; zarr-python 3.2+): records of named fixed-size fields packed without
    /// padding, each field little-endian in memory (see [`crate::StructType`]).
    Struct(&'static StructType),
}

/// The unit of a numpy `datetime64` / `timedelta64`, as numpy spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TimeUnit {
    /// `Y`: calendar years.
    Years,
    /// `M`: calendar months.
    Months,
    /// `W`: weeks of 7 days.
    Weeks,
    /// `D`: days.
    Days,
    /// `h`: hours.
    Hours,
    /// `m`: minutes.
    Minutes,
    /// `s`: seconds.
    Seconds,
    /// `ms`: milliseconds.
    Milliseconds,
    /// `us` (also spelled `μs`): microseconds.
    Microseconds,
    /// `ns`: nanoseconds.
    Nanoseconds,
    /// `ps`: picoseconds.
    Picoseconds,
    /// `fs`: femtoseconds.
    Femtoseconds,
    /// `as`: attoseconds.
    Attoseconds,
    /// `generic`: numpy's unit-less datetime, whose only meaningful value is NaT.
    Generic,
}

const TIME_UNITS: [(TimeUnit, &str); 14] = [
    (TimeUnit::Years, "Y"),
    (TimeUnit::Months, "M"),
    (TimeUnit::Weeks, "W"),
    (TimeUnit::Days, "D"),
    (TimeUnit::Hours, "h"),
    (TimeUnit::Minutes, "m"),
    (TimeUnit::Seconds, "s"),
    (TimeUnit::Milliseconds, "ms"),
    (TimeUnit::Microseconds, "us"),
    (TimeUnit::Nanoseconds, "ns"),
    (TimeUnit::Picoseconds, "ps"),
    (TimeUnit::Femtoseconds, "fs"),
    (TimeUnit::Attoseconds, "as"),
    (TimeUnit::Generic, "generic"),
];

impl TimeUnit {
    /// numpy's unit code (`"Y"`, `"ms"`, `"generic"`, ...), as written in a dtype string and the v3 `unit`.
    pub fn as_str(self) -> &'static str {
        TIME_UNITS
            .iter()
            .find(|(u, _)| *u == self)
            .map_or("generic", |(_, s)| s)
    }

    /// Parses numpy's unit code (`"μs"` is numpy's other spelling of `"us"`).
    pub fn parse(s: &str) -> Option<Self> {
        let s = if s == "μs" { "us" } else { s };
        TIME_UNITS.iter().find(|(_, n)| *n == s).map(|(u, _)| *u)
    }
}

impl DataType {
    /// The parametric v3 data types, for error messages and `--version`.
    pub const PARAMETRIC: &'static str = PARAMETRIC;
}

/// The parametric v3 data types, for error messages.
const PARAMETRIC: &str = "null_terminated_bytes {length_bytes > 0}, fixed_length_utf32 {length_bytes, a multiple of 4}, numpy.datetime64 and numpy.timedelta64 {unit, scale_factor}, struct {fields}, r<N> (raw bits, N a multiple of 8)";

const ALL: [DataType; 16] = [
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
    DataType::String,
    DataType::Bytes,
];

/// The zarr-extensions types for machine learning (ml_dtypes' types, written by tensorstore), which
/// zshard moves byte for byte.
fn ml_types() -> impl Iterator<Item = DataType> {
    [
        DataType::Int2,
        DataType::Int4,
        DataType::UInt2,
        DataType::UInt4,
        DataType::BFloat16,
        DataType::ComplexBFloat16,
        DataType::ComplexFloat16,
    ]
    .into_iter()
    .chain(SMALL_FLOATS.map(DataType::SmallFloat))
    .chain(SMALL_FLOATS.map(DataType::ComplexSmallFloat))
}

impl DataType {
    /// The numeric data types (bool, integers, floats, complex), whose v3 names need no configuration.
    pub fn numeric() -> &'static [DataType] {
        &ALL[..14]
    }

    /// Size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            DataType::Bool | DataType::Int8 | DataType::UInt8 => 1,
            DataType::Int16 | DataType::UInt16 | DataType::Float16 | DataType::BFloat16 => 2,
            DataType::SmallFloat(_)
            | DataType::Int4
            | DataType::UInt4
            | DataType::Int2
            | DataType::UInt2 => 1,
            DataType::ComplexSmallFloat(_) => 2,
            DataType::ComplexBFloat16 | DataType::ComplexFloat16 => 4,
            DataType::Int32 | DataType::UInt32 | DataType::Float32 => 4,
            DataType::Int64 | DataType::UInt64 | DataType::Float64 | DataType::Complex64 => 8,
            DataType::Complex128 => 16,
            DataType::NullTerminatedBytes(n) | DataType::RawBits(n) => n as usize,
            DataType::FixedLengthUtf32(n) => n as usize * 4,
            DataType::Struct(t) => t.size(),
            DataType::DateTime64(..)
            | DataType::TimeDelta64(..)
            | DataType::String
            | DataType::Bytes => 8,
        }
    }

    /// The element size a shuffling compressor (blosc) works with: strings are compressed as the
    /// bytes of their `vlen-utf8` layout, so 1 for them.
    pub fn typesize(self) -> usize {
        if self.is_variable() {
            1
        } else {
            self.size()
        }
    }

    /// Whether elements have no fixed size (strings, bytes): chunks are then in the `vlen-utf8` layout.
    pub fn is_variable(self) -> bool {
        matches!(self, DataType::String | DataType::Bytes)
    }

    /// Size of the unit that byte order applies to (complex numbers swap each half on its own).
    pub fn swap_unit(self) -> usize {
        match self {
            DataType::Complex64 => 4,
            DataType::Complex128 => 8,
            DataType::ComplexBFloat16 | DataType::ComplexFloat16 => 2,
            DataType::ComplexSmallFloat(_) => 1,
            DataType::NullTerminatedBytes(_)
            | DataType::RawBits(_)
            | DataType::String
            | DataType::Bytes => 1,
            DataType::FixedLengthUtf32(_) => 4,
            // The widest field's: more than 1 when the byte order matters. Swap with
            // [`DataType::swap_bytes`], which goes field by field.
            DataType::Struct(t) => t.max_swap_unit(),
            other => other.size(),
        }
    }

    /// Reverses the byte order of every element in `buf` (of each half of complex numbers, of each
    /// field of structs); a no-op for single-byte units.
    pub fn swap_bytes(self, buf: &mut [u8]) {
        match self {
            DataType::Struct(t) => t.swap_bytes(buf),
            other => swap_byte_order(buf, other.swap_unit()),
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
            DataType::Int4 => "int4",
            DataType::UInt4 => "uint4",
            DataType::Int2 => "int2",
            DataType::UInt2 => "uint2",
            DataType::BFloat16 => "bfloat16",
            DataType::SmallFloat(t) => t.name(),
            DataType::ComplexBFloat16 => "complex_bfloat16",
            DataType::ComplexFloat16 => "complex_float16",
            DataType::ComplexSmallFloat(t) => t.complex_name(),
            DataType::NullTerminatedBytes(_) => "null_terminated_bytes",
            DataType::RawBits(n) => raw_bits_name(n),
            DataType::FixedLengthUtf32(_) => "fixed_length_utf32",
            DataType::DateTime64(..) => "numpy.datetime64",
            DataType::TimeDelta64(..) => "numpy.timedelta64",
            DataType::String => "string",
            DataType::Bytes => "variable_length_bytes",
            DataType::Struct(_) => "struct",
        }
    }

    /// The Zarr v3 `data_type` document: a name, or a name with configuration for parametric types.
    pub fn to_v3_json(self) -> serde_json::Value {
        match self {
            DataType::NullTerminatedBytes(n) => serde_json::json!({
                "name": "null_terminated_bytes", "configuration": {"length_bytes": n}
            }),
            DataType::FixedLengthUtf32(n) => serde_json::json!({
                "name": "fixed_length_utf32", "configuration": {"length_bytes": u64::from(n) * 4}
            }),
            DataType::DateTime64(unit, scale) | DataType::TimeDelta64(unit, scale) => {
                serde_json::json!({
                    "name": self.v3_name(),
                    "configuration": {"unit": unit.as_str(), "scale_factor": scale}
                })
            }
            DataType::Struct(t) => t.to_v3_json(),
            other => serde_json::Value::String(other.v3_name().to_string()),
        }
    }

    /// Parses a Zarr v3 `data_type` document (a name, or an object with a configuration).
    pub fn from_v3_json(value: &serde_json::Value) -> Result<Self> {
        match value {
            serde_json::Value::String(name) => Self::from_v3_name(name),
            serde_json::Value::Object(o) => {
                match o.get("name").and_then(serde_json::Value::as_str) {
                    Some("struct") => return crate::structs::parse(value, false),
                    Some("structured") => return crate::structs::parse(value, true),
                    _ => {}
                }
                Self::from_v3_object(o).ok_or_else(|| Error::UnsupportedDataType {
                    name: value.to_string(),
                    supported: PARAMETRIC.into(),
                })
            }
            other => Err(Error::UnsupportedDataType {
                name: other.to_string(),
                supported: format!("{}, {PARAMETRIC}", Self::supported()),
            }),
        }
    }

    /// A parametric type from its v3 object form; `None` when the name or configuration is not valid.
    fn from_v3_object(o: &serde_json::Map<String, serde_json::Value>) -> Option<Self> {
        let config = o.get("configuration");
        let get_u32 = |key: &str| {
            config
                .and_then(|c| c.get(key))
                .and_then(serde_json::Value::as_u64)
                .and_then(|n| u32::try_from(n).ok())
        };
        let time = || {
            let unit = config
                .and_then(|c| c.get("unit"))
                .and_then(serde_json::Value::as_str)
                .and_then(TimeUnit::parse)?;
            let scale = get_u32("scale_factor").filter(|&n| n > 0)?;
            Some((unit, scale))
        };
        match o.get("name").and_then(serde_json::Value::as_str)? {
            "null_terminated_bytes" => get_u32("length_bytes")
                .filter(|&n| n > 0)
                .map(DataType::NullTerminatedBytes),
            "fixed_length_utf32" => get_u32("length_bytes")
                .filter(|&n| n > 0 && n % 4 == 0)
                .map(|n| DataType::FixedLengthUtf32(n / 4)),
            "numpy.datetime64" => time().map(|(u, s)| DataType::DateTime64(u, s)),
            "numpy.timedelta64" => time().map(|(u, s)| DataType::TimeDelta64(u, s)),
            "string" => Some(DataType::String),
            "variable_length_bytes" => Some(DataType::Bytes),
            _ => None,
        }
    }

    /// Whether the elements are IEEE floats (float16, float32, float64).
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Float16 | DataType::Float32 | DataType::Float64
        )
    }

    /// Whether the elements are complex numbers (a pair of IEEE float32 or float64).
    pub fn is_complex(self) -> bool {
        matches!(self, DataType::Complex64 | DataType::Complex128)
    }

    /// The type of each half of a complex type (the core ones and the zarr-extensions ones).
    pub fn complex_component(self) -> Option<DataType> {
        match self {
            DataType::Complex64 => Some(DataType::Float32),
            DataType::Complex128 => Some(DataType::Float64),
            DataType::ComplexBFloat16 => Some(DataType::BFloat16),
            DataType::ComplexFloat16 => Some(DataType::Float16),
            DataType::ComplexSmallFloat(t) => Some(DataType::SmallFloat(t)),
            _ => None,
        }
    }

    /// Bits of a value in an element, when fewer than the element's bytes hold (float6, float4:
    /// the `bytes` codec stores them in the low bits of a byte).
    pub fn value_bits(self) -> Option<u32> {
        match self {
            DataType::SmallFloat(t) if t.bits() < 8 => Some(t.bits()),
            DataType::Int4 | DataType::UInt4 => Some(4),
            DataType::Int2 | DataType::UInt2 => Some(2),
            _ => None,
        }
    }

    /// Every data type name zshard reads, for `--version` and error messages.
    pub fn supported() -> String {
        ALL.iter()
            .copied()
            .chain(ml_types())
            .map(|d| d.v3_name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Parses a Zarr v3 `data_type` name.
    pub fn from_v3_name(name: &str) -> Result<Self> {
        // The registry's aliases of the core complex types.
        match name {
            "complex_float32" => return Ok(DataType::Complex64),
            "complex_float64" => return Ok(DataType::Complex128),
            _ => {}
        }
        ALL.iter()
            .copied()
            .chain(ml_types())
            .find(|d| d.v3_name() == name)
            .or_else(|| raw_bits(name))
            .ok_or_else(|| Error::UnsupportedDataType {
                name: name.to_string(),
                supported: match name.strip_prefix('r') {
                    Some(bits) if !bits.is_empty() && bits.bytes().all(|b| b.is_ascii_digit()) => {
                        format!(
                            "{}; raw bits r<N> need N a positive multiple of 8",
                            Self::supported()
                        )
                    }
                    _ => Self::supported(),
                },
            })
    }

    /// Parses a Zarr v2 / numpy type string such as `<u2`, `|b1` or `>f8`.
    pub fn from_v2_typestr(typestr: &str) -> Result<(Self, Endian)> {
        let unsupported = || {
            Error::UnsupportedDataType {
            name: typestr.to_string(),
            supported: "|b1, |i1, |u1, |S<n>, |O (with the vlen-utf8 or vlen-bytes filter), and < or > with i2 i4 i8 u2 u4 u8 f2 f4 f8 c8 c16 U<n> M8[<unit>] m8[<unit>], or (as tensorstore writes them) bfloat16, float8_*, int4, int2, float4_e2m1fn"
                .to_string(),
        }
        };
        // tensorstore's zarr v2 driver writes the ml_dtypes name (`bfloat16`, `float8_e4m3fn`, `int4`)
        // with no byte order: its elements are little-endian.
        if let Some(ml) = ml_types().find(|d| d.v3_name() == typestr) {
            return Ok((ml, Endian::Little));
        }
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
            s if s.starts_with('U') => match s[1..].parse::<u32>() {
                Ok(n) if n > 0 && n <= u32::MAX / 4 => DataType::FixedLengthUtf32(n),
                _ => return Err(unsupported()),
            },
            // An object array: strings here; its object codec (the first v2 filter) decides.
            "O" if order == '|' => DataType::String,
            s if s.starts_with("M8") || s.starts_with("m8") => {
                let (unit, scale) = parse_time_unit(&s[2..]).ok_or_else(unsupported)?;
                if s.starts_with('M') {
                    DataType::DateTime64(unit, scale)
                } else {
                    DataType::TimeDelta64(unit, scale)
                }
            }
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
            // numpy has no code for these: tensorstore's zarr v2 driver writes the ml_dtypes name.
            DataType::BFloat16
            | DataType::Int4
            | DataType::UInt4
            | DataType::Int2
            | DataType::UInt2
            | DataType::SmallFloat(_)
            | DataType::ComplexBFloat16
            | DataType::ComplexFloat16
            | DataType::ComplexSmallFloat(_) => return self.v3_name().into(),
            DataType::NullTerminatedBytes(n) => return format!("|S{n}"),
            // numpy's opaque record of that size, as zarrs names raw bits in v2.
            DataType::RawBits(n) => return format!("|V{n}"),
            DataType::FixedLengthUtf32(n) => return format!("<U{n}"),
            DataType::String | DataType::Bytes => return "|O".into(),
            // numpy's opaque record of that size (a v2 structured type is a list, not a string).
            DataType::Struct(t) => return format!("|V{}", t.size()),
            DataType::DateTime64(unit, scale) => return format!("<M8{}", time_suffix(unit, scale)),
            DataType::TimeDelta64(unit, scale) => {
                return format!("<m8{}", time_suffix(unit, scale))
            }
        };
        format!("<{code}")
    }
}

/// `r<N>` with N a positive multiple of 8 (`r8`, `r16`, ...).
fn raw_bits(name: &str) -> Option<DataType> {
    let bits = name.strip_prefix('r')?;
    if !bits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let bits: u32 = bits.parse().ok()?;
    (bits > 0 && bits.is_multiple_of(8)).then_some(DataType::RawBits(bits / 8))
}

/// The name `r<N>` of raw bits of `bytes` bytes, made once per size (names are `'static`).
fn raw_bits_name(bytes: u32) -> &'static str {
    use std::collections::BTreeMap;
    use std::sync::{Mutex, OnceLock};
    static NAMES: OnceLock<Mutex<BTreeMap<u32, &'static str>>> = OnceLock::new();
    let names = NAMES.get_or_init(Default::default);
    // A poisoned lock still holds whole names: nothing is half-inserted.
    let mut names = names
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    names
        .entry(bytes)
        .or_insert_with(|| Box::leak(format!("r{}", u64::from(bytes) * 8).into_boxed_str()))
}

impl std::fmt::Display for DataType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DataType::NullTerminatedBytes(n) => write!(f, "null_terminated_bytes({n})"),
            DataType::FixedLengthUtf32(n) => write!(f, "fixed_length_utf32({n} characters)"),
            DataType::DateTime64(unit, scale) | DataType::TimeDelta64(unit, scale) => {
                write!(f, "{}{}", self.v3_name(), time_suffix(*unit, *scale))
            }
            DataType::Struct(t) => {
                f.write_str("struct{")?;
                for (i, field) in t.fields().iter().enumerate() {
                    let sep = if i == 0 { "" } else { ", " };
                    write!(f, "{sep}{}: {}", field.name, field.data_type)?;
                }
                f.write_str("}")
            }
            other => f.write_str(other.v3_name()),
        }
    }
}

/// Appends `text` as numpy stores it in `U<n>`: UTF-32 little-endian code units, cut at `n`
/// characters and NUL-padded to `n`.
pub fn utf32_encode(text: &str, n: usize, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend(
        text.chars()
            .take(n)
            .flat_map(|c| u32::from(c).to_le_bytes()),
    );
    out.resize(start + n * 4, 0);
}

/// A numpy `U<n>` element as a string: trailing NULs dropped, as numpy does (invalid code points
/// become U+FFFD).
pub fn utf32_decode(units: &[u8]) -> String {
    let units: Vec<u32> = units
        .chunks_exact(4)
        .map(|u| u32::from_le_bytes([u[0], u[1], u[2], u[3]]))
        .collect();
    let end = units.iter().rposition(|&u| u != 0).map_or(0, |i| i + 1);
    units[..end]
        .iter()
        .map(|&u| char::from_u32(u).unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect()
}

/// numpy's `[<scale><unit>]` suffix; empty for the generic unit.
fn time_suffix(unit: TimeUnit, scale: u32) -> String {
    match (unit, scale) {
        (TimeUnit::Generic, _) => String::new(),
        (unit, 1) => format!("[{}]", unit.as_str()),
        (unit, scale) => format!("[{scale}{}]", unit.as_str()),
    }
}

/// Parses numpy's `[<scale><unit>]` suffix (empty = generic).
fn parse_time_unit(suffix: &str) -> Option<(TimeUnit, u32)> {
    if suffix.is_empty() {
        return Some((TimeUnit::Generic, 1));
    }
    let inner = suffix.strip_prefix('[')?.strip_suffix(']')?;
    let digits = inner.len() - inner.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let scale = if digits == 0 {
        1
    } else {
        inner[..digits].parse::<u32>().ok().filter(|&n| n > 0)?
    };
    let unit = TimeUnit::parse(&inner[digits..]).filter(|u| *u != TimeUnit::Generic)?;
    Some((unit, scale))
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
        assert_eq!(
            DataType::from_v2_typestr("<M8[ns]").ok(),
            Some((
                DataType::DateTime64(TimeUnit::Nanoseconds, 1),
                Endian::Little
            ))
        );
        assert_eq!(
            DataType::from_v2_typestr(">m8[10ms]").ok(),
            Some((
                DataType::TimeDelta64(TimeUnit::Milliseconds, 10),
                Endian::Big
            ))
        );
        assert!(DataType::from_v2_typestr("<M8[0s]").is_err());
        assert!(DataType::from_v2_typestr("<M8[fortnight]").is_err());
        assert_eq!(
            DataType::from_v2_typestr(">U5").ok(),
            Some((DataType::FixedLengthUtf32(5), Endian::Big))
        );
        assert_eq!(DataType::FixedLengthUtf32(5).size(), 20);
        assert_eq!(DataType::FixedLengthUtf32(5).swap_unit(), 4);
        for d in [
            DataType::FixedLengthUtf32(3),
            DataType::DateTime64(TimeUnit::Seconds, 1),
            DataType::DateTime64(TimeUnit::Generic, 1),
            DataType::TimeDelta64(TimeUnit::Microseconds, 25),
        ] {
            assert_eq!(DataType::from_v3_json(&d.to_v3_json()).ok(), Some(d));
            assert_eq!(
                DataType::from_v2_typestr(&d.v2_typestr()).ok().map(|x| x.0),
                Some(d)
            );
        }
        let dt = serde_json::json!({"name": "numpy.datetime64", "configuration": {"unit": "s", "scale_factor": 1}});
        assert_eq!(
            DataType::from_v3_json(&dt).ok(),
            Some(DataType::DateTime64(TimeUnit::Seconds, 1))
        );
        let bad =
            serde_json::json!({"name": "fixed_length_utf32", "configuration": {"length_bytes": 6}});
        assert!(DataType::from_v3_json(&bad).is_err());
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
            if d == DataType::Bytes {
                // `|O` is strings unless its object codec says otherwise (zshard_zarr::v2).
                continue;
            }
            assert_eq!(
                DataType::from_v2_typestr(&d.v2_typestr()).ok().map(|x| x.0),
                Some(d)
            );
        }
    }

    /// Every ML data type of the zarr-extensions registry that tensorstore writes, with its element size
    /// and the unit the `bytes` codec swaps (2-byte types swap, 1-byte ones do not).
    #[test]
    fn ml_types_parse_with_sizes() {
        for (name, size, swap) in [
            ("bfloat16", 2, 2),
            ("float8_e3m4", 1, 1),
            ("float8_e4m3", 1, 1),
            ("float8_e4m3fn", 1, 1),
            ("float8_e4m3fnuz", 1, 1),
            ("float8_e4m3b11fnuz", 1, 1),
            ("float8_e5m2", 1, 1),
            ("float8_e5m2fnuz", 1, 1),
            ("float8_e8m0fnu", 1, 1),
            ("complex_bfloat16", 4, 2),
            ("complex_float16", 4, 2),
            ("complex_float8_e4m3fn", 2, 1),
            ("complex_float8_e8m0fnu", 2, 1),
            ("int4", 1, 1),
            ("uint4", 1, 1),
            ("int2", 1, 1),
            ("uint2", 1, 1),
            ("float4_e2m1fn", 1, 1),
            ("float6_e3m2fn", 1, 1),
        ] {
            let d = DataType::from_v3_name(name).expect("registered data type");
            assert_eq!((d.v3_name(), d.size(), d.swap_unit()), (name, size, swap));
            assert_eq!(DataType::from_v3_json(&d.to_v3_json()).ok(), Some(d));
        }
        // tensorstore's zarr v2 driver spells them with the ml_dtypes name, in little-endian order.
        for name in [
            "bfloat16",
            "float8_e4m3fn",
            "float8_e8m0fnu",
            "int4",
            "int2",
            "float4_e2m1fn",
        ] {
            let d = DataType::from_v3_name(name).expect("registered data type");
            assert_eq!(
                DataType::from_v2_typestr(name).ok(),
                Some((d, Endian::Little))
            );
            assert_eq!(d.v2_typestr(), name);
        }
        assert!(DataType::from_v2_typestr("<bfloat16").is_err());
        // The registry's aliases of the core complex types.
        assert_eq!(
            DataType::from_v3_name("complex_float32").ok(),
            Some(DataType::Complex64)
        );
        assert_eq!(
            DataType::from_v3_name("complex_float64").ok(),
            Some(DataType::Complex128)
        );
        let mut b = vec![1, 2, 3, 4];
        DataType::from_v3_name("complex_bfloat16")
            .expect("registered")
            .swap_bytes(&mut b);
        assert_eq!(b, vec![2, 1, 4, 3]);
    }

    #[test]
    fn swap_complex_halves() {
        let mut b = vec![1, 2, 3, 4, 5, 6, 7, 8];
        swap_byte_order(&mut b, DataType::Complex64.swap_unit());
        assert_eq!(b, vec![4, 3, 2, 1, 8, 7, 6, 5]);
    }

    #[test]
    fn raw_bits_are_read_by_their_size_in_bits() {
        for (name, bytes) in [("r8", 1), ("r16", 2), ("r24", 3), ("r1024", 128)] {
            let d = DataType::from_v3_name(name).expect(name);
            assert_eq!(d, DataType::RawBits(bytes), "{name}");
            assert_eq!(
                (d.size(), d.swap_unit(), d.v3_name()),
                (bytes as usize, 1, name)
            );
            assert_eq!(d.to_v3_json(), serde_json::json!(name));
        }
        for bad in ["r12", "r0", "r", "r-8", "r+8"] {
            let e = DataType::from_v3_name(bad).expect_err(bad).to_string();
            assert!(
                bad.len() == 1
                    || !bad[1..].bytes().all(|b| b.is_ascii_digit())
                    || e.contains("multiple of 8"),
                "{bad}: {e}"
            );
        }
        let e = DataType::from_v3_name("rational")
            .expect_err("unknown")
            .to_string();
        assert!(!e.contains("multiple of 8"), "{e}");
    }
}
