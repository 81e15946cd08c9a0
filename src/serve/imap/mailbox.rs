//! The mailbox commands: SELECT/EXAMINE, CREATE, DELETE, RENAME (RFC 3501 6.3), LIST and
//! LSUB with `*` and `%`, SUBSCRIBE/UNSUBSCRIBE, STATUS and APPEND (with APPENDUID).
//! Names use `/` as the hierarchy delimiter; INBOX is case-insensitive.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::{astring, bad, flags_lines, no, ok, Done, Selected, Session};
use crate::proto::imap::Appended;
use crate::serve::store::{flags, is_inbox, Account, Store, StoredMessage};

/// Mailboxes one user may have (memory stays bounded whatever a client creates).
const MAX_MAILBOXES: usize = 10_000;

/// INBOX (and the INBOX/ of its children) in one spelling, anything else as given.
pub(super) fn canonical(name: &str) -> String {
    if is_inbox(name) {
        return "INBOX".into();
    }
    match name.get(..6) {
        Some(head) if head.eq_ignore_ascii_case("INBOX/") => format!("INBOX/{}", &name[6..]),
        _ => name.to_string(),
    }
}

/// Can a mailbox have this name? (No wildcards, no empty levels, no control characters.)
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 512
        && !name.starts_with('/')
        && !name.contains("//")
        && !name.ends_with('/')
        && !name.chars().any(|c| c == '*' || c == '%' || c.is_control())
        && name.split('/').count() <= 20
}

/// The names above `name` in the hierarchy (`a`, `a/b` for `a/b/c`).
fn parents(name: &str) -> impl Iterator<Item = &str> {
    name.match_indices('/').map(move |(i, _)| &name[..i])
}

/// The name a new mailbox (CREATE, the target of RENAME) may take: a trailing delimiter
/// dropped, never INBOX.
fn new_name(name: &str) -> Result<String, Done> {
    let name = canonical(name.strip_suffix('/').unwrap_or(name));
    if is_inbox(&name) {
        return Err(no("[ALREADYEXISTS] INBOX always exists"));
    }
    if !valid_name(&name) {
        return Err(no("[CANNOT] invalid mailbox name"));
    }
    Ok(name)
}

/// Creates the missing superiors of `name` (RFC 3501 6.3.3), within the mailbox cap.
fn make_parents(a: &mut Account, store: &Store, name: &str) -> Result<(), Done> {
    if a.folders.len() + name.split('/').count() > MAX_MAILBOXES {
        return Err(no("[LIMIT] too many mailboxes"));
    }
    for p in parents(name) {
        if !is_inbox(p) && !a.folders.contains_key(p) {
            a.folders.insert(p.to_string(), store.new_mailbox());
        }
    }
    Ok(())
}

fn has_children(a: &Account, name: &str) -> bool {
    let prefix = format!("{name}/");
    a.folders
        .range(prefix.clone()..)
        .next()
        .is_some_and(|(k, _)| k.starts_with(&prefix))
}

/// RFC 3501 LIST matching: `*` matches anything, `%` anything but the delimiter. Dynamic
/// programming over (pattern, name) positions, so hostile patterns cost O(p·n) at worst.
fn wild(pattern: &[u8], name: &[u8]) -> bool {
    // reach[j]: the pattern so far can match name[..j].
    let mut reach = vec![false; name.len() + 1];
    reach[0] = true;
    for &c in pattern {
        let mut next = vec![false; name.len() + 1];
        match c {
            b'*' | b'%' => {
                for j in 0..=name.len() {
                    next[j] =
                        reach[j] || (j > 0 && next[j - 1] && (c == b'*' || name[j - 1] != b'/'));
                }
            }
            _ => {
                for j in 1..=name.len() {
                    next[j] = reach[j - 1] && name[j - 1] == c;
                }
            }
        }
        reach = next;
        if !reach.contains(&true) {
            return false;
        }
    }
    reach[name.len()]
}

/// Does `name` match the LIST pattern? INBOX matches case-insensitively.
fn matches(pattern: &str, name: &str) -> bool {
    if name == "INBOX" || name.starts_with("INBOX/") {
        // Compare as if INBOX were written in the pattern's case.
        let p = pattern.as_bytes();
        let folded: Vec<u8> = p
            .iter()
            .zip(b"INBOX")
            .map(|(a, b)| if a.eq_ignore_ascii_case(b) { *b } else { *a })
            .chain(p.iter().skip(5).copied())
            .collect();
        return wild(&folded, name.as_bytes());
    }
    wild(pattern.as_bytes(), name.as_bytes())
}

/// SPECIAL-USE (RFC 6154) attribute of a top-level mailbox by its usual name.
pub(in crate::serve) fn special_use(name: &str) -> Option<&'static str> {
    Some(match name.to_ascii_lowercase().as_str() {
        "sent" | "sent messages" | "sent items" => "\\Sent",
        "drafts" => "\\Drafts",
        "trash" | "deleted messages" => "\\Trash",
        "junk" | "spam" => "\\Junk",
        "archive" => "\\Archive",
        _ => return None,
    })
}

impl Session<'_> {
    pub(super) fn select(&mut self, name: &str, read_only: bool) -> Done {
        self.selected = None;
        let name = canonical(name);
        let found = self.account(|a| {
            let mb = a.get_mut(&name).filter(|mb| !mb.noselect)?;
            let view: Vec<u32> = mb.messages.iter().map(|m| m.uid).collect();
            // EXAMINE shows them as \Recent too, without taking them from others.
            let recent: Vec<u32> = view
                .iter()
                .copied()
                .filter(|u| *u > mb.recent_upto)
                .collect();
            if !read_only {
                mb.recent_upto = mb.next_uid - 1;
            }
            let unseen = mb.messages.iter().position(|m| m.flags & flags::SEEN == 0);
            let head = flags_lines(mb, read_only);
            let ids = (
                mb.uid_validity,
                mb.next_uid,
                mb.highest_modseq,
                mb.version(),
            );
            Some((view, recent, unseen, head, ids, mb.keywords.len()))
        });
        let Some((view, recent, unseen, head, (validity, next, modseq, version), keywords)) = found
        else {
            return no("[NONEXISTENT] no such mailbox");
        };
        let mut out = head;
        let _ = write!(
            out,
            "* {} EXISTS\r\n* {} RECENT\r\n",
            view.len(),
            recent.len()
        );
        if let Some(u) = unseen {
            let _ = write!(out, "* OK [UNSEEN {}] First unseen\r\n", u + 1);
        }
        let _ = write!(
            out,
            "* OK [UIDVALIDITY {validity}] UIDs valid\r\n* OK [UIDNEXT {next}] Predicted next UID\r\n"
        );
        if self.condstore {
            let _ = write!(out, "* OK [HIGHESTMODSEQ {modseq}] Highest\r\n");
        }
        self.conn.queue(out.as_bytes());
        self.selected = Some(Selected {
            name,
            validity,
            read_only,
            view,
            recent,
            modseq,
            keywords,
            told: Vec::new(),
            version,
        });
        let code = if read_only { "READ-ONLY" } else { "READ-WRITE" };
        ok(format!("[{code}] completed"))
    }

    pub(super) fn create(&mut self, name: &str) -> Done {
        let name = &match new_name(name) {
            Ok(n) => n,
            Err(d) => return d,
        };
        let store = self.sh.store.clone();
        self.account(|a| {
            if let Some(mb) = a.folders.get_mut(name) {
                if !mb.noselect {
                    return no("[ALREADYEXISTS] mailbox exists");
                }
                mb.noselect = false;
                return ok("CREATE completed");
            }
            if let Err(d) = make_parents(a, &store, name) {
                return d;
            }
            a.folders.insert(name.to_string(), store.new_mailbox());
            ok("CREATE completed")
        })
    }

    pub(super) fn delete(&mut self, name: &str) -> Done {
        let name = &canonical(name);
        if is_inbox(name) {
            return no("[CANNOT] INBOX cannot be deleted");
        }
        self.account(|a| {
            let children = has_children(a, name);
            let Some(mb) = a.folders.get_mut(name) else {
                return no("[NONEXISTENT] no such mailbox");
            };
            if children {
                if mb.noselect {
                    return no("[INUSE] mailbox has children");
                }
                // RFC 3501 6.3.4: the messages go, the name stays for its children.
                mb.remove_where(|_| true);
                mb.noselect = true;
            } else if let Some(mut mb) = a.folders.remove(name) {
                mb.remove_where(|_| true);
                mb.touch();
                a.retire(mb);
            }
            ok("DELETE completed")
        })
    }

    pub(super) fn rename(&mut self, from: &str, to: &str) -> Done {
        let from = &canonical(from);
        let to = &match new_name(to) {
            Ok(n) => n,
            Err(d) => return d,
        };
        let store = self.sh.store.clone();
        self.account(|a| {
            if a.get(from).is_none() {
                return no("[NONEXISTENT] no such mailbox");
            }
            if a.folders.contains_key(to) {
                return no("[ALREADYEXISTS] target mailbox exists");
            }
            if to.starts_with(&format!("{from}/")) {
                return no("[CANNOT] cannot move a mailbox into itself");
            }
            if let Err(d) = make_parents(a, &store, to) {
                return d;
            }
            if is_inbox(from) {
                // RFC 3501 6.3.5: INBOX's messages move to the new name; INBOX stays,
                // empty, and its children stay where they are.
                let mut target = store.new_mailbox();
                let moved: Vec<StoredMessage> = a.inbox.messages.clone();
                a.inbox.remove_where(|_| true);
                target.keywords = a.inbox.keywords.clone();
                for m in moved {
                    target.push(m);
                }
                a.folders.insert(to.to_string(), target);
                return ok("RENAME completed");
            }
            let prefix = format!("{from}/");
            let names: Vec<String> = a
                .folders
                .keys()
                .filter(|k| *k == from || k.starts_with(&prefix))
                .cloned()
                .collect();
            for old in names {
                if let Some(mb) = a.folders.remove(&old) {
                    // Sessions that had the old name selected see it gone.
                    mb.touch();
                    a.folders.insert(format!("{to}{}", &old[from.len()..]), mb);
                }
            }
            ok("RENAME completed")
        })
    }

    pub(super) fn subscribe(&mut self, name: &str, on: bool) -> Done {
        let name = canonical(name);
        self.account(|a| {
            if on {
                if a.get(&name).is_none() {
                    return no("[NONEXISTENT] no such mailbox");
                }
                a.subscribed.insert(name);
                ok("SUBSCRIBE completed")
            } else {
                a.subscribed.remove(&name);
                ok("UNSUBSCRIBE completed")
            }
        })
    }

    /// LIST, or LSUB (`lsub`): names matching reference + pattern, with attributes.
    pub(super) fn list(&mut self, lsub: bool, reference: &str, pattern: &str) -> Done {
        let verb = if lsub { "LSUB" } else { "LIST" };
        if pattern.is_empty() && !lsub {
            self.conn.queue(b"* LIST (\\Noselect) \"/\" \"\"\r\n");
            return ok("LIST completed");
        }
        let full = format!("{reference}{pattern}");
        let rows = self.account(|a| {
            let mut rows: Vec<(String, Vec<&str>)> = Vec::new();
            let names = std::iter::once("INBOX").chain(a.folders.keys().map(String::as_str));
            if lsub {
                let subscribed = a.subscribed.iter();
                let mut seen = std::collections::BTreeSet::new();
                for s in subscribed {
                    if matches(&full, s) {
                        if seen.insert(s.clone()) {
                            rows.push((s.clone(), Vec::new()));
                        }
                    } else if full.contains('%') {
                        // A subscribed child under an unsubscribed parent that matches.
                        for p in parents(s) {
                            if matches(&full, p)
                                && !a.subscribed.contains(p)
                                && seen.insert(p.to_string())
                            {
                                rows.push((p.to_string(), vec!["\\Noselect"]));
                            }
                        }
                    }
                }
                return rows;
            }
            for name in names {
                if !matches(&full, name) {
                    continue;
                }
                let mut attrs = Vec::new();
                if a.get(name).is_some_and(|m| m.noselect) {
                    attrs.push("\\Noselect");
                }
                attrs.push(if has_children(a, name) {
                    "\\HasChildren"
                } else {
                    "\\HasNoChildren"
                });
                if let Some(u) = special_use(name) {
                    attrs.push(u);
                }
                rows.push((name.to_string(), attrs));
            }
            rows
        });
        let mut out = String::new();
        for (name, attrs) in rows {
            let _ = write!(
                out,
                "* {verb} ({}) \"/\" {}\r\n",
                attrs.join(" "),
                astring(&name)
            );
        }
        self.conn.queue(out.as_bytes());
        ok(format!("{verb} completed"))
    }

    pub(super) fn status(&mut self, name: &str, items: &[String]) -> Done {
        let name = canonical(name);
        let known = [
            "MESSAGES",
            "RECENT",
            "UIDNEXT",
            "UIDVALIDITY",
            "UNSEEN",
            "HIGHESTMODSEQ",
        ];
        if let Some(i) = items.iter().find(|i| !known.contains(&i.as_str())) {
            return bad(format!("unknown STATUS item {i}"));
        }
        let values = self.account(|a| {
            let mb = a.get(&name).filter(|m| !m.noselect)?;
            let recent = mb
                .messages
                .iter()
                .filter(|m| m.uid > mb.recent_upto)
                .count();
            let unseen = mb
                .messages
                .iter()
                .filter(|m| m.flags & flags::SEEN == 0)
                .count();
            Some(
                items
                    .iter()
                    .map(|i| {
                        let v = match i.as_str() {
                            "MESSAGES" => mb.messages.len() as u64,
                            "RECENT" => recent as u64,
                            "UIDNEXT" => mb.next_uid.into(),
                            "UIDVALIDITY" => mb.uid_validity.into(),
                            "HIGHESTMODSEQ" => mb.highest_modseq,
                            _ => unseen as u64,
                        };
                        format!("{i} {v}")
                    })
                    .collect::<Vec<_>>(),
            )
        });
        let Some(values) = values else {
            return no("[NONEXISTENT] no such mailbox");
        };
        let line = format!("* STATUS {} ({})\r\n", astring(&name), values.join(" "));
        self.conn.queue(line.as_bytes());
        ok("STATUS completed")
    }

    /// APPEND of one message or several (MULTIAPPEND): all of them or none.
    pub(super) fn append(&mut self, name: &str, messages: Vec<Appended>) -> Done {
        let name = canonical(name);
        let mut prepared = Vec::with_capacity(messages.len());
        for m in messages {
            let (system, keywords) = match super::fetch::split_flags(&m.flags) {
                Ok((s, k)) => (s, k.into_iter().map(str::to_string).collect::<Vec<_>>()),
                Err(e) => return bad(e),
            };
            let received = match m.date {
                Some(s) if s >= 0 => SystemTime::UNIX_EPOCH + Duration::from_secs(s as u64),
                Some(_) => SystemTime::UNIX_EPOCH,
                None => SystemTime::now(),
            };
            let mut stored = StoredMessage::new(0, Arc::from(m.message), received);
            stored.flags = system;
            prepared.push((stored, keywords));
        }
        if !self
            .sh
            .store
            .has_room(prepared.iter().map(|(m, _)| m.size).sum())
        {
            return no("[OVERQUOTA] mail store full");
        }
        self.account(|a| {
            let Some(mb) = a.get_mut(&name).filter(|m| !m.noselect) else {
                return no("[TRYCREATE] no such mailbox");
            };
            let needed: Vec<&String> = prepared.iter().flat_map(|(_, k)| k).collect();
            let new = needed
                .iter()
                .filter(|k| !mb.keywords.iter().any(|x| x.eq_ignore_ascii_case(k)))
                .count();
            if mb.keywords.len() + new > crate::serve::store::MAX_KEYWORDS {
                return no("[LIMIT] too many keywords");
            }
            let mut uids = Vec::with_capacity(prepared.len());
            for (mut m, keywords) in prepared {
                for k in &keywords {
                    m.keywords |= mb.keyword_bit(k, true).unwrap_or(0);
                }
                uids.push(mb.push(m));
            }
            ok(format!(
                "[APPENDUID {} {}] APPEND completed",
                mb.uid_validity,
                super::uid_set(&uids)
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        assert!(matches("*", "a/b/c"));
        assert!(matches("%", "a"));
        assert!(!matches("%", "a/b"));
        assert!(matches("a/%", "a/b"));
        assert!(!matches("a/%", "a/b/c"));
        assert!(matches("a/*", "a/b/c"));
        assert!(matches("inbox", "INBOX"));
        assert!(matches("In%", "INBOX"));
        assert!(matches("*c", "a/b/c"));
        assert!(matches("%/%", "a/b"));
        assert!(!matches("x", "y"));
        // Many stars against a long name: no exponential backtracking.
        let name = "a".repeat(500);
        assert!(!matches(&format!("{}b", "*a".repeat(200)), &name));
        assert!(matches(&"*a".repeat(200), &name));
        assert!(matches("inbox/%", "INBOX/sub"));
        assert_eq!(canonical("Inbox/Sub"), "INBOX/Sub");
        assert_eq!(canonical("inboxes"), "inboxes");
        assert!(valid_name("a/b"));
        assert!(!valid_name("a//b"));
        assert!(!valid_name("a*"));
        assert_eq!(parents("a/b/c").collect::<Vec<_>>(), vec!["a", "a/b"]);
    }
}
