//! The experiments of ../shared/EXPERIMENTS.md as scenario files (scenarios/), run in short,
//! bounded variants against the real test bed. Each checks the columns its authors
//! tabulated are there and hold the figures the run produced.

mod common;

use std::path::Path;
use std::process::Command;

use common::bed::Bed;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

fn scenario(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

/// `spate run` with the bed's environment; returns stdout.
fn run(bed: &Bed, args: &[&str]) -> String {
    let o = Command::new(SPATE)
        .args(args)
        .envs(&bed.env)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{args:?}\n{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

fn csv(path: &Path) -> Vec<Vec<String>> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| l.split(',').map(String::from).collect())
        .collect()
}

fn col(rows: &[Vec<String>], name: &str) -> usize {
    rows[0]
        .iter()
        .position(|h| h == name)
        .unwrap_or_else(|| panic!("no column {name}: {:?}", rows[0]))
}

/// The number in row `row`, column `name` of a CSV table (`context` printed when it is
/// not one).
fn number(rows: &[Vec<String>], row: usize, name: &str, context: &str) -> f64 {
    let cell = &rows[row][col(rows, name)];
    cell.parse()
        .unwrap_or_else(|_| panic!("{name} = {cell:?}\n{context}"))
}

/// E1: drain time, time per message and server CPU per certified-mail filter process
/// count (the bed's signing filter: openssl cms per message), every message, receipt and
/// signed copy accounted for, and the knee beside the 2 x CPUs + 1..3 rule.
#[test]
fn e1_certified_mail() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &["--port-offset", "auto", "--filter", "sign"],
    ) else {
        return;
    };
    let out = tmp.path().join("e1");
    let stdout = run(
        &bed,
        &[
            "run",
            &scenario("e1-certified-mail.toml"),
            "--set",
            "count=20",
            "--set",
            "size=4096",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let rows = csv(&out.join("matrix.csv"));
    assert_eq!(rows.len(), 6, "{stdout}");
    let procs: Vec<&str> = rows[1..]
        .iter()
        .map(|r| r[col(&rows, "procs")].as_str())
        .collect();
    assert_eq!(procs, ["1", "2", "4", "8", "16"]);
    let log = || {
        let text = std::fs::read_to_string(bed.dir.join("log/postfix.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    };
    for (i, r) in rows.iter().enumerate().skip(1) {
        let v = |name: &str| number(&rows, i, name, &stdout);
        assert_eq!(v("messages"), 20.0);
        assert_eq!(v("delivered"), 20.0);
        assert_eq!(v("missing"), 0.0);
        assert_eq!(v("receipts"), 20.0, "{r:?}");
        assert_eq!(v("signed copies"), 20.0, "{r:?}");
        assert_eq!(v("expected each"), 20.0);
        let drain = v("drain [s]");
        assert!(
            drain > 0.0 && drain < 120.0,
            "procs {}: drain {drain} s\n{}",
            r[0],
            log()
        );
        // Both columns are rounded for display: agree within 1 % (or a rounding step).
        let per_msg = v("time per message [ms]");
        assert!(
            (per_msg - drain * 1000.0 / 20.0).abs() <= (per_msg * 0.01).max(0.01),
            "{per_msg} vs {drain}"
        );
        // The filter runs a Python program and openssl for each message: milliseconds of
        // CPU each, far above what Postfix alone spends handing mail to Dovecot.
        let cpu = v("server CPU per message [ms]");
        assert!(
            cpu > 5.0 && cpu < 5000.0,
            "procs {}: {cpu} ms\n{stdout}",
            r[0]
        );
        assert!(v("server CPU [%]") > 0.0, "{stdout}");
        // The most filter processes seen at once: at least one, never above maxproc.
        let procs: f64 = r[col(&rows, "procs")].parse().unwrap();
        let busy = v("busy max");
        assert!(
            busy >= 1.0 && busy <= procs,
            "procs {procs}: busy {busy}\n{stdout}"
        );
        assert_eq!(r[col(&rows, "exit")], "0");
    }
    // The process count really was set for each run: the filter's maxproc.
    let master_cf = std::fs::read_to_string(bed.dir.join("postfix/master.cf")).unwrap();
    let pipe = master_cf
        .lines()
        .find(|l| l.starts_with("certmail"))
        .unwrap_or_else(|| panic!("{master_cf}"));
    assert_eq!(pipe.split_whitespace().nth(6), Some("16"), "{pipe}");
    // The summary: where adding processes stops helping, beside the rule.
    let knee = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/e1-knee"))
        .arg(out.join("matrix.csv"))
        .args(["--cpus", "2"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&knee.stdout);
    assert!(knee.status.success(), "{text}");
    assert!(
        text.contains("adding processes stops helping after ")
            || text.contains("adding processes still helped at 16"),
        "{text}"
    );
    assert!(
        text.contains("the rule 2 x CPUs + 1..3 gives 5..7 for 2 CPUs"),
        "{text}"
    );
}

/// E5: XMPP fan-out per address-list size on each real server of the bed: every presence
/// and multicast copy accounted for, latency at the recipients, the server's CPU and memory.
fn e5_xmpp_fanout(server: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &["--port-offset", "auto", "--users", "30", "--xmpp", server],
    ) else {
        return;
    };
    let out = tmp.path().join("e5");
    let stdout = run(
        &bed,
        &[
            "run",
            &scenario("e5-xmpp-fanout.toml"),
            "--set",
            "sessions=20",
            "--set",
            "count=40",
            "--set",
            "rate=50/s",
            "--set",
            "addresses=5",
            "--set",
            "presence_every=2s",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    // One address-list size (--set replaces the matrix): the scenario's own report.csv.
    let rows = csv(&out.join("report.csv"));
    assert_eq!(rows.len(), 2, "{stdout}");
    let v = |name: &str| number(&rows, 1, name, &stdout);
    assert_eq!(v("multicasts"), 40.0);
    assert_eq!(v("deliveries"), 200.0);
    assert_eq!(v("missing"), 0.0);
    // Every session's presence reached the 19 others.
    assert_eq!(v("presence deliveries"), 20.0 * 19.0);
    assert!(v("last copy p50 [us]") > 0.0 && v("last copy p99 [us]") >= v("last copy p50 [us]"));
    assert!(v("server CPU per delivery [us]") > 0.0, "{stdout}");
    assert!(v("server CPU [%]") > 0.0, "{stdout}");
    assert!(v("server RSS max [MB]") > 10.0, "{stdout}");
}

#[test]
fn e5_xmpp_fanout_ejabberd() {
    e5_xmpp_fanout("ejabberd");
}

#[test]
fn e5_xmpp_fanout_prosody() {
    e5_xmpp_fanout("prosody");
}

/// `spate serve` in a process of its own, stopped by PID when dropped.
struct Served(std::process::Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// E5's short variant against the embedded server (no real XMPP server needed): a matrix
/// of three address-list sizes, every copy accounted for, the server's CPU per multicast
/// and per delivery from its monitored PID, and the slope per address.
#[test]
fn e5_xmpp_fanout_embedded() {
    use std::io::BufRead as _;
    let tmp = tempfile::tempdir().unwrap();
    let users = tmp.path().join("users.txt");
    let lines: String = (0..12)
        .map(|i| format!("user{i}@example.test pw{i}\n"))
        .collect();
    std::fs::write(&users, lines).unwrap();
    let ca = tmp.path().join("ca.pem");
    let mut child = Command::new(SPATE)
        .args(["serve", "--xmpp", "127.0.0.1:0", "--users-file"])
        .arg(&users)
        .arg("--cert-out")
        .arg(&ca)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut first = String::new();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap());
    lines.read_line(&mut first).unwrap();
    // The server goes on printing (its certificate, its store): its stdout stays read.
    std::thread::spawn(move || std::io::copy(&mut lines, &mut std::io::sink()));
    let server = Served(child);
    let addr = first
        .strip_prefix("spate serve: xmpp")
        .unwrap_or_else(|| panic!("{first}"))
        .trim()
        .to_string();
    let out = tmp.path().join("e5");
    let o = Command::new(SPATE)
        .args(["run", &scenario("e5-xmpp-fanout.toml")])
        .args([
            "--set",
            "sessions=12",
            "--set",
            "count=30",
            "--set",
            "rate=30/s",
        ])
        .args(["--set", "presence_every=1s", "--set", "login_rate=100/s"])
        .args([
            "--set",
            "addresses=[2,5,11]",
            "--out",
            out.to_str().unwrap(),
        ])
        .env("SPATE_XMPP", &addr)
        .env("SPATE_XMPP_PID", server.0.id().to_string())
        .env("SPATE_USERS_FILE", &users)
        .env("SPATE_CA", &ca)
        .env("SPATE_XMPP_MULTICAST", "multicast.example.test")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows = csv(&out.join("matrix.csv"));
    assert_eq!(rows.len(), 4, "{stdout}");
    let v = |row: usize, name: &str| -> f64 {
        let cell = &rows[row][col(&rows, name)];
        cell.parse()
            .unwrap_or_else(|_| panic!("{name} = {cell:?}\n{stdout}"))
    };
    for (row, n) in [(1, 2.0), (2, 5.0), (3, 11.0)] {
        assert_eq!(v(row, "addresses"), n);
        assert_eq!(v(row, "multicasts"), 30.0, "{stdout}");
        assert_eq!(v(row, "deliveries"), 30.0 * n, "{stdout}");
        assert_eq!(v(row, "missing"), 0.0);
        // Every session's presence reached the 11 others.
        assert_eq!(v(row, "presence deliveries"), 12.0 * 11.0);
        assert!(v(row, "last copy p99 [us]") >= v(row, "last copy p50 [us]"));
        assert!(v(row, "server CPU per multicast [us]") > 0.0, "{stdout}");
        assert!(v(row, "server CPU per delivery [us]") > 0.0, "{stdout}");
        assert!(v(row, "server RSS max [MB]") > 1.0, "{stdout}");
    }
    // The slope of every column per address, in matrix.json and on stdout.
    let m: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("matrix.json")).unwrap()).unwrap();
    assert_eq!(m["slopes"]["per"], "addresses", "{m}");
    // Deliveries grow by exactly 30 per address.
    let d = m["slopes"]["columns"]["deliveries"].as_f64().unwrap();
    assert!((d - 30.0).abs() < 1e-6, "{d}");
    assert!(
        m["slopes"]["columns"]["server CPU per multicast [us]"].is_number(),
        "{m}"
    );
    assert!(
        m["slopes"]["standard_errors"]["server CPU per multicast [us]"].is_number(),
        "{m}"
    );
    assert!(
        stdout.contains("slope per addresses (least squares over the rows, ± its standard error)"),
        "{stdout}"
    );
}

/// E3, short: the scenario against the bed's nginx authorization service with a client
/// certificate and E3's service cost (33 ms a decision), 500 variants through a 200-entry
/// cache: E3's shape, 40 closed sessions with all 40 requests in flight at once; every
/// request accepted and seen by the server, every one a miss (500 shuffled variants,
/// fewer requests than that), the daemons' memory at the start and the end.
#[test]
fn e3_authz_soak() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &[
            "--port-offset",
            "auto",
            "--authz",
            "--no-mail",
            "--authz-miss-cost",
            "33",
        ],
    ) else {
        return;
    };
    let before = bed.authz_stats();
    let out = tmp.path().join("e3");
    let stdout = run(
        &bed,
        &[
            "run",
            &scenario("e3-authz-soak.toml"),
            "--set",
            "duration=6s",
            // Six seconds hold a daemon's start-up growth, not a trend: the leak limit
            // is tested on a leaking service below.
            "--set",
            "leak_mb_per_h=100000",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    let rows = csv(&out.join("report.csv"));
    assert_eq!(rows.len(), 2, "{stdout}");
    let v = |name: &str| number(&rows, 1, name, &stdout);
    // 40 sessions, each request ~33 ms of the one worker's CPU: all 40 wait at once.
    let requests = v("requests");
    assert!(requests > 0.0 && requests < 500.0, "{stdout}");
    assert_eq!(v("in flight max"), 40.0, "{stdout}");
    assert!(v("in flight mean") > 1.0, "{stdout}");
    assert!(
        v("p50 [ms]") > 0.0 && v("p90 [ms]") >= v("p50 [ms]") && v("p99 [ms]") >= v("p90 [ms]"),
        "{stdout}"
    );
    assert!(
        v("handshakes") >= 1.0 && v("handshakes") <= 40.0,
        "{stdout}"
    );
    assert!(
        v("worker RSS start [MB]") > 1.0 && v("worker RSS end [MB]") > 1.0,
        "{stdout}"
    );
    assert!(
        v("master RSS start [MB]") > 1.0 && v("master RSS end [MB]") > 1.0,
        "{stdout}"
    );
    let after = bed.authz_stats();
    let d = |k: &str| after[k].as_u64().unwrap() - before[k].as_u64().unwrap();
    let n = requests as u64;
    assert_eq!(
        (d("requests"), d("misses"), d("hits")),
        (n, n, 0),
        "{after}"
    );
}

/// E3's aging test, compressed: the service keeps 64 KB per request; the worker's memory
/// slope finds it (and warns), while spate's own memory stays flat.
#[test]
fn e3_a_leaking_service_is_caught_and_spate_stays_flat() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &[
            "--port-offset",
            "auto",
            "--authz",
            "--no-mail",
            "--authz-leak",
            "64",
        ],
    ) else {
        return;
    };
    let out = tmp.path().join("leak");
    let worker = bed.var("SPATE_AUTHZ_NGINX_WORKER_PID").to_string();
    let o = Command::new(SPATE)
        .args([
            "rr",
            bed.var("SPATE_AUTHZ"),
            "--frame",
            "http",
            "--path",
            "/authz",
            "--tls",
        ])
        .args([
            "--ca",
            bed.var("SPATE_AUTHZ_CA"),
            "--cert",
            bed.var("SPATE_AUTHZ_CERT"),
        ])
        .args([
            "--key",
            bed.var("SPATE_AUTHZ_KEY"),
            "--template",
            "r{variant}",
        ])
        .args(["--variants", "100", "--rate", "100/s", "--duration", "12s"])
        // Few connections: the open workload hands arrivals to its sessions in turn, so
        // each of --max-in-flight sessions opens its own (see the note on #16).
        .args(["--max-in-flight", "8"])
        .args([
            "--monitor-pid",
            &worker,
            "--leak-warn",
            "100MB/h",
            "-q",
            "-o",
        ])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let s = common::summary(&out);
    let m = &s["extra"]["monitor"];
    let slope = m["memory_slope_mb_per_h"][format!("proc.pid{worker}")]
        .as_f64()
        .unwrap();
    let rate = s["totals"]["accepted"].as_f64().unwrap() / s["elapsed_s"].as_f64().unwrap();
    let expected = rate * 64.0 / 1024.0 * 3600.0;
    assert!(
        slope > 0.5 * expected && slope < 1.5 * expected,
        "slope {slope} MB/h, leak rate {expected} MB/h"
    );
    let mem = &m["memory_mb"][format!("proc.pid{worker}")];
    let grown = mem["end"].as_f64().unwrap() - mem["start"].as_f64().unwrap();
    assert!(grown > 40.0, "{mem}: 1200 requests of 64 KB");
    assert!(
        stdout.contains(&format!("proc.pid{worker} memory grows")),
        "{stdout}"
    );
    assert!(!stdout.contains("self.spate memory grows"), "{stdout}");
    // The E3 scenario's leak threshold fails the run on the same service.
    let scen = tmp.path().join("leak-scenario");
    let o = Command::new(SPATE)
        .args([
            "run",
            &scenario("e3-authz-soak.toml"),
            "--set",
            "duration=8s",
        ])
        .args(["--set", "users=8", "--set", "leak_mb_per_h=1000", "--out"])
        .arg(&scen)
        .envs(&bed.env)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(99), "{said}");
    assert!(
        said.contains(&format!(
            "threshold failed: soak.extra.monitor.memory_slope_mb_per_h.proc.pid{worker}"
        )),
        "{said}"
    );
    // The open variant catches the same leak (it had no memory threshold: a 2 KB-per-request
    // leak passed with 'thresholds 2/2 held', exit 0).
    let open = tmp.path().join("leak-scenario-open");
    let o = Command::new(SPATE)
        .args([
            "run",
            &scenario("e3-authz-soak-open.toml"),
            "--set",
            "duration=8s",
        ])
        .args([
            "--set",
            "rate=150/s",
            "--set",
            "leak_mb_per_h=1000",
            "--out",
        ])
        .arg(&open)
        .envs(&bed.env)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(99), "{said}");
    assert!(
        said.contains(&format!(
            "threshold failed: soak.extra.monitor.memory_slope_mb_per_h.proc.pid{worker}"
        )),
        "{said}"
    );
    let own = &m["self_rss_mb"];
    let (after, end) = (
        own["after_warmup"].as_f64().unwrap(),
        own["end"].as_f64().unwrap(),
    );
    assert!(
        after > 1.0 && end - after < 3.0,
        "spate RSS {after} → {end} MB"
    );
}
