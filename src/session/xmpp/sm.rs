//! XEP-0198 stream management, as far as it draws the line between what the server took
//! and what it may not have: when the server offers it, a session enables it after its
//! login, asks for an acknowledgement behind every stanza it sends (`<r/>` in the same
//! write) and answers the server's requests with the count of stanzas it has read. A
//! stanza the server acknowledged is the server's to deliver: if it never arrives, it is
//! missing, whatever happened to the stream. When a stream dies, only the stanzas the
//! server had not acknowledged yet are indeterminate; without stream management every
//! stanza in flight is. When the server allows resumption, a session whose stream died
//! resumes it on its next connection (`<resume previd h/>`) instead of binding again, or
//! at the run's end when it has no unit left (the server kept what was on its way to it):
//! the server's count says which stanzas it had, the others are written again, and
//! nothing is in doubt. A resumption the server refuses (it forgot the session: a restart) makes
//! the unacknowledged ones indeterminate, and the session logs in afresh.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::ledger::Ledger;

pub const NS: &str = "urn:xmpp:sm:3";
/// Written to enable it; the server answers `<enabled/>` or `<failed/>`.
pub const ENABLE: &str = "<enable xmlns='urn:xmpp:sm:3' resume='true'/>";
/// Asks the server for its count of handled stanzas.
pub const REQUEST: &str = "<r xmlns='urn:xmpp:sm:3'/>";

/// A stanza written and not acknowledged: its ledger sequence, and its bytes while the
/// stream is resumable.
type Written = (Option<u64>, Option<Box<[u8]>>);

/// One stream's counts, shared by its writer and its reader.
#[derive(Debug, Default)]
pub struct Sm {
    /// Stanzas written since it was enabled, oldest first, not acknowledged yet: the
    /// ledger's sequence number (None for a stanza the ledger does not follow: an IQ
    /// result, a subscription answer, a raw stanza) and, while the stream is resumable,
    /// its bytes to write again after a resumption.
    unacked: Mutex<VecDeque<Written>>,
    /// The server's id for resuming the stream (`<enabled resume='true' id=…/>`); None
    /// when it cannot be resumed.
    resume: Mutex<Option<String>>,
    /// The server's last count of handled stanzas (`h`).
    acked: AtomicU64,
    /// Stanzas read since it was enabled (what `<a h=.../>` tells the server).
    read: AtomicU64,
}

impl Sm {
    /// Enabled, resumable with this id when the server said so.
    pub fn new(resume: Option<String>) -> Sm {
        Sm {
            resume: Mutex::new(resume),
            ..Sm::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Written>> {
        self.unacked.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn resume_id(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.resume.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A stanza is being written (call under the writer's lock: the queue keeps the
    /// order of the wire); its bytes are kept while the stream is resumable. A server
    /// that leaves more than [`KEPT`] stanzas unacknowledged makes it not resumable
    /// (memory stays bounded).
    pub fn sent(&self, seq: Option<u64>, bytes: &[u8]) {
        let mut q = self.lock();
        let mut id = self.resume_id();
        if q.len() >= KEPT && id.take().is_some() {
            for e in q.iter_mut() {
                e.1 = None;
            }
        }
        let kept = id.is_some().then(|| Box::from(bytes));
        q.push_back((seq, kept));
    }

    /// The id and our count of stanzas read, to resume the stream; None when it cannot be.
    pub fn resumption(&self) -> Option<(String, u64)> {
        let id = self.resume_id().clone()?;
        Some((id, self.read.load(Ordering::Relaxed) % (1 << 32)))
    }

    /// The server resumed the stream, having handled `h` of our stanzas: those are
    /// acknowledged, the rest are to be written again (returned, and kept in the queue).
    /// The stanzas unacknowledged when the stream died are counted as such here, as for
    /// a stream that is not resumed (nothing is written while it is dead), and the
    /// stanzas written again are counted too.
    pub fn resumed(&self, h: u64, ledger: &Ledger) -> Vec<Box<[u8]>> {
        let unacked = self.lock().iter().filter(|e| e.0.is_some()).count() as u64;
        ledger.stream_management(0, 0, unacked);
        self.acknowledged(h, ledger);
        ledger.sm[3].fetch_add(1, Ordering::Relaxed);
        let again: Vec<Box<[u8]>> = self.lock().iter().filter_map(|e| e.1.clone()).collect();
        ledger.sm[4].fetch_add(again.len() as u64, Ordering::Relaxed);
        again
    }

    /// A stanza was read.
    pub fn read(&self) {
        self.read.fetch_add(1, Ordering::Relaxed);
    }

    /// The answer to the server's `<r/>`.
    pub fn answer(&self) -> String {
        format!(
            "<a xmlns='urn:xmpp:sm:3' h='{}'/>",
            self.read.load(Ordering::Relaxed) % (1 << 32)
        )
    }

    /// The server's `<a h='H'/>`: the stanzas up to its count are its now. Returns how
    /// many of the ledger's stanzas that acknowledged.
    pub fn acknowledged(&self, h: u64, ledger: &Ledger) -> u64 {
        let mut q = self.lock();
        let before = self.acked.load(Ordering::Relaxed);
        // h counts modulo 2^32 (XEP-0198 §5).
        let newly = h.wrapping_sub(before) % (1 << 32);
        let newly = newly.min(q.len() as u64);
        let mut ledgered = 0;
        for _ in 0..newly {
            if let Some((Some(_), _)) = q.pop_front() {
                ledgered += 1;
            }
        }
        self.acked.store(before + newly, Ordering::Relaxed);
        ledger.stream_management(0, ledgered, 0);
        ledgered
    }

    /// The stream died: its stanzas the server had not acknowledged are indeterminate.
    pub fn died(&self, ledger: &Ledger) {
        let q = std::mem::take(&mut *self.lock());
        *self.resume_id() = None;
        let seqs: Vec<u64> = q.into_iter().filter_map(|e| e.0).collect();
        ledger.stream_management(0, 0, seqs.len() as u64);
        ledger.in_doubt(&seqs);
    }
}

/// Unacknowledged stanzas kept for a resumption at most.
const KEPT: usize = 4096;

/// `h` of an `<a/>` element's attribute.
pub fn h_of(value: Option<&str>) -> Option<u64> {
    value?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::xmpp::Traffic;

    #[test]
    fn acks_take_stanzas_in_order_and_a_death_doubts_only_the_rest() {
        let ledger = Ledger::default();
        let sm = Sm::default();
        for seq in 0..4 {
            ledger.sending(seq, Traffic::Message, 1);
            sm.sent(Some(seq), b"x");
        }
        // An IQ result written between them counts for the server too.
        sm.sent(None, b"x");
        ledger.sending(4, Traffic::Message, 1);
        sm.sent(Some(4), b"x");
        assert_eq!(sm.acknowledged(2, &ledger), 2);
        assert_eq!(
            sm.acknowledged(2, &ledger),
            0,
            "the same h again acknowledges nothing"
        );
        assert_eq!(sm.acknowledged(4, &ledger), 2, "seqs 2 and 3");
        sm.died(&ledger);
        // Nothing arrived: 0 to 3 were acknowledged, so they are missing; the IQ result
        // and seq 4 were not, and 4 is indeterminate.
        let a = ledger.account();
        assert_eq!(a.total.indeterminate, 1, "{a:?}");
        assert_eq!(a.total.missing, 4, "{a:?}");
        sm.read();
        sm.read();
        assert_eq!(sm.answer(), "<a xmlns='urn:xmpp:sm:3' h='2'/>");
        assert_eq!(h_of(Some(" 7 ")), Some(7));
        // Not resumable: nothing kept, nothing to resume with.
        assert_eq!(sm.resumption(), None);
    }

    #[test]
    fn a_resumption_writes_again_what_the_server_had_not() {
        let ledger = Ledger::default();
        let sm = Sm::new(Some("id1".into()));
        for seq in 0..3 {
            ledger.sending(seq, Traffic::Message, 1);
            sm.sent(Some(seq), format!("<m{seq}/>").as_bytes());
        }
        sm.read();
        assert_eq!(sm.resumption(), Some(("id1".to_string(), 1)));
        let again = sm.resumed(1, &ledger);
        assert_eq!(
            again,
            vec![Box::from(&b"<m1/>"[..]), Box::from(&b"<m2/>"[..])]
        );
        assert_eq!(sm.acknowledged(3, &ledger), 2);
        // A refused resumption: what is left is in doubt, and it is not resumable.
        ledger.sending(3, Traffic::Message, 1);
        sm.sent(Some(3), b"<m3/>");
        sm.died(&ledger);
        assert_eq!(sm.resumption(), None);
        assert_eq!(ledger.account().total.indeterminate, 1);
        assert_eq!(h_of(Some("x")), None);
    }
}
