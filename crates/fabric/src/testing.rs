//! For tests that prove a hot path allocates nothing: a global allocator that counts, per
//! thread, the allocations made through it. The one `unsafe` it needs lives here, in the
//! fabric layer, for every crate's tests to use:
//!
//! ```ignore
//! #[global_allocator]
//! static A: dtxn_fabric::testing::CountingAlloc = dtxn_fabric::testing::CountingAlloc;
//! let before = dtxn_fabric::testing::allocs();
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// The system allocator, counting `alloc` and `realloc` calls per thread.
pub struct CountingAlloc;

thread_local! {
    // Per thread: the tests of one binary run in parallel, and each measures its own thread.
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

/// Allocations (and reallocations) this thread has made through [`CountingAlloc`] so far.
pub fn allocs() -> u64 {
    ALLOCS.with(Cell::get)
}

// SAFETY: every method defers to the system allocator with the caller's arguments, so each
// keeps `System`'s guarantees; counting touches only a thread-local `Cell` (const-initialized:
// no allocation, no reentry).
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        // SAFETY: our caller upholds `GlobalAlloc::alloc`'s contract, which is `System`'s.
        unsafe { System.alloc(l) }
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `System` through us, with layout `l`.
        unsafe { System.dealloc(p, l) }
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        ALLOCS.with(|a| a.set(a.get() + 1));
        // SAFETY: `p` came from `System` through us, with layout `l`; `n` is the caller's.
        unsafe { System.realloc(p, l, n) }
    }
}
