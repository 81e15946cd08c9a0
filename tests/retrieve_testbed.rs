//! `spate pop3` / `spate imap` and the fetch API against the real Dovecot of the test bed
//! (scripts/testbed, on ports it picks free). Skipped, saying so, without root or the
//! postfix/dovecot packages.

mod common;

use std::path::Path;
use std::time::Duration;

use common::bed::Bed;
use serde_json::Value;
use spate::message::{body_digest, hex, split_message};
use spate::session::mailbox::fetch::{self as retrieve, Account, Watched};

/// Messages in a Maildir of the bed (new/ and cur/).
fn messages(bed: &Bed, user: &str) -> usize {
    let root = Path::new(&bed.env["SPATE_MAILDIR_ROOT"]).join(user);
    ["new", "cur"]
        .iter()
        .map(|d| std::fs::read_dir(root.join(d)).map_or(0, |r| r.count()))
        .sum()
}

fn run(args: &[&str]) -> Value {
    common::run_summary(args, false).0
}

fn user(i: usize) -> String {
    format!("user{i}@example.test")
}

#[test]
fn dovecot_pop3_and_imap_loads_and_fetches() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &["--users", "10", "--port-offset", "auto"],
    ) else {
        return;
    };
    let users = bed.var("SPATE_USERS_FILE");
    let ca = bed.var("SPATE_CA");
    let o = |n: &str| tmp.path().join(n).to_string_lossy().into_owned();
    // 10 messages in each of the 10 mailboxes, through Dovecot's LMTP.
    let (smtp_out, pop_out, imap_out, bad_out) = (o("lmtp"), o("pop3"), o("imap"), o("bad"));
    let s = run(&[
        "smtp",
        "--lmtp",
        bed.var("SPATE_LMTP"),
        "--to-file",
        users,
        "--pick",
        "round-robin",
        "--count",
        "100",
        "--size",
        "0..8k",
        "-o",
        &smtp_out,
        "-q",
    ]);
    assert_eq!(s["totals"]["accepted"], 100);
    assert_eq!(messages(&bed, &user(0)), 10);

    // POP3 over STLS: five visits (user0..4), half of each mailbox deleted at QUIT.
    let s = run(&[
        "pop3",
        bed.var("SPATE_POP3"),
        "--users-file",
        users,
        "--users",
        "5",
        "--count",
        "5",
        "--starttls",
        "--ca",
        ca,
        "--delete",
        "50",
        "--listings",
        "-o",
        &pop_out,
        "-q",
    ]);
    assert_eq!(s["totals"]["accepted"], 5, "{s}");
    assert_eq!(s["totals"]["retrieved"], 50);
    assert_eq!(s["totals"]["deleted"], 25);
    assert_eq!(s["totals"]["tls_connections"], 5);
    for i in 0..5 {
        assert_eq!(messages(&bed, &user(i)), 5, "user{i}");
    }

    // IMAP: the same five mailboxes, 5 messages each: 2 deleted per visit (50% spread).
    let s = run(&[
        "imap",
        bed.var("SPATE_IMAP"),
        "--users-file",
        users,
        "--users",
        "5",
        "--count",
        "5",
        "--starttls",
        "--ca",
        ca,
        "--download",
        "50",
        "--delete",
        "50",
        "--flag",
        "--search",
        "UNSEEN",
        "--idle",
        "50ms",
        "-o",
        &imap_out,
        "-q",
    ]);
    assert_eq!(s["totals"]["accepted"], 5, "{s}");
    assert_eq!(s["totals"]["deleted"], 10);
    for i in 0..5 {
        assert_eq!(messages(&bed, &user(i)), 3, "user{i}");
    }

    // Wrong password: Dovecot's refusals, classified.
    let bad = tmp.path().join("bad.txt");
    std::fs::write(&bad, "user9@example.test wrong\n").unwrap();
    let s = run(&[
        "imap",
        bed.var("SPATE_IMAP"),
        "--users-file",
        bad.to_str().unwrap(),
        "--count",
        "2",
        "-o",
        &bad_out,
        "-q",
    ]);
    assert_eq!(s["totals"]["rejected"], 2, "{s}");
    assert_eq!(s["errors"][0]["phase"], "auth");
    assert_eq!(s["errors"][0]["kind"], "NO");

    // The fetch API: every message of user9 intact over IMAP STARTTLS, then POP3 with delete.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let opts = spate::tls::ClientOptions {
        ca: Some(ca.to_string()),
        ..Default::default()
    };
    let t = Duration::from_secs(20);
    let acct = Account {
        user: user(9),
        password: bed.var("SPATE_PASSWORD").to_string(),
    };
    let url = format!("imap+starttls://{}", bed.var("SPATE_IMAP"));
    let (proto, ep) = retrieve::parse_url(&url, &opts, t).unwrap();
    let got = rt
        .block_on(retrieve::fetch_mailbox(proto, &ep, &acct, false))
        .unwrap();
    assert_eq!(got.len(), 10);
    for f in &got {
        let text = String::from_utf8_lossy(&f.raw);
        let claimed = text
            .lines()
            .find(|l| l.starts_with("X-Spate-Trace:"))
            .and_then(|l| l.split("digest=").nth(1))
            .map(|d| d.split(';').next().unwrap().trim().to_string())
            .expect("trace header");
        assert_eq!(claimed, hex(&body_digest(split_message(&f.raw).1)));
        assert!(f.arrived.is_some());
    }
    let url = format!("pop3://{}", bed.var("SPATE_POP3"));
    let (proto, ep) = retrieve::parse_url(&url, &opts, t).unwrap();
    let got = rt
        .block_on(retrieve::fetch_mailbox(proto, &ep, &acct, true))
        .unwrap();
    assert_eq!(got.len(), 10);
    assert_eq!(messages(&bed, &user(9)), 0);

    // IDLE on Dovecot: a message delivered over LMTP while watching is reported promptly.
    let url = format!("imap://{}", bed.var("SPATE_IMAP"));
    let (_, ep) = retrieve::parse_url(&url, &opts, t).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let watcher = rt.spawn(async move {
        retrieve::watch_mailbox(&ep, &acct, move |w| drop(tx.send(w)), stop_rx).await
    });
    // The mailbox is empty: the first thing the watcher says is that Dovecot accepted IDLE.
    let ready = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("IDLE started");
    assert!(matches!(ready, Watched::Idling), "{ready:?}");
    let lmtp2 = o("lmtp2");
    let t0 = std::time::Instant::now();
    run(&[
        "smtp",
        "--lmtp",
        bed.var("SPATE_LMTP"),
        "--to",
        &user(9),
        "--count",
        "1",
        "-o",
        &lmtp2,
        "-q",
    ]);
    let Watched::New(f) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("IDLE reported the delivery")
    else {
        panic!("a delivery during IDLE is reported next")
    };
    eprintln!("IDLE reported a delivery after {:?}", t0.elapsed());
    assert!(String::from_utf8_lossy(&f.raw).contains("X-Spate-Trace:"));
    stop_tx.send(true).unwrap();
    let r = rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), watcher).await });
    assert!(r.unwrap().unwrap().is_ok());
}
