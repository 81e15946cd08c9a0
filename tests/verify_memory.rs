//! What delivery verification holds per message found, counted by the allocator rather
//! than read from RSS: N = 200 000 traced single-recipient deliveries, spread over 2 000
//! mailboxes as on the E2 test bed and named as Dovecot names Maildir files, are fed into
//! one [`Ledger`]; the live heap it holds afterwards (every structure: deliveries, the
//! ids already seen, the interned mailboxes), divided by N, is what one more verified
//! message costs a long run. Issue #18 asks for at most 24 bytes: 21.8 (it was 77.1).
//! The report made from the same ledger must still say everything: delivered,
//! duplicated, corrupted, misdelivered, unlogged, foreign, missing and the latency of
//! every delivery. Then N deliveries of messages to two recipients each: 25.1 bytes per
//! delivery (41.9 before the second recipients had tables of their own), bound 28.
//!
//! One test in this file: the counter is global to the process.

mod common;

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

#[global_allocator]
static A: common::counting::Counting = common::counting::Counting;

use spate::message::{body_digest, hex, TRACE_HEADER};
use spate::verify::{Ingested, Ledger, SentLog, Timing};

const N: u64 = 200_000;
const MAILBOXES: u64 = 2_000;
/// Run start: 2026-01-01T00:00:00Z in µs.
const T0_US: i64 = 1_767_225_600_000_000;

fn mailbox(i: u64) -> String {
    format!("user{i}@example.test")
}

/// The message of `seq`, as spate writes it (tracking header with the body's digest).
fn message(out: &mut Vec<u8>, run: &str, seq: u64, body: &str) {
    out.clear();
    let d = hex(&body_digest(body.as_bytes()));
    let mut s = String::with_capacity(256);
    write!(
        s,
        "Return-Path: <s@example.test>\r\nDelivered-To: x\r\nMessage-ID: <{seq}.{run}@spate.invalid>\r\n\
         {TRACE_HEADER}: run={run}; seq={seq}; sent=1; digest={d}; size={}\r\nSubject: m\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    out.extend_from_slice(s.as_bytes());
}

/// Accepted `i` ms after T0; arrives 3 ms later.
fn accepted_us(seq: u64) -> i64 {
    T0_US + seq as i64 * 1_000
}

fn arrival(seq: u64) -> Timing {
    let us = (accepted_us(seq) + 3_000) as u64;
    Timing::Exact(SystemTime::UNIX_EPOCH + Duration::from_micros(us))
}

/// A Dovecot-like Maildir base name, unique per delivery.
fn source_id(seq: u64) -> String {
    format!(
        "{}.M{}P{}.mx.example.test",
        1_767_225_600 + seq / 1000,
        seq * 7 % 1_000_000,
        4000 + seq % 97
    )
}

/// The sent log of seqs 0..=last, each to `rcpts` mailboxes from `seq % MAILBOXES` on.
fn sent_log(run: &str, last: u64, rcpts: u64) -> SentLog {
    let mut text = format!(
        "# spate sent log v1 run={run}\nseq\taccepted_at\tdigest\tbytes\tfrom\trecipients\n"
    );
    for seq in 0..=last {
        let at = chrono::DateTime::from_timestamp_micros(accepted_us(seq)).unwrap();
        let to: Vec<String> = (0..rcpts).map(|i| mailbox((seq + i) % MAILBOXES)).collect();
        writeln!(
            text,
            "{seq}\t{}\t00\t1\ts@example.test\t{}",
            at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            to.join(",")
        )
        .unwrap();
    }
    SentLog::parse(text.as_bytes(), "t").unwrap()
}

#[test]
fn a_verified_delivery_costs_the_ledger_little() {
    let run = "r1";
    let mut buf = Vec::with_capacity(1024);
    let names: Vec<String> = (0..MAILBOXES).map(mailbox).collect();
    let before = common::counting::live();
    let mut ledger = Ledger::new(Vec::new());
    for seq in 0..N {
        message(&mut buf, run, seq, "hello\r\n");
        let id = source_id(seq);
        let mbx = &names[(seq % MAILBOXES) as usize];
        assert_eq!(
            ledger.ingest(mbx, &id, &buf, arrival(seq)),
            Ingested::Traced,
            "seq {seq}"
        );
    }
    let held = common::counting::live() - before;
    let per = held as f64 / N as f64;
    eprintln!("ledger: {held} bytes live for {N} deliveries, {per:.1} bytes per delivery");

    // Nothing is lost: a second read of the same files is ignored; then one of each kind
    // of damage, and the report still tells each apart.
    for seq in [0, 1, 2] {
        message(&mut buf, run, seq, "hello\r\n");
        let mbx = &names[(seq % MAILBOXES) as usize];
        assert_eq!(
            ledger.ingest(mbx, &source_id(seq), &buf, arrival(seq)),
            Ingested::AlreadySeen
        );
    }
    message(&mut buf, run, 5, "hello\r\n");
    ledger.ingest(&names[5], "dup-5", &buf, arrival(9)); // duplicated, arrives later
    message(&mut buf, run, 6, "hello\r\n");
    ledger.ingest(&names[7], "mis-6", &buf, arrival(6)); // misdelivered
    message(&mut buf, run, N + 5, "hello\r\n");
    ledger.ingest(&names[0], "unl", &buf, arrival(N)); // unlogged
    message(&mut buf, "other", 3, "hello\r\n");
    ledger.ingest(&names[0], "for", &buf, arrival(3)); // another run's: foreign
    message(&mut buf, run, 8, "hello\r\n");
    *buf.last_mut().unwrap() = b'X';
    ledger.ingest(&names[8], "cor-8", &buf, arrival(8)); // a corrupted second copy
    let log = sent_log(run, N, 1);
    let r = ledger.report(&log);
    assert_eq!(r.expected, N + 1);
    assert_eq!(r.delivered, N);
    assert_eq!(r.missing.len(), 1);
    assert_eq!(r.missing[0].0, N);
    assert_eq!(r.duplicated, 2);
    assert_eq!(r.corrupted, 1);
    assert_eq!(r.misdelivered, 1);
    assert_eq!(r.unlogged, 1);
    assert_eq!(r.foreign, 1);
    assert_eq!(r.not_measurable, None);
    assert_eq!(r.arrivals.len() as u64, N);
    // Every latency is 3 ms to the µs (the first copy of seq 5, not the later one).
    assert!(r.arrivals.iter().all(|a| a.latency_us == 3_000));
    assert_eq!(r.latency.len(), N);
    assert!(
        per <= 24.0,
        "{per:.1} bytes per verified delivery (issue #18: at most 24)"
    );
    drop((ledger, log, r));

    // Messages to two recipients each: the second recipient's deliveries take a table of
    // their own, not a hash-map entry each.
    let before = common::counting::live();
    let mut ledger = Ledger::new(Vec::new());
    for seq in 0..N / 2 {
        message(&mut buf, run, seq, "hello\r\n");
        for i in 0..2 {
            let mbx = &names[((seq + i) % MAILBOXES) as usize];
            let id = format!("{}{i}", source_id(seq));
            assert_eq!(
                ledger.ingest(mbx, &id, &buf, arrival(seq)),
                Ingested::Traced
            );
        }
    }
    let held = common::counting::live() - before;
    let per2 = held as f64 / N as f64;
    eprintln!("ledger: {held} bytes live for {N} deliveries of two-recipient messages, {per2:.1} bytes per delivery");
    let r = ledger.report(&sent_log(run, N / 2 - 1, 2));
    assert_eq!((r.expected, r.delivered, r.duplicated), (N, N, 0));
    assert!(r.ok());
    assert!(
        per2 <= 28.0,
        "{per2:.1} bytes per delivery of a two-recipient message"
    );
}
