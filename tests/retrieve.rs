//! `spate pop3` / `spate imap` and the fetch API against the embedded server: counts that
//! reconcile, the mailbox counts the percentages predict, intact bodies, IDLE, errors.

mod common;

use common::{spate, summary};

use std::path::Path;
use std::time::Duration;

use spate::message::{body_digest, hex, split_message};
use spate::serve::{self, Config, Running};
use spate::session::mailbox::fetch::{self as retrieve, Account, MailProto, Watched};
use spate::session::Endpoint;

const USERS: usize = 5;

use common::embedded::Embedded as Bed;

fn user(i: usize) -> String {
    format!("user{i}@example.test")
}

/// The embedded server with POP3(S) and IMAP(S), USERS accounts (password `pw`), and
/// `per_box` messages in each mailbox.
async fn bed(per_box: usize) -> Bed {
    bed_with(per_box, Config::loopback()).await
}

async fn bed_with(per_box: usize, mut config: Config) -> Bed {
    let any = Some("127.0.0.1:0".parse().unwrap());
    config.listen.pop3 = any;
    config.listen.pop3s = any;
    config.listen.imap = any;
    config.listen.imaps = any;
    let table: String = (0..USERS).map(|i| format!("{} pw\n", user(i))).collect();
    let b = common::embedded::start(config, &table).await;
    for i in 0..USERS {
        for n in 0..per_box {
            let msg = format!(
                "From: a@example.test\r\nTo: {u}\r\nSubject: {n}\r\n\r\nmessage {n} for {u}\r\n.leading dot\r\n",
                u = user(i)
            );
            b.server.store.deliver(&user(i), msg.as_bytes()).unwrap();
        }
    }
    b
}

fn counts(server: &Running) -> Vec<usize> {
    (0..USERS)
        .map(|i| server.store.with_mailbox(&user(i), |mb| mb.messages.len()))
        .collect()
}

fn out(b: &Bed, name: &str) -> String {
    b.out(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop3_closed_load_with_deletes_leaves_the_predicted_counts() {
    let b = bed(20).await;
    let addr = b.server.addrs.pop3.unwrap().to_string();
    let o = out(&b, "pop3");
    let r = spate(&[
        "pop3",
        &addr,
        "--users-file",
        &b.users_file,
        "--users",
        "5",
        "--count",
        "5",
        "--delete",
        "50",
        "--listings",
        "-o",
        &o,
        "-q",
    ])
    .await;
    assert!(r.ok, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("retrieved 100 messages"), "{}", r.stdout);
    let s = summary(Path::new(&o));
    let t = &s["totals"];
    assert_eq!(s["protocol"], "pop3");
    assert_eq!(t["attempted"], 5);
    assert_eq!(t["accepted"], 5);
    assert_eq!(s["reconciles"], true);
    assert_eq!(t["retrieved"], 100);
    assert_eq!(t["deleted"], 50);
    // Round-robin visited every mailbox once; half of each was deleted at QUIT.
    assert_eq!(counts(&b.server), vec![10; USERS]);
    for p in [
        "connect", "greeting", "auth", "stat", "uidl", "list", "retr", "dele", "logout", "session",
    ] {
        assert!(common::phase_count(&s, p) > 0, "no {p} phase: {s}");
        assert!(Path::new(&o).join(format!("{p}.hlog")).exists(), "{p}.hlog");
    }
    assert_eq!(common::phase_count(&s, "retr"), 100);
    assert_eq!(common::phase_count(&s, "dele"), 50);
    assert!(!Path::new(&o).join("sent.log").exists());
    // intervals.csv carries the retrieval columns, and they add up.
    let sums = common::column_sums(Path::new(&o), &["retrieved", "deleted"]);
    let (retrieved, deleted) = (sums[0], sums[1]);
    // A visit has no SMTP transaction: no such column, rather than a 0 that reads as
    // one; its latency columns are the whole visit's, which every second with a visit
    // has.
    let iv = std::fs::read_to_string(Path::new(&o).join("intervals.csv")).unwrap();
    let head: Vec<&str> = iv.lines().next().unwrap().split(',').collect();
    assert!(!head.contains(&"transaction_p50_us"), "{head:?}");
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let (visit, accepted) = (col("session_p50_us"), col("accepted"));
    for l in iv.lines().skip(1) {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f[visit].is_empty(), f[accepted] == "0", "{l}");
    }
    assert_eq!((retrieved, deleted), (100, 50));
    b.server.shutdown().await;
}

/// Visits of uneven length drift apart, and round-robin alone then hands an account to a
/// visit while another still holds it: the server refuses the second login to the
/// maildrop (-ERR [IN-USE]). Visits in flight hold their accounts, so none is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop3_visits_in_flight_never_share_a_maildrop() {
    let mut config = Config::loopback();
    config
        .faults
        .delays
        .push(spate::serve::faults::parse_delay("list:0ms..8ms").unwrap());
    config.faults.seed = Some(3);
    let b = bed_with(1, config).await;
    let addr = b.server.addrs.pop3.unwrap().to_string();
    let o = out(&b, "pop3-apart");
    let r = spate(&[
        "pop3",
        &addr,
        "--users-file",
        &b.users_file,
        "--users",
        &(USERS - 1).to_string(),
        "--count",
        "200",
        "-o",
        &o,
        "-q",
    ])
    .await;
    assert!(r.ok, "{}\n{}", r.stdout, r.stderr);
    let t = &summary(Path::new(&o))["totals"];
    assert_eq!(
        (
            t["accepted"].as_u64(),
            t["rejected"].as_u64(),
            t["failed"].as_u64()
        ),
        (Some(200), Some(0), Some(0)),
        "{}",
        r.stdout
    );
    b.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imap_open_load_reads_flags_expunges_and_idles() {
    let b = bed(20).await;
    let addr = b.server.addrs.imap.unwrap().to_string();
    let o = out(&b, "imap");
    let r = spate(&[
        "imap",
        &addr,
        "--users-file",
        &b.users_file,
        "--rate",
        "20/s",
        "--count",
        "10",
        "--max-in-flight",
        "4",
        "-m",
        "4",
        "--download",
        "50",
        "--delete",
        "25",
        "--flag",
        "--search",
        "UNSEEN",
        "--idle",
        "20ms",
        "-o",
        &o,
        "-q",
    ])
    .await;
    assert!(r.ok, "{}\n{}", r.stdout, r.stderr);
    let s = summary(Path::new(&o));
    let t = &s["totals"];
    assert_eq!(t["attempted"], 10, "{s}");
    assert_eq!(t["accepted"], 10, "{s}");
    // 4 messages a visit: 2 read whole, 1 deleted, exactly.
    assert_eq!(t["retrieved"], 20);
    assert_eq!(t["deleted"], 10);
    assert_eq!(common::phase_count(&s, "fetch"), 40);
    assert_eq!(common::phase_count(&s, "store"), 40 + 10);
    for p in [
        "select", "search", "expunge", "idle", "logout", "response", "lag", "session",
    ] {
        assert!(common::phase_count(&s, p) > 0, "no {p} phase: {s}");
    }
    assert_eq!(counts(&b.server).iter().sum::<usize>(), USERS * 20 - 10);
    // Every fetched message is now \Seen.
    let seen = b.server.store.with_mailbox(&user(0), |mb| {
        mb.messages
            .iter()
            .filter(|m| m.flags & serve::store::flags::SEEN != 0)
            .count()
    });
    assert_eq!(
        seen, 3,
        "user0 was visited twice: 3 messages left of the 4 touched"
    );
    b.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_modes_and_a_pop3_imap_mix() {
    let b = bed(4).await;
    let pop3s = b.server.addrs.pop3s.unwrap().to_string();
    let imap = b.server.addrs.imap.unwrap().to_string();
    let pop3 = b.server.addrs.pop3.unwrap().to_string();
    let o = out(&b, "mix");
    let r = spate(&[
        "pop3",
        &pop3,
        "--users-file",
        &b.users_file,
        "--count",
        "10",
        "--starttls",
        "--ca",
        &b.ca,
        "--imap-percent",
        "30",
        "--imap-target",
        &imap,
        "--auth",
        "plain",
        "-o",
        &o,
        "-q",
    ])
    .await;
    assert!(r.ok, "{}\n{}", r.stdout, r.stderr);
    let s = summary(Path::new(&o));
    assert_eq!(s["protocol"], "pop3+imap");
    assert_eq!(s["totals"]["accepted"], 10, "{s}");
    assert_eq!(s["totals"]["tls_connections"], 10);
    assert_eq!(common::phase_count(&s, "select"), 3);
    assert_eq!(common::phase_count(&s, "stat"), 7);
    assert_eq!(common::phase_count(&s, "starttls"), 10);

    let o = out(&b, "pop3s");
    let r = spate(&[
        "pop3",
        &pop3s,
        "--users-file",
        &b.users_file,
        "--count",
        "3",
        "--tls",
        "--ca",
        &b.ca,
        "-o",
        &o,
        "-q",
    ])
    .await;
    assert!(r.ok, "{}\n{}", r.stdout, r.stderr);
    let s = summary(Path::new(&o));
    assert_eq!(s["totals"]["accepted"], 3, "{s}");
    assert_eq!(common::phase_count(&s, "tls"), 3);
    b.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_passwords_are_rejections_classified_by_reply() {
    let b = bed(1).await;
    let bad = b.dir.path().join("bad.txt");
    std::fs::write(&bad, format!("{} nope\n", user(0))).unwrap();
    let bad = bad.to_string_lossy().into_owned();
    for (cmd, addr, kind, text) in [
        (
            "pop3",
            b.server.addrs.pop3.unwrap(),
            "-ERR",
            "[AUTH] invalid credentials",
        ),
        (
            "imap",
            b.server.addrs.imap.unwrap(),
            "NO",
            "[AUTHENTICATIONFAILED] invalid credentials",
        ),
    ] {
        let o = out(&b, cmd);
        let a = addr.to_string();
        let r = spate(&[
            cmd,
            &a,
            "--users-file",
            &bad,
            "--count",
            "3",
            "-o",
            &o,
            "-q",
        ])
        .await;
        // Every visit refused: nothing accepted, exit status 1.
        assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
        let s = summary(Path::new(&o));
        assert_eq!(s["totals"]["rejected"], 3, "{s}");
        assert_eq!(s["reconciles"], true);
        let e = &s["errors"][0];
        assert_eq!(e["phase"], "auth", "{s}");
        assert_eq!(e["kind"], kind, "{s}");
        assert_eq!(e["text"], text, "{s}");
        assert_eq!(e["count"], 3);
        assert!(r.stdout.contains(&format!("auth {kind}")), "{}", r.stdout);
    }
    let (_, ep) = endpoint(&b, "imap");
    let acct = Account {
        user: user(0),
        password: "nope".into(),
    };
    let e = retrieve::fetch_mailbox(MailProto::Imap, &ep, &acct, false)
        .await
        .unwrap_err();
    assert!(
        e.to_string().starts_with("NO [AUTHENTICATIONFAILED]"),
        "{e}"
    );
    // Not reachable: one line, exit 1, no results directory.
    let o = out(&b, "none");
    let r = spate(&[
        "imap",
        "127.0.0.1:1",
        "--users-file",
        &b.users_file,
        "-o",
        &o,
    ])
    .await;
    assert!(!r.ok);
    assert!(
        r.stderr.starts_with("spate: cannot connect"),
        "{}",
        r.stderr
    );
    assert!(!Path::new(&o).exists());
    // No accounts: a usage error.
    let r = spate(&["pop3", "127.0.0.1:1"]).await;
    assert!(r.stderr.contains("--users-file"), "{}", r.stderr);
    b.server.shutdown().await;
}

fn endpoint(b: &Bed, scheme: &str) -> (MailProto, Endpoint) {
    let addr = match scheme {
        "imap" => b.server.addrs.imap,
        "imaps" => b.server.addrs.imaps,
        "pop3" => b.server.addrs.pop3,
        _ => b.server.addrs.pop3s,
    }
    .unwrap();
    let opts = spate::tls::ClientOptions {
        ca: Some(b.ca.clone()),
        ..Default::default()
    };
    retrieve::parse_url(
        &format!("{scheme}://{addr}"),
        &opts,
        Duration::from_secs(10),
    )
    .unwrap()
}

/// Sends `n` messages to user0 with `spate smtp`; returns the digests of the sent log.
async fn inject(b: &Bed, n: usize, name: &str) -> Vec<String> {
    let smtp = b.server.addrs.smtp.unwrap().to_string();
    let o = out(b, name);
    let count = n.to_string();
    let r = spate(&[
        "smtp",
        &smtp,
        "--to",
        &user(0),
        "--count",
        &count,
        "--size",
        "0..20k",
        "-o",
        &o,
        "-q",
    ])
    .await;
    assert!(r.ok, "{}", r.stderr);
    let sent = std::fs::read_to_string(Path::new(&o).join("sent.log")).unwrap();
    sent.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("seq"))
        .map(|l| l.split('\t').nth(2).unwrap().to_string())
        .collect()
}

/// The digest a message's trace header claims, and the digest of its body as read.
fn digests(raw: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(raw);
    let claimed = text
        .lines()
        .find(|l| l.starts_with("X-Spate-Trace:"))
        .and_then(|l| l.split("digest=").nth(1))
        .map(|d| d.split(';').next().unwrap().trim().to_string())
        .unwrap_or_default();
    let (_, body) = split_message(raw);
    (claimed, hex(&body_digest(body)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_mailbox_returns_intact_messages_over_both_protocols() {
    let b = bed(0).await;
    let mut want = inject(&b, 12, "smtp").await;
    want.sort();
    let acct = Account {
        user: user(0),
        password: "pw".into(),
    };
    for scheme in ["imaps", "pop3s", "imap"] {
        let (proto, ep) = endpoint(&b, scheme);
        let got = retrieve::fetch_mailbox(proto, &ep, &acct, false)
            .await
            .unwrap();
        let mut ds: Vec<String> = got
            .iter()
            .map(|f| {
                let (claimed, actual) = digests(&f.raw);
                assert_eq!(claimed, actual, "{scheme}: body changed in transit");
                actual
            })
            .collect();
        ds.sort();
        assert_eq!(ds, want, "{scheme}");
        let ids: std::collections::HashSet<_> = got.iter().map(|f| f.id.clone()).collect();
        assert_eq!(ids.len(), 12);
        if proto == MailProto::Imap {
            assert!(got.iter().all(|f| f.arrived.is_some()));
        }
    }
    // Deleting: POP3 reads all and deletes; the mailbox is empty afterwards.
    let (proto, ep) = endpoint(&b, "pop3");
    assert_eq!(
        retrieve::fetch_mailbox(proto, &ep, &acct, true)
            .await
            .unwrap()
            .len(),
        12
    );
    assert_eq!(counts(&b.server)[0], 0);
    inject(&b, 3, "smtp2").await;
    let (proto, ep) = endpoint(&b, "imap");
    assert_eq!(
        retrieve::fetch_mailbox(proto, &ep, &acct, true)
            .await
            .unwrap()
            .len(),
        3
    );
    assert_eq!(counts(&b.server)[0], 0);
    b.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_mailbox_reports_messages_as_they_arrive() {
    let b = bed(1).await;
    let (_, ep) = endpoint(&b, "imap");
    let acct = Account {
        user: user(0),
        password: "pw".into(),
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let watcher = tokio::spawn(async move {
        retrieve::watch_mailbox(&ep, &acct, move |w| drop(tx.send(w)), stop_rx).await
    });
    let recv = async |rx: &mut tokio::sync::mpsc::UnboundedReceiver<Watched>| {
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("the watcher reported nothing in 10 s")
            .expect("the watcher stopped")
    };
    let Watched::New(first) = recv(&mut rx).await else {
        panic!("the message already there comes first")
    };
    assert!(String::from_utf8_lossy(&first.raw).contains("message 0"));
    // Delivered once the watcher idles (its readiness signal): reported without polling.
    assert!(matches!(recv(&mut rx).await, Watched::Idling));
    let t0 = std::time::Instant::now();
    b.server
        .store
        .deliver(&user(0), b"Subject: late\r\n\r\nlate arrival\r\n")
        .unwrap();
    let Watched::New(late) = recv(&mut rx).await else {
        panic!("a delivery during IDLE is reported next")
    };
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(late.raw, b"Subject: late\r\n\r\nlate arrival\r\n");
    assert!(late.id.parse::<u32>().unwrap() > first.id.parse::<u32>().unwrap());
    stop_tx.send(true).unwrap();
    let r = tokio::time::timeout(Duration::from_secs(10), watcher)
        .await
        .unwrap()
        .unwrap();
    assert!(r.is_ok(), "{r:?}");
    // Nothing after the stop but IDLE restarts.
    while let Ok(w) = rx.try_recv() {
        assert!(matches!(w, Watched::Idling), "{w:?}");
    }
    b.server.shutdown().await;
}

#[test]
fn mailbox_urls() {
    let opts = spate::tls::ClientOptions::default();
    let t = Duration::from_secs(5);
    let (p, e) = retrieve::parse_url("imaps://127.0.0.1", &opts, t).unwrap();
    assert_eq!((p, e.addr.port()), (MailProto::Imap, 993));
    assert!(e.tls_config.is_some());
    let (p, e) = retrieve::parse_url("pop3://127.0.0.1:1110", &opts, t).unwrap();
    assert_eq!((p, e.addr.port()), (MailProto::Pop3, 1110));
    assert!(e.tls_config.is_none());
    let (_, e) = retrieve::parse_url("imap+starttls://[::1]:1143/", &opts, t).unwrap();
    assert_eq!(e.tls, spate::session::TlsMode::Starttls);
    assert!(retrieve::parse_url("http://x", &opts, t).is_err());
    assert!(retrieve::parse_url("127.0.0.1:143", &opts, t).is_err());
}

/// A POP3 "server" on a thread: greets (or not), then misbehaves per connection.
fn hostile(greeting: &'static [u8], after: &'static [u8], conns: usize) -> std::net::SocketAddr {
    use std::io::{BufRead, BufReader, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        // One probe connection (the reachability check) plus the visits.
        for s in l.incoming().take(conns + 1) {
            let Ok(mut s) = s else { continue };
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let _ = s.write_all(greeting);
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            let _ = r.read_line(&mut line);
            let _ = s.write_all(after);
            // Dropping the socket closes the connection.
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transport_failures_are_failed_visits_by_phase_and_kind() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("u.txt");
    std::fs::write(&users, "a@example.test pw\n").unwrap();
    let users = users.to_string_lossy().into_owned();
    for (greeting, after, phase, kind) in [
        (&b"+OK hi\r\n"[..], &b""[..], "auth", "closed"),
        (b"HELLO there\r\n", b"", "greeting", "protocol"),
        (
            b"+OK hi\r\n",
            b"+OK go on\r\n-ERR [SYS/TEMP] try later\r\n",
            "auth",
            "-ERR",
        ),
    ] {
        let addr = hostile(greeting, after, 2).to_string();
        let o = dir.path().join(phase).join(kind);
        let o = o.to_str().unwrap();
        let r = spate(&[
            "pop3",
            &addr,
            "--users-file",
            &users,
            "-n",
            "2",
            "--timeout",
            "5s",
            "-o",
            o,
            "-q",
        ])
        .await;
        // Every visit failed or refused: nothing accepted, exit status 1.
        assert_eq!(r.code, Some(1), "{}\n{}", r.stdout, r.stderr);
        let s = summary(Path::new(o));
        let t = &s["totals"];
        let (failed, rejected) = if kind == "-ERR" { (0, 2) } else { (2, 0) };
        assert_eq!(
            (t["failed"].as_u64(), t["rejected"].as_u64()),
            (Some(failed), Some(rejected)),
            "{s}"
        );
        assert_eq!(s["reconciles"], true);
        assert_eq!(s["errors"][0]["phase"], phase, "{s}");
        assert_eq!(s["errors"][0]["kind"], kind, "{s}");
        assert_eq!(s["errors"][0]["count"], 2, "{s}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apop_when_the_greeting_offers_it() {
    use spate::session::mailbox::client::Pop3;
    use spate::transport::Connection;
    let b = bed(2).await;
    let addr = b.server.addrs.pop3.unwrap();
    let open = || async {
        let c = Connection::connect(addr, None, Duration::from_secs(10))
            .await
            .unwrap();
        Pop3::greet(c).await.unwrap()
    };
    let mut p = open().await;
    assert!(
        spate::proto::pop3_client::apop_timestamp(&p.greeting).is_some(),
        "{}",
        p.greeting
    );
    // A wrong password makes a wrong digest.
    let e = p.login(&user(0), "nope", true).await.unwrap_err();
    assert!(e.to_string().starts_with("-ERR [AUTH]"), "{e}");
    let mut p = open().await;
    p.login(&user(0), "pw", true).await.unwrap();
    assert_eq!(p.stat().await.unwrap().0, 2);
    p.quit().await.unwrap();
    // And as a load option.
    let o = out(&b, "apop");
    let a = addr.to_string();
    let r = spate(&[
        "pop3",
        &a,
        "--users-file",
        &b.users_file,
        "-n",
        "5",
        "--auth",
        "apop",
        "-o",
        &o,
        "-q",
    ])
    .await;
    assert!(r.ok, "{}", r.stderr);
    assert_eq!(summary(Path::new(&o))["totals"]["accepted"], 5);
    b.server.shutdown().await;
}

/// POP3 and IMAP loads sweep like the others: `spate sweep --users 1,2 -- imap …` runs
/// each step as `spate imap`, and `--find-max users -- pop3 …` searches over them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mailbox_loads_sweep_and_find_their_maximum() {
    let b = bed(3).await;
    let imap = b.server.addrs.imap.unwrap().to_string();
    let o = out(&b, "sweep-imap");
    let r = spate(&[
        "sweep",
        "--users",
        "1,2",
        "--cool-down",
        "0s",
        "-o",
        &o,
        "--",
        "imap",
        &imap,
        "--users-file",
        &b.users_file,
        "--count",
        "4",
    ])
    .await;
    assert!(r.ok, "{}\n{}", r.stdout, r.stderr);
    let sweep: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(Path::new(&o).join("sweep.json")).unwrap())
            .unwrap();
    let rows = sweep["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{sweep}");
    for row in rows {
        let s = summary(&Path::new(&o).join(row["dir"].as_str().unwrap()));
        assert_eq!(
            (s["protocol"].as_str(), s["totals"]["accepted"].as_u64()),
            (Some("imap"), Some(4))
        );
    }
    let pop3 = b.server.addrs.pop3.unwrap().to_string();
    let o = out(&b, "find-pop3");
    let r = spate(&[
        "sweep",
        "--find-max",
        "users",
        "--objective",
        "errors.rate < 1%",
        "--up-to",
        "2",
        "--hold",
        "1s",
        "--warm-up",
        "0s",
        "--cool-down",
        "0s",
        "-o",
        &o,
        "--",
        "pop3",
        &pop3,
        "--users-file",
        &b.users_file,
        "--duration",
        "1s",
    ])
    .await;
    assert!(r.ok, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains(
            "most users that meet the objective: 2 (the highest load tried: --up-to), held for"
        ),
        "{}",
        r.stdout
    );
}
