//! The monitoring part of the text summary: one line per column group with mean / max of
//! each figure, memory slopes and throughput drift.

use serde_json::Value;

use crate::results::Summary;

fn num(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Empty when the run was not monitored.
pub fn render(s: &Summary) -> String {
    let Some(m) = s.extra.get("monitor") else {
        return String::new();
    };
    let cols: Vec<&str> = m["columns"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = format!(
        "\n  server monitoring: mean / max of {} samples (monitor.csv; sampling cost {}% of a core)\n",
        m["samples"],
        m["cost_cpu_pct_of_core"]
    );
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for c in &cols {
        let Some((g, metric)) = c.rsplit_once('.') else {
            continue;
        };
        match groups.iter_mut().find(|(name, _)| *name == g) {
            Some((_, v)) => v.push(metric),
            None => groups.push((g, vec![metric])),
        }
    }
    for (g, metrics) in &groups {
        let mut line = format!("    {g:<18}");
        for metric in metrics {
            let key = format!("{g}.{metric}");
            let mean = m["mean"][&key].as_f64().unwrap_or(0.0);
            let max = m["max"][&key].as_f64().unwrap_or(0.0);
            line.push_str(&format!(" {metric} {}/{}", num(mean), num(max)));
        }
        out.push_str(&line);
        out.push('\n');
    }
    if let Some(sl) = m["memory_slope_mb_per_h"].as_object() {
        if !sl.is_empty() {
            let parts: Vec<String> = sl
                .iter()
                .map(|(g, v)| format!("{g} {:+.1}", v.as_f64().unwrap_or(0.0)))
                .collect();
            out.push_str(&format!(
                "    memory slope (MB/hour per process, after {} s): {}\n",
                num(m["memory_slope_after_s"].as_f64().unwrap_or(0.0)),
                parts.join(", ")
            ));
        }
    }
    if let Some(d) = m["throughput_drift"].as_object() {
        let f = |k: &str| d.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        out.push_str(&format!(
            "    throughput drift: {:+.1}% (first {} s {}/s, last {} s {}/s)\n",
            f("change_pct"),
            num(f("window_s")),
            num(f("first_per_s")),
            num(f("window_s")),
            num(f("last_per_s"))
        ));
    }
    out
}
