//! `spate populate`: fills every account's mailboxes to a profile's composition (its
//! `[store]`: messages in INBOX and in Archive, a share of them read) by IMAP APPEND, as
//! fast as the server takes them, several mailboxes at once. It counts what each mailbox
//! holds first and adds only what is missing, so a second run (or one after an
//! interruption) finishes the job without doubling it. An empty mailbox makes every
//! server look fast; a population run checks the store against its profile.

use std::io::IsTerminal as _;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::ctx::Ctx;
use crate::opts::accounts::AccountsArgs;
use crate::session::mailbox::client::{ClientError, Imap};
use crate::session::mailbox::fetch::{self, Account};
use crate::session::population::profile::{Profile, Ready};
use crate::session::{Endpoint, TlsMode};
use crate::units;
use crate::{usage, UsageError};

const ABOUT: &str = "For each of the first --users accounts: log in over IMAP, count the \
messages in INBOX and Archive, and APPEND what is missing up to the profile's [store] (or \
--inbox/--archive): generated messages of the profile's sizes, from other users of the \
population, the profile's share of them marked \\Seen. Mailboxes that hold enough already \
are left as they are; nothing is ever deleted. Interrupted, it stops between messages; run \
it again to finish. Exit status 0 when every mailbox was filled, 1 when some could not be, \
2 for bad input.";

const EXAMPLES: &str = "EXAMPLES:
  spate populate --profile office-medium --users 2000 --imap imaps://mail.example.test \\
      --users-file accounts.txt --connections 16
  # A tenth of the profile's mailbox, for a quick test.
  spate populate --profile office-medium --users 50 --imap 127.0.0.1:1143 \\
      --users-file users.txt --inbox 40 --archive 0";

#[derive(Debug, Clone, clap::Args, Serialize)]
#[command(after_long_help = format!("{ABOUT}\n\n{EXAMPLES}"))]
pub struct Args {
    /// The profile whose [store] to fill to: a built-in one or a file NAME.toml.
    #[arg(long, value_name = "NAME|FILE")]
    pub profile: String,
    /// Fill the first N accounts.
    #[arg(long, short = 'u', value_name = "N")]
    pub users: u32,
    /// The IMAP server: imap://HOST[:143], imap+starttls:// or imaps://HOST[:993].
    #[arg(long, value_name = "URL")]
    pub imap: String,
    /// Messages in INBOX, instead of the profile's.
    #[arg(long, value_name = "N")]
    pub inbox: Option<u32>,
    /// Messages in Archive, instead of the profile's.
    #[arg(long, value_name = "N")]
    pub archive: Option<u32>,
    /// Mailboxes filled at once (one IMAP connection each).
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub connections: u32,
    #[command(flatten)]
    #[serde(flatten)]
    pub accounts: AccountsArgs,
    /// Trust the server certificates this CA (PEM) signed.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<std::path::PathBuf>,
    /// Do not verify the server's certificate.
    #[arg(long)]
    pub insecure: bool,
    /// Give up on a server that does not answer within this long.
    #[arg(long, value_name = "DUR", default_value = "30s")]
    pub timeout: String,
    /// Seed of the messages' sizes and senders.
    #[arg(long)]
    pub seed: Option<u64>,
}

/// What a fill wrote.
#[derive(Default)]
struct Tally {
    mailboxes_done: AtomicU64,
    mailboxes_full: AtomicU64,
    appended: AtomicU64,
    bytes: AtomicU64,
    failed: AtomicU64,
}

struct Job {
    ready: Ready,
    accounts: Vec<Account>,
    imap: Endpoint,
    inbox: u32,
    archive: u32,
    seed: u64,
    next: AtomicU64,
    tally: Tally,
    stop: AtomicBool,
    /// The first failure, said once at the end.
    first_error: std::sync::Mutex<Option<String>>,
}

pub fn imap_endpoint(
    url: &str,
    tls: &crate::tls::ClientOptions,
    timeout: Duration,
) -> anyhow::Result<Endpoint> {
    let url = if url.contains("://") {
        url.to_string()
    } else {
        format!("imap://{url}")
    };
    match fetch::parse_url(&url, tls, timeout) {
        Ok((fetch::MailProto::Imap, ep)) => Ok(ep),
        Ok(_) => usage(format!(
            "--imap '{url}': expected imap://, imap+starttls:// or imaps://"
        )),
        Err(e) => usage(format!("--imap: {e}")),
    }
}

/// The population's users: the first `users` accounts, which must be addresses.
pub fn population_accounts(accounts: &AccountsArgs, users: u32) -> anyhow::Result<Vec<Account>> {
    if users == 0 {
        return usage("--users 0: give at least one user");
    }
    let all: Vec<Account> = accounts
        .credentials("to log in as the population")?
        .into_iter()
        .map(|(user, password)| Account { user, password })
        .collect();
    if (users as usize) > all.len() {
        return usage(format!(
            "--users {users}: only {} accounts were given; a simulated user needs an account of its own",
            all.len()
        ));
    }
    let accounts: Vec<Account> = all.into_iter().take(users as usize).collect();
    if let Some(a) = accounts.iter().find(|a| !a.user.contains('@')) {
        return usage(format!(
            "account '{}': a population's users send mail as themselves, so their logins must be addresses (user@domain)",
            a.user
        ));
    }
    Ok(accounts)
}

/// `spate populate`.
pub async fn run(args: Args, _ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let ready = Profile::load(&args.profile)?.ready()?;
    let accounts = population_accounts(&args.accounts, args.users)?;
    if args.connections == 0 {
        return usage("--connections 0: give at least one");
    }
    let inbox = args.inbox.unwrap_or(ready.profile.store.inbox);
    let archive = args.archive.unwrap_or(ready.profile.store.archive);
    if inbox == 0 && archive == 0 {
        return Err(UsageError(format!(
            "profile {} has no [store] to fill to: give --inbox N and/or --archive N",
            ready.profile.name
        ))
        .into());
    }
    let tls = crate::tls::ClientOptions {
        ca: args.ca.as_ref().map(|p| p.display().to_string()),
        insecure: args.insecure,
        ..Default::default()
    };
    let imap = imap_endpoint(&args.imap, &tls, units::parse_duration(&args.timeout)?)?;
    let job = Arc::new(Job {
        ready,
        accounts,
        imap,
        inbox,
        archive,
        seed: args.seed.unwrap_or_else(rand::random),
        next: AtomicU64::new(0),
        tally: Tally::default(),
        stop: AtomicBool::new(false),
        first_error: std::sync::Mutex::new(None),
    });
    let started = Instant::now();
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..args.connections.min(args.users) {
        let job = job.clone();
        workers.spawn(async move { worker(&job).await });
    }
    let tty = std::io::stderr().is_terminal();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut signals = crate::engine::Signals::new();
    let mut interrupted = false;
    loop {
        tokio::select! {
            done = workers.join_next() => if done.is_none() { break },
            _ = tick.tick() => if tty { progress(&job, started, false) },
            _ = signals.recv(), if !interrupted => {
                interrupted = true;
                job.stop.store(true, Ordering::Relaxed);
            }
        }
    }
    if tty {
        progress(&job, started, true);
    }
    let t = &job.tally;
    let failed = t.failed.load(Ordering::Relaxed);
    println!(
        "populate {}: {} mailboxes to INBOX {inbox} + Archive {archive}: {} filled, {} already full, {} failed; {} messages appended ({}) in {}",
        job.ready.profile.name,
        job.accounts.len(),
        t.mailboxes_done.load(Ordering::Relaxed),
        t.mailboxes_full.load(Ordering::Relaxed),
        failed,
        t.appended.load(Ordering::Relaxed),
        units::fmt_bytes(t.bytes.load(Ordering::Relaxed)),
        units::fmt_duration(started.elapsed()),
    );
    if let Some(e) = job
        .first_error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
    {
        println!("first failure: {e}");
    }
    if interrupted {
        println!("interrupted: run it again to finish (what is there is counted, not added twice)");
        return Ok(ExitCode::from(130));
    }
    Ok(if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn progress(job: &Job, started: Instant, last: bool) {
    let t = &job.tally;
    let done = t.mailboxes_done.load(Ordering::Relaxed)
        + t.mailboxes_full.load(Ordering::Relaxed)
        + t.failed.load(Ordering::Relaxed);
    let n = t.appended.load(Ordering::Relaxed);
    let rate = n as f64 / started.elapsed().as_secs_f64().max(1e-3);
    eprint!(
        "\r  {done}/{} mailboxes, {n} messages ({}), {rate:.0}/s   {}",
        job.accounts.len(),
        units::fmt_bytes(t.bytes.load(Ordering::Relaxed)),
        if last { "\n" } else { "" }
    );
}

async fn worker(job: &Job) {
    loop {
        if job.stop.load(Ordering::Relaxed) {
            return;
        }
        let i = job.next.fetch_add(1, Ordering::Relaxed) as usize;
        if i >= job.accounts.len() {
            return;
        }
        match fill(job, i).await {
            Ok(0) => job.tally.mailboxes_full.fetch_add(1, Ordering::Relaxed),
            Ok(_) => job.tally.mailboxes_done.fetch_add(1, Ordering::Relaxed),
            Err(e) => {
                let mut first = job.first_error.lock().unwrap_or_else(|p| p.into_inner());
                first.get_or_insert_with(|| format!("{}: {e}", job.accounts[i].user));
                job.tally.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

/// Fills user `i`'s mailboxes; the number of messages appended.
async fn fill(job: &Job, i: usize) -> Result<u64, ClientError> {
    let a = &job.accounts[i];
    let ep = &job.imap;
    let mut m = Imap::greet(ep.connect().await?).await?;
    if ep.tls == TlsMode::Starttls {
        m.starttls(ep).await?;
    }
    m.login(&a.user, &a.password).await?;
    let mut rng = SmallRng::seed_from_u64(crate::message::unit_seed(job.seed, i as u64));
    let mut added = 0;
    let mut msg = Vec::new();
    for (mailbox, want) in [("INBOX", job.inbox), ("Archive", job.archive)] {
        if want == 0 {
            continue;
        }
        let have = match m.select(mailbox).await {
            Ok(s) => s.exists,
            Err(ClientError::Server { status: "NO", .. }) if mailbox != "INBOX" => {
                let cmd = crate::proto::imap_client::command::create(mailbox);
                m.command(&cmd, |_| {}).await?;
                0
            }
            Err(e) => return Err(e),
        };
        for k in have..want {
            if job.stop.load(Ordering::Relaxed) {
                break;
            }
            let size = job.ready.size(&mut rng);
            let from = rng.random_range(0..job.accounts.len());
            message(&mut msg, &job.accounts[from].user, &a.user, k, size);
            let seen = rng.random::<f64>() * 100.0 < job.ready.profile.store.seen;
            m.append(
                mailbox,
                if seen { "\\Seen" } else { "" },
                &msg,
                true,
                |_| {},
            )
            .await?;
            added += 1;
            job.tally.appended.fetch_add(1, Ordering::Relaxed);
            job.tally
                .bytes
                .fetch_add(msg.len() as u64, Ordering::Relaxed);
        }
    }
    let _ = m.logout().await;
    Ok(added)
}

/// A message that was there before the day: no tracking header (no run sent it).
fn message(out: &mut Vec<u8>, from: &str, to: &str, k: u32, size: u64) {
    use std::io::Write as _;
    out.clear();
    let _ = write!(
        out,
        "From: <{from}>\r\nTo: <{to}>\r\nSubject: spate populated message {k}\r\nDate: Mon, 7 Dec 2026 09:00:00 +0000\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n"
    );
    crate::session::population::filler(
        out,
        b"an older message, put here by spate populate so the mailbox is not empty\r\n",
        size,
    );
}
