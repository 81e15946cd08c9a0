//! summary.json: what a report needs, computed from the totals.

use std::borrow::Cow;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::metrics::{Counters, Phase, Shard};

pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PhaseStats {
    pub phase: String,
    pub count: u64,
    pub min_us: u64,
    pub mean_us: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    /// The 95th percentile: the statistic quality-of-service rules are written in
    /// (SPECmail's, Exchange Load Generator's). Absent from runs written before it was.
    #[serde(default)]
    pub p95_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl PhaseStats {
    pub fn from_hist(phase: Phase, h: &Histogram<u64>) -> Self {
        PhaseStats {
            phase: phase.name().to_string(),
            count: h.len(),
            min_us: h.min(),
            mean_us: (h.mean() * 10.0).round() / 10.0,
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p95_us: h.value_at_quantile(0.95),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorRow {
    pub phase: String,
    pub kind: String,
    pub code: u16,
    pub enhanced: Option<String>,
    pub text: String,
    pub count: u64,
    pub sample: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub schema_version: u32,
    pub spate_version: String,
    pub run_id: String,
    pub command: Vec<String>,
    pub protocol: String,
    /// What the protocol calls its unit of work and its throughput (declared by its
    /// driver); absent from runs written before it was: [`Summary::words`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub words: Option<UnitWords>,
    pub target: String,
    pub started_at: String,
    pub ended_at: String,
    pub elapsed_s: f64,
    /// False while the run is going on; a summary that stays false was killed hard.
    pub complete: bool,
    /// Stopped by Ctrl-C / SIGTERM before its planned end.
    pub interrupted: bool,
    /// What stopped it: SIGINT, SIGTERM, or q in the live dashboard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted_by: Option<String>,
    pub totals: Counters,
    pub reconciles: bool,
    pub messages_per_s: f64,
    pub kbytes_per_s: f64,
    pub phases: Vec<PhaseStats>,
    pub errors: Vec<ErrorRow>,
    pub generator_cpu_s: f64,
    /// Generator CPU as a percentage of all the machine's cores.
    pub generator_cpu_pct: f64,
    /// What the generator CPU covers: "process", "process less the embedded server's
    /// threads", or either shared with parallel workloads (engine::cpu).
    #[serde(default)]
    pub generator_cpu_basis: String,
    pub cores: usize,
    pub warnings: Vec<String>,
    /// Sections added by observers and later steps (monitoring, verification), by name.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// A protocol's words for its unit of work, as every view of a run writes them: the
/// units ("messages", "visits", "requests"), their rate ("msg/s") and what happened to
/// the bytes ("sent", "read"); and which of its phases time a unit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitWords {
    pub unit: Cow<'static, str>,
    pub rate: Cow<'static, str>,
    pub bytes: Cow<'static, str>,
    /// The phases that time the server's work on a unit, best first (a message's
    /// transaction, a whole mailbox visit, a stanza's arrival): the latency a report
    /// leads with.
    #[serde(default)]
    pub service: Cow<'static, [Phase]>,
    /// Whether the engine's `response` (from the unit's schedule to its end) is a unit's
    /// latency; not for a unit that gets no answer (an XMPP stanza).
    #[serde(default = "yes")]
    pub response: bool,
}

fn yes() -> bool {
    true
}

impl UnitWords {
    pub const fn new(
        unit: &'static str,
        rate: &'static str,
        bytes: &'static str,
        service: &'static [Phase],
        response: bool,
    ) -> UnitWords {
        UnitWords {
            unit: Cow::Borrowed(unit),
            rate: Cow::Borrowed(rate),
            bytes: Cow::Borrowed(bytes),
            service: Cow::Borrowed(service),
            response,
        }
    }

    /// The words of a run whose summary does not carry them (written before drivers
    /// declared them): what spate then called the units of each protocol it had.
    pub fn before_declared(protocol: &str) -> UnitWords {
        let named = |names: &[&str]| -> Cow<'static, [Phase]> {
            names.iter().map(|n| Phase::named(n)).collect()
        };
        let (unit, rate, bytes, service, response) = match protocol {
            "pop3" | "imap" | "pop3+imap" => ("visits", "visits/s", "read", &["session"][..], true),
            "rr" => ("requests", "req/s", "sent", &[][..], true),
            "xmpp" => (
                "messages",
                "msg/s",
                "sent",
                &["multicast_last", "arrival", "broadcast_last", "reply"][..],
                false,
            ),
            _ => (
                "messages",
                "msg/s",
                "sent",
                &["transaction", "body"][..],
                true,
            ),
        };
        UnitWords {
            service: named(service),
            ..UnitWords::new(unit, rate, bytes, &[], response)
        }
    }
}

impl Summary {
    /// The run's unit words: as its protocol declared them, or, for a run written before
    /// summaries carried them, as that version of spate named them.
    pub fn words(&self) -> UnitWords {
        match &self.words {
            // Words written before they named the service phases: as that spate had them.
            Some(w) if w.service.is_empty() => UnitWords {
                service: UnitWords::before_declared(&self.protocol).service,
                ..w.clone()
            },
            Some(w) => w.clone(),
            None => UnitWords::before_declared(&self.protocol),
        }
    }

    /// The phase that times the server's work on a unit (the words' `service`, best
    /// first), else the response time.
    pub fn service_phase(&self) -> Option<&PhaseStats> {
        let w = self.words();
        w.service
            .iter()
            .find_map(|p| self.phase(p.name()))
            .or_else(|| self.phase("response").filter(|_| w.response))
    }

    /// A unit's latency from its schedule (the response time, where a unit gets one),
    /// else the phase that times the server's work on it.
    pub fn latency_phase(&self) -> Option<&PhaseStats> {
        let w = self.words();
        self.phase("response")
            .filter(|_| w.response)
            .or_else(|| w.service.iter().find_map(|p| self.phase(p.name())))
    }

    pub fn phases_from(totals: &Shard) -> Vec<PhaseStats> {
        totals
            .hists()
            .map(|(p, h)| PhaseStats::from_hist(p, h))
            .collect()
    }

    pub fn errors_from(totals: &Shard) -> Vec<ErrorRow> {
        let mut rows: Vec<ErrorRow> = totals
            .errors
            .iter()
            .map(|(k, v)| ErrorRow {
                phase: k.phase.name().to_string(),
                kind: k.kind.name().to_string(),
                code: k.code,
                enhanced: k.detail.map(|e| e.to_string()),
                text: k.text.clone(),
                count: v.count,
                sample: v.sample.clone(),
            })
            .collect();
        rows.sort_by(|a, b| b.count.cmp(&a.count).then(a.phase.cmp(&b.phase)));
        rows
    }

    pub fn phase(&self, name: &str) -> Option<&PhaseStats> {
        self.phases.iter().find(|p| p.phase == name)
    }

    pub fn read(dir: &std::path::Path) -> anyhow::Result<Summary> {
        let path = dir.join("summary.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let s: Summary = serde_json::from_str(&text)
            .map_err(|e| anyhow::anyhow!("{}: not a spate summary: {e}", path.display()))?;
        Ok(s)
    }
}
