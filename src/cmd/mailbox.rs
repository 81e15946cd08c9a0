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
use crate::message::{AddressPool, Factory, Pick};
use crate::opts::accounts::AccountsArgs;
use crate::opts::{MonitorArgs, OutputArgs, PickArg, TransportArgs, WorkloadArgs};
use crate::session::mailbox::fetch::Account;
use crate::session::mailbox::mix::Mix;
use crate::session::mailbox::{Login, Settings, Visitor};
use crate::session::{Endpoint, TlsMode};
use crate::units::{self, Range};
use crate::usage;

/// Which mailbox protocol a command loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Pop3,
    Imap,
}

impl Protocol {
    pub fn name(self) -> &'static str {
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
    behind are predictable. Exit status 1 when no visit was completed at all (refusals and \
    failures are counted, not fatal), 2 for bad input, 130/143 when stopped by a signal.";

const POP3_EXAMPLES: &str = "EXAMPLES:
  SPATE_PASSWORD=pw spate pop3 127.0.0.1:1110 \\
      --user-pattern 'user{0..99}@example.test' --users 20 --duration 1m
  spate pop3 127.0.0.1:1110 --users-file users.txt --delete 100 --listings
  spate pop3 127.0.0.1:1110 --users-file users.txt \\
      --imap-percent 30 --imap-target 127.0.0.1:1143 --flag";

const IMAP_EXAMPLES: &str = "EXAMPLES:
  spate imap 127.0.0.1:1143 --users-file users.txt --rate 600/min --duration 5m --delete 50
  spate imap 127.0.0.1:993 --tls --ca ca.pem --users-file users.txt \\
      --download 20 --flag --idle 2s
  # A client mix: per visit, 10% APPEND and 20% each search; per touched message, 5%
  # copied and 5% moved to Archive, 20% BODYSTRUCTURE and one part.
  spate imap 127.0.0.1:1143 --users-file users.txt --users 50 --duration 1m -m 10 \\
      --append 10 --copy 5 --move 5 --search-date 20 --search-header 20 --structure 20

CLIENT MIX: --append, --search-date and --search-header are percentages of visits (exactly \
that share of the run's IMAP visits, spread evenly); --copy, --move and --structure are \
percentages of the messages a visit touches, like --download and --delete. Each command is \
a phase of its own: append, copy, move (or move_emulated), create, search_date, \
search_header, structure, part (and capability, when the login reply did not list them).";

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
    /// How each visit picks its account. Either way a visit skips accounts that other
    /// visits in flight hold (a POP3 server refuses a second login to a maildrop in use),
    /// unless every account is held.
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

    // ---- the client mix (percentages, spread evenly like --delete)
    /// Percentage of visits that APPEND one message to INBOX (at the end of the visit,
    /// before IDLE; a non-synchronizing literal when the server has LITERAL+).
    #[arg(long, value_name = "PCT", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Client mix")]
    pub append: u8,
    /// Size of the generated APPEND messages, or a uniform range [default: 2k].
    #[arg(long, value_name = "SIZE", help_heading = "Client mix")]
    pub append_size: Option<String>,
    /// Flags the APPEND messages get, e.g. '\Seen \Flagged' ('' for none) [default: \Seen].
    #[arg(long, value_name = "FLAGS", help_heading = "Client mix")]
    pub append_flags: Option<String>,
    /// APPEND the .eml files of DIR in turn instead of generated messages.
    #[arg(long, value_name = "DIR", help_heading = "Client mix")]
    pub append_from: Option<std::path::PathBuf>,
    /// Attach FILE to every generated APPEND message (multipart/mixed: two parts for
    /// --structure to choose from).
    #[arg(long, value_name = "FILE", help_heading = "Client mix")]
    pub append_attach: Option<std::path::PathBuf>,
    /// Percentage of touched messages COPYed to --to-mailbox.
    #[arg(long, value_name = "PCT", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Client mix")]
    pub copy: u8,
    /// Percentage of touched messages (of those not deleted) moved to --to-mailbox: MOVE
    /// when the server offers it, else COPY + STORE \Deleted + EXPUNGE (phase
    /// move_emulated; that EXPUNGE also commits the visit's earlier deletions).
    #[arg(long = "move", value_name = "PCT", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Client mix")]
    pub moves: u8,
    /// Mailbox that COPY and MOVE go to, created when the server answers [TRYCREATE]
    /// [default: Archive].
    #[arg(long, value_name = "MAILBOX", help_heading = "Client mix")]
    pub to_mailbox: Option<String>,
    /// Percentage of visits that SEARCH SINCE (today - --search-days) BEFORE tomorrow.
    #[arg(long, value_name = "PCT", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Client mix")]
    pub search_date: u8,
    /// Days back that --search-date looks [default: 7].
    #[arg(long, value_name = "DAYS", value_parser = clap::value_parser!(u32).range(0..=36500), help_heading = "Client mix")]
    pub search_days: Option<u32>,
    /// Percentage of visits that SEARCH HEADER Subject TEXT, or FROM TEXT (in turn).
    #[arg(long, value_name = "PCT", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Client mix")]
    pub search_header: u8,
    /// The TEXT of --search-header [default: spate, which every message spate generates
    /// has in its Subject and From].
    #[arg(long, value_name = "TEXT", help_heading = "Client mix")]
    pub search_text: Option<String>,
    /// Percentage of touched messages whose BODYSTRUCTURE is fetched, then one part of it
    /// chosen at random (BODY.PEEK[section]; checked against the structure's size).
    #[arg(long, value_name = "PCT", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Client mix")]
    pub structure: u8,
    /// Act as a client that does not know these extensions even when the server offers
    /// them: MOVE (moves become COPY + STORE + EXPUNGE), LITERAL+ (APPEND waits for the
    /// continuation). Comma-separated.
    #[arg(
        long,
        value_name = "EXT,..",
        value_delimiter = ',',
        help_heading = "Client mix"
    )]
    pub without: Vec<String>,
}

impl ImapOptions {
    /// Whether any of the client mix is asked for.
    fn mix(&self) -> bool {
        [
            self.append,
            self.copy,
            self.moves,
            self.search_date,
            self.search_header,
            self.structure,
        ]
        .iter()
        .any(|p| *p > 0)
    }
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
        (
            args.imap.mix(),
            "the client mix (--append, --copy, --move, --search-*, --structure)",
        ),
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
    let head = PlanHead::new::<Visitor>(
        command,
        protocol_name(proto, imap_percent),
        &args.common.target,
    );
    let mix = mix(&args.imap, &accounts, &head.run_id)?;
    let main = pop3
        .as_ref()
        .or(imap.as_ref())
        .expect("at least one endpoint");
    let plan = Plan {
        head: head.of(&workload),
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
        mix,
        next_account: AtomicU64::new(0),
        held: (0..plan.accounts).map(|_| AtomicBool::new(false)).collect(),
    };
    Ok((plan, settings))
}

fn protocol_name(proto: Protocol, imap_percent: u8) -> &'static str {
    match (proto, imap_percent) {
        (Protocol::Imap, _) => "imap",
        (Protocol::Pop3, 0) => "pop3",
        (Protocol::Pop3, 100) => "imap",
        _ => "pop3+imap",
    }
}

/// A name spate sends as an IMAP quoted string: printable ASCII without `"` and `\`
/// (no literals, no modified UTF-7).
fn quotable(what: &str, v: &str) -> anyhow::Result<()> {
    if v.is_empty()
        || !v
            .bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
    {
        return usage(format!(
            "{what} '{v}': give printable ASCII without '\"' or '\\'"
        ));
    }
    Ok(())
}

/// `--append-flags`: flag names (`\\Seen`, `$Label`, `Junk`), space-separated.
fn append_flags(v: &str) -> anyhow::Result<String> {
    let ok = |w: &str| {
        let name = w.strip_prefix('\\').unwrap_or(w);
        !name.is_empty()
            && !w.eq_ignore_ascii_case("\\Recent")
            && name
                .bytes()
                .all(|b| b.is_ascii_graphic() && !b"(){%*\"\\]".contains(&b))
    };
    match v.split_whitespace().find(|w| !ok(w)) {
        Some(w) => usage(format!(
            "--append-flags: '{w}' is not a flag a client may set (e.g. '\\Seen \\Flagged $Work')"
        )),
        None => Ok(v.split_whitespace().collect::<Vec<_>>().join(" ")),
    }
}

/// The client mix, checked: its options need their percentage, names must be quotable,
/// and APPEND's messages are built for the accounts in the order visits pick them.
fn mix(o: &ImapOptions, accounts: &[Account], run_id: &str) -> anyhow::Result<Mix> {
    let needs = [
        (
            o.append_size.is_some(),
            "--append-size",
            o.append,
            "--append",
        ),
        (
            o.append_flags.is_some(),
            "--append-flags",
            o.append,
            "--append",
        ),
        (
            o.append_from.is_some(),
            "--append-from",
            o.append,
            "--append",
        ),
        (
            o.append_attach.is_some(),
            "--append-attach",
            o.append,
            "--append",
        ),
        (
            o.to_mailbox.is_some(),
            "--to-mailbox",
            o.copy.max(o.moves),
            "--copy or --move",
        ),
        (
            o.search_days.is_some(),
            "--search-days",
            o.search_date,
            "--search-date",
        ),
        (
            o.search_text.is_some(),
            "--search-text",
            o.search_header,
            "--search-header",
        ),
    ];
    if let Some((_, name, _, main)) = needs.iter().find(|(given, _, pct, _)| *given && *pct == 0) {
        return usage(format!("{name} needs {main}"));
    }
    let mut without = (false, false);
    for ext in &o.without {
        match ext.to_ascii_uppercase().as_str() {
            "MOVE" if o.moves > 0 => without.0 = true,
            "LITERAL+" if o.append > 0 => without.1 = true,
            "MOVE" => return usage("--without MOVE needs --move"),
            "LITERAL+" => return usage("--without LITERAL+ needs --append"),
            _ => return usage(format!("--without '{ext}': spate knows MOVE and LITERAL+")),
        }
    }
    if o.append_from.is_some() && (o.append_size.is_some() || o.append_attach.is_some()) {
        return usage("--append-from sends files as they are: no --append-size or --append-attach");
    }
    let to_mailbox = o.to_mailbox.clone().unwrap_or_else(|| "Archive".into());
    quotable("--to-mailbox", &to_mailbox)?;
    if to_mailbox.eq_ignore_ascii_case("INBOX") {
        return usage("--to-mailbox: copies and moves go from INBOX to another mailbox");
    }
    let search_text = o.search_text.clone().unwrap_or_else(|| "spate".into());
    quotable("--search-text", &search_text)?;
    let messages = if o.append > 0 {
        let bad = |e: crate::message::MessageError| crate::UsageError(e.to_string());
        let size = units::parse_size_range(o.append_size.as_deref().unwrap_or("2k"))?;
        let from = AddressPool::from_pattern("spate@example.test").map_err(bad)?;
        let to = AddressPool {
            addrs: accounts.iter().map(|a| a.user.clone()).collect(),
        };
        let mut f = Factory::new(
            run_id.into(),
            size,
            Range::fixed(1),
            from,
            to,
            Pick::RoundRobin,
        )
        .map_err(bad)?;
        if let Some(a) = &o.append_attach {
            f.attach(a).map_err(bad)?;
        }
        if let Some(d) = &o.append_from {
            f.load_corpus(d).map_err(bad)?;
        }
        Some(Arc::new(f))
    } else {
        None
    };
    Ok(Mix {
        append: o.append,
        append_flags: append_flags(o.append_flags.as_deref().unwrap_or("\\Seen"))?,
        messages,
        copy: o.copy,
        moves: o.moves,
        to_mailbox,
        search_date: o.search_date,
        search_days: o.search_days.unwrap_or(7),
        search_header: o.search_header,
        search_text,
        structure: o.structure,
        without_move: without.0,
        without_literal_plus: without.1,
    })
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

/// A pop3/imap load into its --out (or a new results directory), once the options are
/// good and the server answers: `spate pop3`/`imap`'s run, or a sweep's step. Also the
/// server's port (for a sweep's wait until idle).
pub async fn load(
    proto: Protocol,
    args: Args,
    command: Vec<String>,
    progress: bool,
) -> anyhow::Result<(Finished, u16)> {
    let name = proto.name();
    let (output, monitor) = (args.common.output.clone(), args.common.monitor.clone());
    let title = format!(
        "spate — {} load on {}",
        name.to_uppercase(),
        args.common.target
    );
    let (plan, settings) = prepare(proto, args, command)?;
    let port = plan.address.port();
    let stop = Arc::new(AtomicBool::new(false));
    let mut observers = observers(&output, &monitor, &plan, progress, title, "visit", &stop)?;
    let mut checked = crate::session::Preflight::default();
    for ep in settings.pop3.iter().chain(settings.imap.iter()) {
        checked = checked.and(super::thresholds::or_junit(
            &output,
            plan.head.protocol,
            crate::session::preflight(&plan.head.target, ep).await,
        )?);
    }
    observers.push(Box::new(checked));
    // Created only now that the options are good and the server answers: a run that
    // cannot start writes nothing.
    let out = crate::opts::output::results_dir(output.out.as_deref(), output.overwrite, name)?;
    Ok((run_load(plan, settings, out, observers, stop).await?, port))
}

/// `spate pop3` and `spate imap`.
pub async fn run(proto: Protocol, args: Args, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let output = args.common.output.clone();
    let progress = output.progress_enabled();
    let (finished, _) = load(proto, args, ctx.command_line.clone(), progress).await?;
    print_outcome(&finished);
    println!("results: {}", finished.dir.display());
    let code = super::load_exit(&finished.summary, "visit", ExitCode::SUCCESS);
    super::thresholds::finish(&output, &finished.dir, &finished.summary, code)
}
