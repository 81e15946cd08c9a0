//! The Maildir source: ROOT/<address>/{new,cur}/<file>, as the embedded server
//! (`spate serve --maildir`) and the test bed's Dovecot write them. The file's mtime (ns
//! precision) is the arrival time: the server wrote it then and moving it from new/ to cur/
//! keeps it.

use super::ledger::Timing;
use std::path::{Path, PathBuf};

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
                    let arrived = match std::fs::metadata(&path).and_then(|m| m.modified()) {
                        Ok(t) => Timing::Exact(t),
                        Err(_) => Timing::Unknown,
                    };
                    ledger.ingest(&mailbox, id, &raw, arrived);
                    pass.ingested += 1;
                }
            }
        }
        Ok(pass)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::{body_digest, hex, TRACE_HEADER};

    #[test]
    fn a_message_moved_to_cur_between_polls_counts_once() {
        let tmp = tempfile::tempdir().unwrap();
        let mb = tmp.path().join("A@x.test");
        for sub in ["new", "cur", "tmp"] {
            std::fs::create_dir_all(mb.join(sub)).unwrap();
        }
        let d = hex(&body_digest(b"hi\r\n"));
        let msg = format!("{TRACE_HEADER}: run=r; seq=0; sent=1; digest={d}; size=4\r\n\r\nhi\r\n");
        std::fs::write(mb.join("new/1.M1P1.host"), &msg).unwrap();
        let mut ledger = Ledger::new(Vec::new());
        let dir = Maildir::new(tmp.path());
        assert_eq!(dir.poll(&mut ledger).unwrap().ingested, 1);
        std::fs::rename(mb.join("new/1.M1P1.host"), mb.join("cur/1.M1P1.host:2,S")).unwrap();
        assert_eq!(dir.poll(&mut ledger).unwrap().ingested, 0);
        assert_eq!(ledger.ingested(), 1);
        let log = crate::verify::SentLog::parse(
            "# spate sent log v1 run=r\n0\t2026-01-01T00:00:00Z\t00\t4\ts@x.test\ta@x.test\n"
                .as_bytes(),
            "t",
        )
        .unwrap();
        let r = ledger.report(&log);
        assert_eq!((r.delivered, r.duplicated, r.corrupted), (1, 0, 0));
        assert!(r.ok());
        // Not a Maildir root: a clear error.
        assert!(Maildir::new(&tmp.path().join("nope"))
            .poll(&mut ledger)
            .is_err());
    }
}
