//! Client side of IMAP4rev1 (RFC 3501): framing of server responses (lines and the
//! `{n}` literals inside them, capped) and parsing of what a load client needs: tagged
//! status, untagged EXISTS/EXPUNGE/SEARCH/CAPABILITY/status, and FETCH data (UID, FLAGS,
//! RFC822.SIZE, INTERNALDATE, a BODY[...] literal, BODYSTRUCTURE read by [`structure`]).

pub mod structure;

/// Longest line between literals.
pub const MAX_LINE: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("IMAP response line longer than {MAX_LINE} bytes")]
    LineTooLong,
    #[error("IMAP literal of {0} bytes is over the limit")]
    LiteralTooLarge(u64),
    #[error("malformed IMAP response: {0:?}")]
    Malformed(String),
}

/// Frames one response: lines up to one that does not end in a literal announcement,
/// with every announced literal included. Keeps how far it has scanned.
#[derive(Debug)]
pub struct Framer {
    /// Start of the bytes not yet scanned (a line start, after any literal).
    next: usize,
    max_literal: u64,
}

impl Framer {
    pub fn new(max_literal: u64) -> Self {
        Framer {
            next: 0,
            max_literal,
        }
    }

    pub fn frame(&mut self, buf: &[u8]) -> Result<Option<usize>, Error> {
        loop {
            if self.next > buf.len() {
                return Ok(None); // inside a literal
            }
            let rest = &buf[self.next..];
            let Some(i) = rest.iter().position(|&b| b == b'\n') else {
                return if rest.len() > MAX_LINE {
                    Err(Error::LineTooLong)
                } else {
                    Ok(None)
                };
            };
            if i > MAX_LINE {
                return Err(Error::LineTooLong);
            }
            let line = &rest[..i + 1];
            self.next += i + 1;
            match literal_at_end(line) {
                Some(n) if n > self.max_literal => return Err(Error::LiteralTooLarge(n)),
                Some(n) => self.next += n as usize,
                None => return Ok(Some(self.next)),
            }
        }
    }
}

/// The size `n` when a line ends with `{n}` (or `{n+}`) before its line end.
pub fn literal_at_end(line: &[u8]) -> Option<u64> {
    let l = line.strip_suffix(b"\n")?;
    let l = l.strip_suffix(b"\r").unwrap_or(l);
    let l = l.strip_suffix(b"}")?;
    let open = l.iter().rposition(|&b| b == b'{')?;
    literal_size(&l[open + 1..])
}

/// What is between a literal's braces: 1 to 19 digits, then `+` if non-synchronizing.
/// The one rule for the framer and the FETCH parser, so both see the same literals.
fn literal_size(inner: &[u8]) -> Option<u64> {
    let digits = inner.strip_suffix(b"+").unwrap_or(inner);
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    No,
    Bad,
    Bye,
    Preauth,
}

impl Status {
    fn parse(word: &str) -> Option<Status> {
        Some(match word.to_ascii_uppercase().as_str() {
            "OK" => Status::Ok,
            "NO" => Status::No,
            "BAD" => Status::Bad,
            "BYE" => Status::Bye,
            "PREAUTH" => Status::Preauth,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::No => "NO",
            Status::Bad => "BAD",
            Status::Bye => "BYE",
            Status::Preauth => "PREAUTH",
        }
    }
}

/// A status response's text, split into its optional `[code]` and the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Text<'a> {
    pub code: Option<&'a str>,
    pub text: &'a str,
}

impl<'a> Text<'a> {
    fn parse(s: &'a str) -> Self {
        let s = s.trim();
        if let Some(rest) = s.strip_prefix('[') {
            if let Some(end) = rest.find(']') {
                return Text {
                    code: Some(&rest[..end]),
                    text: rest[end + 1..].trim(),
                };
            }
        }
        Text {
            code: None,
            text: s,
        }
    }
}

/// FETCH data items this client reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fetch<'a> {
    pub uid: Option<u32>,
    pub flags: Option<Vec<&'a str>>,
    pub size: Option<u64>,
    pub internal_date: Option<&'a str>,
    /// The section name (`BODY[]`, `BODY[HEADER]`, `RFC822`, ...) and its bytes.
    pub body: Option<(&'a str, &'a [u8])>,
    /// BODYSTRUCTURE: the bytes inside its parentheses, for [`structure::parts`].
    pub structure: Option<&'a [u8]>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Untagged<'a> {
    Status(Status, Text<'a>),
    Capability(Vec<&'a str>),
    Exists(u32),
    Expunge(u32),
    Recent(u32),
    Search(Vec<u32>),
    Fetch(u32, Fetch<'a>),
    /// FLAGS, LIST, STATUS and anything else a load client ignores.
    Other,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response<'a> {
    /// `+ text`: the server waits for more (literal, SASL, IDLE).
    Continue(&'a str),
    Tagged {
        tag: &'a str,
        status: Status,
        text: Text<'a>,
    },
    Untagged(Untagged<'a>),
}

/// Parses one framed response.
pub fn parse(frame: &[u8]) -> Result<Response<'_>, Error> {
    let bad = || Error::Malformed(String::from_utf8_lossy(&frame[..frame.len().min(80)]).into());
    let first_end = frame
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(frame.len());
    let first = std::str::from_utf8(&frame[..first_end])
        .map_err(|_| bad())?
        .trim_end();
    if let Some(rest) = first.strip_prefix('+') {
        return Ok(Response::Continue(rest.trim()));
    }
    let (tag, rest) = first.split_once(' ').ok_or_else(bad)?;
    if tag != "*" {
        let (word, text) = rest.split_once(' ').unwrap_or((rest, ""));
        let status = Status::parse(word).ok_or_else(bad)?;
        return Ok(Response::Tagged {
            tag,
            status,
            text: Text::parse(text),
        });
    }
    let (word, tail) = rest.split_once(' ').unwrap_or((rest, ""));
    if let Some(s) = Status::parse(word) {
        return Ok(Response::Untagged(Untagged::Status(s, Text::parse(tail))));
    }
    if word.eq_ignore_ascii_case("CAPABILITY") {
        return Ok(Response::Untagged(Untagged::Capability(
            tail.split_whitespace().collect(),
        )));
    }
    if word.eq_ignore_ascii_case("SEARCH") {
        return Ok(Response::Untagged(Untagged::Search(
            search_hits(tail).ok_or_else(bad)?,
        )));
    }
    if let Ok(n) = word.parse::<u32>() {
        let (what, _) = tail.split_once(' ').unwrap_or((tail, ""));
        let u = match what.to_ascii_uppercase().as_str() {
            "EXISTS" => Untagged::Exists(n),
            "EXPUNGE" => Untagged::Expunge(n),
            "RECENT" => Untagged::Recent(n),
            "FETCH" => {
                // Offset of the item list in the whole frame (literals follow the line).
                let at = frame
                    .windows(7)
                    .position(|w| w.eq_ignore_ascii_case(b"FETCH ("))
                    .ok_or_else(bad)?
                    + 7;
                Untagged::Fetch(n, fetch_items(frame, at).ok_or_else(bad)?)
            }
            _ => Untagged::Other,
        };
        return Ok(Response::Untagged(u));
    }
    Ok(Response::Untagged(Untagged::Other))
}

/// `mailbox-data = "SEARCH" *(SP nz-number)`, and the `(MODSEQ n)` RFC 7162 adds at the
/// end: anything else is a broken response, not a shorter list.
fn search_hits(tail: &str) -> Option<Vec<u32>> {
    let (numbers, modseq) = match tail.find('(') {
        Some(i) => (&tail[..i], Some(&tail[i..])),
        None => (tail, None),
    };
    if let Some(m) = modseq {
        let inner = m.trim().strip_prefix('(')?.strip_suffix(')')?;
        let (word, n) = inner.split_once(' ')?;
        if !word.eq_ignore_ascii_case("MODSEQ") || n.trim().parse::<u64>().is_err() {
            return None;
        }
    }
    numbers
        .split_whitespace()
        .map(|w| w.parse::<u32>().ok().filter(|&n| n > 0))
        .collect()
}

/// A cursor over FETCH data items.
struct Cursor<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Cursor<'a> {
    fn skip_spaces(&mut self) {
        while self.b.get(self.i) == Some(&b' ') {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    /// An item name: an atom that may contain `[...]` (with spaces) and `<...>`.
    fn name(&mut self) -> Option<&'a str> {
        let start = self.i;
        let mut depth = 0;
        while let Some(c) = self.peek() {
            match c {
                b'[' => depth += 1,
                b']' => depth -= 1,
                b' ' | b'(' | b')' if depth == 0 => break,
                b'\r' | b'\n' => return None,
                _ => {}
            }
            self.i += 1;
        }
        (self.i > start)
            .then(|| std::str::from_utf8(&self.b[start..self.i]).ok())
            .flatten()
    }

    /// A value: atom/number, quoted string, literal or NIL as bytes; lists as their span.
    fn value(&mut self) -> Option<&'a [u8]> {
        match self.peek()? {
            b'"' => {
                self.i += 1;
                let start = self.i;
                while let Some(c) = self.peek() {
                    match c {
                        b'\\' => self.i += 2,
                        b'"' => {
                            let v = &self.b[start..self.i];
                            self.i += 1;
                            return Some(v);
                        }
                        _ => self.i += 1,
                    }
                }
                None
            }
            b'{' => {
                let close = self.i + self.b[self.i..].iter().position(|&b| b == b'}')?;
                let n = usize::try_from(literal_size(&self.b[self.i + 1..close])?).ok()?;
                let mut start = close + 1;
                if self.b.get(start) == Some(&b'\r') {
                    start += 1;
                }
                if self.b.get(start) != Some(&b'\n') {
                    return None;
                }
                start += 1;
                let v = self.b.get(start..start.checked_add(n)?)?;
                self.i = start + n;
                Some(v)
            }
            b'(' => {
                let start = self.i;
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'(' => {
                            depth += 1;
                            self.i += 1;
                        }
                        b')' => {
                            depth -= 1;
                            self.i += 1;
                            if depth == 0 {
                                return Some(&self.b[start + 1..self.i - 1]);
                            }
                        }
                        b'"' | b'{' => {
                            self.value()?;
                        }
                        _ => self.i += 1,
                    }
                }
            }
            _ => {
                let start = self.i;
                while let Some(c) = self.peek() {
                    if matches!(c, b' ' | b')' | b'\r' | b'\n') {
                        break;
                    }
                    self.i += 1;
                }
                Some(&self.b[start..self.i])
            }
        }
    }
}

fn fetch_items(frame: &[u8], at: usize) -> Option<Fetch<'_>> {
    let mut c = Cursor { b: frame, i: at };
    let mut f = Fetch::default();
    loop {
        c.skip_spaces();
        match c.peek()? {
            b')' => return Some(f),
            _ => {
                let name = c.name()?;
                c.skip_spaces();
                let is_list = c.peek() == Some(b'(');
                let v = c.value()?;
                let text = || std::str::from_utf8(v).ok();
                let upper = name.to_ascii_uppercase();
                match upper.as_str() {
                    "UID" => f.uid = text()?.parse().ok(),
                    "RFC822.SIZE" => f.size = text()?.parse().ok(),
                    "INTERNALDATE" => f.internal_date = text(),
                    "FLAGS" => f.flags = Some(text()?.split_whitespace().collect()),
                    "BODYSTRUCTURE" if is_list => f.structure = Some(v),
                    "BODYSTRUCTURE" => return None,
                    _ if upper.starts_with("BODY[")
                        || upper.starts_with("BINARY[")
                        || upper.starts_with("RFC822") =>
                    {
                        f.body = Some((name, v))
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Parses an INTERNALDATE (`22-Nov-2026 11:22:05 +0000`, day possibly space-padded).
pub fn internal_date(s: &str) -> Option<std::time::SystemTime> {
    let dt = chrono::DateTime::parse_from_str(s.trim(), "%d-%b-%Y %H:%M:%S %z").ok()?;
    let secs = u64::try_from(dt.timestamp()).ok()?;
    Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// A string argument: an atom-safe quoted string, or a literal when it must be one.
pub fn astring(s: &str, out: &mut Vec<u8>) {
    if s.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // A non-synchronizing literal (RFC 7888): needs LITERAL+ (Dovecot and the
        // embedded server have it); the rare credential that is not quotable.
        out.extend_from_slice(format!("{{{}+}}\r\n", s.len()).as_bytes());
        out.extend_from_slice(s.as_bytes());
    }
}

/// The client's commands, as the session sends them (without tag and line end).
pub mod command {
    /// `FETCH n (BODY.PEEK[])`, or only the header; `\Seen` is left alone.
    pub fn fetch(n: u32, whole: bool) -> String {
        let part = if whole { "" } else { "HEADER" };
        format!("FETCH {n} (BODY.PEEK[{part}])")
    }
    /// `STORE n +FLAGS.SILENT (flag)`.
    pub fn add_flag(n: u32, flag: &str) -> String {
        format!("STORE {n} +FLAGS.SILENT ({flag})")
    }
    /// `UID STORE uids +FLAGS.SILENT (flag)` for a comma-separated UID set.
    pub fn uid_add_flag(uids: &str, flag: &str) -> String {
        format!("UID STORE {uids} +FLAGS.SILENT ({flag})")
    }
    /// `UID FETCH set (UID INTERNALDATE BODY.PEEK[])`: whole messages with their arrival.
    pub fn uid_fetch_whole(set: &str) -> String {
        format!("UID FETCH {set} (UID INTERNALDATE BODY.PEEK[])")
    }
    /// `COPY n mailbox`, or `MOVE n mailbox` (RFC 6851) when `moving`.
    pub fn copy(n: u32, mailbox: &str, moving: bool) -> Vec<u8> {
        let mut c = format!("{} {n} ", if moving { "MOVE" } else { "COPY" }).into_bytes();
        super::astring(mailbox, &mut c);
        c
    }
    pub fn create(mailbox: &str) -> Vec<u8> {
        let mut c = b"CREATE ".to_vec();
        super::astring(mailbox, &mut c);
        c
    }
    /// `FETCH n (BODYSTRUCTURE)`.
    pub fn fetch_structure(n: u32) -> String {
        format!("FETCH {n} (BODYSTRUCTURE)")
    }
    /// `FETCH n (BODY.PEEK[section])`: one part, `\Seen` left alone.
    pub fn fetch_part(n: u32, section: &str) -> String {
        format!("FETCH {n} (BODY.PEEK[{section}])")
    }
    /// `SEARCH SINCE d1 BEFORE d2`: internal dates in `[since, before)`.
    pub fn search_dates(since: chrono::NaiveDate, before: chrono::NaiveDate) -> String {
        format!(
            "SEARCH SINCE {} BEFORE {}",
            since.format("%-d-%b-%Y"),
            before.format("%-d-%b-%Y")
        )
    }
    /// `SEARCH HEADER field "text"`, or `SEARCH FROM "text"` when `field` is From (the
    /// two ways clients ask; servers may index them differently).
    pub fn search_header(field: &str, text: &str) -> Vec<u8> {
        let mut c = if field.eq_ignore_ascii_case("from") {
            b"SEARCH FROM ".to_vec()
        } else {
            format!("SEARCH HEADER {field} ").into_bytes()
        };
        super::astring(text, &mut c);
        c
    }
    /// `APPEND mailbox (flags) {n}` or `{n+}`: the line that announces the message.
    pub fn append(mailbox: &str, flags: &str, len: usize, non_sync: bool) -> Vec<u8> {
        let mut c = b"APPEND ".to_vec();
        super::astring(mailbox, &mut c);
        c.extend_from_slice(
            format!(" ({flags}) {{{len}{}}}", if non_sync { "+" } else { "" }).as_bytes(),
        );
        c
    }
    pub const CAPABILITY: &[u8] = b"CAPABILITY";
    pub const STARTTLS: &[u8] = b"STARTTLS";
    pub const EXPUNGE: &[u8] = b"EXPUNGE";
    pub const LOGOUT: &[u8] = b"LOGOUT";
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const FETCH: &[u8] = b"* 3 FETCH (UID 17 FLAGS (\\Seen $Junk) RFC822.SIZE 44 INTERNALDATE \" 2-Nov-2026 11:22:05 +0000\" BODY[] {12}\r\nA: b\r\n\r\nhi\r\n)\r\n";

    #[test]
    fn fetch_with_literal() {
        let mut f = Framer::new(1 << 20);
        assert_eq!(f.frame(FETCH).unwrap(), Some(FETCH.len()));
        let Response::Untagged(Untagged::Fetch(3, x)) = parse(FETCH).unwrap() else {
            panic!()
        };
        assert_eq!(x.uid, Some(17));
        assert_eq!(x.size, Some(44));
        assert_eq!(x.flags, Some(vec!["\\Seen", "$Junk"]));
        assert_eq!(x.body, Some(("BODY[]", &b"A: b\r\n\r\nhi\r\n"[..])));
        let t = internal_date(x.internal_date.unwrap()).unwrap();
        let secs = t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        assert_eq!(secs % 86400, 11 * 3600 + 22 * 60 + 5);
    }

    #[test]
    fn header_section_and_envelope_are_skipped_right() {
        let r = b"* 1 FETCH (ENVELOPE (\"d\" {3}\r\n)() NIL) BODY[HEADER.FIELDS (SUBJECT)] {4}\r\nS: x UID 9)\r\n";
        let mut f = Framer::new(100);
        assert_eq!(f.frame(r).unwrap(), Some(r.len()));
        let Response::Untagged(Untagged::Fetch(1, x)) = parse(r).unwrap() else {
            panic!()
        };
        assert_eq!(
            x.body,
            Some(("BODY[HEADER.FIELDS (SUBJECT)]", &b"S: x"[..])),
            "{x:?}"
        );
        assert_eq!(x.uid, Some(9));
    }

    #[test]
    fn status_and_untagged() {
        assert_eq!(
            parse(b"a1 NO [AUTHENTICATIONFAILED] invalid credentials\r\n").unwrap(),
            Response::Tagged {
                tag: "a1",
                status: Status::No,
                text: Text {
                    code: Some("AUTHENTICATIONFAILED"),
                    text: "invalid credentials"
                }
            }
        );
        assert_eq!(
            parse(b"* 5 EXISTS\r\n").unwrap(),
            Response::Untagged(Untagged::Exists(5))
        );
        assert_eq!(
            parse(b"* SEARCH 1 4 9\r\n").unwrap(),
            Response::Untagged(Untagged::Search(vec![1, 4, 9]))
        );
        assert_eq!(
            parse(b"+ idling\r\n").unwrap(),
            Response::Continue("idling")
        );
        assert!(matches!(
            parse(b"* OK [UIDNEXT 7] next\r\n").unwrap(),
            Response::Untagged(Untagged::Status(
                Status::Ok,
                Text {
                    code: Some("UIDNEXT 7"),
                    ..
                }
            ))
        ));
        assert!(parse(b"a1 MAYBE\r\n").is_err());
    }

    #[test]
    fn search_is_strict() {
        assert_eq!(
            parse(b"* SEARCH\r\n").unwrap(),
            Response::Untagged(Untagged::Search(vec![]))
        );
        assert_eq!(
            parse(b"* SEARCH 2 7 (MODSEQ 917)\r\n").unwrap(),
            Response::Untagged(Untagged::Search(vec![2, 7]))
        );
        for r in [
            &b"* SEARCH 1 x 3\r\n"[..],
            b"* SEARCH 1 0\r\n",
            b"* SEARCH -1\r\n",
            b"* SEARCH 4294967296\r\n",
            b"* SEARCH 1 (MODSEQ x)\r\n",
            b"* SEARCH 1 (FOO 3)\r\n",
        ] {
            assert!(parse(r).is_err(), "{:?}", String::from_utf8_lossy(r));
        }
    }

    #[test]
    fn bodystructure_is_kept_for_the_structure_parser() {
        let r = b"* 2 FETCH (UID 5 BODYSTRUCTURE (\"TEXT\" \"PLAIN\" (\"CHARSET\" \"us-ascii\") NIL NIL \"7BIT\" {2}\r\n12 1 NIL NIL NIL))\r\n";
        let mut f = Framer::new(100);
        assert_eq!(f.frame(r).unwrap(), Some(r.len()));
        let Response::Untagged(Untagged::Fetch(2, x)) = parse(r).unwrap() else {
            panic!()
        };
        let parts = structure::parts(x.structure.unwrap()).unwrap();
        assert_eq!(parts[0].section, "1");
        assert_eq!(parts[0].size, 12);
        assert!(parse(b"* 2 FETCH (BODYSTRUCTURE NIL)\r\n").is_err());
    }

    #[test]
    fn mix_commands() {
        use chrono::NaiveDate;
        let d = |m, day| NaiveDate::from_ymd_opt(2026, m, day).unwrap();
        assert_eq!(
            command::search_dates(d(11, 1), d(11, 26)),
            "SEARCH SINCE 1-Nov-2026 BEFORE 26-Nov-2026"
        );
        assert_eq!(
            command::search_header("From", "spate"),
            b"SEARCH FROM \"spate\""
        );
        assert_eq!(
            command::search_header("Subject", "a b"),
            b"SEARCH HEADER Subject \"a b\""
        );
        assert_eq!(command::copy(3, "Archive", true), b"MOVE 3 \"Archive\"");
        assert_eq!(
            command::append("INBOX", "\\Seen", 12, false),
            b"APPEND \"INBOX\" (\\Seen) {12}"
        );
        assert_eq!(
            command::append("INBOX", "", 1, true),
            b"APPEND \"INBOX\" () {1+}"
        );
    }

    #[test]
    fn caps() {
        let mut f = Framer::new(10);
        assert_eq!(
            f.frame(b"* 1 FETCH (BODY[] {11}\r\n"),
            Err(Error::LiteralTooLarge(11))
        );
        let mut f = Framer::new(10);
        assert_eq!(f.frame(&vec![b'a'; MAX_LINE + 2]), Err(Error::LineTooLong));
    }

    /// Found by fuzz/imap_client: a size of 20 digits (or with a sign) is no literal to
    /// the framer, so the frame ended at its line, and the FETCH parser, which read it as
    /// one, overflowed computing where it ends.
    #[test]
    fn literal_sizes_the_framer_refuses_are_no_literal_to_the_parser() {
        for r in [
            &b"* 1 FETCH (BODY[] {18446744073709551615}\r\n"[..],
            b"* 1 FETCH (BODY[] {+18446744073709551615}\r\n",
            b"* 1 FETCH (ENVELOPE ({18446744073709551615}\r\n",
            b"* 1 FETCH (BODY[] {+0}\r\n)\r\n",
            b"* 1 FETCH (BODY[] {0++}\r\n)\r\n",
        ] {
            let mut f = Framer::new(u64::MAX);
            assert_eq!(
                f.frame(r),
                Ok(Some(r.iter().position(|&b| b == b'\n').unwrap() + 1))
            );
            assert!(parse(r).is_err(), "{:?}", String::from_utf8_lossy(r));
        }
        assert_eq!(literal_at_end(b"{+5}\r\n"), None);
        assert_eq!(literal_at_end(b"{5+}\r\n"), Some(5));
    }

    proptest! {
        #[test]
        fn any_split_frames_the_same(cuts in proptest::collection::vec(0..FETCH.len(), 0..6)) {
            let mut cuts = cuts;
            cuts.sort_unstable();
            let mut f = Framer::new(1 << 20);
            for c in cuts {
                prop_assert_eq!(f.frame(&FETCH[..c]).unwrap(), None);
            }
            prop_assert_eq!(f.frame(FETCH).unwrap(), Some(FETCH.len()));
        }

        /// Any body bytes, however split, come back from the literal unchanged.
        #[test]
        fn literal_bodies_round_trip(body in proptest::collection::vec(any::<u8>(), 0..200), cut in 0usize..300) {
            let mut r = format!("* 1 FETCH (UID 4 BODY[] {{{}}}\r\n", body.len()).into_bytes();
            r.extend_from_slice(&body);
            r.extend_from_slice(b")\r\n");
            let mut f = Framer::new(1000);
            let cut = cut.min(r.len() - 1);
            prop_assert_eq!(f.frame(&r[..cut]).unwrap(), None);
            prop_assert_eq!(f.frame(&r).unwrap(), Some(r.len()));
            let Response::Untagged(Untagged::Fetch(1, x)) = parse(&r).unwrap() else {
                panic!()
            };
            prop_assert_eq!(x.body.unwrap().1, &body[..]);
            prop_assert_eq!(x.uid, Some(4));
        }
    }
}
