//! `spate xmpp` runs that go wrong, against the embedded server: refused logins are
//! rejected, counted once each and not tried again (a counted run ends when its units
//! are done, a timed one at its end), and a run whose sessions mostly never logged in,
//! or that delivered nothing, fails with one line saying why.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use common::run_tool_env;
use spate::serve::{self, Addrs, Config, Running, Users};

const DOMAIN: &str = "example.test";

/// A hang guard only: every run here ends in a second or two once it behaves.
const LIMIT: Duration = Duration::from_secs(60);

async fn start(users: &str, tweak: impl FnOnce(&mut Config)) -> Running {
    let mut c = Config::loopback();
    let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
    c.listen = Addrs {
        xmpp: Some(lo),
        ..Addrs::default()
    };
    c.domains = vec![DOMAIN.into()];
    c.users = Users::parse(users).unwrap();
    tweak(&mut c);
    serve::start(c).await.unwrap()
}

fn accounts(n: usize, password: impl Fn(usize) -> &'static str) -> String {
    (0..n)
        .map(|i| format!("user{i}@{DOMAIN} {}\n", password(i)))
        .collect()
}

/// `spate xmpp TARGET ARGS -o OUT` with SPATE_PASSWORD=wrong, to its end (killed after
/// [`LIMIT`]).
async fn xmpp(target: &str, args: &[&str], out: &Path) -> common::Output {
    let mut a: Vec<String> = vec!["xmpp".into(), target.into()];
    a.extend(args.iter().map(|s| s.to_string()));
    a.extend(["-o".into(), out.to_string_lossy().into_owned()]);
    let env = vec![("SPATE_PASSWORD".to_string(), "wrong".to_string())];
    run_tool_env(common::SPATE, a, env, LIMIT).await
}

fn total(s: &serde_json::Value, k: &str) -> u64 {
    s["totals"][k].as_u64().unwrap_or(0)
}

/// Every login refused (a wrong password): each session's refusal is one SASL failure,
/// the server's and spate's counts agree, no session logs in again, and the units are
/// rejected (the server answered), not failed. A run of 45 units ends when they are
/// done (it took minutes when every unit waited out a growing back-off to log in again),
/// one of a duration at its end with one held unit per session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_logins_are_rejected_counted_once_and_not_tried_again() {
    let running = start(&accounts(2, |_| "right"), |_| {}).await;
    let target = running.addrs.xmpp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let pattern = format!("user{{0..1}}@{DOMAIN}");
    let base = ["--user-pattern", &pattern, "--users", "2", "--wait", "1s"];

    let out = dir.path().join("counted");
    let mut args = base.to_vec();
    args.extend(["-n", "45"]);
    let o = xmpp(&target, &args, &out).await;
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(
        o.stdout.contains(
            "2 of 2 sessions never logged in (2 refused by the server; see the error table): exit status 1"
        ),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("SASL failures 2 (not-authorized 2)"),
        "{}",
        o.stdout
    );
    let s = common::summary(&out);
    assert_eq!(
        [
            total(&s, "attempted"),
            total(&s, "rejected"),
            total(&s, "failed"),
            total(&s, "reconnections"),
        ],
        [45, 45, 0, 0],
        "{}",
        s["totals"]
    );
    assert_eq!(common::phase_count(&s, "connect"), 2, "one login a session");
    assert_eq!(common::errors_of_kind(&out, "sasl"), 2);
    assert_eq!(common::errors_of_kind(&out, "login-refused"), 45);
    assert_eq!(running.stats.snapshot().auth_failures, 2);

    // Bounded by its duration: each session's unit waits for the end, rejected then.
    let out = dir.path().join("timed");
    let mut args = base.to_vec();
    args.extend(["-d", "2s"]);
    let o = xmpp(&target, &args, &out).await;
    assert_eq!(o.code, Some(1), "{o:?}");
    let s = common::summary(&out);
    assert_eq!(
        [
            total(&s, "attempted"),
            total(&s, "rejected"),
            total(&s, "unfinished")
        ],
        [2, 2, 0],
        "{}",
        s["totals"]
    );
    assert_eq!(running.stats.snapshot().auth_failures, 2 + 2);
    running.shutdown().await;
}

/// 8 of 10 accounts have a wrong password: the 2 that log in carry the run, the 8
/// refused sessions are refused once each and hold a unit each at most, and the run
/// fails (it exited 0) with the line that says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_sessions_mostly_never_logged_in_fails() {
    let running = start(&accounts(10, |_| "right"), |_| {}).await;
    let target = running.addrs.xmpp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("users.txt");
    std::fs::write(
        &users,
        accounts(10, |i| if i < 2 { "right" } else { "wrong" }),
    )
    .unwrap();
    let out = dir.path().join("run");
    let args = [
        "--users-file",
        users.to_str().unwrap(),
        "--users",
        "10",
        "-n",
        "40",
        "--wait",
        "2s",
    ];
    let o = xmpp(&target, &args, &out).await;
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(
        o.stdout.contains(
            "8 of 10 sessions never logged in (8 refused by the server; see the error table): exit status 1"
        ),
        "{}",
        o.stdout
    );
    let s = common::summary(&out);
    let (accepted, rejected) = (total(&s, "accepted"), total(&s, "rejected"));
    assert_eq!(accepted + rejected, 40, "{}", s["totals"]);
    assert!(
        rejected <= 8,
        "a unit a refused session at most: {}",
        s["totals"]
    );
    assert_eq!(total(&s, "failed"), 0, "{}", s["totals"]);
    assert!(o.stdout.contains("missing 0"), "{}", o.stdout);
    assert_eq!(common::errors_of_kind(&out, "sasl"), 8);
    assert_eq!(common::errors_of_kind(&out, "login-refused"), rejected);
    assert_eq!(running.stats.snapshot().auth_failures, 8);
    running.shutdown().await;
}

/// A server that logs every session in and ends each stream at its first message
/// (system-shutdown, the message not routed): stanzas go out, none arrives, and the run
/// fails saying so (it exited 0: every copy was indeterminate, none missing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_delivered_nothing_fails() {
    // The password SPATE_PASSWORD gives: every login succeeds.
    let running = start(&accounts(2, |_| "wrong"), |c| c.xmpp.end_at_message = true).await;
    let target = running.addrs.xmpp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let pattern = format!("user{{0..1}}@{DOMAIN}");
    let args = [
        "--user-pattern",
        &pattern,
        "--users",
        "2",
        "-n",
        "10",
        "--wait",
        "1s",
    ];
    let o = xmpp(&target, &args, &out).await;
    assert_eq!(o.code, Some(1), "{o:?}");
    let s = common::summary(&out);
    // Written, then in doubt with their streams: indeterminate, none accepted.
    assert!(total(&s, "stanzas_out") > 0, "{}", s["totals"]);
    assert!(total(&s, "indeterminate") > 0, "{}", s["totals"]);
    assert_eq!(total(&s, "accepted"), 0, "{}", s["totals"]);
    assert_eq!(total(&s, "delivered"), 0, "{}", s["totals"]);
    assert!(
        o.stdout.contains(
            "stanzas sent, none arrived at a recipient (see the error table): exit status 1"
        ),
        "{}",
        o.stdout
    );
    assert!(common::errors_of_kind(&out, "stream-error") > 0);
    running.shutdown().await;
}

/// One multicast to one address: the server's CPU over the window divided by one delivery
/// is the window's fixed cost, not a cost per delivery, and the line says so (it read
/// "642 512 µs per delivery" as if it were E5's figure).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cpu_per_delivery_over_a_handful_of_deliveries_says_so() {
    let running = start(&accounts(2, |_| "right"), |_| {}).await;
    let target = running.addrs.xmpp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("one");
    let me = std::process::id().to_string();
    let args: Vec<String> = [
        "xmpp",
        &target,
        "--user-pattern",
        "user{0..1}@example.test",
        "--users",
        "2",
        "-n",
        "1",
        "--multicast-rate",
        "10/s",
        "--addresses",
        "1",
        // The embedded server runs in this test's process.
        "--monitor-pid",
        &me,
        "-o",
        out.to_str().unwrap(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let env = vec![("SPATE_PASSWORD".to_string(), "right".to_string())];
    let o = run_tool_env(common::SPATE, args, env, LIMIT).await;
    running.shutdown().await;
    assert!(o.ok, "{o:?}");
    let line = o
        .stdout
        .lines()
        .find(|l| l.starts_with("server CPU:"))
        .unwrap_or_else(|| panic!("no server CPU line: {}", o.stdout));
    assert!(line.contains("over only 1 deliveries"), "{line}");
    assert!(line.contains("not a cost per delivery"), "{line}");
}

/// Every login breaks (the server closes the connection at SASL without an answer: not a
/// refusal, so it is tried again): a run bounded by its count makes one login attempt per
/// unit and ends when its 40 units are done, each failed. It used to wait out a growing
/// back-off (0.1 s doubling to 30 s) before each unit's attempt: 20 units a session
/// took over 6 minutes, past this test's hang guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counted_run_whose_logins_break_ends_after_its_count() {
    let running = start(&accounts(2, |_| "right"), |c| {
        c.faults
            .drops
            .push(spate::serve::faults::parse_drop("xmpp-login:1").unwrap());
    })
    .await;
    let target = running.addrs.xmpp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let args = ["--user-pattern", "user{0..1}@example.test", "--users", "2"];
    let args = [&args[..], &["-n", "40", "--wait", "1s"]].concat();
    let mut a: Vec<String> = vec!["xmpp".into(), target.clone()];
    a.extend(args.iter().map(|s| s.to_string()));
    a.extend(["-o".into(), out.to_string_lossy().into_owned()]);
    let env = vec![("SPATE_PASSWORD".to_string(), "right".to_string())];
    let o = run_tool_env(common::SPATE, a, env, LIMIT).await;
    assert_eq!(o.code, Some(1), "{o:?}");
    let s = common::summary(&out);
    assert_eq!(total(&s, "attempted"), 40, "{}", s["totals"]);
    assert_eq!(total(&s, "failed"), 40, "{}", s["totals"]);
    // Each session's first login (before its units), then one attempt per unit, each
    // dropped by the server.
    use spate::serve::faults::{FaultKind, FaultPoint};
    assert_eq!(
        running.stats.faults(FaultPoint::XmppLogin, FaultKind::Drop),
        2 + 40
    );
    running.shutdown().await;
}
