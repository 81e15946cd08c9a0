//! What every session of a running server shares.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::faults::Faults;
use super::stats::Stats;
use super::store::{Store, Users};
use super::xmpp::Hub;

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
    /// The XMPP listeners' accounts, sessions and routing.
    pub xmpp: Hub,
    /// The request/response decision service.
    pub rr: super::rr::Service,
    pub(super) queue_connections: bool,
    pub(super) conn_seq: AtomicU64,
    pub(super) msg_seq: AtomicU64,
    pub(super) shutdown: watch::Receiver<bool>,
}

impl Shared {
    /// A short id for "queued as" replies.
    pub fn next_id(&self) -> u64 {
        self.msg_seq.fetch_add(1, Ordering::Relaxed)
    }
}
