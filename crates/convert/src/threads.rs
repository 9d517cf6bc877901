//! How many worker threads a run uses: the default (one per core), the cap, and the refusal of
//! none. Conversion, verification and the options model all take their threads from here.

use zshard_core::Setting;

use crate::error::{Error, Result};

/// Threads for every core: the default of every `threads` setting.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Worker threads per CPU stage allowed for each core: more only wait for one, and every thread
/// costs its stack, its buffers and its turn when a run stops (3000 threads on 2 cores ran a
/// 116 KiB conversion for minutes and took 2 min 50 s to stop on SIGTERM).
pub const THREADS_PER_CPU: usize = 4;

/// Worker threads per CPU stage on any machine, however many cores it has.
pub const MAX_THREADS: usize = 1024;

/// The most worker threads per CPU stage a run uses: [`THREADS_PER_CPU`] for each core, at most
/// [`MAX_THREADS`]. More are capped to it, with a warning (see [`capped_threads`]): a job file
/// written on a larger machine still runs.
pub fn max_threads() -> usize {
    THREADS_PER_CPU
        .saturating_mul(default_threads())
        .min(MAX_THREADS)
}

/// `threads` capped at [`max_threads`], and the warning that says so when it was.
pub fn capped_threads(threads: usize) -> (usize, Option<String>) {
    let max = max_threads();
    if threads <= max {
        return (threads, None);
    }
    let warning = format!(
        "{} is more than {THREADS_PER_CPU} per CPU ({} CPUs): {max} threads are used",
        Setting::Threads.given(threads),
        default_threads()
    );
    (max, Some(warning))
}

/// Fetch threads (and as many write threads) allowed for each core. They wait on storage, not on a
/// core, so more than worker threads; but each is a thread of its own with its stack and the
/// shards it holds, and `--io-threads 100000` failed ("cannot start a pipeline thread").
pub const IO_THREADS_PER_CPU: usize = 32;

/// Fetch threads allowed on any machine, however few cores it has: twice the most a remote run
/// takes by default (32).
pub const MIN_IO_THREADS_CAP: usize = 64;

/// The most fetch threads (and write threads) a run uses: [`IO_THREADS_PER_CPU`] for each core,
/// at least [`MIN_IO_THREADS_CAP`] and at most [`MAX_THREADS`]. More are capped to it, with a
/// warning (see [`capped_io_threads`]).
pub fn max_io_threads() -> usize {
    IO_THREADS_PER_CPU
        .saturating_mul(default_threads())
        .clamp(MIN_IO_THREADS_CAP, MAX_THREADS)
}

/// `io_threads` capped at [`max_io_threads`], and the warning that says so when it was.
pub fn capped_io_threads(io_threads: usize) -> (usize, Option<String>) {
    let max = max_io_threads();
    if io_threads <= max {
        return (io_threads, None);
    }
    let warning = format!(
        "{} is more than {IO_THREADS_PER_CPU} per CPU ({} CPUs; at least {MIN_IO_THREADS_CAP}): \
         {max} threads fetch and {max} write",
        Setting::IoThreads.given(io_threads),
        default_threads()
    );
    (max, Some(warning))
}

/// Refuses a count of 0 (`threads`, `io_threads`, `max_requests`): a stage without a thread, or a
/// batch without a request in flight, never ends. Python refuses it as it lowers its arguments,
/// with the same words.
pub(crate) fn check_threads(setting: Setting, value: Option<usize>) -> Result<()> {
    match value {
        Some(0) => Err(Error::Options {
            reason: format!("{setting} must be at least 1, got 0"),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_threads_beyond_the_cap_are_capped_with_a_warning() {
        let max = max_io_threads();
        assert!((MIN_IO_THREADS_CAP..=MAX_THREADS).contains(&max));
        assert_eq!(capped_io_threads(max), (max, None));
        let (capped, warning) = capped_io_threads(100_000);
        assert_eq!(capped, max);
        assert!(
            warning.is_some_and(|w| w.ends_with(&format!("{max} threads fetch and {max} write"))),
        );
    }
}
