//! Phases, error classes, counters and the sharded recorder that sessions write into and
//! the aggregator drains once per interval.

mod clock;
mod phase;
mod recorder;
pub mod word;

pub use clock::{note_arrival, Clock};
pub(crate) use phase::phases;
pub use phase::{Declared, Phase};
pub(crate) use recorder::{counters, error_kinds};
pub use recorder::{
    new_histogram, Counter, Counters, DeclaredCounter, Detail, ErrorKey, ErrorKind, ErrorStat,
    Interval, Own, Recorder, SentOutcome, SentRecord, Shard, HIST_MAX_US, OWN_COUNTERS,
    UNSURE_RCPT,
};
