//! A zip file (zarr-python's `ZipStore`, a zipped OME-Zarr `.ozx`) as a read-only object store.
//!
//! The central directory is found and parsed once, from ranged reads of the file (rc-zip's
//! I/O-free state machine asks for the offsets it needs; usually one read of the file's tail
//! serves it all). Members are then read by range: a stored member is a plain range of the file
//! (passthrough: ranged reads of a member are ranged reads of the file), a deflated one is read
//! whole and inflated. Nothing is extracted to disk and the file is never read whole, so a zip on
//! S3 costs one request per member read, plus one per stored member read by range (its local
//! header, once).
//!
//! Because [`ZipStore`] is an [`ObjectStore`], [`Store`](crate::Store) and everything above it
//! (the Zarr readers, the pipeline) read a zip exactly as they read a folder.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use futures::stream::{self, BoxStream, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use rc_zip::fsm::{ArchiveFsm, FsmResult};
use rc_zip::parse::Method;

use crate::error::{Error, Result};

/// The fixed part of a local file header: signature, versions, flags, method, time, CRC, sizes,
/// name and extra field lengths.
const LOCAL_HEADER_LEN: u64 = 30;
/// `PK\x03\x04`, little endian.
const LOCAL_HEADER_SIGNATURE: u32 = 0x0403_4b50;
/// How much of the file's end the first directory read takes: the end of central directory record
/// (with its comment of up to 64 KiB) and, in most zips, the whole central directory with it.
const TAIL_READ: u64 = 256 << 10;
/// The least a later directory read takes.
const BLOCK_READ: u64 = 256 << 10;
/// The most memory reserved up front for an inflated member (its stated size may be a lie).
const MAX_RESERVE: u64 = 64 << 20;

/// How a member's bytes are stored.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Compression {
    /// As they are: a range of the file.
    Stored,
    /// Deflate (RFC 1951), inflated on reading.
    Deflated,
    /// Anything else (bzip2, zstd, ...) or encrypted: refused when the member is read, naming it.
    Unsupported(String),
}

/// One file of a zip, as its central directory entry describes it.
#[derive(Debug)]
struct Member {
    /// The member's name as stored in the zip (for messages).
    name: String,
    compression: Compression,
    /// Where its local header starts in the file.
    header_offset: u64,
    /// Its bytes in the file.
    compressed_size: u64,
    /// Its bytes once inflated (the object's size).
    size: u64,
    crc32: u32,
    modified: DateTime<Utc>,
    /// Where its data starts (after the local header, whose name and extra field lengths are only
    /// known once it has been read).
    data_offset: OnceLock<u64>,
}

/// The files of a zip by key (`/`-separated path, as object_store spells it), from its central
/// directory. Folders (names ending in `/`) are left out, as on an object store; for names given
/// twice the last entry counts, as in Python's `zipfile`.
#[derive(Debug)]
pub struct ZipDirectory {
    members: BTreeMap<String, Member>,
}

impl ZipDirectory {
    /// Parses the central directory of a zip held in memory (`zip` names it in errors). The
    /// directory is checked as [`ZipStore`] checks it: every member's data lies within the file.
    pub fn parse(zip: &str, bytes: &[u8]) -> Result<ZipDirectory> {
        let size = bytes.len() as u64;
        Self::read(zip, size, |range| {
            let (start, end) = (usize::try_from(range.start), usize::try_from(range.end));
            match (start, end) {
                (Ok(start), Ok(end)) if start <= end && end <= bytes.len() => {
                    Ok(Bytes::copy_from_slice(&bytes[start..end]))
                }
                _ => Err(directory_error(zip, "a read past the end of the file")),
            }
        })
    }

    /// The members' keys and sizes (inflated), sorted by key.
    pub fn members(&self) -> impl Iterator<Item = (&str, u64)> {
        self.members.iter().map(|(key, m)| (key.as_str(), m.size))
    }

    /// Reads the directory of a zip of `size` bytes through `read` (a ranged read of the file).
    fn read(
        zip: &str,
        size: u64,
        read: impl FnMut(Range<u64>) -> Result<Bytes>,
    ) -> Result<ZipDirectory> {
        let archive = read_archive(zip, size, read)?;
        let mut members = BTreeMap::new();
        for entry in archive.entries() {
            if entry.name.ends_with('/') {
                continue;
            }
            let member = Member::from_entry(zip, entry, size)?;
            let key = Path::from(entry.name.as_str()).to_string();
            if !key.is_empty() {
                members.insert(key, member);
            }
        }
        Ok(ZipDirectory { members })
    }
}

impl Member {
    fn from_entry(zip: &str, entry: &rc_zip::Entry, file_size: u64) -> Result<Member> {
        const ENCRYPTED: u16 = 1;
        let compression = match entry.method {
            _ if entry.flags & ENCRYPTED != 0 => Compression::Unsupported("encryption".into()),
            Method::Store => Compression::Stored,
            Method::Deflate => Compression::Deflated,
            other => Compression::Unsupported(format!("compression method {other:?}")),
        };
        let end = entry
            .header_offset
            .checked_add(LOCAL_HEADER_LEN)
            .and_then(|e| e.checked_add(entry.compressed_size));
        if end.is_none_or(|end| end > file_size) {
            return Err(Error::ZipMember {
                zip: zip.to_string(),
                member: entry.name.clone(),
                reason: format!(
                    "its data ({} bytes from offset {}) extends past the end of the file ({file_size} bytes)",
                    entry.compressed_size, entry.header_offset
                ),
            });
        }
        Ok(Member {
            name: entry.name.clone(),
            compression,
            header_offset: entry.header_offset,
            compressed_size: entry.compressed_size,
            size: if matches!(entry.method, Method::Store) {
                entry.compressed_size
            } else {
                entry.uncompressed_size
            },
            crc32: entry.crc32,
            modified: entry.modified,
            data_offset: OnceLock::new(),
        })
    }
}

/// Drives rc-zip's directory state machine, answering its reads from one cached block of the file
/// (the first read takes the file's tail, where the directory usually is whole).
fn read_archive(
    zip: &str,
    size: u64,
    mut read: impl FnMut(Range<u64>) -> Result<Bytes>,
) -> Result<rc_zip::Archive> {
    let mut fsm = ArchiveFsm::new(size);
    let mut block: Option<(u64, Bytes)> = None;
    loop {
        if let Some(offset) = fsm.wants_read() {
            let cached = block.as_ref().filter(|(start, bytes)| {
                (*start..start.saturating_add(bytes.len() as u64)).contains(&offset)
            });
            let (start, bytes) = match cached {
                Some(cached) => cached.clone(),
                None => {
                    if offset >= size {
                        return Err(directory_error(zip, "it is truncated"));
                    }
                    let want = (fsm.space().len() as u64).max(BLOCK_READ);
                    let start = match block {
                        None => offset.min(size.saturating_sub(TAIL_READ)),
                        Some(_) => offset,
                    };
                    let end = offset.saturating_add(want).min(size);
                    let bytes = read(start..end)?;
                    if bytes.len() as u64 != end - start {
                        return Err(directory_error(zip, "the file is shorter than its size"));
                    }
                    block = Some((start, bytes.clone()));
                    (start, bytes)
                }
            };
            let from = usize::try_from(offset - start).unwrap_or(usize::MAX);
            let available = bytes.get(from..).unwrap_or_default();
            let space = fsm.space();
            let n = available.len().min(space.len());
            space[..n].copy_from_slice(&available[..n]);
            if n == 0 {
                return Err(directory_error(zip, "it is truncated"));
            }
            fsm.fill(n);
        }
        fsm = match fsm.process() {
            Ok(FsmResult::Continue(fsm)) => fsm,
            Ok(FsmResult::Done(archive)) => return Ok(archive),
            Err(e) => return Err(directory_error(zip, &e.to_string())),
        };
    }
}

fn directory_error(zip: &str, reason: &str) -> Error {
    Error::ZipDirectory {
        zip: zip.to_string(),
        reason: format!("not a readable zip file: {reason}"),
    }
}

/// A zip file in some object store (or local folder), read only, as an object store of its members.
#[derive(Debug)]
pub(crate) struct ZipStore {
    /// The store holding the zip file.
    inner: Arc<dyn ObjectStore>,
    /// The zip file's path in `inner`.
    file: Path,
    /// The zip's location as given, for messages.
    zip: String,
    directory: ZipDirectory,
}

impl std::fmt::Display for ZipStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "zip {}", self.zip)
    }
}

impl ZipStore {
    /// Reads the directory of the zip file `file` of `inner` (`size` bytes) with `read`, a ranged
    /// read of that file (retried as the caller's requests are).
    pub(crate) fn new(
        inner: Arc<dyn ObjectStore>,
        file: Path,
        zip: &str,
        size: u64,
        mut read: impl FnMut(Range<u64>) -> Result<Bytes>,
    ) -> Result<ZipStore> {
        let logged = |range: Range<u64>| {
            tracing::debug!(zip, start = range.start, end = range.end, "zip read");
            read(range)
        };
        let directory = ZipDirectory::read(zip, size, logged)?;
        tracing::debug!(zip, members = directory.members.len(), "zip directory read");
        Ok(ZipStore {
            inner,
            file,
            zip: zip.to_string(),
            directory,
        })
    }

    fn member(&self, location: &Path) -> object_store::Result<&Member> {
        self.directory
            .members
            .get(location.as_ref())
            .ok_or_else(|| object_store::Error::NotFound {
                path: location.to_string(),
                source: format!("no member {location} in {}", self.zip).into(),
            })
    }

    fn member_error(&self, member: &Member, reason: String) -> object_store::Error {
        object_store::Error::Generic {
            store: "zip",
            source: Box::new(Error::ZipMember {
                zip: self.zip.clone(),
                member: member.name.clone(),
                reason,
            }),
        }
    }

    /// A ranged read of the zip file itself (each one a request on object stores).
    async fn read_file(&self, range: Range<u64>) -> object_store::Result<Bytes> {
        tracing::debug!(zip = %self.zip, start = range.start, end = range.end, "zip read");
        self.inner.get_range(&self.file, range).await
    }

    /// Where `member`'s data starts: after its local header, which is read (once) for the lengths
    /// of its name and extra field.
    async fn data_offset(&self, member: &Member) -> object_store::Result<u64> {
        if let Some(offset) = member.data_offset.get() {
            return Ok(*offset);
        }
        let start = member.header_offset;
        let header = self.read_file(start..start + LOCAL_HEADER_LEN).await?;
        let offset = start + self.local_header_len(member, &header)?;
        Ok(*member.data_offset.get_or_init(|| offset))
    }

    /// The length of the local header at the start of `bytes` (fixed part, name, extra field).
    fn local_header_len(&self, member: &Member, bytes: &[u8]) -> object_store::Result<u64> {
        let u16_at = |at: usize| {
            bytes
                .get(at..at + 2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
        };
        let signature = bytes
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        match (signature, u16_at(26), u16_at(28)) {
            (Some(LOCAL_HEADER_SIGNATURE), Some(name), Some(extra)) => {
                Ok(LOCAL_HEADER_LEN + u64::from(name) + u64::from(extra))
            }
            _ => Err(self.member_error(
                member,
                format!("no local file header at offset {}", member.header_offset),
            )),
        }
    }

    /// `member`'s bytes as stored in the file. Unless its data offset is known already, one read
    /// takes the local header and the data together, guessing that the local header has no extra
    /// field (as Python's `zipfile` writes it below 4 GiB); a wrong guess costs a second read.
    async fn stored_bytes(&self, member: &Member) -> object_store::Result<Bytes> {
        if let Some(&start) = member.data_offset.get() {
            return self.read_file(start..start + member.compressed_size).await;
        }
        let guess = LOCAL_HEADER_LEN + member.name.len() as u64;
        let start = member.header_offset;
        let end = start
            .saturating_add(guess)
            .saturating_add(member.compressed_size);
        let bytes = self.read_file(start..end).await?;
        let header_len = self.local_header_len(member, &bytes)?;
        let data = *member.data_offset.get_or_init(|| start + header_len);
        if header_len == guess {
            return Ok(bytes.slice(
                usize::try_from(guess)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len())..,
            ));
        }
        self.read_file(data..data + member.compressed_size).await
    }

    /// The bytes `range` of `member` (inflated).
    async fn read_member(&self, member: &Member, range: Range<u64>) -> object_store::Result<Bytes> {
        let whole = range.start == 0 && range.end == member.size;
        let data = match &member.compression {
            Compression::Unsupported(what) => {
                return Err(self.member_error(
                    member,
                    format!("it uses {what}; zip sources support stored and deflated members"),
                ))
            }
            // Passthrough: a range of a stored member is a range of the file.
            Compression::Stored if !whole => {
                let start = self.data_offset(member).await?;
                return self.read_file(start + range.start..start + range.end).await;
            }
            Compression::Stored => self.stored_bytes(member).await?,
            Compression::Deflated => {
                // Deflate's worst case is 5 bytes per stored block of up to 64 KiB: compressed data
                // far longer than the stated size cannot inflate to it, and is not read.
                let most = member
                    .size
                    .saturating_add(member.size / 8)
                    .saturating_add(1024);
                if member.compressed_size > most {
                    return Err(self.member_error(
                        member,
                        format!(
                            "its {} compressed bytes cannot inflate to the {} its directory entry states",
                            member.compressed_size, member.size
                        ),
                    ));
                }
                self.inflate(member, &self.stored_bytes(member).await?)?
            }
        };
        self.check_crc(member, &data)?;
        let (start, end) = (
            usize::try_from(range.start).unwrap_or(usize::MAX),
            usize::try_from(range.end).unwrap_or(usize::MAX),
        );
        Ok(data.slice(start.min(data.len())..end.min(data.len())))
    }

    fn inflate(&self, member: &Member, compressed: &[u8]) -> object_store::Result<Bytes> {
        let reserve = usize::try_from(member.size.min(MAX_RESERVE)).unwrap_or(0);
        let mut data = Vec::with_capacity(reserve);
        // One byte more than stated, to notice a member that inflates to more.
        flate2::read::DeflateDecoder::new(compressed)
            .take(member.size.saturating_add(1))
            .read_to_end(&mut data)
            .map_err(|e| self.member_error(member, format!("cannot inflate it: {e}")))?;
        if data.len() as u64 != member.size {
            return Err(self.member_error(
                member,
                format!(
                    "it inflates to {}{} bytes, not the {} its directory entry states",
                    data.len()
                        .min(usize::try_from(member.size).unwrap_or(usize::MAX)),
                    if data.len() as u64 > member.size {
                        "+"
                    } else {
                        ""
                    },
                    member.size
                ),
            ));
        }
        Ok(Bytes::from(data))
    }

    fn check_crc(&self, member: &Member, data: &[u8]) -> object_store::Result<()> {
        let mut crc = flate2::Crc::new();
        crc.update(data);
        if crc.sum() != member.crc32 {
            return Err(self.member_error(
                member,
                format!(
                    "its CRC-32 is {:08x}, not the {:08x} its directory entry states (damaged)",
                    crc.sum(),
                    member.crc32
                ),
            ));
        }
        Ok(())
    }

    fn meta(&self, key: &str, member: &Member) -> ObjectMeta {
        ObjectMeta {
            location: Path::from(key),
            last_modified: member.modified,
            size: member.size,
            // What tells a member written again (an update compares it, see zshard-core's
            // `ChunkVersions`): its CRC-32 and sizes, from the directory. The modification time
            // is in 2-second steps, and a rewrite often keeps the size; the member's place in the
            // file is left out, since a zip written anew moves every member after a changed one.
            e_tag: Some(format!(
                "{:08x}-{}-{}",
                member.crc32, member.size, member.compressed_size
            )),
            version: None,
        }
    }

    fn read_only(&self, operation: &str) -> object_store::Error {
        object_store::Error::NotSupported {
            source: format!("{} is read only (cannot {operation})", self.zip).into(),
        }
    }

    /// The members below `prefix` (all with `None`).
    fn below<'a>(
        &'a self,
        prefix: Option<&'a Path>,
    ) -> impl Iterator<Item = (&'a str, &'a Member)> {
        self.directory
            .members
            .iter()
            .filter(move |(key, _)| {
                prefix.is_none_or(|p| Path::from(key.as_str()).prefix_matches(p))
            })
            .map(|(key, m)| (key.as_str(), m))
    }
}

#[async_trait]
impl ObjectStore for ZipStore {
    async fn put_opts(
        &self,
        _location: &Path,
        _payload: PutPayload,
        _options: PutOptions,
    ) -> object_store::Result<PutResult> {
        Err(self.read_only("write"))
    }

    async fn put_multipart_opts(
        &self,
        _location: &Path,
        _options: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        Err(self.read_only("write"))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let member = self.member(location)?;
        let range = match &options.range {
            Some(range) => range
                .as_range(member.size)
                .map_err(|e| self.member_error(member, e.to_string()))?,
            None => 0..member.size,
        };
        let data = if options.head {
            Bytes::new()
        } else {
            self.read_member(member, range.clone()).await?
        };
        Ok(GetResult {
            payload: GetResultPayload::Stream(stream::once(async move { Ok(data) }).boxed()),
            meta: self.meta(location.as_ref(), member),
            range,
            attributes: Default::default(),
            extensions: Default::default(),
        })
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let zip = self.zip.clone();
        locations
            .map(move |_| {
                Err(object_store::Error::NotSupported {
                    source: format!("{zip} is read only (cannot delete)").into(),
                })
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let metas: Vec<_> = self
            .below(prefix)
            .map(|(key, m)| Ok(self.meta(key, m)))
            .collect();
        stream::iter(metas).boxed()
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let depth = prefix.map_or(0, |p| p.parts().count());
        let mut common_prefixes = BTreeSet::new();
        let mut objects = Vec::new();
        for (key, member) in self.below(prefix) {
            let path = Path::from(key);
            let parts: Vec<_> = path.parts().collect();
            match parts.len().checked_sub(depth) {
                Some(1) => objects.push(self.meta(key, member)),
                Some(n) if n > 1 => {
                    common_prefixes.insert(Path::from_iter(parts[..=depth].iter().cloned()));
                }
                _ => {}
            }
        }
        Ok(ListResult {
            common_prefixes: common_prefixes.into_iter().collect(),
            objects,
            extensions: Default::default(),
        })
    }

    async fn copy_opts(
        &self,
        _from: &Path,
        _to: &Path,
        _options: CopyOptions,
    ) -> object_store::Result<()> {
        Err(self.read_only("copy"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{IoRuntime, Store};

    /// Written by Python's `zipfile` (see `fuzz/corpus/zip_directory`): `zarr.json` (37 bytes),
    /// `a/c/0` (bytes 0..40) and a folder entry `dir/`.
    const STORED: &[u8] = include_bytes!("../../../fuzz/corpus/zip_directory/stored.zip");
    const DEFLATED: &[u8] = include_bytes!("../../../fuzz/corpus/zip_directory/deflated.zip");
    const ZIP64: &[u8] = include_bytes!("../../../fuzz/corpus/zip_directory/zip64.zip");

    fn listing(directory: &ZipDirectory) -> Vec<(String, u64)> {
        directory
            .members()
            .map(|(key, size)| (key.to_string(), size))
            .collect()
    }

    #[test]
    fn directories_of_stored_deflated_and_zip64_zips() {
        let want = vec![("a/c/0".to_string(), 40), ("zarr.json".to_string(), 37)];
        for (name, bytes) in [("stored", STORED), ("deflated", DEFLATED), ("zip64", ZIP64)] {
            let directory = ZipDirectory::parse(name, bytes).expect(name);
            assert_eq!(listing(&directory), want, "{name}");
        }
    }

    #[test]
    fn a_truncated_zip_is_refused_by_name() {
        let error =
            ZipDirectory::parse("cut.zip", &STORED[..STORED.len() - 10]).expect_err("refused");
        assert!(
            error
                .to_string()
                .starts_with("cut.zip: not a readable zip file:"),
            "{error}"
        );
        let error = ZipDirectory::parse("none.zip", b"not a zip at all").expect_err("refused");
        assert!(matches!(error, Error::ZipDirectory { .. }), "{error}");
    }

    fn open(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> Store {
        std::fs::write(dir.path().join(name), bytes).expect("write");
        let location = dir.path().join(name);
        Store::open(
            location.to_str().expect("utf-8"),
            IoRuntime::new(1).expect("runtime"),
            false,
        )
        .expect("open")
    }

    #[test]
    fn a_local_zip_opens_as_the_store_of_its_members() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data: Vec<u8> = (0..40).collect();
        for (name, bytes) in [("s.zip", STORED), ("d.ZIP", DEFLATED)] {
            let store = open(&dir, name, bytes);
            assert_eq!(store.local_path("a/c/0"), None, "{name}");
            assert_eq!(store.get("a/c/0").expect("get").as_deref(), Some(&data[..]));
            assert_eq!(store.get("a/c/1").expect("get"), None);
            assert_eq!(
                &store.get_range("a/c/0", 3..7).expect("range")[..],
                &data[3..7]
            );
            let edge = store.get_edge("a/c/0", 16, true).expect("edge");
            assert_eq!(edge.as_deref(), Some(&data[24..]));
            let ranges = store.get_ranges(&[("a/c/0".into(), 0..2), ("a/c/0".into(), 38..40)]);
            let ranges: Vec<_> = ranges.into_iter().map(|r| r.expect("ranges")).collect();
            assert_eq!(
                ranges,
                [Bytes::from_static(&[0, 1]), Bytes::from_static(&[38, 39])]
            );
            let many = store.get_many(&["zarr.json".into(), "missing".into()]);
            assert!(matches!(&many[..], [Ok(Some(json)), Ok(None)] if json.len() == 37));
            assert_eq!(store.list_children("").expect("children"), ["a"]);
            assert_eq!(store.child("a").list_children("").expect("children"), ["c"]);
            assert_eq!(
                store.list_sizes("").expect("sizes"),
                [("a/c/0".to_string(), 40), ("zarr.json".to_string(), 37)]
            );
            assert!(store.put("x", Bytes::from_static(b"x")).is_err());
        }
    }

    #[test]
    fn a_damaged_member_is_named_with_its_zip() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut bytes = STORED.to_vec();
        // `a/c/0` holds the bytes 0..40: change its byte 39 (39 never occurs in the headers before).
        let at = bytes
            .windows(2)
            .position(|w| w == [38, 39])
            .expect("member data")
            + 1;
        bytes[at] = 0xFF;
        let store = open(&dir, "bad.zip", &bytes);
        let error = store.get("a/c/0").expect_err("refused");
        let chain = format!(
            "{error}: {}",
            std::error::Error::source(&error).expect("source")
        );
        assert!(
            chain.contains("bad.zip: member a/c/0: its CRC-32 is"),
            "{chain}"
        );
    }

    #[test]
    fn a_folder_named_like_a_zip_stays_a_folder() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("out.zip")).expect("mkdir");
        std::fs::write(dir.path().join("out.zip/zarr.json"), b"{}").expect("write");
        let location = dir.path().join("out.zip");
        let store = Store::open(
            location.to_str().expect("utf-8"),
            IoRuntime::new(1).expect("runtime"),
            false,
        )
        .expect("open");
        assert_eq!(
            store.get("zarr.json").expect("get").as_deref(),
            Some(&b"{}"[..])
        );
        assert!(store.local_path("zarr.json").is_some());
    }
}

#[cfg(test)]
mod damaged_directories {
    use super::*;

    /// Every truncation and every single-byte change of the seed zips (the fuzz target's promise, over
    /// a deterministic neighbourhood of valid files): parsing returns, and what it lists is sane.
    #[test]
    fn truncations_and_byte_flips_never_panic() {
        let seeds: [&[u8]; 3] = [
            tests_seeds::STORED,
            tests_seeds::DEFLATED,
            tests_seeds::ZIP64,
        ];
        let mut parsed = 0;
        for seed in seeds {
            for len in 0..seed.len() {
                parsed += usize::from(ZipDirectory::parse("cut.zip", &seed[..len]).is_ok());
            }
            for at in 0..seed.len() {
                for flip in [0x01, 0x80, 0xFF] {
                    let mut bytes = seed.to_vec();
                    bytes[at] ^= flip;
                    if let Ok(directory) = ZipDirectory::parse("flipped.zip", &bytes) {
                        parsed += 1;
                        assert!(directory.members().all(|(key, _)| !key.is_empty()));
                    }
                }
            }
        }
        // Most flips land in member data, names or times, which the directory does not check.
        assert!(parsed > 0);
    }

    mod tests_seeds {
        pub(super) const STORED: &[u8] =
            include_bytes!("../../../fuzz/corpus/zip_directory/stored.zip");
        pub(super) const DEFLATED: &[u8] =
            include_bytes!("../../../fuzz/corpus/zip_directory/deflated.zip");
        pub(super) const ZIP64: &[u8] =
            include_bytes!("../../../fuzz/corpus/zip_directory/zip64.zip");
    }
}
