//! JMAP's phases, counters and error kind.

pub use crate::session::phase::*;

crate::metrics::phases! {
    pub SESSION => "session", "JMAP: the session resource fetched (GET /.well-known/jmap), at login";
    pub MAILBOX => "mailbox", "JMAP: Mailbox/get to its response, at login (the inbox found)";
    pub QUERY => "query", "JMAP: Email/query of the inbox's newest messages with Email/get of their header fields, one request, to its response";
    pub BODY => "body", "JMAP: Email/get of the text bodies of the messages a visit reads, to its response";
    pub SET => "set", "JMAP: Email/set of the visit's keywords and destroys, to its response";
    pub VISIT => "visit", "JMAP: a whole visit, its first request to its last response";
}

crate::metrics::counters! {
    pub RETRIEVED => "retrieved", "messages whose body was read (Email/get with its body values)";
    pub FLAGGED => "flagged", "messages whose $seen keyword was set (Email/set update)";
    pub DELETED => "deleted", "messages destroyed (Email/set destroy)";
}

crate::metrics::error_kinds! {
    pub REFUSAL => "jmap-error", "JMAP: the server answered a request with an error (a method error's type, or an HTTP status)";
}
