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
pub struct Removals {
    log: VecDeque<(u64, u32)>,
    floor: u64,
    kept: bool,
}

impl Removals {
    /// Keeps the removals from now on.
    pub fn keep(&mut self) {
        self.kept = true;
    }

    pub(super) fn record(&mut self, version: u64, uid: u32) {
        if !self.kept {
            return;
        }
        self.log.push_back((version, uid));
        while self.log.len() > MAX_REMOVED {
            if let Some((v, _)) = self.log.pop_front() {
                self.floor = self.floor.max(v);
            }
        }
    }

    /// The UIDs removed after `version`, or `None` when some of them are forgotten (or
    /// were never kept).
    pub fn since(&self, version: u64) -> Option<impl Iterator<Item = u32> + '_> {
        (self.kept && version >= self.floor).then(|| {
            self.log
                .iter()
                .filter(move |(v, _)| *v > version)
                .map(|(_, uid)| *uid)
        })
    }
}
