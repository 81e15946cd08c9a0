//! XMPP (RFC 6120) without I/O, for both the load client and the embedded server.
//!
//! - [`Framer`] splits the byte stream into the stream header, whole top-level elements
//!   and the stream's end, with size and depth capped before anything is buffered further.
//! - [`Element::parse`] and [`parse_header`] read one framed piece; [`Element::write`] and
//!   [`escape`] write.
//! - [`build`] has the negotiation elements (STARTTLS, SASL, bind) both sides send.
//!
//! SASL mechanisms (SCRAM, PLAIN) live in [`super::sasl`]; XMPP carries their base64.

pub mod build;
mod element;
#[cfg(test)]
mod element_tests;
mod frame;
#[cfg(test)]
mod tests;

pub use build::*;
pub use element::{escape, parse_header, Element, ParseError, StreamHeader, MAX_PARSE_DEPTH};
pub use frame::{Frame, FrameError, Framer};
