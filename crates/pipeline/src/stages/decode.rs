//! The decode stage, a map on the decode pool: source chunks of one part are decoded in parallel.

use rayon::iter::{IndexedParallelIterator, IntoParallelIterator, ParallelIterator};
use zshard_core::StringTable;

use super::message::{Decoded, Fetched, Msg};
use super::RunArray;
use crate::cancel::Cancel;
use crate::error::{Error, Result};

/// Decodes the source chunks of `fetched`; stops between chunks with [`Error::Cancelled`] once
/// `cancel` is cancelled, so that a large part does not hold up a cancelled run.
pub(super) fn decode(array: &RunArray<'_>, fetched: Fetched, cancel: &Cancel) -> Msg<Decoded> {
    let job = array.job;
    let strings_of = job.layout.source_repr.data_type.is_variable() && !job.layout.passthrough;
    let fill = job.layout.source_repr.fill_value.as_bytes();
    let decoded = fetched
        .chunks
        .into_par_iter()
        .enumerate()
        .map(|(slot, (coord, bytes))| {
            if cancel.is_cancelled() {
                return Err(Error::Cancelled);
            }
            let error = |source| Error::Decode {
                array: job.name.clone(),
                key: job.reader.chunk_key(&coord),
                source: Box::new(source),
            };
            let Some(b) = bytes else {
                return Ok((coord, None, None));
            };
            let repr = job.layout.source_chunk_repr(&coord);
            if job.layout.passthrough {
                // The encoded bytes go to the shard as they are, but only once they are checked: a
                // truncated or garbled source chunk stops the run as it does without passthrough.
                // Frames that state their sizes are checked by their headers, others are decoded.
                // `Vec::from` does not copy an unshared buffer. Frames that some readers refuse
                // though they decode (zstd's skippable frames) are dropped first.
                let b = match job.source_chain.for_copy(&b) {
                    Some(kept) => bytes::Bytes::from(kept),
                    None => b,
                };
                job.source_chain.check(&b, &repr).map_err(error)?;
                return Ok((coord, Some(Vec::from(b)), None));
            }
            let data = job.source_chain.decode(&b, &repr).map_err(error)?;
            if !strings_of {
                return Ok((coord, Some(data), None));
            }
            // Reassembly moves fixed-size elements: strings travel as handles into the table.
            let (handles, strings) =
                StringTable::handles(slot, data, repr.elements() as usize, fill).map_err(error)?;
            Ok((coord, Some(handles), Some(strings)))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut strings = StringTable::with_slots(if strings_of { decoded.len() } else { 0 });
    let chunks = decoded
        .into_iter()
        .enumerate()
        .map(|(slot, (coord, data, chunk_strings))| {
            if let Some(chunk_strings) = chunk_strings {
                strings.insert(slot, chunk_strings);
            }
            (coord, data)
        })
        .collect();
    Ok(Decoded {
        part: fetched.part,
        chunks,
        copied: fetched.copied,
        strings,
        read: fetched.read,
    })
}
