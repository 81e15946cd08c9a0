//! A population of mail users: one session per simulated user, each on a schedule of its
//! own (the engine's paced model). A user's actions arrive as a Poisson process at the
//! profile's rate for the busiest hour, each action drawn by the profile's shares; the
//! next one is due when its time comes, whether or not the server has finished the last
//! (its lateness counts in `response`), and runs when the user's client is free, as one
//! client's next command waits on its connection.
//!
//! Each action is a unit of work, timed as the phase of its class (`send`, `check`,
//! `read`, ...) from when it fell due to its last reply: what the user waited, the login
//! it needed and any wait behind the user's own previous action included, so a server
//! that falls behind shows in every class (no coordinated omission). `login` is also a
//! phase of its own. A desktop client logs in when its user starts and stays logged in, in
//! IDLE between actions; a mobile one logs in for each action and logs out after it. A
//! message sent goes from the user to recipients drawn from the population, its size and
//! recipient count from the profile's tables, with spate's tracking header: sent.log and
//! `--verify` follow it to every mailbox and time its delivery.
//!
//! Outcome of an action: accepted = it ran to its end (an action on a message that found
//! INBOX empty did nothing and is counted in `nothing_to_do`); rejected = the server
//! refused (NO, BAD, 4xx, 5xx); failed = the transport broke.

pub mod phase;
pub mod profile;

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::mailbox::client::{ClientError, Imap};
use super::mailbox::fetch::Account;
use super::mailbox::{failure, greeting, step};
use super::{smtp, Endpoint, Failure, TlsMode};
use crate::engine::{Driver, Outcome, UnitReport};
use crate::message::Factory;
use crate::metrics::Phase;
use crate::proto::imap_client::{command as imap_cmd, Untagged};
use profile::{Action, Client, Ready};

/// Where filed messages go.
const ARCHIVE: &str = "Archive";
/// Where a copy of each sent message goes (when the profile saves sent mail).
const SENT: &str = "Sent";
/// A check fetches the headers of at most this many new messages, as a client showing a
/// screenful would.
const CHECK_HEADERS: u32 = 50;
/// Actions on a message pick one of the newest this many.
const RECENT: u32 = 20;

/// What every user shares.
pub struct Settings {
    pub profile: Ready,
    /// Every account of the population, in order: the users' logins and the addresses
    /// their messages go to ([`Settings::factory`]'s pools are these addresses).
    pub accounts: Vec<Account>,
    /// The population's first user in this run (a shard's slice starts here).
    pub first_user: usize,
    pub imap: Endpoint,
    pub smtp: Arc<smtp::Settings>,
    pub factory: Arc<Factory>,
    /// Actions per user per second of real time.
    pub rate: f64,
    /// The seed every user's draws come from (with its index).
    pub seed: u64,
}

/// One simulated user.
pub struct User {
    /// Its index in the population (and in [`Settings::accounts`]).
    index: usize,
    s: Arc<Settings>,
    rng: SmallRng,
    client: Client,
    /// The next action and when it is due (run clock, µs).
    next: Option<(u64, Action)>,
    /// When the last action was due: the next one follows it by a drawn gap.
    last_due: u64,
    imap: Option<Imap>,
    smtp: smtp::Session,
    connections: u64,
    /// Messages in INBOX when the user last looked (a check fetches what came since).
    seen: u32,
    rcpts: Vec<u32>,
    sent_copy: Vec<u8>,
    /// The action under way found nothing to act on (an empty INBOX).
    did_nothing: bool,
    /// The running IDLE's first part: IDLE to its continuation (µs); its DONE's round
    /// trip is added when it ends, and the two are one `idle` sample.
    idle_began: u64,
}

impl User {
    /// User `index` of the population, the engine's session `id` in this run.
    pub fn new(id: usize, s: Arc<Settings>) -> User {
        let index = s.first_user + id;
        let mut rng = SmallRng::seed_from_u64(crate::message::unit_seed(s.seed, index as u64));
        let client = if rng.random::<f64>() < s.profile.desktop {
            Client::Desktop
        } else {
            Client::Mobile
        };
        let builder = s
            .factory
            .builder(SmallRng::seed_from_u64(rng.random()), index);
        User {
            index,
            smtp: smtp::Session::new(index, s.smtp.clone(), builder),
            s,
            rng,
            client,
            next: None,
            last_due: 0,
            imap: None,
            connections: 0,
            seen: 0,
            rcpts: Vec::new(),
            sent_copy: Vec::new(),
            idle_began: 0,
            did_nothing: false,
        }
    }

    /// The gap to the next action: exponential, at the user's rate (µs).
    fn gap(&mut self) -> u64 {
        let u: f64 = self.rng.random::<f64>().max(f64::MIN_POSITIVE);
        (-u.ln() / self.s.rate * 1e6) as u64
    }

    /// Logs in (connect, greeting, STARTTLS, LOGIN, SELECT INBOX) unless logged in, and
    /// ends the IDLE a desktop client left running.
    async fn mailbox(&mut self, r: &mut UnitReport) -> Result<(), Failure> {
        if let Some(m) = self.imap.as_mut() {
            if m.is_idling() {
                let t = r.start(phase::IDLE);
                let stopped = m.idle_stop().await;
                match stopped {
                    Ok(()) => {
                        let done = r.took(t);
                        r.record(phase::IDLE, done + self.idle_began);
                        return Ok(());
                    }
                    // A connection the server closed while it idled (a timeout, a
                    // restart): the client logs in again, as a desktop client would.
                    Err(_) => self.imap = None,
                }
            } else {
                return Ok(());
            }
        }
        let t = r.start(phase::LOGIN);
        let ep = &self.s.imap;
        let n = self.connections;
        self.connections += 1;
        let conn = Box::pin(ep.open(self.index, n, r)).await?;
        let mut m = greeting(r, Imap::greet(conn)).await?;
        if ep.tls == TlsMode::Starttls {
            step(r, phase::STARTTLS, m.command(imap_cmd::STARTTLS, |_| {})).await?;
            Box::pin(ep.handshake(&mut m.conn, r)).await?;
        }
        let a = &self.s.accounts[self.index];
        step(r, phase::AUTH, m.login(&a.user, &a.password)).await?;
        let sel = Box::pin(m.select("INBOX"))
            .await
            .map_err(|e| failure(phase::LOGIN, e))?;
        m.exists = sel.exists;
        r.timed(phase::LOGIN, t);
        self.imap = Some(m);
        Ok(())
    }

    /// One of the newest messages, or None when INBOX is empty.
    fn pick(&mut self) -> Option<u32> {
        let exists = self.imap.as_ref().map_or(0, |m| m.exists);
        (exists > 0).then(|| exists - self.rng.random_range(0..exists.min(RECENT)))
    }

    /// Does `action`: the SMTP session's outcome for a send (it records its own
    /// failures), accepted for the rest unless they fail.
    async fn act(
        &mut self,
        seq: u64,
        action: Action,
        r: &mut UnitReport,
    ) -> Result<Outcome, Failure> {
        if action == Action::Send {
            return Box::pin(self.send(seq, r)).await;
        }
        Box::pin(self.mailbox(r)).await?;
        let p = action_phase(action);
        // Timed from when the action fell due, in run_one; marked here as under way.
        r.start(p);
        let target = match action {
            Action::Check | Action::Search => None,
            _ => match self.pick() {
                Some(n) => Some(n),
                None => {
                    r.counters.count(phase::NOTHING_TO_DO, 1);
                    self.did_nothing = true;
                    return Ok(Outcome::Accepted);
                }
            },
        };
        let m = self.imap.as_mut().expect("logged in");
        let res: Result<(), ClientError> = async {
            match (action, target) {
                (Action::Check, _) => {
                    if self.client == Client::Desktop {
                        // What IDLE brought is known; NOOP asks for the rest.
                        m.command(b"NOOP", |_| {}).await?;
                    }
                    let exists = m.exists;
                    let new = exists.saturating_sub(self.seen.min(exists));
                    if new > 0 {
                        let from = exists - new.min(CHECK_HEADERS) + 1;
                        let cmd = format!(
                            "FETCH {from}:{exists} (FLAGS INTERNALDATE BODY.PEEK[HEADER.FIELDS (From To Subject Date Message-ID {})])",
                            crate::message::TRACE_HEADER
                        );
                        let run = &self.s.factory.run_id;
                        m.command(cmd.as_bytes(), |u| {
                            if let Some(us) = delivered_after(u, run) {
                                r.record(phase::DELIVERY, us);
                            }
                        })
                        .await?;
                        r.counters.count(phase::NEW_SEEN, u64::from(new));
                    }
                    self.seen = m.exists;
                }
                (Action::Search, _) => {
                    m.command(&imap_cmd::search_header("Subject", "spate"), |_| {})
                        .await?;
                }
                (Action::Read, Some(n)) => {
                    let mut got = 0u64;
                    m.command(imap_cmd::fetch(n, true).as_bytes(), |u| {
                        if let Untagged::Fetch(_, f) = u {
                            if let Some((_, b)) = f.body {
                                got += b.len() as u64;
                            }
                        }
                    })
                    .await?;
                    m.command(imap_cmd::add_flag(n, "\\Seen").as_bytes(), |_| {})
                        .await?;
                    r.counters.count(phase::RETRIEVED_BYTES, got);
                }
                (Action::Flag, Some(n)) => {
                    m.command(imap_cmd::add_flag(n, "\\Flagged").as_bytes(), |_| {})
                        .await?;
                }
                (Action::Delete, Some(n)) => {
                    m.command(imap_cmd::add_flag(n, "\\Deleted").as_bytes(), |_| {})
                        .await?;
                    m.command(imap_cmd::EXPUNGE, |_| {}).await?;
                }
                (Action::Move, Some(n)) => {
                    Box::pin(file(m, n)).await?;
                }
                _ => {}
            }
            Ok(())
        }
        .await;
        self.seen = self.seen.min(m.exists);
        res.map_err(|e| failure(p, e))?;
        Ok(Outcome::Accepted)
    }

    /// Sends a message as this user, to recipients drawn from the population, and saves
    /// a copy to Sent when the profile says so.
    async fn send(&mut self, seq: u64, r: &mut UnitReport) -> Result<Outcome, Failure> {
        r.start(phase::SEND);
        let s = self.s.clone();
        let users = s.accounts.len() as u32;
        let n = s
            .profile
            .recipients(&mut self.rng)
            .min(users.saturating_sub(1).max(1));
        self.rcpts.clear();
        while (self.rcpts.len() as u32) < n {
            let i = self.rng.random_range(0..users);
            if (i as usize != self.index || users == 1) && !self.rcpts.contains(&i) {
                self.rcpts.push(i);
            }
        }
        let size = s.profile.size(&mut self.rng);
        self.smtp
            .builder_mut()
            .choose(self.index as u32, &self.rcpts, size);
        let sent = self.smtp.send(seq, r).await;
        if sent != Outcome::Accepted {
            return Ok(sent);
        }
        if s.profile.profile.messages.save_sent {
            Box::pin(self.mailbox(r)).await?;
            let ts = r.start(phase::SAVE_SENT);
            sent_copy(&mut self.sent_copy, &s, self.index, &self.rcpts, seq, size);
            let m = self.imap.as_mut().expect("logged in");
            let copy = &self.sent_copy;
            let res = match m.append(SENT, "\\Seen", copy, true, |_| {}).await {
                Err(e) if trycreate(&e) => match create(m, SENT).await {
                    Ok(()) => m.append(SENT, "\\Seen", copy, true, |_| {}).await,
                    Err(e) => Err(e),
                },
                other => other,
            };
            res.map_err(|e| failure(phase::SAVE_SENT, e))?;
            r.timed(phase::SAVE_SENT, ts);
        }
        Ok(Outcome::Accepted)
    }

    /// After an action: a desktop client goes back to IDLE (or stays selected when the
    /// server has none); a mobile one logs out.
    async fn after(&mut self, r: &mut UnitReport) {
        let Some(mut m) = self.imap.take() else {
            return;
        };
        match self.client {
            Client::Desktop => {
                if m.has_capability("IDLE") {
                    let t = r.start(phase::IDLE);
                    if m.idle_start().await.is_err() {
                        return; // dropped: the next action logs in again
                    }
                    // The continuation's round trip; its DONE's is added when it ends.
                    self.idle_began = r.took(t);
                }
                self.imap = Some(m);
            }
            Client::Mobile => {
                let _ = step(r, phase::LOGOUT, m.logout()).await;
            }
        }
    }
}

/// How long after its send a message of run `run` arrived, from a FETCH of its
/// INTERNALDATE and tracking header (µs; 0 when the whole-second arrival time reads
/// earlier than the send).
fn delivered_after(u: &Untagged<'_>, run: &str) -> Option<u64> {
    let Untagged::Fetch(_, f) = u else {
        return None;
    };
    let arrived = crate::proto::imap_client::internal_date(f.internal_date?)?;
    let head = String::from_utf8_lossy(f.body?.1);
    let value = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case(crate::message::TRACE_HEADER)
            .then_some(value)
    })?;
    let mut ours = false;
    let mut sent = None;
    for part in value.split(';') {
        match part.trim().split_once('=') {
            Some(("run", v)) => ours = v.trim() == run,
            Some(("sent", v)) => sent = v.trim().parse::<u64>().ok(),
            _ => {}
        }
    }
    let arrived = arrived
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_micros() as u64;
    ours.then(|| arrived.saturating_sub(sent.unwrap_or(u64::MAX)))
        .filter(|_| sent.is_some())
}

/// The phase an action is timed as.
pub fn action_phase(a: Action) -> Phase {
    match a {
        Action::Send => phase::SEND,
        Action::Check => phase::CHECK,
        Action::Read => phase::READ,
        Action::Flag => phase::FLAG,
        Action::Move => phase::MOVE,
        Action::Delete => phase::DELETE,
        Action::Search => phase::SEARCH,
    }
}

fn trycreate(e: &ClientError) -> bool {
    matches!(e, ClientError::Server { status: "NO", text } if text.starts_with("[TRYCREATE]"))
}

/// CREATE `mailbox`; another user's session having created it first is fine.
async fn create(m: &mut Imap, mailbox: &str) -> Result<(), ClientError> {
    match m.command(&imap_cmd::create(mailbox), |_| {}).await {
        Err(ClientError::Server { status: "NO", text }) if text.starts_with("[ALREADYEXISTS]") => {
            Ok(())
        }
        other => other.map(|_| ()),
    }
}

/// Files message `n` in Archive: MOVE, or COPY + STORE \Deleted + EXPUNGE without it.
async fn file(m: &mut Imap, n: u32) -> Result<(), ClientError> {
    let moving = m.has_capability("MOVE");
    let cmd = imap_cmd::copy(n, ARCHIVE, moving);
    match m.command(&cmd, |_| {}).await {
        Err(e) if trycreate(&e) => {
            create(m, ARCHIVE).await?;
            m.command(&cmd, |_| {}).await?;
        }
        other => {
            other?;
        }
    }
    if !moving {
        m.command(imap_cmd::add_flag(n, "\\Deleted").as_bytes(), |_| {})
            .await?;
        m.command(imap_cmd::EXPUNGE, |_| {}).await?;
    }
    Ok(())
}

/// The copy of a sent message a client saves to Sent: its headers and a body of the
/// same size, without spate's tracking header (the copy is no delivery).
fn sent_copy(out: &mut Vec<u8>, s: &Settings, from: usize, rcpts: &[u32], seq: u64, size: u64) {
    use std::io::Write as _;
    out.clear();
    let _ = write!(out, "From: <{}>\r\nTo: ", s.factory.from.addrs[from]);
    for (i, r) in rcpts.iter().enumerate() {
        let sep = if i > 0 { ",\r\n " } else { "" };
        let _ = write!(out, "{sep}<{}>", s.factory.to.addrs[*r as usize]);
    }
    let _ = write!(
        out,
        "\r\nSubject: spate test message {seq}\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n"
    );
    filler(
        out,
        b"sent copy of a spate population message, the same size as the one sent\r\n",
        size,
    );
}

/// Appends `size` bytes of `line` repeated (a body of that size), ending in CRLF.
pub fn filler(out: &mut Vec<u8>, line: &[u8], size: u64) {
    let end = out.len() + size as usize;
    while out.len() < end {
        let k = line.len().min(end - out.len());
        out.extend_from_slice(&line[..k]);
    }
    if !out.ends_with(b"\r\n") {
        out.extend_from_slice(b"\r\n");
    }
}

impl Driver for User {
    const WORDS: crate::results::UnitWords =
        crate::results::UnitWords::new("actions", "actions/s", "sent", &[], true);
    const COUNTERS: &'static [crate::metrics::Counter] = &[
        phase::NOTHING_TO_DO,
        phase::NEW_SEEN,
        phase::RETRIEVED_BYTES,
        smtp::phase::RCPT_ACCEPTED,
        smtp::phase::RCPT_REJECTED,
        smtp::phase::RCPT_INDETERMINATE,
    ];
    const PHASES: &'static [Phase] = &[
        phase::LOGIN,
        phase::CHECK,
        phase::READ,
        phase::FLAG,
        phase::MOVE,
        phase::DELETE,
        phase::SEARCH,
        phase::SEND,
        phase::SAVE_SENT,
        phase::IDLE,
        phase::DELIVERY,
        phase::LOGOUT,
        Phase::CONNECT,
        Phase::TLS,
        super::mailbox::phase::GREETING,
        phase::STARTTLS,
        phase::AUTH,
        smtp::phase::BANNER,
        smtp::phase::EHLO,
        smtp::phase::MAIL,
        smtp::phase::RCPT,
        smtp::phase::DATA,
        smtp::phase::ENVELOPE,
        smtp::phase::BODY,
        smtp::phase::QUIT,
        smtp::phase::TRANSACTION,
    ];

    /// A user's day starts when its session does; a desktop client logs in then and
    /// waits in IDLE for its first action.
    async fn setup(&mut self, r: &mut UnitReport) {
        if self.client == Client::Desktop {
            match Box::pin(self.mailbox(r)).await {
                Ok(()) => self.after(r).await,
                Err(f) => {
                    self.imap = None;
                    f.record(r);
                }
            }
        }
        self.last_due = r.now();
    }

    fn due(&mut self) -> Option<u64> {
        if self.next.is_none() {
            let due = self.last_due + self.gap();
            let action = self.s.profile.action(&mut self.rng);
            self.next = Some((due, action));
        }
        self.next.map(|(due, _)| due)
    }

    async fn run_one(&mut self, seq: u64, r: &mut UnitReport) -> Outcome {
        let Some((due, action)) = self.next.take() else {
            return Outcome::Failed;
        };
        self.last_due = due;
        self.did_nothing = false;
        let outcome = match self.act(seq, action, r).await {
            // The user's wait: from when the action fell due to its last reply, its
            // login and any wait behind the user's own previous action included.
            Ok(Outcome::Accepted) if !self.did_nothing => {
                r.record(action_phase(action), r.took(due));
                Outcome::Accepted
            }
            Ok(o) => o,
            Err(f) => {
                // A refusal leaves the connection usable; a broken one is dropped and
                // the next action logs in again.
                let outcome = if f.fatal {
                    self.imap = None;
                    Outcome::Failed
                } else {
                    Outcome::Rejected
                };
                f.record(r);
                outcome
            }
        };
        self.after(r).await;
        outcome
    }

    fn idle(&mut self) {
        if let Some(m) = self.imap.as_mut() {
            m.conn.idle();
        }
    }

    async fn finish(&mut self, r: &mut UnitReport) {
        if let Some(mut m) = self.imap.take() {
            if m.idle_stop().await.is_ok() {
                let _ = step(r, phase::LOGOUT, m.logout()).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::imap_client::Fetch;

    fn fetched<'a>(date: &'a str, head: &'a [u8]) -> Untagged<'a> {
        Untagged::Fetch(
            1,
            Fetch {
                uid: None,
                flags: None,
                size: None,
                internal_date: Some(date),
                body: Some(("BODY[HEADER.FIELDS (X-Spate-Trace)]", head)),
                structure: None,
            },
        )
    }

    #[test]
    fn a_delivery_is_timed_from_its_send_to_its_internaldate_for_this_run_only() {
        // 2026-12-07 09:00:02.5 UTC, sent; arrived in the second 09:00:05.
        let sent = 1_796_634_002_500_000u64;
        let head = format!(
            "Subject: x\r\nX-Spate-Trace: run=r1; seq=4; sent={sent}; digest=00; size=1\r\n\r\n"
        );
        let u = fetched("07-Dec-2026 09:00:05 +0000", head.as_bytes());
        assert_eq!(delivered_after(&u, "r1"), Some(2_500_000));
        assert_eq!(delivered_after(&u, "r2"), None, "another run's message");
        // Whole seconds: an arrival in the send's own second reads as no time at all.
        let u = fetched("07-Dec-2026 09:00:02 +0000", head.as_bytes());
        assert_eq!(delivered_after(&u, "r1"), Some(0));
        let u = fetched("07-Dec-2026 09:00:05 +0000", b"Subject: populated\r\n\r\n");
        assert_eq!(delivered_after(&u, "r1"), None, "no tracking header");
    }
}
