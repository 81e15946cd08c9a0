//! `spate jmap --move --import --submit` against the embedded server: what spate counts
//! moved, imported and sent is what the server's store holds afterwards; an account
//! with no mailbox to move to has every moving visit refused, said once in the errors.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;
use spate::serve::{self, Addrs, Config, Running, Users};

const USERS: usize = 3;

fn user(i: usize) -> String {
    format!("user{i}@example.test")
}

async fn start() -> Running {
    let mut c = Config::loopback();
    let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
    c.listen = Addrs {
        smtp: Some(lo),
        jmap: Some(lo),
        ..Addrs::default()
    };
    c.domains = vec!["example.test".into()];
    let users: String = (0..=USERS)
        .map(|i| format!("{} pw{i}\n", user(i)))
        .collect();
    c.users = Users::parse(&users).unwrap();
    serve::start(c).await.unwrap()
}

/// `spate smtp TARGET --to TO -n N`, which must succeed.
async fn inject(smtp: &str, to: &str, n: u32, out: &std::path::Path) {
    let args = ["smtp", smtp, "--to", to, "-n", &n.to_string(), "-q", "-o"];
    let mut args: Vec<String> = args.map(String::from).to_vec();
    args.push(out.to_str().unwrap().into());
    let o = common::run_tool_env(common::SPATE, args, vec![], Duration::from_secs(60)).await;
    assert!(o.ok, "{o:?}");
}

/// Per user: (messages in the inbox, in Archive, of them with spate's trace header).
fn held(running: &Running, i: usize) -> (u64, u64, u64) {
    running.store.with_account(&user(i), |a| {
        let archive = a.folders.get("Archive");
        let traced = std::iter::once(&a.inbox)
            .chain(archive)
            .flat_map(|mb| mb.messages.iter())
            .filter(|m| m.data.windows(13).any(|w| w == b"X-Spate-Trace"))
            .count() as u64;
        (
            a.inbox.messages.len() as u64,
            archive.map_or(0, |mb| mb.messages.len() as u64),
            traced,
        )
    })
}

/// `spate jmap` as `users` (a file of accounts) with `visit` options into `out`: its
/// summary's totals, once every unit is accounted for.
async fn jmap(
    url: &str,
    users: &std::path::Path,
    n: usize,
    visit: &[&str],
    out: &std::path::Path,
) -> Value {
    let mut a: Vec<String> = [
        "jmap",
        url,
        "--users-file",
        users.to_str().unwrap(),
        "-n",
        &(2 * n).to_string(),
        "--users",
        &n.to_string(),
        "--messages",
        "4",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    a.extend(visit.iter().map(|s| s.to_string()));
    let o = common::run_tool_env(common::SPATE, a, vec![], Duration::from_secs(60)).await;
    let s = common::summary(out);
    common::assert_every_unit_counted(out, &s);
    let t = s["totals"].clone();
    assert_eq!(
        t["attempted"].as_u64(),
        ["accepted", "rejected", "failed", "unfinished"]
            .iter()
            .map(|k| t[k].as_u64().unwrap_or(0))
            .sum::<u64>()
            .into(),
        "{t}\n{}",
        o.stderr
    );
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moves_imports_and_submissions_are_what_the_store_holds() {
    let running = start().await;
    let dir = tempfile::tempdir().unwrap();
    let smtp = running.addrs.smtp.unwrap().to_string();
    for i in 0..=USERS {
        inject(&smtp, &user(i), 10, &dir.path().join(format!("s{i}"))).await;
    }
    // An Archive for the first USERS accounts; the last has its inbox only.
    for i in 0..USERS {
        let archive = running.store.new_mailbox();
        running.store.with_account(&user(i), |a| {
            a.folders.insert("Archive".into(), archive);
        });
    }
    let url = format!("http://{}", running.addrs.jmap.unwrap());
    let users = dir.path().join("users.txt");
    let list: String = (0..USERS).map(|i| format!("{} pw{i}\n", user(i))).collect();
    std::fs::write(&users, list).unwrap();
    let visit = ["--move", "50", "--import", "100", "--submit", "100"];
    let out = dir.path().join("mix");
    let t = jmap(&url, &users, USERS, &visit, &out).await;
    let visits = 2 * USERS as u64;
    assert_eq!(t["accepted"].as_u64(), Some(visits), "{t}");
    for p in ["move", "import", "submit"] {
        assert!(common::phase_count(&common::summary(&out), p) > 0, "{p}");
    }
    // One import and one submission every visit, each with its own upload.
    assert_eq!(
        common::phase_count(&common::summary(&out), "upload"),
        2 * visits
    );
    assert_eq!(
        (t["imported"].as_u64(), t["submitted"].as_u64()),
        (Some(visits), Some(visits)),
        "{t}"
    );
    let (mut inbox, mut archive, mut traced) = (0, 0, 0);
    for i in 0..USERS {
        let (n, a, tr) = held(&running, i);
        inbox += n;
        archive += a;
        traced += tr;
    }
    let moved = t["moved"].as_u64().unwrap();
    assert!(moved > 0, "{t}");
    // Moved out of the inboxes into the archives; imported and sent ones arrived (the
    // drafts destroyed once sent), each with the generator's trace header.
    assert_eq!(archive, moved, "{t}");
    assert_eq!(inbox + archive, 30 + 2 * visits, "{t}");
    assert_eq!(traced, 30 + 2 * visits, "{t}");
    assert_eq!(running.store.delivered(), 40 + visits);

    // The account with its inbox only: every visit that would move is refused, the
    // reason said once in the errors, nothing moved.
    let lone = dir.path().join("lone.txt");
    std::fs::write(&lone, format!("{} pw{USERS}\n", user(USERS))).unwrap();
    let out = dir.path().join("lone");
    let t = jmap(&url, &lone, 1, &["--move", "100"], &out).await;
    assert_eq!(
        (t["rejected"].as_u64(), t["moved"].as_u64()),
        (Some(2), Some(0)),
        "{t}"
    );
    let errors = std::fs::read_to_string(out.join("errors.jsonl")).unwrap();
    assert_eq!(errors.lines().count(), 1, "{errors}");
    assert!(errors.contains("no mailbox to move to"), "{errors}");
    assert_eq!(held(&running, USERS), (10, 0, 10));
    running.shutdown().await;
}
