//! Local staging files written around the page cache (`O_DIRECT`) where the filesystem allows it.
//!
//! Copying a shard into the page cache costs the writing process a fresh page for every 4 KiB it
//! writes; on a virtual machine whose host takes freed memory back, each of those pages is a fault
//! in the host as well (320 MiB written with `dd`: 0.75 s of system time buffered, 0.02 s direct).
//! A conversion rarely reads its shards back, so the cache buys nothing for that cost, and on a
//! migration of many terabytes it evicts what the source's readers had cached. Direct writes need
//! the buffer's address, the file offset and the length aligned to the filesystem's block, so the
//! pieces are gathered into an aligned block and written a block at a time; the last block is
//! padded with zeros and the file cut to its length. The reserved head (a shard index at the start)
//! is kept in memory with the rest of its first block until it is known.
//!
//! Only local disk filesystems (ext4, XFS, btrfs) are written so; those in memory (tmpfs) and
//! network and cluster filesystems get the buffered writes zshard always made. A direct write the
//! filesystem refuses (an alignment it did not announce) is made buffered, as is the rest of the
//! file.
//!
//! Source files are read the same way when they are on such a filesystem, at least
//! [`DIRECT_READ_MIN`] bytes long and not in the page cache ([`read_uncached`]): a migration reads
//! each source chunk once, so caching it only costs the copy out of the cache and evicts what
//! others had cached. A file that is cached (a source just written, or read again) is read from
//! the cache as before, not from the disk.

use std::fs::File;
use std::io::{IoSlice, Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;

use bytes::Bytes;

/// Bytes gathered before each direct write: a multiple of every block size in use.
const BLOCK: usize = 2 << 20;

/// The largest alignment direct writes accept; a filesystem asking for more is written buffered.
const MAX_ALIGN: usize = 64 << 10;

/// A staging file being written: directly where possible, else through the page cache.
pub(crate) struct StagingFile {
    file: File,
    direct: Option<Direct>,
}

impl StagingFile {
    /// Creates `path`, which must not exist, with `reserved` bytes at its start left for
    /// [`StagingFile::finish`]'s head.
    pub(crate) fn create_new(path: &std::path::Path, reserved: u64) -> std::io::Result<Self> {
        let file = File::create_new(path)?;
        let align = direct_alignment(&file);
        Self::new(file, reserved, align)
    }

    /// A staging file written directly with this alignment, or buffered for `None`.
    fn new(mut file: File, reserved: u64, align: Option<usize>) -> std::io::Result<Self> {
        let direct = match align {
            Some(align) => Some(Direct::new(align, reserved)?),
            None => {
                file.seek(SeekFrom::Start(reserved))?;
                None
            }
        };
        Ok(StagingFile { file, direct })
    }

    /// Whether the file is written around the page cache.
    #[cfg(test)]
    fn is_direct(&self) -> bool {
        self.direct.as_ref().is_some_and(|d| d.active)
    }

    /// Appends `piece`.
    pub(crate) fn append(&mut self, piece: &[u8]) -> std::io::Result<()> {
        match &mut self.direct {
            Some(direct) => direct.append(&self.file, piece),
            None => self.file.write_all(piece),
        }
    }

    /// Appends `pieces` in order (one vectored write when buffered).
    pub(crate) fn append_all(&mut self, pieces: &[Bytes]) -> std::io::Result<()> {
        match &mut self.direct {
            Some(direct) => pieces
                .iter()
                .try_for_each(|piece| direct.append(&self.file, piece)),
            None => write_all_vectored(&mut self.file, pieces),
        }
    }

    /// Writes `head` into the reserved bytes and every byte still gathered, and returns the file,
    /// complete (not yet synced).
    pub(crate) fn finish(self, head: &[u8]) -> std::io::Result<File> {
        let StagingFile { file, direct } = self;
        match direct {
            Some(direct) => direct.finish(&file, head)?,
            None if !head.is_empty() => file.write_all_at(head, 0)?,
            None => {}
        }
        Ok(file)
    }
}

/// The alignment direct writes to `file` need, when its filesystem takes them and the file now
/// has `O_DIRECT` set; `None` leaves the file buffered.
#[cfg(target_os = "linux")]
fn direct_alignment(file: &File) -> Option<usize> {
    use rustix::fs::{AtFlags, OFlags, StatxFlags};
    // Only local disk filesystems: in memory (tmpfs takes `O_DIRECT` since Linux 6.6) the pages
    // are the file, so the gathering would only add a copy; on network and cluster filesystems
    // (NFS, Lustre, GPFS, CIFS, FUSE) a direct write can be a synchronous round trip of its own,
    // and their clients manage their caches themselves.
    const EXT4_SUPER_MAGIC: u64 = 0xef53;
    const XFS_SUPER_MAGIC: u64 = 0x5846_5342;
    const BTRFS_SUPER_MAGIC: u64 = 0x9123_683e;
    let kind = rustix::fs::fstatfs(file).ok()?.f_type as u64;
    if ![EXT4_SUPER_MAGIC, XFS_SUPER_MAGIC, BTRFS_SUPER_MAGIC].contains(&kind) {
        return None;
    }
    let statx = rustix::fs::statx(file, "", AtFlags::EMPTY_PATH, StatxFlags::DIOALIGN).ok()?;
    let align = if statx.stx_mask & StatxFlags::DIOALIGN.bits() != 0 {
        // Linux 6.1 and later say what the filesystem needs; 0 means it takes no direct I/O.
        let need = statx.stx_dio_offset_align.max(statx.stx_dio_mem_align) as usize;
        (need != 0).then_some(need)?
    } else {
        // Older kernels do not say: a page covers 512-byte and 4 KiB sectors, and a write
        // refused for its alignment falls back to buffered (see `Direct::write_at`).
        4096
    };
    if !align.is_power_of_two() || align > MAX_ALIGN {
        return None;
    }
    let flags = rustix::fs::fcntl_getfl(file).ok()?;
    // Refused (EINVAL) by filesystems without direct I/O.
    rustix::fs::fcntl_setfl(file, flags | OFlags::DIRECT).ok()?;
    Some(align)
}

#[cfg(not(target_os = "linux"))]
fn direct_alignment(_file: &File) -> Option<usize> {
    None
}

/// The gathering side of a direct staging file.
struct Direct {
    align: usize,
    /// Whether `O_DIRECT` is still set (cleared after a refused write).
    active: bool,
    /// The bytes of the file from `start` on, `filled` of them so far.
    block: AlignedBuf,
    filled: usize,
    start: u64,
    /// The file's first `first.len()` bytes (the reserved head rounded up to the alignment), kept
    /// until the head is known; empty when nothing is reserved.
    first: AlignedBuf,
    reserved: usize,
}

impl Direct {
    fn new(align: usize, reserved: u64) -> std::io::Result<Self> {
        let reserved = usize::try_from(reserved).map_err(std::io::Error::other)?;
        // The head's bytes stand as zeros until `finish`: its whole blocks are in `first` already
        // (zeroed), the rest starts the (zeroed) block.
        let whole = reserved / BLOCK * BLOCK;
        Ok(Direct {
            align,
            active: true,
            block: AlignedBuf::new(BLOCK, align),
            filled: reserved - whole,
            start: whole as u64,
            first: AlignedBuf::new(reserved.next_multiple_of(align), align),
            reserved,
        })
    }

    fn offset_in_first(&self) -> usize {
        usize::try_from(self.start).unwrap_or(usize::MAX)
    }

    fn append(&mut self, file: &File, mut piece: &[u8]) -> std::io::Result<()> {
        while !piece.is_empty() {
            let n = piece.len().min(BLOCK - self.filled);
            self.block.as_mut()[self.filled..self.filled + n].copy_from_slice(&piece[..n]);
            self.filled += n;
            piece = &piece[n..];
            if self.filled == BLOCK {
                self.flush(file)?;
            }
        }
        Ok(())
    }

    /// Writes the gathered bytes (padded with zeros to the alignment) and starts the next block
    /// after them. The part that falls in the head's region is kept in `first` instead.
    fn flush(&mut self, file: &File) -> std::io::Result<()> {
        let at_first = self.offset_in_first();
        let padded = self.filled.next_multiple_of(self.align);
        let in_first = self.first.len.saturating_sub(at_first).min(padded);
        let block = self.block.as_mut();
        block[self.filled..padded].fill(0);
        if in_first > 0 {
            self.first.as_mut()[at_first..at_first + in_first].copy_from_slice(&block[..in_first]);
        }
        if in_first < padded {
            let at = self.start + in_first as u64;
            write_at(file, &mut self.active, &block[in_first..padded], at)?;
        }
        self.start += padded as u64;
        self.filled = 0;
        Ok(())
    }

    fn finish(mut self, file: &File, head: &[u8]) -> std::io::Result<()> {
        if head.len() != self.reserved {
            return Err(std::io::Error::other(format!(
                "head of {} bytes for {} reserved",
                head.len(),
                self.reserved
            )));
        }
        let len = self.start + self.filled as u64;
        if self.filled > 0 {
            self.flush(file)?;
        }
        if !self.first.as_mut().is_empty() {
            self.first.as_mut()[..head.len()].copy_from_slice(head);
            write_at(file, &mut self.active, self.first.as_mut(), 0)?;
        }
        // The padding of the last block goes.
        file.set_len(len)
    }
}

/// Writes `bytes` at `offset`; a direct write the filesystem refuses (EINVAL: an alignment it did
/// not announce) clears `O_DIRECT` and is made buffered.
fn write_at(file: &File, active: &mut bool, bytes: &[u8], offset: u64) -> std::io::Result<()> {
    match file.write_all_at(bytes, offset) {
        Err(e) if *active && e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
            *active = false;
            clear_direct(file)?;
            file.write_all_at(bytes, offset)
        }
        result => result,
    }
}

#[cfg(target_os = "linux")]
fn clear_direct(file: &File) -> std::io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(file)?;
    rustix::fs::fcntl_setfl(file, flags - rustix::fs::OFlags::DIRECT)?;
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn clear_direct(_file: &File) -> std::io::Result<()> {
    Ok(())
}

/// A zeroed buffer of `len` bytes whose start is aligned to `align`, without `unsafe`: a vector
/// `align` bytes longer, used from its first aligned address.
struct AlignedBuf {
    bytes: Vec<u8>,
    offset: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize, align: usize) -> Self {
        if len == 0 {
            return AlignedBuf {
                bytes: Vec::new(),
                offset: 0,
                len: 0,
            };
        }
        let bytes = vec![0u8; len + align];
        let offset = bytes.as_ptr().align_offset(align);
        AlignedBuf { bytes, offset, len }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[self.offset..self.offset + self.len]
    }
}

/// Source files shorter than this are read through the page cache: the copy out of it costs less
/// than a request to the disk.
pub(crate) const DIRECT_READ_MIN: u64 = 256 << 10;

/// Reads all of `file`, stated to be `size` bytes long, around the page cache when it is at least
/// [`DIRECT_READ_MIN`] bytes on a local disk filesystem and its first page is not cached; `None`
/// leaves it to the caller's buffered read: a cached or short file, another filesystem, a direct
/// read refused, or a file that has grown past `size` meanwhile (the caller sees the growth).
pub(crate) fn read_uncached(file: &File, size: u64) -> Option<std::io::Result<Bytes>> {
    if size < DIRECT_READ_MIN || is_cached(file) {
        return None;
    }
    let align = direct_alignment(file)?;
    match read_direct(file, size, align) {
        Ok(Some(bytes)) => Some(Ok(bytes)),
        // Buffered again for the caller's read.
        Ok(None) => clear_direct(file).err().map(Err),
        Err(e) => Some(Err(e)),
    }
}

/// Reads `file` (`O_DIRECT` set, `align` its alignment) whole; `None` when its length is not
/// `size` or the filesystem refused the read.
fn read_direct(file: &File, size: u64, align: usize) -> std::io::Result<Option<Bytes>> {
    // One byte past the stated size, rounded up: a file that fills it has grown.
    let Some(len) = usize::try_from(size + 1)
        .ok()
        .map(|n| n.next_multiple_of(align))
    else {
        return Ok(None);
    };
    let mut buffer = AlignedBuf::new(len, align);
    let mut filled = 0;
    while filled < len {
        match file.read_at(&mut buffer.as_mut()[filled..], filled as u64) {
            Ok(0) => break,
            Ok(n) => {
                filled += n;
                // A short read that leaves the offset unaligned ended at the end of the file.
                if filled % align != 0 {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {
                return Ok(None);
            }
            Err(e) => return Err(e),
        }
    }
    if filled as u64 != size {
        return Ok(None);
    }
    let AlignedBuf { bytes, offset, .. } = buffer;
    Ok(Some(Bytes::from(bytes).slice(offset..offset + filled)))
}

/// Whether the first page of `file` is in the page cache (a read that must not wait for the disk
/// succeeds); anything but a clear "no" counts as cached, so that the file is read as before.
#[cfg(target_os = "linux")]
fn is_cached(file: &File) -> bool {
    use rustix::fs::{fadvise, Advice};
    use rustix::io::{preadv2, Errno, IoSliceMut, ReadWriteFlags};
    // A read that misses still starts the page's read from the disk, and with the file's usual
    // readahead some pages after it (52 KiB of a 1.6 MB chunk here): random access asks for the
    // one page.
    let random = fadvise(file, 0, None, Advice::Random).is_ok();
    let mut byte = [0u8; 1];
    let probe = preadv2(
        file,
        &mut [IoSliceMut::new(&mut byte)],
        0,
        ReadWriteFlags::NOWAIT,
    );
    if random {
        // A file read buffered after all (cached, or on a filesystem not read directly) is read
        // as before, with readahead; a direct read has none.
        let _ = fadvise(file, 0, None, Advice::Normal);
    }
    !matches!(probe, Err(Errno::AGAIN))
}

#[cfg(not(target_os = "linux"))]
fn is_cached(_file: &File) -> bool {
    true
}

/// Writes every byte of `pieces`, resuming after short writes.
pub(crate) fn write_all_vectored(file: &mut File, pieces: &[Bytes]) -> std::io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = pieces
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| IoSlice::new(p))
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        match file.write_vectored(rest) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pieces of awkward sizes (empty, one byte, across blocks) with a head of `reserved` bytes, written
    /// directly where the temporary folder's filesystem takes it (`buffered`: never).
    fn write(dir: &std::path::Path, reserved: usize, sizes: &[usize], buffered: bool) -> bool {
        let path = dir.join(format!("staged-{reserved}-{}-{buffered}", sizes.len()));
        let mut expected = vec![0u8; reserved];
        let file = File::create_new(&path).expect("create");
        let align = if buffered {
            None
        } else {
            direct_alignment(&file)
        };
        let mut file = StagingFile::new(file, reserved as u64, align).expect("staging");
        let direct = file.is_direct();
        for (i, size) in sizes.iter().enumerate() {
            let piece: Vec<u8> = (0..*size).map(|j| (i * 31 + j * 7) as u8).collect();
            expected.extend_from_slice(&piece);
            match i % 2 {
                0 => file.append_all(&[Bytes::from(piece), Bytes::new()]),
                _ => file.append(&piece),
            }
            .expect("append");
        }
        let head: Vec<u8> = (0..reserved).map(|j| (j % 251) as u8 + 1).collect();
        expected[..reserved].copy_from_slice(&head);
        drop(file.finish(&head).expect("finish"));
        assert_eq!(
            std::fs::read(&path).expect("read"),
            expected,
            "{reserved} {sizes:?}"
        );
        direct
    }

    /// Every case, and whether each was written directly.
    fn cases(buffered: bool) -> Vec<bool> {
        // The temporary folder is on a disk filesystem on most machines (direct writes there).
        let dir = tempfile::tempdir().expect("tempdir");
        let mut direct = Vec::new();
        for reserved in [0, 4, 8196, BLOCK - 3, BLOCK + 5000] {
            for sizes in [
                vec![],
                vec![1],
                vec![0, 4095, 1, 4096, 17],
                vec![BLOCK - 1, 2, BLOCK, 3 * BLOCK + 11],
                vec![5; 1000],
            ] {
                direct.push(write(dir.path(), reserved, &sizes, buffered));
            }
        }
        direct
    }

    #[test]
    fn direct_files_hold_exactly_what_was_appended() {
        let direct = cases(false);
        // Where the filesystem takes direct I/O, every file was written so.
        assert!(direct.iter().all(|d| *d == direct[0]));
    }

    #[test]
    fn buffered_files_hold_exactly_what_was_appended() {
        assert!(cases(true).iter().all(|direct| !direct));
    }

    /// Drops `path`'s pages from the page cache (written back first), as a file nobody has read
    /// lately is; false where the kernel does not take the advice. Not checked with `is_cached`:
    /// its probe starts reading the first page back into the cache.
    fn evict(path: &std::path::Path) -> bool {
        let file = File::open(path).expect("open");
        file.sync_all().expect("sync");
        rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed).is_ok()
    }

    /// Issue 43: a file that is not cached is read directly and whole, whatever its length against
    /// the alignment; a cached one, a short one, or one longer than stated is left to the caller.
    #[test]
    fn uncached_files_are_read_whole_around_the_page_cache() {
        let dir = tempfile::tempdir().expect("tempdir");
        let min = DIRECT_READ_MIN as usize;
        let mut read_directly = 0;
        for len in [
            min,
            min + 1,
            min + 511,
            2 * BLOCK - 1,
            2 * BLOCK,
            2 * BLOCK + 4097,
        ] {
            let path = dir.path().join(format!("source-{len}"));
            let data: Vec<u8> = (0..len).map(|i| (i * 13 + len) as u8).collect();
            std::fs::write(&path, &data).expect("write");
            let file = File::open(&path).expect("open");
            assert!(is_cached(&file), "just written");
            assert!(
                read_uncached(&file, len as u64).is_none(),
                "cached: buffered"
            );
            if !evict(&path) {
                continue;
            }
            let file = File::open(&path).expect("open");
            match read_uncached(&file, len as u64) {
                Some(read) => {
                    assert_eq!(read.expect("read").as_ref(), &data[..], "{len}");
                    read_directly += 1;
                }
                // Not a filesystem that takes direct reads: nothing was read.
                None => assert_eq!(direct_alignment(&file), None),
            }
            // Stated shorter than it is (it grew since it was listed): left to the caller.
            if evict(&path) {
                let file = File::open(&path).expect("open");
                assert!(read_uncached(&file, (len - 4096) as u64).is_none(), "{len}");
            }
        }
        let short = dir.path().join("short");
        std::fs::write(&short, vec![1u8; min - 1]).expect("write");
        if evict(&short) {
            let file = File::open(&short).expect("open");
            assert!(read_uncached(&file, (min - 1) as u64).is_none());
        }
        eprintln!("read directly: {read_directly} files");
    }

    #[test]
    fn memory_filesystems_are_written_buffered() {
        let Ok(dir) = tempfile::tempdir_in("/dev/shm") else {
            return;
        };
        let file = File::create_new(dir.path().join("f")).expect("create");
        assert_eq!(direct_alignment(&file), None);
    }

    #[test]
    fn a_refused_direct_write_is_made_buffered() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("refused");
        let file = File::create(&path).expect("create");
        // A buffer that is not aligned is what a filesystem with larger blocks would refuse.
        if direct_alignment(&file).is_none() {
            return;
        }
        let mut active = true;
        let bytes = vec![7u8; 4097];
        write_at(&file, &mut active, &bytes[1..], 0).expect("write");
        assert!(!active);
        assert_eq!(std::fs::read(&path).expect("read"), vec![7u8; 4096]);
    }
}
