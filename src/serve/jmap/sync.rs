//! JMAP states (RFC 8620 §5.2, §5.6): what an account looked like when a state was
//! handed out, and what changed since, for `Email/changes`, `Email/queryChanges`,
//! `Mailbox/changes` and `Thread/changes`.
//!
//! A state records, per mailbox, its version, highest mod-sequence and next UID (a
//! few numbers, whatever the number of messages). Against the account now that says
//! everything: a message with a UID past the recorded next one was created since, one
//! with a higher mod-sequence updated, and the mailbox's removal log (kept by the store,
//! whoever removed: IMAP, POP3 or JMAP) names the destroyed ones. Each account keeps its
//! last [`MAX_STATES`] states; an older one, or one whose removals the store forgot, is
//! `cannotCalculateChanges`.
//!
//! A `maxChanges` smaller than the changes gives a state of its own: the state it pages
//! from plus what was reported already (each id with the mod-sequence it was reported at),
//! so the next page reports exactly the rest, and again what changed meanwhile.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::super::store::{Account, Mailbox};
use super::email::{email_id, mailbox_id};

/// States each account keeps.
const MAX_STATES: usize = 64;
/// The most ids a paged state remembers as reported.
const MAX_REPORTED: usize = 100_000;
/// What `reported` says of an id reported destroyed.
const GONE: u64 = u64::MAX;

/// One mailbox as a state saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub uid_validity: u32,
    /// The full name (`/` between levels).
    pub name: String,
    /// Not a `\Noselect` placeholder: a JMAP Mailbox.
    pub selectable: bool,
    pub subscribed: bool,
    pub version: u64,
    pub modseq: u64,
    pub next_uid: u32,
}

/// Every mailbox of an account, INBOX first, with its full name (placeholders too).
pub fn all_mailboxes(a: &Account) -> impl Iterator<Item = (&str, &Mailbox)> {
    std::iter::once(("INBOX", &a.inbox)).chain(a.folders.iter().map(|(n, m)| (n.as_str(), m)))
}

/// What a state records of an account (from now on the store keeps what is removed
/// from each of its mailboxes).
pub fn seen(a: &mut Account) -> Vec<Seen> {
    a.inbox.removals.keep();
    a.folders.values_mut().for_each(|m| m.removals.keep());
    all_mailboxes(a)
        .map(|(name, mb)| Seen {
            uid_validity: mb.uid_validity,
            name: name.to_string(),
            selectable: !mb.noselect,
            subscribed: a.subscribed.contains(name),
            version: mb.version(),
            modseq: mb.highest_modseq,
            next_uid: mb.next_uid,
        })
        .collect()
}

/// A state handed out: the account then, and (for a page of changes) what of the
/// changes since was reported already.
#[derive(Debug, Clone)]
pub struct Since {
    pub base: Arc<Vec<Seen>>,
    pub reported: Arc<HashMap<String, u64>>,
}

/// How an id changed since a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Created,
    Updated,
    Destroyed,
    /// Created and destroyed since: reported to nobody, unless a page reported it.
    Transient,
}

/// One change: the id, how, and the mark that tells a later change from it (a message's
/// mod-sequence, a mailbox's version).
#[derive(Debug, Clone)]
pub struct Change {
    pub id: String,
    pub kind: Kind,
    pub mark: u64,
}

/// Changes since a state, as reported: created, updated, destroyed.
#[derive(Debug, Default)]
pub struct Changes {
    pub created: Vec<String>,
    pub updated: Vec<String>,
    pub destroyed: Vec<String>,
    /// The page stopped short: a state for the rest is needed.
    pub more: bool,
    /// What was reported, marks included (to remember in a paged state).
    pub reported: Vec<(String, u64)>,
}

impl Changes {
    pub fn len(&self) -> usize {
        self.created.len() + self.updated.len() + self.destroyed.len()
    }
}

/// The changes of messages since `base` (ids sorted by mailbox and UID); `None` when
/// the removals of a mailbox are forgotten.
pub fn email_changes(a: &Account, base: &[Seen]) -> Option<Vec<Change>> {
    let mut out = Vec::new();
    for s in base {
        let removed = a.removals(s.uid_validity)?.since(s.version)?;
        for uid in removed {
            let kind = if uid >= s.next_uid {
                Kind::Transient
            } else {
                Kind::Destroyed
            };
            out.push(Change {
                id: email_id(s.uid_validity, uid),
                kind,
                mark: GONE,
            });
        }
    }
    for (_, mb) in all_mailboxes(a) {
        let uv = mb.uid_validity;
        let then = base.iter().find(|s| s.uid_validity == uv);
        if then.is_none() {
            // Created since: its removals are messages created and removed since.
            for uid in mb.removals.since(0).into_iter().flatten() {
                out.push(Change {
                    id: email_id(uv, uid),
                    kind: Kind::Transient,
                    mark: GONE,
                });
            }
        }
        for m in &mb.messages {
            let kind = match then {
                Some(s) if m.uid < s.next_uid && m.modseq <= s.modseq => continue,
                Some(s) if m.uid < s.next_uid => Kind::Updated,
                _ => Kind::Created,
            };
            out.push(Change {
                id: email_id(uv, m.uid),
                kind,
                mark: m.modseq,
            });
        }
    }
    Some(out)
}

/// The changes of mailboxes (JMAP Mailboxes: placeholders are none) since `base`, and
/// whether the updated ones changed only in their counts.
pub fn mailbox_changes(a: &mut Account, base: &[Seen]) -> (Vec<Change>, bool) {
    let now = seen(a);
    let mut counts_only = true;
    let mut out = Vec::new();
    let was = |uv: u32| base.iter().find(|s| s.uid_validity == uv && s.selectable);
    for n in now.iter().filter(|n| n.selectable) {
        let kind = match was(n.uid_validity) {
            None => Kind::Created,
            Some(s) if s == n => continue,
            Some(s) => {
                counts_only &= s.name == n.name && s.subscribed == n.subscribed;
                Kind::Updated
            }
        };
        out.push(Change {
            id: mailbox_id(n.uid_validity),
            kind,
            mark: n.version,
        });
    }
    for s in base.iter().filter(|s| s.selectable) {
        if !now
            .iter()
            .any(|n| n.uid_validity == s.uid_validity && n.selectable)
        {
            out.push(Change {
                id: mailbox_id(s.uid_validity),
                kind: Kind::Destroyed,
                mark: GONE,
            });
        }
    }
    (out, counts_only)
}

/// The changes a client that holds `since` is told, at most `max` (RFC 8620 §5.2: an id
/// both created and updated is created; updated and destroyed, destroyed; created and
/// destroyed, nothing).
pub fn page(changes: Vec<Change>, since: &Since, max: Option<usize>) -> Changes {
    let mut out = Changes::default();
    let mut listed = std::collections::HashSet::new();
    let told = |out: &mut Changes, id: String, kind: Kind, mark: u64| {
        if max.is_some_and(|m| out.len() >= m) {
            out.more = true;
            return false;
        }
        match kind {
            Kind::Created => out.created.push(id.clone()),
            Kind::Updated => out.updated.push(id.clone()),
            _ => out.destroyed.push(id.clone()),
        }
        out.reported.push((id, mark));
        true
    };
    for c in changes {
        let before = since.reported.get(&c.id).copied();
        if !since.reported.is_empty() {
            listed.insert(c.id.clone());
        }
        let kind = match (c.kind, before) {
            (Kind::Transient | Kind::Destroyed, Some(GONE)) => continue,
            (Kind::Transient, None) => continue,
            (Kind::Transient | Kind::Destroyed, _) => Kind::Destroyed,
            (_, Some(mark)) if mark >= c.mark => continue,
            (_, Some(_)) => Kind::Updated,
            (k, None) => k,
        };
        let mark = if kind == Kind::Destroyed {
            GONE
        } else {
            c.mark
        };
        if !told(&mut out, c.id, kind, mark) {
            return out;
        }
    }
    // Reported by a page, and now in no change since the state paged from: gone since
    // without a trace (its mailbox created and deleted since).
    let mut vanished: Vec<&String> = since
        .reported
        .iter()
        .filter(|(id, mark)| **mark != GONE && !listed.contains(*id))
        .map(|(id, _)| id)
        .collect();
    vanished.sort();
    for id in vanished {
        if !told(&mut out, id.clone(), Kind::Destroyed, GONE) {
            break;
        }
    }
    out
}

/// One account's states, oldest first.
#[derive(Debug, Default)]
struct Journal {
    states: VecDeque<(u64, Since)>,
    next: u64,
}

/// The states of every account (one of the server's services).
#[derive(Debug, Default)]
pub struct States {
    accounts: Mutex<HashMap<String, Journal>>,
}

impl States {
    fn journal<R>(&self, account: &str, f: impl FnOnce(&mut Journal) -> R) -> R {
        let mut all = self.accounts.lock().unwrap_or_else(|p| p.into_inner());
        f(all.entry(account.to_string()).or_default())
    }

    /// The state of an account that looks like `now` (the newest state when nothing
    /// changed since, else a new one).
    pub fn current(&self, account: &str, now: Vec<Seen>) -> String {
        self.journal(account, |j| {
            if let Some((n, s)) = j.states.back() {
                if s.reported.is_empty() && *s.base == now {
                    return token(*n);
                }
            }
            j.push(Since {
                base: Arc::new(now),
                reported: Arc::default(),
            })
        })
    }

    /// A state for the rest of a page of changes since `since`.
    pub fn paged(&self, account: &str, since: &Since, reported: Vec<(String, u64)>) -> String {
        let mut all = (*since.reported).clone();
        all.extend(reported);
        self.journal(account, |j| {
            j.push(Since {
                base: since.base.clone(),
                reported: Arc::new(all),
            })
        })
    }

    /// The state a client names, while it is kept.
    pub fn since(&self, account: &str, state: &str) -> Option<Since> {
        let n: u64 = state.strip_prefix('s')?.parse().ok()?;
        self.journal(account, |j| {
            j.states
                .iter()
                .find(|(m, _)| *m == n)
                .map(|(_, s)| s.clone())
        })
        .filter(|s| s.reported.len() <= MAX_REPORTED)
    }
}

impl Journal {
    fn push(&mut self, s: Since) -> String {
        self.next += 1;
        self.states.push_back((self.next, s));
        if self.states.len() > MAX_STATES {
            self.states.pop_front();
        }
        token(self.next)
    }
}

fn token(n: u64) -> String {
    format!("s{n}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(id: &str, kind: Kind, mark: u64) -> Change {
        Change {
            id: id.into(),
            kind,
            mark,
        }
    }

    #[test]
    fn pages_report_each_change_once_and_later_changes_again() {
        let base = Since {
            base: Arc::default(),
            reported: Arc::default(),
        };
        let all = vec![
            change("a", Kind::Created, 5),
            change("b", Kind::Updated, 6),
            change("c", Kind::Destroyed, GONE),
            change("d", Kind::Transient, GONE),
        ];
        let first = page(all.clone(), &base, Some(2));
        assert_eq!((first.created.len(), first.updated.len()), (1, 1));
        assert!(first.more);
        let paged = Since {
            base: base.base.clone(),
            reported: Arc::new(first.reported.into_iter().collect()),
        };
        let rest = page(all, &paged, Some(2));
        assert_eq!(rest.destroyed, ["c"]);
        assert!(!rest.more && rest.created.is_empty() && rest.updated.is_empty());
        let mut told = (*paged.reported).clone();
        told.extend(rest.reported);
        let paged = Since {
            base: base.base.clone(),
            reported: Arc::new(told),
        };
        // Later: a updated again, b destroyed, d (never told) still nothing.
        let later = vec![
            change("a", Kind::Created, 9),
            change("b", Kind::Destroyed, GONE),
            change("c", Kind::Destroyed, GONE),
            change("d", Kind::Transient, GONE),
        ];
        let again = page(later, &paged, None);
        assert_eq!(again.updated, ["a"]);
        assert_eq!(again.destroyed, ["b"]);
        assert!(again.created.is_empty());
    }

    #[test]
    fn removals_are_kept_once_a_state_names_the_mailbox() {
        use super::super::super::store::{Store, StoreOptions};
        let store = Store::new(StoreOptions::default());
        for _ in 0..3 {
            store
                .deliver("a@x.test", b"Subject: s\r\n\r\nb\r\n")
                .unwrap();
        }
        store.with_account("a@x.test", |a| {
            // Before any state: not kept (a load without JMAP pays nothing).
            a.inbox.remove_where(|m| m.uid == 1);
            assert!(a.removals(a.inbox.uid_validity).unwrap().since(0).is_none());
            let base = seen(a);
            a.inbox.remove_where(|m| m.uid == 2);
            let uv = a.inbox.uid_validity;
            let changes = email_changes(a, &base).unwrap();
            let ids: Vec<(&str, Kind)> = changes.iter().map(|c| (c.id.as_str(), c.kind)).collect();
            assert_eq!(ids, [(email_id(uv, 2).as_str(), Kind::Destroyed)]);
        });
    }
}
