//! `spate run`: validation errors, thresholds, hooks, drain waits, parallel workloads,
//! background hooks and `--dump-scenario`, through the real binary and the embedded server.

mod common;

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Runs the spate binary (killed after two minutes: a hang is a failure, not a stuck CI).
fn spate(args: &[&str], cwd: &Path) -> Out {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_spate"))
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn spate");
    let mut so = child.stdout.take().unwrap();
    let mut se = child.stderr.take().unwrap();
    let t1 = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let t2 = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("spate {args:?} did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Out {
        code: status.code().unwrap_or(-1),
        stdout: t1.join().unwrap(),
        stderr: t2.join().unwrap(),
        took: start.elapsed(),
    }
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// Expects exit 2 and exactly one error line.
fn invalid(text: &str) -> String {
    let d = tempfile::tempdir().unwrap();
    write(d.path(), "s.toml", text);
    let o = spate(&["run", "s.toml", "--out", "res"], d.path());
    assert_eq!(o.code, 2, "stdout {} stderr {}", o.stdout, o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    assert!(!d.path().join("res").exists(), "nothing may run");
    o.stderr.trim_end().to_string()
}

const SERVER: &str = "[server]\nsmtp = \"127.0.0.1:0\"\n";

#[test]
fn validation_errors_point_at_the_key_with_suggestions() {
    let e = invalid(&format!(
        "{SERVER}\n[[step]]\nname = \"inject\"\ncommand = \"smtp\"\ntarget = \"${{server.smtp}}\"\n    usres = 5\n"
    ));
    assert_eq!(
        e,
        "spate: s.toml:8:5: [[step]] \"inject\" \"usres\": unknown option of smtp; did you mean \"users\"?"
    );
    // A value clap refuses is reported at the value.
    let e = invalid(&format!(
        "{SERVER}[[step]]\ncommand = \"smtp\"\ntarget = \"x\"\nusers = \"many\"\n"
    ));
    assert!(
        e.starts_with("spate: s.toml:6:9: [[step]] \"step1\": invalid value 'many' for '--users"),
        "{e}"
    );
    let e = invalid("[[step]]\ncommand = \"smtp\"\ntarget = \"x\"\nstarttls = \"yes\"\n");
    assert_eq!(
        e,
        "spate: s.toml:4:12: [[step]] \"step1\" \"starttls\": expected true or false, found a string"
    );
    let e = invalid("[[step]]\ncommand = \"smpt\"\n");
    assert_eq!(
        e,
        "spate: s.toml:2:11: [[step]] \"step1\": no command \"smpt\"; did you mean \"smtp\"?"
    );
    let e = invalid("[servr]\nsmtp = \"127.0.0.1:0\"\n[[step]]\nwait = \"1s\"\n");
    assert_eq!(
        e,
        "spate: s.toml:1:2: unknown section or key \"servr\"; did you mean \"server\"?"
    );
    let e = invalid("[[step]]\nrun = \"true\"\ntimout = \"1s\"\n");
    assert_eq!(
        e,
        "spate: s.toml:3:1: [[step]] \"step1\" \"timout\": unknown key; did you mean \"timeout\"?"
    );
    let e = invalid("[targets.mx]\ntarget = \"x\"\nstartls = true\n[[step]]\ncommand = \"smtp\"\nuse = \"mx\"\n");
    assert_eq!(e, "spate: s.toml:3:1: [[step]] \"step1\" \"startls\": unknown option of smtp; did you mean \"starttls\"?");
    let e = invalid("[[step]]\ncommand = \"smtp\"\nuse = \"mxx\"\ntarget = \"x\"\n[targets.mx]\ntarget = \"y\"\n");
    assert!(
        e.starts_with("spate: s.toml:3:7: ") && e.ends_with("did you mean \"mx\"?"),
        "{e}"
    );
    let e = invalid(
        "[[step]]\ncommand = \"smtp\"\ntarget = \"x\"\nthresholds = [\"p99(transacton) < 5ms\"]\n",
    );
    assert!(
        e.starts_with("spate: s.toml:4:15: threshold")
            && e.ends_with("did you mean \"transaction\"?"),
        "{e}"
    );
    let e = invalid("thresholds = [\"injct.errors.rate < 1%\"]\n[[step]]\nname = \"inject\"\ncommand = \"smtp\"\ntarget = \"x\"\n");
    assert!(
        e.contains("s.toml:1:15:") && e.ends_with("did you mean \"inject\"?"),
        "{e}"
    );
    let e = invalid("[[step]]\ncommand = \"smtp\"\ntarget = \"${nope}\"\n");
    assert!(
        e.starts_with("spate: s.toml:3:10: ${nope}: no such variable"),
        "{e}"
    );
    let e = invalid("[[step]]\ncommand = \"smtp\"\ntarget = \"${server.smtp}\"\n");
    assert!(e.contains("needs a [server] section"), "{e}");
    let e = invalid("[[step]]\ncommand = \"smtp\"\ntarget = \"x\"\nusers = 5\nusers = 6\n");
    assert!(e.starts_with("spate: s.toml:5:1: invalid TOML"), "{e}");
    let e = invalid("[[step]]\ncommand = \"smtp\"\n");
    assert!(e.contains("s.toml:2:11:") && e.contains("TARGET"), "{e}");
}

/// One short real run: a passing and a failing threshold, exit 1, scenario.json.
#[test]
fn thresholds_pass_and_fail_against_a_real_run() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "s.toml",
        &format!(
            "thresholds = [\"inject.totals.accepted == 50\"]\n{SERVER}\n[[step]]\nname = \"inject\"\ncommand = \"smtp\"\ntarget = \"${{server.smtp}}\"\nusers = 2\ncount = 50\nquiet = true\nthresholds = [\"errors.rate < 0.1%\", \"messages_per_s > 1\", \"p99(smtp.transaction) < 1us\", \"count(transaction) == 50\"]\n"
        ),
    );
    let o = spate(&["run", "s.toml", "--out", "res"], d.path());
    assert_eq!(o.code, 99, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.stderr
            .contains("threshold failed: p99(smtp.transaction) = "),
        "{}",
        o.stderr
    );
    assert!(o.stderr.contains(", limit < 1us"), "{}", o.stderr);
    assert!(
        o.stdout
            .contains("threshold ok: errors.rate = 0%, limit < 0.1%"),
        "{}",
        o.stdout
    );
    assert!(
        o.stdout
            .contains("threshold ok: inject.totals.accepted = 50, limit == 50"),
        "{}",
        o.stdout
    );
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("res/scenario.json")).unwrap())
            .unwrap();
    assert_eq!(j["exit"], 99);
    let th = j["steps"][0]["thresholds"].as_array().unwrap();
    let passed: Vec<bool> = th.iter().map(|t| t["pass"].as_bool().unwrap()).collect();
    assert_eq!(passed, [true, true, false, true]);
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(d.path().join("res/01-inject/summary.json")).unwrap(),
    )
    .unwrap();
    // The step's own command line is recorded, not `spate run`'s.
    assert_eq!(summary["command"], j["steps"][0]["argv"]);
    assert_eq!(summary["command"][1], "smtp");
    assert!(d.path().join("res/scenario.toml").is_file());
    // The scenario's own page says at the top that thresholds broke, and which.
    let page = std::fs::read_to_string(d.path().join("res/report.html")).unwrap();
    assert!(
        page.contains("THRESHOLDS FAILED (exit 99): every step ran, 0 of 1 scenario threshold(s) and 1 step threshold(s) broke"),
        "{page}"
    );
    assert!(
        page.contains("<td>p99(smtp.transaction) &lt; 1us</td>") && page.contains("BROKE: "),
        "{page}"
    );
    assert!(
        page.contains("<a href=\"01-inject/report.html\">"),
        "{page}"
    );
    assert!(d.path().join("res/01-inject/report.html").is_file());

    // The same run with only thresholds that hold exits 0.
    let text = std::fs::read_to_string(d.path().join("s.toml"))
        .unwrap()
        .replace("< 1us", "< 10s");
    write(d.path(), "s.toml", &text);
    let o = spate(&["run", "s.toml", "--out", "res2"], d.path());
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let page = std::fs::read_to_string(d.path().join("res2/report.html")).unwrap();
    assert!(
        page.contains("PASSED: every step ran, 1 scenario threshold(s) held"),
        "{page}"
    );
    // `spate report` renders it again from the directory.
    std::fs::remove_file(d.path().join("res/report.html")).unwrap();
    let o = spate(&["report", "res"], d.path());
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let page = std::fs::read_to_string(d.path().join("res/report.html")).unwrap();
    assert!(page.contains("THRESHOLDS FAILED (exit 99)"), "{page}");
}

#[test]
fn parallel_workloads_run_at_once_with_the_rate_split_by_weight() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "s.toml",
        &format!(
            "{SERVER}\n[defaults.smtp]\nquiet = true\n[targets.mx]\ntarget = \"${{server.smtp}}\"\n\n[[step]]\nname = \"mixed\"\nuse = \"mx\"\nrate = \"50/s\"\nduration = \"2s\"\n  [[step.workload]]\n  name = \"big\"\n  command = \"smtp\"\n  weight = 4\n  size = \"8k\"\n  thresholds = [\"totals.accepted >= 50\"]\n  [[step.workload]]\n  name = \"small\"\n  command = \"smtp\"\n  weight = 1\n  thresholds = [\"totals.accepted >= 10\"]\n"
        ),
    );
    let o = spate(&["run", "s.toml", "--out", "res"], d.path());
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("res/scenario.json")).unwrap())
            .unwrap();
    let ws = j["steps"][0]["workloads"].as_array().unwrap();
    let argv = |i: usize| {
        ws[i]["argv"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        argv(0).contains("--rate 40/s") && argv(0).contains("--size 8k"),
        "{}",
        argv(0)
    );
    assert!(
        argv(1).contains("--rate 10/s") && !argv(1).contains("--size"),
        "{}",
        argv(1)
    );
    // Both ran at the same time: their measured intervals overlap.
    let span = |name: &str| {
        let s: Value = serde_json::from_str(
            &std::fs::read_to_string(
                d.path()
                    .join("res/01-mixed")
                    .join(name)
                    .join("summary.json"),
            )
            .unwrap(),
        )
        .unwrap();
        let t = |k: &str| chrono::DateTime::parse_from_rfc3339(s[k].as_str().unwrap()).unwrap();
        // The embedded server's threads are not the generator's; the process is shared.
        assert_eq!(
            s["generator_cpu_basis"],
            "process less the embedded server's threads, shared with workloads running in parallel"
        );
        (
            t("started_at"),
            t("ended_at"),
            s["totals"]["accepted"].as_u64().unwrap(),
        )
    };
    let (s1, e1, n1) = span("big");
    let (s2, e2, n2) = span("small");
    assert!(
        s1.max(s2) < e1.min(e2),
        "not concurrent: {s1}..{e1} vs {s2}..{e2}"
    );
    assert!(n1 > n2 * 2, "weights: {n1} vs {n2}");
    // Sequential would take 4 s or more.
    assert!(o.took < Duration::from_secs(30));
}

#[test]
fn hooks_run_in_order_and_a_failing_hook_stops_the_scenario() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "s.toml",
        "[vars]\nword = \"hello\"\n\n[[step]]\nname = \"one\"\nrun = \"echo ${word} > \\\"$SPATE_STEP_OUT/said\\\" && echo $SPATE_OUT > ${out}/where\"\n\n[[step]]\nname = \"check\"\nrun = \"grep -q bonjour ${step.one}/said && echo '{\\\"n\\\": 3}' > $SPATE_STEP_OUT/probe.json\"\nthresholds = [\"probe.n == 3\"]\n\n[[step]]\nname = \"two\"\nrun = \"exit 3\"\n\n[[step]]\nname = \"three\"\nrun = \"touch ${out}/never\"\n",
    );
    let o = spate(
        &["run", "s.toml", "--out", "res", "--set", "word=bonjour"],
        d.path(),
    );
    assert_eq!(o.code, 1, "{}\n{}", o.stdout, o.stderr);
    let res = d.path().join("res");
    assert_eq!(
        std::fs::read_to_string(res.join("01-one/said")).unwrap(),
        "bonjour\n"
    );
    assert_eq!(
        std::fs::read_to_string(res.join("where")).unwrap().trim(),
        "res"
    );
    assert!(!res.join("never").exists());
    assert!(
        o.stderr
            .contains("step \"two\" failed: hook exit status: 3"),
        "{}",
        o.stderr
    );
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(res.join("scenario.json")).unwrap()).unwrap();
    let status: Vec<&str> = j["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(status, ["ok", "ok", "failed", "skipped"]);
    let page = std::fs::read_to_string(res.join("report.html")).unwrap();
    assert!(
        page.contains("FAILED (exit 1): step two did not succeed"),
        "{page}"
    );
    // A hook's own JSON files are metrics too.
    assert_eq!(
        j["steps"][1]["thresholds"][0]["pass"], true,
        "{}",
        j["steps"][1]
    );
    // An unknown --set name is a usage error.
    let o = spate(&["run", "s.toml", "--set", "wrod=x"], d.path());
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("did you mean \"word\"?"), "{}", o.stderr);
}

#[test]
fn hook_timeout_and_background_hooks_are_stopped() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "s.toml",
        "[[step]]\nname = \"bg\"\nrun = \"echo $$ > ${out}/bg.pid; exec sleep 60\"\nbackground = true\n\n[[step]]\nname = \"pause\"\nwait = \"300ms\"\n",
    );
    let o = spate(&["run", "s.toml", "--out", "res"], d.path());
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(
        o.took < Duration::from_secs(20),
        "background hook not stopped: {:?}",
        o.took
    );
    let pid: i32 = std::fs::read_to_string(d.path().join("res/bg.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: signal 0 only checks whether the process exists.
    assert!(
        unsafe { libc::kill(pid, 0) } != 0,
        "background hook {pid} still running"
    );
    write(
        d.path(),
        "t.toml",
        "[[step]]\nrun = \"sleep 30\"\ntimeout = \"300ms\"\n",
    );
    let o = spate(&["run", "t.toml", "--out", "res2"], d.path());
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("hook stopped after"), "{}", o.stderr);
    assert!(o.took < Duration::from_secs(20));
}

#[test]
fn drain_wait_measures_how_long_a_queue_takes_to_empty() {
    let d = tempfile::tempdir().unwrap();
    let q = d.path().join("queue");
    for sub in ["incoming", "active", "deferred/A", "hold"] {
        std::fs::create_dir_all(q.join(sub)).unwrap();
    }
    for f in ["incoming/1", "active/2", "deferred/A/3"] {
        std::fs::write(q.join(f), "x").unwrap();
    }
    std::fs::write(q.join("hold/held"), "x").unwrap(); // held mail never drains: not counted
    let q2 = q.clone();
    let emptier = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        std::fs::remove_file(q2.join("incoming/1")).unwrap();
        std::thread::sleep(Duration::from_millis(500));
        std::fs::remove_file(q2.join("active/2")).unwrap();
        std::fs::remove_file(q2.join("deferred/A/3")).unwrap();
    });
    write(
        d.path(),
        "s.toml",
        "[vars]\nqueue = \"${env:NO_SUCH_VAR_SPATE:-queue}\"\n[[step]]\nname = \"drain\"\nuntil_empty = \"${dir}/${queue}\"\npoll = \"50ms\"\ntimeout = \"20s\"\nthresholds = [\"wait.drain_s < 10s\", \"wait.initial_files == 3\"]\n",
    );
    let o = spate(&["run", "s.toml", "--out", "res"], d.path());
    emptier.join().unwrap();
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let w: Value = serde_json::from_str(
        &std::fs::read_to_string(d.path().join("res/01-drain/wait.json")).unwrap(),
    )
    .unwrap();
    let drain = w["drain_s"].as_f64().unwrap();
    // spate saw all 3 files (a threshold), so it waited at least from the first removal
    // to the last.
    assert!((0.45..10.0).contains(&drain), "{drain}");
    assert_eq!(w["peak_files"], 3);
    // A queue that never empties fails the step when its timeout passes.
    write(
        d.path(),
        "t.toml",
        "[[step]]\nuntil_empty = \"queue\"\ntimeout = \"300ms\"\npoll = \"50ms\"\n",
    );
    std::fs::write(q.join("maildrop.keep"), "x").unwrap();
    std::fs::create_dir_all(q.join("maildrop")).unwrap();
    std::fs::write(q.join("maildrop/m"), "x").unwrap();
    let o = spate(&["run", "t.toml", "--out", "res2"], d.path());
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("still holds 1 files"), "{}", o.stderr);
}

fn os(v: &[&str]) -> Vec<OsString> {
    v.iter().map(OsString::from).collect()
}

/// dump → load reproduces a command line that dumps to the same scenario again.
#[test]
fn dump_scenario_round_trips() {
    let lines: [&[&str]; 5] = [
        &[
            "spate",
            "smtp",
            "127.0.0.1:2525",
            "--users",
            "5",
            "-n",
            "100",
        ],
        &[
            "spate",
            "smtp",
            "mx.test:25",
            "--rate",
            "5000/min",
            "--duration",
            "10m",
            "--size",
            "0..10k",
            "--starttls",
            "--to",
            "user{0..9}@example.test",
        ],
        &[
            "spate",
            "smtp",
            "--lmtp",
            "127.0.0.1:2424",
            "--bind",
            "127.0.0.2,127.0.0.3",
            "--helo",
            "a \"quoted\" name",
            "--seed",
            "007",
        ],
        &["spate", "ping", "127.0.0.1:2525"],
        &["spate", "smtp", "127.0.0.1:2525", "--rate=-1/s"],
    ];
    for argv in lines {
        let dumped = spate::scenario::dump::render(&spate::cli::commands(), &os(argv)).unwrap();
        let sc = spate::scenario::load(
            spate::scenario::doc::Source {
                name: "d.toml".into(),
                text: dumped.clone(),
            },
            &[],
            &spate::cli::commands(),
        )
        .unwrap_or_else(|e| panic!("{argv:?}: {e}\n{dumped}"));
        let spate::scenario::spec::StepKind::Command(inv) = &sc.steps[0].kind else {
            panic!()
        };
        let again = inv.argv(None);
        let redumped = spate::scenario::dump::render(
            &spate::cli::commands(),
            &again.iter().map(OsString::from).collect::<Vec<_>>(),
        )
        .unwrap();
        let body = |t: &str| {
            t.lines()
                .filter(|l| !l.starts_with('#'))
                .collect::<Vec<_>>()
                .join("\n")
        };
        assert_eq!(body(&dumped), body(&redumped), "{argv:?} -> {again:?}");
    }
    // The simple case reproduces the very same words.
    let dumped = spate::scenario::dump::render(
        &spate::cli::commands(),
        &os(&["spate", "smtp", "--users", "5", "127.0.0.1:2525"]),
    )
    .unwrap();
    assert!(dumped.contains("[[step]]\nname = \"smtp\"\ncommand = \"smtp\"\ntarget = \"127.0.0.1:2525\"\nusers = 5\n"), "{dumped}");

    // Through the binary: --dump-scenario anywhere on the line, then run --dry-run.
    let d = tempfile::tempdir().unwrap();
    let o = spate(
        &[
            "smtp",
            "127.0.0.1:2525",
            "--dump-scenario",
            "--users",
            "3",
            "--starttls",
        ],
        d.path(),
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    write(d.path(), "s.toml", &o.stdout);
    let o = spate(&["run", "s.toml", "--dry-run", "--out", "R"], d.path());
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(
        o.stdout
            .contains("01-smtp: spate smtp --users 3 --starttls 127.0.0.1:2525 --out R/01-smtp"),
        "{}",
        o.stdout
    );
    assert!(!d.path().join("R").exists());
    // A bad command line stays a usage error.
    let o = spate(&["smtp", "--dump-scenario", "--users", "x", "h"], d.path());
    assert_eq!(o.code, 2);
    assert!(o.stderr.contains("invalid value 'x'"), "{}", o.stderr);
}

#[test]
fn the_example_scenarios_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    // E5 monitors the XMPP server's PID and E3 the nginx worker's and master's, which
    // only a test bed that is up can give: any value does for a dry run.
    std::env::set_var("SPATE_XMPP_PID", "1");
    std::env::set_var("SPATE_AUTHZ_NGINX_WORKER_PID", "1");
    std::env::set_var("SPATE_AUTHZ_NGINX_PID", "1");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let o = spate(&["run", p.to_str().unwrap(), "--dry-run"], &dir);
            assert_eq!(o.code, 0, "{}: {}", p.display(), o.stderr);
            n += 1;
        }
    }
    assert!(n >= 2, "expected example scenarios in {}", dir.display());
}

/// The first example really runs end to end (thresholds on latency may fail on a loaded
/// machine, so only the steps' success and the recorded verdicts are required).
#[test]
fn the_injection_example_runs() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("res");
    let file = dir.join("inject-embedded.toml");
    let o = spate(
        &[
            "run",
            file.to_str().unwrap(),
            "--set",
            "count=300",
            "--out",
            out.to_str().unwrap(),
        ],
        d.path(),
    );
    assert!(o.code == 0 || o.code == 1, "{}\n{}", o.stdout, o.stderr);
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("scenario.json")).unwrap()).unwrap();
    let steps = j["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 4);
    for s in steps {
        assert_eq!(s["status"], "ok", "{s}");
    }
    assert_eq!(steps[3]["workloads"].as_array().unwrap().len(), 2);
    let accepted = &j["thresholds"][0];
    assert_eq!(accepted["threshold"], "inject.totals.accepted == 300");
    assert_eq!(accepted["pass"], true, "{accepted}");
    assert!(out.join("auth.txt").is_file());
}

/// SIGTERM during a wait ends the scenario early: the rest is skipped, exit 143, and
/// scenario.json is still written.
#[test]
fn sigterm_stops_the_scenario_and_skips_the_rest() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "s.toml",
        "[[step]]\nname = \"long\"\nwait = \"60s\"\n\n[[step]]\nname = \"after\"\nrun = \"touch ${out}/ran\"\n",
    );
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_spate"))
        .args(["run", "s.toml", "--out", "res"])
        .current_dir(d.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait until the wait step has started (its directory exists), then signal.
    while !d.path().join("res/01-long").exists() && start.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: signalling the child we started.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("spate run ignored SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(143));
    assert!(!d.path().join("res/ran").exists());
    let j: Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("res/scenario.json")).unwrap())
            .unwrap();
    assert_eq!(j["steps"][1]["status"], "skipped");
}

/// [matrix]: the whole scenario once per combination; --set pins a matrix variable.
#[test]
fn matrix_runs_every_combination() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "s.toml",
        "[matrix]\nprocs = [1, 2]\nsize = [\"1k\", \"10k\"]\n\n[[step]]\nname = \"h\"\nrun = \"echo ${procs} ${size} > ${out}/seen; test ${procs} != 2 -o ${size} != 10k\"\n",
    );
    let o = spate(&["run", "s.toml", "--out", "res"], d.path());
    assert_eq!(
        o.code, 1,
        "procs=2,size=10k fails: {}\n{}",
        o.stdout, o.stderr
    );
    let res = d.path().join("res");
    for (dir, seen) in [
        ("procs=1,size=1k", "1 1k"),
        ("procs=2,size=10k", "2 10k"),
        ("procs=1,size=10k", "1 10k"),
    ] {
        assert_eq!(
            std::fs::read_to_string(res.join(dir).join("seen"))
                .unwrap()
                .trim(),
            seen
        );
    }
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(res.join("matrix.json")).unwrap()).unwrap();
    let exits: Vec<u64> = m["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["exit"].as_u64().unwrap())
        .collect();
    assert_eq!(exits, [0, 0, 0, 1]);
    let o = spate(
        &["run", "s.toml", "--out", "pinned", "--set", "procs=1"],
        d.path(),
    );
    assert_eq!(o.code, 0, "{}", o.stderr);
    assert!(d.path().join("pinned/size=10k/seen").is_file());
    let o = spate(&["run", "s.toml", "--dry-run"], d.path());
    assert_eq!(o.code, 0);
    assert_eq!(o.stdout.matches("== procs=").count(), 4, "{}", o.stdout);
}

/// A matrix over one numeric variable has a page of its own (report.html beside
/// matrix.json, and `spate report DIR` makes it again): the runs' table and each report
/// column against the variable, with its slope and what it can be said to be — here the
/// accepted count is set by the run (exact, no scatter).
#[test]
fn a_numeric_matrix_has_a_page_with_each_column_against_its_variable() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "s.toml",
        &format!(
            "report = [\"accepted = inject.totals.accepted\", \"mean [us] = inject.phases.transaction.mean_us\"]\n{SERVER}\n[matrix]\nn = [1, 2, 3, 4]\n\n[[step]]\nname = \"inject\"\ncommand = \"smtp\"\ntarget = \"${{server.smtp}}\"\ncount = \"${{n}}0\"\nquiet = true\n"
        ),
    );
    let o = spate(&["run", "s.toml", "--out", "res"], d.path());
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let res = d.path().join("res");
    let m: Value =
        serde_json::from_str(&std::fs::read_to_string(res.join("matrix.json")).unwrap()).unwrap();
    assert_eq!(m["slopes"]["columns"]["accepted"], 10.0, "{m}");
    assert_eq!(m["slopes"]["judged"]["accepted"], "exact", "{m}");
    assert!(
        o.stdout.contains("set by the run, not a measurement"),
        "{}",
        o.stdout
    );
    let page = std::fs::read_to_string(res.join("report.html")).unwrap();
    assert!(page.contains("<h2>Against n</h2>"), "no chart section");
    assert!(page.matches("<svg").count() >= 2, "a chart per column");
    std::fs::remove_file(res.join("report.html")).unwrap();
    let o = spate(&["report", "res"], d.path());
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    assert!(res.join("report.html").is_file());
}

/// `shards = 3`: the step runs as three shards of one run, merged into the step's
/// directory, and its thresholds read the merged run; only a load command is sharded.
#[test]
fn a_step_of_three_shards_is_merged_and_judged_as_one_run() {
    let d = tempfile::tempdir().unwrap();
    write(
        d.path(),
        "s.toml",
        &format!(
            "{SERVER}\n[[step]]\nname = \"inject\"\ncommand = \"smtp\"\ntarget = \"${{server.smtp}}\"\nshards = 3\nusers = 6\ncount = 90\nquiet = true\nthresholds = [\"totals.accepted == 90\", \"count(transaction) == 90\"]\n"
        ),
    );
    let o = spate(&["run", "s.toml", "--out", "res"], d.path());
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let merged = d.path().join("res/01-inject");
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(merged.join("summary.json")).unwrap())
            .unwrap();
    let shards = s["extra"]["shards"].as_array().unwrap();
    assert_eq!(shards.len(), 3);
    for (i, sh) in shards.iter().enumerate() {
        assert_eq!(sh["totals"]["accepted"], 30, "shard {i}: {sh}");
        let dir = d.path().join(format!("res/01-inject.shards/{i}"));
        assert!(dir.join("summary.json").is_file(), "{}", dir.display());
    }
    assert!(merged.join("report.html").is_file());

    let e = invalid("[[step]]\ncommand = \"ping\"\ntarget = \"smtp://x\"\nshards = 2\n");
    assert!(e.contains("shards: only a load command"), "{e}");
    let e = invalid("[[step]]\ncommand = \"smtp\"\ntarget = \"x\"\nshards = 0\n");
    assert!(
        e.contains("shards: expected a number of shards, 1 to 64"),
        "{e}"
    );
}

/// `[[fault]]` tables are checked like `--fault` before anything runs, and say which step
/// they belong to when that is not clear.
#[test]
fn fault_tables_are_checked_before_the_run() {
    let load = "[[step]]\nname = \"a\"\ncommand = \"smtp\"\ntarget = \"127.0.0.1:9\"\ncount = 1\n";
    let e = invalid(&format!("{load}[[fault]]\nat = \"1s\"\nsignl = \"KILL\"\n"));
    assert!(e.contains("s.toml:") && e.contains("signl"), "{e}");
    let two = format!("{load}{}", load.replace("\"a\"", "\"b\""));
    let e = invalid(&format!("{two}[[fault]]\nat = \"1s\"\nnet = \"refuse\"\n"));
    assert!(
        e.contains("say which step it happens in, step = \"NAME\" (2 steps"),
        "{e}"
    );
    let e = invalid(&format!(
        "{two}[[fault]]\nstep = \"c\"\nat = \"1s\"\nnet = \"refuse\"\n"
    ));
    assert!(e.contains("no step is named \"c\""), "{e}");
    let hook = "[[step]]\nname = \"h\"\nrun = \"true\"\n";
    let e = invalid(&format!(
        "{load}{hook}[[fault]]\nstep = \"h\"\nat = \"1s\"\nnet = \"refuse\"\n"
    ));
    assert!(e.contains("does not run a load command"), "{e}");
}

/// scenarios/network.toml, shortened: the three network faults through the proxy against
/// the embedded server, every message verified, each fault in the summary.
#[test]
fn the_network_scenario_runs_short() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios");
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("res");
    let file = dir.join("network.toml");
    let o = spate(
        &[
            "run",
            file.to_str().unwrap(),
            "--set",
            "duration=9s",
            "--set",
            "loss_at=1s",
            "--set",
            "latency_at=3s",
            "--set",
            "partition_at=5s",
            "--set",
            "each=1s",
            "--set",
            "partition=2s",
            "--out",
            out.to_str().unwrap(),
        ],
        d.path(),
    );
    assert_eq!(o.code, 0, "{}\n{}", o.stdout, o.stderr);
    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("01-load/summary.json")).unwrap())
            .unwrap();
    let occ = s["extra"]["faults"]["occurrences"].as_array().unwrap();
    assert_eq!(occ.len(), 3, "{occ:?}");
    assert!(occ.iter().all(|o| o["applied"] == true), "{occ:?}");
    // The partition: nothing gets through while it lasts.
    let p = &occ[2];
    assert!(
        p["during"]["accepted_per_s"].as_f64().unwrap()
            < p["before"]["accepted_per_s"].as_f64().unwrap() / 4.0,
        "{p}"
    );
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("02-account/verify.json")).unwrap())
            .unwrap();
    assert_eq!(v["missing"], 0, "{v}");
}

/// `spate run --junit FILE`: a test case per step and per threshold, a broken threshold a
/// failure with its measured value and limit, a step not run skipped; the XML is checked
/// with Python's xml.etree against what JUnit readers require (testsuites > testsuite >
/// testcase with classname, name and time; failure and skipped with a message).
#[test]
fn junit_has_a_case_per_step_and_threshold() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("ci.toml");
    std::fs::write(
        &file,
        r#"
description = "CI"
abort_on_fail = true
thresholds = ["load.totals.accepted == 20", "load.totals.accepted > 1000000"]
[server]
smtp = "127.0.0.1:0"
discard = true
[[step]]
name = "load"
command = "smtp"
target = "${server.smtp}"
count = 20
quiet = true
thresholds = ["errors.rate < 1%", "p99(transaction) < 1us"]
[[step]]
name = "after"
run = "true"
"#,
    )
    .unwrap();
    let out = d.path().join("res");
    let xml = d.path().join("junit.xml");
    let o = spate(
        &[
            "run",
            file.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--junit",
            xml.to_str().unwrap(),
        ],
        d.path(),
    );
    assert_eq!(o.code, 99, "{}\n{}", o.stdout, o.stderr);
    let said = common::junit_cases(&xml);
    // 2 steps + 2 step thresholds + 2 scenario thresholds.
    assert!(said.starts_with("6 "), "{said}");
    assert!(
        said.contains("'step load: threshold p99(transaction) < 1us'"),
        "{said}"
    );
    assert!(said.contains("limit < 1us"), "{said}");
    assert!(
        said.contains("'threshold load.totals.accepted > 1000000'"),
        "{said}"
    );
    assert!(
        !said.contains("'threshold load.totals.accepted == 20'"),
        "{said}"
    );
    assert!(
        said.contains("['step 02 after']"),
        "the step after the failure is skipped: {said}"
    );
}
