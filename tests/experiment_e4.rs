//! Experiment E4 (scalability) as scenarios/e4-scalability.toml, in its short, bounded
//! variant (users 1, 2, 4 with 30 messages each) against the real test bed: E4's table
//! with a row per user count, the server's processes monitored, a ping probe of 10
//! messages before each step, and the sweep's HTML report with its charts.

mod common;

use std::path::Path;
use std::process::Command;

use common::bed::Bed;
use serde_json::Value;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

fn csv(path: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| l.split(',').map(String::from).collect())
        .collect()
}

#[test]
fn e4_scalability() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(&tmp.path().join("bed"), &["--port-offset", "auto"]) else {
        return;
    };
    let out = tmp.path().join("e4");
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/e4-scalability.toml");
    let o = Command::new(SPATE)
        .args(["run", file.to_str().unwrap()])
        .args(["--set", "users=1,2,4", "--set", "per_user=30"])
        .args(["--set", "idle_max=60s", "--out", out.to_str().unwrap()])
        .envs(&bed.env)
        // Not on PATH: the probe hook must find spate through $SPATE.
        .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    let stderr = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "{stdout}\n{stderr}");

    // E4's table on stdout, one column per user count, with the probe's line.
    for line in [
        "test time [s]",
        "app latency [ms]",
        "throughput [msg/s]",
        "network [KiB/s]",
        "disk [KiB/s]",
        "disk latency [ms]",
        "CPU [%]",
        "ping latency [ms]",
    ] {
        assert!(stdout.contains(line), "no {line:?} in\n{stdout}");
    }
    assert!(stdout.contains("CPU: proc.master+proc.smtpd"), "{stdout}");

    let sweep = out.join("01-e4");
    let rows = csv(&sweep.join("sweep.csv"));
    let col = |name: &str| {
        rows[0]
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name}: {:?}", rows[0]))
    };
    assert_eq!(rows.len(), 4, "{rows:?}");
    let users: Vec<&str> = rows[1..].iter().map(|r| r[col("value")].as_str()).collect();
    assert_eq!(users, ["1", "2", "4"]);
    let num = |r: &[String], c: &str| -> f64 {
        r[col(c)]
            .parse()
            .unwrap_or_else(|_| panic!("{c} in {r:?} is not a number"))
    };
    for r in &rows[1..] {
        assert_eq!(r[col("errors")], "0", "{r:?}");
        for c in [
            "test_time_s",
            "throughput_per_s",
            "latency_mean_ms",
            "net_kbps",
            "cpu_pct",
            "ping_ms",
        ] {
            assert!(num(r, c) > 0.0, "{c} in {r:?}");
        }
        // The disk columns are there (the bed's queue and mailboxes are on a disk).
        assert!(
            num(r, "disk_kbps") >= 0.0 && num(r, "disk_ms") >= 0.0,
            "{r:?}"
        );
    }

    for (i, n) in [1u64, 2, 4].iter().enumerate() {
        let step = sweep.join(format!("step-{:02}-users-{n}", i + 1));
        let s: Value =
            serde_json::from_str(&std::fs::read_to_string(step.join("summary.json")).unwrap())
                .unwrap();
        assert_eq!(s["totals"]["accepted"], 30 * n, "{n} users × 30 messages");
        // The server's own processes were followed (not just the host).
        let m = &s["extra"]["monitor"];
        assert!(
            m["cpu_basis"].as_str().unwrap().contains("proc.smtpd"),
            "{m}"
        );
        for p in ["smtpd", "cleanup", "qmgr", "lmtp", "dovecot"] {
            let n = m["max"][format!("proc.{p}.count")].as_f64().unwrap_or(0.0);
            assert!(n >= 1.0, "no {p} process seen: {m}");
        }
        // The probe: smtpping's 10 messages without pause, every one answered.
        let ping = std::fs::read_to_string(step.join("ping.txt")).unwrap();
        assert_eq!(ping.lines().filter(|l| l.starts_with("seq=")).count(), 10);
        assert!(ping.contains("10 sent, 0 failed"), "{ping}");
        let p: Value =
            serde_json::from_str(&std::fs::read_to_string(step.join("ping.json")).unwrap())
                .unwrap();
        assert_eq!(
            (p["count"].as_u64(), p["failed"].as_u64()),
            (Some(10), Some(0))
        );
        assert_eq!(p["total"]["count"], 10, "{p}");
        for phase in [
            "connect", "banner", "helo", "mailfrom", "rcptto", "data", "datasent",
        ] {
            assert!(
                p["phases"][phase]["mean_ms"].as_f64().is_some(),
                "{phase}: {p}"
            );
        }
    }
    // Every message had the attachment: 10 200-byte body + 9 167 bytes in base64.
    let sent = std::fs::read_to_string(sweep.join("step-01-users-1/sent.log")).unwrap();
    let sizes: Vec<u64> = sent
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("seq"))
        .map(|l| l.split('\t').nth(3).unwrap().parse().unwrap())
        .collect();
    assert_eq!(sizes.len(), 30);
    assert!(sizes.iter().all(|&b| b > 10_200 + 9_167), "{sizes:?}");

    // The charts: the sweep page of the report, every metric against the user count.
    let html = std::fs::read_to_string(sweep.join("report.html")).unwrap();
    for chart in ["Throughput", "Latency", "Server CPU", "Network and disk"] {
        assert!(html.contains(chart), "no {chart} chart");
    }
    assert!(html.matches("<svg").count() >= 5);
    assert!(
        html.contains("ping probe"),
        "the probe's latency is charted"
    );
}
