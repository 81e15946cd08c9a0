//! CHUNKING (RFC 3030) with PIPELINING: MAIL, RCPT.., `BDAT n LAST` and the message in one
//! write, one round trip per message, timed as the `bdat` group. Against the embedded
//! server (which offers both): the server's own count of chunked messages, refusals of
//! every kind reconciled, LMTP's reply per recipient, `--no-chunking`, and a corpus
//! message that needs dot-stuffing going through DATA, every stored body intact.

mod common;

use common::{check_digests, errors_of, phase_count, spate, summary};
use serde_json::Value;
use spate::serve::{self, faults};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bdat_groups_carry_every_message_intact_and_no_chunking_uses_data() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bdat");
    let o = spate(&[
        "smtp",
        &addr,
        "-u",
        "6",
        "-n",
        "600",
        "-m",
        "0",
        "--size",
        "0..20k",
        "--rcpt",
        "1..3",
        "--to",
        "user{0..19}@example.test",
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
    assert_eq!(
        counts.messages_chunked, 600,
        "every message went in one BDAT chunk"
    );
    assert_eq!(
        counts.recipients_delivered,
        s["totals"]["rcpt_accepted"].as_u64().unwrap()
    );
    assert_eq!(phase_count(&s, "bdat"), 600);
    assert_eq!(phase_count(&s, "transaction"), 600);
    for p in ["envelope", "body", "data"] {
        assert_eq!(phase_count(&s, p), 0, "{p}: the group is timed as bdat");
    }
    let plan: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("plan.json")).unwrap()).unwrap();
    assert_eq!(plan["chunking"], true);
    assert_eq!(check_digests(&server), counts.recipients_delivered as usize);

    // --no-chunking: the same load through DATA.
    let out = dir.path().join("data");
    let o = spate(&[
        "smtp",
        &addr,
        "-u",
        "6",
        "-n",
        "300",
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
    assert_eq!(s["totals"]["accepted"], 300);
    let after = server.stats.snapshot();
    assert_eq!(after.messages_accepted, 900);
    assert_eq!(
        after.messages_chunked, 600,
        "nothing chunked with --no-chunking"
    );
    // Each connection's first envelope is a group of its own; the others ride behind
    // the previous message's content (PIPELINING across messages).
    assert_eq!(
        phase_count(&s, "envelope") + phase_count(&s, "dot_envelope"),
        300
    );
    assert_eq!(phase_count(&s, "bdat"), 0);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_inside_a_bdat_group_are_each_counted_once() {
    let mut cfg = serve::Config::loopback();
    cfg.faults
        .fails
        .push(faults::parse_fail("rcpt:451:0.1").unwrap());
    cfg.faults
        .fails
        .push(faults::parse_fail("data:554:0.05").unwrap());
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
        "5",
        "--rcpt",
        "1",
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
    let rcpt_451 = errors_of(&s, "rcpt", 451);
    let bdat_554 = errors_of(&s, "bdat", 554);
    assert!(rcpt_451 > 50 && bdat_554 > 20, "{rcpt_451} {bdat_554}");
    assert_eq!(server.stats.rejections(451), rcpt_451);
    // The server refuses the chunk of a message whose only recipient it refused (554 No
    // valid recipients): spate counts that message once, by its RCPT refusal.
    assert_eq!(server.stats.rejections(554), bdat_554 + rcpt_451);
    assert_eq!(t["rejected"].as_u64().unwrap(), rcpt_451 + bdat_554);
    assert_eq!(t["accepted"].as_u64().unwrap(), server.stats.messages());
    // Chunks the server took up to its final answer (a refused one is read and dropped).
    assert_eq!(
        server.stats.snapshot().messages_chunked,
        1500 - rcpt_451 - bdat_554
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lmtp_bdat_reads_a_reply_per_recipient() {
    let (s, _) = common::lmtp_refused_at_the_dot(&[], "bdat").await;
    assert_eq!(phase_count(&s, "bdat"), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_that_needs_dot_stuffing_goes_with_data() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus");
    std::fs::create_dir(&corpus).unwrap();
    std::fs::write(
        corpus.join("dot.eml"),
        "Subject: dots\n\n.a line that starts with a dot\n..and two\nend\n",
    )
    .unwrap();
    std::fs::write(corpus.join("plain.eml"), "Subject: plain\n\nno dots here\n").unwrap();
    let out = dir.path().join("r");
    let o = spate(&[
        "smtp",
        &addr,
        "-n",
        "20",
        "--messages-from",
        corpus.to_str().unwrap(),
        "-q",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let s = summary(&out);
    assert_eq!(s["totals"]["accepted"], 20);
    // The two files alternate: ten of each.
    assert_eq!(server.stats.snapshot().messages_chunked, 10);
    assert_eq!(phase_count(&s, "bdat"), 10);
    assert_eq!(phase_count(&s, "body"), 10);
    assert_eq!(check_digests(&server), 20);
    server.shutdown().await;
}

/// A server that offers CHUNKING but answers the BDAT group as if it were DATA (354):
/// every message fails as a protocol error of the `bdat` group, and the run goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_mishandles_the_group_is_reported() {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        // Bounded: spate's reachability check, then a connection per message (each failed
        // message drops its connection), each read with a deadline.
        for _ in 0..4 {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
                .unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            // The first connection is spate's reachability check, which closes at once.
            let _ = s.write_all(b"220 confused ESMTP\r\n");
            let _ = r.read_line(&mut line); // EHLO
            let _ = s.write_all(b"250-confused\r\n250-PIPELINING\r\n250 CHUNKING\r\n");
            line.clear();
            let _ = r.read_line(&mut line); // MAIL: the rest of the group follows
            let _ = s.write_all(b"250 ok\r\n250 ok\r\n354 go ahead\r\n");
            let mut rest = Vec::new();
            let _ = std::io::Read::read_to_end(&mut r, &mut rest);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let o = spate(&[
        "smtp",
        &addr,
        "-u",
        "1",
        "-n",
        "3",
        "--timeout",
        "5s",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert_eq!(o.code, Some(1), "nothing accepted: {}", o.stderr);
    let s = summary(&out);
    assert_eq!(s["totals"]["failed"], 3, "{s}");
    let errors = s["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .all(|e| e["phase"] == "bdat" && e["kind"] == "protocol"),
        "{errors:?}"
    );
    server.join().unwrap();
}

/// With -m K, QUIT goes behind the group of a connection's last message: each connection
/// carries K messages and ends with the server's 221 to a QUIT written with the last one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quit_goes_behind_the_last_message_of_a_connection() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    for (m, n) in [("1", 60u64), ("4", 240)] {
        let out = dir.path().join(format!("m{m}"));
        let before = server.stats.snapshot();
        let o = spate(&[
            "smtp",
            &addr,
            "-u",
            "3",
            "-n",
            &n.to_string(),
            "-m",
            m,
            "-q",
            "-o",
            out.to_str().unwrap(),
        ])
        .await;
        assert!(o.ok, "{}", o.stderr);
        let s = summary(&out);
        assert_eq!(s["totals"]["accepted"], n, "{}", o.stdout);
        let after = server.stats.snapshot();
        let smtp = |c: &serve::Counts| c.connections.get("smtp").copied().unwrap_or(0);
        let conns = smtp(&after) - smtp(&before);
        // A connection per message, or one per 4 (a session's share of the count need not
        // be a multiple of 4: at most one shorter connection each), and the reachability check.
        let made = s["totals"]["connections"].as_u64().unwrap();
        assert_eq!(conns, made + 1, "-m {m}");
        match m {
            "1" => assert_eq!(made, 60),
            _ => assert!((60..=63).contains(&made), "{made}"),
        }
        assert_eq!(after.messages_chunked - before.messages_chunked, n);
        // Every connection's QUIT was answered: behind its last group, or after a
        // session's shorter last connection.
        assert_eq!(phase_count(&s, "quit"), made, "-m {m}");
        assert_eq!(phase_count(&s, "bdat"), n);
    }
    server.shutdown().await;
}
