//! One module per subcommand, each `Args` and `run(args, &Ctx)`, and what the load
//! commands share at this level: their observers and the way a finished run is printed.

pub mod capacity;
pub mod compare;
pub mod completions;
pub mod ctl;
pub mod demo;
pub mod jmap;
pub mod mailbox;
pub mod merge;
pub mod ping;
pub mod populate;
pub mod population;
pub mod report;
pub mod rr;
pub mod run;
pub mod serve;
pub mod smtp;
pub mod sweep;
pub mod thresholds;
pub mod verify;
pub mod watch;
pub mod xmpp;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::engine::{Observer, PlanInfo};
use crate::opts::{MonitorArgs, OutputArgs};
use crate::results::Summary;

/// A finished load run: where its results are and its final summary.
pub struct Finished {
    pub dir: PathBuf,
    pub summary: Summary,
}

/// Parses a command's words (target and options, without the program and command names),
/// such as the command line after `spate sweep ... --`.
pub fn args_from_words<A, I, S>(name: &'static str, words: I) -> anyhow::Result<A>
where
    A: clap::Args + clap::FromArgMatches,
    I: IntoIterator<Item = S>,
    S: Into<std::ffi::OsString> + Clone,
{
    let argv =
        std::iter::once(std::ffi::OsString::from(name)).chain(words.into_iter().map(Into::into));
    let cmd = A::augment_args(clap::Command::new(name));
    cmd.try_get_matches_from(argv)
        .and_then(|m| A::from_arg_matches(&m))
        .map_err(|e| crate::UsageError(e.to_string().trim().to_string()).into())
}

/// The observers of a load run of `plan`: the live metrics endpoint and monitoring when
/// asked for, then the live dashboard (`--tui`, which may set `stop`) or the progress line.
pub fn observers(
    output: &OutputArgs,
    monitor: &MonitorArgs,
    plan: &impl PlanInfo,
    progress: bool,
    title: String,
    unit: &'static str,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Vec<Box<dyn Observer>>> {
    // First: a busy address ends the command before anything else has started.
    let metrics =
        crate::ui::metrics::observer(output, plan.head(), plan.workload().shard.as_ref())?;
    let mut observers: Vec<Box<dyn Observer>> = metrics
        .into_iter()
        .map(|m| Box::new(m) as Box<dyn Observer>)
        .collect();
    let checks = thresholds::checks(output, plan.head().protocol)?;
    if let Some(w) = crate::ui::web::observer(output, plan, stop, &checks)? {
        observers.push(Box::new(w));
    }
    observers.extend(crate::monitor::observer(
        monitor,
        crate::units::parse_duration(&output.detail)?,
    )?);
    // A sharded run's faults come from its first shard; every shard measures them.
    let first_shard = plan.workload().shard.as_ref().is_none_or(|s| s.index == 0);
    if let Some(w) = thresholds::Watch::new(checks, plan.head().protocol, stop) {
        observers.push(Box::new(w));
    }
    let mut fault_specs = Vec::new();
    if let Some(f) = crate::fault::Faults::new(&monitor.fault, first_shard)? {
        fault_specs = f.specs().to_vec();
        // First: a fault due at an interval's end waits until the interval is counted.
        observers.insert(0, Box::new(f));
    }
    if output.tui {
        observers.push(Box::new(crate::ui::tui::Dashboard::new(
            stop.clone(),
            title,
            fault_specs,
        )?));
    } else if progress {
        observers.push(Box::new(crate::ui::progress::Progress::new(unit)));
    }
    Ok(observers)
}

pub use crate::THRESHOLDS_FAILED;

/// How a load run ends: 130 or 143 when Ctrl-C (or q) or SIGTERM stopped it (after
/// everything was written); 1 when a `--fault` could not be applied or taken out again
/// (said in one line: the run did not test what it was asked to); else `otherwise`.
pub fn exit_code(summary: &Summary, otherwise: std::process::ExitCode) -> std::process::ExitCode {
    if let Some(s) = summary
        .interrupted_by
        .as_deref()
        .and_then(crate::engine::Signal::from_name)
    {
        return std::process::ExitCode::from(s.exit_code());
    }
    match crate::fault::not_applied(summary) {
        0 => otherwise,
        n => {
            println!(
                "{n} fault event{} failed to apply or undo a fault (see faults.jsonl and the warnings; a fault that may fail says optional=yes): exit status 1",
                if n == 1 { "" } else { "s" }
            );
            std::process::ExitCode::from(1)
        }
    }
}

/// The exit status rule of `spate smtp`, `pop3` and `imap` (and `xmpp`'s): 1 when the
/// server accepted nothing (no unit was made, or every one failed or was refused), or
/// when most units failed ([`mostly_failed`]), said in one line; else `otherwise` (a
/// check's verdict: `--verify`); 130/143 after a signal.
pub fn load_exit(
    summary: &Summary,
    what: &str,
    otherwise: std::process::ExitCode,
) -> std::process::ExitCode {
    if summary.totals.accepted == 0 && summary.interrupted_by.is_none() {
        println!("nothing accepted: no {what} went through (see the errors above); exit status 1");
        return std::process::ExitCode::from(1);
    }
    if mostly_failed(summary, what) {
        return exit_code(summary, std::process::ExitCode::from(1));
    }
    exit_code(summary, otherwise)
}

/// More than half of the units attempted failed (the transport or the protocol broke;
/// refusals are the server's answers and do not count): the run did not measure the
/// server's service but its failures. Said in one line; the caller exits 1.
pub fn mostly_failed(summary: &Summary, what: &str) -> bool {
    let t = &summary.totals;
    if t.attempted == 0 || t.failed * 2 <= t.attempted {
        return false;
    }
    println!(
        "most units failed: {} of {} {what}s attempted ({:.0}%; see the errors above); exit status 1",
        t.failed,
        t.attempted,
        t.failed as f64 * 100.0 / t.attempted as f64
    );
    true
}

/// The end of every load run: the text summary, the monitoring block, report.html.
pub fn print_outcome(finished: &Finished) {
    print!("{}", crate::report::text::render(&finished.summary));
    print!("{}", crate::monitor::text::render(&finished.summary));
    let untrusted = finished
        .summary
        .errors
        .iter()
        .any(|e| e.kind == "tls" && e.sample.contains(crate::transport::UNTRUSTED));
    if untrusted {
        println!("hint: the server's certificate is not trusted: give its CA (or the certificate itself) with --ca FILE, or --insecure to skip the check");
    }
    // The HTML report is a convenience: failing to write it must not fail the run.
    if let Err(e) = crate::report::write_report(&finished.dir) {
        eprintln!("spate: warning: no HTML report: {e:#}");
    }
}
