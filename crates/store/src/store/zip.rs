use std::path::Path as FsPath;
use std::sync::Arc;

use object_store::path::Path;
use object_store::ObjectStoreExt;

use super::{Backend, Store};
use crate::error::{Error, Result};
use crate::location::Location;
use crate::runtime::IoRuntime;

impl Store {
    /// The store of the members of the zip file at `location`, read through the store of its
    /// folder; `None` when there is no such file (a folder, or no object of that name).
    pub(super) fn open_zip(location: &Location, runtime: &Arc<IoRuntime>) -> Result<Option<Store>> {
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
            // The zip's members are listed from its directory, never by the bucket's listing.
            s3_lister: None,
            root: Path::default(),
            location: location.clone(),
            backend: Backend::Zip,
            concurrency: runtime.options().max_requests,
            runtime: runtime.clone(),
            read_ahead: Default::default(),
            deferred_sync: false,
        }))
    }
}
