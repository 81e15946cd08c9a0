//! The live views of a run, observers of its intervals: the progress line, the
//! dashboard (`--tui`) and the Prometheus endpoint (`--metrics-listen`).

pub mod metrics;
pub mod progress;
pub mod tui;
