//! `spate ping`: smtpping's job — a few messages, one after another, each phase timed and
//! printed as it happens, then min/avg/max and percentiles per phase. The messages go
//! through the engine like any load (one session, the wait as think time); a ping keeps
//! no results directory.

use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::ctx::Ctx;
use crate::engine::{self, Model, Outcome, PlanHead, PlanInfo, UnitReport, Workload};
use crate::message::{AddressPool, Factory, Pick};
use crate::metrics::{new_histogram, Phase};
use crate::opts::TransportArgs;
use crate::session::smtp::{AuthMech, Session, Settings};
use crate::units::{self, fmt_duration, Range};
use crate::UsageError;

#[derive(Debug, Clone, clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(after_long_help = "EXAMPLES:\n  \
    spate ping smtp://127.0.0.1:2525 --to user@example.test -c 10 -w 0\n  \
    spate ping 127.0.0.1:587 --starttls --ca ca.pem --to me@example.test")]
pub struct Args {
    /// Server, smtp://HOST[:PORT] or HOST[:PORT].
    pub target: String,
    /// Recipient of the probe messages.
    #[arg(long, short = 't', default_value = "postmaster@example.test")]
    pub to: String,
    /// Sender (smtpping's default is the null sender; ours is a real address).
    #[arg(long, short = 'f', default_value = "spate-ping@example.test")]
    pub from: String,
    /// Number of messages (`-c` as in smtpping and ping also works).
    #[arg(short = 'n', short_alias = 'c', long = "count", default_value_t = 10)]
    pub count: u32,
    /// Wait between messages, with a unit: 500ms, 1s (smtpping's -w took bare
    /// milliseconds; in spate a bare number is seconds, so only 0 may be bare here).
    #[arg(short = 'w', long = "wait", default_value = "1s")]
    pub wait: String,
    /// Message body size (smtpping's default is 10 KiB).
    #[arg(long, short = 's', default_value = "10k")]
    pub size: String,
    /// Use PIPELINING (off by default so every command has its own time, as in smtpping).
    #[arg(long)]
    pub pipelining: bool,
    /// Speak LMTP (LHLO; port 24 by default).
    #[arg(long)]
    pub lmtp: bool,
    /// Upgrade with STARTTLS before sending (its time is the starttls and tls columns).
    #[arg(long, conflicts_with = "tls")]
    pub starttls: bool,
    /// Implicit TLS from the first byte (port 465 style).
    #[arg(long)]
    pub tls: bool,
    /// Trust this CA (PEM), or the server's own self-signed certificate, besides the
    /// system roots.
    #[arg(long)]
    pub ca: Option<String>,
    /// Do not verify the server certificate.
    #[arg(long)]
    pub insecure: bool,
    /// Authenticate as USER, password from SPATE_PASSWORD.
    #[arg(long)]
    pub auth_user: Option<String>,
    /// Deadline for connecting and for each reply.
    #[arg(long, default_value = "10s")]
    pub timeout: String,
    /// Also write the statistics as JSON to FILE (per phase and total, in ms; `spate
    /// sweep` puts a step directory's ping.json into its table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
}

const COLUMNS: &[(Phase, &str)] = &[
    (Phase::Connect, "connect"),
    (Phase::Tls, "tls"),
    (Phase::Banner, "banner"),
    (Phase::Ehlo, "helo"),
    (Phase::Lhlo, "lhlo"),
    (Phase::Auth, "auth"),
    (Phase::Mail, "mailfrom"),
    (Phase::Rcpt, "rcptto"),
    (Phase::Data, "data"),
    (Phase::Envelope, "envelope"),
    (Phase::Body, "datasent"),
    (Phase::Quit, "quit"),
];

/// What a ping run is, for the engine.
#[derive(Serialize)]
struct Plan {
    head: PlanHead,
    workload: Workload,
}

impl PlanInfo for Plan {
    fn head(&self) -> &PlanHead {
        &self.head
    }
    fn workload(&self) -> &Workload {
        &self.workload
    }
    fn seed(&self) -> u64 {
        1
    }
    fn grace(&self) -> &str {
        "1s"
    }
}

/// The per-phase histograms and failures, filled message by message.
struct Stats {
    hists: Vec<Histogram<u64>>,
    total: Histogram<u64>,
    failures: u32,
}

impl Stats {
    fn new() -> Self {
        Stats {
            hists: COLUMNS.iter().map(|_| new_histogram()).collect(),
            total: new_histogram(),
            failures: 0,
        }
    }

    /// Prints min/avg/max and percentiles per phase and for the whole message; returns
    /// the same per phase in milliseconds (ping.json).
    fn table(&self) -> serde_json::Map<String, serde_json::Value> {
        println!(
            "{:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "phase", "min", "avg", "max", "p50", "p90", "p99"
        );
        let fd = |us: u64| fmt_duration(Duration::from_micros(us));
        let rows = COLUMNS
            .iter()
            .map(|(_, n)| *n)
            .zip(self.hists.iter())
            .chain(std::iter::once(("total", &self.total)));
        let mut phases = serde_json::Map::new();
        for (name, h) in rows {
            if h.is_empty() {
                continue;
            }
            let ms = |us: f64| (us / 10.0).round() / 100.0;
            phases.insert(
                name.to_string(),
                serde_json::json!({
                    "count": h.len(),
                    "min_ms": ms(h.min() as f64),
                    "mean_ms": ms(h.mean()),
                    "max_ms": ms(h.max() as f64),
                    "p50_ms": ms(h.value_at_quantile(0.5) as f64),
                    "p90_ms": ms(h.value_at_quantile(0.9) as f64),
                    "p99_ms": ms(h.value_at_quantile(0.99) as f64),
                }),
            );
            println!(
                "{:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
                name,
                fd(h.min()),
                fd(h.mean() as u64),
                fd(h.max()),
                fd(h.value_at_quantile(0.5)),
                fd(h.value_at_quantile(0.9)),
                fd(h.value_at_quantile(0.99))
            );
        }
        phases
    }

    /// Prints one message's line (smtpping's columns) and counts it.
    fn message(&mut self, seq: u64, r: &UnitReport) {
        let mut line = format!("seq={:<3}", seq + 1);
        let sum = |phase: Phase| -> Option<u64> {
            let mut it = r.timings.iter().filter(|(p, _)| *p == phase).peekable();
            it.peek()?;
            Some(it.map(|(_, us)| *us).sum())
        };
        for (i, (phase, name)) in COLUMNS.iter().enumerate() {
            if let Some(us) = sum(*phase) {
                self.hists[i].saturating_record(us.max(1));
                line.push_str(&format!(
                    " {name}={}",
                    fmt_duration(Duration::from_micros(us))
                ));
            }
        }
        match r.errors.first() {
            Some((_, sample)) => {
                self.failures += 1;
                line.push_str(&format!(" ERROR {sample}"));
            }
            None => {
                // The whole message as smtpping times it: to the final reply and, when
                // the connection closed with it, its QUIT.
                let took = sum(Phase::Response).unwrap_or(0) + sum(Phase::Quit).unwrap_or(0);
                self.total.saturating_record(took.max(1));
                line.push_str(&format!(
                    " total={}",
                    fmt_duration(Duration::from_micros(took))
                ));
            }
        }
        println!("{line}");
    }
}

/// The SMTP session settings of a ping: one message per connection, no results.
fn settings(a: &Args) -> anyhow::Result<Settings> {
    let transport = TransportArgs {
        starttls: a.starttls,
        tls: a.tls,
        ca: a.ca.clone(),
        insecure: a.insecure,
        cert: None,
        key: None,
        bind: Vec::new(),
        timeout: a.timeout.clone(),
    };
    let auth = match &a.auth_user {
        Some(user) => {
            let pass = std::env::var("SPATE_PASSWORD").map_err(|_| {
                UsageError(
                    "--auth-user needs the password in the environment variable SPATE_PASSWORD"
                        .into(),
                )
            })?;
            Some((AuthMech::Auto, vec![(user.clone(), pass)]))
        }
        None => None,
    };
    Ok(Settings {
        endpoint: transport.endpoint(&a.target, if a.lmtp { 24 } else { 25 }, false)?,
        lmtp: a.lmtp,
        tls_percent: 0,
        auth,
        pipelining: a.pipelining,
        helo: "spate.localhost".into(),
        messages_per_connection: Range::fixed(1),
        dsn_notify: None,
    })
}

fn factory(a: &Args, run_id: &str) -> anyhow::Result<Factory> {
    let bad = |e: crate::message::MessageError| UsageError(e.to_string());
    let size = units::parse_size_range(&a.size)?;
    let from = AddressPool::from_pattern(&a.from).map_err(bad)?;
    let to = AddressPool::from_pattern(&a.to).map_err(bad)?;
    Ok(Factory::new(
        run_id.into(),
        size,
        Range::fixed(1),
        from,
        to,
        Pick::RoundRobin,
    )
    .map_err(bad)?)
}

/// `spate ping`.
pub async fn run(a: Args, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    if a.count == 0 {
        return crate::usage("-n/--count must be at least 1");
    }
    let bare = !a.wait.is_empty() && a.wait.chars().all(|c| c.is_ascii_digit());
    let wait = if bare && a.wait.parse::<u64>() != Ok(0) {
        return crate::usage(format!(
            "-w {0}: give a unit ({0}ms or {0}s); smtpping's bare milliseconds would be seconds elsewhere in spate",
            a.wait
        ));
    } else if bare {
        Duration::ZERO
    } else {
        units::parse_duration(&a.wait)?
    };
    let settings = Arc::new(settings(&a)?);
    let protocol = if a.lmtp { "lmtp" } else { "smtp" };
    let plan = Plan {
        head: PlanHead::new::<Session>(ctx.command_line.clone(), protocol, &a.target),
        workload: Workload {
            model: Model::Closed {
                users: 1,
                think_ms: wait.as_secs_f64() * 1000.0,
            },
            count: Some(u64::from(a.count.max(1))),
            duration_s: None,
            count_is_default: false,
            after_setup: false,
        },
    };
    let factory = Arc::new(factory(&a, &plan.head.run_id)?);
    println!(
        "PING {} ({}) from <{}> to <{}>, {} messages of {} bytes",
        plan.head.target, settings.endpoint.addr, a.from, a.to, a.count, factory.size.lo
    );
    let stats = Arc::new(Mutex::new(Stats::new()));
    let hook = {
        let stats = stats.clone();
        Box::new(move |seq: u64, _: Outcome, r: &UnitReport| {
            stats
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .message(seq, r)
        })
    };
    let stop = Arc::new(AtomicBool::new(false));
    let run = engine::Setup::new(&plan, None, None, Vec::new(), stop)?.on_unit(hook);
    engine::run(run, |id, rng| {
        Session::new(id, settings.clone(), factory.builder(rng, id))
    })
    .await?;
    let stats = std::mem::replace(
        &mut *stats.lock().unwrap_or_else(|p| p.into_inner()),
        Stats::new(),
    );
    println!(
        "\n--- {} statistics: {} sent, {} failed ---",
        plan.head.target, a.count, stats.failures
    );
    let mut phases = stats.table();
    if let Some(path) = &a.json {
        let total = phases.remove("total");
        let j = serde_json::json!({
            "target": plan.head.target,
            "to": a.to,
            "count": a.count,
            "failed": stats.failures,
            "wait_ms": wait.as_millis() as u64,
            "size": factory.size.lo,
            "phases": phases,
            "total": total,
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)? + "\n")
            .map_err(|e| anyhow::anyhow!("--json {}: {e}", path.display()))?;
    }
    Ok(if stats.failures > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
