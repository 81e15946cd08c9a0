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
    /// XMPP: the answer to SASL `<auth>` (fail: `temporary-auth-failure` for 4xx,
    /// `not-authorized` for 5xx).
    XmppLogin,
    /// XMPP: each stanza a bound session sends (fail: a stream error,
    /// `resource-constraint` for 4xx, `internal-server-error` for 5xx, then close).
    XmppStanza,
    /// rr: each request (fail: HTTP status CODE, or `ERR CODE` in the other framings;
    /// drop: the connection closes without an answer).
    Rr,
}

impl FaultPoint {
    pub const ALL: [FaultPoint; 9] = [
        FaultPoint::Connect,
        FaultPoint::Ehlo,
        FaultPoint::Mail,
        FaultPoint::Rcpt,
        FaultPoint::Data,
        FaultPoint::Dot,
        FaultPoint::XmppLogin,
        FaultPoint::XmppStanza,
        FaultPoint::Rr,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultPoint::Connect => "connect",
            FaultPoint::Ehlo => "ehlo",
            FaultPoint::Mail => "mail",
            FaultPoint::Rcpt => "rcpt",
            FaultPoint::Data => "data",
            FaultPoint::Dot => "dot",
            FaultPoint::XmppLogin => "xmpp-login",
            FaultPoint::XmppStanza => "xmpp-stanza",
            FaultPoint::Rr => "rr",
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
            "xmpp-login" => FaultPoint::XmppLogin,
            "xmpp-stanza" => FaultPoint::XmppStanza,
            "rr" => FaultPoint::Rr,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    Fail,
    Delay,
    Drop,
}

impl FaultKind {
    pub const ALL: [FaultKind; 3] = [FaultKind::Fail, FaultKind::Delay, FaultKind::Drop];
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Fail => "fail",
            FaultKind::Delay => "delay",
            FaultKind::Drop => "drop",
        }
    }
}
