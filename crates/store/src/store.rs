use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::local::LocalFileSystem;
use object_store::multipart::MultipartStore;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, PutResult};

use crate::error::{Error, Result};
use crate::guard::HttpGuard;
use crate::location::Location;
use crate::multipart::UploadRecords;
use crate::runtime::IoRuntime;

/// An object found by [`Store::list_objects`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedObject {
    /// Its key, relative to the store.
    pub key: String,
    /// Its length in bytes.
    pub size: u64,
    /// What changes whenever the object is written again: its ETag (a local file's inode,
    /// modification time and size; an S3 object's content digest), else its modification time.
    pub version: String,
    /// When it was last written, in milliseconds since the Unix epoch (0 when before it).
    pub modified_ms: u64,
}

/// A location in some object store (a local directory, a bucket prefix) with synchronous helpers
/// that run on the shared [`IoRuntime`]. Keys are `/`-separated and relative to the location.
#[derive(Clone)]
pub struct Store {
    pub(crate) inner: Arc<dyn ObjectStore>,
    /// `inner` as a [`MultipartStore`] (cloud stores), whose upload ids can be recorded and aborted.
    pub(crate) multipart: Option<Arc<dyn MultipartStore>>,
    /// Where multipart uploads are recorded (see `multipart.rs`), if they are.
    pub(crate) records: Option<Arc<UploadRecords>>,
    /// The prefix of this store's keys in `inner` (empty for a local store as opened: its
    /// `LocalFileSystem` is rooted at the folder).
    pub(crate) root: Path,
    /// Where this store is: messages name keys below it, and local stores read files below it directly.
    location: Location,
    /// For a local store, the folder it was opened at (kept by its children): a removal never goes
    /// through a symbolic link below it (see [`Store::first_link`]).
    opened_folder: Option<PathBuf>,
    pub(crate) runtime: Arc<IoRuntime>,
    concurrency: usize,
    /// Whether the keys are members of a zip file (`location` is the file): no key is a file of its
    /// own, so local stores' direct file reads do not apply.
    zip: bool,
    /// Objects read ahead side by side (see [`Store::read_ahead`]), by their path in `inner`;
    /// shared by the store's clones and children.
    read_ahead: Arc<Mutex<HashMap<String, Option<Bytes>>>>,
    /// Local writes skip the fsync before their rename (see [`Store::deferring_sync`]).
    pub(crate) deferred_sync: bool,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("location", &self.location)
            .field("root", &self.root)
            .field("records", &self.records)
            .field("concurrency", &self.concurrency)
            .field("zip", &self.zip)
            .finish()
    }
}

impl Store {
    /// Opens a location given as text (see [`Location::parse`] and [`Store::open_location`]).
    pub fn open(location: &str, runtime: Arc<IoRuntime>, create: bool) -> Result<Store> {
        Self::open_location(&Location::parse(location)?, runtime, create)
    }

    /// Opens a location: a local path or `file://` URL, or `s3://`, `gs://`, `az://`/`abfs://`,
    /// `http(s)://` (read only) with the runtime's [`StoreOptions`](crate::StoreOptions). With
    /// `create`, a missing local directory is created. Without it, a zip file (see
    /// [`Location::is_zip`]; a local folder of that name stays a folder, and so does an object store
    /// prefix where no such object exists) opens as the read-only store of its members.
    pub fn open_location(
        location: &Location,
        runtime: Arc<IoRuntime>,
        create: bool,
    ) -> Result<Store> {
        if !create && location.is_zip() {
            if let Some(store) = Self::open_zip(location, &runtime)? {
                return Ok(store);
            }
        }
        let (inner, multipart, root) = match (location.local_path(), location.url()) {
            (Some(path), _) => (
                Self::open_local(path, location, create)?,
                None,
                Path::default(),
            ),
            (None, Some(url)) => crate::cloud::open(url, runtime.options())?,
            // A location is local or has a URL.
            (None, None) => {
                return Err(Error::InvalidLocation {
                    location: location.to_string(),
                    reason: "neither a path nor a URL".into(),
                })
            }
        };
        Ok(Store {
            inner,
            multipart,
            records: None,
            root,
            location: location.clone(),
            opened_folder: location.local_path().map(FsPath::to_path_buf),
            concurrency: runtime.options().max_requests,
            runtime,
            zip: false,
            read_ahead: Default::default(),
            deferred_sync: false,
        })
    }

    /// The store of the members of the zip file at `location`, read through the store of its
    /// folder; `None` when there is no such file (a folder, or no object of that name).
    fn open_zip(location: &Location, runtime: &Arc<IoRuntime>) -> Result<Option<Store>> {
        let (parent, name) = location.split_last();
        let folder = match location.local_path() {
            Some(path) if !path.is_file() => return Ok(None),
            Some(path) => Location::from_path(match path.parent() {
                Some(dir) if !dir.as_os_str().is_empty() => dir,
                _ => FsPath::new("."),
            }),
            None => Location::parse(&parent)?,
        };
        let folder = Self::open_location(&folder, runtime.clone(), false)?;
        let file = folder.path(&name)?;
        let fail = |source| Error::Request {
            operation: "cannot read",
            location: location.to_string(),
            source: Box::new(source),
        };
        let head = runtime.block_on(folder.retrying(|| folder.inner.head(&file)));
        let size = match head {
            Ok(meta) => meta.size,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(fail(e)),
        };
        let read = |range: std::ops::Range<u64>| {
            runtime
                .block_on(folder.retrying(|| folder.inner.get_range(&file, range.clone())))
                .map_err(fail)
        };
        let zip = crate::zip::ZipStore::new(
            folder.inner.clone(),
            file.clone(),
            location.as_str(),
            size,
            read,
        )?;
        Ok(Some(Store {
            inner: Arc::new(zip),
            multipart: None,
            records: None,
            root: Path::default(),
            location: location.clone(),
            opened_folder: None,
            concurrency: runtime.options().max_requests,
            runtime: runtime.clone(),
            zip: true,
            read_ahead: Default::default(),
            deferred_sync: false,
        }))
    }

    /// Opens a location as [`Store::open`] does (never creating it), except that an `http(s)://`
    /// store connects and follows redirects only as `guard` allows (for untrusted URLs).
    pub fn open_guarded(
        location: &str,
        runtime: Arc<IoRuntime>,
        guard: Arc<dyn HttpGuard>,
    ) -> Result<Store> {
        let parsed = Location::parse(location)?;
        match parsed.url() {
            Some(url) if matches!(url.scheme(), "http" | "https") => {
                let (inner, root) = crate::cloud::http(url, runtime.options(), Some(guard))?;
                Ok(Store {
                    inner,
                    root,
                    location: parsed.clone(),
                    opened_folder: None,
                    concurrency: runtime.options().max_requests,
                    runtime,
                    multipart: None,
                    records: None,
                    zip: false,
                    read_ahead: Default::default(),
                    deferred_sync: false,
                })
            }
            _ => Self::open_location(&parsed, runtime, false),
        }
    }

    fn open_local(
        path: &FsPath,
        location: &Location,
        create: bool,
    ) -> Result<Arc<dyn ObjectStore>> {
        if create {
            std::fs::create_dir_all(path).map_err(|source| Error::CreateDir {
                location: location.to_string(),
                source,
            })?;
        } else if !path.is_dir() {
            return Err(Error::InvalidLocation {
                location: location.to_string(),
                reason: "no such directory".into(),
            });
        }
        // fsync before the rename that publishes an object: after a power loss or node crash, a key is
        // either absent or complete, never an empty or short file (which a rerun would take as done).
        let fs = LocalFileSystem::new_with_prefix(path)
            // Deleting a key also removes folders it leaves empty, as on an object store.
            .map(|fs| fs.with_fsync(true).with_automatic_cleanup(true))
            .map_err(|source| Error::Request {
                operation: "open",
                location: location.to_string(),
                source: Box::new(source),
            })?;
        Ok(Arc::new(fs))
    }

    /// Where this store is (for a [`child`](Store::child), the parent's location joined with the
    /// subpath).
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Whether this store reads the members of a zip file (a location named `.zip` or `.ozx` that
    /// is no file or object is read as a folder instead).
    pub fn is_zip(&self) -> bool {
        self.zip
    }

    /// For a local store, the path of key `key`'s file (or folder).
    pub fn local_path(&self, key: &str) -> Option<PathBuf> {
        if self.zip {
            return None;
        }
        self.location
            .join(key)
            .local_path()
            .map(FsPath::to_path_buf)
    }

    /// The same store limited to `subpath` below this location.
    pub fn child(&self, subpath: &str) -> Store {
        // The same parsing as keys get (`path`): escaping here but not there would put an array named
        // `t[K]` under one prefix and its chunks under another.
        let root = self.path(subpath).unwrap_or_else(|_| {
            // Only `.` and `..` fail to parse; they are not valid node names, so keep them inert.
            subpath
                .split('/')
                .filter(|p| !p.is_empty())
                .fold(self.root.clone(), |root, part| root.join(part))
        });
        Store {
            root,
            location: self.location.join(subpath),
            ..self.clone()
        }
    }

    /// This store with local writes that skip their own fsync before the rename that publishes
    /// them (group commit): a crash of the process leaves every published key complete, as before,
    /// but after a power loss or node crash a key published since the last [`Store::checkpoint`]
    /// can be empty or short, so the caller must record which keys a checkpoint covers and check
    /// the others before trusting them. Object stores (and zip members) are returned unchanged:
    /// what they publish is durable.
    pub fn deferring_sync(&self) -> Result<Store> {
        let Some(folder) = self.opened_folder.as_deref().filter(|_| !self.zip) else {
            return Ok(self.clone());
        };
        let fs = LocalFileSystem::new_with_prefix(folder)
            .map(|fs| fs.with_fsync(false).with_automatic_cleanup(true))
            .map_err(|source| Error::Request {
                operation: "open",
                location: self.location.to_string(),
                source: Box::new(source),
            })?;
        Ok(Store {
            inner: Arc::new(fs),
            deferred_sync: true,
            ..self.clone()
        })
    }

    /// Makes every local write published so far durable, with one `syncfs` of the filesystem
    /// holding this store's folder (a checkpoint: one call instead of an fsync per key written
    /// through [`Store::deferring_sync`]). Nothing to do for object stores.
    pub fn checkpoint(&self) -> Result<()> {
        let Some(folder) = self.opened_folder.as_deref().filter(|_| !self.zip) else {
            return Ok(());
        };
        let synced =
            File::open(folder).and_then(|dir| rustix::fs::syncfs(&dir).map_err(Into::into));
        synced.map_err(|source| Error::Io {
            operation: "cannot sync",
            location: folder.display().to_string(),
            source,
        })
    }

    /// How many requests this store keeps in flight at most (see [`Store::with_concurrency`]):
    /// also the bound for callers that run many of its operations side by side.
    pub fn concurrency(&self) -> usize {
        self.concurrency.max(1)
    }

    /// Limits how many requests one batch keeps in flight.
    pub fn with_concurrency(mut self, concurrency: usize) -> Store {
        self.concurrency = concurrency.max(1);
        self
    }

    /// The full location of a key, for messages: the location without trailing `/`, then the key.
    pub fn url(&self, key: &str) -> String {
        self.location
            .join(key)
            .as_str()
            .trim_end_matches('/')
            .to_string()
    }

    /// Runs a request with retries of transient failures (see `retry.rs`).
    pub(crate) async fn retrying<T, F, Fut>(&self, operation: F) -> object_store::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = object_store::Result<T>>,
    {
        crate::retry::with_retries(
            self.runtime.options(),
            self.runtime.retry_counter(),
            operation,
        )
        .await
    }

    pub(crate) fn path(&self, key: &str) -> Result<Path> {
        let mut path = self.root.clone();
        for part in key.split('/').filter(|p| !p.is_empty()) {
            let segment =
                object_store::path::PathPart::parse(part).map_err(|e| Error::InvalidLocation {
                    location: self.url(key),
                    reason: e.to_string(),
                })?;
            path = path.clone().join(segment);
        }
        Ok(path)
    }

    /// [`Store::get`] as a future on the store's I/O runtime (to run side by side with other
    /// requests inside [`Store::block_on`]).
    pub async fn get_async(&self, key: &str) -> Result<Option<Bytes>> {
        self.get_bounded_async(key, u64::MAX).await
    }

    /// [`Store::get_async`], refusing an object longer than `max` bytes ([`Error::TooLarge`]) before
    /// reading more than `max + 1` bytes of it (see [`Store::get_many_bounded`]).
    async fn get_bounded_async(&self, key: &str, max: u64) -> Result<Option<Bytes>> {
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
        if self.zip && max < u64::MAX {
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

    /// Reads `keys` side by side (one round trip on an object store) and keeps what was found, or
    /// that nothing was, for the first [`Store::get`] of each (then forgotten): for the few small
    /// documents a reader looks for one after another, each depending on whether the one before
    /// exists (a format's detection, a hierarchy's root metadata). A key that fails to be read is
    /// not kept, so its `get` reads it again and reports the failure. Does nothing for local files.
    pub fn read_ahead(&self, keys: &[&str]) {
        if !self.location.is_remote() {
            return;
        }
        let keys: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let read = self.get_many(&keys);
        let Ok(mut kept) = self.read_ahead.lock() else {
            return;
        };
        for (key, found) in keys.iter().zip(read) {
            if let (Ok(path), Ok(found)) = (self.path(key), found) {
                kept.insert(path.to_string(), found);
            }
        }
    }

    /// What [`Store::read_ahead`] kept for `key`, without taking it (the first [`Store::get`] still
    /// finds it there): `None` when nothing was kept, `Some(None)` when the key was found missing.
    /// For a probe that looks at a document before the reader that reads it.
    pub fn read_ahead_peek(&self, key: &str) -> Option<Option<Bytes>> {
        let path = self.path(key).ok()?;
        self.read_ahead.lock().ok()?.get(path.as_ref()).cloned()
    }

    /// What [`Store::read_ahead`] kept for `path`, if anything (taken: a second read goes to the
    /// store).
    fn read_ahead_of(&self, path: &Path) -> Option<Option<Bytes>> {
        let mut kept = self.read_ahead.lock().ok()?;
        if kept.is_empty() {
            return None;
        }
        kept.remove(path.as_ref())
    }

    /// Reads a whole object; `None` when it does not exist.
    pub fn get(&self, key: &str) -> Result<Option<Bytes>> {
        self.runtime.block_on(self.get_async(key))
    }

    async fn get_range_async(&self, key: &str, range: std::ops::Range<u64>) -> Result<Bytes> {
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
        let get = |range: object_store::GetRange| {
            self.retrying(move || {
                let options = object_store::GetOptions {
                    range: Some(range.clone()),
                    ..Default::default()
                };
                async move { self.inner.get_opts(path, options).await?.bytes().await }
            })
        };
        let read = self.runtime.block_on(async {
            match get(range).await {
                // Azure has no suffix ranges: the size first, then the range.
                Err(object_store::Error::NotSupported { .. }) if from_end => {
                    let size = self.retrying(|| self.inner.head(path)).await?.size;
                    get(object_store::GetRange::Bounded(
                        size.saturating_sub(len)..size,
                    ))
                    .await
                }
                other => other,
            }
        });
        match read {
            Ok(bytes) => Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(fail(e)),
        }
    }

    fn read_local_edge(
        &self,
        file: &FsPath,
        key: &str,
        len: u64,
        from_end: bool,
    ) -> Result<Option<Bytes>> {
        let fail = |source| Error::Io {
            operation: "cannot read",
            location: self.url(key),
            source,
        };
        let mut file = match open_regular(file) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(fail(e)),
        };
        let size = file.metadata().map_err(fail)?.len();
        let start = if from_end {
            size.saturating_sub(len)
        } else {
            0
        };
        file.seek(SeekFrom::Start(start)).map_err(fail)?;
        let mut data = Vec::new();
        file.take(len).read_to_end(&mut data).map_err(fail)?;
        Ok(Some(Bytes::from(data)))
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

    // Local batches are read with plain file reads on the calling thread (a fetch thread). Through
    // the object store API every file became a task on tokio's blocking pool: two thread hand-offs
    // per chunk, which on W1 (4,096 chunk files) was ~95,000 futex calls and a fifth of the CPU time.
    // Reads of one batch then run one after another; more fetch threads (`--io-threads`) give more
    // reads in flight, which parallel file systems with a high per-file latency want.

    /// For a local folder, refuses a key that is a FIFO, device or socket (see [`open_regular`])
    /// before object_store opens it; a missing key or a folder is left to the read (none found).
    fn refuse_special_file(&self, key: &str) -> Result<()> {
        let Some(file) = self.local_path(key).filter(|_| self.reads_files()) else {
            return Ok(());
        };
        match std::fs::metadata(&file) {
            Ok(meta) if !meta.is_file() && !meta.is_dir() => Err(Error::Io {
                operation: "cannot read",
                location: self.url(key),
                source: not_a_regular_file(),
            }),
            _ => Ok(()),
        }
    }

    /// Whether keys are read as files directly (a local folder, not a zip).
    fn reads_files(&self) -> bool {
        self.location.is_local() && !self.zip
    }

    /// Reads a whole local file; `None` when it does not exist. A file longer than `max` bytes is
    /// refused by its size, and at most `max + 1` bytes are read in case it grows meanwhile.
    fn read_local(&self, key: &str, max: u64) -> Result<Option<Bytes>> {
        self.path(key)?;
        let Some(file) = self.local_path(key) else {
            return Ok(None);
        };
        let read = open_regular(&file).and_then(|f| {
            let size = f.metadata()?.len();
            if size > max {
                return Ok(Err((size, false)));
            }
            // Reserved at the stated size (at most `max`), so that reading does not grow the buffer.
            let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            f.take(max.saturating_add(1)).read_to_end(&mut data)?;
            if data.len() as u64 > max {
                return Ok(Err((data.len() as u64, true)));
            }
            Ok(Ok(data))
        });
        match read {
            Ok(Ok(data)) => Ok(Some(Bytes::from(data))),
            Ok(Err((len, at_least))) => Err(Error::TooLarge {
                location: self.url(key),
                len,
                at_least,
                max,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Error::Io {
                operation: "cannot read",
                location: self.url(key),
                source,
            }),
        }
    }

    /// Reads bytes `range` of a local file, keeping the last file open for the next range of it.
    fn read_local_range<'k>(
        &self,
        open: &mut Option<(&'k str, File)>,
        key: &'k str,
        range: std::ops::Range<u64>,
    ) -> Result<Bytes> {
        let fail = |source| Error::Io {
            operation: "cannot read",
            location: format!("{} (bytes {}..{})", self.url(key), range.start, range.end),
            source,
        };
        self.path(key)?;
        if open.as_ref().is_none_or(|(k, _)| *k != key) {
            let path = self
                .local_path(key)
                .ok_or_else(|| fail(std::io::ErrorKind::NotFound.into()))?;
            *open = Some((key, open_regular(&path).map_err(fail)?));
        }
        let Some((_, file)) = open.as_mut() else {
            return Err(fail(std::io::ErrorKind::NotFound.into()));
        };
        let len = range.end.saturating_sub(range.start);
        file.seek(SeekFrom::Start(range.start)).map_err(fail)?;
        // `take` + `read_to_end` fills the buffer without zeroing it first.
        let mut data = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
        file.take(len).read_to_end(&mut data).map_err(fail)?;
        if data.len() as u64 != len {
            return Err(fail(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("the file ends after {} of these bytes", data.len()),
            )));
        }
        Ok(Bytes::from(data))
    }

    /// Multipart part size (object stores refuse parts under 5 MiB but the last).
    pub(crate) fn part_size(&self) -> usize {
        self.runtime.options().part_size.max(5 << 20)
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
    /// [`ListedObject::version`] shows it in listings), when it names one.
    pub fn put_parts_versioned(&self, key: &str, parts: Vec<Bytes>) -> Result<Option<String>> {
        let path = self.path(key)?;
        self.refuse_link(key)?;
        let part_size = self.part_size();
        let total: usize = parts.iter().map(Bytes::len).sum();
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
    async fn put_once(&self, path: &Path, parts: &[Bytes]) -> object_store::Result<PutResult> {
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

    /// Runs `future` (requests of this store and others made side by side, e.g. with
    /// `futures::join!`) to completion on the I/O runtime, from a thread outside it: requests that do
    /// not depend on each other then cost one round trip together instead of one each.
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// Uploads `parts` in pieces of at most `part_size`, with a bounded number in flight.
    async fn put_multipart(
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

    /// Keys (relative to this store) of the staged files of interrupted local writes below `prefix`.
    ///
    /// The local backend writes each key `K` to a staged file `K#<n>` (`n` decimal, from 1), fsyncs it
    /// and renames it to `K`; a process killed in between leaves `K#<n>` behind. Object store listings
    /// hide such files, so they are found on disk. Object stores have none (an unfinished upload is
    /// never visible), so this is empty for them.
    pub fn staged_keys(&self, prefix: &str) -> Result<Vec<String>> {
        let Some(root) = self.local_path("") else {
            return Ok(Vec::new());
        };
        let mut staged = Vec::new();
        let mut stack = vec![root.join(prefix)];
        while let Some(dir) = stack.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                // A prefix naming a file (a key, not a folder) has no staged files below it.
                Err(_) if dir.is_file() => continue,
                Err(source) => {
                    return Err(Error::Io {
                        operation: "cannot list",
                        location: dir.display().to_string(),
                        source,
                    })
                }
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push(path);
                } else if let Ok(relative) = path.strip_prefix(&root) {
                    let key = relative
                        .to_string_lossy()
                        .replace(std::path::MAIN_SEPARATOR, "/");
                    if staged_base(&key).is_some() {
                        staged.push(key);
                    }
                }
            }
        }
        staged.sort();
        Ok(staged)
    }

    /// Removes the staged files of interrupted local writes of `key` (`key#<n>`, see
    /// [`Store::staged_keys`]), so that writing `key` again leaves nothing else behind.
    pub fn remove_staged_of(&self, key: &str) -> Result<()> {
        let Some(file) = self.local_path(key) else {
            return Ok(());
        };
        self.refuse_link(key)?;
        let (Some(dir), Some(name)) = (file.parent(), file.file_name()) else {
            return Ok(());
        };
        let name = name.to_string_lossy();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let entry_name = entry.file_name();
            if staged_base(&entry_name.to_string_lossy()) == Some(name.as_ref()) {
                self.remove_local_file(&entry.path())?;
            }
        }
        Ok(())
    }

    /// Removes every staged file of an interrupted local write below `prefix` (see
    /// [`Store::staged_keys`]) and the folders that leaves empty; nothing else is touched.
    pub fn remove_staged_below(&self, prefix: &str) -> Result<()> {
        let Some(root) = self.local_path("") else {
            return Ok(());
        };
        for key in self.staged_keys(prefix)? {
            let file = root.join(&key);
            self.remove_local_file(&file)?;
            // As `delete` does for a key: folders left empty go too (`remove_dir` keeps non-empty ones).
            let mut dir = file.parent();
            while let Some(d) = dir.filter(|d| *d != root && d.starts_with(&root)) {
                if std::fs::remove_dir(d).is_err() {
                    break;
                }
                dir = d.parent();
            }
        }
        Ok(())
    }

    /// Removes the empty local folders below `prefix` and `prefix` itself when it ends up empty (a
    /// process killed between deleting a folder's last key and the folder leaves it); folders holding
    /// anything are kept. Never the store's own folder.
    pub fn remove_empty_folders(&self, prefix: &str) -> Result<()> {
        fn prune(dir: &FsPath) {
            if let Ok(entries) = std::fs::read_dir(dir) {
                for entry in entries.flatten() {
                    if entry.file_type().is_ok_and(|t| t.is_dir()) {
                        prune(&entry.path());
                    }
                }
            }
            // Fails, and so keeps the folder, unless it is empty.
            let _ = std::fs::remove_dir(dir);
        }
        if let (Some(root), Some(dir)) = (self.local_path(""), self.local_path(prefix)) {
            let linked = self.first_link(prefix).is_some();
            if !linked && dir != root && dir.starts_with(&root) && dir.is_dir() {
                prune(&dir);
            }
        }
        Ok(())
    }

    fn remove_local_file(&self, file: &FsPath) -> Result<()> {
        match std::fs::remove_file(file) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::Io {
                operation: "cannot remove",
                location: file.display().to_string(),
                source,
            }),
        }
    }

    /// For a local store, the first symbolic link on the way from the folder the store was opened
    /// at to `key`'s file: a linked folder, or the file itself. `None` for other stores, and where
    /// the path ends before `key` (nothing there yet).
    pub fn first_link(&self, key: &str) -> Option<PathBuf> {
        let opened = self.opened_folder.as_deref()?;
        let target = self.local_path(key)?;
        let relative = target.strip_prefix(opened).ok()?;
        let mut path = opened.to_path_buf();
        for component in relative.components() {
            path.push(component);
            match std::fs::symlink_metadata(&path) {
                Ok(meta) if meta.file_type().is_symlink() => return Some(path),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    }

    /// Refuses a key that goes through a symbolic link (see [`Store::first_link`]): every removal
    /// and write of a local store checks it, so nothing outside the store's folder is changed.
    pub(crate) fn refuse_link(&self, key: &str) -> Result<()> {
        match self.first_link(key) {
            Some(link) => Err(Error::ThroughLink {
                location: self.url(key),
                link,
            }),
            None => Ok(()),
        }
    }

    /// Every key below `prefix` with its size, as [`Store::list_sizes`], except that a local store's
    /// listing does not follow symbolic links: a link (to a file or a folder) and whatever it
    /// leads to are not keys of this store. What `--overwrite` may remove comes from this listing.
    pub fn list_sizes_without_links(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        self.runtime
            .block_on(self.list_sizes_without_links_async(prefix))
    }

    /// [`Store::list_sizes_without_links`] as a future on the store's I/O runtime (see
    /// [`Store::block_on`]); a local folder is walked on the calling thread.
    pub async fn list_sizes_without_links_async(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        // `local_path` is `None` for object stores and zip files, which have no links.
        match (self.local_path(""), self.local_path(prefix)) {
            (Some(base), Some(start)) => self.walk_without_links(&base, &start, prefix),
            _ => self.list_sizes_async(prefix).await,
        }
    }

    /// The files below `start` (the folder of `prefix`) as keys relative to `base` (this store's
    /// folder), never through a symbolic link.
    fn walk_without_links(
        &self,
        base: &FsPath,
        start: &FsPath,
        prefix: &str,
    ) -> Result<Vec<(String, u64)>> {
        if self.first_link(prefix).is_some() {
            return Ok(Vec::new());
        }
        let absolute = |p: &FsPath| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let base =
            Path::from_absolute_path(absolute(base)).map_err(|e| Error::InvalidLocation {
                location: self.url(""),
                reason: e.to_string(),
            })?;
        let mut listed = Vec::new();
        // The walk's root is followed when it is a link (the store's own folder may be one).
        for entry in walkdir::WalkDir::new(absolute(start))
            .min_depth(1)
            .follow_links(false)
        {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e)
                    if e.io_error().map(std::io::Error::kind)
                        == Some(std::io::ErrorKind::NotFound) =>
                {
                    continue
                }
                Err(e) => {
                    return Err(Error::Io {
                        operation: "cannot list",
                        location: self.url(prefix),
                        source: e.into(),
                    })
                }
            };
            if !entry.file_type().is_file() {
                continue;
            }
            let name = entry.file_name().to_string_lossy();
            if staged_base(&name).is_some() {
                continue;
            }
            let Ok(path) = Path::from_absolute_path(entry.path()) else {
                continue;
            };
            let Some(parts) = path.prefix_match(&base) else {
                continue;
            };
            let key = parts
                .map(|p| p.as_ref().to_string())
                .collect::<Vec<_>>()
                .join("/");
            let size = entry.metadata().map(|m| m.len()).unwrap_or(0);
            listed.push((key, size));
        }
        listed.sort();
        Ok(listed)
    }

    /// The error of a failed listing of `prefix`: a name no key can hold is named as such.
    fn list_error(&self, prefix: &str, source: object_store::Error) -> Error {
        match source {
            object_store::Error::InvalidPath {
                source:
                    object_store::path::Error::BadSegment { path, .. }
                    | object_store::path::Error::NonUnicode { path, .. },
            } => Error::UnusableName {
                location: self.url(prefix),
                name: path.trim_start_matches('/').to_string(),
            },
            source => Error::Request {
                operation: "cannot list",
                location: self.url(prefix),
                source: Box::new(source),
            },
        }
    }

    /// Names of the immediate "subdirectories" of `prefix` (common prefixes of keys below it).
    pub fn list_children(&self, prefix: &str) -> Result<Vec<String>> {
        let path = self.path(prefix)?;
        let listing = self
            .runtime
            .block_on(self.retrying(|| self.inner.list_with_delimiter(Some(&path))))
            .map_err(|source| self.list_error(prefix, source))?;
        let mut names: Vec<String> = listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Every key below `prefix`, relative to this store (used by tests and checks, never on the hot path).
    pub fn list_keys(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self
            .list_sizes(prefix)?
            .into_iter()
            .map(|(key, _)| key)
            .collect())
    }

    /// Every key below `prefix` with its object's size in bytes, sorted by key: one listing, no
    /// request per object.
    pub fn list_sizes(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        self.list_sizes_split(prefix, &[])
    }

    /// [`Store::list_sizes`], the listing of an object store cut at `splits` (keys below `prefix`,
    /// in any order) into segments listed concurrently. An object store lists a page of keys per
    /// request and each page names the next, so one listing of many keys pays the latency once per
    /// page in series; segments that start after a known key (S3's `start-after`) are listed side
    /// by side. Splits only change how the listing is cut, never what it finds.
    pub fn list_sizes_split(&self, prefix: &str, splits: &[String]) -> Result<Vec<(String, u64)>> {
        self.runtime
            .block_on(self.list_sizes_split_async(prefix, splits))
    }

    /// [`Store::list_sizes`] as a future on the store's I/O runtime (see [`Store::block_on`]).
    pub async fn list_sizes_async(&self, prefix: &str) -> Result<Vec<(String, u64)>> {
        self.list_sizes_split_async(prefix, &[]).await
    }

    /// [`Store::list_sizes_split`] as a future on the store's I/O runtime (see [`Store::block_on`]).
    pub async fn list_sizes_split_async(
        &self,
        prefix: &str,
        splits: &[String],
    ) -> Result<Vec<(String, u64)>> {
        let objects = self.list_objects_split_async(prefix, splits).await?;
        Ok(objects.into_iter().map(|o| (o.key, o.size)).collect())
    }

    /// The objects below `prefix` with their sizes and versions, sorted by key; the listing cut at
    /// `splits` as [`Store::list_sizes_split`] cuts it.
    pub async fn list_objects_split_async(
        &self,
        prefix: &str,
        splits: &[String],
    ) -> Result<Vec<ListedObject>> {
        let path = self.path(prefix)?;
        // A local folder: one file system call per file, subfolders side by side (local_list.rs).
        if let Some(base) = self.local_path("").filter(|_| !self.location.is_remote()) {
            if let Some(objects) = crate::local_list::list(base, prefix, self.concurrency).await {
                return Ok(objects);
            }
        }
        let mut bounds: Vec<Path> = Vec::new();
        if self.location.is_remote() {
            for key in splits {
                let split = self.path(key)?;
                if split.as_ref().starts_with(path.as_ref()) {
                    bounds.push(split);
                }
            }
        }
        bounds.sort_by(|a, b| a.as_ref().cmp(b.as_ref()));
        bounds.dedup();
        let listed = {
            // Segment i holds the keys in (bounds[i - 1], bounds[i]]: the first has no lower bound,
            // the last no upper one.
            let path = &path;
            let bounds = &bounds;
            let segments = (0..=bounds.len()).map(|i| {
                let after = i.checked_sub(1).map(|j| &bounds[j]);
                let until = bounds.get(i);
                self.retrying(move || self.list_segment(path, after, until))
            });
            futures::stream::iter(segments)
                .buffer_unordered(self.concurrency.max(1))
                .try_concat()
                .await
        };
        let metas = listed.map_err(|source| self.list_error(prefix, source))?;
        let mut objects: Vec<ListedObject> = metas
            .into_iter()
            .filter_map(|m| {
                Some(ListedObject {
                    key: self.key_of(&m.location)?,
                    size: m.size,
                    modified_ms: u64::try_from(m.last_modified.timestamp_millis()).unwrap_or(0),
                    version: m.e_tag.unwrap_or_else(|| {
                        m.last_modified
                            .timestamp_nanos_opt()
                            .unwrap_or(0)
                            .to_string()
                    }),
                })
            })
            .collect();
        // Segments do not overlap (offsets are exclusive); a key listed twice, rewritten while it was
        // being listed, is one object.
        objects.sort_by(|a, b| a.key.cmp(&b.key));
        objects.dedup_by(|a, b| a.key == b.key);
        Ok(objects)
    }

    /// The key (relative to this store) of an object path of the inner store; `None` outside it.
    fn key_of(&self, location: &Path) -> Option<String> {
        location.prefix_match(&self.root).map(|parts| {
            parts
                .map(|p| p.as_ref().to_string())
                .collect::<Vec<_>>()
                .join("/")
        })
    }

    /// [`Store::list_objects`] as a future on the store's I/O runtime (see [`Store::block_on`]).
    pub async fn list_objects_async(&self, prefix: &str) -> Result<Vec<ListedObject>> {
        self.list_objects_split_async(prefix, &[]).await
    }

    /// The objects below `prefix` with their sizes and versions, sorted by key.
    pub fn list_objects(&self, prefix: &str) -> Result<Vec<ListedObject>> {
        self.list_objects_split(prefix, &[])
    }

    /// [`Store::list_objects`], the listing cut at `splits` as [`Store::list_sizes_split`] cuts it.
    pub fn list_objects_split(&self, prefix: &str, splits: &[String]) -> Result<Vec<ListedObject>> {
        self.runtime
            .block_on(self.list_objects_split_async(prefix, splits))
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

    /// The objects below `path` after the key `after` (if any) up to and including `until` (if
    /// any); the listing stops at the first page past `until`.
    async fn list_segment(
        &self,
        path: &Path,
        after: Option<&Path>,
        until: Option<&Path>,
    ) -> object_store::Result<Vec<object_store::ObjectMeta>> {
        let mut stream = match after {
            Some(after) => self.inner.list_with_offset(Some(path), after),
            None => self.inner.list(Some(path)),
        };
        let mut out = Vec::new();
        while let Some(meta) = stream.try_next().await? {
            if until.is_some_and(|u| meta.location.as_ref() > u.as_ref()) {
                break;
            }
            // The segment's last key: asking for the next page would only find the next segment's.
            let last = until.is_some_and(|u| meta.location.as_ref() == u.as_ref());
            out.push(meta);
            if last {
                break;
            }
        }
        Ok(out)
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
    async fn copy_async(&self, from: &str, to: &str) -> Result<()> {
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

/// What [`Store::put_new`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutNew {
    /// The object was written: no object existed under its key.
    Created,
    /// An object existed under the key (written by someone else, or by an earlier attempt of this
    /// request that was retried); nothing was written.
    Exists,
    /// The store cannot write conditionally; nothing was written.
    Unsupported,
}

/// Whether a local write failed because its staged file was gone at the rename (the io error below
/// object_store's is `NotFound`).
fn staged_file_vanished(e: &object_store::Error) -> bool {
    let mut link: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = link {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::NotFound;
        }
        link = error.source();
    }
    false
}

/// Opens a local file to read, refusing anything but a regular file (a link to one is followed): a
/// FIFO would block the read until a writer comes (no signal stops it), a device such as
/// `/dev/zero` never ends, and neither is data a store holds.
fn open_regular(path: &FsPath) -> std::io::Result<File> {
    if !std::fs::metadata(path)?.is_file() {
        return Err(not_a_regular_file());
    }
    File::open(path)
}

fn not_a_regular_file() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        "not a regular file (a FIFO, device, socket or folder); only files are read",
    )
}

/// For the name (or key) of a staged file of an interrupted local write, `<base>#<n>` with `n` decimal,
/// the name it was being written to; `None` for any other name. This is the one pattern of staged
/// files (the local backend's, see [`Store::staged_keys`]); nothing else is ever removed as one.
pub fn staged_base(name: &str) -> Option<&str> {
    let (base, n) = name.rsplit_once('#')?;
    let digits = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    (digits && !base.is_empty() && !base.ends_with('/')).then_some(base)
}

#[cfg(test)]
mod staged_tests {
    use super::*;

    #[test]
    fn staged_names() {
        assert_eq!(staged_base("zarr.json#1"), Some("zarr.json"));
        assert_eq!(staged_base("a/c/3/5#12"), Some("a/c/3/5"));
        assert_eq!(staged_base("notes#draft"), None);
        assert_eq!(staged_base("a#b#2"), Some("a#b"));
        assert_eq!(staged_base("zarr.json"), None);
        assert_eq!(staged_base("#1"), None);
        assert_eq!(staged_base("a/#1"), None);
        assert_eq!(staged_base("x#"), None);
    }

    #[test]
    fn removes_only_staged_files() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let runtime = IoRuntime::new(1).expect("runtime");
        let store = Store::open(tmp.path().to_str().expect("utf-8"), runtime, false).expect("open");
        let write = |rel: &str| {
            let path = tmp.path().join(rel);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, b"x").expect("write");
        };
        for rel in [
            "zarr.json#1",
            "zarr.json#2",
            "zarr.json",
            "zarr.jsonx#1",
            "notes#draft",
            ".zshard/options/w.json#1",
            ".zshard/empty/e.txt#3",
            "a/c/1/2#1",
        ] {
            write(rel);
        }
        assert_eq!(
            store.staged_keys("").expect("list"),
            [
                ".zshard/empty/e.txt#3",
                ".zshard/options/w.json#1",
                "a/c/1/2#1",
                "zarr.json#1",
                "zarr.json#2",
                "zarr.jsonx#1"
            ]
        );
        std::fs::create_dir_all(tmp.path().join(".zshard/done/empty")).expect("mkdir");
        store.remove_staged_of("zarr.json").expect("remove");
        store.remove_staged_below(".zshard").expect("remove");
        assert!(tmp.path().join(".zshard/done/empty").exists());
        store.remove_empty_folders(".zshard").expect("remove");
        assert!(!tmp.path().join(".zshard").exists());
        assert_eq!(
            store.staged_keys("").expect("list"),
            ["a/c/1/2#1", "zarr.jsonx#1"]
        );
        assert!(tmp.path().join("zarr.json").exists());
        assert!(tmp.path().join("notes#draft").exists());
    }
}

#[cfg(test)]
mod split_listing_tests {
    use super::*;
    use object_store::memory::InMemory;

    /// A store over an in-memory object store that passes for a remote one (so listings are split).
    fn remote_in_memory() -> Store {
        let runtime = IoRuntime::new(1).expect("runtime");
        Store {
            inner: Arc::new(InMemory::new()),
            multipart: None,
            records: None,
            root: Path::from("out.zarr"),
            location: Location::parse("s3://bucket/out.zarr").expect("location"),
            opened_folder: None,
            concurrency: 4,
            runtime,
            zip: false,
            read_ahead: Default::default(),
            deferred_sync: false,
        }
    }

    #[test]
    fn a_peek_at_what_was_read_ahead_leaves_it_for_the_first_get() {
        let store = remote_in_memory();
        store
            .put(".zmetadata", Bytes::from_static(b"{}"))
            .expect("put");
        store.read_ahead(&[".zmetadata", "zarr.json"]);
        for _ in 0..2 {
            assert_eq!(
                store.read_ahead_peek(".zmetadata"),
                Some(Some(Bytes::from_static(b"{}")))
            );
        }
        assert_eq!(store.read_ahead_peek("zarr.json"), Some(None));
        assert_eq!(store.read_ahead_peek(".zarray"), None);
        assert_eq!(
            store.get(".zmetadata").expect("get"),
            Some(Bytes::from_static(b"{}"))
        );
        // The first get took it.
        assert_eq!(store.read_ahead_peek(".zmetadata"), None);
    }

    #[test]
    fn a_local_copy_is_a_hard_link_and_replaces_the_target() {
        use std::os::unix::fs::MetadataExt;
        let tmp = tempfile::tempdir().expect("tempdir");
        let runtime = IoRuntime::new(1).expect("runtime");
        let store = Store::open(tmp.path().to_str().expect("utf-8"), runtime, false).expect("open");
        store
            .put("a/c/0", Bytes::from_static(b"shard"))
            .expect("put");
        store
            .put("chunks/old", Bytes::from_static(b"x"))
            .expect("put");
        let pairs = [
            ("a/c/0".to_string(), "chunks/new".to_string()),
            ("a/c/0".to_string(), "chunks/old".to_string()),
        ];
        store.copy_many(&pairs).expect("copy");
        for target in ["chunks/new", "chunks/old"] {
            assert_eq!(
                store.get(target).expect("get"),
                Some(Bytes::from_static(b"shard"))
            );
        }
        let inode = |rel: &str| std::fs::metadata(tmp.path().join(rel)).expect("stat").ino();
        assert_eq!(inode("chunks/new"), inode("a/c/0"));
        let missing = [("a/c/9".to_string(), "chunks/x".to_string())];
        let err = store.copy_many(&missing).expect_err("missing source");
        assert!(err.to_string().contains("cannot copy"), "{err}");
    }

    #[test]
    fn a_listing_cut_into_segments_finds_every_key_once() {
        let store = remote_in_memory();
        let mut keys = Vec::new();
        for i in 0..37u64 {
            for j in 0..29u64 {
                let key = format!("c/{i}/{j}");
                store
                    .put(&key, Bytes::from(vec![0u8; (i + j) as usize]))
                    .expect("put");
                keys.push(key);
            }
        }
        store
            .put("zarr.json", Bytes::from_static(b"{}"))
            .expect("put");
        let whole = store.list_sizes("c").expect("list");
        assert_eq!(whole.len(), 37 * 29);
        // Splits at existing keys, at keys that do not exist, outside the prefix, unsorted, repeated.
        let splits: Vec<String> = [
            "c/9/3",
            "c/1/0",
            "c/10/28",
            "c/36/28",
            "c/5/x",
            "zarr.json",
            "c/1/0",
            "c/0/0",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(store.list_sizes_split("c", &splits).expect("list"), whole);
        let every_100th: Vec<String> = keys.iter().step_by(100).cloned().collect();
        assert_eq!(
            store.list_sizes_split("c", &every_100th).expect("list"),
            whole
        );
        assert_eq!(
            whole.iter().find(|(k, _)| k == "c/10/28"),
            Some(&("c/10/28".to_string(), 38))
        );
    }
}

#[cfg(test)]
mod link_tests {
    use super::*;

    fn keys(listed: Vec<(String, u64)>) -> Vec<String> {
        listed.into_iter().map(|(key, _)| key).collect()
    }

    /// A local store's listing without links leaves out links and what they lead to; removals and
    /// writes through a link are refused, so the files they lead to stay.
    #[test]
    fn nothing_is_listed_removed_or_written_through_a_link() {
        let dir = tempfile::tempdir().expect("tempdir");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(outside.join("sub")).expect("mkdir");
        std::fs::write(outside.join("sub/data"), b"elsewhere").expect("write");
        let root = dir.path().join("store");
        let store = Store::open(
            root.to_str().expect("utf-8"),
            IoRuntime::new(1).expect("rt"),
            true,
        )
        .expect("open");
        store
            .put("a/c/0/0", Bytes::from_static(b"shard"))
            .expect("put");
        std::os::unix::fs::symlink(&outside, root.join("linked")).expect("link");
        std::os::unix::fs::symlink(outside.join("sub/data"), root.join("a/c/0/1")).expect("link");

        // The ordinary listing follows links; this one does not.
        assert!(keys(store.list_sizes("").expect("list")).contains(&"linked/sub/data".into()));
        assert_eq!(
            keys(store.list_sizes_without_links("").expect("list")),
            vec!["a/c/0/0".to_string()]
        );
        assert_eq!(
            store.list_sizes_without_links("linked").expect("list"),
            vec![]
        );
        assert_eq!(
            store
                .child("a")
                .list_sizes_without_links("c")
                .expect("list"),
            vec![("c/0/0".to_string(), 5)]
        );

        assert_eq!(store.first_link("a/c/0/0"), None);
        assert_eq!(
            store.first_link("linked/sub/data"),
            Some(root.join("linked"))
        );
        assert_eq!(
            store.child("linked").first_link("sub/data"),
            Some(root.join("linked"))
        );
        for key in ["linked/sub/data", "a/c/0/1"] {
            assert!(
                matches!(store.delete(key), Err(Error::ThroughLink { .. })),
                "{key}"
            );
            assert!(matches!(
                store.put(key, Bytes::from_static(b"x")),
                Err(Error::ThroughLink { .. })
            ));
            assert!(store.upload(key, 0).is_err(), "{key}");
        }
        assert!(store.child("linked").delete("sub/data").is_err());
        assert_eq!(
            std::fs::read(outside.join("sub/data")).expect("read"),
            b"elsewhere"
        );
        store.delete("a/c/0/0").expect("an ordinary key is removed");
    }
}

#[cfg(test)]
mod special_file_tests {
    use super::*;

    /// Issue 31, rows 15 and 4: a FIFO (its read blocked until a writer came, beyond any signal) and
    /// a link to `/dev/zero` (read without end) are refused at once, by whole and by range.
    #[test]
    fn only_regular_files_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let made = std::process::Command::new("mkfifo")
            .arg(dir.path().join("fifo"))
            .status()
            .expect("mkfifo");
        assert!(made.success());
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero")).expect("link");
        std::fs::write(dir.path().join("file"), b"data").expect("write");
        let store = Store::open(
            dir.path().to_str().expect("utf-8"),
            IoRuntime::new(1).expect("rt"),
            false,
        )
        .expect("open");
        for key in ["fifo", "zero"] {
            let e = store.get(key).expect_err(key);
            assert!(e.to_string().contains(key), "{e}");
            assert!(store.get_range(key, 0..4).is_err(), "{key}");
            assert!(store.get_edge(key, 4, true).is_err(), "{key}");
        }
        assert_eq!(
            store.get("file").expect("file").as_deref(),
            Some(&b"data"[..])
        );
        assert_eq!(store.get("missing").expect("missing"), None);
    }
}
