//! `spate sweep --junit FILE`: a test case per step with the --threshold rules its command
//! was given (read from each step's thresholds.json), or for `--find-max` a case for the
//! answer and one per objective rule as the hold (or the last passing probe) measured it.

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use super::find_max::Found;
use crate::sweep::Row;

/// A step's verdicts, as its command wrote them (none when it was given no --threshold).
fn thresholds(dir: &Path, row: &Row) -> Vec<Value> {
    let file = dir.join(&row.dir).join("thresholds.json");
    std::fs::read_to_string(file)
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|d| d["thresholds"].as_array().cloned())
        .unwrap_or_default()
}

/// Whether a step broke one of its --threshold rules.
pub fn broken(dir: &Path, rows: &[Row]) -> bool {
    rows.iter()
        .flat_map(|r| thresholds(dir, r))
        .any(|v| v["pass"] != true)
}

pub fn write(
    file: &Path,
    dir: &Path,
    rows: &[Row],
    found: Option<&Found>,
    elapsed: Duration,
) -> anyhow::Result<()> {
    let steps: Vec<Value> = match found {
        Some(f) => vec![f.junit_step()],
        None => rows
            .iter()
            .map(|r| {
                json!({
                    "name": r.dir,
                    "case": format!("{} {}={} repeat {}", r.dir, r.param, r.value, r.repeat),
                    "status": "ok",
                    "elapsed_s": r.test_time_s,
                    "thresholds": thresholds(dir, r),
                })
            })
            .collect(),
    };
    let started = chrono::DateTime::<chrono::Local>::from(std::time::SystemTime::now() - elapsed)
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, false);
    let mut doc = json!({
        "elapsed_s": elapsed.as_secs_f64(),
        "started_at": started,
        "steps": steps,
    });
    if let Some(f) = found {
        doc["properties"] = json!({
            "find_max_param": f.json["param"],
            "find_max_answer": f.json["answer"],
            "find_max_highest_pass": f.json["highest_pass"],
            "find_max_lowest_fail": f.json["lowest_fail"],
            "find_max_held": f.json["held"],
        });
    }
    crate::scenario::junit::write(file, "spate sweep", &[("sweep".to_string(), doc)])
        .map_err(|e| anyhow::anyhow!("--junit {}: {e}", file.display()))
}
