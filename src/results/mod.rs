//! The results directory: the single source of truth of a run. Files are appended once per
//! interval and flushed; summary.json is rewritten atomically every interval, so a run that
//! is killed still leaves a valid directory.
//!
//! - plan.json — what ran (all defaults resolved)
//! - intervals.csv — one row per second (per minute after `--detail`)
//! - postal.csv — Postal's per-minute line `time,messages,data(K),errors,connections,SSL connections`
//! - `<phase>.hlog` — HdrHistogram interval logs (values in µs), one per phase
//! - classes.hlog — `spate rr`'s response time per request class, one tagged line per
//!   class and interval
//! - errors.jsonl — one line per error class per interval, with a sample reply
//! - sent.log — every message the server accepted or may have: seq, time, digest, size,
//!   from, recipients, outcome (accepted, or indeterminate/unfinished: no final reply)
//! - summary.json — totals, per-phase percentiles, error table, generator CPU
//!
//! [`merge`] makes one such directory of a sharded run's shards.

pub mod feed;
mod header;
pub mod merge;
pub mod outdir;
mod shard;
mod summary;
mod tagged;
mod writer;

pub use header::SummaryHeader;
pub use shard::ShardOf;
pub use summary::{ErrorRow, PhaseStats, Summary, UnitWords, SCHEMA_VERSION};
pub use tagged::{decode_tag, encode_tag, TaggedLog};
pub use writer::{
    hex, rfc3339, sent_log_head, write_atomic, AddressBook, HlogFile, Writer, COARSE_S,
};
