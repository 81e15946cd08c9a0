//! The real-server test bed (scripts/testbed) for integration tests: brought up in a
//! temporary directory on a port offset of the test's own (so tests never share a bed),
//! brought down when dropped. `None`, after printing SKIPPED, where it cannot run (not
//! root, packages missing): a skipped test says so and never pretends to pass.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testbed")
}

pub struct Bed {
    pub dir: PathBuf,
    pub env: HashMap<String, String>,
}

impl Bed {
    /// `scripts/testbed up --dir DIR --users 100 --in-flow-delay 0 EXTRA...`.
    pub fn up(dir: &Path, extra: &[&str]) -> Option<Bed> {
        let is_root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| o.stdout.starts_with(b"0"))
            .unwrap_or(false);
        // Without mail (--no-mail: XMPP or the authorization service alone) `up` installs
        // what it needs itself as root; Postfix and Dovecot are for a mail bed only.
        let mail = !extra.contains(&"--no-mail");
        if !is_root {
            super::cannot_run("the test bed needs root");
            return None;
        }
        if mail
            && (!Path::new("/usr/sbin/postfix").exists()
                || !Path::new("/usr/sbin/dovecot").exists())
        {
            super::cannot_run("the Postfix+Dovecot test bed needs the postfix/dovecot packages");
            return None;
        }
        let d = dir.to_str().unwrap();
        let o = Command::new(script())
            .args(["up", "--dir", d, "--users", "100", "--in-flow-delay", "0"])
            .args(extra)
            .output()
            .expect("run scripts/testbed");
        // From here on, Drop brings down whatever came up.
        let mut bed = Bed {
            dir: dir.to_path_buf(),
            env: HashMap::new(),
        };
        if !o.status.success() {
            panic!(
                "scripts/testbed up failed:\n{}\n{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        let o = Command::new(script())
            .args(["env", "--dir", d])
            .output()
            .unwrap();
        for line in String::from_utf8_lossy(&o.stdout).lines() {
            for kv in line.trim_start_matches("export ").split_whitespace() {
                if let Some((k, v)) = kv.split_once('=') {
                    bed.env.insert(k.to_string(), v.to_string());
                }
            }
        }
        Some(bed)
    }

    /// The authorization service's own counters (`GET /stats` on nginx's plain-HTTP
    /// loopback port of a bed brought up with `--authz`).
    pub fn authz_stats(&self) -> serde_json::Value {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(self.var("SPATE_AUTHZ_HTTP")).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        s.write_all(b"GET /stats HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {text}"))
    }

    pub fn var(&self, k: &str) -> &str {
        self.env
            .get(k)
            .unwrap_or_else(|| panic!("testbed env lacks {k}: {:?}", self.env))
    }

    /// The PID in the PID file the bed names in `var` (`SPATE_LDAP_PIDFILE`, …).
    pub fn pid(&self, var: &str) -> i32 {
        let file = self.var(var);
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
        text.trim()
            .parse()
            .unwrap_or_else(|e| panic!("{file}: {e}: {text:?}"))
    }

    /// Runs `scripts/testbed ARGS... --dir DIR`, which must succeed.
    pub fn script(&self, args: &[&str]) {
        let o = Command::new(script())
            .args(args)
            .args(["--dir", self.dir.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "testbed {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// Files in Postfix's queue (maildrop, incoming, active, deferred, hold).
    pub fn queue_depth(&self) -> usize {
        let q = Path::new(self.var("SPATE_QUEUE_DIR"));
        ["maildrop", "incoming", "active", "deferred", "hold"]
            .iter()
            .map(|s| count_files(&q.join(s)))
            .sum()
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .args(["down", "--dir", self.dir.to_str().unwrap()])
            .output();
    }
}

pub fn count_files(dir: &Path) -> usize {
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
