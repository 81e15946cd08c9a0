//! Starting and stopping a server: one accept loop per listener, a shared semaphore
//! that caps connections, a watch channel that signals shutdown.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tokio_rustls::TlsAcceptor;

use super::config::{Addrs, Config, Listener};
use super::conn::Conn;
use super::shared::{Services, Shared};
use super::stats::Stats;
use super::store::{Store, Users};
use super::xmpp::{self, Hub};
use super::{imap, pop3, rr, smtp};

use crate::tls::ServerIdentity;

/// A started server. Dropping it also stops the listeners (without waiting).
pub struct Running {
    pub addrs: Addrs,
    pub stats: Arc<Stats>,
    pub store: Arc<Store>,
    /// The server certificate (PEM): trust it as a CA to verify TLS to this server.
    pub cert_pem: String,
    /// Threads running the sessions (of the server's own runtime, when started apart).
    pub threads: usize,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    stats_file: Option<PathBuf>,
    /// The runtime of a server started with [`start_apart`].
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            // Safe inside async code, unlike dropping a runtime.
            rt.shutdown_background();
        }
    }
}

impl Running {
    /// Graceful stop: no new connections, 421 to sessions waiting for a command, sessions
    /// in the middle of something get `shutdown_grace` to finish, then are cut off.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        // What was acknowledged and not yet written (--ack-before-store) is stored now.
        self.store.flush();
        if let Some(p) = &self.stats_file {
            let _ = self.stats.snapshot().write_atomic(p);
        }
    }
}

/// Starts the server on a runtime of its own, whose threads are named
/// [`crate::engine::cpu::SERVER_THREAD`]: a generator in the same process (the demo, a
/// scenario's `[server]`) then reports its own CPU without the server's.
pub async fn start_apart(config: Config) -> anyhow::Result<Running> {
    let threads = match config.threads {
        // Half the CPUs: the other half is for the generator, in this process (the demo,
        // a scenario's `[server]`) or beside it (`spate serve` under a load tool).
        0 => std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)),
        n => n,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .thread_name(crate::engine::cpu::SERVER_THREAD)
        .enable_all()
        .build()
        .context("starting the embedded server's runtime")?;
    let started = rt.spawn(start(config)).await;
    match started {
        Ok(Ok(mut running)) => {
            running.runtime = Some(rt);
            running.threads = threads;
            Ok(running)
        }
        Ok(Err(e)) => {
            rt.shutdown_background();
            Err(e)
        }
        Err(e) => {
            rt.shutdown_background();
            Err(anyhow::anyhow!("the embedded server did not start: {e}"))
        }
    }
}

/// The server's identity (given, or self-signed for its names), its TLS acceptor, and
/// the rr listener's, which asks for client certificates when --rr-client-ca is given.
fn acceptors(config: &Config) -> anyhow::Result<(Arc<ServerIdentity>, TlsAcceptor, TlsAcceptor)> {
    let identity = match &config.identity {
        Some(i) => i.clone(),
        None => Arc::new(
            ServerIdentity::self_signed(&certificate_names(config))
                .context("generating the server certificate")?,
        ),
    };
    let tls = TlsAcceptor::from(identity.server_config()?);
    let rr_tls = match &config.rr.client_ca {
        Some(ca) => TlsAcceptor::from(
            identity
                .server_config_with_client_ca(&ca.to_string_lossy())
                .map_err(|e| crate::UsageError(format!("--rr-client-ca: {e}")))?,
        ),
        None => tls.clone(),
    };
    Ok((identity, tls, rr_tls))
}

/// A listener on `addr` (with SO_REUSEPORT when `shared`), with tokio's backlog.
async fn listen(addr: std::net::SocketAddr, shared: bool) -> std::io::Result<TcpListener> {
    if !shared {
        return TcpListener::bind(addr).await;
    }
    let s = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    s.set_reuseaddr(true)?;
    s.set_reuseport(true)?;
    s.bind(addr)?;
    s.listen(1024)
}

/// Binds every configured listener and starts serving.
pub async fn start(config: Config) -> anyhow::Result<Running> {
    let (identity, tls, rr_tls) = acceptors(&config)?;
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
        services: Services::default()
            .with(Hub::new(&config.domains, config.xmpp))
            .with(rr::Service::new(config.rr.clone(), rr_tls))
            .with(super::jmap::Service::default()),
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
            let l = listen(addr, config.reuse_port)
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
        threads: tokio::runtime::Handle::current().metrics().num_workers(),
        shutdown: tx,
        tasks,
        stats_file: config.stats_file,
        runtime: None,
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
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(_) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        shared.stats.connection(kind, peer.ip());
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
    if matches!(kind, Listener::Rr | Listener::Rrs) {
        // No protocol-level refusal to send: the client sees the connection close.
        drop(tcp);
        return;
    }
    let line: Vec<u8> = match kind {
        Listener::Pop3 | Listener::Pop3s => b"-ERR [SYS/TEMP] too many connections\r\n".to_vec(),
        Listener::Imap | Listener::Imaps => {
            b"* BYE [UNAVAILABLE] too many connections\r\n".to_vec()
        }
        Listener::Xmpp | Listener::Xmpps => xmpp::refusal().into_bytes(),
        // Before the upgrade: an HTTP answer.
        Listener::XmppWs | Listener::XmppWss | Listener::Jmap | Listener::Jmaps => {
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 21\r\nConnection: close\r\n\r\ntoo many connections\n"
                .to_vec()
        }
        _ => {
            shared.stats.reply(421);
            b"421 4.7.0 Too many connections, try again later\r\n".to_vec()
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
    conn.queue(&line);
    conn.close().await;
}

async fn handle(tcp: TcpStream, kind: Listener, shared: &Shared) {
    let conn_no = shared.conn_seq.fetch_add(1, Ordering::Relaxed);
    if shared.faults.slow_read.is_some() {
        // A small window: the client's writes wait on this reader, as on a slow server.
        let _ = socket2::SockRef::from(&tcp).set_recv_buffer_size(4096);
    }
    if matches!(kind, Listener::Rr | Listener::Rrs) {
        // The decision service does its own TLS (client certificates) and framing.
        Box::pin(rr::run(tcp, kind, shared, conn_no)).await;
        return;
    }
    let mut conn = if kind.implicit_tls() {
        match Conn::tls(tcp, &shared.tls, shared.idle, shared.shutdown.clone()).await {
            Ok(c) => {
                shared.stats.tls_session(c.tls_resumed());
                c
            }
            Err(_) => return,
        }
    } else {
        Conn::plain(tcp, shared.idle, shared.shutdown.clone())
    };
    if let Some(rate) = shared.faults.slow_read {
        conn.pace(rate);
    }
    if let Some(lock) = &shared.faults.serial {
        conn.serialize(lock.clone());
    }
    // Each protocol's session in an allocation of its own size: inline, every
    // connection's task would be as large as the largest protocol's.
    let _ = match kind {
        Listener::Smtp | Listener::Smtps => {
            Box::pin(smtp::run(&mut conn, shared, smtp::Mode::Smtp, conn_no)).await
        }
        Listener::Submission => {
            Box::pin(smtp::run(
                &mut conn,
                shared,
                smtp::Mode::Submission,
                conn_no,
            ))
            .await
        }
        Listener::Lmtp => Box::pin(smtp::run(&mut conn, shared, smtp::Mode::Lmtp, conn_no)).await,
        Listener::Pop3 | Listener::Pop3s => Box::pin(pop3::run(&mut conn, shared, conn_no)).await,
        Listener::Imap | Listener::Imaps => Box::pin(imap::run(&mut conn, shared, conn_no)).await,
        Listener::Xmpp | Listener::Xmpps => {
            Box::pin(xmpp::run(&mut conn, shared, conn_no)).await;
            Ok(())
        }
        Listener::XmppWs | Listener::XmppWss => {
            Box::pin(xmpp::run_websocket(&mut conn, shared, conn_no)).await;
            Ok(())
        }
        Listener::Jmap | Listener::Jmaps => Box::pin(super::jmap::run(&mut conn, shared)).await,
        Listener::Rr | Listener::Rrs => Ok(()),
    };
    conn.close().await;
}

/// The names a generated certificate carries: the host name, and the served domains
/// (XMPP clients check the certificate against the JID's domain, RFC 6120 §13.7.2).
fn certificate_names(config: &Config) -> Vec<String> {
    let mut names = vec![config.hostname.clone()];
    for d in &config.domains {
        let plausible = !d.is_empty()
            && d.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
        if plausible && !names.contains(d) {
            names.push(d.clone());
        }
    }
    names
}
