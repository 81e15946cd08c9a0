//! `spate rr` end to end against the embedded decision service (`serve --rr`): every
//! framing, connection counts per policy, the cache seen from the server's counters,
//! classes, and `--expect` rejections counted exactly.

mod common;

use std::net::SocketAddr;

use serde_json::Value;
use spate::proto::rr::Frame;
use spate::serve::{self, Addrs, Config, Running};

use common::{phase_count, spate, summary};

/// The decision service on a free loopback port.
async fn rr_server(frame: Frame, tweak: impl FnOnce(&mut Config)) -> (Running, String) {
    let mut c = Config::loopback();
    let lo: SocketAddr = "127.0.0.1:0".parse().unwrap();
    c.listen = Addrs {
        rr: Some(lo),
        ..Addrs::default()
    };
    c.rr.frame = frame;
    tweak(&mut c);
    let running = serve::start(c).await.unwrap();
    let addr = running.addrs.rr.unwrap().to_string();
    (running, addr)
}

/// Runs `spate rr` with `args` into a fresh directory; (exit code, summary, stdout).
async fn rr(args: &[&str]) -> (Option<i32>, Value, String) {
    let tmp = tempfile::tempdir().unwrap();
    rr_in(&tmp.path().join("run"), args).await
}

/// Runs `spate rr` with `args` into `out`; (exit code, summary, stdout).
async fn rr_in(out: &std::path::Path, args: &[&str]) -> (Option<i32>, Value, String) {
    let mut all = vec!["rr"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", out.to_str().unwrap()]);
    let o = spate(&all).await;
    assert!(
        out.join("summary.json").exists(),
        "no summary: {}\n{}",
        o.stdout,
        o.stderr
    );
    (o.code, summary(out), o.stdout)
}

fn totals(s: &Value, k: &str) -> u64 {
    s["totals"][k].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_frame_end_to_end() {
    for frame in [Frame::Line, Frame::Len32, Frame::Len16, Frame::Http] {
        let (server, addr) = rr_server(frame, |_| {}).await;
        let mut args = vec![
            addr.as_str(),
            "--frame",
            frame.name(),
            "--template",
            "CHECK u{n} {seq}",
            "-u",
            "2",
            "-n",
            "50",
            "--expect",
            "^ALLOW subject=- cache=miss$",
        ];
        if frame == Frame::Http {
            args.extend_from_slice(&["--expect-status", "200", "--path", "/authz"]);
        }
        let (code, s, stdout) = rr(&args).await;
        assert_eq!(code, Some(0), "{frame:?}: {stdout}");
        assert_eq!(totals(&s, "accepted"), 50, "{frame:?}");
        assert_eq!(server.stats.rr().requests, 50, "{frame:?}");
        for phase in ["request", "first_byte", "response"] {
            assert_eq!(phase_count(&s, phase), 50, "{frame:?} {phase}");
        }
        assert_eq!(s["extra"]["rr"]["frame"], frame.name());
        assert!(stdout.contains("req/s"), "{stdout}");
        server.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_and_per_request_connections() {
    let (server, addr) = rr_server(Frame::Line, |c| c.rr.miss_cost = Default::default()).await;
    let base = ["--template", "CHECK {n}", "-u", "3", "-n", "60"];
    let (code, s, _) = rr(&[&[addr.as_str()][..], &base[..]].concat()).await;
    assert_eq!(code, Some(0));
    assert_eq!(totals(&s, "connections"), 3);
    assert_eq!(phase_count(&s, "connect"), 3);
    let before = server.stats.snapshot().connections["rr"];
    let args = [&[addr.as_str(), "--per-request"][..], &base[..]].concat();
    let (code, s, _) = rr(&args).await;
    assert_eq!(code, Some(0));
    assert_eq!(totals(&s, "connections"), 60);
    assert_eq!(totals(&s, "accepted"), 60);
    assert_eq!(s["extra"]["rr"]["connections"], "per-request");
    // The server saw one more: spate's check that it answers at all.
    let after = server.stats.snapshot().connections["rr"];
    assert_eq!(after - before, 61);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn variants_beyond_the_cache_miss_and_within_it_hit() {
    let (server, addr) = rr_server(Frame::Line, |c| c.rr.cache = 200).await;
    let (code, _, _) = rr(&[
        &addr,
        "--template",
        "CHECK user{n}",
        "--variants",
        "400",
        "-u",
        "4",
        "-n",
        "800",
    ])
    .await;
    assert_eq!(code, Some(0));
    let r = server.stats.rr();
    // Cycling through 400 keys in a 200-entry LRU: every request misses.
    assert_eq!((r.requests, r.misses, r.hits), (800, 800, 0));
    server.shutdown().await;

    let (server, addr) = rr_server(Frame::Line, |c| c.rr.cache = 200).await;
    let (code, _, _) = rr(&[
        &addr,
        "--template",
        "CHECK user{n}",
        "--variants",
        "100",
        "-u",
        "4",
        "-n",
        "500",
    ])
    .await;
    assert_eq!(code, Some(0));
    let r = server.stats.rr();
    // Each of the 100 keys misses once (warm-up), then hits.
    assert_eq!((r.requests, r.misses, r.hits), (500, 100, 400));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classes_are_reported_and_expect_rejects_exactly() {
    let (server, addr) = rr_server(Frame::Line, |_| {}).await;
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("reqs.txt");
    std::fs::write(
        &file,
        "# one allowed, one denied\nallow\tCHECK alice {seq}\ndeny\tCHECK deny bob {seq}\n",
    )
    .unwrap();
    let (code, s, stdout) = rr(&[
        &addr,
        "--requests",
        file.to_str().unwrap(),
        "-u",
        "1",
        "-n",
        "40",
        "--expect",
        "^ALLOW",
    ])
    .await;
    assert_eq!(code, Some(1), "a rejection makes the run fail: {stdout}");
    assert_eq!(totals(&s, "rejected"), 20);
    assert_eq!(totals(&s, "accepted"), 20);
    let classes = &s["extra"]["rr"]["classes"];
    assert_eq!(classes["allow"]["accepted"], 20);
    assert_eq!(classes["deny"]["rejected"], 20);
    assert_eq!(classes["deny"]["response_us"]["count"], 20);
    assert!(classes["allow"]["response_us"]["p50"].as_u64().unwrap() > 0);
    let err = &s["errors"][0];
    assert!(
        err.to_string().contains("DENY subject=-"),
        "the response's first line is the error text: {err}"
    );
    assert!(stdout.contains("per class"), "{stdout}");
    assert!(
        stdout.contains("allow") && stdout.contains("deny"),
        "{stdout}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_connection_close_is_honoured_and_faults_are_rejections() {
    let (server, addr) = rr_server(Frame::Http, |c| {
        c.faults
            .fails
            .push(serve::faults::parse_fail("rr:503:1").unwrap());
    })
    .await;
    let (code, s, _) = rr(&[
        &addr,
        "--frame",
        "http",
        "--template",
        "x",
        "--header",
        "Connection: close",
        "-n",
        "10",
    ])
    .await;
    assert_eq!(code, Some(1));
    assert_eq!(totals(&s, "rejected"), 10);
    assert_eq!(s["errors"][0]["code"], 503, "{}", s["errors"]);
    // Every answer said Connection: close: every request had a connection of its own.
    assert_eq!(totals(&s, "connections"), 10);
    assert_eq!(s["extra"]["rr"]["server_closes"], 10);
    assert_eq!(server.stats.rejections(503), 10);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_requests_fail_as_closed_connections() {
    let (server, addr) = rr_server(Frame::Len32, |c| {
        c.faults
            .drops
            .push(serve::faults::parse_drop("rr:1").unwrap());
    })
    .await;
    let (code, s, _) = rr(&[&addr, "--frame", "len32", "--template", "x", "-n", "7"]).await;
    assert_eq!(code, Some(1));
    assert_eq!(totals(&s, "failed"), 7);
    assert!(
        s["errors"].to_string().contains("\"kind\":\"closed\""),
        "{}",
        s["errors"]
    );
    assert_eq!(server.stats.snapshot().faults["rr:drop"], 7);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_connection_the_server_closed_is_retried_once_anew() {
    let (server, addr) = rr_server(Frame::Line, |c| {
        c.idle_timeout = std::time::Duration::from_millis(150);
    })
    .await;
    let (code, s, _) = rr(&[&addr, "--template", "x", "-n", "3", "--think", "600ms"]).await;
    assert_eq!(code, Some(0), "{}", s["errors"]);
    assert_eq!(totals(&s, "accepted"), 3);
    assert_eq!(totals(&s, "connections"), 3);
    assert_eq!(s["extra"]["rr"]["stale_retries"], 2);
    // The stale attempts' timings are not the requests'.
    assert_eq!(phase_count(&s, "request"), 3);
    server.shutdown().await;
}

/// Hit and miss classes against the decision service (misses cost 5 ms of CPU): the
/// report's per-class table has the summary's counts and latencies, classes.hlog holds
/// every timed response of each class, and the charts per class are drawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_shows_latency_per_class() {
    let (server, addr) = rr_server(Frame::Line, |c| {
        c.rr.miss_cost = std::time::Duration::from_millis(5)
    })
    .await;
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("reqs.txt");
    // The same key every time (one miss to warm up, then hits), a new key every time.
    std::fs::write(&file, "hit\tCHECK alice\nmiss\tCHECK u{seq}\n").unwrap();
    let out = tmp.path().join("run");
    let file = file.to_str().unwrap();
    let (code, s, stdout) = rr_in(&out, &[&addr, "--requests", file, "-u", "1", "-n", "40"]).await;
    assert_eq!(code, Some(0), "{stdout}");
    let classes = &s["extra"]["rr"]["classes"];
    let r = server.stats.rr();
    assert_eq!((r.requests, r.misses, r.hits), (40, 21, 19));

    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    let section = &page[page
        .find("<h2 id=\"classes\">")
        .expect("a section per class")..];
    let end = section[1..].find("<h2").map_or(section.len(), |i| i + 1);
    let section = &section[..end];
    let logs = spate::report::data::PhaseLog::read_tagged(&out.join("classes.hlog"))
        .unwrap()
        .expect("classes.hlog");
    let ms = |v: &Value| spate::report::html::ms(v.as_f64().unwrap());
    for name in ["hit", "miss"] {
        let c = &classes[name];
        let lat = &c["response_us"];
        assert_eq!(c["accepted"], 20, "{name}");
        assert_eq!(lat["count"], 20, "{name}");
        let row = format!(
            "<tr><td>{name}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            c["accepted"], c["rejected"], c["failed"], lat["count"],
            ms(&lat["mean"]), ms(&lat["p50"]), ms(&lat["p90"]), ms(&lat["p99"]), ms(&lat["max"]),
        );
        assert!(section.contains(&row), "no row {row} in\n{section}");
        let log = logs
            .iter()
            .find(|l| l.0.as_deref() == Some(name))
            .map(|l| &l.1)
            .unwrap_or_else(|| panic!("no {name} lines in classes.hlog"));
        assert_eq!(log.total.len(), 20, "{name}");
        assert_eq!(log.total.max(), lat["max"].as_u64().unwrap(), "{name}");
    }
    // A miss costs 5 ms; all but one hit cost none.
    assert!(classes["miss"]["response_us"]["p50"].as_u64().unwrap() >= 5_000);
    assert!(classes["hit"]["response_us"]["p50"].as_u64().unwrap() < 5_000);
    assert!(section.contains("Latency distribution per class (whole run)"));
    assert!(section.contains("Latency per class over time"));
    for series in ["hit p50", "hit p99", "miss p50", "miss p99"] {
        assert!(
            section.contains(&format!("<title>{series}</title>")),
            "{series}"
        );
    }
    assert!(!section.contains("not measurable"), "{section}");
    server.shutdown().await;
}

/// An open rate faster than the sessions can serve (2 in flight, 200 ms each, 50/s asked
/// for 2 s): every arrival is counted, in exactly one class: started and answered,
/// started and cut off, never started (still waiting in the backlog at the end), or
/// dropped (the backlog full). Before, the backlog's arrivals vanished from the counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_rate_counts_every_arrival_even_those_still_queued_at_the_end() {
    let (server, addr) = rr_server(Frame::Line, |c| {
        c.faults.delays = vec![serve::faults::parse_delay("rr:200ms").unwrap()];
    })
    .await;
    let (_, s, _) = rr(&[
        &addr,
        "--template",
        "x",
        "--rate",
        "50/s",
        "-d",
        "2s",
        "--max-in-flight",
        "2",
        "--grace",
        "0s",
    ])
    .await;
    let (attempted, dropped) = (totals(&s, "attempted"), totals(&s, "dropped"));
    assert_eq!(
        attempted + dropped,
        100,
        "rate × duration arrivals: {}",
        s["totals"]
    );
    let never_started: u64 = s["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["text"].as_str().unwrap_or("").contains("never started"))
        .map(|e| e["count"].as_u64().unwrap())
        .sum();
    // The backlog holds 4 × --max-in-flight, full all along at this rate (a session that
    // ends its unit as the run stops may still take one from it).
    assert!((1..=8).contains(&never_started), "{}", s["errors"]);
    assert!(totals(&s, "unfinished") >= never_started, "{}", s["totals"]);
    server.shutdown().await;
}

/// The run's concurrency, measured: 4 closed sessions against a service that takes 50 ms
/// a request keep at most 4 requests in flight, nearly 4 on average (the time requests
/// spent in flight over the run's), in summary.json and the text summary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_in_flight_are_measured() {
    let (server, addr) = rr_server(Frame::Line, |c| {
        c.faults.delays = vec![serve::faults::parse_delay("rr:50ms").unwrap()];
    })
    .await;
    let (code, s, stdout) = rr(&[&addr, "--template", "x", "-u", "4", "-n", "40"]).await;
    assert_eq!(code, Some(0), "{stdout}");
    let f = &s["extra"]["in_flight"];
    assert_eq!(f["max"], 4, "{f}");
    let mean = f["mean"].as_f64().unwrap();
    assert!(mean > 1.0 && mean <= 4.0, "{f}");
    assert!(stdout.contains("in flight: mean"), "{stdout}");
    server.shutdown().await;
}

/// An HTTP/1.0 server that ends each response by closing the connection (no
/// Content-Length, not chunked): the response is read to the close and counts, and the
/// next request goes on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_ended_by_the_close_is_read_to_the_close() {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        // Bounded: the check connection and five requests, then it stops.
        for _ in 0..6 {
            let Ok((mut s, _)) = l.accept() else { return };
            let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
            let mut buf = [0u8; 4096];
            let mut got = Vec::new();
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(n) if n > 0 => got.extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
            if !got.is_empty() {
                let _ = s.write_all(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nPermit\n");
            }
        }
    });
    let (code, s, stdout) = rr(&[
        &addr,
        "--frame",
        "http",
        "--method",
        "GET",
        "--template",
        "",
        "-n",
        "5",
        "--expect",
        "^Permit",
    ])
    .await;
    assert_eq!(code, Some(0), "{stdout}");
    assert_eq!(totals(&s, "accepted"), 5, "{stdout}");
    assert_eq!(totals(&s, "connections"), 5, "a connection per response");
}

/// A line server that answers each request `Q <seq>` with `A <number>`: the number of
/// the request before (`late`), or the request's own twice in one write (`twice`).
fn misordered(twice: bool) -> String {
    use std::io::{BufRead, BufReader, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        // Bounded: the check connection and at most 12 more.
        for _ in 0..13 {
            let Ok((s, _)) = l.accept() else { return };
            std::thread::spawn(move || {
                let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(5)));
                let mut w = s.try_clone().unwrap();
                let mut prev = String::from("none");
                for line in BufReader::new(s).lines().take(20) {
                    let Ok(line) = line else { return };
                    let seq = line.trim_start_matches("Q ").trim().to_string();
                    let answer = if twice {
                        format!("A {seq}\r\nA {seq}\r\n")
                    } else {
                        format!("A {prev}\r\n")
                    };
                    if w.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                    prev = seq;
                }
            });
        }
    });
    addr
}

/// `--expect` with `{seq}`: an answer that names another request is rejected as such
/// (out of order), and bytes after a whole response are this request's fault, not the
/// next one's: the connection goes and the next request starts clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_to_other_requests_and_extra_bytes_are_named() {
    let addr = misordered(false);
    let (code, s, stdout) = rr(&[
        &addr,
        "--template",
        "Q {seq}",
        "-n",
        "5",
        "--expect",
        "^A {seq}$",
    ])
    .await;
    assert_eq!(code, Some(1), "{stdout}");
    assert_eq!(totals(&s, "rejected"), 5, "{stdout}");
    let e = &s["errors"][0];
    assert_eq!(
        e["text"], "the answer to another request",
        "{}",
        s["errors"]
    );
    assert!(
        e["sample"].as_str().unwrap().contains("out of order"),
        "{e}"
    );

    let addr = misordered(true);
    let (code, s, stdout) = rr(&[
        &addr,
        "--template",
        "Q {seq}",
        "-n",
        "5",
        "--expect",
        "^A {seq}$",
    ])
    .await;
    assert_eq!(code, Some(1), "{stdout}");
    assert_eq!(totals(&s, "rejected"), 5, "{stdout}");
    let errors = s["errors"].as_array().unwrap();
    assert_eq!(
        errors.len(),
        1,
        "only the extra bytes, never a wrong answer: {errors:?}"
    );
    assert!(
        errors[0]["text"]
            .as_str()
            .unwrap()
            .contains("more than one response"),
        "{errors:?}"
    );
    assert_eq!(
        totals(&s, "connections"),
        5,
        "a connection per request after extra bytes"
    );
}

/// This host's connections to `addr` in TIME_WAIT: those it closed first.
fn time_waits_to(addr: &str) -> usize {
    let o = std::process::Command::new("ss")
        .args(["-Htan", "state", "time-wait", "dst", addr])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).lines().count()
}

/// One connection per request over HTTP: each request asks the server to close
/// (`Connection: close`) and spate waits for that close, so the server keeps the
/// TIME_WAIT and this host none; `--client-close` closes from this side, and every
/// connection is left in TIME_WAIT here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_request_http_lets_the_server_close_first() {
    if !common::have("ss") {
        return;
    }
    let (server, addr) = rr_server(Frame::Http, |c| c.rr.miss_cost = Default::default()).await;
    let base = [
        addr.as_str(),
        "--frame",
        "http",
        "--template",
        "x",
        "--per-request",
    ];
    let (code, s, out) = rr(&[&base[..], &["-u", "2", "-n", "40"]].concat()).await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(totals(&s, "connections"), 40);
    assert_eq!(
        s["extra"]["rr"]["server_closes"], 40,
        "{}",
        s["extra"]["rr"]
    );
    // One: the check before the load that the server answers, closed from here without
    // a byte; none of the requests' connections.
    assert_eq!(time_waits_to(&addr), 1, "this host closed first");

    let (code, s, out) =
        rr(&[&base[..], &["-u", "2", "-n", "40", "--client-close"]].concat()).await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(totals(&s, "connections"), 40);
    assert_eq!(s["extra"]["rr"]["server_closes"], 0, "{}", s["extra"]["rr"]);
    // Forty, and the two checks before the loads.
    assert!(time_waits_to(&addr) > 40, "{}", time_waits_to(&addr));

    // --client-close means nothing without --per-request.
    let o = common::spate(&["rr", &addr, "--frame", "http", "--client-close"]).await;
    assert_eq!(o.code, Some(2), "{}", o.stderr);
    server.shutdown().await;
}
