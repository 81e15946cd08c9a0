//! Mailboxes read over IMAP or POP3: every address of the sent log (recipients, and
//! senders for derived messages) is logged into and read whole; messages are fed to the
//! ledger by UID/UIDL, so polling again while waiting counts each message once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::session::mailbox::fetch::{
    fetch_mailbox, parse_url, watch_mailbox, Account, MailProto, Watched,
};
use crate::session::Endpoint;
use crate::verify::{Ledger, SentLog, Timing};
use crate::UsageError;

/// Passwords for the mailboxes to read.
#[derive(Debug, Clone)]
pub enum Passwords {
    /// `address password` lines.
    File(HashMap<String, String>),
    /// One password for every mailbox (the environment variable SPATE_PASSWORD).
    Same(String),
}

impl Passwords {
    /// From `--users-file`, else SPATE_PASSWORD; a usage error when neither is given.
    pub fn load(users_file: Option<&PathBuf>) -> anyhow::Result<Passwords> {
        if let Some(path) = users_file {
            let creds = crate::opts::accounts::read_credentials(path)?;
            return Ok(Passwords::File(
                creds
                    .into_iter()
                    .map(|(u, p)| (u.to_ascii_lowercase(), p))
                    .collect(),
            ));
        }
        match std::env::var("SPATE_PASSWORD") {
            Ok(p) => Ok(Passwords::Same(p)),
            Err(_) => Err(UsageError(
                "an IMAP/POP3 source needs passwords: --users-file FILE ('address password' \
                 lines) or the environment variable SPATE_PASSWORD"
                    .into(),
            )
            .into()),
        }
    }

    fn get(&self, address: &str) -> Option<&str> {
        match self {
            Passwords::File(m) => m.get(&address.to_ascii_lowercase()).map(String::as_str),
            Passwords::Same(p) => Some(p),
        }
    }
}

/// An IMAP or POP3 server to read the mailboxes from.
pub struct Remote {
    proto: MailProto,
    endpoint: Endpoint,
    passwords: Passwords,
}

impl Remote {
    pub fn new(
        url: &str,
        tls: &crate::tls::ClientOptions,
        timeout: Duration,
        passwords: Passwords,
    ) -> anyhow::Result<Remote> {
        let (proto, endpoint) =
            parse_url(url, tls, timeout).map_err(|e| UsageError(e.to_string()))?;
        Ok(Remote {
            proto,
            endpoint,
            passwords,
        })
    }

    /// Reads every mailbox the sent log names into the ledger once, a few sessions at a
    /// time. Blocking: call from a blocking thread of the runtime.
    pub fn poll(&self, log: &SentLog, ledger: &mut Ledger) -> anyhow::Result<()> {
        const PARALLEL: usize = 8;
        let handle = tokio::runtime::Handle::current();
        let mut skipped = Vec::new();
        let mut accounts = Vec::new();
        for id in 0..log.addrs.len() as u32 {
            let address = log.addrs.name(id);
            match self.passwords.get(address) {
                Some(password) => accounts.push(Account {
                    user: address.to_string(),
                    password: password.to_string(),
                }),
                None => skipped.push(address.to_string()),
            }
        }
        for batch in accounts.chunks(PARALLEL) {
            let mut set = tokio::task::JoinSet::new();
            for account in batch {
                let (proto, ep, account) = (self.proto, self.endpoint.clone(), account.clone());
                set.spawn(async move {
                    let r = fetch_mailbox(proto, &ep, &account, false).await;
                    (account.user, r)
                });
            }
            // Fed in a stable order (the batch's), whatever order the sessions end in.
            let mut done = handle.block_on(async {
                let mut v = Vec::new();
                while let Some(r) = set.join_next().await {
                    v.push(r?);
                }
                Ok::<_, tokio::task::JoinError>(v)
            })?;
            done.sort_by_key(|(user, _)| batch.iter().position(|a| &a.user == user));
            for (address, fetched) in done {
                let fetched = fetched.map_err(|e| anyhow::anyhow!("mailbox {address}: {e}"))?;
                for m in fetched {
                    if !ledger.seen(&address, &m.id) {
                        // INTERNALDATE has whole seconds.
                        let arrived = m.arrived.map_or(Timing::Unknown, Timing::Seconds);
                        ledger.ingest(&address, &m.id, &m.raw, arrived);
                    }
                }
            }
        }
        if !skipped.is_empty() && skipped.len() == log.addrs.len() {
            anyhow::bail!(
                "no password for any mailbox of the run (first: {}): check --users-file",
                skipped[0]
            );
        }
        Ok(())
    }
}

/// Most mailboxes followed over IMAP IDLE at once while a run goes (one connection each);
/// beyond that, arrivals are timed by the final read.
pub const MAX_WATCHED: usize = 200;

impl Remote {
    /// Follows the mailboxes over IMAP IDLE while the run goes, feeding each new message
    /// to the ledger with the moment it was announced as its arrival time (real-time
    /// delivery latency). POP3 has no push: nothing is watched, the final read times
    /// arrivals from the Received headers. Returns the watchers to await after `stop`.
    pub fn watch(
        &self,
        addresses: &[String],
        ledger: std::sync::Arc<std::sync::Mutex<Ledger>>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        if self.proto != MailProto::Imap {
            return Vec::new();
        }
        let mut tasks = Vec::new();
        for address in addresses.iter().take(MAX_WATCHED) {
            let Some(password) = self.passwords.get(address) else {
                continue;
            };
            let account = Account {
                user: address.clone(),
                password: password.to_string(),
            };
            let (ep, ledger, stop) = (self.endpoint.clone(), ledger.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                let mailbox = account.user.clone();
                let on_new = |w: Watched| {
                    let Watched::New(m) = w else { return };
                    let now = std::time::SystemTime::now();
                    let mut l = ledger.lock().unwrap_or_else(|p| p.into_inner());
                    if !l.seen(&mailbox, &m.id) {
                        l.ingest(&mailbox, &m.id, &m.raw, Timing::Exact(now));
                    }
                };
                // A watcher that fails (login refused, server gone) leaves the mailbox to
                // the final read, which reports the error.
                let _ = watch_mailbox(&ep, &account, on_new, stop).await;
            }));
        }
        tasks
    }
}
