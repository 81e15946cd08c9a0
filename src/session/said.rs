//! What a run's text summary says of its protocol's own work (at the end of a run and
//! in `spate report --text`): its own counts in the protocol's words, and lines of its
//! own. The common figures (rates, classes, connections) are the report's.

use super::{mailbox, smtp, xmpp};
use crate::results::Summary;
use crate::units::fmt_bytes;

/// The protocol's part of the rate line, and lines of its own after it.
pub struct Said {
    pub counts: String,
    pub lines: Vec<String>,
}

/// What the summary of a run of `s.protocol` says of its own work.
pub fn said(s: &Summary) -> Said {
    let c = &s.totals;
    let bytes = format!("{} {}", fmt_bytes(c.bytes), s.words().bytes);
    let (counts, lines) = match s.protocol.as_str() {
        // Mailbox access counts visits and what they read, not messages sent.
        "pop3" | "imap" | "pop3+imap" => (
            format!(
                "retrieved {} messages ({})  deleted {}",
                c.get(mailbox::phase::RETRIEVED),
                fmt_bytes(c.get(mailbox::phase::RETRIEVED_BYTES)),
                c.get(mailbox::phase::DELETED)
            ),
            client_mix(s).into_iter().collect(),
        ),
        // No recipient is accepted or refused in XMPP: what counts is what arrived.
        "xmpp" => {
            let per_s = |n: u64| n as f64 / s.elapsed_s.max(1e-3);
            let (i, o) = (
                c.get(xmpp::phase::STANZAS_IN),
                c.get(xmpp::phase::STANZAS_OUT),
            );
            (
                format!(
                    "{bytes}  delivered {}  duplicates {}",
                    c.get(xmpp::phase::DELIVERED),
                    c.get(xmpp::phase::DUPLICATES)
                ),
                vec![format!(
                    "stanzas in {i} ({:.1}/s)  out {o} ({:.1}/s)  reconnections {}{}{}",
                    per_s(i),
                    per_s(o),
                    c.reconnections,
                    by_condition(s, xmpp::errors::SASL.name(), "SASL failures"),
                    by_condition(s, xmpp::errors::STREAM.name(), "stream errors"),
                )],
            )
        }
        "smtp" | "lmtp" => (
            format!(
                "{bytes}  recipients {} accepted / {} refused",
                c.get(smtp::phase::RCPT_ACCEPTED),
                c.get(smtp::phase::RCPT_REJECTED)
            ),
            Vec::new(),
        ),
        // Any other protocol: its own counters, as it named them.
        _ => (
            std::iter::once(bytes)
                .chain(c.own.said())
                .collect::<Vec<_>>()
                .join("  "),
            Vec::new(),
        ),
    };
    Said { counts, lines }
}

/// What `spate imap`'s client mix did, from the counts of its phases (a phase counts the
/// commands that succeeded, each on one message): nothing when it did nothing.
fn client_mix(s: &Summary) -> Option<String> {
    let n = |p: &str| {
        s.phases
            .iter()
            .find(|x| x.phase == p)
            .map_or(0, |x| x.count)
    };
    let (moved, emulated) = (n("move"), n("move_emulated"));
    let searches = [n("search"), n("search_date"), n("search_header")];
    let mut said = Vec::new();
    for (count, what) in [(n("append"), "appended"), (n("copy"), "copied")] {
        if count > 0 {
            said.push(format!("{what} {count}"));
        }
    }
    if moved + emulated > 0 {
        let how = match (moved > 0, emulated > 0) {
            (true, false) => "by MOVE",
            (false, true) => "by COPY+STORE+EXPUNGE, no MOVE",
            _ => "by MOVE and by COPY+STORE+EXPUNGE",
        };
        said.push(format!("moved {} ({how})", moved + emulated));
    }
    if n("create") > 0 {
        said.push(format!("target mailbox created {} times", n("create")));
    }
    if searches.iter().sum::<u64>() > 0 {
        said.push(format!(
            "searches {} (date {}, header {}, --search {}) with {} hits",
            searches.iter().sum::<u64>(),
            searches[1],
            searches[2],
            searches[0],
            s.totals.get(mailbox::phase::SEARCH_HITS)
        ));
    }
    if n("structure") > 0 {
        said.push(format!(
            "structures {}, parts {}",
            n("structure"),
            n("part")
        ));
    }
    (!said.is_empty()).then(|| format!("client mix: {}", said.join("  ")))
}

/// `  LABEL N (condition n, ...)` for the errors of one kind, or nothing when there are none.
fn by_condition(s: &Summary, kind: &str, label: &str) -> String {
    // The same condition can end streams in several phases: one count per condition.
    let mut by = std::collections::BTreeMap::<&str, u64>::new();
    for e in s.errors.iter().filter(|e| e.kind == kind) {
        *by.entry(e.text.as_str()).or_default() += e.count;
    }
    if by.is_empty() {
        return String::new();
    }
    let total: u64 = by.values().sum();
    let each: Vec<String> = by.iter().map(|(t, n)| format!("{t} {n}")).collect();
    format!("  {label} {total} ({})", each.join(", "))
}
