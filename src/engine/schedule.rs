//! The schedule of a run: the validated workload (closed users or an open arrival
//! profile, and its bounds) and the arrival strategies. A closed workload is N users that each send, think and send again;
//! an open workload is a schedule of arrival times (constant or Poisson, with stages that
//! ramp linearly, k6-style) that messages are started on, whether or not earlier ones have
//! finished. Arrival computation is a pure iterator so it can be tested without a clock.

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

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
    /// One session per simulated user, each on a schedule of its own: the driver says
    /// when its next unit is due ([`crate::engine::Driver::due`]), the engine waits until
    /// then and counts the unit's response from that time, as in the open model (a unit
    /// that starts late waits in its response, never in a gap left out). A user's next
    /// unit does wait for its last one to end, as one client's next command waits on its
    /// connection.
    Paced {
        users: u32,
    },
}

impl Model {
    /// How many sessions the run has (closed and paced: its users; open: at most this
    /// many units in flight).
    pub fn sessions(&self) -> u32 {
        match self {
            Model::Closed { users, .. } | Model::Paced { users } => *users,
            Model::Open { max_in_flight, .. } => *max_in_flight,
        }
    }
}

/// A validated workload: the model and its bounds.
#[derive(Debug, Clone, Serialize)]
pub struct Workload {
    pub model: Model,
    pub count: Option<u64>,
    pub duration_s: Option<f64>,
    /// `count` is the default bound (no --count, --duration or --stages was given): a run
    /// it ends says so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub count_is_default: bool,
    /// The schedule (open arrivals, and --duration) starts once every session has done
    /// its setup: XMPP sessions log in first, and traffic before that would be late
    /// through no fault of the server's or the generator's.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub after_setup: bool,
    /// Closed workload: sessions start at this rate (per second), session i at i/rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_rate: Option<f64>,
    /// This run is one shard of a larger one (its share of the load is above).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<crate::results::ShardOf>,
    /// The run id the shards share (the plan's run id).
    #[serde(skip)]
    pub run_id: Option<String>,
    /// The wall-clock start the run waits for (--start-at), in plan.json as RFC 3339.
    #[serde(
        rename = "start_at",
        skip_serializing_if = "Option::is_none",
        serialize_with = "rfc3339"
    )]
    pub start: Option<std::time::SystemTime>,
}

impl Workload {
    /// A workload of `model` bounded by `count` units and/or `duration_s`, nothing else
    /// set (no shard, no shared start, sessions started at once).
    pub fn bounded(model: Model, count: Option<u64>, duration_s: Option<f64>) -> Workload {
        Workload {
            model,
            count,
            duration_s,
            count_is_default: false,
            after_setup: false,
            connect_rate: None,
            shard: None,
            run_id: None,
            start: None,
        }
    }
}

fn rfc3339<S: serde::Serializer>(
    t: &Option<std::time::SystemTime>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match t {
        Some(t) => s.serialize_str(&crate::results::rfc3339(*t)),
        None => s.serialize_none(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Arrival {
    /// Evenly spaced arrivals.
    Constant,
    /// Exponentially distributed gaps (a Poisson process), like independent senders.
    Poisson,
}

/// One stage: ramp linearly from the previous stage's rate (0 before the first; the
/// first stage's rate when it is the only one given with --rate) to `rate` over `duration`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    pub duration_s: f64,
    /// Messages per second at the end of the stage.
    pub rate: f64,
}

/// Parses `1m:100/s,5m:500/s,1m:0/s`.
pub fn parse_stages(text: &str) -> Result<Vec<Stage>, crate::units::UnitError> {
    let mut stages = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (d, r) = part.split_once(':').ok_or_else(|| stages_error(text))?;
        stages.push(Stage {
            duration_s: crate::units::parse_duration(d)?.as_secs_f64(),
            rate: crate::units::parse_rate(r)?,
        });
    }
    if stages.is_empty() {
        return Err(stages_error(text));
    }
    Ok(stages)
}

fn stages_error(text: &str) -> crate::units::UnitError {
    crate::units::UnitError::new(
        "bad stages",
        text,
        "expected DURATION:RATE,..., e.g. 1m:100/s,5m:500/s",
    )
}

/// The rate profile of an open workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub start_rate: f64,
    pub stages: Vec<Stage>,
}

impl Profile {
    pub fn constant(rate: f64, duration: Option<Duration>) -> Self {
        Profile {
            start_rate: rate,
            stages: vec![Stage {
                duration_s: duration.map_or(f64::INFINITY, |d| d.as_secs_f64()),
                rate,
            }],
        }
    }

    pub fn total_duration(&self) -> f64 {
        self.stages.iter().map(|s| s.duration_s).sum()
    }

    /// The rate at time `t` seconds, or None past the end.
    pub fn rate_at(&self, t: f64) -> Option<f64> {
        let mut start = 0.0;
        let mut from = self.start_rate;
        for s in &self.stages {
            if t < start + s.duration_s - 1e-9 {
                if s.duration_s.is_infinite() {
                    return Some(s.rate);
                }
                let frac = (t - start) / s.duration_s;
                return Some(from + (s.rate - from) * frac);
            }
            start += s.duration_s;
            from = s.rate;
        }
        None
    }
}

/// Yields arrival offsets (seconds since start) for a profile.
pub struct Arrivals<R> {
    profile: Profile,
    /// The profile given, which a steer to another rate replaces until the next.
    base: Profile,
    kind: Arrival,
    t: f64,
    rng: R,
    first: bool,
    /// Constant spacing: where in its first gap the first arrival falls (0: at the start).
    phase: f64,
}

impl<R: Rng> Arrivals<R> {
    pub fn new(profile: Profile, kind: Arrival, rng: R) -> Self {
        Arrivals {
            base: profile.clone(),
            profile,
            kind,
            t: 0.0,
            rng,
            first: true,
            phase: 0.0,
        }
    }

    /// Shard `index` of `count`, whose profile is the run's divided by `count`: with
    /// constant spacing its arrivals are every `count`-th of the whole run's, starting at
    /// the `index`-th, so the shards together send exactly what one run sends (each
    /// rounding its own share up sent up to one more per shard).
    pub fn shard(mut self, index: u32, count: u32) -> Self {
        if count > 0 {
            self.phase = f64::from(index) / f64::from(count);
        }
        self
    }
}

impl<R: Rng> Iterator for Arrivals<R> {
    type Item = f64;
    fn next(&mut self) -> Option<f64> {
        // Constant spacing: arrival k comes when the integral of the rate reaches k, the
        // first at the start, so rate × duration arrivals fit in a run (not one fewer).
        let first = std::mem::take(&mut self.first);
        // The first arrival at the start, unless the rate is 0 there (a 0/s stage, or a
        // ramp from 0): then as soon as the rate is above 0, not during the quiet stage.
        let start = self.profile.rate_at(0.0)?;
        if first && self.kind == Arrival::Constant && self.phase == 0.0 && start > 0.0 {
            return Some(0.0);
        }
        // Integrate the rate until one arrival's worth (1 for constant spacing, an
        // exponential sample for Poisson) has accumulated: exact for ramps and for
        // stages that start at rate 0, where a naive 1/rate gap would jump past them.
        let mut need = match self.kind {
            Arrival::Constant if first => self.phase.max(1e-9),
            Arrival::Constant => 1.0,
            Arrival::Poisson => -self.rng.random_range(f64::EPSILON..1.0f64).ln(),
        };
        const DT: f64 = 0.001;
        loop {
            let rate = self.profile.rate_at(self.t)?;
            if rate * DT >= need {
                self.t += need / rate;
                return self.profile.rate_at(self.t).map(|_| self.t);
            }
            need -= rate * DT;
            self.t += DT;
        }
    }
}

/// The arrival thread's batches: it wakes for the next arrival's time, but no sooner
/// than `window` after its previous wake, and hands out every arrival already due. At a
/// low rate each arrival gets a wake of its own, right at its time; at a high one the
/// arrivals of a window go out together, so the thread and the runtime wake once per
/// window, not once per arrival. Nothing is handed out before its time, and each
/// arrival keeps its own scheduled time: batching moves the wakes, not what is measured.
/// Times are seconds since the schedule's start; pure, so it is tested without a clock.
pub struct Batches<I> {
    arrivals: I,
    /// Arrivals handed out so far: the sequence number of the next.
    handed: u64,
    /// Steered to a pause: nothing is due until the next steer.
    paused: bool,
    /// The next arrival within the bounds, taken but not handed out yet.
    next: Option<(u64, f64)>,
    count: Option<u64>,
    limit: Option<f64>,
    window: f64,
    /// When the last batch was due, unless it was cut short by `max` (then the rest of
    /// what is due goes at once). The schedule, not when the thread woke: a late wake
    /// does not push the next one later.
    last_due: Option<f64>,
    max: usize,
}

impl<I: Iterator<Item = f64>> Batches<I> {
    /// At most `max` arrivals a batch; the schedule ends at `count` arrivals or at
    /// `limit` seconds, whichever comes first.
    pub fn new(
        arrivals: I,
        (count, limit): (Option<u64>, Option<f64>),
        window: f64,
        max: usize,
    ) -> Self {
        let mut b = Batches {
            arrivals,
            handed: 0,
            paused: false,
            next: None,
            count,
            limit,
            window,
            last_due: None,
            max: max.max(1),
        };
        b.advance();
        b
    }

    fn advance(&mut self) {
        let seq = self.handed;
        self.next = self.arrivals.next().and_then(|at| {
            let over = self.count.is_some_and(|c| seq >= c) || self.limit.is_some_and(|l| at >= l);
            (!over).then_some((seq, at))
        });
    }

    /// When to wake for the next batch; None once the schedule is over (or while
    /// paused: see [`Batches::paused`]).
    pub fn wake_at(&self) -> Option<f64> {
        let (_, at) = self.next?;
        Some(match self.last_due {
            Some(w) => at.max(w + self.window),
            None => at,
        })
    }

    /// Woken at `now`: every arrival due by then (at most `max`), in order, into `out`
    /// (cleared first).
    pub fn take_due(&mut self, now: f64, out: &mut Vec<(u64, f64)>) {
        out.clear();
        let due = self.wake_at();
        while let Some(a) = self.next.filter(|a| a.1 <= now) {
            if out.len() == self.max {
                self.last_due = None;
                return;
            }
            out.push(a);
            self.handed += 1;
            self.advance();
        }
        self.last_due = due.map(|d| d.min(now));
    }
}

/// An arrival iterator that can be told, at time `at`, to go on from there at another
/// rate (or at its own profile's again).
pub trait Restart {
    fn restart(&mut self, at: f64, rate: Option<f64>);
}

impl<R: Rng> Restart for Arrivals<R> {
    fn restart(&mut self, at: f64, rate: Option<f64>) {
        self.profile = match rate {
            // The new rate holds to the end of the profile (the stages that were to
            // follow are given up).
            Some(r) => {
                let end = self.base.total_duration();
                Profile::constant(r, end.is_finite().then(|| Duration::from_secs_f64(end)))
            }
            None => self.base.clone(),
        };
        self.t = at;
        self.first = false;
    }
}

impl<I: Iterator<Item = f64> + Restart> Batches<I> {
    /// Steered at `now`: paused (nothing is due until the next steer), or going on from
    /// `now` at `rate` (None: the profile's). The arrival taken but not handed out is
    /// given up (take what is due by `now` first): it would have been at the old rate, or
    /// in the pause. Sequence numbers go on.
    pub fn steer(&mut self, now: f64, paused: bool, rate: Option<f64>) {
        self.paused = paused;
        self.next = None;
        self.last_due = None;
        if !paused {
            self.arrivals.restart(now, rate);
            self.advance();
        }
    }

    /// Whether a steer paused the schedule (then [`Batches::wake_at`] is None).
    pub fn paused(&self) -> bool {
        self.paused
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn a_steered_schedule_pauses_changes_rate_and_keeps_counting() {
        // 10/s constant, 100 arrivals.
        let p = Profile::constant(10.0, None);
        let a = Arrivals::new(p, Arrival::Constant, SmallRng::seed_from_u64(1));
        let mut b = Batches::new(a, (Some(100), None), 0.0, 1000);
        let mut out = Vec::new();
        b.take_due(0.95, &mut out);
        assert_eq!(out.len(), 10, "0.0 .. 0.9");
        // Paused at 1.05, the thread late: the arrival due at 1.0, not handed out yet,
        // is given up with the pause (its sequence number goes to the next).
        b.steer(1.05, true, None);
        assert!(b.paused() && b.wake_at().is_none());
        b.take_due(3.0, &mut out);
        assert!(out.is_empty(), "nothing is due while paused");
        // Resumed at 3.0 at 100/s: the next at 3.01, sequence numbers go on from 10.
        b.steer(3.0, false, Some(100.0));
        assert!(!b.paused());
        b.take_due(3.1, &mut out);
        assert_eq!(out.len(), 10, "{out:?}");
        assert_eq!(out[0].0, 10);
        assert!((out[0].1 - 3.01).abs() < 1e-6, "{out:?}");
        assert!((out[9].1 - 3.10).abs() < 1e-6, "{out:?}");
        // Back to the profile's rate: 10/s from 3.1.
        b.steer(3.1, false, None);
        b.take_due(4.1, &mut out);
        assert_eq!(out.len(), 10, "{out:?}");
        assert_eq!(out[0].0, 20);
        // The count bounds the steered schedule too: 100 in all.
        b.take_due(20.0, &mut out);
        assert_eq!(out.last().map(|a| a.0), Some(99));
        assert!(b.wake_at().is_none() && !b.paused());
    }

    #[test]
    fn a_steered_rate_ends_with_the_profile() {
        // A ramp over 2 s, then nothing: a rate set at 1 s holds until 2 s.
        let p = Profile {
            start_rate: 0.0,
            stages: vec![Stage {
                duration_s: 2.0,
                rate: 100.0,
            }],
        };
        let a = Arrivals::new(p, Arrival::Constant, SmallRng::seed_from_u64(1));
        let mut b = Batches::new(a, (None, None), 0.0, 1000);
        let mut out = Vec::new();
        b.take_due(1.0, &mut out);
        b.steer(1.0, false, Some(10.0));
        b.take_due(100.0, &mut out);
        assert_eq!(out.len(), 9, "1.1 .. 1.9: {out:?}");
        assert!(b.wake_at().is_none());
    }

    #[test]
    fn constant_rate_count() {
        let p = Profile::constant(100.0, Some(Duration::from_secs(10)));
        let n = Arrivals::new(p, Arrival::Constant, SmallRng::seed_from_u64(1)).count();
        assert_eq!(n, 1000);
        // 10/s for 4 s: 40, the first at the start and the last 100 ms before the end.
        let p = Profile::constant(10.0, Some(Duration::from_secs(4)));
        let at: Vec<f64> =
            Arrivals::new(p, Arrival::Constant, SmallRng::seed_from_u64(1)).collect();
        assert_eq!(at.len(), 40);
        assert_eq!(at[0], 0.0);
        assert!((at[39] - 3.9).abs() < 1e-6, "{}", at[39]);
    }

    #[test]
    fn constant_rate_shards_send_together_what_one_run_sends() {
        let whole =
            |p: Profile| Arrivals::new(p, Arrival::Constant, SmallRng::seed_from_u64(1)).count();
        for (rate, secs) in [(200.0, 30), (400.0, 11), (7.0, 3), (1000.0, 2)] {
            let one = whole(Profile::constant(rate, Some(Duration::from_secs(secs))));
            for n in [2u32, 3, 4, 7] {
                let shares: usize = (0..n)
                    .map(|i| {
                        let p = Profile::constant(rate / n as f64, Some(Duration::from_secs(secs)));
                        Arrivals::new(p, Arrival::Constant, SmallRng::seed_from_u64(1))
                            .shard(i, n)
                            .count()
                    })
                    .sum();
                assert_eq!(shares, one, "{rate}/s for {secs}s in {n} shards");
            }
        }
        // The shards' arrivals are the whole run's, interleaved.
        let p = Profile::constant(10.0 / 3.0, Some(Duration::from_secs(3)));
        let at: Vec<f64> = Arrivals::new(p, Arrival::Constant, SmallRng::seed_from_u64(1))
            .shard(1, 3)
            .collect();
        let want = [0.1, 0.4, 0.7, 1.0, 1.3, 1.6, 1.9, 2.2, 2.5, 2.8];
        assert_eq!(at.len(), want.len(), "{at:?}");
        for (a, w) in at.iter().zip(want) {
            assert!((a - w).abs() < 1e-6, "{at:?}");
        }
    }

    #[test]
    fn a_zero_rate_stage_sends_nothing_not_even_at_its_start() {
        let stages = parse_stages("2s:0/s,1s:0/s,1s:10/s").unwrap();
        let p = Profile {
            start_rate: 0.0,
            stages,
        };
        let at: Vec<f64> =
            Arrivals::new(p, Arrival::Constant, SmallRng::seed_from_u64(1)).collect();
        // A ramp from 0 to 10/s over the last second: 5 arrivals' worth, all in it.
        assert_eq!(at.len(), 5, "{at:?}");
        assert!(at.iter().all(|&t| t > 3.0), "{at:?}");
    }

    #[test]
    fn poisson_rate_is_close() {
        let p = Profile::constant(200.0, Some(Duration::from_secs(50)));
        let n = Arrivals::new(p, Arrival::Poisson, SmallRng::seed_from_u64(7)).count();
        // 10 000 expected, sd 100: 5 sd is a failure of the generator, not luck.
        assert!((9_500..=10_500).contains(&n), "{n}");
    }

    #[test]
    fn stages_ramp_linearly() {
        let stages = parse_stages("10s:100/s,10s:100/s,10s:0/s").unwrap();
        let p = Profile {
            start_rate: 0.0,
            stages,
        };
        assert_eq!(p.rate_at(5.0), Some(50.0));
        assert_eq!(p.rate_at(15.0), Some(100.0));
        assert_eq!(p.rate_at(25.0), Some(50.0));
        assert_eq!(p.rate_at(31.0), None);
        let n = Arrivals::new(p, Arrival::Constant, SmallRng::seed_from_u64(1)).count();
        // 500 + 1000 + 500 areas under the curve.
        assert!((1_950..=2_050).contains(&n), "{n}");
        assert!(parse_stages("10s").is_err());
        assert!(parse_stages("x:1/s").is_err());
    }

    /// Every batch of a schedule, as (wake time, arrivals), woken exactly when asked.
    fn batches(rate: f64, secs: u64, window: f64, max: usize) -> Vec<(f64, Vec<(u64, f64)>)> {
        let p = Profile::constant(rate, Some(Duration::from_secs(secs)));
        let a = Arrivals::new(p, Arrival::Constant, SmallRng::seed_from_u64(1));
        let mut b = Batches::new(a, (None, Some(secs as f64)), window, max);
        let mut out = Vec::new();
        let mut all = Vec::new();
        while let Some(t) = b.wake_at() {
            b.take_due(t, &mut out);
            assert!(!out.is_empty(), "a wake with nothing due at {t}");
            all.push((t, out.clone()));
        }
        all
    }

    #[test]
    fn batches_wake_once_per_window_and_never_early() {
        // 1000/s, 100 µs window: one wake per arrival, each at its own time.
        let b = batches(1000.0, 2, 100e-6, 64);
        assert_eq!(b.len(), 2000);
        assert!(b.iter().all(|(t, a)| a.len() == 1 && a[0].1 == *t));
        // 50 000/s: five arrivals to a window, never one before its time nor one
        // past the window it fell in; rate × duration in all, in order, each once.
        let b = batches(50_000.0, 1, 100e-6, 64);
        let seqs: Vec<u64> = b.iter().flat_map(|(_, a)| a.iter().map(|x| x.0)).collect();
        assert_eq!(seqs, (0..50_000).collect::<Vec<_>>());
        assert!(b.len() <= 10_001, "{} wakes", b.len());
        assert!(b.len() >= 9_999, "{} wakes", b.len());
        for (t, a) in &b {
            assert!(
                a.iter().all(|x| x.1 <= *t && *t - x.1 <= 100e-6 + 1e-9),
                "{t} {a:?}"
            );
        }
        // A thread that fell behind: what is due goes out in batches of `max`, back to
        // back, then the window applies again.
        let p = Profile::constant(10_000.0, Some(Duration::from_secs(1)));
        let a = Arrivals::new(p, Arrival::Constant, SmallRng::seed_from_u64(1));
        let mut bs = Batches::new(a, (Some(5_000), None), 100e-6, 64);
        let mut out = Vec::new();
        let now = 0.10005;
        bs.take_due(now, &mut out);
        assert_eq!(out.len(), 64);
        let next = bs.wake_at().unwrap();
        assert!(
            (next - 64e-4).abs() < 1e-9,
            "the rest of what is due, at once: {next}"
        );
        let mut taken = 64;
        while bs.wake_at().is_some_and(|t| t <= now) {
            bs.take_due(now, &mut out);
            taken += out.len();
        }
        assert_eq!(taken, 1001, "arrivals 0..=1000 were due");
        let next = bs.wake_at().unwrap();
        assert!(
            (next - 0.1001).abs() < 1e-9,
            "arrival 1001 at its time: {next}"
        );
        // A late wake does not push the next one later: the window counts from when the
        // batch was due.
        let p = Profile::constant(10_000.0, Some(Duration::from_secs(1)));
        let a = Arrivals::new(p, Arrival::Constant, SmallRng::seed_from_u64(1));
        let mut lw = Batches::new(a, (None, None), 250e-6, 64);
        lw.take_due(0.0, &mut out);
        assert!((lw.wake_at().unwrap() - 250e-6).abs() < 1e-9);
        lw.take_due(350e-6, &mut out);
        assert_eq!(out.len(), 3, "{out:?}");
        let next = lw.wake_at().unwrap();
        assert!((next - 500e-6).abs() < 1e-9, "{next}");
        // The count bound ends the schedule exactly.
        let mut n = taken;
        while let Some(t) = bs.wake_at() {
            bs.take_due(t, &mut out);
            n += out.len();
        }
        assert_eq!(n, 5_000);
    }
}
