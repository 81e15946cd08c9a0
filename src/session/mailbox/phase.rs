//! POP3's and IMAP's phases.

pub use crate::session::phase::*;

crate::metrics::phases! {
    pub GREETING => "greeting", "POP3/IMAP: connect (or TLS) complete to greeting complete";
    pub STAT => "stat", "POP3 STAT to its reply";
    pub LIST => "list", "POP3 LIST to the end of its listing";
    pub UIDL => "uidl", "POP3 UIDL to the end of its listing";
    pub RETR => "retr", "POP3 RETR to the end of the message";
    pub TOP => "top", "POP3 TOP to the end of the lines";
    pub DELE => "dele", "POP3 DELE to its reply";
    pub SELECT => "select", "IMAP SELECT to its tagged reply";
    pub SEARCH => "search", "IMAP SEARCH to its tagged reply";
    pub FETCH => "fetch", "IMAP FETCH (headers or whole message) to its tagged reply";
    pub STORE => "store", "IMAP STORE (flags, \\Deleted) to its tagged reply";
    pub EXPUNGE => "expunge", "IMAP EXPUNGE to its tagged reply";
    pub IDLE => "idle", "IMAP IDLE to its continuation plus DONE to its tagged reply";
    pub APPEND => "append", "IMAP APPEND of one message (its literal's continuation included, none with LITERAL+) to its tagged reply";
    pub COPY => "copy", "IMAP COPY of one message to the --to-mailbox to its tagged reply (a CREATE after [TRYCREATE] included)";
    pub MOVE => "move", "IMAP MOVE (RFC 6851) of one message to the --to-mailbox to its tagged reply (a CREATE after [TRYCREATE] included)";
    pub MOVE_EMULATED => "move_emulated", "IMAP move on a server without MOVE: COPY, STORE \\Deleted and EXPUNGE together";
    pub CREATE => "create", "IMAP CREATE of the --to-mailbox after a COPY/MOVE refused with [TRYCREATE]";
    pub SEARCH_DATE => "search_date", "IMAP SEARCH SINCE/BEFORE (a window of days) to its tagged reply";
    pub SEARCH_HEADER => "search_header", "IMAP SEARCH HEADER Subject / FROM to its tagged reply";
    pub STRUCTURE => "structure", "IMAP FETCH BODYSTRUCTURE to its tagged reply";
    pub PART => "part", "IMAP FETCH BODY.PEEK[section] of one part chosen from the structure to its tagged reply";
    pub CAPABILITY => "capability", "IMAP CAPABILITY after login (when the login reply did not list them)";
    pub LOGOUT => "logout", "POP3 QUIT (commits deletions) or IMAP LOGOUT to its reply";
    pub SESSION => "session", "POP3/IMAP: a whole mailbox visit, connect to logout";
}

crate::metrics::counters! {
    pub RETRIEVED => "retrieved", "whole messages read (RETR, FETCH BODY[])";
    pub RETRIEVED_BYTES => "retrieved_bytes", "bytes of the whole messages read";
    pub DELETED => "deleted", "messages deleted (DELE before QUIT, \\Deleted before EXPUNGE)";
    pub SEARCH_HITS => "search_hits", "message numbers returned by SEARCH commands";
}
