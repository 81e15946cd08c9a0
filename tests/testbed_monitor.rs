//! Monitoring a real Postfix (scripts/testbed): its processes by name and its queue
//! directory, during a load and a small sweep that waits for the queue to drain between
//! steps. Skipped, saying so, when the test bed cannot be started.

mod common;

use std::process::Command;

use common::bed::Bed;
use serde_json::Value;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

fn spate(args: &[&str]) -> String {
    let o = Command::new(SPATE).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{args:?}: {}\n{stdout}",
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

#[test]
fn postfix_processes_and_queue_are_monitored() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &["--users", "20", "--port-offset", "auto"],
    ) else {
        return;
    };
    let smtp = bed.var("SPATE_SMTP").to_string();
    let queue = bed.var("SPATE_QUEUE_DIR").to_string();
    let to = format!("--to-file={}", bed.var("SPATE_USERS_FILE"));
    let out = tmp.path().join("r");
    spate(&[
        "smtp",
        &smtp,
        &to,
        "--users",
        "8",
        "--count",
        "400",
        "--monitor-process",
        "master,smtpd,cleanup,qmgr",
        "--monitor-queue",
        &queue,
        "-o",
        out.to_str().unwrap(),
    ]);
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["totals"]["accepted"], 400);
    let m = &s["extra"]["monitor"];
    eprintln!("monitor maxima: {}", m["max"]);
    let max = |c: &str| {
        m["max"][c]
            .as_f64()
            .unwrap_or_else(|| panic!("no column {c}: {m}"))
    };
    // Postfix's master, its smtpd processes doing the work, cleanup and qmgr.
    assert!(max("proc.master.count") >= 1.0, "{m}");
    assert!(max("proc.smtpd.count") >= 1.0, "{m}");
    assert!(max("proc.smtpd.cpu_pct") > 0.0, "{m}");
    assert!(max("proc.smtpd.rss_mb") > 1.0, "{m}");
    assert!(
        max("proc.cleanup.count") >= 1.0 && max("proc.qmgr.count") >= 1.0,
        "{m}"
    );
    for q in ["incoming", "active", "deferred", "hold"] {
        max(&format!("queue.postfix.{q}"));
    }
    assert_eq!(
        m["cpu_basis"],
        "proc.master+proc.smtpd+proc.cleanup+proc.qmgr"
    );

    // A small sweep that waits for the queue to drain between steps.
    let sw = tmp.path().join("sw");
    let stdout = spate(&[
        "sweep",
        "--users",
        "1,4",
        "--until-idle",
        "--idle-max",
        "30s",
        "--cool-down",
        "0s",
        "--count-per-user",
        "50",
        "-o",
        sw.to_str().unwrap(),
        "--",
        &smtp,
        &to,
        "--monitor-process",
        "smtpd,cleanup",
        "--monitor-queue",
        &queue,
    ]);
    eprintln!("{stdout}");
    assert!(stdout.contains("CPU: proc.smtpd+proc.cleanup"), "{stdout}");
    let csv = std::fs::read_to_string(sw.join("sweep.csv")).unwrap();
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 2);
    let step: Value = serde_json::from_str(
        &std::fs::read_to_string(sw.join("step-02-users-4/summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(step["totals"]["accepted"], 200, "4 users × 50 messages");
    for r in &rows {
        assert!(r[13].parse::<f64>().unwrap() > 0.0, "Postfix CPU in {r:?}");
        assert_eq!(r[9], "0", "errors in {r:?}");
    }
}
