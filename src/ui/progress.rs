//! The one-line progress display on stderr, an observer of the run.

use std::time::Duration;

use crate::engine::{Observer, Snapshot};
use crate::results::Summary;
use crate::units;

/// The one-line progress display on stderr.
pub struct Progress {
    /// What one unit of work is called on the line ("msg", "session").
    pub unit: &'static str,
    shown: bool,
}

impl Progress {
    pub fn new(unit: &'static str) -> Self {
        Progress { unit, shown: false }
    }
}

impl Observer for Progress {
    fn interval(&mut self, snap: &Snapshot<'_>) -> anyhow::Result<()> {
        use std::io::Write;
        let s = snap.summary;
        let c = &s.totals;
        let p99 = s.latency_phase().map_or(0, |p| p.p99_us);
        let head = match (snap.planned_count, snap.planned_s) {
            (Some(n), _) => {
                let done = (c.attempted as f64 / n as f64).min(1.0);
                let filled = (done * 20.0) as usize;
                format!(
                    "[{}{}] {:>3.0}%",
                    "#".repeat(filled),
                    ".".repeat(20 - filled),
                    done * 100.0
                )
            }
            (None, Some(d)) => format!("[{:>5.0}s/{:.0}s]", snap.t_s, d),
            _ => format!("[{:>5.0}s]", snap.t_s),
        };
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r{head} sent {} ok {} rej {} fail {} | {:.0} {}/s | p99 {} | active {}   ",
            c.attempted,
            c.accepted,
            c.rejected,
            c.failed,
            s.messages_per_s,
            self.unit,
            units::fmt_duration(Duration::from_micros(p99)),
            snap.active,
        );
        let _ = err.flush();
        self.shown = true;
        Ok(())
    }

    fn finish(&mut self, _summary: &mut Summary) {
        if self.shown {
            eprintln!();
        }
    }
}
