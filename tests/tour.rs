//! `spate demo` and `spate ping` end to end (the binary, the embedded server).

mod common;

use std::time::Duration;

use spate::serve;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_prints_every_phase_of_every_message_and_the_server_got_them() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let target = format!("smtp://{}", server.addrs.smtp.unwrap());
    let args = [
        "ping",
        &target,
        "--to",
        "u1@example.test",
        "-c",
        "3",
        "-w",
        "0",
    ];
    let o = common::run_tool(
        SPATE,
        args.iter().map(|s| s.to_string()).collect(),
        Duration::from_secs(60),
    )
    .await;
    assert!(o.ok, "{}", o.stderr);
    for seq in 1..=3 {
        let line = o
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("seq={seq} ")))
            .unwrap_or_else(|| panic!("{}", o.stdout));
        for col in [
            "connect=",
            "banner=",
            "helo=",
            "mailfrom=",
            "rcptto=",
            "data=",
            "datasent=",
            "quit=",
            "total=",
        ] {
            assert!(line.contains(col), "{col} missing in {line}");
        }
    }
    assert!(o.stdout.contains("3 sent, 0 failed"), "{}", o.stdout);
    assert_eq!(server.stats.messages(), 3);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_runs_all_parts_verifies_delivery_and_reconciles_with_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("demo");
    let args = vec![
        "demo".into(),
        "--seconds".into(),
        "3".into(),
        "-q".into(),
        "-o".into(),
        out.display().to_string(),
    ];
    let o = common::run_tool(SPATE, args, Duration::from_secs(120)).await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    assert!(o.stdout.contains("they agree"), "{}", o.stdout);
    for part in ["1-smtp", "2-submission"] {
        let s: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(part).join("summary.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(s["complete"], true);
        assert!(s["totals"]["accepted"].as_u64().unwrap() > 0, "{part}");
    }
    // The injected 451s show up in the first part's error table.
    assert!(o.stdout.contains("rcpt 451 4.3.0"), "{}", o.stdout);
    // Every accepted message of both injections was read back intact over IMAPS.
    for part in ["1-smtp", "2-submission"] {
        let v: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(out.join(part).join("verify.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(v["ok"], true, "{part}: {v}");
        assert_eq!(v["delivered"], v["expected"], "{part}");
        assert!(out.join(part).join("report.html").is_file(), "{part}");
    }
    // The mailbox load read messages over both protocols.
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("4-mailbox/summary.json")).unwrap())
            .unwrap();
    assert!(s["totals"]["retrieved"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(s["totals"]["failed"], 0, "{s}");
    assert!(o.stdout.contains("report.html"), "{}", o.stdout);
    // Chat: every copy of every kind arrived, and the server delivered the message copies
    // spate received.
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("5-chat/summary.json")).unwrap())
            .unwrap();
    let x = &s["extra"]["xmpp"];
    assert_eq!(x["missing"], 0, "{x}");
    for kind in ["message", "multicast", "presence"] {
        assert!(x[kind]["delivered"].as_u64().unwrap() > 0, "{kind}: {x}");
    }
    assert!(
        o.stdout.contains("chat: spate received") && !o.stdout.contains("DISAGREE"),
        "{}",
        o.stdout
    );
    assert!(out.join("5-chat/report.html").is_file());
}
