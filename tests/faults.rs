//! Faults on a schedule (`--fault`) against `spate serve` processes this test starts: a
//! server stopped and continued, a server killed and restarted, a restart command that
//! fails. Every event is in faults.jsonl, the summary sets the load before, during and
//! after each fault side by side, and every unit is still counted once.

mod common;

use std::ffi::OsStr;
use std::path::Path;
use std::time::Duration;

use common::{run_blocking, serve_process, summary, SPATE};

/// faults.jsonl's events, in order.
fn events(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("faults.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A `spate serve LISTEN` process whose PID is in `pidfile`, its address, and the fault
/// that kills it at `at` with a restart that starts it again on the same address a second
/// later and writes the new PID there, as a service manager would.
fn killed_and_restarted(listen: &str, pidfile: &Path, at: &str) -> (common::Kill, String, String) {
    let (server, addr) = serve_process(listen, &[] as &[&OsStr]);
    std::fs::write(pidfile, format!("{}\n", server.0.id())).unwrap();
    let restart = format!(
        "sleep 1; {SPATE} serve {listen} {addr} >/dev/null 2>&1 & echo $! > {}",
        pidfile.display()
    );
    let fault = format!(
        "at={at} signal=KILL pidfile={} restart='{restart}'",
        pidfile.display()
    );
    (server, addr, fault)
}

/// Stops the server a restart started, by the PID it wrote: it is the test's to stop.
fn stop_restarted(pidfile: &Path) {
    let again: i32 = std::fs::read_to_string(pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill(2) on the PID of the server this test's restart command started.
    unsafe { libc::kill(again, libc::SIGTERM) };
}

fn smtp(addr: &str, out: &Path, extra: &[&str]) -> common::Output {
    let mut args = vec![
        "smtp",
        addr,
        "-u",
        "4",
        "--timeout",
        "1s",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    run_blocking(SPATE, &args, &[], Duration::from_secs(60))
}

#[test]
fn a_stopped_server_is_a_band_of_failures_and_the_load_comes_back() {
    let (server, addr) = serve_process("--smtp", &[]);
    let pid = server.0.id();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let fault = format!("at=1s for=2500ms signal=STOP pid={pid}");
    let o = smtp(&addr, &out, &["-d", "6s", "--fault", &fault]);
    assert!(o.ok, "{o:?}");
    let ev = events(&out);
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev[0]["event"], "signal");
    assert_eq!(ev[0]["what"], format!("STOP to PID {pid}"));
    assert_eq!(ev[1]["event"], "continue");
    assert!(ev.iter().all(|e| e["ok"] == true), "{ev:?}");
    let s = summary(&out);
    let occ = &s["extra"]["faults"]["occurrences"][0];
    assert_eq!(occ["applied"], true, "{occ}");
    // Units waiting on a stopped server time out (1 s) while it is stopped.
    assert!(occ["during"]["failed"].as_u64().unwrap() > 0, "{occ}");
    assert!(occ["before"]["accepted"].as_u64().unwrap() > 0, "{occ}");
    assert!(occ["after"]["accepted"].as_u64().unwrap() > 0, "{occ}");
    assert!(occ["first_accept_after_s"].is_number(), "{occ}");
    assert!(
        o.stdout.contains(&format!(
            "fault 1 at 1.0s-3.5s ({fault}): STOP to PID {pid} at 1."
        )),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout.contains("first unit accepted within"),
        "{}",
        o.stdout
    );
    // The report written at the end has the fault's section and shades it on the charts
    // over time; in a browser too.
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains("<h2>Faults</h2>"), "no Faults section");
    assert!(
        page.matches("class=\"band\"").count() >= 4,
        "too few fault bands"
    );
    if common::have("chromium") {
        let profile = tempfile::tempdir().unwrap();
        let report = out.join("report.html");
        let (dom, log) = common::chromium(&["--dump-dom"], &report, profile.path());
        assert!(!log.contains("CONSOLE"), "{log}");
        assert!(dom.matches("class=\"band\"").count() >= 4, "{log}");
        assert!(dom.contains("fault 1"));
    }
}

#[test]
fn a_killed_server_restarted_by_the_fault_is_an_outage_that_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let pidfile = tmp.path().join("serve.pid");
    let (server, addr, fault) = killed_and_restarted("--smtp", &pidfile, "1s");
    let out = tmp.path().join("r");
    let o = smtp(&addr, &out, &["-d", "6s", "--fault", &fault]);
    drop(server);
    stop_restarted(&pidfile);
    assert!(o.ok, "{o:?}");
    let ev = events(&out);
    let names: Vec<&str> = ev.iter().map(|e| e["event"].as_str().unwrap()).collect();
    assert_eq!(names, ["signal", "restart", "restart-done"], "{ev:?}");
    assert!(ev.iter().all(|e| e["ok"] == true), "{ev:?}");
    let s = summary(&out);
    let t = &s["totals"];
    assert!(t["failed"].as_u64().unwrap() > 0, "{t}");
    let occ = &s["extra"]["faults"]["occurrences"][0];
    // A moment's fault has no during; what it did is in the after.
    assert!(occ["during"].is_null(), "{occ}");
    assert!(occ["after"]["failed"].as_u64().unwrap() > 0, "{occ}");
    assert!(
        occ["first_accept_after_s"].as_f64().unwrap() >= 1.0,
        "{occ}"
    );
}

#[test]
fn a_failing_restart_is_reported_and_the_run_goes_on() {
    let (server, addr) = serve_process("--smtp", &[]);
    let pid = server.0.id();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    // CONT to a running server does nothing; its restart command fails.
    let fault = format!("at=500ms signal=CONT pid={pid} restart='exit 3'");
    let o = smtp(&addr, &out, &["-d", "2s", "--fault", &fault]);
    assert!(o.ok, "{o:?}");
    let ev = events(&out);
    let done = ev
        .iter()
        .find(|e| e["event"] == "restart-done")
        .expect("restart-done");
    assert_eq!(done["ok"], false, "{done}");
    assert!(done["error"].as_str().unwrap().contains("3"), "{done}");
    let s = summary(&out);
    assert!(
        s["totals"]["accepted"].as_u64().unwrap() > 0,
        "{}",
        s["totals"]
    );
    assert!(
        s["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("restart-done")),
        "{}",
        s["warnings"]
    );
}

#[test]
fn a_fault_that_cannot_be_applied_is_refused_before_the_run() {
    let (_server, addr) = serve_process("--smtp", &[] as &[&OsStr]);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("never");
    for (fault, want) in [
        ("at=1s signal=KILL pid=4000000", "no process 4000000"),
        ("at=1s signal=KILL", "needs pid="),
        ("signal=KILL pid=1", "no at="),
    ] {
        let o = smtp(&addr, &out, &["-n", "10", "--fault", fault]);
        assert_eq!(o.code, Some(2), "{o:?}");
        assert!(o.stderr.contains(want), "{}", o.stderr);
        assert_eq!(o.stderr.trim().lines().count(), 1, "{}", o.stderr);
        assert!(!out.exists(), "nothing is written for a refused run");
    }
}

/// A fault that cannot be applied fails the run (exit 1, said in one line) unless it says
/// `optional=yes`; a command fault is stamped when it started, not when it finished.
#[test]
fn a_fault_not_applied_fails_the_run_and_events_are_stamped_at_their_start() {
    let (_server, addr) = serve_process("--smtp", &[] as &[&OsStr]);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("failing");
    let o = smtp(
        &addr,
        &out,
        &["-d", "2s", "--fault", "at=500ms run='exit 4'"],
    );
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(
        o.stdout.contains("failed to apply or undo a fault"),
        "{}",
        o.stdout
    );
    assert_eq!(summary(&out)["extra"]["faults"]["not_applied"], 1);
    let out = tmp.path().join("optional");
    let o = smtp(
        &addr,
        &out,
        &["-d", "2s", "--fault", "at=500ms run='exit 4' optional=yes"],
    );
    assert!(o.ok, "{o:?}");
    // A command that takes 3 s is stamped at its start (0.5 s), not at its end (3.5 s).
    let out = tmp.path().join("stamped");
    let o = smtp(
        &addr,
        &out,
        &["-d", "4s", "--fault", "at=500ms run='sleep 3'"],
    );
    assert!(o.ok, "{o:?}");
    let ev = events(&out);
    assert_eq!(ev[0]["event"], "run", "{ev:?}");
    let t = ev[0]["t_s"].as_f64().unwrap();
    assert!((0.5..3.5).contains(&t), "{ev:?}");
}

/// Whether `pid` is a process that has not exited (a zombie has).
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|t| t.rsplit_once(')').map(|(_, r)| r.trim_start().to_string()))
        .is_some_and(|r| !r.starts_with('Z'))
}

/// Two processes of one name, one in the tree a fault names and one outside it (as an
/// unrelated server of the same name on a shared host would be): the fault reaches the
/// one inside only, and a name with no tree is refused before the run.
#[test]
fn a_fault_by_name_reaches_only_the_tree_it_names() {
    let (_server, addr) = serve_process("--smtp", &[] as &[&OsStr]);
    let tmp = tempfile::tempdir().unwrap();
    let exe = tmp.path().join("spatevictim");
    std::fs::copy("/bin/sleep", &exe).unwrap();
    let outside = common::Kill(std::process::Command::new(&exe).arg("60").spawn().unwrap());
    let root = common::Kill(
        std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{} 60 & echo $! > {}/inside; wait",
                exe.display(),
                tmp.path().display()
            ))
            .spawn()
            .unwrap(),
    );
    let inside_file = tmp.path().join("inside");
    // The shell writes its child's PID once it started it (bounded wait).
    let inside: u32 = (0..1000)
        .find_map(|_| {
            let pid = std::fs::read_to_string(&inside_file)
                .ok()
                .and_then(|t| t.trim().parse().ok());
            if pid.is_none() {
                std::thread::sleep(Duration::from_millis(10));
            }
            pid
        })
        .expect("the shell started its child");

    // Without a tree: refused, one line, exit 2, nothing written, nobody signalled.
    let never = tmp.path().join("never");
    let o = smtp(
        &addr,
        &never,
        &["-n", "10", "--fault", "at=1s signal=KILL name=spatevictim"],
    );
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(
        o.stderr
            .contains("would signal every process named spatevictim"),
        "{}",
        o.stderr
    );
    assert_eq!(o.stderr.trim().lines().count(), 1, "{}", o.stderr);
    assert!(!never.exists());
    assert!(running(outside.0.id()) && running(inside));

    let out = tmp.path().join("r");
    let fault = format!("at=500ms signal=KILL pid={} name=spatevictim", root.0.id());
    let o = smtp(&addr, &out, &["-d", "2s", "--fault", &fault]);
    assert!(o.ok, "{o:?}");
    let ev = events(&out);
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(ev[0]["what"], format!("KILL to PID {inside}"), "{ev:?}");
    assert_eq!(ev[0]["ok"], true, "{ev:?}");
    assert!(!running(inside), "the process in the tree was killed");
    assert!(
        running(outside.0.id()),
        "the process outside the tree lives"
    );
}

/// The run's one fault occurrence from its summary, after checking that the proxy's
/// toxic was switched on (and off, for a lasting one) in faults.jsonl.
fn net_fault(out: &Path, lasting: bool) -> serde_json::Value {
    let ev = events(out);
    assert_eq!(ev.len(), if lasting { 2 } else { 1 }, "{ev:?}");
    assert!(
        ev.iter().all(|e| e["event"] == "net" && e["ok"] == true),
        "{ev:?}"
    );
    summary(out)["extra"]["faults"]["occurrences"][0].clone()
}

/// Next to nothing was accepted during the fault: only units that ended in the few ms
/// between the interval's end and the fault (which count as during).
fn hardly_any(occ: &serde_json::Value) -> bool {
    let rate = |w: &str| occ[w]["accepted_per_s"].as_f64().unwrap();
    rate("during") < rate("before") / 4.0
}

/// How many errors of a window's classes contain `what`.
fn errors_with(window: &serde_json::Value, what: &str) -> u64 {
    window["errors"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| k.contains(what))
                .map(|(_, n)| n.as_u64().unwrap())
                .sum()
        })
        .unwrap_or(0)
}

#[test]
fn network_faults_through_the_proxy_show_in_their_window() {
    let (_server, addr) = serve_process("--smtp", &[] as &[&OsStr]);
    let tmp = tempfile::tempdir().unwrap();

    // Each chunk waits 50 ms either way: a transaction of several round trips takes at
    // least 100 ms while it is on, and nothing fails (the timeout is 1 s). (The units
    // of the few ms between the interval's end and the fault count as during: the p99.)
    let out = tmp.path().join("latency");
    let o = smtp(
        &addr,
        &out,
        &["-d", "4s", "--fault", "at=1s for=2s net=latency:50ms"],
    );
    assert!(o.ok, "{o:?}");
    let occ = net_fault(&out, true);
    assert!(
        occ["during"]["response_p99_us"].as_u64().unwrap() >= 100_000,
        "{occ}"
    );
    assert!(occ["before"]["accepted"].as_u64().unwrap() > 0, "{occ}");
    assert!(occ["after"]["accepted"].as_u64().unwrap() > 0, "{occ}");

    // New connections are reset at once: failures while it is on, then the load is back.
    let out = tmp.path().join("refuse");
    let o = smtp(
        &addr,
        &out,
        &["-d", "3s", "--fault", "at=1s for=1s net=refuse"],
    );
    assert!(o.ended(), "{o:?}");
    let occ = net_fault(&out, true);
    assert!(errors_with(&occ["during"], "closed") > 0, "{occ}");
    assert!(occ["after"]["accepted"].as_u64().unwrap() > 0, "{occ}");

    // Connections kept open between messages are reset at 1 s: each of the 4 sessions
    // finds its connection closed.
    let out = tmp.path().join("reset");
    let o = smtp(
        &addr,
        &out,
        &[
            "-d",
            "3s",
            "--messages-per-connection",
            "0",
            "--fault",
            "at=1s net=reset",
        ],
    );
    assert!(o.ok, "{o:?}");
    let occ = net_fault(&out, false);
    assert!(occ["during"].is_null(), "{occ}");
    assert!(errors_with(&occ["after"], "closed") >= 1, "{occ}");

    // Nothing comes back while the network swallows everything: the units time out.
    let out = tmp.path().join("blackhole");
    let o = smtp(
        &addr,
        &out,
        &["-d", "4s", "--fault", "at=1s for=2s net=blackhole"],
    );
    assert!(o.ended(), "{o:?}");
    let occ = net_fault(&out, true);
    assert!(errors_with(&occ["during"], "timeout") > 0, "{occ}");
    assert!(hardly_any(&occ), "{occ}");

    // Connections are cut after 100 bytes: no transaction gets through.
    let out = tmp.path().join("cut");
    let o = smtp(
        &addr,
        &out,
        &["-d", "3s", "--fault", "at=1s for=1s net=cut:100"],
    );
    assert!(o.ended(), "{o:?}");
    let occ = net_fault(&out, true);
    assert!(occ["during"]["failed"].as_u64().unwrap() > 0, "{occ}");
    assert!(hardly_any(&occ), "{occ}");
}

/// An XMPP server killed mid-run and started again: every session logs in again, the
/// load comes back, and the stanzas that were in flight when the streams died are
/// indeterminate, not missing: nothing is reported lost that the client cannot know.
#[test]
fn an_xmpp_server_killed_and_restarted_is_an_outage_every_session_comes_back_from() {
    let tmp = tempfile::tempdir().unwrap();
    let pidfile = tmp.path().join("serve.pid");
    let (server, addr, fault) = killed_and_restarted("--xmpp", &pidfile, "2s");
    let out = tmp.path().join("r");
    let o = run_blocking(
        SPATE,
        &[
            "xmpp",
            &addr,
            "--users",
            "4",
            "--rate",
            "200/s",
            "--user-pattern",
            "u{0..9}@example.test",
            "-d",
            "8s",
            "--timeout",
            "2s",
            "-o",
            out.to_str().unwrap(),
            "--fault",
            &fault,
        ],
        &[("SPATE_PASSWORD".into(), "pw".into())],
        Duration::from_secs(60),
    );
    drop(server);
    stop_restarted(&pidfile);
    assert!(o.ended(), "{o:?}");
    let s = summary(&out);
    let t = &s["totals"];
    // Every session logged in again (a reconnection each, at least).
    assert!(t["reconnections"].as_u64().unwrap() >= 4, "{t}");
    let occ = &s["extra"]["faults"]["occurrences"][0];
    assert!(occ["after"]["accepted"].as_u64().unwrap() > 0, "{occ}");
    let x = &s["extra"]["xmpp"];
    assert_eq!(x["missing"], 0, "{x}\n{}", o.stdout);
    // Units held back while the sessions logged in again are not blamed on the generator
    // alone.
    for w in s["warnings"].as_array().unwrap() {
        let w = w.as_str().unwrap();
        if w.contains("behind schedule") || w.contains("were dropped") {
            assert!(w.contains("logging in again"), "{w}");
        }
    }
    assert!(
        x["delivered"].as_u64().unwrap()
            + x["indeterminate"].as_u64().unwrap()
            + x["bounced"].as_u64().unwrap()
            == x["expected"].as_u64().unwrap(),
        "{x}"
    );
}
