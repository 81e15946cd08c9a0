//! The command line: the subcommands and their options (each defined in `cmd/`), the
//! dispatch to them, and the in-process runner that scenario steps and the demo use.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, Parser, Subcommand};

use crate::cmd;
use crate::ctx::{CommandFuture, Ctx, Runner};

#[derive(Debug, Parser)]
#[command(
    name = "spate",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("SPATE_COMMIT"), ")"),
    about = "Load generator and measuring instrument for messaging servers",
    long_about = "spate generates load on mail, chat and request/response servers (SMTP, \
                  LMTP, POP3, IMAP, JMAP, XMPP over TCP or WebSocket, line/length/HTTP \
                  framed requests; closed users or \
                  open arrival rates), times every protocol phase in HDR histograms, \
                  classifies every error, accounts for every unit of work and proves \
                  delivery, and writes a results directory that reports are made from. \
                  `spate demo` shows it all against the embedded server."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

// Parsed once per process: the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inject SMTP or LMTP load and measure every phase.
    Smtp(cmd::smtp::Args),
    /// Load POP3 mailboxes: visits that log in, read and delete messages, log out.
    Pop3(cmd::mailbox::Pop3Args),
    /// Load IMAP mailboxes: visits that log in, SELECT, FETCH, STORE, EXPUNGE, IDLE.
    Imap(cmd::mailbox::ImapArgs),
    /// XMPP sessions that log in and stay logged in; messages between them timed at
    /// every recipient.
    Xmpp(cmd::xmpp::Args),
    /// Load a JMAP mail server (RFC 8620/8621): mail clients' visits to their inbox.
    Jmap(cmd::jmap::Args),
    /// A population of mail users, each following a profile's day (office, mobile,
    /// SPECmail's), judged by the profile's quality of service.
    Population(cmd::population::Args),
    /// How many users of a profile can this server serve at its QoS? Population probes,
    /// doubled then halved, and what ran out first.
    Capacity(cmd::capacity::Args),
    /// Fill every account's mailboxes to a profile's composition (IMAP APPEND), before a
    /// population runs on them.
    Populate(cmd::populate::Args),
    /// Request/response load (line, length-prefixed or HTTP/1.1 framing; TLS with client
    /// identities): each request timed to its complete response, per class.
    Rr(cmd::rr::Args),
    /// Time a few probe messages phase by phase: SMTP (smtpping's job), or an XMPP login
    /// and round trips to oneself.
    Ping(cmd::ping::Args),
    /// Run the embedded server (SMTP, submission, LMTP, POP3, IMAP, JMAP, XMPP over TCP and
    /// WebSocket, request/response) on loopback.
    ///
    /// An open test target that stores mail in memory (or a Maildir), routes chat, answers
    /// requests, offers STARTTLS and AUTH, can inject faults, and counts everything it does. Without a listener flag it
    /// listens for SMTP on 127.0.0.1:2525. Ctrl-C or SIGTERM stops it gracefully and prints
    /// its counters.
    Serve(cmd::serve::Args),
    /// Run one SMTP workload per value of a parameter: table, USL fit, saturation knee.
    Sweep(cmd::sweep::Args),
    /// Start the embedded server and run a canned workload against it: the tour.
    Demo(cmd::demo::Args),
    /// Write the HTML report of a results directory (charts, percentiles, errors).
    Report(cmd::report::Args),
    /// Compare runs side by side: headline numbers, differences, noise, overlaid charts.
    Compare(cmd::compare::Args),
    /// Check that every message of a run was delivered once, intact (reads the mailboxes).
    Verify(cmd::verify::Args),
    /// Merge the results directories of a sharded run (--shard I/N) into one: exact
    /// histograms, counters, intervals on wall-clock seconds, sent logs.
    Merge(cmd::merge::Args),
    /// Run a scenario file: steps in sequence, mixed workloads, hooks, thresholds.
    Run(cmd::run::Args),
    /// Steer a running test started with --web: pause, resume, stop, its rate or its
    /// number of sessions.
    Ctl(cmd::ctl::Args),
    /// Watch the shards of a run (--shard, --web) as one live view, merged exactly as
    /// they run; pause or stop them all.
    Watch(cmd::watch::Args),
    /// Print shell completions (bash, zsh, fish, elvish, powershell).
    Completions(cmd::completions::CompletionsArgs),
    /// Print the manual page (or write one per command into a directory).
    Man(cmd::completions::ManArgs),
}

/// Commands that are not load, checks or reports: no --dump-scenario, not scenario steps.
pub const NOT_STEPS: &[&str] = &["run", "ctl", "watch", "completions", "man", "help"];

/// Every command's options, as clap defines them (scenario files are checked against it).
/// Every command but `run` also lists `--dump-scenario`, which [`main`] handles before
/// parsing (scenario::dump).
pub fn commands() -> clap::Command {
    let dump = clap::Arg::new("dump_scenario")
        .long("dump-scenario")
        .action(clap::ArgAction::SetTrue)
        .help(
            "Print the scenario file (TOML) equivalent to this command line instead of \
             running it; `spate run FILE` runs it",
        );
    let mut cli = Cli::command();
    let names: Vec<String> = cli
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|n| !NOT_STEPS.contains(&n.as_str()))
        .collect();
    for name in names {
        cli = cli.mut_subcommand(name, |c| c.arg(dump.clone()));
    }
    cli
}

/// Parses a command line against [`commands`] (so that `--help` shows what it defines).
pub fn parse<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    use clap::FromArgMatches as _;
    let m = commands().try_get_matches_from(args)?;
    Cli::from_arg_matches(&m)
}

/// Runs one parsed command line.
pub async fn dispatch(cli: Cli, ctx: Ctx) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Smtp(args) => cmd::smtp::run(args, &ctx).await,
        Command::Pop3(args) => {
            cmd::mailbox::run(cmd::mailbox::Protocol::Pop3, args.into(), &ctx).await
        }
        Command::Imap(args) => {
            cmd::mailbox::run(cmd::mailbox::Protocol::Imap, args.into(), &ctx).await
        }
        Command::Xmpp(args) => cmd::xmpp::run(args, &ctx).await,
        Command::Jmap(args) => cmd::jmap::run(args, &ctx).await,
        Command::Population(args) => cmd::population::run(args, &ctx).await,
        Command::Capacity(args) => cmd::capacity::run(args, &ctx).await,
        Command::Populate(args) => cmd::populate::run(args, &ctx).await,
        Command::Rr(args) => cmd::rr::run(args, &ctx).await,
        Command::Ping(args) => cmd::ping::run(args, &ctx).await,
        Command::Serve(args) => cmd::serve::run(args, &ctx).await,
        Command::Sweep(args) => cmd::sweep::run(args, &ctx).await,
        Command::Demo(args) => cmd::demo::run(args, &ctx).await,
        Command::Report(args) => cmd::report::run(args, &ctx),
        Command::Compare(args) => cmd::compare::run(args, &ctx),
        Command::Verify(args) => cmd::verify::run(args, &ctx).await,
        Command::Merge(args) => cmd::merge::run(args, &ctx),
        Command::Run(args) => cmd::run::run(args, &ctx).await,
        Command::Ctl(args) => cmd::ctl::run(args, &ctx),
        Command::Watch(args) => cmd::watch::run(args, &ctx).await,
        Command::Completions(args) => cmd::completions::completions(args, &ctx),
        Command::Man(args) => cmd::completions::man(args, &ctx),
    }
}

/// A command-line error in one line; an option given to the wrong command names the
/// commands that have it (`--top` is spate pop3's, not spate imap's).
fn parse_error(e: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let line = crate::scenario::doc::clap_line(e);
    let arg = match (e.kind(), e.get(ContextKind::InvalidArg)) {
        (ErrorKind::UnknownArgument, Some(ContextValue::String(a))) => a.clone(),
        _ => return line,
    };
    let long = arg.trim_start_matches('-');
    let long = long.split('=').next().unwrap_or(long);
    let owners: Vec<String> = commands()
        .get_subcommands()
        .filter(|c| c.get_arguments().any(|a| a.get_long() == Some(long)))
        .map(|c| format!("spate {}", c.get_name()))
        .collect();
    if owners.is_empty() || !arg.starts_with("--") {
        format!("{line} (--help lists the options)")
    } else {
        format!("{line}: it is an option of {}", owners.join(", "))
    }
}

/// Runs command lines in-process through [`dispatch`].
struct InProcess;

impl Runner for InProcess {
    fn run(&self, argv: Vec<String>) -> CommandFuture {
        Box::pin(async move {
            let cli =
                parse(&argv).map_err(|e| crate::UsageError(crate::scenario::doc::clap_line(&e)))?;
            dispatch(cli, context(argv)).await
        })
    }
}

/// The context of a command whose command line is `argv`.
pub fn context(argv: Vec<String>) -> Ctx {
    Ctx {
        command_line: argv,
        runner: Arc::new(InProcess),
        commands,
    }
}

/// Exit codes: 0 success, 1 the run failed (server unreachable, messages missing, ...),
/// 99 only thresholds broke, 2 the user's input was wrong.
pub fn main<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    if let Some(code) = crate::scenario::dump::intercept(&args, commands) {
        return code;
    }
    let cli = match parse(&args) {
        Ok(cli) => cli,
        Err(e) if e.use_stderr() => {
            eprintln!("spate: {}", parse_error(&e));
            return ExitCode::from(2);
        }
        Err(e) => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    // Commands that time replies turn the kernel's receive stamps on now, so that they
    // are on by the first connection (a server has no use for them: every packet the
    // machine receives is stamped while they are on).
    if matches!(
        cli.command,
        Command::Smtp(_)
            | Command::Pop3(_)
            | Command::Imap(_)
            | Command::Xmpp(_)
            | Command::Jmap(_)
            | Command::Population(_)
            | Command::Capacity(_)
            | Command::Rr(_)
            | Command::Ping(_)
            | Command::Sweep(_)
            | Command::Demo(_)
            | Command::Run(_)
    ) {
        crate::transport::keep_receive_stamps_on();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("spate: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let argv = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    match runtime.block_on(dispatch(cli, context(argv))) {
        Ok(code) => code,
        Err(e) => {
            let (code, line) = crate::error::report(&e);
            eprintln!("spate: {line}");
            ExitCode::from(code)
        }
    }
}
