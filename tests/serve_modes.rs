//! `spate serve` breaks as real servers do, and counts what it did: a slow reader (small
//! receive window, paced reads) and a session closed with 421 after N commands. The
//! client's counts are checked against the server's.

mod common;

use std::time::Duration;

use common::{run_blocking, serve_process, summary, SPATE};

fn stats(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn phase_p50(s: &serde_json::Value, name: &str) -> u64 {
    s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == name)
        .map_or(0, |p| p["p50_us"].as_u64().unwrap())
}

#[test]
fn a_slow_reader_holds_each_message_for_its_size_over_the_rate() {
    let (_server, addr) = serve_process("--smtp", &["--slow-read".as_ref(), "20KB/s".as_ref()]);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let o = run_blocking(
        SPATE,
        &[
            "smtp",
            &addr,
            "-n",
            "6",
            "-u",
            "2",
            "--size",
            "10KB",
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(60),
    );
    assert!(o.ok, "{o:?}");
    let s = summary(&out);
    assert_eq!(s["totals"]["accepted"], 6);
    // 10 KiB read at 20 KB/s: half a second at least before the final reply.
    assert!(phase_p50(&s, "transaction") >= 400_000, "{}", s["phases"]);
}

#[test]
fn a_session_closed_after_n_commands_is_a_421_counted_on_both_sides() {
    let tmp = tempfile::tempdir().unwrap();
    let stats_file = tmp.path().join("stats.json");
    let (server, addr) = serve_process(
        "--smtp",
        &[
            "--close-after".as_ref(),
            "7".as_ref(),
            "--stats-file".as_ref(),
            stats_file.as_os_str(),
        ],
    );
    let out = tmp.path().join("r");
    let o = run_blocking(
        SPATE,
        &[
            "smtp",
            &addr,
            "-n",
            "60",
            "-u",
            "2",
            "--messages-per-connection",
            "0",
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(60),
    );
    assert!(o.ended(), "{o:?}");
    // A graceful stop writes the final counts to the stats file.
    let mut server = server;
    // SAFETY: kill(2) on the PID of the server this test started.
    unsafe { libc::kill(server.0.id() as i32, libc::SIGTERM) };
    let _ = server.0.wait();
    let s = summary(&out);
    let t = &s["totals"];
    let refused_421: u64 = s["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["code"] == 421)
        .map(|e| e["count"].as_u64().unwrap())
        .sum();
    assert!(refused_421 > 0, "{}", s["errors"]);
    assert_eq!(
        t["accepted"].as_u64().unwrap() + t["rejected"].as_u64().unwrap(),
        60,
        "{t}"
    );
    // The server's own count: every 421 a unit saw, and at most one per session more (a
    // QUIT at the run's end that came over the limit).
    let closes = stats(&stats_file)["faults"]["connect:close"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        closes >= refused_421 && closes <= refused_421 + 2,
        "{closes} vs {refused_421}"
    );
}
