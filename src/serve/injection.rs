//! What an injected fault is: where in the SMTP dialogue (or an XMPP stream) it fires and
//! what it does. The rules that draw faults are in `faults`; the counts of those injected
//! in `stats`.

/// Where in the SMTP dialogue, or in an XMPP stream, a fault applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultPoint {
    /// The greeting (`banner` is accepted as a synonym).
    Connect,
    Ehlo,
    Mail,
    Rcpt,
    /// The reply to DATA (or the first BDAT).
    Data,
    /// The reply after the message has been received.
    Dot,
    /// After the message has been stored, before its final reply: a drop is a server
    /// that dies having stored it (the client cannot know), a fail one that keeps what it
    /// refused.
    Stored,
    /// XMPP: the answer to SASL `<auth>` (fail: `temporary-auth-failure` for 4xx,
    /// `not-authorized` for 5xx).
    XmppLogin,
    /// XMPP: each stanza a bound session sends (fail: a stream error,
    /// `resource-constraint` for 4xx, `internal-server-error` for 5xx, then close).
    XmppStanza,
    /// rr: each request (fail: HTTP status CODE, or `ERR CODE` in the other framings;
    /// drop: the connection closes without an answer).
    Rr,
    /// IMAP commands (fail: `NO` for a 4xx code, `BAD` for 5xx, `BYE` and close for 421;
    /// drop: the connection closes without an answer), and POP3 ones (fail: `-ERR`, and
    /// close for 421). IMAP LOGIN and AUTHENTICATE; POP3 PASS, APOP and AUTH.
    ImapLogin,
    /// SELECT and EXAMINE.
    ImapSelect,
    /// FETCH and UID FETCH.
    ImapFetch,
    /// STORE and UID STORE.
    ImapStore,
    /// SEARCH and UID SEARCH.
    ImapSearch,
    ImapAppend,
    /// COPY, MOVE and their UID forms.
    ImapCopy,
    /// EXPUNGE, UID EXPUNGE and CLOSE.
    ImapExpunge,
    ImapIdle,
    /// IMAP LIST and LSUB; POP3 LIST, UIDL and STAT.
    ImapList,
    ImapStatus,
    /// CREATE, DELETE, RENAME, SUBSCRIBE, UNSUBSCRIBE.
    ImapMailbox,
    /// POP3 RETR and TOP.
    Pop3Retr,
    /// POP3 DELE.
    Pop3Dele,
    /// POP3 QUIT in the TRANSACTION state (the deletions' commit).
    Pop3Quit,
}

impl FaultPoint {
    /// The fault point of a POP3 command (`transaction`: in the TRANSACTION state).
    pub fn of_pop3(cmd: &crate::proto::pop3::Command, transaction: bool) -> Option<FaultPoint> {
        use crate::proto::pop3::Command as C;
        Some(match cmd {
            C::Pass(_) | C::Apop { .. } | C::Auth { .. } => FaultPoint::ImapLogin,
            C::List(_) | C::Uidl(_) | C::Stat => FaultPoint::ImapList,
            C::Retr(_) | C::Top { .. } => FaultPoint::Pop3Retr,
            C::Dele(_) => FaultPoint::Pop3Dele,
            C::Quit if transaction => FaultPoint::Pop3Quit,
            _ => return None,
        })
    }

    /// The fault point of an IMAP command, if it has one.
    pub fn of_imap(cmd: &crate::proto::imap::Command) -> Option<FaultPoint> {
        use crate::proto::imap::Command as C;
        Some(match cmd {
            C::Login { .. } | C::Authenticate { .. } => FaultPoint::ImapLogin,
            C::Select(..) | C::Examine(..) => FaultPoint::ImapSelect,
            C::Fetch { .. } => FaultPoint::ImapFetch,
            C::Store { .. } => FaultPoint::ImapStore,
            C::Search { .. } => FaultPoint::ImapSearch,
            C::Append { .. } => FaultPoint::ImapAppend,
            C::Copy { .. } | C::Move { .. } => FaultPoint::ImapCopy,
            C::Expunge(_) | C::Close => FaultPoint::ImapExpunge,
            C::Idle => FaultPoint::ImapIdle,
            C::List { .. } | C::Lsub { .. } => FaultPoint::ImapList,
            C::Status { .. } => FaultPoint::ImapStatus,
            C::Create(_)
            | C::Delete(_)
            | C::Rename { .. }
            | C::Subscribe(_)
            | C::Unsubscribe(_) => FaultPoint::ImapMailbox,
            _ => return None,
        })
    }

    pub const ALL: [FaultPoint; 25] = [
        FaultPoint::Connect,
        FaultPoint::Ehlo,
        FaultPoint::Mail,
        FaultPoint::Rcpt,
        FaultPoint::Data,
        FaultPoint::Dot,
        FaultPoint::Stored,
        FaultPoint::XmppLogin,
        FaultPoint::XmppStanza,
        FaultPoint::Rr,
        FaultPoint::ImapLogin,
        FaultPoint::ImapSelect,
        FaultPoint::ImapFetch,
        FaultPoint::ImapStore,
        FaultPoint::ImapSearch,
        FaultPoint::ImapAppend,
        FaultPoint::ImapCopy,
        FaultPoint::ImapExpunge,
        FaultPoint::ImapIdle,
        FaultPoint::ImapList,
        FaultPoint::ImapStatus,
        FaultPoint::ImapMailbox,
        FaultPoint::Pop3Retr,
        FaultPoint::Pop3Dele,
        FaultPoint::Pop3Quit,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultPoint::Connect => "connect",
            FaultPoint::Ehlo => "ehlo",
            FaultPoint::Mail => "mail",
            FaultPoint::Rcpt => "rcpt",
            FaultPoint::Data => "data",
            FaultPoint::Dot => "dot",
            FaultPoint::Stored => "stored",
            FaultPoint::XmppLogin => "xmpp-login",
            FaultPoint::XmppStanza => "xmpp-stanza",
            FaultPoint::Rr => "rr",
            FaultPoint::ImapLogin => "login",
            FaultPoint::ImapSelect => "select",
            FaultPoint::ImapFetch => "fetch",
            FaultPoint::ImapStore => "store",
            FaultPoint::ImapSearch => "search",
            FaultPoint::ImapAppend => "append",
            FaultPoint::ImapCopy => "copy",
            FaultPoint::ImapExpunge => "expunge",
            FaultPoint::ImapIdle => "idle",
            FaultPoint::ImapList => "list",
            FaultPoint::ImapStatus => "status",
            FaultPoint::ImapMailbox => "mailbox",
            FaultPoint::Pop3Retr => "retr",
            FaultPoint::Pop3Dele => "dele",
            FaultPoint::Pop3Quit => "quit",
        }
    }

    pub(super) fn parse(s: &str) -> Option<FaultPoint> {
        Some(match s.to_ascii_lowercase().as_str() {
            "connect" | "banner" => FaultPoint::Connect,
            "ehlo" | "helo" | "lhlo" => FaultPoint::Ehlo,
            "mail" => FaultPoint::Mail,
            "rcpt" => FaultPoint::Rcpt,
            "data" => FaultPoint::Data,
            "dot" => FaultPoint::Dot,
            "stored" => FaultPoint::Stored,
            "xmpp-login" => FaultPoint::XmppLogin,
            "xmpp-stanza" => FaultPoint::XmppStanza,
            "rr" => FaultPoint::Rr,
            "login" | "authenticate" => FaultPoint::ImapLogin,
            "select" | "examine" => FaultPoint::ImapSelect,
            "fetch" => FaultPoint::ImapFetch,
            "store" => FaultPoint::ImapStore,
            "search" => FaultPoint::ImapSearch,
            "append" => FaultPoint::ImapAppend,
            "copy" | "move" => FaultPoint::ImapCopy,
            "expunge" => FaultPoint::ImapExpunge,
            "idle" => FaultPoint::ImapIdle,
            "list" | "lsub" => FaultPoint::ImapList,
            "status" => FaultPoint::ImapStatus,
            "mailbox" => FaultPoint::ImapMailbox,
            "retr" | "top" => FaultPoint::Pop3Retr,
            "dele" => FaultPoint::Pop3Dele,
            "quit" => FaultPoint::Pop3Quit,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    Fail,
    Delay,
    Drop,
    /// A session closed on purpose (`--close-after`).
    Close,
}

impl FaultKind {
    pub const ALL: [FaultKind; 4] = [
        FaultKind::Fail,
        FaultKind::Delay,
        FaultKind::Drop,
        FaultKind::Close,
    ];
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Fail => "fail",
            FaultKind::Delay => "delay",
            FaultKind::Drop => "drop",
            FaultKind::Close => "close",
        }
    }
}
