//! Where results go and how a run shows itself: the output options every load command
//! shares.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::{usage, UsageError};

/// Where results go and how the run shows itself: shared by every load command.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct OutputArgs {
    /// Results directory (default: a new ./spate-results/<timestamp>-<command>;
    /// ./spate-results/latest points to the newest). A directory that holds a run
    /// already is refused unless --overwrite.
    #[arg(long, short = 'o', help_heading = "Output")]
    pub out: Option<std::path::PathBuf>,
    /// Write into --out even when it holds an earlier run (its files are replaced).
    #[arg(long, help_heading = "Output")]
    pub overwrite: bool,
    /// Print nothing while running; only the final summary.
    #[arg(long, short = 'q', help_heading = "Output")]
    pub quiet: bool,
    /// Print progress even when stderr is not a terminal.
    #[arg(long, help_heading = "Output")]
    pub progress: bool,
    /// Live dashboard instead of the progress line: progress, throughput, latency
    /// percentiles and histogram per phase, errors and error rate. Keys: q stops cleanly
    /// (results are still written), p pauses drawing, Tab/arrows switch phase, ? help.
    #[arg(long, help_heading = "Output")]
    pub tui: bool,
    /// Watch and steer the run from a browser at http://ADDR/ (127.0.0.1:5665 when ADDR
    /// is left out; port 0 picks a free one, said on stderr and in web.json): the
    /// report's charts, live, updated every second (less often on a run so long that
    /// drawing them takes longer), with buttons to pause, resume and stop the run (as
    /// SIGTERM: everything written) and set its rate (an open workload) or its number
    /// of sessions (a closed one). The same actions are an HTTP API (`spate ctl`); each
    /// is written to control.jsonl and marked on the report's charts. The page needs no
    /// network. On an address other than loopback, steering needs the token in
    /// SPATE_WEB_TOKEN (set it before the run; the page asks for it). Shard I of a run
    /// listens on PORT + I.
    #[arg(
        long,
        value_name = "ADDR",
        num_args = 0..=1,
        require_equals = false,
        default_missing_value = "127.0.0.1:5665",
        value_parser = parse_listen,
        help_heading = "Output"
    )]
    pub web: Option<SocketAddr>,
    /// After Ctrl-C or the end of the schedule, wait this long for work in flight.
    #[arg(long, default_value = "10s", help_heading = "Output")]
    pub grace: String,
    /// One-second rows (intervals.csv, the phase histogram logs, errors.jsonl) for this
    /// long, then one row per minute, so that a soak of days keeps its results directory
    /// bounded (a 63-hour run: about 7 300 rows per file) with exact percentiles.
    #[arg(
        long,
        default_value = "1h",
        value_name = "DURATION",
        help_heading = "Output"
    )]
    pub detail: String,
    /// Seed for every random choice, for repeatable runs. spate smtp draws each message's
    /// recipients, sender and size from (seed, its sequence number): the same messages
    /// with any number of sessions. Elsewhere each session's choices repeat, but which
    /// session does which unit depends on timing, so only a one-session run repeats whole.
    #[arg(long, help_heading = "Output")]
    pub seed: Option<u64>,
    /// Serve the run's live figures to Prometheus (or Grafana's agent) at
    /// http://ADDR/metrics, in the text format 0.0.4, updated every second: every total
    /// of summary.json as spate_<name>_total (spate_accepted_total, ...),
    /// spate_active_sessions, spate_errors_total by phase and kind, and a histogram
    /// spate_phase_seconds per phase (buckets from 100µs to 100s, counted from the HDR
    /// data). Every series is labelled run_id, shard ("I/N"; "0/1" when not sharded) and
    /// protocol, so the shards of one run, each scraped on its own host, sum to one test.
    /// Shard I of a run listens on PORT + I, so the shards of one host do not collide
    /// (port 0: a free port each); each results directory's metrics.json says where.
    /// ADDR is IP:PORT; prefer loopback (127.0.0.1:9464): the endpoint has no
    /// authentication. It listens before the run starts and closes when the run ends.
    #[arg(
        long,
        value_name = "ADDR",
        value_parser = parse_listen,
        help_heading = "Output"
    )]
    pub metrics_listen: Option<SocketAddr>,
    /// With --metrics-listen: after the run, keep serving its final figures
    /// (spate_run_finished 1) until a scrape has read them, at most this long (Ctrl-C
    /// ends the wait). Give it the scrape interval, so that the last seconds of a run
    /// reach Prometheus.
    #[arg(
        long,
        default_value = "0s",
        value_name = "DURATION",
        requires = "metrics_listen",
        help_heading = "Output"
    )]
    pub metrics_linger: String,
    /// A pass/fail rule checked on the run's results when it ends: METRIC OP LIMIT, such
    /// as 'p99(response) < 500ms', 'errors.rate < 0.1%', 'totals.late == 0' or (with
    /// --verify) 'verify.missing == 0' (repeatable). Each is printed and written to
    /// thresholds.json; a broken one makes the exit status 99. Ending in `abort` (or
    /// `abort after 30s`, not before that point of the run) it is also checked every
    /// second on the figures so far: the first time it fails the run stops as after
    /// SIGTERM, everything written, the summary naming the threshold and when.
    #[arg(long = "threshold", value_name = "RULE", help_heading = "Verdict")]
    pub thresholds: Vec<String>,
    /// Write the run's verdicts as JUnit XML to FILE (GitLab, Jenkins and GitHub test
    /// reporters read it): one test case for the run, one per --threshold, a failure
    /// carrying the measured value and the limit.
    #[arg(long, value_name = "FILE", help_heading = "Verdict")]
    pub junit: Option<PathBuf>,
}

/// `--metrics-listen`'s address: an IP address and a port, nothing to resolve.
fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    text.trim()
        .parse()
        .map_err(|_| "expected IP:PORT, such as 127.0.0.1:9464 or [::1]:9464".to_string())
}

impl OutputArgs {
    /// Live progress on stderr: asked for, or stderr is a terminal and not --quiet.
    pub fn progress_enabled(&self) -> bool {
        use std::io::IsTerminal;
        !self.quiet && (self.progress || std::io::stderr().is_terminal())
    }
}

/// Where runs go unless told otherwise.
pub const RESULTS: &str = "spate-results";

/// Files that mark a directory as the results of a run (of any command).
const RUN_MARKERS: [&str; 6] = [
    "plan.json",
    "summary.json",
    "scenario.json",
    "sweep.csv",
    "matrix.json",
    "verify.json",
];

/// Whether `dir` holds a run: its own files, or those of runs in its subdirectories (a
/// demo's or a scenario's parts). A marker counts only as spate writes it: a JSON one must
/// be a JSON object (plan.json and summary.json with spate's `spate_version`), so a user's
/// own `plan.json` does not make a directory a run to overwrite.
pub fn holds_run(dir: &Path) -> bool {
    let marked = |d: &Path| RUN_MARKERS.iter().any(|m| is_marker(&d.join(m)));
    if marked(dir) {
        return true;
    }
    std::fs::read_dir(dir)
        .map(|rd| rd.flatten().any(|e| e.path().is_dir() && marked(&e.path())))
        .unwrap_or(false)
}

/// Whether `path` is a run's marker file as spate writes it.
fn is_marker(path: &Path) -> bool {
    if path.extension().is_some_and(|e| e != "json") {
        return path.is_file();
    }
    let Ok(bytes) = std::fs::read(path) else {
        return false;
    };
    let Ok(serde_json::Value::Object(doc)) = serde_json::from_slice(&bytes) else {
        return false;
    };
    let named = |n: &str| path.file_name().is_some_and(|f| f == n);
    !(named("plan.json") || named("summary.json")) || doc.contains_key("spate_version")
}

/// Removes the files an earlier run wrote in `dir` (by name, plain files only), so that
/// an overwritten directory holds only what the new run writes: a verify.json or
/// report.html of the old run would otherwise be read as the new one's. Anything else
/// there (a user's notes, a subdirectory) stays.
fn remove_earlier_run(dir: &Path) -> Result<(), UsageError> {
    let mut phases = crate::results::outdir::declared_phases(dir);
    phases.extend(
        crate::session::all_phases()
            .iter()
            .map(|p| p.name().to_string()),
    );
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let plain = e.file_type().is_ok_and(|t| t.is_file());
        if plain && crate::results::outdir::is_results_file(&name, &phases) {
            std::fs::remove_file(e.path()).map_err(|err| {
                UsageError(format!(
                    "cannot remove {} of the earlier run: {err}",
                    e.path().display()
                ))
            })?;
        }
    }
    Ok(())
}

/// The first file in `dir` (a directory that holds no run) with the name of a file a run
/// writes: someone else's, which a run there would replace.
fn foreign_results_file(dir: &Path) -> Option<String> {
    let phases: Vec<String> = crate::session::all_phases()
        .iter()
        .map(|p| p.name().to_string())
        .collect();
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| crate::results::outdir::is_results_file(n, &phases))
        .collect();
    names.sort();
    names.into_iter().next()
}

/// The results directory of a new run, created: `out` when given (refused when it holds
/// a run, unless `overwrite`, and when it holds no run but a file of a run's name, which
/// would be replaced), else a new `./spate-results/<timestamp>-<kind>` that no
/// other run has (another started in the same millisecond gets `-2`, ...), which
/// `./spate-results/latest` then points to.
pub fn results_dir(out: Option<&Path>, overwrite: bool, kind: &str) -> anyhow::Result<PathBuf> {
    if let Some(dir) = out {
        if holds_run(dir) {
            if !overwrite {
                return usage(format!(
                    "{} holds an earlier run: give another --out, or --overwrite to replace it",
                    dir.display()
                ));
            }
            remove_earlier_run(dir)?;
        } else if let Some(name) = foreign_results_file(dir) {
            return usage(format!(
                "{} holds {name}, which no run of spate's wrote and this run would replace: \
                 give another --out (nothing written)",
                dir.display()
            ));
        }
        std::fs::create_dir_all(dir)
            .map_err(|e| UsageError(format!("cannot create {}: {e}", dir.display())))?;
        return Ok(dir.to_path_buf());
    }
    let root = Path::new(RESULTS);
    std::fs::create_dir_all(root)
        .map_err(|e| UsageError(format!("cannot create {}: {e}", root.display())))?;
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S%.3f");
    for n in 1..1000 {
        let name = match n {
            1 => format!("{stamp}-{kind}"),
            n => format!("{stamp}-{kind}-{n}"),
        };
        let dir = root.join(&name);
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                point_latest(root, &name);
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return usage(format!("cannot create {}: {e}", dir.display())),
        }
    }
    usage(format!("cannot find a free name in {}", root.display()))
}

/// `root/latest` → `name`, replaced atomically (a symlink renamed over the old one). A
/// file system without symlinks just has no `latest`; a `latest` that is not a symlink
/// (a user's file or directory) is left as it is, and said.
fn point_latest(root: &Path, name: &str) {
    let latest = root.join("latest");
    if std::fs::symlink_metadata(&latest).is_ok_and(|m| !m.file_type().is_symlink()) {
        eprintln!(
            "spate: warning: {} is not a link spate made: left as it is (this run is {})",
            latest.display(),
            root.join(name).display()
        );
        return;
    }
    let tmp = root.join(format!(".latest-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    if std::os::unix::fs::symlink(name, &tmp).is_ok()
        && std::fs::rename(&tmp, root.join("latest")).is_err()
    {
        let _ = std::fs::remove_file(&tmp);
    }
}
