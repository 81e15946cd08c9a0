//! What bounds a run: an open run sends exactly rate × duration (at 10/s, and at 40 000/s
//! where arrivals go out in batches); stages set the run's
//! length (no default count cuts them short); a run that the default count ends says so.

mod common;

use common::{spate, summary};
use spate::serve;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_times_duration_stages_and_the_default_bound() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let dir = |n: &str| tmp.path().join(n).display().to_string();

    let o = spate(&[
        "smtp",
        &addr,
        "--rate",
        "10/s",
        "-d",
        "4s",
        "-q",
        "-o",
        &dir("rate"),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    assert_eq!(summary(&tmp.path().join("rate"))["totals"]["attempted"], 40);

    // 1000/s for 2 s then down to 0 over 1 s: 1500 arrivals, more than the default bound.
    let o = spate(&[
        "smtp",
        &addr,
        "--stages",
        "2s:1000/s,1s:0/s",
        "-q",
        "-o",
        &dir("stages"),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let s = summary(&tmp.path().join("stages"));
    let n = s["totals"]["attempted"].as_u64().unwrap();
    assert!((1495..=1505).contains(&n), "{n}");
    let plan: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("stages/plan.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(plan["duration_s"], 3.0);
    // (Other warnings, e.g. lateness on a busy machine, may come; not this one.)
    let warned = |s: &serde_json::Value| {
        s["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("default bound"))
    };
    assert!(!warned(&s), "{s}");

    // A rate the arrival thread hands out in batches (ten arrivals to its 250 µs
    // window): still exactly rate × duration arrivals, each sent or counted as dropped.
    let o = spate(&[
        "smtp",
        &addr,
        "--rate",
        "40000/s",
        "-d",
        "1s",
        "-m",
        "0",
        "--max-in-flight",
        "100",
        "-q",
        "-o",
        &dir("batched"),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let t = &summary(&tmp.path().join("batched"))["totals"];
    let n = t["attempted"].as_u64().unwrap() + t["dropped"].as_u64().unwrap();
    assert_eq!(n, 40_000, "{t}");
    assert!(t["attempted"].as_u64().unwrap() > 0, "{t}");

    // No bound given: the default one ends the run, and the summary says so.
    let o = spate(&[
        "smtp",
        &addr,
        "--rate",
        "2000/s",
        "-q",
        "-o",
        &dir("default"),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let s = summary(&tmp.path().join("default"));
    assert_eq!(s["totals"]["attempted"], 1000);
    assert!(warned(&s), "{s}");

    // A zero duration is bad input.
    let o = spate(&["smtp", &addr, "-d", "0", "-o", &dir("zero")]).await;
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert!(!tmp.path().join("zero").exists());
    server.shutdown().await;
}

/// `--connect-rate`: a closed workload's sessions start at the rate given, not all at
/// once; above 1000 users the default rate is 1000/s; an open workload refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_start_at_the_connect_rate() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("ramp");
    let o = spate(&[
        "smtp",
        &addr,
        "-u",
        "20",
        "--connect-rate",
        "10/s",
        "-d",
        "3s",
        "--think",
        "100ms",
        "-m",
        "0",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let s = summary(&out);
    assert!(s["totals"]["accepted"].as_u64().unwrap() > 20, "{s}");
    assert_eq!(s["totals"]["connections"], 20);
    // Session i connects i/10 s after the start: ten in the first second, ten in the next.
    let per_second: Vec<u64> = common::column_rows(&out, &["connections"])
        .into_iter()
        .map(|r| r[0])
        .collect();
    assert!(per_second.len() >= 2, "{per_second:?}");
    assert!(
        (9..=11).contains(&per_second[0]) && per_second[0] + per_second[1] == 20,
        "{per_second:?}"
    );
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("plan.json")).unwrap()).unwrap();
    assert_eq!(plan["connect_rate"], 10.0, "{plan}");

    // Many users: 1000/s unless told otherwise (1 001 sessions, one message each).
    let out = tmp.path().join("many");
    let o = spate(&[
        "smtp",
        &addr,
        "-u",
        "1001",
        "-n",
        "1001",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("plan.json")).unwrap()).unwrap();
    assert_eq!(plan["connect_rate"], 1000.0, "{plan}");
    assert_eq!(summary(&out)["totals"]["accepted"], 1001);

    let o = spate(&[
        "smtp",
        &addr,
        "--rate",
        "5/s",
        "--connect-rate",
        "10/s",
        "-n",
        "5",
    ])
    .await;
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert!(
        o.stderr.contains("--connect-rate is for closed workloads")
            && o.stderr.lines().count() == 1,
        "{}",
        o.stderr
    );
    server.shutdown().await;
}
