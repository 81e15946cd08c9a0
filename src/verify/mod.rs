//! `spate verify`: end-to-end delivery verification. Reads a run's sent.log (what the
//! server accepted), reads every recipient mailbox from a source, finds spate's messages by
//! their tracking header, and reports expected, delivered, missing, duplicated, corrupted
//! and foreign messages, delivery latency, and derived messages (bounces, notices) counted
//! by rules.
//!
//! Sources feed a [`Ledger`] one message at a time ([`Ledger::ingest`]); the ledger is
//! compared with the [`SentLog`] by [`Ledger::report`]. Only the Maildir source exists
//! here; IMAP and POP3 are parsed and refused until their clients are plugged in.

mod args;
mod ledger;
mod maildir;
mod output;
mod parse;
pub mod rules;
mod sentlog;

pub use args::{Common, InlineArgs, Source, VerifyArgs};
pub use ledger::{Ingested, Ledger, Report, RuleResult};
pub use maildir::Maildir;
pub use sentlog::{SentLog, SentLogError};

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::units;

/// How often a Maildir is polled while waiting or watching.
const POLL: Duration = Duration::from_millis(250);

/// Reads the mailboxes of `source` into `ledger` once.
fn poll(source: &Source, ledger: &mut Ledger) -> anyhow::Result<()> {
    match source {
        Source::Maildir(root) => {
            Maildir::new(root).poll(ledger)?;
            Ok(())
        }
        Source::Imap { .. } | Source::Pop3 { .. } => anyhow::bail!(
            "source {}: IMAP/POP3 sources are not available in this build yet; \
             use a Maildir (maildir:ROOT)",
            source.describe()
        ),
    }
}

/// Everything one verification needs.
pub struct Job {
    pub dir: PathBuf,
    pub out: PathBuf,
    pub source: Source,
    pub wait: Option<Duration>,
    pub show: usize,
    pub progress: bool,
}

/// Polls until complete or out of time, then writes the files and prints the report.
/// Blocking (file system); returns the report.
pub fn run_blocking(job: &Job, ledger: &mut Ledger) -> anyhow::Result<Report> {
    let log = SentLog::read_dir(&job.dir)?;
    let t0 = Instant::now();
    let deadline = job.wait.map(|w| t0 + w);
    let mut last_count = u64::MAX;
    let mut report = None;
    let mut last_print = Instant::now() - Duration::from_secs(1);
    let tty = std::io::stderr().is_terminal();
    loop {
        let res = poll(&job.source, ledger);
        let waiting = deadline.is_some_and(|d| Instant::now() < d);
        if let Err(e) = res {
            // A Maildir root appears with the first delivery: keep waiting for it.
            let not_yet = e
                .downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound);
            if !(waiting && not_yet) {
                return Err(e);
            }
        }
        if ledger.ingested() != last_count || report.is_none() {
            last_count = ledger.ingested();
            report = Some(ledger.report(&log));
        }
        let r = report.as_ref().expect("computed above");
        if r.complete() || !waiting {
            break;
        }
        if job.progress && last_print.elapsed() >= Duration::from_secs(1) {
            last_print = Instant::now();
            let line = format!(
                "verify: {}/{} delivered, {} missing, waited {} of {}",
                r.delivered,
                r.expected,
                r.missing_count(),
                units::fmt_duration(t0.elapsed()),
                units::fmt_duration(job.wait.unwrap_or_default()),
            );
            if tty {
                eprint!("\r{line}\x1b[K");
            } else {
                eprintln!("{line}");
            }
        }
        std::thread::sleep(POLL);
    }
    if job.progress && tty && last_print.elapsed() < t0.elapsed() {
        eprintln!();
    }
    let report = report.expect("the loop runs at least once");
    std::fs::create_dir_all(&job.out)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", job.out.display()))?;
    output::write_files(&report, &job.out, &job.source.describe())
        .map_err(|e| anyhow::anyhow!("cannot write results to {}: {e}", job.out.display()))?;
    print!(
        "{}",
        output::render(&report, &job.source.describe(), &job.dir, job.show)
    );
    Ok(report)
}

fn rules_of(path: Option<&Path>) -> anyhow::Result<Vec<rules::Rule>> {
    match path {
        Some(p) => rules::read(p).map_err(|e| crate::UsageError(e.to_string()).into()),
        None => Ok(Vec::new()),
    }
}

fn parse_wait(s: Option<&str>) -> anyhow::Result<Option<Duration>> {
    s.map(units::parse_duration).transpose().map_err(Into::into)
}

/// `spate verify`.
pub async fn main(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let source = match (&args.source, &args.maildir) {
        (Some(s), _) => Source::parse(s)?,
        (None, Some(root)) => Source::Maildir(root.clone()),
        (None, None) => return crate::usage("give --maildir ROOT or --source SOURCE"),
    };
    if !args.dir.is_dir() {
        anyhow::bail!("{}: not a results directory", args.dir.display());
    }
    let rules = rules_of(args.common.rules.as_deref())?;
    let job = Job {
        out: args.out.clone().unwrap_or_else(|| args.dir.clone()),
        dir: args.dir.clone(),
        source,
        wait: parse_wait(args.common.wait.as_deref())?,
        show: args.common.show,
        progress: true,
    };
    let report = tokio::task::spawn_blocking(move || {
        let mut ledger = Ledger::new(rules);
        run_blocking(&job, &mut ledger)
    })
    .await??;
    Ok(exit_code(&report))
}

fn exit_code(r: &Report) -> ExitCode {
    if r.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// A Maildir watched while `spate smtp` runs, so arrivals are seen as they happen.
pub struct Watch {
    source: Source,
    wait: Duration,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Watch {
    /// Validates the inline options before the run and starts watching (Maildir only).
    /// `None` when `--verify` was not given.
    pub fn start(args: &InlineArgs) -> anyhow::Result<Option<Watch>> {
        let Some(s) = &args.verify else {
            return Ok(None);
        };
        let source = Source::parse(s)?;
        let wait = parse_wait(args.verify_wait.as_deref())?.unwrap_or(Duration::from_secs(10));
        let ledger = Arc::new(Mutex::new(Ledger::new(rules_of(
            args.verify_rules.as_deref(),
        )?)));
        let stop = Arc::new(AtomicBool::new(false));
        let task = match &source {
            Source::Maildir(root) => {
                let (root, ledger, stop) = (root.clone(), ledger.clone(), stop.clone());
                Some(tokio::task::spawn_blocking(move || {
                    let dir = Maildir::new(&root);
                    while !stop.load(Ordering::Relaxed) {
                        // Errors (no root yet) are retried; the final pass reports them.
                        let _ = dir.poll(&mut ledger.lock().unwrap_or_else(|p| p.into_inner()));
                        std::thread::sleep(POLL);
                    }
                }))
            }
            // Refused now rather than after a long run.
            _ => {
                poll(&source, &mut Ledger::new(Vec::new()))?;
                None
            }
        };
        Ok(Some(Watch {
            source,
            wait,
            ledger,
            stop,
            task,
        }))
    }

    /// Stops watching and verifies the run in `dir`; the exit status of the check.
    pub async fn finish(mut self, dir: &Path) -> anyhow::Result<ExitCode> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        let job = Job {
            dir: dir.to_path_buf(),
            out: dir.to_path_buf(),
            source: self.source.clone(),
            wait: Some(self.wait),
            show: 20,
            progress: true,
        };
        let ledger = self.ledger.clone();
        let report = tokio::task::spawn_blocking(move || {
            let mut l = ledger.lock().unwrap_or_else(|p| p.into_inner());
            run_blocking(&job, &mut l)
        })
        .await??;
        Ok(exit_code(&report))
    }
}
