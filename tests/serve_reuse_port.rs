//! `spate serve --reuse-port`: several server processes share one address and port, and
//! the kernel spreads the connections over them (how more sessions than one process may
//! have files reach one port); without it a second server on the port is refused with
//! one line.

mod common;

use std::time::Duration;

use common::{run_blocking, summary, Kill, SPATE};

/// `spate serve --smtp ADDR --reuse-port --stats-file FILE`, up once FILE is written.
fn server(addr: &str, stats: &std::path::Path) -> Kill {
    let child = std::process::Command::new(SPATE)
        .args(["serve", "--smtp", addr, "--reuse-port", "--stats-file"])
        .arg(stats)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spate serve");
    let k = Kill(child);
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while !stats.exists() {
        assert!(
            std::time::Instant::now() < until,
            "{} never written",
            stats.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    k
}

/// Stops a server with SIGTERM (its stats file is written at exit) and reads them.
fn stop(mut k: Kill, stats: &std::path::Path) -> serde_json::Value {
    // SAFETY: kill(2) on a child this test started and has not reaped.
    assert_eq!(unsafe { libc::kill(k.0.id() as i32, libc::SIGTERM) }, 0);
    assert!(k.0.wait().unwrap().success());
    serde_json::from_str(&std::fs::read_to_string(stats).unwrap()).unwrap()
}

#[test]
fn servers_that_share_a_port_share_its_connections() {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", common::free_port());
    let stats: Vec<_> = (0..2)
        .map(|i| dir.path().join(format!("s{i}.json")))
        .collect();
    let servers: Vec<Kill> = stats.iter().map(|s| server(&addr, s)).collect();

    // A third without the option is refused, in one line.
    let o = run_blocking(
        SPATE,
        &["serve", "--smtp", &addr],
        &[],
        Duration::from_secs(30),
    );
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(
        o.stderr.contains(&format!("cannot listen on {addr}")),
        "{}",
        o.stderr
    );
    assert_eq!(o.stderr.trim().lines().count(), 1, "{}", o.stderr);

    let out = dir.path().join("run");
    let o = run_blocking(
        SPATE,
        &[
            "smtp",
            &addr,
            "-u",
            "6",
            "-n",
            "60",
            "-m",
            "1",
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(120),
    );
    assert!(o.ended() && o.code == Some(0), "{o:?}");
    assert_eq!(summary(&out)["totals"]["accepted"], 60);

    let counts: Vec<serde_json::Value> = servers
        .into_iter()
        .zip(&stats)
        .map(|(k, s)| stop(k, s))
        .collect();
    let accepted: Vec<u64> = counts
        .iter()
        .map(|c| c["messages_accepted"].as_u64().unwrap())
        .collect();
    // Every message reached one of them, and (60 connections hashed over two sockets)
    // each took some.
    assert_eq!(accepted.iter().sum::<u64>(), 60, "{counts:?}");
    assert!(accepted.iter().all(|&n| n > 0), "{accepted:?}");
}
