//! `spate sweep --find-max rate|users --objective RULES`: the highest load that meets an
//! objective. The load doubles from --from until the objective fails, then the gap between
//! the highest load that passed and the lowest that failed is halved until it is within
//! --precision; the answer is then held for --hold to confirm it (a hold that fails counts
//! as a failure there, and the search goes on below). Every probe has the sweep's warm-up
//! first, not measured. A probe whose generator was the limit (`bound_by`) says nothing
//! about the server: it is run once more, and if it is again, it is the highest load this
//! generator can test, not a failure of the server.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde::Serialize;
use serde_json::{json, Value};

use super::{pause, run_step, step_args, Sheet, Sweep};
use crate::ctx::Ctx;
use crate::scenario::threshold::{Check, Verdict};
use crate::sweep::{Param, Row};
use crate::units;
use crate::UsageError;

/// The options of `--find-max`.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Find the highest load that meets an objective")]
pub struct FindArgs {
    /// Find the highest load that meets --objective instead of sweeping given values:
    /// `rate` (an open workload, units per second) or `users` (a closed one). The load
    /// doubles from --from until the objective fails, then is bisected between the last
    /// pass and the first failure to --precision, then held for --hold to confirm it.
    #[arg(
        long,
        value_name = "PARAM",
        value_parser = ["rate", "users"]
    )]
    pub find_max: Option<String>,
    /// What a probe must meet: rules as for --threshold, comma-separated or repeated,
    /// e.g. 'p99(response) < 500ms, errors.rate < 0.1%'. Judge latency on `response`
    /// (from each unit's scheduled start, waiting for a session or a connection
    /// included); with an open workload add 'totals.dropped == 0' when arrivals dropped
    /// for want of a free session (--max-in-flight) must fail a probe too.
    #[arg(long, value_name = "RULES")]
    pub objective: Vec<String>,
    /// The first load probed [default: rate 10, users 1].
    #[arg(long, value_name = "N")]
    pub from: Option<u64>,
    /// The highest load probed [default: rate 100000, users 10000].
    #[arg(long, value_name = "N")]
    pub up_to: Option<u64>,
    /// Bisect until the lowest failing load is within this share above the highest
    /// passing one (and at least 1 apart).
    #[arg(long, default_value = "10%", value_name = "PCT")]
    pub precision: String,
    /// Hold the answer this long to confirm it [default: three times a probe's
    /// --duration]; 0s: no hold.
    #[arg(long, value_name = "DURATION")]
    pub hold: Option<String>,
    /// At most this many probes, the hold included.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub max_probes: u32,
    /// With --find-max rate: a probe passes only when the offered load was carried, at
    /// most this share of its arrivals dropped (every session busy with the server and the
    /// backlog full); over it, the probe fails whatever the objective says.
    #[arg(long, default_value = "1%", value_name = "PCT")]
    pub carried: String,
}

pub use crate::sweep::search::{Outcome, Search};

/// One probe, as sweep.json's `find_max.probes` lists it.
#[derive(Debug, Clone, Serialize)]
struct Probe {
    n: u32,
    value: u64,
    /// "probe", "retry" (after a generator-bound probe) or "hold".
    kind: &'static str,
    outcome: Outcome,
    /// The run's own verdict: server, generator or undetermined.
    bound_by: String,
    why: String,
    throughput_per_s: f64,
    p99_ms: f64,
    errors: u64,
    dir: String,
    objective: Vec<Verdict>,
}

/// The settings, checked before the first probe.
pub struct Plan {
    pub param: Param,
    checks: Vec<Check>,
    search: Search,
    precision_pct: f64,
    hold: Duration,
    max_probes: u32,
    /// Rate probes: the share of arrivals that may be dropped or late.
    carried: f64,
}

impl Plan {
    pub fn name(&self) -> &'static str {
        match self.param {
            Param::Users => "users",
            _ => "rate",
        }
    }

    /// The first load probed.
    pub fn first(&self) -> u64 {
        self.search.from
    }
}

impl FindArgs {
    /// The swept parameter and the settings; None without --find-max. `probe` is a probe's
    /// own --duration, when the step command gives one.
    pub fn plan(&self, probe: Option<Duration>) -> anyhow::Result<Option<Plan>> {
        let Some(p) = &self.find_max else {
            if !self.objective.is_empty()
                || self.from.is_some()
                || self.up_to.is_some()
                || self.hold.is_some()
            {
                return crate::usage(
                    "--objective, --from, --up-to and --hold go with --find-max rate|users",
                );
            }
            return Ok(None);
        };
        let param = if p == "users" {
            Param::Users
        } else {
            Param::Rate
        };
        let rules: Vec<&str> = self
            .objective
            .iter()
            .flat_map(|o| o.split(','))
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .collect();
        if rules.is_empty() {
            return crate::usage(
                "--find-max needs --objective RULES, e.g. --objective 'p99(response) < 500ms, errors.rate < 0.1%'",
            );
        }
        let checks = rules
            .iter()
            .map(|r| {
                let c = Check::parse(r).map_err(UsageError)?;
                if c.abort.is_some() {
                    return Err(UsageError(format!(
                        "--objective '{r}': a probe is judged when it ends; drop 'abort'"
                    )));
                }
                c.check_static(&c.path).map_err(UsageError)?;
                Ok(c)
            })
            .collect::<Result<Vec<_>, _>>()?;
        let pct = self
            .precision
            .trim()
            .strip_suffix('%')
            .and_then(|n| n.trim().parse::<f64>().ok())
            .filter(|n| *n > 0.0 && *n < 100.0)
            .ok_or_else(|| {
                UsageError(format!(
                    "--precision {}: expected a share above 0 and below 100%, e.g. 10%",
                    self.precision
                ))
            })?;
        let (from, up_to) = match param {
            Param::Users => (self.from.unwrap_or(1), self.up_to.unwrap_or(10_000)),
            _ => (self.from.unwrap_or(10), self.up_to.unwrap_or(100_000)),
        };
        if from == 0 || up_to < from {
            return crate::usage(format!(
                "--from {from} --up-to {up_to}: expected 1 <= from <= up-to"
            ));
        }
        if self.max_probes < 2 {
            return crate::usage("--max-probes: at least 2");
        }
        let hold = match &self.hold {
            Some(h) => units::parse_duration(h)?,
            None => probe.unwrap_or(Duration::from_secs(10)) * 3,
        };
        let carried = self
            .carried
            .trim()
            .strip_suffix('%')
            .and_then(|n| n.trim().parse::<f64>().ok())
            .filter(|n| (0.0..100.0).contains(n))
            .ok_or_else(|| {
                UsageError(format!(
                    "--carried {}: expected a share from 0 to below 100%, e.g. 1%",
                    self.carried
                ))
            })?;
        Ok(Some(Plan {
            param,
            checks,
            search: Search::new(from, up_to, pct / 100.0),
            precision_pct: pct,
            hold,
            max_probes: self.max_probes,
            carried: carried / 100.0,
        }))
    }
}

/// What the search found: for sweep.json, the text, the exit status and --junit.
pub struct Found {
    pub json: Value,
    pub text: String,
    /// An answer that held (or was not asked to).
    pub ok: bool,
    pub interrupted: bool,
}

impl Found {
    /// The search as one JUnit case (failed without a confirmed answer) with the
    /// objective's rules as the last passing probe or the hold measured them.
    pub fn junit_step(&self) -> Value {
        let probes = self.json["probes"].as_array().cloned().unwrap_or_default();
        let last_pass = probes
            .iter()
            .rev()
            .find(|p| p["outcome"] == "pass")
            .or(probes.last());
        let name = self.json["param"].as_str().unwrap_or("load");
        let why = self
            .text
            .lines()
            .rev()
            .find(|l| !l.starts_with(' '))
            .unwrap_or("");
        json!({
            "name": format!("find-max {name}"),
            "case": format!("find-max {name}"),
            "status": if self.ok { "ok" } else { "failed" },
            "error": (!self.ok).then(|| why.to_string()),
            "elapsed_s": 0.0,
            "dir": last_pass.map(|p| p["dir"].clone()),
            "thresholds": last_pass.map(|p| p["objective"].clone()).unwrap_or(json!([])),
            "out": why,
        })
    }
}

/// Runs the search: each probe into `dir/probe-NN-PARAM-V` (the hold into
/// `hold-PARAM-V`), a row of sweep.csv each.
pub async fn run(
    plan: Plan,
    sw: &Sweep,
    args: &super::Args,
    dir: &Path,
    ctx: &Ctx,
    stop: &AtomicBool,
    sheet: &mut Sheet,
) -> anyhow::Result<Found> {
    let Plan {
        param,
        checks,
        mut search,
        precision_pct,
        hold,
        max_probes,
        carried,
    } = plan;
    let carried = (param == Param::Rate).then_some(carried);
    let name = sw.name.as_str();
    let unit = if param == Param::Rate { "/s" } else { "" };
    let mut probes: Vec<Probe> = Vec::new();
    let mut retried: Vec<u64> = Vec::new();
    let mut held: Option<u64> = None;
    let mut interrupted = false;
    let mut ran_out = false;
    loop {
        if probes.len() as u32 >= max_probes {
            ran_out = true;
            break;
        }
        let last = probes.last().map(|p| p.value);
        let Some((v, kind)) = next_step(&search, &retried, last, hold) else {
            break;
        };
        let n = probes.len() as u32 + 1;
        let step_name = step_name(kind, n, name, v);
        let step_dir = dir.join(&step_name);
        if let Some(cmd) = &args.before_step {
            super::hook(cmd, v, &step_dir, stop)?;
        }
        if stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        let mut a = step_args(&sw.base, param, v, args.count_per_user)?;
        if kind == "hold" {
            a.common().0.bounded_to(hold);
        }
        eprintln!("spate sweep: find-max {kind} {n}: {name}={v}{unit}");
        if !warm_up(sw, &a, &dir.join("warmup").join(&step_name), ctx, stop).await? {
            interrupted = true;
            break;
        }
        let (s, port) = run_step(a, step_dir.clone(), sw.progress, ctx).await?;
        let (probe, row) = judged(
            &s,
            (&checks, carried),
            (n, v, kind),
            (name, unit),
            (&step_dir, step_name),
        );
        let outcome = probe.outcome;
        probes.push(probe);
        sheet.add(row)?;
        if s.interrupted || stop.load(Ordering::Relaxed) {
            interrupted = true;
            break;
        }
        match (kind, outcome) {
            // The machine may have been busy: once more before it counts.
            ("probe", Outcome::Generator) if !retried.contains(&v) => retried.push(v),
            ("hold", Outcome::Pass) => {
                held = Some(v);
                break;
            }
            // A hold whose generator was the limit is this generator's limit; one that
            // fails is a failure there: either way the search goes on below it.
            ("hold", Outcome::Generator) => search.record(v, Outcome::Generator),
            ("hold", _) => search.record(v, Outcome::Fail),
            (_, o) => search.record(v, o),
        }
        if !pause(sw, args, port, stop).await {
            interrupted = true;
            break;
        }
    }
    let ended = Ended {
        held,
        interrupted,
        ran_out,
    };
    Ok(found(
        name,
        unit,
        (&search, &checks),
        (precision_pct, hold),
        ended,
        probes,
    ))
}

/// A probe's run judged by the objective: its record and its row of the sweep's table;
/// said on stderr.
fn judged(
    s: &crate::results::Summary,
    (checks, carried): (&[Check], Option<f64>),
    (n, v, kind): (u32, u64, &'static str),
    (name, unit): (&str, &str),
    (step_dir, step_name): (&Path, String),
) -> (Probe, Row) {
    let row = Row::from_summary(n as usize, name, v, 1, s, step_dir);
    let verdicts: Vec<Verdict> = checks
        .iter()
        .map(|c| c.evaluate(step_dir, &c.path, &s.protocol))
        .collect();
    let (outcome, why) = judge(s, &verdicts, carried);
    eprintln!(
        "spate sweep: {name}={v}{unit}: {} ({:.1}/s, p99 {:.2} ms){}",
        outcome.word(),
        row.throughput_per_s,
        row.latency_p99_ms,
        Some(&why)
            .filter(|w| !w.is_empty())
            .map_or(String::new(), |w| format!(": {w}"))
    );
    let bound_by = s
        .extra
        .get("bound_by")
        .and_then(|b| b["bound_by"].as_str())
        .unwrap_or("-")
        .to_string();
    let probe = Probe {
        n,
        value: v,
        kind,
        outcome,
        bound_by,
        why,
        throughput_per_s: row.throughput_per_s,
        p99_ms: row.latency_p99_ms,
        errors: row.errors,
        dir: step_name,
        objective: verdicts,
    };
    (probe, row)
}

/// A probe's results directory: `probe-03-users-40`, `hold-users-40`.
fn step_name(kind: &str, n: u32, name: &str, v: u64) -> String {
    let name = name.replace('_', "-");
    match kind {
        "hold" => format!("hold-{name}-{v}"),
        _ => format!("probe-{n:02}-{name}-{v}"),
    }
}

/// How a search ended.
struct Ended {
    held: Option<u64>,
    interrupted: bool,
    ran_out: bool,
}

/// The search's answer, as text and JSON.
fn found(
    name: &str,
    unit: &str,
    (search, checks): (&Search, &[Check]),
    (precision_pct, hold): (f64, Duration),
    Ended {
        held,
        interrupted,
        ran_out,
    }: Ended,
    probes: Vec<Probe>,
) -> Found {
    let best = search.best();
    let answer = if hold.is_zero() { best } else { held };
    let json = json!({
        "param": name,
        "objective": checks.iter().map(|c| c.text.clone()).collect::<Vec<_>>(),
        "from": search.from,
        "up_to": search.up_to,
        "precision_pct": precision_pct,
        "hold_s": hold.as_secs_f64(),
        "answer": answer,
        "highest_pass": best,
        "lowest_fail": search.fail,
        "generator_limit": search.generator,
        "held": held.is_some(),
        "ran_out_of_probes": ran_out,
        "interrupted": interrupted,
        "probes": probes,
    });
    let text = render(name, unit, &json, &probes);
    Found {
        ok: answer.is_some() && !interrupted,
        interrupted,
        text,
        json,
    }
}

/// The warm-up before a probe (--warm-up): false when it was interrupted.
async fn warm_up(
    sw: &Sweep,
    a: &super::Base,
    dir: &Path,
    ctx: &Ctx,
    stop: &AtomicBool,
) -> anyhow::Result<bool> {
    let Some(w) = sw.warm.filter(|w| !w.is_zero()) else {
        return Ok(true);
    };
    let mut wa = a.clone();
    wa.common().0.bounded_to(w);
    let (s, _) = run_step(wa, dir.to_path_buf(), false, ctx).await?;
    Ok(!s.interrupted && !stop.load(Ordering::Relaxed))
}

/// The next load to run and why: a probe the search asks for (a generator-bound one once
/// more, as a retry), then a hold at the best pass; `None` when the search is over.
fn next_step(
    search: &Search,
    retried: &[u64],
    last: Option<u64>,
    hold: Duration,
) -> Option<(u64, &'static str)> {
    match search.next() {
        Some(v) if retried.contains(&v) && last == Some(v) => Some((v, "retry")),
        Some(v) => Some((v, "probe")),
        None => search
            .best()
            .filter(|_| !hold.is_zero())
            .map(|b| (b, "hold")),
    }
}

/// A step's outcome and why: interrupted, the generator the limit, the offered load not
/// carried (`carried`: the share of a rate probe's arrivals that may be dropped or late),
/// the objective met or the rules it broke.
fn judge(
    s: &crate::results::Summary,
    verdicts: &[Verdict],
    carried: Option<f64>,
) -> (Outcome, String) {
    let bound = s.extra.get("bound_by");
    let t = &s.totals;
    let offered = t.attempted + t.dropped;
    // Dropped: the in-flight cap and the backlog were full, so the arrival never ran. (A
    // late one still ran: its wait is in `response`, which the objective judges.)
    let missed = t.dropped;
    if s.interrupted {
        (Outcome::Fail, "interrupted".to_string())
    } else if bound.is_some_and(|b| b["bound_by"] == "generator") {
        let why = bound.and_then(|b| b["why"].as_str()).unwrap_or("");
        (Outcome::Generator, format!("generator-bound: {why}"))
    } else {
        let mut broken: Vec<String> = Vec::new();
        if let Some(share) = carried.filter(|c| offered > 0 && missed as f64 > c * offered as f64) {
            broken.push(format!(
                "the offered load was not carried: of {offered} arrivals {} were dropped, every session busy ({:.1}%, over --carried {}%)",
                t.dropped,
                missed as f64 * 100.0 / offered as f64,
                share * 100.0
            ));
        }
        broken.extend(
            verdicts
                .iter()
                .filter(|v| !v.pass)
                .map(|v| v.message.clone()),
        );
        match broken.is_empty() {
            true => (Outcome::Pass, String::new()),
            false => (Outcome::Fail, broken.join("; ")),
        }
    }
}

/// The probe table and the answer, in words.
fn render(name: &str, unit: &str, j: &Value, probes: &[Probe]) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let objective: Vec<&str> = j["objective"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let _ = writeln!(o, "\nfind-max {name}: objective {}", objective.join(", "));
    let _ = writeln!(
        o,
        "  {:>3}  {:<6} {:>10}  {:<15} {:<12} {:>11} {:>10} {:>7}  why",
        "#", "kind", name, "result", "bound by", "throughput", "p99 ms", "errors"
    );
    for p in probes {
        let _ = writeln!(
            o,
            "  {:>3}  {:<6} {:>10}  {:<15} {:<12} {:>9.1}/s {:>10.2} {:>7}  {}",
            p.n,
            p.kind,
            format!("{}{unit}", p.value),
            p.outcome.word(),
            p.bound_by,
            p.throughput_per_s,
            p.p99_ms,
            p.errors,
            p.why
        );
    }
    let v = |k: &str| j[k].as_u64().map(|n| format!("{n}{unit}"));
    let fail = match (v("lowest_fail"), v("generator_limit")) {
        (Some(f), _) => format!("; {f} failed"),
        (None, Some(g)) => format!("; from {g} the generator was the limit, not the server: run it with --shard over several processes or hosts to go higher"),
        (None, None) => String::new(),
    };
    match (v("answer"), v("highest_pass")) {
        (Some(a), _) => {
            let held = if j["held"] == true {
                format!(
                    ", held for {}",
                    units::fmt_duration(Duration::from_secs_f64(
                        j["hold_s"].as_f64().unwrap_or(0.0)
                    ))
                )
            } else {
                String::new()
            };
            let top = if j["lowest_fail"].is_null() && j["generator_limit"].is_null() {
                " (the highest load tried: --up-to)"
            } else {
                ""
            };
            let _ = writeln!(
                o,
                "{} the objective: {a}{top}{held}{fail} (precision {}%)",
                if name == "users" {
                    "most users that meet"
                } else {
                    "highest rate that meets"
                },
                j["precision_pct"]
            );
        }
        (None, Some(b)) => {
            let _ = writeln!(
                o,
                "no {name} was confirmed: {b} passed as a probe but its hold did not{fail}"
            );
        }
        (None, None) => {
            let _ = writeln!(
                o,
                "no {name} met the objective, not even {}{}{fail}",
                j["from"].as_u64().map_or(1, |f| f
                    .min(probes.iter().map(|p| p.value).min().unwrap_or(f))),
                unit
            );
        }
    }
    if j["ran_out_of_probes"] == true {
        let _ = writeln!(
            o,
            "stopped after --max-probes probes: the answer is as close as they got"
        );
    }
    if j["interrupted"] == true {
        let _ = writeln!(o, "interrupted: the search did not finish");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the search against a server that passes up to `capacity`, and returns the
    /// answer and the loads probed.
    fn search(from: u64, up_to: u64, pct: f64, capacity: u64) -> (Option<u64>, Vec<u64>) {
        let mut s = Search::new(from, up_to, pct);
        let mut probed = Vec::new();
        while let Some(v) = s.next() {
            assert!(!probed.contains(&v), "{v} probed twice: {probed:?}");
            probed.push(v);
            let o = if v <= capacity {
                Outcome::Pass
            } else {
                Outcome::Fail
            };
            s.record(v, o);
            assert!(probed.len() < 60, "{probed:?}");
        }
        (s.best(), probed)
    }

    #[test]
    fn doubles_then_bisects_to_the_precision() {
        let (a, probed) = search(10, 100_000, 0.10, 400);
        assert_eq!(&probed[..7], &[10, 20, 40, 80, 160, 320, 640]);
        let a = a.unwrap();
        assert!(a <= 400 && 400 - a <= 40, "{a} {probed:?}");
        // Every answer is within the precision of the capacity, wherever it is.
        for cap in [1, 7, 10, 33, 99, 1000, 4321] {
            let (a, _) = search(10, 100_000, 0.10, cap);
            let a = a.unwrap_or(0);
            assert!(a <= cap, "{cap}: {a}");
            assert!(cap - a <= (a / 10).max(1), "{cap}: {a}");
        }
        // A load that meets it everywhere stops at --up-to.
        assert_eq!(search(10, 500, 0.10, 10_000).0, Some(500));
        // Nothing meets it.
        assert_eq!(search(10, 500, 0.10, 0).0, None);
    }

    #[test]
    fn a_generator_limit_is_no_failure_but_caps_the_search() {
        let mut s = Search::new(10, 100_000, 0.10);
        for (v, o) in [
            (10, Outcome::Pass),
            (20, Outcome::Pass),
            (40, Outcome::Generator),
        ] {
            assert_eq!(s.next(), Some(v));
            s.record(v, o);
        }
        assert_eq!(s.next(), Some(30));
        s.record(30, Outcome::Pass);
        assert_eq!(s.next(), Some(35));
        s.record(35, Outcome::Pass);
        assert_eq!(s.next(), Some(37));
        s.record(37, Outcome::Pass);
        assert_eq!((s.next(), s.best(), s.fail), (None, Some(37), None));
        // A hold that fails is a failure there: the search goes on below.
        s.record(37, Outcome::Fail);
        assert_eq!(s.best(), Some(35));
        assert_eq!(s.next(), None);
    }
}
