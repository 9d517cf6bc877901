use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::ObjectStore;

use super::{crc32c_digest, crc32c_value, Backend, Store};
use crate::error::{Error, Result};
use crate::location::Location;

impl Store {
    pub(super) fn open_local(
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

    /// This store with local writes that skip their own fsync before the rename that publishes
    /// them (group commit): a crash of the process leaves every published key complete, as before,
    /// but after a power loss or node crash a key published since the last [`Store::checkpoint`]
    /// can be empty or short, so the caller must record which keys a checkpoint covers and check
    /// the others before trusting them. Object stores (and zip members) are returned unchanged:
    /// what they publish is durable.
    pub fn deferring_sync(&self) -> Result<Store> {
        let Some(folder) = self.local_folder() else {
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
        let Some(folder) = self.local_folder() else {
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

    pub(super) fn read_local_edge(
        &self,
        file: &FsPath,
        key: &str,
        len: u64,
        from_end: bool,
    ) -> Result<Option<(Bytes, u64)>> {
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
        Ok(Some((Bytes::from(data), size)))
    }

    // Local batches are read with plain file reads on the calling thread (a fetch thread). Through
    // the object store API every file became a task on tokio's blocking pool: two thread hand-offs
    // per chunk, which on W1 (4,096 chunk files) was ~95,000 futex calls and a fifth of the CPU time.
    // Reads of one batch then run one after another; more fetch threads (`--io-threads`) give more
    // reads in flight, which parallel file systems with a high per-file latency want.

    /// For a local folder, refuses a key that is a FIFO, device or socket (see [`open_regular`])
    /// before object_store opens it; a missing key or a folder is left to the read (none found).
    pub(super) fn refuse_special_file(&self, key: &str) -> Result<()> {
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
    pub(super) fn reads_files(&self) -> bool {
        self.local_folder().is_some()
    }

    /// For a local store, the folder it was opened at (see `Backend::Local`); `None` for object
    /// stores and zip files.
    pub(super) fn local_folder(&self) -> Option<&FsPath> {
        match &self.backend {
            Backend::Local { folder } => Some(folder),
            Backend::Object | Backend::Zip => None,
        }
    }

    /// The size and crc32c of a local file (see [`Store::checksums`]), read 1 MiB at a time.
    pub(super) fn checksum_local(&self, key: &str) -> Result<Option<(u64, u32)>> {
        self.path(key)?;
        let Some(file) = self.local_path(key) else {
            return Ok(None);
        };
        let read = open_regular(&file).and_then(|mut f| {
            let mut buffer = vec![0u8; 1 << 20];
            let (mut size, mut crc) = (0u64, crc32c_digest());
            loop {
                match f.read(&mut buffer)? {
                    0 => return Ok((size, crc32c_value(&crc))),
                    n => {
                        size += n as u64;
                        crc.update(&buffer[..n]);
                    }
                }
            }
        });
        match read {
            Ok(found) => Ok(Some(found)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Error::Io {
                operation: "cannot read",
                location: self.url(key),
                source,
            }),
        }
    }

    /// Reads a whole local file; `None` when it does not exist. A file longer than `max` bytes is
    /// refused by its size, and at most `max + 1` bytes are read in case it grows meanwhile.
    pub(super) fn read_local(&self, key: &str, max: u64) -> Result<Option<Bytes>> {
        self.path(key)?;
        let Some(file) = self.local_path(key) else {
            return Ok(None);
        };
        let read = open_regular(&file).and_then(|f| {
            let size = f.metadata()?.len();
            if size > max {
                return Ok(Err((size, false)));
            }
            if let Some(read) = crate::direct::read_uncached(&f, size) {
                return read.map(Ok);
            }
            // Reserved at the stated size (at most `max`), so that reading does not grow the buffer.
            let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            f.take(max.saturating_add(1)).read_to_end(&mut data)?;
            if data.len() as u64 > max {
                return Ok(Err((data.len() as u64, true)));
            }
            Ok(Ok(Bytes::from(data)))
        });
        match read {
            Ok(Ok(data)) => Ok(Some(data)),
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
    pub(super) fn read_local_range<'k>(
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

    pub(super) fn remove_local_file(&self, file: &FsPath) -> Result<()> {
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
        let opened = self.local_folder()?;
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
    pub(super) fn walk_without_links(
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
}

/// Whether a local write failed because its staged file was gone at the rename (the io error below
/// object_store's is `NotFound`).
pub(super) fn staged_file_vanished(e: &object_store::Error) -> bool {
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
    use crate::runtime::IoRuntime;

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
mod link_tests {
    use super::*;
    use crate::runtime::IoRuntime;

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
    use crate::runtime::IoRuntime;

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

#[cfg(test)]
mod copy_tests {
    use super::*;
    use crate::runtime::IoRuntime;

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
}
