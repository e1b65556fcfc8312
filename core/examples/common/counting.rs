//! A counting global allocator: live requested bytes and allocation calls, and on request a
//! backtrace of every allocation (to find where a hot path allocates).
//!
//! Contract: every method forwards to `System` unchanged; the counters are bookkeeping only.
//! A binary installs it with `#[global_allocator] static A: Counting = Counting;` (only
//! binaries may). [`calls`] counts `alloc`, `alloc_zeroed` and `realloc` (a growth is a trip
//! to the allocator too); [`live`] is bytes requested and not yet freed (allocator overhead
//! and fragmentation not included). Both count the calling thread only (the benchmarks run
//! on one thread): thread-local counters cost a few instructions per call where shared atomic
//! ones would cost a locked instruction each, which the timed hot path (3 allocations per
//! pair) would feel more than its floor (1).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counted.
pub struct Counting;

thread_local! {
    /// Bytes requested and not yet freed by this thread.
    static LIVE: Cell<isize> = const { Cell::new(0) };
    /// Allocation calls of this thread.
    static CALLS: Cell<u64> = const { Cell::new(0) };
    /// Whether allocations of this thread print a backtrace; off while printing one (a
    /// backtrace allocates too).
    static TRACING: Cell<bool> = const { Cell::new(false) };
    /// Allocations traced on this thread (the backtraces' own allocations not included).
    static TRACED: Cell<u64> = const { Cell::new(0) };
}

fn counted(size: isize) {
    LIVE.with(|l| l.set(l.get() + size));
    CALLS.with(|c| c.set(c.get() + 1));
    if TRACING.with(Cell::get) {
        TRACING.with(|t| t.set(false));
        TRACED.with(|n| n.set(n.get() + 1));
        eprintln!(
            "--- allocation of {size} bytes\n{}",
            std::backtrace::Backtrace::force_capture()
        );
        TRACING.with(|t| t.set(true));
    }
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counters are only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            counted(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            counted(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE.with(|l| l.set(l.get() - layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            counted(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// Bytes requested and not yet freed by this thread.
pub fn live() -> isize {
    LIVE.with(Cell::get)
}

/// Allocation calls of this thread so far (`alloc`, `alloc_zeroed`, `realloc`).
pub fn calls() -> u64 {
    CALLS.with(Cell::get)
}

/// Runs `work` printing a backtrace of each allocation it makes on this thread; returns how
/// many there were.
pub fn traced(work: impl FnOnce()) -> u64 {
    TRACED.with(|n| n.set(0));
    TRACING.with(|t| t.set(true));
    work();
    TRACING.with(|t| t.set(false));
    TRACED.with(Cell::get)
}
