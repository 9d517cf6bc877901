//! The 8-, 6- and 4-bit floating point types of the zarr-extensions registry (ml_dtypes' and
//! tensorstore's `float8_*`, `float6_*`, `float4_*`). zshard moves their elements byte for byte; the
//! only arithmetic it needs is for fill values, which this module converts to and from `f64`.

/// How a format spends its largest codes on special values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Special {
    /// IEEE 754 style: the largest exponent holds ±infinity (mantissa 0) and NaNs.
    Ieee,
    /// `fn`: no infinity; only all-ones exponent and mantissa (either sign) is NaN.
    Fn,
    /// `fnuz`: no infinity, no negative zero; the negative-zero code `0x80` is the only NaN.
    Fnuz,
    /// `fnu` (e8m0): unsigned, no zero, `0xff` is the only NaN, every other code `2^(e - bias)`.
    Fnu,
    /// Finite only (float6, float4): every code is a number.
    Finite,
}

/// A registered small floating point type. With the `bytes` codec each element takes one byte; the
/// 6- and 4-bit ones use its low bits (the registry says the high bits are ignored).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SmallFloat {
    /// `float8_e3m4`: bias 3, IEEE specials.
    E3M4,
    /// `float8_e4m3`: bias 7, IEEE specials.
    E4M3,
    /// `float8_e4m3fn`: bias 7, no infinity, NaN `S.1111.111` (tensorstore and ml_dtypes; not in the
    /// registry's list, which has `float8_e4m3`, but the type tensorstore writes most).
    E4M3FN,
    /// `float8_e4m3fnuz`: bias 8, NaN `0x80`.
    E4M3FNUZ,
    /// `float8_e4m3b11fnuz`: bias 11, NaN `0x80`.
    E4M3B11FNUZ,
    /// `float8_e5m2`: bias 15, IEEE specials.
    E5M2,
    /// `float8_e5m2fnuz`: bias 16, NaN `0x80`.
    E5M2FNUZ,
    /// `float8_e8m0fnu`: an unsigned power of two, bias 127, NaN `0xff`.
    E8M0FNU,
    /// `float6_e2m3fn`: bias 1, finite only.
    F6E2M3FN,
    /// `float6_e3m2fn`: bias 3, finite only.
    F6E3M2FN,
    /// `float4_e2m1fn`: bias 1, finite only.
    F4E2M1FN,
}

/// Every small float, for parsing names.
pub(crate) const SMALL_FLOATS: [SmallFloat; 11] = [
    SmallFloat::E3M4,
    SmallFloat::E4M3,
    SmallFloat::E4M3FN,
    SmallFloat::E4M3FNUZ,
    SmallFloat::E4M3B11FNUZ,
    SmallFloat::E5M2,
    SmallFloat::E5M2FNUZ,
    SmallFloat::E8M0FNU,
    SmallFloat::F6E2M3FN,
    SmallFloat::F6E3M2FN,
    SmallFloat::F4E2M1FN,
];

/// Why a fill value has no code in a small float type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unrepresentable {
    /// The type has no NaN.
    NoNan,
    /// The type has no infinity.
    NoInfinity,
    /// The type is unsigned (e8m0) and the value is negative.
    Negative,
    /// The value is beyond the largest finite value of a type without infinity.
    OutOfRange,
}

impl SmallFloat {
    /// The registry's name (`float8_e4m3fn`, ...).
    pub fn name(self) -> &'static str {
        match self {
            SmallFloat::E3M4 => "float8_e3m4",
            SmallFloat::E4M3 => "float8_e4m3",
            SmallFloat::E4M3FN => "float8_e4m3fn",
            SmallFloat::E4M3FNUZ => "float8_e4m3fnuz",
            SmallFloat::E4M3B11FNUZ => "float8_e4m3b11fnuz",
            SmallFloat::E5M2 => "float8_e5m2",
            SmallFloat::E5M2FNUZ => "float8_e5m2fnuz",
            SmallFloat::E8M0FNU => "float8_e8m0fnu",
            SmallFloat::F6E2M3FN => "float6_e2m3fn",
            SmallFloat::F6E3M2FN => "float6_e3m2fn",
            SmallFloat::F4E2M1FN => "float4_e2m1fn",
        }
    }

    /// The registry's name of the complex type made of two of these (`complex_float8_e4m3fn`, ...).
    pub fn complex_name(self) -> &'static str {
        match self {
            SmallFloat::E3M4 => "complex_float8_e3m4",
            SmallFloat::E4M3 => "complex_float8_e4m3",
            SmallFloat::E4M3FN => "complex_float8_e4m3fn",
            SmallFloat::E4M3FNUZ => "complex_float8_e4m3fnuz",
            SmallFloat::E4M3B11FNUZ => "complex_float8_e4m3b11fnuz",
            SmallFloat::E5M2 => "complex_float8_e5m2",
            SmallFloat::E5M2FNUZ => "complex_float8_e5m2fnuz",
            SmallFloat::E8M0FNU => "complex_float8_e8m0fnu",
            SmallFloat::F6E2M3FN => "complex_float6_e2m3fn",
            SmallFloat::F6E3M2FN => "complex_float6_e3m2fn",
            SmallFloat::F4E2M1FN => "complex_float4_e2m1fn",
        }
    }

    /// (exponent bits, mantissa bits, exponent bias, specials).
    fn format(self) -> (u32, u32, i32, Special) {
        match self {
            SmallFloat::E3M4 => (3, 4, 3, Special::Ieee),
            SmallFloat::E4M3 => (4, 3, 7, Special::Ieee),
            SmallFloat::E4M3FN => (4, 3, 7, Special::Fn),
            SmallFloat::E4M3FNUZ => (4, 3, 8, Special::Fnuz),
            SmallFloat::E4M3B11FNUZ => (4, 3, 11, Special::Fnuz),
            SmallFloat::E5M2 => (5, 2, 15, Special::Ieee),
            SmallFloat::E5M2FNUZ => (5, 2, 16, Special::Fnuz),
            SmallFloat::E8M0FNU => (8, 0, 127, Special::Fnu),
            SmallFloat::F6E2M3FN => (2, 3, 1, Special::Finite),
            SmallFloat::F6E3M2FN => (3, 2, 3, Special::Finite),
            SmallFloat::F4E2M1FN => (2, 1, 1, Special::Finite),
        }
    }

    /// Bits of one value (8, 6 or 4); with the `bytes` codec the rest of its byte is ignored.
    pub fn bits(self) -> u32 {
        let (e, m, _, special) = self.format();
        let sign = u32::from(special != Special::Fnu);
        sign + e + m
    }

    /// The sign bit's mask (0 for the unsigned e8m0).
    fn sign_bit(self) -> u8 {
        let (e, m, _, special) = self.format();
        if special == Special::Fnu {
            0
        } else {
            1 << (e + m)
        }
    }

    /// The code of the registry's `"NaN"`; `None` for types without NaN.
    pub(crate) fn nan(self) -> Option<u8> {
        match self.format().3 {
            // The registry's constants: 0x78 (e3m4), 0x7c (e4m3), 0x7e (e5m2): quiet, positive.
            Special::Ieee => {
                let (e, m, _, _) = self.format();
                Some((((1u16 << e) - 1) << m | 1 << (m - 1)) as u8)
            }
            // ml_dtypes' (and tensorstore's) NaN: every bit but the sign set.
            Special::Fn => Some(self.sign_bit() - 1),
            Special::Fnuz => Some(0x80),
            Special::Fnu => Some(0xff),
            Special::Finite => None,
        }
    }

    /// The value of a code (its low [`Self::bits`] bits); NaN for the NaN codes.
    pub(crate) fn to_f64(self, code: u8) -> f64 {
        let (e_bits, m_bits, bias, special) = self.format();
        let code = u32::from(code) & ((1 << self.bits()) - 1);
        let sign_bit = u32::from(self.sign_bit());
        let magnitude = code & !sign_bit;
        let negative = sign_bit != 0 && code & sign_bit != 0;
        let exponent = magnitude >> m_bits;
        let mantissa = magnitude & ((1 << m_bits) - 1);
        let max_exponent = (1 << e_bits) - 1;
        let nan = match special {
            Special::Ieee if exponent == max_exponent => {
                if mantissa == 0 {
                    return if negative {
                        f64::NEG_INFINITY
                    } else {
                        f64::INFINITY
                    };
                }
                true
            }
            Special::Fn => magnitude == (1 << (e_bits + m_bits)) - 1,
            Special::Fnuz => code == sign_bit,
            Special::Fnu => code == 0xff,
            _ => false,
        };
        if nan {
            return f64::NAN;
        }
        let (significand, scale) = if exponent == 0 && special != Special::Fnu {
            (f64::from(mantissa), 1 - bias - m_bits as i32)
        } else {
            (
                f64::from((1 << m_bits) | mantissa),
                exponent as i32 - bias - m_bits as i32,
            )
        };
        let value = significand * 2f64.powi(scale);
        if negative {
            -value
        } else {
            value
        }
    }

    /// The code of `value`, rounded to nearest with ties to even as ml_dtypes casts. Values too large
    /// for a type without infinity are refused, not made NaN as a cast would: a fill value is written
    /// by hand, and silently becoming NaN is not what its writer meant.
    pub(crate) fn encode(self, value: f64) -> Result<u8, Unrepresentable> {
        let special = self.format().3;
        let sign_bit = self.sign_bit();
        if value.is_nan() {
            return self.nan().ok_or(Unrepresentable::NoNan);
        }
        if value.is_infinite() {
            if special != Special::Ieee {
                return Err(Unrepresentable::NoInfinity);
            }
            let inf = self.inf_code();
            return Ok(if value < 0.0 { inf | sign_bit } else { inf });
        }
        if sign_bit == 0 && value < 0.0 {
            return Err(Unrepresentable::Negative);
        }
        let negative = value.is_sign_negative();
        let magnitude = value.abs();
        // The finite non-negative codes in increasing order of value (codes of one sign are monotonic).
        let end = if sign_bit == 0 {
            0x100
        } else {
            u16::from(sign_bit)
        };
        let codes = (0..end)
            .map(|c| c as u8)
            .filter(|&c| self.to_f64(c).is_finite());
        let mut best: Option<(u8, f64)> = None;
        for c in codes {
            let v = self.to_f64(c);
            let d = (v - magnitude).abs();
            let better = match best {
                None => true,
                Some((b, bd)) => d < bd || (d == bd && c & 1 == 0 && b & 1 == 1),
            };
            if better {
                best = Some((c, d));
            }
        }
        let (code, _) = best.ok_or(Unrepresentable::OutOfRange)?;
        // From half an ulp above the largest value, IEEE types round to infinity; the others have
        // nothing there.
        let largest = self.largest();
        let ulp = largest - self.to_f64(self.largest_code() - 1);
        if magnitude >= largest + ulp / 2.0 {
            if special != Special::Ieee {
                return Err(Unrepresentable::OutOfRange);
            }
            let inf = self.inf_code();
            return Ok(if negative { inf | sign_bit } else { inf });
        }
        // fnuz types have a single zero; others keep the sign of -0.0 and of tiny negatives.
        if negative && !(special == Special::Fnuz && code == 0) {
            return Ok(code | sign_bit);
        }
        Ok(code)
    }

    /// The code of +infinity of an IEEE type.
    fn inf_code(self) -> u8 {
        let (e, m, _, _) = self.format();
        (((1u16 << e) - 1) << m) as u8
    }

    /// The largest finite positive code.
    fn largest_code(self) -> u8 {
        let top = if self.sign_bit() == 0 {
            0xfe
        } else {
            self.sign_bit() - 1
        };
        (0..=top)
            .rev()
            .find(|&c| self.to_f64(c).is_finite())
            .unwrap_or(0)
    }

    /// The largest finite value.
    fn largest(self) -> f64 {
        self.to_f64(self.largest_code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values ml_dtypes gives for codes of each type (`ml_dtypes.finfo` and `np.array(code,
    /// "u1").view(type)`).
    #[test]
    fn values_of_codes() {
        assert_eq!(SmallFloat::E4M3FN.largest(), 448.0);
        assert_eq!(SmallFloat::E4M3.largest(), 240.0);
        assert_eq!(SmallFloat::E5M2.largest(), 57344.0);
        assert_eq!(SmallFloat::E4M3FNUZ.largest(), 240.0);
        assert_eq!(SmallFloat::E5M2FNUZ.largest(), 57344.0);
        assert_eq!(SmallFloat::E4M3B11FNUZ.largest(), 30.0);
        assert_eq!(SmallFloat::E3M4.largest(), 15.5);
        assert_eq!(SmallFloat::E8M0FNU.largest(), 2f64.powi(127));
        assert_eq!(SmallFloat::F4E2M1FN.largest(), 6.0);
        assert_eq!(SmallFloat::F6E2M3FN.largest(), 7.5);
        assert_eq!(SmallFloat::F6E3M2FN.largest(), 28.0);
        assert_eq!(SmallFloat::E4M3FN.to_f64(0x01), 2f64.powi(-9));
        assert_eq!(SmallFloat::E8M0FNU.to_f64(0x00), 2f64.powi(-127));
        assert_eq!(SmallFloat::F4E2M1FN.to_f64(0x0f), -6.0);
        assert_eq!(SmallFloat::F4E2M1FN.to_f64(0x01), 0.5);
        assert!(SmallFloat::E4M3FN.to_f64(0xff).is_nan());
        assert!(SmallFloat::E4M3FNUZ.to_f64(0x80).is_nan());
        assert_eq!(SmallFloat::E5M2.to_f64(0xfc), f64::NEG_INFINITY);
        assert_eq!(SmallFloat::E5M2.nan(), Some(0x7e));
        assert_eq!(SmallFloat::E4M3.nan(), Some(0x7c));
        assert_eq!(SmallFloat::E3M4.nan(), Some(0x78));
        assert_eq!(SmallFloat::E4M3FN.nan(), Some(0x7f));
        assert_eq!(
            [
                SmallFloat::E4M3FN,
                SmallFloat::F6E2M3FN,
                SmallFloat::F4E2M1FN
            ]
            .map(SmallFloat::bits),
            [8, 6, 4]
        );
    }

    /// Every finite code comes back from its own value, and rounding is to nearest, ties to even.
    #[test]
    fn codes_round_trip_and_round_to_even() {
        for t in SMALL_FLOATS {
            for code in 0..(1u16 << t.bits()) {
                let code = code as u8;
                let v = t.to_f64(code);
                if v.is_nan() {
                    continue;
                }
                assert_eq!(t.encode(v), Ok(code), "{} {code:#x}", t.name());
            }
        }
        // 1.0625 is halfway between 1.0 (0x38) and 1.125 (0x39) in e4m3fn: the even code wins.
        assert_eq!(SmallFloat::E4M3FN.encode(1.0625), Ok(0x38));
        assert_eq!(SmallFloat::E4M3FN.encode(1.1875), Ok(0x3a));
        assert_eq!(
            SmallFloat::F4E2M1FN.encode(7.0),
            Err(Unrepresentable::OutOfRange)
        );
        assert_eq!(
            SmallFloat::F4E2M1FN.encode(f64::NAN),
            Err(Unrepresentable::NoNan)
        );
        assert_eq!(SmallFloat::E5M2.encode(61440.0), Ok(0x7c));
        assert_eq!(SmallFloat::E5M2.encode(61439.0), Ok(0x7b));
    }
}
