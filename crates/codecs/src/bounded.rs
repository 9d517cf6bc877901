//! Reading a decompressor's output without letting it grow past a bound, and refusing inputs of
//! codecs whose output is as long as their input when they are already too long.

use std::io::Read;

use zshard_core::Error;

/// Reads all of `reader`, failing once more than `max` bytes come out.
pub(crate) fn read_bounded(reader: impl Read, max: usize, codec: &str) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    reader
        .take(max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| Error::CodecLibrary {
            codec: codec.to_string(),
            source: Box::new(e),
        })?;
    if out.len() > max {
        return Err(Error::codec(
            codec,
            format!("decodes to more than the expected {max} bytes"),
        ));
    }
    Ok(out)
}

/// Refuses `input` when it is longer than the `max` bytes its decoding may produce: for codecs whose
/// output is their input reordered or copied (shuffle, bitround, the data of a checksum codec).
pub(crate) fn check_input_len(input: &[u8], max: usize, codec: &str) -> Result<(), Error> {
    if input.len() > max {
        return Err(Error::codec(
            codec,
            format!(
                "input of {} bytes is longer than the expected {max}",
                input.len()
            ),
        ));
    }
    Ok(())
}
