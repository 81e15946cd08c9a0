//! Where the ledger keeps what it found of traced messages, compactly: a long run finds
//! millions, and the instrument must not grow by 100 bytes for each.
//!
//! The seqs of one run are dense from 0, and nearly every delivery arrives once. So each
//! run has tables indexed by seq, in chunks of [`CHUNK`] slots of 12 bytes: the mailbox of
//! a delivery found, its arrival time (µs) and two flags. The first table (level) holds
//! the first delivery found of each seq, the next one the second recipient's, and so on.
//! Everything else (a second copy, a seq far from the others, a recipient beyond
//! [`LEVELS`]) goes to a side map, which stays small while the server behaves.

use std::collections::HashMap;

/// Seqs per chunk of slots (12 KiB).
const CHUNK: usize = 1024;
/// Slots the chunks of a run may hold per delivery of it found (plus a few chunks):
/// scattered seqs (another tool's numbering, a hostile mailbox) fall back to the side
/// map instead of allocating a chunk for each message.
const SPREAD: usize = 4;
const SPARE_CHUNKS: usize = 4;
/// Recipients of one message kept in slots; the others go to the side map.
const LEVELS: usize = 16;
/// Deliveries a range of seqs must have had in the side map at a level above the first
/// before it gets a chunk there: a few misdelivered copies do not cost a chunk each,
/// messages with several recipients soon do.
const PROMOTE: u32 = 128;

/// What was found of one (run, seq, mailbox).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    pub copies: u32,
    pub corrupted: u32,
    /// Earliest arrival of a copy, µs since the epoch; `i64::MIN` when unknown.
    pub arrived_us: i64,
    /// That arrival time is only to the second (IMAP INTERNALDATE, a Received date).
    pub coarse: bool,
}

impl Found {
    /// One more copy, arrived at `arrived_us` (`i64::MIN`: unknown).
    fn add(&mut self, corrupted: bool, arrived_us: i64, coarse: bool) {
        self.copies += 1;
        self.corrupted += corrupted as u32;
        if arrived_us != i64::MIN && (self.arrived_us == i64::MIN || arrived_us < self.arrived_us) {
            self.arrived_us = arrived_us;
            self.coarse = coarse;
        }
    }
}

const CORRUPTED: u32 = 1 << 31;
const COARSE: u32 = 1 << 30;
const MAILBOX: u32 = COARSE - 1;
/// The tag of a slot whose delivery moved to the side map (a second copy came).
const MOVED: u32 = MAILBOX;

/// One copy found: `tag` is 0 when empty, else mailbox id + 1 with the two flags above;
/// the arrival time is split in two halves so that a slot is 12 bytes, not 16.
#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    tag: u32,
    at: [u32; 2],
}

impl Slot {
    fn new(mbx: u32, corrupted: bool, arrived_us: i64, coarse: bool) -> Option<Slot> {
        let id = mbx.checked_add(1).filter(|&id| id < MOVED)?;
        let bits = arrived_us as u64;
        Some(Slot {
            tag: id | if corrupted { CORRUPTED } else { 0 } | if coarse { COARSE } else { 0 },
            at: [bits as u32, (bits >> 32) as u32],
        })
    }

    fn mailbox(self) -> Option<u32> {
        let id = self.tag & MAILBOX;
        (id != 0 && id != MOVED).then(|| id - 1)
    }

    fn found(self) -> Found {
        Found {
            copies: 1,
            corrupted: (self.tag & CORRUPTED != 0) as u32,
            arrived_us: (self.at[0] as u64 | (self.at[1] as u64) << 32) as i64,
            coarse: self.tag & COARSE != 0,
        }
    }
}

/// One run's tables.
#[derive(Debug, Default)]
struct Run {
    /// Chunks by level, then by seq / CHUNK. The slots of a seq that hold something are
    /// those of levels 0 to some k: a delivery takes the first free one.
    levels: Vec<HashMap<u64, Box<[Slot]>>>,
    chunks: usize,
    /// (level, chunk) above the first without a chunk yet: deliveries sent to the side map.
    pending: HashMap<(usize, u64), u32>,
    /// Distinct (seq, mailbox) found of this run, in slots or in the side map.
    deliveries: usize,
}

impl Run {
    fn slot(&self, level: usize, seq: u64) -> Option<Slot> {
        let c = self.levels.get(level)?.get(&(seq / CHUNK as u64))?;
        Some(c[(seq % CHUNK as u64) as usize])
    }

    /// The slot of `seq` at `level`, allocating its chunk if the run's chunks stay dense
    /// enough.
    fn slot_mut(&mut self, level: usize, seq: u64) -> Option<&mut Slot> {
        let (chunk, i) = (seq / CHUNK as u64, (seq % CHUNK as u64) as usize);
        if self.levels.len() <= level {
            self.levels.resize_with(level + 1, HashMap::new);
        }
        let chunks = &mut self.levels[level];
        let mut allowed = !chunks.contains_key(&chunk)
            && (self.chunks + 1) * CHUNK <= SPREAD * self.deliveries + SPARE_CHUNKS * CHUNK;
        if allowed && level > 0 {
            let n = self.pending.entry((level, chunk)).or_default();
            *n += 1;
            allowed = *n > PROMOTE;
            if allowed {
                self.pending.remove(&(level, chunk));
            }
        }
        if allowed {
            chunks.insert(chunk, vec![Slot::default(); CHUNK].into_boxed_slice());
            self.chunks += 1;
        }
        chunks.get_mut(&chunk).map(|c| &mut c[i])
    }

    /// Where (seq, mbx) is among the slots, or else the first free level.
    fn find(&self, seq: u64, mbx: u32) -> Result<usize, usize> {
        for level in 0..LEVELS {
            match self.slot(level, seq) {
                Some(s) if s.mailbox() == Some(mbx) => return Ok(level),
                Some(s) if s.tag != 0 => continue,
                _ => return Err(level),
            }
        }
        Err(LEVELS)
    }
}

/// Every traced delivery found, by (run, seq, mailbox); runs and mailboxes are the
/// ledger's interned ids.
#[derive(Debug, Default)]
pub struct Finds {
    runs: Vec<Run>,
    /// Deliveries not in a slot. A key is in a slot or here, never both.
    more: HashMap<(u32, u64, u32), Found>,
}

impl Finds {
    /// Records one copy of (run, seq) found in mailbox `mbx`.
    pub fn add(
        &mut self,
        run: u32,
        seq: u64,
        mbx: u32,
        corrupted: bool,
        arrived_us: i64,
        coarse: bool,
    ) {
        if self.runs.len() <= run as usize {
            self.runs.resize_with(run as usize + 1, Run::default);
        }
        let r = &mut self.runs[run as usize];
        let key = (run, seq, mbx);
        if let Some(f) = self.more.get_mut(&key) {
            f.add(corrupted, arrived_us, coarse);
            return;
        }
        let free = match r.find(seq, mbx) {
            Ok(level) => {
                // A second copy: both go to the side map; the slot stays taken, so that
                // the levels above it are still looked at.
                let slot = r.slot_mut(level, seq).expect("found there");
                let mut f = slot.found();
                f.add(corrupted, arrived_us, coarse);
                slot.tag = MOVED;
                self.more.insert(key, f);
                return;
            }
            Err(level) => level,
        };
        r.deliveries += 1;
        let new = Slot::new(mbx, corrupted, arrived_us, coarse);
        let slot = (free < LEVELS).then(|| r.slot_mut(free, seq)).flatten();
        match (slot, new) {
            (Some(slot), Some(new)) => *slot = new,
            _ => {
                self.more.insert(key, single(corrupted, arrived_us, coarse));
            }
        }
    }

    pub fn get(&self, run: u32, seq: u64, mbx: u32) -> Option<Found> {
        let r = self.runs.get(run as usize)?;
        match r.find(seq, mbx) {
            Ok(level) => r.slot(level, seq).map(Slot::found),
            Err(_) => self.more.get(&(run, seq, mbx)).copied(),
        }
    }

    /// Calls `f(run, seq, mailbox, found)` for every delivery found, in no order.
    pub fn each(&self, mut f: impl FnMut(u32, u64, u32, Found)) {
        for (run, r) in self.runs.iter().enumerate() {
            for chunks in &r.levels {
                for (&chunk, slots) in chunks {
                    for (i, s) in slots.iter().enumerate() {
                        if let Some(mbx) = s.mailbox() {
                            f(run as u32, chunk * CHUNK as u64 + i as u64, mbx, s.found());
                        }
                    }
                }
            }
        }
        for (&(run, seq, mbx), &found) in &self.more {
            f(run, seq, mbx, found);
        }
    }
}

fn single(corrupted: bool, arrived_us: i64, coarse: bool) -> Found {
    Found {
        copies: 1,
        corrupted: corrupted as u32,
        arrived_us,
        coarse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(f: &Finds) -> Vec<(u32, u64, u32, Found)> {
        let mut v = Vec::new();
        f.each(|r, s, m, x| v.push((r, s, m, x)));
        v.sort_by_key(|&(r, s, m, _)| (r, s, m));
        v
    }

    /// Whatever the order of copies and mailboxes, each key's counts and earliest time
    /// come out as a plain map would keep them.
    #[test]
    fn agrees_with_a_plain_map() {
        for seed in 0..4 {
            let finds = against_a_plain_map(seed);
            let r = &finds.runs[0];
            let sizes: Vec<usize> = r.levels.iter().map(|l| l.len()).collect();
            assert!(
                sizes.len() > 2 && sizes[1] > 0,
                "levels above the first: {sizes:?}"
            );
            let moved = r.levels[0]
                .values()
                .flat_map(|c| c.iter())
                .filter(|s| s.tag == MOVED);
            assert!(moved.count() > 0, "second copies moved out of slots");
        }
    }

    fn against_a_plain_map(seed: u64) -> Finds {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let mut finds = Finds::default();
        let mut plain: HashMap<(u32, u64, u32), Found> = HashMap::new();
        for _ in 0..20_000 {
            let run = rng.random_range(0..3u32);
            // Mostly dense seqs, some scattered far apart.
            let seq = if rng.random_bool(0.002) {
                rng.random::<u64>()
            } else {
                rng.random_range(0..5_000u64)
            };
            let mbx = if rng.random_bool(0.01) {
                u32::MAX - rng.random_range(0..2u32)
            } else {
                rng.random_range(0..50u32)
            };
            let corrupted = rng.random_bool(0.1);
            let at = match rng.random_range(0..10) {
                0 => i64::MIN,
                1 => -rng.random_range(0..1_000_000i64),
                _ => 1_767_225_600_000_000 + rng.random_range(0..10_000_000i64),
            };
            let coarse = rng.random_bool(0.2);
            finds.add(run, seq, mbx, corrupted, at, coarse);
            plain
                .entry((run, seq, mbx))
                .and_modify(|f| f.add(corrupted, at, coarse))
                .or_insert(single(corrupted, at, coarse));
        }
        for (&(r, s, m), &f) in &plain {
            assert_eq!(finds.get(r, s, m), Some(f), "({r}, {s}, {m})");
        }
        assert_eq!(finds.get(0, 5_001, 0), None);
        assert_eq!(finds.get(9, 1, 0), None);
        let mut want: Vec<_> = plain.iter().map(|(&(r, s, m), &f)| (r, s, m, f)).collect();
        want.sort_by_key(|&(r, s, m, _)| (r, s, m));
        assert_eq!(all(&finds), want);
        finds
    }

    /// A mailbox of messages with scattered seqs does not get a chunk each.
    #[test]
    fn scattered_seqs_do_not_allocate_a_chunk_each() {
        let mut finds = Finds::default();
        for i in 0..1_000u64 {
            finds.add(0, i << 32, 0, false, 0, false);
        }
        let chunks = finds.runs[0].chunks;
        assert!(
            chunks <= SPARE_CHUNKS + SPREAD * 1_000 / CHUNK,
            "{chunks} chunks"
        );
        assert_eq!(all(&finds).len(), 1_000);
    }
}
