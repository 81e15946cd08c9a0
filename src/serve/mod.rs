//! The embedded server (`spate serve`): SMTP, submission, SMTPS, LMTP, POP3(S) and
//! IMAP(S) over one [`Store`], and XMPP (plain with STARTTLS, and direct TLS) with
//! presence, messages and XEP-0033 multicast; fault injection and its own counters.
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
//! sessions for a bounded grace period. What every session shares (`shared`: the store,
//! the users, the counters, the faults, TLS) names no protocol; each protocol's own state
//! (XMPP's routing, the request/response service) is built by `server` and reached by
//! its type (`Shared::service`), and what a protocol derives from a stored message (IMAP's
//! MIME structure) is kept with it opaquely. tests/layers.rs keeps the modules free of
//! loops.
mod args;
pub mod behind;
mod config;
pub mod conn;
pub mod faults;
mod imap;
mod injection;
mod jmap;
mod listener;
mod pop3;
mod rr;
mod server;
mod shared;
mod smtp;
pub mod stats;
pub mod store;
mod xmpp;

pub use args::{run, Args};
pub use config::{Addrs, Config, RrOptions, XmppOptions};
pub use faults::Faults;
pub use listener::Listener;
pub use server::{start, start_apart, Running};
pub use stats::{Counts, RrCounts, Stats, XmppCounts};
pub use store::{Store, StoreOptions, Users};
