//! `spate sweep` (in progress).
pub mod usl;
