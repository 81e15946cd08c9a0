//! Postfix's queue file system fills up under load and is freed again, on the fault
//! schedule (the test bed's queue on a tmpfs of its own: `up --queue-size`, `disk-full`,
//! `disk-free`): Postfix refuses with 4xx while it is full, takes mail again once it is
//! freed, and loses nothing it accepted.

mod common;

use std::path::Path;
use std::time::Duration;

use common::bed::Bed;
use common::{run_blocking, summary, verify_maildir, SPATE};

#[test]
fn a_full_spool_is_refused_mail_and_nothing_accepted_is_lost() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &[
            "--users",
            "10",
            "--port-offset",
            "auto",
            "--queue-size",
            "64M",
        ],
    ) else {
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/testbed");
    let cmd = |what: &str| format!("{} {what} --dir {}", script.display(), bed.dir.display());
    let fault = format!(
        "at=2s for=3s run='{}' undo='{}'",
        cmd("disk-full"),
        cmd("disk-free")
    );
    let run = tmp.path().join("run");
    let o = run_blocking(
        SPATE,
        &[
            "smtp",
            bed.var("SPATE_SMTP"),
            "-d",
            "8s",
            "-u",
            "4",
            "--to",
            "user{0..9}@example.test",
            "-q",
            "-o",
            run.to_str().unwrap(),
            "--fault",
            &fault,
        ],
        &[],
        Duration::from_secs(120),
    );
    assert!(o.ended(), "{o:?}");
    let s = summary(&run);
    let occ = &s["extra"]["faults"]["occurrences"][0];
    assert_eq!(occ["applied"], true, "{occ}");
    // While full: refusals with a temporary code (452 4.3.1 Insufficient system storage
    // at MAIL, or 451 for a message cut off by the full disk), nothing accepted.
    let during = &occ["during"];
    let refusals: u64 = during["errors"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(k, _)| k.contains(" 45"))
        .map(|(_, n)| n.as_u64().unwrap())
        .sum();
    assert!(refusals > 0, "{occ}");
    assert!(occ["before"]["accepted"].as_u64().unwrap() > 0, "{occ}");
    assert!(occ["after"]["accepted"].as_u64().unwrap() > 0, "{occ}");

    let (v, j) = verify_maildir(&run, bed.var("SPATE_MAILDIR_ROOT"), &["--wait", "90s"]);
    assert_eq!(j["missing"], 0, "{j}\n{v:?}");
    assert_eq!(j["corrupted"], 0, "{j}");
    assert_eq!(j["delivered"], j["expected"], "{j}");
    assert_eq!(v.code, Some(0), "{v:?}");
    eprintln!(
        "disk full for 3 s: accepted {}, rejected {}, failed {}; during: {}",
        s["totals"]["accepted"], s["totals"]["rejected"], s["totals"]["failed"], during["errors"]
    );
}
