//! Latency and outcomes per class label (hit/miss, read/write): a few HDR histograms next
//! to the engine's, filled from the engine's unit hook with the unit's response time.
//!
//! The driver knows a unit's class, the hook knows its final response time (counted from
//! the schedule in the open model); the driver tags the sequence number with its class
//! as the last thing it does, and the hook runs right after, before the task could be
//! preempted, so a ring of 64 Ki tags cannot be overwritten in between.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Mutex;

use hdrhistogram::Histogram;
use serde_json::{json, Value};

use crate::engine::{Outcome, UnitReport};
use crate::metrics::{new_histogram, Phase};

const RING: usize = 1 << 16;
const NONE: u8 = u8::MAX;

#[derive(Debug)]
struct Class {
    name: String,
    latency: Mutex<Histogram<u64>>,
    /// The same values since the last [`Classes::take_interval`].
    interval: Mutex<Histogram<u64>>,
    /// Accepted, rejected, failed.
    outcomes: [AtomicU64; 3],
}

/// Per-class accounts of a run.
#[derive(Debug)]
pub struct Classes {
    classes: Vec<Class>,
    ring: Vec<AtomicU8>,
}

impl Classes {
    pub fn new(names: Vec<String>) -> Classes {
        let ring = if names.is_empty() { 0 } else { RING };
        Classes {
            classes: names
                .into_iter()
                .map(|name| Class {
                    name,
                    latency: Mutex::new(new_histogram()),
                    interval: Mutex::new(new_histogram()),
                    outcomes: Default::default(),
                })
                .collect(),
            ring: (0..ring).map(|_| AtomicU8::new(NONE)).collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// Unit `seq` was of `class`.
    pub fn tag(&self, seq: u64, class: Option<u8>) {
        if let Some(slot) = self.ring.get(seq as usize % RING) {
            slot.store(class.unwrap_or(NONE), Relaxed);
        }
    }

    /// The engine's hook: counts unit `seq` in its class.
    pub fn record(&self, seq: u64, outcome: Outcome, report: &UnitReport) {
        let Some(slot) = self.ring.get(seq as usize % RING) else {
            return;
        };
        let Some(c) = self.classes.get(slot.load(Relaxed) as usize) else {
            return;
        };
        let i = match outcome {
            Outcome::Accepted => 0,
            Outcome::Rejected => 1,
            Outcome::Failed => 2,
        };
        c.outcomes[i].fetch_add(1, Relaxed);
        let response = report.timings.iter().rev().find(|t| t.0 == Phase::RESPONSE);
        if let Some(&(_, us)) = response {
            for h in [&c.latency, &c.interval] {
                if let Ok(mut h) = h.lock() {
                    let _ = h.record(us.max(1));
                }
            }
        }
    }

    pub fn names(&self) -> Vec<String> {
        self.classes.iter().map(|c| c.name.clone()).collect()
    }

    /// Each class's response times since the last call, in the order of [`Classes::names`].
    /// A unit that ends between the engine's interval cut and this call is counted in
    /// this interval rather than the next: a few milliseconds' worth, the totals exact.
    pub fn take_interval(&self) -> Vec<Histogram<u64>> {
        self.classes
            .iter()
            .map(|c| match c.interval.lock() {
                Ok(mut h) => std::mem::replace(&mut *h, new_histogram()),
                Err(_) => new_histogram(),
            })
            .collect()
    }

    /// `{name: {accepted, rejected, failed, response_us: {count, mean, p50, p90, p99, max}}}`;
    /// a class without a timed response has null for what could not be measured.
    pub fn to_json(&self) -> Value {
        let mut out = serde_json::Map::new();
        for c in &self.classes {
            let Ok(h) = c.latency.lock() else { continue };
            out.insert(
                c.name.clone(),
                json!({
                    "accepted": c.outcomes[0].load(Relaxed),
                    "rejected": c.outcomes[1].load(Relaxed),
                    "failed": c.outcomes[2].load(Relaxed),
                    "response_us": latency_json(&h),
                }),
            );
        }
        Value::Object(out)
    }

    /// The text summary's lines, one per class.
    pub fn lines(&self) -> Vec<String> {
        let ms = |us: u64| us as f64 / 1000.0;
        self.classes
            .iter()
            .filter_map(|c| {
                let h = c.latency.lock().ok()?;
                let latency = if h.is_empty() {
                    "latency not measurable (no response timed)".to_string()
                } else {
                    format!(
                        "p50 {:>8.2} ms  p90 {:>8.2} ms  p99 {:>8.2} ms  max {:>8.2} ms",
                        ms(h.value_at_quantile(0.5)),
                        ms(h.value_at_quantile(0.9)),
                        ms(h.value_at_quantile(0.99)),
                        ms(h.max()),
                    )
                };
                Some(format!(
                    "  {:<12} ok {:<8} rejected {:<6} failed {:<6} {latency}",
                    c.name,
                    c.outcomes[0].load(Relaxed),
                    c.outcomes[1].load(Relaxed),
                    c.outcomes[2].load(Relaxed),
                ))
            })
            .collect()
    }
}

/// A class's `response_us`: `{count, mean, p50, p90, p99, max}`, null for each number an
/// empty histogram cannot give.
pub fn latency_json(h: &Histogram<u64>) -> Value {
    if h.is_empty() {
        return json!({"count": 0, "mean": null, "p50": null, "p90": null, "p99": null, "max": null});
    }
    json!({
        "count": h.len(),
        "mean": (h.mean() * 10.0).round() / 10.0,
        "p50": h.value_at_quantile(0.5), "p90": h.value_at_quantile(0.9),
        "p99": h.value_at_quantile(0.99), "max": h.max(),
    })
}
