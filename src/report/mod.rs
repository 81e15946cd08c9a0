//! Reports: pure functions of a results directory.

pub mod chart;
pub mod cmd;
pub mod compare;
pub mod data;
pub mod html;
pub mod sweep;
pub mod text;
pub mod tui;

pub use cmd::write_report;
