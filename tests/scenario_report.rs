//! `report = [...]` columns of a scenario: one row per run, one per `[matrix]` combination
//! (matrix.csv), checked against the steps' own summaries.

mod common;

use common::spate;

const SCENARIO: &str = r#"
description = "report columns over a matrix"
report = [
    "accepted = inject.totals.accepted",
    "connections per message = inject.totals.connections / inject.totals.accepted",
    "p50 [ms] = p50(inject.transaction) / 1000",
]

[matrix]
per_conn = [1, 5]

[server]
smtp = "127.0.0.1:0"
discard = true

[[step]]
name = "inject"
command = "smtp"
target = "${server.smtp}"
count = 100
messages-per-connection = "${per_conn}"
quiet = true
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matrix_rows_carry_the_report_columns() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.toml");
    std::fs::write(&file, SCENARIO).unwrap();
    let out = dir.path().join("out");
    let o = spate(&[
        "run",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    let csv = std::fs::read_to_string(out.join("matrix.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv.lines().map(|l| l.split(',').collect()).collect();
    assert_eq!(
        rows[0],
        vec![
            "per_conn",
            "accepted",
            "connections per message",
            "p50 [ms]",
            "exit"
        ]
    );
    assert_eq!(rows.len(), 3, "{csv}");
    // One connection per message, then one per five.
    assert_eq!(rows[1][..3], ["1", "100", "1"]);
    assert_eq!(rows[2][..3], ["5", "100", "0.2000"]);
    // The p50 column is the step's own summary figure, in ms.
    let s: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("per_conn=1/01-inject/summary.json")).unwrap(),
    )
    .unwrap();
    let p50_us = s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == "transaction")
        .unwrap()["p50_us"]
        .as_f64()
        .unwrap();
    let shown: f64 = rows[1][3].parse().unwrap();
    assert!(
        (shown - p50_us / 1000.0).abs() < 0.001,
        "{shown} vs {p50_us}"
    );
    assert!(o.stdout.contains("connections per message"), "{}", o.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_report_column_is_a_validation_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        SCENARIO.replace("inject.totals.connections", "injct.totals.connections"),
    )
    .unwrap();
    let o = spate(&["run", file.to_str().unwrap(), "--dry-run"]).await;
    assert_eq!(o.code, Some(2), "{}", o.stdout);
    let line = o.stderr.trim();
    assert!(line.contains("bad.toml:5:5"), "{line}");
    assert!(line.contains("did you mean \"inject\""), "{line}");
    assert_eq!(line.lines().count(), 1);
}
