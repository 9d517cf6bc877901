//! A bound on the messages between the fetchers and the writer. The channels bound each stage, but the
//! writer keeps parts that arrive before their predecessors (a shard's parts are written in order), so
//! without this a stalled part would let the fetchers run on and the writer hold the rest of its shard.
//! Fetchers take a permit before they take the next part, so the oldest part in flight always holds one
//! and the window never deadlocks; a permit is returned when its message is dropped (written, failed or
//! abandoned).

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

#[derive(Debug)]
pub(crate) struct Window {
    free: Mutex<usize>,
    returned: Condvar,
}

/// One message's place in the [`Window`].
#[derive(Debug)]
pub(crate) struct Permit(Arc<Window>);

impl Window {
    pub(crate) fn new(size: usize) -> Arc<Window> {
        Arc::new(Window {
            free: Mutex::new(size.max(1)),
            returned: Condvar::new(),
        })
    }

    /// Waits for a free place; `None` once `stopped` says the run is stopping.
    pub(crate) fn acquire(self: &Arc<Self>, stopped: impl Fn() -> bool) -> Option<Permit> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        while *free == 0 {
            if stopped() {
                return None;
            }
            // Wakes now and then to notice a cancelled run.
            free = self
                .returned
                .wait_timeout(free, Duration::from_millis(50))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        *free -= 1;
        Some(Permit(Arc::clone(self)))
    }

    /// A free place if there is one now, without waiting.
    pub(crate) fn try_acquire(self: &Arc<Self>) -> Option<Permit> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if *free == 0 {
            return None;
        }
        *free -= 1;
        Some(Permit(Arc::clone(self)))
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut free = self.0.free.lock().unwrap_or_else(|p| p.into_inner());
        *free += 1;
        self.0.returned.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn permits_are_bounded_and_returned_on_drop() {
        let cancel = AtomicBool::new(false);
        let window = Window::new(2);
        let a = window.acquire(|| cancel.load(Ordering::Relaxed));
        let b = window.acquire(|| cancel.load(Ordering::Relaxed));
        assert!(a.is_some() && b.is_some());
        cancel.store(true, Ordering::Relaxed);
        assert!(
            window.acquire(|| cancel.load(Ordering::Relaxed)).is_none(),
            "full window and cancelled"
        );
        assert!(
            window.try_acquire().is_none(),
            "a full window has no place now"
        );
        drop(a);
        assert!(
            window.try_acquire().is_some(),
            "a returned place is free again"
        );
    }
}
