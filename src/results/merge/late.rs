//! Shards that started late: after the shared `--start-at` (or, without one, after the
//! first shard). A late shard runs its whole schedule later than the others, so the
//! merged run spans more time than any shard ran and its seconds mix shards that ran at
//! different times: the merge says so instead of reporting the longer span as the run's.

use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::{workload, Input};
use crate::units::fmt_duration;

/// How late a shard may start before the merge flags it (as a shard judges itself).
pub const LATE: Duration = Duration::from_secs(1);

/// One shard that started late.
#[derive(Debug, Clone, PartialEq)]
pub struct Late {
    pub shard: u32,
    /// How long after the shared start (or the first shard's) it started.
    pub late: Duration,
}

/// The shared start every shard waited for (their plans' `start_at`), if they had one.
fn shared_start(inputs: &[Input]) -> Option<SystemTime> {
    let text = inputs
        .iter()
        .find_map(|i| workload(&i.plan)["start_at"].as_str().map(str::to_string))?;
    let t = chrono::DateTime::parse_from_rfc3339(&text).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_micros(t.timestamp_micros().max(0) as u64))
}

/// The shards that started more than [`LATE`] after `from` (the shared start, else `t0`,
/// the first shard's start), in shard order.
fn late_after(starts: &[(u32, SystemTime)], from: SystemTime) -> Vec<Late> {
    starts
        .iter()
        .filter_map(|&(shard, started)| {
            let late = started.duration_since(from).ok()?;
            (late > LATE).then_some(Late { shard, late })
        })
        .collect()
}

/// Flags the late shards of a merge whose first shard started at `t0` and which spans
/// `elapsed_s`: a warning saying which started how late and what that does to the span,
/// and `extra.late_shards` (`[{"shard", "late_s"}]`, with `shards_ran_s`, the longest a
/// shard ran, beside the span). Nothing when every shard started in time.
pub fn flag(
    inputs: &[Input],
    t0: SystemTime,
    elapsed_s: f64,
    warnings: &mut Vec<String>,
    extra: &mut serde_json::Map<String, Value>,
) {
    let shared = shared_start(inputs);
    let starts: Vec<(u32, SystemTime)> =
        inputs.iter().map(|i| (i.shard.index, i.started)).collect();
    let late = late_after(&starts, shared.unwrap_or(t0));
    if late.is_empty() {
        return;
    }
    let ran_s = inputs
        .iter()
        .map(|i| i.summary.elapsed_s)
        .fold(0.0, f64::max);
    let which: Vec<String> = late
        .iter()
        .map(|l| format!("shard {} by {}", l.shard, fmt_duration(l.late)))
        .collect();
    let after = match shared {
        Some(_) => "after the shared start (--start-at)",
        None => "after the first shard (no --start-at)",
    };
    warnings.push(format!(
        "shards started late, {after}: {}; the merged run spans {} from the first start to the last end where no shard ran more than {}, so its rates over the whole run are lower and its seconds mix shards that ran at different times (extra.late_shards)",
        which.join(", "),
        fmt_duration(Duration::from_secs_f64(elapsed_s.max(0.0))),
        fmt_duration(Duration::from_secs_f64(ran_s.max(0.0))),
    ));
    let round = |s: f64| (s * 1000.0).round() / 1000.0;
    extra.insert(
        "late_shards".into(),
        serde_json::json!({
            "after": if shared.is_some() { "start_at" } else { "first_shard" },
            "shards": late
                .iter()
                .map(|l| serde_json::json!({"shard": l.shard, "late_s": round(l.late.as_secs_f64())}))
                .collect::<Vec<_>>(),
            "span_s": round(elapsed_s),
            "shards_ran_s": round(ran_s),
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_shards_more_than_a_second_after_the_start_are_late() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let starts = [
            (0, at),
            // Before the start (a clock a little ahead): not late.
            (1, at - Duration::from_millis(200)),
            (2, at + Duration::from_millis(900)),
            (3, at + Duration::from_millis(2_500)),
        ];
        assert_eq!(
            late_after(&starts, at),
            vec![Late {
                shard: 3,
                late: Duration::from_millis(2_500)
            }]
        );
        assert!(late_after(&starts[..3], at).is_empty());
    }
}
