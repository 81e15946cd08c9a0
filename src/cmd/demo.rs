//! `spate demo`: the embedded server on free loopback ports, and a canned workload
//! against it — plain injection with a few injected 4xx so the error table is not empty,
//! then submission with STARTTLS and AUTH, then a delivery check of every accepted message
//! over IMAP and mailbox load over POP3/IMAP, then chat over XMPP (messages, XEP-0033
//! multicasts and presence changes at once, each copy timed at its recipient) — with live
//! progress, the summaries, a reconciliation of spate's counts with the server's own, and
//! the HTML reports.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use crate::ctx::Ctx;
use crate::results::Summary;
use crate::serve::{self, faults, store::Users, Addrs};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds of load in all (split between the two parts; at least 2).
    #[arg(long, default_value_t = 20, allow_hyphen_values = true,
          value_parser = clap::value_parser!(u64).range(2..))]
    pub seconds: u64,
    /// Where to put the results (default: ./spate-results/<timestamp>-demo).
    #[arg(long, short = 'o')]
    pub out: Option<PathBuf>,
    /// Write into --out even when it holds an earlier run (its files are replaced).
    #[arg(long)]
    pub overwrite: bool,
    /// No live progress.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

/// `spate smtp` against `target` with the demo's common options and `extra`, as an
/// in-process command line (recorded in its results as its own), into `out`; its
/// summary, and whether its inline delivery check passed.
async fn smtp_part(
    ctx: &Ctx,
    target: String,
    extra: &[&str],
    out: &Path,
    progress: bool,
) -> anyhow::Result<(Summary, bool)> {
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
    // 1: the delivery check found something missing (the summary is there); else a
    // failure of the part itself.
    if code != ExitCode::SUCCESS && code != ExitCode::from(1) {
        anyhow::bail!("the part in {} failed", out.display());
    }
    println!();
    Ok((Summary::read(out)?, code == ExitCode::SUCCESS))
}

/// The demo's server and files, shared by its parts.
struct Tour<'a> {
    ctx: &'a Ctx,
    out: PathBuf,
    users_path: PathBuf,
    ca_path: PathBuf,
    server: serve::Running,
    progress: bool,
}

/// The embedded server on free loopback ports with 100 accounts and a few faults.
async fn start_server(users: &str) -> anyhow::Result<serve::Running> {
    let mut config = serve::Config::loopback();
    let lo = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    config.listen = Addrs {
        smtp: Some(lo),
        submission: Some(lo),
        pop3s: Some(lo),
        imaps: Some(lo),
        xmpp: Some(lo),
        xmpp_wss: Some(lo),
        ..Addrs::default()
    };
    config.users = Users::parse(users).map_err(anyhow::Error::msg)?;
    config
        .faults
        .fails
        .push(faults::parse_fail("rcpt:451:0.01")?);
    config
        .faults
        .delays
        .push(faults::parse_delay("data:0ms..2ms")?);
    config.faults.seed = Some(7);
    serve::start_apart(config).await
}

/// `spate demo`.
pub async fn run(args: Args, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal;
    let out = crate::opts::output::results_dir(args.out.as_deref(), args.overwrite, "demo")?;
    let users: String = (0..100)
        .map(|i| format!("user{i}@example.test demo-pass-{i}\n"))
        .collect();
    let users_path = out.join("users.txt");
    std::fs::write(&users_path, &users)?;
    let server = start_server(&users).await?;
    let ca_path = out.join("server-ca.pem");
    std::fs::write(&ca_path, &server.cert_pem)?;
    let a = &server.addrs;
    let (smtp, submission) = (
        a.smtp.expect("configured"),
        a.submission.expect("configured"),
    );
    let (pop3s, imaps) = (a.pop3s.expect("configured"), a.imaps.expect("configured"));
    let (xmpp, wss) = (a.xmpp.expect("configured"), a.xmpp_wss.expect("configured"));
    println!("spate demo — embedded server on {smtp} (SMTP), {submission} (submission, STARTTLS + AUTH),");
    println!("             {pop3s} (POP3S), {imaps} (IMAPS), {xmpp} (XMPP, STARTTLS), wss://{wss}/ (XMPP over WebSocket)");
    println!("             faults injected: 1% of RCPTs get 451, DATA replies delayed 0–2 ms\n");
    let tour = Tour {
        ctx,
        out,
        users_path,
        ca_path,
        server,
        progress: !args.quiet && std::io::stderr().is_terminal(),
    };
    let total = Duration::from_secs(args.seconds.max(2));
    let (ours, delivered) = tour.inject(total).await?;
    // Counted before anyone reads (and deletes from) the mailboxes.
    let theirs = tour.server.stats.messages();
    tour.deliveries();
    let retrieved = tour.mailboxes(total.mul_f64(0.15)).await?;
    let (chat_ok, chat_ours) = tour.chat(total.mul_f64(0.1)).await?;
    // Every copy the server queued to a session is in (the sessions have closed).
    let chat_theirs = tour.server.stats.xmpp().message_deliveries;
    let out = tour.out.clone();
    tour.server.shutdown().await;
    let agree = |a: u64, b: u64| {
        if a == b {
            "they agree"
        } else {
            "THEY DISAGREE"
        }
    };
    println!(
        "reconciliation: spate counted {ours} accepted messages, the server {theirs}: {}",
        agree(ours, theirs)
    );
    println!(
        "                chat: spate received {chat_ours} message copies (one-to-one and multicast), the server delivered {chat_theirs}: {}",
        agree(chat_ours, chat_theirs)
    );
    println!("results: {}  (each part has summary.json, intervals.csv, *.hlog, errors.jsonl; the injections sent.log and verify.json)", out.display());
    println!(
        "reports: {}/{{1-smtp,2-submission,4-mailbox,5-chat}}/report.html — open in a browser, no network needed",
        out.display()
    );
    Ok(
        if ours == theirs && delivered && retrieved && chat_ok && chat_ours == chat_theirs {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}

impl Tour<'_> {
    /// Parts 1 and 2: plain injection, then submission, each followed into the mailboxes
    /// over IMAP IDLE while it runs (real delivery latency) and checked at its end; the
    /// messages spate counted, and whether every one arrived intact.
    async fn inject(&self, total: Duration) -> anyhow::Result<(u64, bool)> {
        let first = total.mul_f64(0.55);
        let second = total.mul_f64(0.2);
        let addrs = &self.server.addrs;
        let verify = [
            format!("--verify=imaps://{}", addrs.imaps.expect("configured")),
            format!("--verify-users-file={}", self.users_path.display()),
            format!("--ca={}", self.ca_path.display()),
            "--verify-wait=10s".to_string(),
        ];
        let verify: Vec<&str> = verify.iter().map(String::as_str).collect();
        println!("1/5 SMTP injection: 20 sessions, 10 messages per connection, 1 KiB .. 10 KiB, 1–3 recipients, {}s", first.as_secs());
        let (r1, ok1) = smtp_part(
            self.ctx,
            addrs.smtp.expect("configured").to_string(),
            &[
                &[
                    "--users=20",
                    "--messages-per-connection=10",
                    "--size=1k..10k",
                    "--rcpt=1..3",
                    &format!("--duration={}ms", first.as_millis()),
                ][..],
                &verify,
            ]
            .concat(),
            &self.out.join("1-smtp"),
            self.progress,
        )
        .await?;
        println!("2/5 submission: 5 sessions, STARTTLS (certificate verified), AUTH PLAIN, open rate 100/s, {}s", second.as_secs());
        let (r2, ok2) = smtp_part(
            self.ctx,
            addrs.submission.expect("configured").to_string(),
            &[
                &[
                    "--rate=100/s",
                    &format!("--duration={}ms", second.as_millis()),
                    "--starttls",
                    &format!("--users-file={}", self.users_path.display()),
                    "--max-in-flight=5",
                    "--messages-per-connection=20",
                ][..],
                &verify,
            ]
            .concat(),
            &self.out.join("2-submission"),
            self.progress,
        )
        .await?;
        Ok((r1.totals.accepted + r2.totals.accepted, ok1 && ok2))
    }

    /// Part 3: what the delivery checks of parts 1 and 2 found.
    fn deliveries(&self) {
        println!("3/5 delivery: every accepted message followed into its mailbox over IMAPS IDLE while it ran (certificate verified), digest compared");
        for part in ["1-smtp", "2-submission"] {
            let v: serde_json::Value =
                std::fs::read_to_string(self.out.join(part).join("verify.json"))
                    .ok()
                    .and_then(|t| serde_json::from_str(&t).ok())
                    .unwrap_or_default();
            let l = &v["latency"];
            let latency = match l["p50_us"].as_f64() {
                Some(p50) if l["measurable"] == true && l["count"].as_u64() > Some(0) => format!(
                    "delivery latency p50 {:.1} ms, p99 {:.1} ms",
                    p50 / 1000.0,
                    l["p99_us"].as_f64().unwrap_or(0.0) / 1000.0
                ),
                _ => "delivery latency not measurable".into(),
            };
            println!(
                "    {part:<13} {} of {} delivered, {} missing, {} corrupted; {latency}",
                v["delivered"], v["expected"], v["missing"], v["corrupted"]
            );
        }
        println!();
    }

    /// Part 4: mailbox load over POP3S and IMAPS.
    async fn mailboxes(&self, length: Duration) -> anyhow::Result<bool> {
        println!("4/5 mailbox load: 5 sessions over POP3S (70 %) and IMAPS (30 %), 5 messages a visit, half read whole, {}s", length.as_secs());
        let addrs = &self.server.addrs;
        let dir = self.out.join("4-mailbox");
        let argv = [
            "pop3".to_string(),
            addrs.pop3s.expect("configured").to_string(),
            "--imap-percent=30".into(),
            format!("--imap-target={}", addrs.imaps.expect("configured")),
            "--tls".into(),
            "--ca".into(),
            self.ca_path.display().to_string(),
            "--users-file".into(),
            self.users_path.display().to_string(),
            "--users=5".into(),
            "--messages-per-connection=5".into(),
            "--download=50".into(),
            format!("--duration={}ms", length.as_millis()),
            "--quiet".into(),
            "--out".into(),
            dir.display().to_string(),
        ];
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let retrieved = spate(self.ctx, &argv).await? == ExitCode::SUCCESS;
        if let Err(e) = crate::report::write_report(&dir) {
            eprintln!("spate: warning: no HTML report: {e:#}");
        }
        println!();
        Ok(retrieved)
    }
}

impl Tour<'_> {
    /// Part 5: chat. 50 sessions log in with SCRAM and stay, half over TCP with
    /// STARTTLS, half over WebSocket with TLS (wss://, RFC 7395); one-to-one
    /// messages, multicasts and presence changes go at once, every copy timed at its
    /// recipient. Whether nothing was missing, and the message copies spate received.
    async fn chat(&self, length: Duration) -> anyhow::Result<(bool, u64)> {
        let length = length.max(Duration::from_secs(2));
        println!("5/5 chat: 50 XMPP sessions (SCRAM-SHA-256, roster; half over STARTTLS, half over WebSocket wss://), at once: messages 100/s, multicasts to 10 sessions 5/s, a presence change from each session every 10s; {}s", length.as_secs());
        let dir = self.out.join("5-chat");
        let argv = [
            "xmpp".to_string(),
            self.server.addrs.xmpp.expect("configured").to_string(),
            "--starttls".into(),
            format!(
                "--websocket=wss://{}/xmpp-websocket",
                self.server.addrs.xmpp_wss.expect("configured")
            ),
            "--websocket-percent=50".into(),
            "--ca".into(),
            self.ca_path.display().to_string(),
            "--users-file".into(),
            self.users_path.display().to_string(),
            "--users=50".into(),
            "--login-rate=200/s".into(),
            "--roster".into(),
            "--message-rate=100/s".into(),
            "--multicast-rate=5/s".into(),
            "--addresses=10".into(),
            "--presence-every=10s".into(),
            format!("--duration={}ms", length.as_millis()),
            "--wait=5s".into(),
            "--seed=42".into(),
            "--quiet".into(),
            "--out".into(),
            dir.display().to_string(),
        ];
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let ok = spate(self.ctx, &argv).await? == ExitCode::SUCCESS;
        let s = Summary::read(&dir)?;
        let x = s.extra.get("xmpp").cloned().unwrap_or_default();
        let copies = ["message", "multicast"]
            .iter()
            .map(|k| x[*k]["delivered"].as_u64().unwrap_or(0))
            .sum();
        if let Err(e) = crate::report::write_report(&dir) {
            eprintln!("spate: warning: no HTML report: {e:#}");
        }
        println!();
        Ok((ok, copies))
    }
}

/// Runs another spate command in-process, as if typed: `spate ARGS...`.
async fn spate(ctx: &Ctx, args: &[&str]) -> anyhow::Result<ExitCode> {
    let argv = std::iter::once("spate").chain(args.iter().copied());
    ctx.run(argv.map(String::from).collect()).await
}
