//! Measures the largest single Rust allocation made while armed, so that a decoder that allocates
//! from a size its input claims (rather than from the expected chunk size) is caught even when the
//! allocation stays under libFuzzer's `-malloc_limit_mb` (which also covers C allocations).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Probe;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

static PEAK: AtomicUsize = AtomicUsize::new(0);

fn note(size: usize) {
    if ARMED.with(Cell::get) {
        PEAK.fetch_max(size, Ordering::Relaxed);
    }
}

#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Probe {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Probe = Probe;

/// Starts measuring allocations of this thread.
pub fn arm() {
    PEAK.store(0, Ordering::Relaxed);
    ARMED.with(|a| a.set(true));
}

/// Stops measuring; the largest single allocation since [`arm`].
pub fn disarm() -> usize {
    ARMED.with(|a| a.set(false));
    PEAK.load(Ordering::Relaxed)
}
