//! What a validated scenario is made of: steps (commands, hooks, waits, parallel
//! workloads), the command lines they run, and scenario-wide thresholds.

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use super::doc::{suggest, Source};
use super::threshold::Check;
use crate::UsageError;

#[derive(Debug, Clone)]
pub struct Step {
    pub name: String,
    pub kind: StepKind,
    pub thresholds: Vec<Check>,
}

#[derive(Debug, Clone)]
pub enum StepKind {
    Command(Invocation),
    Hook {
        run: String,
        timeout: Duration,
        background: bool,
    },
    Wait {
        pause: Option<Duration>,
        until_empty: Option<PathBuf>,
        timeout: Duration,
        poll: Duration,
    },
    Parallel(Vec<Workload>),
}

#[derive(Debug, Clone)]
pub struct Workload {
    pub name: String,
    pub inv: Invocation,
    pub thresholds: Vec<Check>,
}

/// A subcommand and its arguments (without `spate` and the subcommand's name).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Invocation {
    pub command: String,
    pub args: Vec<String>,
    /// The command has `--out` and the scenario did not set it: the runner does.
    pub wants_out: bool,
    /// `shards = N`: run as N shards started together, merged into the step's directory.
    pub shards: Option<u32>,
}

impl Invocation {
    pub fn argv(&self, out: Option<&std::path::Path>) -> Vec<String> {
        let mut v = vec!["spate".to_string(), self.command.clone()];
        v.extend(self.args.iter().cloned());
        if let (true, Some(o)) = (self.wants_out, out) {
            // Before a `--` (sweep's trailing smtp words), or it would belong to them.
            let at = v.iter().position(|w| w == "--").unwrap_or(v.len());
            v.splice(at..at, ["--out".to_string(), o.display().to_string()]);
        }
        v
    }
}

/// A scenario-wide threshold: which step (and workload) it reads, and the rest of the path.
#[derive(Debug, Clone)]
pub struct Global {
    pub check: Check,
    pub step: usize,
    pub workload: Option<usize>,
    pub rest: Vec<String>,
}

/// Resolves a scenario-wide threshold's leading segment(s) to a step (and workload).
pub fn global(
    src: &Source,
    steps: &[Step],
    text: &str,
    span: &Range<usize>,
) -> Result<Global, UsageError> {
    let check = Check::parse(text).map_err(|e| src.err(span, e))?;
    if check.abort.is_some() {
        return Err(src.err(
            span,
            format!("threshold '{text}': a scenario-wide threshold is checked after its step; put one that ends in abort into the step's own thresholds"),
        ));
    }
    let first = check.path[0].clone();
    let by_name = steps.iter().position(|s| s.name == first);
    let by_command: Vec<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(&s.kind, StepKind::Command(i) if i.command == first))
        .map(|(n, _)| n)
        .collect();
    let step = match (by_name, by_command.as_slice()) {
        (Some(n), _) | (None, &[n]) => n,
        (None, []) => {
            let names = steps.iter().map(|s| s.name.as_str());
            return Err(src.err(
                span,
                format!(
                    "threshold '{text}': a scenario-wide threshold starts with a step name, and no step is named \"{first}\"{}",
                    suggest(&first, names)
                ),
            ));
        }
        (None, _) => {
            return Err(src.err(
                span,
                format!("threshold '{text}': several steps run {first}; name the step instead"),
            ))
        }
    };
    let mut rest = check.path[1..].to_vec();
    let mut workload = None;
    if let StepKind::Parallel(ws) = &steps[step].kind {
        let names: Vec<&str> = ws.iter().map(|w| w.name.as_str()).collect();
        let w = rest.first().and_then(|r| names.iter().position(|n| n == r));
        match w {
            Some(w) => {
                workload = Some(w);
                rest.remove(0);
            }
            None => {
                return Err(src.err(
                    span,
                    format!(
                        "threshold '{text}': step \"{first}\" runs workloads {}; name one after the step (e.g. {first}.{}.…)",
                        names.join(", "),
                        names[0]
                    ),
                ))
            }
        }
    }
    check.check_static(&rest).map_err(|e| src.err(span, e))?;
    Ok(Global {
        check,
        step,
        workload,
        rest,
    })
}
