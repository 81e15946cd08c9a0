//! WebSocket (RFC 6455) as a layer of the connection: the opening handshake's keys, the
//! frames a message is sent in, and a decoder that takes frames apart in place, in the
//! buffer the bytes were read into, so that the messages' payloads come out as one byte
//! stream for a protocol's framer (XMPP over WebSocket, RFC 7395, carries one element per
//! message; its framer finds them in the stream as on TCP).
//!
//! Written here rather than taken from tungstenite: tungstenite hands out each message as
//! an owned buffer and keeps a read buffer per connection (128 KiB by default), where
//! spate's connections read into one inbox that an idle session gives back (an idle XMPP
//! session costs about 4 KiB). The frame format is small; the decoder is tested byte by
//! byte against fragmented, masked and control frames, and end to end against Prosody,
//! ejabberd and a browser.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use base64::Engine as _;
use sha1::{Digest, Sha1};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// RFC 6455's GUID, appended to the client's key for the server's answer.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// The largest message payload taken (a frame announcing more is refused).
pub const MAX_PAYLOAD: u64 = 16 << 20;

pub const OP_CONTINUATION: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

/// A `ws://` or `wss://` URL taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub tls: bool,
    /// `HOST[:PORT]` as written (the Host header), and the port (80 or 443 by default).
    pub authority: String,
    pub port: u16,
    /// The path (with its query), `default_path` when the URL has none.
    pub path: String,
}

/// Parses `ws://HOST[:PORT][/PATH]` or `wss://…`; None when `text` is not such a URL, an
/// error when it is one but malformed.
pub fn parse_url(text: &str, default_path: &str) -> Option<Result<Url, String>> {
    let (tls, rest) = match text.split_once("://") {
        Some((s, rest)) if s.eq_ignore_ascii_case("ws") => (false, rest),
        Some((s, rest)) if s.eq_ignore_ascii_case("wss") => (true, rest),
        _ => return None,
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, default_path),
    };
    let bad = |why: &str| Some(Err(format!("{text}: {why}")));
    if authority.is_empty() || authority.contains('@') {
        return bad("expected ws://HOST[:PORT]/PATH or wss://HOST[:PORT]/PATH");
    }
    let port_text = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once("]:").map(|(_, p)| p),
        None => authority.rsplit_once(':').map(|(_, p)| p),
    };
    let port = match port_text.map(str::parse::<u16>) {
        None => {
            if tls {
                443
            } else {
                80
            }
        }
        Some(Ok(p)) if p > 0 => p,
        Some(_) => return bad("the port is not a number from 1 to 65535"),
    };
    if path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("a path with spaces or control characters");
    }
    Some(Ok(Url {
        tls,
        authority: authority.to_string(),
        port,
        path: path.to_string(),
    }))
}

/// The value of `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    let mut h = Sha1::new();
    h.update(key.trim().as_bytes());
    h.update(GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(h.finalize())
}

/// A new client key: 16 random bytes, base64.
pub fn new_key() -> String {
    let bytes: [u8; 16] = rand::random();
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// Checks the server's answer to the opening handshake (its head, `\r\n\r\n` included):
/// 101, the accept value for `key`, and `protocol` confirmed. The reason when not.
pub fn check_answer(head: &str, key: &str, protocol: &str) -> Result<(), String> {
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or("");
    let code = status.split(' ').nth(1).unwrap_or("");
    if code != "101" {
        let said: String = status
            .chars()
            .filter(|c| !c.is_control())
            .take(200)
            .collect();
        return Err(format!("WebSocket handshake refused: {}", said.trim()));
    }
    let header = |name: &str| {
        head.split("\r\n")
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
    };
    if header("sec-websocket-accept").as_deref() != Some(accept_key(key).as_str()) {
        return Err("WebSocket handshake: a wrong or missing Sec-WebSocket-Accept".into());
    }
    let agreed = header("sec-websocket-protocol");
    if !agreed.as_deref().is_some_and(|p| {
        p.split(',')
            .any(|p| p.trim().eq_ignore_ascii_case(protocol))
    }) {
        return Err(format!(
            "WebSocket handshake: the server did not agree to the {protocol} subprotocol (Sec-WebSocket-Protocol: {})",
            agreed.as_deref().unwrap_or("none")
        ));
    }
    Ok(())
}

/// A server's answer to an opening handshake's request head (`\r\n\r\n` included) that
/// asks for `protocol`: the 101 to send, or the status and reason to refuse with.
pub fn server_answer(head: &str, protocol: &str) -> Result<String, (u16, String)> {
    let mut lines = head.split("\r\n");
    let request = lines.next().unwrap_or("");
    let mut words = request.split(' ');
    if words.next() != Some("GET") {
        return Err((405, "a WebSocket opens with GET".into()));
    }
    let header = |name: &str| {
        head.split("\r\n")
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    };
    let has = |name: &str, word: &str| {
        header(name).is_some_and(|v| v.split(',').any(|w| w.trim().eq_ignore_ascii_case(word)))
    };
    if !has("upgrade", "websocket") || !has("connection", "upgrade") {
        return Err((
            426,
            "this is a WebSocket endpoint: ask for an upgrade".into(),
        ));
    }
    if header("sec-websocket-version") != Some("13") {
        return Err((426, "WebSocket version 13 only".into()));
    }
    let Some(key) = header("sec-websocket-key").filter(|k| !k.is_empty()) else {
        return Err((400, "no Sec-WebSocket-Key".into()));
    };
    if !has("sec-websocket-protocol", protocol) {
        return Err((
            400,
            format!("the {protocol} subprotocol is required (Sec-WebSocket-Protocol)"),
        ));
    }
    Ok(format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n",
        accept_key(key)
    ))
}

/// One whole frame (FIN set) of `opcode` carrying `payload`, masked with `mask` when
/// given (a client's frames must be, a server's must not).
pub fn frame(opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = Vec::new();
    frame_into(&mut out, opcode, &[payload], mask);
    out
}

/// Appends to `out` one whole frame whose payload is `parts` in order.
pub fn frame_into(out: &mut Vec<u8>, opcode: u8, parts: &[&[u8]], mask: Option<[u8; 4]>) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    out.reserve(len + 14);
    out.push(0x80 | opcode);
    let m = if mask.is_some() { 0x80 } else { 0 };
    match len {
        0..=125 => out.push(m | len as u8),
        126..=0xFFFF => {
            out.push(m | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(m | 127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    if let Some(key) = mask {
        out.extend_from_slice(&key);
    }
    let start = out.len();
    for p in parts {
        out.extend_from_slice(p);
    }
    if let Some(key) = mask {
        apply_mask(&mut out[start..], key, 0);
    }
}

/// XORs `data` with `key`, the first byte being byte `offset` of the payload; eight
/// bytes at a time.
fn apply_mask(data: &mut [u8], key: [u8; 4], offset: usize) {
    let k: [u8; 4] = std::array::from_fn(|i| key[(offset + i) & 3]);
    let wide = u64::from_ne_bytes([k[0], k[1], k[2], k[3], k[0], k[1], k[2], k[3]]);
    let mut chunks = data.chunks_exact_mut(8);
    for c in &mut chunks {
        let v = u64::from_ne_bytes(c.try_into().expect("8 bytes")) ^ wide;
        c.copy_from_slice(&v.to_ne_bytes());
    }
    for (i, b) in chunks.into_remainder().iter_mut().enumerate() {
        *b ^= k[i & 3];
    }
}

/// The length of the frame that starts `bytes` (built by [`frame`]): header and payload.
fn frame_len(bytes: &[u8]) -> Option<usize> {
    let b1 = *bytes.get(1)?;
    let masked = if b1 & 0x80 != 0 { 4 } else { 0 };
    let (head, len) = match b1 & 0x7F {
        126 => (
            4,
            u16::from_be_bytes(bytes.get(2..4)?.try_into().ok()?) as usize,
        ),
        127 => (
            10,
            u64::from_be_bytes(bytes.get(2..10)?.try_into().ok()?) as usize,
        ),
        n => (2, n as usize),
    };
    Some(head + masked + len)
}

/// What a control frame that ended said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// A ping, with its payload (to be sent back in a pong).
    Ping(Vec<u8>),
    /// The peer closes: its status code (when it gave one).
    Close(Option<u16>),
}

/// Takes frames apart in place: the payloads of data frames move down over the headers
/// in the same buffer, unmasked; control frames are kept aside (at most 125 bytes).
#[derive(Debug, Default)]
pub struct Decoder {
    /// The header being read (at most 14 bytes) and how much of it is there.
    head: [u8; 14],
    have: usize,
    /// Payload bytes of the current frame still to come.
    left: u64,
    /// The current frame's opcode and masking key, and how far into its payload.
    opcode: u8,
    mask: Option<[u8; 4]>,
    offset: usize,
    /// A control frame's payload.
    control: Vec<u8>,
    /// Whether frames must be masked (a server's decoder) or must not (a client's).
    masked: bool,
    /// A close came: nothing after it is data.
    pub closed: bool,
}

/// Why frames cannot be read.
fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("WebSocket: {what}"))
}

impl Decoder {
    /// A decoder of frames that are masked (`masked`: a server reading a client) or not.
    pub fn new(masked: bool) -> Decoder {
        Decoder {
            masked,
            ..Decoder::default()
        }
    }

    /// The header's length so far known (2 until the length byte is there).
    fn head_len(&self) -> usize {
        if self.have < 2 {
            return 2;
        }
        let ext = match self.head[1] & 0x7F {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        2 + ext + if self.head[1] & 0x80 != 0 { 4 } else { 0 }
    }

    /// A header is complete: the frame starts.
    fn begin(&mut self) -> io::Result<()> {
        let (b0, b1) = (self.head[0], self.head[1]);
        if b0 & 0x70 != 0 {
            return Err(bad("reserved bits set (no extension was agreed)"));
        }
        if (b1 & 0x80 != 0) != self.masked {
            return Err(bad(if self.masked {
                "an unmasked frame from a client"
            } else {
                "a masked frame from the server"
            }));
        }
        let (len, at) = match b1 & 0x7F {
            126 => (
                u64::from(u16::from_be_bytes([self.head[2], self.head[3]])),
                4,
            ),
            127 => (
                u64::from_be_bytes(self.head[2..10].try_into().expect("8")),
                10,
            ),
            n => (u64::from(n), 2),
        };
        let opcode = b0 & 0x0F;
        if opcode >= 0x8 && (len > 125 || b0 & 0x80 == 0) {
            return Err(bad("a control frame longer than 125 bytes or fragmented"));
        }
        if len > MAX_PAYLOAD {
            return Err(bad("a frame longer than 16 MiB"));
        }
        if !matches!(
            opcode,
            OP_CONTINUATION | OP_TEXT | OP_BINARY | OP_CLOSE | OP_PING | OP_PONG
        ) {
            return Err(bad("an unknown opcode"));
        }
        self.mask = (b1 & 0x80 != 0).then(|| self.head[at..at + 4].try_into().expect("4"));
        self.opcode = opcode;
        self.left = len;
        self.offset = 0;
        self.control.clear();
        Ok(())
    }

    /// The current frame ended: what a control frame said.
    fn end(&mut self) -> Option<Control> {
        self.have = 0;
        match self.opcode {
            OP_PING => Some(Control::Ping(std::mem::take(&mut self.control))),
            OP_CLOSE => {
                self.closed = true;
                let code = (self.control.len() >= 2)
                    .then(|| u16::from_be_bytes([self.control[0], self.control[1]]));
                Some(Control::Close(code))
            }
            _ => None,
        }
    }

    /// Decodes `buf[from..]` (bytes just read) in place: the data frames' payloads move
    /// down to start at `from`. Returns where the payload bytes end and the control
    /// frames that ended in these bytes. Bytes after a close are dropped.
    pub fn decode(&mut self, buf: &mut [u8], from: usize) -> io::Result<(usize, Vec<Control>)> {
        let mut out = from;
        let mut i = from;
        let mut controls = Vec::new();
        while i < buf.len() && !self.closed {
            if self.have < self.head_len() || (self.have == 0 && self.left == 0) {
                // Header bytes.
                while i < buf.len() && self.have < self.head_len() {
                    self.head[self.have] = buf[i];
                    self.have += 1;
                    i += 1;
                }
                if self.have < self.head_len() {
                    break;
                }
                self.begin()?;
                if self.left == 0 {
                    controls.extend(self.end());
                }
                continue;
            }
            let n = (self.left.min((buf.len() - i) as u64)) as usize;
            if let Some(key) = self.mask {
                apply_mask(&mut buf[i..i + n], key, self.offset);
            }
            if self.opcode >= 0x8 {
                self.control.extend_from_slice(&buf[i..i + n]);
            } else {
                buf.copy_within(i..i + n, out);
                out += n;
            }
            i += n;
            self.offset += n;
            self.left -= n as u64;
            if self.left == 0 {
                controls.extend(self.end());
            }
        }
        Ok((out, controls))
    }
}

/// A client's connection after the WebSocket handshake: what is read comes out as the
/// payloads of the server's messages (pings answered, a close the end of the stream);
/// what is written must be whole frames ([`frame`], masked), which a pong waits for.
pub struct Ws<S> {
    pub inner: S,
    dec: Decoder,
    /// Bytes of the frame being written still to go (a pong goes between frames only).
    writing: usize,
    /// Pongs to send, framed.
    pongs: Vec<u8>,
}

impl<S> Ws<S> {
    pub fn client(inner: S) -> Ws<S> {
        Ws {
            inner,
            dec: Decoder::new(false),
            writing: 0,
            pongs: Vec::new(),
        }
    }

    /// Decodes bytes that were read before the stream became a WebSocket (they came
    /// with the handshake's answer) in place; where their payload ends.
    pub fn decode_buffered(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (end, controls) = self.dec.decode(buf, 0)?;
        self.controls(controls);
        Ok(end)
    }

    fn controls(&mut self, controls: Vec<Control>) {
        for c in controls {
            if let Control::Ping(payload) = c {
                self.pongs
                    .extend_from_slice(&frame(OP_PONG, &payload, Some(rand::random())));
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> Ws<S> {
    /// Sends the pongs due, between frames only.
    fn poll_pongs(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.writing == 0 && !self.pongs.is_empty() {
            match Pin::new(&mut self.inner).poll_write(cx, &self.pongs) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Poll::Ready(Ok(n)) => {
                    self.pongs.drain(..n);
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Ws<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        // A pong that could not go when its ping came (its write will wake this read).
        if let Poll::Ready(Err(e)) = me.poll_pongs(cx) {
            return Poll::Ready(Err(e));
        }
        loop {
            if me.dec.closed {
                return Poll::Ready(Ok(()));
            }
            let from = buf.filled().len();
            match Pin::new(&mut me.inner).poll_read(cx, buf) {
                Poll::Ready(Ok(())) => {}
                other => return other,
            }
            let got = buf.filled().len();
            if got == from {
                // The connection ended without a close frame.
                return Poll::Ready(Ok(()));
            }
            let (end, controls) = me.dec.decode(buf.filled_mut(), from)?;
            buf.set_filled(end);
            me.controls(controls);
            if let Poll::Ready(Err(e)) = me.poll_pongs(cx) {
                return Poll::Ready(Err(e));
            }
            if end > from || me.dec.closed {
                return Poll::Ready(Ok(()));
            }
            // Only headers or control frames: read on (never an empty read, which
            // would say the stream ended).
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Ws<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if me.writing == 0 {
            match me.poll_pongs(cx) {
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
            me.writing = frame_len(buf).ok_or_else(|| bad("a write that is not a frame"))?;
        }
        let take = buf.len().min(me.writing);
        match Pin::new(&mut me.inner).poll_write(cx, &buf[..take]) {
            Poll::Ready(Ok(n)) => {
                me.writing -= n;
                Poll::Ready(Ok(n))
            }
            other => other,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        match me.poll_pongs(cx) {
            Poll::Ready(Ok(())) => {}
            other => return other,
        }
        Pin::new(&mut me.inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_come_apart_with_their_defaults() {
        let u = parse_url("wss://chat.example.test/ws?x=1", "/xmpp-websocket")
            .unwrap()
            .unwrap();
        assert_eq!(
            (u.tls, u.port, u.authority.as_str()),
            (true, 443, "chat.example.test")
        );
        assert_eq!(u.path, "/ws?x=1");
        let u = parse_url("ws://127.0.0.1:5280", "/xmpp-websocket")
            .unwrap()
            .unwrap();
        assert_eq!(
            (u.tls, u.port, u.path.as_str()),
            (false, 5280, "/xmpp-websocket")
        );
        let u = parse_url("WS://[::1]:5280/x", "/").unwrap().unwrap();
        assert_eq!((u.port, u.authority.as_str()), (5280, "[::1]:5280"));
        assert!(parse_url("127.0.0.1:5222", "/").is_none());
        assert!(parse_url("http://h/", "/").is_none());
        assert!(parse_url("ws://h:99999/", "/").unwrap().is_err());
        assert_eq!(parse_url("wss://[::1]/", "/").unwrap().unwrap().port, 443);
        assert!(parse_url("ws:///x", "/").unwrap().is_err());
        assert!(parse_url("ws://u@h/", "/").unwrap().is_err());
    }

    #[test]
    fn a_server_answers_an_upgrade_that_a_client_checks() {
        let key = new_key();
        let ask = format!(
            "GET /xmpp-websocket HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\n\
             Connection: keep-alive, Upgrade\r\nSec-WebSocket-Key: {key}\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: chat, xmpp\r\n\r\n"
        );
        let answer = server_answer(&ask, "xmpp").unwrap();
        assert_eq!(check_answer(&answer, &key, "xmpp"), Ok(()));
        assert!(
            check_answer(&answer, &new_key(), "xmpp").is_err(),
            "another key"
        );
        assert!(check_answer(&answer, &key, "mqtt").is_err());
        let refused = check_answer("HTTP/1.1 404 Not Found\r\n\r\n", &key, "xmpp").unwrap_err();
        assert!(refused.contains("404 Not Found"), "{refused}");
        assert_eq!(
            server_answer(&ask.replace("xmpp", "mqtt"), "xmpp")
                .unwrap_err()
                .0,
            400
        );
        assert_eq!(
            server_answer(&ask.replace("Upgrade: websocket", "X: y"), "xmpp")
                .unwrap_err()
                .0,
            426
        );
        assert_eq!(
            server_answer(&ask.replace("GET", "POST"), "xmpp")
                .unwrap_err()
                .0,
            405
        );
    }

    #[test]
    fn the_accept_key_is_rfc_6455s_example() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    /// Frames of every size class, masked or not, split at every byte: the payloads come
    /// out whole and in order, a ping is kept aside, a close ends the data.
    #[test]
    fn frames_decode_in_place_split_anywhere() {
        for masked in [false, true] {
            let key = masked.then_some([0x37, 0xfa, 0x21, 0x3d]);
            let big: Vec<u8> = (0..70_000u32).map(|i| b'a' + (i % 26) as u8).collect();
            let mut wire = Vec::new();
            wire.extend(frame(OP_TEXT, b"<open/>", key));
            wire.extend(frame(OP_PING, b"hi", key));
            wire.extend(frame(OP_TEXT, &big[..300], key));
            // A message in two fragments.
            let mut first = frame(OP_TEXT, b"<mess", key);
            first[0] &= 0x7F;
            wire.extend(first);
            wire.extend(frame(OP_CONTINUATION, b"age/>", key));
            wire.extend(frame(OP_BINARY, &big, key));
            wire.extend(frame(OP_TEXT, b"", key));
            wire.extend(frame(OP_CLOSE, &1000u16.to_be_bytes(), key));
            wire.extend(frame(OP_TEXT, b"after the close", key));
            let mut want = b"<open/>".to_vec();
            want.extend_from_slice(&big[..300]);
            want.extend_from_slice(b"<message/>");
            want.extend_from_slice(&big);
            for step in [1, 2, 3, 7, 125, 4096, wire.len()] {
                let mut d = Decoder::new(masked);
                let (mut got, mut controls) = (Vec::new(), Vec::new());
                for chunk in wire.chunks(step) {
                    let mut buf = chunk.to_vec();
                    let (end, c) = d.decode(&mut buf, 0).unwrap();
                    got.extend_from_slice(&buf[..end]);
                    controls.extend(c);
                }
                assert!(got == want, "step {step}, masked {masked}");
                assert_eq!(
                    controls,
                    [Control::Ping(b"hi".to_vec()), Control::Close(Some(1000))],
                    "step {step}"
                );
                assert!(d.closed);
            }
        }
    }

    #[test]
    fn masking_eight_bytes_at_a_time_is_masking_byte_by_byte() {
        let key = [0x12, 0x34, 0x56, 0x78];
        for offset in 0..4 {
            for len in [0, 1, 3, 7, 8, 9, 15, 16, 17, 100] {
                let data: Vec<u8> = (0..len as u8).collect();
                let mut fast = data.clone();
                apply_mask(&mut fast, key, offset);
                let slow: Vec<u8> = (data.iter().enumerate())
                    .map(|(i, b)| b ^ key[(offset + i) & 3])
                    .collect();
                assert_eq!(fast, slow, "offset {offset}, len {len}");
            }
        }
    }

    #[test]
    fn what_a_peer_must_not_send_is_refused() {
        let mut d = Decoder::new(false);
        let e = d
            .decode(&mut frame(OP_TEXT, b"x", Some([1, 2, 3, 4])), 0)
            .unwrap_err();
        assert!(
            e.to_string().contains("masked frame from the server"),
            "{e}"
        );
        let mut d = Decoder::new(true);
        assert!(d.decode(&mut frame(OP_TEXT, b"x", None), 0).is_err());
        let mut long_ping = frame(OP_PING, &[0; 126], None);
        assert!(Decoder::new(false).decode(&mut long_ping, 0).is_err());
        let mut huge = vec![0x82, 127];
        huge.extend_from_slice(&(MAX_PAYLOAD + 1).to_be_bytes());
        assert!(Decoder::new(false).decode(&mut huge, 0).is_err());
        let mut rsv = frame(OP_TEXT, b"x", None);
        rsv[0] |= 0x40;
        assert!(Decoder::new(false).decode(&mut rsv, 0).is_err());
        assert_eq!(
            frame_len(&frame(OP_TEXT, &[0; 300], Some([0; 4]))),
            Some(308)
        );
    }
}
