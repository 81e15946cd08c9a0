//! `spate jmap`: mail clients' visits over JMAP (RFC 8620/8621), `session::jmap` driven by
//! the engine.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use serde::Serialize;

use super::{observers, print_outcome, Finished};
use crate::ctx::Ctx;
use crate::engine::{self, PlanHead, Workload};
use crate::message::{AddressPool, Factory, Pick};
use crate::opts::accounts::AccountsArgs;
use crate::opts::{MonitorArgs, OutputArgs, TransportArgs, WorkloadArgs};
use crate::session::jmap::{Account, Session, Settings};
use crate::session::TlsMode;
use crate::units::Range;
use crate::{usage, UsageError};

const EXAMPLES: &str = "A unit of work is one visit to the inbox, as a mail client makes it: \
its newest --messages messages with their header fields (Email/query and Email/get in one \
request: the query phase), the text bodies of --download percent of them (body), then \
--delete percent destroyed and $seen set on --flag percent of the others (Email/set: set), \
--move percent of the others moved to the archive (move). --import percent of visits then \
upload a generated message and import it into the inbox (upload, import), --submit percent \
send one to another account of the run (upload, import as a draft, submit). Each session \
logs in first (the session resource, then Mailbox/get: the session and mailbox phases) and \
keeps its connection. Percentages are spread evenly over the messages the run looks at. \
Authentication is HTTP Basic, the password from the users file or SPATE_PASSWORD.

EXAMPLES:
  spate jmap http://127.0.0.1:8080 --users-file users.txt --users 20 --duration 1m
  spate jmap https://mail.example.test/.well-known/jmap --ca ca.pem --users-file users.txt \\
      --messages 20 --download 50 --flag 50 --rate 10/s --duration 5m
  spate jmap http://127.0.0.1:8080 --users-file users.txt --delete 100   # reads and empties
  spate jmap http://127.0.0.1:8080 --users-file users.txt --users 20 --duration 5m \
      --move 10 --import 20 --submit 10 --message-size 1k..20k";

/// Options of `spate jmap`.
#[derive(Debug, Clone, clap::Args, Serialize)]
#[command(after_long_help = EXAMPLES)]
pub struct Args {
    /// The server: http(s)://HOST[:PORT][/PATH], PATH its session resource
    /// (/.well-known/jmap by default).
    pub target: String,

    #[command(flatten)]
    pub workload: WorkloadArgs,

    #[command(flatten)]
    #[serde(flatten)]
    pub accounts: AccountsArgs,

    /// Messages a visit looks at, the newest first.
    #[arg(long, short = 'm', default_value_t = 10, help_heading = "Visit")]
    pub messages: u32,
    /// Percentage of them whose text body is read.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Visit")]
    pub download: u8,
    /// Percentage of those not destroyed that are marked read ($seen).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Visit")]
    pub flag: u8,
    /// Percentage of them destroyed.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Visit")]
    pub delete: u8,
    /// Percentage of those not destroyed that are moved: to the mailbox with the archive
    /// role, else the first that is not the inbox (an account with neither: every such
    /// visit refused, "no mailbox to move to").
    #[arg(long = "move", value_name = "MOVE", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Visit")]
    pub moves: u8,
    /// Percentage of visits that upload a generated message and import it into the inbox.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Visit")]
    pub import: u8,
    /// Percentage of visits that send a generated message to another account of the run
    /// (uploaded, imported as a draft, EmailSubmission/set; 2 accounts at least).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=100), help_heading = "Visit")]
    pub submit: u8,
    /// Body size of the messages imported and sent, or a uniform range: 2k, 1k..20k.
    #[arg(
        long,
        default_value = "2k",
        value_name = "SIZE",
        help_heading = "Visit"
    )]
    pub message_size: String,

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
    #[serde(flatten)]
    pub workload: Workload,
    pub accounts: usize,
    pub tls: TlsMode,
    pub seed: u64,
    pub args: Args,
}

crate::plan_info!(Plan);

/// `http(s)://HOST[:PORT][/PATH]`: TLS or not, the authority, its port, the path.
fn target(t: &str) -> Result<(bool, String, u16, String), UsageError> {
    let bad = || {
        UsageError(format!(
            "{t}: expected http://HOST[:PORT][/PATH] or https://…"
        ))
    };
    let (tls, rest) = match t.split_once("://") {
        Some((s, rest)) if s.eq_ignore_ascii_case("http") => (false, rest),
        Some((s, rest)) if s.eq_ignore_ascii_case("https") => (true, rest),
        _ => return Err(bad()),
    };
    let (authority, port, path) = crate::session::jmap::url::target(rest, tls).ok_or_else(bad)?;
    Ok((tls, authority, port, path))
}

impl Args {
    /// The server's port (a sweep waits for it to be idle between steps).
    pub fn port(&self) -> anyhow::Result<u16> {
        Ok(target(&self.target)?.2)
    }
}

/// Builds the plan and what the sessions share (no network I/O).
fn prepare(args: &Args, command: Vec<String>) -> anyhow::Result<(Plan, Settings)> {
    let (tls, authority, port, path) = target(&args.target)?;
    if args.transport.starttls || args.transport.tls {
        return usage("--starttls/--tls: JMAP's TLS is https:// in the target");
    }
    let mut t = args.transport.clone();
    t.tls = tls;
    let endpoint = t.endpoint(&authority, port, false)?;
    let workload = args.workload.resolve()?;
    let mut accounts: Vec<Account> = args
        .accounts
        .credentials("to log in")?
        .into_iter()
        .map(|(user, password)| Account { user, password })
        .collect();
    if let Some(of) = &workload.shard {
        accounts = of.take(accounts, "accounts")?;
    }
    if args.messages == 0 {
        return usage("--messages: a visit looks at 1 message at least");
    }
    if args.submit > 0 && accounts.len() < 2 {
        return usage("--submit: sends to another account of the run, 2 accounts at least");
    }
    let head = PlanHead::new::<Session>(command, "jmap", &args.target).of(&workload);
    let factory = messages(args, &accounts, &head.run_id)?;
    let plan = Plan {
        head,
        address: endpoint.addr,
        workload,
        accounts: accounts.len(),
        tls: endpoint.tls,
        seed: args.output.seed.unwrap_or_else(rand::random),
        args: args.clone(),
    };
    let settings = Settings {
        endpoint,
        host: authority,
        session_path: path,
        accounts,
        messages: args.messages,
        download: args.download,
        flag: args.flag,
        delete: args.delete,
        moves: args.moves,
        import: args.import,
        submit: args.submit,
        factory,
    };
    Ok((plan, settings))
}

/// The generator of the messages imported and sent (the tracking header of `spate smtp`'s):
/// from and to the accounts, in their order; None when no visit makes one.
fn messages(
    args: &Args,
    accounts: &[Account],
    run_id: &str,
) -> Result<Option<Arc<Factory>>, UsageError> {
    if args.import == 0 && args.submit == 0 {
        return Ok(None);
    }
    let bad = |e: crate::message::MessageError| UsageError(format!("--message-size: {e}"));
    let size = crate::units::parse_size_range(&args.message_size)
        .map_err(|e| UsageError(format!("--message-size: {e}")))?;
    let pool = || AddressPool {
        addrs: accounts.iter().map(|a| a.user.clone()).collect(),
    };
    let f = Factory::new(
        run_id.into(),
        size,
        Range::fixed(1),
        pool(),
        pool(),
        Pick::RoundRobin,
    )
    .map_err(bad)?;
    Ok(Some(Arc::new(f)))
}

/// A JMAP load into its --out (or a new results directory), once the options are good
/// and the server answers.
pub async fn load(args: Args, command: Vec<String>, progress: bool) -> anyhow::Result<Finished> {
    let title = format!("spate — JMAP load on {}", args.target);
    let (plan, settings) = prepare(&args, command)?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut obs = observers(
        &args.output,
        &args.monitor,
        &plan,
        progress,
        title,
        "visit",
        &stop,
    )?;
    obs.push(Box::new(super::thresholds::or_junit(
        &args.output,
        plan.head.protocol,
        crate::session::preflight(&plan.head.target, &settings.endpoint).await,
    )?));
    let out = crate::opts::output::results_dir(
        args.output.out.as_deref(),
        args.output.overwrite,
        "jmap",
    )?;
    let settings = Arc::new(settings);
    let run = engine::Setup::new(&plan, Some(&out), None, obs, stop)?;
    let summary = engine::run(run, |id, rng| Session::new(id, settings.clone(), rng)).await?;
    Ok(Finished { dir: out, summary })
}

/// `spate jmap`.
pub async fn run(args: Args, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let output = args.output.clone();
    let finished = load(args, ctx.command_line.clone(), output.progress_enabled()).await?;
    print_outcome(&finished);
    println!("results: {}", finished.dir.display());
    let code = super::load_exit(&finished.summary, "visit", ExitCode::SUCCESS);
    super::thresholds::finish(&output, &finished.dir, &finished.summary, code)
}

#[cfg(test)]
mod tests {
    use super::target;

    #[test]
    fn targets_are_urls_with_the_session_path_by_default() {
        assert_eq!(
            target("http://127.0.0.1:8080").unwrap(),
            (
                false,
                "127.0.0.1:8080".into(),
                8080,
                "/.well-known/jmap".into()
            )
        );
        assert_eq!(target("https://h/jmap/session").unwrap().3, "/jmap/session");
        assert_eq!(target("https://h/").unwrap().2, 443);
        assert!(target("127.0.0.1:8080").is_err());
        assert!(target("http://h:0/").is_err());
    }
}
