//! The encode stage, a map on the encode pool: inner chunks of one part are encoded in parallel.

use bytes::Bytes;
use rayon::iter::{IndexedParallelIterator, IntoParallelIterator, ParallelIterator};

use super::message::{Assembled, Encoded, Msg};
use super::RunArray;
use crate::cancel::Cancel;
use crate::error::{Error, Result};

/// Encodes the inner chunks of `assembled`; stops between chunks with [`Error::Cancelled`] once
/// `cancel` is cancelled, so that a large part does not hold up a cancelled run.
pub(super) fn encode(array: &RunArray<'_>, assembled: Assembled, cancel: &Cancel) -> Msg<Encoded> {
    let job = array.job;
    let shard = &assembled.part.task.shard;
    let strings = &assembled.strings;
    let string_fill = job.layout.inner_repr.fill_value.as_bytes();
    let resolve = |raw: Vec<u8>| {
        if job.layout.inner_repr.data_type.is_variable() {
            strings.resolve(&raw, string_fill)
        } else {
            Ok(raw)
        }
    };
    let inner = assembled
        .inner
        .into_par_iter()
        .enumerate()
        .map(|(i, raw)| match raw {
            _ if cancel.is_cancelled() => Err(Error::Cancelled),
            None => Ok(None),
            Some(raw) if job.layout.passthrough => {
                let hash = crc32c::crc32c(&raw);
                Ok(Some((Bytes::from(raw), hash)))
            }
            Some(raw) => resolve(raw)
                .and_then(|raw| {
                    // The decoded values' hash, for the manifest.
                    let hash = crc32c::crc32c(&raw);
                    match &job.inner_chain {
                        None => Ok(raw),
                        Some(chain) => chain.encode(raw, &job.layout.inner_repr),
                    }
                    .map(|b| (b, hash))
                })
                .map(|(b, hash)| Some((Bytes::from(b), hash)))
                .map_err(|source| Error::Encode {
                    array: job.name.clone(),
                    key: job.sink.shard_key(shard),
                    inner: assembled.first_inner as usize + i,
                    source: Box::new(source),
                }),
        })
        .collect::<Result<Vec<_>>>()?;
    let (inner, hashes) = inner
        .into_iter()
        .map(|chunk| match chunk {
            Some((bytes, hash)) => (Some(bytes), Some(hash)),
            None => (None, None),
        })
        .unzip();
    Ok(Encoded {
        part: assembled.part,
        inner,
        hashes,
        read: assembled.read,
    })
}
