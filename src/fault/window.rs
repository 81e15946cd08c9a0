//! What the load did around each fault: before it (up to 30 s), during it, and after it
//! (up to 30 s), from the run's one-second intervals; and how long after its end the
//! first unit was accepted and throughput was back within 10 % of before.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use super::{Action, Event, Spec};
use crate::engine::Snapshot;
use crate::metrics::{new_histogram, Phase};

/// How much of the run before a fault is its baseline, and after its end is shown.
const BEFORE_S: f64 = 30.0;
const AFTER_S: f64 = 30.0;
/// Occurrences followed in detail (a fault `every` second of a day would be 86 400).
const MAX_OCCURRENCES: usize = 100;
/// Throughput back within this share of before's counts as recovered.
const RECOVERED: f64 = 0.9;

/// The end of the latest fault (of any `--fault`) that ended by `start`, and the start of
/// the first that starts at or after `end`: a fault's before and after windows stop there,
/// so no window holds another fault.
fn neighbours(specs: &[Spec], start: f64, end: f64) -> (f64, f64) {
    let (mut prev, mut next) = (0.0f64, f64::INFINITY);
    for spec in specs {
        for n in 0.. {
            let Some((s, e)) = spec.occurrence(n) else {
                break;
            };
            let (s, e) = (s.as_secs_f64(), e.as_secs_f64());
            if s > end + AFTER_S {
                break;
            }
            if e <= start && (s, e) != (start, end) {
                prev = prev.max(e);
            }
            if s >= end && (s, e) != (start, end) {
                next = next.min(s);
            }
        }
    }
    (prev, next)
}

/// What the load did in one window.
struct Acc {
    seconds: f64,
    accepted: u64,
    rejected: u64,
    failed: u64,
    errors: BTreeMap<String, u64>,
    response: Histogram<u64>,
}

impl Acc {
    fn new() -> Acc {
        Acc {
            seconds: 0.0,
            accepted: 0,
            rejected: 0,
            failed: 0,
            errors: BTreeMap::new(),
            response: new_histogram(),
        }
    }

    fn add(&mut self, snap: &Snapshot<'_>) {
        let iv = snap.interval;
        self.seconds += snap.interval_s;
        self.accepted += iv.counters.accepted;
        self.rejected += iv.counters.rejected;
        self.failed += iv.counters.failed;
        for (k, e) in &iv.errors {
            let class =
                crate::report::data::class_label(k.phase.name(), k.kind.name(), k.code, None);
            *self.errors.entry(class).or_default() += e.count;
        }
        if let Some(h) = iv.hist(Phase::RESPONSE) {
            let _ = self.response.add(h);
        }
    }

    fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.accepted as f64 / self.seconds
        } else {
            0.0
        }
    }

    fn json(&self) -> Value {
        if self.seconds == 0.0 {
            return Value::Null;
        }
        let r = &self.response;
        let pct = |q: f64| (!r.is_empty()).then(|| r.value_at_quantile(q));
        json!({
            "seconds": (self.seconds * 10.0).round() / 10.0,
            "accepted": self.accepted,
            "accepted_per_s": (self.rate() * 10.0).round() / 10.0,
            "rejected": self.rejected,
            "failed": self.failed,
            "errors": self.errors,
            "response_p50_us": pct(0.5),
            "response_p99_us": pct(0.99),
        })
    }
}

/// One occurrence of one fault.
struct Occurrence {
    fault: usize,
    n: u32,
    start_s: f64,
    end_s: f64,
    before_from_s: f64,
    after_to_s: f64,
    before: Acc,
    during: Acc,
    after: Acc,
    first_accept_s: Option<f64>,
    recovered_s: Option<f64>,
}

pub struct Windows {
    /// Every fault's occurrence times (start, end) in seconds, and the next to add.
    plans: Vec<(Vec<(f64, f64)>, u32)>,
    occs: Vec<Occurrence>,
    /// The end of the last interval seen.
    t_s: f64,
}

impl Windows {
    /// The windows of every occurrence known up front (those of an `every` are added as
    /// the run goes, in [`Windows::interval_of`]).
    pub fn new(specs: &[Spec]) -> Windows {
        let mut w = Windows {
            plans: specs.iter().map(|_| (Vec::new(), 0)).collect(),
            occs: Vec::new(),
            t_s: 0.0,
        };
        w.add_until(specs, BEFORE_S);
        w
    }

    /// Adds the occurrences that start before `t` (their baseline begins before it).
    fn add_until(&mut self, specs: &[Spec], t: f64) {
        for (i, spec) in specs.iter().enumerate() {
            while self.occs.len() < MAX_OCCURRENCES {
                let n = self.plans[i].1;
                let Some((start, end)) = spec.occurrence(n) else {
                    break;
                };
                let (start, end) = (start.as_secs_f64(), end.as_secs_f64());
                if start > t + BEFORE_S {
                    break;
                }
                let (prev_end, next_start) = neighbours(specs, start, end);
                self.plans[i].0.push((start, end));
                self.plans[i].1 += 1;
                self.occs.push(Occurrence {
                    fault: i,
                    n,
                    start_s: start,
                    end_s: end,
                    before_from_s: (start - BEFORE_S).max(prev_end).max(0.0),
                    after_to_s: (end + AFTER_S).min(next_start),
                    before: Acc::new(),
                    during: Acc::new(),
                    after: Acc::new(),
                    first_accept_s: None,
                    recovered_s: None,
                });
            }
        }
    }

    /// Files one interval into the windows it falls in. `applied(fault, occurrence)` is
    /// when this process applied it, start and end (None: not yet, or applied elsewhere).
    pub fn interval_of(
        &mut self,
        specs: &[Spec],
        snap: &Snapshot<'_>,
        applied: impl Fn(usize, u32) -> Option<(f64, Option<f64>)>,
    ) {
        self.add_until(specs, snap.t_s);
        self.t_s = snap.t_s;
        let mid = snap.t_s - snap.interval_s / 2.0;
        let rate = if snap.interval_s > 0.0 {
            snap.interval.counters.accepted as f64 / snap.interval_s
        } else {
            0.0
        };
        for o in &mut self.occs {
            // The baseline is what ended before the fault was applied: an interval the
            // fault falls in is the fault's (during, or after a momentary one). A fault
            // this process applies and has not yet is still ahead; one another shard
            // applies goes by its schedule.
            let here = applied(o.fault, o.n);
            let before = match (here, matches!(specs[o.fault].action, Action::Nothing)) {
                (Some((at, _)), _) => snap.t_s <= at,
                (None, false) => true,
                (None, true) => snap.t_s <= o.start_s,
            };
            let moment = o.end_s <= o.start_s;
            let after = !before && (mid >= o.end_s || moment);
            if before {
                if mid >= o.before_from_s {
                    o.before.add(snap);
                }
            } else if !after {
                o.during.add(snap);
            } else if mid < o.after_to_s {
                o.after.add(snap);
            }
            // Recovery is read from intervals wholly after the fault's end: a lasting
            // fault's end is applied just after an interval is counted, so the next one
            // begins with it; a moment's interval may hold units accepted just before it.
            let end = here.and_then(|(_, end)| end).unwrap_or(o.end_s);
            let began = snap.t_s - snap.interval_s;
            let clear = if moment {
                began >= end
            } else {
                began >= end - 0.05
            };
            if after && clear {
                let since = snap.t_s - end;
                if o.first_accept_s.is_none() && snap.interval.counters.accepted > 0 {
                    o.first_accept_s = Some(since);
                }
                let base = o.before.rate();
                if o.recovered_s.is_none() && base > 0.0 && rate >= RECOVERED * base {
                    o.recovered_s = Some(since);
                }
            }
        }
    }

    /// The per-occurrence report for summary.json's `extra.faults`.
    pub fn report(&self, specs: &[Spec], events: &[Event]) -> Value {
        let round = |v: f64| (v * 10.0).round() / 10.0;
        let occs: Vec<Value> = self
            .occs
            .iter()
            .filter(|o| o.start_s <= self.t_s)
            .map(|o| {
                let evs: Vec<&Event> = events
                    .iter()
                    .filter(|e| e.fault == o.fault && e.occurrence == o.n)
                    .collect();
                json!({
                    "fault": o.fault + 1,
                    "spec": specs[o.fault].text,
                    "occurrence": o.n,
                    "start_s": o.start_s,
                    "end_s": o.end_s,
                    "applied": match evs.is_empty() {
                        false => json!(evs.iter().all(|e| e.ok)),
                        true => json!("not here: by the run's first shard, or after the run's end"),
                    },
                    "events": evs,
                    "before": o.before.json(),
                    "during": o.during.json(),
                    "after": o.after.json(),
                    "first_accept_after_s": o.first_accept_s.map(round),
                    "recovered_after_s": o.recovered_s.map(round),
                })
            })
            .collect();
        json!({
            "occurrences": occs,
            "recovery_basis": "one-second intervals: a time after a fault's end is the end of the first interval in which a unit was accepted (or throughput was within 10 % of the 30 s before the fault), so up to a second late",
        })
    }
}
