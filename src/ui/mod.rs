//! The live views of a run, observers of its intervals: the progress line and the
//! dashboard (`--tui`).

pub mod progress;
pub mod tui;
