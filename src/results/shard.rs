//! Which shard of a run this process is, and its share of the run's work: what the
//! engine splits, the sessions number and `spate merge` checks. (Reading it from the
//! command line and the scheduler's environment is `opts::shard`'s.)

use serde::{Deserialize, Serialize};

use crate::usage;

/// This process is shard `index` of `count` of run `run_id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardOf {
    pub index: u32,
    pub count: u32,
}

impl ShardOf {
    /// This shard's share of `total`: the shares of all shards sum to `total` exactly,
    /// the first `total mod count` shards taking one more.
    pub fn share(&self, total: u64) -> u64 {
        let (n, i) = (self.count as u64, self.index as u64);
        total / n + u64::from(i < total % n)
    }

    /// This shard's slice of a pool of `len` items (accounts, mailboxes): disjoint, and
    /// together the whole pool.
    pub fn slice(&self, len: usize) -> std::ops::Range<usize> {
        let (n, i) = (self.count as usize, self.index as usize);
        let start = i * (len / n) + i.min(len % n);
        start..start + len / n + usize::from(i < len % n)
    }

    /// The run-wide sequence number of this shard's `local` one: shards interleave, so
    /// their numbers never collide and the merged run's numbers are dense.
    pub fn global_seq(&self, local: u64) -> u64 {
        local * self.count as u64 + self.index as u64
    }

    /// This shard's slice of `pool` (`what` names it in the error when it is empty).
    pub fn take<T>(&self, mut pool: Vec<T>, what: &str) -> anyhow::Result<Vec<T>> {
        let len = pool.len();
        let r = self.slice(len);
        if r.is_empty() {
            return usage(format!(
                "{len} {what} cannot be split into {} shards: each needs at least one",
                self.count
            ));
        }
        pool.truncate(r.end);
        Ok(pool.split_off(r.start))
    }
}
