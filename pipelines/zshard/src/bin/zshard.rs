//! The `zshard` command (its logic is the library's [`zshard_cli::main`], which the Python package's
//! `zshard` command calls too).

fn main() -> std::process::ExitCode {
    allocator::reuse_freed_buffers();
    std::process::ExitCode::from(zshard_cli::main(std::env::args_os()))
}

/// glibc's malloc tuned for the pipeline's buffers (issue 43).
///
/// Every source chunk read, decoded chunk and assembled inner chunk is a buffer of 0.1-4 MiB that
/// lives for one stage or two. Left to its defaults, glibc serves such sizes with `mmap` (and then
/// trims the heap as soon as 128 KiB-4 MiB lie free at its top), so each buffer is fresh memory: the
/// kernel faults in and zeroes every page again, and `munmap` tears it down. On a rechunk (W3-like,
/// 640²×512 u16) that was 190,000-275,000 page faults a run and 0.3-0.4 s of system time in about
/// 2.1 s of CPU. Serving them from the heap and keeping freed memory (up to the thresholds below)
/// lets the next buffer reuse pages already mapped: 43,000 faults and 0.23 s of system time (0.51 s
/// before; docs/benchmarks.md, issue 43). Memory freed is held for reuse instead: peak RSS moved by
/// -17 % to +20 % on the rechunks measured (W3 at full size 205 → 246 MiB, W6 at full size under
/// `--memory-limit 512MiB` 354 → 303 MiB).
///
/// Only this binary sets it: the Python package's `zshard` command runs inside the interpreter,
/// whose allocator is not ours to tune.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod allocator {
    #![allow(unsafe_code)]

    /// Buffers up to this size come from the heap (glibc's own cap for the setting is 32 MiB).
    const MMAP_THRESHOLD: libc::c_int = 32 << 20;
    /// Free memory at the top of a heap up to this size stays mapped for the next buffers.
    const TRIM_THRESHOLD: libc::c_int = 64 << 20;

    pub(super) fn reuse_freed_buffers() {
        // One arena per core instead of glibc's eight: each arena keeps its own freed memory, and the
        // pipeline's dozen threads allocate a few large buffers per chunk, not enough to contend on
        // fewer locks (W3 at full size: peak RSS 285-307 → 226-249 MiB, no more CPU).
        let arenas = std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .clamp(2, 64);
        let arenas = libc::c_int::try_from(arenas).unwrap_or(2);
        // SAFETY: `mallopt` only changes malloc's tunable parameters, under malloc's own lock; it
        // reads no memory of ours and is called with documented parameter numbers and in-range values
        // (a value glibc refuses leaves its default and returns 0, which is harmless to ignore).
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
            libc::mallopt(libc::M_ARENA_MAX, arenas);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod allocator {
    /// Other allocators keep their defaults.
    pub(super) fn reuse_freed_buffers() {}
}
