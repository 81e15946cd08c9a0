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
mod execute;
mod matrix;
pub mod options;
pub mod run;
pub mod spec;
mod table;
pub mod threshold;
pub mod vars;

pub use execute::execute;
pub use matrix::run_matrix;
pub use spec::{load, Scenario};

use crate::UsageError;
use doc::Source;
use spec::StepKind;

/// Reads and validates a scenario file.
pub fn load_file(
    path: &std::path::Path,
    set: &[String],
    commands: &clap::Command,
) -> anyhow::Result<Scenario> {
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
    Ok(load(src, &overrides, commands)?)
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

pub fn dry_run(sc: &Scenario, file: &std::path::Path, out: &std::path::Path) {
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
