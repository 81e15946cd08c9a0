//! What bounds a run: an open run sends exactly rate × duration; stages set the run's
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
