//! XMPP's own failures.

crate::metrics::error_kinds! {
    pub SASL => "sasl", "XMPP: a SASL <failure/> (its condition is the error's text)";
    pub STREAM => "stream-error", "XMPP: a stream error (<stream:error/>), which ends the stream";
    pub STANZA => "stanza-error", "XMPP: a stanza error (<error type=...> in an IQ reply or a bounce), its condition the error's text";
    pub NOT_LOGGED_IN => "login-refused", "XMPP: a unit of a session whose login the server refused for good, which it does not try again (the refusal itself is counted once, as its sasl error)";
}
