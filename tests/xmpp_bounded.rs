//! A closed `spate xmpp` workload bounded by `--duration` ends on time whatever the server
//! does: refuses every login (the embedded server, wrong passwords), accepts and stays
//! silent, or sends a byte a second forever. Sessions that are not logged in back off
//! between logins (or, refused for good, do not log in again) instead of spinning through
//! units (which once took both cores and ignored SIGTERM); and a run that logs some
//! sessions in still ends and counts every unit.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use common::{run_tool_env, SPATE};
use spate::serve::{self, Addrs, Config, Users};

/// Far above the run's 3 s and its grace: a run still going then is hung.
const HUNG: Duration = Duration::from_secs(60);

/// `spate xmpp ADDR --users N -d 3s --timeout 2s` with `password` (and `extra`, which
/// may name a --users-file instead of the pattern); (output, summary).
async fn run(
    addr: &str,
    users: &str,
    password: &str,
    extra: &[&str],
) -> (common::Output, serde_json::Value) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let mut args: Vec<String> = ["xmpp", addr, "--users", users, "-d", "3s"]
        .iter()
        .chain(["--timeout", "2s", "-q", "-o", out.to_str().unwrap()].iter())
        .map(|s| s.to_string())
        .collect();
    if extra.is_empty() {
        args.extend(["--user-pattern".into(), "u{0..9}@example.test".into()]);
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let env = vec![("SPATE_PASSWORD".to_string(), password.to_string())];
    let o = run_tool_env(SPATE, args, env, HUNG).await;
    assert!(o.code.is_some(), "killed after {HUNG:?}: {o:?}");
    let s = common::summary(&out);
    (o, s)
}

async fn embedded() -> serve::Running {
    let mut c = Config::loopback();
    let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
    c.listen = Addrs {
        xmpp: Some(lo),
        ..Addrs::default()
    };
    c.domains = vec!["example.test".into()];
    let users: String = (0..10).map(|i| format!("u{i}@example.test pw\n")).collect();
    c.users = Users::parse(&users).unwrap();
    serve::start(c).await.unwrap()
}

fn count(s: &serde_json::Value, k: &str) -> u64 {
    s["totals"][k].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_login_refused_ends_on_time_with_few_units_and_exit_1() {
    let server = embedded().await;
    let addr = server.addrs.xmpp.unwrap().to_string();
    let (o, s) = run(&addr, "3", "wrong", &[]).await;
    assert_eq!(o.code, Some(1), "{o:?}");
    assert_eq!(count(&s, "accepted"), 0, "{}", s["totals"]);
    // A refused login is not tried again, and the refused session's unit waits for the
    // run's end: a unit or so each in 3 s, not millions.
    let attempted = count(&s, "attempted");
    assert!(
        attempted <= 60,
        "a session that cannot log in spun: {}",
        s["totals"]
    );
    let errors = s["errors"].to_string();
    assert!(errors.contains("not-authorized"), "{errors}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_refused_login_among_several_ends_and_the_others_send() {
    let server = embedded().await;
    let addr = server.addrs.xmpp.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let users = tmp.path().join("users.txt");
    let lines: String = (0..4)
        .map(|i| {
            format!(
                "u{i}@example.test {}\n",
                if i == 3 { "wrong" } else { "pw" }
            )
        })
        .collect();
    std::fs::write(&users, lines).unwrap();
    let file = users.to_str().unwrap();
    let (o, s) = run(&addr, "4", "", &["--users-file", file, "--think", "20ms"]).await;
    assert!(o.ended(), "{o:?}");
    assert!(count(&s, "accepted") > 0, "{}", s["totals"]);
    // The session that cannot log in holds one unit until the others are done: a
    // handful of units that are not accepted, not millions.
    assert!(
        count(&s, "failed") + count(&s, "rejected") <= 20,
        "{}",
        s["totals"]
    );
    let errors = s["errors"].to_string();
    assert!(errors.contains("not-authorized"), "{errors}");
    server.shutdown().await;
}

/// A fake server: `silent` accepts and never sends; otherwise it sends one space a second
/// (a whitespace keepalive) forever.
async fn fake(silent: bool) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                // Bounded: the connection lives 40 s at most.
                for _ in 0..40 {
                    if !silent && sock.write_all(b" ").await.is_err() {
                        return;
                    }
                    match tokio::time::timeout(Duration::from_secs(1), sock.read(&mut buf)).await {
                        Ok(Ok(0)) | Ok(Err(_)) => return,
                        _ => {}
                    }
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_server_and_a_byte_a_second_end_on_time() {
    for silent in [true, false] {
        let addr = fake(silent).await;
        let (o, s) = run(&addr, "3", "pw", &[]).await;
        assert_eq!(o.code, Some(1), "silent={silent}: {o:?}");
        assert_eq!(count(&s, "accepted"), 0);
        let errors = s["errors"].to_string();
        assert!(
            errors.contains("timed out after 2.00s"),
            "silent={silent}: {errors}"
        );
    }
}

/// A fake server that logs the session in and then, instead of sending the session's own
/// presence back, sends other presences without end (one each 50 ms, for 40 s at most).
async fn presence_flood() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    const HEADER: &str = "<?xml version='1.0'?><stream:stream xmlns='jabber:client' \
        xmlns:stream='http://etherx.jabber.org/streams' from='example.test' id='f' version='1.0'>";
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                // Reads until the client has sent `want` (or gives up).
                async fn until(s: &mut tokio::net::TcpStream, buf: &mut [u8], want: &str) -> bool {
                    let mut seen = String::new();
                    while !seen.contains(want) {
                        match tokio::time::timeout(Duration::from_secs(5), s.read(buf)).await {
                            Ok(Ok(n)) if n > 0 => {
                                seen.push_str(&String::from_utf8_lossy(&buf[..n]))
                            }
                            _ => return false,
                        }
                    }
                    true
                }
                if !until(&mut sock, &mut buf, "<stream:stream").await {
                    return;
                }
                let features =
                    "<stream:features><mechanisms xmlns='urn:ietf:params:xml:ns:xmpp-sasl'>\
                    <mechanism>PLAIN</mechanism></mechanisms></stream:features>";
                let _ = sock
                    .write_all(format!("{HEADER}{features}").as_bytes())
                    .await;
                if !until(&mut sock, &mut buf, "</auth>").await {
                    return;
                }
                let _ = sock
                    .write_all(b"<success xmlns='urn:ietf:params:xml:ns:xmpp-sasl'/>")
                    .await;
                if !until(&mut sock, &mut buf, "<stream:stream").await {
                    return;
                }
                let bind = "<stream:features><bind xmlns='urn:ietf:params:xml:ns:xmpp-bind'/></stream:features>";
                let _ = sock.write_all(format!("{HEADER}{bind}").as_bytes()).await;
                let mut seen = String::new();
                while !seen.contains("</iq>") {
                    match tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf)).await {
                        Ok(Ok(n)) if n > 0 => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
                        _ => return,
                    }
                }
                let id = seen
                    .split("id='")
                    .nth(1)
                    .and_then(|r| r.split('\'').next())
                    .or_else(|| seen.split("id=\"").nth(1).and_then(|r| r.split('"').next()))
                    .unwrap_or("b")
                    .to_string();
                let result = format!(
                    "<iq type='result' id='{id}'><bind xmlns='urn:ietf:params:xml:ns:xmpp-bind'>\
                     <jid>u0@example.test/r</jid></bind></iq>"
                );
                let _ = sock.write_all(result.as_bytes()).await;
                for i in 0..800 {
                    let p = format!("<presence from='other{i}@example.test/x'/>");
                    if sock.write_all(p.as_bytes()).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            });
        }
    });
    addr
}

/// A login whose last phase never completes while the server keeps sending other
/// stanzas ends at the phase's deadline (the per-read timeout restarted with every
/// stanza, and the login never ended), and the run ends on time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_keeps_sending_other_stanzas_cannot_hold_a_login_open() {
    let addr = presence_flood().await;
    let (o, s) = run(&addr, "2", "pw", &[]).await;
    assert_eq!(o.code, Some(1), "{o:?}");
    assert_eq!(count(&s, "accepted"), 0);
    let errors = s["errors"].as_array().unwrap();
    assert!(
        errors
            .iter()
            .any(|e| e["phase"] == "presence" && e["kind"] == "timeout"),
        "{errors:?}"
    );
}

/// The memory slope of a run is taken after every session's login: logins paced at 1/s
/// for 8 sessions take 7 s, and the slope starts after them (it started at half of a
/// short run before, inside the logins, and warned of a leak that was the logins').
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_memory_slope_starts_after_the_logins() {
    let server = embedded().await;
    let addr = server.addrs.xmpp.unwrap().to_string();
    let extra = [
        "--user-pattern",
        "u{0..9}@example.test",
        "--login-rate",
        "1/s",
        "--think",
        "50ms",
        "--monitor",
    ];
    let (o, s) = run(&addr, "8", "pw", &extra).await;
    assert!(o.ended(), "{o:?}");
    let after = s["extra"]["monitor"]["memory_slope_after_s"]
        .as_f64()
        .unwrap();
    assert!(
        after >= 7.0,
        "slope from {after} s: {}",
        s["extra"]["monitor"]
    );
    server.shutdown().await;
}
