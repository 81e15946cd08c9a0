//! Hostile and careless clients, shutdown, and the `spate serve` binary itself.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Raw;
use spate::serve::{self, Config};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlong_lines_garbage_and_error_limit() {
    let running = serve::start(Config::loopback()).await.unwrap();
    let addr = running.addrs.smtp.unwrap();
    tokio::task::spawn_blocking(move || {
        let mut c = Raw::connect(addr);
        c.last();
        let mut long = vec![b'A'; 100_000];
        long.extend_from_slice(b"\r\nNOOP\r\n");
        c.send(&long);
        assert_eq!(c.last(), "500 5.5.2 Line too long");
        assert!(c.last().starts_with("250"), "session carries on");
        c.send(b"\x00\xff\x1b[2J\r\n");
        assert!(c.last().starts_with("501 5.5.4"));
        for _ in 0..17 {
            c.send(b"XYZZY\r\n");
            assert!(c.last().starts_with("500 5.5.2"));
        }
        c.send(b"XYZZY\r\n");
        assert!(c.last().starts_with("500"));
        assert_eq!(c.last(), "421 4.7.0 Too many errors, closing");
        assert!(c.closed());
    })
    .await
    .unwrap();
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_client_is_timed_out() {
    let mut config = Config::loopback();
    config.idle_timeout = Duration::from_millis(500);
    let running = serve::start(config).await.unwrap();
    let addr = running.addrs.smtp.unwrap();
    tokio::task::spawn_blocking(move || {
        let t = Instant::now();
        let mut c = Raw::connect(addr);
        c.last();
        assert_eq!(c.last(), "421 4.4.2 Idle timeout, closing");
        assert!(c.closed());
        assert!(t.elapsed() < Duration::from_secs(5));
    })
    .await
    .unwrap();
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_vanishing_mid_data_leave_nothing_behind() {
    let running = serve::start(Config::loopback()).await.unwrap();
    let addr = running.addrs.smtp.unwrap();
    tokio::task::spawn_blocking(move || {
        for i in 0..100 {
            let mut c = Raw::connect(addr);
            c.last();
            c.send(b"HELO x\r\nMAIL FROM:<>\r\nRCPT TO:<v@example.test>\r\nDATA\r\n");
            for _ in 0..4 {
                c.last();
            }
            let chunk = vec![b'y'; 10_000 + i];
            c.send(&chunk);
            // Dropped here, mid-message.
        }
        let mut c = Raw::connect(addr);
        c.last();
        c.send(
            b"HELO x\r\nMAIL FROM:<>\r\nRCPT TO:<v@example.test>\r\nDATA\r\nhi\r\n.\r\nQUIT\r\n",
        );
        let replies: Vec<String> = (0..6).map(|_| c.last()).collect();
        assert!(replies[4].starts_with("250 2.0.0"), "{replies:?}");
    })
    .await
    .unwrap();
    assert_eq!(running.store.delivered(), 1);
    assert_eq!(running.store.stored_bytes(), 4);
    let t = Instant::now();
    while running.stats.active() > 0 && t.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(running.stats.active(), 0, "every session ended");

    // Memory: 30 clients each leave 2 MB of an unfinished message behind. If sessions
    // leaked their buffers, resident memory would grow by about 60 MB.
    let before = rss_bytes();
    tokio::task::spawn_blocking(move || {
        let chunk = vec![b'w'; 2 << 20];
        for _ in 0..30 {
            let mut c = Raw::connect(addr);
            c.last();
            c.send(b"HELO x\r\nMAIL FROM:<>\r\nRCPT TO:<v@example.test>\r\nDATA\r\n");
            for _ in 0..4 {
                c.last();
            }
            c.send(&chunk);
        }
    })
    .await
    .unwrap();
    let t = Instant::now();
    while running.stats.active() > 0 && t.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(running.stats.active(), 0);
    let grown = rss_bytes().saturating_sub(before);
    assert!(grown < 30 << 20, "resident memory grew by {grown} bytes");
    assert_eq!(running.store.delivered(), 1);
    running.shutdown().await;
}

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_says_421_to_idle_sessions_and_is_bounded() {
    let mut config = Config::loopback();
    config.shutdown_grace = Duration::from_millis(500);
    let running = serve::start(config).await.unwrap();
    let addr = running.addrs.smtp.unwrap();
    let (idle, busy) = tokio::task::spawn_blocking(move || {
        let mut idle = Raw::connect(addr);
        idle.last();
        let mut busy = Raw::connect(addr);
        busy.last();
        busy.send(b"HELO x\r\nMAIL FROM:<>\r\nRCPT TO:<v@example.test>\r\nDATA\r\npartial");
        for _ in 0..4 {
            busy.last();
        }
        (idle, busy)
    })
    .await
    .unwrap();
    let t = Instant::now();
    running.shutdown().await;
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    tokio::task::spawn_blocking(move || {
        let (mut idle, mut busy) = (idle, busy);
        assert_eq!(idle.last(), "421 4.3.2 Service shutting down, closing");
        assert!(idle.closed());
        assert!(busy.closed(), "cut off after the grace period");
        assert!(
            std::net::TcpStream::connect(addr).is_err(),
            "no longer listening"
        );
    })
    .await
    .unwrap();
}

#[test]
fn binary_rejects_bad_fault_syntax_with_exit_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_spate"))
        .args(["serve", "--smtp", "127.0.0.1:0", "--fail", "rcpt:45x:0.1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("--fail 'rcpt:45x:0.1'"), "{err}");
}

#[test]
fn binary_serves_until_sigterm_and_writes_stats() {
    let dir = tempfile::tempdir().unwrap();
    let stats = dir.path().join("stats.json");
    let pem = dir.path().join("cert.pem");
    let mut child = Guard(
        Command::new(env!("CARGO_BIN_EXE_spate"))
            .args(["serve", "--smtp", "127.0.0.1:0", "--stats-file"])
            .arg(&stats)
            .arg("--cert-out")
            .arg(&pem)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let child = &mut child.0;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let addr: std::net::SocketAddr = match first.split_whitespace().last().map(str::parse) {
        Some(Ok(a)) => a,
        _ => panic!("first line: {first}"),
    };
    let mut c = Raw::connect(addr);
    assert!(c.last().starts_with("220"));
    c.send(b"HELO x\r\nMAIL FROM:<>\r\nRCPT TO:<b@example.test>\r\nDATA\r\nhi\r\n.\r\nQUIT\r\n");
    let replies: Vec<String> = (0..6).map(|_| c.last()).collect();
    assert!(replies[4].starts_with("250"), "{replies:?}");
    let t = Instant::now();
    while !stats.exists() && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(std::fs::read_to_string(&pem)
        .unwrap()
        .contains("BEGIN CERTIFICATE"));
    // SAFETY: kill(2) on the PID of the child we started.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(err.contains("messages accepted 1"), "{err}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(json["messages_accepted"], 1);
}

/// Kills the child (by its PID) if the test fails before stopping it.
struct Guard(std::process::Child);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// CVE-2011-0411 style: commands pipelined after STARTTLS must not run inside TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_injected_after_starttls_is_discarded() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader as TokioBufReader};
    let running = serve::start(Config::loopback()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &running.cert_pem).unwrap();
    let tcp = tokio::net::TcpStream::connect(running.addrs.smtp.unwrap())
        .await
        .unwrap();
    let mut plain = TokioBufReader::new(tcp);
    let mut line = String::new();
    plain.read_line(&mut line).await.unwrap();
    assert!(line.starts_with("220"));
    plain
        .get_mut()
        .write_all(b"EHLO x\r\nSTARTTLS\r\nMAIL FROM:<evil@example.test>\r\n")
        .await
        .unwrap();
    loop {
        line.clear();
        plain.read_line(&mut line).await.unwrap();
        if line.starts_with("220 ") {
            break;
        }
        assert!(line.starts_with("250"), "{line}");
    }
    let config = spate::tls::client_config(&spate::tls::ClientOptions {
        ca: Some(ca.to_string_lossy().into_owned()),
        ..Default::default()
    })
    .unwrap();
    let tls = tokio_rustls::TlsConnector::from(config)
        .connect(
            spate::tls::server_name("127.0.0.1").unwrap(),
            plain.into_inner(),
        )
        .await
        .unwrap();
    let mut tls = TokioBufReader::new(tls);
    tls.get_mut().write_all(b"NOOP\r\n").await.unwrap();
    line.clear();
    tls.read_line(&mut line).await.unwrap();
    assert_eq!(
        line, "250 2.0.0 Ok\r\n",
        "the injected MAIL must not be answered"
    );
    running.shutdown().await;
}
