//! `spate smtp`: options, the plan they resolve to, and the run itself — workers, the
//! aggregator that turns shards into intervals once a second, signals, and the final
//! summary.

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use rand::rngs::SmallRng;
use rand::SeedableRng;
use serde::Serialize;

use crate::message::{AddressPool, Factory, Pick};
use crate::metrics::{Recorder, Shard};
use crate::results::{Summary, Writer, SCHEMA_VERSION};
use crate::session::smtp::{AuthMech, Session, Settings, TlsMode};
use crate::transport::Clock;
use crate::units::{self, Range};
use crate::workload::{self, Arrival, Arrivals, Profile};
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

    // ---- closed workload
    /// Concurrent sessions (closed workload: each sends, waits for the reply, sends again).
    #[arg(long, short = 'u', default_value_t = 1, help_heading = "Workload")]
    pub users: u32,
    /// Messages per connection; 0 = keep the connection for the whole run.
    #[arg(long, short = 'm', default_value_t = 1, help_heading = "Workload")]
    pub messages_per_connection: u32,
    /// Stop after this many messages in total (default 1000 when no --duration is given).
    #[arg(long, short = 'n', help_heading = "Workload")]
    pub count: Option<u64>,
    /// Stop after this long (e.g. 30s, 10m, 1h).
    #[arg(long, short = 'd', help_heading = "Workload")]
    pub duration: Option<String>,
    /// Pause between messages of one session (closed workload), e.g. 100ms.
    #[arg(long, help_heading = "Workload")]
    pub think: Option<String>,

    // ---- open workload
    /// Open workload: start messages at this rate whether or not earlier ones finished
    /// (200/s, 5000/min). Latency then counts from each message's scheduled start.
    #[arg(long, help_heading = "Workload")]
    pub rate: Option<String>,
    /// Stages of an open workload, ramping linearly: 1m:100/s,5m:500/s,1m:0/s.
    #[arg(long, conflicts_with = "rate", help_heading = "Workload")]
    pub stages: Option<String>,
    /// Spacing of open-workload arrivals.
    #[arg(long, value_enum, default_value_t = Arrival::Constant, help_heading = "Workload")]
    pub arrival: Arrival,
    /// Open workload: most messages in flight at once (also the number of connections).
    #[arg(long, default_value_t = 1000, help_heading = "Workload")]
    pub max_in_flight: u32,

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

    // ---- output
    /// Results directory (default: ./spate-results/<timestamp>-smtp).
    #[arg(long, short = 'o', help_heading = "Output")]
    pub out: Option<PathBuf>,
    /// Print nothing while running; only the final summary.
    #[arg(long, short = 'q', help_heading = "Output")]
    pub quiet: bool,
    /// Print progress even when stderr is not a terminal.
    #[arg(long, help_heading = "Output")]
    pub progress: bool,
    /// After Ctrl-C or the end of the schedule, wait this long for messages in flight.
    #[arg(long, default_value = "10s", help_heading = "Output")]
    pub grace: String,
    /// Seed for every random choice, for repeatable runs.
    #[arg(long, help_heading = "Output")]
    pub seed: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PickArg {
    Random,
    RoundRobin,
}

/// The workload shape after validation.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "model", rename_all = "kebab-case")]
pub enum Model {
    Closed {
        users: u32,
        think_ms: f64,
    },
    Open {
        profile: Profile,
        arrival: Arrival,
        max_in_flight: u32,
    },
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
    pub model: Model,
    pub count: Option<u64>,
    pub duration_s: Option<f64>,
    pub messages_per_connection: u32,
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
        let bad = |e: String| UsageError(format!("{}: {e}", path.display()));
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let mut creds = Vec::new();
        for (n, line) in text.lines().map(str::trim).enumerate() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut w = line.split_whitespace();
            match (w.next(), w.next()) {
                (Some(u), Some(p)) => creds.push((u.to_string(), p.to_string())),
                _ => return Err(bad(format!("line {}: expected 'address password'", n + 1)).into()),
            }
        }
        if creds.is_empty() {
            return Err(bad("no users in file".into()).into());
        }
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

fn new_run_id() -> String {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "{:x}{:04x}",
        now.as_secs(),
        (now.subsec_micros() ^ std::process::id()) & 0xffff
    )
}

pub fn default_out(kind: &str) -> PathBuf {
    let stamp = chrono::Local::now().format("%Y%m%d-%H%M%S");
    PathBuf::from("spate-results").join(format!("{stamp}-{kind}"))
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
    let duration = args
        .duration
        .as_deref()
        .map(units::parse_duration)
        .transpose()?;
    let count = match (args.count, duration) {
        (None, None) => Some(1000),
        (c, _) => c,
    };
    if count == Some(0) {
        return usage("--count must be at least 1");
    }
    let model = match (&args.rate, &args.stages) {
        (Some(rate), _) => {
            let r = units::parse_rate(rate)?;
            if r <= 0.0 {
                return usage("--rate must be more than 0");
            }
            Model::Open {
                profile: Profile::constant(r, duration),
                arrival: args.arrival,
                max_in_flight: args.max_in_flight.max(1),
            }
        }
        (None, Some(stages)) => {
            let stages = workload::parse_stages(stages)?;
            Model::Open {
                profile: Profile {
                    start_rate: 0.0,
                    stages,
                },
                arrival: args.arrival,
                max_in_flight: args.max_in_flight.max(1),
            }
        }
        (None, None) => {
            if args.users == 0 {
                return usage("--users must be at least 1");
            }
            let think = args
                .think
                .as_deref()
                .map(units::parse_duration)
                .transpose()?;
            Model::Closed {
                users: args.users,
                think_ms: think.map_or(0.0, |d| d.as_secs_f64() * 1000.0),
            }
        }
    };
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
    let seed = args.seed.unwrap_or_else(rand::random);
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
        messages_per_connection: args.messages_per_connection,
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
        model,
        count,
        duration_s: duration.map(|d| d.as_secs_f64()),
        messages_per_connection: args.messages_per_connection,
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

/// CPU time (user + system) this process has used.
pub fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// What a finished run hands back to callers (the CLI, the demo, tests).
pub struct Outcome {
    pub dir: PathBuf,
    pub summary: Summary,
}

/// Observes a running load: progress printing lives outside the workers.
pub struct Progress {
    pub enabled: bool,
    pub count: Option<u64>,
    pub duration: Option<Duration>,
}

/// Runs an SMTP/LMTP load to the end (or until `stop` is set / a signal arrives).
pub async fn run_smtp(
    plan: Plan,
    factory: Arc<Factory>,
    settings: Settings,
    out: PathBuf,
    progress: Progress,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<Outcome> {
    // A server that cannot be reached is the user's problem to fix, not a run to record.
    crate::transport::Connection::connect(
        settings.addr,
        settings.bind.first().copied(),
        settings.timeout.min(Duration::from_secs(10)),
    )
    .await
    .map_err(|e| anyhow::anyhow!("cannot connect to {} ({}): {e}", plan.target, plan.address))?
    .shutdown()
    .await;

    let start_wall = SystemTime::now();
    let settings = Arc::new(Settings {
        clock: Clock::new(),
        ..settings
    });
    let clock = settings.clock;
    let recorder = settings.recorder.clone();
    let plan_json = serde_json::to_value(&plan)?;
    let mut writer = Writer::create(&out, &plan_json, start_wall, factory.clone())
        .with_context(|| format!("cannot write results to {}", out.display()))?;
    let cpu0 = cpu_time();
    let grace = units::parse_duration(&plan.args.grace)?;
    let seed = plan.seed;

    let next_seq = Arc::new(AtomicU64::new(0));
    let mut workers = tokio::task::JoinSet::new();
    let mut scheduler = None;
    match &plan.model {
        Model::Closed { users, think_ms } => {
            let think = Duration::from_secs_f64(think_ms / 1000.0);
            for id in 0..*users as usize {
                let builder = factory.builder(
                    SmallRng::seed_from_u64(seed ^ (id as u64 * 0x9E37_79B9)),
                    id,
                );
                let mut session = Session::new(id, settings.clone(), builder);
                let (stop, next, count) = (stop.clone(), next_seq.clone(), plan.count);
                let rec = recorder.clone();
                workers.spawn(async move {
                    rec.session_started();
                    loop {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let seq = next.fetch_add(1, Ordering::Relaxed);
                        if count.is_some_and(|c| seq >= c) {
                            break;
                        }
                        let at = clock.now_us();
                        session.send(seq, at, false).await;
                        if !think.is_zero() && !stop.load(Ordering::Relaxed) {
                            tokio::time::sleep(think).await;
                        }
                    }
                    session.quit().await;
                    rec.session_ended();
                });
            }
        }
        Model::Open {
            profile,
            arrival,
            max_in_flight,
        } => {
            let (tx, rx) = async_channel::bounded::<(u64, u64)>(*max_in_flight as usize * 4);
            for id in 0..*max_in_flight as usize {
                let builder = factory.builder(
                    SmallRng::seed_from_u64(seed ^ (id as u64 * 0x9E37_79B9)),
                    id,
                );
                let mut session = Session::new(id, settings.clone(), builder);
                let rx = rx.clone();
                let rec = recorder.clone();
                workers.spawn(async move {
                    while let Ok((seq, at)) = rx.recv().await {
                        rec.session_started();
                        session.send(seq, at, true).await;
                        rec.session_ended();
                    }
                    session.quit().await;
                });
            }
            let arrivals = Arrivals::new(profile.clone(), *arrival, SmallRng::seed_from_u64(seed));
            let (stop, count, rec) = (stop.clone(), plan.count, recorder.clone());
            let origin = tokio::time::Instant::from_std(clock.origin());
            let limit = plan.duration_s;
            scheduler = Some(tokio::spawn(async move {
                for (seq, at) in arrivals.enumerate() {
                    let seq = seq as u64;
                    if stop.load(Ordering::Relaxed)
                        || count.is_some_and(|c| seq >= c)
                        || limit.is_some_and(|l| at >= l)
                    {
                        break;
                    }
                    tokio::time::sleep_until(origin + Duration::from_secs_f64(at)).await;
                    let at_us = (at * 1e6) as u64;
                    if tx.try_send((seq, at_us)).is_err() {
                        rec.with(0, |s| s.counters.dropped += 1);
                    }
                }
                tx.close();
            }));
        }
    }

    let deadline = plan
        .duration_s
        .map(|d| clock.origin() + Duration::from_secs_f64(d));
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::from_std(clock.origin()) + Duration::from_secs(1),
        Duration::from_secs(1),
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut iv = Shard::default();
    let mut last_t = 0.0f64;
    let mut interrupted = false;
    let mut stopping_since: Option<Instant> = None;
    let mut signals = Signals::new();
    let header = SummaryHeader::new(&plan, start_wall);

    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = signals.recv() => {
                if stopping_since.is_some() {
                    eprintln!("\nspate: second interrupt, stopping now");
                    workers.abort_all();
                } else {
                    eprintln!("\nspate: interrupted, letting messages in flight finish (up to {})", units::fmt_duration(grace));
                }
                interrupted = true;
            }
            r = workers.join_next(), if !workers.is_empty() => {
                if let Some(Err(e)) = r {
                    if e.is_panic() {
                        eprintln!("spate: a session panicked: {e}");
                    }
                }
                if !workers.is_empty() { continue; }
            }
        }
        let now = Instant::now();
        if (interrupted || deadline.is_some_and(|d| now >= d)) && stopping_since.is_none() {
            stop.store(true, Ordering::Relaxed);
            stopping_since = Some(now);
        }
        if stop.load(Ordering::Relaxed) && stopping_since.is_none() {
            stopping_since = Some(now);
        }
        if stopping_since.is_some_and(|s| now.duration_since(s) >= grace) {
            workers.abort_all();
            while workers.join_next().await.is_some() {}
        }
        let t = clock.origin().elapsed().as_secs_f64();
        recorder.drain_into(&mut iv);
        writer.interval(&mut iv, last_t, t - last_t, recorder.active_sessions())?;
        last_t = t;
        let summary = header.summary(&writer.totals, t, false, interrupted, cpu_time() - cpu0);
        writer.write_summary(&summary)?;
        progress.show(&summary, t, recorder.active_sessions());
        if workers.is_empty() {
            break;
        }
    }
    if let Some(s) = scheduler {
        s.abort();
    }
    progress.clear();
    writer.finish()?;
    let t = clock.origin().elapsed().as_secs_f64();
    let summary = header.summary(&writer.totals, t, true, interrupted, cpu_time() - cpu0);
    writer.write_summary(&summary)?;
    Ok(Outcome { dir: out, summary })
}

struct SummaryHeader {
    run_id: String,
    command: Vec<String>,
    protocol: String,
    target: String,
    started: SystemTime,
}

impl SummaryHeader {
    fn new(plan: &Plan, started: SystemTime) -> Self {
        SummaryHeader {
            run_id: plan.run_id.clone(),
            command: plan.command.clone(),
            protocol: plan.protocol.to_string(),
            target: plan.target.clone(),
            started,
        }
    }

    fn summary(
        &self,
        totals: &Shard,
        elapsed: f64,
        complete: bool,
        interrupted: bool,
        cpu: Duration,
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
        if c.late > 0 {
            warnings.push(format!("{} messages started more than 10 ms behind schedule: the generator or --max-in-flight could not keep the rate", c.late));
        }
        if c.dropped > 0 {
            warnings.push(format!("{} arrivals were dropped: every one of --max-in-flight sessions was busy and the backlog full", c.dropped));
        }
        Summary {
            schema_version: SCHEMA_VERSION,
            spate_version: env!("CARGO_PKG_VERSION").to_string(),
            run_id: self.run_id.clone(),
            command: self.command.clone(),
            protocol: self.protocol.clone(),
            target: self.target.clone(),
            started_at: crate::results::writer_rfc3339(self.started),
            ended_at: crate::results::writer_rfc3339(
                self.started + Duration::from_secs_f64(elapsed),
            ),
            elapsed_s: (elapsed * 1000.0).round() / 1000.0,
            complete,
            interrupted,
            totals: c,
            reconciles: c.reconciles(),
            messages_per_s: if elapsed > 0.0 {
                c.accepted as f64 / elapsed
            } else {
                0.0
            },
            kbytes_per_s: if elapsed > 0.0 {
                c.bytes as f64 / 1024.0 / elapsed
            } else {
                0.0
            },
            phases: Summary::phases_from(totals),
            errors: Summary::errors_from(totals),
            generator_cpu_s: (cpu_s * 1000.0).round() / 1000.0,
            generator_cpu_pct: (cpu_pct * 10.0).round() / 10.0,
            cores,
            warnings,
        }
    }
}

impl Progress {
    fn show(&self, s: &Summary, t: f64, active: i64) {
        if !self.enabled {
            return;
        }
        use std::io::Write;
        let c = &s.totals;
        let p99 = s
            .phase("response")
            .or(s.phase("transaction"))
            .map_or(0, |p| p.p99_us);
        let head = match (self.count, self.duration) {
            (Some(n), _) => {
                let done = (c.attempted as f64 / n as f64).min(1.0);
                let filled = (done * 20.0) as usize;
                format!(
                    "[{}{}] {:>3.0}%",
                    "#".repeat(filled),
                    ".".repeat(20 - filled),
                    done * 100.0
                )
            }
            (None, Some(d)) => format!("[{:>5.0}s/{:.0}s]", t, d.as_secs_f64()),
            _ => format!("[{t:>5.0}s]"),
        };
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r{head} sent {} ok {} rej {} fail {} | {:.0} msg/s | p99 {} | active {}   ",
            c.attempted,
            c.accepted,
            c.rejected,
            c.failed,
            s.messages_per_s,
            units::fmt_duration(Duration::from_micros(p99)),
            active,
        );
        let _ = err.flush();
    }

    fn clear(&self) {
        if self.enabled {
            eprintln!();
        }
    }
}

/// Ctrl-C and SIGTERM as one stream.
struct Signals {
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Self {
        Signals {
            term: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok(),
        }
    }

    async fn recv(&mut self) {
        let term = async {
            match &mut self.term {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term => {}
        }
    }
}

/// Prepares, runs and prints one SMTP load: what `spate smtp` and each demo part do.
pub async fn run_and_print(
    args: SmtpArgs,
    out: PathBuf,
    progress: bool,
) -> anyhow::Result<Outcome> {
    let (plan, factory, settings) = prepare(args, std::env::args().collect())?;
    let progress = Progress {
        enabled: progress,
        count: plan.count,
        duration: plan.duration_s.map(Duration::from_secs_f64),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let outcome = run_smtp(plan, factory, settings, out, progress, stop).await?;
    print!("{}", crate::report::text::render(&outcome.summary));
    // The HTML report is a convenience: failing to write it must not fail the run.
    if let Err(e) = crate::report::write_report(&outcome.dir) {
        eprintln!("spate: warning: no HTML report: {e:#}");
    }
    Ok(outcome)
}

/// `spate smtp`.
pub async fn main(args: SmtpArgs) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal;
    let progress = !args.quiet && (args.progress || std::io::stderr().is_terminal());
    let out = args.out.clone().unwrap_or_else(|| default_out("smtp"));
    let outcome = run_and_print(args, out, progress).await?;
    println!("results: {}", outcome.dir.display());
    Ok(ExitCode::SUCCESS)
}
