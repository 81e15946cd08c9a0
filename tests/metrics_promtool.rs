//! The `--metrics-listen` exposition passes Prometheus's own linter (`promtool check
//! metrics`): every counter of summary.json (each set, so each family is written), the
//! error counts and the phase histograms. A name with a unit Prometheus does not use
//! (`spate_connect_retransmit_us_total`) once failed it.

mod common;

use std::io::Write as _;
use std::process::{Command, Stdio};

use spate::metrics::{Counters, ErrorKey, ErrorKind, Phase, Shard};
use spate::ui::metrics::text::{render, Gauges, Labels};

#[test]
fn the_exposition_passes_promtool() {
    if !common::have("promtool") {
        return;
    }
    // Every counter field at once: 1 µs ... so that each is rendered with a value.
    let fields = match serde_json::to_value(Counters::default()).unwrap() {
        serde_json::Value::Object(m) => m,
        _ => unreachable!(),
    };
    let all: serde_json::Map<String, serde_json::Value> =
        fields.keys().map(|k| (k.clone(), 1500.into())).collect();
    let mut totals = Shard {
        counters: serde_json::from_value(serde_json::Value::Object(all)).unwrap(),
        ..Shard::default()
    };
    totals.record(Phase::Transaction, 1200);
    totals.record(Phase::Connect, 80);
    totals.error(
        ErrorKey {
            phase: Phase::Rcpt,
            kind: ErrorKind::Permanent,
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
