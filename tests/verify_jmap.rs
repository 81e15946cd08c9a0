//! `spate verify` reading mailboxes over JMAP (the embedded server's `--jmap`): inline
//! after `spate smtp --verify jmap://`, the recipients followed over the EventSource as
//! the run goes (latencies from push, to the µs); standalone afterwards, arrival times
//! from receivedAt (whole seconds); a message taken out of the store reported missing.
//! Then two JMAP servers written here as others are, in front of the embedded server's
//! store: one that answers Email/changes (the embedded server cannot) and streams its
//! events chunked, between comments and pings, its session behind a redirect and its URLs
//! relative (as Cyrus's); one whose EventSource answers 204 (as Cyrus 3.6 from Debian
//! does), named in the report, its mailboxes left to the final read.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use spate::serve::store::Store;
use spate::serve::Config;

use common::embedded::Embedded as Bed;

async fn spate(args: &[&str]) -> common::Output {
    let args = args.iter().map(|s| s.to_string()).collect();
    common::run_tool(common::SPATE, args, Duration::from_secs(120)).await
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

async fn bed() -> Bed {
    let mut config = Config::loopback();
    config.listen.jmap = Some("127.0.0.1:0".parse().unwrap());
    let table: String = (0..4)
        .map(|i| format!("user{i}@example.test pw{i}\n"))
        .collect();
    common::embedded::start(config, &table).await
}

/// `spate smtp` of 40 messages to 4 accounts, verified inline from `verify`.
async fn inject(b: &Bed, run: &Path, verify: &str) -> common::Output {
    let smtp = b.server.addrs.smtp.unwrap().to_string();
    spate(&[
        "smtp",
        &smtp,
        "-n",
        "40",
        "--to",
        "user{0..3}@example.test",
        "-o",
        run.to_str().unwrap(),
        "--verify",
        verify,
        "--verify-users-file",
        &b.users_file,
        "--verify-wait",
        "5s",
    ])
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_over_jmap_inline_with_push_then_afterwards() {
    let b = bed().await;
    let jmap = format!("jmap://{}", b.server.addrs.jmap.unwrap());
    let run = b.dir.path().join("run");

    // (a) Inline: every delivery found, each timed the moment a state event announced it.
    let o = inject(&b, &run, &jmap).await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    let v = json(&run.join("verify.json"));
    assert_eq!(v["source"], jmap, "{v}");
    assert_eq!(
        (v["expected"].as_u64(), v["delivered"].as_u64()),
        (Some(40), Some(40)),
        "{v}"
    );
    assert_eq!(v["missing"], 0, "{v}");
    assert_eq!(v["ok"], true, "{v}");
    let l = &v["latency"];
    assert_eq!(l["measurable"], true, "{v}");
    assert_eq!(
        l["resolution"], "1us",
        "exact times, not receivedAt's seconds: {v}"
    );
    assert!(l["basis"].as_str().unwrap().contains("JMAP push"), "{v}");
    assert_eq!(l["count"], 40, "{v}");
    assert_eq!(v["notes"], json!([]), "{v}");
    assert!(
        o.stdout.contains("arrival: when the server's JMAP push"),
        "{}",
        o.stdout
    );

    // (b) Afterwards, read whole: the same deliveries, times from receivedAt.
    let out = b.dir.path().join("read");
    let read = |out: &Path| {
        let out = out.to_str().unwrap().to_string();
        let (run, jmap, users) = (run.clone(), jmap.clone(), b.users_file.clone());
        async move {
            let args = [
                "verify",
                run.to_str().unwrap(),
                "--source",
                &jmap,
                "--users-file",
                &users,
                "-o",
                &out,
            ];
            spate(&args).await
        }
    };
    let o = read(&out).await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    let v = json(&out.join("verify.json"));
    assert_eq!(
        (v["expected"].as_u64(), v["delivered"].as_u64()),
        (Some(40), Some(40)),
        "{v}"
    );
    assert_eq!(
        (v["missing"].as_u64(), v["duplicated"].as_u64()),
        (Some(0), Some(0)),
        "{v}"
    );
    assert_eq!(v["latency"]["resolution"], "1s", "{v}");
    assert_eq!(
        v["latency"]["basis"], "JMAP receivedAt, whole seconds",
        "{v}"
    );

    // (c) A message taken out of the store behind spate's back is missing.
    let gone_seq = b.server.store.with_mailbox("user2@example.test", |mb| {
        let m = mb.messages.remove(0);
        let text = String::from_utf8_lossy(&m.data).into_owned();
        let seq = text
            .split("seq=")
            .nth(1)
            .unwrap()
            .split(';')
            .next()
            .unwrap();
        seq.to_string()
    });
    let out = b.dir.path().join("read-again");
    let o = read(&out).await;
    assert_eq!(o.code, Some(1), "{}\n{}", o.stdout, o.stderr);
    let v = json(&out.join("verify.json"));
    assert_eq!(
        (v["missing"].as_u64(), v["delivered"].as_u64()),
        (Some(1), Some(39)),
        "{v}"
    );
    let missing = std::fs::read_to_string(out.join("missing.tsv")).unwrap();
    assert!(
        missing
            .lines()
            .any(|l| l.starts_with(&format!("{gone_seq}\tuser2@example.test"))),
        "seq {gone_seq} not in {missing}"
    );

    // A wrong password is an error of the read, not a pass.
    let bad = b.dir.path().join("bad-users.txt");
    std::fs::write(&bad, "user0@example.test nope\n").unwrap();
    let o = spate(&[
        "verify",
        run.to_str().unwrap(),
        "--source",
        &jmap,
        "--users-file",
        bad.to_str().unwrap(),
        "-o",
        b.dir.path().join("bad").to_str().unwrap(),
    ])
    .await;
    assert_eq!(o.code, Some(1), "{}\n{}", o.stdout, o.stderr);
    assert!(o.stderr.contains("401"), "{}", o.stderr);
    b.server.shutdown().await;
}

/// A JMAP server of the embedded server's store, as another implementation would answer:
/// Email/changes from a state that is the inbox's last UID, a chunked event stream; or
/// (`push` false) empty inboxes and an EventSource that answers 204.
struct Fake {
    store: Arc<Store>,
    push: bool,
    /// Email/changes requests answered.
    changes: AtomicUsize,
}

/// One request, as far as the fake reads it.
struct Req {
    path: String,
    user: String,
    body: Vec<u8>,
}

impl Fake {
    fn start(store: Arc<Store>, push: bool) -> (Arc<Fake>, SocketAddr) {
        let fake = Arc::new(Fake {
            store,
            push,
            changes: AtomicUsize::new(0),
        });
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let f = fake.clone();
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let (Ok(s), f) = (s, f.clone()) else { return };
                std::thread::spawn(move || f.serve(s));
            }
        });
        (fake, addr)
    }

    /// (uid, received, data) of the user's inbox, oldest first; nothing without push.
    fn inbox(&self, user: &str) -> Vec<(u32, std::time::SystemTime, Arc<[u8]>)> {
        if !self.push {
            return Vec::new();
        }
        self.store.with_mailbox(user, |mb| {
            mb.messages
                .iter()
                .map(|m| (m.uid, m.received, m.data.clone()))
                .collect()
        })
    }

    fn state(&self, user: &str) -> String {
        let last = self.inbox(user).last().map_or(0, |m| m.0);
        format!("s{last}")
    }

    fn serve(&self, s: TcpStream) {
        let mut w = s.try_clone().unwrap();
        let mut r = BufReader::new(s);
        while let Some(req) = read_request(&mut r) {
            let (status, kind, body) = match req.path.as_str() {
                "/.well-known/jmap" => (301, "text/plain", Vec::new()),
                "/session" => (200, "application/json", session().to_string().into_bytes()),
                "/api" => (
                    200,
                    "application/json",
                    self.api(&req).to_string().into_bytes(),
                ),
                p if p.starts_with("/dl/") => {
                    let uid: u32 = p.split('/').nth(3).unwrap()[1..].parse().unwrap();
                    let m = self.inbox(&req.user).into_iter().find(|m| m.0 == uid);
                    (200, "message/rfc822", m.unwrap().2.to_vec())
                }
                p if p.starts_with("/events") && self.push => return self.events(w, &req.user),
                _ => (204, "", Vec::new()),
            };
            let extra = match status {
                301 => "Location: /session\r\nContent-Length: 0\r\n".to_string(),
                204 => String::new(),
                _ => format!("Content-Type: {kind}\r\nContent-Length: {}\r\n", body.len()),
            };
            let head = format!("HTTP/1.1 {status} X\r\n{extra}\r\n");
            if w.write_all(head.as_bytes())
                .and_then(|_| w.write_all(&body))
                .is_err()
            {
                return;
            }
        }
    }

    fn api(&self, req: &Req) -> Value {
        let v: Value = serde_json::from_slice(&req.body).unwrap();
        let inbox = self.inbox(&req.user);
        let state = self.state(&req.user);
        let email = |uid: u32| format!("e{uid}");
        let mut query_ids = Vec::new();
        let mut out = Vec::new();
        for c in v["methodCalls"].as_array().unwrap() {
            let (name, args, tag) = (c[0].as_str().unwrap(), &c[1], &c[2]);
            let r = match name {
                "Mailbox/get" => {
                    json!({"list": [{"id": "other", "role": null}, {"id": "in", "role": "inbox"}]})
                }
                "Email/query" => {
                    assert_eq!(args["filter"]["inMailbox"], "in");
                    let pos = args["position"].as_u64().unwrap_or(0) as usize;
                    let limit = args["limit"].as_u64().unwrap() as usize;
                    query_ids = inbox
                        .iter()
                        .rev()
                        .skip(pos)
                        .take(limit)
                        .map(|m| email(m.0))
                        .collect();
                    json!({"ids": query_ids, "position": pos})
                }
                "Email/get" => {
                    let ids: Vec<String> = match args["ids"].as_array() {
                        Some(ids) => ids
                            .iter()
                            .map(|i| i.as_str().unwrap().to_string())
                            .collect(),
                        None => query_ids.clone(),
                    };
                    let list: Vec<Value> = inbox
                        .iter()
                        .filter(|m| ids.contains(&email(m.0)))
                        .map(|m| {
                            let at = chrono::DateTime::<chrono::Utc>::from(m.1);
                            json!({"id": email(m.0), "blobId": format!("b{}", m.0),
                                "receivedAt": at.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
                                "mailboxIds": {"in": true}})
                        })
                        .collect();
                    json!({"list": list, "state": state})
                }
                "Email/changes" => {
                    self.changes.fetch_add(1, Ordering::Relaxed);
                    let since: u32 = args["sinceState"].as_str().unwrap()[1..].parse().unwrap();
                    let max = args["maxChanges"].as_u64().unwrap() as usize;
                    let created: Vec<&(u32, _, _)> = inbox.iter().filter(|m| m.0 > since).collect();
                    let page = &created[..created.len().min(max)];
                    let new = page.last().map_or(since, |m| m.0);
                    json!({"oldState": format!("s{since}"), "newState": format!("s{new}"),
                        "hasMoreChanges": created.len() > max,
                        "created": page.iter().map(|m| email(m.0)).collect::<Vec<_>>(),
                        "updated": [], "destroyed": []})
                }
                m => panic!("method {m}"),
            };
            out.push(json!([name, r, tag]));
        }
        json!({"methodResponses": out, "sessionState": "0"})
    }

    /// A chunked event stream: a state event whenever the inbox's state changes, each
    /// cut in two chunks with a comment, a ping now and then; until the client leaves.
    fn events(&self, mut w: TcpStream, user: &str) {
        let chunk = |w: &mut TcpStream, s: &str| {
            w.write_all(format!("{:x}\r\n{s}\r\n", s.len()).as_bytes())
        };
        let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
        if w.write_all(head.as_bytes()).is_err() {
            return;
        }
        let (mut last, mut n) = (String::new(), 0u64);
        loop {
            let state = self.state(user);
            let sent = if state != last {
                let data = json!({"@type": "StateChange", "changed": {"a": {"Email": state}}});
                last = state;
                let text = format!(": changed\nevent: state\r\ndata: {data}\r\n\r\n");
                let (a, b) = text.split_at(text.len() / 2);
                chunk(&mut w, a).and_then(|_| chunk(&mut w, b))
            } else if n % 50 == 0 {
                chunk(&mut w, "event: ping\ndata: {\"interval\":1}\n\n")
            } else {
                Ok(())
            };
            if sent.is_err() {
                return;
            }
            n += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn session() -> Value {
    json!({
        "capabilities": {"urn:ietf:params:jmap:core": {"maxObjectsInGet": 7}},
        "primaryAccounts": {"urn:ietf:params:jmap:mail": "a"},
        "apiUrl": "/api",
        "downloadUrl": "/dl/{accountId}/{blobId}/{name}?type={type}",
        "eventSourceUrl": "/events?types={types}&closeafter={closeafter}&ping={ping}",
    })
}

fn read_request(r: &mut BufReader<TcpStream>) -> Option<Req> {
    let mut start = String::new();
    if r.read_line(&mut start).ok()? == 0 {
        return None;
    }
    let (mut length, mut user) = (0, String::new());
    loop {
        let mut line = String::new();
        r.read_line(&mut line).ok()?;
        if line.trim().is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "authorization" => {
                let b64 = value.trim().strip_prefix("Basic ")?;
                let raw = base64::engine::general_purpose::STANDARD.decode(b64).ok()?;
                let raw = String::from_utf8(raw).ok()?;
                user = raw.split_once(':')?.0.to_string();
            }
            _ => {}
        }
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body).ok()?;
    let path = start.split(' ').nth(1)?.to_string();
    Some(Req { path, user, body })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_from_a_server_with_email_changes_and_a_chunked_stream() {
    let b = bed().await;
    let (fake, addr) = Fake::start(b.server.store.clone(), true);
    let run = b.dir.path().join("run");
    let o = inject(&b, &run, &format!("jmap://{addr}")).await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    let v = json(&run.join("verify.json"));
    assert_eq!(
        (v["expected"].as_u64(), v["delivered"].as_u64()),
        (Some(40), Some(40)),
        "{v}"
    );
    assert_eq!(v["latency"]["resolution"], "1us", "{v}");
    assert_eq!(v["latency"]["count"], 40, "{v}");
    assert!(
        fake.changes.load(Ordering::Relaxed) > 0,
        "Email/changes was never asked"
    );
    b.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_push_is_named_in_the_report() {
    let b = bed().await;
    let (_fake, addr) = Fake::start(b.server.store.clone(), false);
    let run = b.dir.path().join("run");
    let o = inject(&b, &run, &format!("jmap://{addr}")).await;
    // The fake shows empty inboxes: everything is missing, and the check fails.
    assert_eq!(o.code, Some(1), "{}\n{}", o.stdout, o.stderr);
    let v = json(&run.join("verify.json"));
    assert_eq!(v["missing"], 40, "{v}");
    let notes = v["notes"].as_array().unwrap();
    assert_eq!(notes.len(), 1, "{v}");
    let note = notes[0].as_str().unwrap();
    assert!(
        note.starts_with("no push for 4 watched mailboxes (its EventSource answered HTTP 204)"),
        "{note}"
    );
    assert!(
        o.stdout.contains(&format!("  note       {note}")),
        "{}",
        o.stdout
    );
    b.server.shutdown().await;
}
