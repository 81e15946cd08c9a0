//! `spate pop3` and `spate imap`: options, the plan they resolve to, and the run. The
//! visit itself (one unit of work) is in [`super::visit`]; the engine does the rest.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::fetch::{Account, Endpoint, MailProto, TlsMode};
use super::visit::Visitor;
use crate::engine::{self, default_out, new_run_id, Observer, OutputArgs, Workload, WorkloadArgs};
use crate::load::{resolve, Outcome, PickArg};
use crate::message::AddressPool;
use crate::metrics::Recorder;
use crate::results::SCHEMA_VERSION;
use crate::transport::Clock;
use crate::units;
use crate::{usage, UsageError};

#[derive(Debug, Clone, clap::Args, Serialize)]
#[command(
    after_long_help = "A unit of work is one mailbox visit: connect, (TLS), greeting, \
    log in, STAT/SELECT, act on up to --messages-per-connection messages (read whole or \
    headers only, flag, delete), EXPUNGE, (IDLE), QUIT/LOGOUT. Percentages are spread \
    evenly over the messages a session touches, not drawn at random, so the mailbox counts \
    a run leaves behind are predictable.\n\nEXAMPLES:\n  \
    SPATE_PASSWORD=pw spate pop3 127.0.0.1:1110 --user-pattern 'user{0..99}@example.test' --users 20 --duration 1m\n  \
    spate imap 127.0.0.1:1143 --users-file users.txt --rate 600/min --duration 5m --delete 50\n  \
    spate pop3 127.0.0.1:1110 --users-file users.txt --imap-percent 30 --imap-target 127.0.0.1:1143\n  \
    spate imap 127.0.0.1:993 --tls --ca ca.pem --users-file users.txt --download 20 --flag --idle 2s"
)]
pub struct RetrieveArgs {
    /// Server to load, HOST[:PORT] (110 POP3, 143 IMAP; 995/993 with --tls).
    pub target: String,

    #[command(flatten)]
    pub workload: WorkloadArgs,

    // ---- accounts
    /// Accounts from FILE, 'address password' per line (the test bed's users file).
    #[arg(long, help_heading = "Accounts")]
    pub users_file: Option<PathBuf>,
    /// Accounts from a pattern like 'user{0..99}@example.test', all with the password
    /// from the environment variable SPATE_PASSWORD (never from the command line).
    #[arg(long, conflicts_with = "users_file", help_heading = "Accounts")]
    pub user_pattern: Option<String>,
    /// How each visit picks its account (round-robin keeps concurrent visits apart).
    #[arg(long, value_enum, default_value_t = PickArg::RoundRobin, help_heading = "Accounts")]
    pub pick: PickArg,
    /// How to log in: POP3 USER/PASS (auto), APOP when the greeting offers it, or AUTH
    /// PLAIN; IMAP LOGIN (auto) or AUTHENTICATE PLAIN.
    #[arg(long, value_enum, default_value_t = LoginArg::Auto, help_heading = "Accounts")]
    pub auth: LoginArg,

    // ---- what a visit does
    /// Messages touched per visit, from the first; 0 = every message in the mailbox.
    #[arg(long, short = 'm', default_value_t = 0, help_heading = "Visit")]
    pub messages_per_connection: u32,
    /// Percentage of touched messages read whole (RETR, FETCH BODY.PEEK[]); the others
    /// get their header only (TOP n --top, FETCH BODY.PEEK[HEADER]).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Visit")]
    pub download: u8,
    /// Percentage of touched messages deleted (DELE; \Deleted then EXPUNGE).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Visit")]
    pub delete: u8,
    /// POP3: body lines TOP asks for with the header of messages not downloaded.
    #[arg(long, default_value_t = 0, help_heading = "Visit")]
    pub top: u32,
    /// POP3: also ask for UIDL and LIST listings each visit.
    #[arg(long, help_heading = "Visit")]
    pub listings: bool,
    /// IMAP: run SEARCH with these criteria after SELECT (e.g. UNSEEN, ALL).
    #[arg(long, help_heading = "Visit")]
    pub search: Option<String>,
    /// IMAP: mark each touched message \Seen with STORE.
    #[arg(long, help_heading = "Visit")]
    pub flag: bool,
    /// IMAP: IDLE this long at the end of each visit (e.g. 2s).
    #[arg(long, help_heading = "Visit")]
    pub idle: Option<String>,
    /// POP3 runs only: make this percentage of visits IMAP ones (a mixed run).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Visit")]
    pub imap_percent: Option<u8>,
    /// IMAP server for --imap-percent (default: the target host, port 143 or 993).
    #[arg(long, help_heading = "Visit")]
    pub imap_target: Option<String>,

    // ---- transport
    /// Upgrade every connection with STLS (POP3) / STARTTLS (IMAP).
    #[arg(long, conflicts_with = "tls", help_heading = "Transport")]
    pub starttls: bool,
    /// Implicit TLS from the first byte (POP3S, IMAPS).
    #[arg(long, help_heading = "Transport")]
    pub tls: bool,
    /// Trust this CA (PEM) in addition to the system roots.
    #[arg(long, help_heading = "Transport")]
    pub ca: Option<String>,
    /// Do not verify the server certificate.
    #[arg(long, help_heading = "Transport")]
    pub insecure: bool,
    /// Source addresses to spread connections over: 127.0.0.2,127.0.0.3.
    #[arg(long, value_delimiter = ',', help_heading = "Transport")]
    pub bind: Vec<IpAddr>,
    /// Deadline for connecting and for each response.
    #[arg(long, default_value = "30s", help_heading = "Transport")]
    pub timeout: String,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub monitor: crate::monitor::MonitorArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoginArg {
    Auto,
    Apop,
    Plain,
}

/// Everything resolved: what plan.json records.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub schema_version: u32,
    pub spate_version: &'static str,
    pub run_id: String,
    pub command: Vec<String>,
    pub protocol: &'static str,
    pub target: String,
    pub address: SocketAddr,
    pub imap_address: Option<SocketAddr>,
    pub imap_percent: u8,
    #[serde(flatten)]
    pub workload: Workload,
    pub accounts: usize,
    pub messages_per_connection: u32,
    pub download_pct: u8,
    pub delete_pct: u8,
    pub tls: TlsMode,
    pub timeout_s: f64,
    pub seed: u64,
    pub args: RetrieveArgs,
}

/// What every visit shares.
pub struct Settings {
    pub pop3: Option<Endpoint>,
    pub imap: Option<Endpoint>,
    /// Share of visits that are IMAP (100 for `spate imap`).
    pub imap_percent: u8,
    pub accounts: Vec<Account>,
    pub pick: PickArg,
    pub login: LoginArg,
    pub messages_per_connection: u32,
    pub download: u8,
    pub delete: u8,
    pub top: u32,
    pub listings: bool,
    pub search: Option<String>,
    pub flag: bool,
    pub idle: Option<Duration>,
    pub bind: Vec<IpAddr>,
    pub clock: Clock,
    pub recorder: Arc<Recorder>,
    /// Round-robin position over the accounts.
    pub next_account: AtomicU64,
}

fn accounts(args: &RetrieveArgs) -> anyhow::Result<Vec<Account>> {
    let creds = if let Some(path) = &args.users_file {
        super::read_credentials(path)?
    } else if let Some(pattern) = &args.user_pattern {
        let pass = std::env::var("SPATE_PASSWORD").map_err(|_| {
            UsageError(
                "--user-pattern needs the password in the environment variable SPATE_PASSWORD"
                    .into(),
            )
        })?;
        let pool = AddressPool::from_pattern(pattern).map_err(|e| UsageError(e.to_string()))?;
        pool.addrs
            .iter()
            .map(|a| (a.to_string(), pass.clone()))
            .collect()
    } else {
        return usage("say which accounts to visit: --users-file FILE or --user-pattern PATTERN (password in SPATE_PASSWORD)");
    };
    Ok(creds
        .into_iter()
        .map(|(user, password)| Account { user, password })
        .collect())
}

/// Builds the plan and everything the visits share. No network I/O.
pub fn prepare(
    proto: MailProto,
    args: RetrieveArgs,
    command: Vec<String>,
) -> anyhow::Result<(Plan, Settings)> {
    let tls = if args.tls {
        TlsMode::Implicit
    } else if args.starttls {
        TlsMode::Starttls
    } else {
        TlsMode::Plain
    };
    let port = |p: MailProto| match (p, args.tls) {
        (MailProto::Pop3, false) => 110,
        (MailProto::Pop3, true) => 995,
        (MailProto::Imap, false) => 143,
        (MailProto::Imap, true) => 993,
    };
    let timeout = units::parse_duration(&args.timeout)?;
    if timeout.is_zero() {
        return usage("--timeout must be more than 0");
    }
    let imap_percent = match (proto, args.imap_percent) {
        (MailProto::Imap, Some(_)) => return usage("--imap-percent is for `spate pop3`"),
        (MailProto::Imap, None) => 100,
        (MailProto::Pop3, p) => p.unwrap_or(0),
    };
    if args.imap_target.is_some() && imap_percent == 0 {
        return usage("--imap-target needs --imap-percent");
    }
    let tls_config = if tls != TlsMode::Plain {
        let opts = crate::tls::ClientOptions {
            ca: args.ca.clone(),
            insecure: args.insecure,
            ..Default::default()
        };
        Some(crate::tls::client_config(&opts).map_err(|e| UsageError(e.to_string()))?)
    } else {
        None
    };
    let endpoint = |target: &str, p: MailProto| -> anyhow::Result<Endpoint> {
        let (host, addr) = resolve(strip_scheme(target), port(p))?;
        Ok(Endpoint {
            addr,
            server_name: crate::tls::server_name(&host).map_err(|e| UsageError(e.to_string()))?,
            tls,
            tls_config: tls_config.clone(),
            timeout,
        })
    };
    let main = endpoint(&args.target, proto)?;
    let (pop3, imap) = match proto {
        MailProto::Imap => (None, Some(main)),
        MailProto::Pop3 => {
            let imap = if imap_percent > 0 {
                let t = match &args.imap_target {
                    Some(t) => t.clone(),
                    None => format!("[{}]", main.addr.ip()),
                };
                Some(endpoint(&t, MailProto::Imap)?)
            } else {
                None
            };
            let pop3 = (imap_percent < 100).then_some(main);
            (pop3, imap)
        }
    };
    let workload = args.workload.resolve()?;
    let accounts = accounts(&args)?;
    let idle = args
        .idle
        .as_deref()
        .map(units::parse_duration)
        .transpose()?;
    let seed = args.output.seed.unwrap_or_else(rand::random);
    let address = pop3.as_ref().or(imap.as_ref()).map(|e| e.addr).unwrap();
    let plan = Plan {
        schema_version: SCHEMA_VERSION,
        spate_version: env!("CARGO_PKG_VERSION"),
        run_id: new_run_id(),
        command,
        protocol: match (proto, imap_percent) {
            (MailProto::Imap, _) => "imap",
            (MailProto::Pop3, 0) => "pop3",
            (MailProto::Pop3, 100) => "imap",
            _ => "pop3+imap",
        },
        target: args.target.clone(),
        address,
        imap_address: imap.as_ref().map(|e| e.addr),
        imap_percent,
        workload,
        accounts: accounts.len(),
        messages_per_connection: args.messages_per_connection,
        download_pct: args.download,
        delete_pct: args.delete,
        tls,
        timeout_s: timeout.as_secs_f64(),
        seed,
        args: args.clone(),
    };
    let settings = Settings {
        pop3,
        imap,
        imap_percent,
        accounts,
        pick: args.pick,
        login: args.auth,
        messages_per_connection: args.messages_per_connection,
        download: args.download,
        delete: args.delete,
        top: args.top,
        listings: args.listings,
        search: args.search.clone(),
        flag: args.flag,
        idle,
        bind: args.bind.clone(),
        clock: Clock::new(),
        recorder: Arc::new(Recorder::new(8)),
        next_account: AtomicU64::new(0),
    };
    Ok((plan, settings))
}

fn strip_scheme(t: &str) -> &str {
    t.split_once("://").map_or(t, |(_, rest)| rest)
}

/// Runs a retrieval load to the end (or until `stop` is set / a signal arrives).
pub async fn run_retrieve(
    plan: Plan,
    settings: Settings,
    out: PathBuf,
    observers: Vec<Box<dyn Observer>>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Outcome> {
    for ep in settings.pop3.iter().chain(settings.imap.iter()) {
        engine::preflight(
            &plan.target,
            ep.addr,
            settings.bind.first().copied(),
            ep.timeout,
        )
        .await?;
    }
    let settings = Arc::new(Settings {
        clock: Clock::new(),
        ..settings
    });
    let run = engine::Run::new(
        &plan,
        &out,
        None,
        settings.recorder.clone(),
        settings.clock,
        observers,
        stop,
    )?;
    let summary = engine::run(run, |id, rng| Visitor::new(id, settings.clone(), rng)).await?;
    Ok(Outcome { dir: out, summary })
}

/// `spate pop3` and `spate imap`.
pub async fn main(proto: MailProto, args: RetrieveArgs) -> anyhow::Result<ExitCode> {
    let progress = args.output.progress_enabled();
    let name = match proto {
        MailProto::Pop3 => "pop3",
        MailProto::Imap => "imap",
    };
    let out = args.output.out.clone().unwrap_or_else(|| default_out(name));
    let stop = Arc::new(AtomicBool::new(false));
    let observers = crate::load::observers(
        &args.output,
        &args.monitor,
        progress,
        format!("spate — {} load on {}", name.to_uppercase(), args.target),
        "visit",
        &stop,
    )?;
    let (plan, settings) = prepare(proto, args, crate::scenario::command_line())?;
    let outcome = run_retrieve(plan, settings, out, observers, stop).await?;
    crate::load::print_outcome(&outcome);
    println!("results: {}", outcome.dir.display());
    Ok(ExitCode::SUCCESS)
}

crate::plan_info!(Plan);
