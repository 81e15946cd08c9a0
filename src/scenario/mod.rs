//! `spate run SCENARIO.toml`: steps in sequence (commands, shell hooks, waits for a queue
//! to drain, parallel mixed workloads), an optional embedded server, thresholds that make
//! the run fail, and `--dump-scenario` to turn any command line into a scenario.
//!
//! The format (scenarios/README.md has examples):
//! - `[[step]]` with `command = "smtp"` (any subcommand): every other key is a long option
//!   of that command (`users = 50`, `starttls = true`, `rate = "200/s"`, a list for a
//!   repeatable option, the positional by its name: `target = "127.0.0.1:25"`). Special
//!   keys: `name`, `use` (named option sets), `thresholds`. The runner adds
//!   `--out <out>/<NN>-<name>` to commands that have `--out`.
//! - `[[step]]` with `run = "shell command"` (`timeout`, `background = true`): a hook.
//! - `[[step]]` with `wait = "5s"` and/or `until_empty = "/var/spool/postfix"` (`timeout`,
//!   `poll`): a pause, or a wait until a Postfix queue (incoming, active, deferred,
//!   maildrop) is empty; writes wait.json with `drain_s`.
//! - `[[step]]` with `[[step.workload]]` tables: commands run at once; the step's `rate`,
//!   `users` and `count` are split between them by `weight`.
//! - `[server]`: the embedded server (options of `spate serve`), started first, stopped
//!   last; its addresses are `${server.smtp}`, `${server.imap}`, ..., its CA `${server.ca}`.
//! - `[targets.X]`, `[pools.X]`, `[templates.X]`: option sets a step takes with
//!   `use = ["X", ...]`; `[defaults.smtp]`: options for every smtp step.
//! - `[vars]` with `${name}` anywhere in strings (`spate run --set name=value` overrides),
//!   `${env:NAME}` / `${env:NAME:-default}`, `${dir}` (the file's directory), `${out}`,
//!   `${step.NAME}` (that step's results directory).
//! - `thresholds = [...]` per step, or at the top level prefixed with a step name.
//!   `abort_on_fail = true` stops at the first failed threshold.
//! - `[matrix]`: variables with lists of values; the whole scenario runs per combination.

pub mod doc;
pub mod dump;
pub mod options;
pub mod run;
pub mod spec;
mod table;
pub mod threshold;
pub mod vars;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

pub use spec::{load, Scenario};

use crate::UsageError;
use doc::Source;
use run::{Runner, StepRecord};
use spec::StepKind;

#[derive(Debug, clap::Args)]
#[command(after_long_help = "FORMAT (in short):\n  \
    [server]                 options of `spate serve`; addresses ${server.smtp}, ${server.ca}, ...\n  \
    [vars]                   name = \"value\", ${name}; ${env:X:-default} ${out} ${step.NAME}\n  \
    [targets.X] [pools.X] [templates.X]   option sets a step takes with use = [\"X\", ...]\n  \
    [defaults.smtp]          options for every smtp step\n  \
    [[step]] command = \"smtp\"   + its long options as keys: users = 50, starttls = true\n  \
    [[step]] run = \"sh cmd\"     hook (timeout, background = true)\n  \
    [[step]] wait = \"5s\" / until_empty = \"/var/spool/postfix\"   pause / queue drain\n  \
    [[step]] + [[step.workload]] command = ..., weight = 2   run at once; rate/users/count split\n  \
    [matrix] procs = [1, 2, 4]   the whole scenario once per value, ${procs}\n  \
    thresholds = [\"p99(transaction) < 500ms\", \"errors.rate < 0.1%\", \"verify.missing == 0\"]\n\n\
EXAMPLES:\n  \
    spate run scenarios/inject-embedded.toml\n  \
    spate run e1.toml --set smtp=127.0.0.1:25 --out results/e1\n  \
    spate run e1.toml --dry-run\n  \
    spate smtp 127.0.0.1:2525 --users 5 --count 100 --dump-scenario > s.toml\n\n\
Exit status: 0 every step succeeded and every threshold held; 1 a step failed or a \
threshold was broken; 2 the scenario is invalid (file:line:col: what was expected).\n\
Format reference: scenarios/README.md.")]
pub struct RunArgs {
    /// The scenario file (TOML).
    pub file: PathBuf,
    /// Override a variable of [vars], NAME=VALUE (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    pub set: Vec<String>,
    /// Results directory of the whole scenario; each step writes <OUT>/<NN>-<name>
    /// (default: ./spate-results/<timestamp>-<file name>).
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// Check the scenario and print each step's command line; run nothing.
    #[arg(long)]
    pub dry_run: bool,
}

tokio::task_local! {
    static COMMAND_LINE: Vec<String>;
}

/// The command line of the running command, for plan.json and summary.json: a scenario
/// step's own argv under `spate run`, else the process's.
pub fn command_line() -> Vec<String> {
    COMMAND_LINE
        .try_with(Clone::clone)
        .unwrap_or_else(|_| std::env::args().collect())
}

/// Runs `f` with `argv` as what [`command_line`] returns.
pub async fn with_command_line<F: std::future::Future>(argv: Vec<String>, f: F) -> F::Output {
    COMMAND_LINE.scope(argv, f).await
}

/// Reads and validates a scenario file.
pub fn load_file(path: &std::path::Path, set: &[String]) -> anyhow::Result<Scenario> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    let mut overrides = Vec::new();
    for s in set {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| UsageError(format!("--set {s}: expected NAME=VALUE")))?;
        overrides.push((k.trim().to_string(), v.to_string()));
    }
    let src = Source {
        name: path.display().to_string(),
        text,
    };
    Ok(load(src, &overrides)?)
}

/// Quotes a word for display when the shell would split or expand it.
pub fn shell_word(w: &str) -> String {
    let plain = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_@%+=:,./-".contains(c));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

/// One line per step (and workload): what `--dry-run` prints.
pub fn plan_lines(sc: &Scenario, out: &std::path::Path) -> Vec<(String, Vec<String>)> {
    let mut lines = Vec::new();
    if let Some(s) = &sc.server {
        lines.push(("server".to_string(), s.argv(None)));
    }
    for (i, step) in sc.steps.iter().enumerate() {
        let id = format!("{:02}-{}", i + 1, step.name);
        let dir = out.join(&id);
        match &step.kind {
            StepKind::Command(inv) => lines.push((id, inv.argv(Some(&dir)))),
            StepKind::Parallel(ws) => {
                for w in ws {
                    lines.push((
                        format!("{id}/{}", w.name),
                        w.inv.argv(Some(&dir.join(&w.name))),
                    ));
                }
            }
            StepKind::Hook {
                run, background, ..
            } => {
                let bg = if *background { " (background)" } else { "" };
                lines.push((
                    format!("{id}{bg}"),
                    vec!["sh".into(), "-c".into(), run.clone()],
                ));
            }
            StepKind::Wait {
                pause,
                until_empty,
                timeout,
                ..
            } => {
                let mut v = vec!["wait".to_string()];
                if let Some(p) = pause {
                    v.push(crate::units::fmt_duration(*p));
                }
                if let Some(q) = until_empty {
                    v.push(format!(
                        "until {} is empty (at most {})",
                        q.display(),
                        crate::units::fmt_duration(*timeout)
                    ));
                }
                lines.push((id, v));
            }
        }
    }
    lines
}

/// `spate run`.
pub async fn main(args: RunArgs) -> anyhow::Result<ExitCode> {
    let sc = load_file(&args.file, &args.set)?;
    let out = args.out.clone().unwrap_or_else(|| {
        let stem = args
            .file
            .file_stem()
            .map_or("scenario".into(), |s| s.to_string_lossy().to_string());
        crate::load::default_out(&stem)
    });
    if sc.matrix.is_empty() {
        if args.dry_run {
            dry_run(&sc, &args.file, &out);
            return Ok(ExitCode::SUCCESS);
        }
        return execute(&sc, out).await;
    }
    // [matrix]: one full run per combination, each in <out>/<name=value,...>.
    let mut combos: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for (k, values) in &sc.matrix {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((k.clone(), v.clone()));
                    c
                })
            })
            .collect();
    }
    let mut results = Vec::new();
    let mut worst = 0u8;
    for combo in combos {
        let name: String = combo
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
            .replace(['/', ' '], "_");
        let mut set = args.set.clone();
        set.extend(combo.iter().map(|(k, v)| format!("{k}={v}")));
        let one = load_file(&args.file, &set)?;
        let dir = out.join(&name);
        if args.dry_run {
            println!("== {name}");
            dry_run(&one, &args.file, &dir);
            continue;
        }
        println!("spate run: matrix {name}");
        let code = match execute(&one, dir.clone()).await {
            Ok(c) if c == ExitCode::SUCCESS => 0,
            Ok(_) => 1,
            Err(e) => {
                let (code, line) = crate::error_report(&e);
                eprintln!("spate run: matrix {name}: {line}");
                code
            }
        };
        worst = worst.max(code);
        let vars: serde_json::Map<String, serde_json::Value> =
            combo.into_iter().map(|(k, v)| (k, v.into())).collect();
        results.push(json!({"name": name, "vars": vars, "dir": dir, "exit": code}));
    }
    if !args.dry_run {
        std::fs::create_dir_all(&out)?;
        let doc = json!({"file": sc.source.name, "runs": results, "exit": worst});
        std::fs::write(out.join("matrix.json"), format!("{doc:#}\n"))?;
        println!("\nmatrix {}:", sc.source.name);
        let mut header: Vec<String> = sc.matrix.iter().map(|(k, _)| k.clone()).collect();
        header.extend(sc.report.iter().map(|c| c.title.clone()));
        header.push("exit".into());
        let rows: Vec<Vec<String>> = results
            .iter()
            .map(|r| {
                let mut row: Vec<String> = sc
                    .matrix
                    .iter()
                    .map(|(k, _)| r["vars"][k].as_str().unwrap_or("").to_string())
                    .collect();
                let done: serde_json::Value = r["dir"]
                    .as_str()
                    .and_then(|d| std::fs::read_to_string(Path::new(d).join("scenario.json")).ok())
                    .and_then(|t| serde_json::from_str(&t).ok())
                    .unwrap_or_default();
                for (i, _) in sc.report.iter().enumerate() {
                    row.push(table::show(done["report"][i]["value"].as_f64()));
                }
                row.push(r["exit"].to_string());
                row
            })
            .collect();
        table::print_and_write(&header, &rows, Some(&out.join("matrix.csv")))?;
    }
    Ok(ExitCode::from(worst))
}

fn dry_run(sc: &Scenario, file: &std::path::Path, out: &std::path::Path) {
    println!(
        "{}: valid, {} step(s); results would go to {}",
        file.display(),
        sc.steps.len(),
        out.display()
    );
    for (id, argv) in plan_lines(sc, out) {
        let words: Vec<String> = argv.iter().map(|w| shell_word(w)).collect();
        println!("{id}: {}", words.join(" "));
    }
    for g in &sc.thresholds {
        println!("threshold: {}", g.check.text);
    }
}

/// Runs a validated scenario into `out`.
pub async fn execute(sc: &Scenario, out: PathBuf) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&out)
        .map_err(|e| UsageError(format!("cannot create {}: {e}", out.display())))?;
    std::fs::write(out.join("scenario.toml"), &sc.source.text)?;
    let started_at = chrono::Local::now().to_rfc3339();
    let t0 = Instant::now();
    let mut live = run::Live::new();
    live.insert("out".into(), out.display().to_string());
    let server = match &sc.server {
        Some(inv) => {
            let argv: Vec<String> = inv
                .argv(None)
                .iter()
                .map(|w| run::expand(w, &live))
                .collect::<Result<_, _>>()
                .map_err(UsageError)?;
            let cli = <crate::cli::Cli as clap::Parser>::try_parse_from(&argv)
                .map_err(|e| UsageError(format!("[server]: {}", doc::clap_line(&e))))?;
            let crate::cli::Command::Serve(sargs) = cli.command else {
                return Err(UsageError("[server]: not serve options".into()).into());
            };
            let running = crate::serve::start(sargs.config()?).await?;
            for kind in crate::serve::Listener::ALL {
                if let Some(a) = running.addrs.get(kind) {
                    live.insert(format!("server.{}", kind.name()), a.to_string());
                    println!("spate run: embedded server {:<10} {a}", kind.name());
                }
            }
            let ca = out.join("server-ca.pem");
            std::fs::write(&ca, &running.cert_pem)?;
            live.insert("server.ca".into(), ca.display().to_string());
            Some(running)
        }
        None => None,
    };
    let interrupted = Arc::new(AtomicBool::new(false));
    let watcher = {
        let flag = interrupted.clone();
        // Commands in steps stop themselves on these signals; the runner then skips the
        // rest. Once a handler is installed the default action is gone for the process,
        // so SIGTERM must be watched here too or a later hook or wait would ignore it.
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let mut term = signal(SignalKind::terminate()).ok();
            let term = async {
                match &mut term {
                    Some(t) => {
                        t.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term => {}
            }
            flag.store(true, Ordering::Relaxed);
        })
    };
    let mut runner = Runner {
        out: out.clone(),
        live,
        background: Vec::new(),
        interrupted: interrupted.clone(),
    };
    let mut records: Vec<StepRecord> = Vec::new();
    let mut stop: Option<String> = None;
    for (i, step) in sc.steps.iter().enumerate() {
        if let Some(why) = &stop {
            records.push(StepRecord {
                name: step.name.clone(),
                status: "skipped",
                error: Some(why.clone()),
                ..Default::default()
            });
            continue;
        }
        println!(
            "spate run: step {}/{} \"{}\"",
            i + 1,
            sc.steps.len(),
            step.name
        );
        let rec = runner.step(i, step).await;
        let broken = rec.thresholds.iter().any(|v| !v.pass)
            || rec
                .workloads
                .iter()
                .any(|w| w.thresholds.iter().any(|v| !v.pass));
        if rec.status == "failed" {
            stop = Some(format!("step \"{}\" failed", step.name));
        } else if broken && sc.abort_on_fail {
            stop = Some(format!(
                "a threshold of step \"{}\" failed (abort_on_fail)",
                step.name
            ));
        } else if interrupted.load(Ordering::Relaxed) {
            stop = Some("interrupted".into());
        }
        records.push(rec);
        // Kept current after every step, so a run killed hard still tells what it did.
        let partial = json!({
            "schema_version": 1,
            "file": sc.source.name,
            "started_at": started_at,
            "complete": false,
            "steps": records,
        });
        let _ = std::fs::write(out.join("scenario.json"), format!("{partial:#}\n"));
    }
    runner.stop_background(&mut records).await;
    watcher.abort();
    if let Some(s) = server {
        s.shutdown().await;
    }
    // The results directory and command a scenario-wide metric reads.
    let dir_of = |g: &spec::Global| -> Option<(std::path::PathBuf, String)> {
        let rec = &records[g.step];
        if rec.status == "skipped" {
            return None;
        }
        match (g.workload, &sc.steps[g.step].kind) {
            (Some(w), StepKind::Parallel(ws)) => rec
                .workloads
                .get(w)
                .map(|r| (r.dir.clone(), ws[w].inv.command.clone())),
            (_, StepKind::Command(inv)) => Some((rec.dir.clone(), inv.command.clone())),
            _ => Some((rec.dir.clone(), rec.kind.to_string())),
        }
    };
    let globals: Vec<threshold::Verdict> = sc
        .thresholds
        .iter()
        .map(|g| {
            let v = match dir_of(g) {
                Some((d, cmd)) => g.check.evaluate(&d, &g.rest, &cmd),
                _ => threshold::Verdict {
                    threshold: g.check.text.clone(),
                    value: None,
                    shown: String::new(),
                    pass: false,
                    message: format!("{}: the step did not run", g.check.metric()),
                },
            };
            run::report(&v);
            v
        })
        .collect();
    let report: Vec<(String, Option<f64>)> = sc
        .report
        .iter()
        .map(|c| (c.title.clone(), c.value(&dir_of)))
        .collect();
    let worst_step = records.iter().map(|r| r.exit).max().unwrap_or(0);
    let failed_step = records
        .iter()
        .any(|r| r.status == "failed" || r.status == "skipped");
    let failed_threshold = globals.iter().any(|v| !v.pass)
        || records.iter().any(|r| {
            r.thresholds.iter().any(|v| !v.pass)
                || r.workloads
                    .iter()
                    .any(|w| w.thresholds.iter().any(|v| !v.pass))
        });
    let exit: u8 = if worst_step == 2 {
        2
    } else if failed_step || failed_threshold || interrupted.load(Ordering::Relaxed) {
        1
    } else {
        0
    };
    let doc = json!({
        "schema_version": 1,
        "spate_version": env!("CARGO_PKG_VERSION"),
        "file": sc.source.name,
        "started_at": started_at,
        "ended_at": chrono::Local::now().to_rfc3339(),
        "elapsed_s": t0.elapsed().as_secs_f64(),
        "complete": true,
        "exit": exit,
        "passed": exit == 0,
        "steps": records,
        "thresholds": globals,
        "report": report.iter().map(|(t, v)| json!({"title": t, "value": v})).collect::<Vec<_>>(),
    });
    std::fs::write(out.join("scenario.json"), format!("{doc:#}\n"))?;
    println!("\nscenario {}:", sc.source.name);
    for (i, r) in records.iter().enumerate() {
        let all: Vec<&threshold::Verdict> = r
            .thresholds
            .iter()
            .chain(r.workloads.iter().flat_map(|w| w.thresholds.iter()))
            .collect();
        let th = if all.is_empty() {
            String::new()
        } else {
            format!(
                "  thresholds {}/{} held",
                all.iter().filter(|v| v.pass).count(),
                all.len()
            )
        };
        println!(
            "  {:02} {:<20} {:<10} {:>8.1}s{th}",
            i + 1,
            r.name,
            r.status,
            r.elapsed_s
        );
        for w in &r.workloads {
            println!("     {:<20} {:<10} {:>8.1}s", w.name, w.status, w.elapsed_s);
        }
    }
    if !globals.is_empty() {
        println!(
            "  scenario thresholds {}/{} held",
            globals.iter().filter(|v| v.pass).count(),
            globals.len()
        );
    }
    if !report.is_empty() {
        println!("  report:");
        let header: Vec<String> = report.iter().map(|(t, _)| t.clone()).collect();
        let row: Vec<String> = report.iter().map(|(_, v)| table::show(*v)).collect();
        table::print_and_write(&header, &[row], Some(&out.join("report.csv")))?;
    }
    println!("results: {}", out.display());
    Ok(ExitCode::from(exit))
}
