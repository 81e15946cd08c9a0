//! `--dump-scenario` on any command: print the scenario that the command line means, one
//! step whose keys are the options given on the command line (defaults stay implicit, so
//! the file keeps following them). Works for every subcommand through clap's introspection.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::parser::ValueSource;

use super::doc::quote;
use super::spec::{arg_key, is_flag, is_multiple};

pub const FLAG: &str = "--dump-scenario";

/// When `--dump-scenario` is on the command line: prints the scenario (or the error) and
/// returns the exit code. `None`: not asked for, carry on as usual.
/// `commands` makes every command's options (clap's definition).
pub fn intercept(args: &[OsString], commands: fn() -> clap::Command) -> Option<ExitCode> {
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let at = args[..end].iter().position(|a| a == FLAG)?;
    let mut rest = args.to_vec();
    rest.remove(at);
    match render(&commands(), &rest) {
        Ok(text) => {
            print!("{text}");
            Some(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("spate: {e}");
            Some(ExitCode::from(2))
        }
    }
}

/// The scenario text for a command line (`spate CMD ...`, without --dump-scenario).
pub fn render(commands: &clap::Command, args: &[OsString]) -> Result<String, String> {
    let cli = commands.clone();
    let m = cli
        .clone()
        .try_get_matches_from(args)
        .map_err(|e| super::doc::clap_line(&e))?;
    let (name, sub) = m.subcommand().ok_or("--dump-scenario needs a command")?;
    if name == "run" {
        return Err(
            "spate run takes a scenario already: --dump-scenario is for the other commands".into(),
        );
    }
    let mut def = cli;
    def.build();
    let def = def.find_subcommand(name).ok_or("unknown command")?;
    if !super::options::is_step(def) {
        return Err(format!(
            "spate {name} cannot be a scenario step: --dump-scenario is for load, check and report commands"
        ));
    }
    let mut lines = Vec::new();
    for a in def.get_arguments() {
        let Some(key) = arg_key(a) else { continue };
        let id = a.get_id().as_str();
        if sub.value_source(id) != Some(ValueSource::CommandLine) {
            continue;
        }
        let value = if is_flag(a) {
            "true".to_string()
        } else if matches!(a.get_action(), clap::ArgAction::Count) {
            sub.get_count(id).to_string()
        } else {
            let raw: Vec<String> = sub
                .get_raw(id)
                .into_iter()
                .flatten()
                .map(|v| v.to_string_lossy().to_string())
                .collect();
            if is_multiple(a) {
                let items: Vec<String> = raw.iter().map(|v| scalar(v)).collect();
                format!("[{}]", items.join(", "))
            } else {
                scalar(raw.first().map_or("", String::as_str))
            }
        };
        lines.push(format!("{key} = {value}"));
    }
    let shown: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| super::shell_word(&a.to_string_lossy()))
        .collect();
    let mut out = format!(
        "# The scenario equivalent of: spate {}\n# Run it with: spate run FILE.toml (spate run --help explains the format)\n\n",
        shown.join(" ")
    );
    if name == "serve" {
        out.push_str("[server]\n");
        for l in &lines {
            out.push_str(l);
            out.push('\n');
        }
        out.push_str("\n# Add steps that use ${server.smtp} (and the other listeners) here.\n");
        return Ok(out);
    }
    out.push_str(&format!(
        "[[step]]\nname = \"{name}\"\ncommand = \"{name}\"\n"
    ));
    for l in &lines {
        out.push_str(l);
        out.push('\n');
    }
    Ok(out)
}

/// Integers stay integers when that reads back as the same word; everything else is a string.
fn scalar(v: &str) -> String {
    match v.parse::<i64>() {
        Ok(n) if n.to_string() == v => v.to_string(),
        _ => quote(v),
    }
}
