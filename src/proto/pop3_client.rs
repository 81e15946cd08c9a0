//! Client side of POP3 (RFC 1939, RFC 2449): framing and parsing of server responses.
//! Framers decide how many buffered bytes make one response (the transport grows its
//! buffer up to a cap until they say so); parsers read a complete response.

/// Longest status line accepted (RFC 2449 says 512; servers put more in -ERR texts).
pub const MAX_LINE: usize = 8192;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("POP3 status line longer than {MAX_LINE} bytes")]
    LineTooLong,
    #[error("POP3 response does not start with +OK or -ERR: {0:?}")]
    BadStatus(String),
}

/// Frames one status line: its length including the line end (a bare LF is accepted).
pub fn line_frame(buf: &[u8]) -> Result<Option<usize>, Error> {
    match buf.iter().position(|&b| b == b'\n') {
        Some(i) if i < MAX_LINE => Ok(Some(i + 1)),
        Some(_) => Err(Error::LineTooLong),
        None if buf.len() >= MAX_LINE => Err(Error::LineTooLong),
        None => Ok(None),
    }
}

/// Frames a multi-line response (RETR, TOP, LIST, UIDL, CAPA): the status line and, after
/// +OK, every data line up to the terminating ".". Keeps how far it has scanned, so a
/// large message arriving in many reads is scanned once.
#[derive(Debug, Default)]
pub struct MultiFramer {
    /// Start of the first line not yet looked at.
    next: usize,
}

impl MultiFramer {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn frame(&mut self, buf: &[u8]) -> Result<Option<usize>, Error> {
        if self.next == 0 {
            let Some(n) = line_frame(buf)? else {
                return Ok(None);
            };
            if buf.starts_with(b"-") {
                return Ok(Some(n));
            }
            self.next = n;
        }
        while let Some(i) = buf[self.next..].iter().position(|&b| b == b'\n') {
            let line = &buf[self.next..self.next + i + 1];
            self.next += i + 1;
            if line == b".\r\n" || line == b".\n" {
                return Ok(Some(self.next));
            }
        }
        Ok(None)
    }
}

/// A parsed status line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status<'a> {
    pub ok: bool,
    /// The text after +OK / -ERR, trimmed.
    pub text: &'a str,
}

/// Parses the status line at the start of a response frame.
pub fn status(frame: &[u8]) -> Result<Status<'_>, Error> {
    let end = frame
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(frame.len());
    let line = std::str::from_utf8(&frame[..end]).unwrap_or("").trim_end();
    let bad = || Error::BadStatus(String::from_utf8_lossy(&frame[..end.min(80)]).into_owned());
    let (ok, rest) = if let Some(r) = strip_ci(line, "+OK") {
        (true, r)
    } else if let Some(r) = strip_ci(line, "-ERR") {
        (false, r)
    } else {
        return Err(bad());
    };
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return Err(bad());
    }
    Ok(Status {
        ok,
        text: rest.trim(),
    })
}

fn strip_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// The data lines of a multi-line frame, still dot-stuffed, without the terminator.
pub fn data(frame: &[u8]) -> &[u8] {
    let start = frame
        .iter()
        .position(|&b| b == b'\n')
        .map_or(frame.len(), |i| i + 1);
    let body = &frame[start..];
    let end = if body.ends_with(b".\r\n") {
        body.len() - 3
    } else if body.ends_with(b".\n") {
        body.len() - 2
    } else {
        body.len()
    };
    &body[..end]
}

/// `+OK n size` of STAT.
pub fn stat(text: &str) -> Option<(u32, u64)> {
    let mut w = text.split_whitespace();
    Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
}

/// The `n value` lines of LIST or UIDL.
pub fn listing(data: &[u8]) -> impl Iterator<Item = (u32, &str)> {
    data.split(|&b| b == b'\n').filter_map(|l| {
        let l = std::str::from_utf8(l).ok()?.trim();
        let (n, v) = l.split_once(' ')?;
        Some((n.parse().ok()?, v.trim()))
    })
}

/// The capability names of a CAPA response (upper-cased first words).
pub fn capabilities(data: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(data)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(|w| w.to_ascii_uppercase())
        .collect()
}

/// The APOP timestamp (`<...@...>`) in a greeting, when the server offers APOP.
pub fn apop_timestamp(greeting: &str) -> Option<&str> {
    let start = greeting.find('<')?;
    let end = start + greeting[start..].find('>')?;
    let ts = &greeting[start..=end];
    ts.contains('@').then_some(ts)
}

/// The APOP digest: hex MD5 of timestamp and password (RFC 1939 7).
pub fn apop_digest(timestamp: &str, password: &str) -> String {
    use md5::{Digest, Md5};
    let mut h = Md5::new();
    h.update(timestamp.as_bytes());
    h.update(password.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The client's commands, as the session sends them (without the line end).
pub mod command {
    /// `RETR n`: the whole message.
    pub fn retr(n: u32) -> String {
        format!("RETR {n}")
    }
    /// `TOP n lines`: the header and the first `lines` body lines.
    pub fn top(n: u32, lines: u32) -> String {
        format!("TOP {n} {lines}")
    }
    /// `DELE n`: marked for deletion, committed by QUIT.
    pub fn dele(n: u32) -> String {
        format!("DELE {n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const RETR: &[u8] = b"+OK 42 octets\r\nSubject: x\r\n\r\n..dotted\r\n.\r\n";

    #[test]
    fn status_lines() {
        assert_eq!(
            status(b"+OK 2 320\r\n").unwrap(),
            Status {
                ok: true,
                text: "2 320"
            }
        );
        let s = status(b"-ERR [AUTH] invalid\r\n").unwrap();
        assert!(!s.ok);
        assert_eq!(s.text, "[AUTH] invalid");
        assert!(status(b"+OK\r\n").unwrap().ok);
        assert!(status(b"* OK imap\r\n").is_err());
        assert!(status(b"+OKAY\r\n").is_err());
        assert_eq!(stat("2 320"), Some((2, 320)));
    }

    #[test]
    fn multi_line_frames_and_unstuffs() {
        let mut f = MultiFramer::new();
        assert_eq!(f.frame(RETR).unwrap(), Some(RETR.len()));
        let mut out = Vec::new();
        crate::proto::dot::unstuff(data(RETR), &mut out);
        assert_eq!(out, b"Subject: x\r\n\r\n.dotted\r\n");
        // -ERR ends at its line; an empty listing is just the terminator.
        let mut f = MultiFramer::new();
        assert_eq!(f.frame(b"-ERR no such message\r\n+OK").unwrap(), Some(22));
        let mut f = MultiFramer::new();
        assert_eq!(f.frame(b"+OK\r\n.\r\nX").unwrap(), Some(8));
        assert!(data(b"+OK\r\n.\r\n").is_empty());
        let l: Vec<_> = listing(b"1 a.1\r\n2 a.2\r\n").collect();
        assert_eq!(l, vec![(1, "a.1"), (2, "a.2")]);
    }

    #[test]
    fn overlong_status_is_refused() {
        assert_eq!(line_frame(&[b'x'; MAX_LINE]), Err(Error::LineTooLong));
    }

    #[test]
    fn apop() {
        let g = "POP3 ready <1896.697170952@dbc.mtview.ca.us>";
        let ts = apop_timestamp(g).unwrap();
        // The example of RFC 1939 section 7.
        assert_eq!(
            apop_digest(ts, "tanstaaf"),
            "c4c9334bac560ecc979e58001b3e22fb"
        );
        assert_eq!(apop_timestamp("ready"), None);
    }

    proptest! {
        /// However the bytes arrive, the framer finds the same end, never earlier.
        #[test]
        fn any_split_frames_the_same(cuts in proptest::collection::vec(0..RETR.len(), 0..6)) {
            let mut cuts = cuts;
            cuts.sort_unstable();
            let mut f = MultiFramer::new();
            for c in cuts {
                prop_assert_eq!(f.frame(&RETR[..c]).unwrap(), None);
            }
            prop_assert_eq!(f.frame(RETR).unwrap(), Some(RETR.len()));
        }

        #[test]
        fn stuffing_round_trips(lines in proptest::collection::vec("[.a-z]{0,5}", 0..8)) {
            let body: String = lines.iter().map(|l| format!("{l}\r\n")).collect();
            let stuffed = crate::proto::dot::stuff(body.as_bytes());
            let mut frame = b"+OK\r\n".to_vec();
            frame.extend_from_slice(&stuffed);
            let mut f = MultiFramer::new();
            prop_assert_eq!(f.frame(&frame).unwrap(), Some(frame.len()));
            let mut out = Vec::new();
            crate::proto::dot::unstuff(data(&frame), &mut out);
            prop_assert_eq!(out, body.as_bytes());
        }
    }
}
