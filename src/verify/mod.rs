//! `spate verify`: end-to-end delivery verification. Reads a run's sent.log (what the
//! server accepted), reads every recipient mailbox from a source, finds spate's messages by
//! their tracking header, and reports expected, delivered, missing, duplicated, corrupted
//! and foreign messages, delivery latency, and derived messages (bounces, notices) counted
//! by rules.
//!
//! Sources feed a [`Ledger`] one message at a time ([`Ledger::ingest`]); the ledger is
//! compared with the [`SentLog`] by [`Ledger::report`]. Sources: a Maildir tree on disk
//! (watched while an inline run goes), or an IMAP, POP3 or JMAP server read after the run
//! (IMAP and JMAP mailboxes followed by push while an inline run goes).

mod args;
mod finds;
mod ledger;
mod maildir;
mod output;
mod parse;
mod remote;
pub mod rules;
mod seen;
mod sentlog;

pub use args::{Common, InlineArgs, RemoteOptions, Source, RULES_HELP};
pub use ledger::{Ingested, Ledger, Report, RuleResult, Timing};
pub use maildir::Maildir;
pub use remote::{Passwords, Remote};
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
/// After an inline run, push watchers go on until nothing new came for this long.
const QUIET: Duration = Duration::from_secs(1);

/// What reads the mailboxes.
pub enum Reader {
    Maildir(Maildir),
    Remote(Remote),
}

impl Reader {
    /// The reader for `source`; remote sources need passwords and TLS options.
    pub fn new(source: &Source, remote: &RemoteOptions) -> anyhow::Result<Reader> {
        match source {
            Source::Maildir(root) => Ok(Reader::Maildir(Maildir::new(root))),
            Source::Imap { .. } | Source::Pop3 { .. } | Source::Jmap { .. } => {
                let tls = crate::tls::ClientOptions {
                    ca: remote.ca.clone(),
                    insecure: remote.insecure,
                    ..Default::default()
                };
                let timeout = units::parse_duration(&remote.timeout)?;
                Ok(Reader::Remote(Remote::new(
                    &source.describe(),
                    &tls,
                    timeout,
                    Passwords::load(remote.users_file.as_ref())?,
                )?))
            }
        }
    }

    /// Reads the mailboxes into `ledger` once.
    fn poll(&mut self, log: &SentLog, ledger: &mut Ledger) -> anyhow::Result<()> {
        match self {
            Reader::Maildir(m) => {
                m.poll(ledger)?;
                Ok(())
            }
            Reader::Remote(r) => r.poll(log, ledger),
        }
    }

    /// What the reader has to say beside the counts (push a server refused).
    fn notes(&self) -> Vec<String> {
        match self {
            Reader::Maildir(_) => Vec::new(),
            Reader::Remote(r) => r.notes(),
        }
    }

    /// Remote servers are read less often than a directory.
    fn interval(&self) -> Duration {
        match self {
            Reader::Maildir(_) => POLL,
            Reader::Remote(_) => Duration::from_secs(1),
        }
    }
}

/// Everything one verification needs.
pub struct Job {
    pub dir: PathBuf,
    pub out: PathBuf,
    pub source: Source,
    pub reader: Reader,
    pub wait: Option<Duration>,
    pub show: usize,
    pub progress: bool,
    /// An MTA's queue directory (Postfix's): a delivery not found whose message is still
    /// there is `queued`, not missing.
    pub queue: Option<PathBuf>,
    /// Set (to why) when Ctrl-C or SIGTERM arrives during the wait, or before it when the
    /// run itself was stopped by one: the wait ends, what was found is written and the
    /// verdict says the check was cut short (see [`cut_on_signal`]).
    pub cut: Option<Arc<std::sync::OnceLock<String>>>,
}

/// Listens for Ctrl-C and SIGTERM while a check waits for deliveries: the first one sets
/// the returned cell, and [`run_blocking`] then stops waiting and writes what it found
/// (without this, a signal during a long `--verify-wait` went unheard: the load's own
/// listener is gone by then). Abort the task when the check is done.
pub fn cut_on_signal() -> (
    Arc<std::sync::OnceLock<String>>,
    tokio::task::JoinHandle<()>,
) {
    let cell = Arc::new(std::sync::OnceLock::new());
    let set = cell.clone();
    let mut signals = crate::engine::Signals::new();
    let task = tokio::spawn(async move {
        let s = signals.recv().await;
        let _ = set.set(format!("{} during the wait", s.name()));
    });
    (cell, task)
}

/// The sequence numbers of run `run`'s messages in an MTA's queue directory now: the
/// files under its incoming, active, deferred and hold queues (hashed subdirectories
/// too) whose content carries the message's trace header. Postfix keeps a message's
/// header lines as they came, at the start of its content records.
pub fn queued_seqs(queue: &Path, run: &str) -> std::io::Result<std::collections::HashSet<u64>> {
    use std::io::Read as _;
    fn walk(dir: &Path, depth: u32, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for e in std::fs::read_dir(dir)?.flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() && depth > 0 => walk(&e.path(), depth - 1, files)?,
                Ok(t) if t.is_file() => files.push(e.path()),
                _ => {}
            }
        }
        Ok(())
    }
    let mut files = Vec::new();
    for q in crate::monitor::queue::QUEUES {
        let d = queue.join(q);
        if d.is_dir() {
            walk(&d, 6, &mut files)?;
        }
    }
    let needle = format!("{}: run={run}; seq=", crate::message::TRACE_HEADER);
    let mut seqs = std::collections::HashSet::new();
    let mut buf = Vec::new();
    for f in files {
        // A file may go (delivered) between the listing and the read.
        let Ok(file) = std::fs::File::open(&f) else {
            continue;
        };
        buf.clear();
        if file.take(256 * 1024).read_to_end(&mut buf).is_err() {
            continue;
        }
        let mut at = 0;
        while let Some(i) = find(&buf[at..], needle.as_bytes()) {
            let digits = &buf[at + i + needle.len()..];
            let n = digits.iter().take_while(|b| b.is_ascii_digit()).count();
            if let Some(seq) = std::str::from_utf8(&digits[..n])
                .ok()
                .and_then(|s| s.parse().ok())
            {
                seqs.insert(seq);
            }
            at += i + needle.len();
        }
    }
    Ok(seqs)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Polls until complete or out of time, then writes the files and prints the report.
/// Blocking (file system); returns the report.
pub fn run_blocking(job: &mut Job, ledger: &mut Ledger) -> anyhow::Result<Report> {
    let log = SentLog::read_dir(&job.dir)?;
    let t0 = Instant::now();
    let deadline = job.wait.map(|w| t0 + w);
    let mut last_count = u64::MAX;
    let mut report = None;
    let mut last_print = Instant::now() - Duration::from_secs(1);
    let tty = std::io::stderr().is_terminal();
    loop {
        let res = job.reader.poll(&log, ledger);
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
        if r.complete() {
            break;
        }
        if let Some(why) = job.cut.as_ref().and_then(|c| c.get()) {
            let mut r = ledger.report(&log);
            let waited = t0.elapsed();
            r.wait_cut = Some(if waited < Duration::from_secs(1) {
                why.clone()
            } else {
                format!(
                    "{why}, after {} of {}",
                    units::fmt_duration(waited),
                    units::fmt_duration(job.wait.unwrap_or_default())
                )
            });
            report = Some(r);
            break;
        }
        if !waiting {
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
        std::thread::sleep(job.reader.interval());
    }
    if job.progress && tty && last_print.elapsed() < t0.elapsed() {
        eprintln!();
    }
    let mut report = report.expect("the loop runs at least once");
    report.notes = job.reader.notes();
    if let (Some(q), false) = (&job.queue, report.missing.is_empty()) {
        match queued_seqs(q, &log.run_id) {
            Ok(seqs) if !seqs.is_empty() => {
                let (queued, missing) = std::mem::take(&mut report.missing)
                    .into_iter()
                    .partition(|m| seqs.contains(&m.0));
                report.queued = queued;
                report.missing = missing;
            }
            Ok(_) => {}
            Err(e) => report.notes.push(format!(
                "the MTA's queue {} could not be read ({e}): deliveries not found are counted missing",
                q.display()
            )),
        }
    }
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

pub fn rules_of(path: Option<&Path>) -> anyhow::Result<Vec<rules::Rule>> {
    match path {
        Some(p) => rules::read(p).map_err(|e| crate::UsageError(e.to_string()).into()),
        None => Ok(Vec::new()),
    }
}

pub fn parse_wait(s: Option<&str>) -> anyhow::Result<Option<Duration>> {
    s.map(units::parse_duration).transpose().map_err(Into::into)
}

pub fn exit_code(r: &Report) -> ExitCode {
    if r.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The mailboxes watched while `spate smtp` runs (a Maildir polled, IMAP or JMAP ones
/// followed by push), so arrivals are seen as they happen.
pub struct Watch {
    source: Source,
    reader: Option<Reader>,
    /// Push watchers (IMAP IDLE, JMAP EventSource) and the switch that ends them.
    idle_stop: tokio::sync::watch::Sender<bool>,
    watchers: Vec<tokio::task::JoinHandle<()>>,
    /// How long [`Watch::ready`] waits at most.
    ready_limit: Duration,
    wait: Duration,
    ledger: Arc<Mutex<Ledger>>,
    stop: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// The MTA's queue directory (`--monitor-queue`), if the run watches one.
    queue: Option<PathBuf>,
}

impl Watch {
    /// Validates the inline options before the run and starts watching (Maildir only).
    /// `None` when `--verify` was not given.
    /// `recipients`: the addresses the run may send to (IMAP sources watch them).
    pub fn start(
        args: &InlineArgs,
        remote: RemoteOptions,
        recipients: &[String],
    ) -> anyhow::Result<Option<Watch>> {
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
                    // The final check reads with a Maildir of its own (the reader below),
                    // whose first pass lists every directory once more.
                    let mut dir = Maildir::new(&root);
                    while !stop.load(Ordering::Relaxed) {
                        // Errors (no root yet) are retried; the final pass reports them.
                        let _ = dir.poll(&mut ledger.lock().unwrap_or_else(|p| p.into_inner()));
                        std::thread::sleep(POLL);
                    }
                }))
            }
            // Read after the run; options checked now rather than after a long run.
            _ => None,
        };
        let reader = Reader::new(&source, &remote)?;
        let ready_limit = units::parse_duration(&remote.timeout)?.min(Duration::from_secs(10));
        let (idle_stop, idle_rx) = tokio::sync::watch::channel(false);
        let watchers = match &reader {
            Reader::Remote(r) => r.watch(recipients, ledger.clone(), idle_rx),
            Reader::Maildir(_) => Vec::new(),
        };
        Ok(Some(Watch {
            reader: Some(reader),
            idle_stop,
            watchers,
            ready_limit,
            source,
            wait,
            ledger,
            stop,
            task,
            queue: None,
        }))
    }

    /// The MTA's queue directory (the run's `--monitor-queue`): a message still there when
    /// the check ends is `still queued`, not missing.
    pub fn with_queue(mut self, queue: Option<PathBuf>) -> Watch {
        self.queue = queue;
        self
    }

    /// Waits until the mailboxes followed by push are watched (or their watchers gave
    /// up), at most the remote source's timeout and 10 s: a run started before has its
    /// first deliveries timed by the final read rather than by push.
    pub async fn ready(&self) {
        if let Some(Reader::Remote(r)) = &self.reader {
            r.ready(self.watchers.len(), self.ready_limit).await;
        }
    }

    /// After the run, lets the push watchers go on while they still bring messages:
    /// until none came for [`QUIET`] (Dovecot holds IDLE notifications back up to 0.5 s;
    /// a JMAP server's state event is followed by requests), at most the verify wait.
    /// What they would have announced later is timed by the final read instead, to the
    /// second. How long it waited.
    async fn drain_push(&self) -> Duration {
        let t0 = Instant::now();
        let ingested = || {
            self.ledger
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .ingested()
        };
        let (mut last, mut at) = (ingested(), t0);
        while t0.elapsed() < self.wait
            && at.elapsed() < QUIET
            && self.watchers.iter().any(|w| !w.is_finished())
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let n = ingested();
            if n != last {
                (last, at) = (n, Instant::now());
            }
        }
        t0.elapsed()
    }

    /// Stops watching and verifies the run in `dir`; the exit status of the check.
    /// A run that ends before (the server refused, the results directory could not be
    /// made) drops the watch instead: see `Drop`. `stopped_by`: the signal that stopped
    /// the run (its summary's `interrupted_by`): then there is no wait, one last read.
    /// Ctrl-C or SIGTERM during the wait ends it the same way.
    pub async fn finish(
        mut self,
        dir: &Path,
        stopped_by: Option<&str>,
    ) -> anyhow::Result<ExitCode> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
        // Deliveries still arriving are announced by push until the final read starts.
        let waited = self.drain_push().await;
        let _ = self.idle_stop.send(true);
        for w in self.watchers.drain(..) {
            if tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .is_err()
            {
                // A watcher stuck on a dead server: the final read reports it.
            }
        }
        let mut job = Job {
            dir: dir.to_path_buf(),
            out: dir.to_path_buf(),
            source: self.source.clone(),
            reader: self.reader.take().expect("finish runs once"),
            wait: Some(self.wait.saturating_sub(waited)),
            show: 20,
            progress: true,
            queue: self.queue.clone(),
            cut: None,
        };
        let (cut, listener) = cut_on_signal();
        if let Some(sig) = stopped_by {
            let _ = cut.set(format!(
                "the run was stopped by {sig}: no wait for deliveries"
            ));
            job.wait = Some(Duration::ZERO);
        }
        job.cut = Some(cut);
        let ledger = self.ledger.clone();
        let report = tokio::task::spawn_blocking(move || {
            let mut l = ledger.lock().unwrap_or_else(|p| p.into_inner());
            run_blocking(&mut job, &mut l)
        })
        .await;
        listener.abort();
        Ok(exit_code(&report??))
    }
}

impl Drop for Watch {
    /// The polling thread ends: the runtime waits for its blocking threads when it shuts
    /// down, so a watch left running would keep spate from exiting after an error.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.idle_stop.send(true);
    }
}
