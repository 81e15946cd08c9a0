//! The run clock: monotonic microseconds since the run's start, the one time source of
//! phase timings (wall-clock time appears only as timestamps in files).

use std::time::Instant;

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
}

impl Default for Clock {
    fn default() -> Self {
        Self::new()
    }
}
