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
                let hash = zshard_core::crc32c(&raw);
                Ok(Some((Bytes::from(raw), hash)))
            }
            Some(raw) => resolve(raw)
                .and_then(|raw| {
                    // The decoded values' hash, for the manifest.
                    let hash = zshard_core::crc32c(&raw);
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
    // Only a copy that would be decoded goes unhashed: a copied-through array hashes stored bytes.
    let unhashed =
        job.copies_go_unhashed() && assembled.copied.iter().any(|(_, bytes)| bytes.is_some());
    let inner = place_copied(array, assembled.first_inner, inner, assembled.copied, shard)?;
    let (inner, mut hashes): (Vec<_>, Vec<_>) = inner
        .into_iter()
        .map(|chunk| match chunk {
            Some((bytes, hash)) => (Some(bytes), Some(hash)),
            None => (None, None),
        })
        .unzip();
    if unhashed {
        // Fewer hashes than chunks: the writer names none for the shard.
        hashes.clear();
    }
    Ok(Encoded {
        part: assembled.part,
        inner,
        hashes,
        read: assembled.read,
    })
}

/// An encoded inner chunk with the hash the manifest records for it (see `Encoded::hashes`).
type Hashed = Option<(Bytes, u32)>;

/// Puts the inner chunks copied from the previous output (see `ShardTask::reuse`) in their places
/// among `inner` (those of the part from `first_inner`). Each is hashed as a converted one is (its
/// decoded values, or its stored bytes when the array is copied through) when the job hashes
/// copies ([`ArrayJob::hash_copied`](crate::ArrayJob)); else a copy that would be decoded is not,
/// and its hash is left 0, unused.
fn place_copied(
    array: &RunArray<'_>,
    first_inner: u64,
    mut inner: Vec<Hashed>,
    copied: super::message::Copied,
    shard: &[u64],
) -> Result<Vec<Hashed>> {
    let job = array.job;
    let hashed = copied
        .into_par_iter()
        .map(|(i, bytes)| {
            let Some(bytes) = bytes else {
                return Ok((i, None));
            };
            let hash = match &job.inner_chain {
                Some(_) if job.copies_go_unhashed() => 0,
                Some(chain) if !job.layout.passthrough => {
                    let raw = chain
                        .decode(&bytes, &job.layout.inner_repr)
                        .map_err(|source| Error::Decode {
                            array: job.name.clone(),
                            key: format!(
                                "{} (inner chunk {i}, as it stood)",
                                job.sink.shard_key(shard)
                            ),
                            source: Box::new(source),
                        })?;
                    zshard_core::crc32c(&raw)
                }
                _ => zshard_core::crc32c(&bytes),
            };
            Ok((i, Some((bytes, hash))))
        })
        .collect::<Result<Vec<_>>>()?;
    for (i, chunk) in hashed {
        if let Some(slot) = i
            .checked_sub(first_inner)
            .and_then(|at| inner.get_mut(at as usize))
        {
            *slot = chunk;
        }
    }
    Ok(inner)
}
