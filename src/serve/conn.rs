//! The server side of one connection: a plain or TLS stream (upgradable in place for
//! STARTTLS/STLS), a bounded read buffer, and a write buffer.
//!
//! Replies are queued and only flushed when the session is about to block on a read, that
//! is when the read buffer holds no further complete command. A pipelined batch of
//! commands therefore gets its replies in one write, which is what makes PIPELINING fast.
//! Every read has an idle deadline; waiting for a new command also wakes on shutdown.

use std::future::Future;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::transport::tls::TlsIo;

/// A server's TLS over its TCP connection (rustls' unbuffered API: no buffer is held
/// while the client thinks).
type ServerTls = TlsIo<rustls::server::UnbufferedServerConnection, TcpStream>;

use crate::proto::smtp::data::DataDecoder;
use crate::transport::websocket::{self, Control, Decoder};
use crate::transport::WaitTimer;

const READ_CHUNK: usize = 16 * 1024;
/// How much of a discarded overlong line is kept: enough for an IMAP tag.
const OVERLONG_HEAD: usize = 128;

#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("peer closed the connection")]
    Closed,
    #[error("idle timeout")]
    Idle,
    #[error("line too long")]
    LineTooLong,
    #[error("server shutting down")]
    Shutdown,
    #[error("connection dropped (fault injection)")]
    Dropped,
    #[error("TLS handshake failed: {0}")]
    Tls(std::io::Error),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<ServerTls>),
    Gone,
}

/// With nothing buffered and nothing to read yet, gives the read buffer back while the
/// client thinks (an IMAP session in IDLE, a kept SMTP connection) and returns when the
/// socket has bytes; the caller takes a buffer again then ([`take_spare`]). Over TLS, when
/// nothing decrypted waits to be read (the adapter holds no buffer of its own then).
/// Cancel-safe: it frees only an empty buffer.
async fn wait_bare(stream: &Stream, rbuf: &mut Vec<u8>) -> std::io::Result<()> {
    if !rbuf.is_empty() {
        return Ok(());
    }
    let s = match stream {
        Stream::Plain(s) => s,
        Stream::Tls(t) if !t.has_plaintext() => t.get_ref(),
        _ => return Ok(()),
    };
    let mut ready = std::pin::pin!(s.readable());
    let now = std::future::poll_fn(|cx| std::task::Poll::Ready(ready.as_mut().poll(cx))).await;
    if now.is_pending() {
        let buf = std::mem::take(rbuf);
        if buf.capacity() == READ_CHUNK {
            keep(&READS, buf);
        }
        ready.await?;
    }
    Ok(())
}

/// Buffers left by sessions on this thread for the next one that needs one: a session
/// that waits for every command (a client that does not pipeline) would otherwise free
/// and allocate a read buffer per command, and a message body per message.
type Spares = std::cell::RefCell<Vec<Vec<u8>>>;

/// At most this many spare buffers of each kind per thread.
const SPARES: usize = 8;

/// Message bodies up to this size leave their buffer for the next message on the thread.
const SPARE_BODY: usize = 256 * 1024;

thread_local! {
    /// Read buffers (of `READ_CHUNK` bytes) of sessions waiting with nothing buffered.
    static READS: Spares = const { std::cell::RefCell::new(Vec::new()) };
    /// Buffers of finished message bodies.
    static BODIES: Spares = const { std::cell::RefCell::new(Vec::new()) };
}

/// Keeps `buf`, emptied, among `spares` (unless there are enough already).
fn keep(spares: &'static std::thread::LocalKey<Spares>, mut buf: Vec<u8>) {
    buf.clear();
    spares.with_borrow_mut(|s| {
        if s.len() < SPARES {
            s.push(buf);
        }
    });
}

fn reuse(spares: &'static std::thread::LocalKey<Spares>) -> Option<Vec<u8>> {
    spares.with_borrow_mut(|s| s.pop())
}

/// An empty buffer for a message body: one a finished message left on this thread
/// ([`give_body`]) when there is one, so a message costs no allocation (nor the
/// reallocations of a buffer growing to the message's size).
pub fn take_body() -> Vec<u8> {
    reuse(&BODIES).unwrap_or_default()
}

/// The buffer of a message that is done with, for the next one (see [`take_body`]).
pub fn give_body(body: Vec<u8>) {
    if body.capacity() <= SPARE_BODY {
        keep(&BODIES, body);
    }
}

/// Room for a read in `rbuf` (a spare buffer when it has none and this thread has one).
fn take_spare(rbuf: &mut Vec<u8>) {
    if rbuf.capacity() == 0 {
        if let Some(b) = reuse(&READS) {
            *rbuf = b;
            return;
        }
    }
    rbuf.reserve(READ_CHUNK);
}

/// The server's side of a TLS handshake on `tcp`, bounded by `idle`.
async fn accept(
    tcp: TcpStream,
    acceptor: &TlsAcceptor,
    idle: Duration,
) -> Result<Box<ServerTls>, ConnError> {
    let mut tls =
        Box::new(TlsIo::server(acceptor.config().clone(), tcp).map_err(|e| {
            ConnError::Tls(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
        })?);
    tokio::time::timeout(idle, std::future::poll_fn(|cx| tls.poll_handshake(cx)))
        .await
        .map_err(|_| ConnError::Idle)?
        .map_err(ConnError::Tls)?;
    Ok(tls)
}

pub struct Conn {
    stream: Stream,
    rbuf: Vec<u8>,
    rpos: usize,
    wbuf: Vec<u8>,
    idle: Duration,
    shutdown: watch::Receiver<bool>,
    writes: u64,
    overlong_head: Vec<u8>,
    timer: WaitTimer,
    /// `--slow-read`: bytes per second this connection is read at most.
    pace: Option<u64>,
    /// After a WebSocket handshake: the client's frames taken apart as they are read;
    /// each [`Conn::queue_message`] is one frame.
    ws: Option<Box<Ws>>,
    /// `--serial-delays`: the lock a delay is waited under.
    serial: Option<super::faults::Serial>,
}

/// A WebSocket connection's own state, boxed: a plain session pays one pointer for it.
struct Ws {
    dec: Decoder,
    /// The status of the Close this side sends (1002 once the client broke the framing),
    /// and whether it is queued already: sent once, before TCP closes.
    close_code: u16,
    close_sent: bool,
}

impl Conn {
    pub fn plain(tcp: TcpStream, idle: Duration, shutdown: watch::Receiver<bool>) -> Self {
        Conn::with(Stream::Plain(tcp), idle, shutdown)
    }

    fn with(stream: Stream, idle: Duration, shutdown: watch::Receiver<bool>) -> Self {
        Conn {
            stream,
            rbuf: Vec::new(),
            rpos: 0,
            wbuf: Vec::new(),
            idle,
            shutdown,
            writes: 0,
            overlong_head: Vec::new(),
            timer: WaitTimer::default(),
            pace: None,
            ws: None,
            serial: None,
        }
    }

    /// Waits out every delay under `lock`, one connection at a time (`--serial-delays`).
    pub fn serialize(&mut self, lock: super::faults::Serial) {
        self.serial = Some(lock);
    }

    /// Reads this connection at most `bytes_per_s` (a slow reader, `--slow-read`).
    pub fn pace(&mut self, bytes_per_s: u64) {
        self.pace = Some(bytes_per_s);
    }

    /// Implicit TLS (smtps, pop3s, imaps): handshake first, bounded by the idle deadline.
    pub async fn tls(
        tcp: TcpStream,
        acceptor: &TlsAcceptor,
        idle: Duration,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Self, ConnError> {
        let mut c = Conn::plain_placeholder(idle, shutdown);
        c.stream = Stream::Tls(accept(tcp, acceptor, idle).await?);
        Ok(c)
    }

    fn plain_placeholder(idle: Duration, shutdown: watch::Receiver<bool>) -> Self {
        Conn::with(Stream::Gone, idle, shutdown)
    }

    pub fn is_tls(&self) -> bool {
        matches!(self.stream, Stream::Tls(_))
    }

    /// Whether the TLS handshake resumed an earlier session.
    pub fn tls_resumed(&self) -> bool {
        match &self.stream {
            Stream::Tls(t) => t.resumed(),
            _ => false,
        }
    }

    /// Queues bytes to send; they go out at the next flush.
    pub fn queue(&mut self, bytes: &[u8]) {
        self.wbuf.extend_from_slice(bytes);
    }

    /// Queues one message: over WebSocket one frame of `parts` in order, else the parts.
    pub fn queue_message(&mut self, parts: &[&[u8]]) {
        if self.ws.is_some() {
            websocket::frame_into(&mut self.wbuf, websocket::OP_TEXT, parts, None);
        } else {
            parts.iter().for_each(|p| self.wbuf.extend_from_slice(p));
        }
    }

    /// The connection speaks WebSocket from here on (the 101 answer is queued): what
    /// is already buffered past the request and every read after are frames.
    pub fn websocket(&mut self) -> Result<(), ConnError> {
        self.ws = Some(Box::new(Ws {
            dec: Decoder::new(true),
            close_code: 1000,
            close_sent: false,
        }));
        let start = self.rpos;
        self.ws_decode(start)
    }

    pub fn is_websocket(&self) -> bool {
        self.ws.is_some()
    }

    /// Takes the frames in `rbuf[from..]` apart in place; a ping is answered, a close
    /// ends the input (answered with ours at [`Conn::close`]).
    fn ws_decode(&mut self, from: usize) -> Result<(), ConnError> {
        let Some(ws) = self.ws.as_mut() else {
            return Ok(());
        };
        let (end, controls) = match ws.dec.decode(&mut self.rbuf[from..], 0) {
            Ok(d) => d,
            Err(e) => {
                // RFC 6455 §7.4.1: the endpoint that fails the connection says why.
                ws.close_code = 1002;
                return Err(e.into());
            }
        };
        self.rbuf.truncate(from + end);
        for c in controls {
            if let Control::Ping(payload) = c {
                websocket::frame_into(&mut self.wbuf, websocket::OP_PONG, &[&payload], None);
            }
        }
        Ok(())
    }

    /// The client sent its WebSocket close: nothing more comes.
    fn ws_closed(&self) -> bool {
        self.ws.as_ref().is_some_and(|w| w.dec.closed)
    }

    /// Queues formatted text, written straight into the output buffer.
    pub fn queue_fmt(&mut self, text: std::fmt::Arguments<'_>) {
        use std::io::Write;
        // Writing into a Vec cannot fail.
        let _ = self.wbuf.write_fmt(text);
    }

    /// Writes what is queued, within the idle limit. A write that the kernel takes at
    /// once (nearly all) reads no clock and arms no timer.
    pub async fn flush(&mut self) -> Result<(), ConnError> {
        if self.wbuf.is_empty() {
            return Ok(());
        }
        let Conn {
            stream,
            wbuf,
            timer,
            idle,
            ..
        } = self;
        let write = std::pin::pin!(async {
            match stream {
                Stream::Plain(s) => s.write_all(wbuf).await,
                Stream::Tls(s) => {
                    s.write_all(wbuf).await?;
                    s.flush().await
                }
                Stream::Gone => Err(std::io::ErrorKind::NotConnected.into()),
            }
        });
        timer
            .bound(write, None, *idle)
            .await
            .ok_or(ConnError::Idle)??;
        self.wbuf.clear();
        self.writes += 1;
        Ok(())
    }

    /// How many times queued replies were written out (one per pipelined batch).
    pub fn writes(&self) -> u64 {
        self.writes
    }

    /// Is another complete line already buffered (the client pipelined)?
    pub fn has_line(&self) -> bool {
        self.rbuf[self.rpos..].contains(&b'\n')
    }

    fn compact(&mut self) {
        if self.rpos == self.rbuf.len() {
            self.rbuf.clear();
            self.rpos = 0;
        } else if self.rpos > READ_CHUNK {
            self.rbuf.drain(..self.rpos);
            self.rpos = 0;
        }
    }

    /// Flushes pending replies, then reads more bytes. `idle_wait` makes the wait also end
    /// on server shutdown (only between commands, never in the middle of one).
    /// Cancel-safe once the flush is done: bytes are appended only when read.
    async fn fill(&mut self, idle_wait: bool) -> Result<(), ConnError> {
        self.flush().await?;
        self.read_until(None, idle_wait).await
    }

    /// Reads more bytes until `deadline` (None: the idle limit, from when the read has to
    /// wait), then `Idle`; with `watch_shutdown` the wait
    /// also ends on server shutdown. Cancel-safe: bytes are appended only when read.
    async fn read_until(
        &mut self,
        deadline: Option<tokio::time::Instant>,
        watch_shutdown: bool,
    ) -> Result<(), ConnError> {
        self.compact();
        if self.ws_closed() {
            return Err(ConnError::Closed);
        }
        let result = {
            let Conn {
                stream,
                rbuf,
                shutdown,
                timer,
                idle,
                ..
            } = &mut *self;
            let read = std::pin::pin!(async {
                wait_bare(stream, rbuf).await?;
                take_spare(rbuf);
                match stream {
                    Stream::Plain(s) => s.read_buf(rbuf).await,
                    Stream::Tls(s) => s.read_buf(rbuf).await,
                    Stream::Gone => Ok(0),
                }
            });
            // The connection's one timer, not one per read (see `WaitTimer`).
            let read = timer.bound(read, deadline, *idle);
            if watch_shutdown {
                tokio::select! {
                    r = read => r,
                    _ = shutdown.wait_for(|v| *v) => return Err(ConnError::Shutdown),
                }
            } else {
                read.await
            }
        };
        match result {
            Some(Ok(0)) => Err(ConnError::Closed),
            Some(Ok(n)) => {
                let from = self.rbuf.len() - n;
                self.ws_decode(from)?;
                if let Some(rate) = self.pace {
                    tokio::time::sleep(Duration::from_secs_f64(n as f64 / rate as f64)).await;
                }
                Ok(())
            }
            Some(Err(e)) => Err(e.into()),
            None => Err(ConnError::Idle),
        }
    }

    /// Reads more input without a deadline of its own (the caller bounds it); cancel-safe.
    pub async fn fill_unbounded(&mut self) -> Result<(), ConnError> {
        if self.ws_closed() {
            return Err(ConnError::Closed);
        }
        self.flush().await?;
        self.compact();
        wait_bare(&self.stream, &mut self.rbuf).await?;
        take_spare(&mut self.rbuf);
        let n = match &mut self.stream {
            Stream::Plain(s) => s.read_buf(&mut self.rbuf).await?,
            Stream::Tls(s) => s.read_buf(&mut self.rbuf).await?,
            Stream::Gone => 0,
        };
        if n == 0 {
            return Err(ConnError::Closed);
        }
        let from = self.rbuf.len() - n;
        self.ws_decode(from)
    }

    /// The next frame already in the read buffer, as `frame` delimits it (a sans-I/O
    /// framer: `Ok(Some(len))` when the buffer starts with a whole frame of `len` bytes,
    /// `Ok(None)` when more bytes are needed). No I/O: the caller reads more with
    /// [`Conn::read_more`] when this gives `None`. The framer caps what it waits for, so
    /// the buffer stays bounded by its cap plus one read.
    pub fn take_frame<E>(
        &mut self,
        frame: impl FnOnce(&[u8]) -> Result<Option<usize>, E>,
    ) -> Result<Option<&[u8]>, E> {
        let start = self.rpos;
        let avail = &self.rbuf[start..];
        let Some(n) = frame(avail)? else {
            return Ok(None);
        };
        self.rpos += n.min(avail.len());
        Ok(Some(&self.rbuf[start..self.rpos]))
    }

    /// Reads more bytes, without flushing first, until `deadline` (then `Idle`). While
    /// nothing is buffered (between frames) the wait also ends on server shutdown.
    /// Cancel-safe, so a session can wait for its peer and for its outbound queue at
    /// once; flush before calling it (a cancelled flush would write bytes twice).
    pub async fn read_more(&mut self, deadline: tokio::time::Instant) -> Result<(), ConnError> {
        self.compact();
        let between = self.rpos == self.rbuf.len();
        self.read_until(Some(deadline), between).await
    }

    /// The idle limit this connection was made with.
    pub fn idle(&self) -> Duration {
        self.idle
    }

    /// Reads one line (CRLF or bare LF stripped) of at most `max` bytes. A longer line is
    /// read to its end and thrown away, then reported as `LineTooLong`, so the session can
    /// answer and carry on without buffering it.
    pub async fn read_line(&mut self, max: usize) -> Result<Vec<u8>, ConnError> {
        let mut line = Vec::new();
        self.read_line_into(max, &mut line).await?;
        Ok(line)
    }

    /// [`Conn::read_line`] into `line` (cleared first): a session that keeps one buffer
    /// for its commands allocates none per command.
    pub async fn read_line_into(
        &mut self,
        max: usize,
        line: &mut Vec<u8>,
    ) -> Result<(), ConnError> {
        line.clear();
        let mut discarding = false;
        loop {
            let avail = &self.rbuf[self.rpos..];
            if let Some(i) = avail.iter().position(|&b| b == b'\n') {
                let start = self.rpos;
                self.rpos += i + 1;
                let mut end = start + i;
                if end > start && self.rbuf[end - 1] == b'\r' {
                    end -= 1;
                }
                if discarding || end - start > max {
                    if !discarding {
                        self.keep_overlong_head(start);
                    }
                    self.compact();
                    return Err(ConnError::LineTooLong);
                }
                line.extend_from_slice(&self.rbuf[start..end]);
                self.compact();
                return Ok(());
            }
            let waiting_idle = avail.is_empty() && !discarding;
            if avail.len() > max + 1 {
                if !discarding {
                    self.keep_overlong_head(self.rpos);
                }
                discarding = true;
                self.rpos = self.rbuf.len();
                self.compact();
            }
            self.fill(waiting_idle).await?;
        }
    }

    fn keep_overlong_head(&mut self, start: usize) {
        let end = self.rbuf.len().min(start + OVERLONG_HEAD);
        self.overlong_head = self.rbuf[start..end].to_vec();
    }

    /// The start of the line last reported as `LineTooLong` (IMAP answers with its tag).
    pub fn overlong_head(&self) -> &[u8] {
        &self.overlong_head
    }

    /// Feeds the DATA decoder until the terminating dot.
    pub async fn read_data(&mut self, decoder: &mut DataDecoder) -> Result<(), ConnError> {
        loop {
            let p = decoder.feed(&self.rbuf[self.rpos..]);
            self.rpos += p.consumed;
            self.compact();
            if p.done {
                return Ok(());
            }
            self.fill(false).await?;
        }
    }

    /// Reads exactly `n` bytes (BDAT, IMAP literals), handing them to `sink` in pieces.
    pub async fn read_exact_with(
        &mut self,
        mut n: u64,
        mut sink: impl FnMut(&[u8]),
    ) -> Result<(), ConnError> {
        loop {
            let avail = self.rbuf.len() - self.rpos;
            let take = (avail as u64).min(n) as usize;
            sink(&self.rbuf[self.rpos..self.rpos + take]);
            self.rpos += take;
            n -= take as u64;
            self.compact();
            if n == 0 {
                return Ok(());
            }
            self.fill(false).await?;
        }
    }

    /// Upgrades to TLS after the "go ahead" reply (which is flushed first). Anything the
    /// client pipelined after the STARTTLS command is discarded (RFC 3207 section 4.2:
    /// plaintext injected before the handshake must not be acted on).
    pub async fn starttls(&mut self, acceptor: &TlsAcceptor) -> Result<(), ConnError> {
        self.flush().await?;
        self.rbuf.clear();
        self.rpos = 0;
        let tcp = match std::mem::replace(&mut self.stream, Stream::Gone) {
            Stream::Plain(tcp) => tcp,
            other => {
                self.stream = other;
                return Err(ConnError::Tls(std::io::Error::other("TLS already active")));
            }
        };
        self.stream = Stream::Tls(accept(tcp, acceptor, self.idle).await?);
        Ok(())
    }

    /// Over WebSocket, queues this side's Close frame (once): RFC 6455 §7.1.1 wants it
    /// before the TCP connection closes, or the client sees 1006 (abnormal closure).
    fn queue_ws_close(&mut self) {
        let Some(ws) = self.ws.as_mut().filter(|w| !w.close_sent) else {
            return;
        };
        ws.close_sent = true;
        let code = ws.close_code.to_be_bytes();
        websocket::frame_into(&mut self.wbuf, websocket::OP_CLOSE, &[&code], None);
    }

    /// Flushes what is queued and closes (bounded in time; errors do not matter here).
    pub async fn close(&mut self) {
        self.queue_ws_close();
        let _ = self.flush().await;
        let fut = async {
            match &mut self.stream {
                Stream::Plain(s) => {
                    let _ = s.shutdown().await;
                }
                Stream::Tls(s) => {
                    let _ = s.shutdown().await;
                }
                Stream::Gone => {}
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(1), fut).await;
        self.stream = Stream::Gone;
    }

    /// Ends a connection the server gives up on while the client may still be sending
    /// (a stream error after an oversized stanza): flushes, shuts the write side, then
    /// reads and discards until the client closes, for at most `limit`. Closing with
    /// unread input would make the kernel answer with a reset, which can destroy the
    /// error the client has not read yet.
    pub async fn linger(&mut self, limit: Duration) {
        self.queue_ws_close();
        if self.flush().await.is_err() {
            return;
        }
        let fut = async {
            let shut = match &mut self.stream {
                Stream::Plain(s) => s.shutdown().await,
                Stream::Tls(s) => s.shutdown().await,
                Stream::Gone => return,
            };
            if shut.is_err() {
                return;
            }
            let mut sink = vec![0u8; READ_CHUNK];
            loop {
                let n = match &mut self.stream {
                    Stream::Plain(s) => s.read(&mut sink).await,
                    Stream::Tls(s) => s.read(&mut sink).await,
                    Stream::Gone => Ok(0),
                };
                if !matches!(n, Ok(k) if k > 0) {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(limit, fut).await;
    }

    /// Waits until `d` has passed, flushing first so the delay is seen by the client.
    pub async fn pause(&mut self, d: Duration) -> Result<(), ConnError> {
        if d.is_zero() {
            return Ok(());
        }
        self.flush().await?;
        match &self.serial {
            Some(lock) => {
                let _held = lock.0.lock().await;
                tokio::time::sleep(d).await;
            }
            None => tokio::time::sleep(d).await,
        }
        Ok(())
    }

    /// A receiver that turns true on server shutdown (for IMAP IDLE).
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpListener;

    async fn pair() -> (Conn, TcpStream, watch::Sender<bool>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (server, _) = l.accept().await.unwrap();
        let (tx, rx) = watch::channel(false);
        (Conn::plain(server, Duration::from_secs(5), rx), client, tx)
    }

    #[tokio::test]
    async fn pipelined_batch_is_answered_with_one_write() {
        let (mut conn, mut client, _tx) = pair().await;
        client.write_all(b"ONE\r\nTWO\r\nTHREE\r\n").await.unwrap();
        // Wait until all three lines are in the server's buffer.
        assert_eq!(conn.read_line(100).await.unwrap(), b"ONE");
        while !conn.rbuf[conn.rpos..].ends_with(b"THREE\r\n") {
            conn.fill(false).await.unwrap();
        }
        conn.queue(b"1\r\n");
        assert_eq!(conn.read_line(100).await.unwrap(), b"TWO");
        conn.queue(b"2\r\n");
        assert_eq!(conn.read_line(100).await.unwrap(), b"THREE");
        conn.queue(b"3\r\n");
        assert_eq!(
            conn.writes(),
            0,
            "nothing written while commands are pending"
        );
        client.write_all(b"FOUR\n").await.unwrap();
        assert_eq!(conn.read_line(100).await.unwrap(), b"FOUR");
        assert_eq!(conn.writes(), 1, "one write for the batch, before blocking");
        let mut buf = [0u8; 9];
        client.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"1\r\n2\r\n3\r\n");
    }

    #[tokio::test]
    async fn overlong_line_is_skipped_and_buffer_stays_small() {
        let (mut conn, mut client, _tx) = pair().await;
        let mut big = vec![b'x'; 200_000];
        big.extend_from_slice(b"\r\nNEXT\r\n");
        let writer = tokio::spawn(async move {
            client.write_all(&big).await.unwrap();
            client
        });
        assert!(matches!(
            conn.read_line(4096).await,
            Err(ConnError::LineTooLong)
        ));
        assert!(conn.rbuf.capacity() < 64 * 1024, "{}", conn.rbuf.capacity());
        assert_eq!(conn.read_line(4096).await.unwrap(), b"NEXT");
        drop(writer.await.unwrap());
        assert!(matches!(conn.read_line(4096).await, Err(ConnError::Closed)));
    }

    #[tokio::test]
    async fn waiting_for_a_command_ends_on_shutdown() {
        let (mut conn, _client, tx) = pair().await;
        tx.send(true).unwrap();
        assert!(matches!(
            conn.read_line(100).await,
            Err(ConnError::Shutdown)
        ));
    }
}
