//! The request/response load's phases.

pub use crate::session::phase::*;

crate::metrics::phases! {
    pub REQUEST => "request", "rr: a request written (handed to the kernel)";
    pub FIRST_BYTE => "first_byte", "rr: the request written to the first byte of its response";
}
