//! The progress bar on a terminal and the summary after a run.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};
use zshard_pipeline::ShardOutcome;

/// Shards done of the total, bytes written and an ETA; invisible when quiet or not on a terminal.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
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

    /// Clears the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }

    pub fn abandon(&self) {
        self.bar.abandon();
    }
}
