//! Verdicts on the load commands: `--threshold` checked on the results when the run ends
//! (exit status, thresholds.json), `abort` stopping a run that has already failed, with a
//! complete results directory and the reason, and `--junit` read back as JUnit readers do.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{junit_cases as junit, run_blocking, serve_process, summary, Output, SPATE};

fn spate(args: &[&str]) -> Output {
    run_blocking(SPATE, args, &[], Duration::from_secs(120))
}

/// `spate run FILE --out DIR/res` beside the file.
fn run_scenario(file: &Path) -> (Output, std::path::PathBuf) {
    let out = file.with_file_name("res");
    let o = spate(&[
        "run",
        file.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    (o, out)
}

/// A run whose latency objective has already failed stops at its first check after the
/// grace instead of running its minute: as after SIGTERM, every unit counted, the
/// summary, report and thresholds.json saying which threshold stopped it and when, exit 99 (only thresholds failed).
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
    // Only thresholds failed: 99, apart from a run that failed of itself (1).
    assert_eq!(o.code, Some(99), "{}\n{}", o.stdout, o.stderr);
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
    // The run's case is named the same from run to run (CI keeps its history); the run
    // id and the results directory are the suite's properties.
    let text = std::fs::read_to_string(&xml).unwrap();
    assert!(text.contains("name=\"spate smtp\""), "{text}");
    assert!(
        text.contains(&format!(
            "<property name=\"run_id\" value=\"{}\"/>",
            s["run_id"].as_str().unwrap()
        )),
        "{text}"
    );
    // An unreachable server still leaves a JUnit file: one failed case saying why.
    let gone = tmp.path().join("gone.xml");
    let port = common::free_port();
    let o = spate(&[
        "smtp",
        &format!("127.0.0.1:{port}"),
        "-n",
        "5",
        "-o",
        tmp.path().join("never").to_str().unwrap(),
        "--junit",
        gone.to_str().unwrap(),
    ]);
    assert_eq!(o.code, Some(1), "{}\n{}", o.stdout, o.stderr);
    let said = junit(&gone);
    assert!(
        said.starts_with("1 [('spate smtp', 'step failed: cannot connect"),
        "{said}"
    );
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
    assert_eq!(o.code, Some(99), "{}\n{}", o.stdout, o.stderr);
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
    let (o, out) = run_scenario(&file);
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

fn sweep_json(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("sweep.json")).unwrap()).unwrap()
}

/// `--find-max rate` against a server whose service time bounds the rate: every message
/// waits 100 ms for its final reply and at most 4 are in flight, so at most 40 messages a
/// second can meet a latency objective of 400 ms. The search doubles from 10/s, bisects
/// to its 25 % precision and holds the answer; the probes over the capacity fail on the
/// objective (their sessions were all waiting on the server: not generator-bound).
#[test]
fn find_max_rate_finds_what_the_service_time_implies() {
    let (_server, addr) = serve_process(
        "--smtp",
        &[
            "--discard".as_ref(),
            "--delay".as_ref(),
            "data:100ms".as_ref(),
        ],
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fm");
    let xml = tmp.path().join("fm.xml");
    let o = spate(&[
        "sweep",
        "-o",
        out.to_str().unwrap(),
        "--find-max",
        "rate",
        "--objective",
        "p99(response) < 400ms, errors.rate < 1%",
        "--precision",
        "25%",
        "--hold",
        "2s",
        "--warm-up",
        "0s",
        "--cool-down",
        "0s",
        "--junit",
        xml.to_str().unwrap(),
        "--",
        &addr,
        "--max-in-flight",
        "4",
        "--duration",
        "2s",
    ]);
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    let fm = &sweep_json(&out)["find_max"];
    let answer = fm["answer"].as_u64().unwrap_or_else(|| panic!("{fm:#}"));
    assert!((28..=50).contains(&answer), "{answer}: {fm:#}");
    assert_eq!(fm["held"], true, "{fm:#}");
    let fail = fm["lowest_fail"].as_u64().unwrap();
    assert!(
        fail > answer && fail - answer <= (answer / 4).max(1),
        "{fm:#}"
    );
    let probes = fm["probes"].as_array().unwrap();
    let values: Vec<u64> = probes
        .iter()
        .map(|p| p["value"].as_u64().unwrap())
        .collect();
    assert_eq!(
        &values[..3],
        &[10, 20, 40],
        "doubles from --from: {values:?}"
    );
    assert_eq!(probes.last().unwrap()["kind"], "hold");
    for p in probes {
        let s = summary(&out.join(p["dir"].as_str().unwrap()));
        match p["outcome"].as_str().unwrap() {
            // A probe that passed above the answer was not confirmed by its hold.
            "pass" => assert!(
                p["value"].as_u64().unwrap() <= answer
                    || probes.iter().any(|h| h["kind"] == "hold"
                        && h["outcome"] != "pass"
                        && h["value"].as_u64() <= p["value"].as_u64()),
                "{p}\n{fm:#}"
            ),
            "fail" => {
                let why = p["why"].as_str().unwrap();
                assert!(
                    why.contains("p99(response) = ") || why.contains("not carried"),
                    "{p}"
                );
                // The server was the limit; a machine busy with other work may leave
                // the verdict undetermined (the event loop late), never the generator
                // (a generator-bound probe is not a failure).
                let bound = s["extra"]["bound_by"]["bound_by"].as_str().unwrap();
                assert!(["server", "undetermined"].contains(&bound), "{p}");
            }
            other => panic!("{other}: {p}"),
        }
    }
    assert!(
        o.stdout.contains(&format!(
            "highest rate that meets the objective: {answer}/s, held for"
        )),
        "{}",
        o.stdout
    );
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains("Highest rate that meets the objective"));
    // The answer and the objective's two rules as the hold measured them, all passed.
    assert!(junit(&xml).starts_with("3 []"), "{}", junit(&xml));
}

/// `--find-max rate` where the objective alone would pass everything: 4 sessions at most
/// against a 20 ms reply carry about 200 messages a second, and above that most arrivals
/// are dropped while those that run stay fast. A probe whose offered load was not carried
/// fails (said as such), so the answer is below that capacity, not --up-to.
#[test]
fn find_max_fails_a_probe_whose_load_was_not_carried() {
    let (_server, addr) = serve_process("--smtp", &["--delay".as_ref(), "data:20ms".as_ref()]);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("fm");
    let o = spate(&[
        "sweep",
        "-o",
        out.to_str().unwrap(),
        "--find-max",
        "rate",
        "--objective",
        "p99(transaction) < 60ms",
        "--up-to",
        "1280",
        "--from",
        "40",
        "--precision",
        "25%",
        "--hold",
        "0s",
        "--warm-up",
        "0s",
        "--cool-down",
        "0s",
        "--",
        &addr,
        "--max-in-flight",
        "4",
        "--duration",
        "1s",
    ]);
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    let fm = &sweep_json(&out)["find_max"];
    let answer = fm["answer"].as_u64().unwrap_or_else(|| panic!("{fm:#}"));
    assert!((40..320).contains(&answer), "{answer}: {fm:#}");
    let probes = fm["probes"].as_array().unwrap();
    assert!(
        probes.iter().any(|p| p["outcome"] == "fail"
            && p["why"]
                .as_str()
                .unwrap()
                .contains("the offered load was not carried")),
        "{fm:#}"
    );
    assert!(probes.iter().all(|p| p["bound_by"].is_string()), "{fm:#}");
    assert!(o.stdout.contains("bound by"), "{}", o.stdout);
}

/// `--find-max users` against a server that serves 4 connections at a time (the others
/// wait for a slot) to sessions that keep their connection: 4 sessions are served, a
/// fifth waits for its greeting until the run gives its unit up (unfinished), which the
/// objective refuses. Without a failure below --up-to the answer is --up-to, said as
/// such; a missing objective is refused.
#[test]
fn find_max_users_finds_the_servers_connection_limit() {
    let (_server, addr) = serve_process(
        "--smtp",
        &[
            "--discard".as_ref(),
            "--delay".as_ref(),
            "data:50ms".as_ref(),
            "--max-connections".as_ref(),
            "4".as_ref(),
            "--queue-connections".as_ref(),
        ],
    );
    let tmp = tempfile::tempdir().unwrap();
    let find = |name: &str, extra: &[&str]| {
        let out = tmp.path().join(name);
        let mut args = vec![
            "sweep",
            "-o",
            out.to_str().unwrap(),
            "--find-max",
            "users",
            "--hold",
            "1s",
            "--warm-up",
            "0s",
            "--cool-down",
            "0s",
        ];
        args.extend_from_slice(extra);
        args.extend([
            "--",
            &addr,
            "--duration",
            "1s",
            "--grace",
            "1s",
            "--messages-per-connection",
            "1000",
        ]);
        let o = spate(&args);
        (o, out)
    };
    let (o, out) = find(
        "limit",
        &["--objective", "p99(response) < 1s, totals.unfinished == 0"],
    );
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    let fm = &sweep_json(&out)["find_max"];
    assert_eq!(fm["answer"], 4, "{fm:#}");
    assert_eq!(fm["lowest_fail"], 5, "{fm:#}");
    let (o, out) = find(
        "up-to",
        &["--objective", "errors.rate < 1%", "--up-to", "3"],
    );
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    assert_eq!(sweep_json(&out)["find_max"]["answer"], 3);
    assert!(
        o.stdout.contains("(the highest load tried: --up-to)"),
        "{}",
        o.stdout
    );
    let (o, out) = find("none", &[]);
    assert_eq!(o.code, Some(2), "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stderr.contains("--find-max needs --objective"),
        "{}",
        o.stderr
    );
    assert!(!out.exists());
}

/// `--find-max` in a scenario: a sweep step with its keys, and a threshold on its answer
/// (sweep.json's `find_max.answer`).
#[test]
fn find_max_runs_as_a_scenario_step_with_a_threshold_on_its_answer() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("max.toml");
    std::fs::write(
        &file,
        r#"
description = "the most sessions within the objective"
[server]
smtp = "127.0.0.1:0"
discard = true
[[step]]
name = "max"
command = "sweep"
find-max = "users"
objective = ["errors.rate < 1%", "p99(response) < 5s"]
up-to = 3
hold = "1s"
warm-up = "0s"
cool-down = "0s"
smtp = ["${server.smtp}", "--duration", "1s"]
thresholds = ["sweep.find_max.answer >= 1", "sweep.find_max.held == 1"]
"#,
    )
    .unwrap();
    let (o, out) = run_scenario(&file);
    assert_eq!(o.code, Some(0), "{}\n{}", o.stdout, o.stderr);
    let fm = &sweep_json(&out.join("01-max"))["find_max"];
    let answer = fm["answer"].as_u64().unwrap();
    assert!(
        o.stdout
            .contains(&format!("threshold ok: sweep.find_max.answer = {answer}")),
        "{}",
        o.stdout
    );
    let values: Vec<u64> = fm["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["value"].as_u64().unwrap())
        .collect();
    match fm["generator_limit"].as_u64() {
        // 1, 2, then 4 capped at --up-to 3, then the hold at 3.
        None => {
            assert_eq!(answer, 3, "{fm:#}");
            assert_eq!(values, vec![1, 2, 3, 3], "{fm:#}");
        }
        // On a machine busy with other work the generator, sharing it with its embedded
        // server, may be the limit first: that load is probed twice (a retry), never
        // counted as the server's failure, and the answer is the load below it.
        Some(g) => {
            assert!(answer < g, "{fm:#}");
            let at_limit: Vec<&str> = fm["probes"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["value"] == g && p["kind"] != "hold")
                .map(|p| p["outcome"].as_str().unwrap())
                .collect();
            assert_eq!(at_limit, ["generator", "generator"], "{fm:#}");
        }
    }
}
