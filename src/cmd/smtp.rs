//! `spate smtp`: the options, the plan they resolve to, and the run: SMTP/LMTP sessions
//! (`session::smtp`) driven by the engine, with inline delivery verification.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use serde::Serialize;

use super::{observers, print_outcome, Finished};
use crate::ctx::Ctx;
use crate::engine::{self, PlanHead, Workload};
use crate::message::{AddressPool, Factory, Pick};
use crate::opts::{accounts, MonitorArgs, OutputArgs, PickArg, TransportArgs, WorkloadArgs};
use crate::session::smtp::{AuthMech, Session, Settings};
use crate::session::TlsMode;
use crate::units::{self, Range};
use crate::{usage, UsageError};

#[derive(Debug, Clone, clap::Args, Serialize)]
#[command(allow_negative_numbers = true)]
#[command(after_long_help = "EXAMPLES:\n  \
    spate smtp 127.0.0.1:2525 --users 50 --count 20000 --messages-per-connection 0\n  \
    spate smtp mx.test:25 --rate 5000/min --duration 10m --size 0..10k --rcpt 1..3\n  \
    spate smtp 127.0.0.1:2525 --stages 1m:100/s,5m:500/s,1m:0/s --arrival poisson\n  \
    spate smtp --lmtp 127.0.0.1:2424 --to-file users.txt --count 1000\n  \
    SPATE_PASSWORD=secret spate smtp 127.0.0.1:587 --starttls --ca ca.pem \\\n      \
    --auth-user me@example.test\n\n\
EXIT STATUS: 0 the run ended and the server accepted messages (refusals and failures are \
counted, not fatal); 1 the run failed: the server could not be reached, no message was \
accepted, most messages failed (transport or protocol), --verify found messages missing, or \
a --fault could not be applied; 99 the run did what it was asked and only a --threshold \
broke; 2 bad input; 130/143 stopped by Ctrl-C/SIGTERM (results complete).")]
pub struct Args {
    /// Server to load, HOST[:PORT] (port 25 by default; 24 with --lmtp).
    pub target: String,

    /// Speak LMTP (RFC 2033): LHLO, and one reply per recipient after the message.
    #[arg(long)]
    pub lmtp: bool,

    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Messages per connection, or a uniform range chosen anew for each connection
    /// (1..3, postal's -c style); 0 = keep the connection for the whole run.
    #[arg(long, short = 'm', default_value = "1", help_heading = "Workload")]
    pub messages_per_connection: String,

    // ---- messages
    /// Body size, or a uniform range: 1k, 10KB, 0..10k.
    #[arg(long, short = 's', default_value = "1k", help_heading = "Messages")]
    pub size: String,
    /// Recipients per message, or a range: 1, 1..10.
    #[arg(long, default_value = "1", help_heading = "Messages")]
    pub rcpt: String,
    /// Envelope sender: an address or a pattern like 'load{0..9}@example.test'.
    #[arg(long, default_value = "spate@example.test", help_heading = "Messages")]
    pub from: String,
    /// Recipients: an address or a pattern like 'user{0..999}@example.test'.
    #[arg(
        long,
        default_value = "user{0..999}@example.test",
        help_heading = "Messages"
    )]
    pub to: String,
    /// Senders from a file, one address a line.
    #[arg(long, help_heading = "Messages")]
    pub from_file: Option<PathBuf>,
    /// Recipients from a file, one address a line (a users file works too).
    #[arg(long, help_heading = "Messages")]
    pub to_file: Option<PathBuf>,
    /// How senders and recipients are chosen.
    #[arg(long, value_enum, default_value_t = PickArg::Random, help_heading = "Messages")]
    pub pick: PickArg,
    /// Send the .eml files of DIR (From/To rewritten to match the envelope).
    #[arg(long, help_heading = "Messages")]
    pub messages_from: Option<PathBuf>,
    /// Attach FILE (base64, multipart/mixed) to every generated message.
    #[arg(long, help_heading = "Messages")]
    pub attach: Option<PathBuf>,
    /// Ask for delivery status notifications (RCPT NOTIFY=...) when the server offers DSN.
    #[arg(long, help_heading = "Messages")]
    pub dsn_notify: Option<String>,

    #[command(flatten)]
    #[serde(flatten)]
    pub transport: TransportArgs,
    /// Upgrade this percentage of connections with STARTTLS (postal -s style).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Transport")]
    pub tls_percent: Option<u8>,
    /// Authenticate with accounts from FILE ('address password' per line, round-robin;
    /// the test bed's users file).
    #[arg(
        long,
        value_name = "FILE",
        alias = "auth-file",
        help_heading = "Transport"
    )]
    pub users_file: Option<PathBuf>,
    /// Authenticate as USER; the password comes from the environment variable
    /// SPATE_PASSWORD (never from the command line).
    #[arg(long, help_heading = "Transport")]
    pub auth_user: Option<String>,
    /// SASL mechanism.
    #[arg(long, value_enum, alias = "auth-mech", default_value_t = AuthMech::Auto, help_heading = "Transport")]
    pub auth: AuthMech,
    /// Do not use PIPELINING even when the server offers it (implies --no-chunking).
    #[arg(long, help_heading = "Transport")]
    pub no_pipelining: bool,
    /// How far to pipeline when the server offers PIPELINING. `full`: messages that go
    /// with DATA (no CHUNKING, or --no-chunking) are chained, the next message's MAIL,
    /// RCPT.. and DATA written with this message's content (RFC 2920 §3.1), one round
    /// trip per message, timed as `dot_envelope`; and QUIT goes behind a connection's last
    /// message. `conservative`: each message's envelope is one group and nothing is
    /// written behind a message's end, for servers that drop commands pipelined after a
    /// message (spate reports such a server: no reply to the envelope written behind).
    #[arg(long, value_enum, value_name = "MODE", default_value_t = Pipelining::Full, help_heading = "Transport")]
    pub pipelining: Pipelining,
    /// Send messages with DATA even when the server offers CHUNKING and PIPELINING. By
    /// default spate then sends MAIL, RCPT.., `BDAT <size> LAST` and the message in one
    /// write, one round trip per message, timed as the `bdat` phase (no `envelope` and
    /// `body`); a message of --messages-from with a line that starts with '.' still goes
    /// with DATA.
    #[arg(long, help_heading = "Transport")]
    pub no_chunking: bool,
    /// Name to send in EHLO/LHLO.
    #[arg(long, default_value = "spate.localhost", help_heading = "Transport")]
    pub helo: String,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub verify: crate::verify::InlineArgs,

    #[command(flatten)]
    pub monitor: MonitorArgs,
}

impl Args {
    /// Parses `spate smtp` words (target and options, without the program and command
    /// names): the smtp command line after `spate sweep ... --`.
    pub fn from_words<I, S>(words: I) -> anyhow::Result<Args>
    where
        I: IntoIterator<Item = S>,
        S: Into<std::ffi::OsString> + Clone,
    {
        super::args_from_words("smtp", words)
    }
}

/// `--pipelining`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Pipelining {
    Full,
    Conservative,
}

/// Everything resolved: what plan.json records.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    #[serde(flatten)]
    pub head: PlanHead,
    pub address: SocketAddr,
    #[serde(flatten)]
    pub workload: Workload,
    pub messages_per_connection: Range<u32>,
    pub size: Range<u64>,
    pub rcpt: Range<u32>,
    pub senders: usize,
    pub recipients: usize,
    pub tls: TlsMode,
    pub tls_percent: u8,
    pub auth: bool,
    /// "full", "conservative" or "off" (--no-pipelining).
    pub pipelining: &'static str,
    /// BDAT when the server offers CHUNKING (and PIPELINING).
    pub chunking: bool,
    pub timeout_s: f64,
    pub seed: u64,
    pub args: Args,
}

crate::plan_info!(Plan);

type Credentials = Option<(AuthMech, Vec<(String, String)>)>;

fn credentials(args: &Args) -> anyhow::Result<Credentials> {
    if let Some(path) = &args.users_file {
        let creds = accounts::read_credentials(path)?;
        return Ok(Some((args.auth, creds)));
    }
    if let Some(user) = &args.auth_user {
        let pass = std::env::var("SPATE_PASSWORD").map_err(|_| {
            UsageError(
                "--auth-user needs the password in the environment variable SPATE_PASSWORD".into(),
            )
        })?;
        return Ok(Some((args.auth, vec![(user.clone(), pass)])));
    }
    Ok(None)
}

/// The message factory: sizes, recipients per message, address pools, corpus.
fn factory(args: &Args, run_id: &str) -> anyhow::Result<Factory> {
    let size = units::parse_size_range(&args.size)?;
    let rcpt = units::parse_count_range(&args.rcpt)?;
    if rcpt.lo == 0 {
        return usage("--rcpt must be at least 1");
    }
    let pool = |file: &Option<PathBuf>, pattern: &str| {
        match file {
            Some(p) => AddressPool::from_file(p),
            None => AddressPool::from_pattern(pattern),
        }
        .map_err(|e| UsageError(e.to_string()))
    };
    let from = pool(&args.from_file, &args.from)?;
    let to = pool(&args.to_file, &args.to)?;
    let pick = match args.pick {
        PickArg::Random => Pick::Random,
        PickArg::RoundRobin => Pick::RoundRobin,
    };
    let bad = |e: crate::message::MessageError| UsageError(e.to_string());
    let mut factory = Factory::new(run_id.to_string(), size, rcpt, from, to, pick).map_err(bad)?;
    if let Some(a) = &args.attach {
        factory.attach(a).map_err(bad)?;
    }
    if let Some(d) = &args.messages_from {
        factory.load_corpus(d).map_err(bad)?;
    }
    Ok(factory)
}

/// Builds the plan and everything the sessions share. No network I/O.
pub fn prepare(args: Args, command: Vec<String>) -> anyhow::Result<(Plan, Arc<Factory>, Settings)> {
    let tls_percent = args.tls_percent.unwrap_or(0);
    let port = if args.lmtp { 24 } else { 25 };
    let endpoint = args
        .transport
        .endpoint(&args.target, port, tls_percent > 0)?;
    let workload = args.workload.resolve()?;
    let per_connection = units::parse_count_range(&args.messages_per_connection)?;
    if per_connection.lo == 0 && per_connection.hi > 0 {
        return usage("--messages-per-connection: a range starts at 1 (0 alone = unlimited)");
    }
    let protocol = if args.lmtp { "lmtp" } else { "smtp" };
    let head = PlanHead::new::<Session>(command, protocol, &args.target).of(&workload);
    let mut factory = factory(&args, &head.run_id)?;
    let auth = credentials(&args)?;
    let seed = args.output.seed.unwrap_or_else(rand::random);
    factory.seed = Some(seed);
    let plan = Plan {
        head,
        address: endpoint.addr,
        workload,
        messages_per_connection: per_connection,
        size: factory.size,
        rcpt: factory.rcpts,
        senders: factory.from.len(),
        recipients: factory.to.len(),
        tls: endpoint.tls,
        tls_percent,
        auth: auth.is_some(),
        pipelining: match (args.no_pipelining, args.pipelining) {
            (true, _) => "off",
            (false, Pipelining::Full) => "full",
            (false, Pipelining::Conservative) => "conservative",
        },
        chunking: !args.no_pipelining && !args.no_chunking,
        timeout_s: endpoint.timeout.as_secs_f64(),
        seed,
        args: args.clone(),
    };
    let settings = Settings {
        endpoint,
        lmtp: args.lmtp,
        tls_percent,
        auth,
        pipelining: !args.no_pipelining,
        across: !args.no_pipelining && args.pipelining == Pipelining::Full,
        chunking: !args.no_pipelining && !args.no_chunking,
        helo: args.helo,
        messages_per_connection: per_connection,
        dsn_notify: args.dsn_notify,
        shard: plan.workload.shard.clone(),
    };
    Ok((plan, Arc::new(factory), settings))
}

/// Runs an SMTP/LMTP load to the end (or until `stop` is set / a signal arrives), into
/// `out`; the caller checked with [`crate::session::preflight`] that the server answers.
pub async fn run_load(
    plan: Plan,
    factory: Arc<Factory>,
    settings: Settings,
    out: PathBuf,
    observers: Vec<Box<dyn engine::Observer>>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Finished> {
    let settings = Arc::new(settings);
    let book: Arc<dyn crate::results::AddressBook> = factory.clone();
    let run = engine::Setup::new(&plan, Some(&out), Some(book), observers, stop)?;
    let summary = engine::run(run, |id, rng| {
        Session::new(id, settings.clone(), factory.builder(rng, id))
    })
    .await?;
    Ok(Finished { dir: out, summary })
}

/// `spate smtp`.
pub async fn run(args: Args, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let progress = args.output.progress_enabled();
    let (output, monitor) = (args.output.clone(), args.monitor.clone());
    let title = format!("spate — SMTP load on {}", args.target);
    let recipients = recipient_addresses(&args);
    let (plan, factory, settings) = prepare(args, ctx.command_line.clone())?;
    let a = &plan.args;
    let watch = crate::verify::Watch::start(
        &a.verify,
        crate::verify::RemoteOptions {
            users_file: a.verify.verify_users_file.clone(),
            ca: a.transport.ca.clone(),
            insecure: a.transport.insecure,
            timeout: a.transport.timeout.clone(),
        },
        &recipients,
    )?
    .map(|w| w.with_queue(a.monitor.monitor_queue.clone()));
    if let Some(w) = &watch {
        w.ready().await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut observers = observers(&output, &monitor, &plan, progress, title, "msg", &stop)?;
    observers.push(Box::new(super::thresholds::or_junit(
        &output,
        plan.head.protocol,
        crate::session::preflight(&plan.head.target, &settings.endpoint).await,
    )?));
    // Created only now that the options are good and the server answers: a run that
    // cannot start writes nothing.
    let out = crate::opts::output::results_dir(output.out.as_deref(), output.overwrite, "smtp")?;
    let finished = run_load(plan, factory, settings, out, observers, stop).await?;
    print_outcome(&finished);
    println!("results: {}", finished.dir.display());
    let code = match watch {
        Some(w) => {
            let code = w
                .finish(&finished.dir, finished.summary.interrupted_by.as_deref())
                .await?;
            // Again, now with the delivery section.
            if let Err(e) = crate::report::write_report(&finished.dir) {
                eprintln!("spate: warning: no HTML report: {e:#}");
            }
            code
        }
        None => ExitCode::SUCCESS,
    };
    let code = super::load_exit(&finished.summary, "message", code);
    super::thresholds::finish(&output, &finished.dir, &finished.summary, code)
}

/// The addresses a run may send to, for watchers that follow mailboxes while it goes;
/// empty when they cannot be listed (the run itself reports a bad pattern or file).
fn recipient_addresses(args: &Args) -> Vec<String> {
    let pool = match &args.to_file {
        Some(p) => AddressPool::from_file(p),
        None => AddressPool::from_pattern(&args.to),
    };
    pool.map(|p| p.addrs).unwrap_or_default()
}
