//! `spate xmpp` against real XMPP servers of the test bed (Prosody and ejabberd, private
//! loopback instances from scripts/testbed): every session logs in over STARTTLS with the
//! certificate verified and SCRAM, and every message is accounted for at its recipient.

mod common;

use std::path::Path;
use std::process::Command;

use common::bed::Bed;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

/// `spate xmpp` against the bed's server: 10 sessions of its accounts over STARTTLS
/// with its CA, quiet, into `out`, with `extra`; its output.
fn xmpp(bed: &Bed, out: &Path, extra: &[&str]) -> std::process::Output {
    xmpp_at(bed, &[bed.var("SPATE_XMPP"), "--starttls"], out, extra)
}

/// [`xmpp`] to `target` (the target and how to reach it).
fn xmpp_at(bed: &Bed, target: &[&str], out: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(SPATE)
        .arg("xmpp")
        .args(target)
        .args([
            "--users-file",
            bed.var("SPATE_USERS_FILE"),
            "--ca",
            bed.var("SPATE_CA"),
        ])
        .args(["--users", "10", "-q", "-o", out.to_str().unwrap()])
        .args(extra)
        .output()
        .unwrap()
}

fn load(bed: &Bed, out: &Path, extra: &[&str]) -> serde_json::Value {
    load_at(bed, &[bed.var("SPATE_XMPP"), "--starttls"], out, extra)
}

/// 300 messages with the roster to `target`, which must all arrive: the summary.
fn load_at(bed: &Bed, target: &[&str], out: &Path, extra: &[&str]) -> serde_json::Value {
    let o = xmpp_at(
        bed,
        target,
        out,
        &[&["-n", "300", "--roster"], extra].concat(),
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.contains("missing 0"), "{stdout}");
    common::summary(out)
}

fn check(s: &serde_json::Value, mechanism_phase: bool) {
    let t = &s["totals"];
    assert_eq!(t["accepted"], 300, "{t}");
    assert_eq!(t["delivered"], 300, "{t}");
    assert_eq!(t["duplicates"], 0, "{t}");
    assert_eq!(s["extra"]["xmpp"]["missing"], 0, "{}", s["extra"]["xmpp"]);
    let count = |name: &str| common::phase_count(s, name);
    for p in ["connect", "starttls", "tls", "bind", "roster", "presence"] {
        assert_eq!(count(p), 10, "{p}: {}", s["phases"]);
    }
    if mechanism_phase {
        assert_eq!(count("auth"), 10);
    }
    // Stream opened three times per session: before STARTTLS, after it, after SASL.
    assert_eq!(count("stream"), 30);
    assert_eq!(count("arrival"), 300);
}

fn run_against(server: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &["--users", "20", "--port-offset", "auto", "--xmpp", server],
    ) else {
        return;
    };
    let s = load(&bed, &tmp.path().join("scram1"), &["--sasl", "scram-sha-1"]);
    check(&s, true);
    let s = load(&bed, &tmp.path().join("auto"), &["--pick", "round-robin"]);
    check(&s, true);
    // An open workload with paced logins: it starts once every session has logged in
    // (how late its units are depends on the machine's load, so it is not asserted here).
    let s = load(
        &bed,
        &tmp.path().join("open"),
        &["--rate", "200/s", "--login-rate", "20/s"],
    );
    check(&s, true);
    // In-band registration: ten accounts the bed does not have are created, then found.
    for (i, (created, existed)) in [(10, 0), (0, 10)].into_iter().enumerate() {
        let out = tmp.path().join(format!("register{i}"));
        let o = Command::new(SPATE)
            .env("SPATE_PASSWORD", "fresh-pw")
            .args([
                "xmpp",
                bed.var("SPATE_XMPP"),
                "--user-pattern",
                "fresh{0..9}@example.test",
            ])
            .args(["--register", "--starttls", "--ca", bed.var("SPATE_CA")])
            .args([
                "--users",
                "10",
                "-n",
                "50",
                "-q",
                "-o",
                out.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let r = &common::summary(&out)["extra"]["xmpp"]["registered"];
        assert_eq!(
            (r["created"].as_u64(), r["existed"].as_u64()),
            (Some(created), Some(existed)),
            "{r}"
        );
        assert_eq!(r["refused"], 0, "{r}");
        assert!(stdout.contains("missing 0"), "{stdout}");
    }
    // Fan-outs: every copy of every multicast and every presence is accounted for, and
    // each fan-out's last arrival is timed.
    let service = bed.var("SPATE_XMPP_MULTICAST").to_string();
    for traffic in ["multicast", "presence"] {
        let out = tmp.path().join(traffic);
        let s = load(
            &bed,
            &out,
            &[
                "--traffic",
                traffic,
                "--addresses",
                "3..9",
                "--multicast-service",
                &service,
            ],
        );
        let t = &s["totals"];
        let x = &s["extra"]["xmpp"];
        assert_eq!(t["accepted"], 300, "{t}");
        assert_eq!(x["missing"], 0, "{x}");
        assert_eq!(t["delivered"], x["expected"], "{t} {x}");
        let want = if traffic == "presence" {
            300 * 9
        } else {
            300 * 3
        };
        assert!(t["delivered"].as_u64().unwrap() >= want, "{t}");
        let last = if traffic == "presence" {
            "broadcast_last"
        } else {
            "multicast_last"
        };
        let fanout = common::phase_count(&s, last);
        assert_eq!(fanout, 300, "{traffic}");
    }
    over_websocket(&bed, tmp.path());
}

/// XMPP over WebSocket (RFC 7395) on the bed's server: every session over ws://, then
/// half over ws:// and half over TCP with STARTTLS; every message accounted for.
fn over_websocket(bed: &Bed, dir: &Path) {
    let url = bed.var("SPATE_XMPP_WS");
    for (name, extra, over_ws) in [
        ("ws", vec![url], 10),
        (
            "mixed",
            vec![
                bed.var("SPATE_XMPP"),
                "--starttls",
                "--websocket",
                url,
                "--websocket-percent",
                "50",
            ],
            5,
        ),
    ] {
        let s = load_at(bed, &extra, &dir.join(name), &[]);
        let t = &s["totals"];
        assert_eq!(
            (t["accepted"].as_u64(), t["delivered"].as_u64()),
            (Some(300), Some(300)),
            "{name}: {t}"
        );
        assert_eq!(t["duplicates"], 0, "{name}: {t}");
        let count = |p: &str| common::phase_count(&s, p);
        assert_eq!(count("websocket"), over_ws, "{name}");
        assert_eq!(count("starttls"), 10 - over_ws, "{name}");
        for p in ["connect", "auth", "bind", "roster", "presence"] {
            assert_eq!(count(p), 10, "{name}: {p}");
        }
        // Two streams a WebSocket session (before and after SASL), three a STARTTLS one.
        assert_eq!(count("stream"), 2 * over_ws + 3 * (10 - over_ws), "{name}");
        assert_eq!(count("arrival"), 300, "{name}");
    }
}

#[test]
fn prosody_delivers_every_message_to_its_recipient() {
    run_against("prosody");
}

#[test]
fn ejabberd_delivers_every_message_to_its_recipient() {
    run_against("ejabberd");
}

/// `--roster all` on a server without a shared roster: presence reaches nobody before (the
/// ledger says so, exit 1), every pair subscribes and approves on the first run, and the
/// second run finds every roster full; presence then reaches every contact.
fn roster_all(server: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = Bed::up(
        &tmp.path().join("bed"),
        &[
            "--port-offset",
            "auto",
            "--no-mail",
            "--users",
            "20",
            "--xmpp",
            server,
            "--xmpp-roster",
            "none",
        ],
    ) else {
        return;
    };
    let spate = |out: &str, extra: &[&str]| {
        let o = Command::new(SPATE)
            .args(["xmpp", bed.var("SPATE_XMPP"), "--users-file"])
            .args([
                bed.var("SPATE_USERS_FILE"),
                "--starttls",
                "--ca",
                bed.var("SPATE_CA"),
            ])
            .args([
                "--users",
                "8",
                "-n",
                "16",
                "--traffic",
                "presence",
                "--wait",
                "3s",
            ])
            .args(["-q", "-o", tmp.path().join(out).to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout).to_string();
        (
            o.status.code(),
            stdout,
            common::summary(&tmp.path().join(out)),
        )
    };
    common::roster_all_subscribes_every_pair_once(spate);
}

#[test]
fn prosody_roster_all_subscribes_every_pair_once() {
    roster_all("prosody");
}

#[test]
fn ejabberd_roster_all_subscribes_every_pair_once() {
    roster_all("ejabberd");
}

/// scenarios/xmpp-restart.toml, short: Prosody (with XEP-0198, mod_smacks) killed with -9
/// mid-run and started again by the bed (`scripts/testbed restart xmpp`): every session
/// logs in again and enables stream management again, the load comes back, every stanza
/// is accounted for (missing 0; indeterminate only what the server had not
/// acknowledged), the scenario's thresholds hold.
#[test]
fn prosody_killed_and_restarted_mid_run_loses_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = prosody_with_sm(tmp.path(), "20") else {
        return;
    };
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/xmpp-restart.toml");
    let out = tmp.path().join("res");
    let o = Command::new(SPATE)
        .args([
            "run",
            file.to_str().unwrap(),
            "--set",
            "duration=9s",
            "--set",
            "at=3s",
        ])
        .args(["--out", out.to_str().unwrap()])
        .envs(&bed.env)
        .env("SPATE_TESTBED_DIR", &bed.dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("01-load/summary.json")).unwrap())
            .unwrap();
    let x = &s["extra"]["xmpp"];
    assert_eq!(x["missing"], 0, "{x}");
    assert!(x["delivered"].as_u64().unwrap() > 0, "{x}");
    // Every session enabled stream management, before the kill and after it.
    let sm = &x["stream_management"];
    assert!(sm["enabled"].as_u64().unwrap() >= 20, "{x}");
    let unacked = sm["unacknowledged_when_a_stream_died"].as_u64().unwrap();
    assert!(x["indeterminate"].as_u64().unwrap() <= unacked, "{x}");
    assert!(sm["acknowledged"].as_u64().unwrap() > 0, "{x}");
    let names: Vec<&str> = s["extra"]["faults"]["occurrences"][0]["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["signal", "restart", "restart-done"], "{stdout}");
}

/// XEP-0198 resumption against Prosody with mod_smacks: the network resets every stream
/// mid-run (spate's proxy, `net=reset`) while the server stays up, with stanzas held on
/// the wire in both directions by a slow network at that moment; each session resumes
/// its stream instead of logging in again (on its next unit, or at the run's end when it
/// has none left: the server kept what was on its way to it), the server's count says
/// which stanzas it had and the others are written again: nothing is in doubt, nothing
/// missing, nothing twice.
#[test]
fn prosody_streams_cut_by_the_network_are_resumed_and_nothing_is_in_doubt() {
    let tmp = tempfile::tempdir().unwrap();
    let Some(bed) = prosody_with_sm(tmp.path(), "10") else {
        return;
    };
    let out = tmp.path().join("r");
    let o = xmpp(
        &bed,
        &out,
        &[
            "--rate",
            "50/s",
            "-d",
            "5s",
            "--fault",
            "at=2s for=1s net=latency:400ms",
            "--fault",
            "at=2.2s net=reset",
        ],
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let s = common::summary(&out);
    let x = &s["extra"]["xmpp"];
    let sm = &x["stream_management"];
    let resumed = sm["resumed"].as_u64().unwrap();
    assert!(resumed > 0, "{x}");
    // Every reconnection resumed its stream: no session logged in twice.
    assert_eq!(s["totals"]["reconnections"].as_u64(), Some(resumed), "{x}");
    assert_eq!(sm["enabled"], 10, "{x}");
    for k in ["missing", "indeterminate", "duplicates"] {
        assert_eq!(x[k], 0, "{k}: {x}");
    }
    assert_eq!(x["delivered"], x["expected"], "{x}");
    assert_eq!(sm["acknowledged"], x["sent"], "{x}");
    // The stanzas the slow network held when the streams died were unacknowledged then
    // (resumed or not, that is what the count says: it read 0 for resumed streams), and
    // those written again after the resumption are stanzas out like any other.
    let n = |k: &str| sm[k].as_u64().unwrap();
    assert!(n("unacknowledged_when_a_stream_died") > 0, "{sm}");
    assert!(n("written_again") > 0, "{sm}");
    assert_eq!(
        s["totals"]["stanzas_out"].as_u64().unwrap(),
        x["sent"].as_u64().unwrap() + n("written_again"),
        "{sm} {}",
        s["totals"]
    );
}

/// A bed of Prosody alone with `users` accounts and XEP-0198 (mod_smacks) on.
fn prosody_with_sm(dir: &Path, users: &str) -> Option<Bed> {
    let args = [
        "--users",
        users,
        "--port-offset",
        "auto",
        "--xmpp",
        "prosody",
    ];
    Bed::up(
        &dir.join("bed"),
        &[&args[..], &["--xmpp-sm", "--no-mail"]].concat(),
    )
}
