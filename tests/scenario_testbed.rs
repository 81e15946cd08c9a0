//! `spate run scenarios/testbed-drain.toml` against the real Postfix + Dovecot test bed:
//! delivery held, messages queued, released, the drain timed by `until_empty`, and every
//! message found in the Maildirs. Needs root and the packages (see common::cannot_run).

mod common;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn count_new(dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.filter_map(Result::ok)
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                count_new(&p)
            } else {
                usize::from(
                    p.parent()
                        .and_then(|d| d.file_name())
                        .is_some_and(|n| n == "new"),
                )
            }
        })
        .sum()
}

struct Down(std::path::PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testbed");
        let _ = Command::new(script)
            .args(["down", "--dir", self.0.to_str().unwrap()])
            .output();
    }
}

#[test]
fn drain_of_a_held_postfix_queue_is_measured() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout.starts_with(b"0"))
        .unwrap_or(false);
    if !root || !Path::new("/usr/sbin/postfix").exists() || !Path::new("/usr/sbin/dovecot").exists()
    {
        common::cannot_run(
            "the Postfix+Dovecot test bed needs root and the postfix/dovecot packages",
        );
        return;
    }
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let d = tempfile::tempdir().unwrap();
    let bed = d.path().join("bed");
    let o = Command::new(manifest.join("scripts/testbed"))
        // Ports the bed picks free: another bed (a developer's, another test's) may be up.
        .args([
            "up",
            "--dir",
            bed.to_str().unwrap(),
            "--users",
            "100",
            "--port-offset",
            "auto",
        ])
        .output()
        .unwrap();
    let _down = Down(bed.clone());
    assert!(
        o.status.success(),
        "testbed up: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let env = String::from_utf8_lossy(&o.stdout).to_string();
    let smtp = env
        .split_whitespace()
        .find_map(|w| w.strip_prefix("SPATE_SMTP="))
        .expect("SPATE_SMTP in testbed output")
        .to_string();
    let out = d.path().join("res");
    let o = Command::new(env!("CARGO_BIN_EXE_spate"))
        .args([
            "run",
            manifest
                .join("scenarios/testbed-drain.toml")
                .to_str()
                .unwrap(),
        ])
        .args(["--set", "count=300", "--out", out.to_str().unwrap()])
        .env("SPATE_SMTP", &smtp)
        .env("SPATE_TESTBED_DIR", &bed)
        .output()
        .unwrap();
    let (so, se) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(0), "{so}\n{se}");
    let w: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("04-drain/wait.json")).unwrap())
            .unwrap();
    // Delivery was held: every message was still queued when the wait began.
    assert_eq!(w["initial_files"], 300, "{w}");
    let drain = w["drain_s"].as_f64().unwrap();
    assert!(drain > 0.0 && drain < 120.0, "{drain}");
    eprintln!("testbed drain of 300 x 22 KB messages: {drain:.2} s");
    assert_eq!(count_new(&bed.join("mail")), 300);
}
