//! How much load, and for how long: the workload options every load command shares, and
//! their validation into the engine's [`Workload`].

use serde::Serialize;

use crate::engine::schedule::{self, Arrival, Model, Profile, Workload};
use crate::units;
use crate::usage;

/// How much load, and for how long: shared by every load command.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct WorkloadArgs {
    /// Concurrent sessions (closed workload: each does one unit of work, waits for the
    /// reply, does the next) [default: 1]. An open workload (--rate, --stages) has no
    /// fixed sessions: --max-in-flight bounds its concurrency instead.
    #[arg(long, short = 'u', value_name = "N", help_heading = "Workload")]
    pub users: Option<u32>,
    /// Stop after this many units of work in total (default 1000 when neither --duration
    /// nor --stages bounds the run).
    #[arg(long, short = 'n', help_heading = "Workload")]
    pub count: Option<u64>,
    /// Stop after this long (e.g. 30s, 10m, 1h).
    #[arg(long, short = 'd', help_heading = "Workload")]
    pub duration: Option<String>,
    /// Pause between units of work of one session (closed workload), e.g. 100ms.
    #[arg(long, help_heading = "Workload")]
    pub think: Option<String>,
    /// Open workload: start work at this rate whether or not earlier work finished
    /// (200/s, 5000/min). Latency then counts from each scheduled start.
    #[arg(long, help_heading = "Workload")]
    pub rate: Option<String>,
    /// Stages of an open workload, ramping linearly: 1m:100/s,5m:500/s,1m:0/s.
    #[arg(long, conflicts_with = "rate", help_heading = "Workload")]
    pub stages: Option<String>,
    /// Spacing of open-workload arrivals.
    #[arg(long, value_enum, default_value_t = Arrival::Constant, help_heading = "Workload")]
    pub arrival: Arrival,
    /// Open workload: most units of work in flight at once (also the number of connections).
    #[arg(long, default_value_t = 1000, help_heading = "Workload")]
    pub max_in_flight: u32,
}

/// Units of work a run with no --count, --duration or --stages stops after.
pub const DEFAULT_COUNT: u64 = 1000;

impl WorkloadArgs {
    /// Validates the options. `unit` names a unit of work in error messages.
    pub fn resolve(&self) -> anyhow::Result<Workload> {
        let duration = self
            .duration
            .as_deref()
            .map(units::parse_duration)
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
        let model = match (&self.rate, &self.stages) {
            (Some(rate), _) => {
                let r = units::parse_rate(rate)?;
                if r <= 0.0 {
                    return usage("--rate must be more than 0");
                }
                Model::Open {
                    profile: Profile::constant(r, duration),
                    arrival: self.arrival,
                    max_in_flight: self.max_in_flight.max(1),
                }
            }
            (None, Some(stages)) => Model::Open {
                profile: Profile {
                    start_rate: 0.0,
                    stages: schedule::parse_stages(stages)?,
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
                    .map(units::parse_duration)
                    .transpose()?;
                Model::Closed {
                    users,
                    think_ms: think.map_or(0.0, |d| d.as_secs_f64() * 1000.0),
                }
            }
        };
        let duration_s = match (&model, duration) {
            (_, Some(d)) => Some(d.as_secs_f64()),
            (Model::Open { profile, .. }, None) if profile.total_duration().is_finite() => {
                Some(profile.total_duration())
            }
            _ => None,
        };
        Ok(Workload {
            model,
            count,
            duration_s,
            count_is_default,
            after_setup: false,
        })
    }
}
