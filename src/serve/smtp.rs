//! The SMTP / submission / LMTP session (RFC 5321, RFC 6409, RFC 2033), with PIPELINING,
//! CHUNKING, STARTTLS, AUTH and the fault hooks. Commands are parsed by
//! `proto::smtp::command`, the body by `proto::smtp::data`.

use std::fmt::Write as _;

use super::conn::{give_body, take_body, Conn, ConnError};
use super::faults::{FaultKind, FaultPoint, FaultSession, Injected};
use super::shared::Shared;
use super::store::StoreError;
use crate::proto::sasl;
use crate::proto::smtp::command::{self, Command, MailParams};
use crate::proto::smtp::data::{BareLf, DataDecoder};

/// Longest command line accepted (RFC 5321 says 512; AUTH lines may be longer).
pub const MAX_LINE: usize = 4096;
/// Longest SASL response line (RFC 4954 section 4).
const MAX_AUTH_LINE: usize = 12288;
/// Bad commands tolerated before the session is closed.
const MAX_ERRORS: u32 = 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Smtp,
    /// Port 587: MAIL requires AUTH.
    Submission,
    Lmtp,
}

struct Transaction {
    rcpts: Vec<String>,
    /// BDAT chunks so far (None until the first BDAT).
    chunks: Option<Vec<u8>>,
    chunk_bytes: u64,
}

struct Session<'a> {
    conn: &'a mut Conn,
    sh: &'a Shared,
    mode: Mode,
    faults: FaultSession<'a>,
    greeted: bool,
    user: Option<String>,
    tx: Option<Transaction>,
    /// The recipient list of the last transaction, emptied, for the next one.
    spare_rcpts: Vec<String>,
    errors: u32,
    /// Command lines read on this connection (`--close-after`).
    commands: u32,
}

/// Runs one session until QUIT, an error, an idle timeout or shutdown.
pub(crate) async fn run(
    conn: &mut Conn,
    sh: &Shared,
    mode: Mode,
    conn_no: u64,
) -> Result<(), ConnError> {
    let mut s = Session {
        conn,
        sh,
        mode,
        faults: sh.faults.session(conn_no),
        greeted: false,
        user: None,
        tx: None,
        spare_rcpts: Vec::new(),
        errors: 0,
        commands: 0,
    };
    let r = s.serve().await;
    match &r {
        Err(ConnError::Idle) => s.reply(421, "4.4.2", "Idle timeout, closing").await?,
        Err(ConnError::Shutdown) => {
            s.reply(421, "4.3.2", "Service shutting down, closing")
                .await?
        }
        _ => {}
    }
    r
}

impl Session<'_> {
    /// Queues one reply line (the tarpit applies to every reply).
    async fn reply(&mut self, code: u16, enhanced: &str, text: &str) -> Result<(), ConnError> {
        self.replying(code).await?;
        self.queue_reply(code, enhanced, format_args!("{text}"));
        Ok(())
    }

    /// What every reply goes through before it is queued: the tarpit, the count.
    async fn replying(&mut self, code: u16) -> Result<(), ConnError> {
        if let Some(d) = self.faults.tarpit() {
            self.conn.pause(d).await?;
        }
        self.sh.stats.reply(code);
        Ok(())
    }

    /// Formats a reply line straight into the connection's output: no string per reply.
    /// After [`Session::replying`].
    fn queue_reply(&mut self, code: u16, enhanced: &str, text: std::fmt::Arguments<'_>) {
        if enhanced.is_empty() {
            self.conn.queue_fmt(format_args!("{code} {text}\r\n"));
        } else {
            self.conn
                .queue_fmt(format_args!("{code} {enhanced} {text}\r\n"));
        }
    }

    /// Applies the faults drawn for this phase. `Ok(true)` means a failure reply was sent
    /// instead of the normal one; a drop closes the connection without a word.
    async fn fault(&mut self, phase: FaultPoint) -> Result<bool, ConnError> {
        let (delay, what) = self.faults.draw(phase, &self.sh.stats);
        self.injected(phase, delay, what).await
    }

    /// Applies a fault drawn for `phase`, as [`Session::fault`].
    async fn injected(
        &mut self,
        phase: FaultPoint,
        delay: std::time::Duration,
        what: Injected,
    ) -> Result<bool, ConnError> {
        self.conn.pause(delay).await?;
        match what {
            Injected::None => Ok(false),
            Injected::Drop => Err(ConnError::Dropped),
            Injected::Fail(code) => {
                let enhanced = if code < 500 { "4.3.0" } else { "5.3.0" };
                let text = format!("Injected fault ({})", phase.name());
                self.reply(code, enhanced, &text).await?;
                if code == 421 {
                    self.conn.flush().await?;
                    return Err(ConnError::Closed);
                }
                Ok(true)
            }
        }
    }

    async fn serve(&mut self) -> Result<(), ConnError> {
        if self.fault(FaultPoint::Connect).await? {
            // A refused greeting ends the session (RFC 5321 3.1 allows waiting for QUIT;
            // closing is what load tests need to see).
            self.conn.flush().await?;
            return Ok(());
        }
        let banner = format!(
            "{} ESMTP spate{}",
            self.sh.hostname,
            if self.mode == Mode::Lmtp { " LMTP" } else { "" }
        );
        self.reply(220, "", &banner).await?;
        // One buffer for every command line of the session.
        let mut line = Vec::new();
        loop {
            match self.conn.read_line_into(MAX_LINE, &mut line).await {
                Ok(()) => {}
                Err(ConnError::LineTooLong) => {
                    self.reply(500, "5.5.2", "Line too long").await?;
                    self.bad_command().await?;
                    continue;
                }
                Err(e) => return Err(e),
            };
            self.commands += 1;
            if self
                .sh
                .faults
                .close_after
                .is_some_and(|n| self.commands > n)
            {
                self.sh.stats.fault(FaultPoint::Connect, FaultKind::Close);
                self.reply(421, "4.7.0", "Closing after too many commands (injected)")
                    .await?;
                // Pipelined commands may be unread: a plain close would reset the
                // connection and could destroy the 421 before the client reads it.
                self.conn.linger(std::time::Duration::from_secs(2)).await;
                return Err(ConnError::Closed);
            }
            match command::parse(&line) {
                Ok(Command::Quit) => {
                    self.reply(221, "2.0.0", "Bye").await?;
                    self.conn.flush().await?;
                    return Ok(());
                }
                Ok(cmd) => self.command(cmd).await?,
                Err(e) => {
                    let (code, enhanced) = e.code();
                    let text = match &e {
                        command::CommandError::Unknown => "Command unrecognized".to_string(),
                        other => capitalize(&other.to_string()),
                    };
                    self.reply(code, enhanced, &text).await?;
                    self.bad_command().await?;
                }
            }
        }
    }

    async fn bad_command(&mut self) -> Result<(), ConnError> {
        self.errors += 1;
        if self.errors >= MAX_ERRORS {
            self.reply(421, "4.7.0", "Too many errors, closing").await?;
            self.conn.flush().await?;
            return Err(ConnError::Closed);
        }
        Ok(())
    }

    async fn command(&mut self, cmd: Command) -> Result<(), ConnError> {
        match cmd {
            Command::Ehlo(_) | Command::Helo(_) if self.mode == Mode::Lmtp => {
                self.reply(500, "5.5.1", "This is LMTP: use LHLO").await
            }
            Command::Lhlo(_) if self.mode != Mode::Lmtp => {
                self.reply(500, "5.5.1", "Command unrecognized").await
            }
            Command::Ehlo(name) | Command::Lhlo(name) => self.ehlo(&name, true).await,
            Command::Helo(name) => self.ehlo(&name, false).await,
            Command::Starttls => self.starttls().await,
            Command::Auth { mechanism, initial } => self.auth(&mechanism, initial).await,
            Command::Mail { from, params } => self.mail(&from, &params).await,
            Command::Rcpt { to, .. } => self.rcpt(to).await,
            Command::Data => self.data().await,
            Command::Bdat { size, last } => self.bdat(size, last).await,
            Command::Rset => {
                self.tx = None;
                self.reply(250, "2.0.0", "Ok").await
            }
            Command::Noop => self.reply(250, "2.0.0", "Ok").await,
            Command::Vrfy(_) => self.reply(502, "5.5.1", "VRFY not supported").await,
            Command::Quit => Ok(()),
        }
    }

    async fn ehlo(&mut self, name: &str, extended: bool) -> Result<(), ConnError> {
        self.tx = None;
        if self.fault(FaultPoint::Ehlo).await? {
            return Ok(());
        }
        self.greeted = true;
        if !extended {
            let text = format!("{} greets {name}", self.sh.hostname);
            return self.reply(250, "", &text).await;
        }
        let mut lines = vec![format!("{} greets {name}", self.sh.hostname)];
        lines.push("PIPELINING".into());
        if self.sh.max_message_size > 0 {
            lines.push(format!("SIZE {}", self.sh.max_message_size));
        } else {
            lines.push("SIZE".into());
        }
        lines.push("8BITMIME".into());
        lines.push("ENHANCEDSTATUSCODES".into());
        lines.push("CHUNKING".into());
        lines.push("DSN".into());
        if !self.conn.is_tls() {
            lines.push("STARTTLS".into());
        }
        if self.mode != Mode::Lmtp && self.user.is_none() {
            lines.push("AUTH PLAIN LOGIN CRAM-MD5".into());
        }
        if let Some(d) = self.faults.tarpit() {
            self.conn.pause(d).await?;
        }
        let mut out = String::new();
        let n = lines.len();
        for (i, l) in lines.iter().enumerate() {
            let sep = if i + 1 == n { ' ' } else { '-' };
            let _ = write!(out, "250{sep}{l}\r\n");
        }
        self.conn.queue(out.as_bytes());
        Ok(())
    }

    async fn starttls(&mut self) -> Result<(), ConnError> {
        if self.conn.is_tls() {
            return self.reply(503, "5.5.1", "TLS already active").await;
        }
        self.reply(220, "2.0.0", "Ready to start TLS").await?;
        self.conn.starttls(&self.sh.tls).await?;
        self.sh.stats.tls_session(self.conn.tls_resumed());
        // RFC 3207 4.2: forget everything learned before the handshake.
        self.greeted = false;
        self.user = None;
        self.tx = None;
        Ok(())
    }

    async fn auth(&mut self, mechanism: &str, initial: Option<String>) -> Result<(), ConnError> {
        if self.mode == Mode::Lmtp {
            return self.reply(502, "5.5.1", "AUTH not available in LMTP").await;
        }
        if !self.greeted {
            return self.reply(503, "5.5.1", "Send EHLO first").await;
        }
        if self.user.is_some() {
            return self.reply(503, "5.5.1", "Already authenticated").await;
        }
        if self.tx.is_some() {
            return self
                .reply(503, "5.5.1", "AUTH not allowed in a transaction")
                .await;
        }
        let result = match mechanism {
            "PLAIN" => self.auth_plain(initial).await?,
            "LOGIN" => self.auth_login(initial).await?,
            "CRAM-MD5" => self.auth_cram().await?,
            _ => {
                return self
                    .reply(504, "5.5.4", "Unrecognized authentication type")
                    .await
            }
        };
        match result {
            Ok((user, pass)) => {
                let ok = match &pass {
                    Secret::Password(p) => self.sh.users.check(&user, p),
                    Secret::Cram { challenge, digest } => match self
                        .sh
                        .users
                        .password(&self.sh.users.mailbox_for_login(&user))
                    {
                        Some(p) => sasl::cram_md5_digest(p, challenge.as_bytes()) == *digest,
                        None => !self.sh.users.has_table(),
                    },
                };
                self.sh.stats.auth(ok);
                if ok {
                    self.user = Some(self.sh.users.mailbox_for_login(&user));
                    self.reply(235, "2.7.0", "Authentication successful").await
                } else {
                    self.reply(535, "5.7.8", "Authentication credentials invalid")
                        .await
                }
            }
            Err(sasl::SaslError::Cancelled) => {
                self.reply(501, "5.0.0", "Authentication cancelled").await
            }
            Err(e) => {
                self.sh.stats.auth(false);
                self.reply(501, "5.5.2", &capitalize(&e.to_string())).await
            }
        }
    }

    /// Sends a 334 challenge and reads the client's base64 answer.
    async fn challenge(
        &mut self,
        text: &str,
    ) -> Result<Result<Vec<u8>, sasl::SaslError>, ConnError> {
        self.conn.queue(format!("334 {text}\r\n").as_bytes());
        let line = match self.conn.read_line(MAX_AUTH_LINE).await {
            Ok(l) => l,
            Err(ConnError::LineTooLong) => return Ok(Err(sasl::SaslError::Malformed)),
            Err(e) => return Err(e),
        };
        Ok(sasl::decode(&String::from_utf8_lossy(&line)))
    }

    async fn auth_plain(&mut self, initial: Option<String>) -> Result<AuthResult, ConnError> {
        let decoded = match initial {
            Some(i) => sasl::decode(&i),
            None => self.challenge("").await?,
        };
        Ok(decoded
            .and_then(|d| sasl::plain(&d))
            .map(|(u, p)| (u, Secret::Password(p))))
    }

    async fn auth_login(&mut self, initial: Option<String>) -> Result<AuthResult, ConnError> {
        let user = match initial {
            Some(i) => sasl::decode(&i),
            None => self.challenge("VXNlcm5hbWU6").await?,
        };
        let user = match user {
            Ok(u) => String::from_utf8_lossy(&u).into_owned(),
            Err(e) => return Ok(Err(e)),
        };
        let pass = match self.challenge("UGFzc3dvcmQ6").await? {
            Ok(p) => String::from_utf8_lossy(&p).into_owned(),
            Err(e) => return Ok(Err(e)),
        };
        Ok(Ok((user, Secret::Password(pass))))
    }

    async fn auth_cram(&mut self) -> Result<AuthResult, ConnError> {
        let challenge = format!(
            "<{}.{}@{}>",
            rand::random::<u32>(),
            self.sh.next_id(),
            self.sh.hostname
        );
        let resp = self.challenge(&sasl::encode(challenge.as_bytes())).await?;
        Ok(resp
            .and_then(|r| sasl::cram_md5_split(&r))
            .map(|(user, digest)| (user, Secret::Cram { challenge, digest })))
    }

    async fn mail(&mut self, from: &str, params: &MailParams) -> Result<(), ConnError> {
        if !self.greeted {
            return self.reply(503, "5.5.1", "Send EHLO/HELO first").await;
        }
        if self.mode == Mode::Submission && self.user.is_none() {
            return self.reply(530, "5.7.0", "Authentication required").await;
        }
        if self.tx.is_some() {
            return self.reply(503, "5.5.1", "Nested MAIL command").await;
        }
        if self.fault(FaultPoint::Mail).await? {
            return Ok(());
        }
        if let Some(size) = params.size {
            if self.sh.max_message_size > 0 && size > self.sh.max_message_size {
                return self
                    .reply(
                        552,
                        "5.3.4",
                        "Message size exceeds fixed maximum message size",
                    )
                    .await;
            }
        }
        let _ = from;
        self.tx = Some(Transaction {
            rcpts: std::mem::take(&mut self.spare_rcpts),
            chunks: None,
            chunk_bytes: 0,
        });
        self.reply(250, "2.1.0", "Ok").await
    }

    async fn rcpt(&mut self, to: String) -> Result<(), ConnError> {
        let Some(tx) = &self.tx else {
            return self.reply(503, "5.5.1", "Need MAIL before RCPT").await;
        };
        if tx.chunks.is_some() {
            return self
                .reply(503, "5.5.1", "RCPT not allowed during BDAT")
                .await;
        }
        if tx.rcpts.len() >= self.sh.max_rcpt {
            return self.reply(452, "4.5.3", "Too many recipients").await;
        }
        if self.fault(FaultPoint::Rcpt).await? {
            return Ok(());
        }
        // Authenticated clients may send anywhere (the copy is stored all the same).
        if self.user.is_none() && !self.sh.users.is_local(&to) {
            return self
                .reply(550, "5.1.1", "Recipient address rejected: user unknown")
                .await;
        }
        if let Some(tx) = &mut self.tx {
            tx.rcpts.push(to);
        }
        self.reply(250, "2.1.5", "Ok").await
    }

    /// Checks shared by DATA and BDAT; `Some((code, enhanced, text))` refuses.
    fn data_refusal(&self) -> Option<(u16, &'static str, &'static str)> {
        match &self.tx {
            None => Some((503, "5.5.1", "Need MAIL command")),
            Some(tx) if tx.rcpts.is_empty() => Some((554, "5.5.1", "No valid recipients")),
            _ => None,
        }
    }

    async fn data(&mut self) -> Result<(), ConnError> {
        if let Some((c, e, t)) = self.data_refusal() {
            return self.reply(c, e, t).await;
        }
        if self.tx.as_ref().is_some_and(|tx| tx.chunks.is_some()) {
            return self
                .reply(503, "5.5.1", "DATA not allowed after BDAT")
                .await;
        }
        if self.fault(FaultPoint::Data).await? {
            self.tx = None;
            return Ok(());
        }
        self.reply(354, "", "End data with <CR><LF>.<CR><LF>")
            .await?;
        let policy = if self.sh.reject_bare_lf {
            BareLf::Reject
        } else {
            BareLf::Normalize
        };
        let mut dec = DataDecoder::with_buffer(self.sh.max_message_size, policy, take_body());
        self.conn.read_data(&mut dec).await?;
        if dec.oversized() {
            return self
                .refuse_message(
                    552,
                    "5.3.4",
                    "Message size exceeds fixed maximum message size",
                )
                .await;
        }
        if dec.refused_bare_lf() {
            return self
                .refuse_message(550, "5.6.0", "Bare LF line endings are not accepted")
                .await;
        }
        self.finish(dec.take()).await
    }

    async fn bdat(&mut self, size: u64, last: bool) -> Result<(), ConnError> {
        let refusal = self.data_refusal();
        let first = self.tx.as_ref().is_some_and(|tx| tx.chunks.is_none());
        let injected = if refusal.is_none() && first {
            let (delay, what) = self.faults.draw(FaultPoint::Data, &self.sh.stats);
            self.conn.pause(delay).await?;
            what
        } else {
            Injected::None
        };
        // The chunk must be read whatever the answer, or its bytes would be taken for
        // commands.
        let max = self.sh.max_message_size;
        let mut kept = match (&mut self.tx, refusal, injected) {
            (Some(tx), None, Injected::None) => tx.chunks.take().unwrap_or_else(take_body),
            _ => Vec::new(),
        };
        let mut total = self.tx.as_ref().map(|t| t.chunk_bytes).unwrap_or(0);
        self.conn
            .read_exact_with(size, |piece| {
                total += piece.len() as u64;
                if max == 0 || total <= max {
                    kept.extend_from_slice(piece);
                }
            })
            .await?;
        if let Some((c, e, t)) = refusal {
            return self.reply(c, e, t).await;
        }
        match injected {
            Injected::Drop => return Err(ConnError::Dropped),
            Injected::Fail(code) => {
                self.tx = None;
                let enhanced = if code < 500 { "4.3.0" } else { "5.3.0" };
                self.reply(code, enhanced, "Injected fault (data)").await?;
                if code == 421 {
                    self.conn.flush().await?;
                    return Err(ConnError::Closed);
                }
                return Ok(());
            }
            Injected::None => {}
        }
        if let Some(tx) = &mut self.tx {
            tx.chunks = Some(kept);
            tx.chunk_bytes = total;
        }
        if max > 0 && total > max {
            let text = "Message size exceeds fixed maximum message size";
            if last {
                return self.refuse_message(552, "5.3.4", text).await;
            }
            return self.reply(552, "5.3.4", text).await;
        }
        if !last {
            self.replying(250).await?;
            self.queue_reply(250, "2.0.0", format_args!("{size} octets received"));
            return Ok(());
        }
        self.sh.stats.chunked();
        let message = self
            .tx
            .as_mut()
            .and_then(|tx| tx.chunks.take())
            .unwrap_or_default();
        self.finish(message).await
    }

    /// Refuses a received message: one reply, or in LMTP one per recipient (RFC 2033 4.2).
    async fn refuse_message(&mut self, code: u16, enh: &str, text: &str) -> Result<(), ConnError> {
        let n = match (self.mode, self.tx.take()) {
            (Mode::Lmtp, Some(tx)) => tx.rcpts.len().max(1),
            _ => 1,
        };
        for _ in 0..n {
            self.reply(code, enh, text).await?;
        }
        Ok(())
    }

    /// The message is in: dot-phase faults, delivery, the final reply (or replies).
    /// Delivers a whole message; its buffer and the recipient list are kept for the next.
    async fn finish(&mut self, message: Vec<u8>) -> Result<(), ConnError> {
        let Some(tx) = self.tx.take() else {
            give_body(message);
            return Ok(());
        };
        let done = self.deliver(&tx, &message).await;
        give_body(message);
        let mut rcpts = tx.rcpts;
        rcpts.clear();
        self.spare_rcpts = rcpts;
        done
    }

    /// Delivers a whole message to the transaction's recipients and answers. `--lose`
    /// acknowledges a message without storing it, `--duplicate` stores it twice, and the
    /// `stored` fault point comes between storing and answering.
    async fn deliver(&mut self, tx: &Transaction, message: &[u8]) -> Result<(), ConnError> {
        let size = message.len() as u64;
        let id = self.sh.next_id();
        if self.mode == Mode::Lmtp {
            // Recipients answered 250, and of them those really stored (not --lose).
            let (mut delivered, mut kept) = (0u64, 0u64);
            for rcpt in &tx.rcpts {
                // A drop here still sends the replies of the recipients before this one:
                // those were given (and a 250 for a recipient thrown away is a loss the
                // client heard, as the server counts it).
                let (delay, what) = self.faults.draw(FaultPoint::Dot, &self.sh.stats);
                if what == Injected::Drop {
                    self.conn.flush().await?;
                }
                if self.injected(FaultPoint::Dot, delay, what).await? {
                    continue;
                }
                match self.store(rcpt, message) {
                    Ok(stored) => {
                        if self.after_storing(stored).await? {
                            continue;
                        }
                        // Thrown away and now acknowledged: a loss the client hears of.
                        if stored == 0 {
                            self.sh.stats.lost(1);
                        }
                        delivered += 1;
                        kept += stored;
                        self.replying(250).await?;
                        self.queue_reply(
                            250,
                            "2.0.0",
                            format_args!("<{rcpt}> delivered as {id:X}"),
                        );
                    }
                    Err(e) => self.store_error(&e).await?,
                }
            }
            if delivered > 0 {
                self.sh.stats.accepted(kept, size);
            }
            return Ok(());
        }
        if self.fault(FaultPoint::Dot).await? {
            return Ok(());
        }
        let need = size * tx.rcpts.len() as u64;
        if !self.sh.store.has_room(need) {
            return self.store_error(&StoreError::Full(0)).await;
        }
        let (lose, twice) = (self.faults.lose(), self.faults.duplicate());
        let mut delivered = 0u64;
        let mut stored = 0u64;
        for rcpt in &tx.rcpts {
            if lose {
                delivered += 1;
                continue;
            }
            match self.store_copies(rcpt, message, twice) {
                Ok(()) => {
                    delivered += 1;
                    stored += 1;
                }
                Err(e) if delivered == 0 => return self.store_error(&e).await,
                Err(_) => {}
            }
        }
        if self.after_storing(stored).await? {
            return Ok(());
        }
        if lose {
            self.sh.stats.lost(delivered);
            self.sh.stats.accepted(0, size);
        } else {
            self.sh.stats.accepted(delivered, size);
        }
        self.replying(250).await?;
        self.queue_reply(250, "2.0.0", format_args!("Ok: queued as {id:X}"));
        Ok(())
    }

    /// One recipient's delivery, with `--lose` and `--duplicate` drawn for it (LMTP
    /// answers each recipient): Ok(1) when it was stored, Ok(0) when it was thrown away
    /// (counted lost by the caller once it acknowledges it).
    fn store(&mut self, rcpt: &str, message: &[u8]) -> Result<u64, StoreError> {
        if self.faults.lose() {
            return Ok(0);
        }
        let twice = self.faults.duplicate();
        self.store_copies(rcpt, message, twice).map(|()| 1)
    }

    /// Stores a message in a mailbox, `twice` for `--duplicate` (the extra copy counted).
    fn store_copies(&self, rcpt: &str, message: &[u8], twice: bool) -> Result<(), StoreError> {
        self.sh.store.deliver(rcpt, message)?;
        if twice && self.sh.store.deliver(rcpt, message).is_ok() {
            self.sh.stats.duplicated(1);
        }
        Ok(())
    }

    /// The `stored` fault point, after `stored` deliveries were stored. A fault leaves
    /// them unacknowledged: Ok(true) when a refusal was sent instead of the final reply;
    /// a drop closes the connection, after sending the replies queued before it (those
    /// were given).
    async fn after_storing(&mut self, stored: u64) -> Result<bool, ConnError> {
        let (delay, what) = self.faults.draw(FaultPoint::Stored, &self.sh.stats);
        if what != Injected::None {
            self.sh.stats.unacknowledged(stored);
        }
        if what == Injected::Drop {
            self.conn.flush().await?;
        }
        self.injected(FaultPoint::Stored, delay, what).await
    }

    async fn store_error(&mut self, e: &StoreError) -> Result<(), ConnError> {
        match e {
            StoreError::Full(_) => {
                self.reply(452, "4.3.1", "Insufficient system storage")
                    .await
            }
            StoreError::Io(_) => self.reply(451, "4.3.0", "Local error in processing").await,
        }
    }
}

enum Secret {
    Password(String),
    Cram { challenge: String, digest: String },
}

type AuthResult = Result<(String, Secret), sasl::SaslError>;

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}
