//! Work in flight when a run ends is counted, not lost: against a server that holds
//! every DATA reply for 8 s, a 3 s run with 1 s of grace counts each session's message as
//! unfinished (with the phase it was in), keeps the phases it completed, reconciles, and
//! says so.

mod common;

use common::{spate, summary};
use spate::serve::{self, faults};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_cut_off_at_the_end_are_counted_as_unfinished() {
    let mut cfg = serve::Config::loopback();
    cfg.faults
        .delays
        .push(faults::parse_delay("data:8s").unwrap());
    let server = serve::start(cfg).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let t = std::time::Instant::now();
    let o = spate(&[
        "smtp",
        &addr,
        "-u",
        "5",
        "-d",
        "3s",
        "--grace",
        "1s",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ended(), "{}", o.stderr);
    assert!(t.elapsed().as_secs_f64() < 7.5, "{:?}", t.elapsed());
    let s = summary(&out);
    let c = &s["totals"];
    assert_eq!(c["attempted"], 5, "{s}");
    assert_eq!(c["unfinished"], 5, "{s}");
    assert_eq!(c["accepted"], 0, "{s}");
    assert_eq!(s["reconciles"], true, "{s}");
    let phases: Vec<&str> = s["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phase"].as_str().unwrap())
        .collect();
    for p in ["connect", "banner", "ehlo"] {
        assert!(phases.contains(&p), "{p} missing: {phases:?}");
    }
    let errors = s["errors"].as_array().unwrap();
    assert_eq!(errors.len(), 1, "{s}");
    assert_eq!(errors[0]["kind"], "unfinished");
    assert_eq!(errors[0]["phase"], "bdat", "the group CHUNKING sends it in");
    assert_eq!(errors[0]["count"], 5);
    assert!(
        s["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("unfinished")),
        "{s}"
    );
    assert!(o.stdout.contains("unfinished 5"), "{}", o.stdout);
    let csv = std::fs::read_to_string(out.join("intervals.csv")).unwrap();
    assert!(csv.lines().next().unwrap().contains(",unfinished,"));
    server.shutdown().await;
}

/// Ctrl-C ends a run with exit 130 after writing everything; a run killed before it could
/// finish says so in `spate report --text`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_exits_130_and_an_incomplete_run_says_so() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let mut child = std::process::Command::new(common::SPATE)
        .args([
            "smtp",
            &addr,
            "-u",
            "2",
            "-d",
            "60s",
            "-q",
            "-o",
            out.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Readiness: the first interval is written.
    let t = std::time::Instant::now();
    while !out.join("summary.json").exists() && t.elapsed().as_secs() < 30 {
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // SAFETY: signalling the child we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(130));
    let s = summary(&out);
    assert_eq!(
        (s["complete"].as_bool(), s["interrupted_by"].as_str()),
        (Some(true), Some("SIGINT"))
    );
    let o = spate(&["report", out.to_str().unwrap(), "--text"]).await;
    assert!(o.stdout.contains("(interrupted)"), "{}", o.stdout);

    // A summary left behind by a run killed hard.
    let mut s = s;
    s["complete"] = false.into();
    std::fs::write(out.join("summary.json"), s.to_string()).unwrap();
    let o = spate(&["report", out.to_str().unwrap(), "--text"]).await;
    assert!(o.stdout.contains("INCOMPLETE"), "{}", o.stdout);
    server.shutdown().await;
}
