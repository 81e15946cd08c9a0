//! `spate serve --maildir DIR --ack-before-store DELAY`: a server that breaks its promise
//! on purpose. Each message is acknowledged (250) at once and written to its Maildir only
//! DELAY later, by a thread of its own: a kill -9 meanwhile loses what was acknowledged.
//! The server keeps its own account in DIR/.spate-ack-before-store.log, one line per
//! recipient copy, written as it happens: `acked TRACE` when the copy is taken (before
//! the reply), `stored TRACE` once its file is in new/ (TRACE: the message's
//! X-Spate-Trace value, or `-`). After a kill, the lines `acked` without their `stored`
//! are what the server threw away, which `spate verify` must find missing (or, when the
//! reply never reached the client, indeterminate). A clean stop stores everything first.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The account's file name, in the Maildir root.
pub const JOURNAL: &str = ".spate-ack-before-store.log";

/// Writes a message to tmp/ and links it into new/ (Maildir's delivery), never over a
/// file that is there already: the tmp/ file is created new, and a link fails where a
/// rename would replace. The tmp/ name is removed once the link is made.
pub fn write(tmp: &Path, new: &Path, data: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(tmp)?;
    std::io::Write::write_all(&mut f, data)?;
    drop(f);
    let linked = std::fs::hard_link(tmp, new);
    let _ = std::fs::remove_file(tmp);
    linked
}

struct Pending {
    due: Instant,
    tmp: PathBuf,
    new: PathBuf,
    data: Vec<u8>,
    trace: String,
}

#[derive(Debug)]
pub struct Behind {
    tx: Mutex<Option<Sender<Pending>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    journal: Arc<Journal>,
    delay: Duration,
    stopping: Arc<AtomicBool>,
}

#[derive(Debug)]
struct Journal {
    path: PathBuf,
    file: Mutex<Option<std::fs::File>>,
}

impl Journal {
    /// One line, written through at once: it must outlive a kill -9 of the server.
    fn line(&self, what: &str, trace: &str) {
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(|e| eprintln!("spate serve: {}: {e}", self.path.display()))
                .ok();
        }
        if let Some(f) = f.as_mut() {
            let _ = writeln!(f, "{what} {trace}");
        }
    }
}

impl Behind {
    pub fn start(maildir: &Path, delay: Duration) -> Behind {
        let journal = Arc::new(Journal {
            path: maildir.join(JOURNAL),
            file: Mutex::new(None),
        });
        let (tx, rx) = channel();
        let stopping = Arc::new(AtomicBool::new(false));
        let (j, s) = (journal.clone(), stopping.clone());
        let thread = std::thread::Builder::new()
            .name("spate-store-behind".into())
            .spawn(move || writer(&rx, &j, &s))
            .map_err(|e| eprintln!("spate serve: --ack-before-store: {e}"))
            .ok();
        Behind {
            tx: Mutex::new(Some(tx)),
            thread: Mutex::new(thread),
            journal,
            delay,
            stopping,
        }
    }

    /// Takes a message to store later; its `acked` line is written before this returns
    /// (and so before the reply).
    pub fn push(&self, tmp: PathBuf, new: PathBuf, data: &[u8]) {
        let trace = trace_of(data);
        self.journal.line("acked", &trace);
        let p = Pending {
            due: Instant::now() + self.delay,
            tmp,
            new,
            data: data.to_vec(),
            trace,
        };
        let tx = self.tx.lock().unwrap_or_else(|e| e.into_inner());
        // No writer (the server is stopping): stored now.
        match tx.as_ref() {
            Some(t) => {
                if let Err(std::sync::mpsc::SendError(p)) = t.send(p) {
                    store(&p, &self.journal);
                }
            }
            None => store(&p, &self.journal),
        }
    }

    /// Stores everything still waiting, at once, and stops the writer.
    pub fn flush(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        drop(self.tx.lock().unwrap_or_else(|e| e.into_inner()).take());
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// The writer: each message at its due time, in order (they come in due order); once
/// the server stops cleanly (`stopping`), the rest at once.
fn writer(rx: &Receiver<Pending>, journal: &Journal, stopping: &AtomicBool) {
    while let Ok(p) = rx.recv() {
        loop {
            let left = p.due.saturating_duration_since(Instant::now());
            if left.is_zero() || stopping.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(left.min(Duration::from_millis(50)));
        }
        store(&p, journal);
    }
}

fn store(p: &Pending, journal: &Journal) {
    match write(&p.tmp, &p.new, &p.data) {
        Ok(()) => journal.line("stored", &p.trace),
        Err(e) => eprintln!("spate serve: {}: {e}", p.new.display()),
    }
}

/// The message's X-Spate-Trace value (from its header), or `-`.
fn trace_of(data: &[u8]) -> String {
    let name = crate::message::TRACE_HEADER.as_bytes();
    data.split(|&b| b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .take_while(|l| !l.is_empty())
        .find_map(|l| {
            let (n, v) = (l.get(..name.len())?, l.get(name.len()..)?);
            let v = v.strip_prefix(b":")?;
            n.eq_ignore_ascii_case(name)
                .then(|| String::from_utf8_lossy(v).trim().to_string())
        })
        .unwrap_or_else(|| "-".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delivery_never_replaces_a_file_that_is_there() {
        let d = tempfile::tempdir().unwrap();
        let (tmp, new) = (d.path().join("t"), d.path().join("n"));
        std::fs::write(&new, "someone else's").unwrap();
        assert!(write(&tmp, &new, b"ours").is_err());
        assert_eq!(std::fs::read_to_string(&new).unwrap(), "someone else's");
        assert!(!tmp.exists(), "no tmp/ file is left behind");
        // Nor a tmp/ file of that name.
        std::fs::write(&tmp, "another's").unwrap();
        let other = d.path().join("m");
        assert!(write(&tmp, &other, b"ours").is_err());
        assert_eq!(std::fs::read_to_string(&tmp).unwrap(), "another's");
        assert!(!other.exists());
        // The normal case.
        std::fs::remove_file(&tmp).unwrap();
        write(&tmp, &other, b"ours").unwrap();
        assert_eq!(std::fs::read(&other).unwrap(), b"ours");
        assert!(!tmp.exists());
    }

    #[test]
    fn acked_copies_are_stored_later_and_a_clean_stop_stores_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let b = Behind::start(d.path(), Duration::from_millis(300));
        let msg =
            |n: u32| format!("Subject: x\r\nX-Spate-Trace: run=r; seq={n}\r\n\r\nbody {n}\r\n");
        let paths = |n: u32| {
            (
                d.path().join(format!("t{n}")),
                d.path().join(format!("n{n}")),
            )
        };
        let (t0, n0) = paths(0);
        b.push(t0, n0.clone(), msg(0).as_bytes());
        let journal = || std::fs::read_to_string(d.path().join(JOURNAL)).unwrap();
        // Acknowledged, not yet stored.
        assert_eq!(journal(), "acked run=r; seq=0\n");
        assert!(!n0.exists());
        std::thread::sleep(Duration::from_millis(600));
        assert!(n0.exists());
        assert_eq!(journal(), "acked run=r; seq=0\nstored run=r; seq=0\n");
        let (t1, n1) = paths(1);
        b.push(t1, n1.clone(), msg(1).as_bytes());
        b.flush();
        assert_eq!(std::fs::read_to_string(&n1).unwrap(), msg(1));
        assert!(journal().ends_with("acked run=r; seq=1\nstored run=r; seq=1\n"));
        assert_eq!(trace_of(b"Subject: y\r\n\r\nX-Spate-Trace: no\r\n"), "-");
    }
}
