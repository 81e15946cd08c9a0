//! `spate population`: a population of mail users, each following a profile's day at its
//! busiest hour (`session::population`), judged by the profile's quality of service.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::json;

use super::{observers, print_outcome, Finished};
use crate::ctx::Ctx;
use crate::engine::{self, Driver, Model, PlanHead, Workload};
use crate::message::{AddressPool, Factory, Pick};
use crate::opts::accounts::AccountsArgs;
use crate::opts::{MonitorArgs, OutputArgs};
use crate::scenario::threshold::{Check, Verdict};
use crate::session::mailbox::fetch;
use crate::session::population::profile::{self, Action, Profile, Ready};
use crate::session::population::{self as pop, User};
use crate::session::smtp::{self, AuthMech};
use crate::session::{Endpoint, TlsMode};
use crate::units::{self, Range};
use crate::{usage, UsageError};

const ABOUT: &str = "Each simulated user is one session that follows the profile's day at its \
busiest hour: its actions (send, check, read, flag, move, delete, search) arrive as a Poisson \
process at the profile's rate (actions per day x the busiest hour's share / 3600 s, times \
--time-scale), each drawn by the profile's shares, and run when the user's client is free. A \
desktop client logs in when its user starts (--login-rate) and stays logged in, in IDLE between actions; a \
mobile one logs in for each action. A message goes from its user to recipients drawn from the \
population, its size and recipient count from the profile's tables. Each action is a unit of \
work timed as a phase of its class; `response` counts from when it was due, so a server that \
falls behind shows there. At the end the profile's quality of service (and --qos) is judged: \
exit status 0 only when every criterion measured held, 1 when one failed or nothing was done, \
2 for bad input.";

const EXAMPLES: &str = "EXAMPLES:
  spate population --list-profiles
  spate population --dump-profile office-medium > mine.toml
  SPATE_PASSWORD=spate spate population --profile office-medium --users 500 \\
      --smtp 127.0.0.1:2525 --imap 127.0.0.1:1143 --users-file users.txt --duration 10m
  # A busiest hour in a minute: 60 simulated seconds to the real one.
  spate population --profile mobile-poll --users 2000 --time-scale 60 --duration 1m \\
      --smtp submission://mail.example.test --imap imaps://mail.example.test \\
      --users-file users.txt --qos 'p95(check) < 2s'";

/// What --smtp and --imap take (population, populate and capacity).
pub const TARGETS: &str =
    "TARGETS: --smtp takes smtp://HOST[:25], smtp+starttls://, submission://HOST[:587] \
(STARTTLS and each user logs in as itself) or smtps://HOST[:465]; --imap takes \
imap://HOST[:143], imap+starttls:// or imaps://HOST[:993]; a bare HOST:PORT is plain.";

#[derive(Debug, Clone, clap::Args, Serialize)]
#[command(after_long_help = format!("{ABOUT}\n\n{EXAMPLES}\n\n{TARGETS}"))]
pub struct Args {
    /// The profile: a built-in one (--list-profiles) or a file NAME.toml.
    #[arg(long, value_name = "NAME|FILE", required_unless_present_any = ["list_profiles", "dump_profile"])]
    pub profile: Option<String>,
    /// Print the built-in profiles, their days and their QoS, and exit.
    #[arg(long)]
    #[serde(skip)]
    pub list_profiles: bool,
    /// Print a built-in profile's file, a starting point for one's own, and exit.
    #[arg(long, value_name = "NAME")]
    #[serde(skip)]
    pub dump_profile: Option<String>,
    /// Simulated users: the first N accounts. Each is one session.
    #[arg(long, short = 'u', value_name = "N")]
    pub users: Option<u32>,
    /// Simulated seconds per real second: 60 runs a busiest hour in a minute (the
    /// actions come 60 times as often; the server's work per action is the same).
    #[arg(long, value_name = "N", default_value_t = 1.0)]
    pub time_scale: f64,
    /// How long the run lasts, real time [default: a simulated hour].
    #[arg(long, short = 'd', value_name = "DUR")]
    pub duration: Option<String>,
    /// The SMTP server users send through (see TARGETS below).
    #[arg(long, value_name = "URL", required_unless_present_any = ["list_profiles", "dump_profile"])]
    pub smtp: Option<String>,
    /// The IMAP server users read their mail on (see TARGETS below).
    #[arg(long, value_name = "URL", required_unless_present_any = ["list_profiles", "dump_profile"])]
    pub imap: Option<String>,
    /// Users start at this rate, their desktop clients logging in then (each user's day
    /// starts when it does); --duration counts from when every user has started.
    #[arg(long, value_name = "RATE", default_value = "100/s")]
    pub login_rate: String,
    /// Users log in to SMTP as themselves (AUTH), as a submission client does; on for
    /// submission:// and smtps://.
    #[arg(long)]
    pub smtp_auth: bool,
    /// Run even when the mailboxes hold far less than the profile's [store] (see spate
    /// populate): the figures then say little of a real server.
    #[arg(long)]
    pub no_populate_check: bool,
    /// A quality-of-service rule in the threshold language, e.g. 'p95(send) < 2s'; one
    /// for the same figure as a profile's rule replaces it. Repeatable.
    #[arg(long = "qos", value_name = "RULE")]
    pub qos: Vec<String>,

    #[command(flatten)]
    #[serde(flatten)]
    pub accounts: AccountsArgs,

    /// Trust the server certificates this CA (PEM) signed.
    #[arg(long, value_name = "FILE", help_heading = "TLS")]
    pub ca: Option<PathBuf>,
    /// Do not verify the servers' certificates.
    #[arg(long, help_heading = "TLS")]
    pub insecure: bool,
    /// Give up on a server that does not answer within this long.
    #[arg(long, value_name = "DUR", default_value = "30s")]
    pub timeout: String,

    #[command(flatten)]
    pub output: OutputArgs,
    #[command(flatten)]
    pub monitor: MonitorArgs,
}

/// What plan.json records.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    #[serde(flatten)]
    pub head: PlanHead,
    #[serde(flatten)]
    pub workload: Workload,
    pub profile: Profile,
    pub users: u32,
    pub accounts: usize,
    pub time_scale: f64,
    /// Actions per user per second of real time.
    pub actions_per_user_s: f64,
    pub desktop_share: f64,
    pub smtp: String,
    pub imap: String,
    /// The quality-of-service rules judged at the end: the profile's, with --qos.
    pub qos: Vec<String>,
    pub seed: u64,
    pub args: Args,
}

crate::plan_info!(Plan);

/// `--smtp URL`: the endpoint and whether its users log in.
fn smtp_endpoint(
    url: &str,
    tls: &crate::tls::ClientOptions,
    timeout: Duration,
) -> anyhow::Result<(Endpoint, bool)> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("smtp", url));
    let (mode, port, auth) = match scheme.to_ascii_lowercase().as_str() {
        "smtp" => (TlsMode::Plain, 25, false),
        "smtp+starttls" => (TlsMode::Starttls, 25, false),
        "submission" => (TlsMode::Starttls, 587, true),
        "smtps" | "submissions" => (TlsMode::Implicit, 465, true),
        _ => {
            return usage(format!(
                "--smtp '{url}': expected smtp://, smtp+starttls://, submission:// or smtps://"
            ))
        }
    };
    let hostport = rest.trim_end_matches('/');
    let ep = fetch::endpoint(hostport, port, mode, tls, timeout)
        .map_err(|e| UsageError(format!("--smtp '{url}': {e}")))?;
    Ok((ep, auth))
}

/// The QoS rules: the profile's, each replaced by a --qos rule for the same figure, then
/// the other --qos rules. A rule on a phase must name one of the population's.
fn qos_rules(profile: &Profile, extra: &[String]) -> Result<Vec<Check>, UsageError> {
    // `whose`: where the rule comes from, for its error.
    let parse = |whose: &str, t: &String| -> Result<Check, UsageError> {
        let c = Check::parse(t).map_err(|e| UsageError(format!("{whose}: {e}")))?;
        c.check_static(&c.path)
            .map_err(|e| UsageError(format!("{whose}: {e}")))?;
        if let Some(p) = c.phase_name() {
            if !User::PHASES.iter().any(|q| q.name() == p) {
                let classes: Vec<&str> = Action::ALL.iter().map(|a| a.name()).collect();
                return Err(UsageError(format!(
                    "{whose} '{t}': '{p}' is no action of a population: the classes are {} (and login, save_sent, idle, delivery, response)",
                    classes.join(", ")
                )));
            }
        }
        Ok(c)
    };
    let extra: Vec<Check> = extra
        .iter()
        .map(|t| parse("--qos", t))
        .collect::<Result<_, _>>()?;
    let whose = format!("profile {} qos", profile.name);
    let mut rules: Vec<Check> = Vec::new();
    for t in &profile.qos {
        let c = parse(&whose, t)?;
        match extra.iter().find(|e| e.figure() == c.figure()) {
            Some(e) => rules.push(e.clone()),
            None => rules.push(c),
        }
    }
    for e in extra {
        if !rules.iter().any(|r| r.figure() == e.figure()) {
            rules.push(e);
        }
    }
    Ok(rules)
}

/// Builds the plan and what the users share. No network I/O.
fn prepare(args: Args, command: Vec<String>) -> anyhow::Result<(Plan, pop::Settings, Vec<Check>)> {
    let name = args.profile.as_deref().expect("clap requires --profile");
    let ready: Ready = Profile::load(name)?.ready()?;
    let Some(users) = args.users else {
        return usage("give the number of simulated users: --users N");
    };
    if users == 0 {
        return usage("--users 0: give at least one user");
    }
    if !(args.time_scale.is_finite() && args.time_scale > 0.0 && args.time_scale <= 3600.0) {
        return usage(format!(
            "--time-scale {}: give simulated seconds per real second, above 0 and at most 3600",
            args.time_scale
        ));
    }
    let duration = match &args.duration {
        Some(d) => units::parse_duration(d)?,
        None => Duration::from_secs_f64(3600.0 / args.time_scale),
    };
    if duration.is_zero() {
        return usage("--duration 0: give how long the run lasts");
    }
    let accounts = super::populate::population_accounts(&args.accounts, users)?;
    let qos = qos_rules(&ready.profile, &args.qos)?;
    let tls = crate::tls::ClientOptions {
        ca: args.ca.as_ref().map(|p| p.display().to_string()),
        insecure: args.insecure,
        ..Default::default()
    };
    let timeout = units::parse_duration(&args.timeout)?;
    let smtp_url = args.smtp.clone().expect("clap requires --smtp");
    let imap_url = args.imap.clone().expect("clap requires --imap");
    let (smtp_ep, auth_by_scheme) = smtp_endpoint(&smtp_url, &tls, timeout)?;
    let imap = super::populate::imap_endpoint(&imap_url, &tls, timeout)?;
    let seed = args.output.seed.unwrap_or_else(rand::random);
    let head = PlanHead::new::<User>(command, "population", &imap_url);
    let addresses: Vec<String> = accounts.iter().map(|a| a.user.clone()).collect();
    let bad = |e: crate::message::MessageError| UsageError(e.to_string());
    let mut factory = Factory::new(
        head.run_id.clone(),
        Range {
            lo: 1,
            hi: ready.largest(),
        },
        Range::fixed(1),
        AddressPool {
            addrs: addresses.clone(),
        },
        AddressPool { addrs: addresses },
        Pick::Random,
    )
    .map_err(bad)?;
    factory.seed = Some(seed);
    let auth = (args.smtp_auth || auth_by_scheme).then(|| {
        (
            AuthMech::Auto,
            accounts
                .iter()
                .map(|a| (a.user.clone(), a.password.clone()))
                .collect(),
        )
    });
    let smtp_settings = smtp::Settings {
        endpoint: smtp_ep,
        lmtp: false,
        tls_percent: 0,
        auth,
        pipelining: true,
        across: false,
        chunking: false,
        helo: "population.spate.test".into(),
        // A mail client connects to send and disconnects after.
        messages_per_connection: Range::fixed(1),
        dsn_notify: None,
        shard: None,
    };
    let rate = ready.rate_per_user(args.time_scale);
    let login_rate = units::parse_rate(&args.login_rate)?;
    if !(login_rate > 0.0 && login_rate.is_finite()) {
        return usage(format!(
            "--login-rate {}: give a rate above 0, e.g. 100/s",
            args.login_rate
        ));
    }
    let mut workload =
        Workload::bounded(Model::Paced { users }, None, Some(duration.as_secs_f64()));
    // Users start at the login rate; the duration counts from when all have.
    workload.connect_rate = Some(login_rate);
    workload.after_setup = true;
    let plan = Plan {
        head,
        workload,
        profile: ready.profile.clone(),
        users,
        accounts: accounts.len(),
        time_scale: args.time_scale,
        actions_per_user_s: rate,
        desktop_share: ready.desktop,
        smtp: smtp_url,
        imap: imap_url,
        qos: qos.iter().map(|c| c.text.clone()).collect(),
        seed,
        args,
    };
    let settings = pop::Settings {
        profile: ready,
        accounts,
        first_user: 0,
        imap,
        smtp: Arc::new(smtp_settings),
        factory: Arc::new(factory),
        rate,
        seed,
    };
    Ok((plan, settings, qos))
}

/// Checks the store against the profile, as a run does before it starts.
pub async fn check_store(args: &Args) -> anyhow::Result<()> {
    let (plan, settings, _) = prepare(args.clone(), Vec::new())?;
    store_check(&plan, &settings).await
}

/// Checks `args` as a run would, without running or writing anything.
pub fn check(args: &Args) -> anyhow::Result<()> {
    prepare(args.clone(), Vec::new()).map(|_| ())
}

/// `spate population`.
pub async fn run(args: Args, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    if args.list_profiles {
        print!("{}", profile::list());
        return Ok(ExitCode::SUCCESS);
    }
    if let Some(name) = &args.dump_profile {
        print!("{}", profile::dump(name)?);
        return Ok(ExitCode::SUCCESS);
    }
    let output = args.output.clone();
    let out = output.out.clone();
    let probed = probe(args, ctx.command_line.clone(), out.as_deref(), true).await?;
    println!("results: {}", probed.dir.display());
    let summary = &probed.summary;
    let code = if probed.failed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    };
    let code = super::load_exit(summary, "action", code);
    super::thresholds::finish(&output, &probed.dir, summary, code)
}

/// A population run that ended, and its QoS.
pub struct Probed {
    pub dir: PathBuf,
    pub summary: crate::results::Summary,
    pub qos: Vec<Judged>,
}

impl Probed {
    /// Some criterion measured failed.
    pub fn failed(&self) -> bool {
        self.qos.iter().any(|v| v.measured && !v.verdict.pass)
    }
}

/// Runs a population of `args` into `out` (or a new results directory) and judges its
/// QoS; `say` prints the summary, the mix and the QoS table. `spate population`'s run
/// and each probe of `spate capacity`.
pub async fn probe(
    args: Args,
    command: Vec<String>,
    out: Option<&Path>,
    say: bool,
) -> anyhow::Result<Probed> {
    let progress = say && args.output.progress_enabled();
    let (output, monitor) = (args.output.clone(), args.monitor.clone());
    let (plan, settings, qos) = prepare(args, command)?;
    let title = format!("spate — {} users of {}", plan.users, plan.profile.name);
    let stop = Arc::new(AtomicBool::new(false));
    let mut obs = observers(&output, &monitor, &plan, progress, title, "action", &stop)?;
    let checked = crate::session::preflight(&plan.smtp, &settings.smtp.endpoint)
        .await
        .and(crate::session::preflight(&plan.imap, &settings.imap).await);
    obs.push(Box::new(super::thresholds::or_junit(
        &output,
        "population",
        checked,
    )?));
    if !plan.args.no_populate_check {
        store_check(&plan, &settings).await?;
    }
    let out = crate::opts::output::results_dir(out, output.overwrite, "population")?;
    let settings = Arc::new(settings);
    let book: Arc<dyn crate::results::AddressBook> = settings.factory.clone();
    let run = engine::Setup::new(&plan, Some(&out), Some(book), obs, stop)?;
    let summary = engine::run(run, |id, _| User::new(id, settings.clone())).await?;
    let finished = Finished { dir: out, summary };
    let verdicts = judge(&qos, &finished.dir)?;
    if say {
        print_outcome(&finished);
        print!("{}", realised(&plan, &settings.profile, &finished.summary));
        print!("{}", qos_table(&verdicts));
    }
    Ok(Probed {
        dir: finished.dir,
        summary: finished.summary,
        qos: verdicts,
    })
}

/// Mailboxes looked at to tell whether the store is filled.
const STORE_SAMPLE: usize = 10;

/// Refuses a run on a store far emptier than the profile's (INBOX at less than half its
/// messages on average, in up to ten mailboxes spread over the population).
pub async fn store_check(plan: &Plan, settings: &pop::Settings) -> anyhow::Result<()> {
    let want = plan.profile.store.inbox;
    if want == 0 {
        return Ok(());
    }
    let n = settings.accounts.len();
    let step = (n / STORE_SAMPLE).max(1);
    let mut seen = Vec::new();
    for i in (0..n).step_by(step).take(STORE_SAMPLE) {
        let a = &settings.accounts[i];
        let ep = &settings.imap;
        let count = async {
            let mut m = crate::session::mailbox::client::Imap::greet(ep.connect().await?).await?;
            if ep.tls == TlsMode::Starttls {
                m.starttls(ep).await?;
            }
            m.login(&a.user, &a.password).await?;
            let sel = m.select("INBOX").await?;
            let _ = m.logout().await;
            Ok::<u32, crate::session::mailbox::client::ClientError>(sel.exists)
        };
        match count.await {
            Ok(c) => seen.push(c),
            Err(e) => {
                return usage(format!(
                    "cannot look into {}'s INBOX to check the store: {e}",
                    a.user
                ))
            }
        }
    }
    let mean = seen.iter().map(|c| f64::from(*c)).sum::<f64>() / seen.len().max(1) as f64;
    if mean < f64::from(want) / 2.0 {
        return usage(format!(
            "the store is far from {}'s: INBOX holds {mean:.0} messages on average in {} mailboxes looked at, its users have {want}; fill it first (spate populate --profile {} --users {} --imap {} ...), or run anyway with --no-populate-check",
            plan.profile.name,
            seen.len(),
            plan.args.profile.as_deref().unwrap_or(""),
            plan.users,
            plan.imap
        ));
    }
    Ok(())
}

/// A QoS criterion after the run.
#[derive(Debug, Clone, Serialize)]
pub struct Judged {
    #[serde(flatten)]
    pub verdict: Verdict,
    /// False when the run has no source for its figure (no delivery was verified): it
    /// neither held nor failed.
    pub measured: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_measured: Option<String>,
}

/// Judges the QoS rules on the results directory, and writes them into qos.json and
/// summary.json's `extra.qos`.
fn judge(rules: &[Check], dir: &Path) -> anyhow::Result<Vec<Judged>> {
    let verdicts: Vec<Judged> = rules
        .iter()
        .map(|c| {
            let v = c.evaluate(dir, &c.path, "population");
            let unverified =
                c.path.first().is_some_and(|p| p == "verify") && !dir.join("verify.json").exists();
            // A figure the run has no source for is not measured: never held, never failed.
            let not_measured = if unverified {
                Some("no delivery was verified in this run (no verify.json)".to_string())
            } else if v.value.is_some() {
                None
            } else {
                Some(match c.phase_name() {
                    Some("delivery") => {
                        "no message of this run was found by a user's check".to_string()
                    }
                    Some(p) => format!("no {p} completed"),
                    None => v.message.clone(),
                })
            };
            Judged {
                measured: not_measured.is_none(),
                not_measured,
                verdict: v,
            }
        })
        .collect();
    let held = verdicts.iter().all(|v| !v.measured || v.verdict.pass);
    let doc = json!({ "held": held, "criteria": verdicts });
    crate::results::write_atomic(&dir.join("qos.json"), format!("{doc:#}\n").as_bytes())?;
    let path = dir.join("summary.json");
    if let Ok(text) = std::fs::read_to_string(&path) {
        if let Ok(mut s) = serde_json::from_str::<serde_json::Value>(&text) {
            s["extra"]["qos"] = doc;
            crate::results::write_atomic(&path, format!("{s:#}\n").as_bytes())?;
        }
    }
    Ok(verdicts)
}

fn qos_table(verdicts: &[Judged]) -> String {
    let mut out = String::from("\nquality of service\n");
    for v in verdicts {
        let state = match (v.measured, v.verdict.pass) {
            (false, _) => "not measured",
            (true, true) => "held",
            (true, false) => "FAILED",
        };
        let why = match &v.not_measured {
            Some(why) => why.clone(),
            None => v.verdict.message.clone(),
        };
        let _ = writeln!(out, "  {:<14} {:<34} {why}", state, v.verdict.threshold);
    }
    let measured = verdicts.iter().filter(|v| v.measured).count();
    let held = verdicts
        .iter()
        .filter(|v| v.measured && v.verdict.pass)
        .count();
    let _ = writeln!(
        out,
        "  {held} of {measured} criteria measured held{}",
        match verdicts.len() - measured {
            0 => String::new(),
            n => format!("; {n} not measured"),
        }
    );
    out
}

/// The profile's actions per user per day beside what the run did (from the phases'
/// counts over the simulated time).
fn realised(plan: &Plan, ready: &Ready, s: &crate::results::Summary) -> String {
    let sim_hours = s.elapsed_s * plan.time_scale / 3600.0;
    let peak = ready.profile.peak_hour_share / 100.0;
    let mut out = format!(
        "\nactions per user per day (at the busiest hour's pace, {:.2} simulated hours)\n  {:<8} {:>10} {:>10}\n",
        sim_hours, "action", "profile", "this run"
    );
    if sim_hours <= 0.0 {
        return out;
    }
    for a in Action::ALL {
        let target = ready.profile.per_day.get(a);
        let phase = pop::action_phase(a);
        let count = s
            .phases
            .iter()
            .find(|p| p.phase == phase.name())
            .map_or(0, |p| p.count);
        if target == 0.0 && count == 0 {
            continue;
        }
        let per_day = count as f64 / f64::from(plan.users) / sim_hours / peak;
        let _ = writeln!(out, "  {:<8} {:>10.1} {:>10.1}", a.name(), target, per_day);
    }
    if let Some(n) = s.totals.own.named("nothing_to_do").filter(|n| *n > 0) {
        let _ = writeln!(
            out,
            "  {n} actions on a message found INBOX empty and are not in the counts above: fill the mailboxes first"
        );
    }
    out
}
