//! The one client connection type: TCP or TLS (implicit, or upgraded in place by STARTTLS),
//! a bounded read buffer whose units a protocol's framer delimits, and a deadline on every
//! read and write. Protocol logic lives in `proto`, timing in the sessions; this only
//! moves bytes.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("connection refused")]
    Refused,
    #[error("connection closed by the server")]
    Closed,
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    /// A TLS failure as rustls reported it (certificate checks, alerts from the server).
    #[error("TLS: {0}")]
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

/// Whether the server refused the client's certificate (or its absence): an alert that
/// names the certificate, or access denied.
pub fn client_certificate_refused(e: &rustls::Error) -> bool {
    use rustls::AlertDescription as A;
    matches!(
        e,
        rustls::Error::AlertReceived(
            A::CertificateRequired
                | A::BadCertificate
                | A::UnsupportedCertificate
                | A::CertificateRevoked
                | A::CertificateExpired
                | A::CertificateUnknown
                | A::UnknownCA
                | A::AccessDenied
        )
    )
}

enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
    /// Only during an upgrade, or after a failed one.
    Gone,
}

pub struct Connection {
    stream: Stream,
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Bytes of the last reply, released at the next read.
    pending: usize,
    timeout: Duration,
}

const INITIAL_BUF: usize = 4096;

impl Connection {
    /// Connects (optionally from a given source address), with TCP_NODELAY set: a load
    /// generator that waits for delayed ACKs measures its own Nagle, not the server.
    pub async fn connect(
        addr: SocketAddr,
        bind: Option<IpAddr>,
        timeout: Duration,
    ) -> Result<Self, TransportError> {
        let fut = async {
            let socket = if addr.is_ipv4() {
                TcpSocket::new_v4()
            } else {
                TcpSocket::new_v6()
            }
            .map_err(TransportError::from_io)?;
            if let Some(ip) = bind {
                socket
                    .bind(SocketAddr::new(ip, 0))
                    .map_err(TransportError::from_io)?;
            }
            socket.set_nodelay(true).map_err(TransportError::from_io)?;
            socket.connect(addr).await.map_err(TransportError::from_io)
        };
        let tcp = tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| TransportError::Timeout(timeout))??;
        Ok(Connection {
            stream: Stream::Plain(tcp),
            buf: vec![0; INITIAL_BUF],
            start: 0,
            end: 0,
            pending: 0,
            timeout,
        })
    }

    pub fn is_tls(&self) -> bool {
        matches!(self.stream, Stream::Tls(_))
    }

    /// Upgrades to TLS in place (implicit TLS right after connect, or after STARTTLS).
    pub async fn start_tls(
        &mut self,
        config: Arc<rustls::ClientConfig>,
        name: rustls::pki_types::ServerName<'static>,
    ) -> Result<(), TransportError> {
        self.release();
        if self.start != self.end {
            // Bytes after the 220 that came before the handshake would be trusted as if
            // they had come over TLS (the STARTTLS injection attack): refuse.
            return Err(TransportError::Protocol(
                "server sent data after its STARTTLS reply".into(),
            ));
        }
        let Stream::Plain(tcp) = std::mem::replace(&mut self.stream, Stream::Gone) else {
            return Err(TransportError::TlsIo("connection is not plain TCP".into()));
        };
        let connector = TlsConnector::from(config);
        let tls = tokio::time::timeout(self.timeout, connector.connect(name, tcp))
            .await
            .map_err(|_| TransportError::Timeout(self.timeout))?
            .map_err(TransportError::tls)?;
        self.stream = Stream::Tls(Box::new(tls));
        Ok(())
    }

    /// Writes all of `bytes`; returns when they are handed to the kernel.
    pub async fn send(&mut self, bytes: &[u8]) -> Result<(), TransportError> {
        let timeout = self.timeout;
        let fut = async {
            match &mut self.stream {
                Stream::Plain(s) => s.write_all(bytes).await,
                Stream::Tls(s) => {
                    s.write_all(bytes).await?;
                    s.flush().await
                }
                Stream::Gone => Err(io::ErrorKind::NotConnected.into()),
            }
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| TransportError::Timeout(timeout))?
            .map_err(TransportError::from_io)
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

    /// Reads one protocol unit whose extent a codec's framer decides (a POP3 status line
    /// or multi-line response, an IMAP response with its literals). `frame` sees the
    /// buffered bytes and answers `Ok(Some(len))` once a whole unit is there, `Ok(None)`
    /// for more; it may keep state between calls (how far it has scanned). The unit may
    /// be at most `cap` bytes.
    pub async fn read_frame<E: std::fmt::Display>(
        &mut self,
        cap: usize,
        mut frame: impl FnMut(&[u8]) -> Result<Option<usize>, E>,
    ) -> Result<&[u8], TransportError> {
        self.release();
        let deadline = tokio::time::Instant::now() + self.timeout;
        let n = loop {
            match frame(&self.buf[self.start..self.end]) {
                Ok(Some(n)) => break n.min(self.end - self.start),
                Ok(None) => {
                    if self.end - self.start >= cap {
                        return Err(TransportError::Protocol(format!(
                            "response longer than {cap} bytes"
                        )));
                    }
                    self.fill(deadline, cap).await?
                }
                Err(e) => return Err(TransportError::Protocol(e.to_string())),
            }
        };
        self.pending = n;
        Ok(&self.buf[self.start..self.start + n])
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The per-read deadline (also what `read_frame` allows for a whole unit).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    async fn fill(
        &mut self,
        deadline: tokio::time::Instant,
        cap: usize,
    ) -> Result<(), TransportError> {
        if self.start > 0 && self.end == self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if self.end == self.buf.len() {
            if self.buf.len() >= cap {
                return Err(TransportError::Protocol("reply too long".into()));
            }
            self.buf.resize((self.buf.len() * 2).min(cap), 0);
        }
        let timeout = self.timeout;
        let dst = &mut self.buf[self.end..];
        let read = async {
            match &mut self.stream {
                Stream::Plain(s) => s.read(dst).await,
                Stream::Tls(s) => s.read(dst).await,
                Stream::Gone => Err(io::ErrorKind::NotConnected.into()),
            }
        };
        let n = tokio::time::timeout_at(deadline, read)
            .await
            .map_err(|_| TransportError::Timeout(timeout))?
            .map_err(TransportError::from_io)?;
        if n == 0 {
            return Err(TransportError::Closed);
        }
        self.end += n;
        Ok(())
    }

    /// Closes the write side politely; errors are irrelevant at this point.
    pub async fn shutdown(mut self) {
        let _ = tokio::time::timeout(Duration::from_millis(200), async {
            match &mut self.stream {
                Stream::Plain(s) => s.shutdown().await,
                Stream::Tls(s) => s.shutdown().await,
                Stream::Gone => Ok(()),
            }
        })
        .await;
    }
}
