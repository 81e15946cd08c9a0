//! `--threshold` and `--junit` on the load commands: pass/fail rules checked on a run's
//! results when it ends (thresholds.json, the exit status, JUnit XML), and those that end
//! in `abort` watched every interval while it goes, stopping the run the first time one
//! fails, as SIGTERM would: everything written, the summary saying which and when.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::engine::{Observer, Snapshot};
use crate::opts::OutputArgs;
use crate::results::Summary;
use crate::scenario::threshold::{Check, Source, Verdict};
use crate::UsageError;

/// What `interrupted_by` says when a threshold stopped the run.
pub const STOPPED_BY: &str = "threshold";

/// The `--threshold` rules, parsed and checked before anything runs (exit 2 when bad).
pub fn checks(output: &OutputArgs, command: &str) -> Result<Vec<Check>, UsageError> {
    output
        .thresholds
        .iter()
        .map(|t| {
            let c = Check::parse(t).map_err(UsageError)?;
            // `smtp.messages_per_s`: the command's name may come first.
            c.check_static(&c.path)
                .or_else(|e| match c.after_command(command) {
                    rest if rest.len() < c.path.len() => c.check_static(rest),
                    _ => Err(e),
                })
                .map_err(UsageError)?;
            if c.abort.is_some() {
                c.watchable(command).map_err(UsageError)?;
            }
            Ok(c)
        })
        .collect()
}

/// Follows the run and stops it the first time a threshold that ends in `abort` fails on
/// the figures so far (once its grace has passed, and once its figure exists).
pub struct Watch {
    checks: Vec<Check>,
    command: String,
    stop: Arc<AtomicBool>,
    fired: Option<Value>,
}

impl Watch {
    /// None when no threshold asks to abort.
    pub fn new(checks: Vec<Check>, command: &str, stop: &Arc<AtomicBool>) -> Option<Watch> {
        let checks: Vec<Check> = checks.into_iter().filter(|c| c.abort.is_some()).collect();
        (!checks.is_empty()).then(|| Watch {
            checks,
            command: command.to_string(),
            stop: stop.clone(),
            fired: None,
        })
    }
}

impl Observer for Watch {
    fn interval(&mut self, snap: &Snapshot<'_>) -> anyhow::Result<()> {
        if self.fired.is_some() {
            return Ok(());
        }
        let due: Vec<&Check> = self
            .checks
            .iter()
            .filter(|c| c.abort.is_some_and(|g| snap.t_s >= g.as_secs_f64()))
            .collect();
        if due.is_empty() {
            return Ok(());
        }
        let summary = serde_json::to_value(snap.summary)?;
        for c in due {
            let v = c.judge(Source::Summary(&summary), &c.path, &self.command);
            // A figure not measured yet (no unit finished) is not a failure yet.
            if v.pass || v.value.is_none() {
                continue;
            }
            let at_s = (snap.t_s * 10.0).round() / 10.0;
            eprintln!(
                "\nspate: threshold '{}' failed at {at_s} s ({}): stopping the run",
                c.text, v.message
            );
            self.fired = Some(json!({
                "threshold": c.text,
                "at_s": at_s,
                "value": v.value,
                "message": v.message,
            }));
            self.stop.store(true, Ordering::Relaxed);
            break;
        }
        Ok(())
    }

    fn finish(&mut self, summary: &mut Summary) {
        let Some(fired) = self.fired.take() else {
            return;
        };
        summary.interrupted = true;
        if summary.interrupted_by.is_none() {
            summary.interrupted_by = Some(STOPPED_BY.into());
        }
        summary.warnings.push(format!(
            "stopped early by threshold '{}' at {} s: {}",
            fired["threshold"].as_str().unwrap_or(""),
            fired["at_s"],
            fired["message"].as_str().unwrap_or("")
        ));
        summary.extra.insert("aborted".into(), fired);
    }
}

/// A check before the run that failed (the server cannot be reached): with --junit, the
/// file still says so, as the run's one failed case, so a CI job shows a red test rather
/// than none at all.
pub fn or_junit<T>(output: &OutputArgs, protocol: &str, r: anyhow::Result<T>) -> anyhow::Result<T> {
    let (Err(e), Some(file)) = (&r, &output.junit) else {
        return r;
    };
    let step = json!({
        "name": protocol,
        "case": format!("spate {protocol}"),
        "status": "failed",
        "error": format!("{e:#}"),
        "elapsed_s": 0.0,
        "dir": "",
        "thresholds": [],
    });
    let doc = json!({
        "elapsed_s": 0.0,
        "started_at": crate::results::rfc3339(std::time::SystemTime::now()),
        "steps": [step],
    });
    let title = format!("spate {protocol}");
    if let Err(w) = crate::scenario::junit::write(file, &title, &[(protocol.to_string(), doc)]) {
        eprintln!("spate: warning: --junit {}: {w}", file.display());
    }
    r
}

/// After the run: every threshold checked on the results directory (verify.json
/// included), printed, written to thresholds.json, and as JUnit XML with --junit; the
/// exit status is 1 when one failed and `code` was 0.
pub fn finish(
    output: &OutputArgs,
    dir: &Path,
    summary: &Summary,
    code: ExitCode,
) -> anyhow::Result<ExitCode> {
    let checks = checks(output, &summary.protocol)?;
    let aborted = summary.extra.get("aborted");
    let verdicts: Vec<Verdict> = checks
        .iter()
        .map(|c| {
            let mut v = c.evaluate(dir, &c.path, &summary.protocol);
            // The one that stopped the run failed, whatever the last in-flight units did.
            if let Some(a) = aborted.filter(|a| a["threshold"] == c.text.as_str()) {
                v.pass = false;
                let then = a["message"].as_str().unwrap_or("");
                v.message = if v.message == then {
                    format!("{then} (it stopped the run at {} s)", a["at_s"])
                } else {
                    format!(
                        "{} (it stopped the run at {} s, at {then})",
                        v.message, a["at_s"]
                    )
                };
            }
            v
        })
        .collect();
    for v in &verdicts {
        crate::scenario::run::report(v);
    }
    if !verdicts.is_empty() {
        let held = verdicts.iter().filter(|v| v.pass).count();
        println!("thresholds {held}/{} held", verdicts.len());
        let doc = json!({"thresholds": verdicts, "aborted": summary.extra.get("aborted")});
        crate::results::write_atomic(
            &dir.join("thresholds.json"),
            format!("{doc:#}\n").as_bytes(),
        )?;
        // The report was written before the thresholds were judged: again, with them.
        if dir.join("report.html").exists() {
            if let Err(e) = crate::report::write_report(dir) {
                eprintln!("spate: warning: no HTML report: {e:#}");
            }
        }
    }
    let broken = verdicts.iter().any(|v| !v.pass);
    let own_failure = code != ExitCode::SUCCESS;
    let code = if broken && code == ExitCode::SUCCESS {
        ExitCode::from(super::THRESHOLDS_FAILED)
    } else {
        code
    };
    if let Some(file) = &output.junit {
        let step = json!({
            "name": summary.protocol,
            // A name that is the same from run to run, so a CI server keeps its history;
            // the run id goes with the suite's properties.
            "case": format!("spate {}", summary.protocol),
            "run_id": summary.run_id,
            "status": if own_failure { "failed" } else { "ok" },
            "error": own_failure.then(|| match &summary.interrupted_by {
                Some(by) => format!("the run was interrupted ({by})"),
                None => "the run failed its own rule (nothing accepted, most units failed, or a delivery check failed): see its output".to_string(),
            }),
            "elapsed_s": summary.elapsed_s,
            "dir": dir.display().to_string(),
            "thresholds": verdicts,
        });
        let doc = json!({
            "elapsed_s": summary.elapsed_s,
            "started_at": summary.started_at,
            "steps": [step],
            "properties": {
                "run_id": summary.run_id,
                "target": summary.target,
                "results": dir.display().to_string(),
            },
        });
        let title = format!("spate {}", summary.protocol);
        crate::scenario::junit::write(file, &title, &[(summary.protocol.clone(), doc)])
            .map_err(|e| anyhow::anyhow!("--junit {}: {e}", file.display()))?;
        println!("junit: {}", file.display());
    }
    Ok(code)
}
