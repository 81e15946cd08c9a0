//! Scenario keys to command-line words, checked by the subcommand's own clap definition.

use std::ops::Range;

use super::doc::{suggest, Entry, Kind, Node, Source};
use super::model::Invocation;
use crate::units;
use crate::UsageError;

type Res<T> = Result<T, UsageError>;

/// The clap definition of a subcommand of `commands` (every command's options, built),
/// `None` when there is no such subcommand.
pub fn subcommand(commands: &clap::Command, name: &str) -> Option<clap::Command> {
    commands
        .find_subcommand(name)
        .filter(|c| is_step(c))
        .cloned()
}

/// The commands a scenario step may run: those that list `--dump-scenario` (not run,
/// completions, man or help).
pub fn subcommand_names(commands: &clap::Command) -> Vec<String> {
    commands
        .get_subcommands()
        .filter(|c| is_step(c))
        .map(|c| c.get_name().to_string())
        .collect()
}

/// Whether a command can be a scenario step (and be dumped as one).
pub fn is_step(c: &clap::Command) -> bool {
    c.get_arguments().any(|a| a.get_id() == "dump_scenario")
}

/// The scenario key of a clap argument: its long name, or its id for a positional.
pub fn arg_key(a: &clap::Arg) -> Option<String> {
    let id = a.get_id().as_str();
    if id == "help" || id == "version" || id == "dump_scenario" {
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

/// Merges option layers (later wins) and turns them into a checked argument list.
pub fn invocation(
    commands: &clap::Command,
    src: &Source,
    cmd: &str,
    span: &Range<usize>,
    label: &str,
    layers: &[&[Entry]],
    special: &[&str],
) -> Res<Invocation> {
    let def =
        subcommand(commands, cmd).ok_or_else(|| src.err(span, format!("no command \"{cmd}\"")))?;
    let args: Vec<(String, clap::Arg)> = def
        .get_arguments()
        .filter_map(|a| arg_key(a).map(|k| (k, a.clone())))
        .collect();
    let merged = merge(layers, special);
    let mut options = Vec::new();
    let mut positionals: Vec<(usize, Vec<String>)> = Vec::new();
    // Which key each clap argument came from, to point clap's errors at it.
    let mut origin: Vec<(String, Range<usize>)> = Vec::new();
    for e in &merged {
        // An old spelling kept as a hidden alias works in a scenario as on the command line.
        let named = |k: &str, a: &clap::Arg| {
            k == e.key
                || a.get_all_aliases()
                    .is_some_and(|al| al.contains(&e.key.as_str()))
        };
        let Some((_, a)) = args.iter().find(|(k, a)| named(k, a)) else {
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
        let words = words(src, e, a, label)?;
        let long = a.get_long().unwrap_or(a.get_id().as_str()).to_string();
        origin.push((long.clone(), e.value.span.clone()));
        if a.is_positional() {
            positionals.push((a.get_index().unwrap_or(0), words));
        } else {
            push_option(&mut options, &long, words);
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
        wants_out: args.iter().any(|(k, _)| k == "out") && !merged.iter().any(|e| e.key == "out"),
        shards: None,
    };
    check_with_clap(commands, src, &inv, &origin, span, label)?;
    Ok(inv)
}

/// The keys of all layers but the special ones; a key set again moves to its last place.
fn merge<'e>(layers: &[&'e [Entry]], special: &[&str]) -> Vec<&'e Entry> {
    let mut merged: Vec<&Entry> = Vec::new();
    for layer in layers {
        for e in layer.iter().filter(|e| !special.contains(&e.key.as_str())) {
            merged.retain(|m| m.key != e.key);
            merged.push(e);
        }
    }
    merged
}

/// The values of key `e` for argument `a`: an empty word stands for a bare flag.
fn words(src: &Source, e: &Entry, a: &clap::Arg, label: &str) -> Res<Vec<String>> {
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
    Ok(if is_flag(a) {
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
    })
}

fn push_option(options: &mut Vec<String>, long: &str, words: Vec<String>) {
    for w in words {
        if w.is_empty() {
            options.push(format!("--{long}"));
        } else if w.starts_with('-') {
            // Joined, or clap would take the value for an option of its own.
            options.push(format!("--{long}={w}"));
        } else {
            options.push(format!("--{long}"));
            options.push(w);
        }
    }
}

/// The same parser as the command line: every value check clap does happens here.
/// Its error points at the key the offending argument came from, else at `span`.
fn check_with_clap(
    commands: &clap::Command,
    src: &Source,
    inv: &Invocation,
    origin: &[(String, Range<usize>)],
    span: &Range<usize>,
    label: &str,
) -> Res<()> {
    let Err(e) = commands.clone().try_get_matches_from(inv.argv(None)) else {
        return Ok(());
    };
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
    Err(src.err(&at, format!("{label}: {}", super::doc::clap_line(&e))))
}

/// A group total (rate, users, count) scaled by a workload's share of the weights.
pub fn split(src: &Source, e: &Entry, share: f64) -> Res<Entry> {
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
