//! The kinds of listener a server has.

/// The kinds of listener, each with its own protocol and TLS mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Listener {
    Smtp,
    Submission,
    Smtps,
    Lmtp,
    Pop3,
    Pop3s,
    Imap,
    Imaps,
    /// XMPP client-to-server (RFC 6120), STARTTLS offered.
    Xmpp,
    /// XMPP with direct TLS (XEP-0368, "port 5223" style).
    Xmpps,
    /// XMPP over WebSocket (RFC 7395), plain HTTP upgrade.
    XmppWs,
    /// XMPP over WebSocket over TLS (wss://).
    XmppWss,
    /// JMAP (RFC 8620/8621) over HTTP, and over HTTPS.
    Jmap,
    Jmaps,
    /// The request/response decision service (`spate rr`'s target).
    Rr,
    /// The decision service over TLS (optionally requiring client certificates).
    Rrs,
}

impl Listener {
    pub const ALL: [Listener; 16] = [
        Listener::Smtp,
        Listener::Submission,
        Listener::Smtps,
        Listener::Lmtp,
        Listener::Pop3,
        Listener::Pop3s,
        Listener::Imap,
        Listener::Imaps,
        Listener::Xmpp,
        Listener::Xmpps,
        Listener::XmppWs,
        Listener::XmppWss,
        Listener::Jmap,
        Listener::Jmaps,
        Listener::Rr,
        Listener::Rrs,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Listener::Smtp => "smtp",
            Listener::Submission => "submission",
            Listener::Smtps => "smtps",
            Listener::Lmtp => "lmtp",
            Listener::Pop3 => "pop3",
            Listener::Pop3s => "pop3s",
            Listener::Imap => "imap",
            Listener::Imaps => "imaps",
            Listener::Xmpp => "xmpp",
            Listener::Xmpps => "xmpps",
            Listener::XmppWs => "xmpp-ws",
            Listener::XmppWss => "xmpp-wss",
            Listener::Jmap => "jmap",
            Listener::Jmaps => "jmaps",
            Listener::Rr => "rr",
            Listener::Rrs => "rrs",
        }
    }

    pub(super) fn implicit_tls(self) -> bool {
        matches!(
            self,
            Listener::Smtps
                | Listener::Pop3s
                | Listener::Imaps
                | Listener::Xmpps
                | Listener::XmppWss
                | Listener::Jmaps
        )
    }
}
