//! Verdicts on the load commands: `--threshold` checked on the results when the run ends
//! (exit status, thresholds.json), `abort` stopping a run that has already failed, with a
//! complete results directory and the reason, and `--junit` read back as JUnit readers do.

mod common;

use std::time::Duration;

use common::{junit_cases as junit, run_blocking, serve_process, summary, Output, SPATE};

fn spate(args: &[&str]) -> Output {
    run_blocking(SPATE, args, &[], Duration::from_secs(120))
}

/// A run whose latency objective has already failed stops at its first check after the
/// grace instead of running its minute: as after SIGTERM, every unit counted, the
/// summary, report and thresholds.json saying which threshold stopped it and when, exit 1.
#[test]
fn a_threshold_that_ends_in_abort_stops_a_failing_run() {
    // Every message's final reply waits 50 ms: p99 < 10 ms cannot hold.
    let (_server, addr) = serve_process("--smtp", &["--delay".as_ref(), "data:50ms".as_ref()]);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let xml = tmp.path().join("junit.xml");
    let o = spate(&[
        "smtp",
        &addr,
        "--users",
        "2",
        "--duration",
        "60s",
        "-q",
        "-o",
        out.to_str().unwrap(),
        "--threshold",
        "p99(transaction) < 10ms abort after 1s",
        "--threshold",
        "errors.rate < 1%",
        "--junit",
        xml.to_str().unwrap(),
    ]);
    assert_eq!(o.code, Some(1), "{}\n{}", o.stdout, o.stderr);
    let s = summary(&out);
    // Stopped long before its minute (at its first check from 1 s, plus the grace for
    // the messages in flight).
    assert!(s["elapsed_s"].as_f64().unwrap() < 30.0, "{s}");
    assert_eq!(s["interrupted"], true);
    assert_eq!(s["complete"], true);
    assert_eq!(s["interrupted_by"], "threshold");
    let a = &s["extra"]["aborted"];
    assert_eq!(
        a["threshold"], "p99(transaction) < 10ms abort after 1s",
        "{a}"
    );
    assert!(a["at_s"].as_f64().unwrap() >= 1.0, "{a}");
    assert!(a["value"].as_f64().unwrap() >= 50_000.0, "{a}");
    assert!(s["totals"]["accepted"].as_u64().unwrap() > 0);
    assert!(
        o.stdout.contains("(stopped early by a threshold)"),
        "{}",
        o.stdout
    );
    assert!(
        o.stderr
            .contains("threshold 'p99(transaction) < 10ms abort after 1s' failed at"),
        "{}",
        o.stderr
    );
    assert!(o.stdout.contains("thresholds 1/2 held"), "{}", o.stdout);
    let report = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(report.contains("stopped early by a threshold"));
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("thresholds.json")).unwrap())
            .unwrap();
    assert_eq!(t["thresholds"][0]["pass"], false, "{t}");
    assert_eq!(t["thresholds"][1]["pass"], true, "{t}");
    assert_eq!(t["aborted"]["threshold"], a["threshold"]);
    let said = junit(&xml);
    // The run and its two thresholds; the one that stopped the run failed.
    assert!(
        said.starts_with(
            "3 [('threshold p99(transaction) < 10ms abort after 1s', 'p99(transaction) = "
        ),
        "{said}"
    );
    assert!(said.contains("it stopped the run at"), "{said}");
}

/// Without `abort` a threshold is judged at the end: a broken one makes exit 1 after the
/// whole run, held ones exit 0; figures only known after the run (verify.json) cannot
/// abort it, and a bad rule is refused before anything is written (exit 2).
#[test]
fn thresholds_are_judged_at_the_end_and_bad_ones_refused() {
    let (_server, addr) = serve_process("--smtp", &["--discard".as_ref()]);
    let tmp = tempfile::tempdir().unwrap();
    let run = |name: &str, rules: &[&str]| {
        let out = tmp.path().join(name);
        let mut args = vec![
            "smtp",
            &addr,
            "--count",
            "30",
            "-q",
            "-o",
            out.to_str().unwrap(),
        ];
        for r in rules {
            args.extend(["--threshold", r]);
        }
        (spate(&args), out)
    };
    let (o, out) = run(
        "held",
        &["totals.accepted == 30", "p99(transaction) < 10s abort"],
    );
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("thresholds 2/2 held"), "{}", o.stdout);
    assert_eq!(summary(&out)["interrupted"], false);
    let (o, out) = run("broken", &["totals.accepted > 30"]);
    assert_eq!(o.code, Some(1), "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stderr
            .contains("threshold failed: totals.accepted = 30, limit > 30"),
        "{}",
        o.stderr
    );
    assert_eq!(summary(&out)["totals"]["accepted"], 30);
    for (rule, why) in [
        ("p99(transaction) < 5", "give the limit a unit"),
        ("verify.missing == 0 abort", "only known after the run"),
        ("errors.rate < 1% abort later", "abort after DURATION"),
    ] {
        let (o, out) = run("bad", &[rule]);
        assert_eq!(o.code, Some(2), "{rule}: {}\n{}", o.stdout, o.stderr);
        assert!(o.stderr.contains(why), "{rule}: {}", o.stderr);
        assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
        assert!(!out.exists(), "{rule}: nothing is written");
    }
}

/// In a scenario, a step's threshold that ends in abort stops that step's command while
/// it runs; the step fails with the reason and the later steps do not run.
#[test]
fn a_scenario_step_is_stopped_by_its_threshold_and_the_rest_skipped() {
    let (_server, addr) = serve_process("--smtp", &["--delay".as_ref(), "data:50ms".as_ref()]);
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("abort.toml");
    std::fs::write(
        &file,
        format!(
            r#"
description = "stop a failing soak early"
[[step]]
name = "soak"
command = "smtp"
target = "{addr}"
users = 2
duration = "60s"
quiet = true
thresholds = ["p99(transaction) < 10ms abort after 1s", "errors.rate < 1%"]
[[step]]
name = "after"
run = "true"
"#
        ),
    )
    .unwrap();
    let out = d.path().join("res");
    let o = spate(&[
        "run",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.code, Some(1), "{}\n{}", o.stdout, o.stderr);
    let sc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("scenario.json")).unwrap()).unwrap();
    let steps = sc["steps"].as_array().unwrap();
    assert_eq!(steps[0]["status"], "failed", "{sc}");
    let err = steps[0]["error"].as_str().unwrap();
    assert!(
        err.starts_with("stopped by threshold 'p99(transaction) < 10ms abort after 1s' at "),
        "{err}"
    );
    let ths = steps[0]["thresholds"].as_array().unwrap();
    assert_eq!(
        (ths[0]["pass"].as_bool(), ths[1]["pass"].as_bool()),
        (Some(false), Some(true)),
        "{sc}"
    );
    assert_eq!(steps[1]["status"], "skipped", "{sc}");
    let s = summary(&out.join("01-soak"));
    assert!(s["elapsed_s"].as_f64().unwrap() < 30.0, "{s}");
    // A scenario-wide threshold is judged after its step: `abort` there is refused.
    let bad = d.path().join("bad.toml");
    std::fs::write(
        &bad,
        format!(
            "thresholds = [\"soak.errors.rate < 1% abort\"]\n[[step]]\nname = \"soak\"\ncommand = \"smtp\"\ntarget = \"{addr}\"\ncount = 1\n"
        ),
    )
    .unwrap();
    let o = spate(&[
        "run",
        bad.to_str().unwrap(),
        "--out",
        d.path().join("bad").to_str().unwrap(),
    ]);
    assert_eq!(o.code, Some(2), "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("into the step's own thresholds"),
        "{}",
        o.stderr
    );
}
