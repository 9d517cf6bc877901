//! The progress bar on a terminal.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{HumanBytes, ProgressBar, ProgressDrawTarget, ProgressStyle};
use zshard_convert::{Observer, ShardOutcome};

/// Shards done of the total, bytes written and an ETA; invisible when quiet or not on a terminal.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    written: AtomicU64,
    /// The run got as far as converting (no bar is left behind by a failure before that).
    started: AtomicBool,
}

impl Progress {
    pub fn new(quiet: bool) -> Self {
        let target = if quiet || !std::io::stderr().is_terminal() {
            ProgressDrawTarget::hidden()
        } else {
            ProgressDrawTarget::stderr()
        };
        let bar = ProgressBar::with_draw_target(Some(0), target);
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} shards, {msg} written, ETA {eta}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        crate::signals::show_notices_above(Some(bar.clone()));
        Progress {
            bar,
            written: AtomicU64::new(0),
            started: AtomicBool::new(false),
        }
    }

    /// Clears the bar after a run that succeeded, leaves it where it stopped after a failure.
    pub fn finish(&self, succeeded: bool) {
        crate::signals::show_notices_above(None);
        if succeeded || !self.started.load(Ordering::Relaxed) {
            self.bar.finish_and_clear();
        } else {
            self.bar.abandon();
        }
    }
}

impl Observer for Progress {
    fn started(&self, pending_shards: u64) {
        self.started.store(true, Ordering::Relaxed);
        self.bar.set_length(pending_shards);
        self.bar.enable_steady_tick(Duration::from_millis(200));
    }

    fn shard_done(&self, outcome: &ShardOutcome) {
        let total = self
            .written
            .fetch_add(outcome.bytes_written, Ordering::Relaxed)
            + outcome.bytes_written;
        self.bar.set_message(HumanBytes(total).to_string());
        self.bar.inc(1);
    }

    fn warning(&self, message: &str) {
        self.bar.suspend(|| eprintln!("zshard: warning: {message}"));
    }
}
