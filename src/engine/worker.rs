//! The one worker body: a session takes its next slot from the schedule (a closed user's
//! next unit after its think time, or the next open-model arrival), runs the unit and
//! commits it, until the schedule runs dry.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::task::JoinSet;

use tokio::sync::watch;

use super::control::{Control, Steer};
use super::dispatch::Dispatch;
use super::schedule::{Arrivals, Batches, Model, Workload};
use super::unit::{commit_step, run_unit, Ahead, AheadOf, Driver, Slot, UnitHook, UnitReport};
use crate::metrics::{Clock, Phase, Recorder};

/// Where a worker's units come from.
enum Slots {
    /// A closed user: the next sequence number of the run, after `think`.
    Closed {
        next: Arc<AtomicU64>,
        count: Option<u64>,
        think: Duration,
        stop: Arc<AtomicBool>,
        /// A unit the driver claimed early (see [`Ahead`]): it runs next, whatever else.
        claimed: Arc<std::sync::Mutex<Option<(u64, u64)>>>,
        /// This session's place among the run's, and what the run is told (a pause, a
        /// lower number of sessions): it waits rather than start a unit.
        id: usize,
        steer: watch::Receiver<Steer>,
        control: Arc<Control>,
    },
    /// An open-model worker: arrivals the scheduler hands out.
    Open(usize, Arc<Dispatch>),
    /// A paced user: the next sequence number of the run, when its driver says.
    Paced {
        next: Arc<AtomicU64>,
        count: Option<u64>,
        stop: Arc<AtomicBool>,
        id: usize,
        steer: watch::Receiver<Steer>,
        control: Arc<Control>,
    },
}

impl Slots {
    /// The next slot; `due` is what a paced session's driver said (the others ignore it).
    async fn next(&mut self, clock: Clock, first: bool, due: Option<u64>) -> Option<Slot> {
        match self {
            Slots::Closed {
                next,
                count,
                think,
                stop,
                claimed,
                id,
                steer,
                control,
            } => {
                let early = claimed.lock().unwrap_or_else(|p| p.into_inner()).take();
                if let Some((seq, at)) = early {
                    return Some(Slot {
                        seq,
                        scheduled_us: at,
                        open: false,
                        behind_own: false,
                    });
                }
                if !first && !think.is_zero() && !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(*think).await;
                }
                // Boxed: a pause is rare, and its wait would enlarge every session's future.
                if control.held(*id) && !Box::pin(parked(steer, *id, stop)).await {
                    return None;
                }
                let seq = take(next, *count, stop)?;
                Some(Slot {
                    seq,
                    scheduled_us: clock.now_us(),
                    open: false,
                    behind_own: false,
                })
            }
            Slots::Open(id, d) => d.next(*id).await.map(|(seq, at)| Slot {
                seq,
                scheduled_us: at,
                open: true,
                behind_own: false,
            }),
            Slots::Paced {
                next,
                count,
                stop,
                id,
                steer,
                control,
            } => {
                let due = due?;
                // Due before the session was free: its last unit ran past this one's time.
                let behind_own = clock.now_us() > due;
                // Boxed: every session's future holds this one's state, whatever its model,
                // and a sleep with a watch on the run's end is larger than the others'.
                if !Box::pin(until_due(clock, due, steer, stop)).await {
                    return None;
                }
                // Boxed: a pause is rare, and its wait would enlarge every session's future.
                if control.held(*id) && !Box::pin(parked(steer, *id, stop)).await {
                    return None;
                }
                let seq = take(next, *count, stop)?;
                Some(Slot {
                    seq,
                    scheduled_us: due,
                    open: true,
                    behind_own,
                })
            }
        }
    }
}

/// The run's next sequence number; None when the run is ending or the count is reached.
fn take(next: &AtomicU64, count: Option<u64>, stop: &AtomicBool) -> Option<u64> {
    if stop.load(Ordering::Relaxed) {
        return None;
    }
    let seq = next.fetch_add(1, Ordering::Relaxed);
    count.is_none_or(|c| seq < c).then_some(seq)
}

/// Sleeps until `due` on the run clock; false when the run ended first. One timer per
/// waiting session and a wake when the run ends: a hundred thousand idle users cost no
/// polling.
async fn until_due(
    clock: Clock,
    due: u64,
    steer: &mut watch::Receiver<Steer>,
    stop: &AtomicBool,
) -> bool {
    let at = tokio::time::Instant::from_std(clock.origin() + Duration::from_micros(due));
    let sleep = tokio::time::sleep_until(at);
    tokio::pin!(sleep);
    loop {
        if steer.borrow_and_update().ended || stop.load(Ordering::Relaxed) {
            return false;
        }
        tokio::select! {
            _ = &mut sleep => return !stop.load(Ordering::Relaxed),
            changed = steer.changed() => if changed.is_err() { return false },
        }
    }
}

/// Waits while closed session `id` is told not to run (paused, or above the number of
/// sessions set); false when the run ended meanwhile.
async fn parked(steer: &mut watch::Receiver<Steer>, id: usize, stop: &AtomicBool) -> bool {
    loop {
        let now = *steer.borrow_and_update();
        if now.ended || stop.load(Ordering::Relaxed) {
            return false;
        }
        if now.runs(id) {
            return true;
        }
        if steer.changed().await.is_err() {
            return false;
        }
    }
}

/// Counts the sessions still in their setup; when none is left, says when that was.
pub(super) struct SetupDone {
    remaining: AtomicU64,
    at: std::sync::OnceLock<std::time::Instant>,
    notify: tokio::sync::Notify,
}

impl SetupDone {
    pub fn new(sessions: usize) -> SetupDone {
        let done = SetupDone {
            remaining: AtomicU64::new(sessions as u64),
            at: std::sync::OnceLock::new(),
            notify: tokio::sync::Notify::new(),
        };
        if sessions == 0 {
            let _ = done.at.set(std::time::Instant::now());
        }
        done
    }

    fn one_done(&self) {
        if self.remaining.fetch_sub(1, Ordering::SeqCst) == 1 {
            let _ = self.at.set(std::time::Instant::now());
            self.notify.notify_waiters();
        }
    }

    /// When every session had done its setup, if they all have.
    pub fn at(&self) -> Option<std::time::Instant> {
        self.at.get().copied()
    }

    async fn wait(&self) -> std::time::Instant {
        loop {
            let notified = self.notify.notified();
            if let Some(t) = self.at() {
                return t;
            }
            notified.await;
        }
    }
}

/// What every worker shares.
pub(super) struct Shared {
    pub clock: Clock,
    pub recorder: Arc<Recorder>,
    pub stop: Arc<AtomicBool>,
    pub on_unit: Option<Arc<UnitHook>>,
    /// Fires when work in flight is to be given up (grace over, second interrupt).
    pub give_up: GiveUp,
    pub setup_done: SetupDone,
    /// What the run is told while it goes (`--web`, `spate ctl`).
    pub control: Arc<Control>,
}

/// The engine's word to give up work in flight: a oneshot per session, which a unit polls
/// beside its driver at the cost of an atomic check (no lock, nothing allocated per unit).
#[derive(Default)]
pub(super) struct GiveUp {
    senders: std::sync::Mutex<Vec<tokio::sync::oneshot::Sender<()>>>,
}

impl GiveUp {
    fn listener(&self) -> tokio::sync::oneshot::Receiver<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.senders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(tx);
        rx
    }

    /// Every session's unit in flight ends now.
    pub fn fire(&self) {
        for tx in self
            .senders
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            let _ = tx.send(());
        }
    }
}

/// An open model's arrival scheduler, as the run sees it.
pub(super) struct Scheduler {
    task: tokio::task::JoinHandle<()>,
    dispatch: Arc<Dispatch>,
}

impl Scheduler {
    /// Waits for the scheduler to end (the run has stopped: it hands out what was due by
    /// then, within 50 ms) and counts every arrival no session started, each as attempted
    /// and unfinished (an error class says it waited for a session until the end), with
    /// how long it waited as its lag: queued work never vanishes from the counts.
    pub async fn end(self, shared: &Shared) {
        shared.stop.store(true, Ordering::Relaxed);
        let mut task = self.task;
        if tokio::time::timeout(Duration::from_secs(2), &mut task)
            .await
            .is_err()
        {
            task.abort();
        }
        let left = self.dispatch.take_unstarted();
        if left.is_empty() {
            return;
        }
        let now = shared.clock.now_us();
        let key = crate::metrics::ErrorKey {
            phase: Phase::LAG,
            kind: crate::metrics::ErrorKind::UNFINISHED,
            code: 0,
            detail: None,
            text: "never started: waited for a free session (--max-in-flight) until the run ended"
                .into(),
        };
        shared.recorder.with(0, |sh| {
            for &(_, at) in &left {
                let waited = now.saturating_sub(at);
                sh.counters.attempted += 1;
                sh.counters.unfinished += 1;
                sh.record(Phase::LAG, waited);
                sh.error(key.clone(), || {
                    format!(
                        "due {} before the end, still waiting for a session",
                        crate::units::fmt_duration(Duration::from_micros(waited))
                    )
                });
            }
        });
    }
}

/// Starts the sessions of `workload` (and, for an open model, the scheduler that feeds
/// them); returns the scheduler.
pub(super) fn spawn<D: Driver>(
    workload: &Workload,
    seed: u64,
    shared: &Arc<Shared>,
    workers: &mut JoinSet<()>,
    mut make: impl FnMut(usize, SmallRng) -> D,
) -> Option<Scheduler> {
    let rng = |id: usize| SmallRng::seed_from_u64(seed ^ (id as u64).wrapping_mul(0x9E37_79B9));
    let (sessions, scheduler, open_rx) = match &workload.model {
        Model::Closed { users, .. } | Model::Paced { users } => (*users as usize, None, None),
        Model::Open {
            profile,
            arrival,
            max_in_flight,
        } => {
            let n = *max_in_flight as usize;
            let d = Arc::new(Dispatch::new(n, n * 4));
            let mut arrivals =
                Arrivals::new(profile.clone(), *arrival, SmallRng::seed_from_u64(seed));
            if let Some(of) = &workload.shard {
                arrivals = arrivals.shard(of.index, of.count);
            }
            let (count, limit) = (workload.count, workload.duration_s);
            let after = workload.after_setup;
            let task = tokio::spawn(schedule(
                arrivals,
                d.clone(),
                (count, limit, after),
                shared.clone(),
            ));
            let scheduler = Scheduler {
                task,
                dispatch: d.clone(),
            };
            (n, Some(scheduler), Some(d))
        }
    };
    let next = Arc::new(AtomicU64::new(0));
    for id in 0..sessions {
        let mut driver = make(id, rng(id));
        let slots = match (&open_rx, &workload.model) {
            (Some(d), _) => Slots::Open(id, d.clone()),
            (None, Model::Closed { think_ms, .. }) => {
                let claimed = Arc::new(std::sync::Mutex::new(None));
                let think = Duration::from_secs_f64(think_ms / 1000.0);
                if think.is_zero() {
                    // Back to back: the next unit is always due, so the driver may
                    // start it early.
                    driver.ahead(Ahead::new(AheadOf {
                        next: next.clone(),
                        count: workload.count,
                        stop: shared.stop.clone(),
                        claimed: claimed.clone(),
                        clock: shared.clock,
                        control: shared.control.clone(),
                        id,
                    }));
                }
                Slots::Closed {
                    next: next.clone(),
                    count: workload.count,
                    think,
                    stop: shared.stop.clone(),
                    claimed,
                    id,
                    steer: shared.control.subscribe(),
                    control: shared.control.clone(),
                }
            }
            (None, Model::Paced { .. }) => Slots::Paced {
                next: next.clone(),
                count: workload.count,
                stop: shared.stop.clone(),
                id,
                steer: shared.control.subscribe(),
                control: shared.control.clone(),
            },
            (None, Model::Open { .. }) => unreachable!("an open model has its channel"),
        };
        // --connect-rate: session i starts i/rate after the start (closed and paced workloads).
        let start_after = match (&workload.model, workload.connect_rate) {
            (Model::Closed { .. } | Model::Paced { .. }, Some(r)) => {
                Duration::from_secs_f64(id as f64 / r)
            }
            _ => Duration::ZERO,
        };
        // The driver on the heap: an async fn keeps a moved argument both as the argument
        // and as its local, so inline it would be stored twice in every session's task.
        workers.spawn(session(
            id,
            Box::new(driver),
            slots,
            shared.clone(),
            start_after,
        ));
    }
    scheduler
}

/// One session: its setup, its units, its finish. An async block over the arguments
/// rather than an async fn: an async fn keeps its moved arguments twice (as arguments and
/// as locals) in every session's task.
#[allow(clippy::manual_async_fn)]
fn session<D: Driver>(
    id: usize,
    mut driver: Box<D>,
    mut slots: Slots,
    shared: Arc<Shared>,
    start_after: Duration,
) -> impl Future<Output = ()> {
    async move {
        if !start_after.is_zero() && !wait_for_turn(&shared, start_after).await {
            // Stopped before its turn: nothing done, nothing to count.
            shared.setup_done.one_done();
            return;
        }
        let rec = &shared.recorder;
        let mut report = UnitReport::new(shared.clock);
        driver.setup(&mut report).await;
        commit_step(rec, id, &mut report);
        shared.setup_done.one_done();
        let mut first = true;
        let mut give_up = shared.give_up.listener();
        loop {
            // A session whose next unit is not ready at once gives back what it need not
            // hold while it waits (see Driver::idle); one that is never waits, and never
            // reallocates.
            let slot = {
                let due = driver.due();
                let mut next = std::pin::pin!(slots.next(shared.clock, first, due));
                match std::future::poll_fn(|cx| Poll::Ready(next.as_mut().poll(cx))).await {
                    Poll::Ready(slot) => slot,
                    Poll::Pending => {
                        driver.idle();
                        next.await
                    }
                }
            };
            let Some(slot) = slot else { break };
            first = false;
            rec.session_started();
            let began = shared.clock.now_us();
            let hook = shared.on_unit.as_deref();
            let done = run_unit(&mut *driver, slot, &mut report, rec, id, hook, &mut give_up).await;
            rec.session_ended(shared.clock.now_us().saturating_sub(began));
            if !done {
                return;
            }
            // A unit that ends without waiting on anything (one that fails before it
            // touches the network) must not keep this thread from the run's timer and
            // signals: give way once the task's budget is used up.
            tokio::task::consume_budget().await;
        }
        driver.finish(&mut report).await;
        commit_step(rec, id, &mut report);
    }
}

/// Waits until `after` past the run's start, looking at the stop flag every 100 ms; false
/// when the run stopped first.
async fn wait_for_turn(shared: &Shared, after: Duration) -> bool {
    let at = tokio::time::Instant::from_std(shared.clock.origin() + after);
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = tokio::time::Instant::now();
        if now >= at {
            return true;
        }
        tokio::time::sleep_until(at.min(now + Duration::from_millis(100))).await;
    }
}

/// The arrival thread wakes at most once per this many seconds (on average: the window
/// counts from when the last batch was due): arrivals that fall in one window go out
/// together (see [`Batches`]). Up to 4 000/s every arrival has a wake of its own, at its
/// time; above, the wakes of this thread and of the runtime stop growing with the rate,
/// at the cost of at most this much lag. Measured at 10 000/s (bench/results/
/// open-model-latest.md): 100 µs saves nothing, 250 µs a quarter of the CPU per message
/// for 190 µs of lag at p50, 1 ms half of it for 700 µs.
const BATCH_WINDOW_S: f64 = 250e-6;
/// Most arrivals handed out in one batch (a thread that fell far behind catches up in
/// batches of this size, back to back), so the batch buffers stay small.
const BATCH_MAX: usize = 256;

/// The highest arrival rate one process (a shard) schedules, per second: a little under
/// a full batch every window (256 per 250 µs, 1 024 000/s), the most the arrival thread
/// hands out while it keeps to its windows. Far above what a session's work allows, so
/// it refuses only a mistake (`rate 1000000000000/s`), which would leave the thread
/// forever behind: every arrival due, and the next rate never reached.
pub(crate) const MAX_RATE: f64 = 1_000_000.0;
const _: () = assert!(MAX_RATE <= BATCH_MAX as f64 / BATCH_WINDOW_S);
/// The lowest, per second: one an hour. The thread finds each next arrival by stepping
/// through the schedule a millisecond at a time (exact for ramps), and does not look at
/// the run while it does: at one an hour that is 3.6 million steps, a few milliseconds;
/// far fewer a second and a run with no end would not hear of the next rate.
pub(crate) const MIN_RATE: f64 = 1.0 / 3600.0;

/// Hands out open-model arrivals at their times until the profile, the count or the
/// duration ends, each to the most recently idle session; an arrival that finds every
/// session busy and the backlog full is dropped and counted. The waiting is done on a
/// thread of its own, with the kernel's timer slack at its minimum: the runtime's timers
/// tick in whole milliseconds, which would make every arrival up to a millisecond late.
async fn schedule(
    arrivals: Arrivals<SmallRng>,
    dispatch: Arc<Dispatch>,
    (count, limit, after_setup): (Option<u64>, Option<f64>, bool),
    shared: Arc<Shared>,
) {
    // Arrival times count from the run's start, or from the end of every session's setup
    // (a run stopped before that has no arrivals).
    let start = match after_setup {
        true => {
            let stopped = async {
                while !shared.stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            };
            tokio::select! {
                t = shared.setup_done.wait() => t,
                () = stopped => {
                    dispatch.close();
                    return;
                }
            }
        }
        false => shared.clock.origin(),
    };
    let offset_s = start.duration_since(shared.clock.origin()).as_secs_f64();
    let closer = dispatch.clone();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let run = move || {
        arrivals_at_their_times(
            arrivals,
            &dispatch,
            (count, limit),
            (start, offset_s),
            &shared,
        );
        dispatch.close();
        let _ = done_tx.send(());
    };
    // A thread, not the runtime's blocking pool: it ends by itself within 50 ms of the
    // run's stop, and this task with it.
    match std::thread::Builder::new()
        .name("spate-schedule".into())
        .spawn(run)
    {
        Ok(_) => {
            let _ = done_rx.await;
        }
        Err(e) => {
            eprintln!("spate: cannot start the arrival scheduler: {e}");
            closer.close();
        }
    }
}

/// The arrival thread's work: hands out each arrival at its time (in batches, see
/// [`Batches`]) until the schedule, the count or the duration ends or the run stops,
/// following what the run is told (a pause, another rate) as it goes. Times count from
/// `start`, `offset_s` seconds into the run.
fn arrivals_at_their_times(
    arrivals: Arrivals<SmallRng>,
    dispatch: &Dispatch,
    (count, limit): (Option<u64>, Option<f64>),
    (start, offset_s): (std::time::Instant, f64),
    shared: &Shared,
) {
    // SAFETY: prctl(PR_SET_TIMERSLACK) changes only this thread's timer slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    let mut batches = Batches::new(arrivals, (count, limit), BATCH_WINDOW_S, BATCH_MAX);
    let (mut due, mut batch, mut woken) = (
        Vec::with_capacity(BATCH_MAX),
        Vec::with_capacity(BATCH_MAX),
        Vec::with_capacity(BATCH_MAX),
    );
    let mut steer = shared.control.subscribe();
    let told = *steer.borrow_and_update();
    if told != Steer::default() {
        // Told before the schedule began (a pause while XMPP's sessions logged in, or
        // before --start-at): the schedule starts so, nothing handed out before.
        batches.steer(0.0, told.paused, told.rate);
    }
    let mut stopped_at = None;
    // Hands out `due`; false when there was nothing.
    let mut hand_out = |due: &[(u64, f64)]| {
        if due.is_empty() {
            return false;
        }
        batch.clear();
        batch.extend(
            due.iter()
                .map(|&(seq, at)| (seq, ((offset_s + at) * 1e6) as u64)),
        );
        let dropped = dispatch.offer(&batch, &mut woken);
        if dropped > 0 {
            shared.recorder.with(0, |s| s.counters.dropped += dropped);
        }
        true
    };
    loop {
        if steer.has_changed().unwrap_or(false) && stopped_at.is_none() {
            // What was due before the steer is handed out (the thread may be
            // behind); the schedule goes on from now as told.
            let now = start.elapsed().as_secs_f64();
            loop {
                batches.take_due(now, &mut due);
                if !hand_out(&due) {
                    break;
                }
            }
            let s = *steer.borrow_and_update();
            batches.steer(now, s.paused, s.rate);
        }
        if batches.paused() {
            // Nothing is due until a resume (or another rate), or the end.
            match wait_until(start + PAUSE_LOOK, &shared.stop, &mut steer) {
                Wait::Stopped => break,
                _ => continue,
            }
        }
        let Some(t) = batches.wake_at() else { break };
        if stopped_at.is_none() {
            match wait_until(start + Duration::from_secs_f64(t), &shared.stop, &mut steer) {
                Wait::Due => {}
                Wait::Steered => continue,
                // The run stopped (its duration is over, or an interrupt): what
                // was due by now is still the run's, handed out or counted as
                // dropped, even if this thread was behind; nothing later is.
                Wait::Stopped => stopped_at = Some(start.elapsed().as_secs_f64()),
            }
        }
        let now = stopped_at.unwrap_or_else(|| start.elapsed().as_secs_f64());
        batches.take_due(now, &mut due);
        if !hand_out(&due) {
            break;
        }
    }
}

/// How a wait of the arrival thread ended.
#[derive(Debug, PartialEq, Eq)]
enum Wait {
    /// The time came.
    Due,
    /// The run stopped first.
    Stopped,
    /// The run was steered first (a pause, a resume, another rate).
    Steered,
}

/// While paused, the arrival thread looks at the run this far into the future: it wakes
/// on a steer or the stop, whichever comes first.
const PAUSE_LOOK: Duration = Duration::from_secs(365 * 24 * 3600);

/// Sleeps until `t`, looking at `stop` and `steer` at least every 50 ms.
fn wait_until(
    t: std::time::Instant,
    stop: &AtomicBool,
    steer: &mut watch::Receiver<Steer>,
) -> Wait {
    loop {
        if stop.load(Ordering::Relaxed) {
            return Wait::Stopped;
        }
        if steer.has_changed().unwrap_or(false) {
            return Wait::Steered;
        }
        let now = std::time::Instant::now();
        if now >= t {
            return Wait::Due;
        }
        std::thread::sleep((t - now).min(Duration::from_millis(50)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::schedule::{Arrival, Profile};
    use crate::engine::unit::Outcome;
    use crate::metrics::Phase;

    /// Counts its units and how often the engine told it it would wait.
    struct Counting {
        units: Arc<AtomicU64>,
        idles: Arc<AtomicU64>,
    }

    impl Driver for Counting {
        const WORDS: crate::results::UnitWords =
            crate::results::UnitWords::new("units", "units/s", "sent", &[], true);
        const PHASES: &'static [Phase] = &[];
        async fn run_one(&mut self, _seq: u64, _report: &mut UnitReport) -> Outcome {
            self.units.fetch_add(1, Ordering::SeqCst);
            Outcome::Accepted
        }
        fn idle(&mut self) {
            self.idles.fetch_add(1, Ordering::SeqCst);
        }
        async fn finish(&mut self, _report: &mut UnitReport) {}
    }

    /// A workload of `model` bounded by `count` or `duration_s`, nothing else set.
    fn workload(model: Model, count: Option<u64>, duration_s: Option<f64>) -> Workload {
        Workload::bounded(model, count, duration_s)
    }

    /// What the workers of a test share: `shards` recorder shards, `sessions` sessions.
    fn shared(shards: usize, sessions: usize) -> Arc<Shared> {
        let stop = Arc::new(AtomicBool::new(false));
        let model = Model::Closed {
            users: sessions as u32,
            think_ms: 0.0,
        };
        Arc::new(Shared {
            clock: Clock::new(),
            recorder: Arc::new(Recorder::new(shards)),
            control: Control::new(&workload(model, None, None), stop.clone()),
            stop,
            on_unit: None,
            give_up: GiveUp::default(),
            setup_done: SetupDone::new(sessions),
        })
    }

    /// Units and idle calls of one session doing `count` units with `think_ms` between.
    async fn one_session(think_ms: f64, count: u64) -> (u64, u64) {
        let workload = workload(Model::Closed { users: 1, think_ms }, Some(count), None);
        let shared = shared(1, 1);
        let (units, idles) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut workers = JoinSet::new();
        let (u, i) = (units.clone(), idles.clone());
        spawn(&workload, 1, &shared, &mut workers, move |_, _| Counting {
            units: u.clone(),
            idles: i.clone(),
        });
        while workers.join_next().await.is_some() {}
        (units.load(Ordering::SeqCst), idles.load(Ordering::SeqCst))
    }

    /// Claims its next unit during each unit (as SMTP does when it writes the next
    /// envelope behind a message) and notes what it claimed and what it was given.
    struct Claiming {
        ahead: Option<Ahead>,
        claimed: Option<u64>,
        mismatches: Arc<AtomicU64>,
        ran: Arc<std::sync::Mutex<Vec<u64>>>,
    }

    impl Driver for Claiming {
        const WORDS: crate::results::UnitWords =
            crate::results::UnitWords::new("units", "units/s", "sent", &[], true);
        const PHASES: &'static [Phase] = &[];
        async fn run_one(&mut self, seq: u64, _report: &mut UnitReport) -> Outcome {
            match self.claimed.take() {
                Some(c) if c != seq => self.mismatches.fetch_add(1, Ordering::SeqCst),
                // The high bits count the units that were claimed early.
                Some(_) => self.mismatches.fetch_add(1 << 32, Ordering::SeqCst),
                None => 0,
            };
            self.ran.lock().unwrap().push(seq);
            tokio::task::yield_now().await;
            self.claimed = self.ahead.as_ref().and_then(|a| a.claim());
            Outcome::Accepted
        }
        fn ahead(&mut self, ahead: Ahead) {
            self.ahead = Some(ahead);
        }
        async fn finish(&mut self, _report: &mut UnitReport) {
            assert!(self.claimed.is_none(), "a claimed unit was left unrun");
        }
    }

    #[tokio::test]
    async fn a_claimed_unit_runs_next_on_its_session_and_the_count_stays_exact() {
        for (users, think_ms) in [(3u32, 0.0), (2, 1.0)] {
            let workload = workload(Model::Closed { users, think_ms }, Some(40), None);
            let shared = shared(users as usize, users as usize);
            let mismatches = Arc::new(AtomicU64::new(0));
            let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
            let offered = Arc::new(AtomicU64::new(0));
            let mut workers = JoinSet::new();
            let (m, r, o) = (mismatches.clone(), ran.clone(), offered.clone());
            spawn(&workload, 1, &shared, &mut workers, move |_, _| {
                o.fetch_add(1, Ordering::SeqCst);
                Claiming {
                    ahead: None,
                    claimed: None,
                    mismatches: m.clone(),
                    ran: r.clone(),
                }
            });
            while let Some(j) = workers.join_next().await {
                j.unwrap();
            }
            let mut ran = ran.lock().unwrap().clone();
            ran.sort_unstable();
            assert_eq!(ran, (0..40).collect::<Vec<u64>>(), "think {think_ms}");
            let m = mismatches.load(Ordering::SeqCst);
            assert_eq!(
                m & 0xffff_ffff,
                0,
                "a session ran another unit than it claimed"
            );
            // Back to back every unit but each session's first is claimed early; with a
            // think time the engine offers nothing.
            let early = if think_ms == 0.0 {
                40 - u64::from(users)
            } else {
                0
            };
            assert_eq!(m >> 32, early, "think {think_ms}");
            assert_eq!(offered.load(Ordering::SeqCst), u64::from(users));
        }
    }

    #[tokio::test]
    async fn a_session_that_waits_is_told_so_and_one_that_does_not_is_not() {
        // Think time: the first unit starts at once, each later one after a wait, and
        // the session waits once more before it finds the count reached.
        assert_eq!(one_session(5.0, 3).await, (3, 3));
        // Back to back: the next unit is always ready, nothing is given back.
        assert_eq!(one_session(0.0, 50).await, (50, 0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn held_sessions_start_no_unit_until_they_are_let_go() {
        use crate::engine::control::Action;
        let workload = workload(
            Model::Closed {
                users: 3,
                think_ms: 1.0,
            },
            None,
            None,
        );
        let shared = shared(3, 3);
        let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut workers = JoinSet::new();
        let r = ran.clone();
        spawn(&workload, 1, &shared, &mut workers, move |id, _| Sessions {
            id,
            ran: r.clone(),
        });
        let count = |ran: &std::sync::Mutex<Vec<usize>>| ran.lock().unwrap().len();
        let grows = |n: usize| {
            let ran = ran.clone();
            async move {
                for _ in 0..500 {
                    if count(&ran) >= n {
                        return true;
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                false
            }
        };
        assert!(grows(30).await, "the sessions run");
        shared.control.apply(Action::Pause, "test").unwrap();
        // A unit in flight may still end; after that, none starts.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let paused = count(&ran);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(count(&ran), paused, "no unit starts while paused");
        // One session of three from now on.
        shared.control.apply(Action::Users(1), "test").unwrap();
        shared.control.apply(Action::Resume, "test").unwrap();
        assert!(grows(paused + 5).await, "resumed");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let from = count(&ran);
        assert!(grows(from + 30).await);
        let later: Vec<usize> = ran.lock().unwrap()[from..].to_vec();
        assert!(later.iter().all(|&id| id == 0), "only session 0: {later:?}");
        // The end wakes the held sessions: every one ends.
        shared.stop.store(true, Ordering::Relaxed);
        shared.control.end();
        let ended = tokio::time::timeout(Duration::from_secs(10), async {
            while workers.join_next().await.is_some() {}
        })
        .await;
        assert!(ended.is_ok(), "a held session did not end");
    }

    /// Notes which session ran each unit.
    struct Sessions {
        id: usize,
        ran: Arc<std::sync::Mutex<Vec<usize>>>,
    }

    impl Driver for Sessions {
        const WORDS: crate::results::UnitWords =
            crate::results::UnitWords::new("units", "units/s", "sent", &[], true);
        const PHASES: &'static [Phase] = &[];
        async fn run_one(&mut self, _seq: u64, _report: &mut UnitReport) -> Outcome {
            self.ran.lock().unwrap().push(self.id);
            Outcome::Accepted
        }
        async fn finish(&mut self, _report: &mut UnitReport) {}
    }

    /// Records when each unit started.
    struct Stamps(Arc<std::sync::Mutex<Vec<(u64, u64)>>>);

    impl Driver for Stamps {
        const WORDS: crate::results::UnitWords =
            crate::results::UnitWords::new("units", "units/s", "sent", &[], true);
        const PHASES: &'static [Phase] = &[];
        async fn run_one(&mut self, seq: u64, report: &mut UnitReport) -> Outcome {
            self.0.lock().unwrap().push((seq, report.started()));
            Outcome::Accepted
        }
        async fn finish(&mut self, _report: &mut UnitReport) {}
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn open_arrivals_in_batches_are_exact_in_number_and_never_early() {
        // 20 000/s: five arrivals to a batch window, each with its own time.
        let (rate, secs) = (20_000.0, 1.0);
        let profile = Profile::constant(rate, Some(Duration::from_secs_f64(secs)));
        let model = Model::Open {
            profile: profile.clone(),
            arrival: Arrival::Constant,
            max_in_flight: 200,
        };
        let workload = workload(model, None, Some(secs));
        let shared = shared(8, 200);
        let stamps = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut workers = JoinSet::new();
        let st = stamps.clone();
        let scheduler = spawn(&workload, 1, &shared, &mut workers, move |_, _| {
            Stamps(st.clone())
        });
        scheduler.unwrap().task.await.unwrap();
        while workers.join_next().await.is_some() {}
        let mut got = stamps.lock().unwrap().clone();
        let mut iv = crate::metrics::Shard::default();
        shared.recorder.drain_into(&mut iv);
        let dropped = iv.counters.dropped;
        assert_eq!(
            got.len() as u64 + dropped,
            20_000,
            "rate × duration arrivals"
        );
        got.sort();
        let at: Vec<f64> =
            Arrivals::new(profile, Arrival::Constant, SmallRng::seed_from_u64(1)).collect();
        for w in got.windows(2) {
            assert!(w[0].0 < w[1].0, "arrival {} handed out twice", w[0].0);
        }
        for &(seq, started) in &got {
            let due = (at[seq as usize] * 1e6) as u64;
            assert!(
                started >= due,
                "arrival {seq} started at {started} µs, due at {due}"
            );
        }
    }

    /// A paced user: units due at the times it lists, then nothing more.
    struct Paced {
        due: Vec<u64>,
        ran: Arc<std::sync::Mutex<Vec<(u64, u64, u64)>>>,
    }

    impl Driver for Paced {
        const WORDS: crate::results::UnitWords =
            crate::results::UnitWords::new("units", "units/s", "sent", &[], true);
        const PHASES: &'static [Phase] = &[];
        fn due(&mut self) -> Option<u64> {
            self.due.first().copied()
        }
        async fn run_one(&mut self, seq: u64, report: &mut UnitReport) -> Outcome {
            let due = self.due.remove(0);
            self.ran.lock().unwrap().push((seq, due, report.started()));
            Outcome::Accepted
        }
        async fn finish(&mut self, _report: &mut UnitReport) {}
    }

    #[tokio::test]
    async fn paced_users_run_each_unit_at_its_own_time_and_end_when_they_have_none() {
        let users = 4u32;
        let workload = workload(Model::Paced { users }, None, None);
        let shared = shared(4, users as usize);
        let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut workers = JoinSet::new();
        let r = ran.clone();
        spawn(&workload, 1, &shared, &mut workers, move |id, _| Paced {
            // User 2 has nothing to do at all.
            due: match id {
                2 => vec![],
                _ => (0..3).map(|k| id as u64 * 700 + k * 3_000).collect(),
            },
            ran: r.clone(),
        });
        while workers.join_next().await.is_some() {}
        let ran = ran.lock().unwrap();
        assert_eq!(ran.len(), 9, "three units for each user with a schedule");
        let mut seqs: Vec<u64> = ran.iter().map(|r| r.0).collect();
        seqs.sort();
        assert_eq!(
            seqs,
            (0..9).collect::<Vec<u64>>(),
            "one sequence for the run"
        );
        for (seq, due, started) in ran.iter() {
            assert!(
                started >= due,
                "unit {seq} started at {started} µs, due at {due}"
            );
        }
        let mut all = crate::metrics::Shard::declared(&[Phase::RESPONSE], &[]);
        shared.recorder.drain_into(&mut all);
        let response = all.hist(Phase::RESPONSE).expect("response timed");
        assert_eq!(
            response.len(),
            9,
            "every unit's response counts from its due time"
        );
    }

    #[tokio::test]
    async fn a_paced_user_waiting_for_a_unit_an_hour_away_ends_with_the_run() {
        let workload = workload(Model::Paced { users: 2 }, None, None);
        let shared = shared(2, 2);
        let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut workers = JoinSet::new();
        let r = ran.clone();
        spawn(&workload, 1, &shared, &mut workers, move |_, _| Paced {
            due: vec![3_600_000_000],
            ran: r.clone(),
        });
        tokio::task::yield_now().await;
        shared.stop.store(true, Ordering::Relaxed);
        shared.control.end();
        // Bounded so that a session that never hears of the end fails the test rather
        // than hang it.
        let all = async { while workers.join_next().await.is_some() {} };
        tokio::time::timeout(Duration::from_secs(300), all)
            .await
            .expect("the sessions end when the run does");
        assert!(ran.lock().unwrap().is_empty(), "no unit ran");
    }
}
