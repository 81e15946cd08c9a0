//! A population's phases: one per class of action (what the user waited: from when the
//! action fell due to its last reply, the login it needed and any wait behind the user's
//! own previous action included), the login, and the parts of a send.

pub use crate::session::phase::*;

crate::metrics::phases! {
    pub LOGIN => "login", "a client's login: connect, (TLS,) greeting, log in and SELECT INBOX (a mobile client: before each action; a desktop one: when its user starts, and again after its connection broke)";
    pub CHECK => "check", "a look at INBOX: the end of IDLE or a NOOP (desktop) and FETCH of the flags and headers of the newest messages";
    pub READ => "read", "a message opened: FETCH of the whole message (which sets \\Seen)";
    pub FLAG => "flag", "a message flagged: STORE +FLAGS (\\Flagged)";
    pub MOVE => "move", "a message filed: MOVE to Archive (COPY, STORE \\Deleted and EXPUNGE on a server without MOVE; CREATE on [TRYCREATE])";
    pub DELETE => "delete", "a message deleted: STORE +FLAGS (\\Deleted) and EXPUNGE";
    pub SEARCH => "search", "a search of INBOX: SEARCH HEADER Subject";
    pub SEND => "send", "a message sent: the SMTP transaction (connecting and logging in when the user has no connection) and, when the profile saves sent mail, its APPEND to Sent";
    pub SAVE_SENT => "save_sent", "the APPEND of a sent message's copy to the Sent mailbox";
    pub IDLE => "idle", "a desktop client's IDLE between actions: IDLE to its continuation plus DONE to its tagged reply (the wait left out)";
    pub DELIVERY => "delivery", "a message's delivery as its recipient saw it: from its send (the time in its tracking header) to its arrival in INBOX (IMAP INTERNALDATE, whole seconds, so up to a second short), for each message of this run a user's check found";
    pub LOGOUT => "logout", "IMAP LOGOUT to its reply (a mobile client, after each action)";
}

crate::metrics::counters! {
    pub NOTHING_TO_DO => "nothing_to_do", "actions on a message (read, flag, move, delete) that found INBOX empty and did nothing: the store holds less than the profile's users would have";
    pub NEW_SEEN => "new_seen", "messages a check found that were new since the user's previous look";
    pub RETRIEVED_BYTES => "retrieved_bytes", "bytes of the whole messages read";
}
