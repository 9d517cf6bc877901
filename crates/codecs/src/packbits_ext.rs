//! zarr-extensions `packbits`: the array→bytes codec that stores each element in as many bits as its
//! type has (how `int4`, `int2`, `float4_e2m1fn`, ... are stored compactly), or a range of them.
//!
//! The bit sequence holds the elements in C order, component after component (real, then imaginary),
//! each as `last_bit - first_bit + 1` bits; bit `i` of the sequence is bit `i % 8` of byte `i / 8`,
//! least significant first. Decoded, sub-byte types sit in the low bits of their byte (high bits zero,
//! as the `bytes` codec stores them) and signed integers are sign-extended to their width.
//!
//! Not to be confused with numcodecs' `packbits` (v3 `numcodecs.packbits`, booleans only, most
//! significant bit first), in [`crate::packbits`].

use std::sync::Arc;

use serde_json::{json, Map, Value};
use zshard_core::{ArrayToBytesCodec, ChunkRepr, CodecSpec, DataType, Error, Result};

use crate::error::invalid;
use crate::registry::Codec;

const NAME: &str = "packbits";

/// Where the count of padding bits is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Padding {
    None,
    FirstByte,
    LastByte,
}

impl Padding {
    fn as_str(self) -> &'static str {
        match self {
            Padding::None => "none",
            Padding::FirstByte => "first_byte",
            Padding::LastByte => "last_byte",
        }
    }

    fn extra_bytes(self) -> usize {
        usize::from(self != Padding::None)
    }
}

/// How a data type's elements split into components for packing (complex types: two, each packed
/// as its part type is).
#[derive(Clone, Copy, Debug)]
struct Layout {
    /// Bytes one component takes in memory.
    component_bytes: usize,
    /// `N`: the bits of a component (fewer than `8 * component_bytes` for sub-byte types).
    bits: u32,
    /// Whether decoding sign-extends (signed integers).
    signed: bool,
}

fn layout(data_type: DataType) -> Option<Layout> {
    let whole = |bytes: usize, signed| Layout {
        component_bytes: bytes,
        bits: (bytes * 8) as u32,
        signed,
    };
    let narrow = |bits: u32, signed| Layout {
        component_bytes: 1,
        bits,
        signed,
    };
    Some(match data_type {
        DataType::Bool => narrow(1, false),
        DataType::Int2 => narrow(2, true),
        DataType::UInt2 => narrow(2, false),
        DataType::Int4 => narrow(4, true),
        DataType::UInt4 => narrow(4, false),
        DataType::SmallFloat(t) => narrow(t.bits(), false),
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
            whole(data_type.size(), true)
        }
        DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64
        | DataType::Float16
        | DataType::BFloat16
        | DataType::Float32
        | DataType::Float64 => whole(data_type.size(), false),
        DataType::Complex64
        | DataType::Complex128
        | DataType::ComplexBFloat16
        | DataType::ComplexFloat16
        | DataType::ComplexSmallFloat(_) => layout(data_type.complex_component()?)?,
        _ => return None,
    })
}

#[derive(Debug)]
pub(crate) struct PackBitsExtCodec {
    padding: Padding,
    first_bit: u32,
    last_bit: u32,
    /// Whether the configuration named them (written back only then).
    explicit_bits: (bool, bool),
    layout: Layout,
}

fn bit_option(spec: &CodecSpec, key: &str) -> crate::Result<Option<u32>> {
    match spec.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| invalid(NAME, format!("{key} must be a bit index, got {v}"))),
    }
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let padding = match spec.get("padding_encoding") {
        None | Some(Value::Null) => Padding::None,
        Some(Value::String(s)) if s == "none" => Padding::None,
        Some(Value::String(s)) if s == "first_byte" => Padding::FirstByte,
        Some(Value::String(s)) if s == "last_byte" => Padding::LastByte,
        Some(other) => {
            return Err(invalid(
                NAME,
                format!(
                    "padding_encoding {other} is not \"none\", \"first_byte\" or \"last_byte\""
                ),
            ))
        }
    };
    let layout = layout(repr.data_type)
        .ok_or_else(|| invalid(NAME, format!("cannot pack {} elements", repr.data_type)))?;
    let first = bit_option(spec, "first_bit")?;
    let last = bit_option(spec, "last_bit")?;
    let first_bit = first.unwrap_or(0);
    let last_bit = last.unwrap_or(layout.bits - 1);
    if last_bit < first_bit || last_bit >= layout.bits {
        return Err(invalid(
            NAME,
            format!(
                "bits {first_bit}..={last_bit} are not a range within the {} bits of {}",
                layout.bits, repr.data_type
            ),
        ));
    }
    Ok(Codec::ArrayToBytes(Arc::new(PackBitsExtCodec {
        padding,
        first_bit,
        last_bit,
        explicit_bits: (first.is_some(), last.is_some()),
        layout,
    })))
}

impl PackBitsExtCodec {
    /// Bits each component keeps.
    fn kept(&self) -> u32 {
        self.last_bit - self.first_bit + 1
    }

    /// (components in the chunk, bytes of packed bits, padding bits in the last byte).
    fn sizes(&self, repr: &ChunkRepr) -> (usize, usize, u8) {
        let components = repr.byte_len() / self.layout.component_bytes;
        let bits = components.saturating_mul(self.kept() as usize);
        (components, bits.div_ceil(8), ((8 - bits % 8) % 8) as u8)
    }
}

impl ArrayToBytesCodec for PackBitsExtCodec {
    fn encode(&self, data: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        if data.len() != repr.byte_len() {
            return Err(Error::DecodedSize {
                expected: repr.byte_len(),
                actual: data.len(),
            });
        }
        let (_, packed_len, padding) = self.sizes(repr);
        let mut out = Vec::with_capacity(packed_len + self.padding.extra_bytes());
        if self.padding == Padding::FirstByte {
            out.push(padding);
        }
        let kept = self.kept();
        let mask = if kept == 64 {
            u64::MAX
        } else {
            (1u64 << kept) - 1
        };
        // Bits not yet written, least significant first; at most 7 + 64 of them.
        let mut acc: u128 = 0;
        let mut pending = 0u32;
        for component in data.chunks_exact(self.layout.component_bytes) {
            let mut le = [0u8; 8];
            le[..component.len()].copy_from_slice(component);
            let value = (u64::from_le_bytes(le) >> self.first_bit) & mask;
            acc |= u128::from(value) << pending;
            pending += kept;
            while pending >= 8 {
                out.push(acc as u8);
                acc >>= 8;
                pending -= 8;
            }
        }
        if pending > 0 {
            out.push(acc as u8);
        }
        if self.padding == Padding::LastByte {
            out.push(padding);
        }
        Ok(out)
    }

    fn decode(&self, encoded: Vec<u8>, repr: &ChunkRepr) -> Result<Vec<u8>> {
        let (components, packed_len, padding) = self.sizes(repr);
        // zarrs (0.23) leaves the padding byte out where the components are whole bytes kept whole
        // (it writes them as the `bytes` codec does); the size tells which was written.
        let whole_bytes = self.kept() == self.layout.bits && self.layout.bits.is_multiple_of(8);
        let padding_kind = match whole_bytes && encoded.len() == packed_len {
            true => Padding::None,
            false => self.padding,
        };
        let expected = packed_len + padding_kind.extra_bytes();
        if encoded.len() != expected {
            return Err(Error::codec(
                NAME,
                format!(
                    "{} bytes where {components} packed components take {expected}",
                    encoded.len()
                ),
            ));
        }
        let packed = match padding_kind {
            Padding::None => &encoded[..],
            Padding::FirstByte => &encoded[1..],
            Padding::LastByte => &encoded[..packed_len],
        };
        let stated = match padding_kind {
            Padding::None => padding,
            Padding::FirstByte => encoded[0],
            Padding::LastByte => encoded[packed_len],
        };
        if stated != padding {
            return Err(Error::codec(
                NAME,
                format!("the chunk says {stated} padding bits, its size says {padding}"),
            ));
        }
        let kept = self.kept();
        let mask = if kept == 64 {
            u64::MAX
        } else {
            (1u64 << kept) - 1
        };
        let width = self.layout.bits;
        let mut out = Vec::with_capacity(repr.byte_len());
        let mut bytes = packed.iter();
        let mut acc: u128 = 0;
        let mut available = 0u32;
        for _ in 0..components {
            while available < kept {
                // The size check above guarantees the bytes are there.
                let byte = bytes.next().copied().unwrap_or(0);
                acc |= u128::from(byte) << available;
                available += 8;
            }
            let bits = (acc as u64) & mask;
            acc >>= kept;
            available -= kept;
            let mut value = bits << self.first_bit;
            let top = self.last_bit;
            if self.layout.signed && bits >> (kept - 1) & 1 == 1 {
                // Sign-extend from the top kept bit up to the type's width (not beyond: an int4
                // stays in the low 4 bits of its byte).
                let above = if width == 64 {
                    u64::MAX << top
                } else {
                    ((1u64 << width) - 1) & (u64::MAX << top)
                };
                value |= above;
            }
            out.extend_from_slice(&value.to_le_bytes()[..self.layout.component_bytes]);
        }
        Ok(out)
    }

    fn max_encoded_len(&self, repr: &ChunkRepr) -> usize {
        self.sizes(repr).1 + self.padding.extra_bytes()
    }

    fn spec(&self) -> CodecSpec {
        let mut config = Map::new();
        config.insert("padding_encoding".into(), json!(self.padding.as_str()));
        if self.explicit_bits.0 {
            config.insert("first_bit".into(), json!(self.first_bit));
        }
        if self.explicit_bits.1 {
            config.insert("last_bit".into(), json!(self.last_bit));
        }
        CodecSpec::new(NAME, Value::Object(config))
    }
}
