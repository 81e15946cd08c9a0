//! What every session of a running server shares.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use super::faults::Faults;
use super::stats::Stats;
use super::store::{Store, Users};

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
    /// Each protocol's own state (XMPP's accounts, sessions and routing; the
    /// request/response decision service), which only that protocol looks inside.
    pub(super) services: Services,
    pub(super) queue_connections: bool,
    pub(super) conn_seq: AtomicU64,
    pub(super) msg_seq: AtomicU64,
    pub(super) shutdown: watch::Receiver<bool>,
}

impl Shared {
    /// The state of the protocol whose type `T` is; the server built it with the others.
    pub fn service<T: Any + Send + Sync>(&self) -> &T {
        self.services
            .get::<T>()
            .unwrap_or_else(|| panic!("spate serve: no {} was built", std::any::type_name::<T>()))
    }

    /// A short id for "queued as" replies.
    pub fn next_id(&self) -> u64 {
        self.msg_seq.fetch_add(1, Ordering::Relaxed)
    }
}

/// The protocols' states, by type: the server puts in one per protocol it speaks.
#[derive(Default)]
pub(crate) struct Services(Vec<Box<dyn Any + Send + Sync>>);

impl Services {
    /// Adds a protocol's state (one of each type).
    pub fn with<T: Any + Send + Sync>(mut self, state: T) -> Services {
        self.0.push(Box::new(state));
        self
    }

    fn get<T: Any>(&self) -> Option<&T> {
        self.0.iter().find_map(|s| s.downcast_ref::<T>())
    }
}
