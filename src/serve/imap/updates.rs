//! What a session is told of its mailbox's changes: after each command (EXISTS, RECENT,
//! EXPUNGE when allowed, FETCH FLAGS, new keywords) and as they happen during IDLE.

use std::fmt::Write as _;

use super::{bad, flags_lines, message_flags, ok, recent_flag, Done, Session, MAX_LINE};
use crate::serve::conn::ConnError;

/// The UIDs a mailbox holds now, and the flags (and mod-sequence) of those changed since
/// last looked.
type Current = (Vec<u32>, Vec<(u32, String, u64)>);

impl Session<'_> {
    /// Tells the client about keywords, messages that vanished (when `expunges`), arrived
    /// or changed flags since it last looked.
    pub(super) fn sync(&mut self, expunges: bool) {
        let Some(sel) = self.selected.as_mut() else {
            return;
        };
        let mut out = String::new();
        let now: Option<Option<Current>> = {
            let view_last = sel.view.last().copied().unwrap_or(0);
            self.sh
                .store
                .with_account(self.user.as_deref().unwrap_or_default(), |a| {
                    let mb = a
                        .get_mut(&sel.name)
                        .filter(|mb| mb.uid_validity == sel.validity)?;
                    // Nothing happened to the mailbox since the last full look: done, in
                    // O(1) instead of a scan of every message.
                    let version = mb.version();
                    if version == sel.version {
                        return Some(None);
                    }
                    if expunges {
                        sel.version = version;
                    }
                    if mb.keywords.len() != sel.keywords {
                        out.push_str(&flags_lines(mb, sel.read_only));
                        sel.keywords = mb.keywords.len();
                    }
                    let fresh = mb
                        .messages
                        .iter()
                        .map(|m| m.uid)
                        .filter(|u| *u > view_last && *u > mb.recent_upto);
                    sel.recent.extend(fresh);
                    if !sel.read_only {
                        mb.recent_upto = mb.recent_upto.max(mb.next_uid - 1);
                    }
                    let changed = mb
                        .messages
                        .iter()
                        .filter(|m| m.modseq > sel.modseq && m.uid <= view_last)
                        .filter(|m| !sel.told.contains(&(m.uid, m.modseq)))
                        .map(|m| (m.uid, message_flags(mb, m), m.modseq))
                        .collect();
                    sel.modseq = mb.highest_modseq;
                    sel.told.clear();
                    Some(Some((mb.messages.iter().map(|m| m.uid).collect(), changed)))
                })
        };
        // A mailbox gone (deleted, renamed) is one whose messages all went.
        let (now, changed) = match now {
            Some(None) => return,
            Some(Some(c)) => c,
            None => Default::default(),
        };
        if expunges {
            let mut i = 0;
            while i < sel.view.len() {
                if now.binary_search(&sel.view[i]).is_err() {
                    let gone = sel.view.remove(i);
                    if let Ok(r) = sel.recent.binary_search(&gone) {
                        sel.recent.remove(r);
                    }
                    let _ = write!(out, "* {} EXPUNGE\r\n", i + 1);
                } else {
                    i += 1;
                }
            }
        }
        let last = sel.view.last().copied().unwrap_or(0);
        let before = sel.view.len();
        sel.view.extend(now.iter().filter(|u| **u > last));
        if sel.view.len() != before {
            let recent = sel.recent.len();
            let _ = write!(out, "* {} EXISTS\r\n* {recent} RECENT\r\n", sel.view.len());
        }
        for (uid, f, modseq) in changed {
            if let Ok(i) = sel.view.binary_search(&uid) {
                let r = if sel.recent.binary_search(&uid).is_ok() {
                    recent_flag(&f)
                } else {
                    String::new()
                };
                let m = if self.condstore {
                    format!(" MODSEQ ({modseq})")
                } else {
                    String::new()
                };
                let _ = write!(out, "* {} FETCH (FLAGS ({f}{r}){m})\r\n", i + 1);
            }
        }
        self.conn.queue(out.as_bytes());
    }

    /// RFC 2177: report changes as they happen until the client says DONE.
    pub(super) async fn idle(&mut self) -> Result<Done, ConnError> {
        let mut changes = match &self.selected {
            Some(sel) => self.sh.store.watch(self.user(), &sel.name),
            None => None,
        };
        if let Some(c) = changes.as_mut() {
            c.borrow_and_update();
        }
        let mut shutdown = self.conn.shutdown_signal();
        self.conn.queue(b"+ idling\r\n");
        self.sync(true);
        loop {
            self.conn.flush().await?;
            if self.conn.has_line() {
                break;
            }
            let changed = async {
                match changes.as_mut() {
                    Some(c) => c.changed().await.is_ok(),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                alive = changed => {
                    if !alive {
                        changes = None;
                    }
                    self.sync(true);
                }
                r = self.conn.fill_unbounded() => r?,
                _ = shutdown.wait_for(|v| *v) => return Err(ConnError::Shutdown),
                _ = tokio::time::sleep(self.sh.idle.max(std::time::Duration::from_secs(1800))) => {
                    return Err(ConnError::Idle)
                }
            }
        }
        let line = self.conn.read_line(MAX_LINE).await?;
        Ok(if line.eq_ignore_ascii_case(b"DONE") {
            ok("IDLE terminated")
        } else {
            bad("expected DONE")
        })
    }
}
