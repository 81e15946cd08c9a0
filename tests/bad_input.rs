//! Every error a user can cause: one line, exit 2, nothing written; and the lines that a
//! failing server produces say what a user can act on.

mod common;

use common::{spate, summary, Output};
use spate::serve;

fn one_line_exit_2(o: &Output, want: &str) {
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    assert_eq!(o.stderr.trim_end().lines().count(), 1, "{}", o.stderr);
    assert!(o.stderr.contains(want), "want {want:?} in {}", o.stderr);
    assert!(!o.stderr.contains("-- -1"), "{}", o.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_one_line_and_exit_2() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("never");
    let o_ = out.to_str().unwrap();
    std::env::set_var("SPATE_PASSWORD", "pw");
    let cases: &[(&[&str], &str)] = &[
        (&["smtp", "127.0.0.1:0", "-o", o_], "port 0"),
        (&["smtp", "::1:2525", "-o", o_], "[::1]:2525"),
        (&["ping", "imap://127.0.0.1:1143"], "unsupported scheme"),
        (&["ping", &addr, "-c", "0"], "at least 1"),
        (&["smtp", &addr, "--size", "-1", "-o", o_], "size"),
        (
            &["smtp", &addr, "--rate", "10/s", "--think", "1s", "-o", o_],
            "--think",
        ),
        (
            &["smtp", &addr, "--bind", "192.0.2.7", "-n", "1", "-o", o_],
            "--bind 192.0.2.7",
        ),
        (
            &[
                "pop3",
                &addr,
                "--user-pattern",
                "u{0..1}@x",
                "--flag",
                "-o",
                o_,
            ],
            "--flag",
        ),
        (
            &[
                "imap",
                &addr,
                "--user-pattern",
                "u{0..1}@x",
                "--top",
                "3",
                "-o",
                o_,
            ],
            "--top",
        ),
        (&["ping", &addr, "-n", "2", "-w", "500"], "500ms"),
        (
            &["smtp", &addr, "--rate", "10/s", "--users", "3", "-o", o_],
            "--max-in-flight",
        ),
        (
            &["imap", &addr, "--imap-percent", "5", "-o", o_],
            "it is an option of spate pop3",
        ),
        (
            &["verify", "/nonexistent/spate-run", "--maildir", "/tmp"],
            "no such directory",
        ),
        (
            &["verify", tmp.path().to_str().unwrap(), "--maildir", "/tmp"],
            "no sent.log",
        ),
    ];
    for (args, want) in cases {
        let o = spate(args).await;
        one_line_exit_2(&o, want);
        assert!(!out.exists(), "{args:?} wrote {o_}");
    }
    server.shutdown().await;
}

/// The inputs that once ran anyway (or failed without naming the option): each is one
/// line and exit 2 now, with nothing sent and nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_that_once_ran_anyway_are_refused() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("never");
    let o_ = out.to_str().unwrap();
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let e_ = empty.to_str().unwrap();
    let port = common::free_port().to_string();
    let same = format!("127.0.0.1:{port}");
    let cases: &[(&[&str], &str)] = &[
        (&["serve", "--threads", "0"], "--threads must be at least 1"),
        (
            &["serve", "--lose", "2"],
            "--lose '2': probability '2' must be a number from 0 to 1",
        ),
        (&["serve", "--duplicate", "x"], "--duplicate 'x'"),
        (
            &["serve", "--slow-read", "16KB"],
            "--slow-read '16KB': a rate per second",
        ),
        (
            &["serve", "--close-after", "0"],
            "--close-after must be at least 1",
        ),
        (
            &["serve", "--drop", "stored"],
            "--drop 'stored': expected PHASE:PROB",
        ),
        (
            &["serve", "--smtp", &same, "--imap", &same],
            "--smtp and --imap both ask for",
        ),
        (&["demo", "--seconds", "0", "-o", o_], "--seconds"),
        (&["demo", "--seconds", "-1", "-o", o_], "--seconds"),
        (&["compare", e_, e_], "no summary.json"),
        (
            &[
                "ping",
                &addr,
                "-c",
                "1",
                "--json",
                "/nonexistent-dir/p.json",
            ],
            "--json /nonexistent-dir/p.json",
        ),
        (
            &[
                "sweep", "--users", "1,2", "-o", o_, "--", &addr, "--users", "3",
            ],
            "--users 3 after --: the sweep sets --users at every step",
        ),
        (
            &["smtp", &addr, "--users", "100000000000", "-o", o_],
            "1..=4294967295",
        ),
        (
            &["smtp", &addr, "-d", "-3s", "-o", o_],
            "--duration: bad duration",
        ),
        (
            &["smtp", &addr, "--rate", "-5/s", "-o", o_],
            "--rate: bad rate",
        ),
        // A rate the arrival thread cannot keep would leave it behind for good.
        (
            &["smtp", &addr, "--rate", "1000000000000/s", "-o", o_],
            "more than spate schedules",
        ),
        (
            &["smtp", &addr, "--stages", "1m:2000000/s", "-o", o_],
            "more than spate schedules",
        ),
    ];
    for (args, want) in cases {
        let o = spate(args).await;
        one_line_exit_2(&o, want);
        assert!(!out.exists(), "{args:?} wrote {o_}");
    }
    let connections: u64 = server.stats.snapshot().connections.values().sum();
    assert_eq!(connections, 0, "no connection was made");
    server.shutdown().await;
}

/// `spate ping lmtp://HOST:PORT` speaks LMTP (LHLO), as --lmtp does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ping_with_the_lmtp_scheme_speaks_lmtp() {
    let mut c = serve::Config::loopback();
    c.listen = serve::Addrs {
        lmtp: Some("127.0.0.1:0".parse().unwrap()),
        ..serve::Addrs::default()
    };
    let server = serve::start(c).await.unwrap();
    let target = format!("lmtp://{}", server.addrs.lmtp.unwrap());
    let o = spate(&["ping", &target, "-c", "2", "-w", "0"]).await;
    assert_eq!(o.code, Some(0), "{o:?}");
    assert!(o.stdout.contains("lhlo"), "{}", o.stdout);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_of_the_server_read_as_they_should() {
    // Nothing listens: the address once, not twice.
    let o = spate(&["smtp", "127.0.0.1:1", "-n", "1"]).await;
    assert_eq!(o.code, Some(1));
    assert_eq!(
        o.stderr.trim_end(),
        "spate: cannot connect to 127.0.0.1:1: connection refused"
    );

    // A server that never answers: the error table says the deadline that passed.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = silent.local_addr().unwrap().to_string();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("r");
    let o = spate(&[
        "smtp",
        &addr,
        "-n",
        "1",
        "--timeout",
        "1s",
        "-q",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    // Nothing was accepted: exit status 1, said in one line; the results are complete.
    assert_eq!(o.code, Some(1), "{}", o.stderr);
    assert!(
        o.stdout
            .contains("nothing accepted: no message went through"),
        "{}",
        o.stdout
    );
    let s = summary(&out);
    assert_eq!(s["errors"][0]["text"], "timed out after 1.00s", "{s}");
    drop(silent);

    // compare with --html FILE (a space, not only =FILE).
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let smtp = server.addrs.smtp.unwrap().to_string();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for d in [&a, &b] {
        let o = spate(&["smtp", &smtp, "-n", "20", "-q", "-o", d.to_str().unwrap()]).await;
        assert!(o.ok, "{}", o.stderr);
    }
    let html = tmp.path().join("c.html");
    let o = spate(&[
        "compare",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--html",
        html.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    assert!(html.is_file());
    server.shutdown().await;
}

/// `--version` names the commit the binary was built from.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_names_the_commit() {
    let o = spate(&["--version"]).await;
    assert!(o.ok, "{}", o.stderr);
    let line = o.stdout.trim();
    let commit = line
        .strip_prefix(concat!("spate ", env!("CARGO_PKG_VERSION"), " ("))
        .and_then(|r| r.strip_suffix(')'))
        .unwrap_or_else(|| panic!("{line}"));
    let hash = commit.trim_end_matches("+dirty");
    assert!(
        hash == "unknown" || (hash.len() == 12 && hash.bytes().all(|b| b.is_ascii_hexdigit())),
        "{line}"
    );
}

/// `spate serve | head -1`, the reader gone before spate prints: spate ends quietly with
/// 141 (as `cat` does on SIGPIPE), never with a panic's backtrace.
#[test]
fn a_closed_stdout_ends_spate_quietly() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let mut fds = [0; 2];
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_spate"))
        .args(["serve", "--xmpp", "127.0.0.1:0"])
        .stdout(std::process::Stdio::from(write))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            panic!("spate serve went on with its stdout closed");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
