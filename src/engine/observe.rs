//! What follows a run interval by interval without touching its sessions: the progress
//! line, the live dashboard, server monitoring.

use std::path::Path;
use std::time::SystemTime;

use crate::metrics::Shard;
use crate::results::Summary;

/// What an observer sees once per interval, after the interval was written.
pub struct Snapshot<'a> {
    /// Seconds since the start of the run, at the end of this interval.
    pub t_s: f64,
    pub interval_s: f64,
    /// The interval's counters and histograms (already folded into `summary`).
    pub interval: &'a Shard,
    /// Everything so far.
    pub summary: &'a Summary,
    pub active: i64,
    pub planned_s: Option<f64>,
    pub planned_count: Option<u64>,
    /// Seconds into the run when every session had finished its setup (logins), None
    /// while some still have not: what is measured before is the setup's, not the load's.
    pub setup_done_s: Option<f64>,
}

/// Something that follows a run interval by interval: the progress line, the live
/// dashboard, server monitoring. Observers never touch the sessions.
pub trait Observer: Send {
    /// The run starts; `dir` is its results directory, `start` its wall-clock origin.
    fn start(&mut self, _dir: &Path, _start: SystemTime) -> anyhow::Result<()> {
        Ok(())
    }
    /// The run's control, for an observer that steers it (the live view): the run takes
    /// it from the first observer that has one.
    fn control(&self) -> Option<std::sync::Arc<super::Control>> {
        None
    }
    /// Once per interval (about every second).
    fn interval(&mut self, snap: &Snapshot<'_>) -> anyhow::Result<()>;
    /// The run is over; the observer may add to the final summary (warnings, extra
    /// sections) before it is written.
    fn finish(&mut self, _summary: &mut Summary) {}
}
