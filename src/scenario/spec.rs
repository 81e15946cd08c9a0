//! From the TOML tree to a validated scenario: every step's command line is built here
//! and parsed with the same clap definitions as the command line itself, so each option
//! of each subcommand (including ones added later) has its scenario key for free.

use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use super::doc::{suggest, Entry, Kind, Source};
use super::threshold::Check;
use super::{options, vars};

pub use super::model::{Global, Invocation, Step, StepKind, Workload};
use crate::UsageError;
pub use options::{arg_key, is_flag, is_multiple, subcommand, subcommand_names};

use super::doc::{duration, strings, table};
use super::variables::variables;

type Res<T> = Result<T, UsageError>;

const TOP: [&str; 13] = [
    "description",
    "fault",
    "report",
    "matrix",
    "vars",
    "server",
    "targets",
    "pools",
    "templates",
    "defaults",
    "step",
    "thresholds",
    "abort_on_fail",
];
/// Keys of a command step that are not options of its command.
const COMMAND_KEYS: [&str; 5] = ["name", "command", "use", "thresholds", "shards"];
const HOOK_KEYS: [&str; 5] = ["name", "run", "timeout", "background", "thresholds"];
const WAIT_KEYS: [&str; 6] = [
    "name",
    "wait",
    "until_empty",
    "timeout",
    "poll",
    "thresholds",
];
const SET_KINDS: [&str; 3] = ["targets", "pools", "templates"];
/// Group totals that `weight` splits between the workloads of a parallel step.
const SPLIT: [&str; 3] = ["rate", "users", "count"];

#[derive(Debug, Clone)]
pub struct Scenario {
    pub source: Source,
    /// Variables to iterate over (not pinned with --set), with their values.
    pub matrix: Vec<(String, Vec<String>)>,
    pub server: Option<Invocation>,
    pub steps: Vec<Step>,
    pub thresholds: Vec<Global>,
    /// `report = ["TITLE = EXPR", ...]`: columns tabulated after the run.
    pub report: Vec<super::table::Column>,
    pub abort_on_fail: bool,
}

struct Loader<'a> {
    commands: &'a clap::Command,
    src: &'a Source,
    sets: HashMap<String, (&'a str, &'a [Entry])>,
    defaults: HashMap<String, &'a [Entry]>,
}

/// Reads and checks a scenario; `commands` is every command's options (clap's
/// definition), which steps are checked against.
pub fn load(
    src: Source,
    overrides: &[(String, String)],
    commands: &clap::Command,
) -> Res<Scenario> {
    let mut commands = commands.clone();
    commands.build();
    let commands = &commands;
    let mut root = src.parse()?;
    let top = root.as_table().unwrap_or_default().to_vec();
    check_top(&src, &top)?;
    let has_server = top.iter().any(|e| e.key == "server");
    let (vars, matrix) = variables(&src, &top, overrides, has_server)?;
    vars::substitute_tree(&src, &mut root, &vars, has_server)?;
    let top = root.as_table().unwrap_or_default();
    let get = |k: &str| top.iter().find(|e| e.key == k);

    let l = Loader::new(commands, &src, top)?;
    let server = match get("server") {
        Some(e) => {
            let body = table(&src, &e.value, "[server]")?;
            Some(options::invocation(
                commands,
                &src,
                "serve",
                &e.key_span,
                "[server]",
                &[body],
                &[],
            )?)
        }
        None => None,
    };
    let mut steps = l.steps(get("step"))?;
    super::faults::attach(&src, get("fault"), &mut steps, commands)?;
    let mut thresholds = Vec::new();
    if let Some(e) = get("thresholds") {
        for (text, span) in strings(&src, &e.value, "thresholds")? {
            thresholds.push(super::model::global(&src, &steps, &text, &span)?);
        }
    }
    let mut report = Vec::new();
    if let Some(e) = get("report") {
        for (text, span) in strings(&src, &e.value, "report")? {
            report.push(super::table::Column::parse(&src, &steps, &text, &span)?);
        }
    }
    let abort_on_fail = match get("abort_on_fail") {
        Some(e) => match e.value.kind {
            Kind::Bool(b) => b,
            _ => return Err(src.err(&e.value.span, "abort_on_fail: expected true or false")),
        },
        None => false,
    };
    if let Some(e) = get("description") {
        if e.value.as_str().is_none() {
            return Err(src.err(&e.value.span, "description: expected a string"));
        }
    }
    drop(l);
    Ok(Scenario {
        source: src,
        matrix,
        server,
        steps,
        thresholds,
        report,
        abort_on_fail,
    })
}

fn check_top(src: &Source, top: &[Entry]) -> Res<()> {
    for e in top {
        if !TOP.contains(&e.key.as_str()) {
            return Err(src.err(
                &e.key_span,
                format!(
                    "unknown section or key \"{}\"{}",
                    e.key,
                    suggest(&e.key, TOP)
                ),
            ));
        }
    }
    Ok(())
}

fn thresholds(src: &Source, body: &[Entry]) -> Res<Vec<Check>> {
    let Some(e) = body.iter().find(|e| e.key == "thresholds") else {
        return Ok(Vec::new());
    };
    strings(src, &e.value, "thresholds")?
        .into_iter()
        .map(|(t, span)| {
            let c = Check::parse(&t).map_err(|e| src.err(&span, e))?;
            c.check_static(&c.path).map_err(|e| src.err(&span, e))?;
            Ok(c)
        })
        .collect()
}

impl<'a> Loader<'a> {
    /// The named sets (`[targets]`, `[pools]`, `[templates]`) and `[defaults]`.
    fn new(commands: &'a clap::Command, src: &'a Source, top: &'a [Entry]) -> Res<Loader<'a>> {
        let get = |k: &str| top.iter().find(|e| e.key == k);
        let mut l = Loader {
            commands,
            src,
            sets: HashMap::new(),
            defaults: HashMap::new(),
        };
        for kind in SET_KINDS {
            if let Some(e) = get(kind) {
                for set in table(src, &e.value, &format!("[{kind}]"))? {
                    let body = table(src, &set.value, &format!("[{kind}.{}]", set.key))?;
                    if let Some((other, _)) = l.sets.insert(set.key.clone(), (kind, body)) {
                        return Err(src.err(
                            &set.key_span,
                            format!("\"{}\" is defined in [{other}] and in [{kind}]", set.key),
                        ));
                    }
                }
            }
        }
        if let Some(e) = get("defaults") {
            let names = subcommand_names(commands);
            for d in table(src, &e.value, "[defaults]")? {
                if !names.contains(&d.key) {
                    return Err(src.err(
                        &d.key_span,
                        format!(
                            "[defaults.{}]: no such command{}",
                            d.key,
                            suggest(&d.key, names.iter().map(String::as_str))
                        ),
                    ));
                }
                l.defaults.insert(
                    d.key.clone(),
                    table(src, &d.value, &format!("[defaults.{}]", d.key))?,
                );
            }
        }
        Ok(l)
    }

    /// The `[[step]]` tables, at least one, with distinct names.
    fn steps(&self, e: Option<&Entry>) -> Res<Vec<Step>> {
        let src = self.src;
        let mut steps: Vec<Step> = Vec::new();
        if let Some(e) = e {
            let Kind::Array(items) = &e.value.kind else {
                return Err(src.err(&e.value.span, "expected [[step]] tables"));
            };
            for item in items {
                let body = table(src, item, "[[step]]")?;
                let step = self.step(body, &item.span, steps.len())?;
                if let Some(prev) = steps.iter().find(|s| s.name == step.name) {
                    return Err(src.err(
                        &item.span,
                        format!(
                            "two steps are named \"{}\": give one a name = \"...\"",
                            prev.name
                        ),
                    ));
                }
                steps.push(step);
            }
        }
        if steps.is_empty() {
            return Err(src.err(&(0..0), "no [[step]]: nothing to run"));
        }
        Ok(steps)
    }

    fn step(&self, body: &[Entry], span: &Range<usize>, index: usize) -> Res<Step> {
        let src = self.src;
        let has = |k: &str| body.iter().find(|e| e.key == k);
        // The first of these keys that is present decides the kind; the others are then
        // options of the command (ping has a --wait) or unknown keys.
        let is_wait = has("wait").is_some() || has("until_empty").is_some();
        if has("command").is_none() && has("workload").is_none() && has("run").is_none() && !is_wait
        {
            return Err(src.err(
                span,
                format!(
                    "[[step]] #{}: give one of command = \"...\", run = \"...\", wait/until_empty = ..., or [[step.workload]] tables",
                    index + 1
                ),
            ));
        }
        if let (Some(_), Some(w)) = (has("command"), has("workload")) {
            return Err(src.err(
                &w.key_span,
                format!("[[step]] #{}: a step with [[step.workload]] runs them; its own command goes into one more [[step.workload]]", index + 1),
            ));
        }
        let name = match has("name") {
            Some(e) => valid_name(src, e)?,
            None => format!("step{}", index + 1),
        };
        let label = format!("[[step]] \"{name}\"");
        let ths = thresholds(src, body)?;
        let kind = if let Some(c) = has("command") {
            let mut inv = self.command_step(body, c, &label, &[])?;
            self.watch_aborts(body, &mut inv, &ths, &label)?;
            if let Some(e) = has("shards") {
                inv.shards = Some(shards(src, e, &inv, &label)?);
            }
            StepKind::Command(inv)
        } else if let Some(r) = has("run") {
            self.watch_aborts(body, &mut Invocation::default(), &ths, &label)?;
            hook_step(src, body, r, &label)?
        } else if has("workload").is_some() {
            if let Some(t) = has("thresholds") {
                return Err(src.err(
                    &t.key_span,
                    format!("{label}: put thresholds on each [[step.workload]] (or scenario-wide: thresholds = [\"{name}.WORKLOAD....\"])"),
                ));
            }
            StepKind::Parallel(self.workloads(body, &label)?)
        } else if is_wait {
            wait_step(src, body, &label)?
        } else {
            unreachable!("checked above")
        };
        Ok(Step {
            name,
            kind,
            thresholds: ths,
        })
    }

    fn workloads(&self, group: &[Entry], label: &str) -> Res<Vec<Workload>> {
        let src = self.src;
        let w = group.iter().find(|e| e.key == "workload").expect("checked");
        let Kind::Array(items) = &w.value.kind else {
            return Err(src.err(&w.value.span, "workload: expected [[step.workload]] tables"));
        };
        let shared: Vec<Entry> = group
            .iter()
            .filter(|e| !matches!(e.key.as_str(), "name" | "workload" | "use"))
            .filter(|e| !SPLIT.contains(&e.key.as_str()))
            .cloned()
            .collect();
        let bodies = items
            .iter()
            .map(|i| table(src, i, "[[step.workload]]"))
            .collect::<Res<Vec<_>>>()?;
        let mut weights = Vec::new();
        for (b, item) in bodies.iter().zip(items) {
            let wt = match b.iter().find(|e| e.key == "weight") {
                Some(e) => match &e.value.kind {
                    Kind::Int(n) if *n > 0 => *n as f64,
                    Kind::Float(f) if f.parse::<f64>().is_ok_and(|f| f > 0.0) => {
                        f.parse().unwrap_or(1.0)
                    }
                    _ => return Err(src.err(&e.value.span, "weight: expected a number above 0")),
                },
                None => 1.0,
            };
            if !b.iter().any(|e| e.key == "command") {
                return Err(src.err(
                    &item.span,
                    format!("{label}: a [[step.workload]] needs command = \"...\""),
                ));
            }
            weights.push(wt);
        }
        let total: f64 = weights.iter().sum();
        let mut out: Vec<Workload> = Vec::new();
        for ((b, item), wt) in bodies.iter().zip(items).zip(&weights) {
            let share = wt / total;
            let mut layer = shared.clone();
            for k in SPLIT {
                if let Some(e) = group.iter().find(|e| e.key == k) {
                    layer.push(options::split(src, e, share)?);
                }
            }
            let c = b.iter().find(|e| e.key == "command").expect("checked");
            let cmd = c.value.as_str().unwrap_or_default();
            let name = match b.iter().find(|e| e.key == "name") {
                Some(e) => valid_name(src, e)?,
                None if out.iter().any(|w| w.name == cmd) => format!("{cmd}{}", out.len() + 1),
                None => cmd.to_string(),
            };
            if out.iter().any(|w| w.name == name) {
                return Err(src.err(
                    &item.span,
                    format!("{label}: two workloads are named \"{name}\""),
                ));
            }
            let wlabel = format!("{label} workload \"{name}\"");
            let mut own: Vec<Entry> = b.iter().filter(|e| e.key != "weight").cloned().collect();
            // The group's `use` applies below the workload's own.
            if let Some(u) = group.iter().find(|e| e.key == "use") {
                if !own.iter().any(|e| e.key == "use") {
                    own.push(u.clone());
                }
            }
            let mut inv = self.command_step(&own, c, &wlabel, &layer)?;
            let checks = thresholds(src, b)?;
            self.watch_aborts(b, &mut inv, &checks, &wlabel)?;
            out.push(Workload {
                name,
                inv,
                thresholds: checks,
            });
        }
        Ok(out)
    }

    /// Thresholds that end in `abort` are watched by the load command itself, while it
    /// runs: they are given to it as `--threshold`.
    fn watch_aborts(
        &self,
        body: &[Entry],
        inv: &mut Invocation,
        checks: &[Check],
        label: &str,
    ) -> Res<()> {
        let Some(e) = body.iter().find(|e| e.key == "thresholds") else {
            return Ok(());
        };
        let takes = self
            .commands
            .find_subcommand(&inv.command)
            .is_some_and(|c| c.get_arguments().any(|a| a.get_id() == "thresholds"));
        for c in checks.iter().filter(|c| c.abort.is_some()) {
            if !takes {
                return Err(self.src.err(
                    &e.value.span,
                    format!(
                        "{label}: threshold '{}' ends in abort, but only a load command (smtp, pop3, imap, xmpp, rr) can be stopped by one while it runs",
                        c.text
                    ),
                ));
            }
            c.watchable(&inv.command)
                .map_err(|m| self.src.err(&e.value.span, format!("{label}: {m}")))?;
            inv.args.extend(["--threshold".to_string(), c.text.clone()]);
        }
        Ok(())
    }

    /// A command step: defaults < used sets < group layer < the step's own keys.
    fn command_step(
        &self,
        body: &[Entry],
        c: &Entry,
        label: &str,
        group: &[Entry],
    ) -> Res<Invocation> {
        let src = self.src;
        let cmd = c
            .value
            .as_str()
            .ok_or_else(|| src.err(&c.value.span, "command: expected a string like \"smtp\""))?;
        if cmd == "serve" {
            return Err(src.err(&c.value.span, format!("{label}: the embedded server is not a step: configure it in [server] (its addresses are ${{server.smtp}}, ...)")));
        }
        let names = subcommand_names(self.commands);
        if !names.iter().any(|n| n == cmd) {
            return Err(src.err(
                &c.value.span,
                format!(
                    "{label}: no command \"{cmd}\"{}",
                    suggest(cmd, names.iter().map(String::as_str))
                ),
            ));
        }
        let mut layers: Vec<&[Entry]> = Vec::new();
        if let Some(d) = self.defaults.get(cmd) {
            layers.push(d);
        }
        if let Some(u) = body.iter().find(|e| e.key == "use") {
            for (name, span) in strings(src, &u.value, "use")? {
                match self.sets.get(&name) {
                    Some((_, set)) => layers.push(set),
                    None => {
                        return Err(src.err(
                            &span,
                            format!(
                                "{label}: use = \"{name}\": no [targets.{name}], [pools.{name}] or [templates.{name}]{}",
                                suggest(&name, self.sets.keys().map(String::as_str))
                            ),
                        ))
                    }
                }
            }
        }
        layers.push(group);
        layers.push(body);
        options::invocation(
            self.commands,
            src,
            cmd,
            &c.value.span,
            label,
            &layers,
            &COMMAND_KEYS,
        )
    }
}

/// A command step's `shards = N`: the step runs as N shards (`--shard I/N`) started
/// together, merged into the step's directory.
fn shards(src: &Source, e: &Entry, inv: &Invocation, label: &str) -> Res<u32> {
    const LOAD: [&str; 6] = ["smtp", "pop3", "imap", "xmpp", "jmap", "rr"];
    if !LOAD.contains(&inv.command.as_str()) {
        return Err(src.err(
            &e.key_span,
            format!(
                "{label}: shards: only a load command ({}) runs in shards",
                LOAD.join(", ")
            ),
        ));
    }
    if inv
        .args
        .iter()
        .any(|a| a == "--shard" || a.starts_with("--shard="))
    {
        return Err(src.err(
            &e.key_span,
            format!("{label}: shards sets each shard's --shard itself"),
        ));
    }
    match &e.value.kind {
        Kind::Int(n) if (1..=64).contains(n) => Ok(*n as u32),
        _ => Err(src.err(
            &e.value.span,
            "shards: expected a number of shards, 1 to 64",
        )),
    }
}

/// A step's or workload's `name`, which becomes part of a directory and of threshold paths.
fn valid_name(src: &Source, e: &Entry) -> Res<String> {
    Ok(e.value
        .as_str()
        .filter(|s| !s.is_empty() && !s.contains(['.', '/']))
        .ok_or_else(|| {
            src.err(
                &e.value.span,
                "name: expected a non-empty string without '.' or '/'",
            )
        })?
        .to_string())
}

/// A `run = "..."` step.
fn hook_step(src: &Source, body: &[Entry], r: &Entry, label: &str) -> Res<StepKind> {
    let has = |k: &str| body.iter().find(|e| e.key == k);
    only(src, body, &HOOK_KEYS, label)?;
    let run = r
        .value
        .as_str()
        .ok_or_else(|| src.err(&r.value.span, "run: expected a shell command string"))?;
    Ok(StepKind::Hook {
        run: run.to_string(),
        timeout: match has("timeout") {
            Some(e) => duration(src, &e.value, "timeout")?,
            None => Duration::from_secs(600),
        },
        background: match has("background").map(|e| (&e.value.kind, &e.value.span)) {
            None => false,
            Some((Kind::Bool(b), _)) => *b,
            Some((_, s)) => return Err(src.err(s, "background: expected true or false")),
        },
    })
}

/// A `wait = "..."` and/or `until_empty = "..."` step.
fn wait_step(src: &Source, body: &[Entry], label: &str) -> Res<StepKind> {
    let has = |k: &str| body.iter().find(|e| e.key == k);
    only(src, body, &WAIT_KEYS, label)?;
    let until_empty = match has("until_empty") {
        Some(e) => Some(PathBuf::from(e.value.as_str().ok_or_else(|| {
            src.err(
                &e.value.span,
                "until_empty: expected a directory (a Postfix queue)",
            )
        })?)),
        None => None,
    };
    Ok(StepKind::Wait {
        pause: has("wait")
            .map(|e| duration(src, &e.value, "wait"))
            .transpose()?,
        until_empty,
        timeout: match has("timeout") {
            Some(e) => duration(src, &e.value, "timeout")?,
            None => Duration::from_secs(1800),
        },
        poll: match has("poll") {
            Some(e) => duration(src, &e.value, "poll")?,
            None => Duration::from_millis(200),
        },
    })
}

/// Only these keys may appear in a hook or wait step.
fn only(src: &Source, body: &[Entry], keys: &[&str], label: &str) -> Res<()> {
    for e in body {
        if !keys.contains(&e.key.as_str()) {
            return Err(src.err(
                &e.key_span,
                format!(
                    "{label} \"{}\": unknown key{}",
                    e.key,
                    suggest(&e.key, keys.iter().copied())
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load_text(text: &str) -> Res<Scenario> {
        load(
            Source {
                name: "t.toml".into(),
                text: text.into(),
            },
            &[],
            &crate::cli::commands(),
        )
    }

    fn args(sc: &Scenario, i: usize) -> Vec<String> {
        match &sc.steps[i].kind {
            StepKind::Command(inv) => inv.args.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn layers_merge_defaults_then_sets_then_the_step() {
        let sc = load_text(
            "[vars]\nn = 9\n[defaults.smtp]\nusers = 2\nsize = \"1k\"\nquiet = true\n\
             [templates.big]\nsize = \"1M\"\n[targets.mx]\ntarget = \"h:25\"\n\
             [[step]]\ncommand = \"smtp\"\nuse = [\"mx\", \"big\"]\nusers = \"${n}\"\n\
             quiet = false\nbind = [\"127.0.0.2\", \"127.0.0.3\"]\nhelo = \"$${literal}\"\n",
        )
        .unwrap();
        assert_eq!(
            args(&sc, 0),
            [
                "--size",
                "1M",
                "--users",
                "9",
                "--bind",
                "127.0.0.2",
                "--bind",
                "127.0.0.3",
                "--helo",
                "${literal}",
                "h:25"
            ]
        );
        match &sc.steps[0].kind {
            StepKind::Command(inv) => assert!(inv.wants_out),
            _ => unreachable!(),
        }
    }

    #[test]
    fn weights_split_group_totals() {
        let sc = load_text(
            "[[step]]\nname = \"g\"\nrate = \"1000/min\"\nusers = 10\ntarget = \"h\"\n\
             [[step.workload]]\ncommand = \"smtp\"\nweight = 3\n\
             [[step.workload]]\ncommand = \"smtp\"\nrate = \"1/s\"\n",
        )
        .unwrap();
        let StepKind::Parallel(ws) = &sc.steps[0].kind else {
            panic!()
        };
        assert_eq!(ws[0].name, "smtp");
        assert_eq!(ws[1].name, "smtp2");
        assert_eq!(
            ws[0].inv.args,
            ["--rate", "12.5/s", "--users", "8", "h"],
            "3/4 of 1000/min and of 10 users"
        );
        assert_eq!(ws[1].inv.args, ["--users", "3", "--rate", "1/s", "h"]);
    }

    #[test]
    fn step_kinds_and_their_errors() {
        // With a command, other kind keys are options (ping has --wait, smtp has not).
        let e =
            load_text("[[step]]\nwait = \"1s\"\ncommand = \"smtp\"\ntarget = \"h\"\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("t.toml:2:1: [[step]] \"step1\" \"wait\": unknown option of smtp"),
            "{e}"
        );
        let sc =
            load_text("[[step]]\ncommand = \"ping\"\ntarget = \"h\"\nwait = \"5ms\"\n").unwrap();
        assert_eq!(args(&sc, 0), ["--wait", "5ms", "h"]);
        let e = load_text("[[step]]\nname = \"x\"\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("t.toml:1:1: [[step]] #1: give one of"),
            "{e}"
        );
        let e = load_text("[[step]]\nrun = \"x\"\nwait = \"1s\"\n").unwrap_err();
        assert!(e.to_string().contains("\"wait\": unknown key"), "{e}");
        let e = load_text("[[step]]\ncommand = \"serve\"\n").unwrap_err();
        assert!(e.to_string().contains("configure it in [server]"), "{e}");
        let e = load_text("[[step]]\nwait = \"soon\"\n").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("t.toml:2:8: \"wait\": bad duration"),
            "{e}"
        );
        let e = load_text("[[step]]\nwait = \"1s\"\n[[step]]\nwait = \"1s\"\nname = \"step1\"\n")
            .unwrap_err();
        assert!(
            e.to_string().contains("two steps are named \"step1\""),
            "{e}"
        );
        let e = load_text("").unwrap_err();
        assert!(e.to_string().contains("nothing to run"), "{e}");
        let e = load_text("[defaults.smpt]\n[[step]]\nwait = \"1s\"\n").unwrap_err();
        assert!(e.to_string().contains("did you mean \"smtp\""), "{e}");
        let sc =
            load_text("[[step]]\nwait = \"1s\"\nuntil_empty = \"/q\"\ntimeout = \"5s\"\n").unwrap();
        assert!(matches!(
            &sc.steps[0].kind,
            StepKind::Wait {
                pause: Some(_),
                until_empty: Some(_),
                ..
            }
        ));
    }
}
