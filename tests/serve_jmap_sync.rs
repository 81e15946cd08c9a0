//! `spate serve`'s JMAP as a client that syncs sees it (RFC 8620 §5.2, §5.6; RFC 8621):
//! a state fetched, mail changed over SMTP, JMAP and IMAP, then Email/changes,
//! Email/queryChanges, Thread/changes and Mailbox/changes name exactly what was created,
//! updated and destroyed (also page by page under maxChanges), and a state older than the
//! server keeps is cannotCalculateChanges. Also: Mailbox/query's filters, Email/get's
//! header forms, bodyStructure and part blobs and its refusals of unknown properties and
//! arguments, EmailSubmission with onSuccess*, and Bearer answered with 401.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use base64::Engine as _;
use common::{until_tag, Raw};
use serde_json::{json, Value};
use spate::serve::{self, Addrs, Config, Running, Users};

const ALICE: &str = "alice@example.test";
const BOB: &str = "bob@example.test";

async fn start() -> Running {
    let mut c = Config::loopback();
    let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
    c.listen = Addrs {
        smtp: Some(lo),
        imap: Some(lo),
        jmap: Some(lo),
        ..Addrs::default()
    };
    c.domains = vec!["example.test".into()];
    c.users = Users::parse(&format!("{ALICE} s3cret\n{BOB} s3cret\n")).unwrap();
    serve::start(c).await.unwrap()
}

/// One message delivered over SMTP (its reply to the data checked).
fn smtp_deliver(addr: SocketAddr, to: &str, subject: &str) {
    let message = format!(
        "From: {BOB}\r\nTo: {to}\r\nSubject: {subject}\r\nMessage-ID: <{subject}@x>\r\n\r\nbody of {subject}\r\n"
    );
    smtp_send(addr, to, &message);
}

/// `message` (CRLF lines, no line a lone dot) delivered over SMTP.
fn smtp_send(addr: SocketAddr, to: &str, message: &str) {
    let mut c = Raw::connect(addr);
    assert!(c.last().starts_with("220"));
    let message = format!("{message}.\r\n");
    for (send, want) in [
        ("EHLO client.test\r\n".to_string(), "250"),
        (format!("MAIL FROM:<{BOB}>\r\n"), "250"),
        (format!("RCPT TO:<{to}>\r\n"), "250"),
        ("DATA\r\n".into(), "354"),
        (message, "250"),
        ("QUIT\r\n".into(), "221"),
    ] {
        c.send(send.as_bytes());
        let got = c.last();
        assert!(got.starts_with(want), "{send}: {got}");
    }
}

/// IMAP commands as alice, each of which must complete OK.
fn imap(addr: SocketAddr, commands: &[&str]) {
    let mut c = Raw::connect(addr);
    c.line();
    let login = format!("LOGIN {ALICE} s3cret");
    let all = [&[login.as_str()][..], commands].concat();
    for (i, cmd) in all.iter().enumerate() {
        let tag = format!("t{i}");
        c.send(format!("{tag} {cmd}\r\n").as_bytes());
        let lines = until_tag(&mut c, &tag);
        assert!(
            lines.last().unwrap().starts_with(&format!("{tag} OK")),
            "{cmd}: {lines:?}"
        );
    }
}

fn basic(user: &str) -> String {
    let b = base64::engine::general_purpose::STANDARD.encode(format!("{user}:s3cret"));
    format!("Authorization: Basic {b}\r\n")
}

/// One HTTP/1.1 exchange: the status, the head's lines, and the body.
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    auth: &str,
    body: &[u8],
) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut r = BufReader::new(s);
    let mut head = String::new();
    let mut len = 0;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap();
            }
        }
        head.push_str(&line);
    }
    let code: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let mut bytes = vec![0; len];
    r.read_exact(&mut bytes).unwrap();
    (code, head, bytes)
}

/// The method responses of one API request as `user`.
fn api_as(addr: SocketAddr, user: &str, calls: Value) -> Vec<Value> {
    let req = json!({"using": ["urn:ietf:params:jmap:core", "urn:ietf:params:jmap:mail",
                               "urn:ietf:params:jmap:submission"], "methodCalls": calls});
    let (code, _, body) = http(
        addr,
        "POST",
        "/jmap/api/",
        &basic(user),
        req.to_string().as_bytes(),
    );
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(code, 200, "{v}");
    v["methodResponses"].as_array().unwrap().clone()
}

/// The arguments of the one response of one call as alice (which must not be an error).
fn call(addr: SocketAddr, name: &str, mut args: Value) -> Value {
    let account = account_of(addr);
    args["accountId"] = json!(account);
    let r = api_as(addr, ALICE, json!([[name, args, "c"]]));
    assert_eq!(r[0][0], name, "{r:?}");
    r[0][1].clone()
}

/// The error type of one call as alice, which must be an error.
fn error_of(addr: SocketAddr, name: &str, mut args: Value) -> String {
    args["accountId"] = json!(account_of(addr));
    let r = api_as(addr, ALICE, json!([[name, args, "c"]]));
    assert_eq!(r[0][0], "error", "{r:?}");
    r[0][1]["type"].as_str().unwrap().to_string()
}

fn account_of(addr: SocketAddr) -> String {
    let (_, _, body) = http(addr, "GET", "/.well-known/jmap", &basic(ALICE), b"");
    let s: Value = serde_json::from_slice(&body).unwrap();
    s["primaryAccounts"]["urn:ietf:params:jmap:mail"]
        .as_str()
        .unwrap()
        .to_string()
}

fn set(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

fn ids(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// The ids of the mailboxes by name.
fn mailbox(addr: SocketAddr, name: &str) -> String {
    let r = call(addr, "Mailbox/get", json!({"properties": ["name"]}));
    r["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no {name}: {r}"))["id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn query(addr: SocketAddr, filter: Value) -> (Vec<String>, String) {
    let r = call(
        addr,
        "Email/query",
        json!({"filter": filter, "sort": [{"property": "receivedAt"}]}),
    );
    assert_eq!(r["canCalculateChanges"], true);
    let ids = r["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_str().unwrap().to_string())
        .collect();
    (ids, r["queryState"].as_str().unwrap().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_syncs_emails_threads_and_mailboxes_through_every_kind_of_change() {
    let running = start().await;
    let (addr, smtp, imap_addr) = (
        running.addrs.jmap.unwrap(),
        running.addrs.smtp.unwrap(),
        running.addrs.imap.unwrap(),
    );
    for s in ["one", "two", "three"] {
        smtp_deliver(smtp, ALICE, s);
    }
    imap(imap_addr, &["CREATE Archive"]);
    let (inbox, archive) = (mailbox(addr, "INBOX"), mailbox(addr, "Archive"));
    let (before, q0) = query(addr, json!({"inMailbox": inbox}));
    let (all_before, qall) = query(addr, json!(null));
    assert_eq!(before.len(), 3);
    assert_eq!(all_before, before);
    let s0 = call(addr, "Email/get", json!({"ids": []}))["state"]
        .as_str()
        .unwrap()
        .to_string();
    let m0 = call(addr, "Mailbox/get", json!({"ids": []}))["state"]
        .as_str()
        .unwrap()
        .to_string();
    // Nothing changed: nothing to tell.
    let none = call(addr, "Email/changes", json!({"sinceState": s0}));
    assert_eq!(
        (
            set(&none["created"]).len(),
            set(&none["updated"]).len(),
            set(&none["destroyed"]).len()
        ),
        (0, 0, 0)
    );
    assert_eq!(none["newState"], s0.as_str());

    // The changes: two deliveries over SMTP, a keyword, a destroy, a move, and a
    // message imported and destroyed again (which nobody is told of).
    smtp_deliver(smtp, ALICE, "four");
    smtp_deliver(smtp, ALICE, "five");
    let (one, two, three) = (&before[0], &before[1], &before[2]);
    let r = call(
        addr,
        "Email/set",
        json!({"update": {one: {"keywords/$seen": true},
                                                      three: {"mailboxIds": {&archive: true}}},
                                           "destroy": [two]}),
    );
    let moved = r["updated"][three]["id"].as_str().unwrap().to_string();
    let (up, _, _) = http(
        addr,
        "POST",
        &format!("/jmap/upload/{}/", account_of(addr)),
        &basic(ALICE),
        b"Subject: brief\r\n\r\nx\r\n",
    );
    assert_eq!(up, 201);
    let blob = call(
        addr,
        "Email/get",
        json!({"ids": [one], "properties": ["blobId"]}),
    )["list"][0]["blobId"]
        .clone();
    let imported = call(
        addr,
        "Email/import",
        json!({"emails": {"k": {"blobId": blob, "mailboxIds": {&inbox: true}}}}),
    );
    let brief = imported["created"]["k"]["id"].as_str().unwrap().to_string();
    call(addr, "Email/set", json!({"destroy": [brief]}));

    let (after, _) = query(addr, json!({"inMailbox": inbox}));
    let (all_after, _) = query(addr, json!(null));
    let (four, five) = (&after[1], &after[2]);
    assert_eq!(after.len(), 3, "{after:?}");
    let c = call(addr, "Email/changes", json!({"sinceState": s0}));
    assert_eq!(set(&c["created"]), ids(&[four, five, &moved]), "{c}");
    assert_eq!(set(&c["updated"]), ids(&[one]), "{c}");
    assert_eq!(set(&c["destroyed"]), ids(&[two, three]), "{c}");
    assert_eq!(c["oldState"], s0.as_str());
    assert_eq!(c["hasMoreChanges"], false);
    let s1 = c["newState"].as_str().unwrap().to_string();
    assert_ne!(s1, s0);
    let t = call(addr, "Thread/changes", json!({"sinceState": s0}));
    assert_eq!(
        set(&t["destroyed"]),
        ids(&[&format!("t{}", &two[1..]), &format!("t{}", &three[1..])])
    );

    // queryChanges: in the inbox, and over everything.
    let qc = call(
        addr,
        "Email/queryChanges",
        json!({"filter": {"inMailbox": inbox},
        "sort": [{"property": "receivedAt"}], "sinceQueryState": q0, "calculateTotal": true}),
    );
    assert_eq!(set(&qc["removed"]), ids(&[two, three]), "{qc}");
    let added: Vec<(String, u64)> = qc["added"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["id"].as_str().unwrap().to_string(),
                a["index"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(added, vec![(four.clone(), 1), (five.clone(), 2)], "{qc}");
    assert_eq!(qc["total"], 3);
    let qa = call(
        addr,
        "Email/queryChanges",
        json!({"sort": [{"property": "receivedAt"}], "sinceQueryState": qall}),
    );
    let index = |id: &str| all_after.iter().position(|x| x == id).unwrap() as u64;
    let added: BTreeSet<(String, u64)> = qa["added"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["id"].as_str().unwrap().to_string(),
                a["index"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        added,
        [four, five, &moved]
            .iter()
            .map(|i| (i.to_string(), index(i)))
            .collect(),
        "{qa}"
    );
    assert_eq!(set(&qa["removed"]), ids(&[two, three]));
    assert_eq!(
        error_of(
            addr,
            "Email/queryChanges",
            json!({"sinceQueryState": q0, "maxChanges": 1})
        ),
        "tooManyChanges"
    );

    // Mailboxes: both changed in their counts only.
    let mc = call(addr, "Mailbox/changes", json!({"sinceState": m0}));
    assert_eq!(set(&mc["updated"]), ids(&[&inbox, &archive]), "{mc}");
    assert_eq!(
        (set(&mc["created"]).len(), set(&mc["destroyed"]).len()),
        (0, 0)
    );
    assert_eq!(
        mc["updatedProperties"],
        json!([
            "totalEmails",
            "unreadEmails",
            "totalThreads",
            "unreadThreads"
        ])
    );
    let m1 = mc["newState"].as_str().unwrap().to_string();

    // Over IMAP: a mailbox created, the archive (with the moved message) deleted.
    imap(imap_addr, &["CREATE Later", "DELETE Archive"]);
    let later = mailbox(addr, "Later");
    let mc = call(addr, "Mailbox/changes", json!({"sinceState": m1}));
    assert_eq!(set(&mc["created"]), ids(&[&later]), "{mc}");
    assert_eq!(set(&mc["destroyed"]), ids(&[&archive]), "{mc}");
    assert_eq!(set(&mc["updated"]).len(), 0, "{mc}");
    let c = call(addr, "Email/changes", json!({"sinceState": s1}));
    assert_eq!(set(&c["destroyed"]), ids(&[&moved]), "{c}");
    assert_eq!(
        (set(&c["created"]).len(), set(&c["updated"]).len()),
        (0, 0),
        "{c}"
    );

    // Page by page (maxChanges 2): every change once, and the last state is current.
    let (mut created, mut updated, mut destroyed) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let mut state = s0.clone();
    let mut pages = 0;
    loop {
        let c = call(
            addr,
            "Email/changes",
            json!({"sinceState": state, "maxChanges": 2}),
        );
        let n = set(&c["created"]).len() + set(&c["updated"]).len() + set(&c["destroyed"]).len();
        assert!(n <= 2, "{c}");
        created.extend(set(&c["created"]));
        updated.extend(set(&c["updated"]));
        destroyed.extend(set(&c["destroyed"]));
        state = c["newState"].as_str().unwrap().to_string();
        pages += 1;
        if c["hasMoreChanges"] == false {
            break;
        }
        assert!(pages < 10, "{c}");
    }
    assert_eq!(pages, 3);
    assert_eq!(created, ids(&[four, five]));
    assert_eq!(updated, ids(&[one]));
    // The moved message came and went since s0 (with the archive): nothing to tell.
    assert_eq!(destroyed, ids(&[two, three]));
    let last = call(addr, "Email/changes", json!({"sinceState": state}));
    assert_eq!(
        set(&last["created"]).len() + set(&last["updated"]).len() + set(&last["destroyed"]).len(),
        0,
        "{last}"
    );
    assert_eq!(
        error_of(
            addr,
            "Email/changes",
            json!({"sinceState": s0, "maxChanges": 0})
        ),
        "invalidArguments"
    );

    // A state the server no longer keeps (64 changes later), or never gave.
    for i in 0..70 {
        call(
            addr,
            "Email/set",
            json!({"update": {one: {"keywords/$flagged": i % 2 == 0}}}),
        );
        call(addr, "Email/get", json!({"ids": []}));
    }
    assert_eq!(
        error_of(addr, "Email/changes", json!({"sinceState": s0})),
        "cannotCalculateChanges"
    );
    assert_eq!(
        error_of(addr, "Mailbox/changes", json!({"sinceState": m0})),
        "cannotCalculateChanges"
    );
    assert_eq!(
        error_of(addr, "Email/queryChanges", json!({"sinceQueryState": q0})),
        "cannotCalculateChanges"
    );
    assert_eq!(
        error_of(addr, "Email/changes", json!({"sinceState": "bogus"})),
        "cannotCalculateChanges"
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mailbox_query_filters_and_email_get_forms_and_refusals() {
    let running = start().await;
    let (addr, imap_addr) = (running.addrs.jmap.unwrap(), running.addrs.imap.unwrap());
    imap(
        imap_addr,
        &["CREATE Sent", "CREATE Projects/Alpha", "SUBSCRIBE Projects"],
    );
    let (inbox, sent, projects, alpha) = (
        mailbox(addr, "INBOX"),
        mailbox(addr, "Sent"),
        mailbox(addr, "Projects"),
        mailbox(addr, "Alpha"),
    );
    let got = call(
        addr,
        "Mailbox/get",
        json!({"ids": [&alpha], "properties": ["parentId", "role"]}),
    );
    assert_eq!(
        got["list"],
        json!([{"id": alpha, "parentId": projects, "role": null}])
    );
    let q = |filter: Value| {
        let r = call(
            addr,
            "Mailbox/query",
            json!({"filter": filter, "sort": [{"property": "name"}]}),
        );
        set(&r["ids"])
    };
    assert_eq!(
        q(json!({"parentId": null})),
        ids(&[&inbox, &sent, &projects])
    );
    assert_eq!(q(json!({"parentId": projects})), ids(&[&alpha]));
    assert_eq!(q(json!({"name": "ALP"})), ids(&[&alpha]));
    assert_eq!(q(json!({"role": "sent"})), ids(&[&sent]));
    assert_eq!(q(json!({"role": null})), ids(&[&projects, &alpha]));
    assert_eq!(q(json!({"hasAnyRole": true})), ids(&[&inbox, &sent]));
    assert_eq!(q(json!({"isSubscribed": true})), ids(&[&inbox, &projects]));
    assert_eq!(
        q(json!({"operator": "NOT", "conditions": [{"hasAnyRole": true}, {"name": "alpha"}]})),
        ids(&[&projects])
    );
    let tree = call(
        addr,
        "Mailbox/query",
        json!({"sortAsTree": true, "sort": [{"property": "name", "isAscending": false}]}),
    );
    assert_eq!(tree["ids"], json!([sent, projects, alpha, inbox]));
    assert_eq!(
        error_of(addr, "Mailbox/query", json!({"filter": {"color": "red"}})),
        "unsupportedFilter"
    );
    // Null is as good as absent, and a comparator may carry members of its own (jmapc
    // sends anchor and limit in each one).
    let r = call(
        addr,
        "Mailbox/query",
        json!({"position": null, "calculateTotal": null, "limit": null,
        "sort": [{"property": "name", "anchor": null, "limit": null, "calculateTotal": false}]}),
    );
    assert_eq!(r["ids"].as_array().unwrap().len(), 4, "{r}");
    let r = call(
        addr,
        "Email/query",
        json!({"position": null, "anchorOffset": null,
        "sort": [{"property": "receivedAt", "isAscending": false, "position": 0}]}),
    );
    assert_eq!(r["position"], 0, "{r}");
    assert_eq!(
        error_of(addr, "Mailbox/get", json!({"properties": ["colour"]})),
        "invalidArguments"
    );

    // A multipart message with header fields in several forms.
    let message = "From: =?UTF-8?Q?Ann_=C3=89xample?= <ann@example.test>\r\nTo: alice@example.test\r\n\
        Subject: =?UTF-8?B?w6lsYW4=?=\r\nX-Two: 1\r\nX-Two: 2\r\nMIME-Version: 1.0\r\n\
        Content-Type: multipart/mixed; boundary=\"b\"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhello\r\n\
        --b\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n\r\naGk=\r\n--b--\r\n";
    running.store.deliver(ALICE, message.as_bytes()).unwrap();
    let (ids_now, _) = query(addr, json!({"inMailbox": inbox}));
    let g = call(
        addr,
        "Email/get",
        json!({"ids": ids_now, "properties": ["subject", "from",
        "header:Subject:asText", "header:X-Two:all", "header:x-two", "headers", "bodyStructure"],
        "bodyProperties": ["partId", "blobId", "type", "size"]}),
    );
    let e = &g["list"][0];
    assert_eq!(e["subject"], "élan");
    assert_eq!(e["header:Subject:asText"], "élan");
    assert_eq!(
        e["from"],
        json!([{"name": "Ann Éxample", "email": "ann@example.test"}])
    );
    assert_eq!(e["header:X-Two:all"], json!([" 1", " 2"]));
    assert_eq!(e["header:x-two"], " 2");
    assert_eq!(e["headers"].as_array().unwrap().len(), 7);
    assert_eq!(
        e["headers"][2],
        json!({"name": "Subject", "value": " =?UTF-8?B?w6lsYW4=?="})
    );
    let parts = &e["bodyStructure"]["subParts"];
    assert_eq!(e["bodyStructure"]["type"], "multipart/mixed");
    assert_eq!(parts[0]["type"], "text/plain");
    assert_eq!(parts[1]["size"], 2);
    let part_blob = parts[1]["blobId"].as_str().unwrap();
    let account = account_of(addr);
    let (code, head, bytes) = http(
        addr,
        "GET",
        &format!("/jmap/download/{account}/{part_blob}/x.bin"),
        &basic(ALICE),
        b"",
    );
    assert_eq!((code, bytes.as_slice()), (200, &b"hi"[..]));
    assert!(
        head.contains("Content-Type: application/octet-stream\r\n"),
        "{head}"
    );
    // An upload keeps its type; a download is of the type asked for.
    let (code, _, up) = http(
        addr,
        "POST",
        &format!("/jmap/upload/{account}/"),
        &format!(
            "{}Content-Type: text/plain; charset=utf-8\r\n",
            basic(ALICE)
        ),
        b"note",
    );
    let up: Value = serde_json::from_slice(&up).unwrap();
    assert_eq!((code, &up["type"]), (201, &json!("text/plain")), "{up}");
    let (_, head, _) = http(
        addr,
        "GET",
        &format!(
            "/jmap/download/{account}/{}/n.txt?type=text/plain",
            up["blobId"].as_str().unwrap()
        ),
        &basic(ALICE),
        b"",
    );
    assert!(head.contains("Content-Type: text/plain\r\n"), "{head}");
    // The bodies as RFC 8621 §4.1.4 picks them: the text part both bodies, the binary
    // one an attachment.
    let b = call(
        addr,
        "Email/get",
        json!({"ids": ids_now, "properties": ["textBody", "htmlBody",
        "attachments", "hasAttachment", "bodyValues", "preview"], "fetchTextBodyValues": true,
        "bodyProperties": ["partId", "type"]}),
    );
    let e = &b["list"][0];
    assert_eq!(
        e["textBody"],
        json!([{"partId": "1", "type": "text/plain"}]),
        "{e}"
    );
    assert_eq!(e["htmlBody"], e["textBody"]);
    assert_eq!(
        e["attachments"],
        json!([{"partId": "2", "type": "application/octet-stream"}])
    );
    assert_eq!(e["hasAttachment"], true);
    assert_eq!(
        e["bodyValues"]["1"]["value"].as_str().unwrap().trim_end(),
        "hello"
    );
    assert_eq!(e["bodyValues"].as_object().unwrap().len(), 1);
    assert_eq!(e["preview"], "hello");
    for bad in [
        json!({"properties": ["subjekt"]}),
        json!({"properties": ["header:Subject:asAddresses"]}),
        json!({"bodyProperties": ["colour"]}),
        json!({"fetchEverything": true}),
    ] {
        assert_eq!(
            error_of(addr, "Email/get", bad.clone()),
            "invalidArguments",
            "{bad}"
        );
    }

    // Bearer is no login here: 401 and the Basic challenge.
    let (code, head, _) = http(
        addr,
        "GET",
        "/.well-known/jmap",
        "Authorization: Bearer abc\r\n",
        b"",
    );
    assert_eq!(code, 401, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("www-authenticate: basic"),
        "{head}"
    );
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_sends_then_updates_or_destroys_its_draft_and_is_kept() {
    let running = start().await;
    let (addr, imap_addr) = (running.addrs.jmap.unwrap(), running.addrs.imap.unwrap());
    imap(imap_addr, &["CREATE Drafts"]);
    let drafts = mailbox(addr, "Drafts");
    let account = account_of(addr);
    let draft = format!("From: {ALICE}\r\nTo: {BOB}\r\nSubject: hello bob\r\n\r\nhi\r\n");
    let (_, _, up) = http(
        addr,
        "POST",
        &format!("/jmap/upload/{account}/"),
        &basic(ALICE),
        draft.as_bytes(),
    );
    let blob: Value = serde_json::from_slice(&up).unwrap();
    let state0 = call(addr, "EmailSubmission/get", json!({}))["state"]
        .as_str()
        .unwrap()
        .to_string();
    // One request: import the draft, submit it by its creation id, destroy it on success.
    let r = api_as(
        addr,
        ALICE,
        json!([
            ["Email/import", {"accountId": account, "emails": {"d": {"blobId": blob["blobId"],
                "mailboxIds": {&drafts: true}, "keywords": {"$draft": true}}}}, "i"],
            ["EmailSubmission/set", {"accountId": account, "create": {"s": {"identityId": "i1",
                "emailId": "#d"}}, "onSuccessDestroyEmail": ["#s"]}, "s"],
        ]),
    );
    let names: Vec<&str> = r.iter().map(|x| x[0].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["Email/import", "EmailSubmission/set", "Email/set"],
        "{r:?}"
    );
    let email = r[0][1]["created"]["d"]["id"].as_str().unwrap().to_string();
    let sub = r[1][1]["created"]["s"]["id"].as_str().unwrap().to_string();
    assert_eq!(r[1][1]["created"]["s"]["undoStatus"], "final");
    assert_eq!(r[1][1]["oldState"], state0.as_str());
    assert_eq!(r[2][1]["destroyed"], json!([email]));
    assert_eq!(r[2][2], "s");
    let bob_has = running.store.with_account(BOB, |a| a.inbox.messages.len());
    assert_eq!(bob_has, 1);

    let g = call(addr, "EmailSubmission/get", json!({"ids": [&sub]}));
    assert_eq!(g["list"][0]["emailId"], email.as_str());
    assert_eq!(
        g["list"][0]["envelope"]["rcptTo"],
        json!([{"email": BOB, "parameters": null}])
    );
    assert_eq!(g["list"][0]["deliveryStatus"][BOB]["delivered"], "yes");
    let state1 = g["state"].as_str().unwrap().to_string();
    assert_ne!(state1, state0);
    let c = call(
        addr,
        "EmailSubmission/changes",
        json!({"sinceState": state0}),
    );
    assert_eq!(c["created"], json!([sub]));
    assert_eq!(
        call(
            addr,
            "EmailSubmission/query",
            json!({"filter": {"emailIds": [&email]}})
        )["ids"],
        json!([sub])
    );

    // Another: its draft updated on success (no longer a draft, now seen).
    let r = call(
        addr,
        "Email/import",
        json!({"emails": {"d": {"blobId": blob["blobId"],
        "mailboxIds": {&drafts: true}, "keywords": {"$draft": true}}}}),
    );
    let email2 = r["created"]["d"]["id"].as_str().unwrap().to_string();
    let r = api_as(
        addr,
        ALICE,
        json!([["EmailSubmission/set", {"accountId": account,
        "create": {"s": {"identityId": "i1", "emailId": email2}},
        "onSuccessUpdateEmail": {"#s": {"keywords/$draft": null, "keywords/$seen": true}}}, "s"]]),
    );
    assert_eq!(r[1][0], "Email/set", "{r:?}");
    let kw = call(
        addr,
        "Email/get",
        json!({"ids": [&email2], "properties": ["keywords"]}),
    );
    assert_eq!(kw["list"][0]["keywords"], json!({"$seen": true}));
    let sub2 = r[0][1]["created"]["s"]["id"].as_str().unwrap().to_string();

    // A draft made by Email/set from its properties (both bodies and an attachment) and
    // sent in the same request by its creation id.
    let r = api_as(
        addr,
        ALICE,
        json!([
            ["Email/set", {"accountId": account, "create": {"d": {"mailboxIds": {&drafts: true},
                "keywords": {"$draft": true}, "from": [{"name": "Alice", "email": ALICE}],
                "to": [{"email": BOB}], "subject": "made by set",
                "textBody": [{"partId": "t", "type": "text/plain"}],
                "htmlBody": [{"partId": "h", "type": "text/html"}],
                "attachments": [{"blobId": blob["blobId"], "type": "message/rfc822", "name": "fwd.eml"}],
                "bodyValues": {"t": {"value": "plain words"}, "h": {"value": "<p>html words</p>"}}}}}, "e"],
            ["EmailSubmission/set", {"accountId": account, "create": {"s": {"identityId": "i1",
                "emailId": "#d"}}, "onSuccessUpdateEmail": {"#s": {"keywords/$draft": null}}}, "s"],
        ]),
    );
    let made = r[0][1]["created"]["d"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r:?}"))
        .to_string();
    let sub3 = r[1][1]["created"]["s"]["id"].as_str().unwrap().to_string();
    assert_eq!(r[2][1]["updated"], json!({&made: null}), "{r:?}");
    let g = call(
        addr,
        "Email/get",
        json!({"ids": [&made], "properties": ["subject", "from", "keywords",
        "textBody", "htmlBody", "attachments", "bodyValues"], "fetchAllBodyValues": true,
        "bodyProperties": ["partId", "type", "name"]}),
    );
    let e = &g["list"][0];
    assert_eq!(e["subject"], "made by set");
    assert_eq!(e["from"], json!([{"name": "Alice", "email": ALICE}]));
    assert_eq!(e["keywords"], json!({}));
    let value = |list: &str| {
        let id = e[list][0]["partId"].as_str().unwrap();
        e["bodyValues"][id]["value"].as_str().unwrap().to_string()
    };
    assert_eq!(
        (value("textBody"), value("htmlBody")),
        ("plain words".into(), "<p>html words</p>".into()),
        "{e}"
    );
    assert_eq!(e["attachments"][0]["name"], "fwd.eml", "{e}");
    let bob_got = running.store.with_account(BOB, |a| a.inbox.messages.len());
    assert_eq!(bob_got, 3);

    // A create without a mailbox, or with a body part without its value: refused, each.
    let bad = call(
        addr,
        "Email/set",
        json!({"create": {"a": {"subject": "x"},
        "b": {"mailboxIds": {&drafts: true}, "textBody": [{"partId": "t", "type": "text/plain"}]}}}),
    );
    assert_eq!(
        bad["notCreated"]["a"]["properties"],
        json!(["mailboxIds"]),
        "{bad}"
    );
    assert_eq!(
        bad["notCreated"]["b"]["properties"],
        json!(["bodyValues"]),
        "{bad}"
    );

    // Destroyed: gone from get, and a change.
    let d = call(addr, "EmailSubmission/set", json!({"destroy": [&sub]}));
    assert_eq!(d["destroyed"], json!([sub]));
    let c = call(
        addr,
        "EmailSubmission/changes",
        json!({"sinceState": state1}),
    );
    assert_eq!(
        (c["created"].clone(), c["destroyed"].clone()),
        (json!([sub2, sub3]), json!([sub]))
    );
    assert_eq!(
        call(addr, "EmailSubmission/get", json!({"ids": [&sub]}))["notFound"],
        json!([sub])
    );
    // Refusals: another identity, nobody to send to, an unknown argument.
    let bad = call(
        addr,
        "EmailSubmission/set",
        json!({"create": {"x": {"identityId": "i9", "emailId": email2},
        "y": {"identityId": "i1", "emailId": email2, "envelope": {"mailFrom": {"email": ALICE}, "rcptTo": []}}}}),
    );
    assert_eq!(bad["notCreated"]["x"]["type"], "invalidProperties");
    assert_eq!(bad["notCreated"]["y"]["type"], "noRecipients");
    assert_eq!(
        error_of(addr, "EmailSubmission/set", json!({"sendNow": true})),
        "invalidArguments"
    );
    running.shutdown().await;
}

/// jmap-jam (a JMAP client for Node.js and browsers) against the server. It speaks only
/// Bearer, so its fetch sends the same credentials as Basic. scripts/test installs it in
/// target/tools/js (npm install jmap-jam@0.13.1); missing, the test fails through
/// common::cannot_run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jmap_jam_reads_syncs_sends_and_downloads() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools/js");
    if !common::have("node") || !dir.join("node_modules/jmap-jam").is_dir() {
        common::cannot_run("jmap-jam is not installed in target/tools/js");
        return;
    }
    let running = start().await;
    let (addr, smtp) = (running.addrs.jmap.unwrap(), running.addrs.smtp.unwrap());
    for i in 0..2 {
        let message = format!(
            "From: {BOB}\r\nTo: {ALICE}\r\nSubject: =?UTF-8?Q?h=C3=A9llo_{i}?=\r\nX-Mailer: a\r\n\
             X-Mailer: b\r\nContent-Type: multipart/alternative; boundary=zz\r\n\r\n--zz\r\n\
             Content-Type: text/plain\r\n\r\nplain\r\n--zz\r\nContent-Type: text/html\r\n\r\n\
             <p>html</p>\r\n--zz--\r\n"
        );
        smtp_send(smtp, ALICE, &message);
    }
    // Written next to its node_modules, so that its imports resolve there.
    let script = dir.join("jam-check.mjs");
    std::fs::write(&script, JAM_CHECK).unwrap();
    let o = common::run_tool_env(
        "node",
        [
            script.to_str().unwrap(),
            &format!("http://{addr}"),
            ALICE,
            "s3cret",
        ]
        .map(String::from)
        .to_vec(),
        vec![],
        Duration::from_secs(60),
    )
    .await;
    assert!(
        o.ok && o.stdout.contains("\n0 failed"),
        "{}\n{}",
        o.stdout,
        o.stderr
    );
    running.shutdown().await;
}

const JAM_CHECK: &str = r##"import JamClient from "jmap-jam";
const [url, user, password] = process.argv.slice(2);
const basic = Buffer.from(`${user}:${password}`).toString("base64");
const realFetch = globalThis.fetch;
// jmap-jam only speaks Bearer: the same credentials as Basic.
globalThis.fetch = (u, init = {}) => {
  const h = new Headers(init.headers || {});
  h.set("Authorization", `Basic ${basic}`);
  return realFetch(u, { ...init, headers: h });
};
const jam = new JamClient({ sessionUrl: `${url}/.well-known/jmap`, bearerToken: "x" });
let failed = 0;
const step = async (name, f) => {
  try { const r = await f(); console.log(`ok   ${name}${r ? " " + r : ""}`); return r; }
  catch (e) { failed++; console.log(`FAIL ${name}: ${JSON.stringify(e?.cause ?? e)} ${e?.stack ?? ""}`); }
};
const accountId = await jam.getPrimaryAccount();
let inbox, drafts, state0, q0, emailIds;
await step("Mailbox/get", async () => {
  const [r] = await jam.api.Mailbox.get({ accountId });
  inbox = r.list.find((m) => m.role === "inbox").id;

});
await step("Mailbox/query", async () => {
  const [r] = await jam.api.Mailbox.query({ accountId, filter: { role: "inbox" } });
  if (r.ids.length !== 1 || r.ids[0] !== inbox) throw r;
});
await step("Email/query+get", async () => {
  const [r] = await jam.requestMany((t) => {
    const q = t.Email.query({ accountId, filter: { inMailbox: inbox }, sort: [{ property: "receivedAt", isAscending: false }], calculateTotal: true });
    const g = t.Email.get({ accountId, ids: q.$ref("/ids"), properties: ["subject", "from", "header:Subject:asText", "headers", "bodyStructure", "header:X-Mailer:all"] });
    return { q, g };
  });
  q0 = r.q.queryState; state0 = r.g.state; emailIds = r.q.ids;
  const first = r.g.list[0];
  if (r.q.total !== 2 || first.subject !== "héllo 1" || first.bodyStructure.subParts.length !== 2
      || JSON.stringify(first["header:X-Mailer:all"]) !== '[" a"," b"]') throw r;
});
await step("upload+import", async () => {
  const msg = `From: ${user}\r\nTo: bob@example.test\r\nSubject: jam draft\r\n\r\nhi bob\r\n`;
  const up = await jam.uploadBlob(accountId, new Blob([msg], { type: "message/rfc822" }));
  const [r] = await jam.api.Email.import({ accountId, emails: { d: { blobId: up.blobId, mailboxIds: { [inbox]: true }, keywords: { $draft: true } } } });
  if (!r.created?.d?.id) throw r;
});
await step("EmailSubmission/set onSuccessDestroyEmail", async () => {
  const [ids] = await jam.api.Email.query({ accountId, filter: { inMailbox: inbox }, sort: [{ property: "receivedAt", isAscending: false }] });
  const [r, meta] = await jam.requestMany((t) => ({
    s: t.EmailSubmission.set({ accountId, create: { s: { identityId: "i1", emailId: ids.ids[0] } }, onSuccessDestroyEmail: ["#s"] }),
  }));
  // jmap-jam keys responses by call id: the implicit Email/set (same id) is the one kept.
  if (JSON.stringify(r.s.destroyed) !== JSON.stringify([ids.ids[0]])) throw r;
});
await step("Email/changes", async () => {
  await jam.api.Email.set({ accountId, update: { [emailIds[0]]: { "keywords/$seen": true } } });
  const [r] = await jam.api.Email.changes({ accountId, sinceState: state0 });
  const got = `created=${r.created.length} updated=${r.updated} destroyed=${r.destroyed.length}`;
  // The draft came and went (sent, destroyed on success): only the keyword is news.
  if (got !== `created=0 updated=${emailIds[0]} destroyed=0`) throw got;
  return got;
});
await step("Email/queryChanges", async () => {
  const [r] = await jam.api.Email.queryChanges({ accountId, filter: { inMailbox: inbox }, sort: [{ property: "receivedAt", isAscending: false }], sinceQueryState: q0 });
  if (r.added.length !== 0 || r.removed.length !== 0) throw r;
});
await step("EmailSubmission/get", async () => {
  const [r] = await jam.api.EmailSubmission.get({ accountId });
  if (r.list.length !== 1 || r.list[0].undoStatus !== "final") throw r;
});
await step("Mailbox/changes", async () => {
  const [m] = await jam.api.Mailbox.get({ accountId, ids: [] });
  const [r] = await jam.api.Mailbox.changes({ accountId, sinceState: m.state });
  if (r.newState !== m.state || r.hasMoreChanges) throw r;
});
await step("download", async () => {
  const [g] = await jam.api.Email.get({ accountId, ids: emailIds.slice(0, 1), properties: ["blobId"] });
  const res = await jam.downloadBlob({ accountId, blobId: g.list[0].blobId, mimeType: "message/rfc822", fileName: "m.eml" });
  const text = await res.text();
  if (res.status !== 200 || !text.includes("Subject:")) throw text;
});
console.log(`${failed} failed`);
process.exit(failed ? 1 : 0);
"##;
