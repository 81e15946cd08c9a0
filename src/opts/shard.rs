//! Sharded runs: `--shard I/N` (or `auto`, from the scheduler's environment), the run id
//! the shards share, and the wall-clock start they wait for.

use std::path::Path;
use std::time::{Duration, SystemTime};

use crate::units;
use crate::usage;

pub use crate::results::ShardOf;

/// Reading it from the command line and from the scheduler that started this process.
impl ShardOf {
    /// Parses `I/N`.
    pub fn parse(text: &str) -> anyhow::Result<ShardOf> {
        let bad = || {
            usage::<ShardOf>(format!(
                "--shard {text}: expected I/N with 0 <= I < N (shard I of N, counted from 0 as SLURM_PROCID counts), or auto"
            ))
        };
        let Some((i, n)) = text.split_once('/') else {
            return bad();
        };
        let (Ok(index), Ok(count)) = (i.trim().parse::<u32>(), n.trim().parse::<u32>()) else {
            return bad();
        };
        if count == 0 || index >= count {
            return bad();
        }
        Ok(ShardOf { index, count })
    }

    /// `--shard auto`: the index and count from the scheduler that started this process.
    pub fn from_env(
        shards: Option<u32>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> anyhow::Result<ShardOf> {
        let num = |k: &str| -> anyhow::Result<Option<u32>> {
            match env(k) {
                None => Ok(None),
                Some(v) => v
                    .trim()
                    .parse::<u32>()
                    .map(Some)
                    .or_else(|_| usage(format!("--shard auto: {k}={v} is not a number"))),
            }
        };
        let pair = |i: &str, n: &str| -> anyhow::Result<Option<(u32, u32)>> {
            Ok(match (num(i)?, num(n)?) {
                (Some(i), Some(n)) => Some((i, shards.unwrap_or(n))),
                _ => None,
            })
        };
        let tasks = pair("SLURM_PROCID", "SLURM_NTASKS")?;
        let found = match tasks {
            Some((_, n)) if n > 1 => tasks,
            // One task (or none) of an array job: the array is the split.
            _ => pair("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT")?.or(tasks),
        };
        let found = match found {
            Some(f) => Some(f),
            None => match (num("JOB_COMPLETION_INDEX")?, shards) {
                (Some(i), Some(n)) => Some((i, n)),
                (Some(_), None) => {
                    return usage("--shard auto: JOB_COMPLETION_INDEX is set; give the Job's completions as --shards N")
                }
                (None, _) => None,
            },
        };
        let Some((index, count)) = found else {
            return usage("--shard auto: no scheduler told this process its shard (SLURM_PROCID/SLURM_NTASKS, SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT, or JOB_COMPLETION_INDEX with --shards N): give --shard I/N");
        };
        if count == 0 || index >= count {
            return usage(format!(
                "--shard auto: the environment says shard {index} of {count}"
            ));
        }
        Ok(ShardOf { index, count })
    }
}

/// The run id every shard of a run shares: `--run-id`, else the scheduler's job id, else
/// one derived from the start time all shards wait for (an absolute `--start-at`, or one
/// relative to a shared `--start-file`).
pub fn shared_run_id(
    given: Option<&str>,
    start_at: Option<SystemTime>,
    env: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<String> {
    if let Some(id) = given {
        if id.is_empty()
            || id.len() > 64
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            return usage(format!(
                "--run-id {id}: 1 to 64 letters, digits, '-', '_' or '.'"
            ));
        }
        return Ok(id.to_string());
    }
    let job = env("SLURM_ARRAY_JOB_ID")
        .or_else(|| env("SLURM_JOB_ID"))
        .map(|j| format!("slurm-{j}"));
    if let Some(j) = job {
        return Ok(j);
    }
    if let Some(t) = start_at {
        // The start in µs, mixed: the same on every shard, another for another start.
        let us = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_micros() as u64;
        let h = us
            .to_le_bytes()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
            });
        return Ok(format!("{:012x}", h >> 16));
    }
    usage("--shard: the shards of one run must share its id: give every shard the same --run-id ID (or --start-at; under Slurm the job id is used)")
}

/// `--start-at`: an RFC 3339 time, or +DURATION from now or from `--start-file`'s time
/// (the first shard to get there creates the file).
pub fn start_time(text: &str, file: Option<&Path>) -> anyhow::Result<SystemTime> {
    if let Some(rel) = text.strip_prefix('+') {
        let d = units::parse_duration(rel)
            .map_err(|e| crate::UsageError(format!("--start-at {text}: {e}")))?;
        let base = match file {
            None => SystemTime::now(),
            Some(f) => {
                // O_EXCL: exactly one shard creates it; the others read its time.
                let _ = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(f);
                std::fs::metadata(f)
                    .and_then(|m| m.modified())
                    .map_err(|e| crate::UsageError(format!("--start-file {}: {e}", f.display())))?
            }
        };
        return Ok(base + d);
    }
    let t = chrono::DateTime::parse_from_rfc3339(text).map_err(|_| {
        crate::UsageError(format!(
            "--start-at {text}: expected a time like 2026-11-23T10:00:00Z or +30s"
        ))
    })?;
    let t = SystemTime::UNIX_EPOCH + Duration::from_micros(t.timestamp_micros().max(0) as u64);
    if SystemTime::now()
        .duration_since(t)
        .is_ok_and(|late| late > Duration::from_secs(60))
    {
        return usage(format!(
            "--start-at {text}: that was more than a minute ago"
        ));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_and_slices_add_up_to_the_whole() {
        for n in 1..=7u32 {
            for total in [0u64, 1, 5, 100, 1001] {
                let shards: Vec<ShardOf> =
                    (0..n).map(|index| ShardOf { index, count: n }).collect();
                assert_eq!(shards.iter().map(|s| s.share(total)).sum::<u64>(), total);
                let mut next = 0;
                for s in &shards {
                    let r = s.slice(total as usize);
                    assert_eq!(r.start, next, "contiguous and disjoint");
                    assert_eq!(r.len() as u64, s.share(total));
                    next = r.end;
                }
                assert_eq!(next, total as usize);
            }
        }
        let s = ShardOf { index: 2, count: 4 };
        assert_eq!((s.global_seq(0), s.global_seq(1)), (2, 6));
    }

    #[test]
    fn bad_shards_are_refused_in_one_line() {
        for bad in ["5/4", "0/0", "4/4", "-1/4", "1", "a/b", "1/4/2"] {
            let e = ShardOf::parse(bad).unwrap_err();
            assert!(e.downcast_ref::<crate::UsageError>().is_some(), "{bad}");
            assert!(!e.to_string().contains('\n'));
        }
        assert_eq!(
            ShardOf::parse("3/4").unwrap(),
            ShardOf { index: 3, count: 4 }
        );
    }

    #[test]
    fn auto_reads_slurm_then_kubernetes() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let srun = env(&[("SLURM_PROCID", "2"), ("SLURM_NTASKS", "4")]);
        assert_eq!(
            ShardOf::from_env(None, &srun).unwrap(),
            ShardOf { index: 2, count: 4 }
        );
        let array = env(&[
            ("SLURM_PROCID", "0"),
            ("SLURM_NTASKS", "1"),
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_COUNT", "4"),
        ]);
        assert_eq!(
            ShardOf::from_env(None, &array).unwrap(),
            ShardOf { index: 3, count: 4 }
        );
        let k8s = env(&[("JOB_COMPLETION_INDEX", "1")]);
        assert_eq!(
            ShardOf::from_env(Some(3), &k8s).unwrap(),
            ShardOf { index: 1, count: 3 }
        );
        assert!(ShardOf::from_env(None, &k8s).is_err(), "needs --shards");
        assert!(ShardOf::from_env(None, &env(&[])).is_err());
        let run = shared_run_id(None, None, &env(&[("SLURM_ARRAY_JOB_ID", "77")])).unwrap();
        assert_eq!(run, "slurm-77");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let a = shared_run_id(None, Some(t), &env(&[])).unwrap();
        assert_eq!(a, shared_run_id(None, Some(t), &env(&[])).unwrap());
        let later = shared_run_id(None, Some(t + Duration::from_secs(1)), &env(&[])).unwrap();
        assert_ne!(a, later);
        assert!(shared_run_id(None, None, &env(&[])).is_err());
        assert!(shared_run_id(Some("a b"), None, &env(&[])).is_err());
    }
}
