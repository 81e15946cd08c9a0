//! Once a second: drain the recorder into an interval, fold it into the totals, make the
//! summary, show the interval to the observers, and hand it to the results writer, which
//! runs on a thread of its own so that file I/O never blocks a runtime worker, through
//! a bounded queue (a writer that falls behind gets intervals folded together). The
//! summary is replaced every second (atomically, not synced); the end of the run syncs
//! every file.

use std::sync::mpsc;
use std::thread::JoinHandle;

use super::cpu::RunCpu;
use super::observe::{Observer, Snapshot};
use crate::metrics::{Recorder, Shard};
use crate::results::SummaryHeader;
use crate::results::{Summary, Writer};

/// Intervals queued for the writer at most. A writer that falls further behind (a slow
/// disk, a busy machine) gets the next intervals folded into one, which it writes when
/// it catches up: the files lose resolution for that while, and memory stays bounded
/// however long the disk is slow.
const QUEUE_MAX: usize = 4;

/// One interval (or several folded into one) for the writer.
struct Queued {
    iv: Box<Shard>,
    t0_s: f64,
    len_s: f64,
    active: i64,
    summary: Box<Summary>,
}

enum Job {
    Interval(Queued),
    Finish(Box<Summary>),
}

/// The results writer's thread; the first error it meets ends it and is returned by the
/// next [`WriterThread::queue`] or by [`WriterThread::join`]. It hands every interval
/// back emptied, for the aggregator to drain the next one into: the interval's
/// histograms (one per phase, a few hundred KiB of counts each) are allocated once per
/// run, not once a second.
struct WriterThread {
    tx: mpsc::SyncSender<Job>,
    back: mpsc::Receiver<Box<Shard>>,
    handle: JoinHandle<std::io::Result<()>>,
}

impl WriterThread {
    fn start(mut writer: Writer) -> std::io::Result<Self> {
        Self::spawn(move |job| match job {
            Job::Interval(q) => {
                writer.interval(&q.iv, q.t0_s, q.len_s, q.active)?;
                writer.write_summary(&q.summary, false)
            }
            Job::Finish(summary) => {
                writer.finish()?;
                writer.write_summary(summary, true)
            }
        })
    }

    /// The thread, doing `write` with each job.
    fn spawn(
        mut write: impl FnMut(&Job) -> std::io::Result<()> + Send + 'static,
    ) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel(QUEUE_MAX);
        let (back_tx, back) = mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("spate-writer".into())
            .spawn(move || {
                for job in rx {
                    write(&job)?;
                    if let Job::Interval(mut q) = job {
                        q.iv.clear();
                        let _ = back_tx.send(q.iv);
                    }
                }
                Ok(())
            })?;
        Ok(WriterThread { tx, back, handle })
    }

    /// Queues `q` without waiting; gives it back when the queue is full; when the thread
    /// has stopped, its error.
    fn queue(self, q: Queued) -> Result<(Self, Option<Queued>), anyhow::Error> {
        match self.tx.try_send(Job::Interval(q)) {
            Ok(()) => Ok((self, None)),
            Err(mpsc::TrySendError::Full(Job::Interval(q))) => Ok((self, Some(q))),
            Err(_) => Err(self
                .join()
                .err()
                .unwrap_or_else(|| anyhow::anyhow!("the results writer stopped"))),
        }
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
    /// An interval the writer had no room for yet; the next ones fold into it.
    held: Option<Queued>,
    /// An emptied interval kept for the next one.
    idle: Option<Box<Shard>>,
    last_t: f64,
    cpu: RunCpu,
}

impl Aggregator {
    pub fn new(header: SummaryHeader, writer: Option<Writer>) -> anyhow::Result<Self> {
        Ok(Aggregator {
            header,
            totals: Shard::default(),
            writer: writer.map(WriterThread::start).transpose()?,
            held: None,
            idle: None,
            last_t: 0.0,
            cpu: RunCpu::start(),
        })
    }

    /// An empty interval to drain into: one kept or given back by the writer, or a new
    /// one.
    fn spare(&mut self) -> Box<Shard> {
        self.idle
            .take()
            .or_else(|| self.writer.as_ref()?.back.try_recv().ok())
            .unwrap_or_default()
    }

    /// One interval ending `t` seconds into the run.
    pub fn interval(
        &mut self,
        recorder: &Recorder,
        t: f64,
        interrupted: bool,
        planned: (Option<f64>, Option<u64>),
        setup_done_s: Option<f64>,
        observers: &mut [Box<dyn Observer>],
    ) -> anyhow::Result<()> {
        let mut iv = self.spare();
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
            setup_done_s,
        };
        for o in observers.iter_mut() {
            if let Err(e) = o.interval(&snap) {
                eprintln!("spate: {e:#}");
            }
        }
        let (t0_s, len_s) = (self.last_t, t - self.last_t);
        self.last_t = t;
        let Some(w) = self.writer.take() else {
            // No results directory: the interval is kept for the next one.
            iv.clear();
            self.idle = Some(iv);
            return Ok(());
        };
        let q = match self.held.take() {
            // The writer is behind: this interval joins the one waiting for it, and is
            // kept emptied for the next.
            Some(mut h) => {
                h.iv.absorb(&mut iv);
                iv.clear();
                self.idle = Some(iv);
                h.len_s = t - h.t0_s;
                h.active = active;
                h.summary = Box::new(summary);
                h
            }
            None => Queued {
                iv,
                t0_s,
                len_s,
                active,
                summary: Box::new(summary),
            },
        };
        let (w, held) = w.queue(q)?;
        self.writer = Some(w);
        self.held = held;
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
        let held = self.held.take();
        let last = Job::Finish(Box::new(summary.clone()));
        tokio::task::spawn_blocking(move || {
            // Waiting for room is fine here, off the runtime; a send fails only when the
            // thread has stopped, and then join says why.
            let _ = held.map(|q| w.tx.send(Job::Interval(q)));
            let _ = w.tx.send(last);
            w.join()
        })
        .await?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::metrics::phases! {
        BODY => "body", "a test phase";
    }
    use std::sync::{Arc, Mutex};

    fn wait_for(seen: &Mutex<Vec<(f64, f64, u64, u64)>>, n: usize) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while seen.lock().unwrap().len() < n {
            assert!(
                std::time::Instant::now() < deadline,
                "the writer never wrote {n}"
            );
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// A writer stuck on its disk: the queue fills, the next intervals fold into one,
    /// the intervals' memory stays bounded, and nothing is lost once the disk is back.
    #[tokio::test]
    async fn a_slow_writer_gets_intervals_folded_not_queued_without_end() {
        let (gate_tx, gate) = mpsc::channel::<()>();
        let mut gate_tx = Some(gate_tx);
        let (busy_tx, busy) = mpsc::channel::<()>();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, shards) = (seen.clone(), Arc::new(Mutex::new(Vec::new())));
        let sh = shards.clone();
        let writer = WriterThread::spawn(move |job| {
            if let Job::Interval(q) = job {
                // Each interval waits (the disk is slow) until the gate is dropped.
                let _ = busy_tx.send(());
                let _ = gate.recv();
                let n = q.iv.hist(BODY).map_or(0, |h| h.len());
                s.lock()
                    .unwrap()
                    .push((q.t0_s, q.len_s, q.iv.counters.attempted, n));
                let p: *const Shard = &*q.iv;
                sh.lock().unwrap().push(p as usize);
            }
            Ok(())
        })
        .unwrap();
        let header = SummaryHeader {
            run_id: "t".into(),
            command: Vec::new(),
            protocol: "smtp".into(),
            words: crate::results::UnitWords::before_declared("smtp"),
            target: "x".into(),
            started: std::time::SystemTime::now(),
        };
        let mut agg = Aggregator {
            header,
            totals: Shard::default(),
            writer: Some(writer),
            held: None,
            idle: None,
            last_t: 0.0,
            cpu: RunCpu::start(),
        };
        let rec = Recorder::new(2);
        for i in 1..=20 {
            rec.with(i, |s| {
                s.counters.attempted += 1;
                s.record(BODY, 100);
            });
            agg.interval(&rec, i as f64, false, (None, None), None, &mut [])
                .unwrap();
            if i == 1 {
                // The writer has the first interval and is stuck on it.
                busy.recv().unwrap();
            }
            if i == 10 {
                // QUEUE_MAX intervals wait behind it; the rest are one, held back.
                let q = agg.held.as_ref().expect("an interval held back");
                assert_eq!(q.t0_s, (QUEUE_MAX + 1) as f64);
                assert_eq!(q.iv.counters.attempted, 10 - QUEUE_MAX as u64 - 1);
                // The disk is back: the queue drains.
                drop(gate_tx.take());
                wait_for(&seen, QUEUE_MAX + 1);
            }
            if i > 10 {
                // The writer keeps up again: the held interval goes with the next
                // second folded in, then each second alone.
                assert!(agg.held.is_none());
                wait_for(&seen, i - QUEUE_MAX - 1);
            }
        }
        let summary = agg.summary(20.0, true, false);
        agg.finish(&summary).await.unwrap();
        let seen = seen.lock().unwrap().clone();
        // Seconds 6 to 11 in one row.
        let folded = seen[QUEUE_MAX + 1];
        let n = 11 - QUEUE_MAX - 1;
        assert_eq!(
            folded,
            ((QUEUE_MAX + 1) as f64, n as f64, n as u64, n as u64)
        );
        assert_eq!(seen.len(), 20 - n + 1, "{seen:?}");
        assert_eq!(seen.iter().map(|r| r.2).sum::<u64>(), 20, "nothing lost");
        assert_eq!(seen.iter().map(|r| r.3).sum::<u64>(), 20);
        assert_eq!(seen.last().unwrap().0, 19.0);
        // Intervals in use at once: the one written, QUEUE_MAX queued, the one held and
        // the one being drained; never one a second.
        let mut distinct = shards.lock().unwrap().clone();
        distinct.sort();
        distinct.dedup();
        assert!(
            distinct.len() <= QUEUE_MAX + 3,
            "{} intervals",
            distinct.len()
        );
    }
}
