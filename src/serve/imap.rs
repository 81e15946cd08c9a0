//! The IMAP session: an IMAP4rev1 subset over the store, one mailbox (INBOX) per user.
//! The session keeps its own view (sequence number → UID) and reconciles it with the
//! store at NOOP, CHECK, IDLE and after EXPUNGE, sending EXISTS/EXPUNGE as RFC 3501 asks.

use std::fmt::Write as _;
use std::time::SystemTime;

use super::conn::{Conn, ConnError};
use super::shared::Shared;
use super::store::{flags, StoredMessage};
use crate::proto::imap::{
    self, literal_at_end, Command, FetchItem, Search, Section, SeqNum, SeqSet, StoreMode,
};
use crate::proto::sasl;

mod envelope;

const MAX_LINE: usize = 8192;
/// Literals are only used for logins and search strings here.
const MAX_LITERAL: u64 = 64 * 1024;
const MAX_ERRORS: u32 = 20;
const FLAG_NAMES: [(u8, &str); 5] = [
    (flags::ANSWERED, "\\Answered"),
    (flags::FLAGGED, "\\Flagged"),
    (flags::DELETED, "\\Deleted"),
    (flags::SEEN, "\\Seen"),
    (flags::DRAFT, "\\Draft"),
];

struct Selected {
    mailbox: String,
    read_only: bool,
    /// UIDs in sequence-number order, as the client knows them.
    view: Vec<u32>,
}

struct Session<'a> {
    conn: &'a mut Conn,
    sh: &'a Shared,
    user: Option<String>,
    selected: Option<Selected>,
}

enum Next {
    Continue,
    Logout,
}

/// A message set that names a sequence number the client has not been told exists.
struct BadSet;

impl BadSet {
    const TEXT: &'static str = "Invalid messageset: message number above EXISTS";
}

pub(crate) async fn run(conn: &mut Conn, sh: &Shared) -> Result<(), ConnError> {
    let mut s = Session {
        conn,
        sh,
        user: None,
        selected: None,
    };
    let greeting = format!(
        "* OK [CAPABILITY {}] spate IMAP ready\r\n",
        s.capabilities()
    );
    s.conn.queue(greeting.as_bytes());
    let mut errors = 0;
    loop {
        let input = match s.read_command().await {
            Ok(Some(i)) => i,
            Ok(None) => {
                errors += 1;
                if errors >= MAX_ERRORS {
                    s.conn.queue(b"* BYE too many errors\r\n");
                    return Ok(());
                }
                continue;
            }
            Err(ConnError::Shutdown) => {
                s.conn.queue(b"* BYE server shutting down\r\n");
                return Ok(());
            }
            Err(ConnError::Idle) => {
                s.conn.queue(b"* BYE idle timeout\r\n");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let req = match imap::parse(&input) {
            Ok(r) => r,
            Err(e) => {
                let tag = e.tag.as_deref().unwrap_or("*");
                s.conn.queue(format!("{tag} BAD {}\r\n", e.msg).as_bytes());
                errors += 1;
                if errors >= MAX_ERRORS {
                    s.conn.queue(b"* BYE too many errors\r\n");
                    return Ok(());
                }
                continue;
            }
        };
        match s.command(&req.tag, req.command).await {
            Ok(Next::Continue) => {}
            Ok(Next::Logout) => return Ok(()),
            Err(ConnError::Shutdown) => {
                s.conn.queue(b"* BYE server shutting down\r\n");
                return Ok(());
            }
            Err(ConnError::Idle) => {
                s.conn.queue(b"* BYE idle timeout\r\n");
                return Ok(());
            }
            Err(e) => return Err(e),
        }
    }
}

impl Session<'_> {
    /// Reads one command with its literals. `None` after a framing error (already
    /// answered).
    async fn read_command(&mut self) -> Result<Option<Vec<u8>>, ConnError> {
        let mut input = Vec::new();
        loop {
            let line = match self.conn.read_line(MAX_LINE).await {
                Ok(l) => l,
                Err(ConnError::LineTooLong) => {
                    // RFC 3501 7.1.3: a readable tag gets its tagged BAD, or the client
                    // would wait for the completion of that command forever.
                    let head = if input.is_empty() {
                        self.conn.overlong_head()
                    } else {
                        &input
                    };
                    let tag = imap::tag_of(head).unwrap_or("*").to_string();
                    self.bad(&tag, "line too long");
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            input.extend_from_slice(&line);
            let Some((n, sync)) = literal_at_end(&line) else {
                return Ok(Some(input));
            };
            if input.len() as u64 + n > MAX_LITERAL {
                if sync {
                    self.conn.queue(b"* BAD literal too large\r\n");
                    return Ok(None);
                }
                // A non-synchronizing literal is on its way regardless: refuse and close.
                self.conn.queue(b"* BYE literal too large\r\n");
                return Err(ConnError::LineTooLong);
            }
            if sync {
                self.conn.queue(b"+ Ready for literal data\r\n");
            }
            input.extend_from_slice(b"\r\n");
            self.conn
                .read_exact_with(n, |piece| input.extend_from_slice(piece))
                .await?;
        }
    }

    fn ok(&mut self, tag: &str, text: &str) {
        self.conn.queue(format!("{tag} OK {text}\r\n").as_bytes());
    }
    fn no(&mut self, tag: &str, text: &str) {
        self.conn.queue(format!("{tag} NO {text}\r\n").as_bytes());
    }
    fn bad(&mut self, tag: &str, text: &str) {
        self.conn.queue(format!("{tag} BAD {text}\r\n").as_bytes());
    }

    /// What works in the current state: STARTTLS and AUTH only before login, and
    /// STARTTLS only on a connection that is not TLS already.
    fn capabilities(&self) -> String {
        let mut caps = String::from("IMAP4rev1 LITERAL+ IDLE");
        if self.user.is_none() {
            caps.push_str(" AUTH=PLAIN");
            if !self.conn.is_tls() {
                caps.push_str(" STARTTLS");
            }
        }
        caps
    }

    async fn command(&mut self, tag: &str, cmd: Command) -> Result<Next, ConnError> {
        match cmd {
            Command::Capability => {
                let caps = format!("* CAPABILITY {}\r\n", self.capabilities());
                self.conn.queue(caps.as_bytes());
                self.ok(tag, "CAPABILITY completed");
            }
            Command::Noop | Command::Check => {
                self.sync();
                self.ok(tag, "completed");
            }
            Command::Logout => {
                self.conn.queue(b"* BYE logging out\r\n");
                self.ok(tag, "LOGOUT completed");
                return Ok(Next::Logout);
            }
            Command::Starttls if self.conn.is_tls() || self.user.is_some() => {
                self.bad(tag, "STARTTLS not allowed now")
            }
            Command::Starttls => {
                self.ok(tag, "Begin TLS negotiation now");
                self.conn.starttls(&self.sh.tls).await?;
                self.sh.stats.tls_session();
            }
            Command::Login { .. } | Command::Authenticate { .. } if self.user.is_some() => {
                self.bad(tag, "already authenticated")
            }
            Command::Login { user, pass } => self.login(tag, &user, &pass),
            Command::Authenticate { mechanism, initial } => {
                if mechanism != "PLAIN" {
                    self.no(tag, "unsupported mechanism");
                    return Ok(Next::Continue);
                }
                let decoded = match initial {
                    Some(i) => sasl::decode(&i),
                    None => {
                        self.conn.queue(b"+ \r\n");
                        let line = self.conn.read_line(MAX_LINE).await?;
                        sasl::decode(&String::from_utf8_lossy(&line))
                    }
                };
                match decoded.and_then(|d| sasl::plain(&d)) {
                    Ok((u, p)) => self.login(tag, &u, &p),
                    Err(e) => self.bad(tag, &e.to_string()),
                }
            }
            _ if self.user.is_none() => self.bad(tag, "log in first"),
            Command::Select(m) | Command::Examine(m) if !m.eq_ignore_ascii_case("INBOX") => {
                self.selected = None;
                self.no(tag, "[NONEXISTENT] only INBOX exists here");
            }
            Command::Select(_) => self.select(tag, false),
            Command::Examine(_) => self.select(tag, true),
            Command::List { pattern, .. } => self.list(tag, "LIST", &pattern),
            Command::Lsub { pattern, .. } => self.list(tag, "LSUB", &pattern),
            Command::Status { mailbox, items } => self.status(tag, &mailbox, &items),
            _ if self.selected.is_none() => self.bad(tag, "select a mailbox first"),
            Command::Close => {
                if self.selected.as_ref().is_some_and(|s| !s.read_only) {
                    self.expunge(false);
                }
                self.selected = None;
                self.ok(tag, "CLOSE completed");
            }
            Command::Expunge => {
                if self.selected.as_ref().is_some_and(|s| s.read_only) {
                    self.no(tag, "[READ-ONLY] mailbox is read-only");
                } else {
                    self.expunge(true);
                    self.ok(tag, "EXPUNGE completed");
                }
            }
            Command::Fetch { uid, set, items } => self.fetch(tag, uid, &set, &items),
            Command::Store {
                uid,
                set,
                mode,
                silent,
                flags,
            } => self.store(tag, uid, &set, mode, silent, &flags),
            Command::Search { uid, criteria } => self.search(tag, uid, &criteria),
            Command::Idle => self.idle(tag).await?,
        }
        Ok(Next::Continue)
    }

    fn login(&mut self, tag: &str, user: &str, pass: &str) {
        let ok = self.sh.users.check(user, pass);
        self.sh.stats.auth(ok);
        if ok {
            self.sh.stats.login();
            self.user = Some(self.sh.users.mailbox_for_login(user));
            self.ok(tag, "[CAPABILITY IMAP4rev1 LITERAL+ IDLE] logged in");
        } else {
            self.no(tag, "[AUTHENTICATIONFAILED] invalid credentials");
        }
    }

    /// LIST, or LSUB (which names INBOX as subscribed: the only mailbox there is).
    fn list(&mut self, tag: &str, verb: &str, pattern: &str) {
        if pattern.is_empty() {
            let line = format!("* {verb} (\\Noselect) \"/\" \"\"\r\n");
            self.conn.queue(line.as_bytes());
        } else if matches!(pattern, "*" | "%") || pattern.eq_ignore_ascii_case("INBOX") {
            let line = format!("* {verb} (\\HasNoChildren) \"/\" INBOX\r\n");
            self.conn.queue(line.as_bytes());
        }
        self.ok(tag, &format!("{verb} completed"));
    }

    fn mailbox(&self) -> String {
        self.user.clone().unwrap_or_default()
    }

    fn select(&mut self, tag: &str, read_only: bool) {
        let mailbox = self.mailbox();
        let (view, validity, next) = self.sh.store.with_mailbox(&mailbox, |mb| {
            (
                mb.messages.iter().map(|m| m.uid).collect::<Vec<_>>(),
                mb.uid_validity,
                mb.next_uid,
            )
        });
        let mut out = String::from("* FLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)\r\n");
        out.push_str(
            "* OK [PERMANENTFLAGS (\\Answered \\Flagged \\Deleted \\Seen \\Draft)] Limited\r\n",
        );
        let _ = write!(
            out,
            "* {} EXISTS\r\n* 0 RECENT\r\n* OK [UIDVALIDITY {validity}] UIDs valid\r\n* OK [UIDNEXT {next}] Predicted next UID\r\n",
            view.len()
        );
        self.conn.queue(out.as_bytes());
        self.selected = Some(Selected {
            mailbox,
            read_only,
            view,
        });
        let code = if read_only { "READ-ONLY" } else { "READ-WRITE" };
        self.ok(tag, &format!("[{code}] completed"));
    }

    fn status(&mut self, tag: &str, mailbox: &str, items: &[String]) {
        if !mailbox.eq_ignore_ascii_case("INBOX") {
            return self.no(tag, "[NONEXISTENT] only INBOX exists here");
        }
        let mb = self.mailbox();
        let (n, unseen, validity, next) = self.sh.store.with_mailbox(&mb, |m| {
            (
                m.messages.len(),
                m.messages
                    .iter()
                    .filter(|x| x.flags & flags::SEEN == 0)
                    .count(),
                m.uid_validity,
                m.next_uid,
            )
        });
        let parts: Vec<String> = items
            .iter()
            .filter_map(|i| match i.as_str() {
                "MESSAGES" => Some(format!("MESSAGES {n}")),
                "RECENT" => Some("RECENT 0".into()),
                "UNSEEN" => Some(format!("UNSEEN {unseen}")),
                "UIDVALIDITY" => Some(format!("UIDVALIDITY {validity}")),
                "UIDNEXT" => Some(format!("UIDNEXT {next}")),
                _ => None,
            })
            .collect();
        self.conn
            .queue(format!("* STATUS INBOX ({})\r\n", parts.join(" ")).as_bytes());
        self.ok(tag, "STATUS completed");
    }

    /// Tells the client about messages that arrived or vanished since it last looked.
    fn sync(&mut self) {
        let Some(sel) = &mut self.selected else {
            return;
        };
        let now: Vec<u32> = self.sh.store.with_mailbox(&sel.mailbox, |mb| {
            mb.messages.iter().map(|m| m.uid).collect()
        });
        let mut out = String::new();
        let mut i = 0;
        while i < sel.view.len() {
            if now.binary_search(&sel.view[i]).is_err() {
                sel.view.remove(i);
                let _ = write!(out, "* {} EXPUNGE\r\n", i + 1);
            } else {
                i += 1;
            }
        }
        let last = sel.view.last().copied().unwrap_or(0);
        let before = sel.view.len();
        sel.view.extend(now.iter().filter(|u| **u > last));
        if sel.view.len() != before {
            let _ = write!(out, "* {} EXISTS\r\n", sel.view.len());
        }
        self.conn.queue(out.as_bytes());
    }

    fn expunge(&mut self, report: bool) {
        let Some(sel) = &self.selected else {
            return;
        };
        let mailbox = sel.mailbox.clone();
        self.sh
            .store
            .with_mailbox(&mailbox, |mb| mb.expunge_deleted());
        if report {
            self.sync();
        }
    }

    /// Indexes (into the view) of the messages a set names. A sequence number above
    /// EXISTS is an error (RFC 3501 9, seq-number; Dovecot says BAD too), a missing UID
    /// just names nothing.
    fn resolve(&self, uid: bool, set: &SeqSet) -> Result<Vec<usize>, BadSet> {
        let Some(sel) = &self.selected else {
            return Ok(Vec::new());
        };
        let view = &sel.view;
        let max = if uid {
            view.last().copied().unwrap_or(0)
        } else {
            view.len() as u32
        };
        let num = |n: SeqNum| match n {
            SeqNum::Num(n) => n,
            SeqNum::Star => max,
        };
        let mut out: Vec<usize> = Vec::new();
        for (a, b) in set {
            let (lo, hi) = {
                let (a, b) = (num(*a), num(*b));
                (a.min(b), a.max(b))
            };
            if uid {
                out.extend(
                    view.iter()
                        .enumerate()
                        .filter(|(_, u)| (lo..=hi).contains(*u))
                        .map(|(i, _)| i),
                );
            } else {
                // A range with `*` stays lenient (`1:*` of an empty mailbox names
                // nothing), as it always was here.
                let starred = *a == SeqNum::Star || *b == SeqNum::Star;
                if hi > max && !starred {
                    return Err(BadSet);
                }
                out.extend((lo.max(1)..=hi.min(max)).map(|n| n as usize - 1));
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Runs `f` on each named message still in the store, with its sequence number.
    fn each(
        &self,
        uid: bool,
        set: &SeqSet,
        mut f: impl FnMut(u32, &mut StoredMessage),
    ) -> Result<(), BadSet> {
        let idx = self.resolve(uid, set)?;
        let Some(sel) = &self.selected else {
            return Ok(());
        };
        let uids: Vec<(u32, u32)> = idx.iter().map(|&i| (i as u32 + 1, sel.view[i])).collect();
        self.sh.store.with_mailbox(&sel.mailbox, |mb| {
            for (seq, u) in uids {
                if let Ok(pos) = mb.messages.binary_search_by_key(&u, |m| m.uid) {
                    f(seq, &mut mb.messages[pos]);
                }
            }
        });
        Ok(())
    }

    fn fetch(&mut self, tag: &str, uid: bool, set: &SeqSet, items: &[FetchItem]) {
        let read_only = self.selected.as_ref().is_some_and(|s| s.read_only);
        let mut out = Vec::new();
        let mut retrieved = 0;
        let done = self.each(uid, set, |seq, m| {
            let mut parts: Vec<Vec<u8>> = Vec::new();
            if uid && !items.contains(&FetchItem::Uid) {
                parts.push(format!("UID {}", m.uid).into_bytes());
            }
            for item in items {
                let marks_seen = matches!(item, FetchItem::Body { peek: false, .. })
                    || matches!(item, FetchItem::Rfc822(None | Some(Section::Text)));
                if marks_seen && !read_only {
                    m.flags |= flags::SEEN;
                }
                if matches!(
                    item,
                    FetchItem::Body {
                        section: Section::Full,
                        ..
                    } | FetchItem::Rfc822(None)
                ) {
                    retrieved += 1;
                }
                parts.push(fetch_part(item, m));
            }
            out.extend_from_slice(format!("* {seq} FETCH (").as_bytes());
            out.extend_from_slice(&parts.join(&b' '));
            out.extend_from_slice(b")\r\n");
        });
        if done.is_err() {
            return self.bad(tag, BadSet::TEXT);
        }
        for _ in 0..retrieved {
            self.sh.stats.retrieved();
        }
        self.conn.queue(&out);
        self.ok(tag, "FETCH completed");
    }

    fn store(
        &mut self,
        tag: &str,
        uid: bool,
        set: &SeqSet,
        mode: StoreMode,
        silent: bool,
        names: &[String],
    ) {
        if self.selected.as_ref().is_some_and(|s| s.read_only) {
            return self.no(tag, "[READ-ONLY] mailbox is read-only");
        }
        let bits = names.iter().fold(0u8, |acc, n| {
            acc | FLAG_NAMES
                .iter()
                .find(|(_, name)| name[1..].eq_ignore_ascii_case(n))
                .map(|(b, _)| *b)
                .unwrap_or(0)
        });
        let mut out = String::new();
        let done = self.each(uid, set, |seq, m| {
            m.flags = match mode {
                StoreMode::Replace => bits,
                StoreMode::Add => m.flags | bits,
                StoreMode::Remove => m.flags & !bits,
            };
            if !silent {
                let uid_part = if uid {
                    format!("UID {} ", m.uid)
                } else {
                    String::new()
                };
                let _ = write!(
                    out,
                    "* {seq} FETCH ({uid_part}FLAGS ({}))\r\n",
                    flag_list(m.flags)
                );
            }
        });
        if done.is_err() {
            return self.bad(tag, BadSet::TEXT);
        }
        self.conn.queue(out.as_bytes());
        self.ok(tag, "STORE completed");
    }

    fn search(&mut self, tag: &str, uid: bool, criteria: &[Search]) {
        let Some(sel) = &self.selected else {
            return;
        };
        let view = sel.view.clone();
        let hits: Vec<u32> = self.sh.store.with_mailbox(&sel.mailbox, |mb| {
            view.iter()
                .enumerate()
                .filter_map(|(i, u)| {
                    let m = mb.messages.iter().find(|m| m.uid == *u)?;
                    let ctx = (
                        i as u32 + 1,
                        view.len() as u32,
                        view.last().copied().unwrap_or(0),
                    );
                    criteria
                        .iter()
                        .all(|c| matches(c, m, ctx))
                        .then_some(if uid { m.uid } else { i as u32 + 1 })
                })
                .collect()
        });
        let mut out = String::from("* SEARCH");
        for h in hits {
            let _ = write!(out, " {h}");
        }
        out.push_str("\r\n");
        self.conn.queue(out.as_bytes());
        self.ok(tag, "SEARCH completed");
    }

    /// RFC 2177: report changes as they happen until the client says DONE.
    async fn idle(&mut self, tag: &str) -> Result<(), ConnError> {
        let mailbox = self.mailbox();
        let mut changes = self.sh.store.watch(&mailbox);
        changes.borrow_and_update();
        let mut shutdown = self.conn.shutdown_signal();
        self.conn.queue(b"+ idling\r\n");
        self.sync();
        loop {
            self.conn.flush().await?;
            if self.conn.has_line() {
                break;
            }
            tokio::select! {
                r = changes.changed() => {
                    if r.is_err() {
                        break;
                    }
                    self.sync();
                }
                r = self.conn.fill_unbounded() => r?,
                _ = shutdown.wait_for(|v| *v) => return Err(ConnError::Shutdown),
                _ = tokio::time::sleep(self.sh.idle.max(std::time::Duration::from_secs(1800))) => {
                    return Err(ConnError::Idle)
                }
            }
        }
        let line = self.conn.read_line(MAX_LINE).await?;
        if line.eq_ignore_ascii_case(b"DONE") {
            self.ok(tag, "IDLE terminated");
        } else {
            self.bad(tag, "expected DONE");
        }
        Ok(())
    }
}

fn flag_list(bits: u8) -> String {
    FLAG_NAMES
        .iter()
        .filter(|(b, _)| bits & b != 0)
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join(" ")
}

fn header_end(data: &[u8]) -> usize {
    data.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
        .unwrap_or(data.len())
}

/// The header lines (with continuations) whose names are (or, with `not`, are not) listed.
fn header_fields(data: &[u8], fields: &[String], not: bool) -> Vec<u8> {
    let header = &data[..header_end(data)];
    let mut out = Vec::new();
    let mut keep = false;
    for line in header.split_inclusive(|&b| b == b'\n') {
        if line == b"\r\n" {
            break;
        }
        if !line.starts_with(b" ") && !line.starts_with(b"\t") {
            let name = line.split(|&b| b == b':').next().unwrap_or(b"");
            let listed = fields
                .iter()
                .any(|f| f.as_bytes().eq_ignore_ascii_case(name.trim_ascii()));
            keep = listed != not;
        }
        if keep {
            out.extend_from_slice(line);
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn section_bytes(section: &Section, data: &[u8]) -> Vec<u8> {
    match section {
        Section::Full => data.to_vec(),
        Section::Header => data[..header_end(data)].to_vec(),
        Section::Text => data[header_end(data)..].to_vec(),
        Section::HeaderFields { not, fields } => header_fields(data, fields, *not),
    }
}

fn section_name(section: &Section) -> String {
    match section {
        Section::Full => String::new(),
        Section::Header => "HEADER".into(),
        Section::Text => "TEXT".into(),
        Section::HeaderFields { not, fields } => format!(
            "HEADER.FIELDS{} ({})",
            if *not { ".NOT" } else { "" },
            fields.join(" ")
        ),
    }
}

fn literal(name: &str, bytes: &[u8]) -> Vec<u8> {
    let mut v = format!("{name} {{{}}}\r\n", bytes.len()).into_bytes();
    v.extend_from_slice(bytes);
    v
}

fn header_value(data: &[u8], name: &str) -> Option<String> {
    let h = header_fields(data, &[name.to_ascii_uppercase()], false);
    let text = String::from_utf8_lossy(&h);
    let (_, v) = text.split_once(':')?;
    Some(v.split_whitespace().collect::<Vec<_>>().join(" "))
}

fn nstring(v: Option<String>) -> String {
    v.map(|s| imap::quote(&s)).unwrap_or_else(|| "NIL".into())
}

fn fetch_part(item: &FetchItem, m: &StoredMessage) -> Vec<u8> {
    match item {
        FetchItem::Flags => format!("FLAGS ({})", flag_list(m.flags)).into_bytes(),
        FetchItem::Uid => format!("UID {}", m.uid).into_bytes(),
        FetchItem::Rfc822Size => format!("RFC822.SIZE {}", m.size).into_bytes(),
        FetchItem::InternalDate => {
            format!("INTERNALDATE \"{}\"", internal_date(m.received)).into_bytes()
        }
        FetchItem::Envelope => envelope::envelope(&m.data).into_bytes(),
        FetchItem::Rfc822(section) => {
            let (name, bytes) = match section {
                None => ("RFC822", m.data.to_vec()),
                Some(Section::Header) => {
                    ("RFC822.HEADER", section_bytes(&Section::Header, &m.data))
                }
                Some(s) => ("RFC822.TEXT", section_bytes(s, &m.data)),
            };
            literal(name, &bytes)
        }
        FetchItem::Body {
            section, partial, ..
        } => {
            let bytes = section_bytes(section, &m.data);
            let mut name = format!("BODY[{}]", section_name(section));
            let bytes = match partial {
                Some((origin, count)) => {
                    let _ = write!(name, "<{origin}>");
                    let start = (*origin as usize).min(bytes.len());
                    let end = start.saturating_add(*count as usize).min(bytes.len());
                    bytes[start..end].to_vec()
                }
                None => bytes,
            };
            literal(&name, &bytes)
        }
    }
}

fn internal_date(t: SystemTime) -> String {
    let dt: chrono::DateTime<chrono::Utc> = t.into();
    dt.format("%d-%b-%Y %H:%M:%S +0000").to_string()
}

/// Does message `m` match? `ctx` = (sequence number, messages in view, largest UID).
fn matches(c: &Search, m: &StoredMessage, ctx: (u32, u32, u32)) -> bool {
    let (seq, count, max_uid) = ctx;
    let within = |set: &SeqSet, n: u32, max: u32| {
        set.iter().any(|(a, b)| {
            let v = |x: &SeqNum| match x {
                SeqNum::Num(n) => *n,
                SeqNum::Star => max,
            };
            let (lo, hi) = (v(a).min(v(b)), v(a).max(v(b)));
            (lo..=hi).contains(&n)
        })
    };
    match c {
        Search::All => true,
        Search::Seq(set) => within(set, seq, count),
        Search::Uid(set) => within(set, m.uid, max_uid),
        Search::Header(name, value) => header_value(&m.data, name)
            .is_some_and(|v| v.to_ascii_lowercase().contains(&value.to_ascii_lowercase())),
        Search::Flag { flag, set } => {
            let bit = FLAG_NAMES
                .iter()
                .find(|(_, n)| n[1..].eq_ignore_ascii_case(flag))
                .map(|(b, _)| *b)
                .unwrap_or(0);
            (m.flags & bit != 0) == *set
        }
        Search::Larger(n) => m.size > *n,
        Search::Smaller(n) => m.size < *n,
        Search::Not(inner) => !matches(inner, m, ctx),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields_with_continuations() {
        let m = b"Subject: a\r\n b\r\nFrom: x\r\nTo: y\r\n\r\nbody\r\n";
        assert_eq!(
            header_fields(m, &["SUBJECT".into()], false),
            b"Subject: a\r\n b\r\n\r\n"
        );
        assert_eq!(
            header_fields(m, &["SUBJECT".into()], true),
            b"From: x\r\nTo: y\r\n\r\n"
        );
        assert_eq!(header_value(m, "subject").as_deref(), Some("a b"));
        assert_eq!(section_bytes(&Section::Text, m), b"body\r\n");
    }
}
