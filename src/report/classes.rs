//! The report's section on `spate rr`'s request classes (hit/miss, read/write): the
//! summary's per-class outcomes and response times, and, from classes.hlog, each class's
//! latency distribution and its p50/p99 over time.

use std::fmt::Write;

use serde_json::{Map, Value};

use super::chart::{escape as esc, Chart, Series, Style};
use super::data::Run;
use super::html::{distribution_chart, fault_bands, ms, run_charts};

const NOT_MEASURABLE: &str = "<td class=\"n\">not measurable</td>";

/// The summary's classes, in the order of the plan (the order of the requests file).
fn ordered<'a>(run: &Run, classes: &'a Map<String, Value>) -> Vec<(&'a str, &'a Value)> {
    let planned: Vec<&str> = run
        .plan
        .as_ref()
        .and_then(|p| p.get("classes"))
        .and_then(|c| c.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let mut out: Vec<(&str, &Value)> = planned
        .iter()
        .filter_map(|n| classes.get_key_value(*n).map(|(k, v)| (k.as_str(), v)))
        .collect();
    for (k, v) in classes {
        if !planned.contains(&k.as_str()) {
            out.push((k.as_str(), v));
        }
    }
    out
}

/// A latency cell in ms, or "not measurable" when the summary has no number for it.
fn latency_cell(v: Option<&Value>) -> String {
    match v.and_then(|v| v.as_f64()) {
        Some(us) => format!("<td class=\"n\">{}</td>", ms(us)),
        None => NOT_MEASURABLE.to_string(),
    }
}

pub fn section(b: &mut String, run: &Run) {
    // A protocol that sorts its units into classes keeps them in its own section of the
    // summary's extra (`extra.rr.classes`), each class with its latency histogram.
    let Some(classes) = (run.summary.extra.values())
        .find_map(|x| x.get("classes"))
        .and_then(|c| c.as_object())
        .filter(|c| !c.is_empty())
    else {
        return;
    };
    b.push_str("<h2 id=\"classes\">Latency per request class</h2>\n");
    b.push_str(
        "<p class=\"sub\">Response time (from the unit's scheduled start to the last byte) of \
         the requests of each class label.</p>\n",
    );
    b.push_str("<table class=\"classes\"><tr><th>class</th><th class=\"n\">accepted</th><th class=\"n\">rejected</th><th class=\"n\">failed</th><th class=\"n\">timed</th><th class=\"n\">mean</th><th class=\"n\">p50</th><th class=\"n\">p90</th><th class=\"n\">p99</th><th class=\"n\">max</th></tr>");
    for (name, c) in ordered(run, classes) {
        let count = |k: &str| c.get(k).and_then(|v| v.as_u64()).unwrap_or(0);
        let r = c.get("response_us");
        let timed = r.and_then(|r| r.get("count")).and_then(|v| v.as_u64());
        let _ = write!(
            b,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>",
            esc(name),
            count("accepted"),
            count("rejected"),
            count("failed"),
            timed.unwrap_or(0)
        );
        for k in ["mean", "p50", "p90", "p99", "max"] {
            // Older summaries wrote 0 for a class without a timed response.
            let v = r.and_then(|r| r.get(k)).filter(|_| timed.unwrap_or(0) > 0);
            b.push_str(&latency_cell(v));
        }
        b.push_str("</tr>");
    }
    b.push_str("</table>\n");
    if run.classes.is_empty() {
        b.push_str(
            "<p class=\"sub\">No classes.hlog in this directory: no charts per class.</p>\n",
        );
        return;
    }
    let dist = distribution_chart("Latency distribution per class (whole run)", &run.classes);
    run_charts(b, &fault_bands(&run.summary), vec![dist, over_time(run)]);
}

/// p50 (solid) and p99 (dashed) of every class, a colour per class.
fn over_time(run: &Run) -> Chart {
    let mut c = Chart::time("Latency per class over time", "latency (ms)");
    for (i, log) in run.classes.iter().enumerate() {
        type Pick = fn(&super::data::LatencyPoint) -> u64;
        let lines: [(&str, Pick, Style); 2] = [
            ("p50", |p| p.p50, Style::Line),
            ("p99", |p| p.p99, Style::Dashed),
        ];
        for (q, pick, style) in lines {
            let pts = log
                .points
                .iter()
                .map(|p| (p.t_s, pick(p) as f64 / 1000.0))
                .collect();
            c.push(
                Series::line(format!("{} {q}", log.phase), pts)
                    .styled(style)
                    .colored(i),
            );
        }
    }
    // A hit's p50 under a miss's p99 a hundred times higher would lie on the axis.
    let lowest_p50 = run
        .classes
        .iter()
        .map(|l| l.total.value_at_quantile(0.5))
        .min();
    let highest_p99 = run
        .classes
        .iter()
        .flat_map(|l| l.points.iter().map(|p| p.p99))
        .max();
    if let (Some(lo), Some(hi)) = (lowest_p50, highest_p99) {
        if hi > 20 * lo.max(1) {
            c = c.log_y();
        }
    }
    c
}
