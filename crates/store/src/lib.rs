//! Storage for zshard. A [`Store`] is a [`Location`] (a local directory, a bucket prefix, an HTTP
//! root) opened through [`object_store`], so local directories and cloud buckets have one API.
//! Reads of local stores are plain file reads on the calling thread (cheaper than object_store's
//! task per file; a whole file of 256 KiB or more that is not in the page cache is read around it);
//! everything else is an object_store request on a dedicated [`IoRuntime`] that is
//! separate from the CPU workers (S3 listings are signed by object_store and read by zshard, which
//! parses their pages several times faster). Batched ranged reads are grouped by [`coalesce`], objects too big
//! for memory are written as an [`Upload`] (local ones, and every local object of 1 MiB or more, with direct
//! I/O around the page cache where the filesystem takes it), and transient failures are retried by
//! their error kind.
//! A `.zip` or `.ozx` location opened as a source is the store of the zip's members, read by range
//! (see [`ZipDirectory`]).
//!
//! ```
//! use bytes::Bytes;
//! use zshard_store::{IoRuntime, Store};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let store = Store::open(dir.path().to_str().unwrap(), IoRuntime::new(1).unwrap(), false).unwrap();
//! store.put("array/c/0/0", Bytes::from_static(b"shard")).unwrap();
//! assert_eq!(store.get("array/c/0/0").unwrap().as_deref(), Some(&b"shard"[..]));
//! assert_eq!(store.get("array/c/9/9").unwrap(), None);
//! assert_eq!(&store.get_range("array/c/0/0", 1..3).unwrap()[..], b"ha");
//! assert_eq!(store.list_children("").unwrap(), vec!["array".to_string()]);
//! ```

mod cloud;
mod coalesce;
mod direct;
mod error;
mod guard;
mod local_list;
mod location;
mod multipart;
mod options;
mod retry;
mod runtime;
mod s3_list;
mod store;
mod upload;
mod zip;

pub use coalesce::{coalesce, RangeRequest, COALESCE_GAP, MAX_REQUEST};
pub use error::{Error, Result};
pub use guard::HttpGuard;
pub use location::{Bucket, Location, Overlap};
pub use options::StoreOptions;
pub use runtime::{IoRuntime, ListedCount};
pub use store::{staged_base, ListedObject, PutNew, Store, Visit};
pub use upload::Upload;
pub use zip::ZipDirectory;
