//! The progress bar on a terminal and the summary after a run.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};
use zshard_pipeline::{ShardOutcome, Stats};

/// Shards done of the total, bytes written and an ETA; invisible when quiet or not on a terminal.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    started: Instant,
    quiet: bool,
    written: AtomicU64,
}

impl Progress {
    pub fn new(total_shards: u64, quiet: bool) -> Self {
        let target = if quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let bar = ProgressBar::with_draw_target(Some(total_shards), target);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} shards, {msg} written, ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Progress {
            bar,
            started: Instant::now(),
            quiet,
            written: AtomicU64::new(0),
        }
    }

    pub fn shard_done(&self, outcome: &ShardOutcome) {
        let total = self
            .written
            .fetch_add(outcome.bytes_written, Ordering::Relaxed)
            + outcome.bytes_written;
        self.bar.set_message(HumanBytes(total).to_string());
        self.bar.inc(1);
    }

    /// Clears the bar and prints the summary (unless quiet).
    pub fn finish(&self, arrays: usize, stats: &Stats, destination: &str) {
        self.bar.finish_and_clear();
        if self.quiet {
            return;
        }
        let seconds = self.started.elapsed().as_secs_f64();
        let rate = if seconds > 0.0 {
            stats.bytes_read as f64 / seconds
        } else {
            0.0
        };
        eprintln!(
            "zshard: converted {arrays} array(s) into {destination}: {} shard(s) written, {} empty and skipped; \
             read {} in {} chunk(s) ({} missing), wrote {}, in {seconds:.1} s ({}/s read)",
            stats.shards_written,
            stats.shards_empty,
            HumanBytes(stats.bytes_read),
            stats.chunks_read,
            stats.chunks_missing,
            HumanBytes(stats.bytes_written),
            HumanBytes(rate as u64),
        );
    }

    pub fn abandon(&self) {
        self.bar.abandon();
    }
}
