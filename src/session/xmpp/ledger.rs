//! The delivery ledger of an XMPP run: how many recipients each stamped stanza was sent to,
//! how many received it, which arrived twice, and what is still missing at the end.
//! Entries leave the ledger as soon as every recipient has its copy, so memory follows the
//! stanzas in flight, not the length of the run.

use std::collections::HashMap;
use std::sync::Mutex;

use super::Traffic;

/// What a recipient's copy of a stanza is, for the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// A recipient's first copy.
    First,
    /// The copy that completes the set: every recipient has one now (a fan-out's last).
    Last,
    /// A copy beyond the number of recipients it was sent to.
    Duplicate,
    /// Not a stanza this run sent (another run's, or a forged stamp).
    Unknown,
}

/// What kinds of stanza the ledger tells apart (the index of [`super::Traffic`]).
pub const KINDS: usize = 4;

/// A stanza still awaited: recipients it was sent to, copies received so far, its kind,
/// and whether a stream of the run died while it was in flight.
#[derive(Debug, Clone, Copy)]
struct Open {
    want: u32,
    got: u32,
    kind: u8,
    doubt: bool,
}

#[derive(Default)]
struct Inner {
    /// seq → what it awaits.
    open: HashMap<u64, Open>,
    /// Every seq below this one that is not open was delivered in full.
    next: u64,
    /// Deliveries the open stanzas still await (what [`Ledger::pending`] answers, kept
    /// as it changes: every session polls it at the end of a run).
    awaited: u64,
    sent: [u64; KINDS],
    expected: [u64; KINDS],
    delivered: [u64; KINDS],
    duplicates: [u64; KINDS],
    bounced: [u64; KINDS],
}

/// Shared by every session of a run.
#[derive(Default)]
pub struct Ledger {
    inner: Mutex<Inner>,
    /// In-band registrations (--register): accounts created, already there, refused.
    pub registered: [std::sync::atomic::AtomicU64; 3],
    /// --roster all: subscriptions approved, refused, and the sessions whose roster held
    /// every other session already.
    pub roster: [std::sync::atomic::AtomicU64; 3],
    /// XEP-0198: sessions that enabled it, stanzas the server acknowledged, stanzas not
    /// acknowledged when their stream died (resumed or not), streams resumed, stanzas
    /// written again after a resumption.
    pub sm: [std::sync::atomic::AtomicU64; 5],
    /// Stanzas read by all sessions, counted only with `--settle` (which watches it).
    pub read_total: std::sync::atomic::AtomicU64,
    /// `--settle`: what the wait after the logins found.
    settled: Mutex<Option<super::settle::Settled>>,
}

/// One kind's account (or all kinds').
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    /// Stamped stanzas sent, and the deliveries they called for (one per recipient).
    pub sent: u64,
    pub expected: u64,
    /// First copies received, copies beyond the first, and deliveries still missing.
    pub delivered: u64,
    pub duplicates: u64,
    pub missing: u64,
    /// Deliveries the server refused with an error bounce (so neither delivered nor
    /// missing): expected = delivered + missing + bounced + indeterminate.
    pub bounced: u64,
    /// Deliveries never seen of stanzas that were in flight when a stream of the run
    /// died (the server ended it, a reset, a crash): the server may have dropped them
    /// with the stream, which the client cannot tell from a loss. Not missing.
    #[serde(default)]
    pub indeterminate: u64,
}

/// A stanza some recipients never got.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Missing {
    pub seq: u64,
    pub kind: &'static str,
    pub missing: u32,
}

/// The ledger's account at the end of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Account {
    #[serde(flatten)]
    pub total: Counts,
    /// Per kind of traffic sent (message, multicast, presence), kinds not sent left out.
    pub kinds: Vec<(&'static str, Counts)>,
    /// The first stanzas that lack some deliveries.
    pub missing_sample: Vec<Missing>,
    /// Stanzas in doubt (in flight when their stream died, not acknowledged) that some
    /// recipient never got: the run counted them accepted when it wrote them; their
    /// outcome is unknown, so the run's totals count them indeterminate instead.
    #[serde(skip)]
    pub stanzas_in_doubt: u64,
}

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stanza `seq` of `kind` is about to go to `recipients` recipients (call before
    /// writing it, so that a fast recipient never finds it unknown).
    pub fn sending(&self, seq: u64, kind: Traffic, recipients: u32) {
        let mut l = self.lock();
        let k = kind as usize;
        l.open.insert(
            seq,
            Open {
                want: recipients,
                got: 0,
                kind: k as u8,
                doubt: false,
            },
        );
        l.awaited += u64::from(recipients);
        l.next = l.next.max(seq + 1);
        l.sent[k] += 1;
        l.expected[k] += u64::from(recipients);
    }

    /// Stanza `seq` was not written after all (the stream broke): nobody can receive it.
    pub fn not_sent(&self, seq: u64) {
        let mut l = self.lock();
        if let Some(o) = l.open.remove(&seq) {
            l.awaited -= u64::from(o.want.saturating_sub(o.got));
            l.sent[o.kind as usize] -= 1;
            l.expected[o.kind as usize] -= u64::from(o.want);
        }
    }

    /// A recipient received stanza `seq`, of `kind` as its stamp says.
    pub fn received(&self, seq: u64, kind: Traffic) -> Arrival {
        let mut l = self.lock();
        let next = l.next;
        // The kind the sender entered, not the one a forged stamp claims.
        let (done, k) = match l.open.get_mut(&seq) {
            Some(o) => {
                o.got += 1;
                (o.got >= o.want, o.kind as usize)
            }
            // A presence is state, not a message: a server sends a contact's current one
            // again to a session that becomes available (RFC 6121 §4.2.2), so a copy of
            // one already delivered is no duplicate.
            None if seq < next && kind == Traffic::Presence => return Arrival::Unknown,
            None if seq < next => {
                l.duplicates[kind as usize] += 1;
                return Arrival::Duplicate;
            }
            None => return Arrival::Unknown,
        };
        l.delivered[k] += 1;
        l.awaited -= 1;
        if done {
            l.open.remove(&seq);
            Arrival::Last
        } else {
            Arrival::First
        }
    }

    /// The server answered stanza `seq` with an error bounce: the deliveries it still
    /// awaited are refused, not missing. False when it was not open (a late bounce).
    pub fn bounced(&self, seq: u64) -> bool {
        let mut l = self.lock();
        let Some(o) = l.open.remove(&seq) else {
            return false;
        };
        let left = u64::from(o.want.saturating_sub(o.got));
        l.awaited -= left;
        l.bounced[o.kind as usize] += left;
        true
    }

    /// A stream of the run died (not closed by spate): every stanza in flight now may have
    /// been dropped with it, by the server or on the wire, without a trace the client could
    /// see. What of them never arrives is indeterminate, not missing.
    pub fn stream_died(&self) {
        for o in self.lock().open.values_mut() {
            o.doubt = true;
        }
    }

    /// Stanzas a dying stream had written and the server had not acknowledged (XEP-0198):
    /// what of them never arrives is indeterminate; the others are the server's.
    pub fn in_doubt(&self, seqs: &[u64]) {
        let mut l = self.lock();
        for s in seqs {
            if let Some(o) = l.open.get_mut(s) {
                o.doubt = true;
            }
        }
    }

    /// Adds to the stream-management counts: sessions that enabled it, stanzas the
    /// server acknowledged, stanzas unacknowledged when their stream died.
    pub fn stream_management(&self, enabled: u64, acked: u64, unacked: u64) {
        for (i, n) in [enabled, acked, unacked].into_iter().enumerate() {
            if n > 0 {
                self.sm[i].fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// `--settle`: the wait after the logins is over, with what it found.
    pub fn settle(&self, s: super::settle::Settled) {
        *self.settled.lock().unwrap_or_else(|p| p.into_inner()) = Some(s);
    }

    /// What the wait after the logins found, once it is over.
    pub fn settled(&self) -> Option<super::settle::Settled> {
        self.settled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Deliveries still awaited.
    pub fn pending(&self) -> u64 {
        self.lock().awaited
    }

    /// The account so far (at the end of a run: the missing deliveries).
    pub fn account(&self) -> Account {
        let l = self.lock();
        let mut indeterminate = [0u64; KINDS];
        for o in l.open.values().filter(|o| o.doubt) {
            indeterminate[o.kind as usize] += u64::from(o.want.saturating_sub(o.got));
        }
        let mut open: Vec<Missing> = l
            .open
            .iter()
            .filter(|(_, o)| !o.doubt)
            .map(|(seq, o)| Missing {
                seq: *seq,
                kind: Traffic::ALL[o.kind as usize].name(),
                missing: o.want.saturating_sub(o.got),
            })
            .collect();
        open.sort_unstable_by_key(|m| m.seq);
        let mut missing = [0u64; KINDS];
        for m in &open {
            missing[Traffic::from_name(m.kind) as usize] += u64::from(m.missing);
        }
        let counts = |k: usize| Counts {
            sent: l.sent[k],
            expected: l.expected[k],
            delivered: l.delivered[k],
            duplicates: l.duplicates[k],
            missing: missing[k],
            bounced: l.bounced[k],
            indeterminate: indeterminate[k],
        };
        let mut total = Counts::default();
        let mut kinds = Vec::new();
        for k in 0..KINDS {
            let c = counts(k);
            total.sent += c.sent;
            total.expected += c.expected;
            total.delivered += c.delivered;
            total.duplicates += c.duplicates;
            total.missing += c.missing;
            total.bounced += c.bounced;
            total.indeterminate += c.indeterminate;
            if c.sent > 0 || c.duplicates > 0 {
                kinds.push((Traffic::ALL[k].name(), c));
            }
        }
        open.truncate(20);
        let stanzas_in_doubt = l
            .open
            .values()
            .filter(|o| o.doubt && o.got < o.want)
            .count() as u64;
        Account {
            total,
            kinds,
            missing_sample: open,
            stanzas_in_doubt,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Traffic::{Message as M, Multicast as C, Presence as P};

    #[test]
    fn what_was_in_flight_when_a_stream_died_is_indeterminate_not_missing() {
        let l = Ledger::default();
        l.sending(0, M, 2);
        l.sending(1, M, 1);
        assert_eq!(l.received(0, M), Arrival::First);
        l.stream_died();
        // Sent after the death: a loss of it is the server's.
        l.sending(2, M, 1);
        let t = l.account().total;
        assert_eq!(
            (t.expected, t.delivered, t.indeterminate, t.missing),
            (4, 1, 2, 1)
        );
        // One of them arrives after all: delivered, no longer in doubt.
        assert_eq!(l.received(1, M), Arrival::Last);
        let t = l.account().total;
        assert_eq!((t.delivered, t.indeterminate, t.missing), (2, 1, 1));
    }

    #[test]
    fn a_bounce_refuses_what_is_still_awaited_and_is_not_missing() {
        let l = Ledger::default();
        l.sending(0, C, 3);
        assert_eq!(l.received(0, C), Arrival::First);
        assert!(l.bounced(0));
        assert!(!l.bounced(0), "once");
        let a = l.account();
        assert_eq!(
            (
                a.total.expected,
                a.total.delivered,
                a.total.missing,
                a.total.bounced
            ),
            (3, 1, 0, 2)
        );
        assert_eq!(l.pending(), 0);
    }

    #[test]
    fn first_copies_duplicates_unknown_and_missing() {
        let l = Ledger::default();
        l.sending(0, M, 1);
        l.sending(1, C, 3);
        l.sending(2, P, 2);
        assert_eq!(l.received(0, M), Arrival::Last);
        assert_eq!(l.received(0, M), Arrival::Duplicate);
        assert_eq!(l.received(1, C), Arrival::First);
        // A forged kind counts under the kind the sender entered.
        assert_eq!(l.received(1, M), Arrival::First);
        assert_eq!(l.received(9, M), Arrival::Unknown);
        assert_eq!(l.pending(), 3);
        l.sending(3, M, 1);
        l.not_sent(3);
        assert_eq!(l.pending(), 3);
        let a = l.account();
        let t = a.total;
        assert_eq!(
            (t.sent, t.expected, t.delivered, t.missing, t.duplicates),
            (3, 6, 3, 3, 1)
        );
        assert_eq!(
            a.missing_sample,
            vec![
                Missing {
                    seq: 1,
                    kind: "multicast",
                    missing: 1
                },
                Missing {
                    seq: 2,
                    kind: "presence",
                    missing: 2
                }
            ]
        );
        let kind = |n: &str| a.kinds.iter().find(|k| k.0 == n).unwrap().1;
        assert_eq!(
            kind("message"),
            Counts {
                sent: 1,
                expected: 1,
                delivered: 1,
                duplicates: 1,
                missing: 0,
                bounced: 0,
                indeterminate: 0
            }
        );
        assert_eq!(
            kind("multicast"),
            Counts {
                sent: 1,
                expected: 3,
                delivered: 2,
                duplicates: 0,
                missing: 1,
                bounced: 0,
                indeterminate: 0
            }
        );
        assert_eq!(
            kind("presence"),
            Counts {
                sent: 1,
                expected: 2,
                delivered: 0,
                duplicates: 0,
                missing: 2,
                bounced: 0,
                indeterminate: 0
            }
        );
        assert_eq!(l.received(1, C), Arrival::Last);
        assert_eq!(l.received(1, C), Arrival::Duplicate);
        assert_eq!(
            l.account()
                .kinds
                .iter()
                .find(|k| k.0 == "multicast")
                .unwrap()
                .1
                .duplicates,
            1
        );
    }
}
