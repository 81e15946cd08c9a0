//! The live-heap counter of the allocator tests: a global allocator that forwards every
//! call to the system allocator and keeps the bytes allocated and not yet freed. Global to
//! the test process: a test binary that includes it holds one test, or runs with
//! --test-threads=1 (as CI does).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};

struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);

/// Bytes allocated and not freed, process-wide.
pub fn live() -> i64 {
    LIVE.load(Ordering::SeqCst)
}

// SAFETY: every call is forwarded to the system allocator unchanged; only a counter moves.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, Ordering::Relaxed);
        System.alloc(l)
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as i64, Ordering::Relaxed);
        System.dealloc(p, l)
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as i64 - l.size() as i64, Ordering::Relaxed);
        System.realloc(p, l, new)
    }
}

#[global_allocator]
static A: Counting = Counting;
