//! Was the generator the limit? A run against a slow server says `server`; the same
//! generator starved on purpose (a CPU quota on its own process through a cgroup, 5 % of
//! one CPU) says `generator` and why, whatever the server.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::{run_blocking, serve_process, summary, SPATE};

/// A CPU cgroup of this test's own with a quota of 5 ms per 100 ms (v1's cpu controller,
/// or v2's cpu.max), removed when dropped; None where the machine has neither writable.
struct Quota(PathBuf);

impl Quota {
    fn new() -> Option<Quota> {
        let name = format!("spate-test-{}", std::process::id());
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        if v1.join("cpu.cfs_quota_us").exists() {
            let d = v1.join(&name);
            std::fs::create_dir(&d).ok()?;
            let q = Quota(d);
            std::fs::write(q.0.join("cpu.cfs_period_us"), "100000").ok()?;
            std::fs::write(q.0.join("cpu.cfs_quota_us"), "5000").ok()?;
            return Some(q);
        }
        let v2 = Path::new("/sys/fs/cgroup");
        let controllers = std::fs::read_to_string(v2.join("cgroup.subtree_control")).ok()?;
        if !controllers.split_whitespace().any(|c| c == "cpu") {
            return None;
        }
        let d = v2.join(&name);
        std::fs::create_dir(&d).ok()?;
        let q = Quota(d);
        std::fs::write(q.0.join("cpu.max"), "5000 100000").ok()?;
        Some(q)
    }
}

impl Drop for Quota {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

fn bound(s: &serde_json::Value) -> (String, String) {
    let b = &s["extra"]["bound_by"];
    (
        b["bound_by"].as_str().unwrap().to_string(),
        b["why"].as_str().unwrap().to_string(),
    )
}

#[test]
fn a_slow_server_is_the_limit_and_a_starved_generator_says_it_was() {
    // Every reply to DATA (the message's BDAT here) waits 20 ms: the server is the limit.
    let (_server, addr) = serve_process("--smtp", &["--delay".as_ref(), "data:20ms".as_ref()]);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("server");
    let o = run_blocking(
        SPATE,
        &[
            "smtp",
            &addr,
            "-u",
            "4",
            "-d",
            "2s",
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(60),
    );
    assert!(o.ok, "{o:?}");
    let s = summary(&out);
    let (b, why) = bound(&s);
    // The verdict follows its evidence: on a quiet machine the generator kept up; on a busy
    // one (its event loop late, its CPU high) it may not say `server`, and says why.
    let ev = &s["extra"]["bound_by"]["evidence"];
    // Closed sessions: a lag small beside the server's response time is calm too.
    let lag = ev["loop_lag_p99_us"].as_u64().unwrap();
    let response = ev["response_p50_us"].as_u64().unwrap();
    let calm = (lag <= 5_000 || lag * 4 <= response) && ev["cpu_pct"].as_f64().unwrap() <= 70.0;
    assert_eq!(b == "server", calm, "{why}\n{ev}");
    assert_ne!(b, "generator", "4 sessions against a 20 ms server: {why}");
    assert!(o.stdout.contains(&format!("bound by: {b}")), "{}", o.stdout);

    let Some(quota) = Quota::new() else {
        common::cannot_run("no writable CPU cgroup (v1 cpu controller or v2 cpu.max)");
        return;
    };
    // The same generator at 2000 arrivals a second with 5 % of one CPU: it cannot keep up.
    let out = tmp.path().join("generator");
    let script = format!(
        "echo $$ > {}/cgroup.procs && exec {SPATE} smtp {addr} --rate 2000/s -d 2s --grace 1s -o {}",
        quota.0.display(),
        out.display()
    );
    let o = run_blocking("sh", &["-c", &script], &[], Duration::from_secs(120));
    assert!(o.ended(), "{o:?}");
    let s = summary(&out);
    let (b, why) = bound(&s);
    assert_eq!(b, "generator", "{why}\n{}", s["extra"]["bound_by"]);
    assert!(why.contains("spate itself was the limit"), "{why}");
    assert!(o.stdout.contains("bound by: generator"), "{}", o.stdout);
    // The kernel's own account of the quota is part of the evidence.
    let throttled = s["extra"]["bound_by"]["evidence"]["throttled_s"].as_f64();
    assert!(
        throttled.is_some_and(|t| t > 0.0),
        "{}",
        s["extra"]["bound_by"]
    );
    // compare says which run says nothing about the server.
    let server_run = tmp.path().join("server");
    let c = run_blocking(
        SPATE,
        &[
            "compare",
            server_run.to_str().unwrap(),
            out.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(60),
    );
    assert!(c.ok, "{c:?}");
    assert!(
        c.stdout.contains("run B was generator-bound"),
        "{}",
        c.stdout
    );
}

/// Busy loops pinned to a CPU, stopped (by PID) when dropped.
struct Busy(Vec<std::process::Child>);

impl Drop for Busy {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A generator that shares its one CPU with two busy loops (as `taskset -c 0` beside other
/// work): closed sessions, so no late or dropped arrival gives it away, its own CPU share
/// low, and yet most of its time runnable went waiting for the CPU. The run queue says so:
/// `generator`, never `undetermined`.
#[test]
fn a_generator_starved_of_cpu_by_other_processes_says_so() {
    if !common::have("taskset") {
        common::cannot_run("taskset not found (util-linux)");
    }
    let (_server, addr) = serve_process("--smtp", &[]);
    let busy = Busy(
        (0..2)
            .map(|_| {
                std::process::Command::new("taskset")
                    .args(["-c", "0", "sh", "-c", "while :; do :; done"])
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("starved");
    let o = run_blocking(
        "taskset",
        &[
            "-c",
            "0",
            SPATE,
            "smtp",
            &addr,
            "-u",
            "8",
            "-d",
            "3s",
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(120),
    );
    drop(busy);
    assert!(o.ok, "{o:?}");
    let s = summary(&out);
    let (b, why) = bound(&s);
    let ev = &s["extra"]["bound_by"]["evidence"];
    assert_eq!(b, "generator", "{why}\n{ev}");
    assert!(why.contains("run queue"), "{why}");
    assert!(ev["runq_wait_s"].as_f64().unwrap() > 0.75, "{ev}");
    // The report says so at its top: its figures are not the server's.
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        page.contains("<b>bound by: generator</b>"),
        "no verdict on the page"
    );
}

/// A run whose --threshold failed says so in its report's status line, not just
/// "complete".
#[test]
fn a_report_says_its_thresholds_failed() {
    let (_server, addr) = serve_process("--smtp", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("t");
    let o = run_blocking(
        SPATE,
        &[
            "smtp",
            &addr,
            "-n",
            "20",
            "--threshold",
            "totals.accepted > 1000",
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(60),
    );
    // Only a threshold broke: its own exit status, apart from a failed run's 1.
    assert_eq!(o.code, Some(99), "{o:?}");
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(
        page.contains("1 threshold failed"),
        "status line without it"
    );
    assert!(page.contains("<b>bound by: "), "no verdict on the page");
}
