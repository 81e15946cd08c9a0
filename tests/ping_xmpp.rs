//! `spate ping xmpp://` end to end (the binary): against the embedded server, one login
//! with every phase and round trips to itself, reconciled with the server's counters; a
//! wrong password; options that make no sense for XMPP; and a fake server that never
//! echoes (each message lost after the deadline, never a hang).

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{run_tool_env, Output, SPATE};
use spate::serve::{self, Addrs, Config, Running, Users};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const JID: &str = "alice@example.test";

/// The embedded server with XMPP on a free loopback port and one account.
async fn start() -> Running {
    let mut c = Config::loopback();
    c.listen = Addrs {
        xmpp: Some("127.0.0.1:0".parse().unwrap()),
        ..Addrs::default()
    };
    c.domains = vec!["example.test".into()];
    c.users = Users::parse(&format!("{JID} s3cret\n")).unwrap();
    serve::start(c).await.unwrap()
}

/// `spate ping ARGS` with SPATE_PASSWORD set to `password`.
async fn ping(args: &[&str], password: &str) -> Output {
    let mut a = vec!["ping".to_string()];
    a.extend(args.iter().map(|s| s.to_string()));
    let env = vec![("SPATE_PASSWORD".to_string(), password.to_string())];
    run_tool_env(SPATE, a, env, Duration::from_secs(60)).await
}

fn write_ca(r: &Running, dir: &Path) -> String {
    let ca = dir.join("ca.pem");
    std::fs::write(&ca, &r.cert_pem).unwrap();
    ca.to_string_lossy().into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starttls_ping_times_every_login_phase_and_five_round_trips() {
    let server = start().await;
    let dir = tempfile::tempdir().unwrap();
    let ca = write_ca(&server, dir.path());
    let json = dir.path().join("ping.json");
    let target = format!("xmpp://{}", server.addrs.xmpp.unwrap());
    let before = server.stats.xmpp();
    let o = ping(
        &[
            &target,
            "--user",
            JID,
            "-n",
            "5",
            "-w",
            "10ms",
            "--starttls",
            "--ca",
            &ca,
            "--json",
            json.to_str().unwrap(),
        ],
        "s3cret",
    )
    .await;
    assert!(o.ok, "exit {:?}\n{}\n{}", o.code, o.stdout, o.stderr);
    let login = o
        .stdout
        .lines()
        .find(|l| l.starts_with("login "))
        .unwrap_or_else(|| panic!("{}", o.stdout));
    for phase in [
        "connect", "stream", "starttls", "tls", "auth", "bind", "presence",
    ] {
        assert!(login.contains(&format!(" {phase}=")), "{phase}: {login}");
        // Each phase also has its row in the table.
        assert!(
            o.stdout
                .lines()
                .any(|l| l.starts_with(&format!("{phase} "))),
            "no {phase} row:\n{}",
            o.stdout
        );
    }
    // The stream restarts after STARTTLS and after SASL: three streams, in order.
    assert_eq!(login.matches(" stream=").count(), 3, "{login}");
    assert!(login.contains(&format!("jid={JID}/")), "{login}");
    for seq in 1..=5 {
        assert!(
            o.stdout
                .lines()
                .any(|l| l.starts_with(&format!("seq={seq} ")) && l.contains("rtt=")),
            "seq {seq}:\n{}",
            o.stdout
        );
    }
    assert!(
        o.stdout.contains("5 sent, 5 received, 0 lost, 0 failed"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.lines().any(|l| l.starts_with("rtt ")),
        "{}",
        o.stdout
    );
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(j["total"]["count"], 5, "{j}");
    assert_eq!(j["phases"]["stream"]["count"], 3, "{j}");
    assert_eq!(j["lost"], 0, "{j}");
    // The server routed exactly the five messages, each to the pinging session.
    let t = Instant::now();
    let after = loop {
        let x = server.stats.xmpp();
        if x.sessions == 0 || t.elapsed() > Duration::from_secs(10) {
            break x;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(after.message_deliveries - before.message_deliveries, 5);
    assert_eq!(after.bounces, before.bounces);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_is_not_authorized_in_one_line() {
    let server = start().await;
    let target = format!("xmpp://{}", server.addrs.xmpp.unwrap());
    let o = ping(&[&target, "--user", JID, "-n", "2", "-w", "0"], "wrong").await;
    assert_eq!(o.code, Some(1), "{}\n{}", o.stdout, o.stderr);
    let lines: Vec<&str> = o
        .stdout
        .lines()
        .filter(|l| l.contains("not-authorized"))
        .collect();
    assert_eq!(lines.len(), 1, "{}", o.stdout);
    assert!(lines[0].starts_with("login "), "{}", lines[0]);
    assert!(
        lines[0].contains("ERROR auth: not-authorized"),
        "{}",
        lines[0]
    );
    assert!(!o.stdout.contains("seq="), "{}", o.stdout);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smtp_options_and_missing_accounts_are_refused_with_exit_2() {
    let t = "xmpp://127.0.0.1:5222";
    let cases: &[(&[&str], &str)] = &[
        (&[t, "--user", JID, "--to", "bob@example.test"], "--to"),
        (&[t, "--user", JID, "--from", "bob@example.test"], "--from"),
        (&[t, "--user", JID, "--lmtp"], "--lmtp"),
        (&[t, "--user", JID, "--pipelining"], "--pipelining"),
        (&[t], "--user JID"),
        (&[t, "--user", "alice"], "not a bare JID"),
        (&[t, "--user", JID, "-w", "500"], "500ms"),
        (
            &["xmpps://127.0.0.1:5223", "--user", JID],
            "unsupported scheme",
        ),
        (&["127.0.0.1:2525", "--sasl", "plain"], "--sasl"),
    ];
    for (args, needle) in cases {
        let o = ping(args, "pw").await;
        assert_eq!(o.code, Some(2), "{args:?}: {}\n{}", o.stdout, o.stderr);
        let err = o.stderr.trim();
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// A server that logs the client in (PLAIN, bind, presence echoed) and then swallows
/// every stanza: nothing comes back.
async fn swallowing_server(listener: TcpListener) {
    const HEADER: &str = "<?xml version='1.0'?><stream:stream xmlns='jabber:client' \
        xmlns:stream='http://etherx.jabber.org/streams' from='example.test' id='x' version='1.0'>";
    let full = format!("{JID}/spate0");
    let script = [
        format!(
            "{HEADER}<stream:features><mechanisms xmlns='urn:ietf:params:xml:ns:xmpp-sasl'>\
             <mechanism>PLAIN</mechanism></mechanisms></stream:features>"
        ),
        "<success xmlns='urn:ietf:params:xml:ns:xmpp-sasl'/>".to_string(),
        format!(
            "{HEADER}<stream:features><bind xmlns='urn:ietf:params:xml:ns:xmpp-bind'/>\
             </stream:features>"
        ),
        format!(
            "<iq type='result' id='b1'><bind xmlns='urn:ietf:params:xml:ns:xmpp-bind'>\
             <jid>{full}</jid></bind></iq>"
        ),
        format!("<presence from='{full}' to='{full}'/>"),
    ];
    let Ok((mut sock, _)) = listener.accept().await else {
        return;
    };
    let mut buf = vec![0u8; 64 * 1024];
    // The client speaks and waits at each step: one read, one scripted answer.
    for answer in &script {
        match tokio::time::timeout(Duration::from_secs(10), sock.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
        if sock.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
    for _ in 0..10_000 {
        match tokio::time::timeout(Duration::from_secs(30), sock.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            _ => return,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_that_never_come_back_are_lost_after_the_deadline() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let server = tokio::spawn(swallowing_server(listener));
    let target = format!("xmpp://{addr}");
    let t = Instant::now();
    let o = ping(
        &[
            &target,
            "--user",
            JID,
            "-n",
            "2",
            "-w",
            "0",
            "--timeout",
            "1s",
        ],
        "pw",
    )
    .await;
    let took = t.elapsed();
    server.abort();
    assert_eq!(o.code, Some(1), "{}\n{}", o.stdout, o.stderr);
    for seq in 1..=2 {
        assert!(
            o.stdout
                .lines()
                .any(|l| l.starts_with(&format!("seq={seq} ")) && l.contains("LOST")),
            "seq {seq}:\n{}",
            o.stdout
        );
    }
    assert!(
        o.stdout.contains("2 sent, 0 received, 2 lost"),
        "{}",
        o.stdout
    );
    // Two deadlines of 1 s and a bounded goodbye: no hang.
    assert!(took < Duration::from_secs(15), "took {took:?}");
}
