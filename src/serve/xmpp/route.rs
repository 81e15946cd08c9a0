//! Who is online, and getting stanzas to them: a registry of bound sessions per domain
//! and local part, each with a bounded outbound queue.
//!
//! One lock guards the registry, so a presence broadcast, a binding that replaces an
//! older session and a session's end happen in one order for everyone (the counts a test
//! reconciles are exact). Queues are filled with `try_send` under the lock: nothing ever
//! waits for a slow reader. A session whose queue is full (in stanzas or in bytes) is
//! removed, told why through its `kick` cell, and its contacts see it go unavailable.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tokio::sync::mpsc;

use super::super::shared::Shared;
use super::stanza::{to_attr, Jid, Outbound, Prepared};
use super::MAX_QUEUED_BYTES;
use crate::proto::xmpp::Element;

/// Why a session was removed from the registry by someone else.
pub(super) type Kick = Arc<OnceLock<&'static str>>;

struct Entry {
    id: u64,
    resource: String,
    full: Arc<str>,
    /// ` to='full JID'`, for the copies addressed to this session.
    to: Arc<str>,
    tx: mpsc::Sender<Outbound>,
    /// Bytes queued and not yet written.
    queued: Arc<AtomicUsize>,
    kick: Kick,
    /// Sent available presence (and not unavailable since).
    available: bool,
    priority: i8,
    /// Its last available presence, for a contact that becomes available later (RFC
    /// 6121 §4.2.2: the server answers a session's initial presence with its contacts').
    last: Option<Arc<Prepared>>,
}

/// Where a session lives in the registry.
type Key = (String, String, u64);

#[derive(Default)]
struct Inner {
    /// domain → local part → the account's sessions.
    domains: HashMap<String, HashMap<String, Vec<Entry>>>,
    next_id: u64,
}

/// The registry of bound sessions.
#[derive(Default)]
pub(crate) struct Routes {
    inner: Mutex<Inner>,
}

/// A session's place in the registry, and the receiving end of its queue.
pub(super) struct Binding {
    pub id: u64,
    pub local: String,
    pub domain: String,
    pub full: Arc<str>,
    pub rx: mpsc::Receiver<Outbound>,
    pub queued: Arc<AtomicUsize>,
    pub kick: Kick,
}

/// Which resources of an account a stanza to its bare JID reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reach {
    /// Available resources with a priority of 0 or more (messages, RFC 6121 §8.5.2.1.1).
    Messages,
    /// Every available resource (presence, §8.5.2.1.2).
    Presence,
}

/// Sessions to remove after a fan-out, because their queues overflowed.
#[derive(Default)]
struct Victims(Vec<Key>);

fn lock(m: &Mutex<Inner>) -> MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Entry {
    /// Queues one copy; a full queue makes this session a victim.
    fn push(&self, key: (&str, &str), out: Outbound, victims: &mut Victims) -> bool {
        let n = out.len();
        if self.queued.load(Ordering::Relaxed) + n > MAX_QUEUED_BYTES {
            victims
                .0
                .push((key.0.to_string(), key.1.to_string(), self.id));
            return false;
        }
        match self.tx.try_send(out) {
            Ok(()) => {
                self.queued.fetch_add(n, Ordering::Relaxed);
                true
            }
            Err(mpsc::error::TrySendError::Full(_)) => {
                victims
                    .0
                    .push((key.0.to_string(), key.1.to_string(), self.id));
                false
            }
            // The session is ending; its unbinding comes next.
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }

    fn reached(&self, reach: Reach) -> bool {
        self.available && (reach == Reach::Presence || self.priority >= 0)
    }
}

impl Inner {
    /// A copy to every available session of `domain`, each addressed to its full JID.
    /// `audience`: the local parts reached (see [`super::Hub::audience`]); `None`: all.
    /// The last presence of every available contact of `b` (its audience, which is
    /// symmetric: a shared roster), to `b`'s session, which has just become available.
    fn probe(&self, b: &Binding, audience: Option<&HashSet<String>>, victims: &mut Victims) -> u64 {
        let Some(accounts) = self.domains.get(&b.domain) else {
            return 0;
        };
        let Some(me) = accounts
            .get(&b.local)
            .and_then(|s| s.iter().find(|e| e.id == b.id))
        else {
            return 0;
        };
        let mut n = 0;
        for (local, sessions) in accounts {
            if audience.is_some_and(|a| !a.contains(local)) {
                continue;
            }
            for e in sessions.iter().filter(|e| e.available && e.id != b.id) {
                let Some(last) = &e.last else { continue };
                let out = Outbound {
                    stanza: last.clone(),
                    to: me.to.clone(),
                };
                n += u64::from(me.push((&b.domain, &b.local), out, victims));
            }
        }
        n
    }

    fn broadcast(
        &self,
        domain: &str,
        stanza: &Arc<Prepared>,
        audience: Option<&HashSet<String>>,
        victims: &mut Victims,
    ) -> u64 {
        let Some(accounts) = self.domains.get(domain) else {
            return 0;
        };
        let mut n = 0;
        for (local, sessions) in accounts {
            if audience.is_some_and(|a| !a.contains(local)) {
                continue;
            }
            for e in sessions.iter().filter(|e| e.available) {
                let out = Outbound {
                    stanza: stanza.clone(),
                    to: e.to.clone(),
                };
                n += u64::from(e.push((domain, local), out, victims));
            }
        }
        n
    }

    fn sessions(&self, domain: &str, local: &str) -> &[Entry] {
        self.domains
            .get(domain)
            .and_then(|a| a.get(local))
            .map_or(&[], Vec::as_slice)
    }

    fn remove(&mut self, domain: &str, local: &str, id: u64) -> Option<Entry> {
        let accounts = self.domains.get_mut(domain)?;
        let sessions = accounts.get_mut(local)?;
        let i = sessions.iter().position(|e| e.id == id)?;
        let e = sessions.remove(i);
        if sessions.is_empty() {
            accounts.remove(local);
        }
        Some(e)
    }

    /// Tells the contacts of a removed session that it went away (when it was available).
    fn gone(&self, sh: &Shared, domain: &str, e: &Entry, victims: &mut Victims) {
        if !e.available {
            return;
        }
        let p = Element {
            name: "presence".into(),
            attrs: vec![
                ("from".into(), e.full.to_string()),
                ("type".into(), "unavailable".into()),
            ],
            ..Element::default()
        };
        let local = e.full.split('@').next().unwrap_or_default();
        let audience = super::hub(sh).audience(local, domain);
        let n = self.broadcast(
            domain,
            &Arc::new(Prepared::of(&p)),
            audience.as_ref(),
            victims,
        );
        sh.stats.xmpp_routed(true, n);
    }

    /// Removes the sessions whose queues overflowed (and any that overflow while their
    /// contacts are told).
    fn evict(&mut self, sh: &Shared, mut victims: Victims) {
        let mut seen = HashSet::new();
        while let Some((domain, local, id)) = victims.0.pop() {
            if !seen.insert(id) {
                continue;
            }
            if let Some(e) = self.remove(&domain, &local, id) {
                let _ = e.kick.set("policy-violation");
                sh.stats.xmpp_queue_overflow();
                self.gone(sh, &domain, &e, &mut victims);
            }
        }
    }
}

impl Routes {
    /// Binds `local@domain/resource`. A session already bound to that full JID is
    /// replaced: it ends with a `conflict` stream error (RFC 6120 §7.7.2.2).
    pub(super) fn bind(
        &self,
        sh: &Shared,
        local: &str,
        domain: &str,
        resource: &str,
        queue: usize,
    ) -> Binding {
        let (tx, rx) = mpsc::channel(queue.max(1));
        let full: Arc<str> = format!("{local}@{domain}/{resource}").into();
        let queued = Arc::new(AtomicUsize::new(0));
        let kick = Kick::default();
        let mut inner = lock(&self.inner);
        inner.next_id += 1;
        let id = inner.next_id;
        let mut victims = Victims::default();
        let sessions = inner
            .domains
            .entry(domain.to_string())
            .or_default()
            .entry(local.to_string())
            .or_default();
        let old = sessions
            .iter()
            .position(|e| e.resource == resource)
            .map(|i| sessions.remove(i));
        sessions.push(Entry {
            id,
            resource: resource.to_string(),
            full: full.clone(),
            to: to_attr(&full),
            tx,
            queued: queued.clone(),
            kick: kick.clone(),
            available: false,
            last: None,
            priority: 0,
        });
        if let Some(old) = old {
            let _ = old.kick.set("conflict");
            inner.gone(sh, domain, &old, &mut victims);
        }
        inner.evict(sh, victims);
        Binding {
            id,
            local: local.to_string(),
            domain: domain.to_string(),
            full,
            rx,
            queued,
            kick,
        }
    }

    /// The session ends: out of the registry, and its contacts see it unavailable.
    pub(super) fn unbind(&self, sh: &Shared, b: &Binding) {
        let mut inner = lock(&self.inner);
        let mut victims = Victims::default();
        if let Some(e) = inner.remove(&b.domain, &b.local, b.id) {
            inner.gone(sh, &b.domain, &e, &mut victims);
        }
        inner.evict(sh, victims);
    }

    /// Broadcast presence (no `to`): the session becomes available (with `priority`) or
    /// unavailable, and every available session of the domain (with subscription-built
    /// rosters, of its subscribers) gets a copy, the sender's own resources included (RFC 6121 §4.2.2, §4.5.2). Returns the copies queued.
    pub(super) fn presence(
        &self,
        sh: &Shared,
        b: &Binding,
        stanza: Prepared,
        available: bool,
        priority: i8,
    ) -> u64 {
        let mut inner = lock(&self.inner);
        let me = inner
            .domains
            .get_mut(&b.domain)
            .and_then(|a| a.get_mut(&b.local))
            .and_then(|s| s.iter_mut().find(|e| e.id == b.id));
        let Some(me) = me else {
            return 0; // removed already: its end is on the way
        };
        let initial = available && !me.available;
        me.available = available;
        me.priority = priority;
        let stanza = Arc::new(stanza);
        me.last = available.then(|| stanza.clone());
        let mut victims = Victims::default();
        let audience = super::hub(sh).audience(&b.local, &b.domain);
        let n = inner.broadcast(&b.domain, &stanza, audience.as_ref(), &mut victims);
        if initial {
            // Not counted as routed: the contacts' presences went out when they sent them.
            inner.probe(b, audience.as_ref(), &mut victims);
        }
        inner.evict(sh, victims);
        n
    }

    /// Queues `stanza` for `target`: a full JID's session when it is bound (`None` when
    /// it is not), or the bare JID's sessions that `reach` selects. Copies carry `to`.
    pub(super) fn deliver(
        &self,
        sh: &Shared,
        target: &Jid,
        reach: Reach,
        stanza: &Arc<Prepared>,
        to: &Arc<str>,
    ) -> Option<u64> {
        let local = target.local.as_deref()?;
        let inner = lock(&self.inner);
        let mut victims = Victims::default();
        let key = (target.domain.as_str(), local);
        let sessions = inner.sessions(&target.domain, local);
        let out = || Outbound {
            stanza: stanza.clone(),
            to: to.clone(),
        };
        let n = match &target.resource {
            Some(r) => {
                let e = sessions.iter().find(|e| &e.resource == r)?;
                u64::from(e.push(key, out(), &mut victims))
            }
            None => sessions
                .iter()
                .filter(|e| e.reached(reach))
                .map(|e| u64::from(e.push(key, out(), &mut victims)))
                .sum(),
        };
        drop(inner);
        if !victims.0.is_empty() {
            lock(&self.inner).evict(sh, victims);
        }
        Some(n)
    }

    /// One copy of `stanza` to each session the `targets` reach (a session reached by
    /// several addresses gets one copy), each addressed to its target's JID as written.
    /// Targets that are offline or unknown get nothing.
    pub(super) fn fan_out(
        &self,
        sh: &Shared,
        targets: &[(Jid, Arc<str>)],
        reach: Reach,
        stanza: &Arc<Prepared>,
    ) -> u64 {
        let mut inner = lock(&self.inner);
        let mut victims = Victims::default();
        let mut reached = HashSet::new();
        let mut n = 0;
        for (jid, to) in targets {
            let Some(local) = jid.local.as_deref() else {
                continue;
            };
            let key = (jid.domain.as_str(), local);
            for e in inner.sessions(&jid.domain, local) {
                let hit = match &jid.resource {
                    Some(r) => &e.resource == r,
                    None => e.reached(reach),
                };
                if hit && reached.insert(e.id) {
                    let out = Outbound {
                        stanza: stanza.clone(),
                        to: to.clone(),
                    };
                    n += u64::from(e.push(key, out, &mut victims));
                }
            }
        }
        inner.evict(sh, victims);
        n
    }
}
