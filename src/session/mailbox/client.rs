//! POP3 and IMAP clients over the one [`Connection`]: typed operations that the load
//! driver times phase by phase and that `fetch_mailbox`/`watch_mailbox` string together.
//! No timing and no policy here; every response is framed with a cap.

use std::time::Duration;

use crate::proto::imap_client::{self as imap, Response, Status, Untagged};
use crate::proto::pop3_client as pop3;
use crate::session::Endpoint;
use crate::transport::{Connection, TransportError};

/// Largest message a client reads (a RETR response or one FETCH literal).
pub const MAX_MESSAGE: usize = 64 * 1024 * 1024;
/// Most untagged responses accepted before one command completes (a FETCH 1:* of a
/// mailbox this large is not what a load client does).
pub const MAX_UNTAGGED: usize = 1_000_000;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The server refused: `-ERR` (POP3), `NO` or `BAD` (IMAP), or an untagged BYE.
    #[error("{status} {text}")]
    Server { status: &'static str, text: String },
}

impl ClientError {
    fn server(status: &'static str, text: impl Into<String>) -> Self {
        ClientError::Server {
            status,
            text: text.into(),
        }
    }

    fn protocol(e: impl std::fmt::Display) -> Self {
        ClientError::Transport(TransportError::Protocol(e.to_string()))
    }
}

/// A tagged refusal (NO, BAD) as the error, its response code kept (`[TRYCREATE] ...`).
fn refusal(status: Status, text: imap::Text<'_>) -> ClientError {
    ClientError::server(
        status.name(),
        match text.code {
            Some(c) => format!("[{c}] {}", text.text),
            None => text.text.to_string(),
        },
    )
}

/// A POP3 session.
pub struct Pop3 {
    pub conn: Connection,
    /// The greeting's text (an APOP timestamp lives there).
    pub greeting: String,
}

impl Pop3 {
    /// Reads the greeting.
    pub async fn greet(mut conn: Connection) -> Result<Pop3, ClientError> {
        let greeting = {
            let frame = conn.read_frame(pop3::MAX_LINE, pop3::line_frame).await?;
            let st = pop3::status(frame).map_err(ClientError::protocol)?;
            if !st.ok {
                return Err(ClientError::server("-ERR", st.text));
            }
            st.text.to_string()
        };
        Ok(Pop3 { conn, greeting })
    }

    /// A single-line command; returns the +OK text.
    pub async fn command(&mut self, line: &str) -> Result<String, ClientError> {
        self.conn.send(format!("{line}\r\n").as_bytes()).await?;
        let frame = self
            .conn
            .read_frame(pop3::MAX_LINE, pop3::line_frame)
            .await?;
        let st = pop3::status(frame).map_err(ClientError::protocol)?;
        if st.ok {
            Ok(st.text.to_string())
        } else {
            Err(ClientError::server("-ERR", st.text))
        }
    }

    /// A multi-line command; the unstuffed data is appended to `out`.
    pub async fn multi(&mut self, line: &str, out: &mut Vec<u8>) -> Result<(), ClientError> {
        self.conn.send(format!("{line}\r\n").as_bytes()).await?;
        let mut framer = pop3::MultiFramer::new();
        let frame = self
            .conn
            .read_frame(MAX_MESSAGE + pop3::MAX_LINE, |b| framer.frame(b))
            .await?;
        let st = pop3::status(frame).map_err(ClientError::protocol)?;
        if !st.ok {
            return Err(ClientError::server("-ERR", st.text));
        }
        crate::proto::dot::unstuff(pop3::data(frame), out);
        Ok(())
    }

    pub async fn capabilities(&mut self) -> Result<Vec<String>, ClientError> {
        let mut out = Vec::new();
        self.multi("CAPA", &mut out).await?;
        Ok(pop3::capabilities(&out))
    }

    /// STLS and the TLS handshake.
    pub async fn stls(&mut self, ep: &Endpoint) -> Result<(), ClientError> {
        self.command("STLS").await?;
        ep.start_tls(&mut self.conn).await?;
        Ok(())
    }

    /// USER/PASS, or APOP when asked for and the greeting offers it.
    pub async fn login(&mut self, user: &str, pass: &str, apop: bool) -> Result<(), ClientError> {
        if apop {
            if let Some(ts) = pop3::apop_timestamp(&self.greeting) {
                let digest = pop3::apop_digest(ts, pass);
                self.command(&format!("APOP {user} {digest}")).await?;
                return Ok(());
            }
        }
        self.command(&format!("USER {user}")).await?;
        self.command(&format!("PASS {pass}")).await?;
        Ok(())
    }

    /// AUTH PLAIN with an initial response (RFC 5034).
    pub async fn auth_plain(&mut self, user: &str, pass: &str) -> Result<(), ClientError> {
        let ir = crate::proto::sasl::client::plain(user, pass);
        self.command(&format!("AUTH PLAIN {ir}")).await?;
        Ok(())
    }

    /// Messages and octets in the maildrop.
    pub async fn stat(&mut self) -> Result<(u32, u64), ClientError> {
        let text = self.command("STAT").await?;
        pop3::stat(&text).ok_or_else(|| ClientError::protocol(format!("bad STAT reply {text}")))
    }

    /// `(message number, value)` of LIST (size) or UIDL (unique id).
    pub async fn listing(&mut self, cmd: &str) -> Result<Vec<(u32, String)>, ClientError> {
        let mut out = Vec::new();
        self.multi(cmd, &mut out).await?;
        Ok(pop3::listing(&out)
            .map(|(n, v)| (n, v.to_string()))
            .collect())
    }

    /// QUIT (commits deletions) and closes.
    pub async fn quit(mut self) -> Result<(), ClientError> {
        let r = self.command("QUIT").await;
        self.conn.shutdown().await;
        r.map(|_| ())
    }
}

/// What SELECT reported.
#[derive(Debug, Clone, Copy, Default)]
pub struct Selected {
    pub exists: u32,
    pub uid_next: Option<u32>,
}

/// An IMAP session.
pub struct Imap {
    pub conn: Connection,
    pub capabilities: Vec<String>,
    /// The capabilities were listed since the last change of state (login, STARTTLS):
    /// an untagged CAPABILITY or a `[CAPABILITY ...]` code, as Dovecot puts in its
    /// LOGIN reply. Before that they may lack what only a logged-in session has (MOVE).
    pub capabilities_current: bool,
    next_tag: u32,
    /// Messages in the selected mailbox: the latest EXISTS, less the EXPUNGEs since.
    pub exists: u32,
    /// How long the last IDLE waited between the continuation and its end (so callers
    /// can time the server's part of IDLE apart from the wait).
    pub idle_waited: Duration,
    /// The tag of an IDLE left running between commands ([`Imap::idle_start`]).
    idling: Option<String>,
}

/// Why an IDLE wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// The server reported new messages (EXISTS grew) or expunges.
    Changed,
    /// The caller's future completed (time up, stop asked).
    Done,
}

impl Imap {
    /// Reads the greeting (`* OK` or `* PREAUTH`).
    pub async fn greet(mut conn: Connection) -> Result<Imap, ClientError> {
        let caps: Vec<String> = {
            let mut framer = imap::Framer::new(0);
            let frame = conn.read_frame(imap::MAX_LINE, |b| framer.frame(b)).await?;
            match imap::parse(frame).map_err(ClientError::protocol)? {
                Response::Untagged(Untagged::Status(Status::Ok | Status::Preauth, t)) => t
                    .code
                    .and_then(|c| c.strip_prefix("CAPABILITY "))
                    .map(|c| c.split_whitespace().map(str::to_string).collect())
                    .unwrap_or_default(),
                Response::Untagged(Untagged::Status(s, t)) => {
                    return Err(ClientError::server(s.name(), t.text))
                }
                _ => return Err(ClientError::protocol("IMAP greeting expected")),
            }
        };
        Ok(Imap {
            conn,
            capabilities_current: !caps.is_empty(),
            capabilities: caps,
            next_tag: 1,
            exists: 0,
            idle_waited: Duration::ZERO,
            idling: None,
        })
    }

    pub fn has_capability(&self, cap: &str) -> bool {
        self.capabilities
            .iter()
            .any(|c| c.eq_ignore_ascii_case(cap))
    }

    fn tag(&mut self) -> String {
        let t = format!("s{}", self.next_tag);
        self.next_tag += 1;
        t
    }

    /// Sends a tagged command and reads to its completion; `each` sees every untagged
    /// response on the way. Returns the OK text.
    pub async fn command(
        &mut self,
        cmd: &[u8],
        mut each: impl FnMut(&Untagged<'_>),
    ) -> Result<String, ClientError> {
        let tag = self.tag();
        let mut line = Vec::with_capacity(tag.len() + cmd.len() + 3);
        line.extend_from_slice(tag.as_bytes());
        line.push(b' ');
        line.extend_from_slice(cmd);
        line.extend_from_slice(b"\r\n");
        self.conn.send(&line).await?;
        self.complete(&tag, &mut each).await
    }

    async fn complete(
        &mut self,
        tag: &str,
        each: &mut impl FnMut(&Untagged<'_>),
    ) -> Result<String, ClientError> {
        // Bounded: a server that never completes the command cannot keep us forever.
        for _ in 0..MAX_UNTAGGED {
            let mut framer = imap::Framer::new(MAX_MESSAGE as u64);
            let frame = self
                .conn
                .read_frame(MAX_MESSAGE + imap::MAX_LINE, |b| framer.frame(b))
                .await?;
            match imap::parse(frame).map_err(ClientError::protocol)? {
                Response::Tagged {
                    tag: t,
                    status,
                    text,
                } if t == tag => {
                    if let Some(c) = text.code.and_then(|c| c.strip_prefix("CAPABILITY ")) {
                        self.capabilities = c.split_whitespace().map(str::to_string).collect();
                        self.capabilities_current = true;
                    }
                    return match status {
                        Status::Ok => Ok(text.text.to_string()),
                        s => Err(refusal(s, text)),
                    };
                }
                Response::Tagged { .. } => {}
                Response::Continue(_) => {
                    return Err(ClientError::protocol("unexpected continuation request"))
                }
                Response::Untagged(u) => {
                    match u {
                        Untagged::Exists(n) => self.exists = n,
                        // RFC 3501 7.4.1: each EXPUNGE decrements the number of messages.
                        Untagged::Expunge(_) => self.exists = self.exists.saturating_sub(1),
                        _ => {}
                    }
                    if let Untagged::Capability(c) = &u {
                        self.capabilities = c.iter().map(|s| s.to_string()).collect();
                        self.capabilities_current = true;
                    }
                    each(&u);
                }
            }
        }
        Err(ClientError::protocol(format!(
            "more than {MAX_UNTAGGED} responses to one command"
        )))
    }

    pub async fn starttls(&mut self, ep: &Endpoint) -> Result<(), ClientError> {
        self.command(imap::command::STARTTLS, |_| {}).await?;
        ep.start_tls(&mut self.conn).await?;
        // RFC 3501 6.2.1: capabilities before STARTTLS are not to be trusted.
        self.capabilities.clear();
        self.capabilities_current = false;
        Ok(())
    }

    pub async fn login(&mut self, user: &str, pass: &str) -> Result<(), ClientError> {
        let mut cmd = b"LOGIN ".to_vec();
        imap::astring(user, &mut cmd);
        cmd.push(b' ');
        imap::astring(pass, &mut cmd);
        self.capabilities_current = false;
        self.command(&cmd, |_| {}).await?;
        Ok(())
    }

    /// Asks for the capabilities unless they are current.
    pub async fn refresh_capabilities(&mut self) -> Result<(), ClientError> {
        if !self.capabilities_current {
            self.command(imap::command::CAPABILITY, |_| {}).await?;
            if !self.capabilities_current {
                return Err(ClientError::protocol("CAPABILITY answered without a list"));
            }
        }
        Ok(())
    }

    /// APPEND `message` to `mailbox` with `flags`: a non-synchronizing literal when
    /// `literal_plus` allows it and the server has LITERAL+ (or LITERAL- and the message
    /// is at most 4096 bytes, RFC 7888), else a synchronizing one, sent after the
    /// server's continuation. `each` sees the untagged responses. Returns whether the
    /// literal was non-synchronizing.
    pub async fn append(
        &mut self,
        mailbox: &str,
        flags: &str,
        message: &[u8],
        literal_plus: bool,
        mut each: impl FnMut(&Untagged<'_>),
    ) -> Result<bool, ClientError> {
        let non_sync = literal_plus
            && (self.has_capability("LITERAL+")
                || (self.has_capability("LITERAL-") && message.len() <= 4096));
        let tag = self.tag();
        let mut line = format!("{tag} ").into_bytes();
        line.extend_from_slice(&imap::command::append(
            mailbox,
            flags,
            message.len(),
            non_sync,
        ));
        line.extend_from_slice(b"\r\n");
        if non_sync {
            self.conn.send_parts(&[&line, message, b"\r\n"]).await?;
        } else {
            self.conn.send(&line).await?;
            self.continuation().await?;
            self.conn.send_parts(&[message, b"\r\n"]).await?;
        }
        self.complete(&tag, &mut each).await?;
        Ok(non_sync)
    }

    /// AUTHENTICATE PLAIN, the response after the continuation (works without SASL-IR).
    pub async fn authenticate_plain(&mut self, user: &str, pass: &str) -> Result<(), ClientError> {
        let tag = self.tag();
        self.conn
            .send(format!("{tag} AUTHENTICATE PLAIN\r\n").as_bytes())
            .await?;
        self.continuation().await?;
        let ir = crate::proto::sasl::client::plain(user, pass);
        self.conn.send(format!("{ir}\r\n").as_bytes()).await?;
        self.complete(&tag, &mut |_| {}).await?;
        Ok(())
    }

    pub async fn select(&mut self, mailbox: &str) -> Result<Selected, ClientError> {
        let mut cmd = b"SELECT ".to_vec();
        imap::astring(mailbox, &mut cmd);
        let mut sel = Selected::default();
        self.command(&cmd, |u| match u {
            Untagged::Exists(n) => sel.exists = *n,
            Untagged::Status(_, t) => {
                if let Some(v) = t.code.and_then(|c| c.strip_prefix("UIDNEXT ")) {
                    sel.uid_next = v.trim().parse().ok();
                }
            }
            _ => {}
        })
        .await?;
        Ok(sel)
    }

    /// SEARCH (or UID SEARCH) with `criteria`; the hits.
    pub async fn search(&mut self, uid: bool, criteria: &str) -> Result<Vec<u32>, ClientError> {
        let cmd = format!("{}SEARCH {criteria}", if uid { "UID " } else { "" });
        let mut hits = Vec::new();
        self.command(cmd.as_bytes(), |u| {
            if let Untagged::Search(h) = u {
                hits.extend_from_slice(h);
            }
        })
        .await?;
        Ok(hits)
    }

    /// IDLE until the server reports a change or `until` completes; then DONE and the
    /// tagged reply. The connection's timeout is lifted while waiting.
    /// `until` is pinned by the caller, so that the wait is stored once, in the caller's
    /// future, rather than twice in this one (an async fn keeps a moved argument both as
    /// the argument and as its local).
    pub async fn idle<F: std::future::Future<Output = ()>>(
        &mut self,
        mut until: std::pin::Pin<&mut F>,
        limit: Duration,
    ) -> Result<Wake, ClientError> {
        let tag = self.tag();
        self.conn.send(format!("{tag} IDLE\r\n").as_bytes()).await?;
        self.continuation().await?;
        let waiting = std::time::Instant::now();
        let saved = self.conn.timeout();
        self.conn.set_timeout(limit + saved);
        self.conn.set_bare_waits(true);
        let mut wake = Wake::Done;
        let result: Result<(), ClientError> = async {
            loop {
                let mut framer = imap::Framer::new(0);
                tokio::select! {
                    r = self.conn.read_frame(imap::MAX_LINE, |b| framer.frame(b)) => {
                        match imap::parse(r?).map_err(ClientError::protocol)? {
                            Response::Untagged(Untagged::Exists(n)) => {
                                self.exists = n;
                                wake = Wake::Changed;
                                return Ok(());
                            }
                            Response::Untagged(Untagged::Expunge(_)) => {
                                self.exists = self.exists.saturating_sub(1);
                                wake = Wake::Changed;
                                return Ok(());
                            }
                            Response::Untagged(Untagged::Status(Status::Bye, t)) => {
                                return Err(ClientError::server("BYE", t.text));
                            }
                            _ => {}
                        }
                    }
                    _ = until.as_mut() => return Ok(()),
                }
            }
        }
        .await;
        self.conn.set_timeout(saved);
        self.conn.set_bare_waits(false);
        self.idle_waited = waiting.elapsed();
        result?;
        self.conn.send(b"DONE\r\n").await?;
        self.complete(&tag, &mut |_| {}).await?;
        Ok(wake)
    }

    /// Starts an IDLE and leaves it running: nothing reads the connection until
    /// [`Imap::idle_stop`], so what the server pushes meanwhile (EXISTS, keep-alives) waits
    /// in the socket, as it would for a desktop client between the user's actions.
    pub async fn idle_start(&mut self) -> Result<(), ClientError> {
        let tag = self.tag();
        self.conn.send(format!("{tag} IDLE\r\n").as_bytes()).await?;
        self.continuation().await?;
        self.idling = Some(tag);
        Ok(())
    }

    /// Whether an IDLE is running ([`Imap::idle_start`]).
    pub fn is_idling(&self) -> bool {
        self.idling.is_some()
    }

    /// Ends the running IDLE: DONE and its tagged reply; the EXISTS and EXPUNGE that
    /// came meanwhile are taken note of.
    pub async fn idle_stop(&mut self) -> Result<(), ClientError> {
        let Some(tag) = self.idling.take() else {
            return Ok(());
        };
        self.conn.send(b"DONE\r\n").await?;
        self.complete(&tag, &mut |_| {}).await?;
        Ok(())
    }

    /// Reads until the server's continuation (`+`); a tagged reply instead is its refusal.
    /// Untagged responses on the way are taken note of (EXISTS), at most MAX_UNTAGGED.
    async fn continuation(&mut self) -> Result<(), ClientError> {
        for _ in 0..MAX_UNTAGGED {
            let mut framer = imap::Framer::new(0);
            let frame = self
                .conn
                .read_frame(imap::MAX_LINE, |b| framer.frame(b))
                .await?;
            match imap::parse(frame).map_err(ClientError::protocol)? {
                Response::Continue(_) => return Ok(()),
                Response::Tagged { status, text, .. } => return Err(refusal(status, text)),
                Response::Untagged(Untagged::Exists(n)) => self.exists = n,
                Response::Untagged(Untagged::Expunge(_)) => {
                    self.exists = self.exists.saturating_sub(1)
                }
                Response::Untagged(_) => {}
            }
        }
        Err(ClientError::protocol(format!(
            "more than {MAX_UNTAGGED} responses before a continuation"
        )))
    }

    /// LOGOUT and close.
    pub async fn logout(mut self) -> Result<(), ClientError> {
        let r = self.command(imap::command::LOGOUT, |_| {}).await;
        self.conn.shutdown().await;
        r.map(|_| ())
    }
}
