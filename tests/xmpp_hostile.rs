//! `spate xmpp` against broken and hostile servers (a fake server in the test): malformed
//! XML, nesting 10 000 deep, a 300 KiB stanza, a stream error, a close mid-login, a server
//! that never answers. Each is an error of the session with its condition, within the
//! deadline: never a panic, a hang, or memory that follows the server's bytes.

mod common;

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const HEADER: &str = "<?xml version='1.0'?><stream:stream xmlns='jabber:client' \
    xmlns:stream='http://etherx.jabber.org/streams' from='example.test' id='x' version='1.0'>";
const FEATURES: &str = "<stream:features><mechanisms xmlns='urn:ietf:params:xml:ns:xmpp-sasl'>\
    <mechanism>PLAIN</mechanism></mechanisms></stream:features>";

/// What the fake server does once the client has sent its stream header.
#[derive(Clone, Copy)]
enum Act {
    Send(&'static str),
    Big,
    Deep,
    /// Features, then close when the client sends its <auth>.
    CloseAtAuth,
    Silent,
}

async fn serve(listener: TcpListener, act: Act) {
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            // The client's stream header (or nothing: the preflight's connect).
            match tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => {}
                _ => return,
            }
            let _ = sock.write_all(HEADER.as_bytes()).await;
            match act {
                Act::Send(s) => {
                    let _ = sock.write_all(s.as_bytes()).await;
                }
                Act::Big => {
                    let mut s = String::from("<message><body>");
                    s.push_str(&"x".repeat(300 * 1024));
                    let _ = sock.write_all(s.as_bytes()).await;
                }
                Act::Deep => {
                    let _ = sock.write_all("<a>".repeat(10_000).as_bytes()).await;
                }
                Act::CloseAtAuth => {
                    let _ = sock.write_all(FEATURES.as_bytes()).await;
                    let _ = sock.read(&mut buf).await;
                    return;
                }
                Act::Silent => {}
            }
            // Keep the connection open until the client gives up.
            tokio::time::sleep(Duration::from_secs(30)).await;
        });
    }
}

/// Runs spate against a fake server acting `act`; returns the summary and the stdout.
async fn against(act: Act) -> (serde_json::Value, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(serve(listener, act));
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    std::env::set_var("SPATE_PASSWORD", "pw");
    let t = Instant::now();
    let o = common::spate(&[
        "xmpp",
        &addr,
        "--user-pattern",
        "u{0..1}@example.test",
        "--users",
        "2",
        "-n",
        "2",
        "--timeout",
        "2s",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    server.abort();
    assert!(
        t.elapsed() < Duration::from_secs(30),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(o.code, Some(1), "{}\n{}", o.stdout, o.stderr);
    // Why, in one line: no session got through its login.
    assert!(
        o.stdout
            .contains("2 of 2 sessions never logged in (see the error table): exit status 1"),
        "{}",
        o.stdout
    );
    (common::summary(&out), o.stdout)
}

fn error_with(s: &serde_json::Value, phase: &str, text: &str) {
    let errors = s["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e["phase"] == phase && e["text"].as_str().unwrap().contains(text)),
        "no {phase} error with {text:?}: {errors:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_servers_are_errors_of_their_sessions() {
    let (s, _) = against(Act::Send("<stream:features><a></b></stream:features>")).await;
    error_with(&s, "stream", "");
    assert_eq!(s["totals"]["failed"], 2);
    let (s, _) = against(Act::Deep).await;
    error_with(&s, "stream", "deep");
    let (s, _) = against(Act::Big).await;
    error_with(&s, "stream", "longer than");
    let (s, _) = against(Act::Send(
        "<stream:error><host-unknown xmlns='urn:ietf:params:xml:ns:xmpp-streams'/></stream:error></stream:stream>",
    ))
    .await;
    error_with(&s, "stream", "host-unknown");
    let (s, _) = against(Act::CloseAtAuth).await;
    error_with(&s, "auth", "");
    let (s, _) = against(Act::Silent).await;
    error_with(&s, "stream", "timed out after 2.00s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_one_line_and_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let users = tmp.path().join("users.txt");
    std::fs::write(&users, "not-a-jid secret\n").unwrap();
    let u = users.to_str().unwrap();
    let bad_raw = tmp.path().join("raw.txt");
    std::fs::write(&bad_raw, "<message to='{to}'/>\n<iq type='get' id='x'/>\n").unwrap();
    std::env::set_var("SPATE_PASSWORD", "pw");
    for (args, want) in [
        (
            &["xmpp", "127.0.0.1:5222", "--users-file", u][..],
            "not a bare JID",
        ),
        (
            &[
                "xmpp",
                "127.0.0.1:5222",
                "--user-pattern",
                "u{0..9}@x",
                "--users",
                "1",
            ][..],
            "at least 2",
        ),
        (
            &[
                "xmpp",
                "127.0.0.1:5222",
                "--user-pattern",
                "u{0..2}@x",
                "--users",
                "5",
            ][..],
            "only 3 accounts",
        ),
        (&["xmpp", "127.0.0.1:5222"][..], "--users-file"),
        (
            &[
                "xmpp",
                "127.0.0.1:5222",
                "--user-pattern",
                "u{0..1}@a@example.test",
                "--users",
                "2",
            ][..],
            "not a bare JID",
        ),
        (
            &[
                "xmpp",
                "127.0.0.1:5222",
                "--user-pattern",
                "u{0..9}@x",
                "--users",
                "4",
                "--traffic",
                "multicast",
                "--addresses",
                "9",
            ][..],
            "at most the 3 other sessions",
        ),
        (
            &[
                "xmpp",
                "127.0.0.1:5222",
                "--user-pattern",
                "u{0..9}@x",
                "--sasl",
                "md5",
            ][..],
            "md5",
        ),
        (
            &[
                "xmpp",
                "127.0.0.1:5222",
                "--user-pattern",
                "u{0..9}@x",
                "--users",
                "4",
                "--presence-every",
                "60s",
                "--rate",
                "10/s",
            ][..],
            "--rate: a traffic mix",
        ),
        (
            &[
                "xmpp",
                "127.0.0.1:5222",
                "--user-pattern",
                "u{0..9}@x",
                "--users",
                "4",
                "--presence-every",
                "0s",
            ][..],
            "--presence-every must be more than 0",
        ),
        (
            &[
                "xmpp",
                "127.0.0.1:5222",
                "--user-pattern",
                "u{0..9}@x",
                "--message-rate",
                "10/s",
                "--message-every",
                "1s",
            ][..],
            "cannot be used with",
        ),
        (
            &[
                "xmpp",
                "127.0.0.1:5222",
                "--user-pattern",
                "u{0..9}@x",
                "--raw",
                bad_raw.to_str().unwrap(),
            ][..],
            "raw.txt:2: an <iq> needs id='{id}'",
        ),
        (
            &[
                "xmpp",
                "127.0.0.1:5222",
                "--user-pattern",
                "u{0..9}@x",
                "--raw-rate",
                "5/s",
            ][..],
            "raw traffic needs its stanzas: --raw FILE",
        ),
    ] {
        let o = common::spate(args).await;
        assert_eq!(o.code, Some(2), "{args:?}: {}", o.stderr);
        assert_eq!(o.stderr.trim_end().lines().count(), 1, "{}", o.stderr);
        assert!(
            o.stderr.contains(want),
            "{args:?}: want {want:?} in {}",
            o.stderr
        );
    }
}
