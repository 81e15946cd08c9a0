//! What an injected fault is: where in the SMTP dialogue it fires and what it does. The
//! rules that draw faults are in `faults`; the counts of those injected in `stats`.

/// Where in the SMTP dialogue a fault applies.
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
}

impl FaultPoint {
    pub const ALL: [FaultPoint; 6] = [
        FaultPoint::Connect,
        FaultPoint::Ehlo,
        FaultPoint::Mail,
        FaultPoint::Rcpt,
        FaultPoint::Data,
        FaultPoint::Dot,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultPoint::Connect => "connect",
            FaultPoint::Ehlo => "ehlo",
            FaultPoint::Mail => "mail",
            FaultPoint::Rcpt => "rcpt",
            FaultPoint::Data => "data",
            FaultPoint::Dot => "dot",
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
