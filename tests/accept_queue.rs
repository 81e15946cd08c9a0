//! A target whose accept queue overflows is reported as what it is: connects whose SYN
//! had to be sent again (counted, with the time they cost), a connect timeout that says
//! the SYN went unanswered — not a plain timeout. A server that accepts shows none.

mod common;

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use common::{run_blocking, summary, SPATE};
use spate::serve;

/// How many connections wait in a listener's accept queue (`TCP_INFO`: for a listener,
/// `tcpi_unacked` is the queue's length).
fn accept_queue_len(l: &std::net::TcpListener) -> u32 {
    // SAFETY: `tcp_info` is a plain C struct; the kernel writes at most `len` bytes.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: a socket this test owns and a buffer of `len` bytes that outlives the call.
    let rc = unsafe {
        libc::getsockopt(
            l.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    assert_eq!(rc, 0, "TCP_INFO on the listener");
    info.tcpi_unacked
}

/// The kernel's count of SYNs and handshakes that listeners dropped because their accept
/// queue was full (`TcpExt: ListenOverflows` in /proc/net/netstat, for this network
/// namespace).
fn listen_overflows() -> u64 {
    let netstat = std::fs::read_to_string("/proc/net/netstat").unwrap();
    let mut tcp_ext = netstat.lines().filter(|l| l.starts_with("TcpExt:"));
    let (names, values) = (tcp_ext.next().unwrap(), tcp_ext.next().unwrap());
    let at = names
        .split_whitespace()
        .position(|n| n == "ListenOverflows")
        .unwrap();
    values.split_whitespace().nth(at).unwrap().parse().unwrap()
}

/// Runs 20 sessions for 20 messages with a 1.5 s timeout against a listener with a
/// backlog of 1 (a queue of two) that, once its queue is full and the run's first SYNs
/// have been dropped, accepts `accepts` connections (before the dropped SYNs are sent
/// again, 1 s after the first) and no more; returns the summary and the printed text.
fn against_a_full_queue(accepts: usize) -> (serde_json::Value, String) {
    // The kernel's count is the namespace's: one such run at a time.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    // SAFETY: listen(2) on a socket this test owns.
    assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 1) }, 0);
    let addr = l.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let started = Instant::now();
    let overflows_before = listen_overflows();
    let accepter = std::thread::spawn(move || {
        // The queue fills with the preflight's connection and one session's; the other
        // 19 sessions' first SYNs are dropped. Waiting for the kernel to have dropped
        // them, rather than for a time, keeps a slow start of the run (a busy machine:
        // one session's first SYN sent late) from letting the accept free a place that
        // a first SYN then takes, with no retransmitted SYN ever let in.
        let full = Instant::now() + Duration::from_secs(20);
        while (accept_queue_len(&l) < 2 || listen_overflows() < overflows_before + 19)
            && Instant::now() < full
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        let held: Vec<_> = (0..accepts).map(|_| l.accept().unwrap()).collect();
        (l, held)
    });
    let o = run_blocking(
        SPATE,
        &[
            "smtp",
            &addr,
            "--users",
            "20",
            "--count",
            "20",
            "--timeout",
            "1500ms",
            "-o",
            out.to_str().unwrap(),
        ],
        &[],
        Duration::from_secs(60),
    );
    let took = started.elapsed();
    assert!(o.ended(), "{o:?}");
    assert!(took < Duration::from_secs(30), "the run took {took:?}");
    drop(accepter.join().unwrap());
    let s = summary(&out);
    let t = &s["totals"];
    let retransmits = t["connect_retransmits"].as_u64().unwrap();
    assert!(retransmits >= 15, "{t}\n{}", o.stdout);
    // Each of them waited at least the second before the first SYN retransmit.
    assert!(
        t["connect_retransmit_us"].as_u64().unwrap() >= retransmits * 1_000_000,
        "{t}"
    );
    assert!(
        o.stdout.contains("connect retransmits") && o.stdout.contains("accept queue overflowed"),
        "{}",
        o.stdout
    );
    (s, o.stdout)
}

/// How many errors of `phase` say that the accept queue is to blame.
fn blamed_on_the_queue(s: &serde_json::Value, phase: &str) -> u64 {
    s["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["phase"] == phase && e["text"].as_str().unwrap().contains("accept queue"))
        .map(|e| e["count"].as_u64().unwrap())
        .sum()
}

#[test]
fn syns_that_a_full_queue_drops_are_connect_retransmits_not_plain_timeouts() {
    // Nothing is accepted: two handshakes complete (the preflight's and one session's),
    // every other SYN is dropped, and the connects time out saying so.
    let (s, out) = against_a_full_queue(0);
    assert!(blamed_on_the_queue(&s, "connect") >= 15, "{out}");
}

#[test]
fn greetings_lost_to_a_full_queue_are_not_plain_greeting_timeouts() {
    // One connection is accepted before the SYNs come again. The handshakes that were
    // answered and then dropped at their last ACK look open here and are never greeted;
    // whether the SYNs sent again after 1 s find the freed place (greeting timeouts) or a
    // full queue again (connect timeouts) is the kernel's timing, so both are counted.
    let (s, out) = against_a_full_queue(1);
    let blamed = blamed_on_the_queue(&s, "connect") + blamed_on_the_queue(&s, "banner");
    assert!(blamed >= 15, "{out}");
    // Only two connections are truly silent servers from here, and are told as plain
    // timeouts: the one the server accepted and holds without a greeting, and the one
    // the kernel completed into the place it freed (no SYN was sent again for it when
    // it came first). Every other greeting that never came is blamed on the queue.
    let plain_greetings: u64 = s["errors"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["phase"] == "banner")
        .map(|e| e["count"].as_u64().unwrap())
        .sum::<u64>()
        - blamed_on_the_queue(&s, "banner");
    assert!(plain_greetings <= 2, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_accepts_shows_no_connect_retransmits() {
    let server = serve::start(serve::Config::loopback()).await.unwrap();
    let addr = server.addrs.smtp.unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("r");
    let o = common::spate(&[
        "smtp",
        &addr,
        "--users",
        "20",
        "--count",
        "200",
        "-m",
        "5",
        "-o",
        out.to_str().unwrap(),
    ])
    .await;
    assert!(o.ok, "{}", o.stderr);
    let s = summary(&out);
    let t = &s["totals"];
    assert_eq!(t["accepted"], 200, "{}", o.stdout);
    assert!(t["connections"].as_u64().unwrap() >= 40, "{t}");
    assert_eq!(t["connect_retransmits"], 0, "{t}");
    assert_eq!(t["connect_retransmit_us"], 0, "{t}");
    assert!(!o.stdout.contains("connect retransmits"), "{}", o.stdout);
}
