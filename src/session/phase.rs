//! The phases every session protocol shares (the transport's and the engine's are
//! [`Phase`]'s own constants), declared once for each protocol's `phase` module to take.

pub use crate::metrics::Phase;

crate::metrics::phases! {
    pub STARTTLS => "starttls", "STARTTLS (STLS for POP3) to its reply";
    pub AUTH => "auth", "AUTH exchange, all round trips";
}
