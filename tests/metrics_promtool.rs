//! The `--metrics-listen` exposition passes Prometheus's own linter (`promtool check
//! metrics`): every counter of summary.json (each set, so each family is written), the
//! error counts and the phase histograms. A name with a unit Prometheus does not use
//! (`spate_connect_retransmit_us_total`) once failed it.

mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};

use spate::metrics::{Counters, ErrorKey, ErrorKind, Phase, Shard};
use spate::ui::metrics::text::{render, Gauges, Labels};

/// The exposition of a run with every counter set, an error and two phases.
fn exposition() -> String {
    // Every counter field at once: 1 µs ... so that each is rendered with a value.
    let fields = match serde_json::to_value(Counters::default()).unwrap() {
        serde_json::Value::Object(m) => m,
        _ => unreachable!(),
    };
    let all: serde_json::Map<String, serde_json::Value> =
        fields.keys().map(|k| (k.clone(), 1500.into())).collect();
    let mut totals = Shard::default();
    totals.counters = serde_json::from_value(serde_json::Value::Object(all)).unwrap();
    totals.record(spate::session::smtp::phase::TRANSACTION, 1200);
    totals.record(Phase::CONNECT, 80);
    totals.error(
        ErrorKey {
            phase: spate::session::smtp::phase::RCPT,
            kind: ErrorKind::PERMANENT,
            code: 550,
            detail: None,
            text: "no such user".into(),
        },
        || "550 no such user".into(),
    );
    let mut text = String::new();
    let g = Gauges {
        active: 3,
        elapsed_s: 2.5,
        finished: false,
    };
    render(&mut text, &Labels::new("r1", (1, 4), "smtp"), &totals, g);
    text
}

#[test]
fn the_exposition_passes_promtool() {
    if !common::have("promtool") {
        return;
    }
    let text = exposition();
    assert!(
        text.contains("spate_connect_retransmit_seconds_total"),
        "{text}"
    );
    assert!(!text.contains("_us_total"), "{text}");

    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        o.status.success() && said.trim().is_empty(),
        "promtool: {said}\n{text}"
    );
}

/// examples/grafana/spate.json queries only what spate exposes: every metric name in its
/// expressions is a family of the exposition (a histogram's with its `_bucket`, `_sum`,
/// `_count`), and every label it groups or selects by is one the series carry.
#[test]
fn the_grafana_dashboard_asks_only_for_what_spate_exposes() {
    let text = exposition();
    let mut names = std::collections::BTreeSet::new();
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# TYPE ") {
            let mut w = rest.split_whitespace();
            let (name, kind) = (w.next().unwrap(), w.next().unwrap());
            names.insert(name.to_string());
            if kind == "histogram" {
                for s in ["_bucket", "_sum", "_count"] {
                    names.insert(format!("{name}{s}"));
                }
            }
        }
    }
    let labels: std::collections::BTreeSet<String> = spate::monitor::prom::parse(&text)
        .iter()
        .flat_map(|l| {
            let s = l.series.to_string();
            let inner = s
                .split_once('{')
                .map(|(_, r)| r.trim_end_matches('}').to_string());
            inner
                .unwrap_or_default()
                .split(',')
                .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.to_string()))
                .collect::<Vec<_>>()
        })
        .collect();
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/grafana/spate.json");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let mut exprs: Vec<String> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().clone())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    exprs.extend(
        dash["templating"]["list"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|v| v["query"].as_str())
            .filter(|q| q.contains("spate_"))
            .map(str::to_string),
    );
    assert!(exprs.len() >= 6, "{exprs:?}");
    let word = |s: &str, at: usize| {
        s[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect::<String>()
    };
    let mut used = 0;
    for e in &exprs {
        for (at, _) in e.match_indices("spate_") {
            let name = word(e, at);
            assert!(
                names.contains(&name),
                "{name} (in {e}) is not exposed: {names:?}"
            );
            used += 1;
        }
        // Labels: `by (a, b)` and `{a=~"…", b="…"}` (`le` is Prometheus's own).
        let mut keys = Vec::new();
        for (at, _) in e.match_indices("by (") {
            let inner = &e[at + 4..at + 4 + e[at + 4..].find(')').unwrap()];
            keys.extend(inner.split(',').map(|k| k.trim().to_string()));
        }
        for (at, _) in e.match_indices('{') {
            let inner = &e[at + 1..at + 1 + e[at + 1..].find('}').unwrap()];
            keys.extend(inner.split(',').filter_map(|kv| {
                let k = word(kv.trim(), 0);
                (!k.is_empty()).then_some(k)
            }));
        }
        for k in keys {
            assert!(
                k == "le" || labels.contains(&k),
                "label {k} (in {e}): {labels:?}"
            );
        }
    }
    assert!(used >= 8, "{exprs:?}");
    for n in [
        "spate_accepted_total",
        "spate_phase_seconds_bucket",
        "spate_errors_total",
        "spate_active_sessions",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(n)),
            "the dashboard does not show {n}"
        );
    }
}
