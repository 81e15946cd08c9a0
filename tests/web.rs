//! The live view (`--web`) and `spate ctl`, end to end against `spate serve`: the page,
//! its event stream of the report, pause, resume, rate, users and stop as the API and
//! `spate ctl` give them, what the results say of them, and the guards (token, another
//! site's page, bad input, a rate the scheduler cannot keep).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{run_blocking, serve_process, wait_bounded, Kill, SPATE};

/// `spate smtp TARGET ARGS... --web 127.0.0.1:0 -o DIR` in the background, its output in
/// files of `dir`; the child and where its live view listens (from web.json).
fn start_run(target: &str, args: &[&str], dir: &Path, env: &[(&str, &str)]) -> (Kill, String) {
    let out = dir.join("r");
    let child = Command::new(SPATE)
        .args(["smtp", target])
        .args(args)
        .args(["--web", "127.0.0.1:0", "-o", out.to_str().unwrap()])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join("stdout")).unwrap())
        .stderr(std::fs::File::create(dir.join("stderr")).unwrap())
        .spawn()
        .unwrap();
    let mut child = Kill(child);
    let web = out.join("web.json");
    let t0 = Instant::now();
    let addr = loop {
        if let Some(a) = std::fs::read_to_string(&web)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["address"].as_str().map(str::to_string))
        {
            break a;
        }
        let ended = child.0.try_wait().unwrap();
        assert!(
            ended.is_none() && t0.elapsed() < Duration::from_secs(60),
            "no web.json: {ended:?}\n{}",
            std::fs::read_to_string(dir.join("stderr")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    (child, addr)
}

/// One HTTP request to the live view; the status code and the body.
fn http(addr: &str, method: &str, path: &str, headers: &[&str], body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n");
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    (head[9..12].parse().unwrap(), body.to_string())
}

/// `spate ctl RUN ACTION [VALUE]` with these environment variables.
fn ctl(run: &str, action: &[&str], env: &[(String, String)]) -> common::Output {
    let mut args = vec!["ctl", run];
    args.extend_from_slice(action);
    run_blocking(SPATE, &args, env, Duration::from_secs(60))
}

/// The rows of intervals.csv so far: (t_s, attempted).
fn intervals(dir: &Path) -> Vec<(f64, u64)> {
    let text = std::fs::read_to_string(dir.join("intervals.csv")).unwrap_or_default();
    text.lines()
        .skip(1)
        .filter(|l| l.ends_with(|c: char| c.is_ascii_digit()))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((f.first()?.parse().ok()?, f.get(2)?.parse().ok()?))
        })
        .collect()
}

/// Waits (at most 60 s) until intervals.csv has a row ending at or after `t_s`.
fn wait_interval(dir: &Path, t_s: f64) -> Vec<(f64, u64)> {
    let t0 = Instant::now();
    loop {
        let rows = intervals(dir);
        if rows.last().is_some_and(|r| r.0 >= t_s) {
            return rows;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no interval to {t_s}: {rows:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The run's clock when its last action was taken (the status's actions).
fn last_action_t(addr: &str) -> f64 {
    let (_, status) = http(addr, "GET", "/api/status", &[], "");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    let actions = status["actions"].as_array().unwrap();
    actions.last().unwrap()["t_s"].as_f64().unwrap()
}

/// Reads the event stream until a `report` event whose data holds `needle`.
fn report_event_with(addr: &str, needle: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET /events HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let t0 = Instant::now();
    let mut got = Vec::new();
    let mut chunk = [0u8; 65536];
    loop {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no report event with {needle}: {}",
            String::from_utf8_lossy(&got)
        );
        match s.read(&mut chunk) {
            Ok(0) => panic!("the stream ended: {}", String::from_utf8_lossy(&got)),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(_) => continue,
        }
        let text = String::from_utf8_lossy(&got);
        for ev in text.split("\n\n") {
            if ev.starts_with("event: report\n") && ev.contains(needle) {
                return text.into_owned();
            }
        }
    }
}

fn wait_exit(child: &mut Kill) -> Option<i32> {
    wait_bounded(&mut child.0, Duration::from_secs(90)).and_then(|s| s.code())
}

fn summary(dir: &Path) -> serde_json::Value {
    common::summary(dir)
}

#[test]
fn a_run_is_watched_paused_given_a_rate_and_stopped_from_its_live_view() {
    let (_server, target) = serve_process("--smtp", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().join("r");
    let (mut run, addr) = start_run(
        &target,
        &[
            "--rate",
            "40/s",
            "--duration",
            "120s",
            "--threshold",
            "p99(response) < 1h",
            "--threshold",
            "errors.rate > 50%",
        ],
        tmp.path(),
        &[],
    );

    // The page: the report's styles and a script, nothing fetched from elsewhere.
    let (code, page) = http(&addr, "GET", "/", &[], "");
    assert_eq!(code, 200);
    assert!(page.contains("<title>spate: SMTP load on") && page.contains("EventSource"));
    for external in ["src=\"http", "href=\"http", "url(http", "@import"] {
        assert!(!page.contains(external), "the page fetches {external}");
    }
    // The event stream carries the report, drawn from the run's files, running.
    let events = report_event_with(&addr, "<h2>Throughput");
    assert!(events.contains("running"), "{events}");
    assert!(events.contains("event: status\ndata: {"), "{events}");
    // The thresholds, judged on the figures so far: one holds, one fails.
    let events = report_event_with(&addr, "<h2>Thresholds");
    let report = events.rsplit("event: report\n").next().unwrap();
    assert!(
        report.contains("p99(response) &lt; 1h</code></td><td>holds"),
        "{report}"
    );
    assert!(
        report.contains("errors.rate &gt; 50%</code></td><td><span class=\"warn\">FAILS"),
        "{report}"
    );

    // Pause from the API: no unit starts in an interval that lies within the pause.
    let (code, said) = http(&addr, "POST", "/api/pause", &[], "");
    assert_eq!(code, 200, "{said}");
    let paused_at = last_action_t(&addr);
    // (A unit started before the pause may end in the next second, counted there.)
    let rows = wait_interval(&dir, paused_at.ceil() + 3.0);
    let within: Vec<_> = rows
        .iter()
        .filter(|r| r.0 - 1.0 >= paused_at + 1.0 && r.0 <= paused_at.ceil() + 3.0)
        .collect();
    assert!(!within.is_empty(), "{rows:?}");
    assert!(
        within.iter().all(|r| r.1 == 0),
        "units while paused: {rows:?} (pause at {paused_at})"
    );
    let (_, status) = http(&addr, "GET", "/api/status", &[], "");
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["paused"], true, "{status}");

    // Resume and a rate from a shell, through the results directory's web.json.
    let run_dir = dir.to_str().unwrap();
    let o = ctl(run_dir, &["resume"], &[]);
    assert!(o.ok && o.stdout.contains("resumed"), "{o:?}");
    let o = ctl(&format!("http://{addr}/"), &["rate", "100/s"], &[]);
    assert!(o.ok && o.stdout.contains("rate 100/s from now on"), "{o:?}");
    let rate_at = last_action_t(&addr);
    // Three seconds at the new rate: some 300 units, where 40/s would make 120.
    let rows = wait_interval(&dir, rate_at.ceil() + 4.0);
    let after: u64 = rows
        .iter()
        .filter(|r| r.0 - 1.0 >= rate_at + 0.5)
        .take(3)
        .map(|r| r.1)
        .sum();
    assert!(after >= 200, "{rows:?} (rate set at {rate_at})");
    // Not for this run: users (an open workload), and a bad value.
    let o = ctl(run_dir, &["users", "5"], &[]);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(
        o.stdout.contains("refused (409)") && o.stdout.contains("open workload"),
        "{o:?}"
    );
    let o = ctl(run_dir, &["rate", "fast"], &[]);
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("bad rate"), "{o:?}");

    // Stop, as SIGTERM: exit 143, everything written and counted.
    let o = ctl(run_dir, &["stop"], &[]);
    assert!(o.ok, "{o:?}");
    assert_eq!(wait_exit(&mut run), Some(143));
    let s = summary(&dir);
    common::assert_every_unit_counted(&dir, &s);
    assert_eq!(s["interrupted_by"], "control", "{s}");
    let actions: Vec<(String, String)> = s["extra"]["control"]["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["action"].as_str().unwrap().into(),
                a["by"].as_str().unwrap().into(),
            )
        })
        .collect();
    let names: Vec<&str> = actions.iter().map(|a| a.0.as_str()).collect();
    assert_eq!(names, ["pause", "resume", "rate", "stop"]);
    assert!(
        actions[0].1.ends_with("web") && actions[1].1.ends_with("spate ctl"),
        "{actions:?}"
    );
    let log = std::fs::read_to_string(dir.join("control.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 4, "{log}");
    let stdout = std::fs::read_to_string(tmp.path().join("stdout")).unwrap();
    assert!(
        stdout.contains("stopped from its live view or spate ctl"),
        "{stdout}"
    );
    assert!(stdout.contains("told while running: pause at"), "{stdout}");
    // The report marks the pause and the rate on its charts.
    let o = run_blocking(SPATE, &["report", run_dir], &[], Duration::from_secs(60));
    assert!(o.ok, "{o:?}");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains(">paused</text>") && html.contains(">rate 100/s</text>"));
}

#[test]
fn a_closed_run_is_given_fewer_sessions_and_refuses_more_than_it_started() {
    let (_server, target) = serve_process("--smtp", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let args = [
        "--users",
        "3",
        "--think",
        "50ms",
        "--duration",
        "120s",
        "--fault",
        "at=1s run=true",
    ];
    let (mut run, addr) = start_run(&target, &args, tmp.path(), &[]);
    // A fault applied during the run is on the live report before the run ends.
    let events = report_event_with(&addr, "<h2>Faults");
    assert!(events.contains("run true"), "{events}");
    let (code, said) = http(&addr, "POST", "/api/users", &[], "4");
    assert_eq!(code, 409, "{said}");
    assert!(said.contains("started 3"), "{said}");
    let (code, said) = http(&addr, "POST", "/api/rate", &[], "10/s");
    assert_eq!(code, 409, "{said}");
    let (code, said) = http(&addr, "POST", "/api/users", &[], "none");
    assert_eq!(code, 400, "{said}");
    let (code, said) = http(&addr, "POST", "/api/users", &[], "1");
    assert_eq!(code, 200, "{said}");
    let at = last_action_t(&addr);
    // One session thinking 50 ms: at most 20 units a second, where three made up to 60.
    let rows = wait_interval(&dir, at.ceil() + 3.0);
    let after: Vec<_> = rows.iter().filter(|r| r.0 - 1.0 >= at + 0.5).collect();
    assert!(
        !after.is_empty() && after.iter().all(|r| r.1 <= 21),
        "{rows:?} (users 1 at {at})"
    );
    let (code, _) = http(&addr, "POST", "/api/stop", &[], "");
    assert_eq!(code, 200);
    assert_eq!(wait_exit(&mut run), Some(143));
    common::assert_every_unit_counted(&dir, &summary(&dir));
}

/// The rows of intervals.csv so far: (t_s, attempted, dropped).
fn arrivals(dir: &Path) -> Vec<(f64, u64, u64)> {
    let text = std::fs::read_to_string(dir.join("intervals.csv")).unwrap_or_default();
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap_or_default().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let (attempted, dropped) = (col("attempted"), col("dropped"));
    lines
        .filter(|l| l.ends_with(|c: char| c.is_ascii_digit()))
        .filter_map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            Some((
                f.first()?.parse().ok()?,
                f.get(attempted)?.parse().ok()?,
                f.get(dropped)?.parse().ok()?,
            ))
        })
        .collect()
}

#[test]
fn a_rate_the_scheduler_cannot_keep_is_refused_and_a_low_one_after_a_high_one_takes_effect() {
    let (_server, target) = serve_process("--smtp", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let run_dir = dir.to_str().unwrap();
    let args = [
        "--rate",
        "20/s",
        "--duration",
        "120s",
        "--max-in-flight",
        "8",
    ];
    let (mut run, addr) = start_run(&target, &args, tmp.path(), &[]);
    // No page watches: the status's time is the run's all the same.
    wait_interval(&dir, 2.0);
    let t = status(&addr)["t_s"].as_f64().unwrap();
    assert!(t >= 2.0, "t_s {t} once intervals.csv reached 2 s");
    let o = ctl(run_dir, &["status"], &[]);
    assert!(o.ok, "{o:?}");
    let json = o.stdout.split_once(": ").unwrap().1;
    let ctl_t = serde_json::from_str::<serde_json::Value>(json).unwrap()["t_s"]
        .as_f64()
        .unwrap();
    assert!(ctl_t >= t, "ctl status t_s {ctl_t} after {t}");

    // Far above what the arrival thread can hand out: refused with the reason, untold.
    let (code, said) = http(&addr, "POST", "/api/rate", &[], "1000000000000/s");
    assert_eq!(code, 409, "{said}");
    assert!(said.contains("at most 1000000/s"), "{said}");
    let o = ctl(run_dir, &["rate", "2000000/s"], &[]);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(
        o.stdout.contains("refused (409)") && o.stdout.contains("--shard"),
        "{o:?}"
    );
    assert_eq!(status(&addr)["actions_total"], 0);

    // The most it schedules, far more than 8 sessions take: arrivals are dropped.
    let o = ctl(run_dir, &["rate", "1000000/s"], &[]);
    assert!(o.ok, "{o:?}");
    let high_at = last_action_t(&addr);
    let t0 = Instant::now();
    while !arrivals(&dir)
        .iter()
        .any(|r| r.0 - 1.0 >= high_at && r.2 > 0)
    {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "nothing dropped at 1000000/s: {:?}",
            arrivals(&dir)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Then 50/s: from the next second on, 50 arrivals a second, none dropped (at the
    // high rate a second had hundreds of thousands).
    let o = ctl(run_dir, &["rate", "50/s"], &[]);
    assert!(o.ok, "{o:?}");
    let low_at = last_action_t(&addr);
    wait_interval(&dir, low_at.ceil() + 4.0);
    let rows = arrivals(&dir);
    let after: Vec<_> = rows.iter().filter(|r| r.0 - 1.0 >= low_at + 1.0).collect();
    assert!(after.len() >= 2, "{rows:?} (50/s at {low_at})");
    for r in &after {
        assert!(
            r.2 == 0 && (30..=75).contains(&r.1),
            "{r:?} of {rows:?} (1000000/s at {high_at}, 50/s at {low_at})"
        );
    }
    let (code, _) = http(&addr, "POST", "/api/stop", &[], "");
    assert_eq!(code, 200);
    assert_eq!(wait_exit(&mut run), Some(143));
    let s = summary(&dir);
    let told: Vec<&str> = s["extra"]["control"]["actions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        told,
        ["rate", "rate", "stop"],
        "the refused ones are not kept"
    );
}

#[test]
fn with_a_token_set_reading_and_steering_need_it_and_never_come_from_another_site() {
    let (_server, target) = serve_process("--smtp", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let env = [("SPATE_WEB_TOKEN", "s3cret token+")];
    let args = ["--rate", "10/s", "--duration", "120s"];
    let (mut run, addr) = start_run(&target, &args, tmp.path(), &env);
    let dir = tmp.path().join("r");
    let run_dir = dir.to_str().unwrap();
    // The page's shell needs no token, and names no run.
    let (code, page) = http(&addr, "GET", "/", &[], "");
    assert_eq!(code, 200);
    assert!(page.contains("<title>spate: live view</title>"), "{page}");
    assert!(!page.contains(&target), "the shell names the target");
    // Everything else does: reading (the plan holds the whole command line) and steering.
    wait_interval(&dir, 1.0);
    for path in [
        "/api/status",
        "/api/plan",
        "/api/intervals?after=0",
        "/events",
    ] {
        let (code, body) = http(&addr, "GET", path, &[], "");
        assert_eq!(code, 401, "{path}: {body}");
        assert!(body.contains("needs its token"), "{path}: {body}");
        let (code, _) = http(&addr, "GET", path, &["X-Spate-Token: guess"], "");
        assert_eq!(code, 401, "{path}");
    }
    let auth = "Authorization: Bearer s3cret token+";
    for path in ["/api/status", "/api/plan", "/api/intervals?after=0"] {
        let (code, body) = http(&addr, "GET", path, &[auth], "");
        assert_eq!(code, 200, "{path}: {body}");
    }
    let (code, plan) = http(&addr, "GET", "/api/plan", &[auth], "");
    assert!(code == 200 && plan.contains("\"command\""), "{plan}");
    let (code, status) = http(&addr, "GET", "/api/status", &[auth], "");
    assert!(
        code == 200 && status.contains("spate: SMTP load on"),
        "the status has the page's title: {status}"
    );
    // The event stream, which a browser opens without headers, takes it in its query.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "GET /events?token=s3cret%20token%2B HTTP/1.1\r\nHost: {addr}\r\n\r\n"
    )
    .unwrap();
    let mut head = [0u8; 12];
    s.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&head));
    drop(s);
    // spate ctl's status needs it too.
    let o = ctl(run_dir, &["status"], &[]);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stdout.contains("refused (401)"), "{o:?}");
    let right = [("SPATE_WEB_TOKEN".to_string(), "s3cret token+".to_string())];
    let o = ctl(run_dir, &["status"], &right);
    assert!(o.ok && o.stdout.contains("\"t_s\""), "{o:?}");
    // Steering: no token, a wrong one: 401, and said on the run's stderr.
    let (code, _) = http(&addr, "POST", "/api/pause", &[], "");
    assert_eq!(code, 401);
    let wrong = [("SPATE_WEB_TOKEN".to_string(), "guess".to_string())];
    let o = ctl(run_dir, &["pause"], &wrong);
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stdout.contains("refused (401)"), "{o:?}");
    // The right token, but sent by another site's page, or to a rebound name: 403.
    let (code, _) = http(
        &addr,
        "POST",
        "/api/pause",
        &[auth, "Origin: http://evil.example"],
        "",
    );
    assert_eq!(code, 403);
    let mut s = TcpStream::connect(&addr).unwrap();
    write!(
        s,
        "GET /api/status HTTP/1.1\r\nHost: evil.example:5665\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    // Nothing was done so far; the right token stops the run.
    let (_, status) = http(&addr, "GET", "/api/status", &[auth], "");
    assert!(status.contains("\"actions\":[]"), "{status}");
    let o = ctl(run_dir, &["stop"], &right);
    assert!(o.ok, "{o:?}");
    assert_eq!(wait_exit(&mut run), Some(143));
    let stderr = std::fs::read_to_string(tmp.path().join("stderr")).unwrap();
    assert!(
        stderr.contains("no token") && stderr.contains("wrong token"),
        "{stderr}"
    );
    assert!(
        stderr.contains("sent by the page of http://evil.example"),
        "{stderr}"
    );
}

#[test]
fn a_live_view_that_cannot_be_made_is_refused_before_the_run() {
    let (_server, target) = serve_process("--smtp", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let o = |web: &str, env: &[(String, String)]| {
        let args = [
            "smtp",
            &target,
            "--count",
            "5",
            "--web",
            web,
            "-o",
            out.to_str().unwrap(),
        ];
        run_blocking(SPATE, &args, env, Duration::from_secs(60))
    };
    // Not loopback, no token.
    let r = o("0.0.0.0:0", &[]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(
        r.stderr.contains("needs a token: set SPATE_WEB_TOKEN"),
        "{r:?}"
    );
    assert_eq!(r.stderr.trim().lines().count(), 1, "{r:?}");
    // A port that is taken.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let r = o(&taken.local_addr().unwrap().to_string(), &[]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(r.stderr.contains("cannot listen there"), "{r:?}");
    // Not an address.
    let r = o("somewhere", &[]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(!out.exists(), "a run that cannot start writes nothing");
    // spate ctl: a run that is not there, an unknown action.
    let port = common::free_port();
    let r = ctl(&format!("127.0.0.1:{port}"), &["pause"], &[]);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(r.stdout.contains("no answer"), "{r:?}");
    let r = ctl(&format!("127.0.0.1:{port}"), &["faster"], &[]);
    assert_eq!(r.code, Some(2), "{r:?}");
    let r = ctl(tmp.path().to_str().unwrap(), &["pause"], &[]);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(r.stderr.contains("no web.json"), "{r:?}");
}

#[test]
fn the_shards_of_a_run_are_told_the_same_and_merge_as_one_run_stopped_by_hand() {
    let (_server, target) = serve_process("--smtp", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for i in 0..2 {
        let mut args = common::shard_args(&target, i, 2, tmp.path());
        args.extend(
            [
                "--rate",
                "20/s",
                "--duration",
                "120s",
                "--web",
                "127.0.0.1:0",
            ]
            .map(String::from),
        );
        let child = Command::new(SPATE)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(tmp.path().join(format!("stderr-{i}"))).unwrap())
            .spawn()
            .unwrap();
        runs.push(Kill(child));
    }
    let dirs: Vec<PathBuf> = (0..2)
        .map(|i| tmp.path().join(format!("shard-{i}")))
        .collect();
    let t0 = Instant::now();
    while !dirs.iter().all(|d| d.join("web.json").exists()) {
        assert!(t0.elapsed() < Duration::from_secs(60), "no web.json");
        std::thread::sleep(Duration::from_millis(20));
    }
    let both = format!("{},{}", dirs[0].display(), dirs[1].display());
    for action in ["pause", "resume"] {
        let o = ctl(&both, &[action], &[]);
        assert!(o.ok, "{o:?}");
        assert_eq!(o.stdout.lines().count(), 2, "each shard answers: {o:?}");
    }
    // Once both have run a while: stopped together, by hand.
    for d in &dirs {
        wait_interval(d, 2.0);
    }
    assert!(ctl(&both, &["stop"], &[]).ok);
    for r in &mut runs {
        assert_eq!(wait_exit(r), Some(143));
    }
    let merged = tmp.path().join("merged");
    let o = common::merge(&dirs, &merged);
    assert!(o.ok, "{o:?}");
    let s = summary(&merged);
    let told: Vec<(String, u64)> = s["extra"]["control"]["actions"]
        .as_array()
        .unwrap_or_else(|| panic!("no extra.control: {s}"))
        .iter()
        .map(|a| {
            (
                a["action"].as_str().unwrap().into(),
                a["shard"].as_u64().unwrap(),
            )
        })
        .collect();
    // Shards stopped together by hand merge as one run stopped so.
    assert_eq!(s["interrupted_by"], "control", "{s}");
    common::assert_every_unit_counted(&merged, &s);
    let mut shards: Vec<u64> = told.iter().map(|t| t.1).collect();
    shards.sort_unstable();
    assert_eq!(shards, [0, 0, 0, 1, 1, 1], "{told:?}");
    let names: Vec<&str> = told.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(
        names.iter().filter(|n| **n == "pause").count(),
        2,
        "{told:?}"
    );
    let first_resume = names.iter().position(|n| *n == "resume").unwrap();
    assert!(
        names[..first_resume].iter().all(|n| *n == "pause"),
        "in time order: {told:?}"
    );
}

/// A watched run's warnings that are the watch's own: shards missing, cut short or
/// silent, intervals lost, counts that disagree, the watch stopped (not the shards' own,
/// such as late units on a busy machine).
fn watch_warnings(s: &serde_json::Value) -> Vec<String> {
    let own = [
        "PARTIAL",
        "stopped answering",
        "the watch was stopped",
        "did not finish",
        "was interrupted",
        "were gone from its live view",
        "add up to",
    ];
    s["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .filter(|w| own.iter().any(|o| w.contains(o)))
        .map(str::to_string)
        .collect()
}

/// The shards of a run, with their live views; their results directories.
fn start_shards(target: &str, n: usize, root: &Path, extra: &[&str]) -> (Vec<Kill>, Vec<PathBuf>) {
    let mut runs = Vec::new();
    for i in 0..n {
        let mut args = common::shard_args(target, i, n, root);
        args.extend(extra.iter().map(|s| s.to_string()));
        args.extend(["--web", "127.0.0.1:0"].map(String::from));
        let child = Command::new(SPATE)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(root.join(format!("stderr-{i}"))).unwrap())
            .spawn()
            .unwrap();
        runs.push(Kill(child));
    }
    let dirs: Vec<PathBuf> = (0..n).map(|i| root.join(format!("shard-{i}"))).collect();
    let t0 = Instant::now();
    while !dirs.iter().all(|d| d.join("web.json").exists()) {
        assert!(t0.elapsed() < Duration::from_secs(60), "no web.json");
        std::thread::sleep(Duration::from_millis(20));
    }
    (runs, dirs)
}

/// Where a results directory's live view listens (its web.json).
fn address(dir: &Path) -> String {
    let t0 = Instant::now();
    loop {
        if let Some(a) = std::fs::read_to_string(dir.join("web.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["address"].as_str().map(str::to_string))
        {
            return a;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "no web.json in {dir:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn status(addr: &str) -> serde_json::Value {
    let (code, body) = http(addr, "GET", "/api/status", &[], "");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

#[test]
fn two_shards_are_watched_as_one_run_merged_exactly_and_steered_together() {
    let (_server, target) = serve_process("--smtp", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let (mut runs, dirs) = start_shards(
        &target,
        2,
        tmp.path(),
        &["--rate", "20/s", "--duration", "120s"],
    );
    // One shard of two is not the run (without --partial); nothing answering is no run.
    let alone = tmp.path().join("alone");
    let o = run_blocking(
        SPATE,
        &[
            "watch",
            dirs[0].to_str().unwrap(),
            "-o",
            alone.to_str().unwrap(),
            "--web",
            "127.0.0.1:0",
        ],
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("shard 1/2 missing"), "{o:?}");
    assert!(!alone.exists(), "nothing left behind");
    let none = tmp.path().join("none");
    let o = run_blocking(
        SPATE,
        &[
            "watch",
            "127.0.0.1:1",
            "--give-up",
            "1s",
            "-q",
            "-o",
            none.to_str().unwrap(),
            "--web",
            "127.0.0.1:0",
        ],
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(o.code, Some(1), "{o:?}");
    assert!(o.stderr.contains("no shard answered"), "{o:?}");
    assert_eq!(o.stderr.lines().count(), 1, "{o:?}");
    // A user's directory given as -o: what was there stays, the watch's web.json goes.
    let theirs = tmp.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::fs::write(theirs.join("notes.txt"), "mine").unwrap();
    let nothing = [
        "watch",
        "127.0.0.1:1",
        "--give-up",
        "1s",
        "-q",
        "--web",
        "127.0.0.1:0",
        "-o",
    ];
    let o = run_blocking(
        SPATE,
        &[&nothing[..], &[theirs.to_str().unwrap()]].concat(),
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(o.code, Some(1), "{o:?}");
    let left: Vec<_> = std::fs::read_dir(&theirs)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["notes.txt"], "only what was there");
    assert_eq!(
        std::fs::read_to_string(theirs.join("notes.txt")).unwrap(),
        "mine"
    );
    // One that holds a web.json (a shard's, say) is refused, and the file left as it was.
    std::fs::write(theirs.join("web.json"), "{\"address\": \"127.0.0.1:9\"}").unwrap();
    let o = run_blocking(
        SPATE,
        &[&nothing[..], &[theirs.to_str().unwrap()]].concat(),
        &[],
        Duration::from_secs(60),
    );
    assert_eq!(o.code, Some(2), "{o:?}");
    assert!(o.stderr.contains("web.json"), "{o:?}");
    assert_eq!(
        std::fs::read_to_string(theirs.join("web.json")).unwrap(),
        "{\"address\": \"127.0.0.1:9\"}"
    );

    let watched = tmp.path().join("watched");
    let watch = Command::new(SPATE)
        .args([
            "watch",
            dirs[0].to_str().unwrap(),
            dirs[1].to_str().unwrap(),
        ])
        .args(["-o", watched.to_str().unwrap(), "--web", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(tmp.path().join("watch.out")).unwrap())
        .stderr(std::fs::File::create(tmp.path().join("watch.err")).unwrap())
        .spawn()
        .unwrap();
    let mut watch = Kill(watch);
    // A second watch, stopped by Ctrl-C while the shards go on.
    let early = tmp.path().join("early");
    let mut early_watch = Kill(
        Command::new(SPATE)
            .args([
                "watch",
                dirs[0].to_str().unwrap(),
                dirs[1].to_str().unwrap(),
                "-q",
            ])
            .args(["-o", early.to_str().unwrap(), "--web", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(tmp.path().join("early.err")).unwrap())
            .spawn()
            .unwrap(),
    );
    let at = address(&watched);
    // The merged run grows while the shards run: both shards' units in its seconds.
    let rows = wait_interval(&watched, 3.0);
    assert!(rows.iter().map(|r| r.1).sum::<u64>() > 0, "{rows:?}");
    wait_interval(&early, 2.0);
    unsafe { libc::kill(early_watch.0.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(wait_exit(&mut early_watch), Some(130));
    let e = summary(&early);
    assert_eq!(
        (&e["complete"], &e["interrupted_by"]),
        (&true.into(), &"SIGINT".into()),
        "{e}"
    );
    common::assert_every_unit_counted(&early, &e);
    // The watch's own warnings: that it was stopped, and nothing of the shards cut short,
    // intervals lost or counts that disagree (the shards' own, such as late units on a
    // busy machine, are theirs).
    let own = watch_warnings(&e);
    assert_eq!(own.len(), 1, "only that the watch was stopped: {e}");
    assert!(own[0].starts_with("the watch was stopped (SIGINT)"), "{e}");
    let live = status(&at);
    assert_eq!(live["shards"], 2, "{live}");
    // Its page is the merged run's report, live.
    let events = report_event_with(&at, "<h2>Throughput");
    assert!(events.contains("running"), "{events}");
    assert_eq!(live["ended"], false, "{live}");

    // A pause on the watch is told to both shards.
    let (code, body) = http(&at, "POST", "/api/pause", &[], "");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("told 2 shards"), "{body}");
    for d in &dirs {
        assert_eq!(status(&address(d))["paused"], true);
    }
    let o = ctl(&at, &["resume"], &[]);
    assert!(o.ok, "{o:?}");
    for d in &dirs {
        assert_eq!(status(&address(d))["paused"], false);
    }
    // Refused by the shards (an open workload has no users): refused by the watch.
    let (code, body) = http(&at, "POST", "/api/users", &[], "3");
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("refused"), "{body}");

    wait_interval(&watched, 5.0);
    let (code, body) = http(&at, "POST", "/api/stop", &[], "");
    assert_eq!(code, 200, "{body}");
    for r in &mut runs {
        assert_eq!(wait_exit(r), Some(143));
    }
    let out = |name: &str| std::fs::read_to_string(tmp.path().join(name)).unwrap_or_default();
    assert_eq!(
        wait_exit(&mut watch),
        Some(0),
        "{}\n{}",
        out("watch.out"),
        out("watch.err")
    );
    assert!(
        out("watch.out").contains("merged 2 shards"),
        "{}",
        out("watch.out")
    );
    assert!(watched.join("report.html").exists());

    // What the watch merged as they ran is what spate merge makes of them after.
    let merged = tmp.path().join("merged");
    let o = common::merge(&dirs, &merged);
    assert!(o.ok, "{o:?}");
    let (w, m) = (summary(&watched), summary(&merged));
    assert_eq!(w["complete"], true, "{w}");
    assert_eq!(w["interrupted_by"], "control", "{w}");
    assert_eq!(w["totals"], m["totals"], "watched {w}\nmerged {m}");
    assert!(w["totals"]["attempted"].as_u64().unwrap() > 0);
    common::assert_every_unit_counted(&watched, &w);
    let phases = |s: &serde_json::Value| -> Vec<(String, u64, u64, u64, u64)> {
        s["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let n = |k: &str| p[k].as_u64().unwrap();
                (
                    p["phase"].as_str().unwrap().into(),
                    n("count"),
                    n("p50_us"),
                    n("p99_us"),
                    n("max_us"),
                )
            })
            .collect()
    };
    assert!(!phases(&w).is_empty());
    assert_eq!(
        phases(&w),
        phases(&m),
        "exact percentiles, as after the run"
    );
    let attempted = |dir: &Path| intervals(dir).iter().map(|r| r.1).sum::<u64>();
    assert_eq!(
        attempted(&watched),
        attempted(&merged),
        "every second of both shards"
    );
    // What both shards were told, through the watch: pause, resume, stop each.
    let told = w["extra"]["control"]["actions"].as_array().unwrap();
    assert_eq!(told.len(), 6, "{told:?}");
    assert!(told
        .iter()
        .all(|a| a["by"].as_str().unwrap().ends_with("spate watch")));
    assert!(watch_warnings(&w).is_empty(), "{w}");
}

#[test]
fn a_pause_before_the_schedule_begins_holds_it_from_its_start() {
    let (_server, target) = serve_process("--smtp", &[]);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("r");
    let args = ["--rate", "20/s", "--duration", "120s", "--start-at", "+3s"];
    let (mut run, addr) = start_run(&target, &args, tmp.path(), &[]);
    // Told while the run waits for its start.
    let (code, said) = http(&addr, "POST", "/api/pause", &[], "");
    assert_eq!(code, 200, "{said}");
    let rows = wait_interval(&dir, 3.0);
    assert!(
        rows.iter().all(|r| r.1 == 0),
        "units while paused: {rows:?}"
    );
    let (code, _) = http(&addr, "POST", "/api/stop", &[], "");
    assert_eq!(code, 200);
    assert_eq!(wait_exit(&mut run), Some(143));
    let s = summary(&dir);
    assert_eq!(s["totals"]["attempted"], 0, "{s}");
}
