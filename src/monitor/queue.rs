//! Postfix queue depth: files under incoming, active, deferred and hold of a queue
//! directory (hashed subdirectories included). Unreadable parts count as empty; Postfix
//! queues are usually readable by root and postfix only.

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

    /// Messages in any of the four queues.
    pub fn total(&self) -> u64 {
        QUEUES
            .iter()
            .map(|q| count_files(&self.dir.join(q), 3))
            .sum()
    }
}
