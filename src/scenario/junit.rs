//! `spate run --junit FILE`: a scenario's outcome as JUnit XML, which GitLab, Jenkins and
//! GitHub's test reporters read: one test case per step (failed, skipped, or passed) and per
//! threshold (a step's and the scenario's), a failure carrying the measured value and the
//! limit. Made from scenario.json, so it says exactly what the run recorded.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

/// Writes FILE from the scenario.json of each run (one test suite each): `(name, doc)`.
/// `title` names the whole (`spate run`, `spate smtp`). A step that has a `case` field is
/// a case of that name, and its thresholds are named without the step's.
pub fn write(file: &Path, title: &str, runs: &[(String, Value)]) -> std::io::Result<()> {
    crate::results::write_atomic(file, render(title, runs).as_bytes())
}

struct Case {
    name: String,
    time: f64,
    /// What the case measured, as `<system-out>` (a find-max answer).
    out: Option<String>,
    /// (message, details) when it failed.
    failure: Option<(String, String)>,
    skipped: Option<String>,
}

fn cases(doc: &Value) -> Vec<Case> {
    let mut out = Vec::new();
    let empty = Vec::new();
    for (i, s) in doc["steps"].as_array().unwrap_or(&empty).iter().enumerate() {
        let name = s["name"].as_str().unwrap_or("?");
        let status = s["status"].as_str().unwrap_or("?");
        let failure = (status != "ok" && status != "skipped").then(|| {
            let why = s["error"].as_str().map_or_else(
                || format!("step {status}, exit {}", s["exit"]),
                |e| format!("step {status}: {e}"),
            );
            (why, format!("results: {}", s["dir"].as_str().unwrap_or("")))
        });
        let own = s["case"].as_str();
        out.push(Case {
            name: own.map_or_else(|| format!("step {:02} {name}", i + 1), str::to_string),
            time: s["elapsed_s"].as_f64().unwrap_or(0.0),
            out: s["out"].as_str().map(str::to_string),
            failure,
            skipped: (status == "skipped")
                .then(|| "not run: an earlier step failed or the run was stopped".to_string()),
        });
        let prefix = match own {
            Some(_) => String::new(),
            None => format!("step {name}: "),
        };
        for t in s["thresholds"].as_array().unwrap_or(&empty) {
            out.push(threshold(&prefix, t));
        }
    }
    for t in doc["thresholds"].as_array().unwrap_or(&empty) {
        out.push(threshold("", t));
    }
    out
}

fn threshold(prefix: &str, t: &Value) -> Case {
    let text = t["threshold"].as_str().unwrap_or("?");
    let message = t["message"].as_str().unwrap_or("").to_string();
    Case {
        name: format!("{prefix}threshold {text}"),
        time: 0.0,
        out: None,
        failure: (t["pass"] != true).then(|| (message.clone(), message)),
        skipped: None,
    }
}

fn render(title: &str, runs: &[(String, Value)]) -> String {
    let suites: Vec<(&str, &Value, Vec<Case>)> = runs
        .iter()
        .map(|(name, doc)| (name.as_str(), doc, cases(doc)))
        .collect();
    let count = |f: &dyn Fn(&Case) -> bool| -> usize {
        suites
            .iter()
            .map(|s| s.2.iter().filter(|c| f(c)).count())
            .sum()
    };
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        x,
        "<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" time=\"{:.3}\">",
        esc(title),
        count(&|_| true),
        count(&|c| c.failure.is_some()),
        count(&|c| c.skipped.is_some()),
        suites.iter().map(|s| s.1["elapsed_s"].as_f64().unwrap_or(0.0)).sum::<f64>()
    );
    let host = hostname();
    for (name, doc, cases) in &suites {
        let _ = writeln!(
            x,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\" time=\"{:.3}\" timestamp=\"{}\" hostname=\"{}\">",
            esc(name),
            cases.len(),
            cases.iter().filter(|c| c.failure.is_some()).count(),
            cases.iter().filter(|c| c.skipped.is_some()).count(),
            doc["elapsed_s"].as_f64().unwrap_or(0.0),
            esc(doc["started_at"].as_str().unwrap_or("")),
            esc(&host)
        );
        if let Some(props) = doc["properties"].as_object().filter(|p| !p.is_empty()) {
            x.push_str("    <properties>\n");
            for (k, v) in props {
                let v = v.as_str().map_or_else(|| v.to_string(), str::to_string);
                let _ = writeln!(
                    x,
                    "      <property name=\"{}\" value=\"{}\"/>",
                    esc(k),
                    esc(&v)
                );
            }
            x.push_str("    </properties>\n");
        }
        for c in cases {
            let _ = write!(
                x,
                "    <testcase classname=\"spate.{}\" name=\"{}\" time=\"{:.3}\"",
                esc(name),
                esc(&c.name),
                c.time
            );
            match (&c.failure, &c.skipped) {
                (Some((m, d)), _) => {
                    let _ = writeln!(
                        x,
                        ">\n      <failure message=\"{}\" type=\"threshold\">{}</failure>\n    </testcase>",
                        esc(m),
                        esc(d)
                    );
                }
                (None, Some(why)) => {
                    let _ = writeln!(
                        x,
                        ">\n      <skipped message=\"{}\"/>\n    </testcase>",
                        esc(why)
                    );
                }
                (None, None) => match &c.out {
                    Some(out) => {
                        let _ = writeln!(
                            x,
                            ">\n      <system-out>{}</system-out>\n    </testcase>",
                            esc(out)
                        );
                    }
                    None => x.push_str("/>\n"),
                },
            }
        }
        x.push_str("  </testsuite>\n");
    }
    x.push_str("</testsuites>\n");
    x
}

/// This machine's name, for the suites' `hostname` (JUnit's schema requires it).
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// XML's five escapes, and control characters (not allowed in XML 1.0) as spaces.
fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\t') => o.push(' '),
            c => o.push(c),
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_thresholds_become_cases_and_text_is_escaped() {
        let doc = serde_json::json!({
            "elapsed_s": 3.5,
            "started_at": "2026-01-01T00:00:00Z",
            "steps": [
                {"name": "load", "status": "ok", "elapsed_s": 3.0, "exit": 0, "dir": "d/01",
                 "thresholds": [{"threshold": "p99(transaction) < 1ms", "pass": false,
                                 "message": "p99(transaction) = 4ms, limit < 1ms"}]},
                {"name": "check", "status": "failed", "elapsed_s": 0.5, "exit": 1,
                 "error": "exit 1 & <more>", "dir": "d/02", "thresholds": []},
                {"name": "late", "status": "skipped", "elapsed_s": 0.0, "thresholds": []},
            ],
            "thresholds": [{"threshold": "a.b == 0", "pass": true, "message": "a.b = 0"}],
        });
        let x = render("spate run", &[("s".into(), doc)]);
        assert!(
            x.contains("tests=\"5\" failures=\"2\" errors=\"0\" skipped=\"1\""),
            "{x}"
        );
        assert!(x.contains("name=\"step 01 load\""), "{x}");
        assert!(
            x.contains("message=\"p99(transaction) = 4ms, limit &lt; 1ms\""),
            "{x}"
        );
        assert!(x.contains("step failed: exit 1 &amp; &lt;more&gt;"), "{x}");
        assert!(x.contains("<skipped message="), "{x}");
        assert!(
            x.contains("name=\"threshold a.b == 0\" time=\"0.000\"/>"),
            "{x}"
        );
    }
}
