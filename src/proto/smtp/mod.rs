//! SMTP and LMTP (RFC 5321, RFC 2033, RFC 3463 enhanced status codes, RFC 2920 pipelining).
//! `reply` parses server replies (the client side); `command` parses client commands
//! (the server side).

pub mod command;
pub mod reply;
