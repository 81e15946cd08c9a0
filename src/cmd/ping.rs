//! `spate ping`: smtpping's job — a few messages, one after another, each phase timed and
//! printed as it happens, then min/avg/max and percentiles per phase. SMTP messages go
//! through the engine like any load (one session, the wait as think time); an XMPP ping
//! ([`xmpp`]) logs in once and times its messages' round trips to itself. A ping keeps
//! no results directory.

mod xmpp;

use std::path::PathBuf;
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
use crate::opts::accounts::read_credentials;
use crate::opts::TransportArgs;
use crate::session::smtp::{AuthMech, Session, Settings};
use crate::session::xmpp::Sasl;
use crate::units::{self, fmt_duration, Range};
use crate::UsageError;

const EXAMPLES: &str = "SMTP (smtpping's job): every message on a connection of its own, each \
phase timed: connect, tls, banner, helo, starttls, auth, mailfrom, rcptto, data, datasent, \
quit, and the message's total.

XMPP: one login, each step timed (connect, tls, stream, starttls, auth, bind, presence), \
then --count chat messages to the session's own full JID, one after another, each timed \
from its write to its arrival back on the same stream (rtt); one that is not back within \
--timeout is lost. The password comes from SPATE_PASSWORD or --users-file, never from the \
command line.

EXAMPLES:
  spate ping smtp://127.0.0.1:2525 --to user@example.test -c 10 -w 0
  spate ping 127.0.0.1:587 --starttls --ca ca.pem --to me@example.test
  SPATE_PASSWORD=pw spate ping xmpp://127.0.0.1:5222 --user alice@example.test \\
      --starttls --ca ca.pem -n 5
  spate ping xmpp://127.0.0.1:5223 --tls --ca ca.pem --users-file users.txt -w 0
  SPATE_PASSWORD=pw spate ping xmpp+wss://chat.example.test/xmpp-websocket \
      --user alice@example.test";

/// The SMTP ping's recipient and sender when none is given.
const DEFAULT_TO: &str = "postmaster@example.test";
const DEFAULT_FROM: &str = "spate-ping@example.test";

#[derive(Debug, Clone, clap::Args)]
#[command(allow_negative_numbers = true)]
#[command(after_long_help = EXAMPLES)]
pub struct Args {
    /// Server: smtp://HOST[:PORT] or HOST[:PORT] (port 25; 24 with --lmtp), or
    /// xmpp://HOST[:PORT] (port 5222; 5223 with --tls); XMPP over WebSocket:
    /// xmpp+ws://HOST[:PORT]/PATH or xmpp+wss://… (path /xmpp-websocket by default).
    pub target: String,
    /// SMTP: recipient of the probe messages [default: postmaster@example.test].
    #[arg(long, short = 't')]
    pub to: Option<String>,
    /// SMTP: sender (smtpping's default is the null sender; ours is a real address)
    /// [default: spate-ping@example.test].
    #[arg(long, short = 'f')]
    pub from: Option<String>,
    /// Number of messages (`-c` as in smtpping and ping also works).
    #[arg(short = 'n', short_alias = 'c', long = "count", default_value_t = 10)]
    pub count: u32,
    /// Wait between messages, with a unit: 500ms, 1s (smtpping's -w took bare
    /// milliseconds; in spate a bare number is seconds, so only 0 may be bare here).
    #[arg(short = 'w', long = "wait", default_value = "1s")]
    pub wait: String,
    /// Message body size [default: 10k, smtpping's; 100 for xmpp://, as spate xmpp].
    #[arg(long, short = 's')]
    pub size: Option<String>,
    /// SMTP: use PIPELINING (off by default so every command has its own time, as in
    /// smtpping).
    #[arg(long)]
    pub pipelining: bool,
    /// SMTP: speak LMTP (LHLO; port 24 by default).
    #[arg(long)]
    pub lmtp: bool,
    /// Upgrade with STARTTLS before sending (its time is the starttls and tls columns).
    #[arg(long, conflicts_with = "tls")]
    pub starttls: bool,
    /// Implicit TLS from the first byte (port 465 style; XMPP's 5223).
    #[arg(long)]
    pub tls: bool,
    /// Trust this CA (PEM), or the server's own self-signed certificate, besides the
    /// system roots.
    #[arg(long)]
    pub ca: Option<String>,
    /// Do not verify the server certificate.
    #[arg(long)]
    pub insecure: bool,
    /// Log in as USER, password from SPATE_PASSWORD: SMTP AUTH, or the bare JID of an
    /// xmpp:// ping (--user).
    #[arg(long, visible_alias = "user", value_name = "USER")]
    pub auth_user: Option<String>,
    /// Log in as the first 'address password' line of FILE instead (the test bed's users
    /// file).
    #[arg(long, value_name = "FILE", conflicts_with = "auth_user")]
    pub users_file: Option<PathBuf>,
    /// XMPP: SASL mechanism [default: auto, the strongest offered of SCRAM-SHA-256,
    /// SCRAM-SHA-1, PLAIN].
    #[arg(long, value_enum)]
    pub sasl: Option<Sasl>,
    /// Deadline for connecting and for each reply (an XMPP message's echo included).
    #[arg(long, default_value = "10s")]
    pub timeout: String,
    /// Also write the statistics as JSON to FILE (per phase and total, in ms; the total is
    /// a whole SMTP message, or an XMPP round trip; `spate sweep` puts a step directory's
    /// ping.json into its table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
}

const COLUMNS: &[(Phase, &str)] = &[
    (Phase::CONNECT, "connect"),
    (Phase::TLS, "tls"),
    (crate::session::smtp::phase::BANNER, "banner"),
    (crate::session::smtp::phase::EHLO, "helo"),
    (crate::session::smtp::phase::LHLO, "lhlo"),
    (crate::session::smtp::phase::STARTTLS, "starttls"),
    (crate::session::smtp::phase::AUTH, "auth"),
    (crate::session::smtp::phase::MAIL, "mailfrom"),
    (crate::session::smtp::phase::RCPT, "rcptto"),
    (crate::session::smtp::phase::DATA, "data"),
    (crate::session::smtp::phase::ENVELOPE, "envelope"),
    (crate::session::smtp::phase::BODY, "datasent"),
    (crate::session::smtp::phase::QUIT, "quit"),
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

/// The per-phase histograms and failures, filled message by message: the SMTP ping's
/// and the XMPP ping's, each with its own columns and name for a message's total.
struct Stats {
    columns: &'static [(Phase, &'static str)],
    /// What the table calls a message's total ("total", "rtt").
    total_name: &'static str,
    hists: Vec<Histogram<u64>>,
    total: Histogram<u64>,
    failures: u32,
}

impl Stats {
    fn new(columns: &'static [(Phase, &'static str)], total_name: &'static str) -> Self {
        Stats {
            columns,
            total_name,
            hists: columns.iter().map(|_| new_histogram()).collect(),
            total: new_histogram(),
            failures: 0,
        }
    }

    /// Records `us` of `phase`; the phase's column name, or None when the ping does not
    /// show the phase.
    fn record(&mut self, phase: Phase, us: u64) -> Option<&'static str> {
        let i = self.columns.iter().position(|(p, _)| *p == phase)?;
        self.hists[i].saturating_record(us.max(1));
        Some(self.columns[i].1)
    }

    /// Records a whole message.
    fn record_total(&mut self, us: u64) {
        self.total.saturating_record(us.max(1));
    }

    /// Prints min/avg/max and percentiles per phase and for the whole message; returns
    /// the same in milliseconds (ping.json): per phase, and the total.
    fn table(
        &self,
    ) -> (
        serde_json::Map<String, serde_json::Value>,
        serde_json::Value,
    ) {
        println!(
            "{:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "phase", "min", "avg", "max", "p50", "p90", "p99"
        );
        let fd = |us: u64| fmt_duration(Duration::from_micros(us));
        let rows = self
            .columns
            .iter()
            .map(|(_, n)| *n)
            .zip(self.hists.iter())
            .chain(std::iter::once((self.total_name, &self.total)));
        let mut phases = serde_json::Map::new();
        let mut total = serde_json::Value::Null;
        for (i, (name, h)) in rows.enumerate() {
            if h.is_empty() {
                continue;
            }
            let ms = |us: f64| (us / 10.0).round() / 100.0;
            let row = serde_json::json!({
                "count": h.len(),
                "min_ms": ms(h.min() as f64),
                "mean_ms": ms(h.mean()),
                "max_ms": ms(h.max() as f64),
                "p50_ms": ms(h.value_at_quantile(0.5) as f64),
                "p90_ms": ms(h.value_at_quantile(0.9) as f64),
                "p99_ms": ms(h.value_at_quantile(0.99) as f64),
            });
            if i == self.columns.len() {
                total = row;
            } else {
                phases.insert(name.to_string(), row);
            }
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
        (phases, total)
    }

    /// Prints the table and, with --json, writes `fields` with the table's phases and
    /// total to that file.
    fn finish(
        &self,
        json: Option<&std::path::Path>,
        fields: serde_json::Value,
    ) -> anyhow::Result<()> {
        let (phases, total) = self.table();
        let Some(path) = json else { return Ok(()) };
        let mut j = fields;
        j["phases"] = serde_json::Value::Object(phases);
        j["total"] = total;
        std::fs::write(path, serde_json::to_string_pretty(&j)? + "\n")
            .map_err(|e| anyhow::anyhow!("--json {}: {e}", path.display()))
    }

    /// Prints one SMTP message's line (smtpping's columns) and counts it.
    fn message(&mut self, seq: u64, r: &UnitReport) {
        let mut line = format!("seq={:<3}", seq + 1);
        let sum = |phase: Phase| -> Option<u64> {
            let mut it = r.timings.iter().filter(|(p, _)| *p == phase).peekable();
            it.peek()?;
            Some(it.map(|(_, us)| *us).sum())
        };
        for (phase, _) in self.columns {
            if let Some(us) = sum(*phase) {
                if let Some(name) = self.record(*phase, us) {
                    line.push_str(&format!(
                        " {name}={}",
                        fmt_duration(Duration::from_micros(us))
                    ));
                }
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
                let took = sum(Phase::RESPONSE).unwrap_or(0)
                    + sum(crate::session::smtp::phase::QUIT).unwrap_or(0);
                self.record_total(took);
                line.push_str(&format!(
                    " total={}",
                    fmt_duration(Duration::from_micros(took))
                ));
            }
        }
        println!("{line}");
    }
}

/// The account to log in as: --auth-user (alias --user) with the password from
/// SPATE_PASSWORD, or the first line of --users-file; None when neither is given.
fn account(a: &Args) -> Result<Option<(String, String)>, UsageError> {
    if let Some(path) = &a.users_file {
        return Ok(read_credentials(path)?.into_iter().next());
    }
    let Some(user) = &a.auth_user else {
        return Ok(None);
    };
    let pass = std::env::var("SPATE_PASSWORD").map_err(|_| {
        UsageError(
            "--auth-user/--user needs the password in the environment variable SPATE_PASSWORD"
                .into(),
        )
    })?;
    Ok(Some((user.clone(), pass)))
}

/// The transport options a ping has.
fn transport(a: &Args) -> TransportArgs {
    TransportArgs {
        starttls: a.starttls,
        tls: a.tls,
        ca: a.ca.clone(),
        insecure: a.insecure,
        cert: None,
        key: None,
        bind: Vec::new(),
        timeout: a.timeout.clone(),
        server_name: None,
        no_resumption: false,
    }
}

/// The SMTP session settings of a ping: one message per connection, no results.
fn settings(a: &Args) -> anyhow::Result<Settings> {
    let auth = account(a)?.map(|acct| (AuthMech::Auto, vec![acct]));
    Ok(Settings {
        endpoint: transport(a).endpoint(&a.target, if a.lmtp { 24 } else { 25 }, false)?,
        lmtp: a.lmtp,
        tls_percent: 0,
        auth,
        pipelining: a.pipelining,
        // smtpping's columns: DATA and the final dot, never a BDAT group.
        across: false,
        chunking: false,
        helo: "spate.localhost".into(),
        messages_per_connection: Range::fixed(1),
        dsn_notify: None,
        shard: None,
    })
}

fn factory(a: &Args, run_id: &str) -> anyhow::Result<Factory> {
    let bad = |e: crate::message::MessageError| UsageError(e.to_string());
    let size = units::parse_size_range(a.size.as_deref().unwrap_or("10k"))?;
    let from = AddressPool::from_pattern(a.from.as_deref().unwrap_or(DEFAULT_FROM)).map_err(bad)?;
    let to = AddressPool::from_pattern(a.to.as_deref().unwrap_or(DEFAULT_TO)).map_err(bad)?;
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

/// The protocol a target names by its scheme (none: SMTP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scheme {
    Smtp,
    Xmpp,
}

fn scheme(target: &str) -> anyhow::Result<Scheme> {
    match target.trim().split_once("://") {
        None => Ok(Scheme::Smtp),
        Some(("smtp" | "lmtp", _)) => Ok(Scheme::Smtp),
        Some(("xmpp" | "xmpp+ws" | "xmpp+wss", _)) => Ok(Scheme::Xmpp),
        Some((other, _)) => crate::usage(format!(
            "unsupported scheme '{other}://' in '{target}': spate ping takes smtp://, lmtp://, xmpp://, xmpp+ws://, xmpp+wss:// or HOST[:PORT] (SMTP)"
        )),
    }
}

/// -w: a duration with a unit, or a bare 0.
fn wait(text: &str) -> anyhow::Result<Duration> {
    let bare = !text.is_empty() && text.chars().all(|c| c.is_ascii_digit());
    if bare && text.parse::<u64>() != Ok(0) {
        return crate::usage(format!(
            "-w {text}: give a unit ({text}ms or {text}s); smtpping's bare milliseconds would be seconds elsewhere in spate"
        ));
    }
    if bare {
        return Ok(Duration::ZERO);
    }
    Ok(units::parse_duration(text)?)
}

/// `spate ping`.
pub async fn run(mut a: Args, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    if a.count == 0 {
        return crate::usage("-n/--count must be at least 1");
    }
    let wait = wait(&a.wait)?;
    // lmtp:// speaks LMTP (LHLO, port 24), as --lmtp does.
    if a.target.trim().starts_with("lmtp://") {
        a.lmtp = true;
    }
    if let Some(path) = &a.json {
        writable(path)?;
    }
    match scheme(&a.target)? {
        Scheme::Xmpp => xmpp::run(&a, wait).await,
        Scheme::Smtp => smtp(a, wait, ctx).await,
    }
}

/// Refuses a --json path that cannot be written before any probe is sent (the file is
/// created empty when it is new, and left as it is when it exists).
fn writable(path: &std::path::Path) -> anyhow::Result<()> {
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .map(drop)
        .map_err(|e| crate::UsageError(format!("--json {}: {e}", path.display())).into())
}

/// The SMTP ping.
async fn smtp(a: Args, wait: Duration, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    if a.sasl.is_some() {
        return crate::usage("--sasl is for xmpp:// pings (SMTP AUTH picks its mechanism)");
    }
    let settings = Arc::new(settings(&a)?);
    let protocol = if a.lmtp { "lmtp" } else { "smtp" };
    let plan = Plan {
        head: PlanHead::new::<Session>(ctx.command_line.clone(), protocol, &a.target),
        workload: Workload::bounded(
            Model::Closed {
                users: 1,
                think_ms: wait.as_secs_f64() * 1000.0,
            },
            Some(u64::from(a.count.max(1))),
            None,
        ),
    };
    let factory = Arc::new(factory(&a, &plan.head.run_id)?);
    let (from, to) = (
        a.from.as_deref().unwrap_or(DEFAULT_FROM),
        a.to.as_deref().unwrap_or(DEFAULT_TO),
    );
    println!(
        "PING {} ({}) from <{from}> to <{to}>, {} messages of {} bytes",
        plan.head.target, settings.endpoint.addr, a.count, factory.size.lo
    );
    let stats = Arc::new(Mutex::new(Stats::new(COLUMNS, "total")));
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
        Stats::new(COLUMNS, "total"),
    );
    println!(
        "\n--- {} statistics: {} sent, {} failed ---",
        plan.head.target, a.count, stats.failures
    );
    stats.finish(
        a.json.as_deref(),
        serde_json::json!({
            "target": plan.head.target,
            "to": to,
            "count": a.count,
            "failed": stats.failures,
            "wait_ms": wait.as_millis() as u64,
            "size": factory.size.lo,
        }),
    )?;
    Ok(if stats.failures > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
