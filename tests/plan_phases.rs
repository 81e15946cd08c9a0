//! plan.json declares the phases a run times, each with its interval log: every *.hlog
//! a run writes is declared there (SMTP and POP3/IMAP runs against the embedded server).

mod common;

use std::collections::BTreeSet;

use common::spate;
use spate::serve;

fn declared(dir: &std::path::Path) -> BTreeSet<String> {
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("plan.json")).unwrap()).unwrap();
    plan["phases"]
        .as_array()
        .expect("plan.json has a phases table")
        .iter()
        .map(|p| {
            assert_eq!(
                p["hlog"].as_str().unwrap(),
                format!("{}.hlog", p["phase"].as_str().unwrap())
            );
            assert!(!p["times"].as_str().unwrap().is_empty(), "{p}");
            p["hlog"].as_str().unwrap().to_string()
        })
        .collect()
}

fn written(dir: &std::path::Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".hlog"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_interval_log_of_a_run_is_declared_in_its_plan() {
    let mut cfg = serve::Config::loopback();
    cfg.listen.pop3 = Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0)));
    let server = serve::start(cfg).await.unwrap();
    let smtp = server.addrs.smtp.unwrap().to_string();
    let pop3 = server.addrs.pop3.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();

    let inject = tmp.path().join("smtp");
    let o = spate(&[
        "smtp",
        &smtp,
        "-n",
        "40",
        "--max-in-flight",
        "4",
        "--rate",
        "200/s",
        "--to",
        "user{0..3}@example.test",
        "-q",
        "-o",
        inject.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    // A generator alone in its process: its CPU is the process's.
    assert_eq!(common::summary(&inject)["generator_cpu_basis"], "process");
    let (decl, logs) = (declared(&inject), written(&inject));
    assert!(
        logs.contains("bdat.hlog") && logs.contains("lag.hlog"),
        "{logs:?}"
    );
    assert!(
        logs.is_subset(&decl),
        "undeclared: {:?}",
        logs.difference(&decl)
    );
    assert!(
        !decl.contains("retr.hlog"),
        "an SMTP plan declares no POP3 phase: {decl:?}"
    );

    std::env::set_var("SPATE_PASSWORD", "x");
    let visits = tmp.path().join("pop3");
    let o = spate(&[
        "pop3",
        &pop3,
        "--user-pattern",
        "user{0..3}@example.test",
        "-n",
        "4",
        "-q",
        "-o",
        visits.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let (decl, logs) = (declared(&visits), written(&visits));
    assert!(
        logs.contains("retr.hlog") && logs.contains("session.hlog"),
        "{logs:?}"
    );
    assert!(
        logs.is_subset(&decl),
        "undeclared: {:?}",
        logs.difference(&decl)
    );
    server.shutdown().await;
}
