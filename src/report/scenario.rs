//! The page of a scenario run (`spate run FILE` without `[matrix]`): whether it passed
//! and, if not, why in one line at the top — a step that failed, or the scenario's
//! thresholds that broke (exit 99) — then its steps with their status and a link to each
//! step's own report, its thresholds with value and verdict, and its report columns.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::chart::escape as esc;

/// Whether `dir` holds one scenario run (a matrix's top directory is a matrix instead).
pub fn is_scenario(dir: &Path) -> bool {
    dir.join("scenario.json").is_file() && !super::matrix::is_matrix(dir)
}

/// The scenario page of `dir`.
pub fn render_scenario(dir: &Path) -> anyhow::Result<String> {
    let doc: Value = serde_json::from_slice(&std::fs::read(dir.join("scenario.json"))?)?;
    let file = doc["file"].as_str().unwrap_or("scenario");
    let title = format!("spate: scenario {file}");
    let steps = doc["steps"].as_array().cloned().unwrap_or_default();
    let thresholds = doc["thresholds"].as_array().cloned().unwrap_or_default();
    let broken = |list: &[Value]| list.iter().filter(|t| t["pass"] == false).count();
    let failed_steps: Vec<&str> = steps
        .iter()
        .filter(|s| !matches!(s["status"].as_str(), Some("ok" | "background" | "skipped")))
        .filter_map(|s| s["name"].as_str())
        .collect();
    let step_thresholds_broken: usize = steps
        .iter()
        .map(|s| broken(s["thresholds"].as_array().map_or(&[][..], Vec::as_slice)))
        .sum();
    let status = match (doc["complete"].as_bool(), doc["exit"].as_u64()) {
        (Some(false), _) | (None, _) | (_, None) => {
            "<span class=\"warn\">INCOMPLETE: the scenario did not finish (stopped hard): the steps below are those it recorded</span>".to_string()
        }
        (_, Some(0)) => format!(
            "<span class=\"ok\">PASSED: every step ran, {} scenario threshold(s) held</span>",
            thresholds.len()
        ),
        (_, Some(n)) if n == u64::from(crate::THRESHOLDS_FAILED) => format!(
            "<span class=\"warn\">THRESHOLDS FAILED (exit 99): every step ran, {} of {} scenario threshold(s) and {} step threshold(s) broke</span>",
            broken(&thresholds),
            thresholds.len(),
            step_thresholds_broken
        ),
        (_, Some(n)) => format!(
            "<span class=\"warn\">FAILED (exit {n}){}</span>",
            if failed_steps.is_empty() {
                String::new()
            } else {
                format!(": step {} did not succeed", failed_steps.join(", "))
            }
        ),
    };
    let mut b = String::new();
    let _ = writeln!(
        b,
        "<h1>{}</h1><div class=\"sub\">{} — started {}, {:.1} s</div>",
        esc(&title),
        status,
        esc(doc["started_at"].as_str().unwrap_or("?")),
        doc["elapsed_s"].as_f64().unwrap_or(0.0)
    );
    b.push_str("<h2>Steps</h2><div class=\"wide\"><table><tr><th>#</th><th>step</th><th>kind</th><th>status</th><th>seconds</th><th>thresholds</th><th>report</th></tr>");
    for (i, s) in steps.iter().enumerate() {
        let status = s["status"].as_str().unwrap_or("?");
        let class = if matches!(status, "ok" | "background" | "skipped") {
            "ok"
        } else {
            "warn"
        };
        let why = s["error"]
            .as_str()
            .map(|e| format!(" — {}", esc(e)))
            .unwrap_or_default();
        let own = s["thresholds"].as_array().map_or(&[][..], Vec::as_slice);
        let held = if own.is_empty() {
            String::new()
        } else {
            format!("{} of {} held", own.len() - broken(own), own.len())
        };
        let step_dir = s["dir"].as_str().map(Path::new);
        let link = step_dir
            .filter(|d| d.join("report.html").is_file())
            .and_then(|d| d.file_name())
            .map(|name| {
                let name = name.to_string_lossy();
                format!("<a href=\"{}/report.html\">{}</a>", esc(&name), esc(&name))
            })
            .unwrap_or_default();
        let _ = write!(
            b,
            "<tr><td>{:02}</td><td>{}</td><td>{}</td><td class=\"{class}\">{}{why}</td><td>{:.1}</td><td>{held}</td><td>{link}</td></tr>",
            i + 1,
            esc(s["name"].as_str().unwrap_or("?")),
            esc(s["kind"].as_str().unwrap_or("")),
            esc(status),
            s["elapsed_s"].as_f64().unwrap_or(0.0),
        );
    }
    b.push_str("</table></div>\n");
    let all: Vec<&Value> = thresholds
        .iter()
        .chain(
            steps
                .iter()
                .flat_map(|s| s["thresholds"].as_array().into_iter().flatten()),
        )
        .collect();
    if !all.is_empty() {
        b.push_str(
            "<h2>Thresholds</h2><table><tr><th>threshold</th><th>value</th><th>verdict</th></tr>",
        );
        for t in all {
            let pass = t["pass"] == true;
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{}</td><td class=\"{}\">{}</td></tr>",
                esc(t["threshold"].as_str().unwrap_or("?")),
                esc(t["shown"].as_str().unwrap_or("-")),
                if pass { "ok" } else { "warn" },
                if pass {
                    "held".to_string()
                } else {
                    format!("BROKE: {}", esc(t["message"].as_str().unwrap_or("")))
                }
            );
        }
        b.push_str("</table>\n");
    }
    if let Some(cols) = doc["report"].as_array().filter(|c| !c.is_empty()) {
        b.push_str("<h2>Report</h2><table><tr><th>column</th><th>value</th></tr>");
        for c in cols {
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{}</td></tr>",
                esc(c["title"].as_str().unwrap_or("?")),
                super::text::table_number(c["value"].as_f64())
            );
        }
        b.push_str("</table>\n");
    }
    Ok(super::html::page(&title, &b))
}
