//! A scenario's variables: `[vars]`, `[matrix]`, `--set` and `${step.NAME}`, all known
//! before the tree is substituted.

use std::collections::HashMap;

use super::doc::{suggest, table, Entry, Kind, Source};
use super::vars;
use crate::UsageError;

type Res<T> = Result<T, UsageError>;

/// Matrix variables still to iterate over, with their values.
pub(super) type Matrix = Vec<(String, Vec<String>)>;

/// The variables the tree is substituted with, and the matrix still to iterate over.
pub(super) fn variables(
    src: &Source,
    top: &[Entry],
    overrides: &[(String, String)],
    has_server: bool,
) -> Res<(HashMap<String, String>, Matrix)> {
    let get = |k: &str| top.iter().find(|e| e.key == k);
    // Variables first: they may use ${env:...} but not each other.
    let mut vars = match get("vars") {
        Some(v) => plain_vars(src, v, has_server)?,
        None => HashMap::new(),
    };
    let matrix = match get("matrix") {
        Some(m) => matrix_vars(src, m, &mut vars, overrides)?,
        None => Vec::new(),
    };
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
    // ${step.NAME}: the results directory of step NAME (for a later verify or report step).
    if let Some(Kind::Array(items)) = get("step").map(|e| &e.value.kind) {
        for (i, item) in items.iter().enumerate() {
            let name = item
                .as_table()
                .and_then(|t| t.iter().find(|e| e.key == "name"))
                .and_then(|e| e.value.as_str())
                .map_or(format!("step{}", i + 1), str::to_string);
            vars.insert(
                format!("step.{name}"),
                format!("${{out}}/{:02}-{name}", i + 1),
            );
        }
    }
    Ok((vars, matrix))
}

/// `[vars]`, each value substituted on its own.
fn plain_vars(src: &Source, v: &Entry, has_server: bool) -> Res<HashMap<String, String>> {
    let mut vars = HashMap::new();
    for e in table(src, &v.value, "[vars]")? {
        let word = e.value.scalar_word().ok_or_else(|| {
            src.err(
                &e.value.span,
                format!("[vars] \"{}\": expected a string or number", e.key),
            )
        })?;
        let empty = HashMap::new();
        let value = vars::substitute(src, &word, &e.value.span, &empty, has_server)?;
        vars.insert(e.key.clone(), value);
    }
    Ok(vars)
}

/// `[matrix]`: variables with a list of values; the whole scenario runs once per
/// combination. Each is a variable whose value here is the first (or the --set one).
fn matrix_vars(
    src: &Source,
    m: &Entry,
    vars: &mut HashMap<String, String>,
    overrides: &[(String, String)],
) -> Res<Matrix> {
    let mut matrix = Vec::new();
    for e in table(src, &m.value, "[matrix]")? {
        let Kind::Array(items) = &e.value.kind else {
            return Err(src.err(
                &e.value.span,
                format!("[matrix] \"{}\": expected a list of values", e.key),
            ));
        };
        let values = items
            .iter()
            .map(|i| {
                i.scalar_word()
                    .ok_or_else(|| src.err(&i.span, "[matrix]: expected strings or numbers"))
            })
            .collect::<Res<Vec<_>>>()?;
        if values.is_empty() {
            return Err(src.err(&e.value.span, "[matrix]: an empty list runs nothing"));
        }
        if vars.contains_key(&e.key) {
            return Err(src.err(
                &e.key_span,
                format!("\"{}\" is in [vars] and in [matrix]", e.key),
            ));
        }
        vars.insert(e.key.clone(), values[0].clone());
        // `--set NAME=[a,b,c]` runs other values; `--set NAME=v` runs that one only.
        match overrides.iter().rev().find(|(k, _)| k == &e.key) {
            None => matrix.push((e.key.clone(), values)),
            Some((_, v)) => {
                if let Some(list) = v.strip_prefix('[').and_then(|v| v.strip_suffix(']')) {
                    let values: Vec<String> = list
                        .split(',')
                        .map(|x| x.trim().trim_matches(['"', '\'']).to_string())
                        .filter(|x| !x.is_empty())
                        .collect();
                    if values.is_empty() {
                        return Err(UsageError(format!(
                            "--set {}=[]: an empty list runs nothing",
                            e.key
                        )));
                    }
                    matrix.push((e.key.clone(), values));
                }
            }
        }
    }
    Ok(matrix)
}
