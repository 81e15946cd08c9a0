//! The POP3 session (RFC 1939 with CAPA, STLS, UIDL, TOP, AUTH PLAIN) over the store.
//! The maildrop is a snapshot taken at login; DELE marks, QUIT commits (RFC 1939 6).

use std::sync::Arc;

use super::conn::{Conn, ConnError};
use super::faults::{FaultPoint, Injected};
use super::shared::Shared;
use super::store::MaildropLock;
use crate::proto::dot::stuff;
use crate::proto::pop3::{self, Command};
use crate::proto::sasl;

const MAX_LINE: usize = 1024;
const MAX_ERRORS: u32 = 20;

struct Message {
    uid: u32,
    size: u64,
    data: Arc<[u8]>,
    deleted: bool,
}

struct Maildrop {
    /// Held for as long as the session is in the TRANSACTION state.
    _lock: MaildropLock,
    mailbox: String,
    uid_validity: u32,
    messages: Vec<Message>,
}

/// Whether the connection stays open after a command.
enum Next {
    Continue,
    Close,
}

/// One connection's state: AUTHORIZATION until `drop` is opened, TRANSACTION after.
struct Session<'a> {
    sh: &'a Shared,
    /// The APOP timestamp of the greeting.
    stamp: String,
    user: Option<String>,
    drop: Option<Maildrop>,
    errors: u32,
}

pub(crate) async fn run(conn: &mut Conn, sh: &Shared, conn_no: u64) -> Result<(), ConnError> {
    let mut faults = sh.faults.session(conn_no);
    let stamp = apop_stamp(sh);
    conn.queue(format!("+OK spate POP3 ready {stamp}\r\n").as_bytes());
    let mut s = Session {
        sh,
        stamp,
        user: None,
        drop: None,
        errors: 0,
    };
    loop {
        let line = match conn.read_line(MAX_LINE).await {
            Ok(l) => l,
            Err(ConnError::LineTooLong) => {
                conn.queue(b"-ERR line too long\r\n");
                if s.too_many_errors() {
                    return Ok(());
                }
                continue;
            }
            Err(ConnError::Shutdown) => {
                conn.queue(b"-ERR [SYS/TEMP] server shutting down\r\n");
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let cmd = match pop3::parse(&line) {
            Ok(c) => c,
            Err(e) => {
                conn.queue(format!("-ERR {e}\r\n").as_bytes());
                if s.too_many_errors() {
                    return Ok(());
                }
                continue;
            }
        };
        // Injected faults (`--fail retr:-ERR:0.1`, `--delay login:1s`, `--drop dele:0.01`).
        if let Some(point) = FaultPoint::of_pop3(&cmd, s.drop.is_some()) {
            let (delay, what) = faults.draw(point, &sh.stats);
            conn.pause(delay).await?;
            match what {
                Injected::None => {}
                Injected::Drop => return Err(ConnError::Dropped),
                Injected::Fail(code) => {
                    let text = format!("-ERR [SYS/TEMP] Injected fault ({})\r\n", point.name());
                    conn.queue(text.as_bytes());
                    if code == 421 {
                        return Ok(());
                    }
                    continue;
                }
            }
        }
        let next = match &mut s.drop {
            Some(md) => transaction(conn, sh, md, cmd),
            None => s.authorization(conn, cmd).await?,
        };
        if let Next::Close = next {
            return Ok(());
        }
    }
}

/// The timestamp offers APOP (RFC 1939 7): unique per connection.
fn apop_stamp(sh: &Shared) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "<{}.{}.{nanos}@{}>",
        std::process::id(),
        sh.next_id(),
        sh.hostname
    )
}

impl Session<'_> {
    /// Counts a bad line; true when the client has had enough chances.
    fn too_many_errors(&mut self) -> bool {
        self.errors += 1;
        self.errors >= MAX_ERRORS
    }

    /// A command in the AUTHORIZATION state (RFC 1939 4).
    async fn authorization(&mut self, conn: &mut Conn, cmd: Command) -> Result<Next, ConnError> {
        let sh = self.sh;
        match cmd {
            Command::Capa => capa(conn, false),
            Command::Stls if conn.is_tls() => conn.queue(b"-ERR TLS already active\r\n"),
            Command::Stls => {
                conn.queue(b"+OK begin TLS\r\n");
                conn.starttls(&sh.tls).await?;
                sh.stats.tls_session(conn.tls_resumed());
                self.user = None;
            }
            Command::User(u) => {
                self.user = Some(u);
                conn.queue(b"+OK send PASS\r\n");
            }
            Command::Pass(p) => match self.user.take() {
                None => conn.queue(b"-ERR USER first\r\n"),
                Some(u) => self.drop = login(conn, sh, &u, sh.users.check(&u, &p)),
            },
            Command::Apop { user: u, digest } => {
                // Needs the plain password: known with a users table; without one,
                // any digest of a local user passes (as any password does).
                let ok = match sh.users.password(&u) {
                    Some(p) => crate::proto::pop3_client::apop_digest(&self.stamp, p) == digest,
                    None => !sh.users.has_table() && sh.users.check(&u, ""),
                };
                self.drop = login(conn, sh, &u, ok);
            }
            Command::Auth { mechanism, initial } if mechanism == "PLAIN" => {
                self.auth_plain(conn, initial).await?;
            }
            Command::Auth { .. } => conn.queue(b"-ERR unsupported mechanism\r\n"),
            Command::Noop => conn.queue(b"+OK\r\n"),
            Command::Quit => {
                conn.queue(b"+OK bye\r\n");
                return Ok(Next::Close);
            }
            _ => conn.queue(b"-ERR not in TRANSACTION state\r\n"),
        }
        Ok(Next::Continue)
    }

    /// AUTH PLAIN (RFC 5034), the credentials inline or after a `+` continuation.
    async fn auth_plain(
        &mut self,
        conn: &mut Conn,
        initial: Option<String>,
    ) -> Result<(), ConnError> {
        let decoded = match initial {
            Some(i) => sasl::decode(&i),
            None => {
                conn.queue(b"+ \r\n");
                let l = conn.read_line(MAX_LINE * 12).await?;
                sasl::decode(&String::from_utf8_lossy(&l))
            }
        };
        match decoded.and_then(|d| sasl::plain(&d)) {
            Ok((u, p)) => self.drop = login(conn, self.sh, &u, self.sh.users.check(&u, &p)),
            Err(e) => conn.queue(format!("-ERR {e}\r\n").as_bytes()),
        }
        Ok(())
    }
}

/// A command in the TRANSACTION state (RFC 1939 5).
fn transaction(conn: &mut Conn, sh: &Shared, md: &mut Maildrop, cmd: Command) -> Next {
    match cmd {
        Command::Capa => capa(conn, true),
        Command::Stat => {
            let (n, size) = md
                .messages
                .iter()
                .filter(|m| !m.deleted)
                .fold((0, 0), |(n, s), m| (n + 1, s + m.size));
            conn.queue(format!("+OK {n} {size}\r\n").as_bytes());
        }
        Command::List(n) => list(conn, md, n, false),
        Command::Uidl(n) => list(conn, md, n, true),
        Command::Retr(n) => retrieve(conn, sh, md, n, None),
        Command::Top { msg, lines } => retrieve(conn, sh, md, msg, Some(lines)),
        Command::Dele(n) => match pick(md, n) {
            Some(i) => {
                md.messages[i].deleted = true;
                conn.queue(b"+OK marked\r\n");
            }
            None => conn.queue(b"-ERR no such message\r\n"),
        },
        Command::Rset => {
            for m in &mut md.messages {
                m.deleted = false;
            }
            conn.queue(b"+OK\r\n");
        }
        Command::Noop => conn.queue(b"+OK\r\n"),
        Command::Quit => {
            quit(conn, sh, md);
            return Next::Close;
        }
        _ => conn.queue(b"-ERR already authenticated\r\n"),
    }
    Next::Continue
}

/// LIST or UIDL: every message still there, or message `n` alone.
fn list(conn: &mut Conn, md: &Maildrop, n: Option<u32>, uidl: bool) {
    match n {
        None => {
            let mut out = String::from("+OK\r\n");
            for (i, m) in md.messages.iter().enumerate().filter(|(_, m)| !m.deleted) {
                out.push_str(&entry(i, m, uidl, md.uid_validity));
            }
            out.push_str(".\r\n");
            conn.queue(out.as_bytes());
        }
        Some(n) => match pick(md, n) {
            Some(i) => {
                let e = entry(i, &md.messages[i], uidl, md.uid_validity);
                conn.queue(format!("+OK {e}").as_bytes());
            }
            None => conn.queue(b"-ERR no such message\r\n"),
        },
    }
}

/// RETR, or TOP with the number of body lines; only RETR counts as a retrieval.
fn retrieve(conn: &mut Conn, sh: &Shared, md: &Maildrop, n: u32, top: Option<u32>) {
    let Some(i) = pick(md, n) else {
        conn.queue(b"-ERR no such message\r\n");
        return;
    };
    let m = &md.messages[i];
    // TOP announces the size of the part it sends, not of the whole message.
    let (body, size) = match top {
        Some(lines) => {
            let part = pop3::top(&m.data, lines);
            (part, part.len() as u64)
        }
        None => (&m.data[..], m.size),
    };
    conn.queue(format!("+OK {size} octets\r\n").as_bytes());
    conn.queue(&stuff(body));
    if top.is_none() {
        sh.stats.retrieved();
    }
}

/// The UPDATE state: the messages marked by DELE leave the store.
fn quit(conn: &mut Conn, sh: &Shared, md: &Maildrop) {
    let uids: Vec<u32> = md
        .messages
        .iter()
        .filter(|m| m.deleted)
        .map(|m| m.uid)
        .collect();
    let n = if uids.is_empty() {
        0
    } else {
        sh.store
            .with_mailbox(&md.mailbox, |mb| mb.remove_uids(&uids))
    };
    conn.queue(format!("+OK bye, {n} deleted\r\n").as_bytes());
}

fn capa(conn: &mut Conn, authed: bool) {
    let mut s = String::from("+OK capabilities\r\nUSER\r\nUIDL\r\nTOP\r\nRESP-CODES\r\n");
    if !authed {
        s.push_str("SASL PLAIN\r\n");
        if !conn.is_tls() {
            s.push_str("STLS\r\n");
        }
    }
    s.push_str("IMPLEMENTATION spate\r\n.\r\n");
    conn.queue(s.as_bytes());
}

/// Opens the maildrop of `user` when the credentials checked out (`ok`).
fn login(conn: &mut Conn, sh: &Shared, user: &str, ok: bool) -> Option<Maildrop> {
    sh.stats.auth(ok);
    if !ok {
        conn.queue(b"-ERR [AUTH] invalid credentials\r\n");
        return None;
    }
    let mailbox = sh.users.mailbox_for_login(user);
    // Two sessions on one maildrop would each commit the other's deletions.
    let Some(lock) = sh.store.lock_maildrop(&mailbox) else {
        conn.queue(b"-ERR [IN-USE] maildrop already locked by another session\r\n");
        return None;
    };
    sh.stats.login();
    let (uid_validity, messages) = sh.store.with_mailbox(&mailbox, |mb| {
        (
            mb.uid_validity,
            mb.messages
                .iter()
                .map(|m| Message {
                    uid: m.uid,
                    size: m.size,
                    data: m.data.clone(),
                    deleted: false,
                })
                .collect::<Vec<_>>(),
        )
    });
    conn.queue(format!("+OK {} messages\r\n", messages.len()).as_bytes());
    Some(Maildrop {
        _lock: lock,
        mailbox,
        uid_validity,
        messages,
    })
}

/// Message number `n` (1-based) if it exists and is not deleted.
fn pick(md: &Maildrop, n: u32) -> Option<usize> {
    let i = (n as usize).checked_sub(1)?;
    md.messages.get(i).filter(|m| !m.deleted).map(|_| i)
}

fn entry(i: usize, m: &Message, uidl: bool, validity: u32) -> String {
    if uidl {
        format!("{} {validity}.{}\r\n", i + 1, m.uid)
    } else {
        format!("{} {}\r\n", i + 1, m.size)
    }
}
