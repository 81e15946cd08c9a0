//! Once a second: drain the recorder into an interval, fold it into the totals, make the
//! summary, show the interval to the observers, and hand it to the results writer, which
//! runs on a thread of its own so that file I/O never blocks a runtime worker. The
//! summary is replaced every second (atomically, not synced); the end of the run syncs
//! every file.

use std::sync::mpsc;
use std::thread::JoinHandle;

use super::cpu::RunCpu;
use super::observe::{Observer, Snapshot};
use super::summary::SummaryHeader;
use crate::metrics::{Recorder, Shard};
use crate::results::{Summary, Writer};

enum Job {
    Interval {
        iv: Box<Shard>,
        t0_s: f64,
        len_s: f64,
        active: i64,
        summary: Box<Summary>,
    },
    Finish(Box<Summary>),
}

/// The results writer's thread; the first error it meets ends it and is returned by the
/// next [`WriterThread::send`] or by [`WriterThread::finish`].
struct WriterThread {
    tx: mpsc::Sender<Job>,
    handle: JoinHandle<std::io::Result<()>>,
}

impl WriterThread {
    fn start(mut writer: Writer) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("spate-writer".into())
            .spawn(move || {
                for job in rx {
                    match job {
                        Job::Interval {
                            iv,
                            t0_s,
                            len_s,
                            active,
                            summary,
                        } => {
                            writer.interval(&iv, t0_s, len_s, active)?;
                            writer.write_summary(&summary, false)?;
                        }
                        Job::Finish(summary) => {
                            writer.finish()?;
                            writer.write_summary(&summary, true)?;
                        }
                    }
                }
                Ok(())
            })?;
        Ok(WriterThread { tx, handle })
    }

    /// Queues a job; when the thread has stopped, its error.
    fn send(self, job: Job) -> Result<Self, anyhow::Error> {
        if self.tx.send(job).is_ok() {
            return Ok(self);
        }
        Err(self
            .join()
            .err()
            .unwrap_or_else(|| anyhow::anyhow!("the results writer stopped")))
    }

    fn join(self) -> anyhow::Result<()> {
        drop(self.tx);
        match self.handle.join() {
            Ok(r) => Ok(r?),
            Err(_) => anyhow::bail!("the results writer panicked"),
        }
    }
}

/// Counts, totals and the summary of a run as it goes.
pub(super) struct Aggregator {
    pub header: SummaryHeader,
    totals: Shard,
    writer: Option<WriterThread>,
    last_t: f64,
    cpu: RunCpu,
}

impl Aggregator {
    pub fn new(header: SummaryHeader, writer: Option<Writer>) -> anyhow::Result<Self> {
        Ok(Aggregator {
            header,
            totals: Shard::default(),
            writer: writer.map(WriterThread::start).transpose()?,
            last_t: 0.0,
            cpu: RunCpu::start(),
        })
    }

    /// One interval ending `t` seconds into the run.
    pub fn interval(
        &mut self,
        recorder: &Recorder,
        t: f64,
        interrupted: bool,
        planned: (Option<f64>, Option<u64>),
        observers: &mut [Box<dyn Observer>],
    ) -> anyhow::Result<()> {
        let mut iv = Shard::default();
        recorder.drain_into(&mut iv);
        let active = recorder.active_sessions();
        self.totals.add(&iv);
        let summary = self.summary(t, false, interrupted);
        let snap = Snapshot {
            t_s: t,
            interval_s: t - self.last_t,
            interval: &iv,
            summary: &summary,
            active,
            planned_s: planned.0,
            planned_count: planned.1,
        };
        for o in observers.iter_mut() {
            if let Err(e) = o.interval(&snap) {
                eprintln!("spate: {e:#}");
            }
        }
        let (t0_s, len_s) = (self.last_t, t - self.last_t);
        self.last_t = t;
        if let Some(w) = self.writer.take() {
            self.writer = Some(w.send(Job::Interval {
                iv: Box::new(iv),
                t0_s,
                len_s,
                active,
                summary: Box::new(summary),
            })?);
        }
        Ok(())
    }

    pub fn summary(&self, t: f64, complete: bool, interrupted: bool) -> Summary {
        let cpu = (self.cpu.used(), self.cpu.basis());
        self.header
            .summary(&self.totals, t, complete, interrupted, cpu)
    }

    /// Writes the final summary and makes every file durable.
    pub async fn finish(&mut self, summary: &Summary) -> anyhow::Result<()> {
        let Some(w) = self.writer.take() else {
            return Ok(());
        };
        let w = w.send(Job::Finish(Box::new(summary.clone())))?;
        tokio::task::spawn_blocking(move || w.join()).await?
    }
}
