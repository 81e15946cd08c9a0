//! `spate compare A B [C …]`: runs side by side. Headline numbers with differences in
//! percent against the first run, and a verdict that respects noise: when the per-interval
//! spreads of two runs overlap (mean ± one standard deviation), the difference is reported
//! as within noise instead of naming a winner.

use std::fmt::Write;

use serde::Serialize;

use super::chart::{escape as esc, Chart, Series, Style, XKind};
use super::data::Run;
use super::html::{charts, command_line, page};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Higher,
    Lower,
    Neither,
}

/// Mean and standard deviation of a run's per-interval values of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub mean: f64,
    pub sd: f64,
    pub n: usize,
}

impl Spread {
    pub fn of(v: &[f64]) -> Option<Spread> {
        let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
        if v.len() < 3 {
            return None;
        }
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        Some(Spread {
            mean,
            sd: var.sqrt(),
            n: v.len(),
        })
    }
    pub fn overlaps(&self, o: &Spread) -> bool {
        self.mean - self.sd <= o.mean + o.sd && o.mean - o.sd <= self.mean + self.sd
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Metric {
    pub name: String,
    pub unit: String,
    pub better: Better,
    pub values: Vec<f64>,
    /// Per-interval spread of each run, for metrics measured every interval.
    pub spreads: Vec<Option<Spread>>,
    /// Against the first run, in percent (None for the first run or a zero base).
    pub diff_pct: Vec<Option<f64>>,
    /// Against the first run: "base", "same", "within noise", "better", "worse", "higher",
    /// "lower", or "unknown noise" when there are too few intervals to judge.
    pub verdict: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    pub label: String,
    pub dir: String,
    pub run_id: String,
    pub target: String,
    pub started_at: String,
    pub command: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub runs: Vec<RunInfo>,
    pub metrics: Vec<Metric>,
    /// Said when the runs count different units (messages vs mailbox visits).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

fn letter(i: usize) -> String {
    if i < 26 {
        ((b'A' + i as u8) as char).to_string()
    } else {
        format!("R{}", i + 1)
    }
}

fn metric(
    name: &str,
    unit: &str,
    better: Better,
    values: Vec<f64>,
    spreads: Vec<Option<Spread>>,
) -> Metric {
    let base = values[0];
    let mut diff_pct = vec![None];
    let mut verdict = vec!["base".to_string()];
    for (i, &v) in values.iter().enumerate().skip(1) {
        let d = if base != 0.0 && base.is_finite() && v.is_finite() {
            Some((v - base) / base.abs() * 100.0)
        } else {
            None
        };
        diff_pct.push(d);
        let noise = match (&spreads[0], &spreads[i]) {
            (Some(a), Some(b)) => Some(a.overlaps(b)),
            _ if spreads.iter().any(|s| s.is_some()) => None,
            // Totals without a per-interval spread: plain comparison.
            _ => Some(false),
        };
        let word = if v == base {
            "same"
        } else {
            match noise {
                Some(true) => "within noise",
                None => "unknown noise",
                Some(false) => match (better, v > base) {
                    (Better::Higher, true) | (Better::Lower, false) => "better",
                    (Better::Higher, false) | (Better::Lower, true) => "worse",
                    (Better::Neither, true) => "higher",
                    (Better::Neither, false) => "lower",
                },
            }
        };
        verdict.push(word.to_string());
    }
    Metric {
        name: name.to_string(),
        unit: unit.to_string(),
        better,
        values,
        spreads,
        diff_pct,
        verdict,
    }
}

pub fn compare(runs: &[Run]) -> Comparison {
    let phase_name = main_phase_name(&runs[0]);
    let mut metrics = rate_metrics(runs);
    metrics.extend(latency_metrics(runs, &phase_name));
    metrics.extend(total_metrics(runs));
    Comparison {
        runs: run_infos(runs),
        metrics,
        note: {
            let notes: Vec<String> = [units_note(runs), bound_note(runs), verify_note(runs)]
                .into_iter()
                .flatten()
                .collect();
            (!notes.is_empty()).then(|| notes.join("; "))
        },
    }
}

/// A warning when a run's generator was the limit (`bound_by`): its figures are spate's,
/// and a difference with it says nothing about the server.
fn bound_note(runs: &[Run]) -> Option<String> {
    let starved: Vec<String> = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| {
            r.summary
                .extra
                .get("bound_by")
                .and_then(|b| b["bound_by"].as_str())
                == Some("generator")
        })
        .map(|(i, _)| letter(i).to_string())
        .collect();
    (!starved.is_empty()).then(|| {
        format!(
            "run {} was generator-bound (spate itself was the limit: see bound_by in its summary): a difference with it says nothing about the server",
            starved.join(", ")
        )
    })
}

/// Which runs had no delivery check, when others had: their delivery rows are not
/// measured, not zero.
fn verify_note(runs: &[Run]) -> Option<String> {
    if runs.iter().all(|r| r.verify.is_some()) || runs.iter().all(|r| r.verify.is_none()) {
        return None;
    }
    let unchecked: Vec<String> = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.verify.is_none())
        .map(|(i, _)| letter(i))
        .collect();
    Some(format!(
        "run {} has no verify.json: its deliveries were not checked (shown as -, not 0)",
        unchecked.join(", ")
    ))
}

/// A warning when some runs count messages and others mailbox visits: their rates and
/// latencies measure different work.
fn units_note(runs: &[Run]) -> Option<String> {
    let units: Vec<String> = runs
        .iter()
        .map(|r| r.summary.words().unit.into_owned())
        .collect();
    if units.iter().all(|u| *u == units[0]) {
        return None;
    }
    let each: Vec<String> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| format!("{} {} ({})", letter(i), r.summary.protocol, units[i]))
        .collect();
    Some(format!(
        "these runs count different units — {}: their rates and latencies measure different work",
        each.join(", ")
    ))
}

/// The phase whose latencies are compared: the first run's main phase.
fn main_phase_name(r: &Run) -> String {
    r.main_phase()
        .map(|p| p.phase.clone())
        .unwrap_or_else(|| "transaction".into())
}

fn run_infos(runs: &[Run]) -> Vec<RunInfo> {
    let mut infos = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let name = r
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        infos.push(RunInfo {
            label: format!("{} {}", letter(i), name),
            dir: r.dir.display().to_string(),
            run_id: r.summary.run_id.clone(),
            target: r.summary.target.clone(),
            started_at: r.summary.started_at.clone(),
            command: command_line(&r.summary.command),
        });
    }
    infos
}

fn all(runs: &[Run], f: &dyn Fn(&Run) -> f64) -> Vec<f64> {
    runs.iter().map(f).collect()
}

/// Throughput and data rate, with their steady-state per-interval spreads.
fn rate_metrics(runs: &[Run]) -> Vec<Metric> {
    vec![
        metric(
            "throughput",
            "messages/s",
            Better::Higher,
            all(runs, &|r| r.summary.messages_per_s),
            runs.iter()
                .map(|r| Spread::of(&r.steady_throughput()))
                .collect(),
        ),
        metric(
            "data rate",
            "KiB/s",
            Better::Higher,
            all(runs, &|r| r.summary.kbytes_per_s),
            runs.iter()
                .map(|r| {
                    let v: Vec<f64> = r.steady_rate("bytes").iter().map(|b| b / 1024.0).collect();
                    Spread::of(&v)
                })
                .collect(),
        ),
    ]
}

/// p50, p99 and max of one phase, in milliseconds.
fn latency_metrics(runs: &[Run], phase_name: &str) -> Vec<Metric> {
    let lat = |r: &Run, pick: fn(&crate::results::PhaseStats) -> u64| {
        r.summary
            .phase(phase_name)
            .map_or(f64::NAN, |p| pick(p) as f64 / 1000.0)
    };
    let lat_spread = |r: &Run, pick: fn(&super::data::LatencyPoint) -> u64| {
        r.phase(phase_name).and_then(|p| {
            let v: Vec<f64> = p.points.iter().map(|x| pick(x) as f64 / 1000.0).collect();
            Spread::of(if v.len() >= 5 { &v[1..v.len() - 1] } else { &v })
        })
    };
    vec![
        metric(
            &format!("{phase_name} p50"),
            "ms",
            Better::Lower,
            runs.iter().map(|r| lat(r, |p| p.p50_us)).collect(),
            runs.iter().map(|r| lat_spread(r, |p| p.p50)).collect(),
        ),
        metric(
            &format!("{phase_name} p99"),
            "ms",
            Better::Lower,
            runs.iter().map(|r| lat(r, |p| p.p99_us)).collect(),
            runs.iter().map(|r| lat_spread(r, |p| p.p99)).collect(),
        ),
        metric(
            &format!("{phase_name} max"),
            "ms",
            Better::Lower,
            runs.iter().map(|r| lat(r, |p| p.max_us)).collect(),
            runs.iter().map(|r| lat_spread(r, |p| p.max)).collect(),
        ),
    ]
}

/// Whole-run totals, which have no per-interval spread.
fn total_metrics(runs: &[Run]) -> Vec<Metric> {
    let none = vec![None; runs.len()];
    let mut v = vec![
        metric(
            "accepted",
            "messages",
            Better::Neither,
            all(runs, &|r| r.summary.totals.accepted as f64),
            none.clone(),
        ),
        // A rate, not a count: runs of different length compare fairly.
        metric(
            "error rate",
            "%",
            Better::Lower,
            all(runs, &|r| {
                let t = &r.summary.totals;
                match t.attempted {
                    0 => f64::NAN,
                    n => (t.rejected + t.failed) as f64 / n as f64 * 100.0,
                }
            }),
            none.clone(),
        ),
        metric(
            "generator CPU",
            "% of cores",
            Better::Lower,
            all(runs, &|r| r.summary.generator_cpu_pct),
            none.clone(),
        ),
    ];
    // Messages the server may or may not have (no final reply): shown when a run had any.
    if runs.iter().any(|r| r.summary.totals.indeterminate > 0) {
        v.insert(
            2,
            metric(
                "indeterminate",
                "messages",
                Better::Lower,
                all(runs, &|r| r.summary.totals.indeterminate as f64),
                none,
            ),
        );
    }
    v.extend(delivery_metrics(runs));
    v
}

/// What `spate verify` found of each run's messages (verify.json), when any run was
/// checked: every class, so a lost or duplicated message shows beside the speed it came
/// with. A run without a check shows "-" (not measured).
fn delivery_metrics(runs: &[Run]) -> Vec<Metric> {
    if runs.iter().all(|r| r.verify.is_none()) {
        return Vec::new();
    }
    let none = vec![None; runs.len()];
    let count = |key: &'static str| {
        move |r: &Run| {
            r.verify
                .as_ref()
                .and_then(|v| v.get(key))
                .and_then(|n| n.as_u64())
                .map_or(f64::NAN, |n| n as f64)
        }
    };
    let mut v = Vec::new();
    for (key, name, better) in [
        ("delivered", "delivered", Better::Neither),
        ("missing", "lost", Better::Lower),
        ("duplicated", "duplicated", Better::Lower),
        ("corrupted", "corrupted", Better::Lower),
        ("misdelivered", "misdelivered", Better::Lower),
        ("unlogged", "unlogged", Better::Neither),
    ] {
        v.push(metric(
            name,
            "deliveries",
            better,
            all(runs, &count(key)),
            none.clone(),
        ));
    }
    // Of the messages without a final reply: those found after all.
    if runs.iter().any(|r| count("indeterminate")(r) > 0.0) {
        v.push(metric(
            "recovered",
            "messages",
            Better::Neither,
            all(runs, &count("recovered")),
            none,
        ));
    }
    v
}

fn fmt_v(v: f64) -> String {
    if !v.is_finite() {
        "-".into()
    } else if v.abs() >= 1000.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn fmt_diff(m: &Metric, i: usize) -> String {
    match (m.diff_pct[i], m.verdict[i].as_str()) {
        (_, "base") => String::new(),
        (_, "same") => "same".into(),
        (Some(d), w) => format!("{d:+.1}% {w}"),
        (None, w) => w.to_string(),
    }
}

pub fn render_text(c: &Comparison) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Comparing {} runs (differences against A):",
        c.runs.len()
    );
    if let Some(note) = &c.note {
        let _ = writeln!(o, "  note: {note}");
    }
    for r in &c.runs {
        let _ = writeln!(
            o,
            "  {}: run {} on {}, started {}\n     {}",
            r.label, r.run_id, r.target, r.started_at, r.command
        );
    }
    let w = c
        .metrics
        .iter()
        .map(|m| m.name.len() + m.unit.len() + 3)
        .max()
        .unwrap_or(0)
        .max(24);
    let _ = write!(o, "\n  {:<w$}", "metric");
    for (i, _) in c.runs.iter().enumerate() {
        let _ = write!(o, " {:>10}", letter(i));
        if i > 0 {
            let _ = write!(o, " {:<22}", "");
        }
    }
    o.truncate(o.trim_end_matches(' ').len());
    o.push('\n');
    for m in &c.metrics {
        let _ = write!(o, "  {:<w$}", format!("{} ({})", m.name, m.unit));
        for (i, v) in m.values.iter().enumerate() {
            let _ = write!(o, " {:>10}", fmt_v(*v));
            if i > 0 {
                let _ = write!(o, " {:<22}", fmt_diff(m, i));
            }
        }
        o.truncate(o.trim_end_matches(' ').len());
        o.push('\n');
    }
    o.push_str("\n  Noise: per-interval mean ± standard deviation; overlapping spreads are \"within noise\".\n");
    for m in c
        .metrics
        .iter()
        .filter(|m| m.spreads.iter().any(|s| s.is_some()))
    {
        let _ = write!(o, "  {:<w$}", m.name);
        for (i, s) in m.spreads.iter().enumerate() {
            match s {
                Some(s) => {
                    let _ = write!(
                        o,
                        " {}: {} ± {} (n={})",
                        letter(i),
                        fmt_v(s.mean),
                        fmt_v(s.sd),
                        s.n
                    );
                }
                None => {
                    let _ = write!(o, " {}: too few intervals", letter(i));
                }
            }
        }
        o.push('\n');
    }
    o
}

pub fn render_html(c: &Comparison, runs: &[Run]) -> String {
    let title = format!("spate: comparing {} runs", runs.len());
    let mut b = String::new();
    let _ = write!(b, "<h1>{}</h1>\n<table><tr><th>run</th><th>run id</th><th>target</th><th>started</th><th>command</th></tr>", esc(&title));
    for (i, r) in c.runs.iter().enumerate() {
        let _ = write!(
            b,
            "<tr><td><span style=\"color:{}\">■</span> {}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
            super::chart::color(i),
            esc(&r.label),
            esc(&r.run_id),
            esc(&r.target),
            esc(&r.started_at),
            esc(&r.command)
        );
    }
    b.push_str("</table>\n");
    headline_table(&mut b, c);
    b.push_str("<h2>Overlaid</h2>\n");
    charts(&mut b, &overlaid_charts(c, runs));
    page(&title, &b)
}

fn headline_table(b: &mut String, c: &Comparison) {
    b.push_str("<h2>Headline numbers</h2><table><tr><th>metric</th>");
    for (i, _) in c.runs.iter().enumerate() {
        let _ = write!(b, "<th class=\"n\">{}</th>", letter(i));
        if i > 0 {
            let _ = write!(b, "<th>{} vs A</th>", letter(i));
        }
    }
    b.push_str("</tr>");
    for m in &c.metrics {
        let _ = write!(b, "<tr><td>{} ({})</td>", esc(&m.name), esc(&m.unit));
        for (i, v) in m.values.iter().enumerate() {
            let tip = m.spreads[i]
                .map(|s| {
                    format!(
                        " title=\"per interval {} ± {} (n={})\"",
                        fmt_v(s.mean),
                        fmt_v(s.sd),
                        s.n
                    )
                })
                .unwrap_or_default();
            let _ = write!(b, "<td class=\"n\"{tip}>{}</td>", fmt_v(*v));
            if i > 0 {
                let cls = match m.verdict[i].as_str() {
                    "better" => " class=\"ok\"",
                    "worse" => " class=\"warn\"",
                    _ => "",
                };
                let _ = write!(b, "<td{cls}>{}</td>", esc(&fmt_diff(m, i)));
            }
        }
        b.push_str("</tr>");
    }
    b.push_str("</table><p class=\"sub\">Differences are against A. Where the runs' per-interval spreads (mean ± one standard deviation) overlap, the difference is reported as within noise.</p>\n");
}

/// Throughput, latency distribution, p50, p99 and active sessions, one series per run.
fn overlaid_charts(c: &Comparison, runs: &[Run]) -> [Chart; 5] {
    let phase = main_phase_name(&runs[0]);
    let mut thr = Chart::time("Throughput (accepted)", "messages per second");
    let mut p50 = Chart::time(format!("{phase} p50 over time"), "latency (ms)");
    let mut p99 = Chart::time(format!("{phase} p99 over time"), "latency (ms)");
    let mut dist = Chart::new(
        format!("{phase} latency distribution"),
        XKind::LogPercentile,
        "percentile",
        "latency (ms)",
    );
    let mut active = Chart::time("Units in flight", "units of work at once");
    for (i, (r, info)) in runs.iter().zip(&c.runs).enumerate() {
        let l = info.label.clone();
        if let Some(p) = r.rate("accepted") {
            thr.push(Series::line(l.clone(), p).colored(i));
        }
        if let Some(log) = r.phase(&phase) {
            let pts = |f: fn(&super::data::LatencyPoint) -> u64| {
                log.points
                    .iter()
                    .map(|p| (p.t_s, f(p) as f64 / 1000.0))
                    .collect::<Vec<_>>()
            };
            p50.push(Series::line(l.clone(), pts(|p| p.p50)).colored(i));
            p99.push(Series::line(l.clone(), pts(|p| p.p99)).colored(i));
            dist.push(Series::line(l.clone(), log.percentile_curve()).colored(i));
        }
        if let Some(p) = r.intervals.xy("t_s", "active") {
            active.push(Series::line(l, p).colored(i).styled(Style::Line));
        }
    }
    [thr, dist, p50, p99, active]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_spreads_are_noise() {
        let a = Spread::of(&[100.0, 110.0, 90.0, 105.0, 95.0]).unwrap();
        let b = Spread::of(&[104.0, 112.0, 96.0, 108.0, 100.0]).unwrap();
        let c = Spread::of(&[200.0, 210.0, 190.0, 205.0, 195.0]).unwrap();
        assert!(a.overlaps(&b));
        assert!(!a.overlaps(&c));
        let m = metric(
            "throughput",
            "messages/s",
            Better::Higher,
            vec![100.0, 104.0, 200.0],
            vec![Some(a), Some(b), Some(c)],
        );
        assert_eq!(m.verdict, vec!["base", "within noise", "better"]);
        assert_eq!(m.diff_pct[2], Some(100.0));
        let l = metric(
            "p99",
            "ms",
            Better::Lower,
            vec![100.0, 200.0],
            vec![Some(a), Some(c)],
        );
        assert_eq!(l.verdict[1], "worse");
        assert!(Spread::of(&[1.0, 2.0]).is_none());
    }
}
