//! Per-protocol session drivers and the one worker loop that feeds them.

pub mod smtp;
