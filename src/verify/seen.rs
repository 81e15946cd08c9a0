//! The messages a source has already handed to the ledger, so that polling again reads
//! none twice: one 64-bit keyed hash of (mailbox, source id) each, about 9 bytes a message.
//!
//! A hash table of u64 costs 10 to 20 bytes an entry (its load factor swings as it
//! doubles); here most ids sit in one sorted vector of exact size, and new ones in a
//! small table that is merged into it when it reaches a sixteenth of its size (each id
//! moved about 16 times over a run, a few ns each).

use std::collections::HashSet;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

/// The ids are already uniformly distributed keyed hashes: the table uses them as they are.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Smallest table before a merge.
const MIN_RECENT: usize = 1024;

#[derive(Debug, Default)]
pub struct Seen {
    /// Keyed per ledger: ids (file names) cannot be chosen to collide.
    keys: std::collections::hash_map::RandomState,
    sorted: Vec<u64>,
    recent: HashSet<u64, BuildHasherDefault<Identity>>,
}

impl Seen {
    fn key(&self, mailbox: u32, id: &str) -> u64 {
        let mut h = self.keys.build_hasher();
        h.write_u32(mailbox);
        h.write(id.as_bytes());
        h.finish()
    }

    pub fn contains(&self, mailbox: u32, id: &str) -> bool {
        let k = self.key(mailbox, id);
        self.recent.contains(&k) || self.sorted.binary_search(&k).is_ok()
    }

    /// Adds (mailbox, id); false if it was there.
    pub fn insert(&mut self, mailbox: u32, id: &str) -> bool {
        let k = self.key(mailbox, id);
        if self.sorted.binary_search(&k).is_ok() || !self.recent.insert(k) {
            return false;
        }
        if self.recent.len() >= MIN_RECENT.max(self.sorted.len() / 16) {
            self.merge();
        }
        true
    }

    /// Moves the recent ids into the sorted vector, in place from its end.
    fn merge(&mut self) {
        let mut add: Vec<u64> = self.recent.drain().collect();
        add.sort_unstable();
        let old = self.sorted.len();
        self.sorted.reserve_exact(add.len());
        self.sorted.resize(old + add.len(), 0);
        let (mut i, mut j) = (old, add.len());
        while j > 0 {
            let k = i + j - 1;
            if i > 0 && self.sorted[i - 1] > add[j - 1] {
                self.sorted[k] = self.sorted[i - 1];
                i -= 1;
            } else {
                self.sorted[k] = add[j - 1];
                j -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_id_once_across_merges() {
        let mut s = Seen::default();
        let n = 50_000u32;
        for i in 0..n {
            assert!(s.insert(i % 7, &format!("id{i}")));
            // An id read again, whether still recent or merged already.
            assert!(!s.insert((i / 2) % 7, &format!("id{}", i / 2)));
        }
        assert_eq!(s.sorted.len() + s.recent.len(), n as usize);
        assert!(s.sorted.windows(2).all(|w| w[0] < w[1]));
        assert!(
            s.sorted.len() > n as usize / 2,
            "merged: {}",
            s.sorted.len()
        );
        for i in 0..n {
            assert!(s.contains(i % 7, &format!("id{i}")));
            // Same id, another mailbox: not seen.
            assert!(!s.contains(i % 7 + 1, &format!("id{i}")));
        }
    }
}
