//! Long-run safety, compressed: a server that leaks a known amount per message is caught
//! by the memory slope while spate's own memory stays flat, and a run survives its server
//! being restarted underneath it.

mod common;

use common::summary;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use spate::serve;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

async fn spate(args: Vec<String>) -> common::Output {
    common::run_tool(SPATE, args, Duration::from_secs(90)).await
}

struct Kill(Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaking_server_is_caught_and_spate_stays_flat() {
    // `spate serve` in its own process, keeping 40 kB per accepted message.
    let mut child = Command::new(SPATE)
        .args([
            "serve",
            "--smtp",
            "127.0.0.1:0",
            "--discard",
            "--leak-per-message",
            "40k",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    // Kept open to the end: the server prints more lines, and a closed pipe would kill it.
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    stdout.read_line(&mut first).unwrap();
    let server = Kill(child);
    let addr = first
        .split_whitespace()
        .last()
        .expect("spate serve prints its address")
        .to_string();
    let pid = server.0.id();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("soak");
    // 100 messages/s × 40 kB = 4 MB/s, about 14 GB/hour.
    let o = spate(
        [
            "smtp",
            &addr,
            "--rate",
            "100/s",
            "--duration",
            "12s",
            "--monitor-pid",
            &pid.to_string(),
            "--leak-warn",
            "100MB/h",
            "-o",
            out.to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    )
    .await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    let s = summary(&out);
    let m = &s["extra"]["monitor"];
    let slope = m["memory_slope_mb_per_h"][format!("proc.pid{pid}")]
        .as_f64()
        .unwrap();
    let accepted = s["totals"]["accepted"].as_f64().unwrap();
    let expected = accepted / s["elapsed_s"].as_f64().unwrap() * 40.0 / 1024.0 * 3600.0;
    assert!(
        slope > 0.6 * expected && slope < 1.5 * expected,
        "slope {slope} MB/h, leak rate {expected} MB/h"
    );
    // Throughput at the start and the end of the run (its first and last tenth).
    let d = &m["throughput_drift"];
    let (first, last) = (
        d["first_per_s"].as_f64().unwrap(),
        d["last_per_s"].as_f64().unwrap(),
    );
    assert!(
        (70.0..=130.0).contains(&first) && (70.0..=130.0).contains(&last),
        "{d}"
    );
    assert!((d["window_s"].as_f64().unwrap() - 1.2).abs() < 0.3, "{d}");
    let warnings: Vec<String> = s["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect();
    assert!(
        warnings
            .iter()
            .any(|w| w.contains(&format!("proc.pid{pid} memory grows"))),
        "{warnings:?}"
    );
    // spate itself: no warning, and the same resident size at the end as after warm-up.
    assert!(
        !warnings.iter().any(|w| w.contains("self.spate")),
        "{warnings:?}"
    );
    let own = &m["self_rss_mb"];
    let (after, end) = (
        own["after_warmup"].as_f64().unwrap(),
        own["end"].as_f64().unwrap(),
    );
    assert!(
        after > 1.0 && end - after < 3.0,
        "spate RSS {after} → {end} MB"
    );
    assert!(o.stdout.contains("memory grows"), "{}", o.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_survives_a_server_restart() {
    let mut cfg = serve::Config::loopback();
    cfg.shutdown_grace = Duration::from_millis(300);
    let first = serve::start(cfg.clone()).await.unwrap();
    let addr = first.addrs.smtp.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let args: Vec<String> = [
        "smtp",
        &addr.to_string(),
        "--rate",
        "100/s",
        "--duration",
        "6s",
        "--timeout",
        "2s",
        "-o",
        out.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let run = tokio::spawn(spate(args));
    // Restart once the run is under way: 100 messages in (about 1 s at 100/s).
    let stats1 = first.stats.clone();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while stats1.messages() < 100 {
        assert!(
            std::time::Instant::now() < deadline,
            "the run never got going"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.shutdown().await;
    // The outage itself: one second with nothing listening (not a synchronisation).
    tokio::time::sleep(Duration::from_secs(1)).await;
    cfg.listen.smtp = Some(addr);
    let second = serve::start(cfg).await.expect("the same port again");
    let o = run.await.unwrap();
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    let s = summary(&out);
    let t = &s["totals"];
    let (acc, failed, rej) = (
        t["accepted"].as_u64().unwrap(),
        t["failed"].as_u64().unwrap(),
        t["rejected"].as_u64().unwrap(),
    );
    assert_eq!(s["reconciles"], true);
    assert!(failed + rej >= 20, "failures in the gap: {t}");
    assert!(
        second.stats.messages() >= 150,
        "accepted again after the restart: {t}"
    );
    assert_eq!(acc, stats1.messages() + second.stats.messages(), "{t}");
    second.shutdown().await;
}

/// `--detail`: after it, intervals.csv, the histogram logs, errors.jsonl and monitor.csv
/// have a row per minute, so a soak of days stays bounded. With `--detail 2s`, a 4 s run
/// has 2 one-second rows and then one (partial) minute, and the counts still add up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_detail_period_every_file_has_a_row_per_minute() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let args: Vec<String> = [
        "smtp",
        &addr,
        "--rate",
        "50/s",
        "--duration",
        "4s",
        "--detail",
        "2s",
        "--monitor",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let o = spate(args).await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    let rows = |f: &str| {
        let text = std::fs::read_to_string(out.join(f)).unwrap();
        let t: Vec<f64> = text
            .lines()
            .skip(1)
            .filter(|l| !l.starts_with('#') && !l.starts_with('"'))
            .map(|l| l.split(',').next().unwrap().parse().unwrap())
            .collect();
        t
    };
    for f in ["intervals.csv", "monitor.csv"] {
        let t = rows(f);
        assert_eq!(t.len(), 3, "{f}: {t:?}");
        assert!(
            (t[0] - 1.0).abs() < 0.1 && (t[1] - 2.0).abs() < 0.1,
            "{f}: {t:?}"
        );
        assert!(t[2] > 3.5, "{f}: the rest of the run in one row: {t:?}");
    }
    // The hlog's rows start at each row's start: 0, 1, then 2 for the minute.
    let starts = rows("transaction.hlog");
    assert_eq!(starts.len(), 3, "{starts:?}");
    let s = summary(&out);
    let sums = common::column_sums(&out, &["accepted", "attempted"]);
    assert_eq!(sums[0], s["totals"]["accepted"].as_u64().unwrap());
    assert_eq!(sums[1], s["totals"]["attempted"].as_u64().unwrap());
    assert_eq!(sums[1], 200);
    server.shutdown().await;
}
