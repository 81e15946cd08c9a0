//! The engine owns a run: its clock and recorder, the schedule (closed users, open
//! arrivals, stages) and the one worker body that feeds protocol [`Driver`]s, the commit
//! of each unit's [`UnitReport`], the once-a-second aggregator, signals, observers (progress
//! line, live dashboard, monitoring) and the final summary.
//!
//! - [`schedule`]: the validated workload and the arrival strategies.
//! - [`unit`]: the driver trait, the unit report and its commit.
//! - [`control`]: steering a run while it goes (pause, resume, rate, users, stop).
//! - `worker`: the one worker body over a schedule strategy.
//! - `aggregate`: intervals, totals and the results writer's thread.

mod aggregate;
pub mod bound;
pub mod control;
pub mod cpu;
mod dispatch;
mod observe;
pub mod schedule;
pub mod signals;
pub mod unit;
mod worker;

pub(crate) use worker::{MAX_RATE, MIN_RATE};

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use rand::rngs::SmallRng;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::metrics::{Clock, Recorder};
use crate::results::{AddressBook, Summary, SummaryHeader, Writer};
use crate::units;

pub use control::{Action, Control, Refused};
pub use cpu::cpu_time;
pub use observe::{Observer, Snapshot};
pub use schedule::{Model, Workload};
pub use signals::{Signal, Signals};
pub use unit::{Ahead, Driver, Outcome, UnitHook, UnitReport};

/// What every plan.json starts with.
#[derive(Debug, Clone, Serialize)]
pub struct PlanHead {
    pub schema_version: u32,
    pub spate_version: &'static str,
    pub run_id: String,
    pub command: Vec<String>,
    pub protocol: &'static str,
    /// The protocol's words for its unit of work (its driver's).
    pub words: crate::results::UnitWords,
    pub target: String,
    /// The phases the run times (the driver's and the engine's) and their interval logs.
    pub phases: Vec<crate::metrics::Declared>,
    /// The protocol's own counters (columns of intervals.csv, fields of the totals).
    pub counters: Vec<crate::metrics::DeclaredCounter>,
}

impl PlanHead {
    /// A new run of `protocol` against `target` with driver `D`, started by `command`.
    pub fn new<D: Driver>(command: Vec<String>, protocol: &'static str, target: &str) -> Self {
        PlanHead {
            schema_version: crate::results::SCHEMA_VERSION,
            spate_version: env!("CARGO_PKG_VERSION"),
            run_id: new_run_id(),
            command,
            protocol,
            words: D::WORDS,
            target: target.to_string(),
            phases: crate::metrics::Phase::declare(&[D::PHASES, unit::ENGINE_PHASES].concat()),
            counters: crate::metrics::Counter::declare(D::COUNTERS),
        }
    }

    /// The plan of a shard carries the run id its shards share.
    pub fn of(mut self, w: &Workload) -> Self {
        if let Some(id) = &w.run_id {
            self.run_id = id.clone();
        }
        self
    }
}

/// What every load command's plan says about the run itself; enough to start one.
pub trait PlanInfo: Serialize {
    fn head(&self) -> &PlanHead;
    fn workload(&self) -> &Workload;
    fn seed(&self) -> u64;
    /// `--grace`, as typed.
    fn grace(&self) -> &str;
    /// `--detail`, as typed: how long results keep one-second rows.
    fn detail(&self) -> &str {
        "1h"
    }
}

/// Everything the engine needs besides the driver.
pub struct Setup<'a> {
    workload: &'a Workload,
    seed: u64,
    grace: Duration,
    clock: Clock,
    recorder: Arc<Recorder>,
    header: SummaryHeader,
    dir: Option<PathBuf>,
    writer: Option<Writer>,
    observers: Vec<Box<dyn Observer>>,
    stop: Arc<AtomicBool>,
    on_unit: Option<UnitHook>,
    control: Arc<Control>,
}

impl<'a> Setup<'a> {
    /// Starts the run's clock. With `out`, writes plan.json there and opens the results
    /// files (a sent log when `addresses` are given); without, the run keeps no files.
    pub fn new(
        plan: &'a impl PlanInfo,
        out: Option<&Path>,
        addresses: Option<Arc<dyn AddressBook>>,
        observers: Vec<Box<dyn Observer>>,
        stop: Arc<AtomicBool>,
    ) -> anyhow::Result<Setup<'a>> {
        // A shard that waits for --start-at starts its clock there: the wait is no part
        // of the run (engine::run sleeps through it).
        let now = SystemTime::now();
        let wait = plan
            .workload()
            .start
            .and_then(|t| t.duration_since(now).ok())
            .unwrap_or_default();
        let started = now + wait;
        let clock = Clock::starting_at(Instant::now() + wait);
        let writer = match out {
            Some(dir) => Some(
                Writer::create(
                    dir,
                    &serde_json::to_value(plan)?,
                    started,
                    addresses,
                    units::parse_duration(plan.detail())?,
                )
                .with_context(|| format!("cannot write results to {}", dir.display()))?,
            ),
            None => None,
        };
        Ok(Setup {
            workload: plan.workload(),
            // Shards of one run given one --seed still draw differently.
            seed: match &plan.workload().shard {
                Some(of) => {
                    plan.seed() ^ (u64::from(of.index) + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                }
                None => plan.seed(),
            },
            grace: units::parse_duration(plan.grace())?,
            clock,
            recorder: Arc::new(Recorder::declared(
                8,
                &(plan.head().phases.iter().map(|d| d.phase)).collect::<Vec<_>>(),
                &(plan.head().counters.iter().map(|d| d.counter)).collect::<Vec<_>>(),
            )),
            header: SummaryHeader {
                run_id: plan.head().run_id.clone(),
                command: plan.head().command.clone(),
                protocol: plan.head().protocol.to_string(),
                words: plan.head().words.clone(),
                target: plan.head().target.clone(),
                started,
            },
            dir: out.map(Path::to_path_buf),
            writer,
            // An observer that steers the run (`--web`) brings the run's control.
            control: observers
                .iter()
                .find_map(|o| o.control())
                .unwrap_or_else(|| Control::new(plan.workload(), stop.clone())),
            observers,
            stop,
            on_unit: None,
        })
    }

    /// The run's recorder, for a protocol whose sessions record events outside their
    /// units (an XMPP recipient's deliveries).
    pub fn recorder(&self) -> Arc<Recorder> {
        self.recorder.clone()
    }

    /// The run's clock: the one time source of every phase.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Shows every unit's report to `hook` before it is committed.
    pub fn on_unit(mut self, hook: UnitHook) -> Self {
        self.on_unit = Some(hook);
        self
    }
}

/// Implements [`PlanInfo`] for a plan struct with the usual fields (`head`, `workload`,
/// `seed`, and the output options at `args.output` or at the path given).
#[macro_export]
macro_rules! plan_info {
    ($t:ty) => {
        $crate::plan_info!($t, args.output);
    };
    ($t:ty, $($output:ident).+) => {
        impl $crate::engine::PlanInfo for $t {
            fn head(&self) -> &$crate::engine::PlanHead {
                &self.head
            }
            fn workload(&self) -> &$crate::engine::Workload {
                &self.workload
            }
            fn seed(&self) -> u64 {
                self.seed
            }
            fn grace(&self) -> &str {
                &self.$($output).+.grace
            }
            fn detail(&self) -> &str {
                &self.$($output).+.detail
            }
        }
    };
}

/// Why and since when a run is stopping.
#[derive(Default)]
struct Stopping {
    since: Option<Instant>,
    interrupted: bool,
    /// The first signal that stopped the run.
    by: Option<Signal>,
}

/// Runs a load to its end (count, duration, `stop`, or a signal) and returns the final
/// summary, already written to the results directory. `make` builds the driver of
/// session `id` with its own random generator.
pub async fn run<D: Driver>(
    mut r: Setup<'_>,
    make: impl FnMut(usize, SmallRng) -> D,
) -> anyhow::Result<Summary> {
    if let Some(dir) = &r.dir {
        for o in &mut r.observers {
            o.start(dir, r.header.started)?;
        }
    }
    let shared = Arc::new(worker::Shared {
        clock: r.clock,
        recorder: r.recorder.clone(),
        stop: r.stop.clone(),
        on_unit: r.on_unit.take().map(Arc::new),
        give_up: worker::GiveUp::default(),
        setup_done: worker::SetupDone::new(r.workload.model.sessions() as usize),
        control: r.control.clone(),
    });
    r.control.begin(r.clock);
    let early = wait_for_start(r.clock.origin(), r.header.started, &r.stop).await;
    // A shard that gets here after the shared start (a throttled batch system, a stale
    // start file) runs late: said in its summary, and flagged by the merge. Measured on
    // the wall clock against --start-at itself: the run's clock starts when the run
    // does (Setup::new never starts it in the past), so it cannot tell.
    let late_start = r
        .workload
        .start
        .and_then(|at| SystemTime::now().duration_since(at).ok())
        .unwrap_or_default();
    let throttled_before = bound::throttled_s();
    let runq_before = bound::runq_wait_s();
    let mut workers = JoinSet::new();
    let scheduler = worker::spawn(r.workload, r.seed, &shared, &mut workers, make);
    let probe = {
        // A workload that starts after every session's setup (XMPP's logins) is measured
        // from there; the others from the start.
        let (s, after_setup) = (shared.clone(), r.workload.after_setup);
        bound::LoopProbe::start(move || !after_setup || s.setup_done.at().is_some())
    };
    let mut agg = aggregate::Aggregator::new(r.header.clone(), r.writer.take())?;
    let stopping = follow(&mut r, &mut workers, &mut agg, &shared, early, scheduler).await?;
    let t = r.clock.origin().elapsed().as_secs_f64();
    let mut summary = agg.summary(t, true, stopping.interrupted);
    summary.interrupted_by = stopping.by.map(|s| s.name().to_string());
    let (mean, max) = r.recorder.in_flight(summary.elapsed_s);
    summary.extra.insert(
        "in_flight".into(),
        serde_json::json!({"mean": (mean * 100.0).round() / 100.0, "max": max}),
    );
    let evidence = bound::Evidence {
        open: matches!(r.workload.model, Model::Open { .. } | Model::Paced { .. }),
        counters: summary.totals,
        elapsed_s: summary.elapsed_s,
        cpu_pct: summary.generator_cpu_pct,
        cores: summary.cores,
        loop_lag: probe.finish(),
        throttled_s: bound::throttled_s()
            .zip(throttled_before)
            .map(|(after, before)| after - before),
        runq_wait_s: bound::runq_wait_s()
            .zip(runq_before)
            .map(|(after, before)| (after - before).max(0.0)),
        response_p50_us: summary
            .phases
            .iter()
            .find(|p| p.phase == "response" && p.count > 0)
            .map(|p| p.p50_us),
        in_flight_cap: match r.workload.model {
            Model::Open { max_in_flight, .. } => Some(u64::from(max_in_flight)),
            Model::Closed { .. } | Model::Paced { .. } => None,
        },
        in_flight_max: max.max(0) as u64,
    };
    summary
        .extra
        .insert("bound_by".into(), bound::verdict(&evidence));
    if r.workload.start.is_some() && late_start > LATE_START {
        summary.warnings.push(format!(
            "this run started {} after its shared start (--start-at): it ran its whole schedule that much later than shards that started on time, so their seconds do not line up and a merge of them spans that much longer; start the shards nearer together, or give a later --start-at",
            units::fmt_duration(late_start)
        ));
        summary.extra.insert(
            "late_start_s".into(),
            serde_json::json!((late_start.as_secs_f64() * 1000.0).round() / 1000.0),
        );
    }
    if r.workload.count_is_default
        && r.workload
            .count
            .is_some_and(|c| summary.totals.attempted >= c)
    {
        summary.warnings.push(format!(
            "the run stopped at the default bound of {} units of work: give --count, --duration or --stages for another length",
            summary.totals.attempted
        ));
    }
    for o in &mut r.observers {
        o.finish(&mut summary);
    }
    agg.finish(&summary).await?;
    Ok(summary)
}

/// Follows the run interval by interval until every worker has ended: signals, the
/// deadline, the grace period for work in flight.
async fn follow(
    r: &mut Setup<'_>,
    workers: &mut JoinSet<()>,
    agg: &mut aggregate::Aggregator,
    shared: &worker::Shared,
    early: Stopping,
    mut scheduler: Option<worker::Scheduler>,
) -> anyhow::Result<Stopping> {
    let give_up = &shared.give_up;
    let origin = tokio::time::Instant::from_std(r.clock.origin());
    // --duration counts from the start, or from the end of every session's setup.
    let deadline = || {
        let start = match r.workload.after_setup {
            true => shared.setup_done.at()?,
            false => r.clock.origin(),
        };
        Some(start + Duration::from_secs_f64(r.workload.duration_s?))
    };
    let mut tick =
        tokio::time::interval_at(origin + Duration::from_secs(1), Duration::from_secs(1));
    // A late tick does not move the later ones: intervals stay on the run's seconds, so
    // shards' intervals line up by wall clock (`spate merge`).
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut st = early;
    let mut signals = Signals::new();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            sig = signals.recv() => interrupt(&mut st, sig, workers, r.grace, give_up).await,
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
        if r.control.stopped() && !st.interrupted {
            // `stop` from the live view or `spate ctl`: as SIGTERM.
            st.interrupted = true;
            st.by.get_or_insert(Signal::Control);
        }
        let due = deadline().is_some_and(|d| now >= d) || r.stop.load(Ordering::Relaxed);
        if (st.interrupted || due) && st.since.is_none() {
            r.stop.store(true, Ordering::Relaxed);
            r.control.end();
            st.since = Some(now);
        }
        if st.since.is_some_and(|s| now.duration_since(s) >= r.grace) && !workers.is_empty() {
            end_work_in_flight(workers, give_up).await;
        }
        if workers.is_empty() {
            // Arrivals still queued for a session are counted before the last interval.
            if let Some(s) = scheduler.take() {
                s.end(shared).await;
            }
        }
        let t = r.clock.origin().elapsed().as_secs_f64();
        let planned = (r.workload.duration_s, r.workload.count);
        let setup_done_s = shared
            .setup_done
            .at()
            .map(|at| at.saturating_duration_since(r.clock.origin()).as_secs_f64());
        agg.interval(
            &r.recorder,
            t,
            st.interrupted,
            planned,
            setup_done_s,
            &mut r.observers,
        )?;
        if workers.is_empty() {
            return Ok(st);
        }
    }
}

/// How late after the shared start a run may begin before it says so.
const LATE_START: Duration = Duration::from_secs(1);

/// Sleeps until the run's clock starts (a shard's --start-at); a signal meanwhile stops
/// the run before its first unit, which still leaves a complete, empty results directory.
async fn wait_for_start(origin: Instant, started: SystemTime, stop: &AtomicBool) -> Stopping {
    let now = Instant::now();
    if origin <= now {
        return Stopping::default();
    }
    if origin - now > Duration::from_secs(1) {
        let at = chrono::DateTime::<chrono::Local>::from(started).format("%H:%M:%S%.3f");
        eprintln!(
            "spate: waiting {} for the start at {at}",
            units::fmt_duration(origin - now)
        );
    }
    let mut signals = Signals::new();
    tokio::select! {
        _ = tokio::time::sleep_until(tokio::time::Instant::from_std(origin)) => Stopping::default(),
        sig = signals.recv() => {
            eprintln!("\nspate: interrupted before the start");
            stop.store(true, Ordering::Relaxed);
            Stopping { since: Some(Instant::now()), interrupted: true, by: Some(sig) }
        }
    }
}

/// Work still in flight is given up: each session counts its unit as unfinished (with
/// the phases it completed) and ends; one that does not within a second is aborted.
async fn end_work_in_flight(workers: &mut JoinSet<()>, give_up: &worker::GiveUp) {
    give_up.fire();
    let drained = tokio::time::timeout(Duration::from_secs(1), async {
        while workers.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        workers.abort_all();
        while workers.join_next().await.is_some() {}
    }
}

/// Ctrl-C or SIGTERM: the first lets work in flight finish, a second stops it now.
async fn interrupt(
    st: &mut Stopping,
    sig: Signal,
    workers: &mut JoinSet<()>,
    grace: Duration,
    give_up: &worker::GiveUp,
) {
    if st.since.is_some() && st.interrupted {
        eprintln!("\nspate: second interrupt, stopping now");
        end_work_in_flight(workers, give_up).await;
    } else {
        eprintln!(
            "\nspate: interrupted, letting work in flight finish (up to {})",
            units::fmt_duration(grace)
        );
    }
    st.interrupted = true;
    st.by.get_or_insert(sig);
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
