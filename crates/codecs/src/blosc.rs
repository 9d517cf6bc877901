//! `blosc` (c-blosc 1.x through blosc-src). Reads every Blosc 1 frame numcodecs writes; writes with
//! any of its compressors and shuffle modes.
//!
//! This is the one place that calls C. Each call uses the `_ctx` entry points, which need no global
//! state, so they are safe to run from many threads at once.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::raw::{c_int, c_void};
use std::sync::Arc;

use serde_json::json;
use zshard_core::{BytesToBytesCodec, ChunkRepr, CodecSpec, Error, Result};

use crate::config::{int, string};
use crate::error::invalid;
use crate::registry::Codec;

/// Compressors blosc can use, as named in metadata.
pub const CNAMES: [&str; 5] = ["blosclz", "lz4", "lz4hc", "zlib", "zstd"];
/// Shuffle modes, as named in v3 metadata and on the command line.
pub const SHUFFLES: [&str; 3] = ["noshuffle", "shuffle", "bitshuffle"];
/// Bytes blosc may add to incompressible input.
const MAX_OVERHEAD: usize = blosc_src::BLOSC_MAX_OVERHEAD as usize;
const MIN_HEADER: usize = blosc_src::BLOSC_MIN_HEADER_LENGTH as usize;

#[derive(Debug)]
pub(crate) struct BloscCodec {
    cname: CString,
    clevel: c_int,
    shuffle: c_int,
    typesize: usize,
    blocksize: usize,
}

pub(crate) fn build(spec: &CodecSpec, repr: &ChunkRepr) -> crate::Result<Codec> {
    let cname = string(spec, "cname").unwrap_or("lz4");
    if !CNAMES.contains(&cname) {
        return Err(invalid(
            "blosc",
            format!("cname {cname:?} is not one of {CNAMES:?}"),
        ));
    }
    let clevel = int(spec, "clevel", Some(5))?;
    if !(0..=9).contains(&clevel) {
        return Err(invalid("blosc", format!("clevel {clevel} is not in 0..=9")));
    }
    let shuffle = match spec.get("shuffle") {
        None => 1,
        Some(v) => match (v.as_str(), v.as_i64()) {
            (Some(s), _) => SHUFFLES.iter().position(|&x| x == s).ok_or_else(|| {
                invalid("blosc", format!("shuffle {s:?} is not one of {SHUFFLES:?}"))
            })? as c_int,
            (None, Some(n @ 0..=2)) => n as c_int,
            _ => return Err(invalid("blosc", format!("bad shuffle {v}"))),
        },
    };
    let typesize = int(spec, "typesize", Some(repr.data_type.size() as i64))?;
    let blocksize = int(spec, "blocksize", Some(0))?;
    let (Ok(typesize), Ok(blocksize)) = (usize::try_from(typesize), usize::try_from(blocksize))
    else {
        return Err(invalid(
            "blosc",
            "typesize and blocksize must not be negative",
        ));
    };
    Ok(Codec::BytesToBytes(Arc::new(BloscCodec {
        cname: CString::new(cname).map_err(|_| invalid("blosc", "bad cname"))?,
        clevel: clevel as c_int,
        shuffle,
        typesize: typesize.max(1),
        blocksize,
    })))
}

impl BytesToBytesCodec for BloscCodec {
    fn encode(&self, decoded: &[u8]) -> Result<Vec<u8>> {
        let capacity = decoded.len() + MAX_OVERHEAD;
        // Not zeroed: blosc writes the frame itself, and only its `written` bytes are kept (zeroing
        // the whole capacity first cost a pass over every output chunk; issue 43).
        let mut out: Vec<u8> = Vec::with_capacity(capacity);
        // SAFETY: `decoded` is valid for `decoded.len()` bytes, `out`'s spare capacity is writable
        // for `capacity` bytes and they do not overlap; blosc never writes past `destsize`. `cname`
        // is a valid NUL-terminated string that outlives the call.
        let written = unsafe {
            blosc_src::blosc_compress_ctx(
                self.clevel,
                self.shuffle,
                self.typesize,
                decoded.len(),
                decoded.as_ptr().cast::<c_void>(),
                out.as_mut_ptr().cast::<c_void>(),
                capacity,
                self.cname.as_ptr(),
                self.blocksize,
                1,
            )
        };
        if written <= 0 {
            return Err(Error::codec(
                "blosc",
                format!("compression failed (code {written})"),
            ));
        }
        // SAFETY: blosc_compress_ctx succeeded, so it wrote the whole frame, its first `written`
        // (≤ `capacity`) bytes.
        unsafe { out.set_len((written as usize).min(capacity)) };
        Ok(out)
    }

    fn decode(&self, encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
        decode(encoded, max_decoded_len)
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        decoded_len.saturating_add(MAX_OVERHEAD)
    }

    fn spec(&self) -> CodecSpec {
        CodecSpec::new(
            "blosc",
            json!({
                "cname": self.cname.to_str().unwrap_or("lz4"),
                "clevel": self.clevel,
                "shuffle": SHUFFLES[self.shuffle as usize],
                "typesize": self.typesize,
                "blocksize": self.blocksize,
            }),
        )
    }
}

/// The frame without bytes after the length its header states: numcodecs (and so zarr-python) decode
/// such chunks, ignoring what follows the frame, while `blosc_cbuffer_validate` wants the exact length.
fn without_trailing_bytes(encoded: &[u8]) -> &[u8] {
    let stated = encoded
        .get(12..16)
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(|b| u32::from_le_bytes(b) as usize);
    match stated {
        Some(cbytes) if cbytes >= MIN_HEADER && cbytes < encoded.len() => &encoded[..cbytes],
        _ => encoded,
    }
}

/// Decompresses one Blosc frame after checking its header, refusing frames that claim more than
/// `max_decoded_len` bytes.
pub(crate) fn decode(encoded: &[u8], max_decoded_len: usize) -> Result<Vec<u8>> {
    let encoded = without_trailing_bytes(encoded);
    let mut nbytes = 0usize;
    // SAFETY: `encoded` is valid for `encoded.len()` bytes; the function reads at most that many and
    // writes one usize through a valid pointer.
    let status = unsafe {
        blosc_src::blosc_cbuffer_validate(
            encoded.as_ptr().cast::<c_void>(),
            encoded.len(),
            &mut nbytes,
        )
    };
    if status != 0 {
        return Err(Error::codec(
            "blosc",
            "not a valid blosc frame (bad header or truncated)",
        ));
    }
    if nbytes > max_decoded_len {
        return Err(Error::codec(
            "blosc",
            format!(
                "frame claims {nbytes} decoded bytes, more than the expected {max_decoded_len}"
            ),
        ));
    }
    // Not zeroed: blosc writes every one of the `nbytes` bytes it returns (zeroing them first was a
    // pass over every decoded chunk, 4 % of the CPU of a W6-like run; issue 43).
    let mut out: Vec<u8> = Vec::with_capacity(nbytes);
    if nbytes == 0 {
        return Ok(out);
    }
    // SAFETY: blosc_cbuffer_validate accepted the header against the buffer length, which makes the
    // call safe to attempt; `out`'s spare capacity is writable for `nbytes` bytes, the buffers do
    // not overlap, and blosc never writes past `destsize`.
    let got = unsafe {
        blosc_src::blosc_decompress_ctx(
            encoded.as_ptr().cast::<c_void>(),
            out.as_mut_ptr().cast::<c_void>(),
            nbytes,
            1,
        )
    };
    if got < 0 || got as usize != nbytes {
        return Err(Error::codec(
            "blosc",
            format!("decompression failed (code {got})"),
        ));
    }
    // SAFETY: blosc_decompress_ctx returned `nbytes`: it decompressed (or, for a frame stored
    // uncompressed, copied) every block of the frame into the first `nbytes` bytes of `out`, which
    // are therefore initialised; on any failing block it returns a negative code instead.
    unsafe { out.set_len(nbytes) };
    Ok(out)
}
