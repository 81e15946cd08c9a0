//! `spate rr` against servers written here on tokio. Misbehaving ones: a 4 GiB length
//! prefix, a response that never ends, broken chunked encoding, a response over the cap;
//! each is an error of its request (counted, classified), decided from the bytes that
//! announce it or by the deadline, never unbounded memory or a hang. And well-behaved
//! ones the embedded service does not imitate: multi-line responses read `--until` a
//! line matches, chunked HTTP responses.

mod common;

use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use common::{spate, summary};

/// A server that answers every request (any bytes read) with `answer`, then, when
/// `stall`, keeps the connection open without writing more.
async fn hostile(answer: Vec<u8>, stall: bool) -> String {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        // Bounded: the test's runs make a few dozen connections at most.
        for _ in 0..200 {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let answer = answer.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                for _ in 0..1000 {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    if s.write_all(&answer).await.is_err() {
                        return;
                    }
                    if stall {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        return;
                    }
                }
            });
        }
    });
    addr
}

async fn rr(addr: &str, args: &[&str]) -> (Option<i32>, Value, Duration) {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut all = vec!["rr", addr, "--template", "GET x"];
    if !args.contains(&"-n") {
        all.extend_from_slice(&["-n", "3"]);
    }
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", out.to_str().unwrap()]);
    let t = Instant::now();
    let o = spate(&all).await;
    let took = t.elapsed();
    assert!(
        out.join("summary.json").exists(),
        "{}\n{}",
        o.stdout,
        o.stderr
    );
    (o.code, summary(&out), took)
}

fn errors(s: &Value) -> String {
    s["errors"].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_gib_length_prefix_is_refused_from_the_prefix() {
    let addr = hostile(b"\xff\xff\xff\xffabc".to_vec(), false).await;
    let (code, s, took) = rr(&addr, &["--frame", "len32", "--timeout", "20s"]).await;
    assert_eq!(code, Some(1));
    assert_eq!(s["totals"]["failed"], 3);
    assert!(
        errors(&s).contains("length prefix announces 4294967295 bytes"),
        "{}",
        errors(&s)
    );
    assert!(
        took < Duration::from_secs(15),
        "decided without waiting: {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_that_never_ends_times_out_within_the_deadline() {
    let addr = hostile(b"partial line without an end".to_vec(), true).await;
    let (code, s, took) = rr(&addr, &["-n", "2", "--timeout", "1s", "--grace", "5s"]).await;
    assert_eq!(code, Some(1));
    assert_eq!(s["totals"]["failed"], 2);
    assert!(
        errors(&s).contains("\"kind\":\"timeout\""),
        "{}",
        errors(&s)
    );
    assert!(
        took < Duration::from_secs(10),
        "two 1 s deadlines took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_chunked_encoding_fails_the_request() {
    let answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXXXX0\r\n\r\n";
    let addr = hostile(answer.to_vec(), false).await;
    let (code, s, _) = rr(&addr, &["--frame", "http"]).await;
    assert_eq!(code, Some(1));
    assert_eq!(s["totals"]["failed"], 3);
    assert!(
        errors(&s).contains("broken chunked encoding"),
        "{}",
        errors(&s)
    );
    assert!(
        errors(&s).contains("\"kind\":\"protocol\""),
        "{}",
        errors(&s)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_over_the_cap_fails_the_request() {
    let mut big = vec![b'a'; 64 * 1024];
    big.extend_from_slice(b"\r\n");
    let addr = hostile(big, false).await;
    let (code, s, _) = rr(&addr, &["--max-response", "1KiB"]).await;
    assert_eq!(code, Some(1));
    assert_eq!(s["totals"]["failed"], 3);
    assert!(
        errors(&s).contains("longer than 1024 bytes"),
        "{}",
        errors(&s)
    );

    let body = b"HTTP/1.1 200 OK\r\nContent-Length: 5000000000\r\n\r\n".to_vec();
    let addr = hostile(body, false).await;
    let (code, s, _) = rr(&addr, &["--frame", "http"]).await;
    assert_eq!(code, Some(1));
    assert!(
        errors(&s).contains("Content-Length 5000000000 over the cap"),
        "{}",
        errors(&s)
    );

    let mut never = b"HTTP/1.1 200 OK\r\nX-Endless: ".to_vec();
    never.extend(std::iter::repeat_n(b'x', 200 * 1024));
    let addr = hostile(never, false).await;
    let (code, s, _) = rr(&addr, &["--frame", "http", "--timeout", "5s"]).await;
    assert_eq!(code, Some(1));
    assert!(errors(&s).contains("head longer than"), "{}", errors(&s));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_line_responses_until_a_line_matches() {
    let addr = hostile(b"item 1\r\nitem 2\r\nOK 2 items\r\n".to_vec(), false).await;
    let (code, s, _) = rr(&addr, &["--until", "^OK", "--expect", "(?m)^item 2$"]).await;
    assert_eq!(code, Some(0), "{}", errors(&s));
    assert_eq!(s["totals"]["accepted"], 3);
    // Without --until the first line is the whole response, which --expect refuses; the
    // rest is left over, and the connection goes with it: each request gets its own
    // first line, none is handed the leftovers of the one before.
    let (code, s, _) = rr(&addr, &["--expect", "^OK"]).await;
    assert_eq!(code, Some(1));
    assert_eq!(s["totals"]["rejected"], 3, "{}", errors(&s));
    assert_eq!(s["totals"]["connections"], 3, "{}", errors(&s));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunked_http_responses_are_read_whole() {
    let answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nALL\r\n2;ext=1\r\nOW\r\n0\r\nX-Trailer: t\r\n\r\n";
    let addr = hostile(answer.to_vec(), false).await;
    let (code, s, _) = rr(
        &addr,
        &[
            "--frame",
            "http",
            "--expect",
            "^ALLOW$",
            "--expect-status",
            "200",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{}", errors(&s));
    assert_eq!(s["totals"]["accepted"], 3);
    assert_eq!(s["totals"]["connections"], 1, "kept alive");
}
