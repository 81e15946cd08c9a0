//! Reports: pure functions of a results directory.

pub mod text;
