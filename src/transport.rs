//! The one client connection type: TCP or TLS (implicit, or upgraded in place by STARTTLS),
//! a bounded read buffer whose units a protocol's framer delimits, and a deadline on every
//! read and write. Protocol logic lives in `proto`, timing in the sessions; this only
//! moves bytes.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};

use crate::metrics::note_arrival;

mod handshake;
mod stamped;
mod timer;
pub mod tls;
mod tls_words;
pub mod websocket;

pub use stamped::keep_on as keep_receive_stamps_on;
pub use timer::WaitTimer;
pub use tls_words::{client_certificate_refused, tls_words, UNTRUSTED};

use stamped::Tcp;

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("connection refused")]
    Refused,
    #[error("connection closed by the server")]
    Closed,
    #[error("timed out after {}", crate::units::fmt_duration(*.0))]
    Timeout(Duration),
    /// A connect that timed out with its SYN sent again and never answered.
    #[error("no answer to the SYN within {} (sent again, never answered): the server's accept queue is full, or something drops SYNs", crate::units::fmt_duration(*.0))]
    SynUnanswered(Duration),
    /// A first read that timed out on a connection the server never completed: it sent
    /// its SYN/ACK again, or left our data unacknowledged.
    #[error("timed out after {}: the server's accept queue overflowed (SYN/ACK retransmits): it never completed the TCP handshake", crate::units::fmt_duration(*.0))]
    Unaccepted(Duration),
    /// A first read that timed out on a connection whose SYN had to be sent again: the
    /// server's queue was overflowing. With SYN cookies (the queue of half-open
    /// connections full) the server keeps no state and sends no SYN/ACK again, so a
    /// handshake whose last ACK it dropped looks, from here, like a silent server.
    #[error("timed out after {} on a connection whose SYN had to be sent again: the server's accept queue was overflowing (a handshake it dropped at the last ACK looks open from here)", crate::units::fmt_duration(*.0))]
    UnacceptedLikely(Duration),
    /// A connect from `from` (the system's choice when None) to `to` found no local port
    /// left: every one is held by a connection to that destination.
    #[error("out of local ports for {}→{to}: add source addresses with --bind (or widen net.ipv4.ip_local_port_range)", .from.map_or("this host".to_string(), |a| a.to_string()))]
    OutOfPorts {
        from: Option<IpAddr>,
        to: SocketAddr,
    },
    /// A TLS failure as rustls reported it (certificate checks, alerts from the server).
    #[error("TLS: {}", tls_words(.0))]
    Tls(rustls::Error),
    /// A TLS failure that rustls did not name (the handshake's I/O, no configuration).
    #[error("TLS: {0}")]
    TlsIo(String),
    #[error("protocol: {0}")]
    Protocol(String),
    #[error("{0}")]
    Io(io::Error),
}

impl TransportError {
    fn from_io(e: io::Error) -> Self {
        use io::ErrorKind as K;
        match e.kind() {
            K::ConnectionRefused => TransportError::Refused,
            K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::UnexpectedEof => {
                TransportError::Closed
            }
            K::InvalidData => TransportError::tls(e),
            _ => TransportError::Io(e),
        }
    }

    /// A failed handshake or TLS read: the rustls error inside, when there is one.
    fn tls(e: io::Error) -> Self {
        match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
            Some(t) => TransportError::Tls(t.clone()),
            None => TransportError::TlsIo(e.to_string()),
        }
    }
}

enum Stream {
    Plain(Tcp),
    Tls(Box<ClientTls>),
    /// After the WebSocket handshake, over either of the above.
    Ws(Box<websocket::Ws<Stream>>),
    /// Only during an upgrade, or after a failed one.
    Gone,
}

/// A client's TLS over its TCP connection.
type ClientTls = tls::TlsIo<rustls::client::UnbufferedClientConnection, Tcp>;

fn gone() -> io::Error {
    io::ErrorKind::NotConnected.into()
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::Ws(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            Stream::Gone => Poll::Ready(Err(gone())),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::Ws(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            Stream::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            Stream::Ws(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            Stream::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
            Stream::Ws(_) | Stream::Gone => false,
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::Ws(s) => Pin::new(s.as_mut()).poll_flush(cx),
            Stream::Gone => Poll::Ready(Err(gone())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Stream::Ws(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            Stream::Gone => Poll::Ready(Ok(())),
        }
    }
}

const INITIAL_BUF: usize = 4096;

/// Bytes read and not yet handed out: a bounded buffer that codecs' framers delimit.
/// It is allocated when bytes arrive, not before, and a connection that waits without
/// anything buffered can give it back (see [`Inbox::idle`] and `bare_waits`): ten
/// thousand chat sessions waiting for pushed stanzas then hold no read buffers.
struct Inbox {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes of the last frame handed out, released at the next read.
    pending: usize,
    /// A read that finds nothing buffered and has to wait gives the buffer back first,
    /// and takes bytes through the stack when they come (reads of pushed data).
    bare_waits: bool,
    /// The connection's one read timer (see [`WaitTimer`]): a read that has to wait does not
    /// register a timer of its own.
    timer: WaitTimer,
    /// Until the first byte comes: what a timeout asks the kernel about the handshake.
    probe: Option<Probe>,
}

/// The socket of a connection that has not heard from its server yet, and the SYN
/// retransmits its connect needed.
#[derive(Debug, Clone, Copy)]
struct Probe {
    fd: std::os::fd::RawFd,
    syn_retransmits: u32,
}

impl Probe {
    /// The error of a timeout before the server said anything: a server that never
    /// completed the handshake is told from a silent one (one getsockopt, once).
    fn timed_out(probe: &mut Option<Probe>, timeout: Duration) -> TransportError {
        match probe.take().and_then(|p| Some((handshake::read(p.fd)?, p))) {
            Some((h, p)) if h.unaccepted(p.syn_retransmits) => TransportError::Unaccepted(timeout),
            Some((h, p)) if h.bytes_received == 0 && p.syn_retransmits > 0 => {
                TransportError::UnacceptedLikely(timeout)
            }
            _ => TransportError::Timeout(timeout),
        }
    }
}

impl Inbox {
    fn new(probe: Option<Probe>) -> Self {
        Inbox {
            buf: Vec::new(),
            start: 0,
            end: 0,
            pending: 0,
            bare_waits: false,
            timer: WaitTimer::default(),
            probe,
        }
    }

    fn release(&mut self) {
        self.start += self.pending;
        self.pending = 0;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            // A large fetched message grew the buffer: give the memory back.
            if self.buf.len() > 256 * 1024 {
                self.buf.truncate(INITIAL_BUF);
                self.buf.shrink_to_fit();
            }
        }
    }

    /// Frees the buffer if nothing is in it (the last frame handed out is done with).
    fn idle(&mut self) {
        self.release();
        if self.start == self.end {
            self.buf = Vec::new();
        }
        // The timer stays: dropping a registered one costs more (about 1 KiB per
        // connection held by the runtime's timer driver until it runs, measured by
        // tests/idle_memory.rs) than keeping it.
    }

    /// See [`Connection::read_frame`]. A future written by hand rather than an async fn:
    /// a waiting session holds it for as long as it waits, and nested async fns would
    /// each keep their arguments twice (456 bytes against 80).
    fn read_frame<'a, F, E>(
        &'a mut self,
        io: &'a mut (dyn AsyncRead + Unpin + Send),
        timeout: Duration,
        cap: usize,
        frame: F,
    ) -> ReadFrame<'a, F>
    where
        F: FnMut(&[u8]) -> Result<Option<usize>, E>,
        E: std::fmt::Display,
    {
        self.release();
        ReadFrame {
            inbox: Some(self),
            io,
            deadline: tokio::time::Instant::now() + timeout,
            timeout,
            cap,
            frame,
            or_close: false,
        }
    }

    /// Makes room at the end of the buffer for a read (`Err` when the unit would pass
    /// `cap`).
    fn room(&mut self, cap: usize) -> Result<(), TransportError> {
        if self.start > 0 && self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= cap {
                return Err(TransportError::Protocol("reply too long".into()));
            }
            self.buf
                .resize((self.buf.len() * 2).max(INITIAL_BUF).min(cap), 0);
        }
        Ok(())
    }

    /// One read into the buffer, bytes or not: the count (0: the server closed).
    fn poll_read(
        &mut self,
        io: &mut (dyn AsyncRead + Unpin + Send),
        cx: &mut Context<'_>,
        cap: usize,
    ) -> Poll<Result<usize, TransportError>> {
        if self.bare_waits && self.start == self.end {
            return self.poll_read_bare(io, cx).map_err(TransportError::from_io);
        }
        self.room(cap)?;
        let mut rb = ReadBuf::new(&mut self.buf[self.end..]);
        match Pin::new(io).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(rb.filled().len())),
            Poll::Ready(Err(e)) => Poll::Ready(Err(TransportError::from_io(e))),
            Poll::Pending => Poll::Pending,
        }
    }

    /// A read into an empty inbox that gives the buffer back while it waits: tried in
    /// the buffer first (bytes already there cost nothing more); when the read has to
    /// wait, the buffer is freed and the bytes that wake it are taken through the stack,
    /// then copied into a new one.
    fn poll_read_bare(
        &mut self,
        io: &mut (dyn AsyncRead + Unpin + Send),
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        if !self.buf.is_empty() {
            let mut rb = ReadBuf::new(&mut self.buf);
            return match Pin::new(&mut *io).poll_read(cx, &mut rb) {
                Poll::Ready(r) => Poll::Ready(r.map(|()| rb.filled().len())),
                Poll::Pending => {
                    self.buf = Vec::new();
                    Poll::Pending
                }
            };
        }
        let mut stack = [0u8; INITIAL_BUF];
        let mut rb = ReadBuf::new(&mut stack);
        match Pin::new(&mut *io).poll_read(cx, &mut rb) {
            Poll::Ready(Ok(())) => {
                let got = rb.filled();
                if !got.is_empty() {
                    self.buf = vec![0; INITIAL_BUF];
                    self.buf[..got.len()].copy_from_slice(got);
                }
                Poll::Ready(Ok(got.len()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The future of a connection's `read_frame`: frames what is buffered, reads more until
/// a unit is whole, within one deadline.
pub struct ReadFrame<'a, F> {
    /// Taken when the unit is handed out (its bytes borrow the inbox for `'a`).
    inbox: Option<&'a mut Inbox>,
    io: &'a mut (dyn AsyncRead + Unpin + Send),
    deadline: tokio::time::Instant,
    timeout: Duration,
    cap: usize,
    frame: F,
    /// A close by the server hands over what was read until then (see [`Self::or_close`]).
    or_close: bool,
}

impl<F> ReadFrame<'_, F> {
    /// When the server closes the connection before the framer found a whole unit, the
    /// bytes read until then are the answer (at least one) instead of an error: for a
    /// unit whose end is the close (an HTTP/1.0 body); the caller asks its framer whether
    /// they make one.
    pub fn or_close(mut self) -> Self {
        self.or_close = true;
        self
    }
}

// Nothing in it is ever pinned: the closure is only called through `&mut`.
impl<F> Unpin for ReadFrame<'_, F> {}

impl<'a, F, E> Future for ReadFrame<'a, F>
where
    F: FnMut(&[u8]) -> Result<Option<usize>, E>,
    E: std::fmt::Display,
{
    type Output = Result<&'a [u8], TransportError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let me = self.get_mut();
        loop {
            let inbox = me.inbox.as_deref_mut().expect("polled after completion");
            match (me.frame)(&inbox.buf[inbox.start..inbox.end]) {
                Ok(Some(n)) => {
                    let inbox = me.inbox.take().expect("checked above");
                    let n = n.min(inbox.end - inbox.start);
                    inbox.pending = n;
                    return Poll::Ready(Ok(&inbox.buf[inbox.start..inbox.start + n]));
                }
                Ok(None) => {
                    if inbox.end - inbox.start >= me.cap {
                        return Poll::Ready(Err(TransportError::Protocol(format!(
                            "response longer than {} bytes",
                            me.cap
                        ))));
                    }
                }
                Err(e) => return Poll::Ready(Err(TransportError::Protocol(e.to_string()))),
            }
            let n = match inbox.poll_read(me.io, cx, me.cap) {
                Poll::Ready(r) => r?,
                Poll::Pending => {
                    return match inbox.timer.poll_until(cx, me.deadline) {
                        Poll::Ready(()) => {
                            Poll::Ready(Err(Probe::timed_out(&mut inbox.probe, me.timeout)))
                        }
                        Poll::Pending => Poll::Pending,
                    };
                }
            };
            if n == 0 {
                if me.or_close && inbox.end > inbox.start {
                    let inbox = me.inbox.take().expect("checked above");
                    inbox.pending = inbox.end - inbox.start;
                    return Poll::Ready(Ok(&inbox.buf[inbox.start..inbox.end]));
                }
                return Poll::Ready(Err(TransportError::Closed));
            }
            inbox.probe = None;
            inbox.end += n;
        }
    }
}

/// The most parts one write takes: a command group, a message and a pipelined QUIT.
const MAX_PARTS: usize = 4;

/// Writes every part in order (and flushes TLS) within `timeout`, in one vectored write
/// when the kernel takes it all: a command group, the message and a pipelined QUIT leave
/// in one segment train, without copying the message or allocating.
async fn send(
    io: &mut (impl AsyncWrite + Unpin),
    parts: &[&[u8]],
    timeout: Duration,
) -> Result<(), TransportError> {
    assert!(
        parts.len() <= MAX_PARTS,
        "at most {MAX_PARTS} parts a write"
    );
    let fut = async {
        let mut slices = [io::IoSlice::new(&[]); MAX_PARTS];
        for (s, p) in slices.iter_mut().zip(parts) {
            *s = io::IoSlice::new(p);
        }
        let mut rest: &mut [io::IoSlice<'_>] = &mut slices[..parts.len()];
        while rest.iter().any(|s| !s.is_empty()) {
            let n = io.write_vectored(rest).await?;
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            io::IoSlice::advance_slices(&mut rest, n);
        }
        io.flush().await
    };
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| TransportError::Timeout(timeout))?
        .map_err(TransportError::from_io)
}

/// Closes the write side politely; errors are irrelevant at this point.
async fn shutdown(io: &mut (impl AsyncWrite + Unpin)) {
    let _ = tokio::time::timeout(Duration::from_millis(200), io.shutdown()).await;
}

pub struct Connection {
    stream: Stream,
    inbox: Inbox,
    timeout: Duration,
    /// SYNs the connect sent again.
    syn_retransmits: u32,
    began: std::time::Instant,
}

/// Connects `socket` to `addr`; returns the stream, when the connect call was made, and
/// the SYNs it had to send again.
/// When the server's SYN/ACK came is noted as its latest answer (see [`note_arrival`]):
/// the call's time plus the handshake's round trip as the kernel measured it (its first
/// RTT sample), when no SYN had to be sent again. Neither the wait for this task to be
/// woken to see the socket writable, nor the server taking this CPU right after the
/// handshake on a shared machine, is counted as the server's connect time.
async fn connect_stamped(
    socket: TcpSocket,
    addr: SocketAddr,
) -> io::Result<(TcpStream, std::time::Instant, u32)> {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let fd = socket.into_raw_fd();
    // SAFETY: `fd` was just released by the TcpSocket: this stream owns it from here.
    let std = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    let to = socket2::SockAddr::from(addr);
    let called = std::time::Instant::now();
    // SAFETY: `to` is a valid sockaddr of the length given.
    let rc = unsafe { libc::connect(fd, to.as_ptr().cast(), to.len()) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINPROGRESS) {
            return Err(e);
        }
    }
    // On loopback the handshake is over when the call returns.
    let mut tcp_info = handshake::read(fd).filter(|h| h.connected());
    let tcp = TcpStream::from_std(std)?;
    if tcp_info.is_none() {
        tcp.writable().await?;
        if let Some(e) = tcp.take_error()? {
            return Err(e);
        }
        tcp.peer_addr()?;
        tcp_info = handshake::read(fd);
    }
    let now = std::time::Instant::now();
    let answered = match tcp_info {
        Some(h) if h.total_retrans == 0 && h.rtt_us > 0 => {
            called + Duration::from_micros(h.rtt_us.into()).min(now - called)
        }
        _ => now,
    };
    note_arrival(answered);
    Ok((tcp, called, tcp_info.map_or(0, |h| h.total_retrans)))
}

/// Where a connect goes in place of its server: set by the fault proxy (`fault::proxy`)
/// when a run has network faults, so that this layer names no layer above it.
static ROUTE: std::sync::OnceLock<Router> = std::sync::OnceLock::new();

/// The address a connect to a server goes to (itself, or a proxy in front of it).
pub type Router = fn(SocketAddr) -> io::Result<SocketAddr>;

/// From now on every connect asks `router` where to go (the first router set stays).
pub fn route_through(router: Router) {
    let _ = ROUTE.set(router);
}

impl Connection {
    /// Connects (optionally from a given source address), with TCP_NODELAY set: a load
    /// generator that waits for delayed ACKs measures its own Nagle, not the server.
    /// A connect that timed out after sending its SYN again is told as such
    /// ([`TransportError::SynUnanswered`]), and one that completed knows how many SYNs
    /// it sent again ([`Connection::syn_retransmits`]).
    pub async fn connect(
        addr: SocketAddr,
        bind: Option<IpAddr>,
        timeout: Duration,
    ) -> Result<Self, TransportError> {
        use std::os::fd::AsRawFd;
        // Through the fault proxy when the run has network faults.
        let addr = match ROUTE.get() {
            Some(route) => route(addr).map_err(TransportError::from_io)?,
            None => addr,
        };
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(TransportError::from_io)?;
        if let Some(ip) = bind {
            // The port is the kernel's to pick at the connect, per source and destination
            // (not one per source whatever the destination, as bind would reserve).
            let on: libc::c_int = 1;
            // SAFETY: a valid socket and an int option of the right size.
            unsafe {
                libc::setsockopt(
                    socket.as_raw_fd(),
                    libc::IPPROTO_IP,
                    libc::IP_BIND_ADDRESS_NO_PORT,
                    (&on as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                );
            }
            socket
                .bind(SocketAddr::new(ip, 0))
                .map_err(TransportError::from_io)?;
        }
        socket.set_nodelay(true).map_err(TransportError::from_io)?;
        let fd = socket.as_raw_fd();
        // Replies are timed to when they reached this host (see `stamped`).
        stamped::keep_on();
        stamped::enable(fd);
        // Pinned here, not moved into the timeout: the socket stays open after a
        // timeout, for the kernel to say whether its SYN went unanswered.
        let connect = connect_stamped(socket, addr);
        tokio::pin!(connect);
        let (tcp, began, syn_retransmits) = match tokio::time::timeout(timeout, &mut connect).await
        {
            Ok(Err(e)) if e.kind() == io::ErrorKind::AddrNotAvailable => {
                return Err(TransportError::OutOfPorts {
                    from: bind,
                    to: addr,
                })
            }
            Ok(r) => r.map_err(TransportError::from_io)?,
            Err(_) => {
                return Err(match handshake::read(fd) {
                    Some(h) if h.total_retrans > 0 => TransportError::SynUnanswered(timeout),
                    _ => TransportError::Timeout(timeout),
                })
            }
        };
        let probe = Probe {
            fd,
            syn_retransmits,
        };
        Ok(Connection {
            stream: Stream::Plain(Tcp(tcp)),
            inbox: Inbox::new(Some(probe)),
            timeout,
            syn_retransmits,
            began,
        })
    }

    /// When the connect call was made: the connect phase is timed from there (the
    /// socket's creation is not the server's time).
    pub fn connect_began(&self) -> std::time::Instant {
        self.began
    }

    /// SYNs the connect had to send again: the server's accept queue was full (or
    /// something dropped them).
    pub fn syn_retransmits(&self) -> u32 {
        self.syn_retransmits
    }

    pub fn is_tls(&self) -> bool {
        match &self.stream {
            Stream::Ws(w) => matches!(w.inner, Stream::Tls(_)),
            s => matches!(s, Stream::Tls(_)),
        }
    }

    /// Whether the connection speaks WebSocket (after [`Connection::websocket`]).
    pub fn is_websocket(&self) -> bool {
        matches!(self.stream, Stream::Ws(_))
    }

    /// Whether the TLS handshake resumed an earlier session (None: not TLS).
    pub fn tls_resumed(&self) -> Option<bool> {
        let stream = match &self.stream {
            Stream::Ws(w) => &w.inner,
            s => s,
        };
        match stream {
            Stream::Tls(s) => Some(s.resumed()),
            _ => None,
        }
    }

    /// Upgrades to TLS in place (implicit TLS right after connect, or after STARTTLS);
    /// returns the CPU time the handshake took on this side (this thread's, while it
    /// made the client hello and while its future was polled: its crypto, certificate
    /// checks and system calls, not another task's).
    pub async fn start_tls(
        &mut self,
        config: Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
    ) -> Result<Duration, TransportError> {
        self.inbox.release();
        if self.inbox.start != self.inbox.end {
            // Bytes after the 220 that came before the handshake would be trusted as if
            // they had come over TLS (the STARTTLS injection attack): refuse.
            return Err(TransportError::Protocol(
                "server sent data after its STARTTLS reply".into(),
            ));
        }
        let Stream::Plain(tcp) = std::mem::replace(&mut self.stream, Stream::Gone) else {
            return Err(TransportError::TlsIo("connection is not plain TCP".into()));
        };
        let cpu = crate::engine::cpu::thread_cpu;
        let t = cpu();
        // Kept here: after a timeout the socket is still open for the probe to ask.
        let mut tls = Box::new(ClientTls::client(config, name, tcp).map_err(TransportError::Tls)?);
        let mut spent = cpu().saturating_sub(t);
        let on_cpu = std::future::poll_fn(|cx| {
            let t = cpu();
            let r = tls.poll_handshake(cx);
            spent += cpu().saturating_sub(t);
            r
        });
        tokio::time::timeout(self.timeout, on_cpu)
            .await
            .map_err(|_| Probe::timed_out(&mut self.inbox.probe, self.timeout))?
            .map_err(TransportError::tls)?;
        // The server spoke (its handshake): no later timeout needs the probe.
        self.inbox.probe = None;
        self.stream = Stream::Tls(tls);
        Ok(spent)
    }

    /// Writes all of `bytes` (over WebSocket: as one message); returns when they are
    /// handed to the kernel.
    pub async fn send(&mut self, bytes: &[u8]) -> Result<(), TransportError> {
        if self.is_websocket() {
            // Boxed: a TCP connection's send does not carry the WebSocket path's state.
            return Box::pin(self.send_ws(&[bytes])).await;
        }
        send(&mut self.stream, &[bytes], self.timeout).await
    }

    /// Writes every part in order, in one vectored write where it can (over WebSocket:
    /// as one message).
    pub async fn send_parts(&mut self, parts: &[&[u8]]) -> Result<(), TransportError> {
        if self.is_websocket() {
            return Box::pin(self.send_ws(parts)).await;
        }
        send(&mut self.stream, parts, self.timeout).await
    }

    async fn send_ws(&mut self, parts: &[&[u8]]) -> Result<(), TransportError> {
        send(&mut self.stream, &[&ws_message(parts)], self.timeout).await
    }

    /// Writes several WebSocket messages (each the concatenation of its parts) in one
    /// write; without WebSocket, every part in order.
    pub async fn send_messages(&mut self, messages: &[[&[u8]; 3]]) -> Result<(), TransportError> {
        let bytes = messages_bytes(messages, self.is_websocket());
        send(&mut self.stream, &[&bytes], self.timeout).await
    }

    /// The WebSocket opening handshake (RFC 6455) for `path` on `host`, asking for
    /// `protocol` (`xmpp`): from here on, each send is one message and reads give the
    /// server's messages' payloads as one stream. A refusal is the server's status line.
    pub async fn websocket(
        &mut self,
        host: &str,
        path: &str,
        protocol: &str,
    ) -> Result<(), TransportError> {
        let key = websocket::new_key();
        let ask = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {protocol}\r\n\r\n"
        );
        send(&mut self.stream, &[ask.as_bytes()], self.timeout).await?;
        let head = self
            .read_frame(16 * 1024, |b: &[u8]| {
                Ok::<_, std::convert::Infallible>(
                    b.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4),
                )
            })
            .await?;
        let head = String::from_utf8_lossy(head).into_owned();
        websocket::check_answer(&head, &key, protocol).map_err(TransportError::Protocol)?;
        self.inbox.release();
        let inner = std::mem::replace(&mut self.stream, Stream::Gone);
        let mut ws = websocket::Ws::client(inner);
        // Frames that came right behind the answer: taken apart where they lie.
        let (start, end) = (self.inbox.start, self.inbox.end);
        if end > start {
            let n = ws
                .decode_buffered(&mut self.inbox.buf[start..end])
                .map_err(TransportError::from_io)?;
            self.inbox.end = start + n;
        }
        self.stream = Stream::Ws(Box::new(ws));
        Ok(())
    }

    /// Reads one protocol unit whose extent a codec's framer decides (an SMTP reply, a
    /// POP3 status line or multi-line response, an IMAP response with its literals).
    /// `frame` sees the buffered bytes and answers `Ok(Some(len))` once a whole unit is
    /// there, `Ok(None)` for more; it may keep state between calls (how far it has
    /// scanned). The unit may be at most `cap` bytes and must arrive within the timeout.
    pub fn read_frame<E: std::fmt::Display, F: FnMut(&[u8]) -> Result<Option<usize>, E>>(
        &mut self,
        cap: usize,
        frame: F,
    ) -> ReadFrame<'_, F> {
        self.inbox
            .read_frame(&mut self.stream, self.timeout, cap, frame)
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Bytes read beyond the last unit handed out (what the server sent ahead).
    pub fn leftover(&self) -> usize {
        self.inbox.end - self.inbox.start - self.inbox.pending
    }

    /// The per-read deadline (also what `read_frame` allows for a whole unit).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The session is about to wait with nothing to read (between messages): the read
    /// buffer is freed if nothing is left in it, and allocated again when bytes come.
    pub fn idle(&mut self) {
        self.inbox.idle();
    }

    /// Reads that wait for data the server pushes when it likes (IMAP IDLE, a chat
    /// stream): each read that finds nothing buffered frees the buffer while it waits.
    pub fn set_bare_waits(&mut self, on: bool) {
        self.inbox.bare_waits = on;
    }

    /// A read half and a write half, for a session that receives while it sends (a
    /// chat session's incoming stanzas, pipelined commands). Bytes already buffered stay
    /// with the read half.
    pub fn split(self) -> (ReadHalf, WriteHalf) {
        let ws = self.is_websocket();
        let (r, w) = tokio::io::split(self.stream);
        (
            ReadHalf {
                io: r,
                inbox: self.inbox,
                timeout: self.timeout,
            },
            WriteHalf {
                ws,
                io: w,
                timeout: self.timeout,
            },
        )
    }

    /// Closes the write side politely; errors are irrelevant at this point.
    pub async fn shutdown(mut self) {
        shutdown(&mut self.stream).await;
    }
}

/// `messages` framed (over WebSocket) or their parts in order.
fn messages_bytes(messages: &[[&[u8]; 3]], ws: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for m in messages {
        if ws {
            websocket::frame_into(&mut out, websocket::OP_TEXT, m, Some(rand::random()));
        } else {
            m.iter().for_each(|p| out.extend_from_slice(p));
        }
    }
    out
}

/// `parts` as one masked WebSocket text message.
fn ws_message(parts: &[&[u8]]) -> Vec<u8> {
    let mut framed = Vec::new();
    websocket::frame_into(&mut framed, websocket::OP_TEXT, parts, Some(rand::random()));
    framed
}

/// The receiving half of a split [`Connection`].
pub struct ReadHalf {
    io: tokio::io::ReadHalf<Stream>,
    inbox: Inbox,
    timeout: Duration,
}

impl ReadHalf {
    /// As [`Connection::read_frame`].
    pub fn read_frame<E: std::fmt::Display, F: FnMut(&[u8]) -> Result<Option<usize>, E>>(
        &mut self,
        cap: usize,
        frame: F,
    ) -> ReadFrame<'_, F> {
        self.inbox
            .read_frame(&mut self.io, self.timeout, cap, frame)
    }

    /// The deadline of each read (a session that waits for pushed data sets it long).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// As [`Connection::set_bare_waits`].
    pub fn set_bare_waits(&mut self, on: bool) {
        self.inbox.bare_waits = on;
    }
}

/// The sending half of a split [`Connection`].
pub struct WriteHalf {
    io: tokio::io::WriteHalf<Stream>,
    timeout: Duration,
    /// Each send is one WebSocket message.
    ws: bool,
}

impl WriteHalf {
    /// Whether each send is a WebSocket message.
    pub fn is_websocket(&self) -> bool {
        self.ws
    }

    /// As [`Connection::send`].
    pub async fn send(&mut self, bytes: &[u8]) -> Result<(), TransportError> {
        if self.ws {
            return Box::pin(self.send_ws(&[bytes])).await;
        }
        send(&mut self.io, &[bytes], self.timeout).await
    }

    /// As [`Connection::send_messages`].
    pub async fn send_messages(&mut self, messages: &[[&[u8]; 3]]) -> Result<(), TransportError> {
        let bytes = messages_bytes(messages, self.ws);
        send(&mut self.io, &[&bytes], self.timeout).await
    }

    /// As [`Connection::send_parts`].
    pub async fn send_parts(&mut self, parts: &[&[u8]]) -> Result<(), TransportError> {
        if self.ws {
            return Box::pin(self.send_ws(parts)).await;
        }
        send(&mut self.io, parts, self.timeout).await
    }

    async fn send_ws(&mut self, parts: &[&[u8]]) -> Result<(), TransportError> {
        send(&mut self.io, &[&ws_message(parts)], self.timeout).await
    }

    /// Closes the write side politely.
    pub async fn shutdown(mut self) {
        shutdown(&mut self.io).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    fn line(b: &[u8]) -> Result<Option<usize>, String> {
        Ok(b.iter().position(|&c| c == b'\n').map(|p| p + 1))
    }

    /// Replies that each come 250 ms after their read started, over two 1 s timeout
    /// periods: none times out (the connection's timer, armed for an earlier read's
    /// deadline, goes off during a later read and is re-armed), and a reply that never
    /// comes times out at its own read's deadline, not before.
    #[tokio::test]
    async fn a_read_times_out_at_its_own_deadline_and_no_sooner() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        let mut inbox = Inbox::new(None);
        let timeout = Duration::from_secs(1);
        for _ in 0..8 {
            let reply = async {
                tokio::time::sleep(Duration::from_millis(250)).await;
                server.write_all(b"ok\n").await.unwrap();
            };
            let (r, ()) = tokio::join!(inbox.read_frame(&mut client, timeout, 1024, line), reply);
            assert_eq!(r.unwrap(), b"ok\n");
        }
        assert!(inbox.timer.is_armed(), "the timer is kept between reads");
        for t in [timeout, Duration::from_millis(300)] {
            let t0 = tokio::time::Instant::now();
            let e = inbox
                .read_frame(&mut client, t, 1024, line)
                .await
                .unwrap_err();
            assert!(matches!(e, TransportError::Timeout(_)), "{e}");
            // Not before the deadline; the upper bound only says it did time out.
            let waited = t0.elapsed();
            assert!(waited >= t && waited < t * 5, "{waited:?} for {t:?}");
        }
    }

    /// A reply that reached this host while the reading thread was busy is timed to
    /// its arrival (the kernel's receive timestamp), not to when it was read: the thread
    /// sleeps 50 ms after sending, the reply comes meanwhile.
    #[tokio::test]
    async fn a_reply_is_timed_to_its_arrival_not_to_its_read() {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 1];
            s.read_exact(&mut b).unwrap();
            s.write_all(b"ok\n").unwrap();
            // Held open until the client is done.
            let _ = s.read(&mut b);
        });
        let clock = crate::metrics::Clock::new();
        stamped::tests::wait_for_stamps();
        let mut c = Connection::connect(addr, None, Duration::from_secs(5))
            .await
            .unwrap();
        let since = clock.now_us();
        c.send(b"x").await.unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(c.read_frame(64, line).await.unwrap(), b"ok\n");
        let (end, now) = (clock.end_us(since), clock.now_us());
        assert!(end >= since, "{end} < {since}");
        assert!(
            now - end >= 40_000,
            "timed to {end} µs, read at {now} µs: not to the arrival"
        );
        // Bytes already buffered when a later phase began: that phase ends now.
        let later = clock.now_us();
        assert!(clock.end_us(later) >= later);
        drop(c);
        server.join().unwrap();
    }
}
