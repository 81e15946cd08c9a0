//! The embedded mail server (`spate serve`): SMTP, submission, SMTPS, LMTP, POP3(S) and
//! IMAP(S) over one [`Store`], with fault injection and its own counters.
//!
//! In-process use (the load engine, the demo and the tests):
//! ```no_run
//! # async fn f() -> anyhow::Result<()> {
//! let running = spate::serve::start(spate::serve::Config::loopback()).await?;
//! let smtp = running.addrs.smtp.unwrap(); // the actual port
//! // ... drive it ...
//! running.shutdown().await;
//! # Ok(()) }
//! ```
//! Layout follows tokio-rs/mini-redis: one accept loop per listener, a shared semaphore
//! caps connections, a watch channel signals shutdown, and the accept loops drain their
//! sessions for a bounded grace period.

mod args;
pub mod conn;
pub mod faults;
mod imap;
mod pop3;
mod smtp;
pub mod stats;
pub mod store;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

pub use args::{run, Args};
use conn::Conn;
pub use faults::Faults;
pub use stats::{Snapshot, Stats};
pub use store::{Store, StoreOptions, Users};

use crate::tls::ServerIdentity;

/// The kinds of listener, each with its own protocol and TLS mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Listener {
    Smtp,
    Submission,
    Smtps,
    Lmtp,
    Pop3,
    Pop3s,
    Imap,
    Imaps,
}

impl Listener {
    pub const ALL: [Listener; 8] = [
        Listener::Smtp,
        Listener::Submission,
        Listener::Smtps,
        Listener::Lmtp,
        Listener::Pop3,
        Listener::Pop3s,
        Listener::Imap,
        Listener::Imaps,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Listener::Smtp => "smtp",
            Listener::Submission => "submission",
            Listener::Smtps => "smtps",
            Listener::Lmtp => "lmtp",
            Listener::Pop3 => "pop3",
            Listener::Pop3s => "pop3s",
            Listener::Imap => "imap",
            Listener::Imaps => "imaps",
        }
    }

    fn implicit_tls(self) -> bool {
        matches!(self, Listener::Smtps | Listener::Pop3s | Listener::Imaps)
    }
}

/// Listening addresses, one optional address per listener kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Addrs {
    pub smtp: Option<SocketAddr>,
    pub submission: Option<SocketAddr>,
    /// SMTP with implicit TLS (RFC 8314).
    pub smtps: Option<SocketAddr>,
    pub lmtp: Option<SocketAddr>,
    pub pop3: Option<SocketAddr>,
    pub pop3s: Option<SocketAddr>,
    pub imap: Option<SocketAddr>,
    pub imaps: Option<SocketAddr>,
}

impl Addrs {
    pub fn get(&self, l: Listener) -> Option<SocketAddr> {
        match l {
            Listener::Smtp => self.smtp,
            Listener::Submission => self.submission,
            Listener::Smtps => self.smtps,
            Listener::Lmtp => self.lmtp,
            Listener::Pop3 => self.pop3,
            Listener::Pop3s => self.pop3s,
            Listener::Imap => self.imap,
            Listener::Imaps => self.imaps,
        }
    }

    fn set(&mut self, l: Listener, a: SocketAddr) {
        let slot = match l {
            Listener::Smtp => &mut self.smtp,
            Listener::Submission => &mut self.submission,
            Listener::Smtps => &mut self.smtps,
            Listener::Lmtp => &mut self.lmtp,
            Listener::Pop3 => &mut self.pop3,
            Listener::Pop3s => &mut self.pop3s,
            Listener::Imap => &mut self.imap,
            Listener::Imaps => &mut self.imaps,
        };
        *slot = Some(a);
    }

    pub fn is_empty(&self) -> bool {
        Listener::ALL.iter().all(|l| self.get(*l).is_none())
    }
}

/// Everything `start` needs. Build one with [`Config::loopback`] and adjust fields.
#[derive(Clone)]
pub struct Config {
    /// Where to listen (port 0 picks a free port; read the real one from `Running::addrs`).
    pub listen: Addrs,
    /// Domains served. Empty means every domain is local.
    pub domains: Vec<String>,
    /// Who may log in, and which addresses exist when a users file is given.
    pub users: Users,
    pub store: StoreOptions,
    /// Certificate and key; `None` generates a self-signed one at start.
    pub identity: Option<Arc<ServerIdentity>>,
    pub faults: Faults,
    /// Simultaneous connections over all listeners; beyond it: 421 and close. 0 = no cap.
    pub max_connections: usize,
    /// Connections beyond `max_connections` wait for a free slot instead of getting 421
    /// (like Postfix's process limit): load beyond it queues, so latency grows.
    pub queue_connections: bool,
    pub max_rcpt: usize,
    /// Largest message accepted (bytes, after unstuffing). 0 = no limit.
    pub max_message_size: u64,
    /// A session waiting this long for the client is closed (421 4.4.2).
    pub idle_timeout: Duration,
    /// How long `shutdown` lets sessions in progress finish.
    pub shutdown_grace: Duration,
    /// Name in the greeting and EHLO reply.
    pub hostname: String,
    /// Rewritten every second (and at shutdown) with the counters as JSON.
    pub stats_file: Option<PathBuf>,
    /// Refuse messages with bare LF line ends (550 5.6.0) instead of normalizing them.
    pub reject_bare_lf: bool,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("listen", &self.listen)
            .field("domains", &self.domains)
            .field("store", &self.store)
            .field("faults", &self.faults)
            .field("max_connections", &self.max_connections)
            .field("max_rcpt", &self.max_rcpt)
            .field("max_message_size", &self.max_message_size)
            .field("idle_timeout", &self.idle_timeout)
            .field("hostname", &self.hostname)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// SMTP on 127.0.0.1 with a free port, domain `example.test`, open users, no faults.
    pub fn loopback() -> Config {
        Config {
            listen: Addrs {
                smtp: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
                ..Addrs::default()
            },
            domains: vec!["example.test".to_string()],
            users: Users::default(),
            store: StoreOptions::default(),
            identity: None,
            faults: Faults::default(),
            max_connections: 1000,
            queue_connections: false,
            max_rcpt: 100,
            max_message_size: 64 * 1024 * 1024,
            idle_timeout: Duration::from_secs(300),
            shutdown_grace: Duration::from_secs(5),
            hostname: "spate.localhost".to_string(),
            stats_file: None,
            reject_bare_lf: false,
        }
    }
}

/// What every session shares.
pub(crate) struct Shared {
    pub hostname: String,
    pub users: Users,
    pub store: Arc<Store>,
    pub stats: Arc<Stats>,
    pub faults: Faults,
    pub tls: TlsAcceptor,
    pub max_rcpt: usize,
    pub max_message_size: u64,
    pub idle: Duration,
    pub reject_bare_lf: bool,
    queue_connections: bool,
    conn_seq: AtomicU64,
    msg_seq: AtomicU64,
    shutdown: watch::Receiver<bool>,
}

impl Shared {
    /// A short id for "queued as" replies.
    pub fn next_id(&self) -> u64 {
        self.msg_seq.fetch_add(1, Ordering::Relaxed)
    }
}

/// A started server. Dropping it also stops the listeners (without waiting).
pub struct Running {
    pub addrs: Addrs,
    pub stats: Arc<Stats>,
    pub store: Arc<Store>,
    /// The server certificate (PEM): trust it as a CA to verify TLS to this server.
    pub cert_pem: String,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    stats_file: Option<PathBuf>,
}

impl Running {
    /// Graceful stop: no new connections, 421 to sessions waiting for a command, sessions
    /// in the middle of something get `shutdown_grace` to finish, then are cut off.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        if let Some(p) = &self.stats_file {
            let _ = self.stats.snapshot().write_atomic(p);
        }
    }
}

/// Binds every configured listener and starts serving.
pub async fn start(config: Config) -> anyhow::Result<Running> {
    let identity = match &config.identity {
        Some(i) => i.clone(),
        None => Arc::new(
            ServerIdentity::self_signed(std::slice::from_ref(&config.hostname))
                .context("generating the server certificate")?,
        ),
    };
    let tls = TlsAcceptor::from(identity.server_config()?);
    let store = Store::new(config.store.clone());
    let stats = Arc::new(Stats::default());
    let (tx, rx) = watch::channel(false);
    let users = if config.users.has_table() {
        config.users.clone().with_domains(config.domains.clone())
    } else {
        Users::open(config.domains.clone())
    };
    let shared = Arc::new(Shared {
        hostname: config.hostname.clone(),
        users,
        store: store.clone(),
        stats: stats.clone(),
        faults: config.faults.clone(),
        tls,
        max_rcpt: config.max_rcpt.max(1),
        max_message_size: config.max_message_size,
        idle: config.idle_timeout,
        reject_bare_lf: config.reject_bare_lf,
        queue_connections: config.queue_connections,
        conn_seq: AtomicU64::new(0),
        msg_seq: AtomicU64::new(1),
        shutdown: rx.clone(),
    });
    let limit = Arc::new(Semaphore::new(if config.max_connections == 0 {
        Semaphore::MAX_PERMITS
    } else {
        config.max_connections
    }));
    let mut addrs = Addrs::default();
    let mut listeners = Vec::new();
    for kind in Listener::ALL {
        if let Some(addr) = config.listen.get(kind) {
            let l = TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} ({})", kind.name()))?;
            addrs.set(kind, l.local_addr()?);
            listeners.push((kind, l));
        }
    }
    if listeners.is_empty() {
        return crate::usage("no listener configured");
    }
    let mut tasks = Vec::new();
    for (kind, l) in listeners {
        tasks.push(tokio::spawn(accept_loop(
            l,
            kind,
            shared.clone(),
            limit.clone(),
            rx.clone(),
            config.shutdown_grace,
        )));
    }
    if let Some(path) = config.stats_file.clone() {
        let stats = stats.clone();
        let mut rx = rx.clone();
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = rx.wait_for(|v| *v) => break,
                }
                if let Err(e) = stats.snapshot().write_atomic(&path) {
                    eprintln!("spate serve: cannot write {}: {e}", path.display());
                }
            }
        }));
    }
    Ok(Running {
        addrs,
        stats,
        store,
        cert_pem: identity.cert_pem.clone(),
        shutdown: tx,
        tasks,
        stats_file: config.stats_file,
    })
}

async fn accept_loop(
    listener: TcpListener,
    kind: Listener,
    shared: Arc<Shared>,
    limit: Arc<Semaphore>,
    mut shutdown: watch::Receiver<bool>,
    grace: Duration,
) {
    let mut sessions = JoinSet::new();
    loop {
        while sessions.try_join_next().is_some() {}
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = shutdown.wait_for(|v| *v) => break,
        };
        let tcp = match accepted {
            Ok((tcp, _peer)) => tcp,
            Err(_) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        shared.stats.connection(kind);
        let shared = shared.clone();
        match limit.clone().try_acquire_owned() {
            Ok(permit) => {
                sessions.spawn(async move {
                    shared.stats.active_delta(true);
                    handle(tcp, kind, &shared).await;
                    shared.stats.active_delta(false);
                    drop(permit);
                });
            }
            Err(_) if shared.queue_connections => {
                let limit = limit.clone();
                sessions.spawn(async move {
                    let Ok(permit) = limit.acquire_owned().await else {
                        return;
                    };
                    shared.stats.active_delta(true);
                    handle(tcp, kind, &shared).await;
                    shared.stats.active_delta(false);
                    drop(permit);
                });
            }
            Err(_) => {
                shared.stats.refused();
                sessions.spawn(async move { refuse(tcp, kind, &shared).await });
            }
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(grace, async {
        while sessions.join_next().await.is_some() {}
    })
    .await;
    sessions.abort_all();
    while sessions.join_next().await.is_some() {}
}

async fn refuse(tcp: TcpStream, kind: Listener, shared: &Shared) {
    let line: &[u8] = match kind {
        Listener::Pop3 | Listener::Pop3s => b"-ERR [SYS/TEMP] too many connections\r\n",
        Listener::Imap | Listener::Imaps => b"* BYE [UNAVAILABLE] too many connections\r\n",
        _ => {
            shared.stats.reply(421);
            b"421 4.7.0 Too many connections, try again later\r\n"
        }
    };
    let mut conn = if kind.implicit_tls() {
        match Conn::tls(
            tcp,
            &shared.tls,
            Duration::from_secs(2),
            shared.shutdown.clone(),
        )
        .await
        {
            Ok(c) => c,
            Err(_) => return,
        }
    } else {
        Conn::plain(tcp, Duration::from_secs(2), shared.shutdown.clone())
    };
    conn.queue(line);
    conn.close().await;
}

async fn handle(tcp: TcpStream, kind: Listener, shared: &Shared) {
    let conn_no = shared.conn_seq.fetch_add(1, Ordering::Relaxed);
    let mut conn = if kind.implicit_tls() {
        match Conn::tls(tcp, &shared.tls, shared.idle, shared.shutdown.clone()).await {
            Ok(c) => {
                shared.stats.tls_session();
                c
            }
            Err(_) => return,
        }
    } else {
        Conn::plain(tcp, shared.idle, shared.shutdown.clone())
    };
    let _ = match kind {
        Listener::Smtp | Listener::Smtps => {
            smtp::run(&mut conn, shared, smtp::Mode::Smtp, conn_no).await
        }
        Listener::Submission => smtp::run(&mut conn, shared, smtp::Mode::Submission, conn_no).await,
        Listener::Lmtp => smtp::run(&mut conn, shared, smtp::Mode::Lmtp, conn_no).await,
        Listener::Pop3 | Listener::Pop3s => pop3::run(&mut conn, shared).await,
        Listener::Imap | Listener::Imaps => imap::run(&mut conn, shared).await,
    };
    conn.close().await;
}
