//! spate — a load generator and measuring instrument for messaging servers.
//!
//! Map of the modules (data flows top to bottom during a run):
//! - [`cli`]: argument parsing into each command's options; nothing else.
//! - [`units`]: durations, sizes, rates, ranges as people type them.
//! - [`proto`]: sans-I/O protocol codecs (SMTP/LMTP replies and commands, ...). No sockets,
//!   no clocks.
//! - [`tls`]: rustls client/server configuration (ring provider), self-signed identities.
//! - [`transport`]: the one connection type (TCP or TLS, STARTTLS upgrade, bounded buffered
//!   reads, deadlines); the only place that reads the clock for phase timings.
//! - [`message`]: the message factory (sizes, tracking header, digests, attachments, .eml).
//! - [`workload`]: arrival strategies (closed users, constant/Poisson rate, stages).
//! - [`session`]: the per-protocol drivers that run a state machine over a transport.
//! - [`engine`]: the one worker loop (closed/open schedules, the per-second aggregator,
//!   signals, observers, the summary) that every load command plugs a driver into.
//! - [`metrics`]: phases, error classes, sharded recorder, interval snapshots.
//! - [`results`]: the results directory (plan.json, intervals.csv, postal.csv, *.hlog,
//!   errors.jsonl, sent.log, summary.json).
//! - [`report`]: pure functions of a results directory (text summary, ...).
//! - [`retrieve`]: POP3/IMAP mailbox-access load and the fetch API verification uses.
//! - [`serve`]: the embedded mail server (`spate serve`), also the demo's and tests' target.
//! - [`demo`]: `spate demo`, the whole job in one command.
//! - [`verify`]: `spate verify`, end-to-end delivery accounting from a run's sent.log.
//! - [`scenario`]: `spate run FILE.toml` (steps, hooks, waits, thresholds) and
//!   `--dump-scenario` on every command.

pub mod cli;
pub mod demo;
pub mod engine;
pub mod load;
pub mod message;
pub mod metrics;
pub mod ping;
pub mod proto;
pub mod report;
pub mod results;
pub mod retrieve;
pub mod scenario;
pub mod serve;
pub mod session;
pub mod tls;
pub mod transport;
pub mod units;
pub mod verify;
pub mod workload;

use std::ffi::OsString;
use std::process::ExitCode;

/// An error the user caused (bad option value, unreadable file, bad scenario). Exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Shorthand to return a usage error from anywhere.
pub fn usage<T>(msg: impl Into<String>) -> anyhow::Result<T> {
    Err(UsageError(msg.into()).into())
}

/// Exit codes: 0 success, 1 the run failed (server unreachable, thresholds broken,
/// messages missing), 2 the user's input was wrong.
pub fn main_with_args<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    use clap::Parser;
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if let Some(code) = scenario::dump::intercept(&args) {
        return code;
    }
    let cli = match cli::Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("spate: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(cli::dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            let (code, line) = error_report(&e);
            eprintln!("spate: {line}");
            ExitCode::from(code)
        }
    }
}

/// The exit code of an error (2 for the user's input, 1 otherwise) and its one line: the
/// outermost context plus its causes, no backtrace.
pub fn error_report(e: &anyhow::Error) -> (u8, String) {
    let code = if e.downcast_ref::<UsageError>().is_some()
        || e.downcast_ref::<units::UnitError>().is_some()
    {
        2
    } else {
        1
    };
    let mut line = e.to_string();
    for cause in e.chain().skip(1) {
        line.push_str(": ");
        line.push_str(&cause.to_string());
    }
    (code, line)
}
