//! SMTP and LMTP (RFC 5321, RFC 2033, RFC 3463 enhanced status codes, RFC 2920 pipelining).
//! The client side: `reply` parses server replies and `client` encodes commands; the
//! server side: `command` parses client commands and `data` decodes the DATA body.

pub mod client;
pub mod command;
pub mod data;
pub mod reply;
