//! The one worker loop every load command shares: workload options and the model they
//! resolve to, the closed/open schedulers, the once-a-second aggregator that turns shards
//! into results files, signals, observers (progress line, live dashboard, monitoring) and
//! the final summary. A protocol plugs in a [`Driver`]: one unit of work at a time (a
//! message for SMTP, a mailbox visit for POP3/IMAP).

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::Serialize;

use crate::metrics::{Recorder, Shard};
use crate::results::{Summary, Writer, SCHEMA_VERSION};
use crate::transport::Clock;
use crate::units;
use crate::usage;
use crate::workload::{self, Arrival, Arrivals, Profile};

/// How much load, and for how long: shared by every load command.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct WorkloadArgs {
    /// Concurrent sessions (closed workload: each does one unit of work, waits for the
    /// reply, does the next).
    #[arg(long, short = 'u', default_value_t = 1, help_heading = "Workload")]
    pub users: u32,
    /// Stop after this many units of work in total (default 1000 when no --duration).
    #[arg(long, short = 'n', help_heading = "Workload")]
    pub count: Option<u64>,
    /// Stop after this long (e.g. 30s, 10m, 1h).
    #[arg(long, short = 'd', help_heading = "Workload")]
    pub duration: Option<String>,
    /// Pause between units of work of one session (closed workload), e.g. 100ms.
    #[arg(long, help_heading = "Workload")]
    pub think: Option<String>,
    /// Open workload: start work at this rate whether or not earlier work finished
    /// (200/s, 5000/min). Latency then counts from each scheduled start.
    #[arg(long, help_heading = "Workload")]
    pub rate: Option<String>,
    /// Stages of an open workload, ramping linearly: 1m:100/s,5m:500/s,1m:0/s.
    #[arg(long, conflicts_with = "rate", help_heading = "Workload")]
    pub stages: Option<String>,
    /// Spacing of open-workload arrivals.
    #[arg(long, value_enum, default_value_t = Arrival::Constant, help_heading = "Workload")]
    pub arrival: Arrival,
    /// Open workload: most units of work in flight at once (also the number of connections).
    #[arg(long, default_value_t = 1000, help_heading = "Workload")]
    pub max_in_flight: u32,
}

/// Where results go and how the run shows itself: shared by every load command.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct OutputArgs {
    /// Results directory (default: ./spate-results/<timestamp>-<command>).
    #[arg(long, short = 'o', help_heading = "Output")]
    pub out: Option<std::path::PathBuf>,
    /// Print nothing while running; only the final summary.
    #[arg(long, short = 'q', help_heading = "Output")]
    pub quiet: bool,
    /// Print progress even when stderr is not a terminal.
    #[arg(long, help_heading = "Output")]
    pub progress: bool,
    /// Live dashboard instead of the progress line: throughput, latency per phase, errors;
    /// q stops cleanly (results are still written).
    #[arg(long, help_heading = "Output")]
    pub tui: bool,
    /// After Ctrl-C or the end of the schedule, wait this long for work in flight.
    #[arg(long, default_value = "10s", help_heading = "Output")]
    pub grace: String,
    /// Seed for every random choice, for repeatable runs.
    #[arg(long, help_heading = "Output")]
    pub seed: Option<u64>,
}

impl OutputArgs {
    /// Live progress on stderr: asked for, or stderr is a terminal and not --quiet.
    pub fn progress_enabled(&self) -> bool {
        use std::io::IsTerminal;
        !self.quiet && (self.progress || std::io::stderr().is_terminal())
    }
}

/// The workload shape after validation.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "model", rename_all = "kebab-case")]
pub enum Model {
    Closed {
        users: u32,
        think_ms: f64,
    },
    Open {
        profile: Profile,
        arrival: Arrival,
        max_in_flight: u32,
    },
}

/// A validated workload: the model and its bounds.
#[derive(Debug, Clone, Serialize)]
pub struct Workload {
    pub model: Model,
    pub count: Option<u64>,
    pub duration_s: Option<f64>,
}

impl WorkloadArgs {
    /// Validates the options. `unit` names a unit of work in error messages.
    pub fn resolve(&self) -> anyhow::Result<Workload> {
        let duration = self
            .duration
            .as_deref()
            .map(units::parse_duration)
            .transpose()?;
        let count = match (self.count, duration) {
            (None, None) => Some(1000),
            (c, _) => c,
        };
        if count == Some(0) {
            return usage("--count must be at least 1");
        }
        let model = match (&self.rate, &self.stages) {
            (Some(rate), _) => {
                let r = units::parse_rate(rate)?;
                if r <= 0.0 {
                    return usage("--rate must be more than 0");
                }
                Model::Open {
                    profile: Profile::constant(r, duration),
                    arrival: self.arrival,
                    max_in_flight: self.max_in_flight.max(1),
                }
            }
            (None, Some(stages)) => Model::Open {
                profile: Profile {
                    start_rate: 0.0,
                    stages: workload::parse_stages(stages)?,
                },
                arrival: self.arrival,
                max_in_flight: self.max_in_flight.max(1),
            },
            (None, None) => {
                if self.users == 0 {
                    return usage("--users must be at least 1");
                }
                let think = self
                    .think
                    .as_deref()
                    .map(units::parse_duration)
                    .transpose()?;
                Model::Closed {
                    users: self.users,
                    think_ms: think.map_or(0.0, |d| d.as_secs_f64() * 1000.0),
                }
            }
        };
        Ok(Workload {
            model,
            count,
            duration_s: duration.map(|d| d.as_secs_f64()),
        })
    }
}

/// One session's worth of protocol work. The engine owns the schedule; a driver only does
/// what it is told and records into the shared [`Recorder`].
pub trait Driver: Send + 'static {
    /// Does unit of work `seq`, scheduled at `scheduled_us` on the run clock. `open` says
    /// whether latency counts from the schedule (open model) or from now.
    fn run_one(
        &mut self,
        seq: u64,
        scheduled_us: u64,
        open: bool,
    ) -> impl Future<Output = ()> + Send;
    /// The run is over: close the connection politely.
    fn finish(&mut self) -> impl Future<Output = ()> + Send;
}

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
}

/// Something that follows a run interval by interval: the progress line, the live
/// dashboard, server monitoring. Observers never touch the sessions.
pub trait Observer: Send {
    /// The run starts; `dir` is its results directory, `start` its wall-clock origin.
    fn start(&mut self, _dir: &Path, _start: SystemTime) -> anyhow::Result<()> {
        Ok(())
    }
    /// Once per interval (about every second).
    fn interval(&mut self, snap: &Snapshot<'_>) -> anyhow::Result<()>;
    /// The run is over; the observer may add to the final summary (warnings, extra
    /// sections) before it is written.
    fn finish(&mut self, _summary: &mut Summary) {}
}

/// Everything the engine needs besides the driver.
pub struct Run<'a> {
    pub workload: &'a Workload,
    pub seed: u64,
    pub grace: Duration,
    pub recorder: Arc<Recorder>,
    pub clock: Clock,
    pub header: SummaryHeader,
    pub writer: Writer,
    pub observers: Vec<Box<dyn Observer>>,
    pub stop: Arc<AtomicBool>,
}

/// What every load command's plan says about the run itself; enough to start one.
pub trait PlanInfo: Serialize {
    fn run_id(&self) -> &str;
    fn command(&self) -> &[String];
    fn protocol(&self) -> &str;
    fn target(&self) -> &str;
    fn workload(&self) -> &Workload;
    fn seed(&self) -> u64;
    /// `--grace`, as typed.
    fn grace(&self) -> &str;
}

impl<'a> Run<'a> {
    /// Writes plan.json into `out`, opens the results files (a sent log when `factory`
    /// is given) and fills in the run from the plan.
    pub fn new(
        plan: &'a impl PlanInfo,
        out: &Path,
        factory: Option<Arc<crate::message::Factory>>,
        recorder: Arc<Recorder>,
        clock: Clock,
        observers: Vec<Box<dyn Observer>>,
        stop: Arc<AtomicBool>,
    ) -> anyhow::Result<Run<'a>> {
        use anyhow::Context as _;
        let started = SystemTime::now();
        let writer = Writer::create(out, &serde_json::to_value(plan)?, started, factory)
            .with_context(|| format!("cannot write results to {}", out.display()))?;
        Ok(Run {
            workload: plan.workload(),
            seed: plan.seed(),
            grace: units::parse_duration(plan.grace())?,
            recorder,
            clock,
            header: SummaryHeader {
                run_id: plan.run_id().to_string(),
                command: plan.command().to_vec(),
                protocol: plan.protocol().to_string(),
                target: plan.target().to_string(),
                started,
            },
            writer,
            observers,
            stop,
        })
    }
}

/// Implements [`PlanInfo`] for a plan struct with the usual field names.
#[macro_export]
macro_rules! plan_info {
    ($t:ty) => {
        impl $crate::engine::PlanInfo for $t {
            fn run_id(&self) -> &str {
                &self.run_id
            }
            fn command(&self) -> &[String] {
                &self.command
            }
            fn protocol(&self) -> &str {
                self.protocol
            }
            fn target(&self) -> &str {
                &self.target
            }
            fn workload(&self) -> &$crate::engine::Workload {
                &self.workload
            }
            fn seed(&self) -> u64 {
                self.seed
            }
            fn grace(&self) -> &str {
                &self.args.output.grace
            }
        }
    };
}

/// Runs a load to its end (count, duration, `stop`, or a signal) and returns the final
/// summary, already written to the results directory. `make` builds the driver of
/// session `id` with its own random generator.
pub async fn run<D: Driver>(
    mut r: Run<'_>,
    mut make: impl FnMut(usize, SmallRng) -> D,
) -> anyhow::Result<Summary> {
    let clock = r.clock;
    let recorder = r.recorder.clone();
    let stop = r.stop.clone();
    let cpu0 = cpu_time();
    let rng = |id: usize| SmallRng::seed_from_u64(r.seed ^ (id as u64).wrapping_mul(0x9E37_79B9));
    for o in &mut r.observers {
        o.start(r.writer.dir(), r.header.started)?;
    }

    let next_seq = Arc::new(AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    let mut scheduler = None;
    let count = r.workload.count;
    match &r.workload.model {
        Model::Closed { users, think_ms } => {
            let think = Duration::from_secs_f64(think_ms / 1000.0);
            for id in 0..*users as usize {
                let mut driver = make(id, rng(id));
                let (stop, next) = (stop.clone(), next_seq.clone());
                let rec = recorder.clone();
                workers.spawn(async move {
                    rec.session_started();
                    loop {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let seq = next.fetch_add(1, Ordering::Relaxed);
                        if count.is_some_and(|c| seq >= c) {
                            break;
                        }
                        driver.run_one(seq, clock.now_us(), false).await;
                        if !think.is_zero() && !stop.load(Ordering::Relaxed) {
                            tokio::time::sleep(think).await;
                        }
                    }
                    driver.finish().await;
                    rec.session_ended();
                });
            }
        }
        Model::Open {
            profile,
            arrival,
            max_in_flight,
        } => {
            let (tx, rx) = async_channel::bounded::<(u64, u64)>(*max_in_flight as usize * 4);
            for id in 0..*max_in_flight as usize {
                let mut driver = make(id, rng(id));
                let rx = rx.clone();
                let rec = recorder.clone();
                workers.spawn(async move {
                    while let Ok((seq, at)) = rx.recv().await {
                        rec.session_started();
                        driver.run_one(seq, at, true).await;
                        rec.session_ended();
                    }
                    driver.finish().await;
                });
            }
            let arrivals =
                Arrivals::new(profile.clone(), *arrival, SmallRng::seed_from_u64(r.seed));
            let (stop, rec) = (stop.clone(), recorder.clone());
            let origin = tokio::time::Instant::from_std(clock.origin());
            let limit = r.workload.duration_s;
            scheduler = Some(tokio::spawn(async move {
                for (seq, at) in arrivals.enumerate() {
                    let seq = seq as u64;
                    if stop.load(Ordering::Relaxed)
                        || count.is_some_and(|c| seq >= c)
                        || limit.is_some_and(|l| at >= l)
                    {
                        break;
                    }
                    tokio::time::sleep_until(origin + Duration::from_secs_f64(at)).await;
                    if tx.try_send((seq, (at * 1e6) as u64)).is_err() {
                        rec.with(0, |s| s.counters.dropped += 1);
                    }
                }
                tx.close();
            }));
        }
    }

    let deadline = r
        .workload
        .duration_s
        .map(|d| clock.origin() + Duration::from_secs_f64(d));
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::from_std(clock.origin()) + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut iv = Shard::default();
    let mut last_t = 0.0f64;
    let mut interrupted = false;
    let mut stopping_since: Option<Instant> = None;
    let mut signals = Signals::new();

    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = signals.recv() => {
                if stopping_since.is_some() && interrupted {
                    eprintln!("\nspate: second interrupt, stopping now");
                    workers.abort_all();
                } else {
                    eprintln!("\nspate: interrupted, letting work in flight finish (up to {})", units::fmt_duration(r.grace));
                }
                interrupted = true;
            }
            res = workers.join_next(), if !workers.is_empty() => {
                if let Some(Err(e)) = res {
                    if e.is_panic() {
                        eprintln!("spate: a session panicked: {e}");
                    }
                }
                if !workers.is_empty() { continue; }
            }
        }
        let now = Instant::now();
        if (interrupted || deadline.is_some_and(|d| now >= d) || stop.load(Ordering::Relaxed))
            && stopping_since.is_none()
        {
            stop.store(true, Ordering::Relaxed);
            stopping_since = Some(now);
        }
        if stopping_since.is_some_and(|s| now.duration_since(s) >= r.grace) {
            workers.abort_all();
            while workers.join_next().await.is_some() {}
        }
        let t = clock.origin().elapsed().as_secs_f64();
        recorder.drain_into(&mut iv);
        let active = recorder.active_sessions();
        // Observers see the interval before the writer folds it into the totals.
        let snapshot_iv = Shard {
            counters: iv.counters,
            hists: iv.hists.clone(),
            errors: iv.errors.clone(),
            sent: Vec::new(),
            rcpts: Vec::new(),
        };
        r.writer.interval(&mut iv, last_t, t - last_t, active)?;
        let summary = r
            .header
            .summary(&r.writer.totals, t, false, interrupted, cpu_time() - cpu0);
        r.writer.write_summary(&summary)?;
        let snap = Snapshot {
            t_s: t,
            interval_s: t - last_t,
            interval: &snapshot_iv,
            summary: &summary,
            active,
            planned_s: r.workload.duration_s,
            planned_count: count,
        };
        for o in &mut r.observers {
            if let Err(e) = o.interval(&snap) {
                eprintln!("spate: {e:#}");
            }
        }
        last_t = t;
        if workers.is_empty() {
            break;
        }
    }
    if let Some(s) = scheduler {
        s.abort();
    }
    r.writer.finish()?;
    let t = clock.origin().elapsed().as_secs_f64();
    let mut summary = r
        .header
        .summary(&r.writer.totals, t, true, interrupted, cpu_time() - cpu0);
    for o in &mut r.observers {
        o.finish(&mut summary);
    }
    r.writer.write_summary(&summary)?;
    Ok(summary)
}

/// The fixed part of every summary of a run.
pub struct SummaryHeader {
    pub run_id: String,
    pub command: Vec<String>,
    pub protocol: String,
    pub target: String,
    pub started: SystemTime,
}

impl SummaryHeader {
    pub fn summary(
        &self,
        totals: &Shard,
        elapsed: f64,
        complete: bool,
        interrupted: bool,
        cpu: Duration,
    ) -> Summary {
        let c = totals.counters;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpu_s = cpu.as_secs_f64();
        let cpu_pct = if elapsed > 0.0 {
            cpu_s / elapsed / cores as f64 * 100.0
        } else {
            0.0
        };
        let mut warnings = Vec::new();
        if complete && cpu_pct > 80.0 && elapsed > 2.0 {
            warnings.push(format!(
                "the generator used {cpu_pct:.0}% of all {cores} cores: it, not the server, may be the bottleneck"
            ));
        }
        if c.late > 0 {
            warnings.push(format!("{} units of work started more than 10 ms behind schedule: the generator or --max-in-flight could not keep the rate", c.late));
        }
        if c.dropped > 0 {
            warnings.push(format!("{} arrivals were dropped: every one of --max-in-flight sessions was busy and the backlog full", c.dropped));
        }
        let per_s = |n: f64| if elapsed > 0.0 { n / elapsed } else { 0.0 };
        Summary {
            schema_version: SCHEMA_VERSION,
            spate_version: env!("CARGO_PKG_VERSION").to_string(),
            run_id: self.run_id.clone(),
            command: self.command.clone(),
            protocol: self.protocol.clone(),
            target: self.target.clone(),
            started_at: crate::results::writer_rfc3339(self.started),
            ended_at: crate::results::writer_rfc3339(
                self.started + Duration::from_secs_f64(elapsed),
            ),
            elapsed_s: (elapsed * 1000.0).round() / 1000.0,
            complete,
            interrupted,
            totals: c,
            reconciles: c.reconciles(),
            messages_per_s: per_s(c.accepted as f64),
            kbytes_per_s: per_s(c.bytes as f64 / 1024.0),
            phases: Summary::phases_from(totals),
            errors: Summary::errors_from(totals),
            generator_cpu_s: (cpu_s * 1000.0).round() / 1000.0,
            generator_cpu_pct: (cpu_pct * 10.0).round() / 10.0,
            cores,
            warnings,
            extra: Default::default(),
        }
    }
}

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
        let p99 = s
            .phase("response")
            .or(s.phase("transaction"))
            .map_or(0, |p| p.p99_us);
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

/// CPU time (user + system) this process has used.
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Ctrl-C and SIGTERM as one stream.
pub(crate) struct Signals {
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    pub(crate) fn new() -> Self {
        Signals {
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok(),
        }
    }

    pub(crate) async fn recv(&mut self) {
        let term = async {
            match &mut self.term {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term => {}
        }
    }
}

/// Checks before a run that the server takes a TCP connection at all: a server that
/// cannot be reached is the user's problem to fix (one line, exit 1), not a run to record.
pub async fn preflight(
    target: &str,
    addr: std::net::SocketAddr,
    bind: Option<std::net::IpAddr>,
    timeout: Duration,
) -> anyhow::Result<()> {
    crate::transport::Connection::connect(addr, bind, timeout.min(Duration::from_secs(10)))
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to {target} ({addr}): {e}"))?
        .shutdown()
        .await;
    Ok(())
}

/// A fresh run id: seconds since the epoch and a little entropy, in hex.
pub fn new_run_id() -> String {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "{:x}{:04x}",
        now.as_secs(),
        (now.subsec_micros() ^ std::process::id()) & 0xffff
    )
}

/// `./spate-results/<timestamp>-<kind>`.
pub fn default_out(kind: &str) -> std::path::PathBuf {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    std::path::PathBuf::from("spate-results").join(format!("{stamp}-{kind}"))
}
