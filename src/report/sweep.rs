//! The sweep page: every metric against the swept parameter, the saturation point marked
//! (the knee found by the sweep, the peak of the Universal Scalability Law fit).

use std::fmt::Write;

use super::chart::{escape as esc, Chart, Marker, Series, Style, XKind};
use super::data::Sweep;
use super::html::{card, charts, num, page};

/// Mean of each metric per parameter value, over the repeats: (value, mean).
fn means(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = points.to_vec();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut out: Vec<(f64, f64, usize)> = Vec::new();
    for (x, y) in v {
        match out.last_mut() {
            Some(last) if last.0 == x => {
                last.1 += y;
                last.2 += 1;
            }
            _ => out.push((x, y, 1)),
        }
    }
    out.into_iter().map(|(x, s, n)| (x, s / n as f64)).collect()
}

fn f(v: &serde_json::Value, k: &str) -> Option<f64> {
    v.get(k).and_then(|x| x.as_f64())
}

pub fn render_sweep(sw: &Sweep) -> String {
    let param = sw.param();
    let title = format!("spate sweep over {param}");
    let mut b = String::new();
    // Values from the table itself: a sweep's rows are its values times its repeats.
    let mut values: Vec<u64> = sw
        .table
        .col("value")
        .unwrap_or_default()
        .into_iter()
        .map(|v| v as u64)
        .collect();
    values.sort_unstable();
    values.dedup();
    let values = values.len().max(1);
    let repeats = (sw.table.rows.len() as f64 / values as f64).ceil() as u64;
    let _ = writeln!(
        b,
        "<h1>{}</h1><div class=\"sub\">{} steps ({} values × {} repeats) in {}</div>",
        esc(&title),
        sw.table.rows.len(),
        values,
        repeats,
        esc(&sw.dir.display().to_string())
    );
    find_max(&mut b, sw);
    let knee = f(&sw.meta, "knee_value");
    let usl = sw.meta.get("usl").filter(|u| !u.is_null());
    saturation(&mut b, sw, &param, knee, usl);
    if let Some(why) = sw.meta["not_judged"].as_str() {
        let _ = writeln!(b, "<p class=\"warn\">not judged: {}</p>", esc(why));
    }
    if let Some(gb) = sw.meta["generator_bound"]
        .as_array()
        .filter(|v| !v.is_empty())
    {
        let v: Vec<String> = gb.iter().map(|x| x.to_string()).collect();
        let _ = writeln!(
            b,
            "<p class=\"warn\">generator-bound: {} = {} — spate itself was the limit there (bound_by in their summaries); those steps are not used for the knee or the USL model.</p>",
            esc(&param),
            esc(&v.join(", "))
        );
    }
    slopes(&mut b, sw, &param);
    b.push_str("<h2>Metrics against the parameter</h2>\n");
    charts(&mut b, &metric_charts(sw, &param, &markers(knee, usl), usl));
    steps_table(&mut b, sw);
    step_links(&mut b, sw);
    page(&title, &b)
}

/// The knee and the USL peak, as vertical lines on every chart.
fn markers(knee: Option<f64>, usl: Option<&serde_json::Value>) -> Vec<Marker> {
    let mut markers = Vec::new();
    if let Some(k) = knee {
        markers.push(Marker {
            x: k,
            label: format!("knee {}", num(k)),
        });
    }
    if let Some(px) = usl.and_then(|u| f(u, "peak_x")) {
        markers.push(Marker {
            x: px,
            label: format!("USL peak {}", num(px)),
        });
    }
    markers
}

/// The "Saturation" section: knee, USL fit and best measured throughput as cards.
fn saturation(
    b: &mut String,
    sw: &Sweep,
    param: &str,
    knee: Option<f64>,
    usl: Option<&serde_json::Value>,
) {
    b.push_str("<h2>Saturation</h2><div class=\"cards\">");
    if let Some(k) = knee {
        card(b, &num(k), &format!("knee ({param})"));
    }
    if let Some(u) = usl {
        if let (Some(px), Some(pt)) = (f(u, "peak_x"), f(u, "peak_throughput")) {
            card(b, &num(px), &format!("USL peak ({param})"));
            card(b, &num(pt), "USL peak throughput /s");
        }
        for k in ["sigma", "kappa", "lambda", "r2"] {
            if let Some(v) = f(u, k) {
                card(b, &format!("{v:.4}"), &format!("USL {k}"));
            }
        }
    }
    if let Some(best) = sw
        .table
        .xy("value", "throughput_per_s")
        .and_then(|p| means(&p).into_iter().max_by(|a, b| a.1.total_cmp(&b.1)))
    {
        card(
            b,
            &num(best.1),
            &format!("best measured /s (at {})", num(best.0)),
        );
    }
    b.push_str("</div>\n");
    for (k, what) in [("knee_rule", "knee rule"), ("cpu_basis", "CPU measured as")] {
        if let Some(t) = sw.meta.get(k).and_then(|v| v.as_str()) {
            let _ = writeln!(b, "<p class=\"sub\">{what}: {}</p>", esc(t));
        }
    }
}

/// The cost of one more unit of the swept option (sweep.json's slopes), as cards.
fn slopes(b: &mut String, sw: &Sweep, param: &str) {
    let Some(sl) = sw.meta.get("slopes").filter(|v| v.is_object()) else {
        return;
    };
    let phase = sl["latency_phase"].as_str().unwrap_or("latency");
    let _ = writeln!(b, "<h2>Cost per {}</h2><div class=\"cards\">", esc(param));
    for (k, label) in [
        ("latency_p50_us", format!("{phase} p50, µs per {param}")),
        ("latency_p99_us", format!("{phase} p99, µs per {param}")),
        (
            "cpu_us_per_unit",
            format!("server CPU per unit, µs per {param}"),
        ),
        ("throughput_per_s", format!("throughput, /s per {param}")),
    ] {
        let v = match (f(sl, k), f(sl, &format!("{k}_se"))) {
            (Some(v), Some(se)) => format!("{v:+.1} ± {se:.1}"),
            (Some(v), None) => format!("{v:+.1}"),
            _ => "not measurable".to_string(),
        };
        card(b, &v, &label);
    }
    b.push_str("</div>\n<p class=\"sub\">least-squares slopes over every step and repeat, ± their standard error</p>\n");
}

/// What the CPU column measured: the server's processes, or the whole host when none
/// were followed (--monitor-process/--monitor-pid after `--`).
fn cpu_title(sw: &Sweep) -> String {
    match sw.meta.get("cpu_basis").and_then(|b| b.as_str()) {
        Some(basis) if basis != "host" => format!("Server CPU ({basis})"),
        _ => "Host CPU (the whole machine: no server process was followed)".to_string(),
    }
}

fn metric_charts(
    sw: &Sweep,
    param: &str,
    markers: &[Marker],
    usl: Option<&serde_json::Value>,
) -> Vec<Chart> {
    let vs = |title: &str, unit: &str, cols: &[(&str, &str)]| {
        versus(sw, param, markers, title, unit, cols)
    };
    let mut thr = vs(
        "Throughput",
        "messages per second",
        &[("throughput_per_s", "throughput")],
    );
    if let Some(curve) = usl.and_then(|u| usl_curve(sw, u)) {
        thr.push(curve);
    }
    vec![
        thr,
        vs(
            "Latency",
            "latency (ms)",
            &[
                ("latency_mean_ms", "mean"),
                ("latency_p50_ms", "p50"),
                ("latency_p99_ms", "p99"),
                ("ping_ms", "ping probe"),
            ],
        ),
        vs("Errors", "errors", &[("errors", "errors")]),
        vs(&cpu_title(sw), "percent (%)", &[("cpu_pct", "cpu")]),
        vs(
            "Network and disk",
            "KB per second",
            &[("net_kbps", "network"), ("disk_kbps", "disk")],
        ),
        vs("Disk latency", "milliseconds", &[("disk_ms", "ms per I/O")]),
    ]
}

/// One chart of the given columns against the parameter: the mean per value as a line,
/// plus each repeat as points when a value was measured more than once.
fn versus(
    sw: &Sweep,
    param: &str,
    markers: &[Marker],
    title: &str,
    unit: &str,
    cols: &[(&str, &str)],
) -> Chart {
    let mut c = Chart::new(title, XKind::Linear, param, unit);
    c.markers = markers.to_vec();
    for (col, name) in cols {
        if let Some(p) = sw.table.xy("value", col) {
            let repeats = p.len() > means(&p).len();
            c.push(Series::line(*name, means(&p)).styled(if repeats {
                Style::Line
            } else {
                Style::LinePoints
            }));
            if repeats {
                let i = c.series.len() - 1;
                c.push(
                    Series::line(format!("{name} (each repeat)"), p)
                        .styled(Style::Points)
                        .colored(i),
                );
            }
        }
    }
    c
}

/// The fitted Universal Scalability Law throughput from 1 to the largest swept value.
fn usl_curve(sw: &Sweep, u: &serde_json::Value) -> Option<Series> {
    let (Some(s), Some(k), Some(l)) = (f(u, "sigma"), f(u, "kappa"), f(u, "lambda")) else {
        return None;
    };
    let xs = sw.table.col("value").unwrap_or_default();
    let hi = xs
        .iter()
        .copied()
        .filter(|x| x.is_finite())
        .fold(0.0, f64::max);
    let curve = (0..=100)
        .map(|i| {
            let n = 1.0 + (hi - 1.0).max(0.0) * i as f64 / 100.0;
            (n, l * n / (1.0 + s * (n - 1.0) + k * n * (n - 1.0)))
        })
        .collect();
    Some(Series::line("USL fit", curve).styled(Style::Dashed))
}

/// `--find-max`: the answer, and every probe in the order it ran with why it failed.
fn find_max(b: &mut String, sw: &Sweep) {
    let Some(fm) = sw.meta.get("find_max").filter(|f| f.is_object()) else {
        return;
    };
    let name = fm["param"].as_str().unwrap_or("load");
    let unit = if name == "rate" { "/s" } else { "" };
    let at = |k: &str| fm[k].as_u64().map(|v| format!("{v}{unit}"));
    let objective: Vec<&str> = fm["objective"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|o| o.as_str())
        .collect();
    let _ = writeln!(
        b,
        "<h2>Highest {} that meets the objective</h2><p>Objective: <code>{}</code>, precision {}%.</p>",
        esc(name),
        esc(&objective.join(", ")),
        fm["precision_pct"]
    );
    let answer = match (at("answer"), at("highest_pass")) {
        (Some(a), _) => format!(
            "<p class=\"ok\"><b>{}</b>{}{}</p>",
            esc(&a),
            if fm["held"] == true {
                ", confirmed by a hold"
            } else {
                ""
            },
            at("lowest_fail").map_or(String::new(), |f| format!("; {} failed", esc(&f)))
        ),
        (None, Some(p)) => format!(
            "<p class=\"warn\">not confirmed: {} passed as a probe, but its hold did not</p>",
            esc(&p)
        ),
        (None, None) => "<p class=\"warn\">no load met the objective</p>".to_string(),
    };
    b.push_str(&answer);
    if let Some(g) = at("generator_limit") {
        let _ = writeln!(
            b,
            "<p class=\"warn\">from {} the generator was the limit, not the server: those probes say nothing about it (run with --shard to go higher).</p>",
            esc(&g)
        );
    }
    b.push_str("<table><tr><th class=\"n\">#</th><th>kind</th><th class=\"n\">value</th><th>result</th><th class=\"n\">throughput/s</th><th class=\"n\">p99 ms</th><th>why</th></tr>");
    for p in fm["probes"].as_array().into_iter().flatten() {
        let outcome = p["outcome"].as_str().unwrap_or("");
        let _ = write!(
            b,
            "<tr><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}{unit}</td><td class=\"{}\">{}</td><td class=\"n\">{:.1}</td><td class=\"n\">{:.2}</td><td>{}</td></tr>",
            p["n"],
            esc(p["kind"].as_str().unwrap_or("")),
            p["value"],
            if outcome == "pass" { "ok" } else { "warn" },
            esc(outcome),
            p["throughput_per_s"].as_f64().unwrap_or(0.0),
            p["p99_ms"].as_f64().unwrap_or(0.0),
            esc(p["why"].as_str().unwrap_or(""))
        );
    }
    b.push_str("</table>\n");
}

/// The table from the text cells, so that non-numeric columns (param) show.
fn steps_table(b: &mut String, sw: &Sweep) {
    let text = std::fs::read_to_string(sw.dir.join("sweep.csv")).unwrap_or_default();
    b.push_str("<h2>Steps</h2><div class=\"wide\"><table>");
    for (i, line) in text.lines().filter(|l| !l.trim().is_empty()).enumerate() {
        b.push_str("<tr>");
        for cell in line.split(',') {
            if i == 0 {
                let _ = write!(b, "<th class=\"n\">{}</th>", esc(cell));
            } else {
                let _ = write!(b, "<td class=\"n\">{}</td>", esc(cell));
            }
        }
        b.push_str("</tr>");
    }
    b.push_str("</table></div>\n");
}

fn step_links(b: &mut String, sw: &Sweep) {
    if sw.steps.is_empty() {
        return;
    }
    b.push_str("<p>Step results: ");
    for (i, s) in sw.steps.iter().enumerate() {
        let name = s
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if i > 0 {
            b.push_str(", ");
        }
        if s.join("report.html").is_file() {
            let _ = write!(b, "<a href=\"{0}/report.html\">{0}</a>", esc(&name));
        } else {
            b.push_str(&esc(&name));
        }
    }
    b.push_str("</p>\n");
}
