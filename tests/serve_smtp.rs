//! The embedded SMTP/submission/LMTP server driven by clients nobody here wrote: Python's
//! smtplib, swaks and Postfix's smtp-source, plus raw pipelined sessions.

mod common;

use std::time::Duration;

use common::{have, python, run_tool, Raw};
use spate::serve::{self, Config, Users};

fn message_of(running: &serve::Running, mailbox: &str) -> Vec<Vec<u8>> {
    running.store.with_mailbox(mailbox, |mb| {
        mb.messages.iter().map(|m| m.data.to_vec()).collect()
    })
}

const SEND: &str = r#"
import smtplib, sys
port = int(sys.argv[1])
msg = "From: a@example.test\r\nSubject: hi\r\n\r\nline one\r\n.starts with a dot\r\n..two dots\r\nlast\r\n"
with smtplib.SMTP("127.0.0.1", port, timeout=20) as s:
    code, ext = s.ehlo("client.test")
    assert code == 250, code
    for e in ["pipelining", "size", "8bitmime", "enhancedstatuscodes", "starttls", "auth"]:
        assert s.has_extn(e), e
    refused = s.sendmail("a@example.test", ["u1@example.test", "U2@Example.test", "x@elsewhere.test"], msg)
    print("refused", sorted(refused.items()))
    code, text = s.rset()
    print("rset", code)
    code, text = s.docmd("VRFY", "u1")
    print("vrfy", code, text.decode())
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtplib_plain_delivers_intact_and_rejects_unknown_domains() {
    let running = serve::start(Config::loopback()).await.unwrap();
    let port = running.addrs.smtp.unwrap().port();
    let out = python(SEND, &[port.to_string()]).await;
    assert!(out.ok, "{}", out.stderr);
    assert!(
        out.stdout
            .contains("refused [('x@elsewhere.test', (550, b'5.1.1 Recipient address rejected: user unknown'))]"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("rset 250"));
    assert!(out.stdout.contains("vrfy 502 5.5.1"));
    let want: &[u8] =
        b"From: a@example.test\r\nSubject: hi\r\n\r\nline one\r\n.starts with a dot\r\n..two dots\r\nlast\r\n";
    assert_eq!(message_of(&running, "u1@example.test"), vec![want.to_vec()]);
    assert_eq!(message_of(&running, "u2@example.test"), vec![want.to_vec()]);
    assert_eq!(running.stats.messages(), 1);
    assert_eq!(running.stats.recipients(), 2);
    assert_eq!(running.stats.rejections(550), 1);
    running.shutdown().await;
}

const TLS_AUTH: &str = r#"
import smtplib, ssl, sys
port, ca, mech, password = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
ctx = ssl.create_default_context(cafile=ca)
with smtplib.SMTP("127.0.0.1", port, timeout=20) as s:
    s.ehlo("client.test")
    try:
        s.sendmail("alice@example.test", ["bob@example.test"], "Subject: x\r\n\r\nnope\r\n")
        print("unauthenticated send accepted")
    except smtplib.SMTPSenderRefused as e:
        print("before auth", e.smtp_code, e.smtp_error.decode())
    s.starttls(context=ctx)
    s.ehlo("client.test")
    assert not s.has_extn("starttls")
    print("cipher", s.sock.cipher()[1])
    s.login("alice@example.test", password) if mech == "default" else None
    if mech != "default":
        s.user, s.password = "alice@example.test", password
        code, resp = s.auth(mech, getattr(s, "auth_" + mech.lower().replace("-", "_")), initial_response_ok=(mech == "PLAIN"))
        print("auth", code)
    s.sendmail("alice@example.test", ["bob@example.test"], "Subject: tls\r\n\r\nover TLS\r\n")
    print("sent")
"#;

async fn submission_with_users() -> (serve::Running, tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::loopback();
    config.listen.smtp = None;
    config.listen.submission = Some("127.0.0.1:0".parse().unwrap());
    config.users = Users::parse("alice@example.test s3cret\nbob@example.test pw\n").unwrap();
    let running = serve::start(config).await.unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &running.cert_pem).unwrap();
    let ca = ca.to_string_lossy().into_owned();
    (running, dir, ca)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtplib_starttls_and_auth_on_submission() {
    let (running, _dir, ca) = submission_with_users().await;
    let port = running.addrs.submission.unwrap().port().to_string();
    for mech in ["default", "PLAIN", "LOGIN", "CRAM-MD5"] {
        let out = python(
            TLS_AUTH,
            &[port.clone(), ca.clone(), mech.into(), "s3cret".into()],
        )
        .await;
        assert!(out.ok, "{mech}: {}", out.stderr);
        assert!(
            out.stdout
                .contains("before auth 530 5.7.0 Authentication required"),
            "{}",
            out.stdout
        );
        assert!(out.stdout.contains("sent"), "{}", out.stdout);
        assert!(out.stdout.contains("cipher TLSv1.3"), "{}", out.stdout);
    }
    let out = python(TLS_AUTH, &[port, ca, "PLAIN".into(), "wrong".into()]).await;
    assert!(!out.ok);
    assert!(out.stderr.contains("535"), "{}", out.stderr);
    assert_eq!(message_of(&running, "bob@example.test").len(), 4);
    let snap = running.stats.snapshot();
    assert_eq!(snap.auth_successes, 4);
    assert_eq!(snap.auth_failures, 1);
    assert_eq!(snap.tls_sessions, 5);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_batches_get_all_replies_in_order() {
    let running = serve::start(Config::loopback()).await.unwrap();
    let addr = running.addrs.smtp.unwrap();
    let got = tokio::task::spawn_blocking(move || {
        let mut c = Raw::connect(addr);
        let mut seen = vec![c.last()];
        c.send(b"EHLO x\r\nMAIL FROM:<a@example.test> SIZE=10\r\nRCPT TO:<p@example.test>\r\nRCPT TO:<nobody@other.test>\r\nRCPT TO:<q@example.test>\r\nDATA\r\n");
        for _ in 0..6 {
            seen.push(c.last());
        }
        c.send(b"Subject: p\r\n\r\nbody\r\n.\r\nMAIL FROM:<>\r\nRCPT TO:<p@example.test>\r\nBDAT 6\r\nab\r\ncdBDAT 0 LAST\r\nQUIT\r\n");
        for _ in 0..6 {
            seen.push(c.last());
        }
        seen
    })
    .await
    .unwrap();
    let codes: Vec<&str> = got.iter().map(|l| &l[..3.min(l.len())]).collect();
    assert_eq!(
        codes,
        [
            "220", "250", "250", "250", "550", "250", "354", "250", "250", "250", "250", "250",
            "221"
        ],
        "{got:#?}"
    );
    assert_eq!(
        message_of(&running, "p@example.test")[1],
        b"ab\r\ncd".to_vec()
    );
    assert_eq!(message_of(&running, "q@example.test").len(), 1);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_and_sequence_errors() {
    let mut config = Config::loopback();
    config.max_rcpt = 2;
    config.max_message_size = 100;
    let running = serve::start(config).await.unwrap();
    let addr = running.addrs.smtp.unwrap();
    let got = tokio::task::spawn_blocking(move || {
        let mut c = Raw::connect(addr);
        let mut seen = vec![c.last()];
        let steps: &[&[u8]] = &[
            b"MAIL FROM:<a@example.test>\r\n",
            b"EHLO x\r\n",
            b"RCPT TO:<a@example.test>\r\n",
            b"DATA\r\n",
            b"MAIL FROM:<a@example.test> SIZE=1000\r\n",
            b"MAIL FROM:<a@example.test>\r\n",
            b"MAIL FROM:<a@example.test>\r\n",
            b"DATA\r\n",
            b"RCPT TO:<1@example.test>\r\n",
            b"RCPT TO:<2@example.test>\r\n",
            b"RCPT TO:<3@example.test>\r\n",
            b"DATA\r\n",
        ];
        for s in steps {
            c.send(s);
            seen.push(c.last());
        }
        let big = vec![b'x'; 500];
        c.send(&big);
        c.send(b"\r\n.\r\nNOOP\r\nBDAT 3\r\n");
        seen.push(c.last());
        seen.push(c.last());
        c.send(b"abc");
        seen.push(c.last());
        seen
    })
    .await
    .unwrap();
    let codes: Vec<String> = got.iter().map(|l| l.chars().take(9).collect()).collect();
    assert_eq!(
        codes,
        [
            "220 spate",
            "503 5.5.1",
            "250 AUTH ",
            "503 5.5.1",
            "503 5.5.1",
            "552 5.3.4",
            "250 2.1.0",
            "503 5.5.1",
            "554 5.5.1",
            "250 2.1.5",
            "250 2.1.5",
            "452 4.5.3",
            "354 End d",
            "552 5.3.4",
            "250 2.0.0",
            "503 5.5.1"
        ],
        "{got:#?}"
    );
    assert_eq!(running.store.delivered(), 0);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lmtp_replies_once_per_recipient() {
    let mut config = Config::loopback();
    config.listen.smtp = None;
    config.listen.lmtp = Some("127.0.0.1:0".parse().unwrap());
    config.max_message_size = 100;
    let running = serve::start(config).await.unwrap();
    let port = running.addrs.lmtp.unwrap().port();
    let script = r#"
import smtplib, sys
s = smtplib.LMTP("127.0.0.1", int(sys.argv[1]))
s.ehlo_or_helo_if_needed()
print(s.sendmail("a@example.test", ["l1@example.test", "l2@example.test", "no@x.test"], "Subject: l\r\n\r\nlmtp\r\n"))
s.quit()
"#;
    let out = python(script, &[port.to_string()]).await;
    assert!(out.ok, "{}", out.stderr);
    assert!(out.stdout.contains("'no@x.test': (550"), "{}", out.stdout);
    let addr = running.addrs.lmtp.unwrap();
    let got = tokio::task::spawn_blocking(move || {
        let mut c = Raw::connect(addr);
        let mut seen = vec![c.last()];
        c.send(b"EHLO x\r\nLHLO x\r\nMAIL FROM:<>\r\nRCPT TO:<l1@example.test>\r\nRCPT TO:<l3@example.test>\r\nDATA\r\n");
        for _ in 0..6 {
            seen.push(c.last());
        }
        c.send(b"hello\r\n.\r\n");
        seen.push(c.last());
        seen.push(c.last());
        // Too big: still one reply per recipient.
        c.send(b"MAIL FROM:<>\r\nRCPT TO:<l1@example.test>\r\nRCPT TO:<l2@example.test>\r\nDATA\r\n");
        for _ in 0..4 {
            seen.push(c.last());
        }
        c.send(&[b'z'; 200]);
        c.send(b"\r\n.\r\n");
        seen.push(c.last());
        seen.push(c.last());
        seen
    })
    .await
    .unwrap();
    assert!(got[1].starts_with("500"), "{got:?}");
    assert!(got[7].starts_with("250 2.0.0 <l1@example.test>"), "{got:?}");
    assert!(got[8].starts_with("250 2.0.0 <l3@example.test>"), "{got:?}");
    assert!(got[12].starts_with("354"), "{got:?}");
    assert!(
        got[13].starts_with("552 5.3.4") && got[14].starts_with("552 5.3.4"),
        "{got:?}"
    );
    assert_eq!(message_of(&running, "l1@example.test").len(), 2);
    assert_eq!(running.stats.recipients(), 4);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swaks_starttls_auth_and_pipelining() {
    if !have("swaks") {
        return;
    }
    let (running, _dir, _ca) = submission_with_users().await;
    let server = running.addrs.submission.unwrap().to_string();
    let base = |extra: &[&str]| {
        let mut v: Vec<String> = [
            "--server",
            &server,
            "--from",
            "alice@example.test",
            "--to",
            "bob@example.test",
            "--auth",
            "PLAIN",
            "--auth-user",
            "alice@example.test",
            "--auth-password",
            "s3cret",
            "--timeout",
            "20",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    for extra in [
        &["--tls"][..],
        &["--pipeline"][..],
        &["--tls", "--pipeline"][..],
    ] {
        let out = run_tool("swaks", base(extra), Duration::from_secs(60)).await;
        assert!(out.ok, "swaks {extra:?}:\n{}\n{}", out.stdout, out.stderr);
    }
    assert_eq!(message_of(&running, "bob@example.test").len(), 3);
    assert_eq!(running.stats.snapshot().tls_sessions, 2);
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtp_source_500_messages_over_10_sessions() {
    if !have("smtp-source") {
        return;
    }
    let running = serve::start(Config::loopback()).await.unwrap();
    let addr = running.addrs.smtp.unwrap().to_string();
    let args: Vec<String> = [
        "-s",
        "10",
        "-m",
        "500",
        "-d",
        "-f",
        "src@example.test",
        "-t",
        "sink@example.test",
        &addr,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = run_tool("smtp-source", args, Duration::from_secs(120)).await;
    assert!(out.ok, "{}\n{}", out.stdout, out.stderr);
    assert_eq!(running.store.delivered(), 500);
    assert_eq!(message_of(&running, "sink@example.test").len(), 500);
    assert_eq!(running.stats.messages(), 500);
    running.shutdown().await;
}

const SMTPS: &str = r#"
import smtplib, ssl, sys
port, ca = int(sys.argv[1]), sys.argv[2]
ctx = ssl.create_default_context(cafile=ca)
sizes = [60, 80, 10]
for i, n in enumerate(sizes):
    with smtplib.SMTP_SSL("127.0.0.1", port, context=ctx, timeout=20) as s:
        try:
            s.sendmail("a@example.test", ["m@example.test"], "S: %d\r\n\r\n" % i + "x" * n + "\r\n")
            print("sent", i)
        except smtplib.SMTPDataError as e:
            print("refused", i, e.smtp_code, e.smtp_error.decode())
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtps_memory_cap_and_maildir() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::loopback();
    config.listen.smtp = None;
    config.listen.smtps = Some("127.0.0.1:0".parse().unwrap());
    config.store.memory_cap = 150;
    config.store.maildir = Some(dir.path().join("maildir"));
    let running = serve::start(config).await.unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &running.cert_pem).unwrap();
    let port = running.addrs.smtps.unwrap().port().to_string();
    let out = python(SMTPS, &[port, ca.to_string_lossy().into_owned()]).await;
    assert!(out.ok, "{}", out.stderr);
    assert!(out.stdout.contains("sent 0"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("refused 1 452 4.3.1 Insufficient system storage"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("sent 2"), "{}", out.stdout);
    assert_eq!(running.store.delivered(), 2);
    let new = dir.path().join("maildir/m@example.test/new");
    let files: Vec<_> = std::fs::read_dir(&new).unwrap().collect();
    assert_eq!(files.len(), 2);
    let snap = running.stats.snapshot();
    assert_eq!(snap.tls_sessions, 3);
    assert_eq!(snap.rejections.get(&452), Some(&1));
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cram_md5_with_a_bare_local_part() {
    let (running, _dir, _ca) = submission_with_users().await;
    let port = running.addrs.submission.unwrap().port().to_string();
    let script = r#"
import smtplib, sys
s = smtplib.SMTP("127.0.0.1", int(sys.argv[1]), timeout=20)
s.ehlo("c")
s.user, s.password = sys.argv[2], sys.argv[3]
try:
    print("auth", s.auth("CRAM-MD5", s.auth_cram_md5)[0])
except smtplib.SMTPAuthenticationError as e:
    print("auth", e.smtp_code)
"#;
    let ok = python(script, &[port.clone(), "alice".into(), "s3cret".into()]).await;
    assert!(ok.stdout.contains("auth 235"), "{}", ok.stdout);
    let bad = python(script, &[port, "alice".into(), "wrong".into()]).await;
    assert!(bad.stdout.contains("auth 535"), "{}", bad.stdout);
    running.shutdown().await;
}

/// `spate serve --threads N`: the sessions run on N threads of the server's own (and it
/// says so), and every message sent is counted. Without it, on half the CPUs.
#[test]
fn serve_runs_its_sessions_on_the_threads_asked_for() {
    use std::io::Read;
    let half = std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1));
    for (asked, threads) in [(Some(1usize), 1usize), (Some(3), 3), (None, half)] {
        let dir = tempfile::tempdir().unwrap();
        let stats = dir.path().join("stats.json");
        let asked = asked.map(|n| format!("--threads={n}"));
        let mut extra: Vec<&std::ffi::OsStr> = vec!["--discard".as_ref(), "--stats-file".as_ref()];
        extra.push(stats.as_os_str());
        extra.extend(asked.iter().map(std::ffi::OsStr::new));
        let (mut server, addr) = common::serve_process("--smtp", &extra);
        let pid = server.0.id();
        let named = std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .filter(|t| {
                let comm = t.as_ref().unwrap().path().join("comm");
                std::fs::read_to_string(comm).is_ok_and(|c| c.trim() == "spate-server")
            })
            .count();
        assert_eq!(named, threads, "threads named spate-server");
        let run = dir.path().join("run");
        let out = common::run_blocking(
            common::SPATE,
            &[
                "smtp",
                &addr,
                "--users",
                "8",
                "--count",
                "400",
                "--quiet",
                "--out",
                run.to_str().unwrap(),
            ],
            &[],
            Duration::from_secs(60),
        );
        assert!(out.ok, "{}", out.stderr);
        // The counters are rewritten every second.
        let t0 = std::time::Instant::now();
        let accepted = loop {
            let n = std::fs::read_to_string(&stats)
                .ok()
                .and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok())
                .and_then(|v| v["messages_accepted"].as_u64());
            if n == Some(400) || t0.elapsed() > Duration::from_secs(10) {
                break n;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        assert_eq!(accepted, Some(400));
        // SAFETY: a signal to the server this test started.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        let status = common::wait_bounded(&mut server.0, Duration::from_secs(20));
        assert!(status.is_some_and(|s| s.success()), "{status:?}");
        let mut text = String::new();
        server
            .0
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        assert!(
            text.contains(&format!("; {threads} session threads;")),
            "{text}"
        );
    }
}
