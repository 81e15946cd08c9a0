//! Thresholds: `p99(transaction) < 500ms`, `errors.rate < 0.1%`, `verify.missing == 0`.
//!
//! A metric is either a statistic of a phase (`p50 p90 p95 p99 p999 min max mean count`, read
//! from summary.json's `phases`) or a dotted path into the JSON files of a step's results
//! directory: `a.b.c` is `b.c` of `a.json` when that file exists, else `a.b.c` of
//! summary.json. So files and fields that commands add later work without changes here.
//! Derived metrics: `errors.rate` (messages attempted but not accepted, as a fraction),
//! `errors.count` (the sum of summary.json's error rows) and `errors.code.N` (the rows
//! with reply code N, e.g. `errors.code.451`).
//! The unit of a limit must fit the metric: durations for phase statistics and for fields
//! ending in `_us`/`_ms`/`_s`, `%` for rates and `_pct` fields; `k`/`M`/`G` anywhere else.
//!
//! A threshold that ends in `abort` (or `abort after 30s`) is also watched while the run
//! goes, on its figures so far, every interval: the first time it fails (not before the
//! grace), the run stops as after SIGTERM. Only what summary.json holds can be watched.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::doc::suggest;
use crate::metrics::{Counters, Phase};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl Op {
    const ALL: [(&'static str, Op); 6] = [
        ("<=", Op::Le),
        (">=", Op::Ge),
        ("==", Op::Eq),
        ("!=", Op::Ne),
        ("<", Op::Lt),
        (">", Op::Gt),
    ];

    fn symbol(self) -> &'static str {
        Op::ALL
            .iter()
            .find(|(_, o)| *o == self)
            .map_or("?", |(s, _)| s)
    }

    fn holds(self, value: f64, limit: f64) -> bool {
        // Equality on measured floats with a little tolerance for rounding in JSON.
        let eq = (value - limit).abs() <= 1e-9 * limit.abs().max(1.0);
        match self {
            Op::Lt => value < limit && !eq,
            Op::Le => value <= limit || eq,
            Op::Gt => value > limit && !eq,
            Op::Ge => value >= limit || eq,
            Op::Eq => eq,
            Op::Ne => !eq,
        }
    }
}

const STATS: [(&str, &str); 9] = [
    ("p50", "p50_us"),
    ("p90", "p90_us"),
    ("p95", "p95_us"),
    ("p99", "p99_us"),
    ("p999", "p999_us"),
    ("min", "min_us"),
    ("max", "max_us"),
    ("mean", "mean_us"),
    ("count", "count"),
];

/// Numeric top-level fields of summary.json a one-word metric may name.
const SUMMARY_FIELDS: [&str; 9] = [
    "elapsed_s",
    "messages_per_s",
    "kbytes_per_s",
    "generator_cpu_s",
    "generator_cpu_pct",
    "cores",
    "complete",
    "interrupted",
    "reconciles",
];

/// How the metric's number is to be read.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Unit {
    /// A duration expressed in µs, ms or s (the factor to µs).
    Time(f64),
    /// A fraction (0.001 = 0.1 %).
    Ratio,
    /// Already a percentage.
    Percent,
    Plain,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub text: String,
    /// `Some("p99_us")` for a phase statistic; the path is then the phase (maybe prefixed).
    stat: Option<(&'static str, &'static str)>,
    pub path: Vec<String>,
    op: Op,
    limit: f64,
    /// The limit's own unit, to print the measured value the same way.
    shown: &'static str,
    /// `abort` (after this grace): stop the run the first time the check fails.
    pub abort: Option<Duration>,
}

/// Where a check reads its figures: a results directory, or a run's summary so far.
#[derive(Clone, Copy)]
pub enum Source<'a> {
    Dir(&'a Path),
    Summary(&'a Value),
}

/// What a check found.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verdict {
    pub threshold: String,
    pub value: Option<f64>,
    pub shown: String,
    pub pass: bool,
    pub message: String,
}

impl Check {
    pub fn parse(text: &str) -> Result<Check, String> {
        let full = text;
        let (text, abort) = abort_clause(full)?;
        let (pos, sym, op) = Op::ALL
            .iter()
            .filter_map(|(s, o)| text.find(s).map(|p| (p, *s, *o)))
            .min_by_key(|(p, s, _)| (*p, std::cmp::Reverse(s.len())))
            .ok_or_else(|| {
                format!(
                    "threshold '{text}': expected METRIC OP LIMIT, e.g. p99(transaction) < 500ms"
                )
            })?;
        let metric = text[..pos].trim();
        let limit_text = text[pos + sym.len()..].trim();
        let (stat, inner) = match metric.split_once('(') {
            Some((f, rest)) => {
                let inner = rest.strip_suffix(')').ok_or_else(|| {
                    format!("threshold '{text}': expected ')' at the end of '{metric}'")
                })?;
                let stat = STATS
                    .iter()
                    .find(|(n, _)| *n == f.trim())
                    .copied()
                    .ok_or_else(|| {
                        format!(
                            "threshold '{text}': unknown statistic '{}'{}",
                            f.trim(),
                            suggest(f.trim(), STATS.iter().map(|(n, _)| *n))
                        )
                    })?;
                (Some(stat), inner.trim())
            }
            None => (None, metric),
        };
        let path: Vec<String> = inner.split('.').map(|s| s.trim().to_string()).collect();
        if path.iter().any(|s| {
            s.is_empty()
                || !s
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        }) {
            return Err(format!(
                "threshold '{text}': bad metric '{metric}' (expected e.g. p99(transaction), errors.rate, verify.missing)"
            ));
        }
        let mut check = Check {
            text: full.trim().to_string(),
            stat,
            path,
            op,
            limit: 0.0,
            shown: "",
            abort,
        };
        let (limit, shown) = check.parse_limit(limit_text)?;
        check.limit = limit;
        check.shown = shown;
        Ok(check)
    }

    fn unit(&self) -> Unit {
        if let Some((name, _)) = self.stat {
            return if name == "count" {
                Unit::Plain
            } else {
                Unit::Time(1.0)
            };
        }
        let last = self.path.last().map_or("", String::as_str);
        let n = self.path.len();
        if n >= 2 && self.path[n - 2] == "errors" && last == "rate" {
            Unit::Ratio
        } else if last.ends_with("_us") {
            Unit::Time(1.0)
        } else if last.ends_with("_ms") {
            Unit::Time(1e3)
        } else if last.ends_with("_s") && !last.ends_with("per_s") {
            Unit::Time(1e6)
        } else if last.ends_with("_pct") {
            Unit::Percent
        } else {
            Unit::Plain
        }
    }

    /// The limit in the metric's own unit, and the unit to show values in.
    fn parse_limit(&self, text: &str) -> Result<(f64, &'static str), String> {
        let split = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
            .unwrap_or(text.len());
        let (num, suffix) = (&text[..split], text[split..].trim());
        let bad = |why: &str| format!("threshold '{}': {why}", self.text);
        let n: f64 = num.parse().map_err(|_| {
            bad(&format!(
                "bad limit '{text}' (expected e.g. 500ms, 0.1%, 100, 10k)"
            ))
        })?;
        let time = match suffix {
            "us" | "µs" => Some(("us", 1.0)),
            "ms" => Some(("ms", 1e3)),
            "s" => Some(("s", 1e6)),
            "m" | "min" => Some(("min", 60e6)),
            "h" => Some(("h", 3600e6)),
            _ => None,
        };
        match (self.unit(), time, suffix) {
            (Unit::Time(f), Some((shown, us)), _) => Ok((n * us / f, shown)),
            (Unit::Time(_), None, _) => Err(bad(&format!(
                "'{}' is a duration: give the limit a unit (e.g. {}ms)",
                self.metric(),
                num
            ))),
            (_, Some(_), _) => Err(bad(&format!(
                "'{}' is not a duration, '{text}' is",
                self.metric()
            ))),
            (Unit::Ratio, None, "%") => Ok((n / 100.0, "%")),
            (Unit::Percent, None, "%" | "") => Ok((n, "%")),
            (Unit::Ratio | Unit::Plain, None, "") => Ok((n, "")),
            (Unit::Plain, None, "k") => Ok((n * 1e3, "")),
            (Unit::Plain, None, "M") => Ok((n * 1e6, "")),
            (Unit::Plain, None, "G") => Ok((n * 1e9, "")),
            // A metric that does not exist is the error to name, not its unit.
            _ => Err(self.check_static(&self.path).err().unwrap_or_else(|| {
                bad(&format!("unit '{suffix}' does not fit '{}'", self.metric()))
            })),
        }
    }

    /// The metric as written (left of the operator).
    pub fn metric(&self) -> String {
        match self.stat {
            Some((f, _)) => format!("{f}({})", self.path.join(".")),
            None => self.path.join("."),
        }
    }

    /// What can be checked before anything runs, on the path left after the step prefix.
    pub fn check_static(&self, rest: &[String]) -> Result<(), String> {
        let bad = |why: String| Err(format!("threshold '{}': {why}", self.text));
        if rest.is_empty() {
            return bad("no metric after the step name".into());
        }
        if self.stat.is_some() {
            let phase = rest.last().map_or("", String::as_str);
            let known = crate::session::all_phases();
            if Phase::find(&known, phase).is_none() {
                return bad(format!(
                    "unknown phase '{phase}'{}",
                    suggest(phase, known.iter().map(|p| p.name()))
                ));
            }
            if rest.len() > 2 {
                return bad("expected PHASE or PROTOCOL.PHASE inside the parentheses".into());
            }
            return Ok(());
        }
        match rest[0].as_str() {
            "errors"
                if !(rest.len() == 2 && (rest[1] == "rate" || rest[1] == "count")
                    || rest.len() == 3 && rest[1] == "code" && rest[2].parse::<u16>().is_ok()) =>
            {
                return bad(
                    "expected errors.rate, errors.count or errors.code.N (e.g. errors.code.451)"
                        .into(),
                );
            }
            "totals" => {
                let fields = counter_fields();
                if rest.len() != 2 || !fields.iter().any(|f| f == &rest[1]) {
                    let last = rest.last().map_or("", String::as_str);
                    return bad(format!(
                        "unknown totals field '{last}'{}",
                        suggest(last, fields.iter().map(String::as_str))
                    ));
                }
            }
            one if rest.len() == 1 && !SUMMARY_FIELDS.contains(&one) => {
                let all = SUMMARY_FIELDS
                    .iter()
                    .copied()
                    .chain(["errors.rate", "errors.count"]);
                return bad(format!("unknown metric '{one}'{}", suggest(one, all)));
            }
            // FILE.FIELD of a file that only exists after the run (verify.json, ...).
            _ => {}
        }
        Ok(())
    }

    /// Evaluates against a step's results directory; `rest` is the path after any step
    /// prefix, `command` the step's subcommand (an accepted prefix).
    pub fn evaluate(&self, dir: &Path, rest: &[String], command: &str) -> Verdict {
        self.judge(Source::Dir(dir), rest, command)
    }

    /// Evaluates against what `source` holds; `rest` and `command` as for [`Check::evaluate`].
    pub fn judge(&self, source: Source<'_>, rest: &[String], command: &str) -> Verdict {
        let found = self.value(source, rest, command);
        let (value, pass, message) = match found {
            Ok(v) => {
                let pass = self.op.holds(v, self.limit);
                let msg = format!(
                    "{} = {}, limit {} {}",
                    self.metric(),
                    self.show(v),
                    self.op.symbol(),
                    self.show(self.limit)
                );
                (Some(v), pass, msg)
            }
            Err(e) => (None, false, format!("{}: {e}", self.metric())),
        };
        Verdict {
            threshold: self.text.clone(),
            value,
            shown: value.map(|v| self.show(v)).unwrap_or_default(),
            pass,
            message,
        }
    }

    fn show(&self, v: f64) -> String {
        let num = |x: f64| {
            let s = format!("{x:.3}");
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        };
        match (self.unit(), self.shown) {
            (Unit::Time(f), _) => {
                let us = v * f;
                if us.abs() < 1e3 {
                    format!("{}us", num(us))
                } else if us.abs() < 1e6 {
                    format!("{}ms", num(us / 1e3))
                } else {
                    format!("{}s", num(us / 1e6))
                }
            }
            (Unit::Ratio, "%") => format!("{}%", num(v * 100.0)),
            (Unit::Percent, _) => format!("{}%", num(v)),
            _ => num(v),
        }
    }

    /// The limit, in the units of the value a verdict reads (µs, a fraction).
    pub fn limit(&self) -> f64 {
        self.limit
    }

    /// The phase a phase statistic reads (`send` of `p95(send)`), None for other metrics.
    pub fn phase_name(&self) -> Option<&str> {
        self.stat?;
        self.path.last().map(String::as_str)
    }

    /// What the check measures, apart from its limit: `p95_us send`, `errors rate`.
    pub fn figure(&self) -> String {
        let stat = self.stat.map_or("", |s| s.1);
        format!("{stat} {}", self.path.join("."))
    }

    /// Whether the check can be watched while the run goes: its figure is in summary.json.
    /// The path without a leading command name (`smtp.messages_per_s`): what a load
    /// command's own rule reads. A phase statistic keeps its path (`p99(smtp.x)`).
    pub fn after_command(&self, command: &str) -> &[String] {
        match self.path.split_first() {
            Some((c, rest)) if c == command && !rest.is_empty() && self.stat.is_none() => rest,
            _ => &self.path[..],
        }
    }

    pub fn watchable(&self, command: &str) -> Result<(), String> {
        let path = self.after_command(command);
        let first = path[0].as_str();
        let in_summary = self.stat.is_some()
            || matches!(first, "errors" | "totals" | "extra")
            || path.len() == 1 && SUMMARY_FIELDS.contains(&first);
        if in_summary {
            Ok(())
        } else {
            Err(format!(
                "threshold '{}': '{}' is only known after the run, so it cannot abort it; watch a phase statistic, errors.*, totals.* or a summary figure",
                self.text,
                self.metric()
            ))
        }
    }

    fn value(&self, source: Source<'_>, rest: &[String], command: &str) -> Result<f64, String> {
        let dir = match source {
            Source::Dir(d) => d,
            Source::Summary(_) => Path::new(""),
        };
        let summary = || match source {
            Source::Dir(d) => read_json(&d.join("summary.json")),
            Source::Summary(v) => Ok(v.clone()),
        };
        if let Some((_, field)) = self.stat {
            let s = summary()?;
            let phase = rest.last().map_or("", String::as_str);
            if rest.len() == 2 {
                let proto = s.get("protocol").and_then(Value::as_str).unwrap_or("");
                if rest[0] != command && rest[0] != proto {
                    return Err(format!(
                        "this step ran '{command}' (protocol '{proto}'), not '{}'",
                        rest[0]
                    ));
                }
            }
            let phases = s.get("phases").and_then(Value::as_array);
            let row = phases
                .into_iter()
                .flatten()
                .find(|p| p.get("phase").and_then(Value::as_str) == Some(phase))
                .ok_or_else(|| format!("no phase '{phase}' was measured in this step"))?;
            return number(row.get(field), field);
        }
        if rest.len() == 2 && rest[0] == "errors" {
            let s = summary()?;
            if rest[1] == "count" {
                let rows = s.get("errors").and_then(Value::as_array);
                return Ok(rows
                    .into_iter()
                    .flatten()
                    .filter_map(|r| r.get("count").and_then(Value::as_f64))
                    .sum());
            }
            let t = |k: &str| number(s.get("totals").and_then(|t| t.get(k)), k);
            let attempted = t("attempted")?;
            if attempted == 0.0 {
                return Err("no messages were attempted".into());
            }
            return Ok((t("rejected")? + t("failed")?) / attempted);
        }
        if rest.len() == 3 && rest[0] == "errors" && rest[1] == "code" {
            let code: u64 = rest[2]
                .parse()
                .map_err(|_| format!("'{}' is not a reply code", rest[2]))?;
            let s = summary()?;
            let rows = s.get("errors").and_then(Value::as_array);
            return Ok(rows
                .into_iter()
                .flatten()
                .filter(|r| r.get("code").and_then(Value::as_u64) == Some(code))
                .filter_map(|r| r.get("count").and_then(Value::as_f64))
                .sum());
        }
        let file = dir.join(format!("{}.json", rest[0]));
        if rest.len() > 1 && matches!(source, Source::Dir(_)) && file.is_file() {
            return lookup(&read_json(&file)?, &rest[1..], &file);
        }
        let s = summary()?;
        let whole = lookup(&s, rest, &dir.join("summary.json"));
        match whole {
            Err(_) if rest.len() > 1 && rest[0] == command => {
                lookup(&s, &rest[1..], &dir.join("summary.json"))
            }
            Err(_) if rest.len() > 1 => Err(format!(
                "no {} and no '{}' in {}",
                file.display(),
                rest.join("."),
                dir.join("summary.json").display()
            )),
            r => r,
        }
    }
}

/// A trailing `abort` or `abort after DURATION`: the text before it, and the grace.
fn abort_clause(text: &str) -> Result<(&str, Option<Duration>), String> {
    let at = text.match_indices("abort").map(|(i, _)| i).find(|&i| {
        let before = text[..i].chars().next_back();
        let after = text[i + 5..].chars().next();
        before.is_some_and(char::is_whitespace) && after.is_none_or(char::is_whitespace)
    });
    let Some(at) = at else {
        return Ok((text, None));
    };
    let rest = text[at + 5..].trim();
    let grace = match rest.strip_prefix("after") {
        _ if rest.is_empty() => Duration::ZERO,
        Some(d) if d.starts_with(char::is_whitespace) => crate::units::parse_duration(d.trim())
            .map_err(|e| format!("threshold '{}': abort after: {e}", text.trim()))?,
        _ => {
            return Err(format!(
                "threshold '{}': expected 'abort' or 'abort after DURATION' at the end, e.g. p99(response) < 500ms abort after 30s",
                text.trim()
            ))
        }
    };
    Ok((text[..at].trim_end(), Some(grace)))
}

/// The fields of a run's totals: the counters every protocol has and each protocol's own.
fn counter_fields() -> Vec<String> {
    let common = match serde_json::to_value(Counters::default()) {
        Ok(Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    };
    let own = crate::session::all_counters();
    common
        .into_iter()
        .chain(own.iter().map(|c| c.name().to_string()))
        .collect()
}

fn read_json(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Follows a dotted path; in an array a segment is an index (`rules.0.found`) or the value
/// of the element's naming field (`rules.receipt.found`, `phases.connect.p99_us`). Keys that
/// themselves contain dots (monitor columns such as `queue.postfix.active` in
/// `extra.monitor.max`) are found by joining segments when the single one is absent.
fn lookup(v: &Value, path: &[String], file: &Path) -> Result<f64, String> {
    let cur =
        walk(v, path).ok_or_else(|| format!("no '{}' in {}", path.join("."), file.display()))?;
    number(Some(cur), &path.join("."))
}

fn walk<'a>(cur: &'a Value, path: &[String]) -> Option<&'a Value> {
    let Some(seg) = path.first() else {
        return Some(cur);
    };
    match cur {
        Value::Array(items) => {
            let item = match seg.parse::<usize>() {
                Ok(i) => items.get(i),
                Err(_) => items.iter().find(|item| {
                    ["kind", "name", "phase", "title"]
                        .iter()
                        .any(|k| item.get(*k).and_then(Value::as_str) == Some(seg.as_str()))
                }),
            };
            walk(item?, &path[1..])
        }
        // The plain key first, then ever longer dotted keys (bounded by the path length).
        Value::Object(map) => (1..=path.len()).find_map(|n| {
            let key = path[..n].join(".");
            map.get(&key).and_then(|next| walk(next, &path[n..]))
        }),
        _ => None,
    }
}

fn number(v: Option<&Value>, what: &str) -> Result<f64, String> {
    match v {
        Some(Value::Number(n)) => n
            .as_f64()
            .ok_or_else(|| format!("'{what}' is not a number")),
        Some(Value::Bool(b)) => Ok(f64::from(u8::from(*b))),
        Some(other) => Err(format!("'{what}' is not a number: {other}")),
        None => Err(format!("no '{what}'")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(t: &str) -> Check {
        Check::parse(t).unwrap()
    }

    #[test]
    fn paths_index_arrays_by_position_or_name() {
        let v: Value = serde_json::json!({"rules": [
            {"kind": "bounce", "found": 3},
            {"kind": "receipt", "found": 7}
        ]});
        let p = |s: &str| s.split('.').map(String::from).collect::<Vec<_>>();
        let f = Path::new("verify.json");
        assert_eq!(lookup(&v, &p("rules.1.found"), f), Ok(7.0));
        assert_eq!(lookup(&v, &p("rules.bounce.found"), f), Ok(3.0));
        assert!(lookup(&v, &p("rules.2.found"), f).is_err());
        assert!(lookup(&v, &p("rules.notice.found"), f).is_err());
    }

    #[test]
    fn paths_find_keys_that_contain_dots() {
        let v: Value = serde_json::json!({"extra": {"monitor": {"max": {
            "queue.postfix.active": 39.0,
            "queue.postfix.incoming": 11.0,
            "proc.slapd.cpu_pct": 3.0,
            "queue": {"depth": 5}
        }}}});
        let p = |s: &str| s.split('.').map(String::from).collect::<Vec<_>>();
        let f = Path::new("summary.json");
        let at = |s: &str| lookup(&v, &p(s), f);
        assert_eq!(at("extra.monitor.max.queue.postfix.active"), Ok(39.0));
        assert_eq!(at("extra.monitor.max.queue.postfix.incoming"), Ok(11.0));
        assert_eq!(at("extra.monitor.max.proc.slapd.cpu_pct"), Ok(3.0));
        // A plain key still wins, and a key that exists nowhere is an error.
        assert_eq!(at("extra.monitor.max.queue.depth"), Ok(5.0));
        assert!(at("extra.monitor.max.queue.postfix.deferred").is_err());
        assert!(at("extra.monitor.max.proc.slapd").is_err());
    }

    #[test]
    fn an_unknown_metric_is_named_before_its_unit() {
        let e = Check::parse("error_rate < 1%").unwrap_err();
        assert!(e.contains("unknown metric 'error_rate'"), "{e}");
        assert!(!e.contains("does not fit"), "{e}");
        let e = Check::parse("errors.count < 1%").unwrap_err();
        assert!(e.contains("does not fit"), "{e}");
    }

    #[test]
    fn parses_limits_in_the_metric_unit() {
        assert_eq!(c("p99(transaction) < 500ms").limit, 500_000.0);
        assert_eq!(c("p99(smtp.transaction)<=2s").limit, 2_000_000.0);
        assert!((c("errors.rate < 0.1%").limit - 0.001).abs() < 1e-12);
        assert_eq!(c("verify.missing == 0").limit, 0.0);
        assert_eq!(c("messages_per_s > 1.5k").limit, 1500.0);
        assert_eq!(c("wait.drain_s < 2m").limit, 120.0);
        assert_eq!(c("generator_cpu_pct < 50%").limit, 50.0);
        assert_eq!(c("count(transaction) >= 10").limit, 10.0);
        assert_eq!(c("x.y >= 1").op, Op::Ge);
    }

    #[test]
    fn rejects_what_cannot_be_meant() {
        let e = Check::parse("p99(transaction) < 500").unwrap_err();
        assert!(e.contains("give the limit a unit"), "{e}");
        let e = Check::parse("pp99(transaction) < 5ms").unwrap_err();
        assert!(
            e.contains("unknown statistic 'pp99'; did you mean \"p99\"?"),
            "{e}"
        );
        let e = Check::parse("messages_per_s > 3s").unwrap_err();
        assert!(e.contains("not a duration"), "{e}");
        assert!(Check::parse("p99(transaction)").is_err());
        assert!(Check::parse("errors.rate < lots").is_err());
        assert!(Check::parse("a..b < 1").is_err());
        let rest = |t: &str| c(t).path.clone();
        let k = c("p99(transacton) < 1ms");
        let e = k.check_static(&rest("p99(transacton) < 1ms")).unwrap_err();
        assert!(e.contains("did you mean \"transaction\""), "{e}");
        let k = c("messages_per_sec > 1");
        let e = k.check_static(&k.path).unwrap_err();
        assert!(e.contains("did you mean \"messages_per_s\""), "{e}");
        let k = c("totals.acepted > 1");
        assert!(k.check_static(&k.path).unwrap_err().contains("accepted"));
        let k = c("verify.missing == 0");
        assert!(k.check_static(&k.path).is_ok());
    }

    #[test]
    fn abort_clauses_and_what_can_be_watched() {
        let k = c("p99(response) < 500ms abort");
        assert_eq!((k.abort, k.limit), (Some(Duration::ZERO), 500_000.0));
        assert_eq!(k.text, "p99(response) < 500ms abort");
        let k = c("errors.rate < 1% abort after 30s");
        assert_eq!(k.abort, Some(Duration::from_secs(30)));
        assert!((k.limit - 0.01).abs() < 1e-12);
        assert_eq!(c("errors.rate < 1%").abort, None);
        let e = Check::parse("errors.rate < 1% abort later").unwrap_err();
        assert!(e.contains("abort after DURATION"), "{e}");
        assert!(Check::parse("errors.rate < 1% abort after soon").is_err());
        // A metric called "aborted" is not an abort clause.
        assert_eq!(c("extra.aborted == 0").abort, None);
        assert!(c("p99(transaction) < 1s abort").watchable("smtp").is_ok());
        assert!(c("errors.rate < 1% abort").watchable("smtp").is_ok());
        assert!(c("smtp.messages_per_s > 5 abort").watchable("smtp").is_ok());
        let e = c("verify.missing == 0 abort")
            .watchable("smtp")
            .unwrap_err();
        assert!(e.contains("only known after the run"), "{e}");
    }

    #[test]
    fn judges_a_summary_so_far() {
        let s = serde_json::json!({"protocol":"smtp",
            "totals":{"attempted":10,"accepted":7,"rejected":2,"failed":1},
            "phases":[{"phase":"response","p99_us":900000,"count":10}]});
        let ev = |t: &str| {
            let k = c(t);
            k.judge(Source::Summary(&s), &k.path.clone(), "smtp")
        };
        assert!(!ev("p99(response) < 500ms abort").pass);
        assert!(ev("p99(response) < 1s abort").pass);
        assert_eq!(ev("errors.rate < 50%").shown, "30%");
        // No other file is read from a summary.
        assert!(ev("verify.missing == 0").value.is_none());
    }

    #[test]
    fn evaluates_against_json_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("summary.json"),
            r#"{"protocol":"smtp","messages_per_s":250.0,
                "totals":{"attempted":1000,"accepted":998,"rejected":1,"failed":1},
                "errors":[{"code":451,"count":2}],
                "phases":[{"phase":"transaction","p99_us":712000,"count":1000}]}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("verify.json"),
            r#"{"missing":0,"late":{"n":3}}"#,
        )
        .unwrap();
        let ev = |t: &str| {
            let k = c(t);
            k.evaluate(dir.path(), &k.path.clone(), "smtp")
        };
        let v = ev("p99(smtp.transaction) < 500ms");
        assert!(!v.pass);
        assert_eq!(v.message, "p99(smtp.transaction) = 712ms, limit < 500ms");
        assert!(ev("p99(transaction) < 1s").pass);
        assert!(!ev("p99(imap.transaction) < 1s").pass);
        assert!(ev("errors.rate <= 0.2%").pass);
        assert!(!ev("errors.rate < 0.1%").pass);
        assert_eq!(ev("errors.rate < 0.1%").shown, "0.2%");
        assert!(ev("errors.count == 2").pass);
        assert!(ev("errors.code.451 == 2").pass);
        assert!(ev("errors.code.554 == 0").pass);
        let k = c("errors.code.451 > 0");
        assert!(k.check_static(&k.path).is_ok());
        let k = c("errors.code.abc > 0");
        assert!(k.check_static(&k.path).is_err());
        assert!(ev("verify.missing == 0").pass);
        assert!(ev("verify.late.n == 3").pass);
        assert!(ev("messages_per_s > 100").pass);
        assert!(ev("smtp.messages_per_s > 100").pass);
        assert!(ev("totals.accepted >= 998").pass);
        let v = ev("p99(starttls) < 1s");
        assert!(
            !v.pass && v.message.contains("no phase 'starttls'"),
            "{}",
            v.message
        );
        let v = ev("verify.absent == 0");
        assert!(
            !v.pass && v.message.contains("no 'absent'"),
            "{}",
            v.message
        );
    }
}
