//! numcodecs' 32-bit checksums: `crc32`, `adler32`, `crc32c` (v3 `numcodecs.crc32`, ...) and
//! `fletcher32`. Encoding adds the little-endian checksum of the data, decoding verifies and strips
//! it; a mismatch is an error.
//!
//! Layouts as numcodecs writes them: `crc32` and `adler32` put the checksum at the start unless
//! configured with `location: "end"`, `crc32c` at the end unless `"start"`; `fletcher32` always at the
//! end, computed as HDF5 does (16-bit big-endian words, sums starting at zero, an odd last byte as the
//! high byte of a word).

use std::sync::Arc;

use serde_json::json;
use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::config::string;
use crate::error::invalid;
use crate::registry::Codec;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Algorithm {
    Crc32,
    Adler32,
    Crc32c,
    Fletcher32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Location {
    Start,
    End,
}

#[derive(Debug)]
pub(crate) struct Checksum32Codec {
    algorithm: Algorithm,
    location: Location,
}

fn build(spec: &CodecSpec, algorithm: Algorithm, default: Location) -> crate::Result<Codec> {
    let location = match string(spec, "location") {
        None => default,
        Some("start") if algorithm != Algorithm::Fletcher32 => Location::Start,
        Some("end") => Location::End,
        Some(other) => {
            return Err(invalid(
                &spec.name,
                format!("location {other:?} is not supported"),
            ))
        }
    };
    Ok(Codec::BytesToBytes(Arc::new(Checksum32Codec {
        algorithm,
        location,
    })))
}

pub(crate) fn build_crc32(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    build(spec, Algorithm::Crc32, Location::Start)
}

pub(crate) fn build_adler32(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    build(spec, Algorithm::Adler32, Location::Start)
}

pub(crate) fn build_crc32c(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    build(spec, Algorithm::Crc32c, Location::End)
}

pub(crate) fn build_fletcher32(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    build(spec, Algorithm::Fletcher32, Location::End)
}

/// zlib's Adler-32 (through `adler2`, the implementation flate2's backend uses).
fn adler32(data: &[u8]) -> u32 {
    adler2::adler32_slice(data)
}

/// HDF5's (and numcodecs') Fletcher-32, folding the sums every 360 words as HDF5 does so that the
/// result is the same for every length.
fn fletcher32(data: &[u8]) -> u32 {
    let (mut sum1, mut sum2) = (0u32, 0u32);
    let (words, odd) = data.split_at(data.len() & !1);
    for block in words.chunks(720) {
        for word in block.chunks_exact(2) {
            sum1 = sum1.wrapping_add(((word[0] as u32) << 8) | word[1] as u32);
            sum2 = sum2.wrapping_add(sum1);
        }
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    if let Some(&last) = odd.first() {
        sum1 = sum1.wrapping_add((last as u32) << 8);
        sum2 = sum2.wrapping_add(sum1);
        sum1 = (sum1 & 0xffff) + (sum1 >> 16);
        sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    }
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
    (sum2 << 16) | sum1
}

impl Checksum32Codec {
    fn name(&self) -> &'static str {
        match self.algorithm {
            Algorithm::Crc32 => "numcodecs.crc32",
            Algorithm::Adler32 => "numcodecs.adler32",
            Algorithm::Crc32c => "numcodecs.crc32c",
            Algorithm::Fletcher32 => "numcodecs.fletcher32",
        }
    }

    fn checksum(&self, data: &[u8]) -> u32 {
        match self.algorithm {
            Algorithm::Crc32 => {
                let mut crc = flate2::Crc::new();
                crc.update(data);
                crc.sum()
            }
            Algorithm::Adler32 => adler32(data),
            Algorithm::Crc32c => crc32c::crc32c(data),
            Algorithm::Fletcher32 => fletcher32(data),
        }
    }
}

impl BytesToBytesCodec for Checksum32Codec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        let sum = self.checksum(decoded).to_le_bytes();
        let mut out = Vec::with_capacity(decoded.len() + 4);
        match self.location {
            Location::Start => {
                out.extend_from_slice(&sum);
                out.extend_from_slice(decoded);
            }
            Location::End => {
                out.extend_from_slice(decoded);
                out.extend_from_slice(&sum);
            }
        }
        Ok(out)
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        if encoded.len() < 4 {
            return Err(Error::codec(
                self.name(),
                "input is shorter than its 4-byte checksum",
            ));
        }
        let (stored, data) = match self.location {
            Location::Start => {
                let (sum, data) = encoded.split_at(4);
                (sum, data)
            }
            Location::End => {
                let (data, sum) = encoded.split_at(encoded.len() - 4);
                (sum, data)
            }
        };
        if data.len() > max_decoded_len {
            return Err(Error::codec(
                self.name(),
                format!(
                    "input of {} bytes is longer than the expected {max_decoded_len}",
                    data.len()
                ),
            ));
        }
        let stored = u32::from_le_bytes([stored[0], stored[1], stored[2], stored[3]]);
        let actual = self.checksum(data);
        if stored != actual {
            return Err(Error::codec(
                self.name(),
                format!("checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"),
            ));
        }
        Ok(data.to_vec())
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        decoded_len.saturating_add(4)
    }

    fn spec(&self) -> CodecSpec {
        match self.algorithm {
            Algorithm::Fletcher32 => CodecSpec::new(self.name(), serde_json::Value::Null),
            _ => {
                let location = match self.location {
                    Location::Start => "start",
                    Location::End => "end",
                };
                CodecSpec::new(self.name(), json!({"location": location}))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        // zlib.adler32(b"Wikipedia") and zlib.crc32(b"123456789").
        assert_eq!(adler32(b"Wikipedia"), 0x11E6_0398);
        let c = Checksum32Codec {
            algorithm: Algorithm::Crc32,
            location: Location::Start,
        };
        assert_eq!(c.checksum(b"123456789"), 0xCBF4_3926);
        // numcodecs.Fletcher32 on b"\x0b" and b"\x0b\x30" (HDF5 words are big-endian).
        assert_eq!(fletcher32(&[0x0b]), 0x0b00_0b00);
        assert_eq!(fletcher32(&[0x0b, 0x30]), 0x0b30_0b30);
    }
}
