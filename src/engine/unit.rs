//! One unit of work (a message, a mailbox visit) as the engine sees it: a protocol
//! [`Driver`] does it and fills a [`UnitReport`] (the phases it timed, its errors, its protocol
//! counters, the record of an accepted message); the engine adds what the schedule knows
//! (lag, response time, lateness) and commits the report to the recorder in one lock.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::metrics::{Clock, Counters, ErrorKey, Phase, Recorder, SentRecord};

/// The phases the engine adds to every unit: response time from the schedule, and lag.
pub const ENGINE_PHASES: &[Phase] = &[Phase::RESPONSE, Phase::LAG];

/// A unit that starts this much after its schedule counts as late (open model).
const LATE_US: u64 = 10_000;

/// How a unit of work ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The server did what was asked (a message accepted for at least one recipient, a
    /// visit that ran to its logout).
    Accepted,
    /// The server answered with a refusal.
    Rejected,
    /// The transport or the protocol broke (refused, reset, timeout, garbage).
    Failed,
}

/// One session's worth of protocol work. The engine owns the schedule and the clock; a
/// driver does what it is told and reports what happened.
pub trait Driver: Send + 'static {
    /// The phases this protocol times (plan.json declares them with the engine's own).
    const PHASES: &'static [Phase];
    /// The protocol's own counters (plan.json declares them; intervals.csv has a column
    /// for each, summary.json's totals a field).
    const COUNTERS: &'static [crate::metrics::Counter] = &[];
    /// What the protocol calls its unit of work, its rate and its bytes (the summary,
    /// report, dashboard and comparisons write them).
    const WORDS: crate::results::UnitWords;
    /// Once per session before its first unit (a login that the units then use). Its
    /// phases and errors are recorded; it counts as no unit.
    fn setup(&mut self, _report: &mut UnitReport) -> impl Future<Output = ()> + Send {
        async {}
    }
    /// Does unit of work `seq`.
    fn run_one(
        &mut self,
        seq: u64,
        report: &mut UnitReport,
    ) -> impl Future<Output = Outcome> + Send;
    /// A paced workload ([`crate::engine::Model::Paced`]): when this session's next unit
    /// is due (run clock, µs), or None when it has nothing more to do. Asked once before
    /// each unit; the other models never ask.
    fn due(&mut self) -> Option<u64> {
        None
    }
    /// The session has to wait for its next unit (an arrival not yet due, a think
    /// time): a driver that keeps a connection open gives back what it need not hold
    /// while it waits (its read buffer). Not called when the next unit is ready at once.
    fn idle(&mut self) {}
    /// The engine's offer, made once before the first unit to a closed session without
    /// think time, to claim its next unit while the current one still runs (SMTP writes
    /// the next message's envelope behind this message's content). A driver that never
    /// looks ahead ignores it.
    fn ahead(&mut self, _ahead: Ahead) {}
    /// The run is over: close the connection politely (phases may be recorded).
    fn finish(&mut self, report: &mut UnitReport) -> impl Future<Output = ()> + Send;
}

/// A closed session's next unit, claimed early: [`Ahead::claim`] takes the run's next
/// sequence number now (or none, when the count is reached or the run is stopping), and
/// the engine then runs exactly that unit next on this session, whatever happens
/// meanwhile. Without an offer from the engine (open model, think time) it claims nothing.
#[derive(Clone, Default)]
pub struct Ahead(Option<AheadOf>);

#[derive(Clone)]
pub(super) struct AheadOf {
    pub next: Arc<AtomicU64>,
    pub count: Option<u64>,
    pub stop: Arc<AtomicBool>,
    /// The claimed unit and when it was claimed (run clock): its scheduled start.
    pub claimed: Arc<Mutex<Option<(u64, u64)>>>,
    pub clock: Clock,
    /// A session that is held (a pause, fewer sessions) claims nothing.
    pub control: Arc<super::control::Control>,
    pub id: usize,
}

impl Ahead {
    pub(super) fn new(of: AheadOf) -> Ahead {
        Ahead(Some(of))
    }

    /// Claims the session's next unit: its sequence number, or None when there is none to
    /// claim (no offer, the count reached, the run stopping, one already claimed).
    pub fn claim(&self) -> Option<u64> {
        let a = self.0.as_ref()?;
        if a.stop.load(Ordering::Relaxed) || a.control.held(a.id) {
            return None;
        }
        let mut c = a.claimed.lock().unwrap_or_else(|p| p.into_inner());
        if c.is_some() {
            return None;
        }
        let seq = a.next.fetch_add(1, Ordering::Relaxed);
        if a.count.is_some_and(|n| seq >= n) {
            return None;
        }
        *c = Some((seq, a.clock.now_us()));
        Some(seq)
    }
}

/// What one unit of work did, filled by its driver; reused from unit to unit, so the
/// hot path does not allocate.
pub struct UnitReport {
    clock: Clock,
    started_us: u64,
    done_us: Option<u64>,
    /// Where the last timed phase ended (run clock).
    last_end: u64,
    /// The phase under way and when it began, for a unit cut off by the end of the run.
    current: Option<(Phase, u64)>,
    pub timings: Vec<(Phase, u64)>,
    /// Error classes with one verbatim sample each.
    pub errors: Vec<(ErrorKey, String)>,
    /// The unit's own counts (bytes, connections, recipients, retrieved, ...); the engine
    /// adds the outcome counts.
    pub counters: Counters,
    /// The record of an accepted message, for the sent log, and its recipients.
    pub sent: Option<SentRecord>,
    pub rcpts: Vec<u32>,
}

impl UnitReport {
    pub fn new(clock: Clock) -> Self {
        UnitReport {
            clock,
            started_us: 0,
            done_us: None,
            last_end: 0,
            current: None,
            timings: Vec::with_capacity(16),
            errors: Vec::new(),
            counters: Counters::default(),
            sent: None,
            rcpts: Vec::new(),
        }
    }

    fn reset(&mut self) {
        self.started_us = self.clock.now_us();
        self.done_us = None;
        self.last_end = 0;
        self.current = None;
        self.timings.clear();
        self.errors.clear();
        self.counters = Counters::default();
        self.sent = None;
        self.rcpts.clear();
    }

    /// Microseconds on the run clock: the one time source of phase timings.
    #[inline]
    pub fn now(&self) -> u64 {
        self.clock.now_us()
    }

    /// `at` on the run clock.
    pub fn us_at(&self, at: std::time::Instant) -> u64 {
        self.clock.us_at(at)
    }

    /// When the unit started (run clock).
    pub fn started(&self) -> u64 {
        self.started_us
    }

    /// `phase` begins now; returns the time to hand to [`UnitReport::timed`] when it ends.
    #[inline]
    pub fn start(&mut self, phase: Phase) -> u64 {
        let now = self.clock.now_us();
        self.current = Some((phase, now));
        now
    }

    /// `phase` began at `since`, before now (its bytes went out with the previous unit).
    pub fn begun(&mut self, phase: Phase, since: u64) {
        self.current = Some((phase, since));
    }

    /// Records `phase` as lasting from `since` until the server's bytes that ended it
    /// reached this host (the latest read's receive time; now when the reply was already
    /// buffered). Returns that end.
    #[inline]
    pub fn timed(&mut self, phase: Phase, since: u64) -> u64 {
        let end = self.clock.end_us(since);
        self.end(phase, since, end)
    }

    /// Records `phase`, which ended with a write of ours (nothing to wait for) or with
    /// something seen by polling, as lasting from `since` until now.
    pub fn timed_now(&mut self, phase: Phase, since: u64) {
        let now = self.clock.now_us();
        self.end(phase, since, now);
    }

    fn end(&mut self, phase: Phase, since: u64, end: u64) -> u64 {
        self.timings.push((phase, end.saturating_sub(since)));
        self.last_end = end;
        if self.current.is_some_and(|(p, _)| p == phase) {
            self.current = None;
        }
        end
    }

    /// How long since `since` the server's latest bytes came (see [`UnitReport::timed`]),
    /// for a phase recorded later or in parts.
    pub fn took(&self, since: u64) -> u64 {
        self.clock.end_us(since).saturating_sub(since)
    }

    /// `phase` begins where the last timed phase ended (a greeting is timed from the
    /// connect's completion, not from when this task next ran).
    pub fn start_after_last(&mut self, phase: Phase) -> u64 {
        let at = self.last_end.max(self.started_us);
        self.current = Some((phase, at));
        at
    }

    pub fn record(&mut self, phase: Phase, micros: u64) {
        self.timings.push((phase, micros));
    }

    /// Runs `fut` and, when it succeeds, records it as `phase`.
    pub async fn time<T, E>(
        &mut self,
        phase: Phase,
        fut: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let t = self.start(phase);
        let v = fut.await?;
        self.timed(phase, t);
        Ok(v)
    }

    pub fn error(&mut self, key: ErrorKey, sample: String) {
        self.errors.push((key, sample));
    }

    /// The unit's final reply came now: what follows (a QUIT that ends the connection) is
    /// not part of its response time.
    pub fn done(&mut self) {
        self.done_us = Some(self.clock.end_us(self.started_us));
    }

    /// The time of [`UnitReport::done`], or now.
    pub fn done_at(&self) -> u64 {
        self.done_us
            .unwrap_or_else(|| self.clock.end_us(self.started_us))
    }
}

/// Where a unit sits in the schedule.
#[derive(Debug, Clone, Copy)]
pub struct Slot {
    pub seq: u64,
    /// When it was due (run clock): its arrival in the open model, its start otherwise.
    pub scheduled_us: u64,
    /// Open model: latency counts from the schedule, and lag is measured.
    pub open: bool,
    /// A paced session whose previous unit was still running when this one fell due:
    /// its wait is the server's doing (it counts in `response`), not the generator's, so
    /// it is neither lag nor late.
    pub behind_own: bool,
}

/// Runs one unit and commits it; `on_unit` sees the report first (`spate ping` prints it).
/// When `give_up` fires first (the run ended with the unit still running), the unit
/// is committed as unfinished with the phases it completed, and false is returned: the
/// session's connection is in an unknown state and it goes no further.
pub(super) async fn run_unit<D: Driver>(
    driver: &mut D,
    slot: Slot,
    report: &mut UnitReport,
    recorder: &Recorder,
    session: usize,
    on_unit: Option<&UnitHook>,
    give_up: &mut tokio::sync::oneshot::Receiver<()>,
) -> bool {
    report.reset();
    let lag = report.started_us.saturating_sub(slot.scheduled_us);
    let outcome = tokio::select! {
        o = driver.run_one(slot.seq, report) => o,
        _ = give_up => {
            report.unfinished();
            if slot.open && !slot.behind_own {
                report.record(Phase::LAG, lag);
            }
            commit(recorder, session, None, false, report);
            return false;
        }
    };
    let end_us = report.done_at();
    if slot.open && !slot.behind_own {
        report.record(Phase::LAG, lag);
    }
    if outcome != Outcome::Failed {
        report.record(Phase::RESPONSE, end_us.saturating_sub(slot.scheduled_us));
    }
    if let Some(hook) = on_unit {
        hook(slot.seq, outcome, report);
    }
    let late = slot.open && !slot.behind_own && lag > LATE_US;
    commit(recorder, session, Some(outcome), late, report);
    true
}

/// Runs a driver's setup or finish step and commits its phases and errors.
pub(super) fn commit_step(recorder: &Recorder, session: usize, report: &mut UnitReport) {
    commit(recorder, session, None, false, report);
}

/// Sees every unit's report before it is committed.
pub type UnitHook = Box<dyn Fn(u64, Outcome, &UnitReport) + Send + Sync>;

fn commit(
    recorder: &Recorder,
    session: usize,
    outcome: Option<Outcome>,
    late: bool,
    r: &mut UnitReport,
) {
    recorder.with(session, |sh| {
        let c = &mut sh.counters;
        c.add(&r.counters);
        if let Some(outcome) = outcome {
            c.attempted += 1;
            match outcome {
                Outcome::Accepted => c.accepted += 1,
                Outcome::Rejected => c.rejected += 1,
                Outcome::Failed => c.failed += 1,
            }
        }
        c.late += u64::from(late);
        for &(p, us) in &r.timings {
            sh.record(p, us);
        }
        for (key, sample) in r.errors.drain(..) {
            sh.error(key, || sample);
        }
        if let Some(rec) = r.sent.take() {
            sh.sent(rec, &r.rcpts);
        }
    });
    r.reset_step();
}

impl UnitReport {
    /// The run ended with this unit still running: counted as attempted and unfinished,
    /// with the phase it was in and for how long.
    fn unfinished(&mut self) {
        self.counters.attempted += 1;
        self.counters.unfinished += 1;
        let now = self.clock.now_us();
        let (phase, since) = self.current.unwrap_or((Phase::RESPONSE, self.started_us));
        let key = crate::metrics::ErrorKey {
            phase,
            kind: crate::metrics::ErrorKind::UNFINISHED,
            code: 0,
            detail: None,
            text: "still running when the run ended".into(),
        };
        let sample = format!(
            "in {phase} for {} when the run ended",
            crate::units::fmt_duration(std::time::Duration::from_micros(now.saturating_sub(since)))
        );
        self.errors.push((key, sample));
    }

    /// Clears what a commit consumed (a setup or finish step reuses the report).
    fn reset_step(&mut self) {
        self.timings.clear();
        self.counters = Counters::default();
        self.rcpts.clear();
    }
}
