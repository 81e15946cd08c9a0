//! `spate merge`: the results directories of a run's shards made into one ordinary
//! results directory. Histograms add from the shards' HdrHistogram interval logs (never
//! from percentiles), counters add, intervals line up on wall-clock seconds, sent logs
//! concatenate; monitor series stay per shard. A shard that is missing, given twice, of
//! another run or plan, unfinished or truncated is named and nothing is merged.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use hdrhistogram::serialization::Deserializer;
use serde_json::Value;

use super::{Summary, Writer};
use crate::metrics::{Counters, Detail, ErrorKey, ErrorKind, ErrorStat, Phase, Shard};
use crate::results::ShardOf;
use crate::UsageError;

mod hlog;
mod late;
mod live;
use hlog::{check_values, hlog_buckets, HlogCursor};
pub use live::LiveMerge;

/// One shard's directory, read and checked.
struct Input {
    dir: PathBuf,
    plan: Value,
    summary: Summary,
    shard: ShardOf,
    started: SystemTime,
}

fn bad<T>(msg: String) -> anyhow::Result<T> {
    Err(UsageError(msg).into())
}

fn started_of(dir: &Path, s: &Summary) -> anyhow::Result<SystemTime> {
    let t = chrono::DateTime::parse_from_rfc3339(&s.started_at).map_err(|_| {
        UsageError(format!(
            "{}: summary.json has no valid started_at",
            dir.display()
        ))
    })?;
    Ok(SystemTime::UNIX_EPOCH + Duration::from_micros(t.timestamp_micros().max(0) as u64))
}

fn read_input(dir: &Path) -> anyhow::Result<Input> {
    if !dir.join("summary.json").is_file() || !dir.join("plan.json").is_file() {
        return bad(format!(
            "{}: not a results directory (no summary.json and plan.json)",
            dir.display()
        ));
    }
    let summary = Summary::read(dir).map_err(|e| UsageError(format!("{e:#}")))?;
    let plan: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("plan.json"))
            .map_err(|e| UsageError(format!("{}/plan.json: {e}", dir.display())))?,
    )
    .map_err(|e| UsageError(format!("{}/plan.json: {e}", dir.display())))?;
    let Some(shard) = workload(&plan)
        .get("shard")
        .and_then(|s| serde_json::from_value::<ShardOf>(s.clone()).ok())
    else {
        return bad(format!(
            "{}: not a shard (the run had no --shard)",
            dir.display()
        ));
    };
    let started = started_of(dir, &summary)?;
    Ok(Input {
        dir: dir.to_path_buf(),
        plan,
        summary,
        shard,
        started,
    })
}

/// Where two JSON values first differ: the dotted path and both values (`absent` for a
/// key only one has); None when they are equal.
fn first_json_difference(a: &Value, b: &Value) -> Option<(String, String, String)> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| {
                let absent = Value::String("absent".into());
                let (va, vb) = (x.get(k).unwrap_or(&absent), y.get(k).unwrap_or(&absent));
                first_json_difference(va, vb).map(|(p, l, r)| {
                    let path = if p.is_empty() {
                        k.clone()
                    } else {
                        format!("{k}.{p}")
                    };
                    (path, l, r)
                })
            })
        }
        (a, b) if a == b => None,
        (a, b) => Some((String::new(), a.to_string(), b.to_string())),
    }
}

/// Why shard `i` cannot be merged as a whole run's share: it did not finish (killed),
/// or a signal stopped it before its planned end.
fn unfinished(i: &Input) -> Option<String> {
    let (dir, s) = (i.dir.display(), &i.summary);
    let (index, count) = (i.shard.index, i.shard.count);
    if !s.complete {
        return Some(format!(
            "{dir}: shard {index}/{count} did not finish (its summary is incomplete: killed?)"
        ));
    }
    if s.interrupted {
        return Some(format!(
            "{dir}: shard {index}/{count} was interrupted ({}) before its planned end",
            s.interrupted_by.as_deref().unwrap_or("signal")
        ));
    }
    None
}

/// Whether every shard finished its writing after a `stop` from its live view or
/// `spate ctl`: stopped together, by hand, not cut short one by one.
fn stopped_together(inputs: &[Input]) -> bool {
    !inputs.is_empty()
        && inputs
            .iter()
            .all(|i| i.summary.complete && i.summary.interrupted_by.as_deref() == Some("control"))
}

/// A plan's workload fields: flattened into the plan, or under "workload".
fn workload(plan: &Value) -> &Value {
    plan.get("workload").unwrap_or(plan)
}

/// What must be the same in every shard's plan: everything but the shard's own share,
/// its output directory and its seed.
fn comparable(plan: &Value) -> Value {
    let mut p = plan.clone();
    if let Some(o) = p.as_object_mut() {
        // The workload's fields are the plan's own (flattened), or under "workload".
        for k in [
            "workload", "command", "seed", "run_id", "shard", "count", "model",
        ] {
            o.remove(k);
        }
    }
    // The options: a command's own, or under "common" (pop3 and imap share theirs).
    if let Some(args) = p.get_mut("args") {
        forget_own_options(args);
        if let Some(common) = args.get_mut("common") {
            forget_own_options(common);
        }
    }
    p
}

/// The options of `args` that are each shard's own: its share, where its results go,
/// its seed, where it serves its live metrics.
fn forget_own_options(args: &mut Value) {
    if let Some(w) = args.get_mut("workload").and_then(Value::as_object_mut) {
        w.remove("shard");
    }
    if let Some(o) = args.get_mut("output").and_then(Value::as_object_mut) {
        for k in [
            "out",
            "overwrite",
            "seed",
            "metrics_listen",
            "metrics_linger",
        ] {
            o.remove(k);
        }
    }
}

/// Checks that `inputs` are shards of one run, each once, and all of them unless
/// `partial`; returns the shards missing (`I/N`).
fn check(inputs: &mut [Input], partial: bool) -> anyhow::Result<Vec<String>> {
    let first = &inputs[0];
    let (run, n) = (first.summary.run_id.clone(), first.shard.count);
    let base = comparable(&first.plan);
    let mut by_index: BTreeMap<u32, &Path> = BTreeMap::new();
    for i in inputs.iter() {
        if i.summary.run_id != run {
            return bad(format!(
                "{}: run {}, but {} is run {run}: shards of different runs",
                i.dir.display(),
                i.summary.run_id,
                first.dir.display()
            ));
        }
        if i.shard.count != n {
            return bad(format!(
                "{}: shard {}/{}, but {} is one of {n}",
                i.dir.display(),
                i.shard.index,
                i.shard.count,
                first.dir.display()
            ));
        }
        if let Some(other) = by_index.insert(i.shard.index, &i.dir) {
            return bad(format!(
                "{} and {} are both shard {}/{n}",
                other.display(),
                i.dir.display(),
                i.shard.index
            ));
        }
        if let Some((at, here, there)) = first_json_difference(&comparable(&i.plan), &base) {
            return bad(format!(
                "{}: its plan differs from {}'s at {at} ({here} here, {there} there): not shards of one run",
                i.dir.display(),
                first.dir.display()
            ));
        }
    }
    let missing: Vec<String> = (0..n)
        .filter(|i| !by_index.contains_key(i))
        .map(|i| format!("{i}/{n}"))
        .collect();
    if !missing.is_empty() && !partial {
        return bad(format!(
            "run {run}: shard{} {} missing (--partial merges the others, marked partial)",
            if missing.len() > 1 { "s" } else { "" },
            missing.join(", ")
        ));
    }
    inputs.sort_by_key(|i| i.shard.index);
    Ok(missing)
}

/// One merged interval: what every shard counted in the second (or minute) that ends at
/// this key.
#[derive(Default)]
struct Bucket {
    iv: Shard,
    len_s: f64,
    /// The latest end of the shards' intervals in it (seconds after the earliest start).
    end_s: f64,
    active: i64,
}

/// The merged timeline: buckets by the whole second their intervals end in, counted
/// from the earliest start (shards started together end their intervals within
/// milliseconds of each other; a last, partial interval gets a bucket of its own).
struct Timeline {
    t0: SystemTime,
    buckets: BTreeMap<i64, Bucket>,
}

impl Timeline {
    /// The bucket of an interval of a shard started at `start` that runs from `from_s`
    /// to `end_s` seconds into it: the wall-clock second the interval starts in (to the
    /// nearest), so that a tick that came late (its interval ends past the second, the
    /// next one starts there) moves no interval into the next second; and its end on the
    /// merged clock.
    fn key(&self, start: SystemTime, from_s: f64, end_s: f64) -> (i64, f64) {
        let offset = start
            .duration_since(self.t0)
            .unwrap_or_default()
            .as_secs_f64();
        ((offset + from_s).round() as i64 + 1, offset + end_s)
    }

    fn at(&mut self, start: SystemTime, from_s: f64, end_s: f64) -> &mut Bucket {
        let (key, end) = self.key(start, from_s, end_s);
        let b = self.buckets.entry(key).or_default();
        b.end_s = b.end_s.max(end);
        b
    }
}

/// Adds intervals.csv of `i` to the timeline; the counters it accounts for.
/// Adds shard `i`'s intervals to the timeline; returns their sums and the columns the
/// file has (what can be checked against the shard's summary).
fn add_intervals(i: &Input, tl: &mut Timeline) -> anyhow::Result<(Counters, Vec<String>)> {
    let path = i.dir.join("intervals.csv");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap_or("").split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name);
    let (Some(t_col), Some(active_col)) = (col("t_s"), col("active")) else {
        return bad(format!("{}: not a spate intervals.csv", path.display()));
    };
    let counters = match serde_json::to_value(i.summary.totals) {
        Ok(Value::Object(m)) => m,
        _ => serde_json::Map::new(),
    };
    let mut total = Counters::default();
    let mut prev = 0.0;
    for (n, line) in lines.enumerate() {
        let f: Vec<&str> = line.split(',').collect();
        let truncated = || {
            UsageError(format!(
                "{}: line {} is truncated or corrupt",
                path.display(),
                n + 2
            ))
        };
        if f.len() != header.len() {
            return Err(truncated().into());
        }
        let t: f64 = f[t_col].parse().map_err(|_| truncated())?;
        // The counters by their names (those the shard's totals have); the other columns
        // (percentiles, which may be empty, the errors and sessions of the second) are
        // not counters and are left out.
        let map: serde_json::Map<String, Value> = header
            .iter()
            .zip(&f)
            .filter(|(h, _)| counters.contains_key(**h))
            .filter_map(|(h, v)| Some((h.to_string(), Value::from(v.parse::<u64>().ok()?))))
            .collect();
        let c: Counters = serde_json::from_value(Value::Object(map)).map_err(|_| truncated())?;
        let active: i64 = f[active_col].parse().map_err(|_| truncated())?;
        let b = tl.at(i.started, prev, t);
        b.iv.counters.add(&c);
        b.len_s = b.len_s.max(t - prev);
        b.active += active;
        total.add(&c);
        prev = t;
    }
    Ok((total, header.iter().map(|h| h.to_string()).collect()))
}

/// The first counter that intervals.csv holds (`columns`) whose sum differs from the
/// summary's total: its name and both values. Counters the file has no column for (the
/// summary's alone: SYN retransmits, SEARCH hits) are not compared.
fn first_difference(
    counted: &Counters,
    total: &Counters,
    columns: &[String],
) -> Option<(String, u64, u64)> {
    let (Ok(Value::Object(a)), Ok(Value::Object(b))) =
        (serde_json::to_value(counted), serde_json::to_value(total))
    else {
        return None;
    };
    columns.iter().find_map(|c| {
        let (x, y) = (a.get(c)?.as_u64()?, b.get(c)?.as_u64()?);
        (x != y).then(|| (c.clone(), x, y))
    })
}

/// Adds errors.jsonl of `i` to the timeline.
fn add_errors(i: &Input, tl: &mut Timeline) -> anyhow::Result<()> {
    let path = i.dir.join("errors.jsonl");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(());
    };
    // A phase named in errors.jsonl is one the shard's summary names (an error class or
    // a timed phase): anything else is corruption, not a new phase to keep.
    let declared: Vec<&str> = (i.summary.errors.iter().map(|e| e.phase.as_str()))
        .chain(i.summary.phases.iter().map(|p| p.phase.as_str()))
        .collect();
    let kinds: Vec<&str> = i.summary.errors.iter().map(|e| e.kind.as_str()).collect();
    for (k, line) in text.lines().enumerate() {
        let corrupt = || {
            UsageError(format!(
                "{}: line {} is truncated or corrupt",
                path.display(),
                k + 1
            ))
        };
        let v: Value = serde_json::from_str(line).map_err(|_| corrupt())?;
        let key = ErrorKey {
            phase: v["phase"]
                .as_str()
                .filter(|name| declared.contains(name))
                .map(Phase::named)
                .ok_or_else(corrupt)?,
            kind: v["kind"]
                .as_str()
                .filter(|name| kinds.contains(name))
                .map(ErrorKind::named)
                .ok_or_else(corrupt)?,
            code: v["code"].as_u64().unwrap_or(0) as u16,
            detail: v["enhanced"]
                .as_str()
                .and_then(|d| d.parse::<Detail>().ok()),
            text: v["text"].as_str().unwrap_or("").to_string(),
        };
        let t = v["t_s"].as_f64().ok_or_else(corrupt)?;
        // The interval's length (a run before spate wrote it: a second).
        let len = v["len_s"].as_f64().unwrap_or(1.0);
        let e = tl
            .at(i.started, (t - len).max(0.0), t)
            .iv
            .errors
            .entry(key)
            .or_insert_with(|| ErrorStat {
                count: 0,
                sample: v["sample"].as_str().unwrap_or("").to_string(),
            });
        e.count += v["count"].as_u64().unwrap_or(0);
    }
    Ok(())
}

/// The merged plan: shard 0's, with the whole run's workload and where it came from.
fn merged_plan(inputs: &[Input]) -> Value {
    let mut plan = inputs[0].plan.clone();
    let n = inputs.len() as f64;
    let sum = |get: &dyn Fn(&Value) -> Option<u64>| -> Option<u64> {
        inputs.iter().map(|i| get(&i.plan)).sum()
    };
    let count = sum(&|p| workload(p)["count"].as_u64());
    let users = sum(&|p| workload(p)["model"]["users"].as_u64());
    let w = match plan.get("workload").is_some() {
        true => &mut plan["workload"],
        false => &mut plan,
    };
    if let Some(obj) = w.as_object_mut() {
        obj.remove("shard");
    }
    if let Some(c) = count {
        w["count"] = c.into();
    }
    let model = &mut w["model"];
    if model.get("users").is_some() {
        if let Some(u) = users {
            model["users"] = u.into();
        }
    }
    if let Some(p) = model.get_mut("profile") {
        // Every shard ran rate / N.
        if let Some(r) = p["start_rate"].as_f64() {
            p["start_rate"] = (r * n).into();
        }
        if let Some(stages) = p["stages"].as_array_mut() {
            for s in stages {
                if let Some(r) = s["rate"].as_f64() {
                    s["rate"] = (r * n).into();
                }
            }
        }
    }
    plan["merged"] = serde_json::json!({
        "shards": inputs.len(),
        "from": inputs.iter().map(|i| i.dir.display().to_string()).collect::<Vec<_>>(),
    });
    plan
}

/// The merged run's verdict on its generators: the worst shard's (generator, then
/// undetermined, then server), naming each shard that was not server-bound. None when no
/// shard has one (shards of an older spate).
fn merged_bound(inputs: &[Input]) -> Option<Value> {
    let rank = |b: &str| match b {
        "generator" => 2,
        "undetermined" => 1,
        _ => 0,
    };
    let verdicts: Vec<(u32, &str, &str)> = inputs
        .iter()
        .filter_map(|i| {
            let b = i.summary.extra.get("bound_by")?;
            Some((
                i.shard.index,
                b["bound_by"].as_str()?,
                b["why"].as_str().unwrap_or(""),
            ))
        })
        .collect();
    let worst = verdicts.iter().map(|v| v.1).max_by_key(|b| rank(b))?;
    let named: Vec<String> = verdicts
        .iter()
        .filter(|v| v.1 != "server")
        .map(|(i, b, why)| format!("shard {i}: {b} — {why}"))
        .collect();
    let why = if named.is_empty() {
        format!(
            "every one of the {} shards' generators kept up",
            verdicts.len()
        )
    } else {
        named.join("; ")
    };
    Some(serde_json::json!({"bound_by": worst, "why": why}))
}

/// Concatenates the shards' sent logs under one header.
fn merge_sent(inputs: &[Input], out: &Path, run: &str) -> anyhow::Result<()> {
    if !inputs.iter().any(|i| i.dir.join("sent.log").exists()) {
        return Ok(());
    }
    let mut w = std::io::BufWriter::new(std::fs::File::create(out.join("sent.log"))?);
    crate::results::sent_log_head(&mut w, run, &format!(" ({} shards merged)", inputs.len()))?;
    for i in inputs {
        let path = i.dir.join("sent.log");
        let file = std::fs::File::open(&path)
            .map_err(|e| UsageError(format!("{}: {e}", path.display())))?;
        for line in std::io::BufReader::new(file).lines() {
            let line = line?;
            if line.starts_with('#') || line.starts_with("seq\t") || line.is_empty() {
                continue;
            }
            writeln!(w, "{line}")?;
        }
    }
    w.flush()?;
    w.get_ref().sync_data()?;
    Ok(())
}

/// What a merge made.
pub struct Merged {
    pub dir: PathBuf,
    pub summary: Summary,
    pub shards: usize,
}

/// Merges the shard directories `dirs` into `out` (which must not hold a run unless
/// `overwrite`). The merge is built beside `out` and renamed into place at the end, so
/// `out` never holds a partial merge.
/// With `partial`, shards that are missing, did not finish or were interrupted are left
/// out, and the merge of the others says so (summary.json's `extra.partial`, a warning).
pub fn merge(
    dirs: &[PathBuf],
    out: &Path,
    overwrite: bool,
    partial: bool,
) -> anyhow::Result<Merged> {
    if dirs.is_empty() {
        return bad("give the shards' results directories".into());
    }
    let mut seen: HashMap<PathBuf, &Path> = HashMap::new();
    for d in dirs {
        let canon =
            std::fs::canonicalize(d).map_err(|e| UsageError(format!("{}: {e}", d.display())))?;
        if seen.insert(canon, d).is_some() {
            return bad(format!("{}: given twice", d.display()));
        }
    }
    let target = super::outdir::check(out, dirs, overwrite)?;
    let mut inputs = dirs
        .iter()
        .map(|d| read_input(d))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut left_out = Vec::new();
    // Every shard stopped by `spate ctl … stop` (or their live views): one run stopped
    // early on purpose, merged as such.
    let stopped = stopped_together(&inputs);
    for i in inputs.iter().filter(|_| !stopped) {
        if let Some(why) = unfinished(i) {
            if !partial {
                return bad(format!(
                    "{why} (--partial merges the others, marked partial)"
                ));
            }
            left_out.push((format!("{}/{}", i.shard.index, i.shard.count), why));
        }
    }
    inputs.retain(|i| stopped || unfinished(i).is_none());
    if inputs.is_empty() {
        return bad("no shard finished: nothing to merge".into());
    }
    // The shards left out are missing from the inputs now, with the ones not given.
    let missing = check(&mut inputs, partial)?;
    let partial = (!missing.is_empty()).then(|| {
        serde_json::json!({
            "missing": missing,
            "left_out": left_out
                .iter()
                .map(|(s, why)| serde_json::json!({"shard": s, "why": why}))
                .collect::<Vec<_>>(),
            "merged": inputs.len(),
        })
    });
    let t0 = inputs.iter().map(|i| i.started).min().expect("not empty");
    let mut tl = Timeline {
        t0,
        buckets: BTreeMap::new(),
    };
    for i in &inputs {
        let (counted, columns) = add_intervals(i, &mut tl)?;
        if let Some((field, sum, total)) = first_difference(&counted, &i.summary.totals, &columns) {
            return bad(format!(
                "{}: intervals.csv's {field} adds up to {sum}, summary.json says {total}: a truncated or edited file",
                i.dir.display(),
            ));
        }
        hlog_buckets(i, &mut tl)?;
        add_errors(i, &mut tl)?;
    }

    // Built beside the target, put in its place once complete.
    let tmp = target.build_dir()?;
    let summary = match write_merged(&inputs, tl, &tmp, partial) {
        Ok(s) => s,
        Err(e) => {
            // Ours alone: build_dir made it new (create_dir, never an existing one).
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
    };
    let dir = target.commit(&tmp)?;
    Ok(Merged {
        dir,
        summary,
        shards: inputs.len(),
    })
}

/// How long the run keeps rows of a second (--detail), from its plan.
fn detail_of(plan: &Value) -> anyhow::Result<Duration> {
    Ok(plan["args"]["output"]["detail"]
        .as_str()
        .or_else(|| plan["args"]["common"]["output"]["detail"].as_str())
        .map(crate::units::parse_duration)
        .transpose()?
        .unwrap_or(Duration::from_secs(3600)))
}

fn write_merged(
    inputs: &[Input],
    mut tl: Timeline,
    dir: &Path,
    partial: Option<Value>,
) -> anyhow::Result<Summary> {
    let plan = merged_plan(inputs);
    let mut w = Writer::create(dir, &plan, tl.t0, None, detail_of(&plan)?)?;
    let mut totals = Shard::default();
    let mut cursors = HlogCursor::open_all(inputs, &tl)?;
    let mut de = Deserializer::new();
    let buckets = std::mem::take(&mut tl.buckets);
    for (key, mut b) in buckets {
        for c in &mut cursors {
            c.take_until(key, &mut b.iv, &mut de, &tl)?;
        }
        let len = if b.len_s > 0.0 { b.len_s } else { 1.0 };
        let t0 = (b.end_s - len).max(0.0);
        w.interval(&b.iv, t0, b.end_s - t0, b.active)?;
        totals.add(&b.iv);
    }
    check_values(inputs, &cursors)?;
    // The shards' own totals are the counts (the intervals were checked against them).
    totals.counters = Counters::default();
    for i in inputs {
        totals.counters.add(&i.summary.totals);
    }
    let s = merged_summary(inputs, &totals, tl.t0, partial, true);
    w.finish()?;
    w.write_summary(&s, true)?;
    drop(w);
    merge_sent(inputs, dir, &s.run_id)?;
    copy_shard_files(inputs, dir)?;
    Ok(s)
}

/// The merged run's summary: the shards' totals (`totals`, their counters already the
/// shards' own), time from the first start to the last end, the sum of their CPU, their
/// warnings, each shard's own figures in `extra.shards`, and what a partial merge lacks;
/// not `complete` while the shards still run (`spate watch`).
fn merged_summary(
    inputs: &[Input],
    totals: &Shard,
    t0: SystemTime,
    partial: Option<Value>,
    complete: bool,
) -> Summary {
    let first = &inputs[0];
    let end = inputs
        .iter()
        .map(|i| i.started + Duration::from_secs_f64(i.summary.elapsed_s))
        .max()
        .unwrap_or(t0);
    let elapsed = end.duration_since(t0).unwrap_or_default().as_secs_f64();
    let cpu_s: f64 = inputs.iter().map(|i| i.summary.generator_cpu_s).sum();
    let cores: usize = inputs.iter().map(|i| i.summary.cores).sum();
    let header = crate::results::SummaryHeader {
        run_id: first.summary.run_id.clone(),
        command: first.summary.command.clone(),
        protocol: first.summary.protocol.clone(),
        words: first.summary.words(),
        target: first.summary.target.clone(),
        started: t0,
    };
    let stopped = stopped_together(inputs);
    let mut s = header.summary(
        totals,
        elapsed,
        complete,
        stopped,
        (
            Duration::from_secs_f64(cpu_s),
            "sum of the shards' processes",
        ),
    );
    s.cores = cores;
    s.generator_cpu_pct = if elapsed > 0.0 && cores > 0 {
        ((cpu_s / elapsed / cores as f64 * 100.0) * 10.0).round() / 10.0
    } else {
        0.0
    };
    // The generator warning above is about this machine; the shards' own warnings count.
    s.warnings.retain(|w| !w.contains("of all"));
    for i in inputs {
        for warning in &i.summary.warnings {
            s.warnings
                .push(format!("shard {}: {warning}", i.shard.index));
        }
    }
    late::flag(inputs, t0, elapsed, &mut s.warnings, &mut s.extra);
    let versions: std::collections::BTreeSet<&str> = inputs
        .iter()
        .map(|i| i.summary.spate_version.as_str())
        .collect();
    if versions.len() > 1 {
        s.warnings.push(format!(
            "the shards ran different spate versions: {}",
            versions.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    if let Some(b) = merged_bound(inputs) {
        s.extra.insert("bound_by".into(), b);
    }
    if let Some(c) = merged_control(inputs, t0) {
        s.extra.insert("control".into(), c);
    }
    if stopped {
        s.interrupted_by = Some("control".into());
    }
    s.extra.insert(
        "shards".into(),
        Value::Array(
            inputs
                .iter()
                .map(|i| {
                    serde_json::json!({
                        "index": i.shard.index,
                        "dir": i.dir.display().to_string(),
                        "started_at": i.summary.started_at,
                        "elapsed_s": i.summary.elapsed_s,
                        "totals": i.summary.totals,
                        "generator_cpu_s": i.summary.generator_cpu_s,
                        "cores": i.summary.cores,
                        "extra": i.summary.extra,
                    })
                })
                .collect(),
        ),
    );
    if let Some(p) = partial {
        let missing: Vec<&str> = p["missing"]
            .as_array()
            .map(|m| m.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        s.warnings.insert(
            0,
            format!(
                "PARTIAL: {} of {} shards merged; missing {} (their share of the load is not in these figures)",
                inputs.len(),
                inputs[0].shard.count,
                missing.join(", ")
            ),
        );
        s.extra.insert("partial".into(), p);
    }
    s
}

/// What the shards were told while they ran (`--web`, `spate ctl`): every shard's actions,
/// each marked with its shard and timed on the merged run's clock (from `t0`), in order.
fn merged_control(inputs: &[Input], t0: SystemTime) -> Option<Value> {
    let mut actions: Vec<Value> = Vec::new();
    for i in inputs {
        let shift = i
            .started
            .duration_since(t0)
            .unwrap_or_default()
            .as_secs_f64();
        let told = i
            .summary
            .extra
            .get("control")
            .and_then(|c| c["actions"].as_array());
        for a in told.into_iter().flatten() {
            let mut a = a.clone();
            let t = a["t_s"].as_f64().unwrap_or(0.0) + shift;
            a["t_s"] = serde_json::json!((t * 1000.0).round() / 1000.0);
            a["shard"] = serde_json::json!(i.shard.index);
            actions.push(a);
        }
    }
    actions.sort_by(|a, b| {
        a["t_s"]
            .as_f64()
            .partial_cmp(&b["t_s"].as_f64())
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    (!actions.is_empty()).then(|| serde_json::json!({ "actions": actions }))
}

/// What stays per shard (monitor series, per host) or comes from the first shard (its
/// record of the faults, which it applied), copied into the merge.
fn copy_shard_files(inputs: &[Input], dir: &Path) -> anyhow::Result<()> {
    // Monitor series stay per shard (per host).
    for i in inputs {
        let m = i.dir.join("monitor.csv");
        if m.exists() {
            std::fs::copy(&m, dir.join(format!("monitor.shard{}.csv", i.shard.index)))?;
        }
    }
    // Faults are applied by the first shard: its record of them is the run's.
    if let Some(f) = inputs
        .iter()
        .filter(|i| i.shard.index == 0)
        .map(|i| i.dir.join("faults.jsonl"))
        .find(|f| f.exists())
    {
        std::fs::copy(&f, dir.join("faults.jsonl"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_late_tick_moves_no_interval_into_the_next_second() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let tl = Timeline {
            t0,
            buckets: BTreeMap::new(),
        };
        let keys = |start: SystemTime, rows: &[(f64, f64)]| -> Vec<i64> {
            rows.iter().map(|&(a, b)| tl.key(start, a, b).0).collect()
        };
        // On time, a first tick 70 ms late, one 400 ms late; a shard that started 30 ms
        // after the first; the last interval of each cut short by the end of the run.
        let on_time = [(0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 3.4)];
        let late = [(0.0, 1.07), (1.07, 2.0), (2.0, 3.4), (3.4, 3.45)];
        assert_eq!(keys(t0, &on_time), vec![1, 2, 3, 4]);
        assert_eq!(keys(t0, &late), vec![1, 2, 3, 4]);
        let after = t0 + Duration::from_millis(30);
        assert_eq!(keys(after, &on_time), vec![1, 2, 3, 4]);
    }

    #[test]
    fn only_the_columns_intervals_csv_has_are_checked_and_a_difference_is_named() {
        let columns: Vec<String> = ["t_s", "attempted", "accepted"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let counted = Counters {
            attempted: 5,
            accepted: 5,
            ..Counters::default()
        };
        // A counter only the summary holds (no column) differs: not a difference.
        let mut total = Counters {
            connect_retransmits: 2,
            ..counted
        };
        total.count(crate::metrics::Counter::named("search_hits"), 7);
        assert_eq!(first_difference(&counted, &total, &columns), None);
        total.accepted = 4;
        assert_eq!(
            first_difference(&counted, &total, &columns),
            Some(("accepted".into(), 5, 4))
        );
    }

    #[test]
    fn shards_differ_only_in_their_own_options() {
        let plan = |i: u32, common: bool| {
            let args = json!({
                "workload": {"shard": format!("{i}/2"), "users": 4},
                "output": {
                    "out": format!("shard-{i}"), "seed": i, "detail": "1h",
                    "metrics_listen": format!("127.0.0.1:{}", 9464 + i), "metrics_linger": "0s",
                },
            });
            let args = if common {
                json!({"common": args, "top": 0})
            } else {
                args
            };
            json!({"run_id": "r", "shard": {"index": i, "count": 2}, "args": args})
        };
        for common in [false, true] {
            assert_eq!(comparable(&plan(0, common)), comparable(&plan(1, common)));
            let mut other = plan(1, common);
            let args = if common {
                &mut other["args"]["common"]
            } else {
                &mut other["args"]
            };
            args["output"]["detail"] = json!("2h");
            assert_ne!(comparable(&plan(0, common)), comparable(&other));
            let at = if common {
                "args.common.output.detail"
            } else {
                "args.output.detail"
            };
            assert_eq!(
                first_json_difference(&comparable(&other), &comparable(&plan(0, common))),
                Some((at.into(), "\"2h\"".into(), "\"1h\"".into()))
            );
        }
    }
}
