//! Mailboxes read over IMAP or POP3: every address of the sent log (recipients, and
//! senders for derived messages) is logged into and read whole; messages are fed to the
//! ledger by UID/UIDL, so polling again while waiting counts each message once.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::retrieve::{fetch_mailbox, parse_url, Account, Endpoint, MailProto};
use crate::verify::{Ledger, SentLog};
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
            let creds = crate::retrieve::read_credentials(path)?;
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

    /// Reads every mailbox the sent log names into the ledger once. Blocking: call from a
    /// blocking thread of the runtime.
    pub fn poll(&self, log: &SentLog, ledger: &mut Ledger) -> anyhow::Result<()> {
        let handle = tokio::runtime::Handle::current();
        let mut skipped = Vec::new();
        for id in 0..log.addrs.len() as u32 {
            let address = log.addrs.name(id);
            let Some(password) = self.passwords.get(address) else {
                skipped.push(address.to_string());
                continue;
            };
            let account = Account {
                user: address.to_string(),
                password: password.to_string(),
            };
            let fetched = handle
                .block_on(fetch_mailbox(self.proto, &self.endpoint, &account, false))
                .map_err(|e| anyhow::anyhow!("mailbox {address}: {e}"))?;
            for m in fetched {
                if !ledger.seen(address, &m.id) {
                    ledger.ingest(address, &m.id, &m.raw, m.arrived);
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
