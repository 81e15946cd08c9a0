//! The page of a scenario matrix (`spate run` with `[matrix]`, such as E5's sweep of
//! address-list sizes): the table of every run's report columns, and with one numeric
//! matrix variable a chart of each column against it with its least-squares line, the
//! slope and what it can be said to be (measured, within its error of zero, or set by the
//! run).

use std::fmt::Write as _;
use std::path::Path;

use super::chart::{self, escape as esc, Chart, Series, Style, XKind};

/// Whether `dir` holds a matrix's summary.
pub fn is_matrix(dir: &Path) -> bool {
    dir.join("matrix.json").is_file() && dir.join("matrix.csv").is_file()
}

/// The matrix page of `dir`.
pub fn render_matrix(dir: &Path) -> anyhow::Result<String> {
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("matrix.json"))?)?;
    let text = std::fs::read_to_string(dir.join("matrix.csv"))?;
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let header: Vec<String> = lines
        .next()
        .unwrap_or("")
        .split(',')
        .map(str::to_string)
        .collect();
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    let file = doc["file"].as_str().unwrap_or("scenario");
    let title = format!("spate: matrix of {file}");
    let mut b = String::new();
    let status = match doc["exit"].as_u64() {
        Some(0) => "<span class=\"ok\">every run passed</span>".to_string(),
        Some(n) if n == u64::from(crate::THRESHOLDS_FAILED) => {
            "<span class=\"warn\">thresholds failed in some runs (exit 99)</span>".to_string()
        }
        Some(n) => format!("<span class=\"warn\">some runs failed (exit {n})</span>"),
        None => String::new(),
    };
    let _ = writeln!(
        b,
        "<h1>{}</h1><div class=\"sub\">{} runs — {status}</div>",
        esc(&title),
        rows.len()
    );
    b.push_str("<h2>Runs</h2><div class=\"wide\"><table><tr>");
    for h in &header {
        let _ = write!(b, "<th>{}</th>", esc(h));
    }
    b.push_str("</tr>");
    for r in &rows {
        b.push_str("<tr>");
        for c in r {
            let _ = write!(b, "<td>{}</td>", esc(c));
        }
        b.push_str("</tr>");
    }
    b.push_str("</table></div>\n");
    if let Some(sl) = doc.get("slopes").filter(|s| s.is_object()) {
        slopes(&mut b, sl, &header, &rows);
    }
    Ok(super::html::page(&title, &b))
}

/// A chart per column against the matrix variable, its points and fitted line, and the
/// slope with its standard error and judgement.
fn slopes(b: &mut String, sl: &serde_json::Value, header: &[String], rows: &[Vec<String>]) {
    let var = sl["per"].as_str().unwrap_or("value");
    let _ = writeln!(
        b,
        "<h2>Against {}</h2><p class=\"sub\">Each report column against {}: the runs as points, the least-squares line dashed, its slope ± standard error. A slope within two standard errors of zero is not told apart from none; one with no scatter is set by the run, not measured.</p>",
        esc(var),
        esc(var)
    );
    let xs: Vec<Option<f64>> = rows.iter().map(|r| r.first()?.parse().ok()).collect();
    for (i, title) in header.iter().enumerate().skip(1) {
        let Some(m) = sl["columns"][title].as_f64() else {
            continue;
        };
        let se = sl["standard_errors"][title].as_f64().unwrap_or(0.0);
        let judged = sl["judged"][title].as_str().unwrap_or("measured");
        let pts: Vec<(f64, f64)> = xs
            .iter()
            .zip(rows)
            .filter_map(|(x, r)| Some(((*x)?, r.get(i)?.parse().ok()?)))
            .collect();
        if pts.len() < 2 {
            continue;
        }
        let n = pts.len() as f64;
        let (mx, my) = (
            pts.iter().map(|p| p.0).sum::<f64>() / n,
            pts.iter().map(|p| p.1).sum::<f64>() / n,
        );
        let lo = pts.iter().map(|p| p.0).fold(f64::MAX, f64::min);
        let hi = pts.iter().map(|p| p.0).fold(f64::MIN, f64::max);
        let fit = |x: f64| my + m * (x - mx);
        let mut c = Chart::new(title.as_str(), XKind::Linear, var, title);
        c.push(Series::line("runs", pts.clone()).styled(Style::Points));
        c.push(
            Series::line("least squares", vec![(lo, fit(lo)), (hi, fit(hi))]).styled(Style::Dashed),
        );
        let said = match judged {
            "zero" => " — within its error of zero: not told apart from none",
            "exact" => " — no scatter: set by the run, not a measurement",
            _ => "",
        };
        let _ = writeln!(
            b,
            "<p><b>{}</b>: {:+.3} ± {:.3} per {}{}</p>{}",
            esc(title),
            m,
            se,
            esc(var),
            said,
            chart::render(&c)
        );
    }
}
