//! The embedded server's own counters, so tests and benchmarks can reconcile what the
//! client saw with what the server did. Plain atomics: sessions bump them without locks
//! (only the set of client addresses takes a lock, once per accepted connection);
//! readers take a [`Counts`] (serializable, written to `--stats-file`).

use std::collections::{BTreeMap, HashSet};
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::injection::{FaultKind, FaultPoint};
use super::listener::Listener;

const CODES: usize = 600;
/// Distinct client addresses remembered (for the count).
const MAX_CLIENT_ADDRESSES: usize = 4096;

#[derive(Debug)]
pub struct Stats {
    connections: [AtomicU64; Listener::ALL.len()],
    client_addresses: Mutex<HashSet<IpAddr>>,
    refused_connections: AtomicU64,
    active: AtomicU64,
    tls_sessions: AtomicU64,
    tls_resumed: AtomicU64,
    auth_successes: AtomicU64,
    auth_failures: AtomicU64,
    messages: AtomicU64,
    chunked: AtomicU64,
    recipients: AtomicU64,
    bytes: AtomicU64,
    lost: AtomicU64,
    duplicated: AtomicU64,
    unacknowledged: AtomicU64,
    rejections: Box<[AtomicU64]>,
    faults: [[AtomicU64; FaultKind::ALL.len()]; FaultPoint::ALL.len()],
    logins: AtomicU64,
    retrieved: AtomicU64,
    xmpp: XmppStats,
    rr: RrStats,
}

/// The decision service's counters (see [`RrCounts`]).
#[derive(Debug, Default)]
struct RrStats {
    requests: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    bad_requests: AtomicU64,
    subjects: AtomicU64,
}

/// What the request/response decision service did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RrCounts {
    /// Requests answered with a decision (hits + misses).
    pub requests: u64,
    /// Decisions found in the cache, and those computed (at --rr-miss-cost each).
    pub hits: u64,
    pub misses: u64,
    /// Requests that could not be read (bad framing, over the size cap): answered with an
    /// error (HTTP 400) and the connection closed.
    pub bad_requests: u64,
    /// Distinct client certificate subjects seen (counted up to 4096).
    pub subjects: u64,
}

/// The XMPP listeners' counters (see [`XmppCounts`] for what each means).
#[derive(Debug, Default)]
struct XmppStats {
    sessions: AtomicU64,
    sessions_total: AtomicU64,
    stanzas_received: AtomicU64,
    stanzas_routed: AtomicU64,
    message_deliveries: AtomicU64,
    presence_deliveries: AtomicU64,
    multicasts: AtomicU64,
    bounces: AtomicU64,
    registrations: AtomicU64,
    queue_overflows: AtomicU64,
    stream_errors: AtomicU64,
}

/// What the XMPP listeners did, so a load run can reconcile its ledger with the server.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct XmppCounts {
    /// Sessions bound to a resource now, and ever.
    pub sessions: u64,
    pub sessions_total: u64,
    /// Stanzas (message, presence, iq) read from bound sessions.
    pub stanzas_received: u64,
    /// Messages and presences the server routed (to any number of recipients, none
    /// included); a multicast counts once.
    pub stanzas_routed: u64,
    /// Copies queued to a recipient session: messages, presences, and their sum.
    pub message_deliveries: u64,
    pub presence_deliveries: u64,
    pub deliveries: u64,
    /// XEP-0033 stanzas fanned out by the multicast service.
    pub multicasts: u64,
    /// Stanza errors returned to a sender (service-unavailable and the like).
    pub bounces: u64,
    /// Accounts created by in-band registration (XEP-0077).
    pub registrations: u64,
    /// Sessions closed because they read too slowly for their queue.
    pub queue_overflows: u64,
    /// Stream errors sent (not-well-formed, policy-violation, conflict, ...).
    pub stream_errors: u64,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            connections: Default::default(),
            client_addresses: Mutex::default(),
            refused_connections: AtomicU64::new(0),
            active: AtomicU64::new(0),
            tls_sessions: AtomicU64::new(0),
            tls_resumed: AtomicU64::new(0),
            auth_successes: AtomicU64::new(0),
            auth_failures: AtomicU64::new(0),
            messages: AtomicU64::new(0),
            chunked: AtomicU64::new(0),
            recipients: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            duplicated: AtomicU64::new(0),
            unacknowledged: AtomicU64::new(0),
            rejections: (0..CODES).map(|_| AtomicU64::new(0)).collect(),
            faults: Default::default(),
            logins: AtomicU64::new(0),
            retrieved: AtomicU64::new(0),
            xmpp: XmppStats::default(),
            rr: RrStats::default(),
        }
    }
}

fn inc(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// A point-in-time copy of every counter (the `--stats-file` JSON).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counts {
    pub connections: BTreeMap<String, u64>,
    /// Distinct IP addresses connections came from, on every listener (counted up to
    /// 4096): how many hosts a distributed run really used.
    #[serde(default)]
    pub client_addresses: u64,
    pub refused_connections: u64,
    pub active_connections: u64,
    pub tls_sessions: u64,
    /// Of `tls_sessions`: handshakes that resumed an earlier session.
    #[serde(default)]
    pub tls_resumed: u64,
    pub auth_successes: u64,
    pub auth_failures: u64,
    pub messages_accepted: u64,
    /// Messages whose content came in BDAT chunks (CHUNKING) rather than after DATA, up
    /// to the final answer (a chunk refused on arrival is read, dropped and not counted).
    #[serde(default)]
    pub messages_chunked: u64,
    pub recipients_delivered: u64,
    pub bytes_accepted: u64,
    /// Deliveries acknowledged and thrown away (`--lose`): what `spate verify` must
    /// report missing.
    #[serde(default)]
    pub recipients_lost: u64,
    /// Extra copies stored (`--duplicate`): what `spate verify` must report duplicated.
    #[serde(default)]
    pub recipients_duplicated: u64,
    /// Deliveries stored without a positive final reply (`--drop stored:P`, `--fail
    /// stored:...`): the client cannot know; `spate verify` finds them.
    #[serde(default)]
    pub recipients_unacknowledged: u64,
    /// Replies with code >= 400, by code.
    pub rejections: BTreeMap<u16, u64>,
    /// Injected faults by "phase:kind" (e.g. "rcpt:fail").
    pub faults: BTreeMap<String, u64>,
    /// POP3/IMAP logins and messages retrieved.
    pub mailbox_logins: u64,
    pub messages_retrieved: u64,
    #[serde(default)]
    pub xmpp: XmppCounts,
    #[serde(default)]
    pub rr: RrCounts,
}

impl Stats {
    /// A connection accepted on `l` from `peer`.
    pub fn connection(&self, l: Listener, peer: IpAddr) {
        inc(&self.connections[l as usize]);
        if let Ok(mut seen) = self.client_addresses.lock() {
            if seen.len() < MAX_CLIENT_ADDRESSES {
                seen.insert(peer);
            }
        }
    }
    pub fn refused(&self) {
        inc(&self.refused_connections);
    }
    pub(crate) fn active_delta(&self, up: bool) {
        if up {
            inc(&self.active);
        } else {
            self.active.fetch_sub(1, Ordering::Relaxed);
        }
    }
    /// A TLS handshake completed; `resumed` when it resumed an earlier session.
    pub fn tls_session(&self, resumed: bool) {
        inc(&self.tls_sessions);
        if resumed {
            inc(&self.tls_resumed);
        }
    }
    pub fn auth(&self, ok: bool) {
        inc(if ok {
            &self.auth_successes
        } else {
            &self.auth_failures
        });
    }
    pub fn accepted(&self, recipients: u64, bytes: u64) {
        inc(&self.messages);
        self.recipients.fetch_add(recipients, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    /// Deliveries acknowledged and not stored (`--lose`).
    pub fn lost(&self, recipients: u64) {
        self.lost.fetch_add(recipients, Ordering::Relaxed);
    }
    /// Extra copies stored (`--duplicate`).
    pub fn duplicated(&self, copies: u64) {
        self.duplicated.fetch_add(copies, Ordering::Relaxed);
    }
    /// Deliveries stored that got no positive final reply.
    pub fn unacknowledged(&self, recipients: u64) {
        self.unacknowledged.fetch_add(recipients, Ordering::Relaxed);
    }
    /// A message's last BDAT chunk arrived and was taken (stored or not, as it turns out).
    pub fn chunked(&self) {
        inc(&self.chunked);
    }
    pub fn reply(&self, code: u16) {
        if code >= 400 {
            if let Some(a) = self.rejections.get(code as usize) {
                inc(a);
            }
        }
    }
    pub fn fault(&self, phase: FaultPoint, kind: FaultKind) {
        inc(&self.faults[phase as usize][kind as usize]);
    }
    pub fn login(&self) {
        inc(&self.logins);
    }
    pub fn retrieved(&self) {
        inc(&self.retrieved);
    }

    pub fn connections(&self, l: Listener) -> u64 {
        get(&self.connections[l as usize])
    }
    pub fn messages(&self) -> u64 {
        get(&self.messages)
    }
    pub fn recipients(&self) -> u64 {
        get(&self.recipients)
    }
    pub fn rejections(&self, code: u16) -> u64 {
        self.rejections.get(code as usize).map(get).unwrap_or(0)
    }
    pub fn faults(&self, phase: FaultPoint, kind: FaultKind) -> u64 {
        get(&self.faults[phase as usize][kind as usize])
    }
    pub fn active(&self) -> u64 {
        get(&self.active)
    }

    /// An XMPP session bound (`up`) or ended after binding.
    pub(crate) fn xmpp_session(&self, up: bool) {
        let x = &self.xmpp;
        if up {
            inc(&x.sessions);
            inc(&x.sessions_total);
        } else {
            x.sessions.fetch_sub(1, Ordering::Relaxed);
        }
    }
    pub(crate) fn xmpp_stanza_received(&self) {
        inc(&self.xmpp.stanzas_received);
    }
    /// One stanza routed to `copies` recipients (`presence` or message).
    pub(crate) fn xmpp_routed(&self, presence: bool, copies: u64) {
        let x = &self.xmpp;
        inc(&x.stanzas_routed);
        let d = if presence {
            &x.presence_deliveries
        } else {
            &x.message_deliveries
        };
        d.fetch_add(copies, Ordering::Relaxed);
    }
    /// One XEP-0033 fan-out (its stanza and copies are counted by `xmpp_routed`).
    pub(crate) fn xmpp_multicast(&self) {
        inc(&self.xmpp.multicasts);
    }
    pub(crate) fn xmpp_bounce(&self) {
        inc(&self.xmpp.bounces);
    }
    pub(crate) fn xmpp_registration(&self) {
        inc(&self.xmpp.registrations);
    }
    pub(crate) fn xmpp_queue_overflow(&self) {
        inc(&self.xmpp.queue_overflows);
    }
    pub(crate) fn xmpp_stream_error(&self) {
        inc(&self.xmpp.stream_errors);
    }

    /// A decision answered from the cache (`hit`) or computed.
    pub(crate) fn rr_request(&self, hit: bool) {
        inc(&self.rr.requests);
        inc(if hit { &self.rr.hits } else { &self.rr.misses });
    }
    pub(crate) fn rr_bad_request(&self) {
        inc(&self.rr.bad_requests);
    }
    pub(crate) fn rr_subject(&self) {
        inc(&self.rr.subjects);
    }

    /// The decision service's counters now.
    pub fn rr(&self) -> RrCounts {
        let r = &self.rr;
        RrCounts {
            requests: get(&r.requests),
            hits: get(&r.hits),
            misses: get(&r.misses),
            bad_requests: get(&r.bad_requests),
            subjects: get(&r.subjects),
        }
    }

    /// The XMPP counters now.
    pub fn xmpp(&self) -> XmppCounts {
        let x = &self.xmpp;
        let (m, p) = (get(&x.message_deliveries), get(&x.presence_deliveries));
        XmppCounts {
            sessions: get(&x.sessions),
            sessions_total: get(&x.sessions_total),
            stanzas_received: get(&x.stanzas_received),
            stanzas_routed: get(&x.stanzas_routed),
            message_deliveries: m,
            presence_deliveries: p,
            deliveries: m + p,
            multicasts: get(&x.multicasts),
            bounces: get(&x.bounces),
            registrations: get(&x.registrations),
            queue_overflows: get(&x.queue_overflows),
            stream_errors: get(&x.stream_errors),
        }
    }

    pub fn snapshot(&self) -> Counts {
        let mut faults = BTreeMap::new();
        for p in FaultPoint::ALL {
            for k in FaultKind::ALL {
                let n = self.faults(p, k);
                if n > 0 {
                    faults.insert(format!("{}:{}", p.name(), k.name()), n);
                }
            }
        }
        Counts {
            connections: Listener::ALL
                .iter()
                .map(|l| (l.name().to_string(), self.connections(*l)))
                .filter(|(_, n)| *n > 0)
                .collect(),
            client_addresses: self.client_addresses.lock().map_or(0, |s| s.len() as u64),
            refused_connections: get(&self.refused_connections),
            active_connections: get(&self.active),
            tls_sessions: get(&self.tls_sessions),
            tls_resumed: get(&self.tls_resumed),
            auth_successes: get(&self.auth_successes),
            auth_failures: get(&self.auth_failures),
            messages_accepted: get(&self.messages),
            messages_chunked: get(&self.chunked),
            recipients_delivered: get(&self.recipients),
            bytes_accepted: get(&self.bytes),
            recipients_lost: get(&self.lost),
            recipients_duplicated: get(&self.duplicated),
            recipients_unacknowledged: get(&self.unacknowledged),
            rejections: (0..CODES)
                .filter_map(|c| {
                    let n = get(&self.rejections[c]);
                    (n > 0).then_some((c as u16, n))
                })
                .collect(),
            faults,
            mailbox_logins: get(&self.logins),
            messages_retrieved: get(&self.retrieved),
            xmpp: self.xmpp(),
            rr: self.rr(),
        }
    }
}

impl Counts {
    /// A few lines for stderr at exit.
    pub fn summary(&self) -> String {
        let conns: Vec<String> = self
            .connections
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let rej: Vec<String> = self
            .rejections
            .iter()
            .map(|(k, v)| format!("{k}x{v}"))
            .collect();
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        format!(
            "connections: {} (refused {}, client addresses {}), TLS sessions {} ({} resumed), auth ok {} failed {}\n\
             messages accepted {}, recipients delivered {}, bytes {}{}\n\
             rejections: {}\ninjected faults: {}\nmailbox logins {}, messages retrieved {}",
            if conns.is_empty() {
                "none".to_string()
            } else {
                conns.join(" ")
            },
            self.refused_connections,
            self.client_addresses,
            self.tls_sessions,
            self.tls_resumed,
            self.auth_successes,
            self.auth_failures,
            self.messages_accepted,
            self.recipients_delivered,
            self.bytes_accepted,
            if self.recipients_lost + self.recipients_duplicated + self.recipients_unacknowledged > 0 {
                format!(
                    "\ndeliveries lost on purpose {} (acknowledged, thrown away), duplicated {} (extra copies), stored unacknowledged {}",
                    self.recipients_lost, self.recipients_duplicated, self.recipients_unacknowledged
                )
            } else {
                String::new()
            },
            if rej.is_empty() {
                "none".to_string()
            } else {
                rej.join(" ")
            },
            if faults.is_empty() {
                "none".to_string()
            } else {
                faults.join(" ")
            },
            self.mailbox_logins,
            self.messages_retrieved,
        ) + &self.xmpp_summary()
            + &self.rr_summary()
    }

    /// The decision service's line (nothing when it answered nothing).
    fn rr_summary(&self) -> String {
        let r = &self.rr;
        if r.requests + r.bad_requests == 0 {
            return String::new();
        }
        format!(
            "\nrr: requests {} (cache hits {}, misses {}), bad requests {}, client subjects {}",
            r.requests, r.hits, r.misses, r.bad_requests, r.subjects
        )
    }

    /// The XMPP line of the summary (nothing when no XMPP session was bound).
    fn xmpp_summary(&self) -> String {
        let x = &self.xmpp;
        if x.sessions_total == 0 && x.registrations == 0 && x.stream_errors == 0 {
            return String::new();
        }
        format!(
            "\nxmpp sessions {}, stanzas received {} routed {}, deliveries {} (messages {}, \
             presences {}), multicasts {}, bounces {}, registrations {}, queue overflows {}, \
             stream errors {}",
            x.sessions_total,
            x.stanzas_received,
            x.stanzas_routed,
            x.deliveries,
            x.message_deliveries,
            x.presence_deliveries,
            x.multicasts,
            x.bounces,
            x.registrations,
            x.queue_overflows,
            x.stream_errors,
        )
    }

    /// Writes the JSON atomically: a temporary file in the same directory, then rename.
    pub fn write_atomic(&self, path: &Path) -> std::io::Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        let json = serde_json::to_vec_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(&tmp, json)?;
        std::fs::rename(&tmp, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_counts_and_writes() {
        let s = Stats::default();
        let (a, b) = ("127.0.0.2".parse().unwrap(), "::1".parse().unwrap());
        s.connection(Listener::Smtp, a);
        s.connection(Listener::Smtp, a);
        s.connection(Listener::Imap, b);
        s.reply(451);
        s.reply(451);
        s.reply(250);
        s.reply(9999);
        s.fault(FaultPoint::Rcpt, FaultKind::Fail);
        s.accepted(2, 100);
        let snap = s.snapshot();
        assert_eq!(snap.connections.get("smtp"), Some(&2));
        assert_eq!(snap.client_addresses, 2, "two addresses, one twice");
        assert_eq!(snap.rejections.get(&451), Some(&2));
        assert_eq!(snap.rejections.len(), 1);
        assert_eq!(snap.faults.get("rcpt:fail"), Some(&1));
        assert_eq!(snap.recipients_delivered, 2);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stats.json");
        snap.write_atomic(&path).unwrap();
        let back: Counts = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(back, snap);
        assert!(snap.summary().contains("451x2"));
        assert!(snap.summary().contains("client addresses 2"));
    }
}
