//! `spate watch`'s merge: the shards of a run added up while they run, from the
//! intervals their live views serve (`/api/intervals`), into one results directory that
//! grows as they go. The same rules as `spate merge`: histograms add (exact
//! percentiles), counters add, intervals line up on wall-clock seconds; shards of
//! another run or plan are refused. A merged second is written once every shard that
//! still runs has gone past it.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::{check, comparable, first_difference, first_json_difference};
use super::{merged_plan, merged_summary, stopped_together, unfinished, workload};
use super::{Input, Timeline, Writer};
use crate::metrics::{Counters, Shard};
use crate::results::feed::{decode, Interval, KEEP};
use crate::results::{ShardOf, Summary};
use crate::UsageError;

/// One shard as it is watched.
#[derive(Default)]
struct Source {
    /// As the user named it (a URL, an address, a directory).
    name: String,
    plan: Option<Value>,
    shard: Option<ShardOf>,
    started: Option<SystemTime>,
    summary: Option<Summary>,
    /// The last interval taken (the feed's sequence number).
    after: u64,
    /// The merged second its latest interval went into.
    reached: Option<i64>,
    ended: bool,
    /// Why it is no longer followed (it stopped answering).
    lost: Option<String>,
    /// What its intervals added up to.
    counted: Counters,
    /// Intervals its live view no longer had when asked (it keeps the latest ten minutes).
    missed: u64,
    /// Intervals taken before every shard had started (the merged clock's origin unknown).
    waiting: Vec<Interval>,
}

impl Source {
    fn done(&self) -> bool {
        self.ended || self.lost.is_some()
    }

    fn input(&self) -> Option<Input> {
        Some(Input {
            dir: PathBuf::from(&self.name),
            plan: self.plan.clone()?,
            summary: self.summary.clone()?,
            shard: self.shard.clone()?,
            started: self.started?,
        })
    }
}

/// The shards of one run, watched and merged as they go.
pub struct LiveMerge {
    dir: PathBuf,
    sources: Vec<Source>,
    timeline: Option<(Timeline, Writer)>,
    totals: Shard,
    names: Vec<String>,
    partial: bool,
    warnings: Vec<String>,
    /// The watch was stopped before the shards ended.
    stopped_early: bool,
}

impl LiveMerge {
    /// Watches the shards named `names` into `dir` (a new results directory).
    pub fn new(names: &[String], dir: &Path, partial: bool) -> LiveMerge {
        LiveMerge {
            dir: dir.to_path_buf(),
            sources: names
                .iter()
                .map(|n| Source {
                    name: n.clone(),
                    ..Source::default()
                })
                .collect(),
            timeline: None,
            totals: Shard::default(),
            names: Vec::new(),
            partial,
            warnings: Vec::new(),
            stopped_early: false,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether shard `i`'s plan is still to be asked for.
    pub fn wants_plan(&self, i: usize) -> bool {
        self.sources[i].plan.is_none()
    }

    /// The interval to ask shard `i` for intervals after.
    pub fn after(&self, i: usize) -> u64 {
        self.sources[i].after
    }

    /// Whether shard `i` is still to be asked.
    pub fn follows(&self, i: usize) -> bool {
        !self.sources[i].done()
    }

    /// Every shard has ended (or stopped answering).
    pub fn done(&self) -> bool {
        self.sources.iter().all(Source::done)
    }

    /// Shard `i`'s plan (plan.json): a shard of the same run as the others.
    pub fn plan(&mut self, i: usize, plan: Value) -> anyhow::Result<()> {
        let name = &self.sources[i].name;
        let Some(shard) = workload(&plan)
            .get("shard")
            .and_then(|s| serde_json::from_value::<ShardOf>(s.clone()).ok())
        else {
            return Err(UsageError(format!(
                "{name}: not a shard (the run had no --shard): its own live view shows it"
            ))
            .into());
        };
        if let Some(other) = self.sources.iter().find_map(|s| s.plan.as_ref()) {
            if let Some((at, here, there)) =
                first_json_difference(&comparable(&plan), &comparable(other))
            {
                return Err(UsageError(format!(
                    "{name}: its plan differs from the other shards' at {at} ({here} here, {there} there): not shards of one run"
                ))
                .into());
            }
        }
        if let Some(twice) = self
            .sources
            .iter()
            .find(|s| s.shard.as_ref().is_some_and(|o| o.index == shard.index))
        {
            return Err(UsageError(format!(
                "{name} and {} are both shard {}/{}",
                twice.name, shard.index, shard.count
            ))
            .into());
        }
        let s = &mut self.sources[i];
        s.plan = Some(plan);
        s.shard = Some(shard);
        Ok(())
    }

    /// Shard `i` stopped answering: it is followed no more, and the merge says so.
    pub fn lost(&mut self, i: usize, why: &str) {
        let s = &mut self.sources[i];
        let at = s.summary.as_ref().map_or(0.0, |s| s.elapsed_s);
        self.warnings.push(format!(
            "{}: stopped answering {at:.0} s into its run ({why}): its figures end there",
            s.name
        ));
        s.lost = Some(why.to_string());
    }

    /// Takes an answer of shard `i`'s `/api/intervals`.
    pub fn take(&mut self, i: usize, answer: &Value) -> anyhow::Result<()> {
        let s = &mut self.sources[i];
        let not_ours =
            |what: &str| UsageError(format!("{}: {what}: not a spate live view", s.name));
        if let Some(us) = answer["started_us"].as_u64() {
            s.started = Some(SystemTime::UNIX_EPOCH + Duration::from_micros(us));
        }
        if let Some(sum) = answer.get("summary").filter(|v| !v.is_null()) {
            s.summary = Some(
                serde_json::from_value(sum.clone())
                    .map_err(|_| not_ours("a summary spate cannot read"))?,
            );
        }
        if let Some(first) = answer["first"].as_u64() {
            s.missed += first.saturating_sub(s.after + 1);
        }
        let list = answer["intervals"]
            .as_array()
            .ok_or_else(|| not_ours("no intervals"))?;
        for v in list {
            let iv = decode(v, &mut self.names).map_err(|e| not_ours(&e))?;
            s.counted.add(&iv.shard.counters);
            s.waiting.push(iv);
        }
        s.after = answer["last"].as_u64().unwrap_or(s.after).max(s.after);
        s.ended = answer["ended"] == true;
        self.place()
    }

    /// Puts the intervals taken into the merged timeline, once every shard has started
    /// (the merged clock starts at the earliest).
    fn place(&mut self) -> anyhow::Result<()> {
        if self.timeline.is_none() {
            // Every shard that answers has begun and sent a first summary.
            if self.sources.iter().any(|s| {
                !s.done() && (s.started.is_none() || s.plan.is_none() || s.summary.is_none())
            }) {
                return Ok(());
            }
            let mut inputs: Vec<Input> = self.sources.iter().filter_map(Source::input).collect();
            if inputs.is_empty() {
                return Ok(());
            }
            // Every shard of the run, once each (or --partial).
            let missing = check(&mut inputs, self.partial)?;
            if !missing.is_empty() {
                self.warnings.insert(
                    0,
                    format!(
                        "PARTIAL: shard{} {} not watched (their share of the load is not in these figures)",
                        if missing.len() > 1 { "s" } else { "" },
                        missing.join(", ")
                    ),
                );
            }
            let t0 = inputs.iter().map(|i| i.started).min().expect("not empty");
            let plan = merged_plan(&inputs);
            let w = Writer::create(&self.dir, &plan, t0, None, super::detail_of(&plan)?)?;
            self.timeline = Some((
                Timeline {
                    t0,
                    buckets: Default::default(),
                },
                w,
            ));
        }
        let Some((tl, _)) = &mut self.timeline else {
            return Ok(());
        };
        for s in &mut self.sources {
            let Some(start) = s.started else { continue };
            for mut iv in s.waiting.drain(..) {
                let from = (iv.t_s - iv.len_s).max(0.0);
                let (key, _) = tl.key(start, from, iv.t_s);
                let b = tl.at(start, from, iv.t_s);
                b.iv.absorb(&mut iv.shard);
                b.len_s = b.len_s.max(iv.len_s);
                b.active += iv.active;
                s.reached = Some(s.reached.map_or(key, |r| r.max(key)));
            }
        }
        Ok(())
    }

    /// Writes the merged seconds every shard that runs has gone past, and the summary so
    /// far; whether anything was written.
    pub fn write(&mut self) -> anyhow::Result<bool> {
        // Seconds before the earliest that a running shard may still add to are done.
        let upto = self
            .sources
            .iter()
            .filter(|s| !s.done())
            .map(|s| s.reached.unwrap_or(i64::MIN))
            .min()
            .unwrap_or(i64::MAX);
        self.flush(upto, false)
    }

    /// Writes the merged seconds before `upto`, and the summary.
    fn flush(&mut self, upto: i64, last: bool) -> anyhow::Result<bool> {
        let Some((tl, w)) = &mut self.timeline else {
            return Ok(false);
        };
        let keys: Vec<i64> = tl.buckets.range(..upto).map(|(k, _)| *k).collect();
        for k in &keys {
            let Some(b) = tl.buckets.remove(k) else {
                continue;
            };
            let len = if b.len_s > 0.0 { b.len_s } else { 1.0 };
            let t0 = (b.end_s - len).max(0.0);
            w.interval(&b.iv, t0, b.end_s - t0, b.active)?;
            self.totals.add(&b.iv);
        }
        if keys.is_empty() && !last {
            return Ok(false);
        }
        let summary = self.summary(last);
        if let (Some(s), Some((_, w))) = (summary, &mut self.timeline) {
            if last {
                w.finish()?;
            }
            w.write_summary(&s, last)?;
        }
        Ok(true)
    }

    /// The merged summary so far (None until every shard has sent one).
    fn summary(&self, last: bool) -> Option<Summary> {
        let inputs: Vec<Input> = self.sources.iter().filter_map(Source::input).collect();
        let t0 = self.timeline.as_ref()?.0.t0;
        if inputs.is_empty() {
            return None;
        }
        let mut totals = Shard::default();
        totals.add(&self.totals);
        // The counts are the shards' own (their summaries), as `spate merge` gives them.
        totals.counters = Counters::default();
        for i in &inputs {
            totals.counters.add(&i.summary.totals);
        }
        let complete = last && self.sources.iter().all(|s| s.ended);
        let mut s = merged_summary(&inputs, &totals, t0, None, complete);
        s.warnings.extend(self.warnings.iter().cloned());
        if last {
            s.warnings.extend(self.findings());
        }
        s.extra.insert(
            "watched".into(),
            serde_json::json!({
                "shards": self.sources.iter().map(|s| &s.name).collect::<Vec<_>>(),
                "running": !last,
            }),
        );
        Some(s)
    }

    /// What the end shows: shards cut short, intervals the watch missed, counts that do
    /// not add up.
    fn findings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let inputs: Vec<Input> = self.sources.iter().filter_map(Source::input).collect();
        let stopped = stopped_together(&inputs);
        // A watch stopped early saw the shards still running: not cut short.
        let cut = self.stopped_early;
        for s in &self.sources {
            let Some(i) = s.input() else {
                out.push(format!("{}: never sent its figures", s.name));
                continue;
            };
            let i = &i;
            if !stopped && !cut {
                if let Some(why) = unfinished(i).filter(|_| s.lost.is_none()) {
                    out.push(why);
                }
            }
            if s.missed > 0 {
                out.push(format!(
                    "{}: {} of its intervals were gone from its live view when asked (it keeps the latest {}): the merged figures over time lack them; the totals are the shard's own",
                    s.name,
                    s.missed,
                    KEEP
                ));
            } else if let Some((field, sum, total)) =
                first_difference(&s.counted, &i.summary.totals, &counter_names(&s.counted))
            {
                out.push(format!(
                    "{}: its intervals' {field} add up to {sum}, its summary says {total}",
                    s.name
                ));
            }
        }
        out
    }

    /// Writes what is left and the final summary (`interrupted`: the watch was stopped
    /// before the shards ended).
    pub fn finish(&mut self, interrupted: Option<&str>) -> anyhow::Result<Option<Summary>> {
        if let Some(by) = interrupted {
            self.stopped_early = true;
            self.warnings.push(format!(
                "the watch was stopped ({by}) before every shard ended: the merge ends there"
            ));
        }
        self.flush(i64::MAX, true)?;
        let mut s = self.summary(true);
        if let (Some(s), Some(by)) = (&mut s, interrupted) {
            s.complete = true;
            s.interrupted = true;
            s.interrupted_by = Some(by.to_string());
            if let Some((_, w)) = &self.timeline {
                w.write_summary(s, true)?;
            }
        }
        Ok(s)
    }

    /// Seconds since the merged clock's start, as far as written.
    pub fn t_s(&self) -> f64 {
        let Some((tl, _)) = &self.timeline else {
            return 0.0;
        };
        self.sources
            .iter()
            .filter_map(|s| {
                let start = s.started?.duration_since(tl.t0).unwrap_or_default();
                Some(start.as_secs_f64() + s.summary.as_ref()?.elapsed_s)
            })
            .fold(0.0, f64::max)
    }
}

/// The names of the counters `c` has, as intervals.csv's columns would.
fn counter_names(c: &Counters) -> Vec<String> {
    match serde_json::to_value(c) {
        Ok(Value::Object(m)) => m.keys().cloned().collect(),
        _ => Vec::new(),
    }
}
