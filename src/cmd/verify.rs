//! `spate verify`: was every message of a run delivered once, intact?

use std::path::PathBuf;
use std::process::ExitCode;

use crate::ctx::Ctx;
use crate::verify::{
    exit_code, parse_wait, rules_of, run_blocking, Common, Job, Ledger, Reader, RemoteOptions,
    Source,
};

#[derive(Debug, Clone, clap::Args)]
#[command(after_long_help = concat!(
    "SOURCES:\n  \
    maildir:ROOT (or --maildir ROOT)  ROOT/<address>/{new,cur}, as `spate serve --maildir`\n                                    \
    and Dovecot write them; file times give arrival times\n  \
    imap://HOST:PORT, imaps://, imap+starttls://, pop3://, pop3s://, pop3+stls://\n                                    \
    every address of the sent log is logged into (passwords from --users-file,\n                                    \
    or SPATE_PASSWORD for all) and its INBOX read whole; nothing is deleted\n  \
    jmap://HOST:PORT[/PATH], jmaps://   the same over JMAP (PATH: the session resource,\n                                    \
    /.well-known/jmap by default; HTTP Basic); arrival times: receivedAt\n\n\
    OUTPUT: a report on stdout; verify.json, deliveries.csv (t_s,time,injected,delivered per\n\
    second), delivery.hlog (latency HdrHistogram log, µs), missing.tsv and duplicates.tsv\n\
    (seq, recipient, copies, likely cause) in the results directory (or --out).\n\n\
    EXIT STATUS: 0 every expected delivery present once and intact and every rule met;\n\
    1 anything missing, duplicated or corrupted, a rule unmet, or an error; 2 bad usage.\n\
    Foreign messages (not from this run) are counted but do not fail the check.\n\n\
    EXAMPLES:\n  \
    spate serve --maildir /tmp/mail &  spate smtp 127.0.0.1:2525 -n 1000 -o run1\n  \
    spate verify run1 --maildir /tmp/mail\n  \
    spate verify run1 --maildir \"$SPATE_MAILDIR_ROOT\" --wait 5m --rules bounces.rules\n  \
    spate smtp 127.0.0.1:2525 -n 1000 -o run2 --verify maildir:/tmp/mail --verify-wait 30s\n\n"
))]
pub struct Args {
    /// Results directory of a `spate smtp` run (its sent.log is what is expected).
    pub dir: PathBuf,
    /// Where to read the mailboxes: maildir:ROOT, imap://HOST:PORT, pop3://HOST:PORT or
    /// jmap://HOST:PORT.
    #[arg(long, conflicts_with = "maildir", required_unless_present = "maildir")]
    pub source: Option<String>,
    /// Shorthand for --source maildir:ROOT.
    #[arg(long, value_name = "ROOT")]
    pub maildir: Option<PathBuf>,
    #[command(flatten)]
    pub common: Common,
    #[command(flatten)]
    pub remote: RemoteOptions,
    /// Write verify.json, deliveries.csv, delivery.hlog, missing.tsv, duplicates.tsv here
    /// instead of DIR.
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// The MTA's queue directory (Postfix's queue_directory): a delivery not found whose
    /// message is still queued there is counted as `still queued`, not missing (lost).
    #[arg(long, value_name = "DIR")]
    pub queue: Option<PathBuf>,
}

/// `spate verify`.
pub async fn run(args: Args, _ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let source = match (&args.source, &args.maildir) {
        (Some(s), _) => Source::parse(s)?,
        (None, Some(root)) => Source::Maildir(root.clone()),
        (None, None) => return crate::usage("give --maildir ROOT or --source SOURCE"),
    };
    if !args.dir.is_dir() {
        return crate::usage(format!("{}: no such directory", args.dir.display()));
    }
    if !args.dir.join("sent.log").is_file() {
        return crate::usage(format!(
            "{}: not the results of a spate smtp run (no sent.log)",
            args.dir.display()
        ));
    }
    let rules = rules_of(args.common.rules.as_deref())?;
    let mut job = Job {
        out: args.out.clone().unwrap_or_else(|| args.dir.clone()),
        dir: args.dir.clone(),
        reader: Reader::new(&source, &args.remote)?,
        source,
        wait: parse_wait(args.common.wait.as_deref())?,
        show: args.common.show,
        progress: true,
        queue: args.queue.clone(),
        cut: None,
    };
    // Ctrl-C or SIGTERM during --wait: the wait ends, what was found is written.
    let (cut, listener) = crate::verify::cut_on_signal();
    job.cut = Some(cut);
    let report = tokio::task::spawn_blocking(move || {
        let mut ledger = Ledger::new(rules);
        run_blocking(&mut job, &mut ledger)
    })
    .await;
    listener.abort();
    Ok(exit_code(&report??))
}
