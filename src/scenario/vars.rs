//! `${...}` placeholders: [vars] (overridable with --set), the environment, the scenario's
//! directory; `${server.X}` and `${out}` are kept for the runner.

use std::collections::HashMap;
use std::ops::Range;

use super::doc::{suggest, Kind, Node, Source};
use crate::UsageError;

type Res<T> = Result<T, UsageError>;

/// Opens a placeholder; written `$${`, it stands for itself.
const OPEN: &str = "${";
const ESCAPED_OPEN: &str = "$${";

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
        if let Some(r) = rest.strip_prefix(ESCAPED_OPEN) {
            out.push_str(OPEN);
            rest = r;
            continue;
        }
        let Some(r) = rest.strip_prefix(OPEN) else {
            out.push('$');
            rest = &rest[1..];
            continue;
        };
        let end = r
            .find('}')
            .ok_or_else(|| src.err(span, format!("unclosed {OPEN} in \"{s}\"")))?;
        let name = &r[..end];
        rest = &r[end + 1..];
        let p = Placeholder {
            src,
            span,
            name,
            vars,
            has_server,
        };
        out.push_str(&p.value()?);
    }
    out.push_str(rest);
    Ok(out)
}

/// One `${name}` of a string, with what it may refer to.
struct Placeholder<'a> {
    src: &'a Source,
    span: &'a Range<usize>,
    name: &'a str,
    vars: &'a HashMap<String, String>,
    has_server: bool,
}

impl Placeholder<'_> {
    /// The replacement text; runner placeholders stay as they are.
    fn value(&self) -> Res<String> {
        let name = self.name;
        if let Some(env) = name.strip_prefix("env:") {
            self.env(env)
        } else if let Some(what) = name.strip_prefix("server.") {
            self.server(what)
        } else if name == "dir" {
            Ok(self.dir())
        } else if name == "out" {
            Ok("${out}".to_string())
        } else if let Some(v) = self.vars.get(name) {
            Ok(v.clone())
        } else {
            let names = self
                .vars
                .keys()
                .map(String::as_str)
                .chain(["out", "dir", "env:NAME"]);
            Err(self.src.err(
                self.span,
                format!(
                    "${{{name}}}: no such variable in [vars]{}",
                    suggest(name, names)
                ),
            ))
        }
    }

    /// `${env:NAME}` or `${env:NAME:-default}`.
    fn env(&self, env: &str) -> Res<String> {
        let (var, default) = match env.split_once(":-") {
            Some((v, d)) => (v, Some(d)),
            None => (env, None),
        };
        match (std::env::var(var), default) {
            (Ok(v), _) => Ok(v),
            (Err(_), Some(d)) => Ok(d.to_string()),
            (Err(_), None) => Err(self.src.err(
                self.span,
                format!("environment variable {var} is not set (write ${{env:{var}:-DEFAULT}} for a default)"),
            )),
        }
    }

    /// `${server.X}`: checked now, replaced by the runner once the server listens.
    fn server(&self, what: &str) -> Res<String> {
        let name = self.name;
        let known: Vec<&str> = crate::serve::Listener::ALL
            .iter()
            .map(|l| l.name())
            .chain(["ca"])
            .collect();
        if !self.has_server {
            return Err(self
                .src
                .err(self.span, format!("${{{name}}} needs a [server] section")));
        }
        if !known.contains(&what) {
            return Err(self.src.err(
                self.span,
                format!(
                    "${{{name}}}: no such server address{}",
                    suggest(what, known)
                ),
            ));
        }
        Ok(format!("${{{name}}}"))
    }

    /// The scenario file's directory, so files next to it are found from anywhere.
    fn dir(&self) -> String {
        std::path::Path::new(&self.src.name)
            .parent()
            .map_or(".".into(), |d| {
                if d.as_os_str().is_empty() {
                    ".".to_string()
                } else {
                    d.display().to_string()
                }
            })
    }
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
