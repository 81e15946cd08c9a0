//! The summary of a run from its totals: rates, percentiles, errors, the generator's own
//! CPU, and the warnings a user must see.

use std::time::{Duration, SystemTime};

use super::{Summary, SCHEMA_VERSION};
use crate::metrics::Shard;

/// The fixed part of every summary of a run.
#[derive(Debug, Clone)]
pub struct SummaryHeader {
    pub run_id: String,
    pub command: Vec<String>,
    pub protocol: String,
    pub words: super::UnitWords,
    pub target: String,
    pub started: SystemTime,
}

impl SummaryHeader {
    pub fn summary(
        &self,
        totals: &Shard,
        elapsed: f64,
        complete: bool,
        interrupted: bool,
        (cpu, cpu_basis): (Duration, &str),
    ) -> Summary {
        let c = totals.counters;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let cpu_s = cpu.as_secs_f64();
        let cpu_pct = if elapsed > 0.0 {
            cpu_s / elapsed / cores as f64 * 100.0
        } else {
            0.0
        };
        let mut warnings = Vec::new();
        if complete && cpu_pct > 80.0 && elapsed > 2.0 {
            warnings.push(format!(
                "the generator used {cpu_pct:.0}% of all {cores} cores: it, not the server, may be the bottleneck"
            ));
        }
        // Sessions logging in again hold their units back as surely as a busy generator:
        // said when there were any, so the generator is not blamed for the server.
        let relogins = |lead: &str| match c.reconnections {
            0 => String::new(),
            n => format!("{lead}sessions were logging in again ({n} reconnections)"),
        };
        if c.late > 0 {
            warnings.push(format!("{} units of work started more than 10 ms behind schedule: the generator or --max-in-flight could not keep the rate{}", c.late, relogins(", or ")));
        }
        if c.unfinished > 0 {
            warnings.push(format!("{} units of work were still running when the run ended and are counted as unfinished (the phase each was in is in the error table): a slow server, or raise --grace", c.unfinished));
        }
        if c.dropped > 0 {
            warnings.push(format!("{} arrivals were dropped: every one of --max-in-flight sessions was busy and the backlog full{}", c.dropped, relogins("; ")));
        }
        let per_s = |n: f64| if elapsed > 0.0 { n / elapsed } else { 0.0 };
        Summary {
            schema_version: SCHEMA_VERSION,
            spate_version: env!("CARGO_PKG_VERSION").to_string(),
            run_id: self.run_id.clone(),
            command: self.command.clone(),
            protocol: self.protocol.clone(),
            words: Some(self.words.clone()),
            target: self.target.clone(),
            started_at: crate::results::rfc3339(self.started),
            ended_at: crate::results::rfc3339(self.started + Duration::from_secs_f64(elapsed)),
            elapsed_s: (elapsed * 1000.0).round() / 1000.0,
            complete,
            interrupted,
            interrupted_by: None,
            totals: c,
            reconciles: c.reconciles(),
            messages_per_s: per_s(c.accepted as f64),
            kbytes_per_s: per_s(c.bytes as f64 / 1024.0),
            phases: Summary::phases_from(totals),
            errors: Summary::errors_from(totals),
            generator_cpu_s: (cpu_s * 1000.0).round() / 1000.0,
            generator_cpu_pct: (cpu_pct * 10.0).round() / 10.0,
            generator_cpu_basis: cpu_basis.to_string(),
            cores,
            warnings,
            extra: Default::default(),
        }
    }
}
