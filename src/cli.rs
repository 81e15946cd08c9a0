//! Command-line parsing: each subcommand's options, then a dispatch to the library.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "spate",
    version,
    about = "Load generator and measuring instrument for mail servers",
    long_about = "spate generates SMTP/LMTP load (closed users or open arrival rates), times \
                  every protocol phase in HDR histograms, classifies every error, records \
                  every accepted message, and writes a results directory that reports are \
                  made from. `spate demo` shows it all against the embedded server."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    // Declared for --help only: main_with_args handles it before parsing (scenario::dump).
    /// Print the scenario file (TOML) equivalent to this command line instead of running
    /// it; `spate run FILE` runs it.
    #[arg(long, global = true)]
    pub dump_scenario: bool,
}

// Parsed once per process: the size difference between variants does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inject SMTP or LMTP load and measure every phase.
    Smtp(crate::load::SmtpArgs),
    /// Load POP3 mailboxes: visits that log in, read and delete messages, log out.
    Pop3(crate::retrieve::load::RetrieveArgs),
    /// Load IMAP mailboxes: visits that log in, SELECT, FETCH, STORE, EXPUNGE, IDLE.
    Imap(crate::retrieve::load::RetrieveArgs),
    /// Send a few probe messages and time every phase of each (smtpping's job).
    Ping(crate::ping::PingArgs),
    /// Run the embedded mail server (SMTP, submission, LMTP, POP3, IMAP) on loopback.
    ///
    /// An open test target that stores mail in memory (or a Maildir), offers STARTTLS and
    /// AUTH, can inject faults, and counts everything it does. Without a listener flag it
    /// listens for SMTP on 127.0.0.1:2525. Ctrl-C or SIGTERM stops it gracefully and prints
    /// its counters.
    Serve(crate::serve::Args),
    /// Run one SMTP workload per value of a parameter: table, USL fit, saturation knee.
    Sweep(crate::sweep::SweepArgs),
    /// Start the embedded server and run a canned workload against it: the tour.
    Demo(crate::demo::Args),
    /// Write the HTML report of a results directory (charts, percentiles, errors).
    Report(crate::report::cmd::ReportArgs),
    /// Compare runs side by side: headline numbers, differences, noise, overlaid charts.
    Compare(crate::report::cmd::CompareArgs),
    /// Check that every message of a run was delivered once, intact (reads the mailboxes).
    Verify(crate::verify::VerifyArgs),
    /// Run a scenario file: steps in sequence, mixed workloads, hooks, thresholds.
    Run(crate::scenario::RunArgs),
}

pub async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Smtp(args) => crate::load::main(args).await,
        Command::Pop3(args) => {
            crate::retrieve::load::main(crate::retrieve::MailProto::Pop3, args).await
        }
        Command::Imap(args) => {
            crate::retrieve::load::main(crate::retrieve::MailProto::Imap, args).await
        }
        Command::Ping(args) => crate::ping::main(args).await,
        Command::Serve(args) => crate::serve::run(args).await,
        Command::Sweep(args) => crate::sweep::main(args).await,
        Command::Demo(args) => crate::demo::run(args).await,
        Command::Report(args) => crate::report::cmd::report_main(args),
        Command::Compare(args) => crate::report::cmd::compare_main(args),
        Command::Verify(args) => crate::verify::main(args).await,
        Command::Run(args) => crate::scenario::main(args).await,
    }
}

/// `dispatch` behind a named future type: `spate run` calls it for its steps, and the
/// recursion needs a type that is not defined in terms of itself.
pub fn dispatch_boxed(
    cli: Cli,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = anyhow::Result<ExitCode>> + Send>> {
    Box::pin(dispatch(cli))
}

/// Runs a spate command line in-process, as if typed (`argv[0]` is the program name): how
/// scenario steps and the demo's later parts run other commands. The command line is
/// recorded as the run's own in its plan and summary. A bad command line is a usage error
/// in one line.
pub async fn run_argv(argv: Vec<String>) -> anyhow::Result<ExitCode> {
    let cli = <Cli as clap::Parser>::try_parse_from(&argv)
        .map_err(|e| crate::UsageError(crate::scenario::doc::clap_line(&e)))?;
    crate::scenario::with_command_line(argv, dispatch_boxed(cli)).await
}
