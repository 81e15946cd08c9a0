//! PIPELINING across messages (RFC 2920 §3.1): when messages go with DATA, the next
//! message's MAIL, RCPT.. and DATA go in the same write as this message's content, one
//! round trip per message, timed as `dot_envelope`; QUIT goes behind a connection's last
//! message. Against the embedded server (every stored body checked), with refusals of
//! every kind reconciled, LMTP's reply per recipient, against Postfix's smtp-sink, and a
//! server that drops what was written behind a message, which is reported (and
//! `--pipelining conservative` gets through it).

mod common;

use common::{check_digests, errors_of, phase_count, spate, summary};
use serde_json::Value;
use spate::serve::{self, faults};

fn plan(out: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("plan.json")).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_messages_are_chained_and_every_body_arrives_intact() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("full");
    let o = spate(&[
        "smtp",
        &addr,
        "-u",
        "4",
        "-n",
        "600",
        "-m",
        "25",
        "--size",
        "0..20k",
        "--rcpt",
        "1..3",
        "--to",
        "user{0..19}@example.test",
        "--no-chunking",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let s = summary(&out);
    assert_eq!(s["totals"]["accepted"], 600, "{}", o.stdout);
    let counts = server.stats.snapshot();
    assert_eq!(counts.messages_accepted, 600);
    assert_eq!(counts.messages_chunked, 0);
    assert_eq!(
        counts.recipients_delivered,
        s["totals"]["rcpt_accepted"].as_u64().unwrap()
    );
    assert_eq!(check_digests(&server), counts.recipients_delivered as usize);
    // About 150 messages per session (they share the count), 25 per connection: 24
    // connections and a few shorter ones. The first message of a connection has an
    // envelope group of its own; every other one rode behind its predecessor's content;
    // QUIT rode behind each connection's last message.
    let made = s["totals"]["connections"].as_u64().unwrap();
    assert!((24..=28).contains(&made), "{}", o.stdout);
    assert_eq!(phase_count(&s, "envelope"), made);
    assert_eq!(phase_count(&s, "dot_envelope"), 600 - made);
    assert_eq!(phase_count(&s, "body"), 600);
    assert_eq!(phase_count(&s, "transaction"), 600);
    assert_eq!(phase_count(&s, "quit"), made);
    let smtp = |c: &serve::Counts| c.connections.get("smtp").copied().unwrap_or(0);
    // The reachability check is one more connection.
    assert_eq!(smtp(&counts), made + 1);
    assert_eq!(plan(&out)["pipelining"], "full");
    // A chained envelope's time includes the previous message's final reply, so its
    // transaction is timed from that write: never shorter than its body.
    let p = |name: &str| {
        s["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["phase"] == name)
            .unwrap()["p50_us"]
            .as_u64()
            .unwrap()
    };
    assert!(p("transaction") >= p("body"), "{}", o.stdout);

    // --pipelining conservative: an envelope group per message, nothing behind a
    // message's end (QUIT after the last reply).
    let out = dir.path().join("conservative");
    let o = spate(&[
        "smtp",
        &addr,
        "-u",
        "4",
        "-n",
        "200",
        "-m",
        "25",
        "--no-chunking",
        "--pipelining",
        "conservative",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let s = summary(&out);
    assert_eq!(s["totals"]["accepted"], 200);
    assert_eq!(phase_count(&s, "envelope"), 200);
    assert_eq!(phase_count(&s, "dot_envelope"), 0);
    assert_eq!(plan(&out)["pipelining"], "conservative");
    assert_eq!(server.stats.snapshot().messages_accepted, 800);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_in_chained_groups_are_each_counted_once() {
    let mut cfg = serve::Config::loopback();
    for f in ["mail:550:0.03", "rcpt:451:0.1", "dot:554:0.05"] {
        cfg.faults.fails.push(faults::parse_fail(f).unwrap());
    }
    cfg.faults.seed = Some(5);
    let server = serve::start(cfg).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let o = spate(&[
        "smtp",
        &addr,
        "-u",
        "8",
        "-n",
        "1500",
        "-m",
        "20",
        "--rcpt",
        "1",
        "--no-chunking",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let s = summary(&out);
    let t = &s["totals"];
    assert_eq!(t["attempted"], 1500);
    assert_eq!(s["reconciles"], true);
    let mail_550 = errors_of(&s, "mail", 550);
    let rcpt_451 = errors_of(&s, "rcpt", 451);
    let body_554 = errors_of(&s, "body", 554);
    assert!(
        mail_550 > 10 && rcpt_451 > 50 && body_554 > 20,
        "{mail_550} {rcpt_451} {body_554}"
    );
    assert_eq!(server.stats.rejections(550), mail_550);
    assert_eq!(server.stats.rejections(451), rcpt_451);
    // After a refused MAIL or RCPT, DATA is refused too (no valid recipients): that
    // message is counted once, by its first refusal.
    assert!(server.stats.rejections(554) >= body_554);
    assert_eq!(
        t["rejected"].as_u64().unwrap(),
        mail_550 + rcpt_451 + body_554
    );
    assert_eq!(t["accepted"].as_u64().unwrap(), server.stats.messages());
    assert_eq!(t["failed"], 0, "{}", o.stdout);
    assert!(phase_count(&s, "dot_envelope") > 1000, "{}", o.stdout);
    assert_eq!(check_digests(&server), server.stats.messages() as usize);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lmtp_chained_messages_read_a_reply_per_recipient() {
    let (s, stdout) = common::lmtp_refused_at_the_dot(&["-m", "0", "--no-chunking"], "body").await;
    assert!(phase_count(&s, "dot_envelope") >= 396, "{stdout}");
}

/// Postfix's own smtp-sink (PIPELINING, no CHUNKING): every message chained behind the
/// previous one on its connection, and smtp-sink counts them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postfix_smtp_sink_takes_chained_messages() {
    let sink_bin = "/usr/sbin/smtp-sink";
    if !std::path::Path::new(sink_bin).exists() {
        common::cannot_run("smtp-sink (package postfix) is not installed");
        return;
    }
    let addr = format!("127.0.0.1:{}", common::free_port());
    // -c: a count per session on stdout ("mesg=N" after each message).
    let mut sink = std::process::Command::new(sink_bin)
        .args(["-c", "-u", "nobody", &addr, "64"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let stdout = sink.stdout.take().unwrap();
    let sink = common::Kill(sink);
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut { stdout }, &mut text);
        text
    });
    common::wait_listen(&addr, std::time::Duration::from_secs(10));
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sink");
    let o = spate(&[
        "smtp",
        &addr,
        "-u",
        "3",
        "-n",
        "300",
        "-m",
        "50",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let s = summary(&out);
    assert_eq!(s["totals"]["accepted"], 300, "{}", o.stdout);
    let made = s["totals"]["connections"].as_u64().unwrap();
    assert_eq!(phase_count(&s, "dot_envelope"), 300 - made, "{}", o.stdout);
    drop(sink);
    let text = reader.join().unwrap();
    let counted = text
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("mesg="))
        .filter_map(|n| n.parse::<u64>().ok())
        .max();
    assert_eq!(counted, Some(300), "smtp-sink said: {text}");
}

/// A server that offers PIPELINING but throws away what follows a message's final dot in
/// the same read: the chained envelope gets no reply; spate reports it as such within its
/// timeout, and `--pipelining conservative` gets every message through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_drops_commands_behind_a_message_is_reported() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    listener.set_nonblocking(true).unwrap();
    let server = std::thread::spawn(move || {
        // Bounded: the test's two runs, each connection served by its own thread with a
        // read deadline; the accept loop ends when the test says so (or after 60 s).
        let t0 = std::time::Instant::now();
        let mut threads = Vec::new();
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) && t0.elapsed().as_secs() < 60 {
            let Ok((mut s, _)) = listener.accept() else {
                std::thread::sleep(std::time::Duration::from_millis(10));
                continue;
            };
            threads.push(std::thread::spawn(move || {
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                    .unwrap();
                let _ = s.write_all(b"220 forgetful ESMTP\r\n");
                let mut buf = Vec::new();
                let mut chunk = [0u8; 65536];
                let mut in_data = false;
                loop {
                    let Ok(n) = s.read(&mut chunk) else { return };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    loop {
                        if in_data {
                            let Some(end) = buf.windows(5).position(|w| w == b"\r\n.\r\n") else {
                                break;
                            };
                            let _ = end;
                            // The defect: whatever came with the dot is thrown away.
                            buf.clear();
                            in_data = false;
                            let _ = s.write_all(b"250 2.0.0 queued\r\n");
                            break;
                        }
                        let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
                            break;
                        };
                        let line: Vec<u8> = buf.drain(..eol + 2).collect();
                        let upper = String::from_utf8_lossy(&line).to_ascii_uppercase();
                        let reply: &[u8] = if upper.starts_with("EHLO") {
                            b"250-forgetful\r\n250 PIPELINING\r\n"
                        } else if upper.starts_with("DATA") {
                            in_data = true;
                            // The message's "\r\n.\r\n" search needs the CRLF before it.
                            buf.splice(0..0, b"\r\n".iter().copied());
                            b"354 go ahead\r\n"
                        } else if upper.starts_with("QUIT") {
                            let _ = s.write_all(b"221 bye\r\n");
                            return;
                        } else {
                            b"250 ok\r\n"
                        };
                        let _ = s.write_all(reply);
                    }
                }
            }));
        }
        for t in threads {
            let _ = t.join();
        }
    });
    let dir = tempfile::tempdir().unwrap();
    // Six messages on one session, kept connections, a 1 s reply deadline.
    let run = |name: &'static str, extra: &'static [&'static str]| {
        let out = dir.path().join(name);
        let addr = addr.clone();
        async move {
            let mut args = vec!["smtp", &addr, "-u", "1", "-n", "6", "-m", "0"];
            args.extend_from_slice(&["--timeout", "1s", "-q", "-o", out.to_str().unwrap()]);
            args.extend_from_slice(extra);
            (spate(&args).await, summary(&out))
        }
    };
    let t0 = std::time::Instant::now();
    let (o, s) = run("full", &[]).await;
    assert!(t0.elapsed().as_secs() < 30, "bounded by the timeout");
    assert!(o.ended(), "{}", o.stderr);
    // Each connection: the first message goes through, the one chained behind it gets no
    // reply and fails; the next connection starts again with a message of its own.
    assert_eq!(s["totals"]["accepted"], 3, "{}", o.stdout);
    assert_eq!(s["totals"]["failed"], 3, "{}", o.stdout);
    let errors = s["errors"].as_array().unwrap();
    assert!(
        errors.iter().all(|e| e["phase"] == "dot_envelope"
            && e["kind"] == "timeout"
            && e["text"]
                .as_str()
                .unwrap()
                .contains("--pipelining conservative")),
        "{errors:?}"
    );

    let (o, s) = run("conservative", &["--pipelining", "conservative"]).await;
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(s["totals"]["accepted"], 6, "{}", o.stdout);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    server.join().unwrap();
}
