//! spate — a load generator and measuring instrument for messaging servers.
//!
//! The layers, top to bottom; a module imports only from the layers below it:
//! - [`cli`]: the subcommands, dispatch, exit codes, the in-process runner.
//! - [`cmd`]: one module per subcommand, each `Args` + `run(args, &Ctx)`.
//! - [`opts`]: the clap pieces client commands share (target, transport, workload,
//!   output, monitoring, accounts).
//! - Services the commands compose:
//!   - [`scenario`]: scenario files (steps, hooks, waits, thresholds, `[[fault]]`) and
//!     `--dump-scenario`; runs steps through the [`ctx::Runner`] it is handed. Its
//!     threshold rules also serve the load commands' `--threshold` and sweep's
//!     `--objective`, and its JUnit writer their `--junit`.
//!   - [`sweep`]: the sweep table, USL fit and knee.
//!   - [`verify`]: end-to-end delivery accounting from a run's sent.log.
//!   - [`monitor`]: server monitoring (/proc, Postfix queue, Prometheus), an observer.
//!   - [`ui`]: the live views of a run (progress line, dashboard, Prometheus endpoint),
//!     observers.
//!   - [`report`]: pure functions of a results directory (text, HTML, compare).
//!   - [`serve`]: the embedded mail, chat and request/response server, the demo's and
//!     the tests' target, with the faults a checker must catch.
//!   - [`fault`]: faults on a schedule (`--fault`): signals, commands, the network proxy,
//!     kernel faults in a namespace; an observer.
//! - [`engine`]: owns the run: clock, recorder, schedule (closed users, open arrivals,
//!   stages), the one worker body, the commit of each unit's report, the aggregator,
//!   signals, observers.
//! - [`session`]: one driver per protocol over a shared toolkit (endpoint connect with
//!   source-address rotation and TLS, failures, phase timing through the unit report).
//! - [`transport`]: the one client connection type (TCP or TLS, STARTTLS upgrade, bounded
//!   buffered reads framed by a codec, deadlines).
//! - [`proto`]: sans-I/O codecs (SMTP, POP3, IMAP, XMPP, SASL, dot-stuffing, request/response
//!   framing, server-sent events): no sockets, no clocks.
//! - [`metrics`], [`results`]: phases, error classes, counters, the sharded recorder; the
//!   results directory, the summary made from a run's totals, a run's shard and its share
//!   of the work. Both still name protocols' phases and counters (issue 34's work: each
//!   protocol is to declare its own).
//!
//! No two top-level modules import each other, directly or around a loop (tests/layers.rs).
//! - [`message`], [`tls`], [`units`], [`error`], [`ctx`]: the message factory, rustls
//!   configuration, human units, the two error kinds, the context a command is handed.

pub mod cli;
pub mod cmd;
pub mod ctx;
pub mod engine;
pub mod error;
pub mod fault;
pub mod message;
pub mod metrics;
pub mod monitor;
pub mod opts;
pub mod proto;
pub mod report;
pub mod results;
pub mod scenario;
pub mod serve;
pub mod session;
pub mod sweep;
pub mod tls;
pub mod transport;
pub mod ui;
pub mod units;
pub mod verify;

pub use error::{usage, UsageError, THRESHOLDS_FAILED};
