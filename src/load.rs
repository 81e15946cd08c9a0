//! `spate smtp`: options, the plan they resolve to, and the run itself — workers, the
//! aggregator that turns shards into intervals once a second, signals, and the final
//! summary.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::Parser as _;
use serde::Serialize;

use crate::engine::{self, new_run_id, Observer, OutputArgs, Progress, Workload, WorkloadArgs};
pub use crate::engine::{cpu_time, default_out};
use crate::message::{AddressPool, Factory, Pick};
use crate::metrics::Recorder;
use crate::results::{Summary, SCHEMA_VERSION};
use crate::session::smtp::{AuthMech, Session, Settings, TlsMode};
use crate::transport::Clock;
use crate::units::{self, Range};
use crate::{usage, UsageError};

#[derive(Debug, Clone, clap::Args, Serialize)]
#[command(after_long_help = "EXAMPLES:\n  \
    spate smtp 127.0.0.1:2525 --users 50 --count 20000 --messages-per-connection 0\n  \
    spate smtp mx.test:25 --rate 5000/min --duration 10m --size 0..10k --rcpt 1..3\n  \
    spate smtp 127.0.0.1:2525 --stages 1m:100/s,5m:500/s,1m:0/s --arrival poisson\n  \
    spate smtp --lmtp 127.0.0.1:2424 --to-file users.txt --count 1000\n  \
    SPATE_PASSWORD=secret spate smtp 127.0.0.1:587 --starttls --ca ca.pem --auth-user me@example.test")]
pub struct SmtpArgs {
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

    // ---- transport
    /// Upgrade every connection with STARTTLS.
    #[arg(long, conflicts_with = "tls", help_heading = "Transport")]
    pub starttls: bool,
    /// Implicit TLS from the first byte (port 465 style).
    #[arg(long, help_heading = "Transport")]
    pub tls: bool,
    /// Upgrade this percentage of connections with STARTTLS (postal -s style).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Transport")]
    pub tls_percent: Option<u8>,
    /// Trust this CA (PEM) in addition to the system roots.
    #[arg(long, help_heading = "Transport")]
    pub ca: Option<String>,
    /// Do not verify the server certificate.
    #[arg(long, help_heading = "Transport")]
    pub insecure: bool,
    /// Authenticate with credentials from FILE ('address password' per line, round-robin).
    #[arg(long, help_heading = "Transport")]
    pub auth_file: Option<PathBuf>,
    /// Authenticate as USER; the password comes from the environment variable
    /// SPATE_PASSWORD (never from the command line).
    #[arg(long, help_heading = "Transport")]
    pub auth_user: Option<String>,
    /// SASL mechanism.
    #[arg(long, value_enum, default_value_t = AuthMech::Auto, help_heading = "Transport")]
    pub auth_mech: AuthMech,
    /// Do not use PIPELINING even when the server offers it.
    #[arg(long, help_heading = "Transport")]
    pub no_pipelining: bool,
    /// Source addresses to spread connections over: 127.0.0.2,127.0.0.3.
    #[arg(long, value_delimiter = ',', help_heading = "Transport")]
    pub bind: Vec<IpAddr>,
    /// Name to send in EHLO/LHLO.
    #[arg(long, default_value = "spate.localhost", help_heading = "Transport")]
    pub helo: String,
    /// Deadline for each phase (connect, each reply).
    #[arg(long, default_value = "30s", help_heading = "Transport")]
    pub timeout: String,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub verify: crate::verify::InlineArgs,

    #[command(flatten)]
    pub monitor: crate::monitor::MonitorArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PickArg {
    Random,
    RoundRobin,
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
    pub pipelining: bool,
    pub timeout_s: f64,
    pub seed: u64,
    pub args: SmtpArgs,
}

pub fn resolve(target: &str, default_port: u16) -> anyhow::Result<(String, SocketAddr)> {
    let target = target.trim();
    let t = target
        .strip_prefix("smtp://")
        .or_else(|| target.strip_prefix("lmtp://"))
        .unwrap_or(target)
        .trim_end_matches('/');
    let (host, port) = if let Some(rest) = t.strip_prefix('[') {
        let (h, p) = rest
            .split_once(']')
            .ok_or_else(|| UsageError(format!("bad target '{target}'")))?;
        (h.to_string(), p.strip_prefix(':').unwrap_or(""))
    } else if t.matches(':').count() == 1 {
        let (h, p) = t.split_once(':').unwrap_or((t, ""));
        (h.to_string(), p)
    } else {
        (t.to_string(), "")
    };
    let port: u16 = if port.is_empty() {
        default_port
    } else {
        port.parse()
            .map_err(|_| UsageError(format!("bad port in target '{target}'")))?
    };
    if host.is_empty() {
        return usage(format!("bad target '{target}': expected HOST[:PORT]"));
    }
    let addr = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| UsageError(format!("cannot resolve '{host}': {e}")))?
        .next()
        .ok_or_else(|| UsageError(format!("cannot resolve '{host}'")))?;
    Ok((host, addr))
}

type Credentials = Option<(AuthMech, Vec<(String, String)>)>;

fn credentials(args: &SmtpArgs) -> anyhow::Result<Credentials> {
    if let Some(path) = &args.auth_file {
        let creds = crate::retrieve::read_credentials(path)?;
        return Ok(Some((args.auth_mech, creds)));
    }
    if let Some(user) = &args.auth_user {
        let pass = std::env::var("SPATE_PASSWORD").map_err(|_| {
            UsageError(
                "--auth-user needs the password in the environment variable SPATE_PASSWORD".into(),
            )
        })?;
        return Ok(Some((args.auth_mech, vec![(user.clone(), pass)])));
    }
    Ok(None)
}

/// Builds the plan and everything the sessions share. No network I/O.
pub fn prepare(
    args: SmtpArgs,
    command: Vec<String>,
) -> anyhow::Result<(Plan, Arc<Factory>, Settings)> {
    let (host, addr) = resolve(&args.target, if args.lmtp { 24 } else { 25 })?;
    let size = units::parse_size_range(&args.size)?;
    let rcpt = units::parse_count_range(&args.rcpt)?;
    if rcpt.lo == 0 {
        return usage("--rcpt must be at least 1");
    }
    let timeout = units::parse_duration(&args.timeout)?;
    if timeout.is_zero() {
        return usage("--timeout must be more than 0");
    }
    let workload = args.workload.resolve()?;
    let per_connection = units::parse_count_range(&args.messages_per_connection)?;
    if per_connection.lo == 0 && per_connection.hi > 0 {
        return usage("--messages-per-connection: a range starts at 1 (0 alone = unlimited)");
    }
    let from = match &args.from_file {
        Some(p) => AddressPool::from_file(p),
        None => AddressPool::from_pattern(&args.from),
    }
    .map_err(|e| UsageError(e.to_string()))?;
    let to = match &args.to_file {
        Some(p) => AddressPool::from_file(p),
        None => AddressPool::from_pattern(&args.to),
    }
    .map_err(|e| UsageError(e.to_string()))?;
    let run_id = new_run_id();
    let pick = match args.pick {
        PickArg::Random => Pick::Random,
        PickArg::RoundRobin => Pick::RoundRobin,
    };
    let mut factory = Factory::new(run_id.clone(), size, rcpt, from, to, pick)
        .map_err(|e| UsageError(e.to_string()))?;
    if let Some(a) = &args.attach {
        factory.attach(a).map_err(|e| UsageError(e.to_string()))?;
    }
    if let Some(d) = &args.messages_from {
        factory
            .load_corpus(d)
            .map_err(|e| UsageError(e.to_string()))?;
    }
    let tls = if args.tls {
        TlsMode::Implicit
    } else if args.starttls {
        TlsMode::Starttls
    } else {
        TlsMode::Plain
    };
    let tls_percent = args.tls_percent.unwrap_or(0);
    let tls_config = if tls != TlsMode::Plain || tls_percent > 0 {
        let opts = crate::tls::ClientOptions {
            ca: args.ca.clone(),
            insecure: args.insecure,
            ..Default::default()
        };
        Some(crate::tls::client_config(&opts).map_err(|e| UsageError(e.to_string()))?)
    } else {
        None
    };
    let auth = credentials(&args)?;
    let seed = args.output.seed.unwrap_or_else(rand::random);
    let settings = Settings {
        addr,
        server_name: crate::tls::server_name(&host).map_err(|e| UsageError(e.to_string()))?,
        lmtp: args.lmtp,
        tls,
        tls_percent,
        tls_config,
        auth: auth.clone(),
        pipelining: !args.no_pipelining,
        bind: args.bind.clone(),
        helo: args.helo.clone(),
        timeout,
        messages_per_connection: per_connection,
        clock: Clock::new(),
        recorder: Arc::new(Recorder::new(8)),
        dsn_notify: args.dsn_notify.clone(),
    };
    let plan = Plan {
        schema_version: SCHEMA_VERSION,
        spate_version: env!("CARGO_PKG_VERSION"),
        run_id,
        command,
        protocol: if args.lmtp { "lmtp" } else { "smtp" },
        target: args.target.clone(),
        address: addr,
        workload,
        messages_per_connection: per_connection,
        size,
        rcpt,
        senders: factory.from.len(),
        recipients: factory.to.len(),
        tls,
        tls_percent,
        auth: auth.is_some(),
        pipelining: !args.no_pipelining,
        timeout_s: timeout.as_secs_f64(),
        seed,
        args,
    };
    Ok((plan, Arc::new(factory), settings))
}

/// What a finished run hands back to callers (the CLI, the demo, tests).
pub struct Outcome {
    pub dir: PathBuf,
    pub summary: Summary,
}

/// Parses `spate smtp` options from an argument list (without the program and command
/// names): how the demo, ping and scenarios build their runs.
pub fn args_from<I, S>(args: I) -> anyhow::Result<SmtpArgs>
where
    I: IntoIterator<Item = S>,
    S: Into<std::ffi::OsString> + Clone,
{
    #[derive(clap::Parser)]
    struct Wrap {
        #[command(flatten)]
        args: SmtpArgs,
    }
    let argv =
        std::iter::once(std::ffi::OsString::from("smtp")).chain(args.into_iter().map(Into::into));
    Wrap::try_parse_from(argv)
        .map(|w| w.args)
        .map_err(|e| UsageError(e.to_string().trim().to_string()).into())
}

/// Runs an SMTP/LMTP load to the end (or until `stop` is set / a signal arrives).
pub async fn run_smtp(
    plan: Plan,
    factory: Arc<Factory>,
    settings: Settings,
    out: PathBuf,
    observers: Vec<Box<dyn Observer>>,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Outcome> {
    engine::preflight(
        &plan.target,
        settings.addr,
        settings.bind.first().copied(),
        settings.timeout,
    )
    .await?;

    let settings = Arc::new(Settings {
        clock: Clock::new(),
        ..settings
    });
    let run = engine::Run::new(
        &plan,
        &out,
        Some(factory.clone()),
        settings.recorder.clone(),
        settings.clock,
        observers,
        stop,
    )?;
    let summary = engine::run(run, |id, rng| {
        Session::new(id, settings.clone(), factory.builder(rng, id))
    })
    .await?;
    Ok(Outcome { dir: out, summary })
}

/// Prepares, runs and prints one SMTP load: what `spate smtp` and each demo part do.
pub async fn run_and_print(
    args: SmtpArgs,
    out: PathBuf,
    progress: bool,
) -> anyhow::Result<Outcome> {
    let stop = Arc::new(AtomicBool::new(false));
    let observers = observers(
        &args.output,
        &args.monitor,
        progress,
        format!("spate — SMTP load on {}", args.target),
        "msg",
        &stop,
    )?;
    let (plan, factory, settings) = prepare(args, crate::scenario::command_line())?;
    let outcome = run_smtp(plan, factory, settings, out, observers, stop).await?;
    print_outcome(&outcome);
    Ok(outcome)
}

/// The observers of a load run: monitoring when asked for, then the live dashboard
/// (`--tui`, which may set `stop`) or the progress line. Shared by every load command.
pub fn observers(
    output: &OutputArgs,
    monitor: &crate::monitor::MonitorArgs,
    progress: bool,
    title: String,
    unit: &'static str,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Vec<Box<dyn Observer>>> {
    let mut observers: Vec<Box<dyn Observer>> =
        crate::monitor::observer(monitor)?.into_iter().collect();
    if output.tui {
        observers.push(Box::new(crate::report::tui::Dashboard::new(
            stop.clone(),
            title,
        )?));
    } else if progress {
        observers.push(Box::new(Progress::new(unit)));
    }
    Ok(observers)
}

/// The end of every load run: the text summary, the monitoring block, report.html.
pub fn print_outcome(outcome: &Outcome) {
    print!("{}", crate::report::text::render(&outcome.summary));
    print!("{}", crate::monitor::text::render(&outcome.summary));
    // The HTML report is a convenience: failing to write it must not fail the run.
    if let Err(e) = crate::report::write_report(&outcome.dir) {
        eprintln!("spate: warning: no HTML report: {e:#}");
    }
}

/// `spate smtp`.
pub async fn main(args: SmtpArgs) -> anyhow::Result<ExitCode> {
    let progress = args.output.progress_enabled();
    let out = args
        .output
        .out
        .clone()
        .unwrap_or_else(|| default_out("smtp"));
    let watch = crate::verify::Watch::start(
        &args.verify,
        crate::verify::RemoteOptions {
            users_file: args.verify.verify_users_file.clone(),
            ca: args.ca.clone(),
            insecure: args.insecure,
            timeout: args.timeout.clone(),
        },
        &recipient_addresses(&args),
    )?;
    let outcome = run_and_print(args, out, progress).await?;
    println!("results: {}", outcome.dir.display());
    match watch {
        Some(w) => {
            let code = w.finish(&outcome.dir).await;
            // Again, now with the delivery section.
            if let Err(e) = crate::report::write_report(&outcome.dir) {
                eprintln!("spate: warning: no HTML report: {e:#}");
            }
            code
        }
        None => Ok(ExitCode::SUCCESS),
    }
}

crate::plan_info!(Plan);

/// The addresses a run may send to, for watchers that follow mailboxes while it goes;
/// empty when they cannot be listed (the run itself reports a bad pattern or file).
fn recipient_addresses(args: &SmtpArgs) -> Vec<String> {
    let pool = match &args.to_file {
        Some(p) => AddressPool::from_file(p),
        None => AddressPool::from_pattern(&args.to),
    };
    pool.map(|p| p.addrs.iter().map(|a| a.to_string()).collect())
        .unwrap_or_default()
}
