//! Sans-I/O protocol codecs: bytes in, events out; intents in, bytes out. No sockets, no
//! clocks, no tokio. Every line and literal is capped before it is parsed.

pub mod dot;
pub mod imap;
pub mod imap_client;
pub mod pop3;
pub mod pop3_client;
pub mod rr;
pub mod sasl;
pub mod smtp;
pub mod sse;
mod text;
pub mod xmpp;

pub use text::{class_of, escaped, normalize};
