//! `[[fault]]` tables: a fault on a step's schedule (`at` from that step's start), given
//! to its command as `--fault` words. Every key but `step` is a key of `--fault`:
//! `at`, `for`, `every`, `signal`, `pid`, `pidfile`, `name`, `restart`, `run`, `undo`,
//! `net`, ... (`spate smtp --help`); `step` names the step, and may be left out when one
//! step runs a load command.

use super::doc::{Entry, Kind, Source};
use super::model::{Step, StepKind};
use crate::UsageError;

pub fn attach(
    src: &Source,
    e: Option<&Entry>,
    steps: &mut [Step],
    commands: &clap::Command,
) -> Result<(), UsageError> {
    let Some(e) = e else {
        return Ok(());
    };
    let Kind::Array(items) = &e.value.kind else {
        return Err(src.err(&e.value.span, "fault: expected [[fault]] tables"));
    };
    let takes = |command: &str| {
        commands
            .find_subcommand(command)
            .is_some_and(|c| c.get_arguments().any(|a| a.get_id() == "fault"))
    };
    let loads: Vec<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(&s.kind, StepKind::Command(inv) if takes(&inv.command)))
        .map(|(i, _)| i)
        .collect();
    for item in items {
        let Kind::Table(body) = &item.kind else {
            return Err(src.err(&item.span, "fault: expected [[fault]] tables"));
        };
        let named = body.iter().find(|e| e.key == "step");
        let at = match named {
            Some(n) => {
                let name = n
                    .value
                    .as_str()
                    .ok_or_else(|| src.err(&n.value.span, "step: expected a step's name"))?;
                steps.iter().position(|s| s.name == name).ok_or_else(|| {
                    src.err(&n.value.span, format!("[[fault]]: no step is named \"{name}\""))
                })?
            }
            None if loads.len() == 1 => loads[0],
            None => {
                return Err(src.err(
                    &item.span,
                    format!(
                        "[[fault]]: say which step it happens in, step = \"NAME\" ({} steps run a load command)",
                        loads.len()
                    ),
                ))
            }
        };
        if !loads.contains(&at) {
            return Err(src.err(
                &item.span,
                format!(
                    "[[fault]]: step \"{}\" does not run a load command (smtp, pop3, imap, xmpp, rr): a fault happens during one",
                    steps[at].name
                ),
            ));
        }
        let mut words = Vec::new();
        for k in body.iter().filter(|k| k.key != "step") {
            let v = match &k.value.kind {
                Kind::Str(s) => s.clone(),
                Kind::Int(n) => n.to_string(),
                Kind::Float(f) => f.clone(),
                Kind::Bool(b) => b.to_string(),
                other => {
                    return Err(src.err(
                        &k.value.span,
                        format!(
                            "{}: expected a string or a number, not {}",
                            k.key,
                            other.type_name()
                        ),
                    ))
                }
            };
            let quoted = shlex::try_quote(&v)
                .map_err(|_| src.err(&k.value.span, format!("{}: a NUL byte", k.key)))?;
            words.push(format!("{}={quoted}", k.key));
        }
        let spec = words.join(" ");
        crate::fault::spec::Spec::syntax(&spec).map_err(|u| src.err(&item.span, u.0))?;
        if let StepKind::Command(inv) = &mut steps[at].kind {
            inv.args.extend(["--fault".to_string(), spec]);
        }
    }
    Ok(())
}
