//! Every mistake in `spate rr`'s input is one line on stderr, exit 2, before any load:
//! templates and request files (named FILE:LINE), classes beyond the limit, patterns,
//! certificates and keys (unreadable, encrypted, not a pair), identities directories.

mod common;

use std::net::SocketAddr;

use rcgen::KeyPair;
use spate::serve::{self, Addrs, Config};

use common::{spate, Output};

fn one_line_exit_2(o: &Output, want: &str) {
    assert_eq!(o.code, Some(2), "{want}: {}", o.stderr);
    assert_eq!(o.stderr.trim_end().lines().count(), 1, "{}", o.stderr);
    assert!(o.stderr.contains(want), "want {want:?} in {}", o.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_rr_input_is_one_line_and_exit_2() {
    let mut c = Config::loopback();
    let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
    c.listen = Addrs {
        rr: Some(lo),
        ..Addrs::default()
    };
    let server = serve::start(c).await.unwrap();
    let addr = server.addrs.rr.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let out = d.join("never");
    let o_ = out.to_str().unwrap();
    let path = |n: &str| d.join(n).to_str().unwrap().to_string();

    std::fs::write(d.join("typo.txt"), "# ok\nGET {n}\nGET {sqe}\n").unwrap();
    let many: String = (0..17).map(|i| format!("c{i}\tGET {i}\n")).collect();
    std::fs::write(d.join("classes.txt"), many).unwrap();
    std::fs::write(d.join("rand.txt"), "GET {rand:9..1}\n").unwrap();
    std::fs::write(d.join("empty.txt"), "# nothing\n\n").unwrap();
    std::fs::write(d.join("long.txt"), "x".repeat(70_000)).unwrap();
    // A key and a certificate that are not a pair, and an encrypted key.
    let k1 = KeyPair::generate().unwrap();
    let k2 = KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["c.test".into()])
        .unwrap()
        .self_signed(&k1)
        .unwrap();
    std::fs::write(d.join("c.crt"), cert.pem()).unwrap();
    std::fs::write(d.join("other.key"), k2.serialize_pem()).unwrap();
    std::fs::write(
        d.join("enc.key"),
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIIBvTBXBgkqhkiG9w0BBQ0wSjApBgkqhkiG9w0BBQwwHAQI\n-----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap();
    std::fs::create_dir(d.join("ids")).unwrap();
    std::fs::write(d.join("ids/alone.key"), k1.serialize_pem()).unwrap();

    let (typo, classes, rand, empty, long) = (
        path("typo.txt"),
        path("classes.txt"),
        path("rand.txt"),
        path("empty.txt"),
        path("long.txt"),
    );
    let (crt, other, enc, ids) = (
        path("c.crt"),
        path("other.key"),
        path("enc.key"),
        path("ids"),
    );
    let (missing, nope) = (path("missing.txt"), path("nope.crt"));
    let cases: Vec<(Vec<&str>, String)> = vec![
        (
            vec!["--requests", &typo],
            format!("{typo}:3: unknown placeholder {{sqe}}"),
        ),
        (
            vec!["--requests", &classes],
            format!("{classes}:17: class 'c16'"),
        ),
        (
            vec!["--requests", &rand],
            format!("{rand}:1: bad {{rand:A..B}}"),
        ),
        (vec!["--requests", &empty], "no request in it".into()),
        (vec!["--requests", &missing], "missing.txt".into()),
        (
            vec!["--template-file", &long, "--frame", "len16"],
            "do not fit a len16".into(),
        ),
        (
            vec!["--template", "GET {nn}"],
            "--template: unknown placeholder {nn}".into(),
        ),
        (vec![], "say what to send".into()),
        (
            vec!["--template", "x", "--until", "(unclosed"],
            "--until".into(),
        ),
        (
            vec!["--template", "x", "--expect", "[z-a]"],
            "--expect".into(),
        ),
        (
            vec!["--template", "x", "--frame", "http", "--until", "OK"],
            "--until is for --frame line".into(),
        ),
        (
            vec!["--template", "x", "--expect-status", "200"],
            "--expect-status is for --frame http".into(),
        ),
        (
            vec!["--template", "x", "--pick", "zipf:-1"],
            "zipf:S".into(),
        ),
        (
            vec!["--template", "x", "--variants", "0"],
            "--variants".into(),
        ),
        (
            vec!["--template", "{identity}"],
            "{identity} needs client identities".into(),
        ),
        (
            vec!["--template", "x", "--header", "no colon"],
            "--header".into(),
        ),
        (
            vec!["--template", "x", "--tls", "--cert", &crt, "--key", &other],
            "are not a pair".into(),
        ),
        (
            vec!["--template", "x", "--tls", "--cert", &crt, "--key", &enc],
            "the private key is encrypted".into(),
        ),
        (
            vec!["--template", "x", "--tls", "--cert", &nope, "--key", &other],
            "cannot read".into(),
        ),
        (
            vec!["--template", "x", "--identities", &ids],
            "alone.key has no alone.crt".into(),
        ),
        (vec!["--template", "x", "--starttls"], "--starttls".into()),
        (
            vec!["--template", "x", "--max-response", "lots"],
            "lots".into(),
        ),
        (
            vec![
                "--template",
                "x",
                "--frame",
                "http",
                "--expect-status",
                "999",
            ],
            "--expect-status 999: an HTTP status is 100..599".into(),
        ),
        (
            vec!["--template", "x", "--frame", "http", "--expect-status", "0"],
            "--expect-status 0: an HTTP status is 100..599".into(),
        ),
        (
            vec!["--template", "x", "--rate", "5/s", "--max-in-flight", "0"],
            "--max-in-flight".into(),
        ),
        (
            vec!["--template", "x", "--method", "GET"],
            "--method is for --frame http".into(),
        ),
        (
            vec!["--template", "x", "--path", "/a"],
            "--path is for --frame http".into(),
        ),
        (
            vec!["--template", "x", "--frame", "len32", "--header", "A: b"],
            "--header is for --frame http".into(),
        ),
        (
            vec!["--template", "GET {n"],
            "placeholder {n is not closed".into(),
        ),
        (
            vec!["--template", "x", "--rate", "-5/s"],
            "--rate: bad rate".into(),
        ),
        (
            vec!["--template", "x", "--duration", "-3s"],
            "--duration: bad duration".into(),
        ),
        (
            vec!["--template", "x", "--users", "100000000000"],
            "1..=4294967295".into(),
        ),
    ];
    for (extra, want) in &cases {
        let mut args = vec!["rr", addr.as_str(), "-n", "1", "-o", o_];
        args.extend_from_slice(extra);
        let o = spate(&args).await;
        one_line_exit_2(&o, want);
        assert!(
            !out.exists(),
            "{extra:?}: nothing is written before the load"
        );
    }
    // A target without a port (only HTTP has a default one).
    let o = spate(&["rr", "127.0.0.1", "--template", "x", "-o", o_]).await;
    one_line_exit_2(&o, "give the port");
    assert_eq!(server.stats.rr().requests, 0, "no load was sent");
    server.shutdown().await;
}
