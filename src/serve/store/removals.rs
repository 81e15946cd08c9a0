//! What a mailbox removed, for JMAP's `*/changes` (a client told which of the messages
//! it knew are gone, whoever removed them: IMAP, POP3 or JMAP).

use std::collections::VecDeque;

/// Removals a mailbox remembers; older ones are forgotten, and a client that synced
/// before them is told it cannot catch up.
const MAX_REMOVED: usize = 4096;

/// The UIDs removed from a mailbox, each with the mailbox's version after its removal,
/// oldest first; removals at versions up to `floor` may be forgotten. Kept only once
/// someone [`Removals::keep`]s them (JMAP, when it hands out a state that names the
/// mailbox): a load over SMTP, IMAP or POP3 alone pays nothing for it.
#[derive(Debug, Default)]
pub struct Removals(Option<Box<Log>>);

/// The kept removals: a mailbox that was never synced over JMAP holds only the empty
/// pointer above (every IMAP session's mailbox carries one: a few bytes, not a log).
#[derive(Debug, Default)]
struct Log {
    log: VecDeque<(u64, u32)>,
    floor: u64,
}

impl Removals {
    /// Whether removals are kept (JMAP handed out a state naming the mailbox).
    pub fn kept(&self) -> bool {
        self.0.is_some()
    }

    /// Keeps the removals from now on.
    pub fn keep(&mut self) {
        self.0.get_or_insert_with(Box::default);
    }

    pub(super) fn record(&mut self, version: u64, uid: u32) {
        let Some(l) = self.0.as_mut() else {
            return;
        };
        l.log.push_back((version, uid));
        while l.log.len() > MAX_REMOVED {
            if let Some((v, _)) = l.log.pop_front() {
                l.floor = l.floor.max(v);
            }
        }
    }

    /// The UIDs removed after `version`, or `None` when some of them are forgotten (or
    /// were never kept).
    pub fn since(&self, version: u64) -> Option<impl Iterator<Item = u32> + '_> {
        let l = self.0.as_deref()?;
        (version >= l.floor).then(|| {
            l.log
                .iter()
                .filter(move |(v, _)| *v > version)
                .map(|(_, uid)| *uid)
        })
    }
}
