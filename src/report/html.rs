//! The HTML report of one run: a single self-contained file (inline CSS and SVG, no script,
//! no network) that reads top to bottom: what ran, the headline numbers, throughput, latency,
//! errors, delivery, server resources. Sections without data are left out.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::chart::{self, escape as esc, Chart, Series, Style, XKind};
use super::data::{class_label, PhaseLog, Run, Table};
use crate::units::fmt_bytes;

pub const PAGE_CSS: &str = "body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1800px;padding:16px 24px;color:#222;background:#fafafa}\
h1{font-size:22px;margin:4px 0}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}\
h3{font-size:15px;margin:16px 0 6px}.sub{color:#666}\
table{border-collapse:collapse;margin:6px 0;background:#fff}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}\
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}\
.cards{display:flex;flex-wrap:wrap;gap:10px;margin:8px 0}.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:8px 14px;min-width:120px}\
.card .v{font-size:22px;font-weight:600}.card .k{color:#666;font-size:12px}\
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(640px,1fr));gap:12px}\
.wide{overflow-x:auto}.warn{color:#a40}.ok{color:#070}pre{background:#fff;border:1px solid #ddd;padding:8px;overflow:auto;max-height:400px}\
code{font-size:12px}";

/// A complete HTML document around `body`.
pub fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{PAGE_CSS}{}</style></head>\n<body>\n{body}\n\
         <p class=\"sub\">Made by spate. Every chart is drawn from the files in the results \
         directory; long runs are downsampled keeping each interval's minimum and maximum.</p>\n\
         </body></html>\n",
        esc(title),
        chart::CSS
    )
}

/// What was done to a run over its time, as bands across its charts: its faults
/// (summary.json's `extra.faults`), from when each was applied (or due) to its end, and
/// what it was told while it ran (`extra.control`): a pause as a band to its resume, a
/// rate or a number of sessions as a mark where it was set.
pub fn fault_bands(s: &crate::results::Summary) -> Vec<chart::Band> {
    let mut bands = control_bands(s);
    let Some(occs) = s
        .extra
        .get("faults")
        .and_then(|f| f["occurrences"].as_array())
    else {
        return bands;
    };
    bands.extend(occs.iter().filter_map(|o| {
        let start = o["events"][0]["t_s"].as_f64().or(o["start_s"].as_f64())?;
        let end = o["end_s"].as_f64()?.max(start);
        Some(chart::Band {
            x0: start,
            x1: end,
            label: format!("fault {}", o["fault"]),
        })
    }));
    bands
}

/// `extra.control`'s actions as bands: a pause to its resume (or the end of the run),
/// a rate or a number of sessions as a mark.
fn control_bands(s: &crate::results::Summary) -> Vec<chart::Band> {
    let Some(actions) = s.extra.get("control").and_then(|c| c["actions"].as_array()) else {
        return Vec::new();
    };
    let mut bands = Vec::new();
    let mut paused: Option<f64> = None;
    for a in actions {
        let Some(t) = a["t_s"].as_f64() else { continue };
        let value = a["value"].as_f64();
        match (a["action"].as_str().unwrap_or_default(), value) {
            ("pause", _) => {
                paused.get_or_insert(t);
            }
            ("resume", _) => {
                if let Some(p) = paused.take() {
                    bands.push(chart::Band {
                        x0: p,
                        x1: t,
                        label: "paused".into(),
                    });
                }
            }
            ("rate", Some(v)) => bands.push(chart::Band {
                x0: t,
                x1: t,
                label: format!("rate {}/s", num(v)),
            }),
            ("users", Some(v)) => bands.push(chart::Band {
                x0: t,
                x1: t,
                label: format!("users {v}"),
            }),
            ("stop", _) => bands.push(chart::Band {
                x0: t,
                x1: t,
                label: "stop".into(),
            }),
            _ => {}
        }
    }
    if let Some(p) = paused {
        bands.push(chart::Band {
            x0: p,
            x1: s.elapsed_s.max(p),
            label: "paused".into(),
        });
    }
    // The shards of a merged run were each told the same, within a moment: one mark.
    let mut kept: Vec<chart::Band> = Vec::new();
    for b in bands {
        let same = |k: &chart::Band| k.label == b.label && (k.x0 - b.x0).abs() < 1.0;
        if !kept.iter().any(same) {
            kept.push(b);
        }
    }
    kept
}

/// A run's charts, its faults as bands over those with time on the x axis.
pub fn run_charts(out: &mut String, bands: &[chart::Band], mut list: Vec<Chart>) {
    for c in list.iter_mut().filter(|c| c.x_kind == XKind::Seconds) {
        c.bands = bands.to_vec();
    }
    charts(out, &list);
}

/// Charts with data, in a responsive grid.
pub fn charts(out: &mut String, charts: &[Chart]) {
    let drawn: Vec<&Chart> = charts.iter().filter(|c| c.has_data()).collect();
    if drawn.is_empty() {
        return;
    }
    out.push_str("<div class=\"grid\">");
    for c in drawn {
        out.push_str("<div>");
        out.push_str(&chart::render(c));
        out.push_str("</div>\n");
    }
    out.push_str("</div>\n");
}

pub fn card(out: &mut String, value: &str, key: &str) {
    let _ = write!(
        out,
        "<div class=\"card\"><div class=\"v\">{}</div><div class=\"k\">{}</div></div>",
        esc(value),
        esc(key)
    );
}

/// Milliseconds with sensible digits.
pub fn ms(us: f64) -> String {
    let m = us / 1000.0;
    if m >= 100.0 {
        format!("{m:.0} ms")
    } else if m >= 10.0 {
        format!("{m:.1} ms")
    } else {
        format!("{m:.2} ms")
    }
}

pub fn num(v: f64) -> String {
    if v >= 100.0 || v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// The command line as a person would retype it.
pub fn command_line(args: &[String]) -> String {
    args.iter()
        .enumerate()
        .map(|(i, a)| {
            let a = if i == 0 {
                std::path::Path::new(a)
                    .file_name()
                    .map(|f| f.to_string_lossy().into_owned())
                    .unwrap_or_else(|| a.clone())
            } else {
                a.clone()
            };
            if a.is_empty()
                || a.contains(|c: char| c.is_whitespace() || "'\"$&;|<>{}*?".contains(c))
            {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn total_errors(run: &Run) -> u64 {
    run.summary.errors.iter().map(|e| e.count).sum()
}

pub fn render_run(run: &Run) -> String {
    let (title, body) = render_body(run);
    page(&title, &body)
}

/// The report's title and body (the live view puts the body in its own page).
pub fn render_body(run: &Run) -> (String, String) {
    let s = &run.summary;
    let title = format!("spate: {} load on {}", s.protocol.to_uppercase(), s.target);
    let mut b = String::new();
    let status = if run.running {
        "<span class=\"ok\">running</span>"
    } else if !s.complete {
        "<span class=\"warn\">incomplete (killed before it could finish)</span>"
    } else if s.interrupted && s.interrupted_by.as_deref() == Some("threshold") {
        "<span class=\"warn\">stopped early by a threshold (see the warnings)</span>"
    } else if s.interrupted && s.interrupted_by.as_deref() == Some("control") {
        "<span class=\"warn\">stopped from its live view or spate ctl</span>"
    } else if s.interrupted {
        "<span class=\"warn\">interrupted (stopped early)</span>"
    } else {
        "<span class=\"ok\">complete</span>"
    };
    let broken = broken_thresholds(run);
    let status = match broken {
        Some(n) if !run.running && n > 0 => format!(
            "{status} — <span class=\"warn\">{n} threshold{} failed</span>",
            if n == 1 { "" } else { "s" }
        ),
        _ => status.to_string(),
    };
    let _ = writeln!(
        b,
        "<h1>{}</h1><div class=\"sub\">run {} — {}</div>",
        esc(&title),
        esc(&s.run_id),
        status
    );
    bound_by(&mut b, s);

    b.push_str("<h2>What ran</h2><table>");
    let rows = [
        (
            "command",
            format!("<code>{}</code>", esc(&command_line(&s.command))),
        ),
        ("target", esc(&s.target)),
        ("protocol", esc(&s.protocol)),
        ("spate version", esc(&s.spate_version)),
        ("started", esc(&s.started_at)),
        (
            "ended",
            match run.running {
                true => "still running".to_string(),
                false => esc(&s.ended_at),
            },
        ),
        ("elapsed", format!("{:.1} s", s.elapsed_s)),
        (
            "generator",
            format!(
                "{:.2} s CPU, {:.1}% of {} cores{}",
                s.generator_cpu_s,
                s.generator_cpu_pct,
                s.cores,
                esc(&super::text::cpu_basis(s))
            ),
        ),
    ];
    for (k, v) in rows {
        let _ = write!(b, "<tr><th>{k}</th><td>{v}</td></tr>");
    }
    if let Some(h) = super::text::handshakes(s) {
        let h = h.trim_start_matches("TLS handshakes ");
        let _ = write!(b, "<tr><th>TLS handshakes</th><td>{}</td></tr>", esc(h));
    }
    b.push_str("</table>\n");
    for w in &s.warnings {
        let _ = writeln!(b, "<p class=\"warn\">warning: {}</p>", esc(w));
    }
    if !s.reconciles {
        b.push_str("<p class=\"warn\">The counts do not reconcile (attempted ≠ accepted + rejected + failed + in flight).</p>\n");
    }
    if let Some(plan) = &run.plan {
        let _ = writeln!(
            b,
            "<details><summary>the plan (plan.json)</summary><pre>{}</pre></details>",
            esc(&serde_json::to_string_pretty(plan).unwrap_or_default())
        );
    }

    headline(&mut b, run);
    thresholds(&mut b, run);
    faults(&mut b, s, run.running);
    throughput(&mut b, run);
    latency(&mut b, run);
    super::classes::section(&mut b, run);
    errors(&mut b, run);
    delivery(&mut b, run);
    if let Some(m) = &run.monitor {
        monitor(&mut b, m, &fault_bands(&run.summary));
    }
    (title, b)
}

/// How many of the run's thresholds failed, from thresholds.json (None: none were set).
fn broken_thresholds(run: &Run) -> Option<usize> {
    let text = std::fs::read_to_string(run.dir.join("thresholds.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let list = v["thresholds"].as_array()?;
    Some(list.iter().filter(|t| t["pass"] == false).count())
}

/// The run's verdict on what limited it, at the top: figures of a generator-bound run say
/// more about spate than about the server, and the page must not read as the server's.
fn bound_by(b: &mut String, s: &crate::results::Summary) {
    let Some(v) = s.extra.get("bound_by") else {
        return;
    };
    let (Some(bound), why) = (v["bound_by"].as_str(), v["why"].as_str().unwrap_or("")) else {
        return;
    };
    let class = match bound {
        "generator" => "warn",
        _ => "sub",
    };
    let _ = writeln!(
        b,
        "<p class=\"{class}\" id=\"bound-by\"><b>bound by: {}</b> — {}</p>",
        esc(bound),
        esc(why)
    );
}

/// The `--threshold` rules and how each held: while the run goes, on its figures so far
/// (the live view); after it, as thresholds.json judged them on the whole run.
fn thresholds(b: &mut String, run: &Run) {
    let from_file = || {
        let text = std::fs::read_to_string(run.dir.join("thresholds.json")).ok()?;
        let v: serde_json::Value = serde_json::from_str(&text).ok()?;
        v["thresholds"].as_array().cloned()
    };
    let (list, live) = match run
        .summary
        .extra
        .get("thresholds")
        .and_then(|t| t.as_array())
    {
        Some(l) if run.running => (l.clone(), true),
        _ => match from_file() {
            Some(l) => (l, false),
            None => return,
        },
    };
    if list.is_empty() {
        return;
    }
    b.push_str("<h2>Thresholds</h2>\n");
    if live {
        b.push_str("<p class=\"sub\">On the figures so far; the run's verdict is given on all of them at its end.</p>\n");
    }
    b.push_str("<table><tr><th>threshold</th><th>state</th><th>measured</th></tr>");
    for v in &list {
        let state = match (v["pass"].as_bool(), v["measured"].as_bool()) {
            (_, Some(false)) => "<span class=\"sub\">not measurable yet</span>",
            (Some(true), _) => "holds",
            _ => "<span class=\"warn\">FAILS</span>",
        };
        let _ = write!(
            b,
            "<tr><td><code>{}</code></td><td>{state}</td><td>{}</td></tr>",
            esc(v["threshold"].as_str().unwrap_or("")),
            esc(v["message"].as_str().unwrap_or(""))
        );
    }
    b.push_str("</table>\n");
}

/// Each fault of the run (`--fault`): what was done when, and the load before, during
/// and after it; the charts below shade it.
fn faults(b: &mut String, s: &crate::results::Summary, running: bool) {
    let Some(occs) = s
        .extra
        .get("faults")
        .and_then(|f| f["occurrences"].as_array())
    else {
        return;
    };
    b.push_str("<h2>Faults</h2>\n<p class=\"sub\">Shaded on every chart over time. Recovery times are ends of one-second intervals: upper bounds.</p>\n");
    for o in occs {
        let _ = write!(
            b,
            "<h3>fault {} — <code>{}</code></h3><ul>",
            o["fault"],
            esc(o["spec"].as_str().unwrap_or(""))
        );
        for e in o["events"].as_array().into_iter().flatten() {
            let _ = write!(
                b,
                "<li>{:.3} s: {} {}{}</li>",
                e["t_s"].as_f64().unwrap_or(0.0),
                esc(e["event"].as_str().unwrap_or("")),
                esc(e["what"].as_str().unwrap_or("")),
                match e["error"].as_str() {
                    Some(err) => format!(" <span class=\"warn\">failed: {}</span>", esc(err)),
                    None => String::new(),
                }
            );
        }
        b.push_str("</ul><table><tr><th></th><th class=\"n\">accepted/s</th><th class=\"n\">failed</th><th class=\"n\">rejected</th><th class=\"n\">p50</th><th class=\"n\">p99</th><th>errors</th></tr>");
        for w in ["before", "during", "after"] {
            let a = &o[w];
            if a.is_null() {
                continue;
            }
            let pct = |k: &str| a[k].as_f64().map_or("-".to_string(), ms);
            let errors: Vec<String> = a["errors"]
                .as_object()
                .map(|m| m.iter().map(|(k, n)| format!("{k} {n}")).collect())
                .unwrap_or_default();
            let _ = write!(
                b,
                "<tr><th>{w}</th><td class=\"n\">{:.1}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                a["accepted_per_s"].as_f64().unwrap_or(0.0),
                a["failed"],
                a["rejected"],
                pct("response_p50_us"),
                pct("response_p99_us"),
                esc(&errors.join(", "))
            );
        }
        let back = |k: &str| match o[k].as_f64() {
            Some(t) => format!("within {t:.1} s of its end"),
            None if running => "not yet (said when the run ends)".to_string(),
            None => "not by the run's end".to_string(),
        };
        let _ = writeln!(
            b,
            "</table><p>first unit accepted {}; throughput within 10 % of before {}</p>",
            back("first_accept_after_s"),
            back("recovered_after_s")
        );
    }
}

fn headline(b: &mut String, run: &Run) {
    let s = &run.summary;
    let w = s.words();
    let (unit, bytes) = (&*w.unit, &*w.bytes);
    b.push_str("<h2>Headline</h2><div class=\"cards\">");
    card(b, &num(s.messages_per_s), &format!("{unit}/s accepted"));
    card(
        b,
        &format!("{}/s", fmt_bytes((s.kbytes_per_s * 1024.0) as u64)),
        "data rate",
    );
    card(
        b,
        &s.totals.accepted.to_string(),
        &format!("{unit} accepted"),
    );
    card(b, &fmt_bytes(s.totals.bytes), bytes);
    if let Some(p) = run.main_phase().and_then(|p| s.phase(&p.phase)) {
        card(b, &ms(p.p50_us as f64), &format!("{} p50", p.phase));
        card(b, &ms(p.p99_us as f64), &format!("{} p99", p.phase));
        card(b, &ms(p.max_us as f64), &format!("{} max", p.phase));
    }
    card(b, &s.totals.rejected.to_string(), "rejected");
    card(b, &s.totals.failed.to_string(), "failed");
    let t = &s.totals;
    if t.attempted > 0 {
        let rate = (t.rejected + t.failed) as f64 / t.attempted as f64 * 100.0;
        card(b, &format!("{rate:.2} %"), "error rate (rejected + failed)");
    }
    card(b, &total_errors(run).to_string(), "error events");
    b.push_str("</div>\n");
}

fn throughput(b: &mut String, run: &Run) {
    let w = run.summary.words();
    let (unit, bytes) = (&*w.unit, &*w.bytes);
    let mut rate = Chart::time("Throughput", &format!("{unit} per second"));
    for col in ["attempted", "accepted", "rejected", "failed"] {
        if let Some(pts) = run.rate(col) {
            if col == "attempted" || pts.iter().any(|p| p.1 > 0.0) {
                rate.push(Series::line(col, pts));
            }
        }
    }
    // Mailbox loads: what the visits did to messages, on a chart of its own (messages
    // and visits are different units).
    let mut messages = Chart::time("Messages read and deleted", "messages per second");
    for col in ["retrieved", "deleted"] {
        if let Some(pts) = run.rate(col) {
            if pts.iter().any(|p| p.1 > 0.0) {
                messages.push(Series::line(col, pts));
            }
        }
    }
    let mut stanzas = Chart::time("Stanzas in and out", "stanzas per second");
    for col in ["stanzas_in", "stanzas_out", "reconnections"] {
        if let Some(pts) = run.rate(col) {
            if pts.iter().any(|p| p.1 > 0.0) {
                stanzas.push(Series::line(col, pts));
            }
        }
    }
    let mut data = Chart::time("Data rate", "KiB per second");
    if let Some(pts) = run.rate("bytes") {
        data.push(Series::line(
            bytes,
            pts.into_iter().map(|(t, v)| (t, v / 1024.0)).collect(),
        ));
    }
    // intervals.csv's `active` is units of work in flight, not sessions logged in (an
    // XMPP fan-out holds 300 sessions with no unit in flight between multicasts).
    let mut active = Chart::time("Units in flight", "units of work at once");
    if let Some(pts) = run.intervals.xy("t_s", "active") {
        active.push(Series::line("in flight", pts));
    }
    let mut conns = Chart::time("Connections", "connections per second");
    for col in ["connections", "connect_failures"] {
        if let Some(pts) = run.rate(col) {
            if pts.iter().any(|p| p.1 > 0.0) {
                conns.push(Series::line(col, pts));
            }
        }
    }
    if !rate.has_data() && !active.has_data() {
        return;
    }
    b.push_str("<h2>Throughput</h2>\n");
    let mut list = vec![rate];
    for c in [messages, stanzas] {
        if c.has_data() {
            list.push(c);
        }
    }
    list.extend([data, active, conns]);
    run_charts(b, &fault_bands(&run.summary), list);
}

/// p50/p90/p99/max of one phase over time, in ms.
pub fn latency_chart(log: &PhaseLog, title: &str) -> Chart {
    let mut c = Chart::time(title, "latency (ms)");
    type Pick = fn(&super::data::LatencyPoint) -> u64;
    let lines: [(&str, Pick, Style); 4] = [
        ("p50", |p| p.p50, Style::Line),
        ("p90", |p| p.p90, Style::Line),
        ("p99", |p| p.p99, Style::Line),
        ("max", |p| p.max, Style::Dashed),
    ];
    // The last interval, cut short by the end of the run, holds a few stragglers: their
    // percentiles are noise, drawn as a cliff at the end.
    let mut points = &log.points[..];
    if let [.., last] = points {
        let mut counts: Vec<u64> = points.iter().map(|p| p.count).collect();
        counts.sort_unstable();
        if points.len() > 2 && last.count * 4 < counts[counts.len() / 2] {
            points = &points[..points.len() - 1];
        }
    }
    for (name, pick, style) in lines {
        let pts = points
            .iter()
            .map(|p| (p.t_s, pick(p) as f64 / 1000.0))
            .collect();
        c.push(Series::line(name, pts).styled(style));
    }
    // A max far above the median flattens p50/p90 into the axis: then a log scale.
    let top = |pick: Pick| log.points.iter().map(pick).max().unwrap_or(0);
    if top(|p| p.max) > 20 * top(|p| p.p50).max(1) {
        c = c.log_y();
    }
    c
}

/// Whole-run percentile curves, a series per log named by its phase (or class).
pub fn distribution_chart(title: &str, logs: &[PhaseLog]) -> Chart {
    let mut c = Chart::new(title, XKind::LogPercentile, "percentile", "latency (ms)");
    for log in logs {
        c.push(Series::line(&log.phase, log.percentile_curve()));
    }
    c
}

fn latency(b: &mut String, run: &Run) {
    if run.phases.is_empty() {
        return;
    }
    b.push_str("<h2>Latency</h2>\n");
    let s = &run.summary;
    b.push_str("<table><tr><th>phase</th><th class=\"n\">count</th><th class=\"n\">mean</th><th class=\"n\">p50</th><th class=\"n\">p90</th><th class=\"n\">p99</th><th class=\"n\">p99.9</th><th class=\"n\">max</th><th>what is timed</th></tr>");
    for p in &s.phases {
        let what = run.phase_times(&p.phase).unwrap_or("");
        let _ = write!(
            b,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            esc(&p.phase),
            p.count,
            ms(p.mean_us),
            ms(p.p50_us as f64),
            ms(p.p90_us as f64),
            ms(p.p99_us as f64),
            ms(p.p999_us as f64),
            ms(p.max_us as f64),
            esc(what)
        );
    }
    b.push_str("</table>\n");
    let dist = distribution_chart("Latency distribution (whole run)", &run.phases);
    let mut list = vec![dist];
    list.extend(
        run.phases
            .iter()
            .map(|p| latency_chart(p, &format!("{} latency over time", p.phase))),
    );
    run_charts(b, &fault_bands(&run.summary), list);
}

/// Errors per interval, one line per class (the most frequent ones; the rest as "other").
fn errors(b: &mut String, run: &Run) {
    let s = &run.summary;
    if s.errors.is_empty() && run.errors.is_empty() {
        return;
    }
    b.push_str("<h2>Errors</h2>\n");
    let times: Vec<f64> = run.intervals.col("t_s").unwrap_or_default();
    let key = |t: f64| (t * 1000.0).round() as i64;
    let mut per_class: BTreeMap<String, BTreeMap<i64, f64>> = BTreeMap::new();
    let mut totals: BTreeMap<String, u64> = BTreeMap::new();
    for e in &run.errors {
        let c = e.class();
        *per_class
            .entry(c.clone())
            .or_default()
            .entry(key(e.t_s))
            .or_default() += e.count as f64;
        *totals.entry(c).or_default() += e.count;
    }
    let mut ranked: Vec<(String, u64)> = totals.into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let shown = 7;
    // Per second of each row: after --detail a row is a minute, and counts per row would
    // jump sixty-fold there. A sliver (the run's cut last interval) counts as a second.
    let mut c = Chart::time("Errors over time by class", "errors per second");
    let mut grid: Vec<f64> = times.clone();
    grid.extend(run.errors.iter().map(|e| e.t_s));
    grid.sort_by(|a, b| a.total_cmp(b));
    grid.dedup_by(|a, b| key(*a) == key(*b));
    let series_of = |classes: &[String]| -> Vec<(f64, f64)> {
        let starts = std::iter::once(0.0).chain(grid.iter().copied());
        grid.iter()
            .zip(starts)
            .map(|(&t, t0)| {
                let v: f64 = classes
                    .iter()
                    .filter_map(|c| per_class.get(c).and_then(|m| m.get(&key(t))))
                    .sum();
                (t, v / (t - t0).max(1.0))
            })
            .collect()
    };
    for (name, _) in ranked.iter().take(shown) {
        c.push(Series::line(
            name.clone(),
            series_of(std::slice::from_ref(name)),
        ));
    }
    if ranked.len() > shown {
        let rest: Vec<String> = ranked[shown..].iter().map(|r| r.0.clone()).collect();
        c.push(Series::line("other", series_of(&rest)));
    }
    run_charts(b, &fault_bands(&run.summary), vec![c]);
    b.push_str("<table><tr><th class=\"n\">count</th><th>class</th><th>kind</th><th>text</th><th>sample reply</th></tr>");
    for e in &s.errors {
        let _ = write!(
            b,
            "<tr><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
            e.count,
            esc(&class_label(&e.phase, &e.kind, e.code, e.enhanced.as_deref())),
            esc(&e.kind),
            esc(&e.text),
            esc(&e.sample)
        );
    }
    b.push_str("</table>\n");
}

fn delivery(b: &mut String, run: &Run) {
    if run.verify.is_none() && run.deliveries.is_none() && run.delivery.is_none() {
        return;
    }
    b.push_str("<h2>Delivery</h2>\n");
    if let Some(v) = &run.verify {
        b.push_str("<div class=\"cards\">");
        for k in [
            "expected",
            "delivered",
            "missing",
            "duplicated",
            "corrupted",
            "misdelivered",
            "unlogged",
            "foreign",
        ] {
            if let Some(n) = v.get(k).and_then(|n| n.as_u64()) {
                card(b, &n.to_string(), k);
            }
        }
        // Messages the server may have (no final reply): shown when there were any.
        if let Some(n) = v
            .get("indeterminate")
            .and_then(|n| n.as_u64())
            .filter(|&n| n > 0)
        {
            card(b, &n.to_string(), "indeterminate");
            let found = v.get("recovered").and_then(|n| n.as_u64()).unwrap_or(0);
            card(b, &found.to_string(), "recovered (of them, found)");
        }
        let latency = v.get("latency");
        let unmeasurable = latency
            .and_then(|l| l.get("not_measurable"))
            .and_then(|w| w.as_str());
        match (latency, unmeasurable) {
            (Some(_), Some(_)) => card(b, "not measurable", "delivery latency"),
            (Some(l), None) => {
                for k in ["p50", "p99", "max"] {
                    if let Some(us) = l.get(format!("{k}_us")).and_then(|n| n.as_f64()) {
                        card(b, &ms(us), &format!("delivery {k}"));
                    }
                }
            }
            _ => {}
        }
        b.push_str("</div>\n");
        if let Some(why) = unmeasurable {
            let _ = writeln!(
                b,
                "<p>Delivery latency is not measurable from this source ({}): verify inline over IMAP IDLE (<code>spate smtp … --verify imap://HOST:PORT</code>) for real latency.</p>",
                esc(why)
            );
        }
        if let Some(rules) = v.get("rules").and_then(|r| r.as_array()) {
            if !rules.is_empty() {
                b.push_str("<table><tr><th>rule</th><th class=\"n\">expected</th><th class=\"n\">found</th></tr>");
                for r in rules {
                    let cell = |k: &str| match r.get(k) {
                        Some(serde_json::Value::String(s)) => esc(s),
                        Some(v) => esc(&v.to_string()),
                        None => String::new(),
                    };
                    let _ = write!(
                        b,
                        "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                        cell("kind"),
                        cell("expected"),
                        cell("found")
                    );
                }
                b.push_str("</table>\n");
            }
        }
    }
    let mut list = Vec::new();
    if let Some(d) = &run.deliveries {
        let mut c = Chart::time("Injected vs delivered", "messages per second");
        for col in ["injected", "delivered"] {
            if let Some(pts) = d.xy("t_s", col) {
                c.push(Series::line(col, pts));
            }
        }
        list.push(c);
    }
    if let Some(log) = &run.delivery {
        list.push(distribution_chart(
            "Delivery latency distribution",
            std::slice::from_ref(log),
        ));
        list.push(latency_chart(log, "Delivery latency over time"));
    }
    run_charts(b, &fault_bands(&run.summary), list);
}

/// The unit of a monitor column from its suffix, as an axis label.
pub fn monitor_unit(col: &str) -> &'static str {
    let metric = col.rsplit('.').next().unwrap_or(col);
    if metric.ends_with("_pct") {
        "percent (%)"
    } else if metric.ends_with("_mb") {
        "MB"
    } else if metric.ends_with("_kbps") {
        "KB per second"
    } else if metric.ends_with("_ms") || metric.starts_with("ms_") {
        "milliseconds"
    } else {
        "count"
    }
}

/// Server resources: one chart per (group, unit), e.g. host percentages, disk KB/s.
fn monitor(b: &mut String, m: &Table, bands: &[chart::Band]) {
    let mut groups: BTreeMap<(String, &'static str), Vec<String>> = BTreeMap::new();
    for col in &m.cols {
        if col == "t_s" || col == "time" {
            continue;
        }
        let group = col.split('.').next().unwrap_or(col).to_string();
        groups
            .entry((group, monitor_unit(col)))
            .or_default()
            .push(col.clone());
    }
    let mut list = Vec::new();
    for ((group, unit), cols) in groups {
        let mut c = Chart::time(format!("{group} — {unit}"), unit);
        for col in cols {
            if let Some(pts) = m.xy("t_s", &col) {
                let name = col
                    .strip_prefix(&format!("{group}."))
                    .unwrap_or(&col)
                    .to_string();
                c.push(Series::line(name, pts));
            }
        }
        list.push(c);
    }
    if list.iter().any(|c| c.has_data()) {
        b.push_str("<h2>Server resources</h2>\n");
        run_charts(b, bands, list);
    }
}

#[cfg(test)]
mod tests {
    use super::super::data::LatencyPoint;
    use super::*;

    fn log(points: &[(f64, u64, u64, u64)]) -> PhaseLog {
        PhaseLog {
            phase: "body".into(),
            points: points
                .iter()
                .map(|&(t_s, count, p50, max)| LatencyPoint {
                    t_s,
                    count,
                    p50,
                    p90: p50 * 2,
                    p99: p50 * 3,
                    max,
                })
                .collect(),
            total: hdrhistogram::Histogram::new(3).unwrap(),
        }
    }

    #[test]
    fn latency_over_time_drops_the_straggler_interval_and_goes_log_for_spikes() {
        let c = latency_chart(
            &log(&[
                (1.0, 900, 1000, 3000),
                (2.0, 1000, 1100, 3500),
                (2.05, 3, 90, 100),
            ]),
            "t",
        );
        assert!(!c.log_y);
        assert_eq!(c.series[0].points, vec![(1.0, 1.0), (2.0, 1.1)]);
        let c = latency_chart(
            &log(&[(1.0, 900, 1000, 3000), (2.0, 1000, 1100, 900_000)]),
            "t",
        );
        assert!(c.log_y, "a max 800x the median");
        assert_eq!(c.series[0].points.len(), 2);
    }
}
