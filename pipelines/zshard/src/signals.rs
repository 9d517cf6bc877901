//! SIGINT, SIGTERM and SIGHUP during a conversion or `finalize`: the first cancels it (the library
//! stops fetching, abandons shards not complete, records what is done and writes the report; finalize
//! stops before its next metadata document), a second one exits at once (the same signal again within
//! 100 ms is the same request: `timeout` sends it twice). During `plan` and `verify`,
//! which write nothing, the first exits at once. Either way the exit status is 128 + the signal, as a
//! shell reports a process killed by it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use indicatif::ProgressBar;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::flag;
use signal_hook::iterator::Signals;
use zshard_convert::Cancel;

/// The signal received (0: none), set by the handler itself as the signal arrives, so that code
/// running right after it (the command's last step) already sees it.
static RECEIVED: LazyLock<Arc<AtomicUsize>> = LazyLock::new(|| Arc::new(AtomicUsize::new(0)));

/// The progress bar on screen, if any: notices are printed above it rather than under its next redraw.
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

const SIGNALS: [i32; 3] = [SIGINT, SIGTERM, SIGHUP];

/// The same signal again within this long after the first is the same request to stop, not a second
/// one: coreutils' `timeout` signals the process and then its process group, so it arrives twice
/// within microseconds.
const SAME_REQUEST_WITHIN: Duration = Duration::from_millis(100);

/// From now on, the first SIGINT, SIGTERM or SIGHUP cancels `cancel`, and a second one exits at once.
pub fn cancel_on_signals(cancel: Cancel) -> anyhow::Result<()> {
    on_signals(Some(cancel))
}

/// For commands that write nothing (`plan`, `verify`): from now on SIGINT, SIGTERM or SIGHUP exits at
/// once with 128 + the signal, as after a cancelled conversion (there is nothing to clean up).
pub fn exit_on_signals() -> anyhow::Result<()> {
    on_signals(None)
}

/// Installs the handlers. The handler itself records the signal and sets `cancel`'s flag (no thread
/// has to be scheduled first, so the step that follows already sees it); a thread prints the notices
/// and exits at a second signal, or at the first one without `cancel`.
fn on_signals(cancel: Option<Cancel>) -> anyhow::Result<()> {
    for signal in SIGNALS {
        let mut installed = flag::register_usize(signal, RECEIVED.clone(), signal as usize);
        if let Some(cancel) = &cancel {
            installed = installed.and_then(|_| flag::register(signal, cancel.flag()));
        }
        installed.with_context(|| format!("cannot install the handler of {}", name(signal)))?;
    }
    let mut signals = Signals::new(SIGNALS).context("cannot install the signal handlers")?;
    let cancels = cancel.is_some();
    let mut first: Option<(i32, Instant)> = None;
    std::thread::Builder::new()
        .name("zshard-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                let repeated = first.is_some_and(|(earlier, at)| {
                    earlier == signal && at.elapsed() < SAME_REQUEST_WITHIN
                });
                if repeated {
                    continue;
                }
                if cancels && first.is_none() {
                    first = Some((signal, Instant::now()));
                    notice(&format!(
                        "{} received: stopping (shards not complete are abandoned, what is done is kept and the report written; rerun the same command to resume); send it again to exit at once",
                        name(signal)
                    ));
                } else {
                    notice(&format!("{}: exiting at once", name(signal)));
                    std::process::exit(exit_code(signal));
                }
            }
        })
        .context("cannot start the signal thread")?;
    Ok(())
}

/// The signal received, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        signal => i32::try_from(signal).ok(),
    }
}

/// The exit status after `signal`: 128 + its number.
pub fn exit_code(signal: i32) -> i32 {
    128 + signal
}

/// The signal's name, as `kill -l` spells it.
pub fn name(signal: i32) -> &'static str {
    match signal {
        SIGINT => "SIGINT",
        SIGTERM => "SIGTERM",
        SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

/// Prints notices above `bar` while it is shown.
pub fn show_notices_above(bar: Option<ProgressBar>) {
    *BAR.lock().unwrap_or_else(|p| p.into_inner()) = bar;
}

fn notice(message: &str) {
    above_bar(|| eprintln!("zshard: {message}"));
}

/// Runs `print` with the progress bar, if one is shown, cleared (it is redrawn below).
pub fn above_bar(print: impl FnOnce()) {
    let bar = BAR.lock().unwrap_or_else(|p| p.into_inner()).clone();
    match bar {
        Some(bar) => bar.suspend(print),
        None => print(),
    }
}
