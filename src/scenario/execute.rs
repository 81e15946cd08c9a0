//! Running one validated scenario: the embedded server, the steps in order, the
//! scenario-wide thresholds and report columns, scenario.json and the closing table.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde_json::json;

use super::model::{Global, StepKind};
use super::run::{self, Execution, StepRecord};
use super::spec::Scenario;
use super::{doc, table, threshold};
use crate::ctx::Ctx;
use crate::UsageError;

/// Runs a validated scenario into `out`; with `overwrite`, steps replace earlier runs
/// in their directories.
pub async fn execute(
    sc: &Scenario,
    out: PathBuf,
    overwrite: bool,
    ctx: &Ctx,
) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&out)
        .map_err(|e| UsageError(format!("cannot create {}: {e}", out.display())))?;
    std::fs::write(out.join("scenario.toml"), &sc.source.text)?;
    let started_at = chrono::Local::now().to_rfc3339();
    let t0 = Instant::now();
    let mut live = run::Live::new();
    live.insert("out".into(), out.display().to_string());
    let server = start_server(sc, &out, &mut live).await?;
    let interrupted = Arc::new(AtomicBool::new(false));
    let signal = Arc::new(std::sync::atomic::AtomicU8::new(0));
    let watcher = watch_signals(interrupted.clone(), signal.clone());
    let mut exec = Execution {
        ctx: ctx.clone(),
        out: out.clone(),
        overwrite,
        live,
        background: Vec::new(),
        interrupted: interrupted.clone(),
    };
    let mut records = run_steps(sc, &mut exec, &out, &started_at).await;
    exec.stop_background(&mut records).await;
    watcher.abort();
    if let Some(s) = server {
        s.shutdown().await;
    }
    let dir_of = |g: &Global| step_dir(sc, &records, g);
    let globals: Vec<threshold::Verdict> = sc
        .thresholds
        .iter()
        .map(|g| {
            let v = global_verdict(g, dir_of(g));
            run::report(&v);
            v
        })
        .collect();
    let report: Vec<(String, Option<f64>)> = sc
        .report
        .iter()
        .map(|c| (c.title.clone(), c.value(&dir_of)))
        .collect();
    let exit = exit_code(&records, &globals, signal.load(Ordering::Relaxed));
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
    // The scenario's own page: passed or not and why, its steps linked to their reports.
    if let Err(e) = crate::report::write_report(&out) {
        eprintln!("spate run: warning: no scenario report page: {e:#}");
    }
    print_summary(sc, &records, &globals, &report, &out)?;
    println!("results: {}", out.display());
    Ok(ExitCode::from(exit))
}

/// The embedded server of `[server]`, its addresses and CA made known as `${server.*}`.
async fn start_server(
    sc: &Scenario,
    out: &Path,
    live: &mut run::Live,
) -> anyhow::Result<Option<crate::serve::Running>> {
    let Some(inv) = &sc.server else {
        return Ok(None);
    };
    let argv: Vec<String> = inv
        .argv(None)
        .iter()
        .map(|w| run::expand(w, live))
        .collect::<Result<_, _>>()
        .map_err(UsageError)?;
    #[derive(clap::Parser)]
    enum Serve {
        Serve(crate::serve::Args),
    }
    let Serve::Serve(args) = <Serve as clap::Parser>::try_parse_from(&argv)
        .map_err(|e| UsageError(format!("[server]: {}", doc::clap_line(&e))))?;
    let running = crate::serve::start_apart(args.config()?).await?;
    for kind in crate::serve::Listener::ALL {
        if let Some(a) = running.addrs.get(kind) {
            live.insert(format!("server.{}", kind.name()), a.to_string());
            println!("spate run: embedded server {:<10} {a}", kind.name());
        }
    }
    let ca = out.join("server-ca.pem");
    std::fs::write(&ca, &running.cert_pem)?;
    live.insert("server.ca".into(), ca.display().to_string());
    Ok(Some(running))
}

/// Sets `flag` on Ctrl-C or SIGTERM. Commands in steps stop themselves on these signals;
/// the runner then skips the rest. Once a handler is installed the default action is
/// gone for the process, so SIGTERM must be watched here too or a later hook or wait
/// would ignore it.
fn watch_signals(
    flag: Arc<AtomicBool>,
    code: Arc<std::sync::atomic::AtomicU8>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let sig = crate::engine::Signals::new().recv().await;
        code.store(sig.exit_code(), Ordering::Relaxed);
        flag.store(true, Ordering::Relaxed);
    })
}

/// Runs the steps in order; after a failure, a broken threshold with `abort_on_fail`, or
/// an interruption, the rest are skipped. scenario.json is kept current after each step.
async fn run_steps(
    sc: &Scenario,
    exec: &mut Execution,
    out: &Path,
    started_at: &str,
) -> Vec<StepRecord> {
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
        let rec = exec.step(i, step).await;
        let broken = all_thresholds(&rec).any(|v| !v.pass);
        if rec.status == "failed" {
            stop = Some(format!("step \"{}\" failed", step.name));
        } else if broken && sc.abort_on_fail {
            stop = Some(format!(
                "a threshold of step \"{}\" failed (abort_on_fail)",
                step.name
            ));
        } else if exec.interrupted.load(Ordering::Relaxed) {
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
    records
}

/// A step's thresholds and its workloads'.
fn all_thresholds(r: &StepRecord) -> impl Iterator<Item = &threshold::Verdict> {
    r.thresholds
        .iter()
        .chain(r.workloads.iter().flat_map(|w| w.thresholds.iter()))
}

/// The results directory and command a scenario-wide metric reads.
fn step_dir(sc: &Scenario, records: &[StepRecord], g: &Global) -> Option<(PathBuf, String)> {
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
}

fn global_verdict(g: &Global, dir: Option<(PathBuf, String)>) -> threshold::Verdict {
    match dir {
        Some((d, cmd)) => g.check.evaluate(&d, &g.rest, &cmd),
        None => threshold::Verdict {
            threshold: g.check.text.clone(),
            value: None,
            shown: String::new(),
            pass: false,
            message: format!("{}: the step did not run", g.check.metric()),
        },
    }
}

/// 2 when a step had bad input; 130 or 143 when Ctrl-C or SIGTERM (`signal`, 0 for
/// none) stopped the scenario; 1 when a step failed of itself; 99 when only thresholds
/// failed (the scenario's, a step's, or a step command's own `--threshold`; steps skipped
/// after one are its consequence).
fn exit_code(records: &[StepRecord], globals: &[threshold::Verdict], signal: u8) -> u8 {
    const THRESHOLDS: u8 = crate::THRESHOLDS_FAILED;
    let worst_step = records
        .iter()
        .map(|r| r.exit)
        .filter(|e| *e != THRESHOLDS)
        .max()
        .unwrap_or(0);
    let failed_step = records
        .iter()
        .any(|r| r.status == "failed" && r.exit != THRESHOLDS);
    let failed_threshold = globals.iter().any(|v| !v.pass)
        || records.iter().any(|r| all_thresholds(r).any(|v| !v.pass))
        || records.iter().any(|r| r.exit == THRESHOLDS);
    let skipped = records.iter().any(|r| r.status == "skipped");
    if worst_step == 2 {
        2
    } else if signal != 0 {
        signal
    } else if failed_step {
        1
    } else if failed_threshold {
        THRESHOLDS
    } else if skipped {
        1
    } else {
        0
    }
}

/// The closing table: each step's status and thresholds, the scenario's, its report.
fn print_summary(
    sc: &Scenario,
    records: &[StepRecord],
    globals: &[threshold::Verdict],
    report: &[(String, Option<f64>)],
    out: &Path,
) -> anyhow::Result<()> {
    println!("\nscenario {}:", sc.source.name);
    for (i, r) in records.iter().enumerate() {
        let all: Vec<&threshold::Verdict> = all_thresholds(r).collect();
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
    Ok(())
}
