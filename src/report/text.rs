//! The text summary printed at the end of a run (and by `spate report --text`).

use std::fmt::Write;
use std::time::Duration;

use crate::results::Summary;
use crate::units::fmt_duration;

fn d(us: u64) -> String {
    fmt_duration(Duration::from_micros(us))
}

/// A number as people read it in a table: at most 4 significant digits after the point;
/// `-` for a value that could not be had.
pub fn table_number(v: Option<f64>) -> String {
    // An empty sum is -0.0 (f64's Sum starts there): nothing counted shows as 0, never "-0".
    let v = v.map(|v| if v == 0.0 { 0.0 } else { v });
    match v {
        None => "-".into(),
        Some(v) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
        Some(v) if v.abs() >= 100.0 => format!("{v:.1}"),
        Some(v) if v.abs() >= 1.0 => format!("{v:.3}"),
        Some(v) => format!("{v:.4}"),
    }
}

pub fn render(s: &Summary) -> String {
    let mut o = String::new();
    headline(&mut o, s);
    phases(&mut o, s);
    errors(&mut o, s);
    footer(&mut o, s);
    o
}

/// The run, its counts, and its rates.
fn headline(o: &mut String, s: &Summary) {
    let c = &s.totals;
    let _ = writeln!(
        o,
        "\n{} load on {} — run {}{}",
        s.protocol.to_uppercase(),
        s.target,
        s.run_id,
        match (s.complete, s.interrupted) {
            (false, _) =>
                " (INCOMPLETE: stopped before it could finish; figures up to its last second)",
            (true, true) if s.interrupted_by.as_deref() == Some("threshold") =>
                " (stopped early by a threshold)",
            (true, true) if s.interrupted_by.as_deref() == Some("control") =>
                " (stopped from its live view or spate ctl)",
            (true, true) => " (interrupted)",
            (true, false) => "",
        }
    );
    let _ = writeln!(
        o,
        "  {:.1}s  attempted {}  accepted {}  rejected {}  failed {}{}{}{}",
        s.elapsed_s,
        c.attempted,
        c.accepted,
        c.rejected,
        c.failed,
        if c.indeterminate > 0 {
            format!(
                " ({} indeterminate: sent whole, and no final answer came before the connection or stream died; the server may have them)",
                c.indeterminate
            )
        } else {
            String::new()
        },
        if c.unfinished > 0 {
            format!("  unfinished {}", c.unfinished)
        } else {
            String::new()
        },
        if s.reconciles {
            ""
        } else {
            "  (COUNTS DO NOT RECONCILE)"
        }
    );
    // The protocol's own counts in its words, and lines of its own (what it knows of
    // its units that the other protocols do not).
    let said = crate::session::said(s);
    let _ = writeln!(
        o,
        "  {:.1} {}  {:.1} KiB/s  {}  {}",
        s.messages_per_s,
        s.words().rate,
        s.kbytes_per_s,
        said.counts,
        connections(c)
    );
    if let Some(h) = handshakes(s) {
        let _ = writeln!(o, "  {h}");
    }
    for line in said.lines {
        let _ = writeln!(o, "  {line}");
    }
}

/// The run's TLS handshakes: full and resumed, and the CPU they cost this side, as a
/// share of the generator's (None when nothing spoke TLS).
pub fn handshakes(s: &Summary) -> Option<String> {
    let c = &s.totals;
    let n = c.tls_connections;
    if n == 0 {
        return None;
    }
    if c.tls_cpu_us == 0 {
        return Some(format!(
            "TLS handshakes {n} (full and resumed, and their CPU, not recorded: results of an older spate)"
        ));
    }
    let share = if s.generator_cpu_s > 0.0 {
        format!(
            ", {:.1}% of the generator's CPU",
            c.tls_cpu_us as f64 / 1e4 / s.generator_cpu_s
        )
    } else {
        String::new()
    };
    Some(format!(
        "TLS handshakes {n}: {} full, {} resumed; {} of CPU, {:.0} µs each{share}",
        n - c.tls_resumed.min(n),
        c.tls_resumed,
        d(c.tls_cpu_us),
        c.tls_cpu_us as f64 / n as f64,
    ))
}

/// Connections made, over TLS, failed; and those whose SYN had to be sent again, with
/// the time that cost, said as what it is.
fn connections(c: &crate::metrics::Counters) -> String {
    let mut t = format!(
        "connections {} ({} TLS, {} failed)",
        c.connections, c.tls_connections, c.connect_failures
    );
    if c.connect_retransmits > 0 {
        let _ = write!(
            t,
            "\n  connect retransmits {} ({} spent in them): SYNs sent again, unanswered at first — the server's accept queue overflowed (raise its listen backlog, or ramp up with --connect-rate), or something drops SYNs",
            c.connect_retransmits,
            d(c.connect_retransmit_us)
        );
    }
    t
}

/// The latency table, one row per protocol phase.
fn phases(o: &mut String, s: &Summary) {
    if s.phases.is_empty() {
        return;
    }
    // 12 wide, wider only for a longer name (move_emulated, multicast_last).
    let w = s.phases.iter().map(|p| p.phase.len()).fold(12, usize::max);
    let _ = writeln!(
        o,
        "\n  {:<w$} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "phase", "count", "mean", "p50", "p90", "p99", "p99.9", "max"
    );
    for p in &s.phases {
        let _ = writeln!(
            o,
            "  {:<w$} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            p.phase,
            p.count,
            d(p.mean_us as u64),
            d(p.p50_us),
            d(p.p90_us),
            d(p.p99_us),
            d(p.p999_us),
            d(p.max_us)
        );
    }
}

/// The most frequent error classes; the rest are in errors.jsonl.
fn errors(o: &mut String, s: &Summary) {
    if s.errors.is_empty() {
        return;
    }
    let _ = writeln!(o, "\n  {:>7}  error (phase, reply, text)", "count");
    for e in s.errors.iter().take(20) {
        let what = if e.code != 0 {
            format!(
                "{} {}{}",
                e.phase,
                e.code,
                e.enhanced
                    .as_deref()
                    .map(|x| format!(" {x}"))
                    .unwrap_or_default()
            )
        } else {
            format!("{} {}", e.phase, e.kind)
        };
        let _ = writeln!(o, "  {:>7}  {:<18} {}", e.count, what, e.text);
    }
    if s.errors.len() > 20 {
        let _ = writeln!(
            o,
            "  … {} more classes in errors.jsonl",
            s.errors.len() - 20
        );
    }
}

/// What the generator CPU figure covers, when it is not simply the whole process.
pub fn cpu_basis(s: &Summary) -> String {
    match s.generator_cpu_basis.as_str() {
        "" | "process" => String::new(),
        b => format!(" [{b}]"),
    }
}

/// The generator's own CPU cost, then the warnings.
fn footer(o: &mut String, s: &Summary) {
    let c = &s.totals;
    let _ = writeln!(
        o,
        "\n  generator CPU {:.2}s ({:.1}% of {} cores{}){}",
        s.generator_cpu_s,
        s.generator_cpu_pct,
        s.cores,
        if c.accepted > 0 {
            format!(
                ", {:.1} µs/{}",
                s.generator_cpu_s * 1e6 / c.accepted as f64,
                s.words()
                    .rate
                    .trim_end_matches("s/s")
                    .trim_end_matches("/s")
            )
        } else {
            String::new()
        },
        cpu_basis(s)
    );
    if let Some(f) = s
        .extra
        .get("in_flight")
        .filter(|f| f["max"].as_i64() > Some(0))
    {
        let _ = writeln!(
            o,
            "  in flight: mean {:.2}, max {} (units of work at once; the mean is their time in flight over the run's)",
            f["mean"].as_f64().unwrap_or(0.0),
            f["max"]
        );
    }
    if let Some(n) = s
        .extra
        .get("preflight_connections")
        .and_then(|n| n.as_u64())
    {
        let _ = writeln!(
            o,
            "  + {n} connection{} before the load to check that the server answers (closed without a byte; the server counts {})",
            if n == 1 { "" } else { "s" },
            if n == 1 { "it" } else { "them" }
        );
    }
    if let Some(b) = s.extra.get("bound_by") {
        let _ = writeln!(
            o,
            "  bound by: {} — {}",
            b["bound_by"].as_str().unwrap_or("?"),
            b["why"].as_str().unwrap_or("")
        );
    }
    if let Some(f) = s.extra.get("faults") {
        faults(o, f);
    }
    if let Some(c) = s.extra.get("control") {
        told(o, c);
    }
    for w in &s.warnings {
        let _ = writeln!(o, "  warning: {w}");
    }
}

/// What the run was told while it ran (`--web`, `spate ctl`), in order.
fn told(o: &mut String, c: &serde_json::Value) {
    let empty = Vec::new();
    let said: Vec<String> = c["actions"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|a| {
            let what = match (a["action"].as_str().unwrap_or("?"), a["value"].as_f64()) {
                ("rate", Some(v)) => format!("rate {}/s", super::html::num(v)),
                (name, Some(v)) => format!("{name} {v}"),
                (name, None) => name.to_string(),
            };
            format!(
                "{what} at {:.1}s ({})",
                a["t_s"].as_f64().unwrap_or(0.0),
                a["by"].as_str().unwrap_or("?")
            )
        })
        .collect();
    if !said.is_empty() {
        let _ = writeln!(o, "  told while running: {}", said.join(", "));
    }
}

/// Each fault of the run: what was done, and the load before, during and after it.
fn faults(o: &mut String, f: &serde_json::Value) {
    let empty = Vec::new();
    for occ in f["occurrences"].as_array().unwrap_or(&empty) {
        let done: Vec<String> = occ["events"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .map(|e| {
                let (event, what) = (
                    e["event"].as_str().unwrap_or(""),
                    e["what"].as_str().unwrap_or(""),
                );
                // A signal's text says it ("STOP to PID 12"); a command's needs its role.
                let said = match event {
                    "signal" | "continue" => what.to_string(),
                    _ => format!("{event} {what}"),
                };
                let at = e["t_s"].as_f64().unwrap_or(0.0);
                match e["error"].as_str() {
                    None => format!("{said} at {at:.3}s"),
                    Some(err) => format!("{said} at {at:.3}s FAILED: {err}"),
                }
            })
            .collect();
        let (start, end) = (
            occ["start_s"].as_f64().unwrap_or(0.0),
            occ["end_s"].as_f64().unwrap_or(0.0),
        );
        let when = if end > start {
            format!("{start:.1}s-{end:.1}s")
        } else {
            format!("{start:.1}s")
        };
        let _ = writeln!(
            o,
            "\n  fault {} at {when} ({}): {}",
            occ["fault"],
            occ["spec"].as_str().unwrap_or(""),
            if done.is_empty() {
                match occ["applied"].as_str() {
                    Some(by) => format!("applied {by}"),
                    None => "nothing was done (the run ended first?)".to_string(),
                }
            } else {
                done.join("; ")
            }
        );
        let _ = writeln!(
            o,
            "    {:<8}{:>12}{:>9}{:>10}{:>10}{:>10}  errors",
            "", "accepted/s", "failed", "rejected", "p50", "p99"
        );
        for w in ["before", "during", "after"] {
            let a = &occ[w];
            if a.is_null() {
                continue;
            }
            let pct = |k: &str| a[k].as_u64().map_or("-".to_string(), d);
            let errors: Vec<String> = a["errors"]
                .as_object()
                .map(|m| m.iter().map(|(k, n)| format!("{k} {n}")).collect())
                .unwrap_or_default();
            let _ = writeln!(
                o,
                "    {w:<8}{:>12.1}{:>9}{:>10}{:>10}{:>10}  {}",
                a["accepted_per_s"].as_f64().unwrap_or(0.0),
                a["failed"].as_u64().unwrap_or(0),
                a["rejected"].as_u64().unwrap_or(0),
                pct("response_p50_us"),
                pct("response_p99_us"),
                if errors.is_empty() {
                    "none".to_string()
                } else {
                    errors.join(", ")
                }
            );
        }
        let after = |k: &str, what: &str| match occ[k].as_f64() {
            Some(t) => format!("{what} within {t:.1}s of its end"),
            None => format!("{what}: not by the run's end"),
        };
        let _ = writeln!(
            o,
            "    back: {}; {} (interval ends)",
            after("first_accept_after_s", "first unit accepted"),
            after("recovered_after_s", "throughput within 10 % of before")
        );
    }
}
