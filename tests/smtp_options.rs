//! `spate smtp` options that the main load tests do not cover, end to end: implicit TLS
//! with CRAM-MD5, real .eml corpora with From/To rewritten, attachments, and source
//! address binding.

mod common;

use common::{spate, summary};

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use spate::message::{body_digest, hex, split_message};
use spate::serve;

/// Every message stored by the embedded server, as text.
fn stored(server: &serve::Running) -> Vec<String> {
    let mut all = Vec::new();
    for (mailbox, _, _) in server.store.mailbox_counts() {
        server.store.with_mailbox(&mailbox, |mb| {
            for m in &mb.messages {
                all.push(String::from_utf8_lossy(&m.data).into_owned());
            }
        });
    }
    all
}

fn header<'a>(msg: &'a str, name: &str) -> Option<&'a str> {
    msg.lines()
        .take_while(|l| !l.is_empty())
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':').map(str::trim))
}

fn trace_digest(msg: &str) -> String {
    let trace = header(msg, "X-Spate-Trace").expect("trace header");
    trace
        .split(';')
        .find_map(|kv| kv.trim().strip_prefix("digest="))
        .expect("digest in trace")
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn implicit_tls_with_cram_md5() {
    let mut cfg = serve::Config::loopback();
    let lo = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.listen.smtps = Some(lo);
    cfg.users = serve::store::Users::parse("a@example.test pa\n").unwrap();
    let server = serve::start(cfg).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &server.cert_pem).unwrap();
    let users = dir.path().join("users.txt");
    std::fs::write(&users, "a@example.test pa\n").unwrap();
    let out = dir.path().join("r");
    let smtps = server.addrs.smtps.unwrap().to_string();
    let o = spate(&[
        "smtp",
        &smtps,
        "--tls",
        "--ca",
        ca.to_str().unwrap(),
        "--auth-file",
        users.to_str().unwrap(),
        "--auth-mech",
        "cram-md5",
        "-u",
        "3",
        "-n",
        "60",
        "-m",
        "5",
        "--to",
        "a@example.test",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let s = summary(&out);
    assert_eq!(s["totals"]["accepted"], 60, "{}", o.stdout);
    assert_eq!(s["totals"]["tls_connections"], s["totals"]["connections"]);
    let phases: Vec<&str> = s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    assert!(
        phases.contains(&"tls") && phases.contains(&"auth"),
        "{phases:?}"
    );
    assert!(
        !phases.contains(&"starttls"),
        "implicit TLS has no STARTTLS"
    );
    assert_eq!(server.stats.messages(), 60);

    // A wrong password is an error class of the auth phase, not a crash.
    std::fs::write(&users, "a@example.test wrong\n").unwrap();
    let out = dir.path().join("bad");
    let o = spate(&[
        "smtp",
        &smtps,
        "--tls",
        "--ca",
        ca.to_str().unwrap(),
        "--auth-file",
        users.to_str().unwrap(),
        "--auth-mech",
        "cram-md5",
        "-n",
        "3",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert_eq!(o.code, Some(1), "nothing accepted: {}", o.stderr);
    let s = summary(&out);
    assert_eq!(s["totals"]["accepted"], 0);
    assert!(
        s["errors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["phase"] == "auth" && e["code"] == 535),
        "{}",
        s["errors"]
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eml_corpus_is_sent_with_envelope_addresses_and_intact_bodies() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus");
    std::fs::create_dir(&corpus).unwrap();
    std::fs::write(
        corpus.join("a.eml"),
        "From: Someone Else <else@elsewhere.test>\nTo: nobody@elsewhere.test\nSubject: first\n\nBody of the first message.\n.leading dot line\n",
    )
    .unwrap();
    std::fs::write(
        corpus.join("b.eml"),
        "From: x@y.test\r\nTo: z@y.test\r\nSubject: second\r\nContent-Type: text/plain\r\n\r\nSecond body,\r\ntwo lines.\r\n",
    )
    .unwrap();
    std::fs::write(corpus.join("ignored.txt"), "not an eml").unwrap();
    let out = dir.path().join("r");
    let o = spate(&[
        "smtp",
        &addr,
        "--messages-from",
        corpus.to_str().unwrap(),
        "--from",
        "sender@example.test",
        "--to",
        "rcpt{0..3}@example.test",
        "-n",
        "20",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(summary(&out)["totals"]["accepted"], 20);
    let msgs = stored(&server);
    assert_eq!(msgs.len(), 20);
    let mut subjects = std::collections::BTreeSet::new();
    for m in &msgs {
        assert_eq!(header(m, "From"), Some("<sender@example.test>"), "{m}");
        let to = header(m, "To").unwrap();
        assert!(
            to.starts_with("<rcpt") && to.ends_with("@example.test>"),
            "{m}"
        );
        assert!(
            !m.contains("elsewhere.test") && !m.contains("z@y.test"),
            "{m}"
        );
        subjects.insert(header(m, "Subject").unwrap().to_string());
        let (_, body) = split_message(m.as_bytes());
        assert_eq!(hex(&body_digest(body)), trace_digest(m), "{m}");
    }
    assert_eq!(
        subjects.into_iter().collect::<Vec<_>>(),
        vec!["first".to_string(), "second".to_string()]
    );
    // The dot-stuffed line arrived unstuffed.
    assert!(msgs.iter().any(|m| m.contains("\r\n.leading dot line")));

    // A directory without .eml files is a usage error.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = spate(&["smtp", &addr, "--messages-from", empty.to_str().unwrap()]).await;
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert_eq!(o.stderr.trim().lines().count(), 1, "{}", o.stderr);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attachment_arrives_as_base64_mime_part() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.bin");
    let payload: Vec<u8> = (0..9167u32).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(&file, &payload).unwrap();
    let out = dir.path().join("r");
    let o = spate(&[
        "smtp",
        &addr,
        "--attach",
        file.to_str().unwrap(),
        "--size",
        "10200",
        "-n",
        "5",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let msgs = stored(&server);
    assert_eq!(msgs.len(), 5);
    for m in &msgs {
        let ct = header(m, "Content-Type").expect("content type");
        assert!(ct.starts_with("multipart/mixed"), "{ct}");
        let boundary = ct
            .split("boundary=")
            .nth(1)
            .unwrap()
            .trim_matches('"')
            .to_string();
        let part = m
            .split(&format!("--{boundary}"))
            .find(|p| p.contains("filename=\"report.bin\""))
            .expect("attachment part");
        assert!(part.contains("Content-Transfer-Encoding: base64"), "{part}");
        let b64: String = part
            .split("\r\n\r\n")
            .nth(1)
            .unwrap()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        assert_eq!(decoded, payload);
        let (_, body) = split_message(m.as_bytes());
        assert_eq!(hex(&body_digest(body)), trace_digest(m));
    }
    server.shutdown().await;
}

/// A minimal SMTP sink that records the source address of every connection.
fn recording_sink() -> (std::net::SocketAddr, Arc<Mutex<Vec<IpAddr>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let peers = Arc::new(Mutex::new(Vec::new()));
    let seen = peers.clone();
    std::thread::spawn(move || {
        // Bounded: the test makes a handful of connections.
        for stream in listener.incoming().take(64) {
            let Ok(mut s) = stream else { return };
            seen.lock().unwrap().push(s.peer_addr().unwrap().ip());
            std::thread::spawn(move || {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let mut r = BufReader::new(s.try_clone().unwrap());
                let _ = s.write_all(b"220 sink\r\n");
                let mut in_data = false;
                let mut line = String::new();
                loop {
                    line.clear();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let reply: &[u8] = if in_data {
                        if line != ".\r\n" {
                            continue;
                        }
                        in_data = false;
                        b"250 ok\r\n"
                    } else {
                        match line.get(..4).map(str::to_ascii_uppercase).as_deref() {
                            Some("EHLO") => b"250 sink\r\n",
                            Some("DATA") => {
                                in_data = true;
                                b"354 go\r\n"
                            }
                            Some("QUIT") => {
                                let _ = s.write_all(b"221 bye\r\n");
                                return;
                            }
                            _ => b"250 ok\r\n",
                        }
                    };
                    if s.write_all(reply).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, peers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_spreads_connections_over_source_addresses() {
    let (addr, peers) = recording_sink();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let o = spate(&[
        "smtp",
        &addr.to_string(),
        "--bind",
        "127.0.0.2,127.0.0.3",
        "-u",
        "4",
        "-n",
        "12",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(summary(&out)["totals"]["accepted"], 12, "{}", o.stdout);
    let seen = peers.lock().unwrap().clone();
    let used: std::collections::BTreeSet<_> = seen.iter().map(|ip| ip.to_string()).collect();
    // The preflight check may come from any address; the sessions use both.
    assert!(
        used.contains("127.0.0.2") && used.contains("127.0.0.3"),
        "{seen:?}"
    );
    assert!(
        seen.iter().skip(1).all(|ip| ip.to_string() != "127.0.0.1"),
        "{seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_per_connection_range_is_drawn_per_connection() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let run = |m: &'static str, name: &'static str| {
        let out = dir.path().join(name);
        let addr = addr.clone();
        async move {
            let o = spate(&[
                "smtp",
                &addr,
                "-u",
                "1",
                "-n",
                "120",
                "-m",
                m,
                "-o",
                out.to_str().unwrap(),
            ])
            .await;
            assert!(o.ok, "{}", o.stderr);
            let s = summary(&out);
            assert_eq!(s["totals"]["accepted"], 120);
            s["totals"]["connections"].as_u64().unwrap()
        }
    };
    assert_eq!(run("3", "fixed").await, 40);
    // 1..3 averages 2 messages a connection: about 60 connections, never 40 or 120.
    let ranged = run("1..3", "range").await;
    assert!((45..=80).contains(&ranged), "{ranged} connections");
    let o = spate(&["smtp", &addr, "-m", "0..3"]).await;
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    server.shutdown().await;
}
