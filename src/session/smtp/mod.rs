//! The SMTP/LMTP driver: one message per unit of work over a kept connection, every phase
//! timed into the unit's report.
//!
//! A 4xx is not a crash: a rejected transaction is followed by RSET and the session goes
//! on; a 421 or any transport failure drops the connection and the next message opens a
//! new one, as a real MTA would.

mod connect;
mod envelope;
pub mod phase;

use std::sync::Arc;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::{Endpoint, Failure};
use crate::engine::{Ahead, Driver, Outcome, UnitReport};
use crate::message::{Builder, Built, DOT};
use crate::metrics::{Detail, ErrorKind, Phase, SentOutcome, SentRecord, UNSURE_RCPT};
use crate::proto::smtp::client as cmd;
use crate::proto::smtp::reply::{self, Capabilities, Reply};
use crate::transport::{Connection, TransportError};

pub use super::TlsMode;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum AuthMech {
    /// The best the server offers: CRAM-MD5, then PLAIN, then LOGIN.
    Auto,
    Plain,
    Login,
    CramMd5,
}

/// Everything a session needs that does not change during the run.
pub struct Settings {
    pub endpoint: Endpoint,
    pub lmtp: bool,
    /// With `TlsMode::Plain`, the share of connections that use STARTTLS (0..=100).
    pub tls_percent: u8,
    pub auth: Option<(AuthMech, Vec<(String, String)>)>,
    pub pipelining: bool,
    /// With PIPELINING (and messages going with DATA): the next message's MAIL, RCPT..
    /// and DATA in the same write as this message's content, and QUIT behind a
    /// connection's last message (RFC 2920 §3.1); off with `--pipelining conservative`.
    pub across: bool,
    /// With PIPELINING and CHUNKING offered: MAIL, RCPT.., BDAT LAST and the message in
    /// one write (one round trip per message).
    pub chunking: bool,
    pub helo: String,
    /// Messages per connection, drawn per connection from the range; 0 = unlimited.
    pub messages_per_connection: crate::units::Range<u32>,
    /// DSN NOTIFY for RCPT (e.g. "SUCCESS,FAILURE") when the server offers DSN.
    pub dsn_notify: Option<String>,
    /// A shard numbers its messages in its own slice of the run's sequence space (the
    /// tracking header and sent.log), so the merged run's numbers never collide.
    pub shard: Option<crate::results::ShardOf>,
}

/// Reads one complete reply.
async fn read_reply(conn: &mut Connection) -> Result<Reply<'_>, TransportError> {
    let raw = conn
        .read_frame(reply::MAX_REPLY + reply::MAX_LINE, reply::frame)
        .await?;
    Ok(reply::framed(raw))
}

/// A failure the server replied with.
fn refusal(phase: Phase, r: &Reply<'_>) -> Failure {
    Failure {
        phase,
        kind: if r.is_transient() {
            ErrorKind::TRANSIENT
        } else {
            ErrorKind::PERMANENT
        },
        code: r.code,
        detail: r.enhanced().map(|e| Detail(e.0, e.1, e.2)),
        text: r.normalized_text(),
        sample: String::from_utf8_lossy(r.raw).trim_end().to_string(),
        // 421 closes the session; a 4xx to MAIL is the server's limit for this session
        // (OpenSMTPD's 452 4.5.3 "Too many messages sent"): as an MTA would, spate goes
        // on with a new connection rather than asking again on this one.
        fatal: r.code == 421 || (phase == phase::MAIL && r.is_transient()),
    }
}

/// How a failed unit counts: the server's refusal (it answered 4xx/5xx) is a rejection,
/// whatever happens to the connection afterwards; a broken transport or protocol is a
/// failure.
fn outcome_of(f: &Failure) -> Outcome {
    if [ErrorKind::TRANSIENT, ErrorKind::PERMANENT].contains(&f.kind) {
        Outcome::Rejected
    } else {
        Outcome::Failed
    }
}

/// A reply that is not what the protocol allows at this point (e.g. 354 to MAIL).
fn unexpected(phase: Phase, r: &Reply<'_>) -> Failure {
    Failure {
        kind: ErrorKind::PROTOCOL,
        fatal: true,
        ..refusal(phase, r)
    }
}

/// A message built with the previous one, its envelope maybe already written.
struct Next {
    /// Its sequence number (the run's, after the shard's mapping).
    seq: u64,
    /// When its MAIL, RCPT.. and DATA went out behind the previous message's content
    /// (run clock); None when they did not (the write failed, the connection is gone).
    sent_at: Option<u64>,
}

/// What the current message's recipients came to.
#[derive(Default)]
struct Recipients {
    /// Indices (into the run's recipient pool) of the accepted ones.
    ok: Vec<u32>,
    rejected: u64,
    /// LMTP: how many of `ok`, at its end, got no final reply of their own (the
    /// connection died after the replies of those before them).
    unsure: usize,
}

pub struct Session {
    id: usize,
    s: Arc<Settings>,
    builder: Builder,
    conn: Option<Connection>,
    caps: Capabilities,
    on_conn: u32,
    connections_made: u64,
    built: Built,
    wire: Vec<u8>,
    cmd: Vec<u8>,
    rcpts: Recipients,
    /// The message being sent (the run's sequence number).
    seq: u64,
    fails: Vec<Failure>,
    /// QUIT went behind this message's group: the connection ends with the message.
    quit_behind: bool,
    /// The engine's offer to claim the next unit early (closed, back to back).
    ahead: Ahead,
    /// The next message, claimed and built while this one was sent.
    next: Option<Next>,
    next_built: Built,
    next_wire: Vec<u8>,
}

impl Session {
    pub fn new(id: usize, s: Arc<Settings>, builder: Builder) -> Self {
        Session {
            id,
            s,
            builder,
            conn: None,
            caps: Capabilities::default(),
            on_conn: 0,
            connections_made: 0,
            built: Built::default(),
            wire: Vec::with_capacity(4096),
            cmd: Vec::with_capacity(512),
            rcpts: Recipients::default(),
            seq: 0,
            fails: Vec::new(),
            quit_behind: false,
            ahead: Ahead::default(),
            next: None,
            next_built: Built::default(),
            next_wire: Vec::new(),
        }
    }

    /// The builder of this session's messages (to choose the next one's envelope).
    pub fn builder_mut(&mut self) -> &mut Builder {
        &mut self.builder
    }

    /// Sends message `seq`; the connection is opened first when there is none.
    pub async fn send(&mut self, seq: u64, report: &mut UnitReport) -> Outcome {
        self.seq = seq;
        self.fails.clear();
        self.rcpts.ok.clear();
        self.rcpts.rejected = 0;
        self.rcpts.unsure = 0;
        // Built with the previous message, its envelope maybe written behind it.
        let early = match self.next.take() {
            Some(n) if n.seq == seq => {
                std::mem::swap(&mut self.built, &mut self.next_built);
                std::mem::swap(&mut self.wire, &mut self.next_wire);
                Some(n.sent_at)
            }
            Some(_) => {
                // Not the claimed unit (the engine runs that one next, so this does not
                // happen): the server holds an envelope nobody will finish.
                self.drop_connection();
                None
            }
            None => None,
        };
        let outcome = match self.ensure_connected(report).await {
            Err(f) => {
                let o = outcome_of(&f);
                self.fails.push(f);
                o
            }
            Ok(()) => {
                let mpc = self.connection_limit();
                let last = mpc > 0 && self.on_conn + 1 >= mpc;
                self.transaction(seq, last, early, report).await
            }
        };
        if std::mem::take(&mut self.quit_behind) {
            // QUIT went with the message and was answered; the unit was done at its
            // final reply, before QUIT's.
            self.drop_connection();
        } else {
            report.done();
            if self.fails.iter().any(|f| f.fatal) {
                self.drop_connection();
            } else {
                self.on_conn += 1;
                let mpc = self.connection_limit();
                if mpc > 0 && self.on_conn >= mpc {
                    // Timed with the message, so `spate ping` shows it on the message's line.
                    if let Some(us) = self.close(report).await {
                        report.record(phase::QUIT, us);
                    }
                }
            }
        }
        self.report(seq, outcome, report);
        outcome
    }

    /// Moves the message's recipients, failures and sent record into the report. A
    /// message whose end of data went out ([`Session::end_of_data_sent`]) and that got no
    /// final reply stays in the sent log as indeterminate: the server may have it.
    fn report(&mut self, seq: u64, outcome: Outcome, report: &mut UnitReport) {
        report
            .counters
            .count(phase::RCPT_ACCEPTED, self.rcpts.ok.len() as u64);
        report
            .counters
            .count(phase::RCPT_REJECTED, self.rcpts.rejected);
        if self.rcpts.unsure > 0 {
            report
                .counters
                .count(phase::RCPT_INDETERMINATE, self.rcpts.unsure as u64);
        }
        for f in self.fails.drain(..) {
            f.record(report);
        }
        match (outcome, report.sent.as_mut()) {
            (Outcome::Accepted, _) => {
                report.sent = Some(SentRecord {
                    seq,
                    accepted_us: report.done_at(),
                    outcome: SentOutcome::Accepted,
                    digest: self.built.digest,
                    size: report.counters.bytes as u32,
                    from: self.built.from,
                    rcpt_start: 0,
                    rcpt_len: 0,
                });
                report.rcpts.clear();
                report.rcpts.extend_from_slice(&self.rcpts.ok);
                let n = report.rcpts.len();
                for r in &mut report.rcpts[n - self.rcpts.unsure..] {
                    *r |= UNSURE_RCPT;
                }
            }
            (Outcome::Failed, Some(sent)) => {
                sent.outcome = SentOutcome::Indeterminate;
                report.counters.indeterminate += 1;
            }
            // Refused at the end, or broken before it: the server does not have it.
            _ => {
                report.sent = None;
                report.rcpts.clear();
            }
        }
    }

    /// The message's end of data (the final dot, or the last BDAT chunk) was written: from
    /// here the server may have it. Until the final reply says otherwise, it is in the
    /// report as unfinished, so a run that ends now still logs it; the envelope's
    /// recipients are all listed (which of them the server took is not known yet).
    fn end_of_data_sent(&self, report: &mut UnitReport) {
        report.sent = Some(SentRecord {
            seq: self.seq,
            accepted_us: report.now(),
            outcome: SentOutcome::Unfinished,
            digest: self.built.digest,
            size: self.built.len(&self.wire) as u32,
            from: self.built.from,
            rcpt_start: 0,
            rcpt_len: 0,
        });
        report.rcpts.clear();
        report.rcpts.extend_from_slice(&self.built.rcpts);
    }

    /// How many messages the current connection carries: fixed, or drawn from the range by
    /// a hash of (session, connection number), so runs repeat and no RNG is shared.
    fn connection_limit(&self) -> u32 {
        let r = self.s.messages_per_connection;
        if r.is_fixed() {
            return r.lo;
        }
        let z = crate::message::splitmix64((self.id as u64) << 32 ^ self.connections_made);
        r.lo + (z % u64::from(r.hi - r.lo + 1)) as u32
    }

    fn drop_connection(&mut self) {
        self.conn = None;
        self.on_conn = 0;
        // An envelope written on it went with it: the message goes again, whole.
        if let Some(n) = self.next.as_mut() {
            n.sent_at = None;
        }
    }

    /// Draws message `seq`'s envelope and builds it into `built` and `wire`: the message
    /// is `built.parts(wire)`, without its final dot.
    fn build(builder: &mut Builder, seq: u64, built: &mut Built, wire: &mut Vec<u8>) {
        builder.envelope(seq, built);
        let now_unix_us = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        wire.clear();
        builder.build_head(seq, now_unix_us, built, wire);
    }

    /// One message; `last` when it is the connection's last (QUIT may go behind it).
    /// `early`: the message was built with the previous one, and its envelope written
    /// behind it at that time when `Some(Some(t))`.
    async fn transaction(
        &mut self,
        seq: u64,
        last: bool,
        early: Option<Option<u64>>,
        report: &mut UnitReport,
    ) -> Outcome {
        if early.is_none() {
            Self::build(&mut self.builder, seq, &mut self.built, &mut self.wire);
        }
        let pipelining = self.s.pipelining && self.caps.pipelining;
        let Some(mut conn) = self.conn.take() else {
            return Outcome::Failed;
        };
        let written = early.flatten();
        let t_start = written.unwrap_or_else(|| report.now());
        let chunked = written.is_none()
            && pipelining
            && self.s.chunking
            && self.caps.chunking
            && !self.built.stuffed;
        let outcome = if chunked {
            // After a pipelined QUIT there is no transaction state left to reset.
            match self.chunked(&mut conn, last, report).await {
                Err(f) => {
                    let reset = !self.quit_behind;
                    self.refused(f, &mut conn, reset).await
                }
                Ok(false) => {
                    if !self.quit_behind {
                        rset(&mut conn).await;
                    }
                    Outcome::Rejected
                }
                Ok(true) => {
                    report.timed(phase::TRANSACTION, t_start);
                    Outcome::Accepted
                }
            }
        } else {
            self.with_data(&mut conn, pipelining, (t_start, written), last, report)
                .await
        };
        if !self.quit_behind && !self.fails.iter().any(|f| f.fatal) {
            self.conn = Some(conn);
        }
        outcome
    }

    /// The message through DATA: the envelope (pipelined or not; or already written
    /// behind the previous message at `written`), then the content.
    async fn with_data(
        &mut self,
        conn: &mut Connection,
        pipelining: bool,
        (t_start, written): (u64, Option<u64>),
        last: bool,
        report: &mut UnitReport,
    ) -> Outcome {
        let envelope = match written {
            Some(t) => {
                self.envelope_replies_group(conn, t, phase::DOT_ENVELOPE, report)
                    .await
            }
            None => self.envelope(conn, pipelining, report).await,
        };
        match envelope {
            Err(f) => self.refused(f, conn, true).await,
            Ok(false) => {
                rset(conn).await;
                Outcome::Rejected
            }
            Ok(true) => match self.body(conn, pipelining, last, report).await {
                Err(f) => self.refused(f, conn, false).await,
                Ok(accepted) => {
                    report.timed(phase::TRANSACTION, t_start);
                    if accepted {
                        Outcome::Accepted
                    } else {
                        Outcome::Rejected
                    }
                }
            },
        }
    }

    /// CHUNKING with PIPELINING (RFC 3030, RFC 2920): MAIL, RCPT.. and `BDAT n LAST`
    /// with the message in one write, then every reply: one round trip per message.
    /// Ok(true) when at least one recipient got the message; Ok(false) when none was
    /// accepted (their refusals are recorded). With `quit`, QUIT goes in the same write
    /// and its reply is read after the message's: the unit is done at the message's final
    /// reply, and `quit` is timed from there to QUIT's reply.
    async fn chunked(
        &mut self,
        conn: &mut Connection,
        quit: bool,
        report: &mut UnitReport,
    ) -> Result<bool, Failure> {
        let tf = |phase| move |e| Failure::transport(phase, e);
        let f = self.builder.factory();
        // Not dot-stuffed (or this would not be chunked): the message as it is.
        let len = self.built.len(&self.wire);
        let size = self.caps.size.is_some().then_some(len);
        let notify = self.s.dsn_notify.as_deref().filter(|_| self.caps.dsn);
        self.cmd.clear();
        cmd::mail(&mut self.cmd, &f.from.addrs[self.built.from as usize], size);
        for &r in &self.built.rcpts {
            cmd::rcpt(&mut self.cmd, &f.to.addrs[r as usize], notify);
        }
        cmd::bdat_last(&mut self.cmd, len);
        let t = report.start(phase::BDAT);
        let [head, body] = self.built.parts(&self.wire);
        let parts: &[&[u8]] = if quit {
            &[&self.cmd, head, body, cmd::QUIT]
        } else {
            &[&self.cmd, head, body]
        };
        conn.send_parts(parts).await.map_err(tf(phase::BDAT))?;
        self.end_of_data_sent(report);
        report.counters.bytes += len as u64;
        let mail_fail = self.envelope_replies(conn).await?;
        // The chunk's replies: LMTP gives one per accepted recipient, else one.
        let taken = mail_fail.is_none() && !self.rcpts.ok.is_empty();
        let replies = if self.s.lmtp && taken {
            self.rcpts.ok.len()
        } else {
            1
        };
        let mut delivered = 0usize;
        let mut kept = Vec::new();
        let mut refused = None;
        for i in 0..replies {
            let r = match read_reply(conn).await {
                Ok(r) => r,
                // LMTP: recipients already answered 2xx have the message; the rest are
                // unknown. Not a failed message, then, but one with unsure recipients.
                Err(e) if self.s.lmtp && taken && delivered > 0 => {
                    self.fails.push(Failure::transport(phase::BDAT, e));
                    let unsure = self.rcpts.ok[i..].to_vec();
                    self.rcpts.rejected += (i - delivered) as u64;
                    self.rcpts.unsure = unsure.len();
                    kept.extend(unsure);
                    self.rcpts.ok = kept;
                    report.timed(phase::BDAT, t);
                    return Ok(true);
                }
                Err(e) => return Err(tf(phase::BDAT)(e)),
            };
            if r.code / 100 == 2 && taken {
                delivered += 1;
                if self.s.lmtp {
                    kept.push(self.rcpts.ok[i]);
                }
            } else if r.code < 400 {
                // 354, or a message accepted without a recipient: the server mishandled
                // the group.
                return Err(unexpected(phase::BDAT, &r));
            } else if self.s.lmtp && taken {
                self.fails.push(refusal(phase::BDAT, &r));
            } else if taken {
                refused = Some(refusal(phase::BDAT, &r));
            }
        }
        report.timed(phase::BDAT, t);
        if quit {
            self.quit_read(conn, report).await;
        }
        if let Some(f) = mail_fail.or(refused) {
            return Err(f);
        }
        if self.s.lmtp && delivered < self.rcpts.ok.len() {
            self.rcpts.rejected += (self.rcpts.ok.len() - delivered) as u64;
            self.rcpts.ok = kept;
        }
        Ok(delivered > 0)
    }

    /// QUIT went behind the message whose final reply was just read: the unit is done
    /// now, and `quit` is timed from here to QUIT's reply.
    async fn quit_read(&mut self, conn: &mut Connection, report: &mut UnitReport) {
        report.done();
        self.quit_behind = true;
        let t = report.start(phase::QUIT);
        if read_reply(conn).await.is_ok() {
            report.timed(phase::QUIT, t);
        }
    }

    /// A failed envelope or body: a failure of the connection, or a refusal after which
    /// the envelope is reset.
    async fn refused(&mut self, f: Failure, conn: &mut Connection, reset: bool) -> Outcome {
        let (fatal, outcome) = (f.fatal, outcome_of(&f));
        self.fails.push(f);
        if fatal {
            return outcome;
        }
        if reset {
            rset(conn).await;
        }
        Outcome::Rejected
    }

    /// Sends the message and reads the final reply (LMTP: one per accepted recipient).
    /// Ok(true) when at least one recipient got the message. With PIPELINING across
    /// messages, the next message's envelope goes in the same write (when the engine has
    /// a next unit for this session at once), or QUIT does after a connection's last.
    async fn body(
        &mut self,
        conn: &mut Connection,
        pipelining: bool,
        last: bool,
        report: &mut UnitReport,
    ) -> Result<bool, Failure> {
        // Messages go with DATA on this connection (no CHUNKING): the next one would too.
        let across = self.s.across && pipelining && !(self.s.chunking && self.caps.chunking);
        let quit = across && last;
        let next = if across && !last {
            self.claim_next()
        } else {
            None
        };
        let t = report.start(phase::BODY);
        // The message from where its parts live, its final dot, and what goes behind it.
        let [head, body] = self.built.parts(&self.wire);
        let behind: &[u8] = match (next, quit) {
            (Some(_), _) => &self.cmd,
            (None, true) => cmd::QUIT,
            (None, false) => &[],
        };
        let sent = conn.send_parts(&[head, body, DOT, behind]).await;
        if let (Some(seq), Ok(())) = (next, &sent) {
            self.next = Some(Next {
                seq,
                sent_at: Some(t),
            });
        }
        sent.map_err(|e| Failure::transport(phase::BODY, e))?;
        self.end_of_data_sent(report);
        report.counters.bytes += (self.built.len(&self.wire) + DOT.len()) as u64;
        let lmtp = self.s.lmtp;
        let replies = if lmtp { self.rcpts.ok.len() } else { 1 };
        // LMTP recipients refused at the end (allocated only when one is).
        let mut refused = Vec::new();
        let mut failed = None;
        for i in 0..replies {
            let r = match read_reply(conn).await {
                Ok(r) => r,
                // LMTP: recipients already answered 2xx have the message; the rest are
                // unknown. Not a failed message, then, but one with unsure recipients
                // (moved to the end of `ok`, in their order).
                Err(e) if lmtp && i > refused.len() => {
                    self.fails.push(Failure::transport(phase::BODY, e));
                    report.timed(phase::BODY, t);
                    self.rcpts.rejected += refused.len() as u64;
                    self.rcpts.unsure = replies - i;
                    let mut k = 0;
                    self.rcpts.ok.retain(|_| {
                        k += 1;
                        !refused.contains(&(k - 1))
                    });
                    return Ok(true);
                }
                Err(e) => return Err(Failure::transport(phase::BODY, e)),
            };
            if r.is_positive() {
                continue;
            } else if lmtp {
                self.fails.push(refusal(phase::BODY, &r));
                refused.push(i);
            } else {
                failed = Some(refusal(phase::BODY, &r));
            }
        }
        report.timed(phase::BODY, t);
        if quit && !failed.as_ref().is_some_and(|f| f.fatal) {
            self.quit_read(conn, report).await;
        }
        if let Some(f) = failed {
            return Err(f);
        }
        if !refused.is_empty() {
            self.rcpts.rejected += refused.len() as u64;
            let mut i = 0;
            self.rcpts.ok.retain(|_| {
                i += 1;
                !refused.contains(&(i - 1))
            });
        }
        Ok(!self.rcpts.ok.is_empty())
    }
}

impl Session {
    /// Claims the session's next unit from the engine, if it is due at once, and builds
    /// that message into `next_built`/`next_wire` with its MAIL, RCPT.. and DATA in `cmd`,
    /// to go behind the current message's content. The claimed unit is the session's
    /// next whatever happens to this write (`next` records it with `sent_at: None` until
    /// the write succeeds).
    fn claim_next(&mut self) -> Option<u64> {
        let claimed = self.ahead.claim()?;
        let seq = self
            .s
            .shard
            .as_ref()
            .map_or(claimed, |s| s.global_seq(claimed));
        Self::build(
            &mut self.builder,
            seq,
            &mut self.next_built,
            &mut self.next_wire,
        );
        self.next = Some(Next { seq, sent_at: None });
        let f = self.builder.factory();
        let size = self
            .caps
            .size
            .is_some()
            .then(|| self.next_built.len(&self.next_wire) + DOT.len());
        let notify = self.s.dsn_notify.as_deref().filter(|_| self.caps.dsn);
        self.cmd.clear();
        cmd::mail(
            &mut self.cmd,
            &f.from.addrs[self.next_built.from as usize],
            size,
        );
        for &r in &self.next_built.rcpts {
            cmd::rcpt(&mut self.cmd, &f.to.addrs[r as usize], notify);
        }
        self.cmd.extend_from_slice(cmd::DATA);
        Some(seq)
    }
}

/// A failure reading the replies to an envelope written behind the previous message's
/// content: when the server said nothing or hung up, say what may be the cause.
fn behind(mut f: Failure) -> Failure {
    if [ErrorKind::TIMEOUT, ErrorKind::CLOSED].contains(&f.kind) {
        f.phase = phase::DOT_ENVELOPE;
        f.text = format!(
            "{} waiting for the replies to MAIL/RCPT/DATA written behind the previous message's end (a server that discards commands pipelined after a message: use --pipelining conservative)",
            f.text
        );
    }
    f
}

/// Ends a DATA that should not carry a message: an empty one.
async fn abort_data(conn: &mut Connection) -> Result<(), Failure> {
    let tf = |e| Failure::transport(phase::BODY, e);
    conn.send(b".\r\n").await.map_err(tf)?;
    read_reply(conn).await.map_err(tf)?;
    Ok(())
}

async fn rset(conn: &mut Connection) {
    if conn.send(cmd::RSET).await.is_ok() {
        let _ = read_reply(conn).await;
    }
}

impl Driver for Session {
    const WORDS: crate::results::UnitWords =
        crate::results::UnitWords::new("messages", "msg/s", "sent", &[phase::TRANSACTION], true);
    const COUNTERS: &'static [crate::metrics::Counter] = &[
        phase::RCPT_ACCEPTED,
        phase::RCPT_REJECTED,
        phase::RCPT_INDETERMINATE,
    ];
    const PHASES: &'static [Phase] = &[
        Phase::CONNECT,
        Phase::TLS,
        phase::BANNER,
        phase::EHLO,
        phase::LHLO,
        phase::STARTTLS,
        phase::AUTH,
        phase::MAIL,
        phase::RCPT,
        phase::DATA,
        phase::ENVELOPE,
        phase::DOT_ENVELOPE,
        phase::BDAT,
        phase::BODY,
        phase::QUIT,
        phase::TRANSACTION,
    ];

    async fn run_one(&mut self, seq: u64, report: &mut UnitReport) -> Outcome {
        let seq = self.s.shard.as_ref().map_or(seq, |s| s.global_seq(seq));
        self.send(seq, report).await
    }

    fn ahead(&mut self, ahead: Ahead) {
        self.ahead = ahead;
    }

    fn idle(&mut self) {
        if let Some(c) = self.conn.as_mut() {
            c.idle();
        }
    }

    async fn finish(&mut self, report: &mut UnitReport) {
        if let Some(us) = self.close(report).await {
            report.record(phase::QUIT, us);
        }
    }
}
