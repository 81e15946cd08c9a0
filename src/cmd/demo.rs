//! `spate demo`: the embedded server on free loopback ports, and a canned workload
//! against it — plain injection with a few injected 4xx so the error table is not empty,
//! then submission with STARTTLS and AUTH, then a delivery check of every accepted message
//! over IMAP and mailbox load over POP3/IMAP — with live progress, the summaries, a
//! reconciliation of spate's counts with the server's own, and the HTML reports.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::ctx::Ctx;
use crate::opts::output::default_out;
use crate::results::Summary;
use crate::serve::{self, faults, store::Users, Addrs};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds of load in all (split between the two parts).
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// Where to put the results (default: ./spate-results/<timestamp>-demo).
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// No live progress.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// `spate smtp` against `target` with the demo's common options and `extra`, as an
/// in-process command line (recorded in its results as its own), into `out`.
async fn smtp_part(
    ctx: &Ctx,
    target: String,
    extra: &[&str],
    out: &Path,
    progress: bool,
) -> anyhow::Result<Summary> {
    let mut argv: Vec<String> = [
        "spate",
        "smtp",
        target.as_str(),
        "--from=demo@example.test",
        "--to=user{0..99}@example.test",
        "--helo=spate-demo.localhost",
        "--timeout=10s",
        if progress { "--progress" } else { "--quiet" },
        "--grace=5s",
        "--seed=42",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    argv.extend(extra.iter().map(|s| s.to_string()));
    argv.push(format!("--out={}", out.display()));
    let code = ctx.run(argv).await?;
    if code != ExitCode::SUCCESS {
        anyhow::bail!("the part in {} failed", out.display());
    }
    println!();
    Summary::read(out)
}

/// `spate demo`.
pub async fn run(args: Args, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal;
    let out = args.out.unwrap_or_else(|| default_out("demo"));
    std::fs::create_dir_all(&out)?;
    let users: String = (0..100)
        .map(|i| format!("user{i}@example.test demo-pass-{i}\n"))
        .collect();
    let users_path = out.join("users.txt");
    std::fs::write(&users_path, &users)?;

    let mut config = serve::Config::loopback();
    let lo = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    config.listen = Addrs {
        smtp: Some(lo),
        submission: Some(lo),
        pop3s: Some(lo),
        imaps: Some(lo),
        ..Addrs::default()
    };
    config.users = Users::parse(&users).map_err(anyhow::Error::msg)?;
    config
        .faults
        .fails
        .push(faults::parse_fail("rcpt:451:0.01")?);
    config
        .faults
        .delays
        .push(faults::parse_delay("data:0ms..2ms")?);
    config.faults.seed = Some(7);
    let server = serve::start(config).await?;
    let ca_path = out.join("server-ca.pem");
    std::fs::write(&ca_path, &server.cert_pem)?;
    let smtp = server.addrs.smtp.expect("configured");
    let submission = server.addrs.submission.expect("configured");
    let pop3s = server.addrs.pop3s.expect("configured");
    let imaps = server.addrs.imaps.expect("configured");
    println!("spate demo — embedded server on {smtp} (SMTP), {submission} (submission, STARTTLS + AUTH),");
    println!("             {pop3s} (POP3S), {imaps} (IMAPS)");
    println!("             faults injected: 1% of RCPTs get 451, DATA replies delayed 0–2 ms\n");

    let progress = !args.quiet && std::io::stderr().is_terminal();
    let total = Duration::from_secs(args.seconds.max(2));
    let first = total.mul_f64(0.55);
    let second = total.mul_f64(0.2);
    let fourth = total.mul_f64(0.15);

    println!("1/4 SMTP injection: 20 sessions, 10 messages per connection, 1 KiB .. 10 KiB, 1–3 recipients, {}s", first.as_secs());
    let r1 = smtp_part(
        ctx,
        smtp.to_string(),
        &[
            "--users=20",
            "--messages-per-connection=10",
            "--size=1k..10k",
            "--rcpt=1..3",
            &format!("--duration={}ms", first.as_millis()),
        ],
        &out.join("1-smtp"),
        progress,
    )
    .await?;

    println!("2/4 submission: 5 sessions, STARTTLS (certificate verified), AUTH PLAIN, open rate 100/s, {}s", second.as_secs());
    let r2 = smtp_part(
        ctx,
        submission.to_string(),
        &[
            "--rate=100/s",
            &format!("--duration={}ms", second.as_millis()),
            "--starttls",
            &format!("--ca={}", ca_path.display()),
            &format!("--auth-file={}", users_path.display()),
            "--max-in-flight=5",
            "--messages-per-connection=20",
        ],
        &out.join("2-submission"),
        progress,
    )
    .await?;

    // Counted before anyone reads (and deletes from) the mailboxes.
    let ours = r1.totals.accepted + r2.totals.accepted;
    let theirs = server.stats.messages();

    println!("3/4 delivery check: every accepted message read back over IMAPS (certificate verified), digest compared");
    let users_arg = users_path.display().to_string();
    let ca_arg = ca_path.display().to_string();
    let source = format!("imaps://{imaps}");
    let mut delivered = true;
    for part in ["1-smtp", "2-submission"] {
        let dir = out.join(part).display().to_string();
        let code = spate(
            ctx,
            &[
                "verify",
                &dir,
                "--source",
                &source,
                "--users-file",
                &users_arg,
                "--ca",
                &ca_arg,
            ],
        )
        .await?;
        delivered &= code == ExitCode::SUCCESS;
        // The report now has the delivery section too.
        if let Err(e) = crate::report::write_report(&out.join(part)) {
            eprintln!("spate: warning: no HTML report: {e:#}");
        }
    }
    println!();

    println!("4/4 mailbox load: 5 sessions over POP3S (70 %) and IMAPS (30 %), 5 messages a visit, half read whole, {}s", fourth.as_secs());
    let pop3_out = out.join("4-mailbox").display().to_string();
    let code = spate(
        ctx,
        &[
            "pop3",
            &pop3s.to_string(),
            "--imap-percent=30",
            &format!("--imap-target={imaps}"),
            "--tls",
            "--ca",
            &ca_arg,
            "--users-file",
            &users_arg,
            "--users=5",
            "--messages-per-connection=5",
            "--download=50",
            &format!("--duration={}ms", fourth.as_millis()),
            "--quiet",
            "--out",
            &pop3_out,
        ],
    )
    .await?;
    let retrieved = code == ExitCode::SUCCESS;
    if let Err(e) = crate::report::write_report(&out.join("4-mailbox")) {
        eprintln!("spate: warning: no HTML report: {e:#}");
    }
    println!();

    server.shutdown().await;
    println!(
        "reconciliation: spate counted {ours} accepted messages, the server {theirs}: {}",
        if ours == theirs {
            "they agree"
        } else {
            "THEY DISAGREE"
        }
    );
    println!("results: {}  (each part has summary.json, intervals.csv, *.hlog, errors.jsonl; the injections sent.log and verify.json)", out.display());
    println!(
        "reports: {}/{{1-smtp,2-submission,4-mailbox}}/report.html — open in a browser, no network needed",
        out.display()
    );
    Ok(if ours == theirs && delivered && retrieved {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Runs another spate command in-process, as if typed: `spate ARGS...`.
async fn spate(ctx: &Ctx, args: &[&str]) -> anyhow::Result<ExitCode> {
    let argv = std::iter::once("spate").chain(args.iter().copied());
    ctx.run(argv.map(String::from).collect()).await
}
