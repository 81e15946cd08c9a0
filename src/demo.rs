//! `spate demo`: the embedded server on free loopback ports, and a canned workload
//! against it — plain injection with a few injected 4xx so the error table is not empty,
//! then submission with STARTTLS and AUTH — with live progress, the summaries, and a
//! reconciliation of spate's counts with the server's own.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::load::{default_out, SmtpArgs};
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

fn base_args(target: String, extra: &[&str]) -> anyhow::Result<SmtpArgs> {
    let mut argv: Vec<String> = [
        target.as_str(),
        "--from=demo@example.test",
        "--to=user{0..99}@example.test",
        "--helo=spate-demo.localhost",
        "--timeout=10s",
        "--quiet",
        "--grace=5s",
        "--seed=42",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    argv.extend(extra.iter().map(|s| s.to_string()));
    crate::load::args_from(argv)
}

pub async fn run(args: Args) -> anyhow::Result<ExitCode> {
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
    println!("spate demo — embedded server on {smtp} (SMTP) and {submission} (submission, STARTTLS + AUTH)");
    println!("             faults injected: 1% of RCPTs get 451, DATA replies delayed 0–2 ms\n");

    let progress = !args.quiet && std::io::stderr().is_terminal();
    let total = Duration::from_secs(args.seconds.max(2));
    let first = total.mul_f64(0.7);
    let second = total - first;

    println!("1/2 SMTP injection: 20 sessions, 10 messages per connection, 1 KiB .. 20 KiB, 1–3 recipients, {}s", first.as_secs());
    let a = base_args(
        smtp.to_string(),
        &[
            "--users=20",
            "--messages-per-connection=10",
            "--size=1k..20k",
            "--rcpt=1..3",
            &format!("--duration={}ms", first.as_millis()),
        ],
    )?;
    let r1 = run_part(a, out.join("1-smtp"), progress).await?;

    println!("2/2 submission: 5 sessions, STARTTLS (certificate verified), AUTH PLAIN, open rate 100/s, {}s", second.as_secs());
    let b = base_args(
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
    )?;
    let r2 = run_part(b, out.join("2-submission"), progress).await?;

    let stats = server.stats.clone();
    server.shutdown().await;
    let ours = r1.totals.accepted + r2.totals.accepted;
    let theirs = stats.messages();
    println!(
        "reconciliation: spate counted {ours} accepted messages, the server {theirs}: {}",
        if ours == theirs {
            "they agree"
        } else {
            "THEY DISAGREE"
        }
    );
    println!("results: {}  (each part has summary.json, intervals.csv, postal.csv, *.hlog, errors.jsonl, sent.log)", out.display());
    Ok(if ours == theirs {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn run_part(
    args: SmtpArgs,
    out: PathBuf,
    progress: bool,
) -> anyhow::Result<crate::results::Summary> {
    let outcome = crate::load::run_and_print(args, out, progress).await?;
    println!();
    Ok(outcome.summary)
}
