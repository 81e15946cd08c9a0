//! IMAP (and POP3) fault injection on the embedded server: `--fail fetch:NO:P`,
//! `--delay select:D`, `--drop idle:P`, `--fail login:BYE:P`, `--fail retr:-ERR:P`; every
//! fault the client sees is one the server counted, and a failed command leaves the
//! session usable.

mod common;

use std::time::{Duration, Instant};

use common::{until_tag, Raw};
use spate::serve::faults::{parse_delay, parse_drop, parse_fail, FaultKind, FaultPoint};
use spate::serve::{self, Config, Faults, Running, Users};

async fn server(faults: Faults) -> Running {
    let mut config = Config::loopback();
    config.listen.imap = Some("127.0.0.1:0".parse().unwrap());
    config.listen.pop3 = Some("127.0.0.1:0".parse().unwrap());
    config.users = Users::parse("carol@example.test pw\n").unwrap();
    config.faults = faults;
    let running = serve::start(config).await.unwrap();
    for i in 0..3 {
        running
            .store
            .deliver(
                "carol@example.test",
                format!("Subject: {i}\r\n\r\nx\r\n").as_bytes(),
            )
            .unwrap();
    }
    running
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_fetches_delayed_selects_and_dropped_idles_are_counted() {
    let faults = Faults {
        fails: vec![parse_fail("fetch:NO:0.5").unwrap()],
        delays: vec![parse_delay("select:50ms..60ms").unwrap()],
        drops: vec![parse_drop("idle:1").unwrap()],
        seed: Some(3),
        ..Default::default()
    };
    let running = server(faults).await;
    let addr = running.addrs.imap.unwrap();
    let stats = running.stats.clone();
    let seen_no = tokio::task::spawn_blocking(move || {
        let mut c = Raw::connect(addr);
        assert!(c.line().starts_with("* OK"));
        c.send(b"l LOGIN carol pw\r\n");
        until_tag(&mut c, "l");
        let t = Instant::now();
        c.send(b"s SELECT INBOX\r\n");
        assert!(until_tag(&mut c, "s").last().unwrap().starts_with("s OK"));
        assert!(t.elapsed() >= Duration::from_millis(50));
        let mut no = 0;
        for i in 0..40 {
            let tag = format!("f{i}");
            c.send(format!("{tag} FETCH 1:* (FLAGS)\r\n").as_bytes());
            let lines = until_tag(&mut c, &tag);
            let last = lines.last().unwrap();
            if last.starts_with(&format!("{tag} NO [UNAVAILABLE] Injected fault (fetch)")) {
                assert_eq!(lines.len(), 1, "a failed FETCH sends no data: {lines:?}");
                no += 1;
            } else {
                assert!(last.starts_with(&format!("{tag} OK")), "{lines:?}");
            }
        }
        c.send(b"i IDLE\r\n");
        assert!(c.closed(), "IDLE was to be dropped");
        no
    })
    .await
    .unwrap();
    assert!((5..35).contains(&seen_no), "{seen_no}");
    assert_eq!(
        stats.faults(FaultPoint::ImapFetch, FaultKind::Fail),
        seen_no
    );
    assert_eq!(stats.faults(FaultPoint::ImapSelect, FaultKind::Delay), 1);
    assert_eq!(stats.faults(FaultPoint::ImapIdle, FaultKind::Drop), 1);
    let snap = stats.snapshot();
    assert_eq!(snap.faults.get("fetch:fail"), Some(&seen_no));
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bye_on_login_closes_and_bad_words_are_refused() {
    let faults = Faults {
        fails: vec![parse_fail("login:BYE:1").unwrap()],
        ..Default::default()
    };
    let running = server(faults).await;
    let addr = running.addrs.imap.unwrap();
    tokio::task::spawn_blocking(move || {
        let mut c = Raw::connect(addr);
        assert!(c.line().starts_with("* OK"));
        c.send(b"l LOGIN carol pw\r\n");
        assert_eq!(c.line(), "* BYE Injected fault (login)");
        assert!(c.closed());
    })
    .await
    .unwrap();
    assert_eq!(
        running.stats.faults(FaultPoint::ImapLogin, FaultKind::Fail),
        1
    );
    running.shutdown().await;
    for bad in ["fetch:MAYBE:0.1", "nowhere:NO:0.1", "fetch:NO:2"] {
        let e = parse_fail(bad).unwrap_err().to_string();
        assert!(e.starts_with("--fail") && !e.contains('\n'), "{e}");
    }
    let o = common::spate(&[
        "serve",
        "--imap",
        "127.0.0.1:0",
        "--fail",
        "fetch:MAYBE:0.1",
    ])
    .await;
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert_eq!(o.stderr.trim().lines().count(), 1, "{}", o.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop3_retr_failures_and_dele_drops_are_counted() {
    let faults = Faults {
        fails: vec![parse_fail("retr:-ERR:0.5").unwrap()],
        drops: vec![parse_drop("dele:1").unwrap()],
        seed: Some(5),
        ..Default::default()
    };
    let running = server(faults).await;
    let addr = running.addrs.pop3.unwrap();
    let seen = tokio::task::spawn_blocking(move || {
        let mut c = Raw::connect(addr);
        assert!(c.line().starts_with("+OK"));
        c.send(b"USER carol\r\nPASS pw\r\n");
        assert!(c.line().starts_with("+OK"));
        assert!(c.line().starts_with("+OK 3 messages"));
        let mut failed = 0;
        for i in 0..30 {
            c.send(format!("RETR {}\r\n", i % 3 + 1).as_bytes());
            let l = c.line();
            if l == "-ERR [SYS/TEMP] Injected fault (retr)" {
                failed += 1;
                continue;
            }
            assert!(l.starts_with("+OK"), "{l}");
            while c.line() != "." {}
        }
        c.send(b"DELE 1\r\n");
        assert!(c.closed(), "DELE was to be dropped");
        failed
    })
    .await
    .unwrap();
    assert!((3..27).contains(&seen), "{seen}");
    let stats = &running.stats;
    assert_eq!(stats.faults(FaultPoint::Pop3Retr, FaultKind::Fail), seen);
    assert_eq!(stats.faults(FaultPoint::Pop3Dele, FaultKind::Drop), 1);
    // The dropped session committed nothing.
    let left = running
        .store
        .with_mailbox("carol@example.test", |mb| mb.messages.len());
    assert_eq!(left, 3);
    running.shutdown().await;
}
