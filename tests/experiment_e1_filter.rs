//! Experiment E1 on the test bed's certified-mail filter (`scripts/testbed up --filter`):
//! the integrity run (two mailers across two domains with random pauses, a tampered and a
//! malformed message, every derived message counted by kind), and the filter's bad input —
//! a filter that crashes (the drain runs into its deadline and says what is still queued)
//! and a certificate that expired (every message bounced and counted).

mod common;

use std::path::Path;
use std::process::Command;

use common::bed::Bed;
use serde_json::Value;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

fn scenario(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Rows of a CSV file (no quoted commas in these).
fn csv(path: &Path) -> Vec<Vec<String>> {
    read(path)
        .lines()
        .map(|l| l.split(',').map(String::from).collect())
        .collect()
}

/// `spate ARGS` with the bed's environment: (exit code, stdout + stderr).
fn spate(bed: &Bed, args: &[&str]) -> (i32, String) {
    let o = Command::new(SPATE)
        .args(args)
        .envs(&bed.env)
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code().unwrap_or(-1), text)
}

#[test]
fn e1_integrity_counts_every_derived_message_by_kind() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &["--port-offset", "auto", "--filter", "verify"],
    ) else {
        return;
    };
    let out = tmp.path().join("integrity");
    let (code, text) = spate(
        &bed,
        &[
            "run",
            &scenario("e1-integrity.toml"),
            "--set",
            "count_a=12",
            "--set",
            "count_b=18",
            "--set",
            "rate=20/s",
            "--set",
            "size=4096",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{text}");
    let rows = csv(&out.join("report.csv"));
    assert_eq!(rows.len(), 2, "{text}");
    let cell = |name: &str| -> f64 {
        let i = rows[0]
            .iter()
            .position(|h| h == name)
            .unwrap_or_else(|| panic!("no column {name}: {:?}", rows[0]));
        rows[1][i]
            .parse()
            .unwrap_or_else(|_| panic!("{name} = {:?}\n{text}", rows[1][i]))
    };
    // The table of the original (794/794/794/1225), by kind and by domain.
    for (sent, delivered, receipts, n) in [
        ("a sent", "a delivered in b", "a receipts", 12.0),
        ("b sent", "b delivered in a", "b receipts", 18.0),
    ] {
        assert_eq!(cell(sent), n, "{text}");
        assert_eq!(cell(delivered), n, "{text}");
        assert_eq!(cell(receipts), n, "{text}");
    }
    assert_eq!(cell("tampered delivered"), 1.0);
    assert_eq!(cell("tampered receipts"), 1.0);
    assert_eq!(cell("verification failures"), 1.0, "{text}");
    assert_eq!(cell("malformed bounced"), 1.0, "{text}");
    assert_eq!(cell("malformed delivered"), 0.0);
    // What the filter did, from the mailboxes themselves: every signed message verified,
    // the tampered one marked, one failure notice.
    let mut kinds = std::collections::BTreeMap::<String, u32>::new();
    for mbx in std::fs::read_dir(bed.dir.join("mail")).unwrap() {
        // POP3 moved what it read from new/ to cur/.
        let mbx = mbx.unwrap().path();
        let files = ["new", "cur"]
            .iter()
            .flat_map(|d| std::fs::read_dir(mbx.join(d)).into_iter().flatten());
        for f in files {
            let raw = std::fs::read(f.unwrap().path()).unwrap();
            let text = String::from_utf8_lossy(&raw);
            if let Some(l) = text.lines().find(|l| l.starts_with("X-Certified: ")) {
                let kind = l["X-Certified: ".len()..].split(';').next().unwrap();
                *kinds.entry(kind.to_string()).or_default() += 1;
            }
        }
    }
    assert_eq!(kinds.get("verified"), Some(&30), "{kinds:?}");
    assert_eq!(kinds.get("verification-failed"), Some(&1), "{kinds:?}");
    assert_eq!(kinds.get("verification-failure"), Some(&1), "{kinds:?}");
    // The bounce says why.
    assert!(
        read(&bed.dir.join("log/postfix.log")).contains("non-conformant header"),
        "the malformed message's bounce reason"
    );
}

/// A filter that crashes on every message: nothing is delivered, the drain ends at its
/// deadline with what is still queued, never hangs. Then the certificate expires: the
/// same messages are refused by the filter and bounced, and every bounce is counted.
#[test]
fn e1_filter_crash_and_expired_certificate() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &["--port-offset", "auto", "--filter", "sign"],
    ) else {
        return;
    };
    bed.script(&["filter-fault", "crash"]);
    let out = tmp.path().join("crash");
    let t0 = std::time::Instant::now();
    let (code, text) = spate(
        &bed,
        &[
            "run",
            &scenario("e1-certified-mail.toml"),
            "--set",
            "procs=2",
            "--set",
            "count=3",
            "--set",
            "size=2048",
            "--set",
            "drain_timeout=6s",
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 1, "{text}");
    assert!(t0.elapsed().as_secs() < 90, "{:?}", t0.elapsed());
    assert!(text.contains("still holds 3 files after 6"), "{text}");
    let wait: Value = serde_json::from_str(&read(&out.join("06-drain/wait.json"))).unwrap();
    assert_eq!(wait["timed_out"], true, "{wait}");
    assert_eq!(wait["remaining_files"], 3, "{wait}");
    let left = &wait["remaining"];
    let queued: u64 = ["incoming", "active", "deferred"]
        .iter()
        .map(|q| left[q].as_u64().unwrap())
        .sum();
    assert_eq!(queued, 3, "{wait}");
    assert!(
        read(&bed.dir.join("log/postfix.log")).contains("Command died with signal 6"),
        "Postfix saw the filter crash"
    );

    // The expired certificate: the queued messages are retried and bounced by the filter.
    bed.script(&["filter-fault", "expired"]);
    let rules = tmp.path().join("bounce.rules");
    std::fs::write(
        &rules,
        "bounce per=recipient undelivered in=sender match=trace subject=Undelivered*\n",
    )
    .unwrap();
    let (code, text) = spate(
        &bed,
        &[
            "verify",
            out.join("03-inject").to_str().unwrap(),
            "--maildir",
            bed.var("SPATE_MAILDIR_ROOT"),
            "--rules",
            rules.to_str().unwrap(),
            "--wait",
            "60s",
        ],
    );
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("expected        3  found        3"), "{text}");
    assert!(
        read(&bed.dir.join("log/postfix.log")).contains("signing certificate has expired"),
        "the bounce says why"
    );
    // The bounces themselves were delivered: the queue empties (bounded wait).
    let t = std::time::Instant::now();
    while bed.queue_depth() > 0 && t.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(bed.queue_depth(), 0);
}

/// scripts/e1-knee on made-up sweeps: the knee is the largest count that still gained 10 %,
/// judged against 2 x CPUs + 1..3; a sweep still gaining at its end says so; bad input is
/// one line and exit 2.
#[test]
fn e1_knee_finds_where_more_processes_stop_helping() {
    let tmp = tempfile::tempdir().unwrap();
    let knee = |rows: &str, cpus: &str| -> (i32, String, String) {
        let f = tmp.path().join("matrix.csv");
        std::fs::write(&f, rows).unwrap();
        let o = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/e1-knee"))
            .arg(&f)
            .args(["--cpus", cpus])
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).to_string(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let head = "procs,messages,time per message [ms],server CPU [%],exit\n";
    let (code, out, _) = knee(
        &format!("{head}1,10,1000,50,0\n2,10,600,90,0\n4,10,400,150,0\n8,10,390,190,0\n16,10,420,195,0\n"),
        "2",
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("stops helping after 4 "), "{out}");
    assert!(
        out.contains("gives 5..7 for 2 CPUs: the knee is below it"),
        "{out}"
    );
    let (_, out, _) = knee(
        &format!("{head}1,10,1000,50,0\n2,10,600,90,0\n4,10,400,150,0\n8,10,300,190,0\n16,10,290,195,0\n"),
        "2",
    );
    assert!(out.contains("stops helping after 8 "), "{out}");
    assert!(out.contains("the knee is above it"), "{out}");
    let (_, out, _) = knee(
        &format!("{head}1,10,1000,50,0\n2,10,600,90,0\n4,10,400,150,0\n8,10,300,190,0\n16,10,200,195,0\n"),
        "4",
    );
    assert!(out.contains("still helped at 16"), "{out}");
    assert!(
        out.contains("gives 9..11 for 4 CPUs: no knee found up to 16"),
        "{out}"
    );
    let (code, out, err) = knee("procs,other\n1,2\n", "2");
    assert_eq!(code, 2, "{out}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
