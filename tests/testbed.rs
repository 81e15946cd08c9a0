//! spate against a real Postfix + Dovecot on loopback (scripts/testbed). Skipped, saying
//! so, when the test bed cannot be started (not root, packages missing).

mod common;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::bed::Bed;
use serde_json::Value;
use spate::message::{body_digest, hex, split_message};

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

fn maildir_messages(root: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(root) else {
        return;
    };
    for e in rd.filter_map(Result::ok) {
        let p = e.path();
        if p.is_dir() {
            maildir_messages(&p, out);
        } else if p
            .parent()
            .and_then(|d| d.file_name())
            .is_some_and(|n| n == "new" || n == "cur")
        {
            out.push(p);
        }
    }
}

fn run(args: &[&str]) -> (Value, String) {
    common::run_summary(args, false)
}

#[test]
fn postfix_dovecot_delivery_and_real_error_classes() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(&tmp.path().join("bed"), &[]) else {
        return;
    };
    let smtp = bed.var("SPATE_SMTP").to_string();
    let users = bed.var("SPATE_USERS_FILE").to_string();
    let out = tmp.path().join("inject");
    let (s, stdout) = run(&[
        "smtp",
        &smtp,
        "-u",
        "10",
        "-n",
        "2000",
        "-m",
        "0",
        "--to-file",
        &users,
        "--size",
        "1k",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(s["totals"]["accepted"], 2000, "{stdout}");

    let t = Instant::now();
    while bed.queue_depth() > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(180),
            "Postfix queue did not drain: {}",
            bed.queue_depth()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    // Every message is in a Maildir, once, with a body that matches its digest.
    let run_id = s["run_id"].as_str().unwrap();
    let mut files = Vec::new();
    let t = Instant::now();
    let mut seqs = HashSet::new();
    loop {
        files.clear();
        maildir_messages(Path::new(bed.var("SPATE_MAILDIR_ROOT")), &mut files);
        if files.len() >= 2000 || t.elapsed() > Duration::from_secs(60) {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    for f in &files {
        let data = std::fs::read(f).unwrap();
        let (head, body) = split_message(&data);
        let head = String::from_utf8_lossy(head);
        let Some(trace) = head.lines().find(|l| l.starts_with("X-Spate-Trace:")) else {
            continue;
        };
        if !trace.contains(&format!("run={run_id};")) {
            continue;
        }
        let field = |k: &str| {
            trace
                .split(&format!("{k}="))
                .nth(1)
                .unwrap()
                .split(';')
                .next()
                .unwrap()
                .trim()
                .to_string()
        };
        assert_eq!(field("digest"), hex(&body_digest(body)), "{}", f.display());
        assert!(
            seqs.insert(field("seq")),
            "duplicate delivery of seq {}",
            field("seq")
        );
    }
    assert_eq!(seqs.len(), 2000);

    // Unknown recipients: 550 5.1.1 at RCPT, every one counted.
    let out = tmp.path().join("unknown");
    let (s, _) = run(&[
        "smtp",
        &smtp,
        "-n",
        "5",
        "--to",
        "nobody{0..9}@example.test",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(s["totals"]["rejected"], 5);
    let e = &s["errors"][0];
    assert_eq!(
        (
            e["phase"].as_str(),
            e["code"].as_u64(),
            e["enhanced"].as_str()
        ),
        (Some("rcpt"), Some(550), Some("5.1.1")),
        "{e}"
    );
    assert_eq!(e["count"], 5);

    // Over message_size_limit: 552.
    let out = tmp.path().join("big");
    let (s, _) = run(&[
        "smtp",
        &smtp,
        "-n",
        "2",
        "--size",
        "12M",
        "--to-file",
        &users,
        "-o",
        out.to_str().unwrap(),
        "--timeout",
        "60s",
    ]);
    assert_eq!(s["totals"]["accepted"], 0);
    assert!(
        s["errors"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["code"] == 552),
        "{}",
        s["errors"]
    );

    // Submission: STARTTLS verified against the bed's CA, AUTH with the users file.
    let out = tmp.path().join("sub");
    let (s, stdout) = run(&[
        "smtp",
        bed.var("SPATE_SUBMISSION"),
        "--starttls",
        "--ca",
        bed.var("SPATE_CA"),
        "--auth-file",
        &users,
        "-u",
        "2",
        "-n",
        "20",
        "--to-file",
        &users,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(s["totals"]["accepted"], 20, "{stdout}");
    assert_eq!(s["totals"]["tls_connections"], s["totals"]["connections"]);
}

/// Experiment E2's failure: the directory behind Postfix's virtual_mailbox_maps goes away in
/// the middle of a run. RCPTs then get 451 4.3.0, counted in the intervals where it
/// happened, and delivery recovers once slapd is back.
#[test]
fn ldap_outage_mid_run_is_counted_per_interval_then_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &["--ldap", "--port-offset", "auto"],
    ) else {
        return;
    };
    if !Path::new("/usr/sbin/slapd").exists() {
        common::cannot_run("slapd is not installed");
        return;
    }
    let out = tmp.path().join("outage");
    let mut child = Command::new(SPATE)
        .args([
            "smtp",
            bed.var("SPATE_SMTP"),
            "--rate",
            "40/s",
            "--duration",
            "30s",
            "--max-in-flight",
            "20",
            "--to-file",
            bed.var("SPATE_USERS_FILE"),
            "--timeout",
            "10s",
            "-q",
            "-o",
            out.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Stop slapd once the run has three clean seconds behind it (a loaded machine may be
    // slow to start the run; the schedule is the run's, not the test's).
    let t = Instant::now();
    loop {
        let rows = std::fs::read_to_string(out.join("intervals.csv"))
            .map(|s| s.lines().count().saturating_sub(1))
            .unwrap_or(0);
        if rows >= 3 {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the run did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    bed.script(&["ldap-stop"]);
    std::thread::sleep(Duration::from_secs(4));
    bed.script(&["ldap-start"]);
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            panic!("spate did not finish");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success());

    let s: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(s["reconciles"], true);
    let lookup: Vec<&Value> = s["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["code"] == 451 && e["enhanced"] == "4.3.0")
        .collect();
    assert!(!lookup.is_empty(), "no 451 4.3.0: {}", s["errors"]);
    assert!(
        lookup.iter().all(|e| e["phase"] == "rcpt"
            && e["text"]
                .as_str()
                .unwrap()
                .contains("Temporary lookup failure")),
        "{lookup:?}"
    );
    let total_451: u64 = lookup.iter().map(|e| e["count"].as_u64().unwrap()).sum();

    // Per interval: clean before, 451s during, accepted again after.
    let iv = std::fs::read_to_string(out.join("intervals.csv")).unwrap();
    let mut lines = iv.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
    let (t_s, accepted, rejected) = (col("t_s"), col("accepted"), col("rejected"));
    let rows: Vec<(f64, u64, u64)> = lines
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (
                f[t_s].parse().unwrap(),
                f[accepted].parse().unwrap(),
                f[rejected].parse().unwrap(),
            )
        })
        .collect();
    let first_rej = rows
        .iter()
        .position(|r| r.2 > 0)
        .expect("a rejecting interval");
    assert!(rows[..first_rej].iter().all(|r| r.1 > 0), "{rows:?}");
    assert!(
        rows[first_rej].0 >= 3.0,
        "rejections before slapd stopped: {rows:?}"
    );
    let last_rej = rows.iter().rposition(|r| r.2 > 0).unwrap();
    assert!(
        rows[last_rej + 1..].iter().filter(|r| r.1 > 0).count() >= 2,
        "no recovery after slapd came back: {rows:?}"
    );
    // The per-interval error lines add up to the summary's count.
    let per_interval: u64 = std::fs::read_to_string(out.join("errors.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["code"] == 451)
        .map(|e| e["count"].as_u64().unwrap())
        .sum();
    assert_eq!(per_interval, total_451);
    assert_eq!(s["totals"]["rejected"].as_u64().unwrap(), total_451);
    // slapd killed with -9 (a fault's signal) is started again by `restart ldap` (a
    // fault's restart command), on its port, with a new PID.
    let pid = bed.pid("SPATE_LDAP_PIDFILE");
    // SAFETY: kill(2) on the bed's own slapd, by the PID its PID file holds.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    bed.script(&["restart", "ldap"]);
    let again = bed.pid("SPATE_LDAP_PIDFILE");
    assert_ne!(again, pid);
    // SAFETY: signal 0 checks that the process exists.
    assert_eq!(unsafe { libc::kill(again, 0) }, 0, "slapd runs again");
    assert!(std::net::TcpStream::connect(bed.var("SPATE_LDAP")).is_ok());
}

/// Experiment E1's mechanics on the bed: delivery held while mail is queued, released with
/// a chosen LMTP concurrency, the queue drains, and every message with DSN NOTIFY=SUCCESS
/// brings one delivery receipt back to its (local) sender.
#[test]
fn held_queue_drains_after_release_and_each_message_returns_a_receipt() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(&tmp.path().join("bed"), &["--port-offset", "auto"]) else {
        return;
    };
    bed.script(&["hold"]);
    let out = tmp.path().join("held");
    let (s, stdout) = run(&[
        "smtp",
        bed.var("SPATE_SMTP"),
        "-u",
        "4",
        "-n",
        "100",
        "--from",
        "user0@example.test",
        "--to",
        "user{1..9}@example.test",
        "--dsn-notify",
        "SUCCESS",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(s["totals"]["accepted"], 100, "{stdout}");
    // Queued, not delivered.
    let t = Instant::now();
    while bed.queue_depth() < 100 && t.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(bed.queue_depth(), 100);
    let root = PathBuf::from(bed.var("SPATE_MAILDIR_ROOT"));
    let mut files = Vec::new();
    maildir_messages(&root, &mut files);
    assert!(files.is_empty(), "delivered while held: {files:?}");

    bed.script(&["concurrency", "2"]);
    bed.script(&["release"]);
    let t = Instant::now();
    while bed.queue_depth() > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "queue did not drain"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // 100 messages to user1..9, 100 receipts to user0.
    let t = Instant::now();
    let (mut msgs, mut receipts) = (0, 0);
    while t.elapsed() < Duration::from_secs(30) {
        files.clear();
        maildir_messages(&root, &mut files);
        receipts = files
            .iter()
            .filter(|f| f.to_string_lossy().contains("/user0@example.test/"))
            .count();
        msgs = files.len() - receipts;
        if msgs >= 100 && receipts >= 100 {
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!((msgs, receipts), (100, 100));
    let receipt = files
        .iter()
        .find(|f| f.to_string_lossy().contains("/user0@example.test/"))
        .unwrap();
    let text = std::fs::read_to_string(receipt).unwrap();
    assert!(text.contains("multipart/report"), "{text}");
    // Postfix reports LMTP hand-off as "relayed" (RFC 3464), a local mailbox as "delivered".
    assert!(
        text.contains("Action: relayed") || text.contains("Action: delivered"),
        "{text}"
    );
    assert!(text.contains("X-Spate-Trace:"), "returned headers: {text}");
}

/// `scripts/testbed up` with the bed's ports set to free ones of the test's, as root.
fn bed_up(dir: &Path, ports: &[(&str, u16)]) -> std::process::Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testbed");
    let mut c = Command::new(script);
    c.args(["up", "--dir", dir.to_str().unwrap(), "--users", "5"])
        .args(["--in-flow-delay", "0", "--port-offset", "0"])
        .env_remove("TESTBED_PORT_OFFSET");
    for (k, p) in ports {
        c.env(k, p.to_string());
    }
    c.output().unwrap()
}

/// A new bed's `up` that fails half-way (Postfix's port is taken after Dovecot has
/// started) stops what it started, by PID, so the next `up` works; and a --dir whose
/// parent only its owner may enter (mktemp -d's 0700) is refused first, with the reason.
#[test]
fn a_failed_up_stops_what_it_started_and_an_unreachable_dir_is_refused() {
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    if !is_root
        || !Path::new("/usr/sbin/postfix").exists()
        || !Path::new("/usr/sbin/dovecot").exists()
    {
        common::cannot_run(
            "the Postfix+Dovecot test bed needs root and the postfix/dovecot packages",
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    // The bed's ports (below the ephemeral range, as the bed wants them) at an offset
    // where all of them are free now.
    let names = [
        ("TESTBED_SMTP_PORT", 2525),
        ("TESTBED_SUBMISSION_PORT", 2587),
        ("TESTBED_LMTP_PORT", 2424),
        ("TESTBED_IMAP_PORT", 1143),
        ("TESTBED_POP3_PORT", 1110),
    ];
    let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
    let offset = (0..2000u16)
        .map(|k| 20_000 + k * 5)
        .find(|off| names.iter().all(|(_, p)| free(p + off)))
        .expect("a free set of ports");
    let ports: Vec<(&str, u16)> = names.iter().map(|(k, p)| (*k, p + offset)).collect();

    // A parent mode 0700: refused before anything starts.
    let closed = tmp.path().join("closed");
    std::fs::create_dir(&closed).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
    let o = bed_up(&closed.join("bed"), &ports);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("is mode 700") && err.contains("chmod o+x"),
        "{err}"
    );
    assert!(!closed.join("bed").exists(), "nothing made: {err}");

    // Postfix's port taken: Dovecot starts, Postfix cannot, and Dovecot is stopped again.
    let dir = tmp.path().join("bed");
    let taken = std::net::TcpListener::bind(("127.0.0.1", ports[0].1)).unwrap();
    let o = bed_up(&dir, &ports);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("dovecot up"), "Dovecot had started: {err}");
    assert!(err.contains("stopping what it started"), "{err}");
    let imap = format!("127.0.0.1:{}", ports[3].1);
    assert!(
        std::net::TcpStream::connect(&imap).is_err(),
        "Dovecot still listens on {imap}: {err}"
    );
    drop(taken);
    // The port free again: the same bed comes up, and goes down.
    let o = bed_up(&dir, &ports);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::net::TcpStream::connect(&imap).is_ok());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testbed");
    let o = Command::new(script)
        .args(["down", "--dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
