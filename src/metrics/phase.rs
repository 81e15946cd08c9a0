//! The phase taxonomy. A phase is timed from the first byte of the command written to the
//! last byte of its complete reply, taken when that byte reached this host (the kernel's
//! receive timestamp, not when this process read it); pipelined groups get a phase of
//! their own rather than invented per-command times.

use serde::Serialize;

macro_rules! phases {
    ($($variant:ident => $name:literal, $doc:literal;)*) => {
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(rename_all = "snake_case")]
        pub enum Phase { $(#[doc = $doc] $variant,)* }

        impl Phase {
            pub const ALL: &'static [Phase] = &[$(Phase::$variant,)*];
            pub const COUNT: usize = Phase::ALL.len();
            pub fn name(self) -> &'static str {
                match self { $(Phase::$variant => $name,)* }
            }
            pub fn describe(self) -> &'static str {
                match self { $(Phase::$variant => $doc,)* }
            }
            pub fn from_name(name: &str) -> Option<Phase> {
                match name { $($name => Some(Phase::$variant),)* _ => None }
            }
        }
    };
}

phases! {
    Connect => "connect", "TCP connect: the connect call to the server's SYN/ACK (the kernel's round-trip sample of the handshake; when a SYN had to be sent again, to when the connect was seen complete)";
    Tls => "tls", "TLS handshake (implicit TLS or after STARTTLS)";
    Banner => "banner", "connect complete to greeting complete";
    Greeting => "greeting", "POP3/IMAP: connect (or TLS) complete to greeting complete";
    Ehlo => "ehlo", "EHLO to its reply";
    Lhlo => "lhlo", "LMTP: LHLO to its reply";
    Starttls => "starttls", "STARTTLS to its 220 reply";
    Auth => "auth", "AUTH exchange, all round trips";
    Mail => "mail", "MAIL FROM to its reply (no pipelining)";
    Rcpt => "rcpt", "each RCPT TO to its reply (no pipelining)";
    Data => "data", "DATA to its 354 reply (no pipelining)";
    Envelope => "envelope", "pipelined MAIL+RCPT..+DATA group to the DATA reply";
    DotEnvelope => "dot_envelope", "PIPELINING across messages: the previous message's content (its final dot) and this message's MAIL+RCPT..+DATA in one write, to this message's DATA reply (the previous message's final reply comes first)";
    Bdat => "bdat", "CHUNKING: MAIL+RCPT..+BDAT LAST and the message in one write to the final reply (all LMTP replies)";
    Body => "body", "message body and final dot to the final reply (all LMTP replies)";
    Quit => "quit", "QUIT to its reply (pipelined behind a connection's last message: from that message's final reply to QUIT's)";
    Transaction => "transaction", "first envelope command to final reply (service time)";
    Response => "response", "scheduled start to final reply, incl. waiting and connecting";
    Lag => "lag", "how late a message started against its schedule (generator lag)";
    Stat => "stat", "POP3 STAT to its reply";
    List => "list", "POP3 LIST to the end of its listing";
    Uidl => "uidl", "POP3 UIDL to the end of its listing";
    Retr => "retr", "POP3 RETR to the end of the message";
    Top => "top", "POP3 TOP to the end of the lines";
    Dele => "dele", "POP3 DELE to its reply";
    Select => "select", "IMAP SELECT to its tagged reply";
    Search => "search", "IMAP SEARCH to its tagged reply";
    Fetch => "fetch", "IMAP FETCH (headers or whole message) to its tagged reply";
    Store => "store", "IMAP STORE (flags, \\Deleted) to its tagged reply";
    Expunge => "expunge", "IMAP EXPUNGE to its tagged reply";
    Idle => "idle", "IMAP IDLE to its continuation plus DONE to its tagged reply";
    Append => "append", "IMAP APPEND of one message (its literal's continuation included, none with LITERAL+) to its tagged reply";
    Copy => "copy", "IMAP COPY of one message to the --to-mailbox to its tagged reply (a CREATE after [TRYCREATE] included)";
    Move => "move", "IMAP MOVE (RFC 6851) of one message to the --to-mailbox to its tagged reply (a CREATE after [TRYCREATE] included)";
    MoveEmulated => "move_emulated", "IMAP move on a server without MOVE: COPY, STORE \\Deleted and EXPUNGE together";
    Create => "create", "IMAP CREATE of the --to-mailbox after a COPY/MOVE refused with [TRYCREATE]";
    SearchDate => "search_date", "IMAP SEARCH SINCE/BEFORE (a window of days) to its tagged reply";
    SearchHeader => "search_header", "IMAP SEARCH HEADER Subject / FROM to its tagged reply";
    Structure => "structure", "IMAP FETCH BODYSTRUCTURE to its tagged reply";
    Part => "part", "IMAP FETCH BODY.PEEK[section] of one part chosen from the structure to its tagged reply";
    Capability => "capability", "IMAP CAPABILITY after login (when the login reply did not list them)";
    Logout => "logout", "POP3 QUIT (commits deletions) or IMAP LOGOUT to its reply";
    Session => "session", "POP3/IMAP: a whole mailbox visit, connect to logout";
    Stream => "stream", "XMPP: stream header sent to the server's stream features (each (re)start)";
    Register => "register", "XMPP: in-band registration (XEP-0077) to its result";
    Bind => "bind", "XMPP: resource binding (and a legacy session IQ) to its result, or a XEP-0198 stream resumption to <resumed/>";
    Roster => "roster", "XMPP: roster get to its result";
    Subscribe => "subscribe", "XMPP: --roster all: a session's subscription requests to its contacts' last approval";
    Presence => "presence", "XMPP: initial presence sent to the server's echo of it";
    Send => "send", "XMPP: a stanza written (no server reply to wait for)";
    Reply => "reply", "XMPP: a --raw IQ written to its result or error";
    Arrival => "arrival", "XMPP: a chat message's send to its arrival at its recipient";
    Multicast => "multicast", "XMPP: a XEP-0033 multicast's send to its arrival at each recipient";
    MulticastLast => "multicast_last", "XMPP: a XEP-0033 multicast's send to its arrival at the last of its recipients";
    Broadcast => "broadcast", "XMPP: a presence change's send to its arrival at each contact";
    BroadcastLast => "broadcast_last", "XMPP: a presence change's send to its arrival at the last of its contacts";
    Request => "request", "rr: a request written (handed to the kernel)";
    FirstByte => "first_byte", "rr: the request written to the first byte of its response";
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A phase as a plan declares it: its name, what it times, and the interval log that
/// holds its histograms.
#[derive(Debug, Clone, Serialize)]
pub struct Declared {
    pub phase: &'static str,
    pub times: &'static str,
    pub hlog: String,
}

impl Phase {
    /// The table of `phases` for plan.json.
    pub fn declare(phases: &[Phase]) -> Vec<Declared> {
        phases
            .iter()
            .map(|p| Declared {
                phase: p.name(),
                times: p.describe(),
                hlog: format!("{}.hlog", p.name()),
            })
            .collect()
    }
}
