//! Accounts to log in as: a users file (`address password` per line, as the test bed
//! writes it) or a pattern with the password from the environment.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::message::AddressPool;
use crate::UsageError;

/// The accounts a load logs in as (pop3, imap, xmpp).
#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct AccountsArgs {
    /// Accounts from FILE, 'address password' per line (the test bed's users file; for
    /// XMPP the address is the JID).
    #[arg(long, value_name = "FILE", help_heading = "Accounts")]
    pub users_file: Option<PathBuf>,
    /// Accounts from a pattern like 'user{0..99}@example.test', all with the password
    /// from the environment variable SPATE_PASSWORD (never from the command line).
    #[arg(long, conflicts_with = "users_file", help_heading = "Accounts")]
    pub user_pattern: Option<String>,
}

impl AccountsArgs {
    /// The (address, password) pairs; `purpose` completes the error when neither option
    /// was given ("to visit", "log in").
    pub fn credentials(&self, purpose: &str) -> Result<Vec<(String, String)>, UsageError> {
        if let Some(path) = &self.users_file {
            return read_credentials(path);
        }
        let Some(pattern) = &self.user_pattern else {
            return Err(UsageError(format!(
                "say which accounts {purpose}: --users-file FILE or --user-pattern PATTERN (password in SPATE_PASSWORD)"
            )));
        };
        let pass = std::env::var("SPATE_PASSWORD").map_err(|_| {
            UsageError(
                "--user-pattern needs the password in the environment variable SPATE_PASSWORD"
                    .into(),
            )
        })?;
        let pool = AddressPool::from_pattern(pattern).map_err(|e| UsageError(e.to_string()))?;
        Ok(pool
            .addrs
            .iter()
            .map(|a| (a.to_string(), pass.clone()))
            .collect())
    }
}

/// Reads `address password` lines (blank lines and `#` comments skipped): the users file
/// of the test bed, `--users-file` of smtp, pop3, imap and serve.
pub fn read_credentials(path: &Path) -> Result<Vec<(String, String)>, UsageError> {
    let bad = |e: String| UsageError(format!("{}: {e}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    let mut creds = Vec::new();
    for (n, line) in text.lines().map(str::trim).enumerate() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut w = line.split_whitespace();
        match (w.next(), w.next()) {
            (Some(u), Some(p)) => creds.push((u.to_string(), p.to_string())),
            _ => return Err(bad(format!("line {}: expected 'address password'", n + 1))),
        }
    }
    if creds.is_empty() {
        return Err(bad("no users in file".into()));
    }
    Ok(creds)
}
