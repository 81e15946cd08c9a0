//! What an XMPP run is made of, beside its sessions: the SASL mechanism, the kinds of
//! traffic and their mix, the roster mode, the accounts, and the gate sessions wait at.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::Serialize;

use crate::metrics::Phase;

/// Which SASL mechanism to log in with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sasl {
    /// The strongest offered: SCRAM-SHA-256, then SCRAM-SHA-1, then PLAIN.
    Auto,
    #[value(name = "scram-sha-256")]
    ScramSha256,
    #[value(name = "scram-sha-1")]
    ScramSha1,
    Plain,
}

impl Sasl {
    pub fn name(self) -> &'static str {
        match self {
            Sasl::Auto => "auto",
            Sasl::ScramSha256 => "scram-sha-256",
            Sasl::ScramSha1 => "scram-sha-1",
            Sasl::Plain => "plain",
        }
    }
}

/// What a unit of work sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Traffic {
    /// A chat message to one other session.
    Message,
    /// One XEP-0033 message to the multicast service, addressed to --addresses sessions.
    Multicast,
    /// A presence change, which the server broadcasts to the sender's contacts.
    Presence,
    /// The next stanza of --raw FILE (an IQ is timed to its reply).
    Raw,
}

impl Traffic {
    pub const ALL: [Traffic; 4] = [
        Traffic::Message,
        Traffic::Multicast,
        Traffic::Presence,
        Traffic::Raw,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Traffic::Message => "message",
            Traffic::Multicast => "multicast",
            Traffic::Presence => "presence",
            Traffic::Raw => "raw",
        }
    }

    /// The kind a name or a stamp's `k` letter stands for (a chat message when unknown).
    pub fn from_name(name: &str) -> Traffic {
        match name {
            "multicast" | "c" => Traffic::Multicast,
            "presence" | "p" => Traffic::Presence,
            "raw" | "r" => Traffic::Raw,
            _ => Traffic::Message,
        }
    }

    /// The letter a stamp carries.
    pub(super) fn letter(self) -> char {
        match self {
            Traffic::Message => 'm',
            Traffic::Multicast => 'c',
            Traffic::Presence => 'p',
            Traffic::Raw => 'r',
        }
    }

    /// The phases that time its arrival at each recipient, and at the last one.
    pub(super) fn phases(self) -> (Phase, Option<Phase>) {
        match self {
            Traffic::Message | Traffic::Raw => (super::phase::ARRIVAL, None),
            Traffic::Multicast => (super::phase::MULTICAST, Some(super::phase::MULTICAST_LAST)),
            Traffic::Presence => (super::phase::BROADCAST, Some(super::phase::BROADCAST_LAST)),
        }
    }
}

/// The kinds of stanza a run sends and their shares: each unit of work takes the kind
/// that is furthest behind its share (smooth weighted round robin), so every kind keeps
/// its own rate within one unit, in any mix.
pub struct Mix {
    kinds: Vec<(Traffic, f64)>,
    credit: std::sync::Mutex<Vec<f64>>,
}

impl Mix {
    /// `kinds`: each kind with its weight (its rate); weights need not add up to 1.
    pub fn new(kinds: Vec<(Traffic, f64)>) -> Mix {
        let credit = std::sync::Mutex::new(vec![0.0; kinds.len()]);
        Mix { kinds, credit }
    }

    pub fn only(kind: Traffic) -> Mix {
        Mix::new(vec![(kind, 1.0)])
    }

    pub fn has(&self, kind: Traffic) -> bool {
        self.kinds.iter().any(|k| k.0 == kind)
    }

    /// The kind of the next unit.
    pub fn next(&self) -> Traffic {
        if self.kinds.len() == 1 {
            return self.kinds[0].0;
        }
        let mut c = self.credit.lock().unwrap_or_else(|p| p.into_inner());
        let total: f64 = self.kinds.iter().map(|k| k.1).sum();
        let mut best = 0;
        for (i, (_, w)) in self.kinds.iter().enumerate() {
            c[i] += w;
            if c[i] > c[best] {
                best = i;
            }
        }
        c[best] -= total;
        self.kinds[best].0
    }
}

/// What a session does with its roster after binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RosterMode {
    /// Nothing.
    #[value(skip)]
    Off,
    /// Ask for the roster (a phase of its own).
    Get,
    /// Ask for it, then subscribe to every session of the run not yet in it with
    /// subscription both (each approves the others' requests), so presence reaches all.
    All,
}

/// An account: a bare JID and its password.
#[derive(Debug, Clone)]
pub struct Account {
    pub jid: String,
    pub password: String,
}

impl Account {
    /// An account whose JID must be bare (local@domain, no resource).
    pub fn bare(jid: String, password: String) -> Result<Account, crate::UsageError> {
        match jid.split_once('@') {
            Some((l, d))
                if !l.is_empty()
                    && !d.is_empty()
                    && !d.contains('@')
                    && !jid.contains(['/', ' ', '<', '>', '"', '\'', '&']) =>
            {
                Ok(Account { jid, password })
            }
            _ => Err(crate::UsageError(format!(
                "{jid}: not a bare JID (local@domain)"
            ))),
        }
    }
}

/// Counts the logins of a run, so that no message goes out before every session has
/// tried to log in (a message to a session still logging in would be lost, not slow).
#[derive(Default)]
pub struct Gate {
    tried: AtomicUsize,
    notify: tokio::sync::Notify,
}

impl Gate {
    pub(super) fn tried(&self) {
        self.tried.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// How many have said so.
    pub(super) fn count(&self) -> usize {
        self.tried.load(Ordering::SeqCst)
    }

    /// Waits until `sessions` logins were tried, or `limit` passed.
    pub(super) async fn wait(&self, sessions: usize, limit: Duration) {
        let all = async {
            loop {
                let notified = self.notify.notified();
                if self.tried.load(Ordering::SeqCst) >= sessions {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(limit, all).await;
    }
}
