//! Postfix queue depth: files under incoming, active, deferred and hold of a queue
//! directory (hashed subdirectories included). Unreadable parts count as empty; Postfix
//! queues are usually readable by root and postfix only.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub const QUEUES: [&str; 4] = ["incoming", "active", "deferred", "hold"];

pub struct Queue {
    dir: PathBuf,
}

/// Files below `dir`, descending at most `depth` levels (Postfix hashes 1-2 levels deep).
pub fn count_files(dir: &Path, depth: u32) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for e in rd.flatten() {
        match e.file_type() {
            Ok(t) if t.is_dir() => {
                if depth > 0 {
                    n += count_files(&e.path(), depth - 1);
                }
            }
            Ok(_) => n += 1,
            Err(_) => {}
        }
    }
    n
}

/// The queue files under `dirs`, each counted once: a Postfix queue id names a message's
/// file in whichever queue holds it, and the queue manager moves files between queues
/// while they are read, so two scans are united by name — a message moving between
/// queues mid-scan is neither counted twice nor missed. An unreadable directory is an
/// error.
pub fn distinct_files(dirs: &[PathBuf]) -> std::io::Result<u64> {
    fn collect(dir: &Path, depth: u32, names: &mut HashSet<OsString>) -> std::io::Result<()> {
        for e in std::fs::read_dir(dir)?.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() && depth > 0 => collect(&e.path(), depth - 1, names)?,
                Ok(t) if t.is_file() => {
                    names.insert(e.file_name());
                }
                _ => {}
            }
        }
        Ok(())
    }
    let mut names = HashSet::new();
    for _ in 0..2 {
        for d in dirs {
            collect(d, 6, &mut names)?;
        }
    }
    Ok(names.len() as u64)
}

impl Queue {
    pub fn new(dir: PathBuf) -> Queue {
        Queue { dir }
    }

    pub fn columns(&self) -> Vec<String> {
        QUEUES
            .iter()
            .map(|q| format!("queue.postfix.{q}"))
            .collect()
    }

    pub fn sample(&mut self, out: &mut Vec<f64>) {
        for q in QUEUES {
            out.push(count_files(&self.dir.join(q), 3) as f64);
        }
    }

    /// Messages in any of the four queues, each counted once.
    pub fn total(&self) -> u64 {
        let dirs: Vec<PathBuf> = QUEUES.iter().map(|q| self.dir.join(q)).collect();
        let dirs: Vec<PathBuf> = dirs.into_iter().filter(|d| d.is_dir()).collect();
        distinct_files(&dirs).unwrap_or(0)
    }
}
