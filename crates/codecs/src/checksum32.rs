//! numcodecs' 32-bit checksums: `crc32`, `adler32`, `crc32c` (v3 `numcodecs.crc32`, ...),
//! `fletcher32` and `jenkins_lookup3`. Encoding adds the little-endian checksum of the data, decoding
//! verifies and strips it; a mismatch is an error.
//!
//! Layouts as numcodecs writes them: `crc32` and `adler32` put the checksum at the start unless
//! configured with `location: "end"`, `crc32c` at the end unless `"start"`; `fletcher32` always at the
//! end, computed as HDF5 does (16-bit big-endian words, sums starting at zero, an odd last byte as the
//! high byte of a word); `jenkins_lookup3` at the end, Bob Jenkins' `hashlittle` (lookup3.c, as HDF5
//! and numcodecs compute it) seeded with `initval`.

use std::sync::Arc;

use serde_json::json;
use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::bounded::check_input_len;
use crate::config::{int, string};
use crate::error::invalid;
use crate::registry::Codec;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Algorithm {
    Crc32,
    Adler32,
    Crc32c,
    Fletcher32,
    /// lookup3's `hashlittle` with this `initval`.
    JenkinsLookup3(u32),
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
        // fletcher32 and jenkins_lookup3 have no location: their checksum is always at the end.
        Some("start")
            if !matches!(
                algorithm,
                Algorithm::Fletcher32 | Algorithm::JenkinsLookup3(_)
            ) =>
        {
            Location::Start
        }
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

/// numcodecs' `JenkinsLookup3(initval=0, prefix=None)`. A `prefix` (bytes hashed before the data)
/// has no JSON form numcodecs can write, so only its absence is accepted.
pub(crate) fn build_jenkins_lookup3(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    if spec.get("prefix").is_some_and(|p| !p.is_null()) {
        return Err(invalid(&spec.name, "a prefix is not supported"));
    }
    let initval = int(spec, "initval", Some(0))?;
    let initval = u32::try_from(initval)
        .map_err(|_| invalid(&spec.name, format!("initval {initval} is not a uint32")))?;
    build(spec, Algorithm::JenkinsLookup3(initval), Location::End)
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

/// Bob Jenkins' lookup3 `mix`.
fn lookup3_mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*c) ^ c.rotate_left(4);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a) ^ a.rotate_left(6);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b) ^ b.rotate_left(8);
    *b = b.wrapping_add(*a);
    *a = a.wrapping_sub(*c) ^ c.rotate_left(16);
    *c = c.wrapping_add(*b);
    *b = b.wrapping_sub(*a) ^ a.rotate_left(19);
    *a = a.wrapping_add(*c);
    *c = c.wrapping_sub(*b) ^ b.rotate_left(4);
    *b = b.wrapping_add(*a);
}

/// Bob Jenkins' lookup3 `final`.
fn lookup3_final(mut a: u32, mut b: u32, mut c: u32) -> u32 {
    c = (c ^ b).wrapping_sub(b.rotate_left(14));
    a = (a ^ c).wrapping_sub(c.rotate_left(11));
    b = (b ^ a).wrapping_sub(a.rotate_left(25));
    c = (c ^ b).wrapping_sub(b.rotate_left(16));
    a = (a ^ c).wrapping_sub(c.rotate_left(4));
    b = (b ^ a).wrapping_sub(a.rotate_left(14));
    (c ^ b).wrapping_sub(b.rotate_left(24))
}

/// lookup3's `hashlittle` reading little-endian words byte by byte, as numcodecs (from HDF5's
/// `H5_checksum_lookup3`) does: no crate on crates.io implements lookup3 (only lookup2).
fn jenkins_lookup3(data: &[u8], initval: u32) -> u32 {
    // lookup3 mixes in the length modulo 2^32.
    let start = 0xdead_beef_u32
        .wrapping_add(data.len() as u32)
        .wrapping_add(initval);
    let (mut a, mut b, mut c) = (start, start, start);
    if data.is_empty() {
        return c;
    }
    let word = |bytes: &[u8]| {
        bytes.iter().enumerate().fold(0u32, |w, (i, &byte)| {
            w.wrapping_add((byte as u32) << (8 * i))
        })
    };
    // Every block but the last: a full last block is kept for `final`.
    let full_blocks = (data.len() - 1) / 12;
    let (blocks, last) = data.split_at(full_blocks * 12);
    for block in blocks.chunks_exact(12) {
        a = a.wrapping_add(word(&block[0..4]));
        b = b.wrapping_add(word(&block[4..8]));
        c = c.wrapping_add(word(&block[8..12]));
        lookup3_mix(&mut a, &mut b, &mut c);
    }
    let part = |from: usize| word(last.get(from..).map_or(&[][..], |r| &r[..r.len().min(4)]));
    a = a.wrapping_add(part(0));
    b = b.wrapping_add(part(4));
    c = c.wrapping_add(part(8));
    lookup3_final(a, b, c)
}

impl Checksum32Codec {
    fn name(&self) -> &'static str {
        match self.algorithm {
            Algorithm::Crc32 => "numcodecs.crc32",
            Algorithm::Adler32 => "numcodecs.adler32",
            Algorithm::Crc32c => "numcodecs.crc32c",
            Algorithm::Fletcher32 => "numcodecs.fletcher32",
            Algorithm::JenkinsLookup3(_) => "numcodecs.jenkins_lookup3",
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
            Algorithm::Crc32c => zshard_core::crc32c(data),
            Algorithm::Fletcher32 => fletcher32(data),
            Algorithm::JenkinsLookup3(initval) => jenkins_lookup3(data, initval),
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
        check_input_len(data, max_decoded_len, self.name())?;
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
            Algorithm::JenkinsLookup3(initval) => {
                CodecSpec::new(self.name(), json!({"initval": initval, "prefix": null}))
            }
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

    /// numcodecs.jenkins.jenkins_lookup3(text[:n], 7) for the lookup3 text below.
    const LOOKUP3_PREFIXES: &[(usize, u32)] = &[
        (1, 0x9ce6_538f),
        (4, 0xa9c6_0c81),
        (11, 0x45b4_4c8c),
        (12, 0x69f2_79f1),
        (13, 0xae33_4571),
        (24, 0x7d00_7bba),
        (25, 0x9158_2bd1),
        (30, 0x6712_0f7e),
    ];

    #[test]
    fn jenkins_lookup3_reference_vectors() {
        // lookup3.c's driver5() and numcodecs.jenkins.jenkins_lookup3 on the same inputs.
        assert_eq!(jenkins_lookup3(b"", 0), 0xdead_beef);
        assert_eq!(jenkins_lookup3(b"", 0xdead_beef), 0xbd5b_7dde);
        let text = b"Four score and seven years ago";
        assert_eq!(jenkins_lookup3(text, 0), 0x1777_0551);
        assert_eq!(jenkins_lookup3(text, 1), 0xcd62_8161);
        // Lengths at and around the 12-byte block edge (numcodecs' values).
        for (len, expected) in LOOKUP3_PREFIXES {
            assert_eq!(jenkins_lookup3(&text[..*len], 7), *expected, "length {len}");
        }
    }
}
