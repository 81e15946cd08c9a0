//! How much load, and for how long: the workload options every load command shares, and
//! their validation into the engine's [`Workload`].

use serde::Serialize;

use super::shard::{self, ShardOf};
use crate::engine::schedule::{self, Arrival, Model, Profile, Workload};
use crate::units;
use crate::usage;

/// How much load, and for how long: shared by every load command.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct WorkloadArgs {
    /// Concurrent sessions (closed workload: each does one unit of work, waits for the
    /// reply, does the next) [default: 1]. An open workload (--rate, --stages) has no
    /// fixed sessions: --max-in-flight bounds its concurrency instead.
    #[arg(long, short = 'u', value_name = "N", help_heading = "Workload",
          value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    pub users: Option<u32>,
    /// Stop after this many units of work in total (default 1000 when neither --duration
    /// nor --stages bounds the run).
    #[arg(
        long,
        short = 'n',
        help_heading = "Workload",
        allow_hyphen_values = true
    )]
    pub count: Option<u64>,
    /// Stop after this long (e.g. 30s, 10m, 1h).
    #[arg(
        long,
        short = 'd',
        help_heading = "Workload",
        allow_hyphen_values = true
    )]
    pub duration: Option<String>,
    /// Pause between units of work of one session (closed workload), e.g. 100ms.
    #[arg(long, help_heading = "Workload", allow_hyphen_values = true)]
    pub think: Option<String>,
    /// Open workload: start work at this rate whether or not earlier work finished
    /// (200/s, 5000/min). Latency then counts from each scheduled start.
    #[arg(long, help_heading = "Workload", allow_hyphen_values = true)]
    pub rate: Option<String>,
    /// Stages of an open workload, ramping linearly: 1m:100/s,5m:500/s,1m:0/s.
    #[arg(long, conflicts_with = "rate", help_heading = "Workload")]
    pub stages: Option<String>,
    /// Spacing of open-workload arrivals.
    #[arg(long, value_enum, default_value_t = Arrival::Constant, help_heading = "Workload")]
    pub arrival: Arrival,
    /// Open workload: most units of work in flight at once (also the number of connections).
    #[arg(long, default_value_t = 1000, help_heading = "Workload",
          value_parser = clap::value_parser!(u32).range(1..), allow_hyphen_values = true)]
    pub max_in_flight: u32,
    /// Closed workload: sessions start at this rate (500/s): session i begins i/RATE after
    /// the start, so thousands of --users do not open their connections as one SYN storm
    /// that overflows the server's accept queue (the summary counts connects that needed
    /// SYN retransmits as `connect retransmits`) [default: 1000/s above 1000 users, all at
    /// once up to 1000].
    #[arg(long, value_name = "RATE", help_heading = "Workload")]
    pub connect_rate: Option<String>,
    /// Run shard I of N (I from 0, as SLURM_PROCID counts): this process takes its share
    /// of --users, --rate, --stages and --count (the shares sum to the whole), a disjoint
    /// slice of the account pools and its own sequence numbers; `spate merge` makes one
    /// run of the shards' directories. `auto`: from SLURM_PROCID/SLURM_NTASKS,
    /// SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT, or JOB_COMPLETION_INDEX with --shards.
    #[arg(long, value_name = "I/N|auto", help_heading = "Shards")]
    pub shard: Option<String>,
    /// With --shard auto: how many shards (a Kubernetes Indexed Job's completions).
    #[arg(long, value_name = "N", requires = "shard", help_heading = "Shards")]
    pub shards: Option<u32>,
    /// The run id all shards share (letters, digits, - _ .). Default: the Slurm job id,
    /// else one derived from the start time they all wait for.
    #[arg(long, value_name = "ID", help_heading = "Shards")]
    pub run_id: Option<String>,
    /// Start at this wall-clock time, so shards on many hosts start together:
    /// 2026-11-23T10:00:00Z, or +30s (from now, or from --start-file's time).
    #[arg(long, value_name = "TIME|+DURATION", help_heading = "Shards")]
    pub start_at: Option<String>,
    /// With --start-at +DURATION: count from this file's modification time; the first
    /// shard to get there creates it (put it on storage all shards see).
    #[arg(
        long,
        value_name = "FILE",
        requires = "start_at",
        help_heading = "Shards"
    )]
    pub start_file: Option<std::path::PathBuf>,
}

/// A value's parse error as a usage error that names its option.
/// An open workload's rates, as this process (its shard) schedules them, within what the
/// arrival thread can keep: above [`crate::engine::MAX_RATE`] it would fall behind for
/// good; a rate between 0 and [`crate::engine::MIN_RATE`] would keep it from hearing the
/// run (the live view's `rate` refuses the same).
fn check_rates(w: &Workload) -> anyhow::Result<()> {
    let Model::Open { profile, .. } = &w.model else {
        return Ok(());
    };
    let shards = w.shard.as_ref().map_or(1, |s| s.count);
    let rates = std::iter::once(profile.start_rate).chain(profile.stages.iter().map(|s| s.rate));
    for r in rates {
        if r > crate::engine::MAX_RATE {
            return usage(format!(
                "a rate of {r:.0}/s in one process is more than spate schedules ({:.0}/s a process): split it over more shards (--shard I/N{})",
                crate::engine::MAX_RATE,
                if shards > 1 { format!(", now {shards}") } else { String::new() }
            ));
        }
        if r > 0.0 && r < crate::engine::MIN_RATE {
            return usage(format!(
                "a rate of {r}/s is below one an hour, the lowest spate schedules"
            ));
        }
    }
    Ok(())
}

fn named<T, E: std::fmt::Display>(flag: &str, r: Result<T, E>) -> anyhow::Result<T> {
    r.map_err(|e| crate::UsageError(format!("{flag}: {e}")).into())
}

/// Units of work a run with no --count, --duration or --stages stops after.
pub const DEFAULT_COUNT: u64 = 1000;

/// Above this many sessions a closed workload starts them at [`DEFAULT_CONNECT_RATE`]
/// unless --connect-rate says otherwise.
const BIG_USERS: u32 = 1000;
const DEFAULT_CONNECT_RATE: f64 = 1000.0;

impl WorkloadArgs {
    /// Validates the options. `unit` names a unit of work in error messages.
    pub fn resolve(&self) -> anyhow::Result<Workload> {
        self.resolve_at(None)
    }

    /// Runs for `d` and no count (a sweep's warm-up, or its hold at the answer).
    pub fn bounded_to(&mut self, d: std::time::Duration) {
        self.duration = Some(format!("{}ms", d.as_millis()));
        self.count = None;
    }

    /// [`WorkloadArgs::resolve`], open at `mix_rate` per second (a traffic mix's rates
    /// added up) when given, as --rate would be.
    pub fn resolve_at(&self, mix_rate: Option<f64>) -> anyhow::Result<Workload> {
        let duration = self
            .duration
            .as_deref()
            .map(|t| named("--duration", units::parse_duration(t)))
            .transpose()?;
        if duration.is_some_and(|d| d.is_zero()) {
            return usage("--duration must be more than 0");
        }
        // Stages set the run's length; otherwise a run with no bound stops at 1000 units.
        let count_is_default = self.count.is_none() && duration.is_none() && self.stages.is_none();
        let count = match count_is_default {
            true => Some(DEFAULT_COUNT),
            false => self.count,
        };
        if count == Some(0) {
            return usage("--count must be at least 1");
        }
        let open = self.rate.is_some() || self.stages.is_some();
        if self.think.is_some() && open {
            return usage(
                "--think is for closed workloads (--users); an open workload (--rate, --stages) starts work on its schedule",
            );
        }
        if self.users.is_some() && open {
            return usage(
                "--users is for closed workloads; an open workload (--rate, --stages) starts work on its schedule, with at most --max-in-flight at once",
            );
        }
        let model = self.model(duration, mix_rate)?;
        let connect_rate = match (&self.connect_rate, &model) {
            (Some(_), Model::Open { .. }) => {
                return usage(
                    "--connect-rate is for closed workloads (--users); an open workload opens connections as its arrivals need them",
                )
            }
            (Some(text), _) => {
                let r = named("--connect-rate", units::parse_rate(text))?;
                if r <= 0.0 {
                    return usage("--connect-rate must be more than 0");
                }
                Some(r)
            }
            (None, Model::Closed { users, .. }) if *users > BIG_USERS => Some(DEFAULT_CONNECT_RATE),
            (None, _) => None,
        };
        let duration_s = match (&model, duration) {
            (_, Some(d)) => Some(d.as_secs_f64()),
            (Model::Open { profile, .. }, None) if profile.total_duration().is_finite() => {
                Some(profile.total_duration())
            }
            _ => None,
        };
        let mut w = Workload {
            count_is_default,
            connect_rate,
            ..Workload::bounded(model, count, duration_s)
        };
        if let Some(text) = &self.start_at {
            w.start = Some(shard::start_time(text, self.start_file.as_deref())?);
        } else if self.run_id.is_some() && self.shard.is_none() {
            return usage("--run-id names the run its shards share: give --shard too");
        }
        if let Some(text) = &self.shard {
            let env = |k: &str| std::env::var(k).ok();
            let of = match text.as_str() {
                "auto" => ShardOf::from_env(self.shards, &env)?,
                t => {
                    let of = ShardOf::parse(t)?;
                    if self.shards.is_some_and(|n| n != of.count) {
                        return usage(format!(
                            "--shards {}: --shard {t} says {} shards",
                            self.shards.unwrap_or(0),
                            of.count
                        ));
                    }
                    of
                }
            };
            w.run_id = Some(shard::shared_run_id(self.run_id.as_deref(), w.start, &env)?);
            w.split(&of, self.users.is_some())?;
            w.shard = Some(of);
        }
        check_rates(&w)?;
        Ok(w)
    }

    /// The workload's model: open at `mix_rate`, --rate or --stages, else closed users.
    fn model(
        &self,
        duration: Option<std::time::Duration>,
        mix_rate: Option<f64>,
    ) -> anyhow::Result<Model> {
        let rate = match (mix_rate, &self.rate) {
            (Some(r), _) => Some(r),
            (None, Some(text)) => Some(named("--rate", units::parse_rate(text))?),
            (None, None) => None,
        };
        Ok(match (rate, &self.stages) {
            (Some(r), _) => {
                if r <= 0.0 {
                    return usage("--rate must be more than 0");
                }
                Model::Open {
                    profile: Profile::constant(r, duration),
                    arrival: self.arrival,
                    max_in_flight: self.max_in_flight,
                }
            }
            (None, Some(stages)) => Model::Open {
                profile: Profile {
                    start_rate: 0.0,
                    stages: named("--stages", schedule::parse_stages(stages))?,
                },
                arrival: self.arrival,
                max_in_flight: self.max_in_flight.max(1),
            },
            (None, None) => {
                let users = self.users.unwrap_or(1);
                if users == 0 {
                    return usage("--users must be at least 1");
                }
                let think = self
                    .think
                    .as_deref()
                    .map(|t| named("--think", units::parse_duration(t)))
                    .transpose()?;
                Model::Closed {
                    users,
                    think_ms: think.map_or(0.0, |d| d.as_secs_f64() * 1000.0),
                }
            }
        })
    }
}

impl Workload {
    /// This shard's share of the load: users (when given: the default is one session per
    /// shard), counts and rates.
    fn split(&mut self, of: &ShardOf, users_given: bool) -> anyhow::Result<()> {
        let n = of.count;
        let too_few = |what: &str, total: u64| {
            usage::<()>(format!(
                "{what} {total} cannot be split into {n} shards: each needs at least one"
            ))
        };
        if let Some(c) = self.count {
            // Every shard, not only those whose share would be 0, refuses such a split.
            if c < u64::from(n) {
                return too_few("--count", c);
            }
            self.count = Some(of.share(c));
        }
        match &mut self.model {
            Model::Closed { .. } if !users_given => {}
            Model::Closed { users, .. } | Model::Paced { users } => {
                if *users < n {
                    return too_few("--users", *users as u64);
                }
                *users = of.share(*users as u64) as u32;
            }
            Model::Open { profile, .. } => {
                // Rates are shared evenly: the sum of the shards' rates is the rate.
                profile.start_rate /= n as f64;
                for s in &mut profile.stages {
                    s.rate /= n as f64;
                }
            }
        }
        // The shards together open connections at the rate given (or the default).
        if let Some(r) = &mut self.connect_rate {
            *r /= n as f64;
        }
        Ok(())
    }
}
