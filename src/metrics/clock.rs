//! The run clock: monotonic microseconds since the run's start, the one time source of
//! phase timings (wall-clock time appears only as timestamps in files).
//!
//! A phase that ends with the server's bytes ends when those bytes reached this host,
//! not when this process got round to reading them: the transport notes the kernel's
//! receive time of every read ([`note_arrival`]), and [`Clock::end_us`] takes it. On an
//! idle machine waking the reading thread costs tens of microseconds, which would
//! otherwise be counted as the server's time.

use std::cell::Cell;
use std::time::Instant;

thread_local! {
    /// The receive time of the latest read on this thread, and the task that read (none:
    /// the future a runtime blocks on, which shares its thread with no other).
    static ARRIVAL: Cell<Option<(Option<tokio::task::Id>, Instant)>> = const { Cell::new(None) };
}

/// Bytes the current task just read reached this host at `at` (the kernel's receive
/// timestamp).
#[inline]
pub fn note_arrival(at: Instant) {
    ARRIVAL.set(Some((tokio::task::try_id(), at)));
}

/// When the current task's latest read arrived, if this thread read it.
#[inline]
fn arrival() -> Option<Instant> {
    let (id, at) = ARRIVAL.get()?;
    (tokio::task::try_id() == id).then_some(at)
}

/// The clock for phase timings: monotonic, microseconds.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: Instant,
}

impl Clock {
    pub fn new() -> Self {
        Clock {
            origin: Instant::now(),
        }
    }
    /// A clock whose run starts at `origin` (a shard waiting for --start-at): until
    /// then it reads 0.
    pub fn starting_at(origin: Instant) -> Self {
        Clock { origin }
    }
    pub fn origin(&self) -> Instant {
        self.origin
    }
    /// Microseconds since the run's origin.
    #[inline]
    pub fn now_us(&self) -> u64 {
        self.origin.elapsed().as_micros() as u64
    }

    /// `at` on the run clock.
    #[inline]
    pub fn us_at(&self, at: Instant) -> u64 {
        at.saturating_duration_since(self.origin).as_micros() as u64
    }

    /// The end of something that began at `since` and ended with bytes from the server:
    /// when the current task's latest read reached this host, if that was since then;
    /// otherwise now (the bytes were already buffered, or nothing was read).
    #[inline]
    pub fn end_us(&self, since: u64) -> u64 {
        let now = self.now_us();
        match arrival() {
            Some(at) => {
                let us = self.us_at(at);
                if (since..=now).contains(&us) {
                    us
                } else {
                    now
                }
            }
            None => now,
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}
