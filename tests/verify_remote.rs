//! `spate verify` reading mailboxes over IMAP and POP3 (the embedded server), standalone and
//! inline after `spate smtp --verify`.

mod common;

use std::path::Path;
use std::time::Duration;

use serde_json::Value;
use spate::serve::Config;

const SPATE: &str = env!("CARGO_BIN_EXE_spate");

async fn spate(args: &[&str], env: &[(&str, &str)]) -> common::Output {
    // run_tool does not take an environment; go through env(1). SPATE_PASSWORD is never
    // inherited from the caller.
    let mut argv: Vec<String> = vec!["-u".into(), "SPATE_PASSWORD".into()];
    argv.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
    argv.push(SPATE.to_string());
    argv.extend(args.iter().map(|s| s.to_string()));
    common::run_tool("env", argv, Duration::from_secs(120)).await
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

use common::embedded::Embedded as Bed;

async fn bed() -> Bed {
    let mut config = Config::loopback();
    let any = Some("127.0.0.1:0".parse().unwrap());
    config.listen.pop3 = any;
    config.listen.imaps = any;
    let table: String = (0..4)
        .map(|i| format!("user{i}@example.test pw{i}\n"))
        .collect();
    common::embedded::start(config, &table).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_over_imaps_and_pop3() {
    let b = bed().await;
    let smtp = b.server.addrs.smtp.unwrap().to_string();
    let imaps = format!("imaps://{}", b.server.addrs.imaps.unwrap());
    let pop3 = format!("pop3://{}", b.server.addrs.pop3.unwrap());
    let run = b.dir.path().join("run");
    let o = spate(
        &[
            "smtp",
            &smtp,
            "-n",
            "40",
            "-u",
            "4",
            "--rcpt",
            "1..2",
            "--to",
            "user{0..3}@example.test",
            "-o",
            run.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert!(o.ok, "{}", o.stderr);

    // IMAP over implicit TLS, certificate verified against the server's CA.
    let o = spate(
        &[
            "verify",
            run.to_str().unwrap(),
            "--source",
            &imaps,
            "--users-file",
            &b.users_file,
            "--ca",
            &b.ca,
        ],
        &[],
    )
    .await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    let v = json(&run.join("verify.json"));
    let expected = v["expected"].as_u64().unwrap();
    assert!(expected >= 40, "{v}");
    assert_eq!(v["delivered"], expected);
    assert_eq!(v["missing"], 0);
    assert_eq!(v["ok"], true);

    // Without the CA the certificate is refused: an error, exit 1, one line.
    let o = spate(
        &[
            "verify",
            run.to_str().unwrap(),
            "--source",
            &imaps,
            "--users-file",
            &b.users_file,
        ],
        &[],
    )
    .await;
    assert_eq!(o.code, Some(1), "{}", o.stdout);
    assert!(o.stderr.starts_with("spate: "), "{}", o.stderr);

    // Delete one message of user1 behind spate's back; POP3 then finds it missing.
    let gone_seq = b.server.store.with_mailbox("user1@example.test", |mb| {
        let m = mb.messages.remove(0);
        let text = String::from_utf8_lossy(&m.data).into_owned();
        text.split("seq=")
            .nth(1)
            .unwrap()
            .split(';')
            .next()
            .unwrap()
            .to_string()
    });
    let out = b.dir.path().join("pop3-check");
    let o = spate(
        &[
            "verify",
            run.to_str().unwrap(),
            "--source",
            &pop3,
            "-o",
            out.to_str().unwrap(),
        ],
        // One password for all does not fit this table: only user1 can log in.
        &[("SPATE_PASSWORD", "pw1")],
    )
    .await;
    // user1's password is pw1: the others cannot log in, which is an error.
    assert_eq!(o.code, Some(1), "{}\n{}", o.stdout, o.stderr);
    let o = spate(
        &[
            "verify",
            run.to_str().unwrap(),
            "--source",
            &pop3,
            "--users-file",
            &b.users_file,
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
    )
    .await;
    assert_eq!(o.code, Some(1), "{}\n{}", o.stdout, o.stderr);
    let v = json(&out.join("verify.json"));
    assert_eq!(v["missing"], 1, "{v}");
    assert_eq!(v["delivered"].as_u64().unwrap(), expected - 1);
    let missing = std::fs::read_to_string(out.join("missing.tsv")).unwrap();
    assert!(
        missing
            .lines()
            .any(|l| l.starts_with(&format!("{gone_seq}\tuser1@example.test"))),
        "seq {gone_seq} not in {missing}"
    );
    b.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_verify_over_pop3() {
    let b = bed().await;
    let smtp = b.server.addrs.smtp.unwrap().to_string();
    let pop3 = format!("pop3://{}", b.server.addrs.pop3.unwrap());
    let run = b.dir.path().join("run");
    let o = spate(
        &[
            "smtp",
            &smtp,
            "-n",
            "30",
            "--to",
            "user{0..3}@example.test",
            "-o",
            run.to_str().unwrap(),
            "--verify",
            &pop3,
            "--verify-users-file",
            &b.users_file,
        ],
        &[],
    )
    .await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    let v = json(&run.join("verify.json"));
    assert_eq!(
        (v["expected"].clone(), v["delivered"].clone()),
        (30.into(), 30.into())
    );

    // A remote source without any password is a usage error before the run.
    let before = b.server.stats.messages();
    let o = spate(&["smtp", &smtp, "-n", "1", "--verify", &pop3], &[]).await;
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert!(o.stderr.contains("SPATE_PASSWORD"), "{}", o.stderr);
    assert_eq!(b.server.stats.messages(), before, "nothing sent");
    b.server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_verify_over_imap_times_arrivals_in_real_time() {
    let b = bed().await;
    let smtp = b.server.addrs.smtp.unwrap().to_string();
    let imaps = format!("imaps://{}", b.server.addrs.imaps.unwrap());
    let run = b.dir.path().join("run");
    let o = spate(
        &[
            "smtp",
            &smtp,
            "-n",
            "30",
            "--rate",
            "20/s",
            "--to",
            "user{0..3}@example.test",
            "--ca",
            &b.ca,
            "-o",
            run.to_str().unwrap(),
            "--verify",
            &imaps,
            "--verify-users-file",
            &b.users_file,
        ],
        &[],
    )
    .await;
    assert!(o.ok, "{}\n{}", o.stdout, o.stderr);
    let v = json(&run.join("verify.json"));
    assert_eq!(v["delivered"], 30, "{v}");
    // Announced over IDLE as they arrived: real latencies. Read afterwards, IMAP's
    // INTERNALDATE (whole seconds, before the µs accept time) would clamp nearly all to 0.
    assert_eq!(v["latency"]["count"], 30, "{v}");
    let p50 = v["latency"]["p50_us"].as_u64().unwrap();
    assert!(p50 > 0 && p50 < 2_000_000, "{v}");
    b.server.shutdown().await;
}
