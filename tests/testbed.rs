//! spate against a real Postfix + Dovecot on loopback (scripts/testbed). Skipped, saying
//! so, when the test bed cannot be started (not root, packages missing).

mod common;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use spate::message::{body_digest, hex, split_message};

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

struct Bed {
    dir: PathBuf,
    env: HashMap<String, String>,
}

impl Bed {
    fn up(dir: &Path) -> Option<Bed> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testbed");
        let is_root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| o.stdout.starts_with(b"0"))
            .unwrap_or(false);
        if !is_root
            || !Path::new("/usr/sbin/postfix").exists()
            || !Path::new("/usr/sbin/dovecot").exists()
        {
            eprintln!("SKIPPED: the Postfix+Dovecot test bed needs root and the postfix/dovecot packages (bash .ci/run installs them)");
            return None;
        }
        let d = dir.to_str().unwrap();
        let o = Command::new(&script)
            .args(["up", "--dir", d, "--users", "100", "--in-flow-delay", "0"])
            .output()
            .expect("run scripts/testbed");
        if !o.status.success() {
            panic!(
                "scripts/testbed up failed:\n{}\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let o = Command::new(&script)
            .args(["env", "--dir", d])
            .output()
            .unwrap();
        let mut env = HashMap::new();
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            for kv in line.trim_start_matches("export ").split_whitespace() {
                if let Some((k, v)) = kv.split_once('=') {
                    env.insert(k.to_string(), v.to_string());
                }
            }
        }
        Some(Bed {
            dir: dir.to_path_buf(),
            env,
        })
    }

    fn var(&self, k: &str) -> &str {
        self.env
            .get(k)
            .unwrap_or_else(|| panic!("testbed env lacks {k}: {:?}", self.env))
    }

    fn queue_depth(&self) -> usize {
        let q = Path::new(self.var("SPATE_QUEUE_DIR"));
        ["maildrop", "incoming", "active", "deferred", "hold"]
            .iter()
            .map(|s| count_files(&q.join(s)))
            .sum()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testbed");
        let _ = Command::new(script)
            .args(["down", "--dir", self.dir.to_str().unwrap()])
            .output();
    }
}

fn count_files(dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(Result::ok)
        .map(|e| {
            if e.path().is_dir() {
                count_files(&e.path())
            } else {
                1
            }
        })
        .sum()
}

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
    let o = Command::new(SPATE).args(args).output().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(
        o.status.success(),
        "{args:?}: {}\n{stdout}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = args
        .iter()
        .position(|a| *a == "-o")
        .map(|i| args[i + 1])
        .unwrap();
    let s = serde_json::from_str(
        &std::fs::read_to_string(Path::new(out).join("summary.json")).unwrap(),
    )
    .unwrap();
    (s, stdout)
}

#[test]
fn postfix_dovecot_delivery_and_real_error_classes() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(&tmp.path().join("bed")) else {
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
