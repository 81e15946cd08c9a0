//! The delivery ledger of an XMPP run: how many recipients each stamped stanza was sent to,
//! how many received it, which arrived twice, and what is still missing at the end.
//! Entries leave the ledger as soon as every recipient has its copy, so memory follows the
//! stanzas in flight, not the length of the run.

use std::collections::HashMap;
use std::sync::Mutex;

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

#[derive(Default)]
struct Inner {
    /// seq → (recipients it was sent to, copies received so far).
    open: HashMap<u64, (u32, u32)>,
    /// Every seq below this one that is not open was delivered in full.
    next: u64,
    sent: u64,
    expected: u64,
}

/// Shared by every session of a run.
#[derive(Default)]
pub struct Ledger {
    inner: Mutex<Inner>,
    /// In-band registrations (--register): accounts created, already there, refused.
    pub registered: [std::sync::atomic::AtomicU64; 3],
}

/// The ledger's account at the end of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Account {
    /// Stamped stanzas sent, and the deliveries they called for (one per recipient).
    pub sent: u64,
    pub expected: u64,
    /// Deliveries still missing, and the first stanzas that lack some (seq, missing).
    pub missing: u64,
    pub missing_sample: Vec<(u64, u32)>,
}

impl Ledger {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stanza `seq` is about to go to `recipients` recipients (call before writing it, so
    /// that a fast recipient never finds it unknown).
    pub fn sending(&self, seq: u64, recipients: u32) {
        let mut l = self.lock();
        l.open.insert(seq, (recipients, 0));
        l.next = l.next.max(seq + 1);
        l.sent += 1;
        l.expected += u64::from(recipients);
    }

    /// Stanza `seq` was not written after all (the stream broke): nobody can receive it.
    pub fn not_sent(&self, seq: u64) {
        let mut l = self.lock();
        if let Some((n, _)) = l.open.remove(&seq) {
            l.sent -= 1;
            l.expected -= u64::from(n);
        }
    }

    /// A recipient received stanza `seq`.
    pub fn received(&self, seq: u64) -> Arrival {
        let mut l = self.lock();
        let next = l.next;
        let done = match l.open.get_mut(&seq) {
            Some((want, got)) => {
                *got += 1;
                *got >= *want
            }
            None if seq < next => return Arrival::Duplicate,
            None => return Arrival::Unknown,
        };
        if done {
            l.open.remove(&seq);
            Arrival::Last
        } else {
            Arrival::First
        }
    }

    /// Deliveries still awaited.
    pub fn pending(&self) -> u64 {
        self.lock()
            .open
            .values()
            .map(|(want, got)| u64::from(want.saturating_sub(*got)))
            .sum()
    }

    /// The account so far (at the end of a run: the missing deliveries).
    pub fn account(&self) -> Account {
        let l = self.lock();
        let mut open: Vec<(u64, u32)> = l
            .open
            .iter()
            .map(|(seq, (want, got))| (*seq, want.saturating_sub(*got)))
            .collect();
        open.sort_unstable();
        Account {
            sent: l.sent,
            expected: l.expected,
            missing: open.iter().map(|o| u64::from(o.1)).sum(),
            missing_sample: open.into_iter().take(20).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_copies_duplicates_unknown_and_missing() {
        let l = Ledger::default();
        l.sending(0, 1);
        l.sending(1, 3);
        l.sending(2, 2);
        assert_eq!(l.received(0), Arrival::Last);
        assert_eq!(l.received(0), Arrival::Duplicate);
        assert_eq!(l.received(1), Arrival::First);
        assert_eq!(l.received(1), Arrival::First);
        assert_eq!(l.received(9), Arrival::Unknown);
        assert_eq!(l.pending(), 3);
        l.sending(3, 1);
        l.not_sent(3);
        let a = l.account();
        assert_eq!((a.sent, a.expected, a.missing), (3, 6, 3));
        assert_eq!(a.missing_sample, vec![(1, 1), (2, 2)]);
        assert_eq!(l.received(1), Arrival::Last);
        assert_eq!(l.received(1), Arrival::Duplicate);
    }
}
