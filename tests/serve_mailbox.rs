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
