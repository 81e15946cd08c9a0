//! The Maildir source: ROOT/<address>/{new,cur}/<file>, as the embedded server
//! (`spate serve --maildir`) and the test bed's Dovecot write them. The file's mtime (ns
//! precision) is the arrival time: the server wrote it then and moving it from new/ to cur/
//! keeps it.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::ledger::Ledger;

pub struct Maildir {
    root: PathBuf,
}

/// What one pass over the tree did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Pass {
    pub mailboxes: usize,
    pub ingested: usize,
}

impl Maildir {
    pub fn new(root: &Path) -> Maildir {
        Maildir {
            root: root.to_path_buf(),
        }
    }

    /// Reads every message not ingested yet into the ledger. Files that vanish between
    /// listing and reading (moved to cur/, expunged) are skipped; the next pass sees them
    /// under their new name.
    pub fn poll(&self, ledger: &mut Ledger) -> std::io::Result<Pass> {
        let mut pass = Pass::default();
        let entries = std::fs::read_dir(&self.root)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", self.root.display())))?;
        for entry in entries {
            let entry = entry?;
            let Some(mailbox) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            let base = entry.path();
            if !base.join("new").is_dir() && !base.join("cur").is_dir() {
                continue;
            }
            pass.mailboxes += 1;
            // new/ before cur/: a file moved in between is still seen once.
            for sub in ["new", "cur"] {
                let Ok(files) = std::fs::read_dir(base.join(sub)) else {
                    continue;
                };
                for file in files.flatten() {
                    let name = file.file_name();
                    let Some(name) = name.to_str() else { continue };
                    if name.starts_with('.') {
                        continue;
                    }
                    // The unique part survives the move to cur/ (":2,S" flags appended).
                    let id = name.split(':').next().unwrap_or(name);
                    if ledger.seen(&mailbox, id) {
                        continue;
                    }
                    let path = file.path();
                    let Ok(raw) = std::fs::read(&path) else {
                        continue;
                    };
                    let arrived: Option<SystemTime> =
                        std::fs::metadata(&path).and_then(|m| m.modified()).ok();
                    ledger.ingest(&mailbox, id, &raw, arrived);
                    pass.ingested += 1;
                }
            }
        }
        Ok(pass)
    }
}
