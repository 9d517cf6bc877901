//! Reading a decompressor's output without letting it grow past a bound.

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
