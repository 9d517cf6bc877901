//! The [`Store`]: one type over three backends, each in its own room.
//!
//! - `Backend::Local` (`local.rs`): a folder on disk. Writes go through object_store's
//!   `LocalFileSystem` (staged file, fsync, rename); reads are plain file reads on the calling
//!   thread; staged leftovers, symbolic links and group commit (`deferring_sync`, `checkpoint`)
//!   exist only here.
//! - `Backend::Object` (`object.rs`, `list.rs`, `read_ahead.rs`): a bucket prefix or HTTP root.
//!   Every request is an object_store request on the [`IoRuntime`] (an S3 bucket's listing
//!   excepted: zshard reads its pages, `crate::s3_list`, signed by object_store), retried by error kind;
//!   big objects go up as multipart uploads (`crate::multipart`, `crate::upload`).
//! - `Backend::Zip` (`zip.rs`, with the reader in `crate::zip`): the members of a `.zip`/`.ozx`
//!   file, read only, through the store of the folder holding it.
//!
//! `object.rs` and `list.rs` hold the requests every backend shares (a local folder is an
//! object_store too); where a local folder is faster read directly, they turn to `local.rs`.
//! `conformance.rs` runs one set of tests against each backend.

use std::collections::HashMap;
use std::path::{Path as FsPath, PathBuf};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use object_store::multipart::MultipartStore;
use object_store::path::Path;
use object_store::ObjectStore;

use crate::error::{Error, Result};
use crate::guard::HttpGuard;
use crate::location::Location;
use crate::multipart::UploadRecords;
use crate::runtime::IoRuntime;

#[cfg(test)]
mod conformance;
mod list;
mod local;
mod object;
mod read_ahead;
mod zip;

pub use list::Visit;
pub use local::staged_base;

/// Which backend a [`Store`] is (see the module documentation): what differs between them beyond
/// the object_store client they share.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Backend {
    /// A local folder: `folder` is the one the store was opened at (kept by its children), below
    /// which keys are files read directly and a removal never goes through a symbolic link (see
    /// [`Store::first_link`]).
    Local { folder: PathBuf },
    /// An object store (a bucket prefix, an HTTP root).
    Object,
    /// The members of a zip file (`location` is the file): no key is a file of its own, so local
    /// stores' direct file reads do not apply.
    Zip,
}

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
    /// An S3 bucket's listing, faster than `inner`'s (see `crate::s3_list`).
    pub(crate) s3_lister: Option<Arc<crate::s3_list::S3Lister>>,
    /// Where this store is: messages name keys below it, and local stores read files below it directly.
    location: Location,
    /// Local folder, object store or zip file.
    pub(crate) backend: Backend,
    pub(crate) runtime: Arc<IoRuntime>,
    concurrency: usize,
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
            .field("zip", &self.is_zip())
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
        let opened = match (location.local_path(), location.url()) {
            (Some(path), _) => crate::cloud::Opened {
                inner: Self::open_local(path, location, create)?,
                multipart: None,
                root: Path::default(),
                s3_lister: None,
            },
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
            inner: opened.inner,
            multipart: opened.multipart,
            records: None,
            root: opened.root,
            s3_lister: opened.s3_lister,
            location: location.clone(),
            backend: match location.local_path() {
                Some(folder) => Backend::Local {
                    folder: folder.to_path_buf(),
                },
                None => Backend::Object,
            },
            concurrency: runtime.options().max_requests,
            runtime,
            read_ahead: Default::default(),
            deferred_sync: false,
        })
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
                    backend: Backend::Object,
                    concurrency: runtime.options().max_requests,
                    runtime,
                    multipart: None,
                    records: None,
                    s3_lister: None,
                    read_ahead: Default::default(),
                    deferred_sync: false,
                })
            }
            _ => Self::open_location(&parsed, runtime, false),
        }
    }

    /// Where this store is (for a [`child`](Store::child), the parent's location joined with the
    /// subpath).
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// Whether this store reads the members of a zip file (a location named `.zip` or `.ozx` that
    /// is no file or object is read as a folder instead).
    pub fn is_zip(&self) -> bool {
        self.backend == Backend::Zip
    }

    /// For a local store, the path of key `key`'s file (or folder).
    pub fn local_path(&self, key: &str) -> Option<PathBuf> {
        if self.is_zip() {
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

    /// Multipart part size (object stores refuse parts under 5 MiB but the last).
    pub(crate) fn part_size(&self) -> usize {
        self.runtime.options().part_size.max(5 << 20)
    }

    /// Runs `future` (requests of this store and others made side by side, e.g. with
    /// `futures::join!`) to completion on the I/O runtime, from a thread outside it: requests that do
    /// not depend on each other then cost one round trip together instead of one each.
    pub fn block_on<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
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

/// A CRC-32C computed over pieces as they are read ([`Store::checksums`]), `crc-fast`'s like every
/// other crc32c of zshard (the store does not depend on zshard-core, which wraps it for the rest).
fn crc32c_digest() -> crc_fast::Digest {
    crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi)
}

/// The checksum of `digest`: a CRC-32 in the low half of the `u64` that `crc-fast` returns.
fn crc32c_value(digest: &crc_fast::Digest) -> u32 {
    (digest.finalize() & u64::from(u32::MAX)) as u32
}
