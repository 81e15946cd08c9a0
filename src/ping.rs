//! `spate ping`: smtpping's job — a few messages, one after another, each phase timed and
//! printed as it happens, then min/avg/max and percentiles per phase.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::load::prepare;
use crate::metrics::{new_histogram, Phase};
use crate::session::smtp::Session;
use crate::units::{self, fmt_duration};

#[derive(Debug, Clone, clap::Args)]
#[command(after_long_help = "EXAMPLES:\n  \
    spate ping smtp://127.0.0.1:2525 --to user@example.test -c 10 -w 0\n  \
    spate ping 127.0.0.1:587 --starttls --ca ca.pem --to me@example.test")]
pub struct PingArgs {
    /// Server, smtp://HOST[:PORT] or HOST[:PORT].
    pub target: String,
    /// Recipient of the probe messages.
    #[arg(long, short = 't', default_value = "postmaster@example.test")]
    pub to: String,
    /// Sender (smtpping's default is the null sender; ours is a real address).
    #[arg(long, short = 'f', default_value = "spate-ping@example.test")]
    pub from: String,
    /// Number of messages.
    #[arg(short = 'c', long = "count", default_value_t = 10)]
    pub count: u32,
    /// Wait between messages (smtpping -w, in ms when a bare number).
    #[arg(short = 'w', long = "wait", default_value = "1s")]
    pub wait: String,
    /// Message body size (smtpping's default is 10 KiB).
    #[arg(long, short = 's', default_value = "10k")]
    pub size: String,
    /// Use PIPELINING (off by default so every command has its own time, as in smtpping).
    #[arg(long)]
    pub pipelining: bool,
    #[arg(long)]
    pub lmtp: bool,
    #[arg(long, conflicts_with = "tls")]
    pub starttls: bool,
    #[arg(long)]
    pub tls: bool,
    #[arg(long)]
    pub ca: Option<String>,
    #[arg(long)]
    pub insecure: bool,
    /// Authenticate as USER, password from SPATE_PASSWORD.
    #[arg(long)]
    pub auth_user: Option<String>,
    #[arg(long, default_value = "10s")]
    pub timeout: String,
    /// Also write the statistics as JSON to FILE (per phase and total, in ms; `spate
    /// sweep` puts a step directory's ping.json into its table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<std::path::PathBuf>,
}

const COLUMNS: &[(Phase, &str)] = &[
    (Phase::Connect, "connect"),
    (Phase::Tls, "tls"),
    (Phase::Banner, "banner"),
    (Phase::Ehlo, "helo"),
    (Phase::Auth, "auth"),
    (Phase::Mail, "mailfrom"),
    (Phase::Rcpt, "rcptto"),
    (Phase::Data, "data"),
    (Phase::Envelope, "envelope"),
    (Phase::Body, "datasent"),
    (Phase::Quit, "quit"),
];

pub async fn main(a: PingArgs) -> anyhow::Result<ExitCode> {
    let wait = if a.wait.chars().all(|c| c.is_ascii_digit()) {
        Duration::from_millis(a.wait.parse().unwrap_or(0))
    } else {
        units::parse_duration(&a.wait)?
    };
    let mut argv = vec![
        a.target.clone(),
        "--users=1".into(),
        format!("--count={}", a.count.max(1)),
        "--max-in-flight=1".into(),
        format!("--size={}", a.size),
        format!("--from={}", a.from),
        format!("--to={}", a.to),
        "--pick=round-robin".into(),
        format!("--timeout={}", a.timeout),
        "--quiet".into(),
        "--grace=1s".into(),
        "--seed=1".into(),
    ];
    for (on, flag) in [
        (a.lmtp, "--lmtp"),
        (a.starttls, "--starttls"),
        (a.tls, "--tls"),
        (a.insecure, "--insecure"),
        (!a.pipelining, "--no-pipelining"),
    ] {
        if on {
            argv.push(flag.into());
        }
    }
    if let Some(ca) = &a.ca {
        argv.push(format!("--ca={ca}"));
    }
    if let Some(u) = &a.auth_user {
        argv.push(format!("--auth-user={u}"));
    }
    let args = crate::load::args_from(argv)?;
    let (plan, factory, settings) = prepare(args, vec![])?;
    println!(
        "PING {} ({}) from <{}> to <{}>, {} messages of {} bytes",
        plan.target, plan.address, a.from, a.to, a.count, plan.size.lo
    );
    let settings = Arc::new(settings);
    let mut session = Session::new(
        0,
        settings.clone(),
        factory.builder(SmallRng::seed_from_u64(1), 0),
    );
    let mut hists: Vec<_> = COLUMNS.iter().map(|_| new_histogram()).collect();
    let mut total = new_histogram();
    let mut failures = 0;
    for seq in 0..u64::from(a.count.max(1)) {
        if seq > 0 && !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let t0 = settings.clock.now_us();
        session.send(seq, t0, false).await;
        let mut line = format!("seq={:<3}", seq + 1);
        let timings = session.last_timings();
        for (i, (phase, name)) in COLUMNS.iter().enumerate() {
            let us: u64 = timings
                .iter()
                .filter(|(p, _)| p == phase)
                .map(|(_, us)| *us)
                .sum();
            if timings.iter().any(|(p, _)| p == phase) {
                hists[i].saturating_record(us.max(1));
                line.push_str(&format!(
                    " {name}={}",
                    fmt_duration(Duration::from_micros(us))
                ));
            }
        }
        let took = settings.clock.now_us() - t0;
        match session.last_error() {
            Some(e) => {
                failures += 1;
                line.push_str(&format!(" ERROR {e}"));
            }
            None => {
                total.saturating_record(took.max(1));
                line.push_str(&format!(
                    " total={}",
                    fmt_duration(Duration::from_micros(took))
                ));
            }
        }
        println!("{line}");
    }
    println!(
        "\n--- {} statistics: {} sent, {} failed ---",
        plan.target, a.count, failures
    );
    println!(
        "{:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "phase", "min", "avg", "max", "p50", "p90", "p99"
    );
    let fd = |us: u64| fmt_duration(Duration::from_micros(us));
    let rows = COLUMNS
        .iter()
        .map(|(_, n)| *n)
        .zip(hists.iter())
        .chain(std::iter::once(("total", &total)));
    let mut phases = serde_json::Map::new();
    for (name, h) in rows {
        if h.is_empty() {
            continue;
        }
        let ms = |us: f64| (us / 10.0).round() / 100.0;
        phases.insert(
            name.to_string(),
            serde_json::json!({
                "count": h.len(),
                "min_ms": ms(h.min() as f64),
                "mean_ms": ms(h.mean()),
                "max_ms": ms(h.max() as f64),
                "p50_ms": ms(h.value_at_quantile(0.5) as f64),
                "p90_ms": ms(h.value_at_quantile(0.9) as f64),
                "p99_ms": ms(h.value_at_quantile(0.99) as f64),
            }),
        );
        println!(
            "{:<10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            name,
            fd(h.min()),
            fd(h.mean() as u64),
            fd(h.max()),
            fd(h.value_at_quantile(0.5)),
            fd(h.value_at_quantile(0.9)),
            fd(h.value_at_quantile(0.99))
        );
    }
    if let Some(path) = &a.json {
        let total = phases.remove("total");
        let j = serde_json::json!({
            "target": plan.target,
            "to": a.to,
            "count": a.count,
            "failed": failures,
            "wait_ms": wait.as_millis() as u64,
            "size": plan.size.lo,
            "phases": phases,
            "total": total,
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)? + "\n")
            .map_err(|e| anyhow::anyhow!("--json {}: {e}", path.display()))?;
    }
    Ok(if failures > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
