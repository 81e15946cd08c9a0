//! `spate pop3` and `spate imap`: the options, the plan they resolve to, and the run:
//! mailbox visits (`session::mailbox`) driven by the engine.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;

use serde::Serialize;

use super::{observers, print_outcome, Finished};
use crate::ctx::Ctx;
use crate::engine::{self, PlanHead, Workload};
use crate::opts::accounts::AccountsArgs;
use crate::opts::{MonitorArgs, OutputArgs, PickArg, TransportArgs, WorkloadArgs};
use crate::session::mailbox::fetch::Account;
use crate::session::mailbox::{Login, Settings, Visitor};
use crate::session::{Endpoint, TlsMode};
use crate::units;
use crate::usage;

/// Which mailbox protocol a command loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Pop3,
    Imap,
}

impl Protocol {
    fn name(self) -> &'static str {
        match self {
            Protocol::Pop3 => "pop3",
            Protocol::Imap => "imap",
        }
    }

    fn port(self, tls: bool) -> u16 {
        match (self, tls) {
            (Protocol::Pop3, false) => 110,
            (Protocol::Pop3, true) => 995,
            (Protocol::Imap, false) => 143,
            (Protocol::Imap, true) => 993,
        }
    }
}

const VISIT: &str = "A unit of work is one mailbox visit: connect, (TLS), greeting, log in, \
    STAT/SELECT, act on up to --messages-per-connection messages (read whole or headers only, \
    flag, delete), EXPUNGE, (IDLE), QUIT/LOGOUT. Percentages are spread evenly over the \
    messages a session touches, not drawn at random, so the mailbox counts a run leaves \
    behind are predictable.";

const POP3_EXAMPLES: &str = "EXAMPLES:
  SPATE_PASSWORD=pw spate pop3 127.0.0.1:1110 \\
      --user-pattern 'user{0..99}@example.test' --users 20 --duration 1m
  spate pop3 127.0.0.1:1110 --users-file users.txt --delete 100 --listings
  spate pop3 127.0.0.1:1110 --users-file users.txt \\
      --imap-percent 30 --imap-target 127.0.0.1:1143 --flag";

const IMAP_EXAMPLES: &str = "EXAMPLES:
  spate imap 127.0.0.1:1143 --users-file users.txt --rate 600/min --duration 5m --delete 50
  spate imap 127.0.0.1:993 --tls --ca ca.pem --users-file users.txt \\
      --download 20 --flag --idle 2s";

/// What `spate pop3` and `spate imap` share: the server, the load, the accounts, what a
/// visit does to each message, and the transport, output and monitoring options.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct Common {
    /// Server to load, HOST[:PORT] (110 POP3, 143 IMAP; 995/993 with --tls).
    pub target: String,

    #[command(flatten)]
    pub workload: WorkloadArgs,

    #[command(flatten)]
    #[serde(flatten)]
    pub accounts: AccountsArgs,
    /// How each visit picks its account (round-robin keeps concurrent visits apart).
    #[arg(long, value_enum, default_value_t = PickArg::RoundRobin, help_heading = "Accounts")]
    pub pick: PickArg,
    /// How to log in: POP3 USER/PASS (auto), APOP when the greeting offers it, or AUTH
    /// PLAIN; IMAP LOGIN (auto) or AUTHENTICATE PLAIN.
    #[arg(long, value_enum, default_value_t = Login::Auto, help_heading = "Accounts")]
    pub auth: Login,

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

    #[command(flatten)]
    #[serde(flatten)]
    pub transport: TransportArgs,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub monitor: MonitorArgs,
}

/// What only a POP3 visit does, and the IMAP share of a mixed run.
#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct Pop3Options {
    /// Body lines TOP asks for with the header of messages not downloaded.
    #[arg(long, default_value_t = 0, help_heading = "Visit")]
    pub top: u32,
    /// Also ask for UIDL and LIST listings each visit.
    #[arg(long, help_heading = "Visit")]
    pub listings: bool,
    /// Make this percentage of visits IMAP ones (a mixed run; the IMAP options below
    /// apply to those).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Mixed run")]
    pub imap_percent: Option<u8>,
    /// IMAP server for --imap-percent (default: the target host, port 143 or 993).
    #[arg(long, help_heading = "Mixed run")]
    pub imap_target: Option<String>,
}

/// What only an IMAP visit does.
#[derive(Debug, Clone, Default, clap::Args, Serialize)]
pub struct ImapOptions {
    /// Run SEARCH with these criteria after SELECT (e.g. UNSEEN, ALL).
    #[arg(long)]
    pub search: Option<String>,
    /// Mark each touched message \Seen with STORE.
    #[arg(long)]
    pub flag: bool,
    /// IDLE this long at the end of each visit (e.g. 2s).
    #[arg(long)]
    pub idle: Option<String>,
}

/// `spate pop3`: the shared options, POP3's own, and IMAP's for a mixed run.
#[derive(Debug, Clone, clap::Args)]
#[command(allow_negative_numbers = true, after_long_help = format!("{VISIT}\n\n{POP3_EXAMPLES}"))]
pub struct Pop3Args {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub pop3: Pop3Options,
    #[command(flatten, next_help_heading = "Mixed run: the IMAP visits")]
    pub imap: ImapOptions,
}

/// `spate imap`: the shared options and IMAP's own.
#[derive(Debug, Clone, clap::Args)]
#[command(allow_negative_numbers = true, after_long_help = format!("{VISIT}\n\n{IMAP_EXAMPLES}"))]
pub struct ImapArgs {
    #[command(flatten)]
    pub common: Common,
    #[command(flatten, next_help_heading = "Visit")]
    pub imap: ImapOptions,
}

/// Either command's options, as plan.json records them.
#[derive(Debug, Clone, Serialize)]
pub struct Args {
    #[serde(flatten)]
    pub common: Common,
    #[serde(flatten)]
    pub pop3: Pop3Options,
    #[serde(flatten)]
    pub imap: ImapOptions,
}

impl From<Pop3Args> for Args {
    fn from(a: Pop3Args) -> Args {
        Args {
            common: a.common,
            pop3: a.pop3,
            imap: a.imap,
        }
    }
}

impl From<ImapArgs> for Args {
    fn from(a: ImapArgs) -> Args {
        Args {
            common: a.common,
            pop3: Pop3Options::default(),
            imap: a.imap,
        }
    }
}

/// Everything resolved: what plan.json records.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    #[serde(flatten)]
    pub head: PlanHead,
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
    pub args: Args,
}

crate::plan_info!(Plan, args.common.output);

fn accounts(args: &Args) -> anyhow::Result<Vec<Account>> {
    Ok(args
        .common
        .accounts
        .credentials("to visit")?
        .into_iter()
        .map(|(user, password)| Account { user, password })
        .collect())
}

/// The POP3 and IMAP servers a run visits: the target, and for a mixed run the IMAP one.
fn endpoints(
    proto: Protocol,
    args: &Args,
    imap_percent: u8,
) -> anyhow::Result<(Option<Endpoint>, Option<Endpoint>)> {
    let t = &args.common.transport;
    let endpoint =
        |target: &str, p: Protocol| t.endpoint(strip_scheme(target), p.port(t.tls), false);
    let main = endpoint(&args.common.target, proto)?;
    Ok(match proto {
        Protocol::Imap => (None, Some(main)),
        Protocol::Pop3 => {
            let imap = if imap_percent > 0 {
                let target = match &args.pop3.imap_target {
                    Some(t) => t.clone(),
                    None => format!("[{}]", main.addr.ip()),
                };
                Some(endpoint(&target, Protocol::Imap)?)
            } else {
                None
            };
            ((imap_percent < 100).then_some(main), imap)
        }
    })
}

/// Builds the plan and everything the visits share. No network I/O.
pub fn prepare(
    proto: Protocol,
    args: Args,
    command: Vec<String>,
) -> anyhow::Result<(Plan, Settings)> {
    let imap_percent = match (proto, args.pop3.imap_percent) {
        (Protocol::Imap, Some(_)) => return usage("--imap-percent is for `spate pop3`"),
        (Protocol::Imap, None) => 100,
        (Protocol::Pop3, p) => p.unwrap_or(0),
    };
    if args.pop3.imap_target.is_some() && imap_percent == 0 {
        return usage("--imap-target needs --imap-percent");
    }
    let imap_only = [
        (args.imap.search.is_some(), "--search"),
        (args.imap.flag, "--flag"),
        (args.imap.idle.is_some(), "--idle"),
    ];
    if let Some((_, name)) = imap_only.iter().find(|(on, _)| *on && imap_percent == 0) {
        return usage(format!(
            "{name} is an IMAP option: use spate imap, or --imap-percent for a POP3/IMAP mix"
        ));
    }
    let pop3_only = [
        (args.pop3.top != 0, "--top"),
        (args.pop3.listings, "--listings"),
    ];
    if let Some((_, name)) = pop3_only.iter().find(|(on, _)| *on && imap_percent == 100) {
        return usage(format!("{name} is a POP3 option (spate pop3)"));
    }
    let (pop3, imap) = endpoints(proto, &args, imap_percent)?;
    let workload = args.common.workload.resolve()?;
    let mut accounts = accounts(&args)?;
    if let Some(of) = &workload.shard {
        // No two shards log into the same mailbox.
        accounts = of.take(accounts, "accounts")?;
    }
    let idle = args
        .imap
        .idle
        .as_deref()
        .map(units::parse_duration)
        .transpose()?;
    let seed = args.common.output.seed.unwrap_or_else(rand::random);
    let main = pop3
        .as_ref()
        .or(imap.as_ref())
        .expect("at least one endpoint");
    let protocol = match (proto, imap_percent) {
        (Protocol::Imap, _) => "imap",
        (Protocol::Pop3, 0) => "pop3",
        (Protocol::Pop3, 100) => "imap",
        _ => "pop3+imap",
    };
    let plan = Plan {
        head: PlanHead::new::<Visitor>(command, protocol, &args.common.target).of(&workload),
        address: main.addr,
        imap_address: imap.as_ref().map(|e| e.addr),
        imap_percent,
        workload,
        accounts: accounts.len(),
        messages_per_connection: args.common.messages_per_connection,
        download_pct: args.common.download,
        delete_pct: args.common.delete,
        tls: main.tls,
        timeout_s: main.timeout.as_secs_f64(),
        seed,
        args: args.clone(),
    };
    let settings = Settings {
        pop3,
        imap,
        imap_percent,
        accounts,
        round_robin: args.common.pick == PickArg::RoundRobin,
        login: args.common.auth,
        messages_per_connection: args.common.messages_per_connection,
        download: args.common.download,
        delete: args.common.delete,
        top: args.pop3.top,
        listings: args.pop3.listings,
        search: args.imap.search,
        flag: args.imap.flag,
        idle,
        next_account: AtomicU64::new(0),
    };
    Ok((plan, settings))
}

fn strip_scheme(t: &str) -> &str {
    t.split_once("://").map_or(t, |(_, rest)| rest)
}

/// Runs a mailbox load to the end (or until `stop` is set / a signal arrives).
pub async fn run_load(
    plan: Plan,
    settings: Settings,
    out: std::path::PathBuf,
    observers: Vec<Box<dyn engine::Observer>>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Finished> {
    let settings = Arc::new(settings);
    let run = engine::Setup::new(&plan, Some(&out), None, observers, stop)?;
    let summary = engine::run(run, |id, rng| Visitor::new(id, settings.clone(), rng)).await?;
    Ok(Finished { dir: out, summary })
}

/// `spate pop3` and `spate imap`.
pub async fn run(proto: Protocol, args: Args, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let progress = args.common.output.progress_enabled();
    let name = proto.name();
    let (output, monitor) = (args.common.output.clone(), args.common.monitor.clone());
    let title = format!(
        "spate — {} load on {}",
        name.to_uppercase(),
        args.common.target
    );
    let (plan, settings) = prepare(proto, args, ctx.command_line.clone())?;
    let stop = Arc::new(AtomicBool::new(false));
    let observers = observers(&output, &monitor, &plan, progress, title, "visit", &stop)?;
    for ep in settings.pop3.iter().chain(settings.imap.iter()) {
        crate::session::preflight(&plan.head.target, ep).await?;
    }
    // Created only now that the options are good and the server answers: a run that
    // cannot start writes nothing.
    let out = crate::opts::output::results_dir(output.out.as_deref(), output.overwrite, name)?;
    let finished = run_load(plan, settings, out, observers, stop).await?;
    print_outcome(&finished);
    println!("results: {}", finished.dir.display());
    Ok(super::exit_code(&finished.summary, ExitCode::SUCCESS))
}
