//! numcodecs `lzma` (v3 `numcodecs.lzma`): Python's `lzma.compress` output, by default the xz
//! container (`format` 1), also `.lzma` "alone" (2), auto-detection on decode (0) and raw streams
//! (3) described by a `filters` list, as Python's `lzma` module takes them.

use std::io::Write;
use std::sync::Arc;

use liblzma::stream::{Check, Filters, LzmaOptions, MatchFinder, Mode, Stream, CONCATENATED};
use serde_json::{json, Map, Value};
use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::bounded::read_bounded;
use crate::error::invalid;
use crate::registry::Codec;

const NAME: &str = "numcodecs.lzma";

// Python's lzma constants, as they appear in numcodecs configurations.
const FORMAT_AUTO: i64 = 0;
const FORMAT_XZ: i64 = 1;
const FORMAT_ALONE: i64 = 2;
const FORMAT_RAW: i64 = 3;
const FILTER_LZMA1: u64 = 0x4000_0000_0000_0001;
const FILTER_LZMA2: u64 = 0x21;
const FILTER_DELTA: u64 = 0x03;
const PRESET_DEFAULT: u32 = 6;

/// The most bytes an LZMA1 or LZMA2 stream of `encoded_len` bytes can decode to. Its range coder
/// spends at least 0.022 bit on any binary decision (a probability saturates at 2017/2048), and the
/// cheapest output is a repeat of the last match at the longest length: 273 bytes for 14 decisions,
/// so at most about 7,100 bytes per encoded byte (LZMA2's chunk headers only lower that); 8,192 is
/// above it. A dictionary larger than the output is never read, so this bounds the dictionary of
/// any chunk, variable-length ones included, whose expected size (1 GiB for strings) does not.
fn lzma_output_bound(encoded_len: usize) -> usize {
    const MAX_BYTES_PER_ENCODED_BYTE: usize = 8192;
    encoded_len
        .saturating_add(16)
        .saturating_mul(MAX_BYTES_PER_ENCODED_BYTE)
}

/// The xz and .lzma decoders size their dictionary from the stream header, not from the data. Every
/// preset's dictionary (64 MiB at most) stays allowed so that any numcodecs output reads; a header
/// asking for more than that or than the output can be (the expected size, and what `encoded_len`
/// bytes can decode to), plus slack for the decoder's own state, is refused before liblzma
/// allocates it.
fn decoder_memlimit(max_decoded_len: usize, encoded_len: usize) -> u64 {
    const PRESET_9_DICT: u64 = 64 << 20;
    const SLACK: u64 = 16 << 20;
    let output = max_decoded_len.min(lzma_output_bound(encoded_len)) as u64;
    output.max(PRESET_9_DICT) + SLACK
}

#[derive(Debug)]
pub(crate) struct LzmaCodec {
    format: i64,
    check: i64,
    preset: Option<u32>,
    filters: Option<Vec<Map<String, Value>>>,
}

pub(crate) fn build(spec: &CodecSpec, _repr: &ChunkRepr) -> crate::Result<Codec> {
    let get_int = |key: &str, default: i64| match spec.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_i64()
            .ok_or_else(|| invalid(NAME, format!("{key} must be an integer, got {v}"))),
    };
    let format = get_int("format", FORMAT_XZ)?;
    if !(FORMAT_AUTO..=FORMAT_RAW).contains(&format) {
        return Err(invalid(
            NAME,
            format!("format {format} is not 0, 1, 2 or 3"),
        ));
    }
    let check = get_int("check", -1)?;
    if ![-1, 0, 1, 4, 10].contains(&check) {
        return Err(invalid(
            NAME,
            format!("check {check} is not -1, 0, 1, 4 or 10"),
        ));
    }
    let preset = match spec.get("preset") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_u64()
                .and_then(|p| u32::try_from(p).ok())
                .ok_or_else(|| invalid(NAME, format!("preset must be an integer, got {v}")))?,
        ),
    };
    let filters = match spec.get("filters") {
        None | Some(Value::Null) => None,
        Some(Value::Array(list)) => Some(
            list.iter()
                .map(|f| {
                    f.as_object()
                        .cloned()
                        .ok_or_else(|| invalid(NAME, format!("filter {f} is not an object")))
                })
                .collect::<crate::Result<Vec<_>>>()?,
        ),
        Some(v) => return Err(invalid(NAME, format!("filters must be a list, got {v}"))),
    };
    if format == FORMAT_RAW && filters.is_none() {
        return Err(invalid(NAME, "format 3 (raw) needs filters"));
    }
    let codec = LzmaCodec {
        format,
        check,
        preset,
        filters,
    };
    // Reject filter lists this build cannot express now rather than at the first chunk.
    if let Some(list) = &codec.filters {
        lzma_filters(list, None)?;
    }
    Ok(Codec::BytesToBytes(Arc::new(codec)))
}

fn library(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::CodecLibrary {
        codec: NAME.into(),
        source: Box::new(e),
    }
}

fn config(reason: String) -> crate::Error {
    invalid(NAME, reason)
}

/// LZMA1/LZMA2 options from a Python filter dictionary (`preset` first, then explicit settings).
fn lzma_options(f: &Map<String, Value>) -> crate::Result<LzmaOptions> {
    let num = |key: &str| -> crate::Result<Option<u32>> {
        f.get(key)
            .map(|v| {
                v.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| config(format!("filter {key} must be an integer, got {v}")))
            })
            .transpose()
    };
    let preset = num("preset")?.unwrap_or(PRESET_DEFAULT);
    let mut o = LzmaOptions::new_preset(preset)
        .map_err(|e| config(format!("filter preset {preset}: {e}")))?;
    if let Some(v) = num("dict_size")? {
        o.dict_size(v);
    }
    if let Some(v) = num("lc")? {
        o.literal_context_bits(v);
    }
    if let Some(v) = num("lp")? {
        o.literal_position_bits(v);
    }
    if let Some(v) = num("pb")? {
        o.position_bits(v);
    }
    if let Some(v) = num("nice_len")? {
        o.nice_len(v);
    }
    if let Some(v) = num("depth")? {
        o.depth(v);
    }
    match num("mode")? {
        None => {}
        Some(1) => {
            o.mode(Mode::Fast);
        }
        Some(2) => {
            o.mode(Mode::Normal);
        }
        Some(m) => return Err(config(format!("filter mode {m} is not 1 or 2"))),
    }
    match num("mf")? {
        None => {}
        Some(mf) => {
            let mf = match mf {
                0x03 => MatchFinder::HashChain3,
                0x04 => MatchFinder::HashChain4,
                0x12 => MatchFinder::BinaryTree2,
                0x13 => MatchFinder::BinaryTree3,
                0x14 => MatchFinder::BinaryTree4,
                other => return Err(config(format!("filter mf {other:#x} is not supported"))),
            };
            o.match_finder(mf);
        }
    }
    Ok(o)
}

/// The dictionary size a filter's `preset` implies (liblzma's table; the level is the low bits).
fn preset_dict_size(f: &Map<String, Value>) -> u64 {
    const DICT: [u64; 10] = [
        256 << 10,
        1 << 20,
        2 << 20,
        4 << 20,
        4 << 20,
        8 << 20,
        8 << 20,
        16 << 20,
        32 << 20,
        64 << 20,
    ];
    let preset = f
        .get("preset")
        .and_then(Value::as_u64)
        .unwrap_or(PRESET_DEFAULT as u64);
    DICT.get((preset & 0x1f) as usize)
        .copied()
        .unwrap_or(64 << 20)
}

/// Builds a liblzma filter chain from Python's filter dictionaries. With `max_dict`, the LZMA
/// dictionary is capped: a decoder never needs more dictionary than its whole output, so a
/// configuration cannot make decoding allocate more than the chunk it decodes.
fn lzma_filters(list: &[Map<String, Value>], max_dict: Option<u32>) -> crate::Result<Filters> {
    let mut filters = Filters::new();
    for f in list {
        let id = f.get("id").and_then(Value::as_u64).ok_or_else(|| {
            config(format!(
                "filter {} has no integer id",
                Value::Object(f.clone())
            ))
        })?;
        match id {
            FILTER_LZMA1 | FILTER_LZMA2 => {
                let mut o = lzma_options(f)?;
                if let Some(max) = max_dict {
                    let wanted = match f.get("dict_size").and_then(Value::as_u64) {
                        Some(size) => size,
                        None => preset_dict_size(f),
                    };
                    // 4 KiB is liblzma's minimum dictionary.
                    o.dict_size(wanted.min(max.max(4096) as u64) as u32);
                }
                if id == FILTER_LZMA1 {
                    filters.lzma1(&o);
                } else {
                    filters.lzma2(&o);
                }
            }
            FILTER_DELTA => {
                let dist = f.get("dist").and_then(Value::as_u64).unwrap_or(1);
                if !(1..=256).contains(&dist) {
                    return Err(config(format!(
                        "delta filter dist {dist} is not in 1..=256"
                    )));
                }
                filters
                    .delta_properties(&[(dist - 1) as u8])
                    .map_err(|e| config(format!("delta filter: {e}")))?;
            }
            0x04..=0x0b => {
                // Branch/call/jump filters; `start_offset` is their only option.
                let start = f.get("start_offset").and_then(Value::as_u64).unwrap_or(0);
                let start = u32::try_from(start)
                    .map_err(|_| config(format!("start_offset {start} is too large")))?;
                let props = start.to_le_bytes();
                let props: &[u8] = if start == 0 { &[] } else { &props };
                let pushed = match id {
                    0x04 => filters.x86_properties(props),
                    0x05 => filters.powerpc_properties(props),
                    0x06 => filters.ia64_properties(props),
                    0x07 => filters.arm_properties(props),
                    0x08 => filters.arm_thumb_properties(props),
                    0x09 => filters.sparc_properties(props),
                    0x0a => filters.arm64_properties(props),
                    _ => filters.riscv_properties(props),
                };
                pushed.map_err(|e| config(format!("filter {id:#x}: {e}")))?;
            }
            other => return Err(config(format!("filter id {other:#x} is not supported"))),
        }
    }
    Ok(filters)
}

impl LzmaCodec {
    fn check(&self) -> Check {
        match self.check {
            0 => Check::None,
            1 => Check::Crc32,
            10 => Check::Sha256,
            // -1 means the format's default, CRC64 for xz (the only format that stores a check).
            _ => Check::Crc64,
        }
    }

    fn encoder(&self) -> Result<Stream> {
        let preset = self.preset.unwrap_or(PRESET_DEFAULT);
        let filters = |max| {
            self.filters
                .as_deref()
                .map(|list| lzma_filters(list, max))
                .transpose()
                .map_err(|e| Error::codec(NAME, e.to_string()))
        };
        let no_check = || {
            if self.check > 0 {
                Err(Error::codec(
                    NAME,
                    "only the xz format (1) stores an integrity check",
                ))
            } else {
                Ok(())
            }
        };
        match self.format {
            FORMAT_XZ => match filters(None)? {
                Some(f) => Stream::new_stream_encoder(&f, self.check()),
                None => Stream::new_easy_encoder(preset, self.check()),
            }
            .map_err(library),
            FORMAT_ALONE => {
                no_check()?;
                let options = match self.filters.as_deref() {
                    Some([f]) => lzma_options(f).map_err(|e| Error::codec(NAME, e.to_string()))?,
                    Some(_) => {
                        return Err(Error::codec(
                            NAME,
                            "format 2 (alone) takes exactly one LZMA1 filter",
                        ))
                    }
                    None => LzmaOptions::new_preset(preset).map_err(library)?,
                };
                Stream::new_lzma_encoder(&options).map_err(library)
            }
            FORMAT_RAW => {
                no_check()?;
                let f =
                    filters(None)?.ok_or_else(|| Error::codec(NAME, "raw format needs filters"))?;
                Stream::new_raw_encoder(&f).map_err(library)
            }
            _ => Err(Error::codec(
                NAME,
                "format 0 (auto) only decodes; Python's lzma refuses to encode with it too",
            )),
        }
    }

    fn decoder(&self, max_decoded_len: usize, encoded_len: usize) -> Result<Stream> {
        let memlimit = decoder_memlimit(max_decoded_len, encoded_len);
        match self.format {
            // Python's lzma.decompress reads concatenated streams.
            FORMAT_AUTO => Stream::new_auto_decoder(memlimit, CONCATENATED),
            FORMAT_XZ => Stream::new_stream_decoder(memlimit, CONCATENATED),
            FORMAT_ALONE => Stream::new_lzma_decoder(memlimit),
            _ => {
                // A raw stream's dictionary is whatever the filters say: cap it by the output.
                let max_output = max_decoded_len.min(lzma_output_bound(encoded_len));
                let max_dict = u32::try_from(max_output).unwrap_or(u32::MAX);
                let f = self
                    .filters
                    .as_deref()
                    .map(|list| lzma_filters(list, Some(max_dict)))
                    .transpose()
                    .map_err(|e| Error::codec(NAME, e.to_string()))?
                    .ok_or_else(|| Error::codec(NAME, "raw format needs filters"))?;
                Stream::new_raw_decoder(&f)
            }
        }
        .map_err(library)
    }
}

impl BytesToBytesCodec for LzmaCodec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        let mut encoder = liblzma::write::XzEncoder::new_stream(
            Vec::with_capacity(decoded.len() / 2 + 64),
            self.encoder()?,
        );
        encoder.write_all(decoded).map_err(library)?;
        encoder.finish().map_err(library)
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        let stream = self.decoder(max_decoded_len, encoded.len())?;
        read_bounded(
            liblzma::read::XzDecoder::new_stream(encoded, stream),
            max_decoded_len,
            NAME,
        )
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new(
            NAME,
            json!({
                "format": self.format,
                "check": self.check,
                "preset": self.preset,
                "filters": self.filters,
            }),
        )
    }
}
