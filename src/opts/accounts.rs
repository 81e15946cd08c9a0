//! Users files: `address password` per line, as the test bed writes them.

use std::path::Path;

use crate::UsageError;

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
