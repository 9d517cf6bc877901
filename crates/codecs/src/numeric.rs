//! Element arithmetic with numpy's semantics, for the numcodecs filters that convert or compute on
//! elements (`delta`, `fixedscaleoffset`, `quantize`, `astype`).
//!
//! numcodecs filters name their element types with numpy type strings (`"<i4"`, `"|u1"`, `">f8"`) and
//! compute with numpy; reading their output bit for bit means repeating numpy's casts (integers wrap,
//! floats truncate toward zero into integers, floats round to nearest even into narrower floats) and
//! its arithmetic in the type numpy picks for each operation.

use zshard_core::{CodecSpec, DataType, Endian};

use crate::config::string;
use crate::error::{invalid, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Bool,
    Int,
    UInt,
    Float,
}

/// A numeric type without byte order: what arithmetic happens in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NumType {
    pub kind: Kind,
    /// Bytes per element: 1 for bool, 1/2/4/8 for integers, 2/4/8 for floats.
    pub size: usize,
}

/// One value, exact for every type here: integers of up to 64 bits fit `i128`, and every float16,
/// float32 and float64 value is an `f64`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Num {
    I(i128),
    F(f64),
}

pub(crate) const FLOAT64: NumType = NumType {
    kind: Kind::Float,
    size: 8,
};

impl NumType {
    pub(crate) fn is_float(self) -> bool {
        self.kind == Kind::Float
    }

    /// The type numpy's `result_type` gives for two types (only the cases of bool, integers and floats).
    pub(crate) fn promote(a: NumType, b: NumType) -> NumType {
        use Kind::*;
        // Smallest float that holds every value of an integer type, as numpy chooses it.
        let float_for = |size: usize| match size {
            1 => 2,
            2 => 4,
            _ => 8,
        };
        let t = |kind, size| NumType { kind, size };
        match (a.kind, b.kind) {
            _ if a == b => a,
            (Bool, _) => b,
            (_, Bool) => a,
            (Int, Int) | (UInt, UInt) | (Float, Float) => t(a.kind, a.size.max(b.size)),
            (Int, UInt) | (UInt, Int) => {
                let (i, u) = if a.kind == Int { (a, b) } else { (b, a) };
                if u.size < i.size {
                    i
                } else if u.size < 8 {
                    t(Int, u.size * 2)
                } else {
                    FLOAT64
                }
            }
            (Float, _) => t(Float, a.size.max(float_for(b.size))),
            (_, Float) => t(Float, b.size.max(float_for(a.size))),
        }
    }

    /// Casts a value into this type as numpy's `astype` does. Integers wrap; floats truncate toward
    /// zero into integers (numpy leaves out-of-range and NaN casts undefined; here they saturate to
    /// the 128-bit range and then wrap).
    pub(crate) fn cast(self, v: Num) -> Num {
        match self.kind {
            Kind::Bool => Num::I(match v {
                Num::I(i) => (i != 0) as i128,
                Num::F(f) => (f != 0.0) as i128,
            }),
            Kind::Int | Kind::UInt => {
                let i = match v {
                    Num::I(i) => i,
                    // `as` saturates and maps NaN to 0: defined, where C leaves it undefined.
                    Num::F(f) => f.trunc() as i128,
                };
                Num::I(self.wrap(i))
            }
            Kind::Float => Num::F(match v {
                Num::I(i) => match self.size {
                    // Integer to float rounds once, straight into the target width.
                    2 => f16_to_f64(f64_to_f16((i as f32) as f64)),
                    4 => (i as f32) as f64,
                    _ => i as f64,
                },
                Num::F(f) => self.round(f),
            }),
        }
    }

    /// Wraps an integer into this integer type's range (two's complement).
    fn wrap(self, i: i128) -> i128 {
        let bits = 8 * self.size as u32;
        let low = (i as u128) & ((1u128 << bits) - 1);
        if self.kind == Kind::Int && low >> (bits - 1) == 1 {
            low as i128 - (1i128 << bits)
        } else {
            low as i128
        }
    }

    /// Rounds an exact result to this float type. Computing in f64 and rounding once gives the
    /// correctly rounded float32 and float16 result for `+ - * /`, which is what numpy computes (it
    /// does float16 arithmetic in float32 and rounds, also correctly rounded for these operations).
    fn round(self, f: f64) -> f64 {
        match self.size {
            2 => f16_to_f64(f64_to_f16(f)),
            4 => (f as f32) as f64,
            _ => f,
        }
    }

    fn float(v: Num) -> f64 {
        match v {
            Num::I(i) => i as f64,
            Num::F(f) => f,
        }
    }

    fn int(v: Num) -> i128 {
        match v {
            Num::I(i) => i,
            Num::F(f) => f.trunc() as i128,
        }
    }

    /// `a + b` in this type (both already values of it).
    pub(crate) fn add(self, a: Num, b: Num) -> Num {
        self.binary(a, b, |x, y| x + y, i128::wrapping_add)
    }

    /// `a - b` in this type.
    pub(crate) fn sub(self, a: Num, b: Num) -> Num {
        self.binary(a, b, |x, y| x - y, i128::wrapping_sub)
    }

    /// `a * b` in this type.
    pub(crate) fn mul(self, a: Num, b: Num) -> Num {
        self.binary(a, b, |x, y| x * y, i128::wrapping_mul)
    }

    /// `a / b` in this float type.
    pub(crate) fn div(self, a: Num, b: Num) -> Num {
        Num::F(self.round(Self::float(a) / Self::float(b)))
    }

    fn binary(
        self,
        a: Num,
        b: Num,
        float: impl Fn(f64, f64) -> f64,
        int: impl Fn(i128, i128) -> i128,
    ) -> Num {
        match self.kind {
            Kind::Float => Num::F(self.round(float(Self::float(a), Self::float(b)))),
            _ => Num::I(self.wrap(int(Self::int(a), Self::int(b)))),
        }
    }

    /// `np.around` (round half to even) in this type; integers are unchanged.
    pub(crate) fn around(self, v: Num) -> Num {
        match (self.kind, v) {
            (Kind::Float, Num::F(f)) => Num::F(self.round(f.round_ties_even())),
            _ => v,
        }
    }
}

/// A numpy element type with byte order, as numcodecs filter configurations give it (`"<i4"`).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ElemType {
    pub ty: NumType,
    endian: Endian,
    typestr: String,
}

impl ElemType {
    /// Parses a numpy type string for codec `codec`, configuration key `key`.
    pub(crate) fn parse(codec: &str, key: &str, typestr: &str) -> Result<Self> {
        let unsupported = || {
            invalid(
                codec,
                format!(
                    "{key} {typestr:?} is not a supported numeric type (bool, integers, floats)"
                ),
            )
        };
        let (data_type, endian) = DataType::from_v2_typestr(typestr).map_err(|_| unsupported())?;
        let kind = match data_type {
            DataType::Bool => Kind::Bool,
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => Kind::Int,
            DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => Kind::UInt,
            DataType::Float16 | DataType::Float32 | DataType::Float64 => Kind::Float,
            _ => return Err(unsupported()),
        };
        Ok(ElemType {
            ty: NumType {
                kind,
                size: data_type.size(),
            },
            endian,
            typestr: typestr.to_string(),
        })
    }

    pub(crate) fn size(&self) -> usize {
        self.ty.size
    }

    pub(crate) fn typestr(&self) -> &str {
        &self.typestr
    }

    /// Reads one element from exactly `size()` bytes.
    pub(crate) fn read(&self, bytes: &[u8]) -> Num {
        let mut le = [0u8; 8];
        le[..bytes.len()].copy_from_slice(bytes);
        if self.endian == Endian::Big {
            le[..bytes.len()].reverse();
        }
        let raw = u64::from_le_bytes(le);
        match (self.ty.kind, self.ty.size) {
            (Kind::Float, 2) => Num::F(f16_to_f64(raw as u16)),
            (Kind::Float, 4) => Num::F(f32::from_bits(raw as u32) as f64),
            (Kind::Float, _) => Num::F(f64::from_bits(raw)),
            (Kind::Int, size) => {
                // Sign-extend from the element's width.
                let shift = 64 - 8 * size as u32;
                Num::I((((raw << shift) as i64) >> shift) as i128)
            }
            // numpy's bool is a byte that is true when non-zero.
            (Kind::Bool, _) => Num::I((raw != 0) as i128),
            (Kind::UInt, _) => Num::I(raw as i128),
        }
    }

    /// Writes a value of this type into exactly `size()` bytes.
    pub(crate) fn write(&self, v: Num, out: &mut [u8]) {
        let raw: u64 = match (self.ty.kind, self.ty.size, v) {
            (Kind::Float, 2, v) => f64_to_f16(NumType::float(v)) as u64,
            (Kind::Float, 4, v) => (NumType::float(v) as f32).to_bits() as u64,
            (Kind::Float, _, v) => NumType::float(v).to_bits(),
            (_, _, v) => NumType::int(v) as u64,
        };
        let le = raw.to_le_bytes();
        out.copy_from_slice(&le[..out.len()]);
        if self.endian == Endian::Big {
            out.reverse();
        }
    }
}

/// Converts between two element buffers, applying `f` to each value; `input` must hold whole
/// elements of `from` (the caller checks).
pub(crate) fn map_elements(
    input: &[u8],
    from: &ElemType,
    to: &ElemType,
    mut f: impl FnMut(Num) -> Num,
) -> Vec<u8> {
    let count = input.len() / from.size();
    let mut out = vec![0u8; count * to.size()];
    for (src, dst) in input
        .chunks_exact(from.size())
        .zip(out.chunks_exact_mut(to.size()))
    {
        to.write(f(from.read(src)), dst);
    }
    out
}

/// Reads the `dtype` and optional `astype` pair that several numcodecs filters share.
pub(crate) fn dtype_pair(spec: &CodecSpec) -> crate::Result<(ElemType, ElemType)> {
    let dtype = string(spec, "dtype").ok_or_else(|| invalid(&spec.name, "missing dtype"))?;
    let dtype = ElemType::parse(&spec.name, "dtype", dtype)?;
    let astype = match spec.get("astype") {
        None | Some(serde_json::Value::Null) => dtype.clone(),
        Some(v) => {
            let s = v
                .as_str()
                .ok_or_else(|| invalid(&spec.name, format!("astype must be a string, got {v}")))?;
            ElemType::parse(&spec.name, "astype", s)?
        }
    };
    Ok((dtype, astype))
}

/// Converts a byte count of whole `from` elements into the byte count of as many `to` elements.
pub(crate) fn convert_len(
    codec: &str,
    len: usize,
    from: &ElemType,
    to: &ElemType,
) -> zshard_core::Result<usize> {
    if !len.is_multiple_of(from.size()) {
        return Err(zshard_core::Error::codec(
            codec,
            format!("{len} bytes are not whole {} elements", from.typestr()),
        ));
    }
    (len / from.size())
        .checked_mul(to.size())
        .ok_or_else(|| zshard_core::Error::codec(codec, format!("{len} bytes are too many")))
}

/// Checks that converting `input` gives at most `max` bytes, before anything is allocated.
pub(crate) fn check_converted_len(
    codec: &str,
    input: &[u8],
    from: &ElemType,
    to: &ElemType,
    max: usize,
) -> zshard_core::Result<()> {
    let out = convert_len(codec, input.len(), from, to)?;
    if out > max {
        return Err(zshard_core::Error::codec(
            codec,
            format!("decodes to {out} bytes, more than the expected {max}"),
        ));
    }
    Ok(())
}

/// The bits of the float16 nearest to `x` (ties to even), as numpy's `npy_double_to_half`.
pub(crate) fn f64_to_f16(x: f64) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 48) & 0x8000) as u16;
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let man = bits & 0x000f_ffff_ffff_ffff;
    if exp == 0x7ff {
        if man == 0 {
            return sign | 0x7c00;
        }
        // NaN keeps the top of its payload, and stays a NaN if those bits are zero.
        let payload = ((man >> 42) as u16).max(1);
        return sign | 0x7c00 | payload;
    }
    // Exponent with float16's bias; 1..=30 is the normal range.
    let e = exp - 1023 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if exp == 0 {
        // f64 subnormals are far below the smallest float16.
        return sign;
    }
    let sig = man | (1u64 << 52);
    let shift = if e >= 1 { 42 } else { (43 - e) as u32 };
    if shift >= 54 {
        return sign;
    }
    let mut q = sig >> shift;
    let rem = sig & ((1u64 << shift) - 1);
    let halfway = 1u64 << (shift - 1);
    if rem > halfway || (rem == halfway && q & 1 == 1) {
        q += 1;
    }
    if e >= 1 {
        let (mut m, mut e) = (q, e as u64);
        if m >= 1 << 11 {
            m >>= 1;
            e += 1;
        }
        if e >= 0x1f {
            return sign | 0x7c00;
        }
        sign | ((e as u16) << 10) | (m as u16 & 0x3ff)
    } else {
        // Subnormal; a carry into bit 10 yields the smallest normal, which is the right encoding.
        sign | q as u16
    }
}

/// The value of float16 bits, exactly.
pub(crate) fn f16_to_f64(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = (h >> 10) & 0x1f;
    let man = (h & 0x3ff) as u64;
    match exp {
        0 => sign * man as f64 * 2f64.powi(-24),
        0x1f if man == 0 => sign * f64::INFINITY,
        0x1f => {
            // Keep the payload, as numpy does.
            let bits = ((h as u64 & 0x8000) << 48) | (0x7ffu64 << 52) | (man << 42);
            f64::from_bits(bits)
        }
        _ => sign * (1.0 + man as f64 / 1024.0) * 2f64.powi(exp as i32 - 15),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(kind: Kind, size: usize) -> NumType {
        NumType { kind, size }
    }

    #[test]
    fn promotion_matches_numpy() {
        use Kind::*;
        assert_eq!(NumType::promote(t(UInt, 1), t(Int, 1)), t(Int, 2));
        assert_eq!(NumType::promote(t(UInt, 2), t(Int, 4)), t(Int, 4));
        assert_eq!(NumType::promote(t(UInt, 8), t(Int, 8)), FLOAT64);
        assert_eq!(NumType::promote(t(Int, 2), t(Float, 2)), t(Float, 4));
        assert_eq!(NumType::promote(t(UInt, 1), t(Float, 2)), t(Float, 2));
        assert_eq!(NumType::promote(t(Int, 4), t(Float, 4)), FLOAT64);
        assert_eq!(NumType::promote(t(Bool, 1), t(Int, 2)), t(Int, 2));
    }

    #[test]
    fn casts_wrap_and_truncate() {
        use Kind::*;
        assert_eq!(t(Int, 1).cast(Num::I(-300)), Num::I(-44));
        assert_eq!(t(UInt, 1).cast(Num::I(-1)), Num::I(255));
        assert_eq!(t(Int, 4).cast(Num::F(-1.7)), Num::I(-1));
        assert_eq!(t(Bool, 1).cast(Num::F(f64::NAN)), Num::I(1));
        assert_eq!(t(Float, 4).cast(Num::F(0.1)), Num::F(0.1f32 as f64));
    }

    #[test]
    fn float16_round_trips_and_rounds_to_even() {
        for h in 0..=u16::MAX {
            let f = f16_to_f64(h);
            if f.is_nan() {
                assert!(f16_to_f64(f64_to_f16(f)).is_nan());
            } else {
                assert_eq!(f64_to_f16(f), h, "{h:#06x}");
            }
        }
        // 2049 lies halfway between 2048 and 2050: to even (2048); 2051 goes up to 2052.
        assert_eq!(f16_to_f64(f64_to_f16(2049.0)), 2048.0);
        assert_eq!(f16_to_f64(f64_to_f16(2051.0)), 2052.0);
        // Just above halfway rounds up even when only low bits say so.
        assert_eq!(f16_to_f64(f64_to_f16(2049.0 + 1e-9)), 2050.0);
        assert_eq!(f16_to_f64(f64_to_f16(65520.0)), f64::INFINITY);
        assert_eq!(f16_to_f64(f64_to_f16(65519.0)), 65504.0);
        assert_eq!(f16_to_f64(f64_to_f16(2f64.powi(-25))), 0.0);
        assert_eq!(f16_to_f64(f64_to_f16(2f64.powi(-25) * 1.5)), 2f64.powi(-24));
    }
}

/// The numeric data types of a v3 array, for the codecs that work per element type (`pcodec`,
/// `cast_value`; the `cast_value` spec also lists narrow floats and 2- and 4-bit integers, which
/// zshard does not have).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NumDt {
    I8,
    I16,
    I32,
    I64,
    U8,
    U16,
    U32,
    U64,
    F16,
    F32,
    F64,
}

impl NumDt {
    pub(crate) fn of(data_type: DataType) -> Option<Self> {
        Some(match data_type {
            DataType::Int8 => NumDt::I8,
            DataType::Int16 => NumDt::I16,
            DataType::Int32 => NumDt::I32,
            DataType::Int64 => NumDt::I64,
            DataType::UInt8 => NumDt::U8,
            DataType::UInt16 => NumDt::U16,
            DataType::UInt32 => NumDt::U32,
            DataType::UInt64 => NumDt::U64,
            DataType::Float16 => NumDt::F16,
            DataType::Float32 => NumDt::F32,
            DataType::Float64 => NumDt::F64,
            _ => return None,
        })
    }

    pub(crate) fn is_int(self) -> bool {
        !matches!(self, NumDt::F16 | NumDt::F32 | NumDt::F64)
    }
}
