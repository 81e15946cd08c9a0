//! From the TOML tree to a validated scenario: every step's command line is built here
//! and parsed with the same clap definitions as the command line itself, so each option
//! of each subcommand (including ones added later) has its scenario key for free.

use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use super::doc::{suggest, Entry, Kind, Node, Source};
use super::threshold::Check;
use crate::units;
use crate::UsageError;

type Res<T> = Result<T, UsageError>;

const TOP: [&str; 10] = [
    "description",
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
const COMMAND_KEYS: [&str; 4] = ["name", "command", "use", "thresholds"];
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
    pub server: Option<Invocation>,
    pub steps: Vec<Step>,
    pub thresholds: Vec<Global>,
    pub abort_on_fail: bool,
}

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
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    pub command: String,
    pub args: Vec<String>,
    /// The command has `--out` and the scenario did not set it: the runner does.
    pub wants_out: bool,
}

impl Invocation {
    pub fn argv(&self, out: Option<&std::path::Path>) -> Vec<String> {
        let mut v = vec!["spate".to_string(), self.command.clone()];
        v.extend(self.args.iter().cloned());
        if let (true, Some(o)) = (self.wants_out, out) {
            v.push("--out".into());
            v.push(o.display().to_string());
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

/// The clap definition of a subcommand, `None` when there is no such subcommand.
pub fn subcommand(name: &str) -> Option<clap::Command> {
    let mut cli = <crate::cli::Cli as clap::CommandFactory>::command();
    cli.build();
    cli.find_subcommand(name).cloned()
}

pub fn subcommand_names() -> Vec<String> {
    <crate::cli::Cli as clap::CommandFactory>::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|n| n != "run" && n != "help")
        .collect()
}

/// The scenario key of a clap argument: its long name, or its id for a positional.
pub fn arg_key(a: &clap::Arg) -> Option<String> {
    let id = a.get_id().as_str();
    if id == "help" || id == "version" {
        return None;
    }
    if a.is_positional() {
        Some(id.to_string())
    } else {
        a.get_long().map(str::to_string)
    }
}

pub fn is_flag(a: &clap::Arg) -> bool {
    matches!(
        a.get_action(),
        clap::ArgAction::SetTrue | clap::ArgAction::SetFalse
    )
}

pub fn is_multiple(a: &clap::Arg) -> bool {
    matches!(a.get_action(), clap::ArgAction::Append)
        || a.get_num_args().is_some_and(|r| r.max_values() > 1)
        || a.get_value_delimiter().is_some()
}

struct Loader<'a> {
    src: &'a Source,
    sets: HashMap<String, (&'a str, &'a [Entry])>,
    defaults: HashMap<String, &'a [Entry]>,
}

pub fn load(src: Source, overrides: &[(String, String)]) -> Res<Scenario> {
    let mut root = src.parse()?;
    let top = root.as_table().unwrap_or_default().to_vec();
    for e in &top {
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
    let get = |k: &str| top.iter().find(|e| e.key == k);
    let has_server = get("server").is_some();
    // Variables first: they may use ${env:...} but not each other.
    let mut vars = HashMap::new();
    if let Some(v) = get("vars") {
        for e in table(&src, &v.value, "[vars]")? {
            let word = e.value.scalar_word().ok_or_else(|| {
                src.err(
                    &e.value.span,
                    format!("[vars] \"{}\": expected a string or number", e.key),
                )
            })?;
            let empty = HashMap::new();
            let value = substitute(&src, &word, &e.value.span, &empty, has_server)?;
            vars.insert(e.key.clone(), value);
        }
    }
    for (k, v) in overrides {
        if !vars.contains_key(k) {
            let names: Vec<&str> = vars.keys().map(String::as_str).collect();
            return Err(UsageError(format!(
                "--set {k}: {} has no variable \"{k}\" in [vars]{}",
                src.name,
                suggest(k, names)
            )));
        }
        vars.insert(k.clone(), v.clone());
    }
    substitute_tree(&src, &mut root, &vars, has_server)?;
    let top = root.as_table().unwrap_or_default();
    let get = |k: &str| top.iter().find(|e| e.key == k);

    let mut l = Loader {
        src: &src,
        sets: HashMap::new(),
        defaults: HashMap::new(),
    };
    for kind in SET_KINDS {
        if let Some(e) = get(kind) {
            for set in table(&src, &e.value, &format!("[{kind}]"))? {
                let body = table(&src, &set.value, &format!("[{kind}.{}]", set.key))?;
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
        let names = subcommand_names();
        for d in table(&src, &e.value, "[defaults]")? {
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
                table(&src, &d.value, &format!("[defaults.{}]", d.key))?,
            );
        }
    }
    let server = match get("server") {
        Some(e) => {
            let body = table(&src, &e.value, "[server]")?;
            Some(l.invocation("serve", &e.key_span, "[server]", &[body], &[])?)
        }
        None => None,
    };
    let mut steps: Vec<Step> = Vec::new();
    if let Some(e) = get("step") {
        let Kind::Array(items) = &e.value.kind else {
            return Err(src.err(&e.value.span, "expected [[step]] tables"));
        };
        for item in items {
            let body = table(&src, item, "[[step]]")?;
            let step = l.step(body, &item.span, steps.len())?;
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
    let mut thresholds = Vec::new();
    if let Some(e) = get("thresholds") {
        for (text, span) in strings(&src, &e.value, "thresholds")? {
            thresholds.push(global(&src, &steps, &text, &span)?);
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
        server,
        steps,
        thresholds,
        abort_on_fail,
    })
}

fn table<'a>(src: &Source, n: &'a Node, what: &str) -> Res<&'a [Entry]> {
    n.as_table().ok_or_else(|| {
        src.err(
            &n.span,
            format!("{what}: expected a table, found {}", n.kind.type_name()),
        )
    })
}

fn strings(src: &Source, n: &Node, what: &str) -> Res<Vec<(String, Range<usize>)>> {
    let items: Vec<&Node> = match &n.kind {
        Kind::Array(a) => a.iter().collect(),
        Kind::Str(_) => vec![n],
        _ => return Err(src.err(&n.span, format!("{what}: expected a list of strings"))),
    };
    items
        .into_iter()
        .map(|i| match i.as_str() {
            Some(s) => Ok((s.to_string(), i.span.clone())),
            None => Err(src.err(&i.span, format!("{what}: expected a string"))),
        })
        .collect()
}

fn duration(src: &Source, n: &Node, key: &str) -> Res<Duration> {
    let w = n.scalar_word().ok_or_else(|| {
        src.err(
            &n.span,
            format!("\"{key}\": expected a duration like \"30s\""),
        )
    })?;
    units::parse_duration(&w).map_err(|e| src.err(&n.span, format!("\"{key}\": {e}")))
}

/// Replaces `${name}`, `${env:NAME}` and `${env:NAME:-default}`; `$${` stands for `${`.
/// `${server.X}` and `${out}` are left for the runner, which knows them only at run time.
fn substitute(
    src: &Source,
    s: &str,
    span: &Range<usize>,
    vars: &HashMap<String, String>,
    has_server: bool,
) -> Res<String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        if let Some(r) = rest.strip_prefix("$${") {
            out.push_str("${");
            rest = r;
            continue;
        }
        let Some(r) = rest.strip_prefix("${") else {
            out.push('$');
            rest = &rest[1..];
            continue;
        };
        let end = r
            .find('}')
            .ok_or_else(|| src.err(span, format!("unclosed ${{ in \"{s}\"")))?;
        let name = &r[..end];
        rest = &r[end + 1..];
        if let Some(env) = name.strip_prefix("env:") {
            let (var, default) = match env.split_once(":-") {
                Some((v, d)) => (v, Some(d)),
                None => (env, None),
            };
            match (std::env::var(var), default) {
                (Ok(v), _) => out.push_str(&v),
                (Err(_), Some(d)) => out.push_str(d),
                (Err(_), None) => {
                    return Err(src.err(
                        span,
                        format!("environment variable {var} is not set (write ${{env:{var}:-DEFAULT}} for a default)"),
                    ))
                }
            }
        } else if let Some(what) = name.strip_prefix("server.") {
            let known: Vec<&str> = crate::serve::Listener::ALL
                .iter()
                .map(|l| l.name())
                .chain(["ca"])
                .collect();
            if !has_server {
                return Err(src.err(span, format!("${{{name}}} needs a [server] section")));
            }
            if !known.contains(&what) {
                return Err(src.err(
                    span,
                    format!(
                        "${{{name}}}: no such server address{}",
                        suggest(what, known)
                    ),
                ));
            }
            out.push_str(&format!("${{{name}}}"));
        } else if name == "dir" {
            // The scenario file's directory, so files next to it are found from anywhere.
            let dir = std::path::Path::new(&src.name)
                .parent()
                .map_or(".".into(), |d| {
                    if d.as_os_str().is_empty() {
                        ".".to_string()
                    } else {
                        d.display().to_string()
                    }
                });
            out.push_str(&dir);
        } else if name == "out" {
            out.push_str("${out}");
        } else if let Some(v) = vars.get(name) {
            out.push_str(v);
        } else {
            let names = vars
                .keys()
                .map(String::as_str)
                .chain(["out", "dir", "env:NAME"]);
            return Err(src.err(
                span,
                format!(
                    "${{{name}}}: no such variable in [vars]{}",
                    suggest(name, names)
                ),
            ));
        }
    }
    out.push_str(rest);
    Ok(out)
}

fn substitute_tree(
    src: &Source,
    n: &mut Node,
    vars: &HashMap<String, String>,
    has_server: bool,
) -> Res<()> {
    match &mut n.kind {
        Kind::Str(s) => *s = substitute(src, s, &n.span, vars, has_server)?,
        Kind::Array(items) => {
            for i in items {
                substitute_tree(src, i, vars, has_server)?;
            }
        }
        Kind::Table(entries) => {
            for e in entries {
                if e.key != "vars" {
                    substitute_tree(src, &mut e.value, vars, has_server)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// Resolves a scenario-wide threshold's leading segment(s) to a step (and workload).
fn global(src: &Source, steps: &[Step], text: &str, span: &Range<usize>) -> Res<Global> {
    let check = Check::parse(text).map_err(|e| src.err(span, e))?;
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
    fn step(&self, body: &[Entry], span: &Range<usize>, index: usize) -> Res<Step> {
        let src = self.src;
        let has = |k: &str| body.iter().find(|e| e.key == k);
        let kinds: Vec<&Entry> = ["command", "run", "wait", "until_empty", "workload"]
            .iter()
            .filter_map(|k| has(k))
            .collect();
        let is_wait = has("wait").is_some() || has("until_empty").is_some();
        if kinds.is_empty() || (kinds.len() > 1 && !(is_wait && kinds.len() == 2)) {
            return Err(src.err(
                kinds.get(1).map_or(span, |e| &e.key_span),
                format!(
                    "[[step]] #{}: give exactly one of command = \"...\", run = \"...\", wait/until_empty = ..., or [[step.workload]] tables",
                    index + 1
                ),
            ));
        }
        let name = match has("name") {
            Some(e) => e
                .value
                .as_str()
                .filter(|s| !s.is_empty() && !s.contains(['.', '/']))
                .ok_or_else(|| {
                    src.err(
                        &e.value.span,
                        "name: expected a non-empty string without '.' or '/'",
                    )
                })?
                .to_string(),
            None => format!("step{}", index + 1),
        };
        let label = format!("[[step]] \"{name}\"");
        let ths = thresholds(src, body)?;
        let kind = if let Some(c) = has("command") {
            StepKind::Command(self.command_step(body, c, &label, &[])?)
        } else if let Some(r) = has("run") {
            only(src, body, &HOOK_KEYS, &label)?;
            let run = r
                .value
                .as_str()
                .ok_or_else(|| src.err(&r.value.span, "run: expected a shell command string"))?;
            StepKind::Hook {
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
            }
        } else if is_wait {
            only(src, body, &WAIT_KEYS, &label)?;
            let until_empty = match has("until_empty") {
                Some(e) => Some(PathBuf::from(e.value.as_str().ok_or_else(|| {
                    src.err(
                        &e.value.span,
                        "until_empty: expected a directory (a Postfix queue)",
                    )
                })?)),
                None => None,
            };
            StepKind::Wait {
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
            }
        } else {
            if let Some(t) = has("thresholds") {
                return Err(src.err(
                    &t.key_span,
                    format!("{label}: put thresholds on each [[step.workload]] (or scenario-wide: thresholds = [\"{name}.WORKLOAD....\"])"),
                ));
            }
            StepKind::Parallel(self.workloads(body, &label)?)
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
                    layer.push(split(src, e, share)?);
                }
            }
            let c = b.iter().find(|e| e.key == "command").expect("checked");
            let cmd = c.value.as_str().unwrap_or_default();
            let name = match b.iter().find(|e| e.key == "name") {
                Some(e) => e
                    .value
                    .as_str()
                    .filter(|s| !s.is_empty() && !s.contains(['.', '/']))
                    .ok_or_else(|| {
                        src.err(
                            &e.value.span,
                            "name: expected a non-empty string without '.' or '/'",
                        )
                    })?
                    .to_string(),
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
            let inv = self.command_step(&own, c, &wlabel, &layer)?;
            out.push(Workload {
                name,
                inv,
                thresholds: thresholds(src, b)?,
            });
        }
        Ok(out)
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
        let names = subcommand_names();
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
        self.invocation(cmd, &c.value.span, label, &layers, &COMMAND_KEYS)
    }

    /// Merges option layers (later wins) and turns them into a checked argument list.
    fn invocation(
        &self,
        cmd: &str,
        span: &Range<usize>,
        label: &str,
        layers: &[&[Entry]],
        special: &[&str],
    ) -> Res<Invocation> {
        let src = self.src;
        let def = subcommand(cmd).ok_or_else(|| src.err(span, format!("no command \"{cmd}\"")))?;
        let args: Vec<(String, clap::Arg)> = def
            .get_arguments()
            .filter_map(|a| arg_key(a).map(|k| (k, a.clone())))
            .collect();
        let mut merged: Vec<&Entry> = Vec::new();
        for layer in layers {
            for e in layer.iter().filter(|e| !special.contains(&e.key.as_str())) {
                merged.retain(|m| m.key != e.key);
                merged.push(e);
            }
        }
        let mut options = Vec::new();
        let mut positionals: Vec<(usize, Vec<String>)> = Vec::new();
        // Which key each clap argument came from, to point clap's errors at it.
        let mut origin: Vec<(String, Range<usize>)> = Vec::new();
        for e in &merged {
            let Some((_, a)) = args.iter().find(|(k, _)| *k == e.key) else {
                let candidates = args
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .chain(special.iter().copied());
                return Err(src.err(
                    &e.key_span,
                    format!(
                        "{label} \"{}\": unknown option of {cmd}{}",
                        e.key,
                        suggest(&e.key, candidates)
                    ),
                ));
            };
            let bad = |what: &str| {
                src.err(
                    &e.value.span,
                    format!(
                        "{label} \"{}\": expected {what}, found {}",
                        e.key,
                        e.value.kind.type_name()
                    ),
                )
            };
            let words: Vec<String> = if is_flag(a) {
                match e.value.kind {
                    Kind::Bool(true) => vec![String::new()],
                    Kind::Bool(false) => Vec::new(),
                    _ => return Err(bad("true or false")),
                }
            } else if matches!(a.get_action(), clap::ArgAction::Count) {
                match e.value.kind {
                    Kind::Int(n) if (0..=255).contains(&n) => vec![String::new(); n as usize],
                    _ => return Err(bad("a count (an integer)")),
                }
            } else {
                match &e.value.kind {
                    Kind::Array(items) if is_multiple(a) => items
                        .iter()
                        .map(|i| {
                            i.scalar_word()
                                .ok_or_else(|| bad("a list of strings or numbers"))
                        })
                        .collect::<Res<_>>()?,
                    Kind::Array(_) => return Err(bad("one value (this option is not repeatable)")),
                    Kind::Table(_) => return Err(bad("a value")),
                    _ => vec![e.value.scalar_word().unwrap_or_default()],
                }
            };
            let long = a.get_long().unwrap_or(a.get_id().as_str()).to_string();
            origin.push((long.clone(), e.value.span.clone()));
            if a.is_positional() {
                positionals.push((a.get_index().unwrap_or(0), words));
                continue;
            }
            for w in words {
                if w.is_empty() {
                    options.push(format!("--{long}"));
                } else if w.starts_with('-') {
                    options.push(format!("--{long}={w}"));
                } else {
                    options.push(format!("--{long}"));
                    options.push(w);
                }
            }
        }
        positionals.sort_by_key(|(i, _)| *i);
        let pos: Vec<String> = positionals.into_iter().flat_map(|(_, w)| w).collect();
        if pos.iter().any(|p| p.starts_with('-')) {
            options.push("--".into());
        }
        options.extend(pos);
        let inv = Invocation {
            command: cmd.to_string(),
            args: options,
            wants_out: args.iter().any(|(k, _)| k == "out")
                && !merged.iter().any(|e| e.key == "out"),
        };
        // The same parser as the command line: every value check clap does happens here.
        if let Err(e) = <crate::cli::Cli as clap::Parser>::try_parse_from(inv.argv(None)) {
            let which = match e.get(clap::error::ContextKind::InvalidArg) {
                Some(clap::error::ContextValue::String(s)) => s
                    .trim_start_matches('-')
                    .split([' ', '='])
                    .next()
                    .unwrap_or("")
                    .to_string(),
                _ => String::new(),
            };
            let at = origin
                .iter()
                .find(|(k, _)| k == &which || k.to_uppercase() == which.trim_matches(['<', '>']))
                .map_or(span.clone(), |(_, s)| s.clone());
            return Err(src.err(&at, format!("{label}: {}", super::doc::clap_line(&e))));
        }
        Ok(inv)
    }
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

/// A group total (rate, users, count) scaled by a workload's share of the weights.
fn split(src: &Source, e: &Entry, share: f64) -> Res<Entry> {
    let word = e
        .value
        .scalar_word()
        .ok_or_else(|| src.err(&e.value.span, format!("\"{}\": expected one value", e.key)))?;
    let kind = if e.key == "rate" {
        let r = units::parse_rate(&word)
            .map_err(|err| src.err(&e.value.span, format!("\"rate\": {err}")))?;
        let s = format!("{:.3}", r * share);
        Kind::Str(format!(
            "{}/s",
            s.trim_end_matches('0').trim_end_matches('.')
        ))
    } else {
        let n: f64 = word
            .parse()
            .map_err(|_| src.err(&e.value.span, format!("\"{}\": expected an integer", e.key)))?;
        Kind::Int(((n * share).round() as i64).max(1))
    };
    Ok(Entry {
        key: e.key.clone(),
        key_span: e.key_span.clone(),
        value: Node {
            span: e.value.span.clone(),
            kind,
        },
    })
}
