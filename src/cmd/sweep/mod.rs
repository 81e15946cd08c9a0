//! `spate sweep`: the same SMTP, POP3, IMAP, XMPP or request/response workload once per
//! value of a parameter (users, rate, size, messages per connection, any option of the
//! step command, or a server setting changed by a hook), with warm-up, cool-down until the
//! server is idle, and repetitions; or `--find-max`, a search for the highest load that
//! meets an objective (find_max.rs). Every step is a normal results directory; the sweep
//! directory adds sweep.csv (one row per step and repetition), sweep.json (the values, a
//! Universal Scalability Law fit, the knee) and the E4-style table on stdout.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ctx::Ctx;
use crate::opts::{MonitorArgs, OutputArgs, WorkloadArgs};
use crate::results::Summary;
use crate::sweep::{table, Param, Row, CSV_HEADER};
use crate::units;
use crate::UsageError;

const EXAMPLES: &str = "EXAMPLES:
  spate sweep --users 1..10,20..100/10 --count-per-user 100 -- 127.0.0.1:25 --size 10200 \\
      --monitor-process smtpd,cleanup
      E4: how throughput and latency change with concurrency; USL fit and knee.
  spate sweep --values 1,2,4,8,16 --param-name process_limit \\
      --before-step 'postconf -e default_process_limit={value} && postfix reload' \\
      --until-idle --monitor-queue /var/spool/postfix -- 127.0.0.1:25 --users 32 --duration 1m
      E1: a server setting per step, waiting for the queue to drain between steps.
  spate sweep --rate 100,200,400 --warm-up 10s --repeat 3 -- 127.0.0.1:2525 --duration 1m
  spate sweep --param addresses --values 1,10,100,299 -- xmpp 127.0.0.1:5222 \\
      --user-pattern 'user{0..299}@example.test' --users 300 --traffic multicast \\
      --rate 10/s --duration 60s --monitor-process beam.smp
      E5: what one more destination of a multicast costs: the slope of the last copy's
      latency and of the server's CPU per multicast, per address.
  spate sweep --find-max rate --objective 'p99(response) < 500ms, errors.rate < 0.1%' \\
      -- 127.0.0.1:25 --max-in-flight 64 --duration 30s
      The highest rate the server takes within the objective: doubling from 10/s, then
      bisecting to 10 %, then holding the answer for 90 s.
  spate sweep --param variants --values 100,200,400,800 -- rr 127.0.0.1:8443 --frame http \\
      --path /authz --template 'user={variant}' --tls --ca ca.pem --cert c.pem --key c.key \\
      --rate 50/s --duration 30s --monitor-pid \"$(cat nginx-worker.pid)\"
      E3: the response cache's cliff: latency and the server's CPU per request once the
      distinct requests outnumber its entries.

Everything after -- is a `spate smtp` command line (target and options), or `xmpp`,
`rr`, `pop3`, `imap` or `jmap` and that command's line, used for every step; the swept option is
set per step.
--param NAME --values V sets any option of that command line (--NAME V) per step, and
the sweep reports the slope of each figure per unit of it. Host monitoring is on for every step (add
--monitor-process/--monitor-pid after -- to report the server's own CPU).
Knee: the first step whose mean latency grew more than its throughput did relative to the
step before (L_i/L_{i-1} > X_i/X_{i-1}, and latency up at least 5 %): from there on, more
load mostly adds waiting.";

#[derive(Debug, clap::Args)]
#[command(
    after_long_help = EXAMPLES,
    group(clap::ArgGroup::new("swept").required(true).args(["users", "rate", "size", "messages_per_connection", "values", "find_max"]))
)]
pub struct Args {
    /// Concurrent users per step: 1..10,20..100/10 or 1,2,4,8.
    #[arg(long, value_name = "STEPS")]
    pub users: Option<String>,
    /// With --users: every user sends this many messages per step (the step's count is
    /// users × N, like E4's threads of 100 mails each).
    #[arg(long, value_name = "N", requires = "users")]
    pub count_per_user: Option<u64>,
    /// Open-workload rate per step, in messages per second: 100,200,400.
    #[arg(long, value_name = "STEPS")]
    pub rate: Option<String>,
    /// Message size per step: 1k,10k,100k.
    #[arg(long, value_name = "SIZES")]
    pub size: Option<String>,
    /// Messages per connection per step: 1,10,100.
    #[arg(long, value_name = "STEPS")]
    pub messages_per_connection: Option<String>,
    /// Values of --param (an option of the step command) or of a --before-step hook (a
    /// server setting): 1,2,4,8,16.
    #[arg(long, value_name = "STEPS")]
    pub values: Option<String>,
    /// The option of the step command that --values sets, without its dashes:
    /// `--param addresses` runs each step with `--addresses VALUE`.
    #[arg(long, value_name = "OPTION", requires = "values")]
    pub param: Option<String>,
    /// What --values are called in tables and directory names (default: the --param
    /// option, else "value").
    #[arg(long)]
    pub param_name: Option<String>,
    /// Shell command run before each step; {value} is replaced by the step's value. It
    /// gets SPATE (this spate), SPATE_STEP_DIR (the step's directory) and
    /// SPATE_SWEEP_VALUE; a probe there, `"$SPATE" ping HOST -c 10 -w 0 --json
    /// "$SPATE_STEP_DIR/ping.json"`, adds a ping latency line and a ping_ms column.
    #[arg(long, value_name = "CMD")]
    pub before_step: Option<String>,
    /// Run every step this many times; the table shows the spread.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// A warm-up run of this length before every step, not counted.
    #[arg(long, value_name = "DURATION")]
    pub warm_up: Option<String>,
    /// Pause between steps.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub cool_down: String,
    /// Before the pause, wait until the server is idle: no TCP connections to the target
    /// port and (with --monitor-queue) an empty Postfix queue; at most --idle-max.
    #[arg(long)]
    pub until_idle: bool,
    /// Longest wait for --until-idle.
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    pub idle_max: String,
    /// Sweep directory (default: ./spate-results/<timestamp>-sweep).
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// Write into --out even when it holds an earlier run (its files are replaced).
    #[arg(long)]
    pub overwrite: bool,
    /// The step command: the `spate smtp` target and options, or `xmpp`, `rr`, `pop3`,
    /// `imap` or `jmap` followed by that command's target and options.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub smtp: Vec<String>,
    /// Write the sweep's verdicts as JUnit XML to FILE: a test case per step with its
    /// --threshold rules (given after --), or with --find-max one for the answer and one
    /// per objective rule as the hold measured it.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    #[command(flatten)]
    pub find: find_max::FindArgs,
}

impl Args {
    fn param(&self) -> anyhow::Result<(Param, String, Vec<u64>)> {
        let steps = |t: &str| units::parse_steps(t).map_err(anyhow::Error::from);
        Ok(if let Some(t) = &self.users {
            (Param::Users, "users".into(), steps(t)?)
        } else if let Some(t) = &self.rate {
            (Param::Rate, "rate".into(), steps(&per_second(t))?)
        } else if let Some(t) = &self.messages_per_connection {
            (
                Param::MessagesPerConnection,
                "messages_per_connection".into(),
                steps(t)?,
            )
        } else if let Some(t) = &self.size {
            let v = t
                .split(',')
                .map(|s| units::parse_size(s.trim()))
                .collect::<Result<Vec<_>, _>>()?;
            (Param::Size, "size".into(), v)
        } else if let Some(t) = &self.values {
            if self.param.is_none() && self.before_step.is_none() {
                return crate::usage(
                    "--values: say what they set, --param OPTION (of the step command) or --before-step CMD (a server setting)",
                );
            }
            let name = self
                .param_name
                .as_deref()
                .or(self.param.as_deref())
                .unwrap_or("value");
            let name = crate::monitor::proc::sanitize(name);
            (Param::Value, name, steps(t)?)
        } else {
            return crate::usage(
                "say what to sweep: --users, --rate, --size, --messages-per-connection or --values",
            );
        })
    }
}

/// Sweep rates are per second: `100/s,200/s` is `100,200` (a range keeps its own step,
/// `100..400/100`).
fn per_second(steps: &str) -> String {
    steps
        .split(',')
        .map(|p| {
            let p = p.trim();
            p.strip_suffix("/s")
                .or_else(|| p.strip_suffix("/sec"))
                .unwrap_or(p)
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The command a sweep runs for each step.
#[derive(Debug, Clone)]
enum Base {
    Smtp(super::smtp::Args),
    Xmpp(super::xmpp::Args),
    Rr(super::rr::Args),
    Mailbox(super::mailbox::Protocol, super::mailbox::Args),
    Jmap(super::jmap::Args),
}

impl Base {
    /// Parses the words after `--`: `spate smtp` words, or `xmpp` and `spate xmpp` words.
    fn parse(words: &[String]) -> anyhow::Result<Base> {
        let first = |e: anyhow::Error, what: &str| {
            let text = e.to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ")
                .to_string();
            UsageError(format!("the spate {what} options after --: {first}"))
        };
        match words.first().map(String::as_str) {
            Some("xmpp") => super::xmpp::Args::from_words(&words[1..])
                .map(Base::Xmpp)
                .map_err(|e| first(e, "xmpp").into()),
            Some("rr") => super::rr::Args::from_words(&words[1..])
                .map(Base::Rr)
                .map_err(|e| first(e, "rr").into()),
            Some("jmap") => super::args_from_words::<super::jmap::Args, _, _>("jmap", &words[1..])
                .map(Base::Jmap)
                .map_err(|e| first(e, "jmap").into()),
            Some("smtp") => Base::parse(&words[1..]),
            Some("pop3") => {
                super::args_from_words::<super::mailbox::Pop3Args, _, _>("pop3", &words[1..])
                    .map(|a| Base::Mailbox(super::mailbox::Protocol::Pop3, a.into()))
                    .map_err(|e| first(e, "pop3").into())
            }
            Some("imap") => {
                super::args_from_words::<super::mailbox::ImapArgs, _, _>("imap", &words[1..])
                    .map(|a| Base::Mailbox(super::mailbox::Protocol::Imap, a.into()))
                    .map_err(|e| first(e, "imap").into())
            }
            _ => super::smtp::Args::from_words(words)
                .map(Base::Smtp)
                .map_err(|e| first(e, "smtp").into()),
        }
    }

    /// The options every load command has: workload, output and monitoring.
    fn common(&mut self) -> (&mut WorkloadArgs, &mut OutputArgs, &mut MonitorArgs) {
        match self {
            Base::Smtp(a) => (&mut a.workload, &mut a.output, &mut a.monitor),
            Base::Xmpp(a) => (&mut a.workload, &mut a.output, &mut a.monitor),
            Base::Rr(a) => (&mut a.workload, &mut a.output, &mut a.monitor),
            Base::Jmap(a) => (&mut a.workload, &mut a.output, &mut a.monitor),
            Base::Mailbox(_, a) => {
                let c = &mut a.common;
                (&mut c.workload, &mut c.output, &mut c.monitor)
            }
        }
    }
}

/// `words` with `--NAME VALUE` set: any earlier `--NAME V` or `--NAME=V` replaced.
fn set_option(words: &[String], name: &str, value: &str) -> Vec<String> {
    let flag = format!("--{name}");
    let mut out = Vec::with_capacity(words.len() + 2);
    let mut skip = false;
    for w in words {
        if std::mem::take(&mut skip) {
            continue;
        }
        if *w == flag {
            skip = true;
            continue;
        }
        if w.strip_prefix(&flag).is_some_and(|r| r.starts_with('=')) {
            continue;
        }
        out.push(w.clone());
    }
    out.extend([flag, value.to_string()]);
    out
}

/// The step's command: the user's, with the swept option set.
fn step_args(
    sw: &SweepBase,
    p: Param,
    v: u64,
    count_per_user: Option<u64>,
) -> anyhow::Result<Base> {
    let mut a = match &sw.option {
        // Any option, by its words: the command's own parser checks the value.
        Some(name) if p == Param::Value => {
            Base::parse(&set_option(&sw.words, name, &v.to_string()))?
        }
        _ => sw.base.clone(),
    };
    // XMPP's --users is its sessions, which an open workload keeps; SMTP's and rr's
    // users are a closed workload.
    let closed_users = !matches!(a, Base::Xmpp(_));
    let w = a.common().0;
    match p {
        Param::Users => {
            if v == 0 {
                return crate::usage("--users: every step needs at least 1 user");
            }
            if let Some(u) = w.users {
                return crate::usage(format!(
                    "--users {u} after --: the sweep sets --users at every step; drop it"
                ));
            }
            if closed_users && (w.rate.is_some() || w.stages.is_some()) {
                return crate::usage(
                    "sweep --users sweeps a closed workload: drop --rate/--stages after --",
                );
            }
            w.users = Some(v as u32);
            if closed_users {
                w.rate = None;
                w.stages = None;
            }
            if let Some(n) = count_per_user {
                w.count = Some(n.max(1) * v);
                w.duration = None;
            }
        }
        Param::Rate => {
            if v == 0 {
                return crate::usage("--rate: every step needs a rate above 0");
            }
            if let Some(r) = &w.rate {
                return crate::usage(format!(
                    "--rate {r} after --: the sweep sets --rate at every step; drop it"
                ));
            }
            if (w.users.is_some() && closed_users) || w.think.is_some() {
                return crate::usage(
                    "sweep --rate sweeps an open workload: drop --users/--think after -- (--max-in-flight bounds concurrency)",
                );
            }
            w.rate = Some(format!("{v}/s"));
            w.stages = None;
            w.think = None;
            if closed_users {
                w.users = None;
            }
        }
        Param::Size => match &mut a {
            Base::Smtp(s) => s.size = v.to_string(),
            Base::Xmpp(x) => x.size = v.to_string(),
            Base::Rr(_) => {
                return crate::usage(
                    "--size: an rr request is its template or file; sweep --variants with --param variants",
                )
            }
            Base::Mailbox(..) => {
                return crate::usage("--size: a mailbox visit reads the messages its mailbox holds")
            }
            Base::Jmap(j) => j.message_size = v.to_string(),
        },
        Param::MessagesPerConnection => match &mut a {
            Base::Smtp(s) => s.messages_per_connection = (v as u32).to_string(),
            Base::Xmpp(_) => {
                return crate::usage("--messages-per-connection: an XMPP session keeps its stream")
            }
            Base::Rr(_) => {
                return crate::usage(
                    "--messages-per-connection: spate rr has --keep-alive or --per-request",
                )
            }
            Base::Mailbox(_, m) => m.common.messages_per_connection = v as u32,
            Base::Jmap(_) => {
                return crate::usage(
                    "--messages-per-connection: a JMAP session keeps its connection",
                )
            }
        },
        Param::Value => {}
    }
    // Host monitoring is part of every step's row.
    let (_, output, monitor) = a.common();
    monitor.monitor = true;
    output.quiet = true;
    Ok(a)
}

/// What every step starts from: the parsed command, its words, and the option --param
/// sets.
struct SweepBase {
    base: Base,
    words: Vec<String>,
    option: Option<String>,
}

/// One step: a `spate smtp` or `spate xmpp` run into `out`, recorded under the sweep's
/// command line.
async fn run_step(
    mut args: Base,
    out: PathBuf,
    progress: bool,
    ctx: &Ctx,
) -> anyhow::Result<(Summary, u16)> {
    let output = args.common().1.clone();
    let (summary, port) = load_step(args, out.clone(), progress, ctx).await?;
    // The step's own --threshold rules (given after --): judged into its thresholds.json.
    if !output.thresholds.is_empty() {
        super::thresholds::finish(&output, &out, &summary, ExitCode::SUCCESS)?;
    }
    Ok((summary, port))
}

async fn load_step(
    args: Base,
    out: PathBuf,
    progress: bool,
    ctx: &Ctx,
) -> anyhow::Result<(Summary, u16)> {
    let mut command = ctx.command_line.clone();
    command.push(format!("# step {}", out.display()));
    let args = match args {
        Base::Smtp(a) => a,
        Base::Xmpp(mut a) => {
            a.output.out = Some(out);
            let l = super::xmpp::load(a, command, progress).await?;
            return Ok((l.finished.summary, l.port));
        }
        Base::Rr(mut a) => {
            a.output.out = Some(out);
            let l = super::rr::load(a, command, progress).await?;
            return Ok((l.finished.summary, l.port));
        }
        Base::Jmap(mut a) => {
            a.output.out = Some(out);
            let port = a.port()?;
            let progress = progress && a.output.progress_enabled();
            let f = super::jmap::load(a, command, progress).await?;
            return Ok((f.summary, port));
        }
        Base::Mailbox(proto, mut a) => {
            a.common.output.out = Some(out);
            let progress = progress && a.common.output.progress_enabled();
            let (f, port) = super::mailbox::load(proto, a, command, progress).await?;
            return Ok((f.summary, port));
        }
    };
    let title = format!("spate — SMTP load on {}", args.target);
    // A flag of its own: the engine sets it when the run ends. A signal during the step
    // stops it through the engine's own listener.
    let stop = Arc::new(AtomicBool::new(false));
    let (output, monitor) = (args.output.clone(), args.monitor.clone());
    let (plan, factory, settings) = super::smtp::prepare(args, command)?;
    let mut observers = super::observers(&output, &monitor, &plan, progress, title, "msg", &stop)?;
    observers.push(Box::new(
        crate::session::preflight(&plan.head.target, &settings.endpoint).await?,
    ));
    let port = plan.address.port();
    let o = super::smtp::run_load(plan, factory, settings, out, observers, stop).await?;
    Ok((o.summary, port))
}

/// A sweep's steps, checked before the first one runs.
struct Sweep {
    param: Param,
    name: String,
    values: Vec<u64>,
    base: SweepBase,
    cool: Duration,
    idle_max: Duration,
    warm: Option<Duration>,
    progress: bool,
    /// The Postfix queue the steps monitor (--until-idle waits for it to empty).
    queue: Option<PathBuf>,
}

impl Args {
    fn sweep(&self) -> anyhow::Result<(Sweep, Option<find_max::Plan>)> {
        if self.repeat == 0 {
            return crate::usage("--repeat must be at least 1");
        }
        let mut base = SweepBase {
            base: Base::parse(&self.smtp)?,
            words: self.smtp.clone(),
            option: self.param.clone(),
        };
        let (workload, output, monitor) = base.base.common();
        if self.find.find_max.is_some() && workload.duration.is_none() && workload.count.is_none() {
            // A probe needs an end: ten seconds unless told.
            workload.duration = Some("10s".into());
        }
        let probe = workload
            .duration
            .as_deref()
            .map(units::parse_duration)
            .transpose()?;
        let find = self.find.plan(probe)?;
        let (param, name, values) = match &find {
            Some(_) if self.repeat > 1 => {
                return crate::usage(
                    "--repeat does not go with --find-max (a failed hold is probed below)",
                )
            }
            Some(f) => (f.param, f.name().to_string(), vec![f.first()]),
            None => self.param()?,
        };
        if output.out.is_some() {
            return crate::usage("give the sweep's directory with spate sweep -o DIR, before --");
        }
        if output.junit.is_some() {
            return crate::usage("give the sweep's --junit FILE before --");
        }
        let progress = output.progress_enabled();
        let queue = monitor.monitor_queue.clone();
        // Every step's options, before the first one runs.
        for &v in &values {
            match step_args(&base, param, v, self.count_per_user)? {
                Base::Smtp(a) => {
                    a.workload.resolve()?;
                }
                Base::Xmpp(a) => {
                    super::xmpp::workload(&a)?;
                }
                Base::Rr(a) => a.check()?,
                Base::Jmap(a) => {
                    a.workload.resolve()?;
                    a.port()?;
                }
                Base::Mailbox(proto, a) => {
                    super::mailbox::prepare(proto, a, Vec::new())?;
                }
            }
        }
        let warm = match self.warm_up.as_deref() {
            Some(w) => Some(units::parse_duration(w)?),
            // A probe is measured steady: two seconds of warm-up unless told.
            None if find.is_some() => Some(Duration::from_secs(2)),
            None => None,
        };
        let sweep = Sweep {
            param,
            name,
            values,
            progress,
            queue,
            base,
            cool: units::parse_duration(&self.cool_down)?,
            idle_max: units::parse_duration(&self.idle_max)?,
            warm,
        };
        Ok((sweep, find))
    }
}

/// sweep.csv as the rows come in.
struct Sheet {
    csv: std::fs::File,
    /// A hook may run a ping probe per step (ping.json): a ping_ms column only when the
    /// first step had one, so the header waits for the first row.
    ping_col: Option<bool>,
    rows: Vec<Row>,
}

impl Sheet {
    fn add(&mut self, row: Row) -> anyhow::Result<()> {
        let with_ping = *self.ping_col.get_or_insert_with(|| row.ping_ms.is_some());
        if self.rows.is_empty() {
            let extra = if with_ping { ",ping_ms" } else { "" };
            writeln!(self.csv, "{CSV_HEADER}{extra}")?;
        }
        let ping = match (with_ping, row.ping_ms) {
            (false, _) => String::new(),
            (true, None) => ",".into(),
            (true, Some(p)) => format!(",{p:.3}"),
        };
        writeln!(self.csv, "{}{ping}", row.csv())?;
        self.csv.flush()?;
        self.rows.push(row);
        Ok(())
    }
}

/// Ctrl-C or SIGTERM at any moment (a step, a hook, the wait for idle) ends the sweep with
/// the steps done so far: one listener for the whole sweep, so that a signal between
/// steps is not lost.
fn listen(stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<crate::engine::Signal> {
    tokio::spawn(async move {
        let sig = crate::engine::Signals::new().recv().await;
        eprintln!("\nspate sweep: interrupted, finishing the step in flight");
        stop.store(true, Ordering::Relaxed);
        sig
    })
}

/// `spate sweep`.
pub async fn run(args: Args, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let (sw, find) = args.sweep()?;
    let started = Instant::now();
    let dir = crate::opts::output::results_dir(args.out.as_deref(), args.overwrite, "sweep")?;
    let mut sheet = Sheet {
        csv: std::fs::File::create(dir.join("sweep.csv"))?,
        ping_col: None,
        rows: Vec::new(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let listener = listen(stop.clone());
    let found = match find {
        Some(plan) => Some(find_max::run(plan, &sw, &args, &dir, ctx, &stop, &mut sheet).await?),
        None => None,
    };
    let interrupted = match &found {
        Some(f) => f.interrupted,
        None => steps(&sw, &args, &dir, ctx, &stop, &mut sheet).await?,
    };
    // The signal that stopped the sweep, if one did.
    let by = if listener.is_finished() {
        listener.await.ok()
    } else {
        listener.abort();
        None
    };
    let rows = sheet.rows;
    if rows.is_empty() {
        writeln!(sheet.csv, "{CSV_HEADER}")?;
    }
    let swept = table::Swept {
        param: sw.param,
        name: &sw.name,
        // A server setting (a hook) or a concurrency option: USL applies; an option like
        // --addresses or --variants is a cost, not a concurrency.
        concurrency: match (&sw.base.option, sw.param) {
            (_, Param::Users) | (None, _) => true,
            (Some(o), _) => matches!(o.as_str(), "users" | "max-in-flight" | "u"),
        },
        unit: match sw.base.base {
            Base::Rr(_) => "req/s",
            Base::Mailbox(..) | Base::Jmap(_) => "visit/s",
            _ => "msg/s",
        },
    };
    // A search probes loads in its own order: the table and fit take them in order.
    let mut values: Vec<u64> = match &found {
        Some(_) => rows.iter().map(|r| r.value).collect(),
        None => sw.values.clone(),
    };
    if found.is_some() {
        values.sort_unstable();
        values.dedup();
    }
    let analysis = table::analyse(&swept, &values, &rows);
    let mut json = serde_json::to_value(&analysis)?;
    json["interrupted"] = interrupted.into();
    json["repeat"] = args.repeat.into();
    json["rows"] = serde_json::to_value(&rows)?;
    json["command"] = serde_json::to_value(&ctx.command_line)?;
    if let Some(f) = &found {
        json["find_max"] = f.json.clone();
    }
    crate::results::write_atomic(
        &dir.join("sweep.json"),
        serde_json::to_string_pretty(&json)?.as_bytes(),
    )?;
    print!("{}", table::render(&analysis, &rows));
    if let Some(f) = &found {
        print!("{}", f.text);
    }
    if let Some(file) = &args.junit {
        junit::write(file, &dir, &rows, found.as_ref(), started.elapsed())?;
        println!("junit: {}", file.display());
    }
    // The sweep page, like every run's report.html; failing to write it fails nothing.
    match crate::report::write_report(&dir) {
        Ok(page) => println!("report: {}", page.display()),
        Err(e) => eprintln!("spate: warning: no HTML report: {e:#}"),
    }
    println!("results: {}", dir.display());
    let failed = found.as_ref().is_some_and(|f| !f.ok);
    Ok(match by {
        Some(sig) if interrupted => ExitCode::from(sig.exit_code()),
        _ if failed => ExitCode::from(1),
        _ if junit::broken(&dir, &rows) => ExitCode::from(super::THRESHOLDS_FAILED),
        _ => ExitCode::SUCCESS,
    })
}

/// Runs every step and repetition in order; true when the sweep was interrupted.
async fn steps(
    sw: &Sweep,
    args: &Args,
    dir: &Path,
    ctx: &Ctx,
    stop: &AtomicBool,
    sheet: &mut Sheet,
) -> anyhow::Result<bool> {
    let stopped = || stop.load(Ordering::Relaxed);
    let total = sw.values.len() * args.repeat as usize;
    let mut done = 0;
    for (i, &v) in sw.values.iter().enumerate() {
        for rep in 1..=args.repeat {
            let name = &sw.name;
            let mut step_name = format!("step-{:02}-{}-{}", i + 1, name.replace('_', "-"), v);
            if args.repeat > 1 {
                step_name.push_str(&format!("-r{rep}"));
            }
            let step_dir = dir.join(&step_name);
            if let Some(cmd) = &args.before_step {
                hook(cmd, v, &step_dir, stop)?;
            }
            if stopped() {
                return Ok(true);
            }
            let a = step_args(&sw.base, sw.param, v, args.count_per_user)?;
            eprintln!(
                "spate sweep: {name}={v} repeat {rep}/{} ({}/{total})",
                args.repeat,
                done + 1
            );
            if let Some(w) = sw.warm {
                let mut wa = a.clone();
                wa.common().0.bounded_to(w);
                let warm_dir = dir.join("warmup").join(&step_name);
                let (s, _) = run_step(wa, warm_dir, false, ctx).await?;
                if s.interrupted || stopped() {
                    return Ok(true);
                }
            }
            let (s, port) = run_step(a, step_dir.clone(), sw.progress, ctx).await?;
            let row = Row::from_summary(i + 1, name, v, rep, &s, &step_dir);
            eprintln!(
                "spate sweep: {name}={v}: {:.1}/s, latency mean {:.2} ms p99 {:.2} ms, {} errors",
                row.throughput_per_s, row.latency_mean_ms, row.latency_p99_ms, row.errors
            );
            sheet.add(row)?;
            done += 1;
            if s.interrupted || stopped() {
                return Ok(true);
            }
            if done < total && !pause(sw, args, port, stop).await {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

mod between;
pub use between::connections_on;
use between::{hook, pause};
mod find_max;
mod junit;
#[cfg(test)]
mod tests;
