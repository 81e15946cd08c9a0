//! `spate jmap` as the other load commands are, against `spate serve --jmap`: a refused
//! login is rejected, thresholds on JMAP's own phases are accepted and judged, `spate
//! sweep -- jmap URL` sweeps JMAP runs, and a scenario's jmap step runs in shards.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use spate::serve::{self, Addrs, Config, Running, Users};

/// A hang guard only: every run here takes a second or two.
const LIMIT: Duration = Duration::from_secs(60);

const USERS: &str = "user0@example.test pw0\nuser1@example.test pw1\n";

async fn start() -> Running {
    let mut c = Config::loopback();
    let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
    c.listen = Addrs {
        jmap: Some(lo),
        ..Addrs::default()
    };
    c.domains = vec!["example.test".into()];
    c.users = Users::parse(USERS).unwrap();
    serve::start(c).await.unwrap()
}

fn users_file(dir: &Path, text: &str) -> String {
    let p = dir.join("users.txt");
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

async fn spate(args: Vec<String>) -> common::Output {
    common::run_tool_env(common::SPATE, args, vec![], LIMIT).await
}

/// `spate ARGS` run in `dir` to its end (killed after [`LIMIT`]: a hang guard).
fn run_in(dir: &Path, args: &[&str]) -> std::process::Output {
    let child = std::process::Command::new(common::SPATE)
        .args(args)
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(LIMIT) {
        Ok(o) => o.unwrap(),
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .arg(id.to_string())
                .status();
            panic!("spate {args:?} did not end in {LIMIT:?}");
        }
    }
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

/// A wrong password: every visit is rejected (HTTP 401 is the server's answer, as IMAP's
/// NO to LOGIN is), none failed; and the run, which got nothing through, exits 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_login_is_rejected_not_failed() {
    let running = start().await;
    let url = format!("http://{}", running.addrs.jmap.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let users = users_file(dir.path(), "user0@example.test wrong\n");
    let out = dir.path().join("run");
    let o = spate(words(&[
        "jmap",
        &url,
        "--users-file",
        &users,
        "--users",
        "1",
        "-n",
        "3",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ]))
    .await;
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stdout.contains("nothing accepted"), "{}", o.stdout);
    let t = common::summary(&out)["totals"].clone();
    assert_eq!(
        (
            t["attempted"].as_u64(),
            t["rejected"].as_u64(),
            t["failed"].as_u64()
        ),
        (Some(3), Some(3), Some(0)),
        "{t}"
    );
    let s = common::summary(&out);
    assert!(
        common::errors_of(&s, "session", 401) >= 3,
        "{}",
        s["errors"]
    );
    running.shutdown().await;
}

/// `--threshold` on JMAP's phases and counters: accepted (it said 'unknown phase') and
/// judged on the run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thresholds_on_jmaps_own_phases_are_judged() {
    let running = start().await;
    let url = format!("http://{}", running.addrs.jmap.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let users = users_file(dir.path(), USERS);
    let out = dir.path().join("run");
    let o = spate(words(&[
        "jmap",
        &url,
        "--users-file",
        &users,
        "--users",
        "2",
        "-n",
        "4",
        "--threshold",
        "p99(query) < 60s",
        "--threshold",
        "count(query) == 4",
        "--threshold",
        "count(mailbox) == 2",
        "--threshold",
        "totals.flagged == 0",
        "-o",
        out.to_str().unwrap(),
    ]))
    .await;
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(o.stdout.contains("thresholds 4/4 held"), "{}", o.stdout);
    let judged: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("thresholds.json")).unwrap())
            .unwrap();
    assert!(judged.to_string().contains("p99(query)"), "{judged}");

    // A rule that breaks is judged too: exit status 99.
    let out = dir.path().join("broken");
    let o = spate(words(&[
        "jmap",
        &url,
        "--users-file",
        &users,
        "--users",
        "2",
        "-n",
        "4",
        "--threshold",
        "count(query) == 5",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ]))
    .await;
    assert_eq!(o.code, Some(99), "{o:?}");
    running.shutdown().await;
}

/// `spate sweep … -- jmap URL …`: the words after `jmap` are spate jmap's (they were
/// parsed as spate smtp's), one JMAP run a step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_runs_jmap_steps() {
    let running = start().await;
    let url = format!("http://{}", running.addrs.jmap.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let users = users_file(dir.path(), USERS);
    let out = dir.path().join("sweep");
    let o = spate(words(&[
        "sweep",
        "--param",
        "messages",
        "--values",
        "2,4",
        "--cool-down",
        "0s",
        "-o",
        out.to_str().unwrap(),
        "--",
        "jmap",
        &url,
        "--users-file",
        &users,
        "--users",
        "2",
        "-n",
        "4",
    ]))
    .await;
    assert!(o.ok, "{o:?}");
    let mut steps: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("summary.json").is_file())
        .collect();
    steps.sort();
    assert_eq!(steps.len(), 2, "{steps:?}");
    for step in &steps {
        let s = common::summary(step);
        assert_eq!(s["protocol"], "jmap", "{}", step.display());
        assert_eq!(s["totals"]["accepted"], 4, "{}", step.display());
        assert_eq!(common::phase_count(&s, "query"), 4);
    }
    let csv = std::fs::read_to_string(out.join("sweep.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    running.shutdown().await;
}

/// A scenario's jmap step of `shards = 2` (refused before: "only a load command"): two
/// shards of one run, merged, and the step's thresholds judged on the merged run.
#[test]
fn a_scenario_jmap_step_runs_in_shards() {
    let dir = tempfile::tempdir().unwrap();
    let users = users_file(dir.path(), USERS);
    std::fs::write(
        dir.path().join("s.toml"),
        format!(
            "[server]\njmap = \"127.0.0.1:0\"\n\"users-file\" = \"{users}\"\n\n\
             [[step]]\nname = \"visit\"\ncommand = \"jmap\"\ntarget = \"http://${{server.jmap}}\"\n\
             shards = 2\nusers = 2\ncount = 4\n\"users-file\" = \"{users}\"\nquiet = true\n\
             thresholds = [\"totals.accepted == 4\", \"count(query) == 4\"]\n"
        ),
    )
    .unwrap();
    let o = run_in(dir.path(), &["run", "s.toml", "--out", "res"]);
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    let merged = dir.path().join("res/01-visit");
    let s = common::summary(&merged);
    assert_eq!(s["protocol"], "jmap");
    assert_eq!(s["totals"]["accepted"], 4, "{}", s["totals"]);
    let shards = s["extra"]["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 2);
    for (i, sh) in shards.iter().enumerate() {
        assert_eq!(sh["totals"]["accepted"], 2, "shard {i}: {sh}");
    }
}
