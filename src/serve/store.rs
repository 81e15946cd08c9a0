//! The embedded server's mail store: per user an account of mailboxes in memory — INBOX,
//! where SMTP/LMTP deliver (optionally written through to a Maildir tree) and POP3 reads,
//! and the ones IMAP creates, with keywords, mod-sequences and subscriptions — a memory
//! cap, a discard mode that keeps only counts, and change notification for IMAP IDLE.
//! Also the user table used by AUTH, POP3 and IMAP logins.
//!
//! One mutex guards the mailbox map; every operation under it is short (a push, a scan of
//! one mailbox), and bodies are shared `Arc<[u8]>`s so readers copy no message bytes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use tokio::sync::watch;

mod removals;
pub use removals::Removals;

/// IMAP system flags, as bits.
pub mod flags {
    pub const SEEN: u8 = 1;
    pub const ANSWERED: u8 = 2;
    pub const FLAGGED: u8 = 4;
    pub const DELETED: u8 = 8;
    pub const DRAFT: u8 = 16;
}

/// At most this many keywords per mailbox (they are bits of a `u64`).
pub const MAX_KEYWORDS: usize = 64;

/// Deleted mailboxes whose removals an account remembers (for JMAP's `*/changes`).
const MAX_RETIRED: usize = 64;

#[derive(Debug, Clone)]
pub struct StoredMessage {
    pub uid: u32,
    /// The message as received (CRLF line endings, dot-unstuffed). Empty in discard mode.
    pub data: Arc<[u8]>,
    /// The size as received, also in discard mode.
    pub size: u64,
    pub received: SystemTime,
    pub flags: u8,
    /// Keywords, as bits into the mailbox's keyword table.
    pub keywords: u64,
    /// The mailbox's change counter when the flags last changed (or the message came).
    pub modseq: u64,
    /// What a protocol derives from the message on first need and keeps (IMAP: its
    /// MIME structure, for FETCH and SEARCH); the store does not look inside.
    pub derived: OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
}

impl StoredMessage {
    pub fn new(uid: u32, data: Arc<[u8]>, received: SystemTime) -> Self {
        StoredMessage {
            uid,
            size: data.len() as u64,
            data,
            received,
            flags: 0,
            keywords: 0,
            modseq: 0,
            derived: OnceLock::new(),
        }
    }
}

#[derive(Debug)]
pub struct Mailbox {
    pub uid_validity: u32,
    pub next_uid: u32,
    pub messages: Vec<StoredMessage>,
    /// Keyword names; bit i of a message's `keywords` is `keywords[i]`.
    pub keywords: Vec<String>,
    /// The last change counter handed out (CONDSTORE's HIGHESTMODSEQ).
    pub highest_modseq: u64,
    /// UIDs up to this one have been \Recent in some session already.
    pub recent_upto: u32,
    /// Kept only as the parent of other mailboxes (DELETE of a mailbox with children).
    pub noselect: bool,
    /// With `--discard`: messages counted but not kept (no body, no record), so memory
    /// stays flat however long the server runs.
    pub discarded: u64,
    pub discarded_bytes: u64,
    /// What was removed, and when (by version).
    pub removals: Removals,
    bytes: u64,
    changes: watch::Sender<u64>,
}

impl Mailbox {
    fn new(uid_validity: u32) -> Self {
        Mailbox {
            uid_validity,
            next_uid: 1,
            messages: Vec::new(),
            keywords: Vec::new(),
            highest_modseq: 1,
            recent_upto: 0,
            noselect: false,
            discarded: 0,
            discarded_bytes: 0,
            removals: Removals::default(),
            bytes: 0,
            changes: watch::channel(0).0,
        }
    }

    /// Wakes the sessions idling on this mailbox.
    pub fn touch(&self) {
        self.changes.send_modify(|v| *v += 1);
    }

    /// Counts every change (delivery, flags, expunge, rename, delete): equal counts, same
    /// mailbox.
    pub fn version(&self) -> u64 {
        *self.changes.borrow()
    }

    /// The next change counter, for a message whose flags change now.
    pub fn next_modseq(&mut self) -> u64 {
        self.highest_modseq += 1;
        self.highest_modseq
    }

    /// Adds a message under the next UID (its `uid` and `modseq` are set here).
    pub fn push(&mut self, mut m: StoredMessage) -> u32 {
        m.uid = self.next_uid;
        self.next_uid += 1;
        m.modseq = self.next_modseq();
        self.bytes += m.size;
        self.messages.push(m);
        self.touch();
        self.next_uid - 1
    }

    /// The bit of keyword `name` (case-insensitive), added to the table if `add`; `None`
    /// when unknown (and not added) or the table is full.
    pub fn keyword_bit(&mut self, name: &str, add: bool) -> Option<u64> {
        if let Some(i) = self
            .keywords
            .iter()
            .position(|k| k.eq_ignore_ascii_case(name))
        {
            return Some(1 << i);
        }
        if !add || self.keywords.len() >= MAX_KEYWORDS {
            return None;
        }
        self.keywords.push(name.to_string());
        Some(1 << (self.keywords.len() - 1))
    }

    /// Removes the messages `keep` says no to; returns their 1-based sequence numbers in
    /// the order IMAP EXPUNGE responses must be sent (each valid after the previous ones).
    pub fn remove_where(&mut self, mut gone: impl FnMut(&StoredMessage) -> bool) -> Vec<u32> {
        let mut removed = Vec::new();
        let mut uids = Vec::new();
        let mut kept = Vec::with_capacity(self.messages.len());
        for m in self.messages.drain(..) {
            if gone(&m) {
                self.bytes -= m.size;
                removed.push(kept.len() as u32 + 1);
                uids.push(m.uid);
            } else {
                kept.push(m);
            }
        }
        self.messages = kept;
        if !removed.is_empty() {
            self.touch();
            let version = self.version();
            for uid in uids {
                self.removals.record(version, uid);
            }
        }
        removed
    }

    /// Removes messages flagged \Deleted (see [`Mailbox::remove_where`]).
    pub fn expunge_deleted(&mut self) -> Vec<u32> {
        self.remove_where(|m| m.flags & flags::DELETED != 0)
    }

    /// Removes the messages with these UIDs (POP3 DELE committed at QUIT).
    pub fn remove_uids(&mut self, uids: &[u32]) -> usize {
        self.remove_where(|m| uids.contains(&m.uid)).len()
    }

    pub fn total_bytes(&self) -> u64 {
        self.bytes
    }

    /// The position of the message with this UID.
    pub fn find(&self, uid: u32) -> Option<usize> {
        self.messages.binary_search_by_key(&uid, |m| m.uid).ok()
    }

    /// A receiver that changes whenever the mailbox changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

/// One user's mailboxes: INBOX (where SMTP, LMTP and POP3 deliver and read) and the
/// others IMAP creates, named with `/` as the hierarchy delimiter, and subscriptions.
#[derive(Debug)]
pub struct Account {
    pub inbox: Mailbox,
    /// By full name (case-sensitive; INBOX is not here).
    pub folders: BTreeMap<String, Mailbox>,
    pub subscribed: BTreeSet<String>,
    /// The removals of deleted mailboxes whose removals were kept, by UIDVALIDITY (the
    /// newest last, bounded); boxed, as most accounts never have one: a pointer in every
    /// account, not an empty queue's 32 bytes (an IMAP session in IDLE is held to 8 KiB).
    #[allow(clippy::box_collection)]
    retired: Option<Box<VecDeque<(u32, Removals)>>>,
}

/// Is this name INBOX (case-insensitive, RFC 3501 5.1)?
pub fn is_inbox(name: &str) -> bool {
    name.eq_ignore_ascii_case("INBOX")
}

impl Account {
    pub fn get(&self, name: &str) -> Option<&Mailbox> {
        if is_inbox(name) {
            Some(&self.inbox)
        } else {
            self.folders.get(name)
        }
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut Mailbox> {
        if is_inbox(name) {
            Some(&mut self.inbox)
        } else {
            self.folders.get_mut(name)
        }
    }

    fn bytes(&self) -> u64 {
        self.inbox.bytes + self.folders.values().map(|m| m.bytes).sum::<u64>()
    }

    /// Keeps what a deleted mailbox (emptied with [`Mailbox::remove_where`]) removed.
    pub fn retire(&mut self, mb: Mailbox) {
        if !mb.removals.kept() {
            return;
        }
        let retired = self.retired.get_or_insert_with(Box::default);
        retired.push_back((mb.uid_validity, mb.removals));
        if retired.len() > MAX_RETIRED {
            retired.pop_front();
        }
    }

    /// The removals of the mailbox with this UIDVALIDITY, live or deleted; `None` when
    /// it is forgotten.
    pub fn removals(&self, uid_validity: u32) -> Option<&Removals> {
        std::iter::once(&self.inbox)
            .chain(self.folders.values())
            .find(|m| m.uid_validity == uid_validity)
            .map(|m| &m.removals)
            .or_else(|| {
                self.retired
                    .as_deref()?
                    .iter()
                    .find(|(uv, _)| *uv == uid_validity)
                    .map(|(_, r)| r)
            })
    }
}

#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    /// Write every delivered message to DIR/<mailbox>/new as well (Maildir).
    pub maildir: Option<PathBuf>,
    /// Keep counts and sizes only, no bodies.
    pub discard: bool,
    /// Refuse deliveries (452) once stored bodies exceed this many bytes. 0 = no cap.
    pub memory_cap: u64,
    /// Bytes kept forever per delivered message: a deliberate leak for soak tests. 0 = off.
    pub leak_per_message: u64,
    /// With `maildir`: acknowledge first, write the Maildir file this long later
    /// (`--ack-before-store`), recording both in DIR/.spate-ack-before-store.log.
    pub ack_before_store: Option<std::time::Duration>,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("mail store full ({0} bytes)")]
    Full(u64),
    #[error("maildir write failed: {0}")]
    Io(#[from] std::io::Error),
}

#[derive(Debug)]
pub struct Store {
    opts: StoreOptions,
    boxes: Mutex<HashMap<Box<str>, Account>>,
    stored_bytes: AtomicU64,
    delivered: AtomicU64,
    maildir_seq: AtomicU64,
    /// The next UIDVALIDITY: every mailbox created gets its own, so that a mailbox
    /// deleted and created again never reuses one.
    uid_validity: AtomicU32,
    leaked: Mutex<Vec<Box<[u8]>>>,
    /// `--ack-before-store`'s deferred Maildir writer.
    behind: Option<super::behind::Behind>,
    /// Mailboxes a POP3 session holds in the TRANSACTION state.
    maildrop_locks: Mutex<HashSet<String>>,
}

/// The exclusive POP3 lock on one maildrop (RFC 1939 4), released when dropped, so that
/// no way out of a session (QUIT, error, timeout, shutdown, a cancelled task) leaks it.
#[derive(Debug)]
pub struct MaildropLock {
    store: Arc<Store>,
    key: String,
}

impl Drop for MaildropLock {
    fn drop(&mut self) {
        self.store
            .maildrop_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.key);
    }
}

/// Mailbox names are addresses, compared case-insensitively.
pub fn mailbox_key(address: &str) -> String {
    mailbox_key_ref(address).into_owned()
}

/// [`mailbox_key`], borrowed from `address` when it is already in that form.
fn mailbox_key_ref(address: &str) -> std::borrow::Cow<'_, str> {
    let key = address.trim().trim_start_matches('<').trim_end_matches('>');
    if key.bytes().any(|b| b.is_ascii_uppercase()) {
        key.to_ascii_lowercase().into()
    } else {
        key.into()
    }
}

impl Store {
    pub fn new(opts: StoreOptions) -> Arc<Self> {
        let uid_validity = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(1);
        let behind = match (&opts.maildir, opts.ack_before_store) {
            (Some(dir), Some(delay)) => Some(super::behind::Behind::start(dir, delay)),
            _ => None,
        };
        Arc::new(Store {
            behind,
            opts,
            boxes: Mutex::new(HashMap::new()),
            stored_bytes: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            maildir_seq: AtomicU64::new(0),
            uid_validity: AtomicU32::new(uid_validity.max(1)),
            leaked: Mutex::new(Vec::new()),
            maildrop_locks: Mutex::new(HashSet::new()),
        })
    }

    pub fn options(&self) -> &StoreOptions {
        &self.opts
    }

    /// Would `bytes` more fit under the memory cap? (Checked before a multi-recipient
    /// delivery so that it is all or nothing.)
    pub fn has_room(&self, bytes: u64) -> bool {
        self.opts.discard
            || self.opts.memory_cap == 0
            || self.stored_bytes.load(Ordering::Relaxed) + bytes <= self.opts.memory_cap
    }

    /// Delivers one message to one mailbox; returns its UID.
    pub fn deliver(&self, mailbox: &str, data: &[u8]) -> Result<u32, StoreError> {
        let key = mailbox_key_ref(mailbox);
        let size = data.len() as u64;
        if !self.opts.discard && self.opts.memory_cap > 0 {
            let now = self.stored_bytes.load(Ordering::Relaxed);
            if now + size > self.opts.memory_cap {
                return Err(StoreError::Full(self.opts.memory_cap));
            }
        }
        if let Some(dir) = &self.opts.maildir {
            self.write_maildir(dir, &key, data)?;
        }
        if self.opts.leak_per_message > 0 {
            // Filled, so the pages are really resident.
            let leak = vec![0xA5u8; self.opts.leak_per_message as usize].into_boxed_slice();
            self.leaked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(leak);
        }
        let mut boxes = self.boxes.lock().unwrap_or_else(|p| p.into_inner());
        // A mailbox that exists is found without making its key.
        Ok(match boxes.get_mut(&*key) {
            Some(account) => self.put(&mut account.inbox, data),
            None => {
                let account = boxes
                    .entry(key.into_owned().into_boxed_str())
                    .or_insert_with(|| self.new_account());
                self.put(&mut account.inbox, data)
            }
        })
    }

    /// Puts a delivered message into `mb` (or counts it, discarding); returns its UID.
    fn put(&self, mb: &mut Mailbox, data: &[u8]) -> u32 {
        let size = data.len() as u64;
        self.delivered.fetch_add(1, Ordering::Relaxed);
        if self.opts.discard {
            let uid = mb.next_uid;
            mb.next_uid += 1;
            mb.discarded += 1;
            mb.discarded_bytes += size;
            mb.touch();
            return uid;
        }
        self.stored_bytes.fetch_add(size, Ordering::Relaxed);
        mb.push(StoredMessage::new(0, Arc::from(data), SystemTime::now()))
    }

    /// Writes the message to its Maildir now, or with `--ack-before-store` hands it to the
    /// writer that stores it later (after the reply).
    fn write_maildir(&self, dir: &std::path::Path, key: &str, data: &[u8]) -> std::io::Result<()> {
        let (tmp, new) = self.maildir_paths(dir, key, data.len())?;
        match &self.behind {
            Some(b) => {
                b.push(tmp, new, data);
                Ok(())
            }
            None => super::behind::write(&tmp, &new, data),
        }
    }

    /// Where a message of `len` bytes for `key` goes: its tmp/ and new/ paths (the
    /// directories made).
    fn maildir_paths(
        &self,
        dir: &std::path::Path,
        key: &str,
        len: usize,
    ) -> std::io::Result<(PathBuf, PathBuf)> {
        // Keep the address readable but never let it escape the tree.
        let safe: String = key
            .chars()
            .map(|c| if c == '/' || c == '\0' { '_' } else { c })
            .collect();
        let safe = if safe.starts_with('.') {
            format!("_{safe}")
        } else {
            safe
        };
        let base = dir.join(safe);
        for sub in ["tmp", "new", "cur"] {
            std::fs::create_dir_all(base.join(sub))?;
        }
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        let seq = self.maildir_seq.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "{}.M{}P{}Q{}.spate,S={}",
            now.as_secs(),
            now.subsec_micros(),
            std::process::id(),
            seq,
            len
        );
        Ok((base.join("tmp").join(&name), base.join("new").join(&name)))
    }

    /// Stores every message still waiting for its deferred write (`--ack-before-store`):
    /// a server stopped cleanly keeps what it acknowledged; only a kill loses it.
    pub fn flush(&self) {
        if let Some(b) = &self.behind {
            b.flush();
        }
    }

    fn new_account(&self) -> Account {
        Account {
            inbox: self.new_mailbox(),
            folders: BTreeMap::new(),
            // Clients that only show subscribed mailboxes show INBOX.
            subscribed: BTreeSet::from(["INBOX".to_string()]),
            retired: None,
        }
    }

    /// An empty mailbox with a UIDVALIDITY no other mailbox had.
    pub fn new_mailbox(&self) -> Mailbox {
        Mailbox::new(self.uid_validity.fetch_add(1, Ordering::Relaxed))
    }

    /// Runs `f` on the user's INBOX (created empty if it does not exist yet).
    pub fn with_mailbox<R>(&self, mailbox: &str, f: impl FnOnce(&mut Mailbox) -> R) -> R {
        self.with_account(mailbox, |a| f(&mut a.inbox))
    }

    /// Runs `f` on all of a user's mailboxes (created with an empty INBOX if need be).
    /// Stored bytes follow what `f` added or removed.
    pub fn with_account<R>(&self, user: &str, f: impl FnOnce(&mut Account) -> R) -> R {
        let key = mailbox_key(user);
        let mut boxes = self.boxes.lock().unwrap_or_else(|p| p.into_inner());
        let acct = boxes
            .entry(key.into_boxed_str())
            .or_insert_with(|| self.new_account());
        let before = acct.bytes();
        let r = f(acct);
        let after = acct.bytes();
        if !self.opts.discard {
            if after < before {
                self.stored_bytes
                    .fetch_sub(before - after, Ordering::Relaxed);
            } else {
                self.stored_bytes
                    .fetch_add(after - before, Ordering::Relaxed);
            }
        }
        r
    }

    /// Locks the maildrop for one POP3 session; `None` while another session holds it.
    pub fn lock_maildrop(self: &Arc<Self>, mailbox: &str) -> Option<MaildropLock> {
        let key = mailbox_key(mailbox);
        let mut locks = self
            .maildrop_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        locks.insert(key.clone()).then(|| MaildropLock {
            store: self.clone(),
            key,
        })
    }

    /// A receiver that changes whenever the user's mailbox `name` changes (delivery,
    /// flags, expunge); `None` if there is no such mailbox.
    pub fn watch(&self, user: &str, name: &str) -> Option<watch::Receiver<u64>> {
        self.with_account(user, |a| a.get(name).map(Mailbox::subscribe))
    }

    /// Messages delivered since start (one per recipient).
    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    pub fn stored_bytes(&self) -> u64 {
        self.stored_bytes.load(Ordering::Relaxed)
    }

    /// (mailbox, messages now held, bytes now held), sorted by mailbox.
    pub fn mailbox_counts(&self) -> Vec<(String, usize, u64)> {
        let boxes = self.boxes.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<_> = boxes
            .iter()
            .map(|(k, a)| {
                let all = || std::iter::once(&a.inbox).chain(a.folders.values());
                (
                    k.to_string(),
                    all()
                        .map(|mb| mb.messages.len() + mb.discarded as usize)
                        .sum(),
                    all().map(|mb| mb.total_bytes() + mb.discarded_bytes).sum(),
                )
            })
            .collect();
        v.sort();
        v
    }
}

/// Who may log in. Without a users file any local part of the served domains is a user
/// and any password is accepted: an open test server, said so in `--help`.
#[derive(Debug, Clone, Default)]
pub struct Users {
    passwords: HashMap<String, String>,
    domains: Vec<String>,
}

impl Users {
    /// Parses `address password` lines; `#` comments and blank lines are skipped.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut passwords = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(user), Some(pass)) = (parts.next(), parts.next()) else {
                return Err(format!(
                    "line {}: expected 'address password', got '{line}'",
                    n + 1
                ));
            };
            passwords.insert(mailbox_key(user), pass.to_string());
        }
        if passwords.is_empty() {
            return Err("no users in file".to_string());
        }
        Ok(Users {
            passwords,
            domains: Vec::new(),
        })
    }

    pub fn open(domains: Vec<String>) -> Self {
        Users {
            passwords: HashMap::new(),
            domains: domains
                .into_iter()
                .map(|d| d.to_ascii_lowercase())
                .collect(),
        }
    }

    pub fn with_domains(mut self, domains: Vec<String>) -> Self {
        self.domains = domains
            .into_iter()
            .map(|d| d.to_ascii_lowercase())
            .collect();
        self
    }

    /// True when a users file was given (so logins are checked).
    pub fn has_table(&self) -> bool {
        !self.passwords.is_empty()
    }

    /// May mail be delivered to this address?
    pub fn is_local(&self, address: &str) -> bool {
        let key = mailbox_key_ref(address);
        if self.passwords.contains_key(&*key) {
            return true;
        }
        if self.has_table() {
            return false;
        }
        match key.rsplit_once('@') {
            Some((_, domain)) => {
                self.domains.is_empty() || self.domains.iter().any(|d| d == domain)
            }
            None => false,
        }
    }

    /// Checks a login. Users may log in with the full address or, when unambiguous,
    /// the local part.
    pub fn check(&self, user: &str, password: &str) -> bool {
        if !self.has_table() {
            return self.is_local(user) || !user.contains('@');
        }
        let key = mailbox_key(user);
        if let Some(p) = self.passwords.get(&key) {
            return p == password;
        }
        if !key.contains('@') {
            let prefix = format!("{key}@");
            let mut matches = self
                .passwords
                .iter()
                .filter(|(k, _)| k.starts_with(&prefix));
            if let (Some((_, p)), None) = (matches.next(), matches.next()) {
                return p == password;
            }
        }
        false
    }

    /// The mailbox a login maps to (a bare local part gets the first domain).
    pub fn mailbox_for_login(&self, user: &str) -> String {
        let key = mailbox_key(user);
        if key.contains('@') {
            return key;
        }
        let prefix = format!("{key}@");
        if let Some(k) = self.passwords.keys().find(|k| k.starts_with(&prefix)) {
            return k.clone();
        }
        match self.domains.first() {
            Some(d) => format!("{key}@{d}"),
            None => key,
        }
    }

    /// The password for CRAM-MD5 (which needs the cleartext secret).
    pub fn password(&self, user: &str) -> Option<&str> {
        self.passwords.get(&mailbox_key(user)).map(String::as_str)
    }

    /// Every address of the users file (lowercased; none without one): the XMPP roster.
    pub fn addresses(&self) -> impl Iterator<Item = &str> {
        self.passwords.keys().map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliver_and_expunge() {
        let store = Store::new(StoreOptions::default());
        store.deliver("A@Example.test", b"one\r\n").unwrap();
        store.deliver("a@example.test", b"two\r\n").unwrap();
        assert_eq!(store.delivered(), 2);
        let removed = store.with_mailbox("a@example.test", |mb| {
            assert_eq!(mb.messages.len(), 2);
            mb.messages[0].flags |= flags::DELETED;
            mb.expunge_deleted()
        });
        assert_eq!(removed, vec![1]);
        assert_eq!(store.stored_bytes(), 5);
    }

    #[test]
    fn discard_keeps_counts_and_nothing_per_message() {
        let store = Store::new(StoreOptions {
            discard: true,
            ..StoreOptions::default()
        });
        for i in 0..10_000u32 {
            let uid = store
                .deliver(&format!("u{}@example.test", i % 3), b"body\r\n")
                .unwrap();
            assert_eq!(uid, i / 3 + 1);
        }
        assert_eq!(store.delivered(), 10_000);
        assert_eq!(store.stored_bytes(), 0);
        let counts = store.mailbox_counts();
        assert_eq!(counts.len(), 3);
        assert_eq!(counts.iter().map(|c| c.1).sum::<usize>(), 10_000);
        assert_eq!(counts.iter().map(|c| c.2).sum::<u64>(), 60_000);
        store.with_mailbox("u0@example.test", |mb| assert!(mb.messages.is_empty()));
    }

    #[test]
    fn memory_cap_refuses() {
        let store = Store::new(StoreOptions {
            memory_cap: 8,
            ..Default::default()
        });
        store.deliver("a@x", b"12345").unwrap();
        assert!(matches!(
            store.deliver("a@x", b"12345"),
            Err(StoreError::Full(8))
        ));
    }

    #[test]
    fn maildrop_lock_is_exclusive_until_dropped() {
        let store = Store::new(StoreOptions::default());
        let first = store.lock_maildrop("A@x.test").unwrap();
        assert!(store.lock_maildrop("a@x.test").is_none());
        assert!(store.lock_maildrop("b@x.test").is_some());
        drop(first);
        assert!(store.lock_maildrop("a@x.test").is_some());
    }

    #[test]
    fn users_file() {
        let u = Users::parse("# test\nalice@example.test s3cret\nbob@example.test pw\n").unwrap();
        assert!(u.check("alice@example.test", "s3cret"));
        assert!(u.check("alice", "s3cret"));
        assert!(!u.check("alice", "wrong"));
        assert!(u.is_local("Bob@example.test"));
        assert!(!u.is_local("carol@example.test"));
        assert!(Users::parse("justone\n").is_err());
    }
}
