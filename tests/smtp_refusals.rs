//! How spate behaves before servers it did not write (OpenSMTPD's habits, scripted here):
//! a 4xx to MAIL (a per-session message cap) ends the connection and spate goes on with
//! a new one, each refusal counted once as a rejection; a server that does not offer
//! AUTH gets no AUTH command and no unauthenticated mail.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use common::{spate, summary};

#[derive(Default)]
struct Seen {
    connections: AtomicU64,
    mails: AtomicU64,
    max_mails_per_connection: AtomicU64,
    auths: AtomicU64,
}

/// A server that takes one message per connection and answers any later MAIL with
/// `452 4.5.3 Too many messages sent`; it offers AUTH only when `auth` is set.
async fn capped_server(auth: bool) -> (String, Arc<Seen>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    tokio::spawn(async move {
        for _ in 0..100 {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            s.connections.fetch_add(1, Ordering::Relaxed);
            let s = s.clone();
            tokio::spawn(async move {
                let (r, mut w) = tcp.into_split();
                let mut lines = BufReader::new(r).lines();
                let _ = w.write_all(b"220 capped ESMTP\r\n").await;
                let (mut mails, mut in_data) = (0u64, false);
                while let Ok(Some(line)) = lines.next_line().await {
                    let reply: &[u8] = if in_data {
                        if line != "." {
                            continue;
                        }
                        in_data = false;
                        b"250 2.0.0 queued\r\n"
                    } else {
                        match line.get(..4).unwrap_or("").to_ascii_uppercase().as_str() {
                            "EHLO" if auth => b"250-capped\r\n250-PIPELINING\r\n250 AUTH PLAIN\r\n",
                            "EHLO" => b"250-capped\r\n250 PIPELINING\r\n",
                            "AUTH" => {
                                s.auths.fetch_add(1, Ordering::Relaxed);
                                b"235 2.7.0 ok\r\n"
                            }
                            "MAIL" => {
                                mails += 1;
                                s.mails.fetch_add(1, Ordering::Relaxed);
                                s.max_mails_per_connection
                                    .fetch_max(mails, Ordering::Relaxed);
                                if mails > 1 {
                                    b"452 4.5.3 Too many messages sent\r\n"
                                } else {
                                    b"250 2.0.0 ok\r\n"
                                }
                            }
                            "DATA" => {
                                in_data = true;
                                b"354 go on\r\n"
                            }
                            "QUIT" => {
                                let _ = w.write_all(b"221 bye\r\n").await;
                                return;
                            }
                            _ => b"250 2.0.0 ok\r\n",
                        }
                    };
                    if w.write_all(reply).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_4xx_to_mail_ends_the_connection_and_is_counted_once() {
    let (addr, seen) = capped_server(false).await;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let o = spate(&[
        "smtp",
        &addr,
        "-u",
        "1",
        "-m",
        "0",
        "-n",
        "6",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let s = summary(&out);
    let t = &s["totals"];
    // Each connection: one message accepted, the next refused, then a new connection.
    assert_eq!(
        (t["accepted"].as_u64(), t["rejected"].as_u64()),
        (Some(3), Some(3)),
        "{s}"
    );
    assert_eq!(t["failed"], 0, "{s}");
    assert_eq!(seen.mails.load(Ordering::Relaxed), 6);
    assert_eq!(seen.max_mails_per_connection.load(Ordering::Relaxed), 2);
    let e = &s["errors"][0];
    assert_eq!(
        (e["phase"].as_str(), e["code"].as_u64()),
        (Some("mail"), Some(452)),
        "{s}"
    );
    assert_eq!(e["count"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_auth_is_sent_to_a_server_that_does_not_offer_it() {
    let (addr, seen) = capped_server(false).await;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    // The password comes from the environment, never the command line.
    std::env::set_var("SPATE_PASSWORD", "pw");
    let o = spate(&[
        "smtp",
        &addr,
        "--auth-user",
        "u@example.test",
        "-n",
        "2",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ended(), "{}", o.stderr);
    let s = summary(&out);
    // Nothing was asked of the server, so it refused nothing: the messages failed.
    assert_eq!(s["totals"]["failed"], 2, "{s}");
    assert_eq!(s["totals"]["rejected"], 0, "{s}");
    assert_eq!(seen.auths.load(Ordering::Relaxed), 0);
    assert_eq!(seen.mails.load(Ordering::Relaxed), 0);
    let e = &s["errors"][0];
    assert_eq!(e["phase"], "auth", "{s}");
    assert_eq!(e["kind"], "not-offered", "not a 5xx: none came; {s}");
    assert!(
        e["text"].as_str().unwrap().contains("does not offer AUTH"),
        "{s}"
    );
}
