//! The sweep's figures: one row per step (sweep.csv), the Universal Scalability Law fit
//! and the knee ([`table`], [`usl`]), and the search for the highest load that meets an
//! objective ([`search`]). `spate sweep` itself is `cmd::sweep`.

mod row;
pub mod search;
pub mod table;
pub mod usl;

pub use row::{Param, Row, CSV_HEADER};
