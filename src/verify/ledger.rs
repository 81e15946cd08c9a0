//! The accounting core: sources feed every message they find, one at a time, into a
//! [`Ledger`]; [`Ledger::report`] then compares what was found with the sent log.
//!
//! Identity of a delivery is (run id, seq, recipient mailbox): a message with N
//! recipients lands once in each of N mailboxes. Only the body is digested (servers add
//! Received, Delivered-To, Return-Path; line endings may change), and the digest is
//! compared with the one the tracking header carries.

use std::collections::HashMap;
use std::time::SystemTime;

use hdrhistogram::Histogram;

use super::finds::Finds;
use super::parse::{self, Trace};
use super::rules::{glob, Match, Per, Rule, Where};
use super::seen::Seen;
use super::sentlog::{Interner, SentLog, SentOutcome};
use crate::message::{body_digest, split_message, TRACE_HEADER};

/// What one ingested message turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingested {
    /// This (mailbox, source id) was ingested before: ignored.
    AlreadySeen,
    /// Carries a tracking header (of some run).
    Traced,
    /// Recognised by a rule as caused by one of spate's messages.
    Derived,
    /// Neither.
    Foreign,
}

#[derive(Debug, Clone)]
struct Hit {
    rule: u16,
    run: u32,
    seq: u64,
    /// The recipient the derived message is about, when it says (DSN Final-Recipient).
    rcpt: Option<u32>,
    mailbox: u32,
}

/// Everything found so far. Feed it with [`Ledger::ingest`] from any source.
#[derive(Debug)]
pub struct Ledger {
    rules: Vec<Rule>,
    /// Mailbox (and DSN recipient) names, lowercased.
    mailboxes: Interner,
    runs: Interner,
    /// Traced deliveries: about 12 bytes each while they are single copies.
    finds: Finds,
    hits: Vec<Hit>,
    /// (mailbox, source id) already ingested: about 9 bytes each.
    seen: Seen,
    foreign: u64,
    ingested: u64,
}

/// Latency and timing of one delivery of this run.
#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    pub arrived_us: i64,
    /// Arrival minus acceptance; negative when the source records the message before
    /// the server's reply.
    pub latency_us: i64,
    pub coarse: bool,
}

/// How good a source's arrival times are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Timing {
    /// Fine-grained (a file's time, the moment IMAP IDLE or JMAP push announced it).
    Exact(SystemTime),
    /// To the second (IMAP INTERNALDATE, JMAP receivedAt).
    Seconds(SystemTime),
    /// Not known: the Received header's date is used, if any.
    Unknown,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct RuleResult {
    pub kind: String,
    pub per: &'static str,
    pub expected: u64,
    /// Units with their derived message(s) present (at most `count` per unit).
    pub found: u64,
    /// Derived messages beyond the expected ones (duplicates, or for units not expected).
    pub extra: u64,
    /// Derived messages of this kind found in another mailbox than the rule says.
    pub misplaced: u64,
    pub ok: bool,
}

/// A delivery found more than once.
#[derive(Debug, Clone, PartialEq)]
pub struct Duplicate {
    pub seq: u64,
    pub recipient: String,
    pub copies: u32,
    pub cause: Cause,
}

/// Why a delivery may be there more than once, as far as spate can tell: it sends each
/// message once (a unit is never sent again), so every extra copy is the server's; what
/// the client knew of the message says which of the server's paths made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Accepted once, stored more than once.
    Accepted,
    /// No final reply came for the message (a server that died or was cut off).
    NoFinalReply,
    /// LMTP: this recipient had no reply of its own.
    NoOwnReply,
}

impl Cause {
    pub fn text(self) -> &'static str {
        match self {
            Cause::Accepted => "the server: sent once, accepted once, stored more than once",
            Cause::NoFinalReply => {
                "the server: sent once, no final reply (it died or was cut off), stored more than once"
            }
            Cause::NoOwnReply => {
                "the server: sent once, no reply for this recipient (LMTP), stored more than once"
            }
        }
    }
}

/// The comparison of a ledger with a sent log.
#[derive(Debug)]
pub struct Report {
    pub run_id: String,
    /// Messages the server accepted (the sent log's `accepted` lines).
    pub messages: u64,
    /// Messages whose end of data went out and that got no final reply (a timeout, a
    /// reset, a crash, or the run's end): the server may have them or not.
    pub indeterminate: u64,
    /// Of `indeterminate`: those found in at least one of their recipients' mailboxes.
    pub recovered: u64,
    /// Recipients of accepted LMTP messages that got no final reply of their own (the
    /// connection died after others' replies): not expected, found or not.
    pub unsure_rcpts: u64,
    /// Of `unsure_rcpts`: those found in their mailbox.
    pub unsure_found: u64,
    pub expected: u64,
    pub delivered: u64,
    pub duplicated: u64,
    pub corrupted: u64,
    pub foreign: u64,
    /// This run's messages found but absent from the sent log (accepted by the server
    /// while the client saw a failure, or a recipient the log does not list).
    pub unlogged: u64,
    /// This run's messages found in a mailbox that is none of the message's recipients.
    pub misdelivered: u64,
    /// (seq, recipient, accepted at µs) of every missing delivery, by seq.
    pub missing: Vec<(u64, String, i64)>,
    /// Every delivery found more than once: (seq, recipient, copies, the likely cause).
    pub duplicates: Vec<Duplicate>,
    /// Of the deliveries not found, those whose message was still in the MTA's queue when
    /// the check ended (as `missing`): not delivered yet, not lost.
    pub queued: Vec<(u64, String, i64)>,
    pub latency: Histogram<u64>,
    /// Why the latency cannot be measured from this source's arrival times (then
    /// `latency` is empty).
    pub not_measurable: Option<&'static str>,
    /// Most arrival times have whole seconds (IMAP INTERNALDATE, a Date header): the
    /// latencies are to the second.
    pub to_the_second: bool,
    /// Deliveries whose arrival time is unknown (no file time, no Received date).
    pub no_time: u64,
    pub arrivals: Vec<Arrival>,
    /// (accept time µs, deliveries expected from it) per accepted message.
    pub injected: Vec<(i64, u64)>,
    pub rules: Vec<RuleResult>,
    pub start_us: i64,
    /// What the source has to say beside the counts (a server that refused push).
    pub notes: Vec<String>,
    /// The wait for deliveries was cut short (Ctrl-C or SIGTERM, or the run itself was
    /// stopped by one): what, and after how long of how long. Deliveries not found by
    /// then are listed as missing but not judged lost.
    pub wait_cut: Option<String>,
}

/// Why whole-second arrival times cannot time deliveries that take under a second.
pub const TO_THE_SECOND: &str = "arrival times to the second (IMAP INTERNALDATE, JMAP receivedAt and Date headers have whole seconds) for deliveries that take under a second";

impl Report {
    /// A delivery found `copies` times: the extra copies counted, and named when more
    /// than one.
    fn duplicate(&mut self, seq: u64, recipient: &str, copies: u32, cause: Cause) {
        if copies > 1 {
            self.duplicated += u64::from(copies - 1);
            self.duplicates.push(Duplicate {
                seq,
                recipient: recipient.to_string(),
                copies,
                cause,
            });
        }
    }

    /// The latency histogram from the arrivals, or why their times cannot give one: a
    /// source that records a message before the server's reply (the embedded server
    /// stores before it says 250), or times to the second when the latencies are below
    /// a second. A number that cannot be measured is not shown as 0.
    fn measure_latency(&mut self) {
        let n = self.arrivals.len();
        if n == 0 {
            return;
        }
        // A time to the second may read up to a second before the accept time it follows
        // (truncated): early only beyond that.
        let early = self
            .arrivals
            .iter()
            .filter(|a| a.latency_us < if a.coarse { -1_000_000 } else { 0 })
            .count();
        let coarse = self.arrivals.iter().filter(|a| a.coarse).count();
        let mut lat: Vec<i64> = self.arrivals.iter().map(|a| a.latency_us).collect();
        lat.sort_unstable();
        let median = lat[n / 2];
        self.to_the_second = coarse * 2 > n;
        self.not_measurable = if self.to_the_second && median < 1_000_000 {
            Some(TO_THE_SECOND)
        } else if early * 2 > n {
            Some("this source records a message before the server's reply")
        } else {
            None
        };
        if self.not_measurable.is_none() {
            for &l in &lat {
                // `record`, not `saturating_record`: the latter clamps at the current top
                // instead of growing the auto-resizing histogram. A delivery a few µs
                // before its accept time (stored, then the reply sent) is zero latency.
                let _ = self.latency.record(l.max(0) as u64);
            }
        }
    }

    pub fn missing_count(&self) -> u64 {
        self.missing.len() as u64
    }

    /// Nothing missing, still queued, duplicated, corrupted or misdelivered, every rule met.
    pub fn ok(&self) -> bool {
        self.missing.is_empty()
            && self.queued.is_empty()
            && self.duplicated == 0
            && self.corrupted == 0
            && self.misdelivered == 0
            && self.rules.iter().all(|r| r.ok)
    }

    /// Everything expected has arrived (more may still come: duplicates).
    pub fn complete(&self) -> bool {
        self.missing.is_empty() && self.rules.iter().all(|r| r.found >= r.expected)
    }
}

fn to_us(t: SystemTime) -> i64 {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_micros() as i64,
        Err(e) => -(e.duration().as_micros() as i64),
    }
}

impl Ledger {
    pub fn new(rules: Vec<Rule>) -> Ledger {
        Ledger {
            rules,
            mailboxes: Interner::default(),
            runs: Interner::default(),
            finds: Finds::default(),
            hits: Vec::new(),
            seen: Seen::default(),
            foreign: 0,
            ingested: 0,
        }
    }

    /// Messages ingested so far (not counting ones seen twice).
    pub fn ingested(&self) -> u64 {
        self.ingested
    }

    /// Has this message (same mailbox, same source id) been ingested? Lets a polling
    /// source skip reading it again.
    pub fn seen(&self, mailbox: &str, source_id: &str) -> bool {
        self.mailboxes
            .get(mailbox)
            .is_some_and(|m| self.seen.contains(m, source_id))
    }

    /// Feeds one message found in `mailbox` (an address). `source_id` identifies it within
    /// the mailbox across polls (Maildir base name, IMAP UID, POP3 UIDL): a message
    /// ingested twice under the same id counts once. `arrived` is when the server
    /// delivered it if the source knows (file mtime, INTERNALDATE); otherwise the
    /// Received header's date is used.
    pub fn ingest(
        &mut self,
        mailbox: &str,
        source_id: &str,
        raw: &[u8],
        arrived: Timing,
    ) -> Ingested {
        let mbx = self.mailboxes.intern(mailbox);
        if !self.seen.insert(mbx, source_id) {
            return Ingested::AlreadySeen;
        }
        self.ingested += 1;
        let (head, body) = split_message(raw);
        let hs = parse::headers(head);
        if let Some(trace) = parse::header(&hs, TRACE_HEADER).and_then(parse::parse_trace) {
            let (arrived_us, coarse) = match arrived {
                Timing::Exact(t) => (to_us(t), false),
                Timing::Seconds(t) => (to_us(t), true),
                Timing::Unknown => (parse::header_arrival_us(&hs).unwrap_or(i64::MIN), true),
            };
            let corrupted = trace.digest != Some(body_digest(body));
            let run = self.runs.intern(&trace.run);
            self.finds
                .add(run, trace.seq, mbx, corrupted, arrived_us, coarse);
            return Ingested::Traced;
        }
        if self.derive(mbx, &hs, body) {
            return Ingested::Derived;
        }
        self.foreign += 1;
        Ingested::Foreign
    }

    /// Tries the rules in order on a message without a tracking header.
    fn derive(&mut self, mbx: u32, hs: &[(String, String)], body: &[u8]) -> bool {
        for (i, rule) in self.rules.iter().enumerate() {
            if let Some(p) = &rule.subject {
                if !glob(p, parse::header(hs, "Subject").unwrap_or("")) {
                    continue;
                }
            }
            if let Some(p) = &rule.from {
                if !glob(p, parse::header(hs, "From").unwrap_or("")) {
                    continue;
                }
            }
            let (original, rcpts): ((String, u64), Vec<String>) = match &rule.matcher {
                Match::Trace => {
                    let traces: Vec<Trace> = parse::traces_in_body(body);
                    let Some(t) = traces.into_iter().next() else {
                        continue;
                    };
                    ((t.run, t.seq), parse::dsn_recipients(body))
                }
                m => {
                    let name = match m {
                        Match::InReplyTo => "In-Reply-To",
                        Match::References => "References",
                        Match::Header(h) => h.as_str(),
                        Match::Trace => unreachable!(),
                    };
                    let ids: Vec<_> = hs
                        .iter()
                        .filter(|(n, _)| n.eq_ignore_ascii_case(name))
                        .flat_map(|(_, v)| parse::spate_message_ids(v))
                        .collect();
                    let Some(first) = ids.into_iter().next() else {
                        continue;
                    };
                    (first, Vec::new())
                }
            };
            let run = self.runs.intern(&original.0);
            let rule = i as u16;
            if rcpts.is_empty() {
                self.hits.push(Hit {
                    rule,
                    run,
                    seq: original.1,
                    rcpt: None,
                    mailbox: mbx,
                });
            }
            for r in rcpts {
                let rcpt = Some(self.mailboxes.intern(&r));
                self.hits.push(Hit {
                    rule,
                    run,
                    seq: original.1,
                    rcpt,
                    mailbox: mbx,
                });
            }
            return true;
        }
        false
    }

    /// Compares what was found with the sent log.
    pub fn report(&self, log: &SentLog) -> Report {
        let run = self.runs.get(&log.run_id);
        // Sent-log address id → ledger mailbox id.
        let mbx_of: Vec<Option<u32>> = (0..log.addrs.len() as u32)
            .map(|i| self.mailboxes.get(log.addrs.name(i)))
            .collect();
        let undelivered: Vec<bool> = (0..log.addrs.len() as u32)
            .map(|i| {
                self.rules
                    .iter()
                    .any(|r| r.undelivered && glob(&r.to, log.addrs.name(i)))
            })
            .collect();
        let mut rep = Report {
            run_id: log.run_id.clone(),
            messages: log.accepted().count() as u64,
            indeterminate: 0,
            recovered: 0,
            unsure_rcpts: 0,
            unsure_found: 0,
            expected: 0,
            delivered: 0,
            duplicated: 0,
            corrupted: 0,
            foreign: self.foreign,
            unlogged: 0,
            misdelivered: 0,
            missing: Vec::new(),
            duplicates: Vec::new(),
            queued: Vec::new(),
            latency: Histogram::new(3).expect("3 significant figures is valid"),
            not_measurable: None,
            to_the_second: false,
            no_time: 0,
            arrivals: Vec::with_capacity(log.deliveries() as usize),
            injected: Vec::with_capacity(log.messages.len()),
            rules: Vec::new(),
            start_us: log.start_us,
            notes: Vec::new(),
            wait_cut: None,
        };
        for m in &log.messages {
            if m.outcome != SentOutcome::Accepted {
                self.indeterminate(log, m, run, &mbx_of, &mut rep);
                continue;
            }
            let before = rep.expected;
            for (&r, &unsure) in log.recipients(m).iter().zip(log.unsure(m)) {
                if undelivered[r as usize] {
                    continue;
                }
                let found = run
                    .zip(mbx_of[r as usize])
                    .and_then(|(run, mbx)| self.finds.get(run, m.seq, mbx));
                if unsure {
                    rep.unsure_rcpts += 1;
                    if let Some(f) = found {
                        rep.unsure_found += 1;
                        rep.duplicate(m.seq, log.addrs.name(r), f.copies, Cause::NoOwnReply);
                        rep.corrupted += f.corrupted as u64;
                    }
                    continue;
                }
                rep.expected += 1;
                let Some(f) = found else {
                    rep.missing
                        .push((m.seq, log.addrs.name(r).to_string(), m.accepted_us));
                    continue;
                };
                rep.delivered += 1;
                rep.duplicate(m.seq, log.addrs.name(r), f.copies, Cause::Accepted);
                rep.corrupted += f.corrupted as u64;
                if f.arrived_us == i64::MIN {
                    rep.no_time += 1;
                } else {
                    rep.arrivals.push(Arrival {
                        arrived_us: f.arrived_us,
                        latency_us: f.arrived_us - m.accepted_us,
                        coarse: f.coarse,
                    });
                }
            }
            rep.injected.push((m.accepted_us, rep.expected - before));
        }
        rep.measure_latency();
        self.strays(log, run, &mbx_of, &undelivered, &mut rep);
        for (i, rule) in self.rules.iter().enumerate() {
            rep.rules
                .push(self.rule_result(i as u16, rule, run, log, &mut rep.foreign));
        }
        rep
    }

    /// A message the server may have: found (recovered, with its extra copies and
    /// corruptions counted) or not (allowed: the client could not know). Not expected,
    /// and without an accept time its deliveries give no latency.
    fn indeterminate(
        &self,
        log: &SentLog,
        m: &super::sentlog::Sent,
        run: Option<u32>,
        mbx_of: &[Option<u32>],
        rep: &mut Report,
    ) {
        rep.indeterminate += 1;
        let mut found = false;
        for &r in log.recipients(m) {
            let f = run
                .zip(mbx_of[r as usize])
                .and_then(|(run, mbx)| self.finds.get(run, m.seq, mbx));
            if let Some(f) = f {
                found = true;
                rep.duplicate(m.seq, log.addrs.name(r), f.copies, Cause::NoFinalReply);
                rep.corrupted += f.corrupted as u64;
            }
        }
        rep.recovered += u64::from(found);
    }

    /// Everything found that the loop over the sent log did not count: other runs'
    /// messages (foreign), and this run's where no delivery was expected: in a mailbox
    /// that is none of the message's recipients (misdelivered), or of a message the sent
    /// log does not list or at a recipient it expected not to reach (unlogged).
    fn strays(
        &self,
        log: &SentLog,
        run: Option<u32>,
        mbx_of: &[Option<u32>],
        undelivered: &[bool],
        rep: &mut Report,
    ) {
        self.finds.each(|r, seq, mbx, f| {
            if Some(r) != run {
                rep.foreign += f.copies as u64;
                return;
            }
            let rcpts = log.find(seq).map(|m| log.recipients(m));
            let at = |i: &u32| mbx_of[*i as usize] == Some(mbx);
            match rcpts {
                // Counted above.
                Some(rs) if rs.iter().any(|i| at(i) && !undelivered[*i as usize]) => {}
                Some(rs) if !rs.iter().any(at) => rep.misdelivered += 1,
                _ => rep.unlogged += 1,
            }
        });
    }

    fn rule_result(
        &self,
        idx: u16,
        rule: &Rule,
        run: Option<u32>,
        log: &SentLog,
        foreign: &mut u64,
    ) -> RuleResult {
        let mut by_seq = self.rule_hits(idx, run, foreign);
        let mut res = RuleResult {
            kind: rule.kind.clone(),
            per: match rule.per {
                Per::Message => "message",
                Per::Recipient => "recipient",
            },
            expected: 0,
            found: 0,
            extra: 0,
            misplaced: 0,
            ok: false,
        };
        for m in &log.messages {
            if m.outcome != SentOutcome::Accepted {
                // What a message the server may have caused is neither expected nor extra.
                by_seq.remove(&m.seq);
                continue;
            }
            let unit = Expected {
                mailboxes: &self.mailboxes,
                rule,
                sender: log.addrs.name(m.from),
                rcpts: log
                    .recipients(m)
                    .iter()
                    .map(|&r| log.addrs.name(r))
                    .filter(|a| glob(&rule.to, a))
                    .collect(),
            };
            let hits = by_seq.remove(&m.seq).unwrap_or_default();
            if unit.rcpts.is_empty() {
                res.extra += hits.len() as u64;
                continue;
            }
            match rule.per {
                Per::Message => unit.per_message(&mut res, hits),
                Per::Recipient => unit.per_recipient(&mut res, hits),
            }
        }
        // Hits about messages the sent log does not have.
        res.extra += by_seq.values().map(|v| v.len() as u64).sum::<u64>();
        res.ok = res.found == res.expected && res.extra == 0 && res.misplaced == 0;
        res
    }

    /// This run's hits of rule `idx` by seq; the other runs' are counted in `foreign`.
    fn rule_hits(&self, idx: u16, run: Option<u32>, foreign: &mut u64) -> HashMap<u64, Vec<&Hit>> {
        let mut by_seq: HashMap<u64, Vec<&Hit>> = HashMap::new();
        for h in self.hits.iter().filter(|h| h.rule == idx) {
            if Some(h.run) == run {
                by_seq.entry(h.seq).or_default().push(h);
            } else {
                // Caused by another run's message: not this run's business.
                *foreign += 1;
            }
        }
        by_seq
    }
}

/// What a rule expects of one sent message.
struct Expected<'a> {
    mailboxes: &'a Interner,
    rule: &'a Rule,
    sender: &'a str,
    /// The message's recipients the rule applies to.
    rcpts: Vec<&'a str>,
}

impl<'a> Expected<'a> {
    fn name(&self, id: u32) -> &'a str {
        self.mailboxes.name(id)
    }

    /// Is the hit in the mailbox the rule names (for recipient `rcpt` if known)?
    fn placed(&self, h: &Hit, rcpt: Option<&str>) -> bool {
        match &self.rule.within {
            Where::Sender => self.name(h.mailbox) == self.sender,
            Where::Address(a) => self.name(h.mailbox) == a,
            Where::Recipient => match rcpt {
                Some(r) => self.name(h.mailbox) == r,
                None => self.rcpts.contains(&self.name(h.mailbox)),
            },
        }
    }

    fn per_message(&self, res: &mut RuleResult, hits: Vec<&Hit>) {
        let count = self.rule.count as u64;
        res.expected += count;
        let (ok, bad): (Vec<_>, Vec<_>) = hits.into_iter().partition(|h| self.placed(h, None));
        res.misplaced += bad.len() as u64;
        let n = ok.len() as u64;
        res.found += n.min(count);
        res.extra += n.saturating_sub(count);
    }

    fn per_recipient(&self, res: &mut RuleResult, hits: Vec<&Hit>) {
        let count = self.rule.count as u64;
        res.expected += count * self.rcpts.len() as u64;
        // Hits naming their recipient first; the others fill the gaps.
        let mut per_rcpt = vec![0u64; self.rcpts.len()];
        let mut anonymous = 0u64;
        for h in hits {
            let about = match (h.rcpt, &self.rule.within) {
                (Some(r), _) => Some(self.name(r)),
                (None, Where::Recipient) => Some(self.name(h.mailbox)),
                (None, _) => None,
            };
            if !self.placed(h, about) {
                res.misplaced += 1;
                continue;
            }
            match about {
                Some(a) => match self.rcpts.iter().position(|r| *r == a) {
                    Some(i) => per_rcpt[i] += 1,
                    None => res.extra += 1,
                },
                None => anonymous += 1,
            }
        }
        for n in per_rcpt {
            let mut n = n;
            if n < count {
                let fill = (count - n).min(anonymous);
                anonymous -= fill;
                n += fill;
            }
            res.found += n.min(count);
            res.extra += n.saturating_sub(count);
        }
        res.extra += anonymous;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::hex;
    use crate::verify::rules;

    fn msg(run: &str, seq: u64, body: &str) -> Vec<u8> {
        let d = hex(&body_digest(body.as_bytes()));
        format!(
            "Message-ID: <{seq}.{run}@spate.invalid>\r\n{TRACE_HEADER}: run={run}; seq={seq}; sent=1; digest={d}; size=1\r\n\r\n{body}"
        )
        .into_bytes()
    }

    fn log() -> SentLog {
        let text = "# spate sent log v1 run=r1\n\
            seq\taccepted_at\tdigest\tbytes\tfrom\trecipients\n\
            0\t2026-01-01T00:00:00Z\t00\t1\ts@x.test\ta@x.test,b@x.test\n\
            1\t2026-01-01T00:00:01Z\t00\t1\ts@x.test\ta@x.test\n\
            2\t2026-01-01T00:00:02Z\t00\t1\ts@x.test\tghost@x.test\n";
        SentLog::parse(text.as_bytes(), "t").unwrap()
    }

    #[test]
    fn counts_every_class() {
        let mut l = Ledger::new(Vec::new());
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_767_225_600);
        assert_eq!(
            l.ingest("a@x.test", "1", &msg("r1", 0, "hi\r\n"), Timing::Exact(t)),
            Ingested::Traced
        );
        assert_eq!(
            l.ingest("a@x.test", "1", &msg("r1", 0, "hi\r\n"), Timing::Exact(t)),
            Ingested::AlreadySeen
        );
        // Line endings changed by the store: still intact.
        let lf = String::from_utf8(msg("r1", 0, "hi\r\n"))
            .unwrap()
            .replace("\r\n", "\n");
        l.ingest("B@x.test", "2", lf.as_bytes(), Timing::Unknown);
        l.ingest("b@x.test", "3", lf.as_bytes(), Timing::Unknown);
        let mut bad = msg("r1", 1, "hi\r\n");
        *bad.last_mut().unwrap() = b'X';
        l.ingest("a@x.test", "4", &bad, Timing::Unknown);
        assert_eq!(
            l.ingest("a@x.test", "5", &msg("other", 0, "x"), Timing::Unknown),
            Ingested::Traced
        );
        assert_eq!(
            l.ingest("a@x.test", "6", b"Subject: hi\r\n\r\nx", Timing::Unknown),
            Ingested::Foreign
        );
        let r = l.report(&log());
        assert_eq!(r.expected, 4);
        assert_eq!(r.delivered, 3);
        assert_eq!(r.duplicated, 1);
        assert_eq!(r.corrupted, 1);
        assert_eq!(r.foreign, 2);
        assert_eq!(
            r.missing,
            vec![(2, "ghost@x.test".into(), 1_767_225_602_000_000)]
        );
        assert_eq!(r.latency.len(), 1);
        assert!(!r.ok());
    }

    #[test]
    fn bounce_rule_counts_per_recipient() {
        let rules = rules::parse(
            "bounce per=recipient to=ghost@* undelivered in=sender match=trace",
            "t",
        )
        .unwrap();
        let mut l = Ledger::new(rules);
        l.ingest("a@x.test", "1", &msg("r1", 0, "a"), Timing::Unknown);
        l.ingest("b@x.test", "1", &msg("r1", 0, "a"), Timing::Unknown);
        l.ingest("a@x.test", "2", &msg("r1", 1, "a"), Timing::Unknown);
        let r = l.report(&log());
        assert_eq!((r.expected, r.delivered), (3, 3));
        assert_eq!((r.rules[0].expected, r.rules[0].found), (1, 0));
        assert!(!r.ok() && !r.complete());
        let orig = String::from_utf8(msg("r1", 2, "a")).unwrap();
        let dsn = format!(
            "Subject: Undelivered Mail\r\n\r\nReporting-MTA: dns; x\r\n\r\nFinal-Recipient: rfc822; ghost@x.test\r\nAction: failed\r\n\r\n{orig}"
        );
        assert_eq!(
            l.ingest("s@x.test", "b1", dsn.as_bytes(), Timing::Unknown),
            Ingested::Derived
        );
        let r = l.report(&log());
        assert_eq!((r.rules[0].found, r.rules[0].extra), (1, 0));
        assert!(r.ok(), "{:?}", r.rules);
        // A second bounce for the same recipient is extra; one in the wrong box misplaced.
        l.ingest("s@x.test", "b2", dsn.as_bytes(), Timing::Unknown);
        l.ingest("a@x.test", "b3", dsn.as_bytes(), Timing::Unknown);
        let r = l.report(&log());
        assert_eq!(
            (r.rules[0].found, r.rules[0].extra, r.rules[0].misplaced),
            (1, 1, 1)
        );
        assert!(!r.ok());
    }

    #[test]
    fn reply_rules_match_message_ids() {
        let rules = rules::parse(
            "notice per=message match=in-reply-to subject=accepted*\n\
             receipt per=message match=header:X-Receipt-For",
            "t",
        )
        .unwrap();
        let mut l = Ledger::new(rules);
        for seq in 0..3 {
            let n = format!(
                "Subject: Accepted {seq}\r\nIn-Reply-To: <{seq}.r1@spate.invalid>\r\n\r\nok"
            );
            assert_eq!(
                l.ingest(
                    "s@x.test",
                    &format!("n{seq}"),
                    n.as_bytes(),
                    Timing::Unknown
                ),
                Ingested::Derived
            );
        }
        let rc = "Subject: Receipt\r\nX-Receipt-For: <1.r1@spate.invalid>\r\n\r\nok";
        l.ingest("s@x.test", "r1", rc.as_bytes(), Timing::Unknown);
        let r = l.report(&log());
        assert_eq!(
            (r.rules[0].expected, r.rules[0].found, r.rules[0].ok),
            (3, 3, true)
        );
        assert_eq!(
            (r.rules[1].expected, r.rules[1].found, r.rules[1].ok),
            (3, 1, false)
        );
    }

    /// Latencies from arrival times that cannot resolve them are not reported as zeros.
    #[test]
    fn latency_is_not_measurable_from_coarse_or_early_times() {
        use std::time::{Duration, UNIX_EPOCH};
        // The log accepts seq 0 at 00:00:00 (to a and b) and seq 1 at 00:00:01 (to a).
        let t0 = UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        let feed = |timing: &dyn Fn(u64) -> Timing| {
            let mut l = Ledger::new(Vec::new());
            l.ingest("a@x.test", "1", &msg("r1", 0, "a"), timing(0));
            l.ingest("b@x.test", "2", &msg("r1", 0, "a"), timing(0));
            l.ingest("a@x.test", "3", &msg("r1", 1, "a"), timing(1));
            l.report(&log())
        };
        // To the second, and under a second after acceptance: not measurable.
        let r = feed(&|seq| Timing::Seconds(t0 + Duration::from_secs(seq)));
        assert_eq!(r.not_measurable, Some(TO_THE_SECOND));
        // Truncated to the second (INTERNALDATE): up to a second before the accept time,
        // which is the resolution, not a source that records before the reply.
        let r = feed(&|seq| {
            Timing::Seconds(t0 + Duration::from_secs(seq) - Duration::from_millis(400))
        });
        assert_eq!(r.not_measurable, Some(TO_THE_SECOND));
        assert!(r.latency.is_empty());
        assert_eq!(r.arrivals.len(), 3, "the timeline keeps them");
        // To the second, but five seconds late: that resolution can tell.
        let r = feed(&|seq| Timing::Seconds(t0 + Duration::from_secs(seq + 5)));
        assert_eq!(r.not_measurable, None);
        assert!(r.to_the_second);
        assert_eq!(r.latency.len(), 3);
        // Recorded before the server's reply (stored, then 250).
        let r =
            feed(&|seq| Timing::Exact(t0 + Duration::from_secs(seq) - Duration::from_millis(1)));
        assert!(r
            .not_measurable
            .unwrap()
            .contains("before the server's reply"));
        // Exact and after: measured.
        let r =
            feed(&|seq| Timing::Exact(t0 + Duration::from_secs(seq) + Duration::from_millis(40)));
        assert_eq!(r.not_measurable, None);
        assert!((39_000..=41_000).contains(&r.latency.value_at_quantile(0.5)));
    }
}
