//! What the dashboard shows, as owned data: the last snapshot's figures, a few minutes of
//! per-second history for the sparklines, and each phase's latency histogram over the whole
//! run. Kept apart from the terminal so that drawing is a pure function of it (and of
//! [`Ui`]), testable on ratatui's `TestBackend`, and so that a paused screen can keep a
//! frozen copy while the live one goes on.

use std::collections::{BTreeMap, VecDeque};

use hdrhistogram::Histogram;

use crate::engine::Snapshot;
use crate::metrics::{new_histogram, Counters, Phase};
use crate::results::{ErrorRow, PhaseStats, Summary, UnitWords};

/// Seconds of history the sparklines keep: enough for a 200-column terminal and more.
pub const HISTORY: usize = 300;

/// Error classes kept for the screen (the results directory has them all).
const ERROR_ROWS: usize = 50;

/// How a protocol's work is named, the words its driver declared (the text summary and
/// the report use the same).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Units {
    /// What one unit of work is: "messages" (SMTP, LMTP) or "visits" (POP3, IMAP).
    pub unit: std::borrow::Cow<'static, str>,
    /// Its rate: "msg/s" or "visits/s".
    pub rate: std::borrow::Cow<'static, str>,
    /// What happened to the bytes: "sent" or "read".
    pub bytes: std::borrow::Cow<'static, str>,
    /// The phases that stand for a unit's latency, best first (the protocol's service
    /// phases, then the response time where a unit has one): the histogram shown first.
    pub main: Vec<String>,
}

impl Units {
    /// The words of the run `s` is a summary of.
    pub fn of(s: &Summary) -> Units {
        Units::from_words(s.words())
    }

    fn from_words(w: UnitWords) -> Units {
        Units {
            main: (w.service.iter().map(|p| p.name().to_string()))
                .chain(w.response.then(|| "response".to_string()))
                .collect(),
            unit: w.unit,
            rate: w.rate,
            bytes: w.bytes,
        }
    }
}

/// A bounded per-second series for a sparkline.
#[derive(Debug, Clone, Default)]
pub struct History(VecDeque<u64>);

impl History {
    pub fn push(&mut self, v: u64) {
        if self.0.len() == HISTORY {
            self.0.pop_front();
        }
        self.0.push_back(v);
    }

    /// The last `n` values, oldest first.
    pub fn last(&self, n: usize) -> Vec<u64> {
        self.0
            .iter()
            .skip(self.0.len().saturating_sub(n))
            .copied()
            .collect()
    }
}

/// Everything one frame of the dashboard draws.
#[derive(Debug, Clone)]
pub struct Model {
    pub title: String,
    /// At least one interval was seen (before it, only the title and "starting…").
    pub started: bool,
    pub units: Units,
    pub t_s: f64,
    pub planned_s: Option<f64>,
    pub planned_count: Option<u64>,
    pub totals: Counters,
    /// Accepted units per second in the last interval, and over the whole run.
    pub rate_now: f64,
    pub rate_avg: f64,
    pub kbytes_per_s: f64,
    /// The protocol's own counters per second in the last interval (those that moved),
    /// said in words.
    pub own_now: Vec<(String, f64)>,
    /// Accepted units per second, times 100 (a sparkline scales to its maximum anyway).
    pub throughput: History,
    pub active: i64,
    pub active_hist: History,
    /// The generator's CPU over the last interval, % of all cores.
    pub cpu_pct: f64,
    pub cpu_hist: History,
    /// Percentiles per phase over the whole run, as the summary has them.
    pub phases: Vec<PhaseStats>,
    /// Each phase's latencies over the whole run, for the histogram.
    pub hists: BTreeMap<Phase, Histogram<u64>>,
    /// The most frequent error classes, most frequent first, and how many there are.
    pub errors: Vec<ErrorRow>,
    pub error_classes: usize,
    /// The run's `--fault`s; per interval, whether one was in force (1) or not (0),
    /// beside `throughput`; the ones in force in the last interval.
    pub faults: Vec<crate::fault::Spec>,
    pub fault_hist: History,
    pub faults_now: Vec<String>,
}

impl Model {
    pub fn new(title: String) -> Model {
        Model {
            title,
            started: false,
            // Until the first interval says the run's words.
            units: Units::from_words(UnitWords::new("units", "units/s", "sent", &[], true)),
            t_s: 0.0,
            planned_s: None,
            planned_count: None,
            totals: Counters::default(),
            rate_now: 0.0,
            rate_avg: 0.0,
            kbytes_per_s: 0.0,
            own_now: Vec::new(),
            throughput: History::default(),
            active: 0,
            active_hist: History::default(),
            cpu_pct: 0.0,
            cpu_hist: History::default(),
            phases: Vec::new(),
            hists: BTreeMap::new(),
            errors: Vec::new(),
            error_classes: 0,
            faults: Vec::new(),
            fault_hist: History::default(),
            faults_now: Vec::new(),
        }
    }

    /// Takes in one interval; `cpu_pct` is the generator's CPU during it.
    pub fn update(&mut self, snap: &Snapshot<'_>, cpu_pct: f64) {
        let s = snap.summary;
        self.started = true;
        self.units = Units::of(s);
        self.t_s = snap.t_s;
        self.planned_s = snap.planned_s;
        self.planned_count = snap.planned_count;
        self.totals = s.totals;
        self.rate_now = snap.interval.counters.accepted as f64 / snap.interval_s.max(1e-3);
        self.rate_avg = s.messages_per_s;
        self.kbytes_per_s = s.kbytes_per_s;
        let c = &snap.interval.counters;
        let len = snap.interval_s.max(1e-3);
        self.own_now = c
            .own
            .iter()
            .filter(|&(k, n)| n > 0 && !k.name().ends_with("_bytes"))
            .map(|(k, n)| (k.name().replace('_', " "), n as f64 / len))
            .collect();
        self.throughput.push((self.rate_now * 100.0).round() as u64);
        let from = snap.t_s - snap.interval_s;
        self.faults_now = self
            .faults
            .iter()
            .filter(|f| f.during(from, snap.t_s))
            .map(|f| f.text.clone())
            .collect();
        self.fault_hist.push(u64::from(!self.faults_now.is_empty()));
        self.active = snap.active;
        self.active_hist.push(snap.active.max(0) as u64);
        self.cpu_pct = cpu_pct;
        self.cpu_hist.push((cpu_pct * 10.0).round().max(0.0) as u64);
        self.phases.clone_from(&s.phases);
        for (p, h) in snap.interval.hists() {
            // Every histogram has the recorder's bounds, so adding cannot fail; were it
            // to, the screen would only miss that interval.
            let _ = self.hists.entry(p).or_insert_with(new_histogram).add(h);
        }
        self.errors = s.errors.iter().take(ERROR_ROWS).cloned().collect();
        self.error_classes = s.errors.len();
    }

    /// Refused and failed units against those attempted, in percent (as the report's
    /// headline has it); `None` before anything was attempted.
    pub fn error_rate(&self) -> Option<f64> {
        let t = &self.totals;
        (t.attempted > 0).then(|| (t.rejected + t.failed) as f64 / t.attempted as f64 * 100.0)
    }
}

/// What the user chose on the screen.
#[derive(Debug, Clone, Default)]
pub struct Ui {
    /// Drawing is paused: the frozen frame that stays on the screen.
    pub paused: Option<Box<Model>>,
    /// The phase whose histogram is shown (by name); `None` for the main phase.
    pub selected: Option<String>,
    pub help: bool,
    /// q was pressed (or the run is ending): work in flight is finishing.
    pub stopping: bool,
}

impl Ui {
    /// The index in `m.phases` of the phase whose histogram is shown.
    pub fn selected_index(&self, m: &Model) -> Option<usize> {
        let by_name = |n: &str| m.phases.iter().position(|p| p.phase == n);
        self.selected
            .as_deref()
            .and_then(by_name)
            .or_else(|| m.units.main.iter().find_map(|n| by_name(n)))
            .or((!m.phases.is_empty()).then_some(0))
    }

    /// The phase `step` phases on from the selected one (negative: back), wrapping around.
    pub fn step(&self, m: &Model, step: isize) -> Option<String> {
        let n = m.phases.len() as isize;
        let i = self.selected_index(m)?;
        let next = (i as isize + step).rem_euclid(n) as usize;
        Some(m.phases[next].phase.clone())
    }

    /// Moves the selection `step` phases on in `m` (negative: back).
    pub fn cycle(&mut self, m: &Model, step: isize) {
        if let Some(p) = self.step(m, step) {
            self.selected = Some(p);
        }
    }
}

/// One bar of the latency histogram: the values up to `upper_us` (from the previous bar's
/// bound) and how many there were.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub upper_us: u64,
    pub count: u64,
}

/// At most `n` buckets on a log scale from the histogram's minimum to its maximum, so that
/// a distribution spanning 200µs to 3s shows its shape (linear buckets would put nearly
/// everything in the first one). A value goes to the first bucket whose bound is not below
/// it, so that each bar's "≤ bound" label is exact. Fewer buckets when the values span
/// fewer distinct microseconds.
pub fn log_buckets(h: &Histogram<u64>, n: usize) -> Vec<Bucket> {
    if h.is_empty() || n == 0 {
        return Vec::new();
    }
    let lo = h.min().max(1);
    let hi = h.max().max(lo);
    let n = n.min((hi - lo + 1) as usize).max(1);
    let span = (hi as f64 / lo as f64).ln();
    let mut uppers: Vec<u64> = (1..n)
        .map(|i| (lo as f64 * (span * i as f64 / n as f64).exp()).round() as u64)
        .collect();
    uppers.push(hi);
    uppers.dedup();
    let mut out: Vec<Bucket> = uppers
        .iter()
        .map(|&upper_us| Bucket { upper_us, count: 0 })
        .collect();
    for v in h.iter_recorded() {
        let value = v.value_iterated_to();
        let i = uppers.partition_point(|&u| u < value).min(out.len() - 1);
        out[i].count += v.count_at_value();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_logarithmic_and_count_everything() {
        let mut h = new_histogram();
        for v in [100, 110, 1_100, 1_200, 10_500, 100_000] {
            h.record(v).unwrap();
        }
        let b = log_buckets(&h, 3);
        assert_eq!(b.len(), 3);
        assert_eq!(b.iter().map(|b| b.count).sum::<u64>(), 6);
        // 100µs..100ms in three buckets: a decade each.
        assert_eq!(b[0].count, 2, "{b:?}");
        assert_eq!(b[1].count, 2, "{b:?}");
        assert_eq!(b[2].count, 2, "{b:?}");
        assert!((9_900..=10_100).contains(&b[1].upper_us), "{b:?}");
        assert_eq!(b[2].upper_us, h.max());
        // One value: one bucket.
        let mut one = new_histogram();
        one.record(500).unwrap();
        assert_eq!(
            log_buckets(&one, 10),
            vec![Bucket {
                upper_us: 500,
                count: 1
            }]
        );
        assert!(log_buckets(&new_histogram(), 10).is_empty());
    }

    #[test]
    fn units_follow_the_protocol() {
        let of = |p: &str| Units::from_words(UnitWords::before_declared(p));
        assert_eq!(of("smtp").rate, "msg/s");
        assert_eq!(of("lmtp").bytes, "sent");
        let pop = of("pop3");
        assert_eq!(
            (&*pop.unit, &*pop.rate, &*pop.bytes),
            ("visits", "visits/s", "read")
        );
        assert_eq!(of("imap").main, ["session", "response"]);
        assert_eq!(of("xmpp").main[1], "arrival");
    }

    #[test]
    fn history_keeps_the_newest() {
        let mut h = History::default();
        for v in 0..(HISTORY as u64 + 5) {
            h.push(v);
        }
        assert_eq!(
            h.last(3),
            vec![HISTORY as u64 + 2, HISTORY as u64 + 3, HISTORY as u64 + 4]
        );
        assert_eq!(h.last(10_000).len(), HISTORY);
    }
}
