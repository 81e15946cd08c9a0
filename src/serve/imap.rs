//! The IMAP session: IMAP4rev1 (RFC 3501) over the store's per-user mailboxes, with
//! LITERAL+, SASL-IR, IDLE, UIDPLUS, MOVE, UNSELECT, NAMESPACE, ID, ENABLE, CHILDREN,
//! SPECIAL-USE, MULTIAPPEND, ESEARCH and CONDSTORE. The session keeps its own view of the selected mailbox (sequence number →
//! UID) and reconciles it with the store after each command, sending EXISTS, RECENT,
//! EXPUNGE and FETCH FLAGS as RFC 3501 7.4.1 asks: never an EXPUNGE while answering
//! FETCH, STORE or SEARCH (their UID forms may).
//!
//! Modules: `mailbox` (the mailbox commands and APPEND), `fetch` (FETCH, STORE, COPY,
//! MOVE), `search`, `updates` (what a session is told of changes: after each command and
//! in IDLE), `mime` (the parsed structure of a message), `envelope`.

use std::fmt::Write as _;

use super::conn::{Conn, ConnError};
use super::faults::{FaultPoint, FaultSession, Injected};
use super::shared::Shared;
use super::store::{flags, Account, Mailbox};
use crate::proto::imap::{self, literal_at_end, Command, FetchItem, SeqNum, SeqSet};
use crate::proto::sasl;

mod envelope;
mod fetch;
mod mailbox;
pub(super) use mailbox::special_use;
mod mime;
mod search;
mod updates;

pub use mime::Structure;

/// Dovecot's limit too: long ID and SEARCH lines fit.
const MAX_LINE: usize = 64 * 1024;
/// Literals outside APPEND (logins, search strings).
const MAX_LITERAL: u64 = 64 * 1024;
/// An APPENDed message.
const MAX_APPEND: u64 = 64 * 1024 * 1024;
const MAX_ERRORS: u32 = 20;
const FLAG_NAMES: [(u8, &str); 5] = [
    (flags::ANSWERED, "\\Answered"),
    (flags::FLAGGED, "\\Flagged"),
    (flags::DELETED, "\\Deleted"),
    (flags::SEEN, "\\Seen"),
    (flags::DRAFT, "\\Draft"),
];
const CAPS: &str = "IMAP4rev1 LITERAL+ SASL-IR IDLE NAMESPACE ID ENABLE UIDPLUS MOVE UNSELECT \
                    CHILDREN SPECIAL-USE MULTIAPPEND ESEARCH CONDSTORE";

struct Selected {
    /// "INBOX" or the folder's full name.
    name: String,
    /// Which mailbox of that name (a deleted and re-created one has another).
    validity: u32,
    read_only: bool,
    /// UIDs in sequence-number order, as the client knows them.
    view: Vec<u32>,
    /// UIDs that are \Recent in this session (sorted).
    recent: Vec<u32>,
    /// The mailbox's change counter up to which flag changes were reported.
    modseq: u64,
    /// Keywords announced in FLAGS so far.
    keywords: usize,
    /// Flag changes (UID, change counter) this session made and told its client itself.
    told: Vec<(u32, u64)>,
    /// The mailbox's change counter at the last sync that could report everything.
    version: u64,
}

struct Session<'a> {
    conn: &'a mut Conn,
    sh: &'a Shared,
    faults: FaultSession<'a>,
    user: Option<String>,
    selected: Option<Selected>,
    /// CONDSTORE (RFC 7162) is on: MODSEQ in every FETCH of flags, HIGHESTMODSEQ at
    /// SELECT.
    condstore: bool,
}

/// How a command ends: its tagged status and text.
enum Done {
    Ok(String),
    No(String),
    Bad(String),
    Logout,
    /// The tagged answer is out already (STARTTLS).
    Answered,
}

fn ok(t: impl Into<String>) -> Done {
    Done::Ok(t.into())
}
fn no(t: impl Into<String>) -> Done {
    Done::No(t.into())
}
fn bad(t: impl Into<String>) -> Done {
    Done::Bad(t.into())
}

/// A message set that names a sequence number the client has not been told exists.
struct BadSet;

impl BadSet {
    const TEXT: &'static str = "Invalid messageset: message number above EXISTS";
}

pub(crate) async fn run(conn: &mut Conn, sh: &Shared, conn_no: u64) -> Result<(), ConnError> {
    let mut s = Session {
        conn,
        sh,
        faults: sh.faults.session(conn_no),
        user: None,
        selected: None,
        condstore: false,
    };
    match s.serve().await {
        Err(ConnError::Shutdown) => {
            s.conn.queue(b"* BYE server shutting down\r\n");
            Ok(())
        }
        Err(ConnError::Idle) => {
            s.conn.queue(b"* BYE idle timeout\r\n");
            Ok(())
        }
        r => r,
    }
}

impl Session<'_> {
    async fn serve(&mut self) -> Result<(), ConnError> {
        if let Some(done) = self.fault(FaultPoint::Connect).await? {
            let text = match done {
                Done::No(t) | Done::Bad(t) | Done::Ok(t) => t,
                Done::Logout | Done::Answered => String::new(),
            };
            self.conn.queue(format!("* BYE {text}\r\n").as_bytes());
            return Ok(());
        }
        let greeting = format!(
            "* OK [CAPABILITY {}] spate IMAP ready\r\n",
            self.capabilities()
        );
        self.conn.queue(greeting.as_bytes());
        let mut errors = 0;
        loop {
            let Some(input) = self.read_command().await? else {
                errors += 1;
                if errors >= MAX_ERRORS {
                    self.conn.queue(b"* BYE too many errors\r\n");
                    return Ok(());
                }
                continue;
            };
            let req = match imap::parse(&input) {
                Ok(r) => r,
                Err(e) => {
                    let tag = e.tag.as_deref().unwrap_or("*");
                    if e.msg == imap::BADCHARSET {
                        self.conn
                            .queue(format!("{tag} NO {}\r\n", e.msg).as_bytes());
                        continue;
                    }
                    self.conn
                        .queue(format!("{tag} BAD {}\r\n", e.msg).as_bytes());
                    errors += 1;
                    if errors >= MAX_ERRORS {
                        self.conn.queue(b"* BYE too many errors\r\n");
                        return Ok(());
                    }
                    continue;
                }
            };
            // RFC 3501 7.4.1: no EXPUNGE while answering FETCH, STORE or SEARCH.
            let expunges = !matches!(
                req.command,
                Command::Fetch { uid: false, .. }
                    | Command::Store { uid: false, .. }
                    | Command::Search { uid: false, .. }
            );
            let done = match self.fault_for(&req.command).await? {
                Some(d) => d,
                None => self.command(&req.tag, req.command).await?,
            };
            if !matches!(done, Done::Logout) {
                self.sync(expunges);
            }
            let tag = &req.tag;
            let line = match done {
                Done::Ok(t) => format!("{tag} OK {t}\r\n"),
                Done::No(t) => format!("{tag} NO {t}\r\n"),
                Done::Bad(t) => format!("{tag} BAD {t}\r\n"),
                Done::Answered => continue,
                Done::Logout => {
                    self.conn.queue(b"* BYE logging out\r\n");
                    self.conn
                        .queue(format!("{tag} OK LOGOUT completed\r\n").as_bytes());
                    return Ok(());
                }
            };
            self.conn.queue(line.as_bytes());
        }
    }

    /// Faults drawn for this command (`--fail fetch:NO:0.1`, `--delay select:50ms`,
    /// `--drop idle:0.01`): a failure answers the command instead of running it.
    async fn fault_for(&mut self, cmd: &Command) -> Result<Option<Done>, ConnError> {
        let Some(point) = FaultPoint::of_imap(cmd) else {
            return Ok(None);
        };
        self.fault(point).await
    }

    async fn fault(&mut self, point: FaultPoint) -> Result<Option<Done>, ConnError> {
        if self.sh.faults.is_empty() {
            return Ok(None);
        }
        let (delay, what) = self.faults.draw(point, &self.sh.stats);
        self.conn.pause(delay).await?;
        Ok(match what {
            Injected::None => None,
            Injected::Drop => return Err(ConnError::Dropped),
            Injected::Fail(421) => {
                let text = format!("* BYE Injected fault ({})\r\n", point.name());
                self.conn.queue(text.as_bytes());
                self.conn.flush().await?;
                return Err(ConnError::Closed);
            }
            Injected::Fail(code) => {
                let text = format!("[UNAVAILABLE] Injected fault ({})", point.name());
                Some(if code >= 500 { bad(text) } else { no(text) })
            }
        })
    }

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
                    self.conn
                        .queue(format!("{tag} BAD line too long\r\n").as_bytes());
                    return Ok(None);
                }
                Err(e) => return Err(e),
            };
            input.extend_from_slice(&line);
            let Some((n, sync)) = literal_at_end(&line) else {
                return Ok(Some(input));
            };
            let cap = if is_append(&input) {
                MAX_APPEND
            } else {
                MAX_LITERAL
            };
            if input.len() as u64 + n > cap {
                if sync && cap == MAX_APPEND {
                    // RFC 7888 4: the tagged NO tells the client the message is too big.
                    let tag = imap::tag_of(&input).unwrap_or("*").to_string();
                    let text =
                        format!("{tag} NO [TOOBIG] message too large (at most {cap} bytes)\r\n");
                    self.conn.queue(text.as_bytes());
                    return Ok(None);
                }
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

    /// What works in the current state: STARTTLS and AUTH only before login, and
    /// STARTTLS only on a connection that is not TLS already.
    fn capabilities(&self) -> String {
        let mut caps = String::from(CAPS);
        if self.user.is_none() {
            caps.push_str(" AUTH=PLAIN");
            if !self.conn.is_tls() {
                caps.push_str(" STARTTLS");
            }
        }
        caps
    }

    async fn command(&mut self, tag: &str, cmd: Command) -> Result<Done, ConnError> {
        let read_only = matches!(cmd, Command::Examine(..));
        Ok(match cmd {
            Command::Capability => {
                let caps = format!("* CAPABILITY {}\r\n", self.capabilities());
                self.conn.queue(caps.as_bytes());
                ok("CAPABILITY completed")
            }
            Command::Noop => ok("completed"),
            Command::Logout => Done::Logout,
            Command::Id => {
                self.conn
                    .queue(b"* ID (\"name\" \"spate\" \"vendor\" \"spate\")\r\n");
                ok("ID completed")
            }
            Command::Starttls if self.conn.is_tls() || self.user.is_some() => {
                bad("STARTTLS not allowed now")
            }
            Command::Starttls => {
                self.conn
                    .queue(format!("{tag} OK Begin TLS negotiation now\r\n").as_bytes());
                self.conn.starttls(&self.sh.tls).await?;
                self.sh.stats.tls_session(self.conn.tls_resumed());
                return Ok(Done::Answered);
            }
            Command::Login { .. } | Command::Authenticate { .. } if self.user.is_some() => {
                bad("already authenticated")
            }
            Command::Login { user, pass } => self.login(&user, &pass),
            Command::Authenticate { mechanism, initial } => {
                if mechanism != "PLAIN" {
                    return Ok(no("unsupported mechanism"));
                }
                let decoded = match initial {
                    Some(i) => sasl::decode(&i),
                    None => {
                        self.conn.queue(b"+ \r\n");
                        let line = self.conn.read_line(MAX_LINE).await?;
                        if line == b"*" {
                            return Ok(bad("AUTHENTICATE cancelled"));
                        }
                        sasl::decode(&String::from_utf8_lossy(&line))
                    }
                };
                match decoded.and_then(|d| sasl::plain(&d)) {
                    Ok((u, p)) => self.login(&u, &p),
                    Err(e) => bad(e.to_string()),
                }
            }
            _ if self.user.is_none() => bad("log in first"),
            Command::Idle => self.idle().await?,
            Command::Namespace => {
                self.conn.queue(b"* NAMESPACE ((\"\" \"/\")) NIL NIL\r\n");
                ok("NAMESPACE completed")
            }
            Command::Enable(caps) => {
                if caps.iter().any(|c| c == "CONDSTORE") {
                    self.enable_condstore();
                    self.conn.queue(b"* ENABLED CONDSTORE\r\n");
                } else {
                    self.conn.queue(b"* ENABLED\r\n");
                }
                ok("ENABLE completed")
            }
            Command::Select(m, condstore) | Command::Examine(m, condstore) => {
                self.selected = None;
                if condstore {
                    self.enable_condstore();
                }
                self.select(&m, read_only)
            }
            Command::Create(m) => self.create(&m),
            Command::Delete(m) => self.delete(&m),
            Command::Rename { from, to } => self.rename(&from, &to),
            Command::Subscribe(m) => self.subscribe(&m, true),
            Command::Unsubscribe(m) => self.subscribe(&m, false),
            Command::List { reference, pattern } => self.list(false, &reference, &pattern),
            Command::Lsub { reference, pattern } => self.list(true, &reference, &pattern),
            Command::Status { mailbox, items } => self.status(&mailbox, &items),
            Command::Append { mailbox, messages } => self.append(&mailbox, messages),
            _ if self.selected.is_none() => bad("select a mailbox first"),
            Command::Check => ok("completed"),
            Command::Close | Command::Unselect => {
                let close = matches!(cmd, Command::Close);
                if close && self.selected.as_ref().is_some_and(|s| !s.read_only) {
                    self.in_selected(|mb| mb.expunge_deleted());
                }
                self.selected = None;
                ok(if close {
                    "CLOSE completed"
                } else {
                    "UNSELECT completed"
                })
            }
            Command::Expunge(uids) => self.expunge(uids.as_ref()),
            Command::Fetch {
                uid,
                set,
                items,
                changed_since,
            } => {
                if changed_since.is_some() || items.contains(&FetchItem::ModSeq) {
                    self.enable_condstore();
                }
                self.fetch(uid, &set, &items, changed_since)
            }
            Command::Store {
                uid,
                set,
                unchanged_since,
                mode,
                silent,
                flags,
            } => {
                if unchanged_since.is_some() {
                    self.enable_condstore();
                }
                self.store(uid, &set, unchanged_since, mode, silent, &flags)
            }
            Command::Copy { uid, set, mailbox } => self.copy(uid, &set, &mailbox, false),
            Command::Move { uid, set, mailbox } => self.copy(uid, &set, &mailbox, true),
            Command::Search { uid, criteria, ret } => {
                if criteria.iter().any(search::uses_modseq) {
                    self.enable_condstore();
                }
                self.search(tag, uid, &criteria, ret)
            }
        })
    }

    /// Turns CONDSTORE on (RFC 7162 3.1: by ENABLE, SELECT (CONDSTORE) or the first
    /// command that uses it, which then learns HIGHESTMODSEQ).
    fn enable_condstore(&mut self) {
        if std::mem::replace(&mut self.condstore, true) {
            return;
        }
        if let Some(n) = self.in_selected(|mb| mb.highest_modseq) {
            let line = format!("* OK [HIGHESTMODSEQ {n}] Highest\r\n");
            self.conn.queue(line.as_bytes());
        }
    }

    fn login(&mut self, user: &str, pass: &str) -> Done {
        let good = self.sh.users.check(user, pass);
        self.sh.stats.auth(good);
        if !good {
            return no("[AUTHENTICATIONFAILED] invalid credentials");
        }
        self.sh.stats.login();
        self.user = Some(self.sh.users.mailbox_for_login(user));
        ok(format!("[CAPABILITY {}] logged in", self.capabilities()))
    }

    fn user(&self) -> &str {
        self.user.as_deref().unwrap_or_default()
    }

    /// Runs `f` on the user's mailboxes.
    fn account<R>(&self, f: impl FnOnce(&mut Account) -> R) -> R {
        self.sh.store.with_account(self.user(), f)
    }

    /// Runs `f` on the selected mailbox, if it still exists (as the one selected).
    fn in_selected<R>(&self, f: impl FnOnce(&mut Mailbox) -> R) -> Option<R> {
        let sel = self.selected.as_ref()?;
        self.account(|a| {
            a.get_mut(&sel.name)
                .filter(|mb| mb.uid_validity == sel.validity)
                .map(f)
        })
    }

    /// `UID EXPUNGE set` or EXPUNGE: removes the \Deleted messages (of the set); the
    /// EXPUNGE responses follow from the sync after the command.
    fn expunge(&mut self, uids: Option<&SeqSet>) -> Done {
        if self.selected.as_ref().is_some_and(|s| s.read_only) {
            return no("[READ-ONLY] mailbox is read-only");
        }
        self.in_selected(|mb| {
            let max = mb.messages.last().map_or(0, |m| m.uid);
            mb.remove_where(|m| {
                m.flags & flags::DELETED != 0 && uids.is_none_or(|s| in_set(s, m.uid, max))
            })
        });
        ok("EXPUNGE completed")
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
                let from = view.partition_point(|u| *u < lo);
                let to = view.partition_point(|u| *u <= hi);
                out.extend(from..to);
            } else {
                // A range with `*` stays lenient (`1:*` of an empty mailbox names
                // nothing).
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
}

/// Does the command being read start `tag APPEND `?
fn is_append(input: &[u8]) -> bool {
    let mut words = input.splitn(3, |&b| b == b' ');
    words.next();
    words
        .next()
        .is_some_and(|w| w.eq_ignore_ascii_case(b"APPEND"))
}

/// Is `n` in the set (`*` being `max`)?
fn in_set(set: &SeqSet, n: u32, max: u32) -> bool {
    set.iter().any(|(a, b)| {
        let v = |x: &SeqNum| match x {
            SeqNum::Num(n) => *n,
            SeqNum::Star => max,
        };
        let (lo, hi) = (v(a).min(v(b)), v(a).max(v(b)));
        (lo..=hi).contains(&n)
    })
}

/// The system flags and keywords of a message, space-separated (without \Recent).
fn message_flags(mb: &Mailbox, m: &super::store::StoredMessage) -> String {
    let mut out: Vec<&str> = FLAG_NAMES
        .iter()
        .filter(|(b, _)| m.flags & b != 0)
        .map(|(_, n)| *n)
        .collect();
    for (i, k) in mb.keywords.iter().enumerate() {
        if m.keywords & (1 << i) != 0 {
            out.push(k);
        }
    }
    out.join(" ")
}

/// ` \Recent` to append to a flag list (`f` being the rest).
fn recent_flag(f: &str) -> String {
    if f.is_empty() {
        "\\Recent".into()
    } else {
        " \\Recent".into()
    }
}

/// FLAGS and PERMANENTFLAGS for a mailbox (keywords included).
fn flags_lines(mb: &Mailbox, read_only: bool) -> String {
    let mut all = String::from("\\Answered \\Flagged \\Deleted \\Seen \\Draft");
    for k in &mb.keywords {
        all.push(' ');
        all.push_str(k);
    }
    let permanent = if read_only {
        String::new()
    } else {
        format!("{all} \\*")
    };
    format!("* FLAGS ({all})\r\n* OK [PERMANENTFLAGS ({permanent})] Flags permitted\r\n")
}

/// A UID set in its shortest form (`1:3,7`), for COPYUID and APPENDUID.
fn uid_set(uids: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < uids.len() {
        let start = uids[i];
        let mut end = start;
        while i + 1 < uids.len() && uids[i + 1] == end + 1 {
            i += 1;
            end = uids[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            let _ = write!(out, "{start}");
        } else {
            let _ = write!(out, "{start}:{end}");
        }
        i += 1;
    }
    out
}

/// The header lines (with continuations) whose names are (or, with `not`, are not) listed.
fn header_fields(data: &[u8], fields: &[String], not: bool) -> Vec<u8> {
    let header = &data[..mime::header_end(data)];
    let mut out = Vec::new();
    let mut keep = false;
    for line in header.split_inclusive(|&b| b == b'\n') {
        if line == b"\r\n" || line == b"\n" {
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

/// The first value of a header field, unfolded.
fn header_value(data: &[u8], name: &str) -> Option<String> {
    header_values(data, name).into_iter().next()
}

/// Every value of a header field, unfolded.
fn header_values(data: &[u8], name: &str) -> Vec<String> {
    let h = header_fields(data, &[name.to_ascii_uppercase()], false);
    let text = String::from_utf8_lossy(&h);
    let mut out: Vec<String> = Vec::new();
    for line in text.split("\r\n") {
        if line.starts_with([' ', '\t']) {
            if let Some(last) = out.last_mut() {
                last.push(' ');
                last.push_str(line.trim());
            }
        } else if let Some((_, v)) = line.split_once(':') {
            out.push(v.trim().to_string());
        }
    }
    out.into_iter()
        .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// A mailbox name as an atom when it can be one, else quoted (or a literal).
fn astring(name: &str) -> String {
    let atom = !name.is_empty()
        && name
            .bytes()
            .all(|b| b > b' ' && b < 0x7f && !b"(){\"%*\\]".contains(&b));
    if atom {
        name.to_string()
    } else {
        imap::quote(name)
    }
}

fn nstring(v: Option<String>) -> String {
    v.map(|s| imap::quote(&s)).unwrap_or_else(|| "NIL".into())
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
    }

    #[test]
    fn uid_sets_are_compressed() {
        assert_eq!(uid_set(&[1, 2, 3, 7, 9, 10]), "1:3,7,9:10");
        assert_eq!(uid_set(&[]), "");
    }
}
