//! POP3's and IMAP's own refusals.

crate::metrics::error_kinds! {
    pub ERR => "-ERR", "POP3 -ERR";
    pub NO => "NO", "IMAP NO";
    pub BAD => "BAD", "IMAP BAD (or an unexpected BYE)";
}
