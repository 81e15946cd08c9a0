//! The sweep's figures: one row per step (sweep.csv), the Universal Scalability Law fit
//! and the knee ([`table`], [`usl`]). `spate sweep` itself is `cmd::sweep`.

mod row;
pub mod table;
pub mod usl;

pub use row::{Param, Row, CSV_HEADER};
