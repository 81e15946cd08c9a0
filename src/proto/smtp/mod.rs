//! SMTP and LMTP (RFC 5321, RFC 2033, RFC 3463 enhanced status codes, RFC 2920 pipelining).
//! `reply` parses server replies (the client side); `command` parses client commands and
//! `data` decodes the DATA body (the server side).

pub mod command;
pub mod data;
pub mod reply;
