//! Stopping a run from outside: a signal handler or Python's `KeyboardInterrupt` sets the flag, and the
//! stages notice it between messages.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A cloneable handle that stops a run (and a conversion) from outside, from any thread. Once
/// [`cancel`](Cancel::cancel)led, a run fetches no further part, drops the parts in flight before
/// they reach the writer, abandons shards being streamed (nothing appears under their keys), lets the
/// writes already under way finish, and returns [`Error::Cancelled`](crate::Error::Cancelled).
/// Cancelling cannot be undone: use a new handle for a new run.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A handle that is not cancelled.
    pub fn new() -> Self {
        Cancel::default()
    }

    /// Asks every run observing this handle (or a clone of it) to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// The shared flag itself, for a signal handler to set at the moment a signal arrives
    /// (`signal_hook::flag::register`); setting it is the same as [`cancel`](Cancel::cancel).
    pub fn flag(&self) -> Arc<AtomicBool> {
        self.0.clone()
    }

    /// Whether [`cancel`](Cancel::cancel) was called on this handle or a clone of it.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::Cancel;

    #[test]
    fn clones_share_the_flag() {
        let cancel = Cancel::new();
        let clone = cancel.clone();
        assert!(!clone.is_cancelled());
        cancel.cancel();
        assert!(clone.is_cancelled());
        assert!(!Cancel::new().is_cancelled(), "a new handle is independent");
    }
}
