//! One XMPP stream on a server connection: frames read with the sans-I/O [`Framer`]
//! (capped in size and depth before anything is parsed), stream headers answered, and how
//! a stream ends (our own close, a stream error, or nothing when the connection is gone).

use tokio::time::Instant;

use super::super::conn::{Conn, ConnError};
use super::super::faults::{FaultPoint, FaultSession, Injected};
use super::super::shared::Shared;
use super::{MAX_DEPTH, MAX_STANZA};
use crate::proto::xmpp::{self, Element, Frame, FrameError, Framer, StreamHeader};

/// How a stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum End {
    /// The client closed its stream (or must be told goodbye): answer with our close.
    Close,
    /// A stream error with this condition, then our close.
    Error(&'static str),
    /// The connection is gone or must go without a word (I/O error, injected drop).
    Gone,
}

impl From<ConnError> for End {
    fn from(e: ConnError) -> End {
        match e {
            ConnError::Idle => End::Error("connection-timeout"),
            ConnError::Shutdown => End::Error("system-shutdown"),
            _ => End::Gone,
        }
    }
}

/// One frame, parsed.
pub(super) enum Got {
    Open(StreamHeader),
    Element(Element),
    Close,
}

pub(super) struct Stream<'a> {
    pub conn: &'a mut Conn,
    pub sh: &'a Shared,
    /// XMPP's own state: accounts, sessions, routing.
    pub hub: &'a super::Hub,
    framer: Framer,
    /// The served domain this stream is for (the header's `to`).
    pub domain: String,
    header_sent: bool,
    /// When the connection counts as idle: pushed on by every frame read and every
    /// stanza written.
    pub deadline: Instant,
    faults: FaultSession<'a>,
}

impl<'a> Stream<'a> {
    pub fn new(conn: &'a mut Conn, sh: &'a Shared, conn_no: u64) -> Stream<'a> {
        let deadline = Instant::now() + conn.idle();
        let ws = conn.is_websocket();
        Stream {
            conn,
            sh,
            hub: super::hub(sh),
            framer: Framer::new(MAX_STANZA, MAX_DEPTH).websocket(ws),
            domain: String::new(),
            header_sent: false,
            deadline,
            faults: sh.faults.session(conn_no),
        }
    }

    /// The connection was active: the idle deadline moves on.
    pub fn active(&mut self) {
        self.deadline = Instant::now() + self.conn.idle();
    }

    /// The next whole frame already buffered, parsed (keepalive whitespace skipped, but
    /// counted as activity); `None` when more bytes are needed. A frame over the caps is
    /// `policy-violation`, bad XML `not-well-formed`.
    pub fn buffered(&mut self) -> Result<Option<Got>, End> {
        loop {
            let mut kind = None;
            let framer = &mut self.framer;
            let taken = self.conn.take_frame(|b| {
                framer.frame(b).map(|f| {
                    f.map(|(k, n)| {
                        kind = Some(k);
                        n
                    })
                })
            });
            let bytes = match taken {
                Ok(Some(b)) => b,
                Ok(None) => return Ok(None),
                Err(FrameError::TooLarge(_) | FrameError::TooDeep(_)) => {
                    return Err(End::Error("policy-violation"))
                }
                Err(FrameError::Malformed(_)) => return Err(End::Error("not-well-formed")),
            };
            let got = match kind {
                Some(Frame::Open) => xmpp::parse_header(bytes).map(Got::Open),
                Some(Frame::Element) => Element::parse(bytes).map(Got::Element),
                Some(Frame::Close) => Ok(Got::Close),
                Some(Frame::Whitespace) | None => {
                    // A keepalive keeps the connection from counting as idle.
                    self.active();
                    continue;
                }
            };
            self.active();
            return got.map(Some).map_err(|_| End::Error("not-well-formed"));
        }
    }

    /// Reads more input, after writing what is queued.
    pub async fn fill(&mut self) -> Result<(), End> {
        self.conn.flush().await?;
        self.conn.read_more(self.deadline).await?;
        Ok(())
    }

    /// The next frame, reading as needed.
    pub async fn next(&mut self) -> Result<Got, End> {
        loop {
            if let Some(got) = self.buffered()? {
                return Ok(got);
            }
            self.fill().await?;
        }
    }

    /// The next element; the stream's end is [`End::Close`].
    pub async fn element(&mut self) -> Result<Element, End> {
        match self.next().await? {
            Got::Element(e) => Ok(e),
            Got::Close => Err(End::Close),
            Got::Open(_) => Err(End::Error("not-well-formed")),
        }
    }

    /// Reads the client's stream header and answers with ours (the features are the
    /// caller's). A fresh stream is expected: at the start, after STARTTLS and after SASL.
    pub async fn open(&mut self) -> Result<(), End> {
        self.framer.restart();
        self.header_sent = false;
        let header = match self.next().await? {
            Got::Open(h) => h,
            _ => return Err(End::Error("not-well-formed")),
        };
        let hub = &self.hub;
        let to = header.to.as_deref().map(|d| d.trim().to_ascii_lowercase());
        let served = to.as_deref().is_none_or(|d| hub.serves(d));
        self.domain = match to {
            Some(d) if served => d,
            _ => hub.default_domain(&self.sh.hostname).to_string(),
        };
        self.send_header();
        let ns = match self.conn.is_websocket() {
            true => xmpp::NS_FRAMING,
            false => xmpp::NS_CLIENT,
        };
        if header.ns.as_deref() != Some(ns) {
            return Err(End::Error("invalid-namespace"));
        }
        if !served {
            return Err(End::Error("host-unknown"));
        }
        Ok(())
    }

    fn send_header(&mut self) {
        let id = format!("{:016x}", rand::random::<u64>());
        let from = if self.domain.is_empty() {
            self.sh.hostname.as_str()
        } else {
            self.domain.as_str()
        };
        let header = match self.conn.is_websocket() {
            true => xmpp::ws_open_server(from, &id),
            false => xmpp::stream_open_server(from, &id),
        };
        self.send(&header);
        self.header_sent = true;
    }

    /// Queues one element (over WebSocket: one message, its namespaces declared).
    pub fn send(&mut self, text: &str) {
        self.send_parts(&[text]);
    }

    /// Queues one element written in parts.
    pub fn send_parts(&mut self, parts: &[&str]) {
        if !self.conn.is_websocket() {
            parts.iter().for_each(|p| self.conn.queue(p.as_bytes()));
            return;
        }
        let whole;
        let text = match parts {
            [one] => *one,
            _ => {
                whole = parts.concat();
                &whole
            }
        };
        let [a, b, c] = xmpp::ws_parts(text);
        self.conn
            .queue_message(&[a.as_bytes(), b.as_bytes(), c.as_bytes()]);
    }

    /// Draws the faults of `point`: the delay is waited here; a drop ends the stream
    /// without a word; a failure is returned as its reply code.
    pub async fn fault(&mut self, point: FaultPoint) -> Result<Option<u16>, End> {
        let (delay, what) = self.faults.draw(point, &self.sh.stats);
        self.conn.pause(delay).await?;
        match what {
            Injected::None => Ok(None),
            Injected::Drop => Err(End::Gone),
            Injected::Fail(code) => Ok(Some(code)),
        }
    }

    /// Queues how the stream ends (the caller then closes the connection).
    pub fn finish(&mut self, end: End) {
        match end {
            End::Gone => return,
            End::Error(condition) => {
                if !self.header_sent {
                    self.send_header();
                }
                self.sh.stats.xmpp_stream_error();
                self.send(&xmpp::stream_error(condition));
            }
            End::Close => {
                if !self.header_sent {
                    self.send_header();
                }
            }
        }
        self.send(xmpp::stream_close(self.conn.is_websocket()));
    }
}
