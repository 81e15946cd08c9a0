//! `spate rr` against the test bed's real authorization services (`scripts/testbed up
//! --authz --no-mail`): the stunnel line service (`--frame line`, `requireCert`), whose
//! program logs every request it answers, reconciled with spate's count, and a client
//! without a certificate refused with a classified TLS error; nginx's HTTPS service with
//! hit and miss classes, reconciled with the server's own hit and miss counters.

mod common;

use std::collections::HashSet;
use std::path::Path;
use std::process::Command;

use common::bed::Bed;
use serde_json::Value;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

fn bed(tmp: &Path) -> Option<Bed> {
    Bed::up(
        &tmp.join("bed"),
        &["--port-offset", "auto", "--authz", "--no-mail"],
    )
}

/// `spate rr ARGS... -q -o OUT`: exit code, summary.json, stdout.
fn rr(args: &[&str], out: &Path) -> (Option<i32>, Value, String) {
    let o = Command::new(SPATE)
        .arg("rr")
        .args(args)
        .args(["-q", "-o", out.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        out.join("summary.json").exists(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code(), common::summary(out), stdout)
}

/// nginx's authorization service over HTTPS at the bed's address `var`, trusting the
/// bed's CA.
fn https_at<'a>(bed: &'a Bed, var: &str) -> Vec<&'a str> {
    vec![
        bed.var(var),
        "--frame",
        "http",
        "--path",
        "/authz",
        "--tls",
        "--ca",
        bed.var("SPATE_AUTHZ_CA"),
    ]
}

/// nginx's HTTPS authorization service with the bed's client certificate.
fn https(bed: &Bed) -> Vec<&str> {
    let mut a = https_at(bed, "SPATE_AUTHZ");
    a.extend([
        "--cert",
        bed.var("SPATE_AUTHZ_CERT"),
        "--key",
        bed.var("SPATE_AUTHZ_KEY"),
    ]);
    a
}

/// The lines of the line service's request log (`PID SUBJECT KEY`).
fn line_log(bed: &Bed) -> Vec<String> {
    match std::fs::read_to_string(bed.var("SPATE_AUTHZ_LINE_LOG")) {
        Ok(text) => text.lines().map(str::to_string).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => panic!("the line service's log: {e}"),
    }
}

/// The stunnel line service: 40 requests over two kept connections, every answer the
/// service's `PERMIT` line for the client's subject, and the service's log holds exactly
/// those 40 (each request distinct, two processes: one per connection). Without a client
/// certificate every request fails with the TLS alert named, and nothing reaches the
/// program.
#[test]
fn line_service_with_client_certificate_reconciles_and_refuses_without() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = bed(tmp.path()) else {
        return;
    };
    let before = line_log(&bed).len();
    let line = bed.var("SPATE_AUTHZ_LINE");
    let ca = bed.var("SPATE_AUTHZ_CA");
    let (code, s, stdout) = rr(
        &[
            line,
            "--frame",
            "line",
            "--tls",
            "--ca",
            ca,
            "--cert",
            bed.var("SPATE_AUTHZ_CERT"),
            "--key",
            bed.var("SPATE_AUTHZ_KEY"),
            "--template",
            "CHECK user{variant} read doc-{seq}",
            "--variants",
            "5",
            "--expect",
            "^PERMIT subject=CN=client key=[0-9a-f]{40}$",
            "-n",
            "40",
            "--users",
            "2",
        ],
        &tmp.path().join("with"),
    );
    assert_eq!(code, Some(0), "{stdout}");
    let t = &s["totals"];
    assert_eq!(
        (
            t["accepted"].as_u64(),
            t["rejected"].as_u64(),
            t["failed"].as_u64()
        ),
        (Some(40), Some(0), Some(0)),
        "{stdout}"
    );
    assert_eq!(s["extra"]["rr"]["handshakes"], 2, "{stdout}");
    let logged: Vec<String> = line_log(&bed).split_off(before);
    assert_eq!(logged.len(), 40, "{logged:?}");
    let fields: Vec<Vec<&str>> = logged
        .iter()
        .map(|l| l.split(' ').collect::<Vec<_>>())
        .collect();
    assert!(
        fields
            .iter()
            .all(|f| f.len() == 3 && f[1] == "CN=client" && f[2].len() == 40),
        "{logged:?}"
    );
    let keys: HashSet<&str> = fields.iter().map(|f| f[2]).collect();
    assert_eq!(keys.len(), 40, "every request answered once: {logged:?}");
    let pids: HashSet<&str> = fields.iter().map(|f| f[0]).collect();
    assert_eq!(pids.len(), 2, "one program per connection: {logged:?}");

    // No client certificate: stunnel (requireCert) ends the handshake with an alert.
    let (code, s, stdout) = rr(
        &[
            line,
            "--frame",
            "line",
            "--tls",
            "--ca",
            ca,
            "--template",
            "CHECK anonymous {seq}",
            "-n",
            "3",
            "--users",
            "1",
        ],
        &tmp.path().join("without"),
    );
    assert_eq!(code, Some(1), "{stdout}");
    assert_eq!(s["totals"]["failed"], 3, "{stdout}");
    let errors = s["errors"].as_array().unwrap();
    assert!(
        !errors.is_empty() && errors.iter().all(|e| e["kind"] == "tls-client-cert"),
        "classified as a refused client certificate, not a reset: {errors:?}"
    );
    assert!(
        errors
            .iter()
            .all(|e| e.to_string().contains("refused the client certificate")),
        "{errors:?}"
    );
    assert_eq!(
        line_log(&bed).len(),
        before + 40,
        "nothing reached the line program"
    );
}

/// nginx over TLS with the client certificate: a hot request (one body) and a cold one
/// (a new body each time, `{seq}`) in turn, as classes `hit` and `miss`, one request at a
/// time. The server's own counters agree: 40 requests, the hot body a miss once and then
/// 19 hits, every cold one a miss; spate's miss class is the slow one (a miss costs ~3 ms
/// of the worker's CPU). nginx's access log is off on the bed (it would cost the service
/// more than a hit does): its `/stats` counters are the server's account here.
#[test]
fn nginx_hit_and_miss_classes_reconcile_with_the_servers_counters() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = bed(tmp.path()) else {
        return;
    };
    let reqs = tmp.path().join("reqs.txt");
    std::fs::write(
        &reqs,
        "hit\tsubject=CN=client action=read resource=hot\n\
         miss\tsubject=CN=client action=read resource=cold-{seq}\n",
    )
    .unwrap();
    let before = bed.authz_stats();
    let (code, s, stdout) = rr(
        &[
            &https(&bed)[..],
            &[
                "--requests",
                reqs.to_str().unwrap(),
                "--expect-status",
                "200",
                "--expect",
                // the body ends with a line end, which `$` alone does not skip
                "(?m)^Permit subject=CN=client key=[0-9a-f]{32}$",
                "-n",
                "40",
                // one at a time: a hit never waits behind a miss in nginx's one worker
                "--users",
                "1",
            ],
        ]
        .concat(),
        &tmp.path().join("classes"),
    );
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(s["totals"]["accepted"], 40, "{stdout}");
    let after = bed.authz_stats();
    let d = |k: &str| after[k].as_u64().unwrap() - before[k].as_u64().unwrap();
    assert_eq!(
        (d("requests"), d("hits"), d("misses")),
        (40, 19, 21),
        "{before} -> {after}"
    );
    let c = &s["extra"]["rr"]["classes"];
    assert_eq!(
        (
            c["hit"]["accepted"].as_u64(),
            c["miss"]["accepted"].as_u64()
        ),
        (Some(20), Some(20)),
        "{c}"
    );
    let p50 = |k: &str| c[k]["response_us"]["p50"].as_u64().unwrap();
    assert!(
        p50("miss") >= 2_000 && p50("miss") > p50("hit"),
        "a miss costs ~3 ms of CPU, a hit next to nothing: {c}"
    );
    assert!(
        stdout.contains("hit") && stdout.contains("miss"),
        "{stdout}"
    );
    // nginx's master killed with -9 (a fault's signal): its worker lives on, holding the
    // ports; `restart authz` (a fault's restart command) stops it by the worker PID file
    // and starts nginx again, which answers.
    let master = bed.pid("SPATE_AUTHZ_NGINX_PIDFILE");
    // SAFETY: kill(2) on the bed's own nginx master, by the PID its PID file holds.
    assert_eq!(unsafe { libc::kill(master, libc::SIGKILL) }, 0);
    bed.script(&["restart", "authz"]);
    let again = bed.pid("SPATE_AUTHZ_NGINX_PIDFILE");
    assert_ne!(again, master);
    // `testbed env` exports the new master's PID, not the dead one's.
    let env = std::fs::read_to_string(bed.dir.join("env.sh")).unwrap();
    assert!(
        env.contains(&format!("SPATE_AUTHZ_NGINX_PID={again} ")),
        "{env}"
    );
    let before = bed.authz_stats();
    assert!(before["requests"].is_u64(), "nginx answers again: {before}");
    // The benchmarks' HTTPS port asks for no client certificate (wrk has none to show):
    // spate without one, a connection and a handshake per request, is answered by the
    // same worker, with no subject.
    let (code, s, stdout) = rr(
        &[
            &https_at(&bed, "SPATE_AUTHZ_TLS")[..],
            &[
                "--template",
                "subject=- action=read resource=r{seq}",
                "--per-request",
                "--expect-status",
                "200",
                "--expect",
                "(?m)^Permit subject=- key=[0-9a-f]{32}$",
                "-n",
                "20",
            ],
        ]
        .concat(),
        &tmp.path().join("https-no-cert"),
    );
    assert_eq!(code, Some(0), "{stdout}");
    let t = &s["totals"];
    assert_eq!(
        (t["accepted"].as_u64(), t["tls_connections"].as_u64()),
        (Some(20), Some(20)),
        "{t}"
    );
    let after = bed.authz_stats();
    assert_eq!(
        after["requests"].as_u64().unwrap() - before["requests"].as_u64().unwrap(),
        20,
        "{before} -> {after}"
    );
}

/// E3's cache cliff on the real service: a sweep over `--variants` 100 and 400 with the
/// keys taken in turn, the cache emptied before each step. nginx's 200-entry LRU holds 100
/// keys (each a miss once, then hits) and none of 400 in turn (every request a miss): the
/// server's own counters say so exactly, and the cliff shows in spate's latency and in
/// the worker's CPU per request that the sweep measured.
#[test]
fn nginx_cache_cliff_shows_in_a_sweep_over_variants() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = bed(tmp.path()) else {
        return;
    };
    let stats = tmp.path().join("stats.jsonl");
    let creds = format!(
        "--cacert {} --cert {} --key {}",
        bed.var("SPATE_AUTHZ_CA"),
        bed.var("SPATE_AUTHZ_CERT"),
        bed.var("SPATE_AUTHZ_KEY")
    );
    // Before each step: the counters so far (the previous step's), then an empty cache.
    let hook = format!(
        "curl -sS --fail http://{}/stats >> {s} && echo >> {s} && \
         curl -sS --fail -o /dev/null -X POST {creds} {}",
        bed.var("SPATE_AUTHZ_HTTP"),
        bed.var("SPATE_AUTHZ_RESET_URL"),
        s = stats.display(),
    );
    let worker = std::fs::read_to_string(bed.var("SPATE_AUTHZ_NGINX_WORKER_PIDFILE")).unwrap();
    let out = tmp.path().join("sweep");
    let o = Command::new(SPATE)
        .args(["sweep", "--param", "variants", "--values", "100,400"])
        .args(["--cool-down", "0s", "--before-step", &hook, "-o"])
        .arg(&out)
        .args(["--", "rr"])
        .args(https(&bed))
        .args([
            "--template",
            "subject=CN=client action=read resource=r{variant}",
            "--pick",
            "round-robin",
            "--expect-status",
            "200",
            "--rate",
            "100/s",
            "-n",
            "400",
            "--monitor-pid",
            worker.trim(),
        ])
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(0), "{text}");
    // The counters after each step: the second hook's read, then the end of the sweep.
    let mut after: Vec<Value> = std::fs::read_to_string(&stats)
        .unwrap()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .skip(1)
        .collect();
    after.push(bed.authz_stats());
    let counts: Vec<(u64, u64, u64)> = after
        .iter()
        .map(|s| {
            let n = |k: &str| s[k].as_u64().unwrap();
            (n("requests"), n("hits"), n("misses"))
        })
        .collect();
    assert_eq!(counts, [(400, 300, 100), (400, 0, 400)], "{text}");

    let sweep: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("sweep.json")).unwrap()).unwrap();
    let rows = sweep["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{sweep}");
    let f = |row: &Value, k: &str| row[k].as_f64().unwrap_or_else(|| panic!("{k}: {row}"));
    for row in rows {
        let s = common::summary(&out.join(row["dir"].as_str().unwrap()));
        assert_eq!(s["totals"]["accepted"], 400, "{row}");
    }
    // A hit is a fraction of a millisecond, a miss ~3 ms of the worker's CPU: at 100 keys
    // three requests in four are hits, at 400 none is.
    let (p50_fit, p50_miss) = (f(&rows[0], "latency_p50_ms"), f(&rows[1], "latency_p50_ms"));
    assert!(
        p50_miss >= 2.0 && p50_miss > 2.0 * p50_fit,
        "p50 {p50_fit} ms at 100 keys, {p50_miss} ms at 400: {text}"
    );
    let (cpu_fit, cpu_miss) = (
        f(&rows[0], "cpu_us_per_unit"),
        f(&rows[1], "cpu_us_per_unit"),
    );
    assert!(
        cpu_miss > 2.0 * cpu_fit,
        "the worker's CPU per request: {cpu_fit} µs at 100 keys, {cpu_miss} µs at 400"
    );
}
