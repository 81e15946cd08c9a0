//! What a server listens on and how it behaves: the configuration `spate serve`'s
//! options (and the demo, scenarios and tests) resolve to.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::faults::Faults;
pub use super::listener::Listener;
use super::store::{StoreOptions, Users};

use crate::tls::ServerIdentity;

/// Listening addresses, one optional address per listener kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Addrs {
    pub smtp: Option<SocketAddr>,
    pub submission: Option<SocketAddr>,
    /// SMTP with implicit TLS (RFC 8314).
    pub smtps: Option<SocketAddr>,
    pub lmtp: Option<SocketAddr>,
    pub pop3: Option<SocketAddr>,
    pub pop3s: Option<SocketAddr>,
    pub imap: Option<SocketAddr>,
    pub imaps: Option<SocketAddr>,
    /// XMPP client connections (STARTTLS offered).
    pub xmpp: Option<SocketAddr>,
    /// XMPP with direct TLS.
    pub xmpps: Option<SocketAddr>,
    /// XMPP over WebSocket, plain and over TLS.
    pub xmpp_ws: Option<SocketAddr>,
    pub xmpp_wss: Option<SocketAddr>,
    /// JMAP over HTTP and over HTTPS.
    pub jmap: Option<SocketAddr>,
    pub jmaps: Option<SocketAddr>,
    /// The request/response decision service.
    pub rr: Option<SocketAddr>,
    /// The decision service over TLS.
    pub rrs: Option<SocketAddr>,
}

impl Addrs {
    pub fn get(&self, l: Listener) -> Option<SocketAddr> {
        match l {
            Listener::Smtp => self.smtp,
            Listener::Submission => self.submission,
            Listener::Smtps => self.smtps,
            Listener::Lmtp => self.lmtp,
            Listener::Pop3 => self.pop3,
            Listener::Pop3s => self.pop3s,
            Listener::Imap => self.imap,
            Listener::Imaps => self.imaps,
            Listener::Xmpp => self.xmpp,
            Listener::Xmpps => self.xmpps,
            Listener::XmppWs => self.xmpp_ws,
            Listener::XmppWss => self.xmpp_wss,
            Listener::Jmap => self.jmap,
            Listener::Jmaps => self.jmaps,
            Listener::Rr => self.rr,
            Listener::Rrs => self.rrs,
        }
    }

    pub(super) fn set(&mut self, l: Listener, a: SocketAddr) {
        let slot = match l {
            Listener::Smtp => &mut self.smtp,
            Listener::Submission => &mut self.submission,
            Listener::Smtps => &mut self.smtps,
            Listener::Lmtp => &mut self.lmtp,
            Listener::Pop3 => &mut self.pop3,
            Listener::Pop3s => &mut self.pop3s,
            Listener::Imap => &mut self.imap,
            Listener::Imaps => &mut self.imaps,
            Listener::Xmpp => &mut self.xmpp,
            Listener::Xmpps => &mut self.xmpps,
            Listener::XmppWs => &mut self.xmpp_ws,
            Listener::XmppWss => &mut self.xmpp_wss,
            Listener::Jmap => &mut self.jmap,
            Listener::Jmaps => &mut self.jmaps,
            Listener::Rr => &mut self.rr,
            Listener::Rrs => &mut self.rrs,
        };
        *slot = Some(a);
    }

    pub fn is_empty(&self) -> bool {
        Listener::ALL.iter().all(|l| self.get(*l).is_none())
    }
}

/// Everything `start` needs. Build one with [`Config::loopback`] and adjust fields.
#[derive(Clone)]
pub struct Config {
    /// Where to listen (port 0 picks a free port; read the real one from `Running::addrs`).
    pub listen: Addrs,
    /// Domains served. Empty means every domain is local.
    pub domains: Vec<String>,
    /// Who may log in, and which addresses exist when a users file is given.
    pub users: Users,
    pub store: StoreOptions,
    /// Certificate and key; `None` generates a self-signed one at start.
    pub identity: Option<Arc<ServerIdentity>>,
    pub faults: Faults,
    /// Simultaneous connections over all listeners; beyond it: 421 and close. 0 = no cap.
    pub max_connections: usize,
    /// Connections beyond `max_connections` wait for a free slot instead of getting 421
    /// (like Postfix's process limit): load beyond it queues, so latency grows.
    pub queue_connections: bool,
    /// Listen with SO_REUSEPORT, sharing the ports with other processes that do.
    pub reuse_port: bool,
    pub max_rcpt: usize,
    /// Largest message accepted (bytes, after unstuffing). 0 = no limit.
    pub max_message_size: u64,
    /// A session waiting this long for the client is closed (421 4.4.2).
    pub idle_timeout: Duration,
    /// How long `shutdown` lets sessions in progress finish.
    pub shutdown_grace: Duration,
    /// Name in the greeting and EHLO reply.
    pub hostname: String,
    /// Rewritten every second (and at shutdown) with the counters as JSON.
    pub stats_file: Option<PathBuf>,
    /// Refuse messages with bare LF line ends (550 5.6.0) instead of normalizing them.
    pub reject_bare_lf: bool,
    pub xmpp: XmppOptions,
    pub rr: RrOptions,
    /// Threads that run the sessions of a server started apart (0: half the CPUs).
    pub threads: usize,
}

/// How the request/response decision service (`--rr`, `--rrs`) behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct RrOptions {
    pub frame: crate::proto::rr::Frame,
    /// Decisions remembered (least recently used forgotten first).
    pub cache: usize,
    /// What a decision not in the cache costs (CPU work for this long).
    pub miss_cost: Duration,
    /// `--rrs` requires a client certificate signed by one of these CAs (PEM file).
    pub client_ca: Option<PathBuf>,
}

impl Default for RrOptions {
    fn default() -> Self {
        RrOptions {
            frame: crate::proto::rr::Frame::Line,
            cache: 200,
            miss_cost: Duration::from_millis(2),
            client_ca: None,
        }
    }
}

/// How the XMPP listeners behave beyond what the mail options already say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct XmppOptions {
    /// Most to/cc/bcc addresses in one XEP-0033 multicast stanza; more get
    /// `not-acceptable`.
    pub multicast_limit: usize,
    /// Stanzas waiting to be written to one session; a session whose queue is full is
    /// too slow to read and is closed with a `policy-violation` stream error (its memory
    /// stays bounded, and the loss is visible).
    pub queue: usize,
    /// Rosters built from presence subscriptions instead of one shared roster.
    pub subscriptions: bool,
    /// Every stream ends with a `system-shutdown` stream error at its first message
    /// stanza, which is not routed: a server that delivers nothing (a client's check of
    /// its own verdicts).
    pub end_at_message: bool,
}

impl Default for XmppOptions {
    fn default() -> Self {
        XmppOptions {
            multicast_limit: 10_000,
            queue: 4096,
            subscriptions: false,
            end_at_message: false,
        }
    }
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("domains", &self.domains)
            .field("store", &self.store)
            .field("faults", &self.faults)
            .field("max_connections", &self.max_connections)
            .field("max_rcpt", &self.max_rcpt)
            .field("max_message_size", &self.max_message_size)
            .field("idle_timeout", &self.idle_timeout)
            .field("hostname", &self.hostname)
            .field("xmpp", &self.xmpp)
            .field("rr", &self.rr)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// SMTP on 127.0.0.1 with a free port, domain `example.test`, open users, no faults.
    pub fn loopback() -> Config {
        Config {
            listen: Addrs {
                smtp: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
                ..Addrs::default()
            },
            domains: vec!["example.test".to_string()],
            users: Users::default(),
            store: StoreOptions::default(),
            identity: None,
            faults: Faults::default(),
            max_connections: 1000,
            queue_connections: false,
            reuse_port: false,
            max_rcpt: 100,
            max_message_size: 64 * 1024 * 1024,
            idle_timeout: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(5),
            hostname: "spate.localhost".to_string(),
            stats_file: None,
            reject_bare_lf: false,
            xmpp: XmppOptions::default(),
            rr: RrOptions::default(),
            threads: 0,
        }
    }
}
