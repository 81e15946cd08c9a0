//! Server side of an IMAP4rev1 subset (RFC 3501, RFC 2177 IDLE, RFC 7888 LITERAL+):
//! parsing of one complete client command. Framing comes first: [`literal_at_end`] tells
//! the caller that a line announces a literal, which it reads (capped) and appends after
//! the line's CRLF before calling [`parse`] on the whole.

/// `{n}` or `{n+}` at the end of a line: (n, synchronizing).
pub fn literal_at_end(line: &[u8]) -> Option<(u64, bool)> {
    let inner = line.strip_suffix(b"}")?;
    let open = inner.iter().rposition(|&b| b == b'{')?;
    let mut digits = &inner[open + 1..];
    let sync = match digits.strip_suffix(b"+") {
        Some(d) => {
            digits = d;
            false
        }
        None => true,
    };
    if digits.is_empty() || digits.len() > 12 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some((n, sync))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqNum {
    Num(u32),
    /// `*`: the largest number in use.
    Star,
}

/// A sequence set such as `1:*,3,5:7`.
pub type SeqSet = Vec<(SeqNum, SeqNum)>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Section {
    /// `[]`: the whole message.
    Full,
    Header,
    Text,
    HeaderFields {
        not: bool,
        fields: Vec<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchItem {
    Flags,
    Uid,
    Rfc822Size,
    InternalDate,
    Envelope,
    /// RFC822 (= BODY[]), RFC822.HEADER (= BODY.PEEK[HEADER]), RFC822.TEXT (= BODY[TEXT]).
    Rfc822(Option<Section>),
    Body {
        peek: bool,
        section: Section,
        partial: Option<(u32, u32)>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    Replace,
    Add,
    Remove,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Search {
    All,
    Seq(SeqSet),
    Uid(SeqSet),
    Header(String, String),
    Flag { flag: String, set: bool },
    Larger(u64),
    Smaller(u64),
    Not(Box<Search>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Capability,
    Noop,
    Logout,
    Starttls,
    Check,
    Close,
    Expunge,
    Idle,
    Login {
        user: String,
        pass: String,
    },
    Authenticate {
        mechanism: String,
        initial: Option<String>,
    },
    Select(String),
    Examine(String),
    List {
        reference: String,
        pattern: String,
    },
    Lsub {
        reference: String,
        pattern: String,
    },
    Status {
        mailbox: String,
        items: Vec<String>,
    },
    Fetch {
        uid: bool,
        set: SeqSet,
        items: Vec<FetchItem>,
    },
    Store {
        uid: bool,
        set: SeqSet,
        mode: StoreMode,
        silent: bool,
        flags: Vec<String>,
    },
    Search {
        uid: bool,
        criteria: Vec<Search>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub tag: String,
    pub command: Command,
}

/// A command that cannot be parsed; answer `tag BAD msg` (or `* BAD` without a tag).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{msg}")]
pub struct ParseError {
    pub tag: Option<String>,
    pub msg: &'static str,
}

struct P<'a> {
    s: &'a [u8],
    i: usize,
}

type R<T> = Result<T, &'static str>;

impl<'a> P<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn sp(&mut self) -> R<()> {
        if self.eat(b' ') {
            Ok(())
        } else {
            Err("expected a space")
        }
    }
    fn at_end(&self) -> bool {
        self.i >= self.s.len()
    }
    fn end(&self) -> R<()> {
        if self.at_end() {
            Ok(())
        } else {
            Err("unexpected characters at the end")
        }
    }
    /// Atom characters (RFC 3501 ATOM-CHAR, plus `]` where the caller allows it).
    fn atom_with(&mut self, extra_stop: &[u8]) -> R<&'a str> {
        let start = self.i;
        while let Some(b) = self.peek() {
            if b <= b' ' || b >= 0x7f || b"(){\"%\\".contains(&b) || extra_stop.contains(&b) {
                break;
            }
            self.i += 1;
        }
        if self.i == start {
            return Err("expected an atom");
        }
        std::str::from_utf8(&self.s[start..self.i]).map_err(|_| "bad atom")
    }
    fn atom(&mut self) -> R<&'a str> {
        self.atom_with(b"]")
    }
    fn quoted(&mut self) -> R<String> {
        if !self.eat(b'"') {
            return Err("expected a quoted string");
        }
        let mut out = Vec::new();
        loop {
            match self.peek() {
                None | Some(b'\r') | Some(b'\n') => return Err("unterminated quoted string"),
                Some(b'"') => {
                    self.i += 1;
                    break;
                }
                Some(b'\\') => {
                    self.i += 1;
                    match self.peek() {
                        Some(c @ (b'"' | b'\\')) => out.push(c),
                        _ => return Err("bad escape in quoted string"),
                    }
                    self.i += 1;
                }
                Some(c) => {
                    out.push(c);
                    self.i += 1;
                }
            }
        }
        String::from_utf8(out).map_err(|_| "quoted string is not UTF-8")
    }
    fn literal(&mut self) -> R<String> {
        if !self.eat(b'{') {
            return Err("expected a literal");
        }
        let start = self.i;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
        let n: usize = std::str::from_utf8(&self.s[start..self.i])
            .ok()
            .and_then(|d| d.parse().ok())
            .ok_or("bad literal length")?;
        self.eat(b'+');
        if !(self.eat(b'}') && self.eat(b'\r') && self.eat(b'\n')) {
            return Err("bad literal");
        }
        let end = self.i.checked_add(n).ok_or("bad literal length")?;
        let bytes = self
            .s
            .get(self.i..end)
            .ok_or("literal shorter than announced")?;
        self.i = end;
        String::from_utf8(bytes.to_vec()).map_err(|_| "literal is not UTF-8")
    }
    fn astring(&mut self) -> R<String> {
        match self.peek() {
            Some(b'"') => self.quoted(),
            Some(b'{') => self.literal(),
            _ => self.atom_with(b"").map(str::to_string),
        }
    }
    fn number(&mut self) -> R<u32> {
        let start = self.i;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[start..self.i])
            .ok()
            .and_then(|d| d.parse().ok())
            .ok_or("expected a number")
    }
    fn seq_num(&mut self) -> R<SeqNum> {
        if self.eat(b'*') {
            return Ok(SeqNum::Star);
        }
        match self.number()? {
            0 => Err("0 is not a valid message number"),
            n => Ok(SeqNum::Num(n)),
        }
    }
    fn seq_set(&mut self) -> R<SeqSet> {
        let mut set = Vec::new();
        loop {
            let a = self.seq_num()?;
            let b = if self.eat(b':') { self.seq_num()? } else { a };
            set.push((a, b));
            if set.len() > 10_000 {
                return Err("sequence set too long");
            }
            if !self.eat(b',') {
                return Ok(set);
            }
        }
    }
    /// `(a b c)` or a single atom.
    fn list_or_atom(&mut self) -> R<Vec<String>> {
        if self.eat(b'(') {
            let mut v = Vec::new();
            while !self.eat(b')') {
                if !v.is_empty() {
                    self.sp()?;
                }
                v.push(self.astring()?);
                if v.len() > 100 {
                    return Err("list too long");
                }
            }
            Ok(v)
        } else {
            Ok(vec![self.astring()?])
        }
    }
}

fn section(p: &mut P) -> R<Section> {
    if !p.eat(b'[') {
        return Err("expected '['");
    }
    if p.eat(b']') {
        return Ok(Section::Full);
    }
    let name = p.atom()?.to_ascii_uppercase();
    let s = match name.as_str() {
        "HEADER" => Section::Header,
        "TEXT" => Section::Text,
        "HEADER.FIELDS" | "HEADER.FIELDS.NOT" => {
            p.sp()?;
            let fields = p.list_or_atom()?;
            Section::HeaderFields {
                not: name.ends_with(".NOT"),
                fields: fields.into_iter().map(|f| f.to_ascii_uppercase()).collect(),
            }
        }
        _ => return Err("unsupported body section"),
    };
    if !p.eat(b']') {
        return Err("expected ']'");
    }
    Ok(s)
}

fn fetch_item(p: &mut P, out: &mut Vec<FetchItem>) -> R<()> {
    let name = p.atom_with(b"[")?.to_ascii_uppercase();
    match name.as_str() {
        "FLAGS" => out.push(FetchItem::Flags),
        "UID" => out.push(FetchItem::Uid),
        "RFC822.SIZE" => out.push(FetchItem::Rfc822Size),
        "INTERNALDATE" => out.push(FetchItem::InternalDate),
        "ENVELOPE" => out.push(FetchItem::Envelope),
        "RFC822" => out.push(FetchItem::Rfc822(None)),
        "RFC822.HEADER" => out.push(FetchItem::Rfc822(Some(Section::Header))),
        "RFC822.TEXT" => out.push(FetchItem::Rfc822(Some(Section::Text))),
        "FAST" | "ALL" | "FULL" => {
            out.extend([
                FetchItem::Flags,
                FetchItem::InternalDate,
                FetchItem::Rfc822Size,
            ]);
            if name != "FAST" {
                out.push(FetchItem::Envelope);
            }
        }
        "BODY" | "BODY.PEEK" if p.peek() == Some(b'[') => {
            let section = section(p)?;
            let partial = if p.eat(b'<') {
                let a = p.number()?;
                if !p.eat(b'.') {
                    return Err("expected <origin.count>");
                }
                let b = p.number()?;
                if !p.eat(b'>') {
                    return Err("expected '>'");
                }
                Some((a, b))
            } else {
                None
            };
            out.push(FetchItem::Body {
                peek: name == "BODY.PEEK",
                section,
                partial,
            });
        }
        _ => return Err("unsupported FETCH item"),
    }
    Ok(())
}

fn fetch_items(p: &mut P) -> R<Vec<FetchItem>> {
    let mut out = Vec::new();
    if p.eat(b'(') {
        while !p.eat(b')') {
            if !out.is_empty() {
                p.sp()?;
            }
            fetch_item(p, &mut out)?;
            if out.len() > 50 {
                return Err("too many FETCH items");
            }
        }
    } else {
        fetch_item(p, &mut out)?;
    }
    Ok(out)
}

fn search_key(p: &mut P, depth: u32) -> R<Search> {
    if depth > 10 {
        return Err("search nested too deeply");
    }
    if p.peek().is_some_and(|b| b.is_ascii_digit() || b == b'*') {
        return Ok(Search::Seq(p.seq_set()?));
    }
    let key = p.atom()?.to_ascii_uppercase();
    let flag = |f: &str, set| Search::Flag {
        flag: f.to_string(),
        set,
    };
    Ok(match key.as_str() {
        "ALL" => Search::All,
        "UID" => {
            p.sp()?;
            Search::Uid(p.seq_set()?)
        }
        "HEADER" => {
            p.sp()?;
            let name = p.astring()?;
            p.sp()?;
            Search::Header(name, p.astring()?)
        }
        "SUBJECT" | "FROM" | "TO" | "CC" => {
            p.sp()?;
            Search::Header(key.clone(), p.astring()?)
        }
        "LARGER" | "SMALLER" => {
            p.sp()?;
            let n = p.number()? as u64;
            if key == "LARGER" {
                Search::Larger(n)
            } else {
                Search::Smaller(n)
            }
        }
        "NOT" => {
            p.sp()?;
            Search::Not(Box::new(search_key(p, depth + 1)?))
        }
        "SEEN" | "ANSWERED" | "FLAGGED" | "DELETED" | "DRAFT" => flag(&key, true),
        "UNSEEN" | "UNANSWERED" | "UNFLAGGED" | "UNDELETED" | "UNDRAFT" => flag(&key[2..], false),
        _ => return Err("unsupported SEARCH key"),
    })
}

/// Parses one complete command (literals inlined after their `{n}\r\n`), without the
/// final CRLF.
pub fn parse(input: &[u8]) -> Result<Request, ParseError> {
    let mut p = P { s: input, i: 0 };
    let tag = match p.atom_with(b"+") {
        Ok(t) => t.to_string(),
        Err(msg) => return Err(ParseError { tag: None, msg }),
    };
    let command = command(&mut p).map_err(|msg| ParseError {
        tag: Some(tag.clone()),
        msg,
    })?;
    Ok(Request { tag, command })
}

/// The tag of a line that starts like a command (a tag, then a space), so that a line
/// refused before parsing (too long) can still get its tagged answer.
pub fn tag_of(line: &[u8]) -> Option<&str> {
    let mut p = P { s: line, i: 0 };
    // `*` is no tag character; `* BAD` is what such a line gets anyway.
    let tag = p.atom_with(b"+*").ok()?;
    p.eat(b' ').then_some(tag)
}

/// ` reference pattern` of LIST and LSUB.
fn list_args(p: &mut P) -> R<(String, String)> {
    p.sp()?;
    let reference = p.astring()?;
    p.sp()?;
    let pattern = match p.peek() {
        Some(b'"') => p.quoted()?,
        Some(b'{') => p.literal()?,
        _ => {
            // list-wildcards are allowed in a pattern atom.
            let start = p.i;
            while p.peek().is_some_and(|b| b > b' ' && b < 0x7f && b != b'(') {
                p.i += 1;
            }
            String::from_utf8_lossy(&p.s[start..p.i]).into_owned()
        }
    };
    Ok((reference, pattern))
}

fn command(p: &mut P) -> R<Command> {
    p.sp()?;
    let mut name = p.atom()?.to_ascii_uppercase();
    let mut uid = false;
    if name == "UID" {
        p.sp()?;
        uid = true;
        name = p.atom()?.to_ascii_uppercase();
    }
    let c = match (uid, name.as_str()) {
        (false, "CAPABILITY") => Command::Capability,
        (false, "NOOP") => Command::Noop,
        (false, "LOGOUT") => Command::Logout,
        (false, "STARTTLS") => Command::Starttls,
        (false, "CHECK") => Command::Check,
        (false, "CLOSE") => Command::Close,
        (false, "EXPUNGE") => Command::Expunge,
        (false, "IDLE") => Command::Idle,
        (false, "LOGIN" | "AUTHENTICATE") => login(p, &name)?,
        (false, "SELECT" | "EXAMINE") => {
            p.sp()?;
            let mailbox = p.astring()?;
            if name == "SELECT" {
                Command::Select(mailbox)
            } else {
                Command::Examine(mailbox)
            }
        }
        (false, "LIST") => {
            let (reference, pattern) = list_args(p)?;
            Command::List { reference, pattern }
        }
        (false, "LSUB") => {
            let (reference, pattern) = list_args(p)?;
            Command::Lsub { reference, pattern }
        }
        (false, "STATUS") => {
            p.sp()?;
            let mailbox = p.astring()?;
            p.sp()?;
            let items = p.list_or_atom()?;
            Command::Status {
                mailbox,
                items: items.into_iter().map(|i| i.to_ascii_uppercase()).collect(),
            }
        }
        (_, "FETCH") => {
            p.sp()?;
            let set = p.seq_set()?;
            p.sp()?;
            Command::Fetch {
                uid,
                set,
                items: fetch_items(p)?,
            }
        }
        (_, "STORE") => store(p, uid)?,
        (_, "SEARCH") => search(p, uid)?,
        _ => return Err("unknown command"),
    };
    p.end()?;
    Ok(c)
}

/// LOGIN user pass, or AUTHENTICATE mechanism [initial-response].
fn login(p: &mut P, name: &str) -> R<Command> {
    p.sp()?;
    if name == "LOGIN" {
        let user = p.astring()?;
        p.sp()?;
        return Ok(Command::Login {
            user,
            pass: p.astring()?,
        });
    }
    let mechanism = p.atom()?.to_ascii_uppercase();
    let initial = if p.eat(b' ') {
        Some(p.atom_with(b"")?.to_string())
    } else {
        None
    };
    Ok(Command::Authenticate { mechanism, initial })
}

/// [UID] STORE set (+|-)FLAGS[.SILENT] flags.
fn store(p: &mut P, uid: bool) -> R<Command> {
    p.sp()?;
    let set = p.seq_set()?;
    p.sp()?;
    let what = p.atom()?.to_ascii_uppercase();
    let (mode, rest) = match what.as_bytes().first() {
        Some(b'+') => (StoreMode::Add, &what[1..]),
        Some(b'-') => (StoreMode::Remove, &what[1..]),
        _ => (StoreMode::Replace, &what[..]),
    };
    let silent = match rest {
        "FLAGS" => false,
        "FLAGS.SILENT" => true,
        _ => return Err("expected FLAGS, +FLAGS or -FLAGS"),
    };
    p.sp()?;
    Ok(Command::Store {
        uid,
        set,
        mode,
        silent,
        flags: flags(p)?,
    })
}

/// A parenthesized flag list, or flags separated by spaces; at most 50.
fn flags(p: &mut P) -> R<Vec<String>> {
    let mut v = Vec::new();
    if p.peek() == Some(b'(') {
        p.i += 1;
        while !p.eat(b')') {
            if !v.is_empty() {
                p.sp()?;
            }
            p.eat(b'\\');
            v.push(p.atom()?.to_ascii_uppercase());
            if v.len() > 50 {
                return Err("too many flags");
            }
        }
    } else {
        loop {
            p.eat(b'\\');
            v.push(p.atom()?.to_ascii_uppercase());
            if !p.eat(b' ') || v.len() > 50 {
                break;
            }
        }
    }
    Ok(v)
}

/// [UID] SEARCH [CHARSET x] keys; at most 50 keys.
fn search(p: &mut P, uid: bool) -> R<Command> {
    let mut criteria = Vec::new();
    while p.eat(b' ') {
        if criteria.is_empty()
            && p.s[p.i..].len() >= 7
            && p.s[p.i..p.i + 7].eq_ignore_ascii_case(b"CHARSET")
        {
            p.atom()?;
            p.sp()?;
            p.astring()?;
            continue;
        }
        criteria.push(search_key(p, 0)?);
        if criteria.len() > 50 {
            return Err("too many SEARCH keys");
        }
    }
    if criteria.is_empty() {
        return Err("SEARCH needs a key");
    }
    Ok(Command::Search { uid, criteria })
}

/// A quoted string for responses (falls back to a literal when it cannot be quoted).
pub fn quote(s: &str) -> String {
    if s.bytes().any(|b| b == b'\r' || b == b'\n' || b >= 0x80) {
        return format!("{{{}}}\r\n{s}", s.len());
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if c == '"' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests;
