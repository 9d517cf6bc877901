//! Local files written in bulk leave the page cache once the disk has them ("drop-behind").
//!
//! A conversion writes each output file once and does not read it back. Left in the page cache,
//! every written page is a page the kernel must find anew for the next write: on a host whose free
//! memory is scarce it reclaims or compacts other pages for it, on a virtual machine whose free
//! memory goes back to the host (free page reporting) the first touch of each page faults in the
//! host. Either way that work lands on the writer threads, inside the `write` call (issue 43: on
//! W3 at 640×640×512 the copies into the page cache were a quarter of the run's CPU, and `dd` writes
//! 320 MiB in 0.55 s of system time that way against 0.07 s when each written page is dropped).
//!
//! So a finished file is first asked to be written back (`posix_fadvise(DONTNEED)` starts the
//! writeback of its dirty pages and drops the clean ones) and kept open; once [`LAG_BYTES`] of
//! later files have followed it, it is asked again, which drops the pages written back since,
//! and closed. The next writes then reuse the pages just dropped. Nothing waits for the disk:
//! pages not yet written back stay cached, as before. Durability is untouched (the writes are
//! made durable as before, by their fsync or the run's checkpoint).

use std::collections::VecDeque;
use std::fs::File;
use std::sync::Mutex;

/// Bytes written after a file before its pages are dropped: time for the disk to take them, and
/// the page cache that this drop-behind holds at most.
pub(crate) const LAG_BYTES: u64 = 64 << 20;

/// The files written whose pages are to be dropped, oldest first, and their total size.
#[derive(Debug, Default)]
pub(crate) struct DropBehind {
    files: Mutex<(VecDeque<(File, u64)>, u64)>,
}

impl DropBehind {
    /// Takes `file` (complete, `len` bytes) to drop its pages later; drops those of the files
    /// written more than [`LAG_BYTES`] before it.
    pub(crate) fn written(&self, file: File, len: u64) {
        // Starts the writeback (dirty pages cannot be dropped). A refusal only leaves them cached.
        advise_dont_need(&file);
        let due: Vec<File> = {
            let mut guard = self.files.lock().unwrap_or_else(|p| p.into_inner());
            let (files, bytes) = &mut *guard;
            files.push_back((file, len));
            *bytes += len;
            let mut due = Vec::new();
            while *bytes > LAG_BYTES {
                let Some((file, len)) = files.pop_front() else {
                    break;
                };
                *bytes -= len;
                due.push(file);
            }
            due
        };
        for file in due {
            advise_dont_need(&file);
        }
    }
}

#[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
fn advise_dont_need(file: &File) {
    let _ = rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed);
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
fn advise_dont_need(_file: &File) {}
