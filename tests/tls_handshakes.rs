//! Every TLS-speaking command counts its handshakes, full and resumed, and the CPU they
//! cost this side; the counts are the server's own (the embedded server counts what it
//! resumed), sessions resume by default, and `--no-resumption` makes every one full.

mod common;

use std::path::Path;

use common::{spate, summary};
use spate::serve::Config;

const USERS: usize = 4;

fn user(i: usize) -> String {
    format!("user{i}@example.test")
}

use common::embedded::Embedded as Bed;

/// The embedded server with SMTPS, IMAP (STARTTLS) and POP3S, and USERS accounts with
/// a message each.
async fn bed() -> Bed {
    let mut config = Config::loopback();
    let any = Some("127.0.0.1:0".parse().unwrap());
    config.listen.smtps = any;
    config.listen.imap = any;
    config.listen.pop3s = any;
    let table: String = (0..USERS).map(|i| format!("{} pw\n", user(i))).collect();
    let b = common::embedded::start(config, &table).await;
    for i in 0..USERS {
        let msg = format!(
            "From: a@example.test\r\nTo: {}\r\nSubject: s\r\n\r\nhi\r\n",
            user(i)
        );
        b.server.store.deliver(&user(i), msg.as_bytes()).unwrap();
    }
    b
}

/// Runs spate with `args` and `-o DIR/name`; returns the summary's totals and stdout,
/// and the server's TLS sessions and resumed ones counted during the run.
async fn run(b: &Bed, name: &str, args: &[&str]) -> (serde_json::Value, String, u64, u64) {
    let before = b.server.stats.snapshot();
    let o = b.out(name);
    let mut a: Vec<&str> = args.to_vec();
    a.extend(["--ca", &b.ca, "-o", &o]);
    let r = spate(&a).await;
    assert!(r.ok, "{name}: {}\n{}", r.stdout, r.stderr);
    let after = b.server.stats.snapshot();
    let s = summary(Path::new(&o));
    (
        s["totals"].clone(),
        r.stdout,
        after.tls_sessions - before.tls_sessions,
        after.tls_resumed - before.tls_resumed,
    )
}

fn n(t: &serde_json::Value, k: &str) -> u64 {
    t[k].as_u64().unwrap_or_else(|| panic!("{k} in {t}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_full_and_resumed_are_counted_as_the_server_counts_them() {
    let b = bed().await;
    let smtps = b.server.addrs.smtps.unwrap().to_string();
    let imap = b.server.addrs.imap.unwrap().to_string();
    let pop3s = b.server.addrs.pop3s.unwrap().to_string();
    let (users, uf) = (USERS.to_string(), b.users_file.clone());
    let cases: Vec<(&str, Vec<&str>, u64)> = vec![
        (
            "smtps",
            vec![
                "smtp",
                &smtps,
                "--tls",
                "--users",
                &users,
                "--to-file",
                &uf,
                "--count",
                "40",
                "-m",
                "1",
            ],
            40,
        ),
        (
            "imap-starttls",
            vec![
                "imap",
                &imap,
                "--starttls",
                "--users-file",
                &uf,
                "--count",
                "12",
            ],
            12,
        ),
        (
            "pop3s",
            vec![
                "pop3",
                &pop3s,
                "--tls",
                "--users-file",
                &uf,
                "--count",
                "12",
            ],
            12,
        ),
    ];
    for (name, args, handshakes) in cases {
        let (t, out, server, server_resumed) = run(&b, name, &args).await;
        assert_eq!(n(&t, "tls_connections"), handshakes, "{name}: {t}");
        assert_eq!(server, handshakes, "{name}: the server's TLS sessions");
        // The same handshakes resumed, seen from both ends.
        assert_eq!(n(&t, "tls_resumed"), server_resumed, "{name}: {t}");
        // By default a connection resumes what an earlier one was given: after the
        // first handshake of each session, most do.
        assert!(server_resumed > 0, "{name}: nothing resumed: {t}");
        assert!(n(&t, "tls_cpu_us") > 0, "{name}: {t}");
        let line = format!(
            "TLS handshakes {handshakes}: {} full, {server_resumed} resumed;",
            handshakes - server_resumed
        );
        assert!(out.contains(&line), "{name}: {line} in\n{out}");
        assert!(out.contains("% of the generator's CPU"), "{name}:\n{out}");
        let html = std::fs::read_to_string(b.dir.path().join(name).join("report.html")).unwrap();
        assert!(html.contains("<th>TLS handshakes</th>"), "{name}");

        // --no-resumption: every handshake full, at both ends.
        let name = format!("{name}-full");
        let mut args = args.clone();
        args.push("--no-resumption");
        let (t, out, server, server_resumed) = run(&b, &name, &args).await;
        assert_eq!(n(&t, "tls_connections"), handshakes, "{name}: {t}");
        assert_eq!(server, handshakes, "{name}");
        assert_eq!(n(&t, "tls_resumed"), 0, "{name}: {t}");
        assert_eq!(server_resumed, 0, "{name}");
        let line = format!("TLS handshakes {handshakes}: {handshakes} full, 0 resumed;");
        assert!(out.contains(&line), "{name}: {line} in\n{out}");
    }
    b.server.shutdown().await;
}
