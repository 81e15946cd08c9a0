//! Fault injection: what the client sees must equal what the server says it injected.

mod common;

use std::time::{Duration, Instant};

use common::{python, Raw};
use spate::serve::faults::{self, FaultKind, FaultPoint as Phase, Faults};
use spate::serve::{self, Config};

const RCPT_LOOP: &str = r#"
import smtplib, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
codes = {}
with smtplib.SMTP("127.0.0.1", port, timeout=20) as s:
    s.ehlo("c")
    for i in range(n):
        s.mail("a@example.test")
        code, _ = s.rcpt("r%d@example.test" % i)
        codes[code] = codes.get(code, 0) + 1
        s.rset()
print(" ".join("%d=%d" % kv for kv in sorted(codes.items())))
"#;

fn flaky(f: &[&str], seed: u64) -> Config {
    let mut c = Config::loopback();
    c.faults = Faults {
        fails: f.iter().map(|s| faults::parse_fail(s).unwrap()).collect(),
        seed: Some(seed),
        ..Faults::default()
    };
    c
}

fn count(out: &str, code: u16) -> u64 {
    out.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{code}=")))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rcpt_failures_seen_equal_failures_injected_and_repeat_with_the_seed() {
    let mut seen = Vec::new();
    for _ in 0..2 {
        let running = serve::start(flaky(&["rcpt:451:0.5"], 42)).await.unwrap();
        let port = running.addrs.smtp.unwrap().port();
        let out = python(RCPT_LOOP, &[port.to_string(), "200".into()]).await;
        assert!(out.ok);
        let n451 = count(&out.stdout, 451);
        assert_eq!(n451 + count(&out.stdout, 250), 200, "{}", out.stdout);
        assert!((60..140).contains(&n451), "{}", out.stdout);
        assert_eq!(running.stats.faults(Phase::Rcpt, FaultKind::Fail), n451);
        assert_eq!(running.stats.rejections(451), n451);
        seen.push(n451);
        running.shutdown().await;
    }
    assert_eq!(seen[0], seen[1], "same seed, same faults");
}

const MESSAGES: &str = r#"
import smtplib, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
ok = dropped = 0
codes = {}
for i in range(n):
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=20) as s:
            s.sendmail("a@example.test", ["b@example.test"], "Subject: %d\r\n\r\nx\r\n" % i)
            ok += 1
    except smtplib.SMTPServerDisconnected:
        dropped += 1
    except smtplib.SMTPDataError as e:
        codes[e.smtp_code] = codes.get(e.smtp_code, 0) + 1
print("ok=%d dropped=%d" % (ok, dropped), " ".join("%d=%d" % kv for kv in sorted(codes.items())))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_failures_and_drops_reconcile() {
    let mut config = flaky(&["data:554:0.2", "dot:451:0.2"], 7);
    config.faults.drops = vec![faults::parse_drop("dot:0.2").unwrap()];
    let running = serve::start(config).await.unwrap();
    let port = running.addrs.smtp.unwrap().port();
    let out = python(MESSAGES, &[port.to_string(), "60".into()]).await;
    assert!(out.ok);
    let s = &running.stats;
    let ok = out
        .stdout
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("ok="))
        .unwrap()
        .parse::<u64>()
        .unwrap();
    let dropped: u64 = out
        .stdout
        .split_whitespace()
        .find_map(|kv| kv.strip_prefix("dropped="))
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        s.faults(Phase::Data, FaultKind::Fail),
        count(&out.stdout, 554)
    );
    assert_eq!(
        s.faults(Phase::Dot, FaultKind::Fail),
        count(&out.stdout, 451)
    );
    assert_eq!(s.faults(Phase::Dot, FaultKind::Drop), dropped);
    assert!(dropped > 0 && count(&out.stdout, 554) > 0, "{}", out.stdout);
    assert_eq!(s.messages(), ok);
    assert_eq!(running.store.delivered(), ok);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delays_tarpit_banner_failure_and_connection_cap() {
    let mut config = Config::loopback();
    config.faults.delays = vec![faults::parse_delay("mail:150ms").unwrap()];
    config.faults.tarpit = Some(Duration::from_millis(20));
    config.max_connections = 2;
    let running = serve::start(config).await.unwrap();
    let addr = running.addrs.smtp.unwrap();
    tokio::task::spawn_blocking(move || {
        let mut a = Raw::connect(addr);
        assert!(a.last().starts_with("220"));
        a.send(b"HELO a\r\n");
        a.last();
        let t = Instant::now();
        a.send(b"MAIL FROM:<>\r\n");
        assert!(a.last().starts_with("250"));
        assert!(
            t.elapsed() >= Duration::from_millis(170),
            "{:?}",
            t.elapsed()
        );
        let mut b = Raw::connect(addr);
        assert!(b.last().starts_with("220"));
        let mut c = Raw::connect(addr);
        assert_eq!(c.last(), "421 4.7.0 Too many connections, try again later");
        assert!(c.closed());
        drop(a);
        b.send(b"QUIT\r\n");
        assert!(b.last().starts_with("221"));
    })
    .await
    .unwrap();
    let snap = running.stats.snapshot();
    assert_eq!(snap.refused_connections, 1);
    assert_eq!(snap.faults.get("mail:delay"), Some(&1));
    running.shutdown().await;

    let running = serve::start(flaky(&["banner:421:1"], 1)).await.unwrap();
    let addr = running.addrs.smtp.unwrap();
    tokio::task::spawn_blocking(move || {
        let mut a = Raw::connect(addr);
        assert!(a.last().starts_with("421 4.3.0 Injected fault (connect)"));
        assert!(a.closed());
    })
    .await
    .unwrap();
    assert_eq!(running.stats.faults(Phase::Connect, FaultKind::Fail), 1);
    running.shutdown().await;
}
