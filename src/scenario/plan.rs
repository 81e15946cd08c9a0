//! A scenario file read and checked, and what `--dry-run` shows of it.

use super::doc::Source;
use super::model::StepKind;
use super::spec::{load, Scenario};
use crate::UsageError;

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
