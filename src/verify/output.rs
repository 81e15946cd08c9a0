//! What `spate verify` leaves behind: verify.json, deliveries.csv, delivery.hlog,
//! missing.tsv, duplicates.tsv, and the text report. The HTML report reads these names and columns.

use std::fmt::Write as _;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;

use super::ledger::Report;
use crate::results::{rfc3339, write_atomic, HlogFile};
use crate::units::fmt_duration;

/// Longest per-second series written (a week): arrival times far off (a wrong clock, an
/// old message) must not produce a giant file.
const MAX_SECONDS: i64 = 7 * 24 * 3600;

fn at(us: i64) -> SystemTime {
    if us >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_micros(us as u64)
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_micros(us.unsigned_abs())
    }
}

/// Second index since the run start, clamped to the series.
fn second(start_us: i64, us: i64) -> usize {
    ((us - start_us).max(0) / 1_000_000).min(MAX_SECONDS) as usize
}

pub fn write_files(r: &Report, out: &Path, source: &str) -> io::Result<()> {
    write_atomic(
        &out.join("verify.json"),
        serde_json::to_string_pretty(&json(r, source))?.as_bytes(),
    )?;

    let mut missing = BufWriter::new(std::fs::File::create(out.join("missing.tsv"))?);
    writeln!(missing, "seq\trecipient\taccepted_at")?;
    for (seq, rcpt, us) in &r.missing {
        writeln!(missing, "{seq}\t{rcpt}\t{}", rfc3339(at(*us)))?;
    }
    missing.flush()?;

    let mut dups = BufWriter::new(std::fs::File::create(out.join("duplicates.tsv"))?);
    writeln!(dups, "seq\trecipient\tcopies\tlikely_cause")?;
    for d in &r.duplicates {
        writeln!(
            dups,
            "{}\t{}\t{}\t{}",
            d.seq,
            d.recipient,
            d.copies,
            d.cause.text()
        )?;
    }
    dups.flush()?;

    // Per second: deliveries expected from the messages accepted then, and deliveries
    // that arrived then. A server falling behind shows as delivered lagging injected.
    let mut injected: Vec<u64> = Vec::new();
    let mut delivered: Vec<u64> = Vec::new();
    let bump = |v: &mut Vec<u64>, i: usize, n: u64| {
        if v.len() <= i {
            v.resize(i + 1, 0);
        }
        v[i] += n;
    };
    for &(us, n) in &r.injected {
        bump(&mut injected, second(r.start_us, us), n);
    }
    for a in &r.arrivals {
        // Never before its acceptance: a source that records a message before the
        // server's reply would otherwise draw deliveries ahead of injection.
        let at = a.arrived_us.max(a.arrived_us - a.latency_us);
        bump(&mut delivered, second(r.start_us, at), 1);
    }
    let mut csv = BufWriter::new(std::fs::File::create(out.join("deliveries.csv"))?);
    writeln!(csv, "t_s,time,injected,delivered")?;
    for i in 0..injected.len().max(delivered.len()) {
        let t_s = i as i64 + 1;
        writeln!(
            csv,
            "{t_s},{},{},{}",
            rfc3339(at(r.start_us + t_s * 1_000_000)),
            injected.get(i).copied().unwrap_or(0),
            delivered.get(i).copied().unwrap_or(0)
        )?;
    }
    csv.flush()?;

    // Latency by arrival second, one interval histogram each; none when the source's
    // times cannot give latencies (a stale one from an earlier check goes).
    if r.not_measurable.is_some() {
        let _ = std::fs::remove_file(out.join("delivery.hlog"));
        return Ok(());
    }
    let mut hlog = HlogFile::create(
        &out.join("delivery.hlog"),
        "delivery latency",
        at(r.start_us),
    )?;
    let mut arrivals: Vec<(usize, u64)> = r
        .arrivals
        .iter()
        .map(|a| (second(r.start_us, a.arrived_us), a.latency_us.max(0) as u64))
        .collect();
    arrivals.sort_unstable();
    let mut h = Histogram::<u64>::new(3).expect("3 significant figures is valid");
    let mut i = 0;
    while i < arrivals.len() {
        let sec = arrivals[i].0;
        h.reset();
        while i < arrivals.len() && arrivals[i].0 == sec {
            let _ = h.record(arrivals[i].1);
            i += 1;
        }
        hlog.append(sec as f64, 1.0, &h)?;
    }
    hlog.finish()
}

fn json(r: &Report, source: &str) -> serde_json::Value {
    let l = &r.latency;
    serde_json::json!({
        "run_id": r.run_id,
        "source": source,
        "messages": r.messages,
        "expected": r.expected,
        "delivered": r.delivered,
        "missing": r.missing_count(),
        "still_queued": r.queued.len(),
        "indeterminate": r.indeterminate,
        "recovered": r.recovered,
        "unsure_recipients": r.unsure_rcpts,
        "unsure_recipients_found": r.unsure_found,
        "duplicated": r.duplicated,
        "corrupted": r.corrupted,
        "foreign": r.foreign,
        "unlogged": r.unlogged,
        "misdelivered": r.misdelivered,
        "no_arrival_time": r.no_time,
        "latency": {
            "measurable": r.not_measurable.is_none(),
            "not_measurable": r.not_measurable,
            "resolution": if r.to_the_second { "1s" } else { "1us" },
            "basis": basis(r, source),
            "count": l.len(),
            "p50_us": l.value_at_quantile(0.5),
            "p90_us": l.value_at_quantile(0.9),
            "p99_us": l.value_at_quantile(0.99),
            "max_us": l.max(),
        },
        "rules": r.rules,
        "notes": r.notes,
        "wait_cut_short": r.wait_cut,
        "ok": r.ok(),
        "verdict": verdict(r),
    })
}

/// One line saying whether the check passed and, if not, why.
pub fn verdict(r: &Report) -> String {
    if r.ok() {
        return format!(
            "OK: all {} expected deliveries present, none duplicated or corrupted{}",
            r.expected,
            if r.rules.is_empty() {
                ""
            } else {
                ", every rule met"
            }
        );
    }
    let mut why = Vec::new();
    for (n, what) in [
        (r.missing_count(), "missing"),
        (r.duplicated, "duplicated"),
        (r.corrupted, "corrupted"),
        (r.misdelivered, "misdelivered"),
    ] {
        if n > 0 {
            why.push(format!("{n} {what}"));
        }
    }
    for rule in r.rules.iter().filter(|x| !x.ok) {
        why.push(format!(
            "rule {}: {} of {} found{}{}",
            rule.kind,
            rule.found,
            rule.expected,
            if rule.extra > 0 {
                format!(", {} extra", rule.extra)
            } else {
                String::new()
            },
            if rule.misplaced > 0 {
                format!(", {} misplaced", rule.misplaced)
            } else {
                String::new()
            }
        ));
    }
    if let (Some(cut), true) = (
        &r.wait_cut,
        r.duplicated + r.corrupted + r.misdelivered == 0,
    ) {
        if r.rules.iter().all(|x| x.ok) {
            return format!(
                "INCOMPLETE: the wait for deliveries was cut short ({cut}): {} deliveries not found by then (listed as missing, not judged lost{}): verify again with spate verify DIR --wait",
                r.missing_count() + r.queued.len() as u64,
                if r.queued.is_empty() {
                    String::new()
                } else {
                    format!(", {} of them still in the MTA's queue", r.queued.len())
                }
            );
        }
    }
    if why.is_empty() && !r.queued.is_empty() {
        return format!(
            "INCOMPLETE: {} deliveries still in the MTA's queue when the check ended (not lost, not delivered yet): verify again once the queue has drained, or wait longer",
            r.queued.len()
        );
    }
    format!("FAILED: {}", why.join("; "))
}

/// What the latency figures are times of, by source: a figure says what it is based on.
pub fn basis(r: &Report, source: &str) -> &'static str {
    let scheme = source.split_once("://").map_or("", |(s, _)| s);
    match (scheme, r.to_the_second) {
        ("imap" | "imaps" | "imap+starttls", true) => "IMAP INTERNALDATE, whole seconds",
        ("imap" | "imaps" | "imap+starttls", false) => "when the server's IMAP IDLE announced each message: a server may hold these back (Dovecot up to 0.5 s, NOTIFY_DELAY_MSECS), and the figure then includes it; a Maildir's file times do not",
        ("jmap" | "jmaps", true) => "JMAP receivedAt, whole seconds",
        ("jmap" | "jmaps", false) => "when the server's JMAP push (a state event on its EventSource) announced each message, before it was asked for; a server that holds events back is timed with that delay",
        (_, true) => "the messages' dates, whole seconds",
        (_, false) => "the messages' file times in the mailbox",
    }
}
/// The delivery latency line: its percentiles and what they are based on, or why there
/// are none.
fn latency(s: &mut String, r: &Report, source: &str) {
    let us = |v: u64| fmt_duration(Duration::from_micros(v));
    let l = &r.latency;
    if let Some(why) = r.not_measurable {
        let hint = if why == super::ledger::TO_THE_SECOND {
            "; exact arrival times: a Maildir (--maildir), or inline --verify over IMAP IDLE or JMAP push"
        } else {
            "; for real delivery latency verify inline over IMAP IDLE: spate smtp ... --verify imap://HOST:PORT"
        };
        let _ = writeln!(
            s,
            "  latency    not measurable from this source ({why}){hint}"
        );
    } else if l.is_empty() {
        let _ = writeln!(s, "  latency    no arrival times");
    } else {
        let _ = writeln!(
            s,
            "  latency    p50 {}  p90 {}  p99 {}  max {}  (accept to arrival, {} deliveries{})\n             arrival: {}",
            us(l.value_at_quantile(0.5)),
            us(l.value_at_quantile(0.9)),
            us(l.value_at_quantile(0.99)),
            us(l.max()),
            l.len(),
            if r.to_the_second {
                "; to the second: the source's arrival times have whole seconds"
            } else {
                ""
            },
            basis(r, source)
        );
    }
}

pub fn render(r: &Report, source: &str, dir: &Path, show: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "spate verify: run {} ({}) against {source}",
        r.run_id,
        dir.display()
    );
    let mut rows: Vec<(&str, u64, String)> = vec![
        (
            "expected",
            r.expected,
            format!("{} accepted messages x their recipients", r.messages),
        ),
        ("delivered", r.delivered, String::new()),
        (
            "missing",
            r.missing_count(),
            "accepted and never found: lost".into(),
        ),
        ("duplicated", r.duplicated, "extra copies".into()),
        ("corrupted", r.corrupted, "body digest mismatch".into()),
        ("foreign", r.foreign, "not from this run; ignored".into()),
        (
            "unlogged",
            r.unlogged,
            "this run's, absent from sent.log".into(),
        ),
        (
            "misdelivered",
            r.misdelivered,
            "this run's, in a mailbox it was not sent to".into(),
        ),
    ];
    if r.indeterminate > 0 {
        rows.insert(
            3,
            (
                "indeterminate",
                r.indeterminate,
                format!(
                    "end of data sent, no final reply: {} found (recovered), {} not (allowed: the client could not know)",
                    r.recovered,
                    r.indeterminate - r.recovered
                ),
            ),
        );
    }
    if !r.queued.is_empty() {
        rows.insert(
            3,
            (
                "still queued",
                r.queued.len() as u64,
                "in the MTA's queue when the check ended: not delivered yet, not lost".into(),
            ),
        );
    }
    if r.unsure_rcpts > 0 {
        rows.insert(
            3,
            (
                "unsure rcpts",
                r.unsure_rcpts,
                format!(
                    "LMTP recipients with no reply of their own after others' 250: {} found, {} not (allowed: the client could not know)",
                    r.unsure_found,
                    r.unsure_rcpts - r.unsure_found
                ),
            ),
        );
    }
    for (name, n, note) in rows {
        let _ = write!(s, "  {name:<13}{n:>10}");
        if !note.is_empty() {
            let _ = write!(s, "  ({note})");
        }
        s.push('\n');
    }
    latency(&mut s, r, source);
    for note in &r.notes {
        let _ = writeln!(s, "  note       {note}");
    }
    for rule in &r.rules {
        let _ = writeln!(
            s,
            "  rule {:<12} per {:<9} expected {:>8}  found {:>8}  extra {}  misplaced {}",
            rule.kind, rule.per, rule.expected, rule.found, rule.extra, rule.misplaced
        );
    }
    if !r.missing.is_empty() {
        let n = r.missing.len().min(show);
        let _ = writeln!(
            s,
            "missing (seq recipient accepted_at; {n} of {}, all in missing.tsv):",
            r.missing.len()
        );
        for (seq, rcpt, at_us) in r.missing.iter().take(n) {
            let _ = writeln!(s, "  {seq}\t{rcpt}\t{}", rfc3339(at(*at_us)));
        }
    }
    if !r.duplicates.is_empty() {
        let n = r.duplicates.len().min(show);
        let _ = writeln!(
            s,
            "duplicated (seq recipient copies; {n} of {}, all with their likely cause in duplicates.tsv):",
            r.duplicates.len()
        );
        for d in r.duplicates.iter().take(n) {
            let _ = writeln!(s, "  {}\t{}\t{}", d.seq, d.recipient, d.copies);
        }
    }
    let _ = writeln!(s, "{}", verdict(r));
    s
}
