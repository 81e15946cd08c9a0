//! The embedded server's JMAP listeners: a raw HTTP client through the session, method
//! calls with result references, keywords seen by IMAP's store, a move, destroy, an
//! upload imported, a refusal without credentials, and push over EventSource as a
//! message is delivered over SMTP; then jmapc, a JMAP client library, runs its basic
//! flows against `--jmaps` with the certificate verified.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};
use spate::serve::{self, Addrs, Config, Running, Users};

const ALICE: &str = "alice@example.test";

async fn start() -> Running {
    let mut c = Config::loopback();
    let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
    c.listen = Addrs {
        smtp: Some(lo),
        jmap: Some(lo),
        jmaps: Some(lo),
        ..Addrs::default()
    };
    c.domains = vec!["example.test".into()];
    c.users = Users::parse(&format!("{ALICE} s3cret\nbob@example.test s3cret\n")).unwrap();
    serve::start(c).await.unwrap()
}

/// `spate smtp TARGET --to TO -n N` into `out`, which must succeed.
async fn inject(smtp: &str, to: &str, n: u32, out: &std::path::Path) {
    let args = [
        "smtp",
        smtp,
        "--to",
        to,
        "-n",
        &n.to_string(),
        "-q",
        "-o",
        out.to_str().unwrap(),
    ];
    let o = common::run_tool_env(
        common::SPATE,
        args.map(String::from).to_vec(),
        vec![],
        Duration::from_secs(60),
    )
    .await;
    assert!(o.ok, "{o:?}");
}

fn basic(user: &str, password: &str) -> String {
    let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Authorization: Basic {b}\r\n")
}

/// One HTTP/1.1 request; the status, and the body as JSON when it is.
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    auth: &str,
    body: &[u8],
) -> (u16, Value, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut r = BufReader::new(s);
    let mut status = String::new();
    r.read_line(&mut status).unwrap();
    let code: u16 = status.split(' ').nth(1).unwrap().parse().unwrap();
    let mut len = 0;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap();
            }
        }
    }
    let mut bytes = vec![0; len];
    r.read_exact(&mut bytes).unwrap();
    (
        code,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        bytes,
    )
}

/// A JMAP API request of `calls`: its method responses.
fn api(addr: SocketAddr, calls: Value) -> Vec<Value> {
    let req = json!({"using": ["urn:ietf:params:jmap:core", "urn:ietf:params:jmap:mail",
                               "urn:ietf:params:jmap:submission"], "methodCalls": calls});
    let (code, v, _) = http(
        addr,
        "POST",
        "/jmap/api/",
        &basic(ALICE, "s3cret"),
        req.to_string().as_bytes(),
    );
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["sessionState"], "0", "{v}");
    v["methodResponses"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jmap_reads_and_changes_the_store_with_pushed_states() {
    let running = start().await;
    let addr = running.addrs.jmap.unwrap();
    let smtp = running.addrs.smtp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    inject(&smtp, ALICE, 4, &dir.path().join("s")).await;

    // No credentials, a wrong password: 401 and nothing else.
    assert_eq!(http(addr, "GET", "/.well-known/jmap", "", b"").0, 401);
    assert_eq!(
        http(
            addr,
            "GET",
            "/.well-known/jmap",
            &basic(ALICE, "wrong"),
            b""
        )
        .0,
        401
    );
    let (code, session, _) = http(
        addr,
        "GET",
        "/.well-known/jmap",
        &basic(ALICE, "s3cret"),
        b"",
    );
    assert_eq!(code, 200);
    let account = session["primaryAccounts"]["urn:ietf:params:jmap:mail"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        session["apiUrl"],
        format!("http://{addr}/jmap/api/"),
        "{session}"
    );
    assert_eq!(session["username"], ALICE);

    // The inbox, its newest two by a back-reference, their header fields and body.
    let r = api(
        addr,
        json!([
            ["Mailbox/get", {"accountId": account}, "m"],
            ["Email/query", {"accountId": account, "filter": {"inMailbox": "#"},
                "sort": [{"property": "receivedAt", "isAscending": false}], "limit": 2, "calculateTotal": true}, "q"],
        ]),
    );
    let inbox = &r[0][1]["list"][0];
    assert_eq!(
        (inbox["role"].as_str(), inbox["totalEmails"].as_u64()),
        (Some("inbox"), Some(4)),
        "{r:?}"
    );
    // An unknown mailbox id finds nothing (the filter names no mailbox of the account).
    assert_eq!(r[1][1]["ids"], json!([]), "{r:?}");
    let inbox_id = inbox["id"].as_str().unwrap().to_string();
    let r = api(
        addr,
        json!([
            ["Email/query", {"accountId": account, "filter": {"inMailbox": inbox_id},
                "sort": [{"property": "receivedAt", "isAscending": false}], "limit": 2, "calculateTotal": true}, "q"],
            ["Email/get", {"accountId": account, "#ids": {"resultOf": "q", "name": "Email/query", "path": "/ids"},
                "properties": ["subject", "from", "keywords", "bodyValues", "textBody"], "fetchTextBodyValues": true}, "g"],
            ["Nothing/here", {}, "x"],
        ]),
    );
    assert_eq!(r[0][1]["total"], 4, "{r:?}");
    let ids: Vec<String> = r[0][1]["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().into())
        .collect();
    assert_eq!(ids.len(), 2);
    let got = &r[1][1]["list"];
    assert_eq!(got.as_array().unwrap().len(), 2, "{r:?}");
    assert!(
        got[0]["subject"]
            .as_str()
            .unwrap()
            .starts_with("spate test message"),
        "{got}"
    );
    assert_eq!(got[0]["from"][0]["email"], "spate@example.test", "{got}");
    assert!(
        got[0]["bodyValues"]["1"]["value"].as_str().unwrap().len() > 10,
        "{got}"
    );
    assert_eq!(r[2][0], "error");
    assert_eq!(r[2][1]["type"], "unknownMethod");

    // Push: the stream says the state now, then again when a message is delivered.
    let events = TcpStream::connect(addr).unwrap();
    events
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut w = events.try_clone().unwrap();
    write!(
        w,
        "GET /jmap/eventsource/?types=*&closeafter=no&ping=0 HTTP/1.1\r\nHost: {addr}\r\n{}\r\n",
        basic(ALICE, "s3cret")
    )
    .unwrap();
    let mut lines = BufReader::new(events).lines();
    let mut states = Vec::new();
    let next_state = |lines: &mut std::io::Lines<BufReader<TcpStream>>| loop {
        let line = lines.next().expect("the stream goes on").unwrap();
        if let Some(d) = line.strip_prefix("data: ") {
            let v: Value = serde_json::from_str(d).unwrap();
            return v["changed"][&account]["Email"]
                .as_str()
                .unwrap()
                .to_string();
        }
    };
    states.push(next_state(&mut lines));

    // $seen set by JMAP is IMAP's \Seen in the store; a move; a destroy.
    let r = api(
        addr,
        json!([
            ["Email/set", {"accountId": account, "update": {ids[0].clone(): {"keywords/$seen": true}},
                "destroy": [ids[1].clone()]}, "s"],
        ]),
    );
    assert_eq!(r[0][1]["destroyed"], json!([ids[1].clone()]), "{r:?}");
    assert!(
        r[0][1]["updated"]
            .as_object()
            .unwrap()
            .contains_key(&ids[0]),
        "{r:?}"
    );
    assert_ne!(r[0][1]["oldState"], r[0][1]["newState"]);
    let seen = running.store.with_mailbox(ALICE, |mb| {
        mb.messages
            .iter()
            .filter(|m| m.flags & serve::store::flags::SEEN != 0)
            .count()
    });
    assert_eq!(seen, 1);
    assert_eq!(running.store.with_mailbox(ALICE, |mb| mb.messages.len()), 3);
    states.push(next_state(&mut lines));

    // An upload imported into the inbox, then read back by its blob.
    let eml = b"From: Bob <bob@example.test>\r\nTo: alice@example.test\r\nSubject: imported\r\n\r\nhello\r\n";
    let (code, up, _) = http(
        addr,
        "POST",
        &format!("/jmap/upload/{account}/"),
        &basic(ALICE, "s3cret"),
        eml,
    );
    assert_eq!(code, 201, "{up}");
    let r = api(
        addr,
        json!([
            ["Email/import", {"accountId": account, "emails": {"k": {"blobId": up["blobId"], "mailboxIds": {inbox_id.clone(): true}, "keywords": {"$flagged": true}}}}, "i"],
            ["Email/get", {"accountId": account, "#ids": {"resultOf": "i", "name": "Email/import", "path": "/created/k/id"}, "properties": ["subject", "keywords", "blobId"]}, "g"],
        ]),
    );
    let imported = &r[1][1]["list"][0];
    assert_eq!(imported["subject"], "imported", "{r:?}");
    assert_eq!(imported["keywords"], json!({"$flagged": true}), "{r:?}");
    let blob = imported["blobId"].as_str().unwrap();
    let (code, _, bytes) = http(
        addr,
        "GET",
        &format!("/jmap/download/{account}/{blob}/m.eml?type=message/rfc822"),
        &basic(ALICE, "s3cret"),
        b"",
    );
    assert_eq!((code, bytes.as_slice()), (200, eml.as_slice()));
    states.push(next_state(&mut lines));

    // A delivery over SMTP is pushed.
    inject(&smtp, ALICE, 1, &dir.path().join("t")).await;
    states.push(next_state(&mut lines));
    let mut distinct = states.clone();
    distinct.dedup();
    assert_eq!(distinct.len(), 4, "every change a new state: {states:?}");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_jmapc_library_passes_its_basic_flows_over_https() {
    let python =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools/jmap-venv/bin/python");
    let has = python.exists()
        && std::process::Command::new(&python)
            .args(["-c", "import jmapc"])
            .status()
            .is_ok_and(|s| s.success());
    if !has {
        common::cannot_run(
            "jmapc is not installed (scripts/test puts it in target/tools/jmap-venv)",
        );
        return;
    }
    let running = start().await;
    let smtp = running.addrs.smtp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    inject(&smtp, ALICE, 3, &dir.path().join("s")).await;
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, &running.cert_pem).unwrap();
    let eml = dir.path().join("imp.eml");
    std::fs::write(&eml, "From: Bob <bob@example.test>\r\nTo: alice@example.test\r\nSubject: imported\r\n\r\nhello\r\n").unwrap();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/jmap/client-check.py");
    let url = format!("https://{}", running.addrs.jmaps.unwrap());
    let o = common::run_tool_env(
        python.to_str().unwrap(),
        [
            script.to_str().unwrap(),
            "--url",
            &url,
            "--user",
            ALICE,
            "--password",
            "s3cret",
            "--strict",
            "--import",
            eml.to_str().unwrap(),
            "--events",
            "2",
        ]
        .map(String::from)
        .to_vec(),
        vec![(
            "REQUESTS_CA_BUNDLE".to_string(),
            ca.to_str().unwrap().to_string(),
        )],
        Duration::from_secs(120),
    )
    .await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains(" 0 failed"), "{}", o.stdout);
    for step in [
        "session",
        "Mailbox/get",
        "Email/query",
        "Email/get",
        "Email/set $seen",
        "Email/import",
        "EventSource",
    ] {
        assert!(
            o.stdout.contains(&format!("ok   {step}")),
            "{step}: {}",
            o.stdout
        );
    }
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spate_jmap_visits_reconcile_with_what_the_store_kept() {
    let mut c = Config::loopback();
    let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
    c.listen = Addrs {
        smtp: Some(lo),
        jmap: Some(lo),
        ..Addrs::default()
    };
    c.domains = vec!["example.test".into()];
    let users: String = (0..3)
        .map(|i| format!("user{i}@example.test pw{i}\n"))
        .collect();
    c.users = Users::parse(&users).unwrap();
    let running = serve::start(c).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let users_file = dir.path().join("users.txt");
    std::fs::write(&users_file, &users).unwrap();
    let smtp = running.addrs.smtp.unwrap().to_string();
    for i in 0..3 {
        let out = dir.path().join(format!("s{i}"));
        inject(&smtp, &format!("user{i}@example.test"), 10, &out).await;
    }
    let url = format!("http://{}", running.addrs.jmap.unwrap());
    let jmap = |name: &str, visit: &[&str]| {
        let out = dir.path().join(name);
        let mut a: Vec<String> = [
            "jmap",
            &url,
            "--users-file",
            users_file.to_str().unwrap(),
            "--users",
            "3",
            "-n",
            "6",
            "--messages",
            "4",
            "-q",
            "-o",
            out.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec();
        a.extend(visit.iter().map(|s| s.to_string()));
        (out, a)
    };
    let store = |running: &Running| {
        let (mut left, mut seen) = (0, 0);
        for i in 0..3 {
            running
                .store
                .with_mailbox(&format!("user{i}@example.test"), |mb| {
                    left += mb.messages.len() as u64;
                    seen += mb
                        .messages
                        .iter()
                        .filter(|m| m.flags & serve::store::flags::SEEN != 0)
                        .count() as u64;
                });
        }
        (left, seen)
    };
    // Marking read: what spate marked is what the store has marked (never twice).
    let (out, args) = jmap("flag", &["--flag", "100", "--download", "50"]);
    let o = common::run_tool_env(common::SPATE, args, vec![], Duration::from_secs(60)).await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    let s = common::summary(&out);
    let t = &s["totals"];
    assert_eq!(
        (t["attempted"].as_u64(), t["accepted"].as_u64()),
        (Some(6), Some(6)),
        "{t}"
    );
    common::assert_every_unit_counted(&out, &s);
    for p in ["session", "mailbox"] {
        assert_eq!(common::phase_count(&s, p), 3, "{p}");
    }
    assert_eq!(common::phase_count(&s, "query"), 6);
    let (left, seen) = store(&running);
    assert_eq!((left, t["flagged"].as_u64()), (30, Some(seen)), "{t}");
    assert!(seen > 0);
    // Half of what a visit looks at read whole: 2 of every 4.
    assert_eq!(t["retrieved"].as_u64(), Some(12), "{t}");
    // Destroying: what spate destroyed is what the store lost.
    let (out, args) = jmap("delete", &["--delete", "100"]);
    let o = common::run_tool_env(common::SPATE, args, vec![], Duration::from_secs(60)).await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    let t = common::summary(&out)["totals"].clone();
    let (left, _) = store(&running);
    assert!(left < 30, "{t}");
    assert_eq!(t["deleted"].as_u64(), Some(30 - left), "{t}");
    assert_eq!(
        t["retrieved"], t["deleted"],
        "every message looked at read, then destroyed: {t}"
    );
    running.shutdown().await;
}
