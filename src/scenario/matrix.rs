//! `[matrix]`: the whole scenario once per combination of values, each run in
//! `<out>/<name=value,...>`, and matrix.json / matrix.csv with every run's exit and
//! report columns.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use serde_json::json;

use super::execute::execute;
use super::plan::{dry_run, load_file};
use super::spec::Scenario;
use super::table;
use crate::ctx::Ctx;

/// Every combination of the matrix's values, in order.
fn combinations(sc: &Scenario) -> Vec<Vec<(String, String)>> {
    let mut combos: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for (k, values) in &sc.matrix {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.push((k.clone(), v.clone()));
                    c
                })
            })
            .collect();
    }
    combos
}

/// Runs (or with `dry_run` shows) the scenario of `file` once per combination.
pub async fn run_matrix(
    sc: &Scenario,
    file: &Path,
    set: &[String],
    out: &Path,
    dry: bool,
    overwrite: bool,
    ctx: &Ctx,
) -> anyhow::Result<ExitCode> {
    let mut results = Vec::new();
    let mut worst = 0u8;
    for combo in combinations(sc) {
        let name: String = combo
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
            .replace(['/', ' '], "_");
        let mut set = set.to_vec();
        set.extend(combo.iter().map(|(k, v)| format!("{k}={v}")));
        let one = load_file(file, &set, &(ctx.commands)())?;
        let dir = out.join(&name);
        if dry {
            println!("== {name}");
            dry_run(&one, file, &dir);
            continue;
        }
        println!("spate run: matrix {name}");
        let code = match execute(&one, dir.clone(), overwrite, ctx).await {
            Ok(c) if c == ExitCode::SUCCESS => 0,
            Ok(_) => 1,
            Err(e) => {
                let (code, line) = crate::error::report(&e);
                eprintln!("spate run: matrix {name}: {line}");
                code
            }
        };
        worst = worst.max(code);
        let vars: serde_json::Map<String, serde_json::Value> =
            combo.into_iter().map(|(k, v)| (k, v.into())).collect();
        results.push(json!({"name": name, "vars": vars, "dir": dir, "exit": code}));
    }
    if !dry {
        summarise(sc, out, &results, worst)?;
    }
    Ok(ExitCode::from(worst))
}

/// matrix.json, and the table of every run's report columns (also matrix.csv).
fn summarise(
    sc: &Scenario,
    out: &Path,
    results: &[serde_json::Value],
    worst: u8,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(out)?;
    let mut doc = json!({"file": sc.source.name, "runs": results, "exit": worst});
    println!("\nmatrix {}:", sc.source.name);
    let mut header: Vec<String> = sc.matrix.iter().map(|(k, _)| k.clone()).collect();
    header.extend(sc.report.iter().map(|c| c.title.clone()));
    header.push("exit".into());
    let rows: Vec<Vec<String>> = results
        .iter()
        .map(|r| {
            let mut row: Vec<String> = sc
                .matrix
                .iter()
                .map(|(k, _)| r["vars"][k].as_str().unwrap_or("").to_string())
                .collect();
            let done: serde_json::Value = r["dir"]
                .as_str()
                .and_then(|d| std::fs::read_to_string(PathBuf::from(d).join("scenario.json")).ok())
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default();
            for (i, _) in sc.report.iter().enumerate() {
                row.push(table::show(done["report"][i]["value"].as_f64()));
            }
            row.push(r["exit"].to_string());
            row
        })
        .collect();
    table::print_and_write(&header, &rows, Some(&out.join("matrix.csv")))?;
    if let Some(sl) = slopes(sc, &header, &rows) {
        doc["slopes"] = sl;
    }
    std::fs::write(out.join("matrix.json"), format!("{doc:#}\n"))?;
    match crate::report::write_report(out) {
        Ok(page) => println!("report: {}", page.display()),
        Err(e) => eprintln!("spate: warning: no HTML report: {e:#}"),
    }
    Ok(())
}

/// What a slope says: `measured` (told apart from zero), `zero` (within two standard
/// errors of it: no cost per unit can be claimed), or `exact` (no scatter at all: a
/// column the run sets, such as a count it was told to make, not a measurement); and the
/// words printed after it.
fn slope_word(m: f64, se: f64) -> (&'static str, &'static str) {
    if se == 0.0 {
        ("exact", "  (no scatter: set by the run, not a measurement)")
    } else if m.abs() <= 2.0 * se {
        (
            "zero",
            "  (within its error of zero: not told apart from none)",
        )
    } else {
        ("measured", "")
    }
}

/// With one numeric matrix variable, the least-squares slope of every report column
/// against it (E5's cost per destination: a column in µs over `addresses` gives µs per
/// address), printed and returned for matrix.json; none with fewer than 3 rows.
fn slopes(sc: &Scenario, header: &[String], rows: &[Vec<String>]) -> Option<serde_json::Value> {
    let [(var, _)] = sc.matrix.as_slice() else {
        return None;
    };
    let xs: Vec<f64> = rows
        .iter()
        .map(|r| r[0].parse::<f64>().ok())
        .collect::<Option<_>>()?;
    let (mut found, mut errors) = (serde_json::Map::new(), serde_json::Map::new());
    // Every report column: not the variable's own (the first), nor the exit (the last).
    for (i, title) in header.iter().enumerate().take(header.len() - 1).skip(1) {
        let pts: Vec<(f64, f64)> = xs
            .iter()
            .zip(rows)
            .filter_map(|(&x, r)| r[i].parse::<f64>().ok().map(|y| (x, y)))
            .collect();
        if let Some((m, se)) = crate::monitor::slope::slope_se(&pts) {
            found.insert(title.clone(), json!(m));
            errors.insert(title.clone(), json!(se));
        }
    }
    if found.is_empty() {
        return None;
    }
    println!("\nslope per {var} (least squares over the rows, ± its standard error):");
    let w = found.keys().map(|k| k.chars().count()).max().unwrap_or(0);
    let mut judged = serde_json::Map::new();
    for (k, v) in &found {
        let (m, se) = (v.as_f64().unwrap_or(0.0), errors[k].as_f64().unwrap_or(0.0));
        let (word, note) = slope_word(m, se);
        judged.insert(k.clone(), json!(word));
        println!(
            "  {k:<w$}  {} ± {}{note}",
            table::show(v.as_f64()),
            table::show(errors[k].as_f64())
        );
    }
    Some(json!({"per": var, "columns": found, "standard_errors": errors, "judged": judged}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slope_within_its_error_of_zero_or_without_scatter_is_said_so() {
        // E5 on ejabberd: 469 ± 517 µs per destination cannot be told from none.
        assert_eq!(slope_word(469.0, 517.0).0, "zero");
        assert_eq!(slope_word(561.0, 174.0).0, "measured");
        // deliveries = 60 × addresses exactly: set by the run.
        assert_eq!(slope_word(60.0, 0.0).0, "exact");
        assert!(slope_word(469.0, 517.0).1.contains("not told apart"));
    }
}
