//! The embedded server's mail store: mailboxes in memory (optionally written through to a
//! Maildir tree), a memory cap, a discard mode that keeps only counts, and change
//! notification for IMAP IDLE. Also the user table used by AUTH, POP3 and IMAP logins.
//!
//! One mutex guards the mailbox map; every operation under it is short (a push, a scan of
//! one mailbox), and bodies are shared `Arc<[u8]>`s so readers copy no message bytes.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use tokio::sync::watch;

/// IMAP system flags, as bits.
pub mod flags {
    pub const SEEN: u8 = 1;
    pub const ANSWERED: u8 = 2;
    pub const FLAGGED: u8 = 4;
    pub const DELETED: u8 = 8;
    pub const DRAFT: u8 = 16;
}

#[derive(Debug, Clone)]
pub struct StoredMessage {
    pub uid: u32,
    /// The message as received (CRLF line endings, dot-unstuffed). Empty in discard mode.
    pub data: Arc<[u8]>,
    /// The size as received, also in discard mode.
    pub size: u64,
    pub received: SystemTime,
    pub flags: u8,
}

#[derive(Debug)]
pub struct Mailbox {
    pub uid_validity: u32,
    pub next_uid: u32,
    pub messages: Vec<StoredMessage>,
    /// With `--discard`: messages counted but not kept (no body, no record), so memory
    /// stays flat however long the server runs.
    pub discarded: u64,
    pub discarded_bytes: u64,
    changes: watch::Sender<u64>,
}

impl Mailbox {
    fn new(uid_validity: u32) -> Self {
        Mailbox {
            uid_validity,
            next_uid: 1,
            messages: Vec::new(),
            discarded: 0,
            discarded_bytes: 0,
            changes: watch::channel(0).0,
        }
    }

    /// Removes messages flagged \Deleted; returns their 1-based sequence numbers in the
    /// order IMAP EXPUNGE responses must be sent (each number valid after the previous
    /// removals).
    pub fn expunge_deleted(&mut self) -> Vec<u32> {
        let mut removed = Vec::new();
        let mut i = 0;
        while i < self.messages.len() {
            if self.messages[i].flags & flags::DELETED != 0 {
                self.messages.remove(i);
                removed.push(i as u32 + 1);
            } else {
                i += 1;
            }
        }
        if !removed.is_empty() {
            self.changes.send_modify(|v| *v += 1);
        }
        removed
    }

    /// Removes the messages with these UIDs (POP3 DELE committed at QUIT).
    pub fn remove_uids(&mut self, uids: &[u32]) -> usize {
        let before = self.messages.len();
        self.messages.retain(|m| !uids.contains(&m.uid));
        let n = before - self.messages.len();
        if n > 0 {
            self.changes.send_modify(|v| *v += 1);
        }
        n
    }

    pub fn total_bytes(&self) -> u64 {
        self.messages.iter().map(|m| m.size).sum()
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
    boxes: Mutex<HashMap<Box<str>, Mailbox>>,
    stored_bytes: AtomicU64,
    delivered: AtomicU64,
    maildir_seq: AtomicU64,
    uid_validity: u32,
    leaked: Mutex<Vec<Box<[u8]>>>,
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
    address
        .trim()
        .trim_start_matches('<')
        .trim_end_matches('>')
        .to_ascii_lowercase()
}

impl Store {
    pub fn new(opts: StoreOptions) -> Arc<Self> {
        let uid_validity = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(1);
        Arc::new(Store {
            opts,
            boxes: Mutex::new(HashMap::new()),
            stored_bytes: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            maildir_seq: AtomicU64::new(0),
            uid_validity,
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
        let key = mailbox_key(mailbox);
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
        let mb = boxes
            .entry(key.into_boxed_str())
            .or_insert_with(|| Mailbox::new(self.uid_validity));
        let uid = mb.next_uid;
        mb.next_uid += 1;
        if self.opts.discard {
            mb.discarded += 1;
            mb.discarded_bytes += size;
            mb.changes.send_modify(|v| *v += 1);
            self.delivered.fetch_add(1, Ordering::Relaxed);
            return Ok(uid);
        }
        self.stored_bytes.fetch_add(size, Ordering::Relaxed);
        mb.messages.push(StoredMessage {
            uid,
            data: Arc::from(data),
            size,
            received: SystemTime::now(),
            flags: 0,
        });
        mb.changes.send_modify(|v| *v += 1);
        self.delivered.fetch_add(1, Ordering::Relaxed);
        Ok(uid)
    }

    fn write_maildir(&self, dir: &std::path::Path, key: &str, data: &[u8]) -> std::io::Result<()> {
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
            data.len()
        );
        let tmp = base.join("tmp").join(&name);
        std::fs::write(&tmp, data)?;
        std::fs::rename(&tmp, base.join("new").join(&name))
    }

    /// Runs `f` on the mailbox (created empty if it does not exist yet).
    pub fn with_mailbox<R>(&self, mailbox: &str, f: impl FnOnce(&mut Mailbox) -> R) -> R {
        let key = mailbox_key(mailbox);
        let mut boxes = self.boxes.lock().unwrap_or_else(|p| p.into_inner());
        let mb = boxes
            .entry(key.into_boxed_str())
            .or_insert_with(|| Mailbox::new(self.uid_validity));
        let before = mb.total_bytes();
        let r = f(mb);
        let after = mb.total_bytes();
        if !self.opts.discard && after < before {
            self.stored_bytes
                .fetch_sub(before - after, Ordering::Relaxed);
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

    /// A receiver that changes whenever the mailbox changes (delivery, expunge).
    pub fn watch(&self, mailbox: &str) -> watch::Receiver<u64> {
        self.with_mailbox(mailbox, |mb| mb.changes.subscribe())
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
            .map(|(k, mb)| {
                (
                    k.to_string(),
                    mb.messages.len() + mb.discarded as usize,
                    mb.total_bytes() + mb.discarded_bytes,
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
        let key = mailbox_key(address);
        if self.passwords.contains_key(&key) {
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
