//! The SMTP/LMTP session driver: runs the protocol over a `Connection`, times every
//! phase, and commits outcomes to the recorder in one lock per message.
//!
//! A 4xx is not a crash: a rejected transaction is followed by RSET and the session goes
//! on; a 421 or any transport failure drops the connection and the next message opens a
//! new one, as a real MTA would.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};

use crate::message::{Builder, Built};
use crate::metrics::{ErrorKey, ErrorKind, Phase, Recorder, SentRecord};
use crate::proto::smtp::reply::{Capabilities, Reply};
use crate::transport::{Clock, Connection, TransportError};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TlsMode {
    Plain,
    Starttls,
    Implicit,
}

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
    pub addr: SocketAddr,
    pub server_name: rustls::pki_types::ServerName<'static>,
    pub lmtp: bool,
    pub tls: TlsMode,
    /// With `TlsMode::Plain`, the share of connections that use STARTTLS (0..=100).
    pub tls_percent: u8,
    pub tls_config: Option<Arc<rustls::ClientConfig>>,
    pub auth: Option<(AuthMech, Vec<(String, String)>)>,
    pub pipelining: bool,
    pub bind: Vec<IpAddr>,
    pub helo: String,
    pub timeout: Duration,
    /// Messages per connection, drawn per connection from the range; 0 = unlimited.
    pub messages_per_connection: crate::units::Range<u32>,
    pub clock: Clock,
    pub recorder: Arc<Recorder>,
    /// DSN NOTIFY for RCPT (e.g. "SUCCESS,FAILURE") when the server offers DSN.
    pub dsn_notify: Option<String>,
}

/// One failure, where it happened.
struct Fail {
    phase: Phase,
    kind: ErrorKind,
    code: u16,
    enhanced: Option<crate::proto::smtp::reply::Enhanced>,
    text: String,
    sample: String,
    /// The connection is unusable afterwards.
    fatal: bool,
}

impl Fail {
    fn transport(phase: Phase, e: TransportError) -> Self {
        let text = e.to_string();
        Fail {
            phase,
            kind: e.kind(),
            code: 0,
            enhanced: None,
            text: crate::proto::smtp::reply::normalize(&text),
            sample: text,
            fatal: true,
        }
    }

    fn reply(phase: Phase, r: &Reply<'_>) -> Self {
        Fail {
            phase,
            kind: if r.is_transient() {
                ErrorKind::Transient
            } else {
                ErrorKind::Permanent
            },
            code: r.code,
            enhanced: r.enhanced(),
            text: r.normalized_text(),
            sample: String::from_utf8_lossy(r.raw).trim_end().to_string(),
            fatal: r.code == 421,
        }
    }

    /// A reply that is not what the protocol allows at this point (e.g. 354 to MAIL).
    fn unexpected(phase: Phase, r: &Reply<'_>) -> Self {
        Fail {
            kind: ErrorKind::Protocol,
            fatal: true,
            ..Fail::reply(phase, r)
        }
    }

    fn key(&self) -> ErrorKey {
        ErrorKey {
            phase: self.phase,
            kind: self.kind,
            code: self.code,
            enhanced: self.enhanced,
            text: self.text.clone(),
        }
    }
}

/// What happened to one message.
enum Outcome {
    Accepted,
    Rejected,
    Failed,
}

/// Per-message scratch, reused.
struct Scratch {
    timings: Vec<(Phase, u64)>,
    fails: Vec<Fail>,
    rcpt_ok: Vec<u32>,
    rcpt_rejected: u64,
    bytes: u64,
    connections: u64,
    tls_connections: u64,
    connect_failures: u64,
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
    x: Scratch,
    last_error: Option<String>,
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
            built: Built {
                digest: [0; 16],
                from: 0,
                rcpts: Vec::new(),
            },
            wire: Vec::with_capacity(4096),
            cmd: Vec::with_capacity(512),
            last_error: None,
            x: Scratch {
                timings: Vec::with_capacity(16),
                fails: Vec::new(),
                rcpt_ok: Vec::new(),
                rcpt_rejected: 0,
                bytes: 0,
                connections: 0,
                tls_connections: 0,
                connect_failures: 0,
            },
        }
    }

    /// Sends message `seq`, scheduled at `scheduled_us` (run clock). `open` says whether
    /// the schedule is an open-model arrival (so lag is meaningful).
    pub async fn send(&mut self, seq: u64, scheduled_us: u64, open: bool) {
        let start_us = self.s.clock.now_us();
        let x = &mut self.x;
        x.timings.clear();
        x.fails.clear();
        x.rcpt_ok.clear();
        x.rcpt_rejected = 0;
        x.bytes = 0;
        x.connections = 0;
        x.tls_connections = 0;
        x.connect_failures = 0;
        let lag = start_us.saturating_sub(scheduled_us);
        if open {
            x.timings.push((Phase::Lag, lag));
        }

        let outcome = match self.ensure_connected().await {
            Err(f) => {
                self.x.fails.push(f);
                Outcome::Failed
            }
            Ok(()) => self.transaction(seq).await,
        };
        let end_us = self.s.clock.now_us();
        if matches!(outcome, Outcome::Accepted | Outcome::Rejected) {
            self.x
                .timings
                .push((Phase::Response, end_us.saturating_sub(scheduled_us)));
        }
        if self.x.fails.iter().any(|f| f.fatal) {
            self.drop_connection();
        } else {
            self.on_conn += 1;
            let mpc = self.connection_limit();
            if mpc > 0 && self.on_conn >= mpc {
                // Timed with the message, so it is committed in the same lock and
                // `spate ping` sees it.
                if let Some(us) = self.close().await {
                    self.x.timings.push((Phase::Quit, us));
                }
            }
        }
        self.commit(seq, outcome, end_us, open && lag > 10_000);
    }

    /// How many messages the current connection carries: fixed, or drawn from the range by
    /// a hash of (session, connection number), so runs repeat and no RNG is shared.
    fn connection_limit(&self) -> u32 {
        let r = self.s.messages_per_connection;
        if r.is_fixed() {
            return r.lo;
        }
        let mut z = (self.id as u64) << 32 ^ self.connections_made;
        // splitmix64 finalizer
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        r.lo + (z % u64::from(r.hi - r.lo + 1)) as u32
    }

    /// The phase timings of the last message (for `spate ping`).
    pub fn last_timings(&self) -> &[(Phase, u64)] {
        &self.x.timings
    }

    /// The first error reply or failure of the last message, verbatim.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }

    fn commit(&mut self, seq: u64, outcome: Outcome, end_us: u64, late: bool) {
        self.last_error = self.x.fails.first().map(|f| f.sample.clone());
        let x = &mut self.x;
        let built = &self.built;
        self.s.recorder.with(self.id, |sh| {
            let c = &mut sh.counters;
            c.attempted += 1;
            match outcome {
                Outcome::Accepted => c.accepted += 1,
                Outcome::Rejected => c.rejected += 1,
                Outcome::Failed => c.failed += 1,
            }
            c.rcpt_accepted += x.rcpt_ok.len() as u64;
            c.rcpt_rejected += x.rcpt_rejected;
            c.bytes += x.bytes;
            c.connections += x.connections;
            c.tls_connections += x.tls_connections;
            c.connect_failures += x.connect_failures;
            c.late += u64::from(late);
            for &(p, us) in &x.timings {
                sh.record(p, us);
            }
            for f in x.fails.drain(..) {
                let key = f.key();
                sh.error(key, || f.sample);
            }
            if matches!(outcome, Outcome::Accepted) {
                sh.sent(
                    SentRecord {
                        seq,
                        accepted_us: end_us,
                        digest: built.digest,
                        size: x.bytes as u32,
                        from: built.from,
                        rcpt_start: 0,
                        rcpt_len: 0,
                    },
                    &x.rcpt_ok,
                );
            }
        });
    }

    fn drop_connection(&mut self) {
        self.conn = None;
        self.on_conn = 0;
    }

    /// Sends QUIT and closes at the end of the run (outside any message).
    pub async fn quit(&mut self) {
        if let Some(us) = self.close().await {
            self.s
                .recorder
                .with(self.id, |sh| sh.record(Phase::Quit, us));
        }
    }

    /// Sends QUIT and closes; returns the QUIT round trip when it completed.
    async fn close(&mut self) -> Option<u64> {
        self.on_conn = 0;
        let mut conn = self.conn.take()?;
        let t = self.s.clock.now_us();
        let ok = match conn.send(b"QUIT\r\n").await {
            Ok(()) => conn.read_reply().await.is_ok(),
            Err(_) => false,
        };
        let us = self.s.clock.now_us() - t;
        conn.shutdown().await;
        ok.then_some(us)
    }

    fn timed(&mut self, phase: Phase, since: u64) {
        let now = self.s.clock.now_us();
        self.x.timings.push((phase, now.saturating_sub(since)));
    }

    async fn ensure_connected(&mut self) -> Result<(), Fail> {
        if self.conn.is_some() {
            return Ok(());
        }
        let s = self.s.clone();
        let bind = if s.bind.is_empty() {
            None
        } else {
            Some(s.bind[(self.connections_made as usize + self.id) % s.bind.len()])
        };
        self.connections_made += 1;
        let t = s.clock.now_us();
        let mut conn = match Connection::connect(s.addr, bind, s.timeout).await {
            Ok(c) => c,
            Err(e) => {
                self.x.connect_failures += 1;
                return Err(Fail::transport(Phase::Connect, e));
            }
        };
        self.timed(Phase::Connect, t);
        self.x.connections += 1;
        let tls_config = || {
            s.tls_config
                .clone()
                .expect("TLS config is built whenever TLS is planned")
        };
        if s.tls == TlsMode::Implicit {
            let t = s.clock.now_us();
            conn.start_tls(tls_config(), s.server_name.clone())
                .await
                .map_err(|e| Fail::transport(Phase::Tls, e))?;
            self.timed(Phase::Tls, t);
            self.x.tls_connections += 1;
        }
        let t = s.clock.now_us();
        expect_reply(&mut conn, Phase::Banner, 220).await?;
        self.timed(Phase::Banner, t);
        self.caps = self.hello(&mut conn).await?;
        let want_starttls = match s.tls {
            TlsMode::Starttls => true,
            TlsMode::Plain => {
                s.tls_percent > 0
                    && (self.connections_made.wrapping_mul(37) + self.id as u64) % 100
                        < u64::from(s.tls_percent)
            }
            TlsMode::Implicit => false,
        };
        if want_starttls {
            let t = s.clock.now_us();
            conn.send(b"STARTTLS\r\n")
                .await
                .map_err(|e| Fail::transport(Phase::Starttls, e))?;
            expect_reply(&mut conn, Phase::Starttls, 220).await?;
            self.timed(Phase::Starttls, t);
            let t = s.clock.now_us();
            conn.start_tls(tls_config(), s.server_name.clone())
                .await
                .map_err(|e| Fail::transport(Phase::Tls, e))?;
            self.timed(Phase::Tls, t);
            self.x.tls_connections += 1;
            self.caps = self.hello(&mut conn).await?;
        }
        if let Some((mech, creds)) = &s.auth {
            let (user, pass) = &creds[self.id % creds.len()];
            let t = s.clock.now_us();
            auth(&mut conn, &self.caps, *mech, user, pass).await?;
            self.timed(Phase::Auth, t);
        }
        self.conn = Some(conn);
        self.on_conn = 0;
        Ok(())
    }

    async fn hello(&mut self, conn: &mut Connection) -> Result<Capabilities, Fail> {
        self.cmd.clear();
        self.cmd
            .extend_from_slice(if self.s.lmtp { b"LHLO " } else { b"EHLO " });
        self.cmd.extend_from_slice(self.s.helo.as_bytes());
        self.cmd.extend_from_slice(b"\r\n");
        let t = self.s.clock.now_us();
        conn.send(&self.cmd)
            .await
            .map_err(|e| Fail::transport(Phase::Ehlo, e))?;
        let caps = {
            let r = conn
                .read_reply()
                .await
                .map_err(|e| Fail::transport(Phase::Ehlo, e))?;
            if r.code != 250 {
                return Err(Fail {
                    fatal: true,
                    ..Fail::reply(Phase::Ehlo, &r)
                });
            }
            Capabilities::from_ehlo(&r)
        };
        self.timed(Phase::Ehlo, t);
        Ok(caps)
    }

    async fn transaction(&mut self, seq: u64) -> Outcome {
        self.builder.envelope(&mut self.built);
        let now_unix_us = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        self.wire.clear();
        self.builder
            .build(seq, now_unix_us, &mut self.built, &mut self.wire);
        let pipelining = self.s.pipelining && self.caps.pipelining;
        let Some(mut conn) = self.conn.take() else {
            return Outcome::Failed;
        };
        let t_start = self.s.clock.now_us();
        let result = self.envelope(&mut conn, pipelining).await;
        let outcome = match result {
            Err(f) => {
                let fatal = f.fatal;
                self.x.fails.push(f);
                if fatal {
                    return Outcome::Failed;
                }
                self.rset(&mut conn).await;
                Outcome::Rejected
            }
            Ok(false) => {
                self.rset(&mut conn).await;
                Outcome::Rejected
            }
            Ok(true) => match self.body(&mut conn).await {
                Err(f) => {
                    let fatal = f.fatal;
                    self.x.fails.push(f);
                    if fatal {
                        return Outcome::Failed;
                    }
                    Outcome::Rejected
                }
                Ok(accepted) => {
                    self.timed(Phase::Transaction, t_start);
                    if accepted {
                        Outcome::Accepted
                    } else {
                        Outcome::Rejected
                    }
                }
            },
        };
        if !self.x.fails.iter().any(|f| f.fatal) {
            self.conn = Some(conn);
        }
        outcome
    }

    /// MAIL, RCPTs, DATA. Ok(true) when DATA got 354 with at least one recipient.
    async fn envelope(&mut self, conn: &mut Connection, pipelining: bool) -> Result<bool, Fail> {
        let f = self.builder.factory();
        let from = &f.from.addrs[self.built.from as usize];
        let size_param = self.caps.size.is_some();
        let dsn = self.caps.dsn && self.s.dsn_notify.is_some();
        self.cmd.clear();
        let mut mail_len = 0;
        {
            use std::io::Write;
            let c = &mut self.cmd;
            let _ = write!(c, "MAIL FROM:<{from}>");
            if size_param {
                let _ = write!(c, " SIZE={}", self.wire.len());
            }
            c.extend_from_slice(b"\r\n");
            if !pipelining {
                mail_len = c.len();
            }
            for &r in &self.built.rcpts {
                let _ = write!(c, "RCPT TO:<{}>", f.to.addrs[r as usize]);
                if dsn {
                    let _ = write!(c, " NOTIFY={}", self.s.dsn_notify.as_deref().unwrap_or(""));
                }
                c.extend_from_slice(b"\r\n");
            }
            c.extend_from_slice(b"DATA\r\n");
        }
        let cmd = std::mem::take(&mut self.cmd);
        let result = if pipelining {
            self.pipelined(conn, &cmd).await
        } else {
            self.lockstep(conn, &cmd, mail_len).await
        };
        self.cmd = cmd;
        result
    }

    async fn pipelined(&mut self, conn: &mut Connection, cmd: &[u8]) -> Result<bool, Fail> {
        let t = self.s.clock.now_us();
        conn.send(cmd)
            .await
            .map_err(|e| Fail::transport(Phase::Envelope, e))?;
        let mut mail_fail = None;
        {
            let r = conn
                .read_reply()
                .await
                .map_err(|e| Fail::transport(Phase::Mail, e))?;
            if !r.is_positive() {
                mail_fail = Some(Fail::reply(Phase::Mail, &r));
            }
        }
        for i in 0..self.built.rcpts.len() {
            let r = conn
                .read_reply()
                .await
                .map_err(|e| Fail::transport(Phase::Rcpt, e))?;
            if r.is_positive() {
                self.x.rcpt_ok.push(self.built.rcpts[i]);
            } else {
                self.x.rcpt_rejected += 1;
                if mail_fail.is_none() {
                    let f = Fail::reply(Phase::Rcpt, &r);
                    self.x.fails.push(f);
                }
            }
        }
        let data_ok = {
            let r = conn
                .read_reply()
                .await
                .map_err(|e| Fail::transport(Phase::Data, e))?;
            match r.code {
                354 => true,
                c if c >= 400 => {
                    if mail_fail.is_none() && !self.x.rcpt_ok.is_empty() {
                        self.x.fails.push(Fail::reply(Phase::Data, &r));
                    }
                    false
                }
                _ => return Err(Fail::unexpected(Phase::Data, &r)),
            }
        };
        self.timed(Phase::Envelope, t);
        if let Some(f) = mail_fail {
            if data_ok {
                self.abort_data(conn).await?;
            }
            return Err(f);
        }
        if data_ok && self.x.rcpt_ok.is_empty() {
            // RFC 2920: DATA was accepted although no recipient was; send an empty
            // message to get back to a known state.
            self.abort_data(conn).await?;
            return Ok(false);
        }
        Ok(data_ok)
    }

    async fn abort_data(&mut self, conn: &mut Connection) -> Result<(), Fail> {
        conn.send(b".\r\n")
            .await
            .map_err(|e| Fail::transport(Phase::Body, e))?;
        conn.read_reply()
            .await
            .map_err(|e| Fail::transport(Phase::Body, e))?;
        Ok(())
    }

    async fn lockstep(
        &mut self,
        conn: &mut Connection,
        cmd: &[u8],
        mail_len: usize,
    ) -> Result<bool, Fail> {
        let t = self.s.clock.now_us();
        conn.send(&cmd[..mail_len])
            .await
            .map_err(|e| Fail::transport(Phase::Mail, e))?;
        {
            let r = conn
                .read_reply()
                .await
                .map_err(|e| Fail::transport(Phase::Mail, e))?;
            if !r.is_positive() {
                return Err(Fail::reply(Phase::Mail, &r));
            }
        }
        self.timed(Phase::Mail, t);
        let mut rest = &cmd[mail_len..];
        for i in 0..self.built.rcpts.len() {
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .map_or(rest.len(), |p| p + 1);
            let t = self.s.clock.now_us();
            conn.send(&rest[..end])
                .await
                .map_err(|e| Fail::transport(Phase::Rcpt, e))?;
            rest = &rest[end..];
            let r = conn
                .read_reply()
                .await
                .map_err(|e| Fail::transport(Phase::Rcpt, e))?;
            if r.is_positive() {
                self.x.rcpt_ok.push(self.built.rcpts[i]);
            } else {
                self.x.rcpt_rejected += 1;
                let f = Fail::reply(Phase::Rcpt, &r);
                if f.fatal {
                    return Err(f);
                }
                self.x.fails.push(f);
            }
            self.timed(Phase::Rcpt, t);
        }
        if self.x.rcpt_ok.is_empty() {
            return Ok(false);
        }
        let t = self.s.clock.now_us();
        conn.send(rest)
            .await
            .map_err(|e| Fail::transport(Phase::Data, e))?;
        let r = conn
            .read_reply()
            .await
            .map_err(|e| Fail::transport(Phase::Data, e))?;
        match r.code {
            354 => {}
            c if c >= 400 => return Err(Fail::reply(Phase::Data, &r)),
            _ => return Err(Fail::unexpected(Phase::Data, &r)),
        }
        self.timed(Phase::Data, t);
        Ok(true)
    }

    /// Sends the message and reads the final reply (LMTP: one per accepted recipient).
    /// Ok(true) when at least one recipient got the message.
    async fn body(&mut self, conn: &mut Connection) -> Result<bool, Fail> {
        let t = self.s.clock.now_us();
        conn.send(&self.wire)
            .await
            .map_err(|e| Fail::transport(Phase::Body, e))?;
        self.x.bytes += self.wire.len() as u64;
        let replies = if self.s.lmtp { self.x.rcpt_ok.len() } else { 1 };
        let mut delivered = Vec::with_capacity(replies);
        for i in 0..replies {
            let r = conn
                .read_reply()
                .await
                .map_err(|e| Fail::transport(Phase::Body, e))?;
            if r.is_positive() {
                delivered.push(i);
            } else {
                let f = Fail::reply(Phase::Body, &r);
                if !self.s.lmtp {
                    self.timed(Phase::Body, t);
                    return Err(f);
                }
                self.x.fails.push(f);
            }
        }
        self.timed(Phase::Body, t);
        if self.s.lmtp && delivered.len() < self.x.rcpt_ok.len() {
            let rejected = self.x.rcpt_ok.len() - delivered.len();
            self.x.rcpt_rejected += rejected as u64;
            let kept: Vec<u32> = delivered.iter().map(|&i| self.x.rcpt_ok[i]).collect();
            self.x.rcpt_ok = kept;
        }
        Ok(!self.x.rcpt_ok.is_empty())
    }

    async fn rset(&mut self, conn: &mut Connection) {
        if conn.send(b"RSET\r\n").await.is_ok() {
            let _ = conn.read_reply().await;
        }
    }
}

/// Reads one reply; anything but `code` ends the connection with a failure of `phase`.
async fn expect_reply(conn: &mut Connection, phase: Phase, code: u16) -> Result<(), Fail> {
    let r = conn
        .read_reply()
        .await
        .map_err(|e| Fail::transport(phase, e))?;
    if r.code == code {
        Ok(())
    } else {
        Err(Fail {
            fatal: true,
            ..Fail::reply(phase, &r)
        })
    }
}

async fn auth(
    conn: &mut Connection,
    caps: &Capabilities,
    mech: AuthMech,
    user: &str,
    pass: &str,
) -> Result<(), Fail> {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mech = match mech {
        AuthMech::Auto if caps.auth_cram_md5 => AuthMech::CramMd5,
        AuthMech::Auto if caps.auth_plain || !caps.auth_login => AuthMech::Plain,
        AuthMech::Auto => AuthMech::Login,
        m => m,
    };
    let tf = |e| Fail::transport(Phase::Auth, e);
    let expect = |r: &Reply<'_>, code: u16| -> Result<(), Fail> {
        if r.code == code {
            Ok(())
        } else {
            Err(Fail {
                fatal: true,
                ..Fail::reply(Phase::Auth, r)
            })
        }
    };
    match mech {
        AuthMech::Plain | AuthMech::Auto => {
            let token = b64.encode(format!("\0{user}\0{pass}"));
            conn.send(format!("AUTH PLAIN {token}\r\n").as_bytes())
                .await
                .map_err(tf)?;
        }
        AuthMech::Login => {
            conn.send(b"AUTH LOGIN\r\n").await.map_err(tf)?;
            expect(&conn.read_reply().await.map_err(tf)?, 334)?;
            conn.send(format!("{}\r\n", b64.encode(user)).as_bytes())
                .await
                .map_err(tf)?;
            expect(&conn.read_reply().await.map_err(tf)?, 334)?;
            conn.send(format!("{}\r\n", b64.encode(pass)).as_bytes())
                .await
                .map_err(tf)?;
        }
        AuthMech::CramMd5 => {
            conn.send(b"AUTH CRAM-MD5\r\n").await.map_err(tf)?;
            let challenge = {
                let r = conn.read_reply().await.map_err(tf)?;
                expect(&r, 334)?;
                let text = r.lines().next().unwrap_or_default().to_vec();
                b64.decode(text.trim_ascii()).unwrap_or_default()
            };
            let mut mac = Hmac::<md5::Md5>::new_from_slice(pass.as_bytes())
                .expect("HMAC accepts any key length");
            mac.update(&challenge);
            let digest: String = mac
                .finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            conn.send(format!("{}\r\n", b64.encode(format!("{user} {digest}"))).as_bytes())
                .await
                .map_err(tf)?;
        }
    }
    let r = conn.read_reply().await.map_err(tf)?;
    expect(&r, 235)
}

impl crate::engine::Driver for Session {
    async fn run_one(&mut self, seq: u64, scheduled_us: u64, open: bool) {
        self.send(seq, scheduled_us, open).await
    }

    async fn finish(&mut self) {
        self.quit().await
    }
}
