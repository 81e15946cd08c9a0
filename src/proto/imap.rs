//! Server side of IMAP4rev1 (RFC 3501) with the extensions `spate serve` speaks (IDLE,
//! LITERAL+, UIDPLUS, MOVE, MULTIAPPEND, ESEARCH, CONDSTORE, ID, ENABLE, NAMESPACE):
//! parsing of one complete client command. Framing comes first: [`literal_at_end`] tells
//! the caller that a line announces a literal, which it reads (capped) and appends after
//! the line's CRLF before calling [`parse`] on the whole. FETCH items are in `fetch`,
//! SEARCH keys in `search`.

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

pub use fetch::{FetchItem, Section, SectionText};

pub use search::{DateCmp, Search, BADCHARSET};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMode {
    Replace,
    Add,
    Remove,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    Capability,
    Noop,
    Logout,
    Starttls,
    Check,
    Close,
    Unselect,
    Namespace,
    Idle,
    /// EXPUNGE, or UID EXPUNGE with its set (RFC 4315).
    Expunge(Option<SeqSet>),
    Login {
        user: String,
        pass: String,
    },
    Authenticate {
        mechanism: String,
        initial: Option<String>,
    },
    /// SELECT mailbox, and whether `(CONDSTORE)` was given (RFC 7162).
    Select(String, bool),
    Examine(String, bool),
    Create(String),
    Delete(String),
    Rename {
        from: String,
        to: String,
    },
    Subscribe(String),
    Unsubscribe(String),
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
    /// APPEND, with several messages under MULTIAPPEND (RFC 3502).
    Append {
        mailbox: String,
        messages: Vec<Appended>,
    },
    Copy {
        uid: bool,
        set: SeqSet,
        mailbox: String,
    },
    Move {
        uid: bool,
        set: SeqSet,
        mailbox: String,
    },
    Fetch {
        uid: bool,
        set: SeqSet,
        items: Vec<FetchItem>,
        /// `(CHANGEDSINCE n)` (RFC 7162).
        changed_since: Option<u64>,
    },
    Store {
        uid: bool,
        set: SeqSet,
        /// `(UNCHANGEDSINCE n)` (RFC 7162).
        unchanged_since: Option<u64>,
        mode: StoreMode,
        silent: bool,
        /// As written (`\Seen`, `$Label`).
        flags: Vec<String>,
    },
    Search {
        uid: bool,
        criteria: Vec<Search>,
        /// ESEARCH (RFC 4731) `RETURN (...)` options, upper-cased; `Some(empty)` for
        /// `RETURN ()`.
        ret: Option<Vec<String>>,
    },
    /// RFC 2971: the client's fields are read and ignored.
    Id,
    /// RFC 5161: the capabilities asked for.
    Enable(Vec<String>),
}

/// One message of an APPEND.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// As written (`\Seen`, `$Label`).
    pub flags: Vec<String>,
    /// Seconds since the epoch.
    pub date: Option<i64>,
    pub message: Vec<u8>,
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

pub(crate) struct P<'a> {
    pub(crate) s: &'a [u8],
    pub(crate) i: usize,
}

pub(crate) type R<T> = Result<T, &'static str>;

impl<'a> P<'a> {
    pub(crate) fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }
    pub(crate) fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    pub(crate) fn sp(&mut self) -> R<()> {
        if self.eat(b' ') {
            Ok(())
        } else {
            Err("expected a space")
        }
    }
    pub(crate) fn at_end(&self) -> bool {
        self.i >= self.s.len()
    }
    pub(crate) fn end(&self) -> R<()> {
        if self.at_end() {
            Ok(())
        } else {
            Err("unexpected characters at the end")
        }
    }
    /// Atom characters (RFC 3501 ATOM-CHAR, plus `]` where the caller allows it).
    pub(crate) fn atom_with(&mut self, extra_stop: &[u8]) -> R<&'a str> {
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
    pub(crate) fn atom(&mut self) -> R<&'a str> {
        self.atom_with(b"]")
    }
    pub(crate) fn quoted(&mut self) -> R<String> {
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
    pub(crate) fn literal(&mut self) -> R<String> {
        let bytes = self.literal_bytes()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| "literal is not UTF-8")
    }
    pub(crate) fn astring(&mut self) -> R<String> {
        match self.peek() {
            Some(b'"') => self.quoted(),
            Some(b'{') => self.literal(),
            _ => self.atom_with(b"").map(str::to_string),
        }
    }
    /// A quoted string or a literal.
    pub(crate) fn string(&mut self) -> R<String> {
        match self.peek() {
            Some(b'"') => self.quoted(),
            _ => self.literal(),
        }
    }
    /// A literal's bytes, whatever they are (APPEND).
    pub(crate) fn literal_bytes(&mut self) -> R<&'a [u8]> {
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
        Ok(bytes)
    }
    /// A case-insensitive word followed by a delimiter (or the end).
    pub(crate) fn eat_word(&mut self, word: &str) -> bool {
        let end = self.i + word.len();
        let fits = self
            .s
            .get(self.i..end)
            .is_some_and(|w| w.eq_ignore_ascii_case(word.as_bytes()));
        let delimited = matches!(self.s.get(end), None | Some(b' ' | b')' | b'('));
        if fits && delimited {
            self.i = end;
        }
        fits && delimited
    }
    /// A flag as written: `\Seen` or a keyword atom.
    pub(crate) fn flag(&mut self) -> R<String> {
        let slash = self.eat(b'\\');
        let atom = self.atom()?;
        Ok(if slash {
            format!("\\{atom}")
        } else {
            atom.to_string()
        })
    }
    /// The digits here (maybe none).
    fn digits(&mut self) -> &'a str {
        let start = self.i;
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[start..self.i]).unwrap_or_default()
    }
    pub(crate) fn number(&mut self) -> R<u32> {
        self.digits().parse().map_err(|_| "expected a number")
    }
    /// A mod-sequence value (RFC 7162: up to 2^63 - 1).
    pub(crate) fn number64(&mut self) -> R<u64> {
        self.digits()
            .parse::<u64>()
            .ok()
            .filter(|n| *n < 1 << 63)
            .ok_or("expected a number")
    }
    pub(crate) fn seq_num(&mut self) -> R<SeqNum> {
        if self.eat(b'*') {
            return Ok(SeqNum::Star);
        }
        match self.number()? {
            0 => Err("0 is not a valid message number"),
            n => Ok(SeqNum::Num(n)),
        }
    }
    pub(crate) fn seq_set(&mut self) -> R<SeqSet> {
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
    pub(crate) fn list_or_atom(&mut self) -> R<Vec<String>> {
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
        (false, "UNSELECT") => Command::Unselect,
        (false, "NAMESPACE") => Command::Namespace,
        (false, "EXPUNGE") => Command::Expunge(None),
        (true, "EXPUNGE") => {
            p.sp()?;
            Command::Expunge(Some(p.seq_set()?))
        }
        (false, "IDLE") => Command::Idle,
        (false, "LOGIN" | "AUTHENTICATE") => login(p, &name)?,
        (false, "SELECT" | "EXAMINE" | "CREATE" | "DELETE" | "SUBSCRIBE" | "UNSUBSCRIBE") => {
            p.sp()?;
            let mailbox = p.astring()?;
            // RFC 4466 select parameters: only CONDSTORE is known.
            let condstore = matches!(name.as_str(), "SELECT" | "EXAMINE") && p.eat(b' ') && {
                if !p.eat_word("(CONDSTORE") || !p.eat(b')') {
                    return Err("unknown SELECT parameter");
                }
                true
            };
            match name.as_str() {
                "SELECT" => Command::Select(mailbox, condstore),
                "EXAMINE" => Command::Examine(mailbox, condstore),
                "CREATE" => Command::Create(mailbox),
                "DELETE" => Command::Delete(mailbox),
                "SUBSCRIBE" => Command::Subscribe(mailbox),
                _ => Command::Unsubscribe(mailbox),
            }
        }
        (false, "RENAME") => {
            p.sp()?;
            let from = p.astring()?;
            p.sp()?;
            Command::Rename {
                from,
                to: p.astring()?,
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
            if p.peek() != Some(b'(') {
                return Err("expected a list of STATUS items");
            }
            let items = p.list_or_atom()?;
            Command::Status {
                mailbox,
                items: items.into_iter().map(|i| i.to_ascii_uppercase()).collect(),
            }
        }
        (false, "APPEND") => append(p)?,
        (_, "COPY" | "MOVE") => {
            p.sp()?;
            let set = p.seq_set()?;
            p.sp()?;
            let mailbox = p.astring()?;
            if name == "COPY" {
                Command::Copy { uid, set, mailbox }
            } else {
                Command::Move { uid, set, mailbox }
            }
        }
        (_, "FETCH") => {
            p.sp()?;
            let set = p.seq_set()?;
            p.sp()?;
            let items = fetch::items(p)?;
            let changed_since = if p.eat(b' ') {
                if !p.eat_word("(CHANGEDSINCE") || !p.eat(b' ') {
                    return Err("unknown FETCH modifier");
                }
                let n = p.number64()?;
                if !p.eat(b')') {
                    return Err("expected ')'");
                }
                Some(n)
            } else {
                None
            };
            Command::Fetch {
                uid,
                set,
                items,
                changed_since,
            }
        }
        (_, "STORE") => store(p, uid)?,
        (_, "SEARCH") => search::command(p, uid)?,
        (false, "ID") => {
            p.sp()?;
            id_params(p)?;
            Command::Id
        }
        (false, "ENABLE") => {
            let mut caps = Vec::new();
            while p.eat(b' ') {
                caps.push(p.atom()?.to_ascii_uppercase());
                if caps.len() > 20 {
                    return Err("too many capabilities");
                }
            }
            if caps.is_empty() {
                return Err("ENABLE needs a capability");
            }
            Command::Enable(caps)
        }
        _ => return Err("unknown command"),
    };
    p.end()?;
    Ok(c)
}

/// `NIL` or `("field" "value" ...)` of ID; at most 30 pairs.
fn id_params(p: &mut P) -> R<()> {
    if p.eat_word("NIL") {
        return Ok(());
    }
    if !p.eat(b'(') {
        return Err("expected NIL or a list of ID fields");
    }
    let mut n = 0;
    while !p.eat(b')') {
        if n > 0 {
            p.sp()?;
        }
        if !p.eat_word("NIL") {
            p.string()?;
        }
        n += 1;
        if n > 60 {
            return Err("too many ID fields");
        }
    }
    Ok(())
}

/// APPEND mailbox [(flags)] ["date-time"] literal, repeated for MULTIAPPEND (at most 100).
fn append(p: &mut P) -> R<Command> {
    p.sp()?;
    let mailbox = p.astring()?;
    let mut messages = Vec::new();
    while p.eat(b' ') {
        let mut flags = Vec::new();
        if p.peek() == Some(b'(') {
            flags = flag_list(p)?;
            p.sp()?;
        }
        let mut date = None;
        if p.peek() == Some(b'"') {
            date = Some(date_time(&p.quoted()?).ok_or("bad date-time")?);
            p.sp()?;
        }
        let message = p.literal_bytes()?.to_vec();
        messages.push(Appended {
            flags,
            date,
            message,
        });
        if messages.len() > 100 {
            return Err("too many messages in one APPEND");
        }
    }
    if messages.is_empty() {
        return Err("APPEND needs a message");
    }
    Ok(Command::Append { mailbox, messages })
}

/// RFC 3501 date-time: `dd-Mon-yyyy hh:mm:ss +zzzz` (day may be space-padded).
pub fn date_time(s: &str) -> Option<i64> {
    chrono::DateTime::parse_from_str(s.trim_start(), "%d-%b-%Y %H:%M:%S %z")
        .ok()
        .map(|d| d.timestamp())
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
    let unchanged_since = if p.eat_word("(UNCHANGEDSINCE") {
        p.sp()?;
        let n = p.number64()?;
        if !p.eat(b')') {
            return Err("expected ')'");
        }
        p.sp()?;
        Some(n)
    } else {
        None
    };
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
    let flags = if p.peek() == Some(b'(') {
        flag_list(p)?
    } else {
        let mut v = vec![p.flag()?];
        while p.eat(b' ') {
            v.push(p.flag()?);
            if v.len() > 50 {
                return Err("too many flags");
            }
        }
        v
    };
    Ok(Command::Store {
        uid,
        set,
        unchanged_since,
        mode,
        silent,
        flags,
    })
}

/// A parenthesized flag list; at most 50.
fn flag_list(p: &mut P) -> R<Vec<String>> {
    if !p.eat(b'(') {
        return Err("expected a flag list");
    }
    let mut v = Vec::new();
    while !p.eat(b')') {
        if !v.is_empty() {
            p.sp()?;
        }
        v.push(p.flag()?);
        if v.len() > 50 {
            return Err("too many flags");
        }
    }
    Ok(v)
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

mod fetch;
mod search;
#[cfg(test)]
mod tests;
