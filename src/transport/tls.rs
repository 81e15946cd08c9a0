//! TLS over rustls' unbuffered API, holding no buffer while a connection waits.
//!
//! rustls' buffered connection keeps a 4 KiB receive buffer for its whole life, and
//! tokio-rustls keeps it while it waits for a read: with the connection's state that made
//! a waiting TLS session cost three times a plain one. Here the ciphertext read, the
//! plaintext not yet handed out and the records not yet written are each a buffer of
//! this adapter's own, freed as soon as it is empty, and a read that has to wait waits in
//! a stack buffer (as the plain inbox's bare waits do). What a waiting session holds is
//! rustls' state alone: its keys, its key schedule, the server's certificate chain.
//!
//! The adapter is an [`AsyncRead`] + [`AsyncWrite`] over any byte stream, for either side
//! ([`Side`]): `poll_handshake` drives the handshake; after it, reads decrypt what the
//! peer sent (and answer what TLS itself asks for: a key update), writes encrypt into
//! records written as the socket takes them. A write that decrypted records a reader is
//! waiting for (the two halves of a split connection) wakes that reader.

use std::io;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use rustls::client::UnbufferedClientConnection;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, EncryptError, UnbufferedStatus};
use rustls::{ClientConfig, HandshakeKind, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most plaintext one write encrypts (in 16 KiB records): bounds the records
/// waiting to be written.
const MAX_WRITE: usize = 64 * 1024;

/// A read's stack buffer: a whole record and its header and tag.
const READ_CHUNK: usize = 16 * 1024 + 512;

/// A record's bytes beyond its plaintext, at most (header, content type, tag, TLS 1.2's
/// explicit nonce).
const RECORD_OVERHEAD: usize = 64;

/// A side of a TLS connection in rustls' unbuffered API.
pub trait Side {
    type Data;
    fn common(&self) -> &rustls::CommonState;
    fn process<'c, 'i>(
        &'c mut self,
        incoming: &'i mut [u8],
    ) -> UnbufferedStatus<'c, 'i, Self::Data>;
}

/// The same for both sides: rustls names them apart.
macro_rules! side {
    ($conn:ty, $data:ty) => {
        impl Side for $conn {
            type Data = $data;
            fn common(&self) -> &rustls::CommonState {
                self
            }
            fn process<'c, 'i>(
                &'c mut self,
                incoming: &'i mut [u8],
            ) -> UnbufferedStatus<'c, 'i, Self::Data> {
                self.process_tls_records(incoming)
            }
        }
    };
}

side!(
    UnbufferedClientConnection,
    rustls::client::ClientConnectionData
);
side!(
    UnbufferedServerConnection,
    rustls::server::ServerConnectionData
);

/// Where processing the records at hand stopped.
enum Step {
    /// The handshake is done and nothing more can be processed: application data may be
    /// written (and was, `n` bytes of it, when some was given).
    Traffic(usize),
    /// The handshake needs more from the peer.
    NeedInput,
    /// The peer closed (close_notify), or both sides did.
    Closed,
}

/// What a step sends once the handshake allows it.
#[derive(Clone, Copy)]
enum Outgoing<'a> {
    Nothing,
    Data(&'a [u8]),
    CloseNotify,
}

/// A TLS connection over `io`.
pub struct TlsIo<C, IO> {
    conn: C,
    io: IO,
    /// Ciphertext read and not yet processed (a partial record, or a handshake message
    /// still being joined); empty and unallocated between records.
    incoming: Vec<u8>,
    /// Plaintext decrypted and not yet read, from `plain_at`.
    plain: Vec<u8>,
    plain_at: usize,
    /// Records encoded and not yet written, from `out_at`.
    out: Vec<u8>,
    out_at: usize,
    /// The peer closed: close_notify, or the end of the stream.
    eof: bool,
    /// Our close_notify is queued.
    closing: bool,
    /// A reader waiting for the socket, to wake when a write decrypted records for it.
    reader: Option<Waker>,
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

impl<IO> TlsIo<UnbufferedClientConnection, IO> {
    /// A client connection to `name` over `io`, its client hello ready to send (the
    /// handshake is [`TlsIo::poll_handshake`]).
    pub fn client(
        config: std::sync::Arc<ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
        io: IO,
    ) -> Result<Self, rustls::Error> {
        Ok(Self::new(
            UnbufferedClientConnection::new(config, name)?,
            io,
        ))
    }
}

impl<IO> TlsIo<UnbufferedServerConnection, IO> {
    /// A server connection over `io`, waiting for the client hello.
    pub fn server(config: std::sync::Arc<ServerConfig>, io: IO) -> Result<Self, rustls::Error> {
        Ok(Self::new(UnbufferedServerConnection::new(config)?, io))
    }
}

impl<C: Side, IO> TlsIo<C, IO> {
    fn new(conn: C, io: IO) -> Self {
        TlsIo {
            conn,
            io,
            incoming: Vec::new(),
            plain: Vec::new(),
            plain_at: 0,
            out: Vec::new(),
            out_at: 0,
            eof: false,
            closing: false,
            reader: None,
        }
    }

    /// Whether the handshake resumed an earlier session.
    pub fn resumed(&self) -> bool {
        self.conn.common().handshake_kind() == Some(HandshakeKind::Resumed)
    }

    pub fn get_ref(&self) -> &IO {
        &self.io
    }

    /// Whether decrypted bytes wait to be read (a read would not wait for the socket).
    pub fn has_plaintext(&self) -> bool {
        self.plain.len() > self.plain_at
    }

    /// Processes every record at hand: decrypts application data into `plain`, encodes
    /// what TLS itself has to send into `out`, and encrypts `send` once the handshake
    /// allows it.
    fn step(&mut self, send: Outgoing<'_>) -> io::Result<Step> {
        let Self {
            conn,
            incoming,
            plain,
            out,
            eof,
            ..
        } = self;
        loop {
            let UnbufferedStatus { mut discard, state } = conn.process(incoming);
            let state = state.map_err(tls_error)?;
            let stop = match state {
                ConnectionState::ReadTraffic(mut r) => {
                    while let Some(record) = r.next_record() {
                        let record = record.map_err(tls_error)?;
                        discard += record.discard;
                        plain.extend_from_slice(record.payload);
                    }
                    None
                }
                ConnectionState::EncodeTlsData(mut e) => {
                    encode_into(out, |buf| e.encode(buf).map_err(encode_error))?;
                    None
                }
                // Queued in `out`, which is written before anything else.
                ConnectionState::TransmitTlsData(t) => {
                    t.done();
                    None
                }
                ConnectionState::BlockedHandshake => Some(Step::NeedInput),
                ConnectionState::WriteTraffic(mut w) => {
                    let n = match send {
                        Outgoing::Data(d) if !d.is_empty() => {
                            let d = &d[..d.len().min(MAX_WRITE)];
                            let room = d.len() + (d.len() / (16 * 1024) + 1) * RECORD_OVERHEAD;
                            encode_into_sized(out, room, |buf| {
                                w.encrypt(d, buf).map_err(encrypt_error)
                            })?;
                            d.len()
                        }
                        Outgoing::CloseNotify => {
                            encode_into_sized(out, RECORD_OVERHEAD, |buf| {
                                w.queue_close_notify(buf).map_err(encrypt_error)
                            })?;
                            0
                        }
                        _ => 0,
                    };
                    Some(Step::Traffic(n))
                }
                ConnectionState::PeerClosed | ConnectionState::Closed => {
                    *eof = true;
                    Some(Step::Closed)
                }
                // Early data (spate's servers accept none) and states of later rustls.
                _ => return Err(io::Error::other("unexpected TLS state")),
            };
            if discard > 0 {
                incoming.drain(..discard);
                if incoming.is_empty() {
                    *incoming = Vec::new();
                }
            }
            if let Some(stop) = stop {
                return Ok(stop);
            }
        }
    }

    /// Queues our close_notify (once).
    fn queue_close(&mut self) -> io::Result<()> {
        if !self.closing {
            self.closing = true;
            self.step(Outgoing::CloseNotify)?;
        }
        Ok(())
    }

    /// Hands out what was decrypted; the buffer is freed once it is read.
    fn take_plain(&mut self, buf: &mut ReadBuf<'_>) -> bool {
        let have = &self.plain[self.plain_at..];
        if have.is_empty() {
            return false;
        }
        let n = have.len().min(buf.remaining());
        buf.put_slice(&have[..n]);
        self.plain_at += n;
        if self.plain_at == self.plain.len() {
            self.plain = Vec::new();
            self.plain_at = 0;
        }
        true
    }
}

impl<C: Side + Unpin, IO: AsyncRead + AsyncWrite + Unpin> TlsIo<C, IO> {
    /// Writes the queued records; the buffer is freed once they are all written.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.out_at < self.out.len() {
            let n =
                std::task::ready!(Pin::new(&mut self.io).poll_write(cx, &self.out[self.out_at..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out_at += n;
        }
        if !self.out.is_empty() {
            self.out = Vec::new();
            self.out_at = 0;
        }
        Poll::Ready(Ok(()))
    }

    /// Reads what the socket has into `incoming` through a stack buffer, so that a read
    /// that waits holds no buffer; 0 at the end of the stream.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        let mut stack = [MaybeUninit::<u8>::uninit(); READ_CHUNK];
        let mut rb = ReadBuf::uninit(&mut stack);
        std::task::ready!(Pin::new(&mut self.io).poll_read(cx, &mut rb))?;
        let got = rb.filled();
        self.incoming.extend_from_slice(got);
        Poll::Ready(Ok(got.len()))
    }

    /// Drives the handshake to its end (the records that end it written).
    pub fn poll_handshake(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            std::task::ready!(self.poll_write_out(cx))?;
            match self.step(Outgoing::Nothing)? {
                Step::Traffic(_) if self.out.is_empty() => return Poll::Ready(Ok(())),
                // What the step encoded goes out first.
                Step::Traffic(_) => {}
                Step::NeedInput if !self.out.is_empty() => {}
                Step::NeedInput => {
                    if std::task::ready!(self.poll_fill(cx))? == 0 {
                        return Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "the peer closed the connection during the TLS handshake",
                        )));
                    }
                }
                Step::Closed => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the peer closed TLS during the handshake",
                    )))
                }
            }
        }
    }

    /// Encrypts what it can of `data`, written as the socket takes it.
    fn poll_encrypt(&mut self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        // Records wait for the socket here, not in an ever longer buffer.
        std::task::ready!(self.poll_write_out(cx))?;
        if self.closing {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let had_plain = self.plain.len() > self.plain_at;
        let n = match self.step(Outgoing::Data(data))? {
            Step::Traffic(n) => n,
            Step::NeedInput => {
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "write before the TLS handshake ended",
                )))
            }
            Step::Closed => 0,
        };
        if (!had_plain && self.plain.len() > self.plain_at) || self.eof {
            if let Some(w) = self.reader.take() {
                w.wake();
            }
        }
        // Started now; what the socket does not take yet is written by the next write
        // or flush.
        if let Poll::Ready(Err(e)) = self.poll_write_out(cx) {
            return Poll::Ready(Err(e));
        }
        if n == 0 && !data.is_empty() {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        Poll::Ready(Ok(n))
    }
}

/// Encodes into the end of `out` with room for the record, retrying with the size
/// asked for.
fn encode_into(
    out: &mut Vec<u8>,
    f: impl FnMut(&mut [u8]) -> Result<usize, Room>,
) -> io::Result<()> {
    encode_into_sized(out, 1024, f)
}

/// Why an encode did not fit: the room it needs, or an error.
enum Room {
    Need(usize),
    Failed(io::Error),
}

fn encode_error(e: EncodeError) -> Room {
    match e {
        EncodeError::InsufficientSize(s) => Room::Need(s.required_size),
        e => Room::Failed(io::Error::other(e.to_string())),
    }
}

fn encrypt_error(e: EncryptError) -> Room {
    match e {
        EncryptError::InsufficientSize(s) => Room::Need(s.required_size),
        e => Room::Failed(io::Error::other(e.to_string())),
    }
}

fn encode_into_sized(
    out: &mut Vec<u8>,
    mut room: usize,
    mut f: impl FnMut(&mut [u8]) -> Result<usize, Room>,
) -> io::Result<()> {
    let start = out.len();
    loop {
        out.resize(start + room, 0);
        match f(&mut out[start..]) {
            Ok(n) => {
                out.truncate(start + n);
                return Ok(());
            }
            Err(Room::Need(n)) if n > room => room = n,
            Err(Room::Need(_)) => {
                out.truncate(start);
                return Err(io::Error::other("TLS record larger than asked for"));
            }
            Err(Room::Failed(e)) => {
                out.truncate(start);
                return Err(e);
            }
        }
    }
}

impl<C: Side + Unpin, IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsIo<C, IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            if me.take_plain(buf) || me.eof {
                return Poll::Ready(Ok(()));
            }
            if !me.incoming.is_empty() {
                me.step(Outgoing::Nothing)?;
                if me.plain.len() > me.plain_at || me.eof {
                    continue;
                }
            }
            // What TLS itself answered (a key update) goes out; a socket that does not
            // take it now is written to again by the next write.
            if me.out_at < me.out.len() {
                if let Poll::Ready(Err(e)) = me.poll_write_out(cx) {
                    return Poll::Ready(Err(e));
                }
            }
            match me.poll_fill(cx) {
                Poll::Ready(Ok(0)) => me.eof = true,
                Poll::Ready(Ok(_)) => {
                    me.step(Outgoing::Nothing)?;
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => {
                    if !me.reader.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        me.reader = Some(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl<C: Side + Unpin, IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsIo<C, IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_encrypt(cx, buf)
    }

    /// The parts of a write (a command group, a message) go into as few records as the
    /// first part alone would: small parts are joined on the stack first.
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        let first = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &b[..]);
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if total == first.len() || first.len() >= 16 * 1024 {
            return me.poll_encrypt(cx, first);
        }
        let mut joined = [0u8; 16 * 1024];
        let mut n = 0;
        for b in bufs {
            let take = b.len().min(joined.len() - n);
            joined[n..n + take].copy_from_slice(&b[..take]);
            n += take;
            if n == joined.len() {
                break;
            }
        }
        me.poll_encrypt(cx, &joined[..n])
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        std::task::ready!(me.poll_write_out(cx))?;
        Pin::new(&mut me.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        me.queue_close()?;
        std::task::ready!(me.poll_write_out(cx))?;
        Pin::new(&mut me.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
