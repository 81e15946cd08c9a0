//! JMAP's phases, counters and error kind.

pub use crate::session::phase::*;

crate::metrics::phases! {
    pub SESSION => "session", "JMAP: the session resource fetched (GET /.well-known/jmap), at login";
    pub MAILBOX => "mailbox", "JMAP: Mailbox/get to its response, at login (the inbox found; Identity/get too with --submit)";
    pub QUERY => "query", "JMAP: Email/query of the inbox's newest messages with Email/get of their header fields, one request, to its response";
    pub BODY => "body", "JMAP: Email/get of the text bodies of the messages a visit reads, to its response";
    pub SET => "set", "JMAP: Email/set of the visit's keywords and destroys, to its response";
    pub MOVE => "move", "JMAP: Email/set of the visit's moves (mailboxIds) to the archive, to its response";
    pub UPLOAD => "upload", "JMAP: a generated message uploaded as a blob (POST to the uploadUrl), to its response";
    pub IMPORT => "import", "JMAP: Email/import of an uploaded message (into the inbox, or as a draft to send), to its response";
    pub SUBMIT => "submit", "JMAP: EmailSubmission/set of a draft to another account of the run (and the draft destroyed), to its response";
    pub VISIT => "visit", "JMAP: a whole visit, its first request to its last response";
}

crate::metrics::counters! {
    pub RETRIEVED => "retrieved", "messages whose body was read (Email/get with its body values)";
    pub FLAGGED => "flagged", "messages whose $seen keyword was set (Email/set update)";
    pub DELETED => "deleted", "messages destroyed (Email/set destroy)";
    pub MOVED => "moved", "messages moved to the archive (Email/set update of mailboxIds)";
    pub IMPORTED => "imported", "generated messages imported into the inbox (Email/import)";
    pub SUBMITTED => "submitted", "generated messages sent to another account (EmailSubmission/set)";
}

crate::metrics::error_kinds! {
    pub REFUSAL => "jmap-error", "JMAP: the server answered a request with an error (a method error's type, or an HTTP status)";
}
