//! `report = ["TITLE = EXPR", ...]`: the columns a scenario tabulates, as the authors of an
//! experiment did. EXPR is metrics (the same paths as scenario-wide thresholds:
//! `drain.wait.drain_s`, `inject.messages_per_s`, `p99(inject.transaction)`,
//! `account.verify.delivered`) and numbers joined by `*` and `/`, e.g.
//! `"time per message [s] = drain.wait.drain_s / inject.totals.accepted"`. A run prints one
//! line per column; a `[matrix]` prints one row per combination and writes matrix.csv.

use std::ops::Range;
use std::path::Path;

use super::doc::Source;
use super::model::{Global, Step};

use crate::UsageError;

#[derive(Debug, Clone)]
enum Term {
    Number(f64),
    Metric(Global),
}

/// One column: its title and `term (op term)*`, evaluated left to right.
#[derive(Debug, Clone)]
pub struct Column {
    pub title: String,
    first: Term,
    rest: Vec<(char, Term)>,
}

impl Column {
    pub fn parse(
        src: &Source,
        steps: &[Step],
        text: &str,
        span: &Range<usize>,
    ) -> Result<Column, UsageError> {
        let (title, expr) = text.split_once('=').ok_or_else(|| {
            src.err(
                span,
                format!("report column '{text}': expected \"TITLE = EXPRESSION\""),
            )
        })?;
        let title = title.trim().to_string();
        if title.is_empty() {
            return Err(src.err(span, format!("report column '{text}': the title is empty")));
        }
        // Split on * and / outside parentheses (p99(step.phase) has none inside anyway).
        let mut parts = Vec::new();
        let mut op = '*';
        let mut cur = String::new();
        for c in expr.chars() {
            if (c == '*' || c == '/') && !cur.trim().is_empty() {
                parts.push((op, std::mem::take(&mut cur)));
                op = c;
            } else {
                cur.push(c);
            }
        }
        parts.push((op, cur));
        let mut terms = Vec::new();
        for (op, word) in parts {
            let word = word.trim();
            if word.is_empty() {
                return Err(src.err(
                    span,
                    format!("report column '{text}': an operand is missing"),
                ));
            }
            let term = match word.parse::<f64>() {
                Ok(n) => Term::Number(n),
                // Resolved exactly like a scenario-wide threshold, so names are checked now;
                // the dummy limit takes whatever unit the metric has (raw values: µs for
                // phase statistics, fractions for rates).
                Err(_) => {
                    let mut first_err = None;
                    let mut found = None;
                    for limit in ["0", "0us", "0%"] {
                        match super::model::global(src, steps, &format!("{word} >= {limit}"), span)
                        {
                            Ok(g) => {
                                found = Some(g);
                                break;
                            }
                            Err(e) => {
                                first_err.get_or_insert(e);
                            }
                        }
                    }
                    match found {
                        Some(g) => Term::Metric(g),
                        None => return Err(first_err.expect("tried at least once")),
                    }
                }
            };
            terms.push((op, term));
        }
        let (_, first) = terms.remove(0);
        Ok(Column {
            title,
            first,
            rest: terms,
        })
    }

    /// The value after a run; `dir_of(step, workload)` gives a step's results directory
    /// and command, or None when it did not run.
    pub fn value(
        &self,
        dir_of: &dyn Fn(&Global) -> Option<(std::path::PathBuf, String)>,
    ) -> Option<f64> {
        let eval = |t: &Term| -> Option<f64> {
            match t {
                Term::Number(n) => Some(*n),
                Term::Metric(g) => {
                    let (dir, cmd) = dir_of(g)?;
                    g.check.evaluate(&dir, &g.rest, &cmd).value
                }
            }
        };
        let mut v = eval(&self.first)?;
        for (op, t) in &self.rest {
            let x = eval(t)?;
            v = if *op == '/' {
                if x == 0.0 {
                    return None;
                }
                v / x
            } else {
                v * x
            };
        }
        Some(v)
    }
}

/// A number as people read it in a table (the report pages show it the same way).
pub use crate::report::text::table_number as show;

/// Prints rows under a header with aligned columns, and writes them as CSV.
pub fn print_and_write(
    header: &[String],
    rows: &[Vec<String>],
    csv: Option<&Path>,
) -> std::io::Result<()> {
    let widths: Vec<usize> = (0..header.len())
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, |c| c.chars().count()))
                .chain(std::iter::once(header[i].chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[String]| {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:>w$}"))
            .collect::<Vec<_>>()
            .join("  ")
    };
    println!("  {}", line(header));
    for r in rows {
        println!("  {}", line(r));
    }
    if let Some(path) = csv {
        let esc = |c: &String| {
            if c.contains([',', '"', '\n']) {
                format!("\"{}\"", c.replace('"', "\"\""))
            } else {
                c.clone()
            }
        };
        let mut text = String::new();
        for r in std::iter::once(header).chain(rows.iter().map(Vec::as_slice)) {
            text.push_str(&r.iter().map(esc).collect::<Vec<_>>().join(","));
            text.push('\n');
        }
        std::fs::write(path, text)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::show;

    #[test]
    fn nothing_counted_shows_as_zero_not_minus_zero() {
        // `inject.errors.code.451` over a run without a 451 sums no rows.
        let empty: f64 = std::iter::empty::<f64>().sum();
        assert_eq!(show(Some(empty)), "0");
        assert_eq!(show(Some(-0.0)), "0");
        assert_eq!(show(Some(-2.0)), "-2");
        assert_eq!(show(None), "-");
    }
}
