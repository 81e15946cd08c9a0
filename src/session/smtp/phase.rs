//! SMTP's and LMTP's phases.

pub use crate::session::phase::*;

crate::metrics::phases! {
    pub BANNER => "banner", "connect complete to greeting complete";
    pub EHLO => "ehlo", "EHLO to its reply";
    pub LHLO => "lhlo", "LMTP: LHLO to its reply";
    pub MAIL => "mail", "MAIL FROM to its reply (no pipelining)";
    pub RCPT => "rcpt", "each RCPT TO to its reply (no pipelining)";
    pub DATA => "data", "DATA to its 354 reply (no pipelining)";
    pub ENVELOPE => "envelope", "pipelined MAIL+RCPT..+DATA group to the DATA reply";
    pub DOT_ENVELOPE => "dot_envelope", "PIPELINING across messages: the previous message's content (its final dot) and this message's MAIL+RCPT..+DATA in one write, to this message's DATA reply (the previous message's final reply comes first)";
    pub BDAT => "bdat", "CHUNKING: MAIL+RCPT..+BDAT LAST and the message in one write to the final reply (all LMTP replies)";
    pub BODY => "body", "message body and final dot to the final reply (all LMTP replies)";
    pub QUIT => "quit", "QUIT to its reply (pipelined behind a connection's last message: from that message's final reply to QUIT's)";
    pub TRANSACTION => "transaction", "first envelope command to final reply (service time)";
}

crate::metrics::counters! {
    pub RCPT_ACCEPTED => "rcpt_accepted", "recipients accepted";
    pub RCPT_REJECTED => "rcpt_rejected", "recipients refused";
    pub RCPT_INDETERMINATE => "rcpt_indeterminate", "LMTP: recipients of an accepted message whose own final reply never came (the connection died after others' replies; the server may have delivered to them)";
}
