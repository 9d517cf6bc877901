//! Objects written piece by piece, for shards too big to hold in memory: the pieces go to their
//! destination (or a spool file) as they arrive, and the object becomes visible under its key only when
//! the upload finishes. An upload dropped before [`Upload::finish`] leaves nothing under the key.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use object_store::WriteMultipart;

use crate::direct::{write_all_vectored, StagingFile};
use crate::error::{Error, Result};
use crate::store::Store;

/// Multipart parts of one upload in flight at once: the memory of a streamed object stays a few parts.
const PARTS_IN_FLIGHT: usize = 1;

/// Distinguishes the staging files of concurrent uploads of one process.
static STAGING_SEQ: AtomicU64 = AtomicU64::new(0);

/// An object being written in pieces (see [`Store::upload`]).
#[derive(Debug)]
pub struct Upload {
    store: Store,
    key: String,
    reserved: u64,
    written: u64,
    target: Target,
}

enum Target {
    /// A local staging file next to the destination, renamed into place when complete.
    Local {
        file: StagingFile,
        staging: PathBuf,
        dest: PathBuf,
    },
    /// Pieces held until they exceed one part: an object that fits one part (most shards) goes up
    /// in one PUT, without the multipart upload's extra round trips (create, record, complete).
    Buffered {
        pieces: Vec<Bytes>,
        len: usize,
    },
    /// A multipart upload fed as pieces arrive (no reserved head).
    Multipart(WriteMultipart),
    /// An anonymous local file holding the pieces until the head is known; uploaded at the end.
    Spool(File),
    Done,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Target::Local { .. } => "Local",
            Target::Buffered { .. } => "Buffered",
            Target::Multipart(_) => "Multipart",
            Target::Spool(_) => "Spool",
            Target::Done => "Done",
        })
    }
}

impl Store {
    /// Starts writing the object `key` in pieces. `reserved` bytes at its start are left for a head
    /// (such as a shard index) that is known only at the end and given to [`Upload::finish`]; the
    /// pieces follow it. Local stores write a staging file in place; object stores send an object of
    /// at most one part in one PUT and stream a larger one as a multipart upload, or, when a head is
    /// reserved, spool the pieces to a temporary local file first (an object's first bytes cannot be
    /// sent last).
    pub fn upload(&self, key: &str, reserved: u64) -> Result<Upload> {
        let io_error = |operation, source| io_error(self, key, operation, source);
        let target = match self.local_path(key) {
            Some(dest) => {
                self.refuse_link(key)?;
                if let Some(parent) = dest.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| io_error("cannot create", e))?;
                }
                let (file, staging) =
                    create_staging(&dest, reserved).map_err(|e| io_error("cannot create", e))?;
                Target::Local {
                    file,
                    staging,
                    dest,
                }
            }
            None if reserved > 0 => {
                Target::Spool(tempfile::tempfile().map_err(|e| io_error("cannot spool", e))?)
            }
            None => {
                self.path(key)?;
                Target::Buffered {
                    pieces: Vec::new(),
                    len: 0,
                }
            }
        };
        Ok(Upload {
            store: self.clone(),
            key: key.to_string(),
            reserved,
            written: 0,
            target,
        })
    }
}

impl Upload {
    /// Appends a piece.
    pub fn append(&mut self, piece: &Bytes) -> Result<()> {
        let (store, key) = (&self.store, &self.key);
        match &mut self.target {
            Target::Local { file, .. } => {
                file.append(piece)
                    .map_err(|source| io_error(store, key, "cannot write", source))?;
            }
            Target::Spool(file) => {
                file.write_all(piece)
                    .map_err(|source| io_error(store, key, "cannot write", source))?;
            }
            Target::Buffered { pieces, len } => {
                pieces.push(piece.clone());
                *len += piece.len();
                if *len > store.part_size() {
                    let pieces = std::mem::take(pieces);
                    self.target = Target::Multipart(start_multipart(store, key, &pieces)?);
                }
            }
            Target::Multipart(writer) => send_piece(store, key, writer, piece)?,
            Target::Done => {}
        }
        self.written += piece.len() as u64;
        Ok(())
    }

    /// Appends several pieces in order. Local files get them in one vectored write where the
    /// system allows (a part's inner chunks: one system call instead of one per chunk).
    pub fn append_all(&mut self, pieces: &[Bytes]) -> Result<()> {
        let (store, key) = (&self.store, &self.key);
        match &mut self.target {
            Target::Local { file, .. } => {
                file.append_all(pieces)
                    .map_err(|source| io_error(store, key, "cannot write", source))?;
                self.written += pieces.iter().map(|p| p.len() as u64).sum::<u64>();
                Ok(())
            }
            Target::Spool(file) => {
                write_all_vectored(file, pieces)
                    .map_err(|source| io_error(store, key, "cannot write", source))?;
                self.written += pieces.iter().map(|p| p.len() as u64).sum::<u64>();
                Ok(())
            }
            _ => pieces.iter().try_for_each(|piece| self.append(piece)),
        }
    }

    /// Bytes appended so far (the reserved head not included).
    pub fn appended(&self) -> u64 {
        self.written
    }

    /// Writes `head` into the reserved bytes (it must be exactly that long), or appends it when none
    /// were reserved, and publishes the object under its key. Returns the object's size.
    pub fn finish(self, head: &Bytes) -> Result<u64> {
        self.finish_versioned(head).map(|(size, _)| size)
    }

    /// [`Upload::finish`], returning also the version the store gave the object (its ETag as
    /// listings show it, see [`crate::ListedObject::version`]), when it names one.
    pub fn finish_versioned(mut self, head: &Bytes) -> Result<(u64, Option<String>)> {
        if self.reserved > 0 && head.len() as u64 != self.reserved {
            return Err(self.io_error(
                "cannot write",
                std::io::Error::other(format!(
                    "head of {} bytes for {} reserved",
                    head.len(),
                    self.reserved
                )),
            ));
        }
        if self.reserved == 0 {
            self.append(head)?;
        }
        let size = self.reserved + self.written;
        let version = match std::mem::replace(&mut self.target, Target::Done) {
            Target::Local {
                file,
                staging,
                dest,
            } => {
                let published = (|| {
                    let file = file.finish(if self.reserved > 0 { head } else { &[] })?;
                    // As the local store does for every put: after a crash the key is complete or
                    // absent (unless syncing is deferred to a checkpoint, see `deferring_sync`).
                    if !self.store.deferred_sync {
                        file.sync_all()?;
                    }
                    // The file's last write is done: its version is what listings will show.
                    let version = local_version(&file.metadata()?);
                    std::fs::rename(&staging, &dest)?;
                    Ok(version)
                })();
                match published {
                    Ok(version) => Some(version),
                    Err(e) => {
                        let _ = std::fs::remove_file(&staging);
                        return Err(self.io_error("cannot write", e));
                    }
                }
            }
            Target::Buffered { pieces, .. } => self.store.put_parts_versioned(&self.key, pieces)?,
            Target::Multipart(writer) => {
                self.store
                    .runtime
                    .block_on(writer.finish())
                    .map_err(|e| self.store.request_error("cannot write", &self.key, e))?
                    .e_tag
            }
            Target::Spool(file) => self.send_spool(file, head)?,
            Target::Done => None,
        };
        Ok((size, version))
    }

    /// Uploads `head` followed by the spooled pieces, reading the spool a part at a time.
    fn send_spool(&mut self, mut file: File, head: &Bytes) -> Result<Option<String>> {
        file.seek(SeekFrom::Start(0))
            .map_err(|e| self.io_error("cannot read spool of", e))?;
        let mut upload = self.store.upload(&self.key, 0)?;
        upload.append(head)?;
        let part = self.store.part_size();
        loop {
            let mut buffer = Vec::with_capacity(part);
            let read = (&mut file)
                .take(part as u64)
                .read_to_end(&mut buffer)
                .map_err(|e| self.io_error("cannot read spool of", e))?;
            if read == 0 {
                break;
            }
            upload.append(&Bytes::from(buffer))?;
        }
        upload
            .finish_versioned(&Bytes::new())
            .map(|(_, version)| version)
    }

    fn io_error(&self, operation: &'static str, source: std::io::Error) -> Error {
        io_error(&self.store, &self.key, operation, source)
    }
}

/// Creates the staging file of `dest`, `<name>#<n>` with `n` decimal: the local backend's staging
/// name (see [`crate::staged_base`]), which a rerun removes when a killed run leaves it behind. `n`
/// starts from the process id, and a name that exists (another process's) is passed over.
fn create_staging(
    dest: &std::path::Path,
    reserved: u64,
) -> std::io::Result<(StagingFile, PathBuf)> {
    let base = u64::from(std::process::id()) * 1_000_000;
    loop {
        let seq = STAGING_SEQ.fetch_add(1, Ordering::Relaxed) % 1_000_000;
        let mut name = dest.file_name().unwrap_or_default().to_os_string();
        name.push(format!("#{}", base + seq));
        let staging = dest.with_file_name(name);
        match StagingFile::create_new(&staging, reserved) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            created => return created.map(|file| (file, staging)),
        }
    }
}

/// Starts the multipart upload of `key` with the pieces held so far.
fn start_multipart(store: &Store, key: &str, pieces: &[Bytes]) -> Result<WriteMultipart> {
    let path = store.path(key)?;
    let upload = store
        .runtime
        .block_on(store.start_multipart(&path))
        .map_err(|e| store.request_error("cannot write", key, e))?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, store.part_size());
    for piece in pieces {
        if let Err(e) = send_piece(store, key, &mut writer, piece) {
            let _ = store.runtime.block_on(writer.abort());
            return Err(e);
        }
    }
    Ok(writer)
}

/// Hands a piece to a multipart upload, waiting while too many of its parts are in flight.
fn send_piece(store: &Store, key: &str, writer: &mut WriteMultipart, piece: &Bytes) -> Result<()> {
    // `put` starts part uploads as tasks: it must run inside the I/O runtime.
    store
        .runtime
        .block_on(async {
            writer.wait_for_capacity(PARTS_IN_FLIGHT).await?;
            writer.put(piece.clone());
            Ok(())
        })
        .map_err(|e| store.request_error("cannot write", key, e))
}

fn io_error(store: &Store, key: &str, operation: &'static str, source: std::io::Error) -> Error {
    Error::Io {
        operation,
        location: store.url(key),
        source,
    }
}

impl Drop for Upload {
    /// An unfinished upload is abandoned: the staging file is removed, the multipart upload aborted.
    fn drop(&mut self) {
        match std::mem::replace(&mut self.target, Target::Done) {
            Target::Local { staging, .. } => {
                let _ = std::fs::remove_file(staging);
            }
            Target::Multipart(writer) => {
                let _ = self.store.runtime.block_on(writer.abort());
            }
            Target::Buffered { .. } | Target::Spool(_) | Target::Done => {}
        }
    }
}

impl Store {
    fn request_error(&self, operation: &'static str, key: &str, e: object_store::Error) -> Error {
        Error::Request {
            operation,
            location: self.url(key),
            source: Box::new(e),
        }
    }
}

/// The version of a local file as the local store's listings name it (see
/// [`ListedObject::version`]): object_store's ETag of a file, its inode, modification time in
/// microseconds and size, so that a file written outside `LocalFileSystem::put` (a streamed
/// upload's staged file, see `upload.rs`) is named as its listing will name it.
pub(crate) fn local_version(metadata: &std::fs::Metadata) -> String {
    #[cfg(unix)]
    let inode = std::os::unix::fs::MetadataExt::ino(metadata);
    #[cfg(not(unix))]
    let inode = 0u64;
    let mtime = metadata
        .modified()
        .ok()
        .and_then(|mtime| mtime.duration_since(std::time::SystemTime::UNIX_EPOCH).ok())
        .unwrap_or_default()
        .as_micros();
    // Written into one allocation of the right size: `format!` grows its string as it goes, and
    // a listing makes this string for every file (160,000 in W11) on threads sharing malloc's
    // arenas, where the reallocations were a quarter of the listing's CPU.
    let mut version = String::with_capacity(64);
    // Writing into a String cannot fail.
    let _ = std::fmt::Write::write_fmt(
        &mut version,
        format_args!("\"{inode:x}-{mtime:x}-{:x}\"", metadata.len()),
    );
    version
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{staged_base, IoRuntime};

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("test");
        let store = Store::open(
            dir.path().to_str().expect("test"),
            IoRuntime::new(1).expect("test"),
            false,
        );
        (dir, store.expect("test"))
    }

    fn files(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = walk(dir)
            .iter()
            .map(|p| {
                p.strip_prefix(dir)
                    .expect("test")
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        names.sort();
        names
    }

    fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .expect("test")
            .flatten()
            .flat_map(|e| {
                let path = e.path();
                if path.is_dir() {
                    walk(&path)
                } else {
                    vec![path]
                }
            })
            .collect()
    }

    #[test]
    fn pieces_then_tail_or_reserved_head() {
        let (dir, store) = store();
        let mut end = store.upload("a/c/0", 0).expect("test");
        end.append(&Bytes::from_static(b"one")).expect("test");
        end.append(&Bytes::from_static(b"two")).expect("test");
        // Not visible before it is finished.
        assert_eq!(store.get("a/c/0").expect("test"), None);
        assert_eq!(end.appended(), 6);
        assert_eq!(end.finish(&Bytes::from_static(b"IDX")).expect("test"), 9);
        assert_eq!(
            store.get("a/c/0").expect("test").as_deref(),
            Some(&b"onetwoIDX"[..])
        );

        let mut start = store.upload("a/c/1", 4).expect("test");
        start.append(&Bytes::from_static(b"xy")).expect("test");
        assert!(start.finish(&Bytes::from_static(b"toolong")).is_err());
        let mut start = store.upload("a/c/1", 4).expect("test");
        start.append(&Bytes::from_static(b"xy")).expect("test");
        start.append(&Bytes::from_static(b"z")).expect("test");
        assert_eq!(start.finish(&Bytes::from_static(b"HEAD")).expect("test"), 7);
        assert_eq!(
            store.get("a/c/1").expect("test").as_deref(),
            Some(&b"HEADxyz"[..])
        );
        assert_eq!(files(dir.path()), vec!["a/c/0", "a/c/1"]);
    }

    #[test]
    fn a_dropped_upload_leaves_nothing() {
        let (dir, store) = store();
        let mut upload = store.upload("a/c/2", 16).expect("test");
        upload.append(&Bytes::from(vec![7u8; 1000])).expect("test");
        assert_eq!(
            files(dir.path()).len(),
            1,
            "the staging file exists meanwhile"
        );
        drop(upload);
        assert_eq!(store.get("a/c/2").expect("test"), None);
        assert_eq!(files(dir.path()), Vec::<String>::new());
    }

    #[test]
    fn the_staging_file_of_a_killed_upload_is_one_a_rerun_removes() {
        let (dir, store) = store();
        let mut uploads: Vec<Upload> = (0..3)
            .map(|_| store.upload("a/c/2", 16).expect("test"))
            .collect();
        for upload in &mut uploads {
            upload.append(&Bytes::from(vec![7u8; 1000])).expect("test");
        }
        // A process killed here leaves the staging files behind (dropping would remove them).
        let staged = store.staged_keys("").expect("test");
        assert_eq!(staged.len(), 3, "{staged:?}");
        assert!(staged.iter().all(|k| staged_base(k) == Some("a/c/2")));
        store.remove_staged_of("a/c/2").expect("test");
        assert_eq!(files(dir.path()), Vec::<String>::new());
        uploads.clear();
    }
}
