//! Running a validated scenario: the embedded server, then each step in order (commands
//! in-process through the normal dispatch, hooks as shell commands, waits), thresholds
//! after each step and at the end, and `scenario.json`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::json;

use super::model::{Invocation, Step, StepKind, Workload};
use super::threshold::{Check, Verdict};
use crate::ctx::Ctx;

#[derive(Debug, Default, Serialize)]
pub struct StepRecord {
    pub name: String,
    pub kind: &'static str,
    /// The command line (commands) or the shell command (hooks).
    pub argv: Vec<String>,
    pub dir: PathBuf,
    pub started_at: String,
    pub ended_at: String,
    pub elapsed_s: f64,
    /// ok, failed, skipped, background.
    pub status: &'static str,
    /// 0 success, 1 the step failed, 2 bad input (as the command's own exit code).
    pub exit: u8,
    pub error: Option<String>,
    pub thresholds: Vec<Verdict>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<StepRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wait: Option<serde_json::Value>,
}

/// Values known only once the run started: `${server.smtp}`, `${server.ca}`, `${out}`.
pub type Live = HashMap<String, String>;

pub fn expand(s: &str, live: &Live) -> Result<String, String> {
    let mut out = s.to_string();
    for (k, v) in live {
        out = out.replace(&format!("${{{k}}}"), v);
    }
    match out.find("${server.") {
        Some(i) => {
            let name = &out[i + 2..out[i..].find('}').map_or(out.len(), |e| i + e)];
            Err(format!(
                "${{{name}}}: the [server] section does not start that listener (add e.g. {} = \"127.0.0.1:0\")",
                name.trim_start_matches("server.")
            ))
        }
        None => Ok(out),
    }
}

fn now() -> String {
    chrono::Local::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, false)
}

/// Runs a command line in-process; returns (exit code, error line).
pub async fn run_command(ctx: &Ctx, argv: &[String]) -> (u8, Option<String>) {
    match ctx.run(argv.to_vec()).await {
        Ok(code) if code == ExitCode::SUCCESS => (0, None),
        Ok(_) => (1, Some("the command reported failure".into())),
        Err(e) => {
            let (code, line) = crate::error::report(&e);
            (code, Some(line))
        }
    }
}

/// A scenario being run: where, the values known so far, hooks left running.
pub struct Execution {
    pub ctx: Ctx,
    pub out: PathBuf,
    /// Steps may replace earlier runs in their directories (`spate run --overwrite`).
    pub overwrite: bool,
    pub live: Live,
    pub background: Vec<(String, std::process::Child, usize)>,
    pub interrupted: Arc<AtomicBool>,
}

impl Execution {
    pub async fn step(&mut self, index: usize, step: &Step) -> StepRecord {
        let dir = self.out.join(format!("{:02}-{}", index + 1, step.name));
        let started = Instant::now();
        let mut rec = StepRecord {
            name: step.name.clone(),
            dir: dir.clone(),
            started_at: now(),
            status: "ok",
            ..Default::default()
        };
        let mut live = self.live.clone();
        live.insert("step_out".into(), dir.display().to_string());
        let result = match &step.kind {
            StepKind::Command(inv) => self.command(inv, &dir, &live, &mut rec).await,
            StepKind::Parallel(ws) => {
                rec.kind = "parallel";
                self.parallel(ws, &dir, &live, &mut rec).await
            }
            StepKind::Hook {
                run,
                timeout,
                background,
            } => {
                let bg = background.then_some((step.name.as_str(), index));
                self.hook(run, *timeout, bg, &dir, &live, &mut rec).await
            }
            StepKind::Wait {
                pause,
                until_empty,
                timeout,
                poll,
            } => {
                rec.kind = "wait";
                let _ = std::fs::create_dir_all(&dir);
                let r = wait(
                    *pause,
                    until_empty.as_deref(),
                    *timeout,
                    *poll,
                    &self.interrupted,
                )
                .await;
                // A drain past its deadline still writes what was left in the queue.
                let (v, e) = match r {
                    Ok(v) => (Some(v), None),
                    Err((e, v)) => (v, Some(e)),
                };
                if let Some(v) = v {
                    let _ = std::fs::write(dir.join("wait.json"), format!("{v:#}\n"));
                    rec.wait = Some(v);
                }
                e.map_or(Ok(()), |e| Err((1, e)))
            }
        };
        // A step a threshold stopped (`abort`) failed for that reason, and its thresholds
        // are still judged.
        let aborted = stopped_by_threshold(&dir);
        if let Err((code, e)) = result {
            rec.status = "failed";
            rec.exit = code;
            let e = aborted.clone().map_or(e, |(_, why)| why);
            eprintln!("spate run: step \"{}\" failed: {e}", step.name);
            rec.error = Some(e);
        }
        if rec.status == "ok" || aborted.is_some() {
            let command = match &step.kind {
                StepKind::Command(i) => i.command.as_str(),
                _ => rec.kind,
            };
            rec.thresholds = judge(&step.thresholds, &dir, command);
        }
        rec.ended_at = now();
        rec.elapsed_s = started.elapsed().as_secs_f64();
        rec
    }

    /// A command step, in-process.
    async fn command(
        &mut self,
        inv: &Invocation,
        dir: &Path,
        live: &Live,
        rec: &mut StepRecord,
    ) -> Result<(), (u8, String)> {
        rec.kind = "command";
        if let Some(n) = inv.shards {
            return self.sharded(inv, n, dir, live, rec).await;
        }
        let a = argv(inv, dir, live, self.overwrite).map_err(|e| (2, e))?;
        rec.argv = a.clone();
        let _ = std::fs::create_dir_all(&self.out);
        if !inv.wants_out {
            let _ = std::fs::create_dir_all(dir);
        }
        match run_command(&self.ctx, &a).await {
            (0, _) => Ok(()),
            (c, e) => Err((c, e.unwrap_or_default())),
        }
    }

    /// A command step of `shards = N`: N shards of one run (one run id, one start two
    /// seconds ahead) in `DIR.shards/I` beside the step's directory, then `spate merge`
    /// into DIR, which thresholds read like any run's.
    async fn sharded(
        &mut self,
        inv: &Invocation,
        n: u32,
        dir: &Path,
        live: &Live,
        rec: &mut StepRecord,
    ) -> Result<(), (u8, String)> {
        if !inv.wants_out {
            return Err((2, "shards: the step must leave --out to the runner".into()));
        }
        let mut root = dir.as_os_str().to_owned();
        root.push(".shards");
        let root = PathBuf::from(root);
        let run_id = crate::engine::new_run_id();
        let start = crate::results::rfc3339(std::time::SystemTime::now() + Duration::from_secs(2));
        let mut set = tokio::task::JoinSet::new();
        let mut dirs = Vec::new();
        for i in 0..n {
            let sdir = root.join(i.to_string());
            let mut a = argv(inv, &sdir, live, self.overwrite).map_err(|e| (2, e))?;
            a.extend([
                "--shard".to_string(),
                format!("{i}/{n}"),
                "--run-id".into(),
                run_id.clone(),
                "--start-at".into(),
                start.clone(),
            ]);
            if i == 0 {
                rec.argv = a.clone();
            }
            let ctx = self.ctx.clone();
            set.spawn(async move { (i, run_command(&ctx, &a).await) });
            dirs.push(sdir);
        }
        let mut failed = None;
        while let Some(joined) = set.join_next().await {
            match joined {
                Ok((_, (0, _))) => {}
                Ok((i, (code, e))) => {
                    failed
                        .get_or_insert((code, format!("shard {i}/{n}: {}", e.unwrap_or_default())));
                }
                Err(_) => {
                    failed.get_or_insert((1, "a shard panicked".into()));
                }
            }
        }
        if let Some(f) = failed {
            return Err(f);
        }
        let merged = crate::results::merge::merge(&dirs, dir, true, false)
            .map_err(|e| (2, format!("merging the shards: {e:#}")))?;
        if let Err(e) = crate::report::write_report(&merged.dir) {
            eprintln!("spate run: warning: no HTML report of the merged shards: {e:#}");
        }
        Ok(())
    }

    /// A hook: a shell command waited for, or left running in the background (`bg` is
    /// the step's name and index).
    async fn hook(
        &mut self,
        run: &str,
        timeout: Duration,
        bg: Option<(&str, usize)>,
        dir: &Path,
        live: &Live,
        rec: &mut StepRecord,
    ) -> Result<(), (u8, String)> {
        rec.kind = "hook";
        let _ = std::fs::create_dir_all(dir);
        let cmd = expand(run, live).map_err(|e| (2, e))?;
        rec.argv = vec!["sh".into(), "-c".into(), cmd.clone()];
        let child = spawn_hook(&cmd, live).map_err(|e| (1, e))?;
        match bg {
            Some((name, index)) => {
                rec.status = "background";
                self.background.push((name.to_string(), child, index));
                Ok(())
            }
            None => hook_wait(child, timeout, &self.interrupted).await,
        }
    }

    async fn parallel(
        &mut self,
        ws: &[Workload],
        dir: &Path,
        live: &Live,
        rec: &mut StepRecord,
    ) -> Result<(), (u8, String)> {
        let mut set = tokio::task::JoinSet::new();
        let mut subs = Vec::new();
        let ctx = &self.ctx;
        for (i, w) in ws.iter().enumerate() {
            let wdir = dir.join(&w.name);
            let mut sub = StepRecord {
                name: w.name.clone(),
                kind: "command",
                dir: wdir.clone(),
                started_at: now(),
                status: "ok",
                ..Default::default()
            };
            match argv(&w.inv, &wdir, live, self.overwrite) {
                Ok(a) => {
                    sub.argv = a.clone();
                    if !w.inv.wants_out {
                        let _ = std::fs::create_dir_all(&wdir);
                    }
                    let ctx = ctx.clone();
                    set.spawn(async move {
                        let t = Instant::now();
                        let r = run_command(&ctx, &a).await;
                        (i, r, t.elapsed().as_secs_f64())
                    });
                }
                Err(e) => return Err((2, format!("workload \"{}\": {e}", w.name))),
            }
            subs.push(sub);
        }
        let _ = std::fs::create_dir_all(dir);
        while let Some(joined) = set.join_next().await {
            let Ok((i, (code, err), secs)) = joined else {
                return Err((1, "a workload panicked".into()));
            };
            let sub = &mut subs[i];
            sub.ended_at = now();
            sub.elapsed_s = secs;
            sub.exit = code;
            if code != 0 {
                sub.status = "failed";
                eprintln!(
                    "spate run: workload \"{}\" failed: {}",
                    sub.name,
                    err.clone().unwrap_or_default()
                );
                sub.error = err;
            } else {
                sub.thresholds = judge(&ws[i].thresholds, &sub.dir, &ws[i].inv.command);
            }
        }
        let failed: Vec<&str> = subs
            .iter()
            .filter(|s| s.exit != 0)
            .map(|s| s.name.as_str())
            .collect();
        let worst = subs.iter().map(|s| s.exit).max().unwrap_or(0);
        let msg = format!("workload(s) {} failed", failed.join(", "));
        rec.workloads = subs;
        if worst == 0 {
            Ok(())
        } else {
            Err((worst, msg))
        }
    }

    /// Stops background hooks (SIGTERM to their process group, then SIGKILL).
    pub async fn stop_background(&mut self, records: &mut [StepRecord]) {
        for (name, mut child, index) in self.background.drain(..) {
            let early = child.try_wait().ok().flatten();
            if early.is_none() {
                stop_group(&mut child).await;
            }
            if let Some(status) = early.filter(|s| !s.success()) {
                let r = &mut records[index];
                r.status = "failed";
                r.exit = 1;
                r.error = Some(format!("background hook \"{name}\" exited early: {status}"));
                eprintln!("spate run: background hook \"{name}\" exited early: {status}");
            }
        }
    }
}

/// (its text, the reason) when a threshold that ends in abort stopped the run in `dir`.
fn stopped_by_threshold(dir: &Path) -> Option<(String, String)> {
    let text = std::fs::read_to_string(dir.join("thresholds.json")).ok()?;
    let doc: serde_json::Value = serde_json::from_str(&text).ok()?;
    let a = doc.get("aborted").filter(|a| a.is_object())?;
    let threshold = a["threshold"].as_str().unwrap_or("?").to_string();
    let why = format!(
        "stopped by threshold '{threshold}' at {} s ({})",
        a["at_s"],
        a["message"].as_str().unwrap_or("")
    );
    Some((threshold, why))
}

fn judge(checks: &[Check], dir: &Path, command: &str) -> Vec<Verdict> {
    let aborted = stopped_by_threshold(dir);
    checks
        .iter()
        .map(|c| {
            let mut v = c.evaluate(dir, &c.path, command);
            // The one that stopped the run failed, whatever its last in-flight units did.
            if let Some((_, why)) = aborted.as_ref().filter(|(t, _)| *t == c.text) {
                v.pass = false;
                v.message = why.clone();
            }
            report(&v);
            v
        })
        .collect()
}

pub fn report(v: &Verdict) {
    if v.pass {
        println!("threshold ok: {}", v.message);
    } else {
        eprintln!("threshold failed: {}", v.message);
    }
}

/// A step's command line, with its results directory (replacing an earlier run's when
/// the scenario was told to overwrite) and the live values expanded.
fn argv(inv: &Invocation, dir: &Path, live: &Live, overwrite: bool) -> Result<Vec<String>, String> {
    let mut v = inv.argv(Some(dir));
    if overwrite && inv.wants_out {
        // Before a `--` (sweep's trailing smtp words), or it would belong to them.
        let at = v.iter().position(|w| w == "--").unwrap_or(v.len());
        v.insert(at, "--overwrite".into());
    }
    v.iter().map(|w| expand(w, live)).collect()
}

fn spawn_hook(cmd: &str, live: &Live) -> Result<std::process::Child, String> {
    use std::os::unix::process::CommandExt;
    let mut c = std::process::Command::new("sh");
    c.arg("-c").arg(cmd).stdin(std::process::Stdio::null());
    // Its own process group, so a timeout or the end of the scenario stops all of it.
    c.process_group(0);
    // So a hook can run this very spate ("$SPATE" ping ...) without it on PATH.
    if let Ok(exe) = std::env::current_exe() {
        c.env("SPATE", exe);
    }
    for (k, v) in live {
        let name = format!("SPATE_{}", k.replace('.', "_").to_uppercase());
        c.env(name, v);
    }
    c.spawn().map_err(|e| format!("cannot start sh: {e}"))
}

async fn hook_wait(
    mut child: std::process::Child,
    timeout: Duration,
    interrupted: &AtomicBool,
) -> Result<(), (u8, String)> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(s)) if s.success() => return Ok(()),
            Ok(Some(s)) => return Err((1, format!("hook {s}"))),
            Ok(None) => {}
            Err(e) => return Err((1, format!("hook: {e}"))),
        }
        if Instant::now() >= deadline || interrupted.load(Ordering::Relaxed) {
            stop_group(&mut child).await;
            return Err((
                1,
                format!("hook stopped after {}", crate::units::fmt_duration(timeout)),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn stop_group(child: &mut std::process::Child) {
    let pgid = child.id() as libc::pid_t;
    // SAFETY: kill(2) with a negative pid signals the process group we created.
    unsafe { libc::kill(-pgid, libc::SIGTERM) };
    for _ in 0..250 {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let _ = child.wait();
}

/// Messages in a Postfix queue: incoming, active, deferred and maildrop (hold is
/// excluded: held mail never drains), each counted once while it moves between them. A
/// directory without those is counted whole.
pub fn queue_files(dir: &Path) -> Result<u64, String> {
    if !dir.is_dir() {
        return Err(format!("{}: not a directory", dir.display()));
    }
    let subs: Vec<PathBuf> = ["incoming", "active", "deferred", "maildrop"]
        .iter()
        .map(|s| dir.join(s))
        .filter(|p| p.is_dir())
        .collect();
    let roots = if subs.is_empty() {
        vec![dir.to_path_buf()]
    } else {
        subs
    };
    crate::monitor::queue::distinct_files(&roots).map_err(|e| format!("{}: {e}", dir.display()))
}

/// What is left in each queue of a Postfix queue directory (hold included), for a drain
/// that ran past its deadline.
fn still_queued(dir: &Path) -> serde_json::Map<String, serde_json::Value> {
    ["maildrop", "incoming", "active", "deferred", "hold"]
        .iter()
        .filter(|s| dir.join(s).is_dir())
        .map(|s| {
            let n = queue_files(&dir.join(s)).unwrap_or(0);
            (s.to_string(), json!(n))
        })
        .collect()
}

async fn wait(
    pause: Option<Duration>,
    until_empty: Option<&Path>,
    timeout: Duration,
    poll: Duration,
    interrupted: &AtomicBool,
) -> Result<serde_json::Value, (String, Option<serde_json::Value>)> {
    let t0 = Instant::now();
    if let Some(p) = pause {
        let end = t0 + p;
        while Instant::now() < end && !interrupted.load(Ordering::Relaxed) {
            tokio::time::sleep((end - Instant::now()).min(Duration::from_millis(100))).await;
        }
    }
    let Some(q) = until_empty else {
        return Ok(json!({"waited_s": t0.elapsed().as_secs_f64()}));
    };
    let d0 = Instant::now();
    let initial = queue_files(q).map_err(|e| (e, None))?;
    let mut polls = 0u64;
    let mut peak = initial;
    loop {
        let n = queue_files(q).map_err(|e| (e, None))?;
        polls += 1;
        peak = peak.max(n);
        if n == 0 {
            break;
        }
        if d0.elapsed() >= timeout {
            let left = still_queued(q);
            let by_queue = left
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ");
            let v = json!({
                "queue_dir": q.display().to_string(),
                "timed_out": true,
                "initial_files": initial,
                "peak_files": peak,
                "remaining_files": n,
                "remaining": left,
                "polls": polls,
                "waited_s": t0.elapsed().as_secs_f64(),
            });
            let msg = format!(
                "{} still holds {n} files after {} ({by_queue})",
                q.display(),
                crate::units::fmt_duration(timeout)
            );
            return Err((msg, Some(v)));
        }
        if interrupted.load(Ordering::Relaxed) {
            return Err(("interrupted".into(), None));
        }
        tokio::time::sleep(poll).await;
    }
    Ok(json!({
        "queue_dir": q.display().to_string(),
        "initial_files": initial,
        "peak_files": peak,
        "polls": polls,
        "drain_s": d0.elapsed().as_secs_f64(),
        "waited_s": t0.elapsed().as_secs_f64(),
    }))
}
