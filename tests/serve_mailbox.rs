//! Mail sent over SMTP read back intact with Python's poplib and imaplib.

mod common;

use common::python;
use spate::serve::{self, Config, Running, Users};

const BODY: &str = "From: a@example.test\r\nTo: carol@example.test\r\nSubject: number {i}\r\nX-Spate-Id: id-{i}\r\n\r\nfirst line\r\n.dotted line\r\nlast line {i}\r\n";

async fn with_mail(n: usize) -> (Running, tempfile::TempDir, String) {
    let mut config = Config::loopback();
    config.listen.pop3 = Some("127.0.0.1:0".parse().unwrap());
    config.listen.imap = Some("127.0.0.1:0".parse().unwrap());
    config.listen.imaps = Some("127.0.0.1:0".parse().unwrap());
    config.users = Users::parse("carol@example.test pw\n").unwrap();
    let running = serve::start(config).await.unwrap();
    for i in 0..n {
        let msg = BODY.replace("{i}", &i.to_string());
        running
            .store
            .deliver("carol@example.test", msg.as_bytes())
            .unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &running.cert_pem).unwrap();
    let ca = ca.to_string_lossy().into_owned();
    (running, dir, ca)
}

const POP: &str = r#"
import poplib, ssl, sys
port, ca = int(sys.argv[1]), sys.argv[2]
body = sys.argv[3]
p = poplib.POP3("127.0.0.1", port, timeout=20)
caps = p.capa()
assert "STLS" in caps and "UIDL" in caps, caps
p.stls(context=ssl.create_default_context(cafile=ca))
try:
    p.user("carol@example.test"); p.pass_("wrong")
    print("bad password accepted")
except poplib.error_proto as e:
    print("bad password:", e)
p.user("carol"); p.pass_("pw")
n, size = p.stat()
print("stat", n, size)
uidls = p.uidl()[1]
assert len(uidls) == n
for i in range(1, n + 1):
    resp, lines, octets = p.retr(i)
    got = b"\r\n".join(lines) + b"\r\n"
    want = body.replace("{i}", str(i - 1)).encode()
    assert got == want, (got, want)
resp, lines, octets = p.top(1, 1)
print("top", lines[-1].decode())
p.dele(1); p.dele(2)
print("stat after dele", p.stat()[0])
p.rset()
p.dele(3)
p.quit()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poplib_retrieves_intact_and_commits_deletes_at_quit() {
    let (running, _dir, ca) = with_mail(5).await;
    let port = running.addrs.pop3.unwrap().port().to_string();
    let out = python(POP, &[port, ca, BODY.to_string()]).await;
    assert!(out.ok, "{}", out.stderr);
    assert!(
        out.stdout.contains("bad password: b'-ERR [AUTH]"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("stat 5 "), "{}", out.stdout);
    assert!(out.stdout.contains("top first line"), "{}", out.stdout);
    assert!(out.stdout.contains("stat after dele 3"), "{}", out.stdout);
    let left = running.store.with_mailbox("carol@example.test", |mb| {
        mb.messages.iter().map(|m| m.uid).collect::<Vec<_>>()
    });
    assert_eq!(left, vec![1, 2, 4, 5]);
    let snap = running.stats.snapshot();
    assert_eq!(snap.messages_retrieved, 5);
    assert_eq!(snap.tls_sessions, 1);
    running.shutdown().await;
}

const IMAP: &str = r#"
import imaplib, ssl, sys
port, sport, ca, body = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context(cafile=ca)
m = imaplib.IMAP4("127.0.0.1", port, timeout=20)
assert "STARTTLS" in m.capabilities, m.capabilities
m.starttls(ssl_context=ctx)
try:
    m.login("carol@example.test", "nope")
    print("bad login accepted")
except imaplib.IMAP4.error as e:
    print("bad login:", e)
m.login("carol", "pw")
typ, data = m.select("INBOX")
print("select", typ, data)
typ, data = m.search(None, "ALL")
print("search", data[0].decode())
typ, data = m.uid("SEARCH", None, "HEADER", "X-Spate-Id", "id-3")
print("uid search", data[0].decode())
for i in range(1, 6):
    typ, data = m.fetch(str(i), "(BODY.PEEK[])")
    got = data[0][1]
    want = body.replace("{i}", str(i - 1)).encode()
    assert got == want, (got, want)
typ, data = m.fetch("2", "(FLAGS UID RFC822.SIZE INTERNALDATE BODY.PEEK[HEADER.FIELDS (SUBJECT)])")
print("fetch2", data[0][0].decode(), data[0][1].decode().strip())
typ, data = m.fetch("1:2", "(RFC822)")
typ, data = m.fetch("1", "(FLAGS)")
print("flags1", data[0].decode())
typ, data = m.store("1:2", "+FLAGS", "(\\Deleted)")
print("store", [d.decode() for d in data])
typ, data = m.expunge()
print("expunge", [d.decode() for d in data])
typ, data = m.search(None, "UNSEEN")
print("unseen", data[0].decode())
m.logout()
s = imaplib.IMAP4_SSL("127.0.0.1", sport, ssl_context=ctx, timeout=20)
s.login("carol", "pw")
typ, data = s.select("INBOX", readonly=True)
print("examine", data[0].decode())
typ, data = s.uid("FETCH", "1:*", "(UID)")
print("uids", [d.decode() for d in data])
s.logout()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imaplib_reads_searches_flags_and_expunges() {
    let (running, _dir, ca) = with_mail(5).await;
    let port = running.addrs.imap.unwrap().port().to_string();
    let sport = running.addrs.imaps.unwrap().port().to_string();
    let out = python(IMAP, &[port, sport, ca, BODY.to_string()]).await;
    assert!(out.ok, "{}", out.stderr);
    let o = &out.stdout;
    for want in [
        "bad login: b'[AUTHENTICATIONFAILED]",
        "select OK [b'5']",
        "search 1 2 3 4 5",
        "uid search 4",
        "fetch2 2 (FLAGS (\\Recent) UID 2 RFC822.SIZE",
        "Subject: number 1",
        "flags1 1 (FLAGS (\\Seen \\Recent))",
        "expunge ['1', '1']",
        "unseen 1 2 3",
        "examine 3",
        "uids ['1 (UID 3)', '2 (UID 4)', '3 (UID 5)']",
    ] {
        assert!(o.contains(want), "missing {want:?} in\n{o}");
    }
    assert_eq!(running.store.mailbox_counts()[0].1, 3);
    assert_eq!(running.stats.snapshot().mailbox_logins, 2);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_reports_new_mail() {
    let (running, _dir, _ca) = with_mail(1).await;
    let addr = running.addrs.imap.unwrap();
    let store = running.store.clone();
    tokio::task::spawn_blocking(move || {
        let mut c = common::Raw::connect(addr);
        assert!(c.line().starts_with("* OK"));
        c.send(b"a LOGIN carol pw\r\na2 SELECT INBOX\r\n");
        let mut lines = Vec::new();
        for _ in 0..20 {
            let l = c.line();
            let done = l.starts_with("a2 ");
            lines.push(l);
            if done {
                break;
            }
        }
        assert!(lines.iter().any(|l| l == "* 1 EXISTS"), "{lines:?}");
        c.send(b"a3 IDLE\r\n");
        assert_eq!(c.line(), "+ idling");
        store
            .deliver("carol@example.test", b"Subject: new\r\n\r\nx\r\n")
            .unwrap();
        assert_eq!(c.line(), "* 2 EXISTS");
        // Both are \Recent in the only session that has INBOX selected.
        assert_eq!(c.line(), "* 2 RECENT");
        c.send(b"DONE\r\n");
        assert_eq!(c.line(), "a3 OK IDLE terminated");
        c.send(b"a4 LOGOUT\r\n");
        assert_eq!(c.line(), "* BYE logging out");
    })
    .await
    .unwrap();
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pop3_and_imap_survive_garbage() {
    let (running, _dir, _ca) = with_mail(1).await;
    let pop = running.addrs.pop3.unwrap();
    let imap = running.addrs.imap.unwrap();
    tokio::task::spawn_blocking(move || {
        let mut p = common::Raw::connect(pop);
        assert!(p.line().starts_with("+OK"));
        p.send(
            b"\x00\xffgarbage\r\nRETR 1\r\nUSER carol\r\nPASS pw\r\nRETR 9\r\nRETR 0\r\nSTAT\r\n",
        );
        let got: Vec<String> = (0..7).map(|_| p.line()).collect();
        assert!(got[0].starts_with("-ERR"), "{got:?}");
        assert!(got[1].starts_with("-ERR not in TRANSACTION"), "{got:?}");
        assert!(got[3].starts_with("+OK 1 messages"), "{got:?}");
        assert!(got[4].starts_with("-ERR no such message"), "{got:?}");
        assert!(got[5].starts_with("-ERR no such message"), "{got:?}");
        assert!(got[6].starts_with("+OK 1 "), "{got:?}");

        let mut c = common::Raw::connect(imap);
        assert!(c.line().starts_with("* OK"));
        c.send(b"a FETCH 1 FLAGS\r\nb LOGIN {999999999}\r\n");
        assert_eq!(c.line(), "a BAD log in first");
        assert_eq!(c.line(), "* BAD literal too large");
        let mut long = vec![b'x'; 70_000];
        long.extend_from_slice(b"\r\n");
        c.send(&long);
        assert_eq!(c.line(), "* BAD line too long");
        for i in 0..17 {
            c.send(format!("t{i} BOGUS\r\n").as_bytes());
            assert_eq!(c.line(), format!("t{i} BAD unknown command"));
        }
        c.send(b"z BOGUS\r\n");
        assert_eq!(c.line(), "z BAD unknown command");
        assert_eq!(c.line(), "* BYE too many errors");
        assert!(c.closed());
    })
    .await
    .unwrap();
    running.shutdown().await;
}
