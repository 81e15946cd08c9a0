//! `spate xmpp`: XMPP sessions that log in and stay logged in, and stamped one-to-one
//! messages between them whose delivery is timed at every recipient and accounted for in
//! a ledger (expected, delivered, missing, duplicated).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::{observers, print_outcome, Finished};
use crate::ctx::Ctx;
use crate::engine::{self, Observer, PlanHead, Workload};
use crate::opts::accounts::AccountsArgs;
use crate::opts::{MonitorArgs, OutputArgs, PickArg, TransportArgs, WorkloadArgs};
use crate::results::Summary;
use crate::session::xmpp::ledger::Ledger;
use crate::session::xmpp::{Account, Gate, Sasl, Session, Settings, Traffic};
use crate::session::TlsMode;
use crate::{usage, UsageError};

const EXAMPLES: &str = "A unit of work is one message from a session to another session of the \
run, stamped with the run id, its sequence and its send time. Every session logs in first \
(connect, TLS, stream, STARTTLS, SASL, bind, roster, initial presence: each a phase), and no \
message goes out before every session has tried to log in. Each recipient times the arrival \
(the arrival phase) and the ledger counts expected, delivered, missing and duplicated \
deliveries; exit status 1 when some are missing.

EXAMPLES:
  SPATE_PASSWORD=pw spate xmpp 127.0.0.1:5222 --user-pattern 'user{0..99}@example.test' \\
      --users 100 --think 1s --duration 1m --starttls --ca ca.pem
  spate xmpp 127.0.0.1:5222 --users-file users.txt --users 300 --login-rate 50/s \\
      --rate 200/s --duration 5m";

/// Options of `spate xmpp`.
#[derive(Debug, Clone, clap::Args, Serialize)]
#[command(allow_negative_numbers = true, after_long_help = EXAMPLES)]
pub struct Args {
    /// Server to load, HOST[:PORT] (5222; 5223 with --tls). The certificate is checked
    /// against the JIDs' domain, as XMPP requires.
    pub target: String,

    #[command(flatten)]
    pub workload: WorkloadArgs,

    #[command(flatten)]
    #[serde(flatten)]
    pub accounts: AccountsArgs,
    /// SASL mechanism (auto: the strongest offered of SCRAM-SHA-256, SCRAM-SHA-1, PLAIN).
    #[arg(long, value_enum, default_value_t = Sasl::Auto, help_heading = "Accounts")]
    pub sasl: Sasl,
    /// Logins per second (200/s, 3000/min); default: all sessions at once.
    #[arg(long, value_name = "RATE", help_heading = "Accounts")]
    pub login_rate: Option<String>,
    /// Create each account first by in-band registration (XEP-0077), paced by
    /// --login-rate; the summary counts accounts created, already there and refused.
    #[arg(long, help_heading = "Accounts")]
    pub register: bool,
    /// Ask for the roster after binding (a phase of its own).
    #[arg(long, help_heading = "Accounts")]
    pub roster: bool,

    /// What each unit of work sends: a chat message to one other session, a XEP-0033
    /// multicast to --addresses sessions, or a presence change (broadcast by the server to
    /// the sender's contacts: every logged-in session with a shared roster).
    #[arg(long, value_enum, default_value_t = Traffic::Message, help_heading = "Messages")]
    pub traffic: Traffic,
    /// Multicast: recipients per message, N or MIN..MAX (distinct logged-in sessions).
    #[arg(
        long,
        default_value = "10",
        value_name = "N",
        help_heading = "Messages"
    )]
    pub addresses: String,
    /// Multicast: the XEP-0033 service's JID [default: multicast.DOMAIN].
    #[arg(long, value_name = "JID", help_heading = "Messages")]
    pub multicast_service: Option<String>,
    /// After the last stanza, how long sessions stay to receive what is still on its way
    /// (what has not arrived by then is missing).
    #[arg(
        long,
        default_value = "10s",
        value_name = "DURATION",
        help_heading = "Messages"
    )]
    pub wait: String,
    /// How each message picks its recipient among the other sessions.
    #[arg(long, value_enum, default_value_t = PickArg::Random, help_heading = "Messages")]
    pub pick: PickArg,
    /// Body size of each message, in bytes.
    #[arg(long, default_value = "100", help_heading = "Messages")]
    pub size: String,

    #[command(flatten)]
    #[serde(flatten)]
    pub transport: TransportArgs,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub monitor: MonitorArgs,
}

/// Everything resolved: what plan.json records.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    #[serde(flatten)]
    pub head: PlanHead,
    pub address: SocketAddr,
    pub domain: String,
    pub sessions: usize,
    pub accounts: usize,
    #[serde(flatten)]
    pub workload: Workload,
    pub tls: TlsMode,
    pub seed: u64,
    pub args: Args,
}

crate::plan_info!(Plan);

fn accounts(args: &Args) -> anyhow::Result<Vec<Account>> {
    let creds = args.accounts.credentials("log in")?;
    creds
        .into_iter()
        .map(|(jid, password)| match jid.split_once('@') {
            Some((l, d)) if !l.is_empty() && !d.is_empty() && !jid.contains('/') => {
                Ok(Account { jid, password })
            }
            _ => usage(format!("{jid}: not a bare JID (local@domain)")),
        })
        .collect()
}

/// The workload: sessions are `--users`; `--rate`/`--stages` spread their messages.
fn workload(args: &Args) -> anyhow::Result<(Workload, usize)> {
    let mut w = args.workload.clone();
    let sessions = w.users.unwrap_or(2) as usize;
    if sessions < 2 {
        return usage("--users: a message needs a recipient, so at least 2 sessions");
    }
    if w.rate.is_some() || w.stages.is_some() {
        // In XMPP the sessions stay logged in: they carry the open workload's messages.
        if w.max_in_flight != 1000 {
            return usage("--max-in-flight: in spate xmpp the logged-in sessions (--users) carry the messages");
        }
        w.users = None;
        w.max_in_flight = sessions as u32;
    } else {
        w.users = Some(sessions as u32);
    }
    let mut resolved = w.resolve()?;
    // Traffic (open arrivals, --duration) starts once every session has logged in.
    resolved.after_setup = true;
    Ok((resolved, sessions))
}

/// Builds the plan and the sessions' shared settings (no network I/O).
fn prepare(args: &Args, command: Vec<String>) -> anyhow::Result<(Plan, Vec<Account>)> {
    let accounts = accounts(args)?;
    let domain = accounts[0]
        .jid
        .split_once('@')
        .map_or("", |(_, d)| d)
        .to_string();
    if let Some(a) = accounts
        .iter()
        .find(|a| !a.jid.ends_with(&format!("@{domain}")))
    {
        return usage(format!(
            "{}: every account must be on one domain ({domain}) for now",
            a.jid
        ));
    }
    let (workload, sessions) = workload(args)?;
    if sessions > accounts.len() {
        return usage(format!(
            "--users {sessions}: only {} accounts (each session logs in as its own account)",
            accounts.len()
        ));
    }
    let port = if args.transport.tls { 5223 } else { 5222 };
    let ep = args
        .transport
        .endpoint(strip_scheme(&args.target), port, false)?;
    let plan = Plan {
        head: PlanHead::new::<Session>(command, "xmpp", &args.target),
        address: ep.addr,
        domain,
        sessions,
        accounts: accounts.len(),
        workload,
        tls: ep.tls,
        seed: args.output.seed.unwrap_or_else(rand::random),
        args: args.clone(),
    };
    Ok((plan, accounts))
}

fn strip_scheme(t: &str) -> &str {
    t.split_once("://").map_or(t, |(_, rest)| rest)
}

/// Puts the ledger's account into the summary (and a warning when deliveries are missing).
struct LedgerReport(Arc<Ledger>);

impl Observer for LedgerReport {
    fn start(
        &mut self,
        _dir: &std::path::Path,
        _start: std::time::SystemTime,
    ) -> anyhow::Result<()> {
        Ok(())
    }
    fn interval(&mut self, _snap: &engine::Snapshot<'_>) -> anyhow::Result<()> {
        Ok(())
    }
    fn finish(&mut self, summary: &mut Summary) {
        let a = self.0.account();
        let c = summary.totals;
        if a.missing > 0 {
            summary.warnings.push(format!(
                "{} of {} deliveries never arrived (first: {:?}); see extra.xmpp.missing_sample in summary.json",
                a.missing, a.expected, a.missing_sample.iter().take(5).collect::<Vec<_>>()
            ));
        }
        if c.duplicates > 0 {
            summary.warnings.push(format!(
                "{} deliveries arrived more than once",
                c.duplicates
            ));
        }
        let reg = |i: usize| self.0.registered[i].load(std::sync::atomic::Ordering::Relaxed);
        let mut x = serde_json::json!({
            "sent": a.sent, "expected": a.expected, "delivered": c.delivered,
            "missing": a.missing, "duplicates": c.duplicates,
            "missing_sample": a.missing_sample,
        });
        if reg(0) + reg(1) + reg(2) > 0 {
            x["registered"] =
                serde_json::json!({"created": reg(0), "existed": reg(1), "refused": reg(2)});
        }
        summary.extra.insert("xmpp".into(), x);
    }
}

/// `spate xmpp`.
pub async fn run(args: Args, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let login_rate = args
        .login_rate
        .as_deref()
        .map(crate::units::parse_rate)
        .transpose()?;
    if login_rate == Some(0.0) {
        return usage("--login-rate must be more than 0");
    }
    let body = crate::units::parse_size(&args.size)? as usize;
    let addresses = crate::units::parse_count_range(&args.addresses)?;
    if addresses.lo == 0 {
        return usage("--addresses: a multicast needs at least 1 recipient");
    }
    // The end of a run waits --wait for stanzas on their way: the grace for work in
    // flight must cover it, or the engine would cut the sessions off first.
    let mut args = args;
    let wait = crate::units::parse_duration(&args.wait)?;
    if crate::units::parse_duration(&args.output.grace)? < wait + Duration::from_secs(5) {
        args.output.grace = format!("{}s", wait.as_secs() + 5);
    }
    let (plan, accounts) = prepare(&args, ctx.command_line.clone())?;
    if args.traffic == Traffic::Multicast && addresses.hi as usize >= plan.sessions {
        return usage(format!(
            "--addresses {}: a session can address at most the {} other sessions (--users {})",
            args.addresses,
            plan.sessions - 1,
            plan.sessions
        ));
    }
    let mut endpoint =
        args.transport
            .endpoint(strip_scheme(&args.target), plan.address.port(), false)?;
    // RFC 6120 §13.7.2: the certificate names the XMPP domain, not the host connected to.
    endpoint.server_name =
        crate::tls::server_name(&plan.domain).map_err(|e| UsageError(e.to_string()))?;
    let stop = Arc::new(AtomicBool::new(false));
    let title = format!("spate — XMPP load on {}", args.target);
    let mut obs = observers(
        &args.output,
        &args.monitor,
        args.output.progress_enabled(),
        title,
        "msg",
        &stop,
    )?;
    let ledger = Arc::new(Ledger::default());
    obs.push(Box::new(LedgerReport(ledger.clone())));
    crate::session::preflight(&plan.head.target, &endpoint).await?;
    let out = crate::opts::output::results_dir(
        args.output.out.as_deref(),
        args.output.overwrite,
        "xmpp",
    )?;
    let run = engine::Setup::new(&plan, Some(&out), None, obs, stop)?;
    let settings = Arc::new(Settings {
        endpoint,
        domain: plan.domain.clone(),
        sessions: plan.sessions,
        online: (0..plan.sessions).map(|_| AtomicBool::new(false)).collect(),
        accounts,
        sasl: args.sasl,
        roster: args.roster,
        register: args.register,
        login_rate,
        round_robin: args.pick == PickArg::RoundRobin,
        body,
        traffic: args.traffic,
        wait,
        addresses: (addresses.lo, addresses.hi),
        multicast_service: args
            .multicast_service
            .clone()
            .unwrap_or_else(|| format!("multicast.{}", plan.domain)),
        run_id: plan.head.run_id.clone(),
        gate: Gate::default(),
        finishing: Gate::default(),
        ledger,
        recorder: run.recorder(),
        clock: run.clock(),
    });
    let summary = engine::run(run, |id, rng| Session::new(id, settings.clone(), rng)).await?;
    let finished = Finished { dir: out, summary };
    print_outcome(&finished);
    // The sessions are gone: the ledger holds what the summary's observer saw.
    let a = settings.ledger.account();
    let missing = a.missing;
    println!(
        "deliveries: expected {}  delivered {}  missing {}  duplicates {}",
        a.expected,
        finished.summary.totals.delivered,
        a.missing,
        finished.summary.totals.duplicates
    );
    if args.register {
        let reg =
            |i: usize| settings.ledger.registered[i].load(std::sync::atomic::Ordering::Relaxed);
        println!(
            "registrations: created {}  already there {}  refused {}",
            reg(0),
            reg(1),
            reg(2)
        );
    }
    println!("results: {}", finished.dir.display());
    let nothing = finished.summary.totals.accepted == 0 && finished.summary.totals.attempted > 0;
    if nothing {
        println!("no stanza could be sent (no session logged in?): see the error table");
    }
    let ok = if missing > 0 || nothing {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    };
    Ok(super::exit_code(&finished.summary, ok))
}
