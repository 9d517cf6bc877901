//! SIGINT, SIGTERM and SIGHUP during a conversion: the first cancels it (the library stops fetching,
//! abandons shards not complete, records what is done and writes the report), a second one exits at
//! once. Either way the exit status is 128 + the signal, as a shell reports a process killed by it.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Mutex;

use anyhow::Context;
use indicatif::ProgressBar;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use zshard_convert::Cancel;

/// The first signal received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// The progress bar on screen, if any: notices are printed above it rather than under its next redraw.
static BAR: Mutex<Option<ProgressBar>> = Mutex::new(None);

/// From now on, the first SIGINT, SIGTERM or SIGHUP cancels `cancel`, and a second one exits at once.
pub fn cancel_on_signals(cancel: Cancel) -> anyhow::Result<()> {
    let mut signals =
        Signals::new([SIGINT, SIGTERM, SIGHUP]).context("cannot install the signal handlers")?;
    std::thread::Builder::new()
        .name("zshard-signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if RECEIVED
                    .compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
                {
                    notice(&format!(
                        "{} received: stopping (shards not complete are abandoned, what is done is kept and the report written; rerun the same command to resume); send it again to exit at once",
                        name(signal)
                    ));
                    cancel.cancel();
                } else {
                    notice(&format!("{}: exiting at once", name(signal)));
                    std::process::exit(exit_code(signal));
                }
            }
        })
        .context("cannot start the signal thread")?;
    Ok(())
}

/// The first signal received, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        signal => Some(signal),
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
