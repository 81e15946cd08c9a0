//! Faults on a schedule (`--fault`): a thread of their own applies them at their times
//! from the run's start — a signal to the server's processes (STOP is followed by CONT
//! at the fault's end), a restart command, a command and its undo — and writes every
//! event to faults.jsonl as it happens. As an observer, it sets what the load did before,
//! during and after each fault side by side: throughput, errors by class, response time,
//! and how long the load took to come back (the first accepted unit, then throughput
//! within 10 % of before). Only a run's first shard applies them; every shard measures.

pub mod kernel;
pub mod proxy;
pub mod spec;
mod window;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

pub use spec::{Action, Signal, Spec, Target};

use crate::engine::{Observer, Snapshot};
use crate::results::{rfc3339, Summary};

/// How long a fault's own command (run=, undo=) may take before the schedule goes on
/// without it; a restart command is waited for on a thread of its own.
const COMMAND_LIMIT: Duration = Duration::from_secs(60);
/// Events kept in memory for the summary (faults.jsonl has every one).
const MAX_EVENTS: usize = 1000;
/// The events that apply a fault or take it out again: one that failed fails the run
/// (unless the fault says `optional=yes`). A restart that fails is the server's matter
/// and only a warning.
const APPLYING: [&str; 4] = ["signal", "run", "continue", "undo"];

/// How many faults of the run were not applied (or not taken out again), from its
/// summary; such a run exits 1.
pub fn not_applied(summary: &Summary) -> u64 {
    summary
        .extra
        .get("faults")
        .and_then(|f| f.get("not_applied"))
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(0)
}

/// One thing that happened to a fault, as faults.jsonl has it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Event {
    /// Seconds since the run's start.
    pub t_s: f64,
    pub time: String,
    /// Which `--fault` (0-based, in the order given) and which of its occurrences.
    pub fault: usize,
    pub occurrence: u32,
    /// signal, continue, restart, restart-done, run, undo.
    pub event: &'static str,
    pub what: String,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the fault thread shares with the observer.
struct Log {
    start: SystemTime,
    events: Mutex<Vec<Event>>,
    file: Mutex<Option<std::io::BufWriter<std::fs::File>>>,
    stop: AtomicBool,
    /// The end of the last interval counted (f64 bits, seconds into the run).
    counted_s: AtomicU64,
}

impl Log {
    fn record(
        &self,
        fault: usize,
        occurrence: u32,
        event: &'static str,
        what: String,
        r: Result<(), String>,
    ) {
        self.record_at(SystemTime::now(), fault, occurrence, event, what, r);
    }

    /// As [`Log::record`], for something that began at `now` (a command is stamped when
    /// it was started, not when it finished: the fault is in force from then).
    fn record_at(
        &self,
        now: SystemTime,
        fault: usize,
        occurrence: u32,
        event: &'static str,
        what: String,
        r: Result<(), String>,
    ) {
        let t_s = now
            .duration_since(self.start)
            .map_or(0.0, |d| (d.as_secs_f64() * 1000.0).round() / 1000.0);
        let e = Event {
            t_s,
            time: rfc3339(now),
            fault,
            occurrence,
            event,
            what,
            ok: r.is_ok(),
            error: r.err(),
        };
        if let Ok(mut f) = self.file.lock() {
            if let Some(w) = f.as_mut() {
                let line = serde_json::to_string(&e).unwrap_or_default();
                // A fault's record must survive the run being killed right after it.
                let _ = writeln!(w, "{line}").and_then(|()| w.flush());
            }
        }
        // The file has them all; memory keeps the first ones (the summary details
        // the first occurrences only).
        if let Ok(mut v) = self.events.lock() {
            if v.len() < MAX_EVENTS {
                v.push(e);
            }
        }
    }
}

/// The faults of a run: parsed and checked ([`Faults::new`]) before the run starts.
pub struct Faults {
    specs: Vec<Spec>,
    /// A run's first shard (or an unsharded run) applies every fault; the other shards
    /// apply only the network ones (each has its own proxies).
    first_shard: bool,
    log: Option<Arc<Log>>,
    thread: Option<std::thread::JoinHandle<()>>,
    windows: window::Windows,
}

impl Faults {
    /// The faults as given, in order.
    pub fn specs(&self) -> &[Spec] {
        &self.specs
    }

    /// Parses every `--fault` (a usage error for the first that cannot be applied). In a
    /// run's other shards (`first_shard` false) only network faults are applied; the
    /// others are measured.
    pub fn new(texts: &[String], first_shard: bool) -> Result<Option<Faults>, crate::UsageError> {
        if texts.is_empty() {
            return Ok(None);
        }
        let specs = texts
            .iter()
            .map(|t| Spec::parse(t))
            .collect::<Result<Vec<_>, _>>()?;
        if specs.iter().any(|s| matches!(s.action, Action::Net(_))) {
            proxy::enable();
        }
        Ok(Some(Faults {
            windows: window::Windows::new(&specs),
            specs,
            first_shard,
            log: None,
            thread: None,
        }))
    }
}

impl Observer for Faults {
    fn start(&mut self, dir: &Path, start: SystemTime) -> anyhow::Result<()> {
        let file = std::fs::File::create(dir.join("faults.jsonl"))?;
        let log = Arc::new(Log {
            start,
            events: Mutex::new(Vec::new()),
            file: Mutex::new(Some(std::io::BufWriter::new(file))),
            stop: AtomicBool::new(false),
            counted_s: AtomicU64::new(0),
        });
        let specs: Vec<Spec> = self
            .specs
            .iter()
            .map(
                |s| match self.first_shard || matches!(s.action, Action::Net(_)) {
                    true => s.clone(),
                    // Measured here, applied by the first shard: nothing to do at its times.
                    false => Spec {
                        action: Action::Nothing,
                        ..s.clone()
                    },
                },
            )
            .collect();
        let l = log.clone();
        self.thread = Some(
            std::thread::Builder::new()
                .name("spate-faults".into())
                .spawn(move || schedule(&specs, &l))?,
        );
        self.log = Some(log);
        Ok(())
    }

    fn interval(&mut self, snap: &Snapshot<'_>) -> anyhow::Result<()> {
        let Some(log) = &self.log else {
            return Ok(());
        };
        let events = log.events.lock().unwrap_or_else(|e| e.into_inner());
        // When this process applied an occurrence: its first event, and for a lasting one
        // the first event at its end.
        let specs = &self.specs;
        let applied = |fault: usize, n: u32| {
            let mut evs = events
                .iter()
                .filter(|e| e.fault == fault && e.occurrence == n);
            let start = evs.next()?.t_s;
            let end = match specs[fault].occurrence(n) {
                Some((at, end)) if end > at => evs
                    .find(|e| e.t_s >= end.as_secs_f64() - 0.001)
                    .map(|e| e.t_s),
                _ => Some(start),
            };
            Some((start, end))
        };
        self.windows.interval_of(&self.specs, snap, applied);
        drop(events);
        log.counted_s.store(snap.t_s.to_bits(), Ordering::Relaxed);
        Ok(())
    }

    fn finish(&mut self, summary: &mut Summary) {
        if self
            .specs
            .iter()
            .any(|s| matches!(s.action, Action::Net(_)))
        {
            proxy::disable();
        }
        let events = match &self.log {
            Some(log) => {
                log.stop.store(true, Ordering::Relaxed);
                if let Some(t) = self.thread.take() {
                    t.thread().unpark();
                    let _ = t.join();
                }
                log.events.lock().map(|v| v.clone()).unwrap_or_default()
            }
            None => Vec::new(),
        };
        for e in events.iter().filter(|e| !e.ok) {
            summary.warnings.push(format!(
                "fault {} ({}): {} {} failed: {}",
                e.fault + 1,
                self.specs[e.fault].text,
                e.event,
                e.what,
                e.error.as_deref().unwrap_or("?")
            ));
        }
        let mut report = self.windows.report(&self.specs, &events);
        // Not applied, or not taken out again: the run did not test what it said.
        let not_applied = events
            .iter()
            .filter(|e| !e.ok && APPLYING.contains(&e.event))
            .filter(|e| !self.specs[e.fault].optional)
            .count();
        report["not_applied"] = serde_json::json!(not_applied);
        summary.extra.insert("faults".into(), report);
    }
}

/// The fault thread: every occurrence of every fault in time order until the run stops.
fn schedule(specs: &[Spec], log: &Arc<Log>) {
    // (when, fault, occurrence, true at its start / false at its end)
    let mut next: Vec<(Duration, usize, u32, bool)> = specs
        .iter()
        .enumerate()
        .filter_map(|(i, s)| s.occurrence(0).map(|(at, _)| (at, i, 0, true)))
        .collect();
    // The processes each lasting occurrence signalled, until its end.
    let mut signalled: std::collections::HashMap<(usize, u32), Vec<u32>> = Default::default();
    let origin = Instant::now()
        - SystemTime::now()
            .duration_since(log.start)
            .unwrap_or_default();
    loop {
        next.sort_by_key(|e| std::cmp::Reverse(e.0));
        let Some(&(when, i, n, starting)) = next.last() else {
            return;
        };
        loop {
            if log.stop.load(Ordering::Relaxed) {
                return;
            }
            let left = (origin + when).saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            std::thread::park_timeout(left.min(Duration::from_millis(200)));
        }
        next.pop();
        after_the_tick(when, log);
        let spec = &specs[i];
        if starting {
            let pids = begin(spec, i, n, log);
            let (_, end) = spec.occurrence(n).expect("a scheduled occurrence");
            if spec.lasts.is_some() {
                signalled.insert((i, n), pids);
                next.push((end, i, n, false));
            }
            if let Some((at, _)) = spec.occurrence(n + 1) {
                next.push((at, i, n + 1, true));
            }
        } else {
            let pids = signalled.remove(&(i, n)).unwrap_or_default();
            end(spec, i, n, &pids, log);
        }
    }
}

/// A fault due when an interval ends (a whole second of the run) waits, a few ms at
/// most, until that interval is counted: the interval is then wholly before it.
fn after_the_tick(when: Duration, log: &Log) {
    let t = when.as_secs_f64();
    if (t - t.round()).abs() > 0.02 || t < 0.5 {
        return;
    }
    let until = Instant::now() + Duration::from_millis(300);
    while f64::from_bits(log.counted_s.load(Ordering::Relaxed)) < t - 0.02
        && Instant::now() < until
        && !log.stop.load(Ordering::Relaxed)
    {
        std::thread::park_timeout(Duration::from_millis(2));
    }
}

/// A fault's start: the signal (and the restart of a momentary one), or its command.
/// The processes a signal went to (those a STOP stopped get the CONT at the end).
fn begin(spec: &Spec, i: usize, n: u32, log: &Arc<Log>) -> Vec<u32> {
    match &spec.action {
        Action::Signal {
            signal,
            target,
            restart,
        } => {
            let (what, r, pids) = signal_to(target, *signal);
            log.record(i, n, "signal", what, r);
            if spec.lasts.is_none() {
                if let Some(cmd) = restart {
                    restart_in_background(cmd, i, n, log);
                }
            }
            return pids;
        }
        Action::Command { run, .. } => {
            let started = SystemTime::now();
            let r = run_command(run);
            log.record_at(started, i, n, "run", run.clone(), r);
        }
        Action::Net(t) => {
            proxy::set(Some(t.clone()));
            let what = match t {
                proxy::Toxic::Reset => "reset every open connection".to_string(),
                _ => format!(
                    "{} on (through {} connections so far)",
                    toxic_text(&spec.text),
                    proxy::connections()
                ),
            };
            log.record(i, n, "net", what, Ok(()));
        }
        Action::Nothing => {}
    }
    Vec::new()
}

/// The `net=` value of a fault's text.
fn toxic_text(spec: &str) -> &str {
    spec.split_whitespace()
        .find_map(|w| w.strip_prefix("net="))
        .unwrap_or(spec)
}

/// A lasting fault's end: CONT after STOP (to the processes it stopped, not whatever the
/// target names now), the restart, the undo.
fn end(spec: &Spec, i: usize, n: u32, stopped: &[u32], log: &Arc<Log>) {
    match &spec.action {
        Action::Signal {
            signal, restart, ..
        } => {
            if *signal == Signal::Stop && !stopped.is_empty() {
                let what = format!("{} to {}", Signal::Cont.name(), pids_text(stopped));
                log.record(i, n, "continue", what, send(stopped, Signal::Cont));
            }
            if let Some(cmd) = restart {
                restart_in_background(cmd, i, n, log);
            }
        }
        Action::Command { undo, .. } => {
            if let Some(cmd) = undo {
                let started = SystemTime::now();
                let r = run_command(cmd);
                log.record_at(started, i, n, "undo", cmd.clone(), r);
            }
        }
        Action::Net(_) => {
            proxy::set(None);
            log.record(
                i,
                n,
                "net",
                format!("{} off", toxic_text(&spec.text)),
                Ok(()),
            );
        }
        Action::Nothing => {}
    }
}

/// Starts a restart command and records its end when it comes: a server's restart may
/// take a while, and the schedule goes on meanwhile.
fn restart_in_background(cmd: &str, i: usize, n: u32, log: &Arc<Log>) {
    match spawn(cmd) {
        Err(e) => log.record(i, n, "restart", cmd.to_string(), Err(e)),
        Ok(child) => {
            log.record(i, n, "restart", cmd.to_string(), Ok(()));
            let started = Instant::now();
            // The run may end first: then the end goes unrecorded.
            let (cmd, log) = (cmd.to_string(), Arc::downgrade(log));
            std::thread::spawn(move || {
                let r = exit_result(child.wait_with_output());
                if let Some(log) = log.upgrade() {
                    let took = crate::units::fmt_duration(started.elapsed());
                    log.record(i, n, "restart-done", format!("{cmd} (took {took})"), r);
                }
            });
        }
    }
}

fn spawn(cmd: &str) -> Result<std::process::Child, String> {
    Command::new("sh")
        .args(["-c", cmd])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start sh: {e}"))
}

/// Runs a fault's own command to its end (at most [`COMMAND_LIMIT`]).
fn run_command(cmd: &str) -> Result<(), String> {
    let mut child = spawn(cmd)?;
    let until = Instant::now() + COMMAND_LIMIT;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return exit_result(child.wait_with_output()),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                return Err(format!(
                    "still running after {} (left running)",
                    crate::units::fmt_duration(COMMAND_LIMIT)
                ))
            }
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// How a command ended; a failure says the last line it wrote to stderr.
fn exit_result(r: std::io::Result<std::process::Output>) -> Result<(), String> {
    match r {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            match err.lines().rev().find(|l| !l.trim().is_empty()) {
                Some(last) => Err(format!("exited with {}: {}", o.status, last.trim())),
                None => Err(format!("exited with {}", o.status)),
            }
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Sends `signal` to the target's processes now; what was done, how it went, and the
/// processes it went to.
fn signal_to(target: &Target, signal: Signal) -> (String, Result<(), String>, Vec<u32>) {
    match spec::resolve(target) {
        Ok(pids) => (
            format!("{} to {}", signal.name(), pids_text(&pids)),
            send(&pids, signal),
            pids,
        ),
        Err(e) => (
            format!("{} to {}", signal.name(), target.text()),
            Err(e),
            Vec::new(),
        ),
    }
}

/// Sends `signal` to every process; the first failure is the result.
fn send(pids: &[u32], signal: Signal) -> Result<(), String> {
    let mut first = Ok(());
    for &p in pids {
        // SAFETY: kill(2) with a PID and a valid signal number.
        if unsafe { libc::kill(p as libc::pid_t, signal.number()) } != 0 && first.is_ok() {
            first = Err(format!("process {p}: {}", std::io::Error::last_os_error()));
        }
    }
    first
}

fn pids_text(pids: &[u32]) -> String {
    let p: Vec<String> = pids.iter().map(u32::to_string).collect();
    format!("PID {}", p.join(","))
}
