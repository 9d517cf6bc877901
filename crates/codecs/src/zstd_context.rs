//! A zstd compression context with zstd 1.5.7's pre-block splitter turned off.
//!
//! zstd 1.5.7 (the version the `zstd` crate builds) added a splitter that, before matching, looks
//! for better block boundaries in every 128 KiB block. At the levels chunks are written with it
//! costs about a fifth of the compression time for 0.3 % smaller output (measured on W3's
//! 64³ uint16 chunks at level 3: 1.79 → 1.42 ms per chunk, 118.79 → 119.16 MB; numcodecs, on zstd
//! 1.5.6, writes exactly the 119.16 MB). The `zstd` crate's safe API does not reach this
//! experimental parameter, so this module owns the context through `zstd-sys`.
#![allow(unsafe_code)]

use std::ptr::NonNull;

use zstd_sys::ZSTD_cParameter;

/// `ZSTD_c_blockSplitterLevel`: 1 means no pre-block splitting.
const NO_PRE_BLOCK_SPLITTING: i32 = 1;

/// An owned `ZSTD_CCtx` set to a level and checksum flag, reused for every chunk of a thread.
pub(crate) struct Context(NonNull<zstd_sys::ZSTD_CCtx>);

impl Context {
    /// A context compressing at `level`, with a content checksum when `checksum` is set; the name
    /// of zstd's error when it cannot allocate one or refuses a parameter.
    pub(crate) fn new(level: i32, checksum: bool) -> Result<Context, &'static str> {
        // SAFETY: ZSTD_createCCtx has no preconditions; it returns null when it cannot allocate,
        // which `NonNull::new` turns into an error.
        let raw = unsafe { zstd_sys::ZSTD_createCCtx() };
        let context = Context(NonNull::new(raw).ok_or("cannot allocate a compression context")?);
        context.set(ZSTD_cParameter::ZSTD_c_compressionLevel, level)?;
        context.set(ZSTD_cParameter::ZSTD_c_checksumFlag, i32::from(checksum))?;
        // Experimental parameters keep their number only within one zstd release: set it only on
        // the library these bindings were made for (a system libzstd may be linked instead), and
        // only for speed, so a refusal is no error.
        if zstd::zstd_safe::version_number() == zstd_sys::ZSTD_VERSION_NUMBER {
            let _ = context.set(
                ZSTD_cParameter::ZSTD_c_experimentalParam20,
                NO_PRE_BLOCK_SPLITTING,
            );
        }
        Ok(context)
    }

    fn set(&self, parameter: ZSTD_cParameter, value: i32) -> Result<(), &'static str> {
        // SAFETY: the pointer is a live context owned by `self` (freed only in `drop`); zstd checks
        // the parameter and value and returns an error code for ones it refuses.
        let code = unsafe { zstd_sys::ZSTD_CCtx_setParameter(self.0.as_ptr(), parameter, value) };
        checked(code).map(|_| ())
    }

    /// `src` compressed as one frame (the content size in its header).
    pub(crate) fn compress(&mut self, src: &[u8]) -> Result<Vec<u8>, &'static str> {
        let capacity = zstd::zstd_safe::compress_bound(src.len());
        let mut out: Vec<u8> = Vec::with_capacity(capacity);
        // SAFETY: the context is live and used by this thread only (`&mut self`); `dst` is the
        // spare capacity of `out`, `capacity` bytes, which ZSTD_compress2 never writes beyond; `src`
        // is a valid slice of `src.len()` bytes that zstd only reads.
        let written = unsafe {
            zstd_sys::ZSTD_compress2(
                self.0.as_ptr(),
                out.as_mut_ptr().cast(),
                capacity,
                src.as_ptr().cast(),
                src.len(),
            )
        };
        let written = checked(written)?;
        // SAFETY: ZSTD_compress2 succeeded and initialised the first `written` (≤ capacity) bytes.
        unsafe { out.set_len(written) };
        Ok(out)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context was made by ZSTD_createCCtx and is freed once, here.
        unsafe { zstd_sys::ZSTD_freeCCtx(self.0.as_ptr()) };
    }
}

/// A zstd return value, or the name of the error it encodes.
fn checked(code: usize) -> Result<usize, &'static str> {
    // SAFETY: ZSTD_isError only inspects the number.
    if unsafe { zstd_sys::ZSTD_isError(code) } != 0 {
        return Err(zstd::zstd_safe::get_error_name(code));
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_decode_to_the_input_and_carry_the_checksum_asked_for() {
        let data: Vec<u8> = (0..300_000u32)
            .flat_map(|i| (i / 7).to_le_bytes())
            .collect();
        for checksum in [false, true] {
            let mut context = Context::new(3, checksum).expect("context");
            let frame = context.compress(&data).expect("compress");
            assert!(frame.len() < data.len() / 4, "{}", frame.len());
            assert_eq!(
                zstd::bulk::decompress(&frame, data.len()).expect("decode"),
                data
            );
            // Frame header descriptor: bit 2 is the content checksum flag.
            assert_eq!(frame[4] & 0b100 != 0, checksum);
        }
        assert!(Context::new(3, false)
            .expect("context")
            .compress(&[])
            .is_ok_and(|f| !f.is_empty()));
    }
}
