//! The Maildir source: ROOT/<address>/{new,cur}/<file>, as the embedded server
//! (`spate serve --maildir`) and the test bed's Dovecot write them. The file's mtime (ns
//! precision) is the arrival time: the server wrote it then and moving it from new/ to cur/
//! keeps it.
//!
//! A poll lists only the directories that changed since they were last listed (their
//! mtime moved), so that watching 2 000 mailboxes of a long run costs two `stat`s a
//! mailbox plus the mailboxes that got mail, not a listing of every message each time.

use std::fs::File;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::ledger::{Ledger, Timing};

pub struct Maildir {
    root: PathBuf,
    /// The root's listing.
    listed: Listed,
    /// Every mailbox directory the root has shown, by name.
    boxes: std::collections::BTreeMap<String, Mailbox>,
}

#[derive(Default)]
struct Mailbox {
    new: Listed,
    cur: Listed,
}

/// A directory's mtime when it was last listed in full, kept only when no later change
/// could leave the same mtime: a change made after the listing started stamps the
/// directory at least at that start, less the file system's timestamp granularity (a
/// clock tick, or whole seconds on file systems that keep no fraction), so the mtime must
/// be older than the start by more than that. The clock of the file system is this
/// machine's (a local file system).
#[derive(Default, Clone, Copy)]
struct Listed(Option<SystemTime>);

impl Listed {
    /// Can the listing be skipped: nothing changed since the last one?
    fn unchanged(self, mtime: SystemTime) -> bool {
        self.0 == Some(mtime)
    }

    /// After a listing that started at `started` of a directory whose mtime was `mtime`
    /// just before it.
    fn after(mtime: SystemTime, started: SystemTime) -> Listed {
        let whole_seconds = mtime
            .duration_since(SystemTime::UNIX_EPOCH)
            .is_ok_and(|d| d.subsec_nanos() == 0);
        let margin = if whole_seconds {
            Duration::from_secs(3)
        } else {
            Duration::from_millis(50)
        };
        Listed((mtime + margin < started).then_some(mtime))
    }
}

/// What one pass over the tree did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Pass {
    pub mailboxes: usize,
    /// Directories listed (the root, new/ and cur/ of the mailboxes that changed).
    pub listed: usize,
    /// Entries those listings returned.
    pub entries: usize,
    /// Directories of mailboxes not listed: unchanged since they were.
    pub skipped: usize,
    pub ingested: usize,
}

impl Maildir {
    pub fn new(root: &Path) -> Maildir {
        Maildir {
            root: root.to_path_buf(),
            listed: Listed::default(),
            boxes: Default::default(),
        }
    }

    /// Reads every message not ingested yet into the ledger. Files that vanish between
    /// listing and reading (moved to cur/, expunged) are skipped; the next pass sees them
    /// under their new name.
    pub fn poll(&mut self, ledger: &mut Ledger) -> std::io::Result<Pass> {
        let mut pass = Pass::default();
        let at_root = |e: std::io::Error| {
            std::io::Error::new(e.kind(), format!("{}: {e}", self.root.display()))
        };
        let started = SystemTime::now();
        let mtime = std::fs::metadata(&self.root)
            .and_then(|m| m.modified())
            .map_err(at_root)?;
        if !self.listed.unchanged(mtime) {
            pass.listed += 1;
            for entry in std::fs::read_dir(&self.root).map_err(at_root)? {
                pass.entries += 1;
                if let Ok(name) = entry?.file_name().into_string() {
                    self.boxes.entry(name).or_default();
                }
            }
            self.listed = Listed::after(mtime, started);
        }
        for (name, mailbox) in &mut self.boxes {
            let base = self.root.join(name);
            let mut found = false;
            // new/ before cur/: a file moved in between is still seen once.
            for (sub, listed) in [("new", &mut mailbox.new), ("cur", &mut mailbox.cur)] {
                let dir = base.join(sub);
                let started = SystemTime::now();
                let Ok(mtime) = std::fs::metadata(&dir).and_then(|m| m.modified()) else {
                    *listed = Listed::default();
                    continue;
                };
                found = true;
                if listed.unchanged(mtime) {
                    pass.skipped += 1;
                    continue;
                }
                if read_new(&dir, name, ledger, &mut pass).is_ok() {
                    *listed = Listed::after(mtime, started);
                }
            }
            pass.mailboxes += found as usize;
        }
        Ok(pass)
    }
}

/// Reads the files of `dir` that the ledger has not seen. An error when the listing may
/// have left one out (an entry or a file that could not be read for another reason than
/// having moved away): then the directory is listed again next time.
fn read_new(
    dir: &Path,
    mailbox: &str,
    ledger: &mut Ledger,
    pass: &mut Pass,
) -> std::io::Result<()> {
    pass.listed += 1;
    let mut raw = Vec::new();
    let mut failed = None;
    for file in std::fs::read_dir(dir)? {
        pass.entries += 1;
        let file = match file {
            Ok(f) => f,
            Err(e) => {
                failed = Some(e);
                continue;
            }
        };
        let name = file.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with('.') {
            continue;
        }
        // The unique part survives the move to cur/ (":2,S" flags appended).
        let id = name.split(':').next().unwrap_or(name);
        if ledger.seen(mailbox, id) {
            continue;
        }
        raw.clear();
        let opened = File::open(file.path()).and_then(|mut f| {
            let modified = f.metadata().and_then(|m| m.modified());
            f.read_to_end(&mut raw).map(|_| modified)
        });
        let arrived = match opened {
            Ok(Ok(t)) => Timing::Exact(t),
            Ok(Err(_)) => Timing::Unknown,
            // Moved to cur/ or expunged since the listing: that changed the directories.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                failed = Some(e);
                continue;
            }
        };
        ledger.ingest(mailbox, id, &raw, arrived);
        pass.ingested += 1;
    }
    failed.map_or(Ok(()), Err)
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
        let mut dir = Maildir::new(tmp.path());
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

    fn traced(seq: u64) -> String {
        let d = hex(&body_digest(b"hi\r\n"));
        format!("{TRACE_HEADER}: run=r; seq={seq}; sent=1; digest={d}; size=4\r\n\r\nhi\r\n")
    }

    /// Sets a directory's mtime, as if it had last changed then.
    fn age(dir: &Path, ago: Duration) {
        let f = File::open(dir).unwrap();
        f.set_modified(SystemTime::now() - ago).unwrap();
    }

    /// A poll lists only the directories that changed: none when nothing did, the one
    /// that got a file, both when a file moved from new/ to cur/.
    #[test]
    fn a_poll_lists_only_what_changed() {
        let tmp = tempfile::tempdir().unwrap();
        let hour = Duration::from_secs(3600);
        let mut seq = 0;
        for b in 0..20 {
            let mb = tmp.path().join(format!("u{b}@x.test"));
            for sub in ["tmp", "new", "cur"] {
                std::fs::create_dir_all(mb.join(sub)).unwrap();
            }
            for sub in ["new", "cur"] {
                for _ in 0..5 {
                    std::fs::write(mb.join(sub).join(format!("{seq}.M1P1.host")), traced(seq))
                        .unwrap();
                    seq += 1;
                }
                age(&mb.join(sub), hour);
            }
        }
        age(tmp.path(), hour);
        let mut ledger = Ledger::new(Vec::new());
        let mut dir = Maildir::new(tmp.path());
        let p = dir.poll(&mut ledger).unwrap();
        assert_eq!((p.mailboxes, p.listed, p.ingested), (20, 41, 200));
        let p = dir.poll(&mut ledger).unwrap();
        assert_eq!(
            (p.mailboxes, p.listed, p.entries, p.ingested),
            (20, 0, 0, 0)
        );
        // One delivery: that new/ is listed (again at the next poll, being that recent).
        let new3 = tmp.path().join("u3@x.test/new");
        std::fs::write(new3.join("x.M2P2.host"), traced(seq)).unwrap();
        let p = dir.poll(&mut ledger).unwrap();
        assert_eq!((p.listed, p.entries, p.ingested), (1, 6, 1));
        let p = dir.poll(&mut ledger).unwrap();
        assert_eq!((p.listed, p.ingested), (1, 0));
        age(&new3, hour);
        let p = dir.poll(&mut ledger).unwrap();
        assert_eq!((p.listed, p.ingested), (1, 0));
        let p = dir.poll(&mut ledger).unwrap();
        assert_eq!((p.listed, p.skipped, p.ingested), (0, 40, 0));
        // A message read by a client (moved to cur/): both listed, nothing new.
        let mb4 = tmp.path().join("u4@x.test");
        let first = std::fs::read_dir(mb4.join("new"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let name = first.file_name().into_string().unwrap();
        std::fs::rename(first.path(), mb4.join("cur").join(format!("{name}:2,S"))).unwrap();
        let p = dir.poll(&mut ledger).unwrap();
        assert_eq!((p.listed, p.ingested), (2, 0));
        // A new mailbox: the root and its directories.
        let mb = tmp.path().join("late@x.test/new");
        std::fs::create_dir_all(&mb).unwrap();
        std::fs::write(mb.join("y.M3P3.host"), traced(seq + 1)).unwrap();
        let p = dir.poll(&mut ledger).unwrap();
        assert_eq!((p.mailboxes, p.ingested), (21, 1));
        assert_eq!(ledger.ingested(), 202);
    }

    /// Deliveries in bursts while polls go, some read and moved to cur/ by a client:
    /// every message is ingested once, none missed by a skipped listing.
    #[test]
    fn polls_during_deliveries_miss_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_path_buf();
        let boxes = 8;
        for b in 0..boxes {
            for sub in ["tmp", "new", "cur"] {
                std::fs::create_dir_all(root.join(format!("u{b}@x.test/{sub}"))).unwrap();
            }
        }
        let writer = {
            let root = root.clone();
            std::thread::spawn(move || {
                for burst in 0..20u64 {
                    for i in 0..40u64 {
                        let seq = burst * 40 + i;
                        let mb = root.join(format!("u{}@x.test", seq % boxes));
                        let name = format!("{seq}.M{i}P1.host");
                        std::fs::write(mb.join("tmp").join(&name), traced(seq)).unwrap();
                        std::fs::rename(mb.join("tmp").join(&name), mb.join("new").join(&name))
                            .unwrap();
                        if seq % 3 == 0 {
                            let cur = mb.join("cur").join(format!("{name}:2,S"));
                            std::fs::rename(mb.join("new").join(&name), cur).unwrap();
                        }
                    }
                    // Long enough for listings to be trusted, and skipped, in between.
                    std::thread::sleep(Duration::from_millis(70));
                }
            })
        };
        let mut ledger = Ledger::new(Vec::new());
        let mut dir = Maildir::new(&root);
        let mut skipped = 0;
        while !writer.is_finished() {
            let p = dir.poll(&mut ledger).unwrap();
            skipped += p.skipped;
            std::thread::sleep(Duration::from_millis(5));
        }
        writer.join().unwrap();
        dir.poll(&mut ledger).unwrap();
        assert_eq!(ledger.ingested(), 800);
        assert!(
            skipped > 0,
            "no listing was ever skipped: the test tests nothing"
        );
    }

    /// A listing is trusted only if its directory's mtime is old enough that any later
    /// change must show as another mtime, on file systems with a fraction of a second
    /// and on those with whole seconds.
    #[test]
    fn a_listing_is_trusted_only_past_the_timestamp_granularity() {
        let started = SystemTime::UNIX_EPOCH + Duration::new(1_767_225_600, 500_000_000);
        let ms = |n| Duration::from_millis(n);
        assert!(Listed::after(started - ms(10), started).0.is_none());
        let old = started - ms(300);
        assert!(Listed::after(old, started).unchanged(old));
        assert!(!Listed::after(old, started).unchanged(old + ms(1)));
        let whole = SystemTime::UNIX_EPOCH + Duration::from_secs(1_767_225_599);
        assert!(Listed::after(whole, started).0.is_none());
        let older = whole - Duration::from_secs(3);
        assert!(Listed::after(older, started).unchanged(older));
        assert!(!Listed::default().unchanged(older));
    }
}
