//! Heap allocations per message, counted by the allocator: the whole `spate smtp` process
//! (sessions, recorder, aggregator, results writer) runs in this test's process against
//! `spate serve --discard` in another, twice, with N and 5N messages on reused
//! connections. What the run costs once (start-up, the results directory, the summary)
//! cancels out in the difference; what is left is what each message costs.
//!
//! Counts are exact, not timed, so the bound is a real assertion. The same allocator
//! tracks the live heap's peak: a message body of the run's size is held once, however
//! many sessions send it.

mod common;

use std::sync::Mutex;

/// The tests of this file count one run at a time.
static SERIAL: Mutex<()> = Mutex::new(());

#[global_allocator]
static A: common::counting::Counting = common::counting::Counting;

/// `spate serve --smtp --discard` on a free loopback port, listening.
fn server() -> (common::Kill, String) {
    common::serve_process("--smtp", &["--discard".as_ref()])
}

/// Allocations of one in-process `spate smtp` run of `count` messages from `users`
/// sessions.
fn run(addr: &str, count: u64, users: u32, extra: &[&str]) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let count = count.to_string();
    let users = users.to_string();
    let mut args = vec![
        "spate",
        "smtp",
        addr,
        "--users",
        &users,
        "--count",
        &count,
        "-m",
        "100000",
        "--quiet",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    let before = common::counting::allocs();
    let code = spate::cli::main(args);
    let after = common::counting::allocs();
    assert_eq!(
        format!("{code:?}"),
        format!("{:?}", std::process::ExitCode::SUCCESS)
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["totals"]["accepted"].as_u64(), count.parse().ok());
    after - before
}

fn per_message(extra: &[&str]) -> f64 {
    let (_server, addr) = server();
    // Warm up: whatever is allocated once per process.
    run(&addr, 100, 4, extra);
    let small = run(&addr, 400, 4, extra);
    let large = run(&addr, 2000, 4, extra);
    (large as f64 - small as f64) / 1600.0
}

#[test]
fn a_message_on_a_reused_connection_allocates_next_to_nothing() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let chunking = per_message(&[]);
    let data = per_message(&["--no-chunking"]);
    eprintln!("allocations per message: {chunking:.2} with BDAT, {data:.2} with DATA");
    for (how, n) in [("BDAT", chunking), ("DATA", data)] {
        assert!(n < 1.0, "{n:.2} allocations per message with {how}");
    }
}

/// The peak of the live heap during one run, above what was live before it.
fn peak(addr: &str, size: &str) -> u64 {
    common::counting::reset_peak();
    let before = common::counting::live();
    run(addr, 40, 20, &["--size", size]);
    common::counting::peak().saturating_sub(before) as u64
}

/// Twenty sessions sending 1 MiB messages hold one copy of the body between them, not
/// one (or three: a scratch body and two messages) per session: the peak heap grows by
/// about the body, not by twenty times it.
#[test]
fn a_body_of_the_run_s_size_is_held_once_whatever_the_sessions() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (_server, addr) = server();
    run(&addr, 40, 20, &[]);
    let small = peak(&addr, "1024");
    let large = peak(&addr, "1048576");
    let grown = large.saturating_sub(small);
    eprintln!("peak heap: {small} bytes with 1 KiB messages, {large} with 1 MiB");
    assert!(
        grown < 4 << 20,
        "20 sessions with 1 MiB messages grew the peak heap by {grown} bytes"
    );
}
