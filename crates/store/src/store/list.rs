use futures::TryStreamExt;
use object_store::path::Path;
use object_store::ObjectStore;

use super::{ListedObject, Store};
use crate::error::{Error, Result};

impl Store {
    /// The error of a failed listing of `prefix`: a name no key can hold is named as such.
    pub(super) fn list_error(&self, prefix: &str, source: object_store::Error) -> Error {
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
    /// `splits` as [`Store::list_sizes_split`] cuts it. Holds every object listed (some 100 bytes
    /// each, key and version): a listing of many objects that keeps a little of each is better
    /// visited page by page ([`Store::visit_objects_split`]).
    pub async fn list_objects_split_async(
        &self,
        prefix: &str,
        splits: &[String],
    ) -> Result<Vec<ListedObject>> {
        let mut objects: Vec<ListedObject> = Vec::new();
        self.visit_objects_split_async(prefix, splits, &mut |visit| match visit {
            Visit::Object(object) => objects.push(object.clone()),
            Visit::StartOver => objects.clear(),
        })
        .await?;
        objects.sort_by(|a, b| a.key.cmp(&b.key));
        objects.dedup_by(|a, b| a.key == b.key);
        Ok(objects)
    }

    /// Lists the objects below `prefix` as [`Store::list_objects_split`] does, handing each to
    /// `visit` as it comes instead of holding them all: only the pages in flight are held (a page
    /// of an object store's listing per segment, a few thousand files of a local folder), so that
    /// a listing of 10^8 objects costs what the caller keeps of them, not 10 GB of keys and
    /// versions. Objects come in no particular order, each once; when the listing has to start
    /// again from scratch (a local folder's direct listing gives up on a name it cannot spell, and
    /// the object store lists the folder instead), `visit` is told [`Visit::StartOver`] first and
    /// is to forget what it was handed before.
    pub fn visit_objects_split(
        &self,
        prefix: &str,
        splits: &[String],
        visit: &mut dyn FnMut(Visit<'_>),
    ) -> Result<()> {
        self.runtime
            .block_on(self.visit_objects_split_async(prefix, splits, visit))
    }

    /// [`Store::visit_objects_split`] as a future on the store's I/O runtime (see
    /// [`Store::block_on`]).
    pub async fn visit_objects_split_async(
        &self,
        prefix: &str,
        splits: &[String],
        visit: &mut dyn FnMut(Visit<'_>),
    ) -> Result<()> {
        // Counted for a display of the run's progress while it lists (see `ListedCount`).
        let listed = self.runtime.listed().clone();
        let visit = &mut |visited: Visit<'_>| {
            if let Visit::Object(_) = visited {
                listed.add(1);
            }
            visit(visited)
        };
        let path = self.path(prefix)?;
        // A local folder: one file system call per file, subfolders side by side (local_list.rs).
        if let Some(base) = self.local_path("").filter(|_| !self.location.is_remote()) {
            let listed = {
                let mut object = |object: ListedObject| visit(Visit::Object(&object));
                crate::local_list::visit(base, prefix, self.concurrency, &mut object).await
            };
            match listed {
                Some(()) => return Ok(()),
                None => visit(Visit::StartOver),
            }
        }
        if !self.location.is_remote() {
            return self
                .visit_whole(&path, visit)
                .await
                .map_err(|source| self.list_error(prefix, source));
        }
        let mut bounds: Vec<Path> = Vec::new();
        for key in splits {
            let split = self.path(key)?;
            if split.as_ref().starts_with(path.as_ref()) {
                bounds.push(split);
            }
        }
        bounds.sort_by(|a, b| a.as_ref().cmp(b.as_ref()));
        bounds.dedup();
        self.visit_segments_spawned(&path, &bounds, visit)
            .await
            .map_err(|source| self.list_error(prefix, source))
    }

    /// The key (relative to this store) of an object path of the inner store; `None` outside it.
    /// (A path's text is its encoded parts joined by `/`: the key is what follows the root's parts,
    /// taken from the text without a part-by-part copy, as every listed object's key is.)
    pub(super) fn key_of(&self, location: &Path) -> Option<String> {
        let (path, root) = (location.as_ref(), self.root.as_ref());
        if root.is_empty() {
            return Some(path.to_string());
        }
        match path.strip_prefix(root)? {
            "" => Some(String::new()),
            rest => rest.strip_prefix('/').map(str::to_string),
        }
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

    /// Hands `visit` every object below `path` of a store that lists in no order (a local folder
    /// listed through object_store, when its direct listing gives up): a transient failure starts
    /// the listing over, and `visit` is told so first ([`Visit::StartOver`]).
    async fn visit_whole(
        &self,
        path: &Path,
        visit: &mut dyn FnMut(Visit<'_>),
    ) -> object_store::Result<()> {
        let visit = std::cell::RefCell::new(visit);
        let handed = std::cell::Cell::new(false);
        let (visit, handed) = (&visit, &handed);
        self.retrying(move || async move {
            if handed.replace(false) {
                (*visit.borrow_mut())(Visit::StartOver);
            }
            let mut stream = self.inner.list(Some(path));
            while let Some(meta) = stream.try_next().await? {
                if let Some(object) = self.listed_object(&meta) {
                    (*visit.borrow_mut())(Visit::Object(&object));
                    handed.set(true);
                }
            }
            Ok(())
        })
        .await
    }

    /// Hands `visit` the objects below `path` of an object store, listed in the segments that
    /// `bounds` cut (segment i holds the keys in (bounds[i - 1], bounds[i]]), at most as many
    /// side by side as the store keeps requests in flight. Each segment is a task of its own on
    /// the I/O runtime: parsing a page of a listing (XML, about 3 us a key) is most of a listing's
    /// CPU, and on the caller's one task it bounded the whole listing by one core (W11: 160,000
    /// keys, 0.55 s of one thread). The tasks send what they list here in batches, through a
    /// channel that holds a few batches a segment, and `visit` is called here, by one at a time.
    async fn visit_segments_spawned(
        &self,
        path: &Path,
        bounds: &[Path],
        visit: &mut dyn FnMut(Visit<'_>),
    ) -> object_store::Result<()> {
        let concurrency = self.concurrency.max(1);
        let (sender, mut batches) = tokio::sync::mpsc::channel::<Vec<ListedObject>>(concurrency);
        let mut sender = Some(sender);
        let mut segments = (0..=bounds.len())
            .map(|i| {
                let after = i.checked_sub(1).and_then(|j| bounds.get(j)).cloned();
                (after, bounds.get(i).cloned())
            })
            .peekable();
        // Dropped on an early return: the segments still listing are aborted.
        let mut tasks = tokio::task::JoinSet::new();
        loop {
            while tasks.len() < concurrency {
                let (Some(to), Some((after, until))) = (&sender, segments.next()) else {
                    break;
                };
                let (store, path, to) = (self.clone(), path.clone(), to.clone());
                tasks.spawn_on(
                    async move {
                        store
                            .list_segment_into(&path, after.as_ref(), until.as_ref(), &to)
                            .await
                    },
                    self.runtime.handle(),
                );
            }
            if segments.peek().is_none() {
                // The channel closes once the last segment's task ends.
                sender = None;
            }
            tokio::select! {
                Some(batch) = batches.recv() => {
                    for object in &batch {
                        visit(Visit::Object(object));
                    }
                }
                Some(joined) = tasks.join_next() => match joined {
                    Ok(listed) => listed?,
                    Err(failed) if failed.is_panic() => std::panic::resume_unwind(failed.into_panic()),
                    Err(failed) => {
                        return Err(object_store::Error::Generic {
                            store: "listing",
                            source: Box::new(failed),
                        })
                    }
                },
                else => break,
            }
        }
        Ok(())
    }

    /// Lists the objects below `path` of an object store after the key `after` (if any) up to and
    /// including `until` (if any), sending them to `to` in batches of [`LISTED_BATCH`]; the
    /// listing stops at the first page past `until`. A transient failure is retried from after
    /// the last key sent (an object store lists in key order), so that no object is sent twice
    /// or missed. Stops quietly when `to` is closed (the listing was given up).
    async fn list_segment_into(
        &self,
        path: &Path,
        after: Option<&Path>,
        until: Option<&Path>,
        to: &tokio::sync::mpsc::Sender<Vec<ListedObject>>,
    ) -> object_store::Result<()> {
        // The last key sent. A Mutex, not a RefCell: this future runs as a task (Send).
        let last: std::sync::Mutex<Option<Path>> = std::sync::Mutex::new(None);
        let last = &last;
        let send = |batch: Vec<ListedObject>, through: Option<Path>| async move {
            if batch.is_empty() && through.is_none() {
                return true;
            }
            let sent = batch.is_empty() || to.send(batch).await.is_ok();
            if let (true, Some(through), Ok(mut last)) = (sent, through, last.lock()) {
                *last = Some(through);
            }
            sent
        };
        let send = &send;
        self.retrying(move || async move {
            let from = last
                .lock()
                .ok()
                .and_then(|last| last.clone())
                .or_else(|| after.cloned());
            let mut stream = match (&self.s3_lister, &from) {
                (Some(s3), from) => s3.list(path, from.as_ref()),
                (None, Some(from)) => self.inner.list_with_offset(Some(path), from),
                (None, None) => self.inner.list(Some(path)),
            };
            let mut batch = Vec::new();
            let mut through: Option<Path> = None;
            loop {
                let meta = match stream.try_next().await {
                    Ok(Some(meta)) => meta,
                    Ok(None) => break,
                    Err(failed) => {
                        // What was listed before the failure is sent: the retry starts after it.
                        send(batch, through).await;
                        return Err(failed);
                    }
                };
                if until.is_some_and(|u| meta.location.as_ref() > u.as_ref()) {
                    break;
                }
                // The segment's last key: asking for the next page would only find the next
                // segment's.
                let end = until.is_some_and(|u| meta.location.as_ref() == u.as_ref());
                batch.extend(self.listed_object(&meta));
                through = Some(meta.location);
                if end {
                    break;
                }
                if batch.len() >= LISTED_BATCH
                    && !send(std::mem::take(&mut batch), through.take()).await
                {
                    return Ok(());
                }
            }
            send(batch, through).await;
            Ok(())
        })
        .await
    }

    /// An object of the inner store's listing as this store names it; `None` outside the store.
    fn listed_object(&self, meta: &object_store::ObjectMeta) -> Option<ListedObject> {
        Some(ListedObject {
            key: self.key_of(&meta.location)?,
            size: meta.size,
            modified_ms: u64::try_from(meta.last_modified.timestamp_millis()).unwrap_or(0),
            version: meta.e_tag.clone().unwrap_or_else(|| {
                meta.last_modified
                    .timestamp_nanos_opt()
                    .unwrap_or(0)
                    .to_string()
            }),
        })
    }
}

/// Objects a segment of an object store's listing sends at a time (see
/// [`Store::visit_objects_split`]): a page's worth.
const LISTED_BATCH: usize = 1000;

/// What a listing visited object by object ([`Store::visit_objects_split`]) hands its visitor.
#[derive(Debug)]
pub enum Visit<'a> {
    /// An object listed.
    Object(&'a ListedObject),
    /// The listing starts again from scratch: every object handed before is to be forgotten (it
    /// will be handed again if it is still there).
    StartOver,
}

#[cfg(test)]
mod split_listing_tests {
    use bytes::Bytes;
    use object_store::path::Path;

    use super::super::conformance::remote_in_memory;

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

    /// Visited page by page, in segments side by side, each object is handed once; a local
    /// folder's listing that gives up (a staged file's name) starts over with the object store,
    /// and what the visitor keeps after it is the whole listing.
    #[test]
    fn a_visited_listing_hands_every_object_once() {
        use super::super::Visit;
        let visited = |store: &crate::Store, splits: &[String]| {
            let (mut keys, mut starts) = (Vec::new(), 0);
            store
                .visit_objects_split("c", splits, &mut |visit| match visit {
                    Visit::Object(o) => keys.push((o.key.clone(), o.size)),
                    Visit::StartOver => {
                        keys.clear();
                        starts += 1;
                    }
                })
                .expect("visit");
            keys.sort();
            (keys, starts)
        };
        let store = remote_in_memory();
        for i in 0..23u64 {
            for j in 0..19u64 {
                store
                    .put(&format!("c/{i}/{j}"), Bytes::from(vec![0u8; j as usize]))
                    .expect("put");
            }
        }
        let whole = store.list_sizes("c").expect("list");
        assert_eq!(whole.len(), 23 * 19);
        let splits: Vec<String> = ["c/3/0", "c/11/18", "c/7/x"].map(String::from).to_vec();
        assert_eq!(visited(&store, &splits), (whole.clone(), 0));
        assert_eq!(visited(&store, &[]), (whole, 0));

        let dir = tempfile::tempdir().expect("tempdir");
        let local = crate::Store::open(
            dir.path().to_str().expect("utf-8"),
            crate::IoRuntime::new(2).expect("runtime"),
            false,
        )
        .expect("open");
        // More files than a batch in one folder, and a folder of its own per row.
        for i in 0..3u64 {
            for j in 0..1500u64 {
                local
                    .put(&format!("c/{i}/{j}"), Bytes::from(vec![1u8; 3]))
                    .expect("put");
            }
        }
        let whole = local.list_sizes("c").expect("list");
        assert_eq!(whole.len(), 4500);
        assert_eq!(visited(&local, &[]), (whole.clone(), 0));
        // A staged file of an interrupted write: a name the direct listing leaves to the object
        // store, which lists the folder again from scratch.
        std::fs::write(dir.path().join("c/1/7#zshard-1-2"), b"x").expect("staged");
        let (keys, starts) = visited(&local, &[]);
        assert_eq!(starts, 1);
        assert_eq!(keys, local.list_sizes("c").expect("list"));
        assert!(keys.len() >= whole.len(), "{}", keys.len());
    }

    /// An in-memory object store whose listings (from the start or from a key) fail, as a LIST
    /// page's body cut off mid-way does (a transient failure), after `after` objects, the first
    /// `failures` times; `met` counts the failures a listing ran into.
    #[derive(Debug)]
    struct CutListings {
        inner: object_store::memory::InMemory,
        after: usize,
        failures: std::sync::atomic::AtomicUsize,
        met: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    }

    impl CutListings {
        fn cut(
            &self,
            listed: futures::stream::BoxStream<
                'static,
                object_store::Result<object_store::ObjectMeta>,
            >,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            use futures::StreamExt;
            let fail = self
                .failures
                .fetch_update(
                    std::sync::atomic::Ordering::SeqCst,
                    std::sync::atomic::Ordering::SeqCst,
                    |n| n.checked_sub(1),
                )
                .is_ok();
            if !fail {
                return listed;
            }
            let met = self.met.clone();
            let cut = futures::stream::once(async move {
                met.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                Err(object_store::Error::Generic {
                    store: "S3",
                    source: Box::new(object_store::client::HttpError::new(
                        object_store::client::HttpErrorKind::Interrupted,
                        std::io::Error::from(std::io::ErrorKind::ConnectionReset),
                    )),
                })
            });
            listed.take(self.after).chain(cut).boxed()
        }
    }

    impl std::fmt::Display for CutListings {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "CutListings")
        }
    }

    #[async_trait::async_trait]
    impl object_store::ObjectStore for CutListings {
        async fn put_opts(
            &self,
            location: &Path,
            payload: object_store::PutPayload,
            options: object_store::PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            self.inner.put_opts(location, payload, options).await
        }

        async fn put_multipart_opts(
            &self,
            location: &Path,
            options: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.inner.put_multipart_opts(location, options).await
        }

        async fn get_opts(
            &self,
            location: &Path,
            options: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            self.inner.get_opts(location, options).await
        }

        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
            self.inner.delete_stream(locations)
        }

        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            self.cut(self.inner.list(prefix))
        }

        fn list_with_offset(
            &self,
            prefix: Option<&Path>,
            offset: &Path,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            self.cut(self.inner.list_with_offset(prefix, offset))
        }

        async fn list_with_delimiter(
            &self,
            prefix: Option<&Path>,
        ) -> object_store::Result<object_store::ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }

        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    /// A segment's listing that fails mid-way, after a whole batch was sent (1,200 keys into
    /// segments of 1,500), goes on from after the last key it sent: every key is handed exactly
    /// once.
    #[test]
    fn a_segment_cut_off_mid_way_goes_on_from_its_last_key() {
        let inner = std::sync::Arc::new(CutListings {
            inner: object_store::memory::InMemory::new(),
            after: 1200,
            failures: std::sync::atomic::AtomicUsize::new(4),
            met: Default::default(),
        });
        let store = super::super::conformance::remote(inner.clone());
        let mut keys = Vec::new();
        for i in 0..40u64 {
            for j in 0..75u64 {
                keys.push(format!("c/{i}/{j}"));
            }
        }
        keys.sort();
        for key in &keys {
            store.put(key, Bytes::from(vec![0u8; 1])).expect("put");
        }
        let splits: Vec<String> = keys.iter().skip(1499).step_by(1500).cloned().collect();
        let mut handed: Vec<String> = Vec::new();
        store
            .visit_objects_split("c", &splits, &mut |visit| match visit {
                super::Visit::Object(object) => handed.push(object.key.clone()),
                super::Visit::StartOver => panic!("an object store's listing never starts over"),
            })
            .expect("list");
        // The first listings of the two segments of 1,500 keys are cut after 1,200 (a batch of
        // 1,000 sent, 200 on the failure); the empty last segment fails at once, and a cut left
        // for a retry of 300 keys is not reached (the segment ends first).
        assert!(inner.met.load(std::sync::atomic::Ordering::SeqCst) >= 3);
        handed.sort();
        assert_eq!(handed, keys);
    }
}
