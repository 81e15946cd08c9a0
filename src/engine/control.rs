//! Steering a run while it goes: pause and resume, the rate of an open workload, the
//! number of sessions of a closed one, and stop. What a live view (`--web`) or
//! `spate ctl` asks for goes through [`Control::apply`], which checks it against the
//! workload, says what it did and keeps it (with the time on the run's clock) for the
//! results; the schedule follows within 50 ms.
//!
//! A pause holds the schedule: a closed session starts no unit (the one in flight
//! finishes), an open workload's arrivals stop. The clock goes on: --duration counts the
//! paused time, and no arrival is owed for it. A rate or a number of sessions applies
//! from the moment it is set until the end of the run (the stages that were to follow
//! are given up).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::Serialize;
use tokio::sync::watch;

use super::schedule::{Model, Workload};
use super::worker::{MAX_RATE, MIN_RATE};
use crate::metrics::Clock;
use crate::results::ShardOf;

/// The most actions a run takes (a script that pauses and resumes in a loop for days
/// must not grow the run's memory and summary without end).
pub const MAX_ACTIONS: usize = 10_000;

/// What the schedule is told to do now.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Steer {
    pub paused: bool,
    /// This shard's arrival rate from now on (per second), instead of the profile's.
    pub rate: Option<f64>,
    /// How many of this shard's closed sessions run (the first N); None: all.
    pub users: Option<u32>,
    /// The run is over: sessions parked by a pause or a lower number end.
    pub ended: bool,
}

impl Steer {
    /// Whether closed session `id` may start a unit.
    pub fn runs(&self, id: usize) -> bool {
        !self.paused && self.users.is_none_or(|n| (id as u64) < u64::from(n))
    }
}

/// One thing asked of a running test.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Action {
    Pause,
    Resume,
    /// Stop as SIGTERM would: work in flight finishes, everything is written.
    Stop,
    /// The whole run's arrival rate, per second (an open workload).
    Rate(f64),
    /// The whole run's number of sessions (a closed workload).
    Users(u32),
}

impl Action {
    /// Parses `pause`, `resume`, `stop`, `rate 200/s`, `users 50` (the name and its value
    /// as separate words, or in one with a space or `=`).
    pub fn parse(name: &str, value: Option<&str>) -> Result<Action, String> {
        let (name, inline) = match name.trim().split_once([' ', '=']) {
            Some((n, v)) => (n, Some(v.trim())),
            None => (name.trim(), None),
        };
        let value = inline.or(value.map(str::trim)).filter(|v| !v.is_empty());
        let needs = |what: &str| format!("{name}: give {what}");
        match (name, value) {
            ("pause", None) => Ok(Action::Pause),
            ("resume", None) => Ok(Action::Resume),
            ("stop", None) => Ok(Action::Stop),
            ("pause" | "resume" | "stop", Some(v)) => Err(format!("{name} takes no value ({v})")),
            ("rate", None) => Err(needs("a rate, such as 200/s")),
            ("rate", Some(v)) => {
                let r = crate::units::parse_rate(v).map_err(|e| format!("rate: {e}"))?;
                if r <= 0.0 {
                    return Err("rate: give a rate above 0 (pause stops the arrivals)".into());
                }
                Ok(Action::Rate(r))
            }
            ("users", None) => Err(needs("a number of sessions, such as 50")),
            ("users", Some(v)) => match v.parse::<u32>() {
                Ok(0) => Err("users: give at least 1 (pause stops every session)".into()),
                Ok(n) => Ok(Action::Users(n)),
                Err(_) => Err(format!("users: {v} is not a number of sessions")),
            },
            _ => Err(format!(
                "unknown action {name}: expected pause, resume, stop, rate RATE or users N"
            )),
        }
    }
}

impl std::fmt::Display for Action {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Action::Pause => f.write_str("pause"),
            Action::Resume => f.write_str("resume"),
            Action::Stop => f.write_str("stop"),
            Action::Rate(r) => write!(f, "rate {}", per_s(*r)),
            Action::Users(n) => write!(f, "users {n}"),
        }
    }
}

/// A rate as `200/s`, `2.5/s`: to the thousandth, without trailing zeros.
fn per_s(r: f64) -> String {
    let r = format!("{r:.3}");
    format!("{}/s", r.trim_end_matches('0').trim_end_matches('.'))
}

/// An action as the results keep it (control.jsonl, summary.json's `extra.control`).
#[derive(Debug, Clone, Serialize)]
pub struct Record {
    /// Seconds since the start of the run.
    pub t_s: f64,
    /// Wall-clock time, RFC 3339.
    pub time: String,
    /// `pause`, `resume`, `stop`, `rate`, `users`.
    pub action: &'static str,
    /// The rate (per second) or the number of sessions set, for the whole run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// Who asked (the peer's address, or `ctl`).
    pub by: String,
}

/// How a run can be steered, and what it was told.
pub struct Control {
    tx: watch::Sender<Steer>,
    /// Set once anything has been asked: until then a session's check is one load.
    steered: AtomicBool,
    open: bool,
    /// Sessions this shard started (a closed workload's users).
    sessions: u32,
    shard: Option<ShardOf>,
    stop: Arc<AtomicBool>,
    clock: OnceLock<Clock>,
    /// The run's length, once it is over (its time stops there).
    ended_s: OnceLock<f64>,
    records: Mutex<Vec<Record>>,
    /// Records handed out by [`Control::take_new`] so far.
    taken: Mutex<usize>,
}

/// An action that cannot apply to this run (the HTTP API answers 409 with it).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

impl Control {
    /// The control of a run of `workload`; `stop` is the run's stop flag.
    pub fn new(workload: &Workload, stop: Arc<AtomicBool>) -> Arc<Control> {
        let open = matches!(workload.model, Model::Open { .. });
        let sessions = workload.model.sessions();
        Arc::new(Control {
            tx: watch::Sender::new(Steer::default()),
            steered: AtomicBool::new(false),
            open,
            sessions,
            shard: workload.shard.clone(),
            stop,
            clock: OnceLock::new(),
            ended_s: OnceLock::new(),
            records: Mutex::new(Vec::new()),
            taken: Mutex::new(0),
        })
    }

    /// The run's clock starts: actions are timed on it from now on.
    pub(super) fn begin(&self, clock: Clock) {
        let _ = self.clock.set(clock);
    }

    /// What the schedule is told now, and changes to it.
    pub fn subscribe(&self) -> watch::Receiver<Steer> {
        self.tx.subscribe()
    }

    pub fn now(&self) -> Steer {
        *self.tx.borrow()
    }

    /// Whether the run is an open workload (its rate can be set; a closed one's users).
    pub fn open(&self) -> bool {
        self.open
    }

    /// Whether closed session `id` is held back (a pause, a lower number of sessions).
    pub fn held(&self, id: usize) -> bool {
        self.steered.load(Ordering::Acquire) && !self.tx.borrow().runs(id)
    }

    /// The run is over: whatever waits on a pause ends.
    pub(super) fn end(&self) {
        self.tx.send_modify(|s| s.ended = true);
    }

    /// Applies `action` asked by `by`; says what was done, in words.
    pub fn apply(&self, action: Action, by: &str) -> Result<String, Refused> {
        let now = self.now();
        if now.ended || self.stop.load(Ordering::Relaxed) {
            return Err(Refused("the run is ending".into()));
        }
        if self.records.lock().unwrap_or_else(|p| p.into_inner()).len() >= MAX_ACTIONS {
            // What a run keeps of them (memory, summary.json) stays bounded.
            return Err(Refused(format!(
                "this run has been told {MAX_ACTIONS} things already: it takes no more (stop it, or let it run)"
            )));
        }
        let said = match action {
            Action::Pause if now.paused => return Ok("already paused".into()),
            Action::Resume if !now.paused => return Ok("not paused".into()),
            Action::Pause => {
                self.tx.send_modify(|s| s.paused = true);
                "paused: no unit starts until resume (the clock and --duration go on)".into()
            }
            Action::Resume => {
                self.tx.send_modify(|s| s.paused = false);
                "resumed".into()
            }
            Action::Stop => {
                self.stop.store(true, Ordering::Relaxed);
                self.tx.send_modify(|s| s.paused = false);
                "stopping: work in flight finishes, then everything is written".into()
            }
            Action::Rate(r) => {
                if !self.open {
                    return Err(Refused(format!(
                        "{action}: this run is a closed workload (--users): set users instead"
                    )));
                }
                let share = self.shard.as_ref().map_or(r, |s| r / f64::from(s.count));
                self.schedulable(action, share)?;
                self.tx.send_modify(|s| s.rate = Some(share));
                format!("{action} from now on")
            }
            Action::Users(n) => {
                if self.open {
                    return Err(Refused(format!(
                        "{action}: this run is an open workload (--rate): set its rate instead"
                    )));
                }
                let share = self
                    .shard
                    .as_ref()
                    .map_or(u64::from(n), |s| s.share(u64::from(n)));
                if share > u64::from(self.sessions) {
                    let whole = match &self.shard {
                        Some(s) => {
                            format!("this shard started {} of the run's", self.sessions)
                                + &format!(" (shard {} of {})", s.index + 1, s.count)
                        }
                        None => format!("this run started {}", self.sessions),
                    };
                    return Err(Refused(format!(
                        "{action}: {whole} sessions and can run at most those (start it with more --users and lower them)"
                    )));
                }
                self.tx.send_modify(|s| s.users = Some(share as u32));
                format!("{action}: sessions above that finish their unit and wait")
            }
        };
        self.steered.store(true, Ordering::Release);
        self.record(action, by);
        Ok(said)
    }

    /// Refuses a rate whose share (this process's) the arrival scheduler cannot keep:
    /// above [`MAX_RATE`] it would fall behind for good, and no later rate would be
    /// reached; below [`MIN_RATE`] finding each next arrival would take it too long.
    fn schedulable(&self, action: Action, share: f64) -> Result<(), Refused> {
        let whose = match &self.shard {
            Some(s) => format!(
                "a shard, whose share here would be {} (the run's over {} shards)",
                per_s(share),
                s.count
            ),
            None => "a process".to_string(),
        };
        if share > MAX_RATE {
            return Err(Refused(format!(
                "{action}: more than the arrival scheduler keeps up with: at most {} for {whose} (it hands out up to 256 arrivals per 250 µs); split the run into more shards (--shard) for more",
                per_s(MAX_RATE)
            )));
        }
        if share < MIN_RATE {
            return Err(Refused(format!(
                "{action}: less than the arrival scheduler takes: at least 1/h for {whose}; pause stops the arrivals"
            )));
        }
        Ok(())
    }

    /// Seconds on the run's clock now: 0 until it starts (a shard waiting for
    /// --start-at), then the run's time, whether or not anything watches; once the run
    /// is over, its length.
    pub fn t_s(&self) -> f64 {
        if let Some(&end) = self.ended_s.get() {
            return end;
        }
        self.clock.get().map_or(0.0, |c| c.now_us() as f64 / 1e6)
    }

    /// The run is over, `elapsed_s` long: its time stops there.
    pub fn finished(&self, elapsed_s: f64) {
        let _ = self.ended_s.set(elapsed_s);
    }

    fn record(&self, action: Action, by: &str) {
        let t_s = self.t_s();
        let (name, value) = match action {
            Action::Pause => ("pause", None),
            Action::Resume => ("resume", None),
            Action::Stop => ("stop", None),
            Action::Rate(r) => ("rate", Some(r)),
            Action::Users(n) => ("users", Some(f64::from(n))),
        };
        let rec = Record {
            t_s: (t_s * 1000.0).round() / 1000.0,
            time: crate::results::rfc3339(std::time::SystemTime::now()),
            action: name,
            value,
            by: by.to_string(),
        };
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(rec);
    }

    /// Every action so far.
    pub fn records(&self) -> Vec<Record> {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The actions since the last call.
    pub fn take_new(&self) -> Vec<Record> {
        let all = self.records.lock().unwrap_or_else(|p| p.into_inner());
        let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        let new = all[*taken..].to_vec();
        *taken = all.len();
        new
    }

    /// Whether `stop` was asked for (the run stops as after SIGTERM).
    pub fn stopped(&self) -> bool {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|r| r.action == "stop")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::schedule::{Arrival, Profile};

    fn closed(users: u32) -> Workload {
        Workload::bounded(
            Model::Closed {
                users,
                think_ms: 0.0,
            },
            Some(10),
            None,
        )
    }

    fn open() -> Workload {
        Workload::bounded(
            Model::Open {
                profile: Profile::constant(100.0, None),
                arrival: Arrival::Constant,
                max_in_flight: 10,
            },
            Some(10),
            None,
        )
    }

    #[test]
    fn actions_parse_as_words_or_with_their_value() {
        assert_eq!(Action::parse("pause", None), Ok(Action::Pause));
        assert_eq!(
            Action::parse("rate", Some("200/s")),
            Ok(Action::Rate(200.0))
        );
        assert_eq!(Action::parse("rate 60/min", None), Ok(Action::Rate(1.0)));
        assert_eq!(Action::parse("users=5", None), Ok(Action::Users(5)));
        assert!(Action::parse("rate", None).unwrap_err().contains("200/s"));
        assert!(Action::parse("rate 0/s", None)
            .unwrap_err()
            .contains("pause"));
        assert!(Action::parse("users 0", None).is_err());
        assert!(Action::parse("users many", None).is_err());
        assert!(Action::parse("pause 3", None).is_err());
        assert!(Action::parse("faster", None)
            .unwrap_err()
            .contains("unknown action faster"));
        assert_eq!(Action::Rate(2.5).to_string(), "rate 2.5/s");
    }

    #[test]
    fn an_action_that_does_not_fit_the_workload_is_refused_and_not_recorded() {
        let c = Control::new(&closed(4), Arc::new(AtomicBool::new(false)));
        assert!(c.apply(Action::Rate(10.0), "t").is_err());
        let e = c.apply(Action::Users(5), "t").unwrap_err();
        assert!(e.0.contains("started 4"), "{e}");
        assert!(c.records().is_empty());
        c.apply(Action::Users(2), "t").unwrap();
        assert_eq!(c.now().users, Some(2));
        assert!(c.now().runs(1) && !c.now().runs(2));
        let o = Control::new(&open(), Arc::new(AtomicBool::new(false)));
        assert!(o.apply(Action::Users(2), "t").is_err());
        o.apply(Action::Rate(50.0), "t").unwrap();
        assert_eq!(o.now().rate, Some(50.0));
        assert_eq!(o.records().len(), 1);
    }

    #[test]
    fn a_shard_takes_its_share_of_a_rate_and_of_users() {
        let mut w = closed(3);
        w.shard = Some(ShardOf { index: 0, count: 2 });
        let c = Control::new(&w, Arc::new(AtomicBool::new(false)));
        c.apply(Action::Users(5), "t").unwrap();
        assert_eq!(c.now().users, Some(3), "shard 0 of 5 over 2");
        assert!(c.apply(Action::Users(7), "t").is_err(), "4 > 3 started");
        let mut w = open();
        w.shard = Some(ShardOf { index: 1, count: 4 });
        let c = Control::new(&w, Arc::new(AtomicBool::new(false)));
        c.apply(Action::Rate(200.0), "t").unwrap();
        assert_eq!(c.now().rate, Some(50.0));
    }

    #[test]
    fn a_rate_the_scheduler_cannot_keep_is_refused_with_its_bounds() {
        let o = Control::new(&open(), Arc::new(AtomicBool::new(false)));
        let e = o.apply(Action::Rate(1e12), "t").unwrap_err();
        assert!(
            e.0.contains("rate 1000000000000/s: more than") && e.0.contains("at most 1000000/s"),
            "{e}"
        );
        let e = o.apply(Action::Rate(0.1 / 3600.0), "t").unwrap_err();
        assert!(e.0.contains("at least 1/h"), "{e}");
        assert!(o.records().is_empty() && o.now().rate.is_none());
        o.apply(Action::Rate(MAX_RATE), "t").unwrap();
        o.apply(Action::Rate(1.0 / 3600.0), "t").unwrap();
        // A shard's share is what its process schedules: four shards take four times more.
        let mut w = open();
        w.shard = Some(ShardOf { index: 3, count: 4 });
        let s = Control::new(&w, Arc::new(AtomicBool::new(false)));
        s.apply(Action::Rate(4e6), "t").unwrap();
        assert_eq!(s.now().rate, Some(1e6));
        let e = s.apply(Action::Rate(4.1e6), "t").unwrap_err();
        assert!(e.0.contains("share here would be 1025000/s"), "{e}");
        assert!(s.apply(Action::Rate(2.0 / 3600.0), "t").is_err());
    }

    #[test]
    fn pause_resume_and_stop_are_kept_in_order_and_stop_sets_the_flag() {
        let stop = Arc::new(AtomicBool::new(false));
        let c = Control::new(&closed(2), stop.clone());
        c.apply(Action::Pause, "a").unwrap();
        assert!(!c.now().runs(0));
        assert_eq!(c.apply(Action::Pause, "a").unwrap(), "already paused");
        c.apply(Action::Resume, "b").unwrap();
        assert_eq!(c.take_new().len(), 2);
        c.apply(Action::Stop, "c").unwrap();
        assert!(stop.load(Ordering::Relaxed) && c.stopped());
        let new = c.take_new();
        assert_eq!(
            (new.len(), new[0].action, new[0].by.as_str()),
            (1, "stop", "c")
        );
        assert!(c.apply(Action::Resume, "d").is_err(), "the run is ending");
    }

    #[test]
    fn a_run_takes_a_bounded_number_of_actions() {
        let c = Control::new(&closed(2), Arc::new(AtomicBool::new(false)));
        for i in 0..MAX_ACTIONS {
            let a = if i % 2 == 0 {
                Action::Pause
            } else {
                Action::Resume
            };
            c.apply(a, "loop").unwrap();
        }
        let e = c.apply(Action::Pause, "loop").unwrap_err();
        assert!(e.0.contains("takes no more"), "{e}");
        assert_eq!(c.records().len(), MAX_ACTIONS);
    }
}
