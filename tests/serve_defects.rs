//! Defects of the embedded server found by real clients (fetchmail, mutt, mailutils,
//! imaptest, Python imaplib), each pinned by the exchange that showed it.

mod common;

use std::time::{Duration, Instant};

use common::{python, until_tag, Raw};
use spate::serve::{self, Config, Running, Users};

const MAIL: &str = "Date: Mon, 1 Jan 2024 10:00:00 +0000\r\n\
From: \"Doe, John\" <jd@x.test>\r\n\
To: a@b.test, Ann <ann@c.test>\r\n\
Cc: undisclosed-recipients:;\r\n\
Subject: hello\r\n\
Message-ID: <m1@x.test>\r\n\
\r\n\
line one\r\n\
.dotted\r\n\
line three\r\n";

async fn server(messages: usize, idle: Option<Duration>) -> Running {
    let mut config = Config::loopback();
    let any = Some("127.0.0.1:0".parse().unwrap());
    config.listen.pop3 = any;
    config.listen.pop3s = any;
    config.listen.imap = any;
    config.listen.imaps = any;
    config.users = Users::parse("carol@example.test pw\n").unwrap();
    if let Some(idle) = idle {
        config.idle_timeout = idle;
    }
    let running = serve::start(config).await.unwrap();
    for _ in 0..messages {
        running
            .store
            .deliver("carol@example.test", MAIL.as_bytes())
            .unwrap();
    }
    running
}

/// An IMAP session logged in as carol with INBOX selected.
fn imap_selected(addr: std::net::SocketAddr) -> Raw {
    let mut c = Raw::connect(addr);
    assert!(c.line().starts_with("* OK"));
    c.send(b"l LOGIN carol pw\r\ns SELECT INBOX\r\n");
    assert!(until_tag(&mut c, "l").last().unwrap().starts_with("l OK"));
    assert!(until_tag(&mut c, "s").last().unwrap().starts_with("s OK"));
    c
}

async fn blocking(f: impl FnOnce() + Send + 'static) {
    tokio::task::spawn_blocking(f).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imap_overlong_line_completes_its_tag() {
    let running = server(1, None).await;
    let addr = running.addrs.imap.unwrap();
    blocking(move || {
        let mut c = Raw::connect(addr);
        assert!(c.line().starts_with("* OK"));
        let mut long = b"a1 NOOP ".to_vec();
        long.extend(std::iter::repeat_n(b'x', 70_000));
        long.extend_from_slice(b"\r\n");
        c.send(&long);
        // Raw reads time out after 10 s: an untagged answer would leave a1 pending.
        let got = c.line();
        if got.starts_with("* BYE") {
            assert!(c.closed(), "BYE without closing");
        } else {
            assert!(got.starts_with("a1 BAD"), "{got:?}");
            c.send(b"a2 NOOP\r\n");
            assert_eq!(c.line(), "a2 OK completed");
        }
        // A tag that only shows after a literal is still the command's tag.
        c.send(b"a3 LOGIN {5+}\r\ncarol ");
        let mut rest = vec![b'y'; 70_000];
        rest.extend_from_slice(b"\r\n");
        c.send(&rest);
        let got = c.line();
        assert!(got.starts_with("a3 BAD"), "{got:?}");
    })
    .await;
    running.shutdown().await;
}

const CAPS: &str = r#"
import imaplib, poplib, ssl, sys
port, sport, psport, ca = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ctx = ssl.create_default_context(cafile=ca)
s = imaplib.IMAP4_SSL("127.0.0.1", sport, ssl_context=ctx, timeout=20)
print("imaps greeting:", s.welcome.decode())
print("imaps caps:", " ".join(s.capabilities))
s.login("carol", "pw")
print("imaps authed:", s.capability()[1][0].decode())
s.logout()
m = imaplib.IMAP4("127.0.0.1", port, timeout=20)
print("imap greeting:", m.welcome.decode())
m.login("carol", "pw")
print("imap authed:", m.capability()[1][0].decode())
m.logout()
p = poplib.POP3_SSL("127.0.0.1", psport, context=ctx, timeout=20)
print("pop3s capa:", " ".join(sorted(p.capa())))
p.user("carol"); p.pass_("pw")
print("pop3s authed:", " ".join(sorted(p.capa())))
p.quit()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capabilities_offer_only_what_works_now() {
    let running = server(1, None).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &running.cert_pem).unwrap();
    let args = [
        running.addrs.imap.unwrap().port().to_string(),
        running.addrs.imaps.unwrap().port().to_string(),
        running.addrs.pop3s.unwrap().port().to_string(),
        ca.to_string_lossy().into_owned(),
    ];
    let out = python(CAPS, &args).await;
    assert!(out.ok, "{}", out.stderr);
    let line = |name: &str| {
        out.stdout
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name} in {}", out.stdout))
            .to_string()
    };
    let greeting = line("imaps greeting");
    assert!(greeting.contains("AUTH=PLAIN"), "{greeting}");
    for tls in [greeting, line("imaps caps"), line("pop3s capa")] {
        assert!(!tls.contains("STARTTLS") && !tls.contains("STLS"), "{tls}");
    }
    assert!(line("imap greeting").contains("STARTTLS"));
    for authed in [line("imaps authed"), line("imap authed")] {
        assert!(authed.contains("IMAP4rev1"), "{authed}");
        for gone in ["AUTH=", "STARTTLS", "LOGINDISABLED"] {
            assert!(!authed.contains(gone), "{gone} in {authed}");
        }
    }
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imap_message_number_above_exists_is_bad() {
    let running = server(2, None).await;
    let addr = running.addrs.imap.unwrap();
    blocking(move || {
        let mut c = imap_selected(addr);
        for (tag, cmd) in [
            ("f1", "FETCH 99 FLAGS"),
            ("f2", "FETCH 1:3 FLAGS"),
            ("f3", "STORE 99 +FLAGS (\\Seen)"),
        ] {
            c.send(format!("{tag} {cmd}\r\n").as_bytes());
            let lines = until_tag(&mut c, tag);
            assert_eq!(lines.len(), 1, "data sent for {cmd}: {lines:?}");
            assert!(lines[0].starts_with(&format!("{tag} BAD")), "{lines:?}");
        }
        // A missing UID names nothing, which is no error (RFC 3501 6.4.8).
        c.send(b"u1 UID FETCH 99 FLAGS\r\n");
        assert_eq!(until_tag(&mut c, "u1"), ["u1 OK FETCH completed"]);
        c.send(b"o1 FETCH 2:* FLAGS\r\n");
        // The first session to select the mailbox sees its messages as \Recent.
        assert_eq!(
            until_tag(&mut c, "o1"),
            ["* 2 FETCH (FLAGS (\\Recent))", "o1 OK FETCH completed"]
        );
    })
    .await;
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imap_lsub_answers_as_lsub() {
    let running = server(0, None).await;
    let addr = running.addrs.imap.unwrap();
    blocking(move || {
        let mut c = Raw::connect(addr);
        assert!(c.line().starts_with("* OK"));
        c.send(b"l LOGIN carol pw\r\nx LSUB \"\" \"*\"\r\n");
        until_tag(&mut c, "l");
        let lines = until_tag(&mut c, "x");
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(lines[0].starts_with("* LSUB ") && lines[0].ends_with("INBOX"));
        assert_eq!(lines[1], "x OK LSUB completed");
    })
    .await;
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imap_envelope_carries_the_addresses() {
    let running = server(1, None).await;
    let addr = running.addrs.imap.unwrap();
    blocking(move || {
        let mut c = imap_selected(addr);
        c.send(b"e FETCH 1 ENVELOPE\r\n");
        let from = r#"(("Doe, John" NIL "jd" "x.test"))"#;
        let want = format!(
            "* 1 FETCH (ENVELOPE (\"Mon, 1 Jan 2024 10:00:00 +0000\" \"hello\" \
             {from} {from} {from} \
             ((NIL NIL \"a\" \"b.test\")(\"Ann\" NIL \"ann\" \"c.test\")) \
             ((NIL NIL \"undisclosed-recipients\" NIL)(NIL NIL NIL NIL)) \
             NIL NIL \"<m1@x.test>\"))"
        );
        assert_eq!(
            until_tag(&mut c, "e"),
            [want, "e OK FETCH completed".into()]
        );
    })
    .await;
    running.shutdown().await;
}

/// Logs in to POP3 as carol: the answer to PASS.
fn pop_login(c: &mut Raw) -> String {
    assert!(c.line().starts_with("+OK"));
    c.send(b"USER carol\r\nPASS pw\r\n");
    assert!(c.line().starts_with("+OK"));
    c.line()
}

/// A multi-line POP3 answer after its status line: the octets it carries (unstuffed).
fn pop_octets(c: &mut Raw) -> usize {
    let mut n = 0;
    for _ in 0..1000 {
        // Raw::line trims the line end; the message has no trailing spaces to lose.
        let l = c.line();
        if l == "." {
            return n;
        }
        n += l.strip_prefix('.').unwrap_or(&l).len() + 2;
    }
    panic!("no end to a multi-line answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop3_top_reports_what_it_sends() {
    let running = server(1, None).await;
    let addr = running.addrs.pop3.unwrap();
    blocking(move || {
        let mut c = Raw::connect(addr);
        assert!(pop_login(&mut c).starts_with("+OK 1 messages"));
        for (cmd, lines) in [("TOP 1 0", 0), ("TOP 1 2", 2), ("RETR 1", 99)] {
            c.send(format!("{cmd}\r\n").as_bytes());
            let status = c.line();
            let sent = pop_octets(&mut c);
            let header = MAIL.find("\r\n\r\n").unwrap() + 4;
            let want = MAIL[header..].split_inclusive("\r\n").take(lines);
            assert_eq!(sent, header + want.map(str::len).sum::<usize>(), "{cmd}");
            let said: usize = status
                .split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or(sent);
            assert_eq!(said, sent, "{cmd}: {status}");
        }
    })
    .await;
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop3_maildrop_is_locked_per_session() {
    let running = server(3, Some(Duration::from_secs(1))).await;
    let addr = running.addrs.pop3.unwrap();
    blocking(move || {
        let mut a = Raw::connect(addr);
        assert!(pop_login(&mut a).starts_with("+OK 3 messages"));
        let mut b = Raw::connect(addr);
        let refused = pop_login(&mut b);
        assert!(refused.starts_with("-ERR [IN-USE]"), "{refused}");
        a.send(b"DELE 1\r\nDELE 2\r\nDELE 3\r\nQUIT\r\n");
        let got: Vec<String> = (0..4).map(|_| a.line()).collect();
        assert_eq!(got[3], "+OK bye, 3 deleted", "{got:?}");
        // Still in AUTHORIZATION: the same connection may try again once A is gone.
        b.send(b"USER carol\r\nPASS pw\r\n");
        assert!(b.line().starts_with("+OK"));
        assert_eq!(b.line(), "+OK 0 messages");
        b.send(b"QUIT\r\n");
        assert_eq!(b.line(), "+OK bye, 0 deleted");
        // Closing without QUIT releases the lock too ...
        let mut c = Raw::connect(addr);
        assert!(pop_login(&mut c).starts_with("+OK"));
        drop(c);
        // The session that got the lock holds it (a new connection here would race with
        // the server's end of the one before).
        let _d = login_within(addr, Duration::from_secs(5)).expect("lock kept after close");
        // ... and so does the idle timeout (1 s here): that session stays silent.
        std::thread::sleep(Duration::from_millis(1500));
        assert!(
            login_within(addr, Duration::from_secs(5)).is_some(),
            "lock kept after idle"
        );
    })
    .await;
    running.shutdown().await;
}

/// A POP3 session logged in (not -ERR [IN-USE]) before `limit`, holding the maildrop's
/// lock. The server notices a closed connection asynchronously, so a refusal is retried
/// for a while.
fn login_within(addr: std::net::SocketAddr, limit: Duration) -> Option<Raw> {
    let start = Instant::now();
    while start.elapsed() < limit {
        let mut c = Raw::connect(addr);
        if pop_login(&mut c).starts_with("+OK") {
            return Some(c);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}
