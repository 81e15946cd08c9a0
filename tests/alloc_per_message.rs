//! Heap allocations per message, counted by the allocator: the whole `spate smtp` process
//! (sessions, recorder, aggregator, results writer) runs in this test's process against
//! `spate serve --discard` in another, twice, with N and 5N messages on reused
//! connections. What the run costs once (start-up, the results directory, the summary)
//! cancels out in the difference; what is left is what each message costs.
//!
//! Counts are exact, not timed, so the bound is a real assertion.

mod common;

#[global_allocator]
static A: common::counting::Counting = common::counting::Counting;

/// `spate serve --smtp --discard` on a free loopback port, listening.
fn server() -> (common::Kill, String) {
    common::serve_process("--smtp", &["--discard".as_ref()])
}

/// Allocations of one in-process `spate smtp` run of `count` messages.
fn run(addr: &str, count: u64, extra: &[&str]) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let count = count.to_string();
    let mut args = vec![
        "spate",
        "smtp",
        addr,
        "--users",
        "4",
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
    run(&addr, 100, extra);
    let small = run(&addr, 400, extra);
    let large = run(&addr, 2000, extra);
    (large as f64 - small as f64) / 1600.0
}

#[test]
fn a_message_on_a_reused_connection_allocates_next_to_nothing() {
    let chunking = per_message(&[]);
    let data = per_message(&["--no-chunking"]);
    eprintln!("allocations per message: {chunking:.2} with BDAT, {data:.2} with DATA");
    for (how, n) in [("BDAT", chunking), ("DATA", data)] {
        assert!(n < 1.0, "{n:.2} allocations per message with {how}");
    }
}
