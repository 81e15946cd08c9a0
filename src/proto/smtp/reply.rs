//! Client side: parsing server replies (RFC 5321 §4.2, enhanced status codes RFC 3463),
//! EHLO capabilities, and encoding of the client's commands.
//!
//! `parse` looks at a buffer and either finds one complete (possibly multi-line) reply at
//! its start or says how much more it needs; nothing is allocated for a reply. Every line
//! and the whole reply are capped, so a server that streams garbage cannot grow memory.

use std::fmt;

/// Longest reply line accepted (RFC 5321 says 512; real servers stay well below this).
pub const MAX_LINE: usize = 4096;
/// Longest multi-line reply accepted (EHLO lists, long 5xx explanations).
pub const MAX_REPLY: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplyError {
    #[error("reply line longer than {MAX_LINE} bytes")]
    LineTooLong,
    #[error("reply longer than {MAX_REPLY} bytes")]
    TooLong,
    #[error("malformed reply line: {0}")]
    Malformed(String),
}

/// One complete reply, borrowed from the read buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply<'a> {
    pub code: u16,
    /// All lines of the reply, terminators included.
    pub raw: &'a [u8],
}

/// An RFC 3463 enhanced status code, e.g. 4.3.0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
pub struct Enhanced(pub u8, pub u16, pub u16);

impl fmt::Display for Enhanced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// Outcome of looking for a reply at the start of a buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Parse<'a> {
    /// More bytes are needed.
    Incomplete,
    /// A reply, and how many bytes of the buffer it used.
    Complete(Reply<'a>, usize),
}

fn show(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(&bytes[..bytes.len().min(80)]);
    s.trim_end().escape_debug().to_string()
}

/// Finds one complete reply at the start of `buf`.
pub fn parse(buf: &[u8]) -> Result<Parse<'_>, ReplyError> {
    let mut pos = 0;
    let mut code = None;
    loop {
        let rest = &buf[pos..];
        let Some(nl) = memchr(b'\n', &rest[..rest.len().min(MAX_LINE)]) else {
            if rest.len() >= MAX_LINE {
                return Err(ReplyError::LineTooLong);
            }
            return Ok(Parse::Incomplete);
        };
        let line = &rest[..nl];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() < 3 || !line[..3].iter().all(u8::is_ascii_digit) {
            return Err(ReplyError::Malformed(show(line)));
        }
        let this = u16::from(line[0] - b'0') * 100
            + u16::from(line[1] - b'0') * 10
            + u16::from(line[2] - b'0');
        if !(200..600).contains(&this) && !(100..200).contains(&this) {
            return Err(ReplyError::Malformed(show(line)));
        }
        match code {
            None => code = Some(this),
            Some(c) if c != this => return Err(ReplyError::Malformed(show(line))),
            Some(_) => {}
        }
        pos += nl + 1;
        if pos > MAX_REPLY {
            return Err(ReplyError::TooLong);
        }
        match line.get(3) {
            Some(b'-') => continue,
            None | Some(b' ') => {
                return Ok(Parse::Complete(
                    Reply {
                        code: this,
                        raw: &buf[..pos],
                    },
                    pos,
                ))
            }
            Some(_) => return Err(ReplyError::Malformed(show(line))),
        }
    }
}

/// A framer for a connection's reader: the length of the complete reply at the start of
/// `buf`, or `None` while it is incomplete.
pub fn frame(buf: &[u8]) -> Result<Option<usize>, ReplyError> {
    Ok(match parse(buf)? {
        Parse::Complete(_, n) => Some(n),
        Parse::Incomplete => None,
    })
}

/// The reply [`frame`] delimited (its first three bytes are the checked code).
pub fn framed(raw: &[u8]) -> Reply<'_> {
    let d = |i: usize| u16::from(raw[i] - b'0');
    Reply {
        code: d(0) * 100 + d(1) * 10 + d(2),
        raw,
    }
}

#[inline]
fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == needle)
}

impl<'a> Reply<'a> {
    /// The text of each line, without code, separator or terminator.
    pub fn lines(&self) -> impl Iterator<Item = &'a [u8]> {
        self.raw
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| {
                let l = l.strip_suffix(b"\r").unwrap_or(l);
                if l.len() > 4 {
                    &l[4..]
                } else {
                    &[][..]
                }
            })
    }

    pub fn is_positive(&self) -> bool {
        (200..400).contains(&self.code)
    }
    pub fn is_transient(&self) -> bool {
        (400..500).contains(&self.code)
    }
    pub fn is_permanent(&self) -> bool {
        self.code >= 500
    }

    /// The enhanced status code at the start of the first line's text, if any.
    pub fn enhanced(&self) -> Option<Enhanced> {
        let first = self.lines().next()?;
        parse_enhanced(first).map(|(e, _)| e)
    }

    /// The first line's text without the enhanced code, lossily decoded.
    pub fn text(&self) -> String {
        let first = self.lines().next().unwrap_or_default();
        let first = match parse_enhanced(first) {
            Some((_, used)) => &first[used..],
            None => first,
        };
        String::from_utf8_lossy(first).trim().to_string()
    }

    /// The text normalised for grouping errors: addresses, numbers and queue ids
    /// replaced, so that `550 5.1.1 <u17@x>: unknown` and `<u18@x>` fall in one class.
    pub fn normalized_text(&self) -> String {
        crate::proto::normalize(&self.text())
    }
}

/// Parses `X.Y.Z` followed by a space or the end; returns the code and bytes used.
fn parse_enhanced(text: &[u8]) -> Option<(Enhanced, usize)> {
    let end = text.iter().position(|&b| b == b' ').unwrap_or(text.len());
    let s = std::str::from_utf8(&text[..end]).ok()?;
    let mut parts = s.split('.');
    let class: u8 = parts.next()?.parse().ok()?;
    let subject: u16 = parts.next()?.parse().ok()?;
    let detail: u16 = parts.next()?.parse().ok()?;
    if parts.next().is_some() || !matches!(class, 2 | 4 | 5) || subject > 999 || detail > 999 {
        return None;
    }
    let used = if end < text.len() { end + 1 } else { end };
    Some((Enhanced(class, subject, detail), used))
}

/// What the server offered in its EHLO/LHLO reply.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Capabilities {
    pub pipelining: bool,
    pub starttls: bool,
    pub size: Option<u64>,
    pub eightbitmime: bool,
    pub enhanced_status_codes: bool,
    pub chunking: bool,
    pub dsn: bool,
    pub auth_plain: bool,
    pub auth_login: bool,
    pub auth_cram_md5: bool,
    /// AUTH is offered at all (with any mechanism).
    pub auth: bool,
}

impl Capabilities {
    pub fn from_ehlo(reply: &Reply<'_>) -> Self {
        let mut caps = Capabilities::default();
        // The first line is the greeting domain, not a capability.
        // Compared as bytes, upper-cased on the stack: a connection's EHLO allocates nothing.
        for line in reply.lines().skip(1) {
            let mut words = line
                .split(|b| b.is_ascii_whitespace())
                .filter(|w| !w.is_empty());
            let Some(keyword) = words.next() else {
                continue;
            };
            match upper(keyword, &mut [0; 20]) {
                b"PIPELINING" => caps.pipelining = true,
                b"STARTTLS" => caps.starttls = true,
                b"8BITMIME" => caps.eightbitmime = true,
                b"ENHANCEDSTATUSCODES" => caps.enhanced_status_codes = true,
                b"CHUNKING" => caps.chunking = true,
                b"DSN" => caps.dsn = true,
                b"SIZE" => {
                    caps.size = words
                        .next()
                        .and_then(|w| std::str::from_utf8(w).ok())
                        .and_then(|w| w.parse().ok());
                }
                b"AUTH" => {
                    caps.auth = true;
                    for mech in words {
                        match upper(mech, &mut [0; 20]) {
                            b"PLAIN" => caps.auth_plain = true,
                            b"LOGIN" => caps.auth_login = true,
                            b"CRAM-MD5" => caps.auth_cram_md5 = true,
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        caps
    }
}

/// `word` upper-cased into `buf`; empty when it is longer than `buf` (then it is no word
/// that [`Capabilities::from_ehlo`] looks for).
fn upper<'b>(word: &[u8], buf: &'b mut [u8; 20]) -> &'b [u8] {
    let Some(out) = buf.get_mut(..word.len()) else {
        return &[];
    };
    for (o, b) in out.iter_mut().zip(word) {
        *o = b.to_ascii_uppercase();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn complete(buf: &[u8]) -> (Reply<'_>, usize) {
        match parse(buf).unwrap() {
            Parse::Complete(r, n) => (r, n),
            Parse::Incomplete => panic!("incomplete"),
        }
    }

    #[test]
    fn single_line() {
        let (r, n) = complete(b"250 2.1.0 Ok\r\nextra");
        assert_eq!(r.code, 250);
        assert_eq!(n, 14);
        assert_eq!(r.enhanced(), Some(Enhanced(2, 1, 0)));
        assert_eq!(r.text(), "Ok");
    }

    #[test]
    fn multi_line_ehlo() {
        let buf = b"250-mx.example.test\r\n250-PIPELINING\r\n250-SIZE 10240000\r\n250-STARTTLS\r\n250-AUTH PLAIN LOGIN CRAM-MD5\r\n250-ENHANCEDSTATUSCODES\r\n250 8BITMIME\r\n";
        let (r, n) = complete(buf);
        assert_eq!(n, buf.len());
        let caps = Capabilities::from_ehlo(&r);
        assert!(caps.pipelining && caps.starttls && caps.eightbitmime);
        assert!(caps.auth_plain && caps.auth_login && caps.auth_cram_md5);
        assert_eq!(caps.size, Some(10240000));
        assert!(!caps.chunking);
        // Keywords in any case, tabs between words, words longer than any keyword.
        let buf = b"250-mx\r\n250-pipelining\r\n250-Chunking\r\n250-X-A-VERY-LONG-KEYWORD-INDEED\r\n250-auth\tplain X-MECHANISM-WITH-A-LONG-NAME\r\n250 dsn\r\n";
        let caps = Capabilities::from_ehlo(&complete(buf).0);
        assert!(caps.pipelining && caps.chunking && caps.dsn && caps.auth && caps.auth_plain);
        assert!(!caps.auth_login && !caps.starttls && caps.size.is_none());
    }

    #[test]
    fn code_without_text_and_bare_lf() {
        let (r, n) = complete(b"354\n");
        assert_eq!((r.code, n), (354, 4));
        assert_eq!(r.text(), "");
    }

    #[test]
    fn incomplete_until_last_line() {
        assert_eq!(parse(b"250-a\r\n250-b\r\n").unwrap(), Parse::Incomplete);
        assert_eq!(parse(b"25").unwrap(), Parse::Incomplete);
        assert_eq!(parse(b"").unwrap(), Parse::Incomplete);
    }

    #[test]
    fn malformed() {
        assert!(matches!(parse(b"hello\r\n"), Err(ReplyError::Malformed(_))));
        assert!(matches!(
            parse(b"250-a\r\n251 b\r\n"),
            Err(ReplyError::Malformed(_))
        ));
        assert!(matches!(
            parse(b"250xok\r\n"),
            Err(ReplyError::Malformed(_))
        ));
        assert!(matches!(
            parse(b"999 no\r\n"),
            Err(ReplyError::Malformed(_))
        ));
    }

    #[test]
    fn caps_are_enforced() {
        let long = vec![b'2'; MAX_LINE + 10];
        assert_eq!(parse(&long), Err(ReplyError::LineTooLong));
        let mut many = Vec::new();
        while many.len() <= MAX_REPLY {
            many.extend_from_slice(b"250-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\n");
        }
        assert_eq!(parse(&many), Err(ReplyError::TooLong));
    }

    #[test]
    fn enhanced_codes() {
        let (r, _) = complete(b"451 4.3.0 Temporary lookup failure\r\n");
        assert_eq!(r.enhanced(), Some(Enhanced(4, 3, 0)));
        assert_eq!(r.text(), "Temporary lookup failure");
        let (r, _) = complete(b"550 Mailbox 1.2 unavailable\r\n");
        assert_eq!(r.enhanced(), None);
        assert_eq!(r.text(), "Mailbox 1.2 unavailable");
    }

    #[test]
    fn normalization_groups_similar_replies() {
        let a =
            crate::proto::normalize("<u17@example.test>: Recipient address rejected: User unknown");
        let b =
            crate::proto::normalize("<u9@example.test>: Recipient address rejected: User unknown");
        assert_eq!(a, b);
        assert_eq!(
            crate::proto::normalize("Ok: queued as 4XyZ12AB"),
            "Ok: queued as #"
        );
        assert_eq!(
            crate::proto::normalize("try again in 30 seconds"),
            "try again in # seconds"
        );
    }

    proptest! {
        #[test]
        fn any_split_parses_the_same(split in 0usize..60) {
            let buf = b"250-mx.example.test\r\n250-PIPELINING\r\n250 SIZE 100\r\n".as_slice();
            let split = split.min(buf.len());
            // Feed the first part; a complete reply must not be claimed early.
            match parse(&buf[..split]).unwrap() {
                Parse::Incomplete => {}
                Parse::Complete(_, n) => prop_assert_eq!(n, buf.len()),
            }
            let (r, n) = complete(buf);
            prop_assert_eq!((r.code, n), (250, buf.len()));
        }

        #[test]
        fn never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse(&data);
        }
    }
}
