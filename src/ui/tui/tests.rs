//! The dashboard drawn into ratatui's `TestBackend` from synthetic snapshots, at the
//! smallest terminal it must fit (80×24) and a large one (200×60).

use std::time::{Duration, SystemTime};

use ratatui::backend::TestBackend;
use ratatui::Terminal;

use super::draw::{fit, render};
use super::model::{Model, Ui};
use crate::engine::Snapshot;
use crate::metrics::{Detail, ErrorKey, ErrorKind, Phase, Shard};
use crate::results::Summary;
use crate::results::SummaryHeader;

crate::metrics::counters! {
    RETRIEVED => "retrieved", "a test counter";
    RETRIEVED_BYTES => "retrieved_bytes", "a test counter";
    DELETED => "deleted", "a test counter";
    STANZAS_IN => "stanzas_in", "a test counter";
    STANZAS_OUT => "stanzas_out", "a test counter";
    DELIVERED => "delivered", "a test counter";
}

crate::metrics::phases! {
    EHLO => "ehlo", "a test phase";
    TRANSACTION => "transaction", "a test phase";
    RETR => "retr", "a test phase";
    SESSION => "session", "a test phase";
    RCPT => "rcpt", "a test phase";
    AUTH => "auth", "a test phase";
}

/// One second of a run: latencies for a few phases, counts, two error classes.
fn shard(protocol: &str) -> Shard {
    let mut s = Shard::default();
    let phases: &[Phase] = if protocol == "smtp" {
        &[Phase::CONNECT, EHLO, TRANSACTION, Phase::RESPONSE]
    } else {
        &[Phase::CONNECT, RETR, SESSION]
    };
    for (k, &p) in phases.iter().enumerate() {
        for i in 0..1000u64 {
            // A long tail: mostly a few ms, the slowest up to 200 ms.
            let v = 1_000 * (k as u64 + 1) + i.pow(4) / 5_000_000;
            s.record(p, v);
        }
    }
    let c = &mut s.counters;
    c.attempted = 1_234_567;
    c.accepted = 1_200_000;
    c.rejected = 20_000;
    c.failed = 14_567;
    c.bytes = 5 << 30;
    if protocol == "pop3" {
        c.count(RETRIEVED, 99_999);
        c.count(RETRIEVED_BYTES, 3 << 30);
        c.count(DELETED, 88_888);
    }
    let key = |phase, kind, code, detail, text: &str| ErrorKey {
        phase,
        kind,
        code,
        detail,
        text: text.into(),
    };
    let transient = key(
        RCPT,
        ErrorKind::TRANSIENT,
        451,
        Some(Detail(4, 3, 0)),
        "Try again later",
    );
    for _ in 0..20_000 {
        s.error(transient.clone(), String::new);
    }
    for _ in 0..14_567 {
        s.error(
            key(Phase::CONNECT, ErrorKind::REFUSED, 0, None, ""),
            String::new,
        );
    }
    s
}

fn summary(protocol: &str, totals: &Shard, t: f64) -> Summary {
    SummaryHeader {
        run_id: "test".into(),
        command: vec!["spate".into()],
        protocol: protocol.into(),
        words: crate::results::UnitWords::before_declared(protocol),
        target: "127.0.0.1:2525".into(),
        started: SystemTime::UNIX_EPOCH,
    }
    .summary(totals, t, false, false, (Duration::from_secs(1), "process"))
}

/// A model 12 s into a run planned as `planned`: a couple of minutes of varying
/// throughput and CPU for the sparklines, then one interval holding every latency, count
/// and error of the run (so that the histograms and the summary agree).
fn model(protocol: &str, planned: (Option<f64>, Option<u64>)) -> Model {
    let all = shard(protocol);
    let sum = summary(protocol, &all, 12.0);
    let mut m = Model::new(format!(
        "spate — {} load on 127.0.0.1:2525",
        protocol.to_uppercase()
    ));
    fn snap<'a>(
        interval: &'a Shard,
        summary: &'a Summary,
        (interval_s, active): (f64, i64),
        planned: (Option<f64>, Option<u64>),
    ) -> Snapshot<'a> {
        Snapshot {
            t_s: 12.0,
            interval_s,
            interval,
            summary,
            active,
            planned_s: planned.0,
            planned_count: planned.1,
            setup_done_s: Some(0.0),
        }
    }
    for i in 0..240u64 {
        let mut iv = Shard::default();
        iv.counters.accepted = 60_000 + (i * 7_919) % 50_000;
        m.update(
            &snap(&iv, &sum, (1.0, (i % 50) as i64), planned),
            (i % 40) as f64,
        );
    }
    m.update(&snap(&all, &sum, (12.0, 50), planned), 37.0);
    m
}

/// The screen as text, one string per row.
fn screen(w: u16, h: u16, m: &Model, ui: &Ui) -> Vec<String> {
    let mut t = Terminal::new(TestBackend::new(w, h)).expect("test terminal");
    t.draw(|f| render(f, m, ui)).expect("draw");
    let buf = t.backend().buffer();
    (0..h)
        .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>())
        .collect()
}

fn row_with<'a>(rows: &'a [String], needle: &str) -> &'a str {
    rows.iter()
        .find(|r| r.contains(needle))
        .unwrap_or_else(|| panic!("no row with {needle:?} in\n{}", rows.join("\n")))
}

#[test]
fn fits_80x24_with_everything_that_matters() {
    let m = model("smtp", (Some(60.0), None));
    let rows = screen(80, 24, &m, &Ui::default());
    let text = rows.join("\n");
    println!("{text}");
    assert_eq!(rows[0].trim_end(), "spate — SMTP load on 127.0.0.1:2525");
    // The gauge: 12 s of 60, with its label whole.
    let gauge = row_with(&rows, "elapsed 0:00:12 of 0:01:00  20%  0:00:48 left");
    assert!(gauge.contains('█'), "{gauge}");
    // Throughput in SMTP's unit, the counts whole.
    row_with(&rows, "throughput 100000 msg/s now");
    row_with(&rows, "5.00 GiB sent");
    row_with(
        &rows,
        "messages: attempted 1234567  accepted 1200000  rejected 20000  failed 14567",
    );
    // The percentile table: the header and the main phase's row with all four figures.
    let head = row_with(&rows, "p50");
    for col in ["p90", "p99", "max"] {
        assert!(head.contains(col), "{head}");
    }
    let p = &m.phases[m
        .phases
        .iter()
        .position(|p| p.phase == "transaction")
        .unwrap()];
    let tx = row_with(&rows, "▸ transaction");
    for v in [p.p50_us, p.p90_us, p.p99_us, p.max_us] {
        assert!(tx.contains(&super::draw::lat(v)), "{v} in {tx}");
    }
    // The histogram of the selected phase, its buckets labelled by their bound.
    row_with(&rows, "transaction: histogram");
    assert!(text.matches('≤').count() >= 5, "{text}");
    // Errors with their rate: (20000 + 14567) / 1234567.
    row_with(
        &rows,
        "error rate 2.80% (34567 of 1234567 attempted messages)",
    );
    row_with(&rows, "rcpt 451 4.3.0");
    row_with(&rows, "active sessions 50");
    row_with(&rows, "generator CPU 37%");
    let keys = rows[23].trim_end();
    assert!(keys.ends_with("Ctrl-C interrupt"), "{keys}");
}

#[test]
fn uses_a_large_terminal() {
    let m = model("smtp", (Some(60.0), None));
    let small = screen(80, 24, &m, &Ui::default());
    let rows = screen(200, 60, &m, &Ui::default());
    let text = rows.join("\n");
    println!("{text}");
    // More columns in the table, more buckets in the histogram, wider bars.
    let head = row_with(&rows, "p50");
    for col in ["count", "mean", "p99.9"] {
        assert!(head.contains(col), "{head}");
    }
    let buckets = |r: &[String]| r.iter().filter(|l| l.contains('≤')).count();
    assert!(
        buckets(&rows) >= 2 * buckets(&small),
        "{} vs {}",
        buckets(&rows),
        buckets(&small)
    );
    row_with(&rows, "1000 samples; Tab or ←/→ for another phase");
    // The whole width is used: the gauge spans it.
    let gauge = row_with(&rows, "elapsed 0:00:12");
    assert!(
        gauge.chars().take(30).filter(|&c| c == '█').count() >= 25,
        "{gauge}"
    );
    // No row of the 200-column screen is blank in the middle: the layout fills it.
    assert!(
        rows.iter().filter(|r| r.trim().is_empty()).count() < 5,
        "{text}"
    );
}

#[test]
fn mailbox_runs_speak_of_visits_as_the_summary_does() {
    let m = model("pop3", (None, Some(2_000_000)));
    let rows = screen(80, 24, &m, &Ui::default());
    let text = rows.join("\n");
    println!("{text}");
    row_with(&rows, "throughput 100000 visits/s now");
    // The run's bytes (a mailbox run counts what it read), and its own counters.
    row_with(&rows, "5.00 GiB read");
    row_with(&screen(160, 24, &m, &Ui::default()), "retrieved 99999");
    row_with(&rows, "visits: attempted 1234567");
    row_with(&rows, "1234567 of 2000000 visits  62%");
    row_with(&rows, "attempted visits)");
    // Its main phase is the whole visit.
    row_with(&rows, "▸ session");
    assert!(
        !text.contains("msg/s") && !text.contains("messages:"),
        "{text}"
    );
    // The same words as the text summary.
    let iv = shard("pop3");
    let summary_text = crate::report::text::render(&summary("pop3", &iv, 12.0));
    assert!(summary_text.contains(" visits/s "), "{summary_text}");
    let smtp = crate::report::text::render(&summary("smtp", &iv, 12.0));
    assert!(
        smtp.contains(" msg/s ") && smtp.contains(" sent "),
        "{smtp}"
    );
}

#[test]
fn open_ended_runs_say_so() {
    let m = model("smtp", (None, None));
    let rows = screen(80, 24, &m, &Ui::default());
    let line = row_with(&rows, "open-ended");
    assert!(line.starts_with("elapsed 0:00:12"), "{line}");
    assert!(!line.contains('█'));
}

#[test]
fn keys_change_the_screen() {
    let m = model("smtp", (Some(60.0), None));
    let mut ui = Ui::default();
    // Tab moves the histogram to the next phase (after transaction: response).
    ui.cycle(&m, 1);
    let rows = screen(80, 24, &m, &ui);
    row_with(&rows, "response: histogram");
    row_with(&rows, "▸ response");
    ui.cycle(&m, -2);
    row_with(&screen(80, 24, &m, &ui), "ehlo: histogram");
    // Paused: said so, and the key line still fits.
    ui.paused = Some(Box::new(m.clone()));
    ui.stopping = true;
    let rows = screen(80, 24, &m, &ui);
    let keys = rows[23].as_str();
    assert!(
        keys.contains("PAUSED") && keys.contains("STOPPING"),
        "{keys}"
    );
    // Help: the keys explained in a box.
    ui.help = true;
    let text = screen(80, 24, &m, &ui).join("\n");
    println!("{text}");
    assert!(text.contains("pause or resume drawing"), "{text}");
    assert!(text.contains("recorded as interrupted"), "{text}");
}

#[test]
fn before_the_first_second() {
    let m = Model::new("spate — SMTP load on x".into());
    let rows = screen(80, 24, &m, &Ui::default());
    assert!(rows[1].starts_with("starting…"), "{}", rows[1]);
}

#[test]
fn fit_drops_whole_items() {
    let parts = ["aaaa".to_string(), "bbbb".to_string(), "cccc".to_string()];
    assert_eq!(fit(&parts, 100), "aaaa  bbbb  cccc");
    assert_eq!(fit(&parts, 10), "aaaa  bbbb");
    assert_eq!(fit(&parts, 9), "aaaa");
    assert_eq!(fit(&parts, 2), "aaaa");
}

#[test]
fn chat_runs_show_stanzas_reconnections_and_sasl_failures() {
    let mut all = shard("xmpp");
    let c = &mut all.counters;
    c.count(STANZAS_IN, 36_000);
    c.count(STANZAS_OUT, 24_000);
    c.reconnections = 17;
    c.count(DELIVERED, 35_000);
    let sasl = |text: &str| ErrorKey {
        phase: AUTH,
        kind: crate::session::xmpp::errors::SASL,
        code: 0,
        detail: None,
        text: text.into(),
    };
    for _ in 0..3 {
        all.error(sasl("not-authorized"), String::new);
    }
    all.error(sasl("temporary-auth-failure"), String::new);
    let sum = summary("xmpp", &all, 12.0);
    let mut m = Model::new("spate — XMPP load on 127.0.0.1:5222".into());
    m.update(
        &Snapshot {
            t_s: 12.0,
            interval_s: 12.0,
            interval: &all,
            summary: &sum,
            active: 50,
            planned_s: Some(60.0),
            planned_count: None,
            setup_done_s: Some(0.0),
        },
        10.0,
    );
    let rows = screen(120, 24, &m, &Ui::default());
    // This interval's stanzas per second, and the run's counts.
    row_with(&rows, "stanzas in 3000/s  stanzas out 2000/s");
    row_with(&rows, "reconnections 17");
    let text = crate::report::text::render(&sum);
    assert!(
        text.contains("stanzas in 36000 (3000.0/s)  out 24000 (2000.0/s)  reconnections 17  SASL failures 4 (not-authorized 3, temporary-auth-failure 1)"),
        "{text}"
    );
    assert!(!text.contains("stream errors"), "none happened: {text}");
}

/// A `--fault` is a band on the throughput sparkline (its seconds red) and named on the
/// counts line while it is in force.
#[test]
fn a_fault_is_a_red_band_and_named_while_in_force() {
    let iv = {
        let mut s = Shard::default();
        s.counters.accepted = 100;
        s
    };
    let sum = summary("smtp", &iv, 1.0);
    let mut m = Model::new("spate — SMTP load on x".into());
    m.faults = vec![crate::fault::Spec::syntax("at=5s for=3s net=blackhole").unwrap()];
    let ui = Ui::default();
    let mut during = None;
    for t in 1..=12 {
        let snap = Snapshot {
            t_s: t as f64,
            interval_s: 1.0,
            interval: &iv,
            summary: &sum,
            active: 1,
            planned_s: Some(20.0),
            planned_count: None,
            setup_done_s: Some(0.0),
        };
        m.update(&snap, 5.0);
        if t == 7 {
            during = Some(screen(80, 24, &m, &ui));
        }
    }
    assert_eq!(
        m.fault_hist.last(12),
        vec![0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0]
    );
    let during = during.unwrap();
    assert!(row_with(&during, "FAULT at=5s for=3s net=blackhole").contains("attempted"));
    let after = screen(80, 24, &m, &ui);
    assert!(!after.iter().any(|r| r.contains("FAULT")), "{after:#?}");
    // The sparkline's row (below the 4 header rows): the fault's seconds are red.
    let mut t = Terminal::new(TestBackend::new(80, 24)).expect("test terminal");
    t.draw(|f| render(f, &m, &ui)).expect("draw");
    let buf = t.backend().buffer();
    let bottom = (4..10)
        .rev()
        .find(|&y| buf[(0u16, y)].symbol() == "█")
        .expect("a sparkline row");
    let colors: Vec<ratatui::style::Color> = (0..12).map(|x| buf[(x, bottom)].fg).collect();
    use ratatui::style::Color::{Green, Red};
    assert_eq!(
        colors,
        vec![Green, Green, Green, Green, Green, Red, Red, Red, Green, Green, Green, Green]
    );
}
