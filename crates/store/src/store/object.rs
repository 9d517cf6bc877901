use std::fs::File;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, PutResult};

use super::local::staged_file_vanished;
use super::{crc32c_digest, crc32c_value, PutNew, Store};
use crate::error::{Error, Result};

/// Local objects from this size on are written as an [`crate::Upload`] (directly, around the page
/// cache, where the filesystem allows); smaller ones (metadata, records) through object_store.
const DIRECT_PUT_MIN: usize = 1 << 20;

impl Store {
    /// [`Store::get`] as a future on the store's I/O runtime (to run side by side with other
    /// requests inside [`Store::block_on`]).
    pub async fn get_async(&self, key: &str) -> Result<Option<Bytes>> {
        self.get_bounded_async(key, u64::MAX).await
    }

    /// [`Store::get_async`], refusing an object longer than `max` bytes ([`Error::TooLarge`]) before
    /// reading more than `max + 1` bytes of it (see [`Store::get_many_bounded`]).
    pub(super) async fn get_bounded_async(&self, key: &str, max: u64) -> Result<Option<Bytes>> {
        let path = self.path(key)?;
        self.refuse_special_file(key)?;
        let too_large = |len: u64, at_least: bool| Error::TooLarge {
            location: self.url(key),
            len,
            at_least,
            max,
        };
        if let Some(found) = self.read_ahead_of(&path) {
            return match found {
                Some(bytes) if bytes.len() as u64 > max => {
                    Err(too_large(bytes.len() as u64, false))
                }
                found => Ok(found),
            };
        }
        let fail = |source| Error::Request {
            operation: "cannot read",
            location: self.url(key),
            source: Box::new(source),
        };
        if self.is_zip() && max < u64::MAX {
            // A zip member is inflated as soon as it is got: its size from the directory first.
            match self.retrying(|| self.inner.head(&path)).await {
                Ok(meta) if meta.size > max => return Err(too_large(meta.size, false)),
                Ok(_) => {}
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(fail(e)),
            }
        }
        let read = self
            .retrying(|| async {
                let got = self.inner.get(&path).await?;
                if max == u64::MAX {
                    return Ok(Ok(got.bytes().await?));
                }
                // The size the response states first, then the body with a cap, in case the body
                // is longer than stated.
                if got.meta.size > max {
                    return Ok(Err((got.meta.size, false)));
                }
                let mut parts = got.into_stream();
                let mut data = Vec::with_capacity(usize::try_from(max).unwrap_or(0).min(1 << 20));
                while let Some(part) = parts.next().await {
                    let part = part?;
                    if (data.len() + part.len()) as u64 > max {
                        return Ok(Err(((data.len() + part.len()) as u64, true)));
                    }
                    data.extend_from_slice(&part);
                }
                Ok(Ok(Bytes::from(data)))
            })
            .await;
        match read {
            Ok(Ok(bytes)) => Ok(Some(bytes)),
            Ok(Err((len, at_least))) => Err(too_large(len, at_least)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(fail(e)),
        }
    }

    /// Reads a whole object; `None` when it does not exist.
    pub fn get(&self, key: &str) -> Result<Option<Bytes>> {
        self.runtime.block_on(self.get_async(key))
    }

    pub(super) async fn get_range_async(
        &self,
        key: &str,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes> {
        let path = self.path(key)?;
        self.refuse_special_file(key)?;
        self.retrying(|| self.inner.get_range(&path, range.clone()))
            .await
            .map_err(|source| Error::Request {
                operation: "cannot read",
                location: format!("{} (bytes {}..{})", self.url(key), range.start, range.end),
                source: Box::new(source),
            })
    }

    /// Reads bytes `range` of an object (a missing object or a range past its end is an error).
    pub fn get_range(&self, key: &str, range: std::ops::Range<u64>) -> Result<Bytes> {
        self.runtime.block_on(self.get_range_async(key, range))
    }

    /// Reads the first (`from_end` false) or last `len` bytes of an object, or all of it when it is
    /// shorter; `None` when it does not exist. (A shard index, whose object size is not known.)
    pub fn get_edge(&self, key: &str, len: u64, from_end: bool) -> Result<Option<Bytes>> {
        Ok(self
            .get_edge_sized(key, len, from_end)?
            .map(|(bytes, _)| bytes))
    }

    /// [`Store::get_edge`] with the object's whole size (a shard's index, read to locate its
    /// inner chunks, is checked against it).
    pub fn get_edge_sized(
        &self,
        key: &str,
        len: u64,
        from_end: bool,
    ) -> Result<Option<(Bytes, u64)>> {
        let fail = |source| Error::Request {
            operation: "cannot read",
            location: self.url(key),
            source: Box::new(source),
        };
        let path = self.path(key)?;
        if let Some(file) = self.local_path(key) {
            return self.read_local_edge(&file, key, len, from_end);
        }
        let range = if from_end {
            object_store::GetRange::Suffix(len)
        } else {
            object_store::GetRange::Bounded(0..len)
        };
        let path = &path;
        let get = |range: object_store::GetRange, if_match: Option<String>| {
            self.retrying(move || {
                let options = object_store::GetOptions {
                    range: Some(range.clone()),
                    if_match: if_match.clone(),
                    ..Default::default()
                };
                async move {
                    let got = self.inner.get_opts(path, options).await?;
                    let size = got.meta.size;
                    Ok((got.bytes().await?, size))
                }
            })
        };
        let read = self.runtime.block_on(async {
            match get(range, None).await {
                // Azure has no suffix ranges: the size first, then the range, of that very version
                // (an object replaced in between fails the read rather than giving bytes that do
                // not end where its new size says).
                Err(object_store::Error::NotSupported { .. }) if from_end => {
                    let head = self.retrying(|| self.inner.head(path)).await?;
                    let size = head.size;
                    get(
                        object_store::GetRange::Bounded(size.saturating_sub(len)..size),
                        head.e_tag,
                    )
                    .await
                }
                other => other,
            }
        });
        match read {
            Ok(found) => Ok(Some(found)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(fail(e)),
        }
    }

    /// Reads several `(key, range)` pairs with up to the configured number of requests in flight;
    /// results are in the order of `requests`. Callers coalesce nearby ranges first.
    pub fn get_ranges(&self, requests: &[(String, std::ops::Range<u64>)]) -> Vec<Result<Bytes>> {
        if self.reads_files() {
            let mut open: Option<(&str, File)> = None;
            return requests
                .iter()
                .map(|(key, range)| self.read_local_range(&mut open, key, range.clone()))
                .collect();
        }
        self.runtime.block_on(
            futures::stream::iter(
                requests
                    .iter()
                    .map(|(k, r)| self.get_range_async(k, r.clone())),
            )
            .buffered(self.concurrency)
            .collect(),
        )
    }

    /// Reads several objects with up to the configured number of requests in flight; results are in
    /// the order of `keys`.
    pub fn get_many(&self, keys: &[String]) -> Vec<Result<Option<Bytes>>> {
        self.get_many_bounded(keys, u64::MAX)
    }

    /// [`Store::get_many`] for objects that cannot be longer than `max` bytes (the stored chunks of
    /// an array, whose codecs bound them): a longer one is refused ([`Error::TooLarge`]) without
    /// being read whole, by the size of a local file (of which at most `max + 1` bytes are read, in
    /// case it grows), a zip member's directory entry (before it is inflated), or the size an
    /// object store's response states (before its body, which is read with the same cap).
    pub fn get_many_bounded(&self, keys: &[String], max: u64) -> Vec<Result<Option<Bytes>>> {
        if self.reads_files() {
            return keys.iter().map(|key| self.read_local(key, max)).collect();
        }
        self.runtime.block_on(
            futures::stream::iter(keys.iter().map(|k| self.get_bounded_async(k, max)))
                .buffered(self.concurrency)
                .collect(),
        )
    }

    /// The size and crc32c of each object of `keys` (`None` when it does not exist), in the order of
    /// `keys`. Objects are read as streams, never whole: a check of large shards holds at most the
    /// configured number of objects in flight, each one read buffer at a time, whatever their sizes.
    /// Local files are read on the calling thread.
    pub fn checksums(&self, keys: &[String]) -> Vec<Result<Option<(u64, u32)>>> {
        if self.reads_files() {
            return keys.iter().map(|key| self.checksum_local(key)).collect();
        }
        self.runtime.block_on(
            futures::stream::iter(keys.iter().map(|k| self.checksum_async(k)))
                .buffered(self.concurrency.max(1))
                .collect(),
        )
    }

    async fn checksum_async(&self, key: &str) -> Result<Option<(u64, u32)>> {
        let path = self.path(key)?;
        self.refuse_special_file(key)?;
        let read = self
            .retrying(|| async {
                let mut parts = self.inner.get(&path).await?.into_stream();
                let (mut size, mut crc) = (0u64, crc32c_digest());
                while let Some(part) = parts.next().await {
                    let part = part?;
                    size += part.len() as u64;
                    crc.update(&part);
                }
                Ok((size, crc32c_value(&crc)))
            })
            .await;
        match read {
            Ok(found) => Ok(Some(found)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => Err(Error::Request {
                operation: "cannot read",
                location: self.url(key),
                source: Box::new(source),
            }),
        }
    }

    /// Writes an object. It becomes visible under its key only once complete: local files are
    /// written under a temporary name and renamed; object stores publish a PUT atomically, and objects
    /// larger than the part size go up as a multipart upload (parts in parallel), which is aborted on
    /// failure and never visible unless completed.
    pub fn put(&self, key: &str, data: Bytes) -> Result<()> {
        self.put_parts(key, vec![data])
    }

    /// Writes the concatenation of `parts` as one object, without copying them into one buffer first
    /// (local files get each part written in turn; object stores get one PUT, or a multipart upload
    /// above the part size).
    pub fn put_parts(&self, key: &str, parts: Vec<Bytes>) -> Result<()> {
        self.put_parts_versioned(key, parts).map(|_| ())
    }

    /// [`Store::put_parts`], returning the version the store gave the object (its ETag, as
    /// [`ListedObject::version`](crate::ListedObject::version) shows it in listings), when it names
    /// one.
    pub fn put_parts_versioned(&self, key: &str, parts: Vec<Bytes>) -> Result<Option<String>> {
        let path = self.path(key)?;
        let total: usize = parts.iter().map(Bytes::len).sum();
        if total >= DIRECT_PUT_MIN && self.local_path(key).is_some() {
            // A shard-sized local file: written around the page cache where the filesystem allows
            // (see `Upload`, which refuses a link on the way as below), as a shard written in parts is.
            return self.put_local_upload(key, &parts);
        }
        self.refuse_link(key)?;
        let part_size = self.part_size();
        // A retried PUT resends the whole object; a retried multipart upload starts a new upload (the
        // failed one was aborted).
        let result = if self.location.is_remote() && total > part_size {
            self.runtime
                .block_on(self.retrying(|| self.put_multipart(&path, &parts, part_size)))
        } else {
            self.runtime.block_on(self.put_once(&path, &parts))
        };
        result
            .map(|put| put.e_tag)
            .map_err(|source| Error::Request {
                operation: "cannot write",
                location: self.url(key),
                source: Box::new(source),
            })
    }

    /// A local object written as an [`crate::Upload`]. Like object_store's put, it is written again
    /// (a bounded number of times) when its staging file vanished before the rename: another run
    /// into the same destination removed it as a leftover.
    fn put_local_upload(&self, key: &str, parts: &[Bytes]) -> Result<Option<String>> {
        let mut attempts = 0;
        loop {
            let mut upload = self.upload(key, 0)?;
            upload.append_all(parts)?;
            match upload.finish_versioned(&Bytes::new()) {
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound && attempts < 3 =>
                {
                    attempts += 1;
                }
                result => return result.map(|(_, version)| version),
            }
        }
    }

    /// Writes a small object (a record, a metadata document) with one PUT, as a future on the store's
    /// I/O runtime (to run side by side with other requests inside [`Store::block_on`]). Like
    /// [`Store::put`], the object becomes visible only once complete.
    pub async fn put_small_async(&self, key: &str, data: Bytes) -> Result<()> {
        let path = self.path(key)?;
        self.refuse_link(key)?;
        self.put_once(&path, &[data])
            .await
            .map(|_| ())
            .map_err(|source| Error::Request {
                operation: "cannot write",
                location: self.url(key),
                source: Box::new(source),
            })
    }

    /// The concatenation of `parts` in one PUT, with retries.
    pub(super) async fn put_once(
        &self,
        path: &Path,
        parts: &[Bytes],
    ) -> object_store::Result<PutResult> {
        self.retrying(|| async {
            let mut attempts = 0;
            loop {
                let payload: PutPayload = parts.iter().cloned().collect();
                match self.inner.put(path, payload).await {
                    // Another run into the same destination (same options, which the claim
                    // allows) removed this write's staged file as a leftover before its rename:
                    // write it again. Bounded, so a destination deleted under us still fails.
                    Err(e)
                        if !self.location.is_remote()
                            && staged_file_vanished(&e)
                            && attempts < 3 =>
                    {
                        attempts += 1;
                    }
                    result => return result,
                }
            }
        })
        .await
    }

    /// Uploads `parts` in pieces of at most `part_size`, with a bounded number in flight.
    pub(super) async fn put_multipart(
        &self,
        path: &Path,
        parts: &[Bytes],
        part_size: usize,
    ) -> object_store::Result<PutResult> {
        let upload = self.start_multipart(path).await?;
        let mut writer = object_store::WriteMultipart::new_with_chunk_size(upload, part_size);
        for part in parts {
            let mut offset = 0;
            while offset < part.len() {
                if let Err(e) = writer.wait_for_capacity(self.concurrency.clamp(1, 8)).await {
                    // Do not leave uploaded parts behind (they cost storage and are never visible).
                    let _ = writer.abort().await;
                    return Err(e);
                }
                let end = (offset + part_size).min(part.len());
                writer.put(part.slice(offset..end));
                offset = end;
            }
        }
        writer.finish().await
    }

    /// Removes an object if it exists.
    pub fn delete(&self, key: &str) -> Result<()> {
        self.runtime.block_on(self.delete_async(key))
    }

    /// [`Store::delete`] as a future on the store's I/O runtime (see [`Store::block_on`]).
    pub async fn delete_async(&self, key: &str) -> Result<()> {
        let path = self.path(key)?;
        self.refuse_link(key)?;
        match self.retrying(|| self.inner.delete(&path)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(source) => Err(Error::Request {
                operation: "cannot delete",
                location: self.url(key),
                source: Box::new(source),
            }),
        }
    }

    /// Writes a small object with one PUT (inside the I/O runtime).
    pub(crate) async fn put_async(&self, key: &str, data: Bytes) -> object_store::Result<()> {
        let path = self
            .path(key)
            .and_then(|path| self.refuse_link(key).map(|()| path))
            .map_err(|e| object_store::Error::Generic {
                store: "zshard",
                source: Box::new(e),
            })?;
        self.retrying(|| self.inner.put(&path, PutPayload::from(data.clone())))
            .await
            .map(|_| ())
    }

    /// Whether each of `keys` names an object, up to the configured number of requests in flight;
    /// in the order of `keys`.
    pub fn exist_many(&self, keys: &[String]) -> Result<Vec<bool>> {
        self.runtime.block_on(async {
            futures::stream::iter(keys.iter().map(|key| async move {
                let path = self.path(key)?;
                match self.retrying(|| self.inner.head(&path)).await {
                    Ok(_) => Ok(true),
                    Err(object_store::Error::NotFound { .. }) => Ok(false),
                    Err(source) => Err(Error::Request {
                        operation: "cannot read",
                        location: self.url(key),
                        source: Box::new(source),
                    }),
                }
            }))
            .buffered(self.concurrency.max(1))
            .try_collect()
            .await
        })
    }

    /// The version of each object of `keys` as a listing names it
    /// ([`ListedObject::version`](crate::ListedObject::version): its
    /// ETag, else its modification time), `None` when it does not exist, in the order of `keys`:
    /// one HEAD request each (a `stat` for a local file), up to the configured number in flight.
    ///
    /// Some HTTP servers refuse HEAD (405 Method Not Allowed, which object_store's HTTP store
    /// takes for "not found"; 501) or fail it where a GET works (a URL presigned for GET alone): a
    /// HEAD that fails or finds nothing is followed by a GET of the first byte, whose answer
    /// carries the same ETag and modification time. When that fails too, the HEAD's error (or
    /// "not found") is the answer. (Taking a refused HEAD for a missing file made a changed target
    /// look unchanged: no version then, no version before.)
    pub fn versions_many(&self, keys: &[String]) -> Vec<Result<Option<String>>> {
        let version = |meta: object_store::ObjectMeta| {
            meta.e_tag.unwrap_or_else(|| {
                meta.last_modified
                    .timestamp_nanos_opt()
                    .unwrap_or(0)
                    .to_string()
            })
        };
        self.runtime.block_on(
            futures::stream::iter(keys.iter().map(|key| async move {
                let path = self.path(key)?;
                let fail = |source| Error::Request {
                    operation: "cannot read",
                    location: self.url(key),
                    source: Box::new(source),
                };
                let head = match self.retrying(|| self.inner.head(&path)).await {
                    Ok(meta) => return Ok(Some(version(meta))),
                    // The guard's refusal (see `guard.rs`) would refuse the GET too.
                    Err(head) if crate::guard::refusal_in(Some(&head)).is_some() => {
                        return Err(fail(head))
                    }
                    Err(head) => head,
                };
                let first_byte = || {
                    let options = object_store::GetOptions {
                        range: Some(object_store::GetRange::Bounded(0..1)),
                        ..Default::default()
                    };
                    self.inner.get_opts(&path, options)
                };
                // Missing only when both say so: a GET that fails otherwise after a HEAD taken for
                // "not found" (405) must fail the run, or a changed file would read as unchanged.
                let not_found =
                    |e: &object_store::Error| matches!(e, object_store::Error::NotFound { .. });
                match self.retrying(first_byte).await {
                    Ok(got) => Ok(Some(version(got.meta))),
                    Err(get) if not_found(&head) && not_found(&get) => Ok(None),
                    Err(get) if not_found(&head) => Err(fail(get)),
                    Err(_) => Err(fail(head)),
                }
            }))
            .buffered(self.concurrency.max(1))
            .collect(),
        )
    }

    /// Removes every object of `keys` (those that exist), up to the configured number of requests
    /// in flight.
    pub fn delete_many(&self, keys: &[String]) -> Result<()> {
        self.runtime.block_on(self.delete_many_async(keys))
    }

    /// [`Store::delete_many`] as a future on the store's I/O runtime (see [`Store::block_on`]).
    pub async fn delete_many_async(&self, keys: &[String]) -> Result<()> {
        futures::stream::iter(keys.iter().map(|key| self.delete_async(key)))
            .buffer_unordered(self.concurrency.max(1))
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    /// Copies objects within the store, each `(from, to)` pair up to the configured number of
    /// requests in flight, without the bytes passing through this process: object stores copy on the
    /// server (S3's CopyObject, Azure's Copy Blob, GCS's copy), local folders get a hard link. Each
    /// `to` appears whole or not at all, and is replaced if it exists.
    pub fn copy_many(&self, pairs: &[(String, String)]) -> Result<()> {
        self.runtime.block_on(async {
            futures::stream::iter(pairs.iter().map(|(from, to)| self.copy_async(from, to)))
                .buffer_unordered(self.concurrency.max(1))
                .try_collect::<Vec<()>>()
                .await
        })?;
        Ok(())
    }

    /// Copies the object `from` to `to` (see [`Store::copy_many`]).
    pub(super) async fn copy_async(&self, from: &str, to: &str) -> Result<()> {
        let (source, target) = (self.path(from)?, self.path(to)?);
        self.refuse_link(to)?;
        self.retrying(|| self.inner.copy(&source, &target))
            .await
            .map_err(|source| Error::Request {
                operation: "cannot copy",
                location: format!("{} to {}", self.url(from), self.url(to)),
                source: Box::new(source),
            })
    }

    /// [`Store::get_many`] as a future on the store's I/O runtime (see [`Store::block_on`]); local
    /// files are read through the object store API here, off the calling thread.
    pub async fn get_many_async(&self, keys: &[String]) -> Vec<Result<Option<Bytes>>> {
        futures::stream::iter(keys.iter().map(|k| self.get_async(k)))
            .buffered(self.concurrency.max(1))
            .collect()
            .await
    }

    /// Writes several small objects (see [`Store::put_small_async`]) side by side, up to the
    /// configured number of requests in flight.
    pub async fn put_many_async(&self, objects: &[(String, Bytes)]) -> Result<()> {
        futures::stream::iter(
            objects
                .iter()
                .map(|(key, data)| self.put_small_async(key, data.clone())),
        )
        .buffer_unordered(self.concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
        Ok(())
    }

    /// Writes an object only if no object exists under its key, atomically (local files: a hard link
    /// of the complete file; object stores: a conditional PUT, `If-None-Match: *` on S3). Two callers
    /// racing for one key cannot both get [`PutNew::Created`].
    pub fn put_new(&self, key: &str, data: Bytes) -> Result<PutNew> {
        self.runtime.block_on(self.put_new_async(key, data))
    }

    /// [`Store::put_new`] as a future on the store's I/O runtime (see [`Store::block_on`]).
    pub async fn put_new_async(&self, key: &str, data: Bytes) -> Result<PutNew> {
        let path = self.path(key)?;
        self.refuse_link(key)?;
        let options = PutOptions::from(PutMode::Create);
        let result = self
            .retrying(|| {
                self.inner
                    .put_opts(&path, PutPayload::from_bytes(data.clone()), options.clone())
            })
            .await;
        match result {
            Ok(_) => Ok(PutNew::Created),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(PutNew::Exists),
            Err(object_store::Error::NotImplemented { .. }) => Ok(PutNew::Unsupported),
            Err(source) => Err(Error::Request {
                operation: "cannot write",
                location: self.url(key),
                source: Box::new(source),
            }),
        }
    }
}
