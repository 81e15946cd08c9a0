//! `${...}` placeholders: [vars] (overridable with --set), the environment, the scenario's
//! directory; `${server.X}` and `${out}` are kept for the runner.

use std::collections::HashMap;
use std::ops::Range;

use super::doc::{suggest, Kind, Node, Source};
use crate::UsageError;

type Res<T> = Result<T, UsageError>;

/// Replaces `${name}`, `${env:NAME}` and `${env:NAME:-default}`; `$${` stands for `${`.
/// `${server.X}` and `${out}` are left for the runner, which knows them only at run time.
pub fn substitute(
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

pub fn substitute_tree(
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
