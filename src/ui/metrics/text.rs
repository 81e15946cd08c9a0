//! A run's figures so far in the Prometheus text exposition format (version 0.0.4): pure
//! functions of the cumulative totals, so that what a scraper reads is pinned by tests.
//!
//! Every series carries the run's labels (`run_id`, `shard`, `protocol`). Latency is one
//! histogram family, `spate_phase_seconds`, with a `phase` label; its buckets are counted
//! exactly from the HDR histogram: a sample is in bucket `le` when its value as HDR keeps
//! it (the highest value of its 0.1 % wide slot, as summary.json's percentiles report it)
//! is at most `le`. `_sum` is the HDR mean times the count (within 0.1 %).

use std::collections::BTreeMap;
use std::fmt::{Display, Write};

use hdrhistogram::Histogram;

use crate::metrics::{Counters, Shard};

/// The upper bounds of the latency buckets, in microseconds: 1-2-5 steps from 100 µs to
/// 100 s (`+Inf` follows).
pub const BOUNDS_US: [u64; 19] = [
    100,
    200,
    500,
    1_000,
    2_000,
    5_000,
    10_000,
    20_000,
    50_000,
    100_000,
    200_000,
    500_000,
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
];

/// The labels of one run, rendered once: `run_id="…",shard="I/N",protocol="…"`.
#[derive(Debug, Clone)]
pub struct Labels(String);

impl Labels {
    /// `shard`: `(index, count)`, `(0, 1)` for a run that is not sharded.
    pub fn new(run_id: &str, shard: (u32, u32), protocol: &str) -> Labels {
        let mut s = String::new();
        push_label(&mut s, "run_id", run_id);
        s.push(',');
        push_label(&mut s, "shard", &format!("{}/{}", shard.0, shard.1));
        s.push(',');
        push_label(&mut s, "protocol", protocol);
        Labels(s)
    }
}

/// What the exposition shows besides the totals.
#[derive(Debug, Clone, Copy)]
pub struct Gauges {
    pub active: i64,
    pub elapsed_s: f64,
    /// The run has ended: these are its final figures.
    pub finished: bool,
}

/// Renders the exposition of `totals` into `out` (cleared first).
pub fn render(out: &mut String, labels: &Labels, totals: &Shard, g: Gauges) {
    out.clear();
    counters(out, labels, &totals.counters);
    gauge(
        out,
        labels,
        "spate_active_sessions",
        "Sessions open at the end of the latest interval.",
        g.active,
    );
    gauge(
        out,
        labels,
        "spate_elapsed_seconds",
        "Seconds since the run started, at the end of the latest interval.",
        g.elapsed_s,
    );
    gauge(
        out,
        labels,
        "spate_run_finished",
        "1 once the run has ended: the figures are its final ones (summary.json's).",
        u8::from(g.finished),
    );
    errors(out, labels, totals);
    phases(out, labels, totals);
}

/// One counter per field of [`Counters`], named after it (`spate_accepted_total`).
fn counters(out: &mut String, labels: &Labels, c: &Counters) {
    let fields = match serde_json::to_value(c) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => return,
    };
    // Sorted here, whatever order the JSON map keeps.
    let fields: BTreeMap<String, u64> = fields
        .into_iter()
        .filter_map(|(k, v)| Some((k, v.as_u64()?)))
        .collect();
    for (field, value) in fields {
        // Prometheus names times in seconds: a microsecond total is exposed as seconds.
        if let Some(base) = field.strip_suffix("_us") {
            let name = format!("spate_{base}_seconds_total");
            let help = format!(
                "The run's {base} so far, in seconds (summary.json: totals.{field}, in µs)."
            );
            family(out, &name, "counter", &help);
            sample(out, &name, labels, &[], value as f64 / 1e6);
            continue;
        }
        let name = format!("spate_{field}_total");
        let help = format!("The run's {field} so far (summary.json: totals.{field}).");
        family(out, &name, "counter", &help);
        sample(out, &name, labels, &[], value);
    }
}

fn gauge(out: &mut String, labels: &Labels, name: &str, help: &str, value: impl Display) {
    family(out, name, "gauge", help);
    sample(out, name, labels, &[], value);
}

/// Errors by phase and kind (the reply code and text stay in summary.json: they would make
/// a series per server message).
fn errors(out: &mut String, labels: &Labels, totals: &Shard) {
    let name = "spate_errors_total";
    family(
        out,
        name,
        "counter",
        "Errors so far, by phase and kind (summary.json: errors).",
    );
    let mut by = BTreeMap::new();
    for (k, v) in &totals.errors {
        *by.entry((k.phase, k.kind)).or_insert(0u64) += v.count;
    }
    for ((phase, kind), n) in by {
        sample(
            out,
            name,
            labels,
            &[("phase", phase.name()), ("kind", kind.name())],
            n,
        );
    }
}

/// One histogram per phase that has samples, all in one family.
fn phases(out: &mut String, labels: &Labels, totals: &Shard) {
    let name = "spate_phase_seconds";
    family(out, name, "histogram", "Latency of each protocol phase in seconds (buckets counted from the HDR histogram; summary.json: phases).");
    let (bucket, sum, count) = (
        format!("{name}_bucket"),
        format!("{name}_sum"),
        format!("{name}_count"),
    );
    for (phase, h) in totals.hists() {
        let p = ("phase", phase.name());
        for (le, n) in BOUNDS_US.iter().zip(buckets(h)) {
            let le = (*le as f64 / 1e6).to_string();
            sample(out, &bucket, labels, &[p, ("le", &le)], n);
        }
        sample(out, &bucket, labels, &[p, ("le", "+Inf")], h.len());
        sample(out, &sum, labels, &[p], h.mean() * h.len() as f64 / 1e6);
        sample(out, &count, labels, &[p], h.len());
    }
}

/// The cumulative count at each of [`BOUNDS_US`].
pub fn buckets(h: &Histogram<u64>) -> [u64; BOUNDS_US.len()] {
    let mut n = [0u64; BOUNDS_US.len()];
    for v in h.iter_recorded() {
        let at = BOUNDS_US.partition_point(|&b| b < v.value_iterated_to());
        if let Some(c) = n.get_mut(at) {
            *c += v.count_at_value();
        }
    }
    for i in 1..n.len() {
        n[i] += n[i - 1];
    }
    n
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(
        out,
        "# HELP {name} {}",
        help.replace('\\', "\\\\").replace('\n', "\\n")
    );
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &Labels, extra: &[(&str, &str)], v: impl Display) {
    out.push_str(name);
    out.push('{');
    out.push_str(&labels.0);
    for (k, val) in extra {
        out.push(',');
        push_label(out, k, val);
    }
    let _ = writeln!(out, "}} {v}");
}

/// `name="value"`, the value escaped as the format asks (backslash, quote, newline).
fn push_label(out: &mut String, name: &str, value: &str) {
    out.push_str(name);
    out.push_str("=\"");
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{ErrorKey, ErrorKind, Phase};

    crate::metrics::phases! {
        BODY => "body", "a test phase";
        RCPT => "rcpt", "a test phase";
    }

    fn gauges() -> Gauges {
        Gauges {
            active: 3,
            elapsed_s: 2.5,
            finished: false,
        }
    }

    fn lines_of<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(prefix)).collect()
    }

    #[test]
    fn labels_are_escaped() {
        let l = Labels::new("a\"b\\c\nd", (2, 4), "smtp");
        assert_eq!(l.0, r#"run_id="a\"b\\c\nd",shard="2/4",protocol="smtp""#);
    }

    #[test]
    fn known_answer() {
        let mut s = Shard::default();
        s.counters.attempted = 5;
        s.counters.accepted = 4;
        s.counters.failed = 1;
        for us in [150, 150, 900, 3_000] {
            s.record(Phase::CONNECT, us);
        }
        s.error(
            ErrorKey {
                phase: RCPT,
                kind: ErrorKind::PERMANENT,
                code: 550,
                detail: None,
                text: "no such user".into(),
            },
            || "550 no such user".into(),
        );
        let labels = Labels::new("r1", (0, 1), "smtp");
        let mut out = String::from("stale");
        render(&mut out, &labels, &s, gauges());
        let l = r#"{run_id="r1",shard="0/1",protocol="smtp""#;
        let expect_in = [
            "# HELP spate_accepted_total The run's accepted so far (summary.json: totals.accepted).",
            "# TYPE spate_accepted_total counter",
            &format!("spate_accepted_total{l}}} 4"),
            &format!("spate_attempted_total{l}}} 5"),
            &format!("spate_failed_total{l}}} 1"),
            &format!("spate_rejected_total{l}}} 0"),
            "# TYPE spate_active_sessions gauge",
            &format!("spate_active_sessions{l}}} 3"),
            &format!("spate_elapsed_seconds{l}}} 2.5"),
            &format!("spate_run_finished{l}}} 0"),
            &format!(r#"spate_errors_total{l},phase="rcpt",kind="5xx"}} 1"#),
            "# TYPE spate_phase_seconds histogram",
            &format!(r#"spate_phase_seconds_bucket{l},phase="connect",le="0.0001"}} 0"#),
            &format!(r#"spate_phase_seconds_bucket{l},phase="connect",le="0.0002"}} 2"#),
            &format!(r#"spate_phase_seconds_bucket{l},phase="connect",le="0.0005"}} 2"#),
            &format!(r#"spate_phase_seconds_bucket{l},phase="connect",le="0.001"}} 3"#),
            &format!(r#"spate_phase_seconds_bucket{l},phase="connect",le="0.002"}} 3"#),
            &format!(r#"spate_phase_seconds_bucket{l},phase="connect",le="0.005"}} 4"#),
            &format!(r#"spate_phase_seconds_bucket{l},phase="connect",le="100"}} 4"#),
            &format!(r#"spate_phase_seconds_bucket{l},phase="connect",le="+Inf"}} 4"#),
            // 3 000 µs is kept in a 2 µs slot whose middle is 3 001.
            &format!(r#"spate_phase_seconds_sum{l},phase="connect"}} 0.004201"#),
            &format!(r#"spate_phase_seconds_count{l},phase="connect"}} 4"#),
        ];
        let lines: Vec<&str> = out.lines().collect();
        for e in expect_in {
            assert!(lines.contains(&e), "missing {e:?} in\n{out}");
        }
        assert!(!out.contains("stale"));
        // One counter per field of Counters, each with its HELP and TYPE.
        let fields = serde_json::to_value(Counters::default()).unwrap();
        let n = fields.as_object().unwrap().len();
        assert_eq!(lines_of(&out, "# TYPE spate_").len(), n + 5);
        assert_eq!(
            lines_of(&out, "spate_").len(),
            n + 3 + 1 + (BOUNDS_US.len() + 3)
        );
        // Only phases with samples.
        assert!(!out.contains("phase=\"body\""));
        // Every sample line is `name{labels} value`.
        for line in out.lines().filter(|l| !l.starts_with('#')) {
            let (series, value) = line.rsplit_once(' ').unwrap();
            assert!(series.ends_with('}'), "{line}");
            assert!(value.parse::<f64>().is_ok(), "{line}");
        }
    }

    #[test]
    fn buckets_are_cumulative_and_exact() {
        let mut h = crate::metrics::new_histogram();
        // On bounds, just past them, past the last, and where HDR's slots are wider than
        // a microsecond (a slot past 5 000 µs spans 4 µs).
        for us in [
            1,
            100,
            101,
            1_000,
            5_000,
            5_003,
            5_004,
            99_999_999,
            100_000_000,
            3_000_000_000,
        ] {
            h.record(us).unwrap();
        }
        let b = buckets(&h);
        assert!(b.windows(2).all(|w| w[0] <= w[1]), "{b:?}");
        assert_eq!(b[0], 2); // 1, 100
        assert_eq!(b[3], 4); // + 101, 1 000
                             // 5 000 and 5 003 share a slot whose kept value is 5 003: past 5 ms.
        assert_eq!(b[5], 4);
        assert_eq!(b[6], 7);
        // At 100 s a slot spans 65 536 µs: 99 999 999 and 100 000 000 are kept as
        // 100 007 935, past the last bound, in +Inf only.
        assert_eq!(b[BOUNDS_US.len() - 1], 7);
        assert_eq!(h.len(), 10); // +Inf
                                 // Against HDR's own count of each slot's kept value.
        for (i, &le) in BOUNDS_US.iter().enumerate() {
            let n: u64 = h
                .iter_recorded()
                .filter(|v| v.value_iterated_to() <= le)
                .map(|v| v.count_at_value())
                .sum();
            assert_eq!(b[i], n, "le {le}");
        }
    }

    #[test]
    fn the_histogram_adds_up() {
        let mut s = Shard::default();
        for us in (1..=2_000_000).step_by(997) {
            s.record(BODY, us);
        }
        let mut out = String::new();
        render(&mut out, &Labels::new("r", (1, 2), "lmtp"), &s, gauges());
        let values: Vec<f64> = lines_of(&out, "spate_phase_seconds_bucket")
            .iter()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
            .collect();
        assert_eq!(values.len(), BOUNDS_US.len() + 1);
        assert!(values.windows(2).all(|w| w[0] <= w[1]));
        let count = s.hist(BODY).unwrap().len() as f64;
        assert_eq!(*values.last().unwrap(), count);
        assert!(out.contains(&format!("phase=\"body\"}} {count}\n")));
        assert!(out.contains(r#"shard="1/2",protocol="lmtp",phase="body",le="+Inf"}"#));
    }
}
