//! Server monitoring during a run: processes (by name or PID), the host's CPU, memory,
//! disks and network, a Postfix queue, and optionally a Prometheus endpoint, sampled on
//! the run's own interval clock and written to `monitor.csv` next to `intervals.csv`.
//! At the end the summary gets means and maxima of every column, the memory slope of each
//! process group (leaks in long runs), throughput drift, spate's own memory, and what the
//! sampling itself cost.
//!
//! monitor.csv: `t_s,time,<group>.<name>.<metric>...`; unit suffixes `_pct`, `_mb`,
//! `_kbps` (kilobytes/s), `_ms`, none for counts. Columns are fixed at start.

pub mod host;
pub mod proc;
pub mod prom;
pub mod queue;
pub mod slope;
pub mod text;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::{json, Map, Value};

use crate::engine::{Observer, Snapshot};
pub use proc::thread_cpu;

use crate::opts::MonitorArgs;
use crate::results::Summary;
use crate::UsageError;

/// `10MB/h` → megabytes per hour.
pub fn parse_leak_rate(text: &str) -> Result<f64, UsageError> {
    let bad = || {
        UsageError(format!(
            "--leak-warn '{text}': expected SIZE/h, e.g. 10MB/h"
        ))
    };
    let size = text.trim().strip_suffix("/h").ok_or_else(bad)?;
    let bytes = crate::units::parse_size(size).map_err(|_| bad())?;
    Ok(bytes as f64 / 1_048_576.0)
}

/// The monitoring observer for these options, or None when monitoring is off.
/// `detail`: how long monitor.csv has a row per second; after it, a row per minute (the
/// means of its seconds), as intervals.csv.
pub fn observer(args: &MonitorArgs, detail: Duration) -> anyhow::Result<Option<Box<dyn Observer>>> {
    if !args.enabled() {
        return Ok(None);
    }
    let mut m = Monitor::new(args)?;
    m.detail_s = detail.as_secs_f64();
    Ok(Some(Box::new(m)))
}

/// One memory series followed for its slope.
/// For a group of processes that come and go (Postfix's smtpd), the sum of their memory
/// follows their number; a leak shows in the memory per process, so that is what is
/// followed when the group has a count.
struct RssTrack {
    group: String,
    col: usize,
    count_col: Option<usize>,
    points: Vec<(f32, f32)>,
    /// The first and the latest sample, exact (the points are averaged as they halve).
    first: Option<f64>,
    last: f64,
}

pub struct Monitor {
    procs: proc::Procs,
    host: host::Host,
    queue: Option<queue::Queue>,
    prom: Option<prom::Prom>,
    columns: Vec<String>,
    csv: Option<BufWriter<File>>,
    start: SystemTime,
    last_t: f64,
    vals: Vec<f64>,
    sum: Vec<f64>,
    max: Vec<f64>,
    n: u64,
    rss: Vec<RssTrack>,
    /// (end of interval s, length s, accepted): for throughput drift.
    accepted: Vec<(f64, f64, u64)>,
    cost: Duration,
    leak_warn_mb_h: f64,
    planned_s: Option<f64>,
    /// When every session's setup had ended (seconds into the run).
    setup_done_s: Option<f64>,
    /// Sums, samples and seconds of the intervals wholly after the setup (XMPP's logins):
    /// the load's own window, without the login storm.
    after_setup: (Vec<f64>, u64, f64),
    /// The CPU figure a sweep reports: the monitored processes, or the host.
    cpu_basis: String,
    /// Seconds of one-second rows in monitor.csv; then a row per minute.
    detail_s: f64,
    /// The minute being gathered after `detail_s`: its start and the sums of its seconds.
    window: Option<(f64, Vec<f64>, u32)>,
}

impl Monitor {
    pub fn new(args: &MonitorArgs) -> anyhow::Result<Monitor> {
        let leak_warn_mb_h = parse_leak_rate(&args.leak_warn)?;
        let mut groups = Vec::new();
        for name in &args.monitor_process {
            let name = name.trim();
            if name.is_empty() {
                continue;
            }
            groups.push(proc::Group::new(
                format!("proc.{}", proc::sanitize(name)),
                proc::Selector::Name(name.to_string()),
                true,
            ));
        }
        for &pid in &args.monitor_pid {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return crate::usage(format!("--monitor-pid {pid}: no such process"));
            }
            groups.push(proc::Group::new(
                format!("proc.pid{pid}"),
                proc::Selector::Pid(pid),
                true,
            ));
        }
        let cpu_basis = if groups.is_empty() {
            "host".to_string()
        } else {
            groups
                .iter()
                .map(|g| g.prefix.clone())
                .collect::<Vec<_>>()
                .join("+")
        };
        groups.push(proc::Group::new(
            "self.spate".into(),
            proc::Selector::Pid(std::process::id()),
            false,
        ));
        if let Some(q) = &args.monitor_queue {
            if !q.is_dir() {
                return crate::usage(format!("--monitor-queue {}: not a directory", q.display()));
            }
        }
        let procs = proc::Procs::new(groups);
        let host = host::Host::new(&args.monitor_disk, &args.monitor_net);
        let queue = args.monitor_queue.clone().map(queue::Queue::new);
        let prom = match &args.monitor_prom {
            Some(url) => Some(prom::Prom::start(url, &args.monitor_series)?),
            None => None,
        };
        let mut columns = host.columns();
        columns.extend(procs.columns());
        if let Some(q) = &queue {
            columns.extend(q.columns());
        }
        if let Some(p) = &prom {
            columns.extend(p.columns());
        }
        let rss = columns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let group = c.strip_suffix(".rss_mb")?.to_string();
                let count = format!("{group}.count");
                Some(RssTrack {
                    count_col: columns.iter().position(|c| *c == count),
                    group,
                    col: i,
                    points: Vec::new(),
                    first: None,
                    last: 0.0,
                })
            })
            .collect();
        let n = columns.len();
        Ok(Monitor {
            procs,
            host,
            queue,
            prom,
            columns,
            csv: None,
            start: SystemTime::now(),
            last_t: 0.0,
            vals: Vec::with_capacity(n),
            sum: vec![0.0; n],
            max: vec![0.0; n],
            n: 0,
            rss,
            accepted: Vec::new(),
            cost: Duration::ZERO,
            leak_warn_mb_h,
            planned_s: None,
            setup_done_s: None,
            after_setup: (Vec::new(), 0, 0.0),
            cpu_basis,
            detail_s: f64::INFINITY,
            window: None,
        })
    }

    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// Takes one sample of every source for an interval of `dt` seconds into `self.vals`.
    fn sample(&mut self, dt: f64) {
        self.vals.clear();
        self.host.sample(dt, &mut self.vals);
        self.procs.sample(dt, &mut self.vals);
        if let Some(q) = &mut self.queue {
            q.sample(&mut self.vals);
        }
        if let Some(p) = &self.prom {
            p.sample(&mut self.vals);
        }
    }

    /// Seconds after which the run counts as warmed up: a tenth of it, 5 s to 60 s, but
    /// at most half of a short run; and never before every session's setup (logins) has
    /// ended, whose memory growth is no trend of the load's.
    fn warm_s(&self, end: f64) -> f64 {
        let warm = (self.planned_s.unwrap_or(end) * 0.1)
            .clamp(5.0, 60.0)
            .min(end / 2.0);
        warm.max(self.setup_done_s.unwrap_or(0.0).min(end))
    }
    /// Memory per process group: first and last sample, the slope after the warm-up
    /// (`warm` seconds), a warning for a group that grows like a leak, and spate's own.
    fn memory(
        &self,
        warm: f64,
        warnings: &mut Vec<String>,
    ) -> (Map<String, Value>, Map<String, Value>, Value) {
        let r3 = |v: f64| (v * 1000.0).round() / 1000.0;
        let mut slopes = Map::new();
        let mut self_rss = Value::Null;
        let mut memory = Map::new();
        for t in &self.rss {
            if let Some(first) = t.first {
                memory.insert(
                    t.group.clone(),
                    json!({"start": r3(first), "end": r3(t.last)}),
                );
            }
            let pts: Vec<(f64, f64)> = t
                .points
                .iter()
                .filter(|p| p.0 as f64 >= warm)
                .map(|&(x, y)| (x as f64 / 3600.0, y as f64))
                .collect();
            if t.group == "self.spate" {
                let after = pts
                    .first()
                    .map(|p| p.1)
                    .or(t.points.first().map(|p| p.1 as f64))
                    .unwrap_or(0.0);
                let end = t.points.last().map_or(0.0, |p| p.1 as f64);
                self_rss = json!({"after_warmup": r3(after), "end": r3(end), "warmup_s": r3(warm)});
            }
            let Some(s) = slope::slope(&pts) else {
                continue;
            };
            slopes.insert(t.group.clone(), json!(r3(s)));
            // A short run's noise makes steep slopes, and memory taken once makes a step:
            // a leak must have grown a few MB, and all along.
            if let Some(s) = slope::leaks(&pts, self.leak_warn_mb_h, 4.0) {
                warnings.push(format!(
                    "{} memory grows {:.1} MB/hour per process (more than --leak-warn {:.1} MB/h): a leak?",
                    t.group, s, self.leak_warn_mb_h
                ));
            }
        }
        (slopes, memory, self_rss)
    }

    /// The `monitor` section of summary.json, and warnings.
    fn report(&self, elapsed: f64) -> (Value, Vec<String>) {
        let r3 = |v: f64| (v * 1000.0).round() / 1000.0;
        let mut mean = Map::new();
        let mut max = Map::new();
        for (i, c) in self.columns.iter().enumerate() {
            let m = if self.n > 0 {
                self.sum[i] / self.n as f64
            } else {
                0.0
            };
            mean.insert(c.clone(), json!(r3(m)));
            max.insert(c.clone(), json!(r3(self.max[i])));
        }
        let mut warnings = Vec::new();
        let warm = self.warm_s(elapsed);
        let (slopes, memory, self_rss) = self.memory(warm, &mut warnings);
        // Drift compares load with load: the drain after a planned duration is left out.
        let in_plan: Vec<(f64, f64, u64)> = match self.planned_s {
            Some(p) => self
                .accepted
                .iter()
                .copied()
                .filter(|a| a.0 <= p + 0.5)
                .collect(),
            None => self.accepted.clone(),
        };
        let drift = slope::drift(&in_plan);
        if let Some(d) = &drift {
            if elapsed >= 600.0 && d.change_pct.abs() > 10.0 {
                warnings.push(format!(
                    "throughput drifted {:+.0}% between the first and the last {:.0} s ({:.1}/s → {:.1}/s)",
                    d.change_pct, d.window_s, d.first_per_s, d.last_per_s
                ));
            }
        }
        let cost_pct = if elapsed > 0.0 {
            let prom = self
                .prom
                .as_ref()
                .map_or(0, |p| p.cpu_ns.load(std::sync::atomic::Ordering::Relaxed));
            (self.cost.as_secs_f64() + prom as f64 / 1e9) / elapsed * 100.0
        } else {
            0.0
        };
        // The load's own window (after every session's setup), when the setup took a
        // second or more (XMPP's logins): figures of the load without the login storm.
        let after_setup = match (&self.after_setup, self.setup_done_s) {
            ((sums, n, secs), Some(from)) if *n > 0 && from >= 1.0 => {
                let m: Map<String, Value> = self
                    .columns
                    .iter()
                    .zip(sums)
                    .map(|(c, s)| (c.clone(), json!(r3(s / *n as f64))))
                    .collect();
                json!({"from_s": r3(from), "seconds": r3(*secs), "samples": n, "mean": m})
            }
            _ => Value::Null,
        };
        let v = json!({
            "file": "monitor.csv",
            "after_setup": after_setup,
            "columns": self.columns,
            "samples": self.n,
            "cpu_basis": self.cpu_basis,
            "mean": mean,
            "max": max,
            // Per process of the group (memory divided by the number of processes).
            "memory_slope_mb_per_h": slopes,
            // Per process too: the first and the last sample of the run.
            "memory_mb": memory,
            "memory_slope_after_s": warm,
            "leak_warn_mb_per_h": self.leak_warn_mb_h,
            "throughput_drift": drift,
            "self_rss_mb": self_rss,
            "cost_cpu_pct_of_core": (cost_pct * 10000.0).round() / 10000.0,
        });
        (v, warnings)
    }
}

/// Trend series keep at most this many points: a soak of any length has bounded memory
/// (a 16-hour run keeps 14-second resolution).
const MAX_POINTS: usize = 4096;

/// Merges neighbours pairwise, halving the resolution of a trend series.
fn halve<T: Copy>(v: &mut Vec<T>, merge: impl Fn(T, T) -> T) {
    let merged: Vec<T> = v
        .chunks(2)
        .map(|c| {
            if c.len() == 2 {
                merge(c[0], c[1])
            } else {
                c[0]
            }
        })
        .collect();
    *v = merged;
}

fn fmt_val(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.3}")
    }
}

/// One row of monitor.csv, ending `t_s` seconds after `start`.
fn row(
    csv: &mut Option<BufWriter<File>>,
    start: SystemTime,
    t_s: f64,
    vals: &[f64],
) -> std::io::Result<()> {
    if let Some(f) = csv {
        let wall = start + Duration::from_secs_f64(t_s);
        let mut line = format!("{t_s:.3},{}", crate::results::rfc3339(wall));
        for v in vals {
            line.push(',');
            line.push_str(&fmt_val(*v));
        }
        writeln!(f, "{line}")?;
        f.flush()?;
    }
    Ok(())
}

impl Monitor {
    /// The minute gathered so far, as one row of its means.
    fn flush_window(&mut self, t_s: f64) -> std::io::Result<()> {
        let Some((_, sums, n)) = self.window.take() else {
            return Ok(());
        };
        let means: Vec<f64> = sums.iter().map(|s| s / f64::from(n.max(1))).collect();
        row(&mut self.csv, self.start, t_s, &means)
    }
}

impl Observer for Monitor {
    fn start(&mut self, dir: &Path, start: SystemTime) -> anyhow::Result<()> {
        self.start = start;
        let mut f = BufWriter::new(File::create(dir.join("monitor.csv"))?);
        writeln!(f, "t_s,time,{}", self.columns.join(","))?;
        f.flush()?;
        self.csv = Some(f);
        // Fresh baselines: the first row covers the first interval only.
        let t0 = thread_cpu();
        self.sample(1.0);
        self.cost += thread_cpu().saturating_sub(t0);
        Ok(())
    }

    fn interval(&mut self, snap: &Snapshot<'_>) -> anyhow::Result<()> {
        let t0 = thread_cpu();
        self.planned_s = snap.planned_s;
        self.setup_done_s = snap.setup_done_s;
        let dt = snap.t_s - self.last_t;
        // The last interval of a run can be a few milliseconds long: rates over it are
        // noise, so it is left out, unless it is all there is (a run under a second).
        if dt < 0.25 && self.n > 0 {
            return Ok(());
        }
        self.last_t = snap.t_s;
        self.sample(dt);
        self.n += 1;
        for (i, v) in self.vals.iter().enumerate() {
            self.sum[i] += v;
            if *v > self.max[i] {
                self.max[i] = *v;
            }
        }
        if snap.setup_done_s.is_some_and(|s| snap.t_s - dt >= s - 1e-6) {
            let (sums, n, secs) = &mut self.after_setup;
            sums.resize(self.vals.len(), 0.0);
            for (s, v) in sums.iter_mut().zip(&self.vals) {
                *s += v;
            }
            *n += 1;
            *secs += dt;
        }
        for t in &mut self.rss {
            let rss = self.vals[t.col];
            let y = match t.count_col.map(|c| self.vals[c]) {
                Some(n) if n >= 1.0 => rss / n,
                Some(_) => continue, // no such process at the moment
                None => rss,
            };
            t.points.push((snap.t_s as f32, y as f32));
            t.first.get_or_insert(y);
            t.last = y;
            if t.points.len() >= MAX_POINTS {
                halve(&mut t.points, |a, b| ((a.0 + b.0) / 2.0, (a.1 + b.1) / 2.0));
            }
        }
        self.accepted
            .push((snap.t_s, snap.interval_s, snap.interval.counters.accepted));
        if self.accepted.len() >= MAX_POINTS {
            halve(&mut self.accepted, |a, b| (b.0, a.1 + b.1, a.2 + b.2));
        }
        if snap.t_s - dt / 2.0 < self.detail_s {
            row(&mut self.csv, self.start, snap.t_s, &self.vals)?;
        } else {
            let (start, sums, n) = self
                .window
                .get_or_insert_with(|| (snap.t_s - dt, vec![0.0; self.vals.len()], 0));
            for (s, v) in sums.iter_mut().zip(&self.vals) {
                *s += v;
            }
            *n += 1;
            if snap.t_s - *start >= crate::results::COARSE_S - 1e-6 {
                self.flush_window(snap.t_s)?;
            }
        }
        self.cost += thread_cpu().saturating_sub(t0);
        Ok(())
    }

    fn finish(&mut self, summary: &mut Summary) {
        let _ = self.flush_window(self.last_t);
        if let Some(p) = &mut self.prom {
            p.stop();
        }
        if let Some(mut f) = self.csv.take() {
            let _ = f.flush();
        }
        let (v, w) = self.report(summary.elapsed_s);
        summary.extra.insert("monitor".into(), v);
        summary.warnings.extend(w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trend_series_stay_bounded() {
        let mut v: Vec<(f64, f64, u64)> = (1..=10).map(|i| (i as f64, 1.0, 5)).collect();
        halve(&mut v, |a, b| (b.0, a.1 + b.1, a.2 + b.2));
        assert_eq!(v.len(), 5);
        assert_eq!(v[4], (10.0, 2.0, 10));
        let total: u64 = v.iter().map(|x| x.2).sum();
        assert_eq!(total, 50);
    }

    #[test]
    fn leak_rate() {
        assert_eq!(parse_leak_rate("10MB/h").unwrap(), 10.0);
        assert!(parse_leak_rate("10MB").is_err());
        assert!(parse_leak_rate("x/h").is_err());
    }
}
