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
}

impl Listener {
    pub const ALL: [Listener; 8] = [
        Listener::Smtp,
        Listener::Submission,
        Listener::Smtps,
        Listener::Lmtp,
        Listener::Pop3,
        Listener::Pop3s,
        Listener::Imap,
        Listener::Imaps,
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
        }
    }

    pub(super) fn implicit_tls(self) -> bool {
        matches!(self, Listener::Smtps | Listener::Pop3s | Listener::Imaps)
    }
}
