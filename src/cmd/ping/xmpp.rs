//! `spate ping xmpp://`: one login, each step a phase, then --count chat messages to the
//! session's own full JID, one after another, each timed from its write to its arrival
//! back on the same stream. It runs outside the engine (one session on one stream, nothing
//! to schedule); the login is the XMPP driver's own, phase for phase.

use std::process::ExitCode;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::{account, transport, Args, Stats};
use crate::engine::{self, Signal, Signals, UnitReport};
use crate::metrics::Phase;
use crate::proto::xmpp;
use crate::session::xmpp::{Account, Sasl, Settings};
use crate::session::Failure;
use crate::units::{self, fmt_duration};
use crate::{usage, UsageError};

/// The login's phases, in the order they happen; a message's round trip is the total.
const COLUMNS: &[(Phase, &str)] = &[
    (Phase::CONNECT, "connect"),
    (Phase::TLS, "tls"),
    (crate::session::xmpp::phase::WEBSOCKET, "websocket"),
    (crate::session::xmpp::phase::STREAM, "stream"),
    (crate::session::xmpp::phase::STARTTLS, "starttls"),
    (crate::session::xmpp::phase::AUTH, "auth"),
    (crate::session::xmpp::phase::BIND, "bind"),
    (crate::session::xmpp::phase::PRESENCE, "presence"),
];

/// An SMTP ping's options have no meaning here: refused rather than ignored.
fn refuse_smtp_options(a: &Args) -> anyhow::Result<()> {
    let given = [
        (a.to.is_some(), "--to"),
        (a.from.is_some(), "--from"),
        (a.lmtp, "--lmtp"),
        (a.pipelining, "--pipelining"),
    ];
    match given.iter().find(|(g, _)| *g) {
        Some((_, flag)) => usage(format!(
            "{flag} is an SMTP option: an xmpp:// ping logs in and sends its messages to its own JID"
        )),
        None => Ok(()),
    }
}

/// The account to log in as: a bare JID and its password.
fn login_account(a: &Args) -> anyhow::Result<Account> {
    let Some((jid, password)) = account(a)? else {
        return usage(
            "an xmpp:// ping logs in: --user JID (password in SPATE_PASSWORD) or --users-file FILE",
        );
    };
    Ok(Account::bare(jid, password)?)
}

/// The settings of one session: what the login reads (server, domain, account, SASL);
/// the rest is a load's (recipients, ledger, pacing) and stays idle.
fn settings(a: &Args, account: Account) -> anyhow::Result<Settings> {
    let domain = account
        .jid
        .split_once('@')
        .map_or("", |(_, d)| d)
        .to_string();
    let target = a.target.trim();
    // XMPP over WebSocket: the URL as ws:// or wss:// (its certificate names its host).
    if let Some(url) = target.strip_prefix("xmpp+") {
        let u = crate::transport::websocket::parse_url(url, "/xmpp-websocket")
            .unwrap_or_else(|| Err(format!("{target}: expected xmpp+ws:// or xmpp+wss://")))
            .map_err(UsageError)?;
        if a.tls || a.starttls {
            return usage("--tls/--starttls: over WebSocket, TLS is xmpp+wss://");
        }
        let mut t = transport(a);
        t.tls = u.tls;
        let endpoint = t.endpoint(&u.authority, u.port, false)?;
        let mut s = Settings::single(
            endpoint.clone(),
            domain,
            account,
            a.sasl.unwrap_or(Sasl::Auto),
        );
        s.websocket = Some(crate::session::xmpp::WebSocket {
            endpoint,
            host: u.authority,
            path: u.path,
            percent: 100,
        });
        return Ok(s);
    }
    let target = target.strip_prefix("xmpp://").unwrap_or(target);
    let mut endpoint = transport(a).endpoint(target, if a.tls { 5223 } else { 5222 }, false)?;
    // RFC 6120 §13.7.2: the certificate names the XMPP domain, not the host connected to.
    endpoint.server_name =
        crate::tls::server_name(&domain).map_err(|e| UsageError(e.to_string()))?;
    Ok(Settings::single(
        endpoint,
        domain,
        account,
        a.sasl.unwrap_or(Sasl::Auto),
    ))
}

/// A failure in one line: where, the condition, and the server's stanza when it stated one.
fn describe(f: &Failure) -> String {
    if f.sample.starts_with('<') {
        format!("{}: {} {}", f.phase, f.text, f.sample)
    } else {
        format!("{}: {}", f.phase, f.sample)
    }
}

/// The login's line: every step in the order it happened (the stream restarts after
/// STARTTLS and SASL), each also recorded in the statistics.
fn login_line(report: &UnitReport, stats: &mut Stats) -> String {
    let mut line = String::from("login");
    for &(phase, us) in &report.timings {
        if let Some(name) = stats.record(phase, us) {
            line.push_str(&format!(
                " {name}={}",
                fmt_duration(Duration::from_micros(us))
            ));
        }
    }
    line
}

/// The chat message of round trip `id`.
fn message(to: &str, id: &str, size: usize) -> String {
    let mut m = String::with_capacity(size + 128);
    m.push_str("<message type='chat' to='");
    xmpp::escape(to, &mut m);
    m.push_str("' id='");
    xmpp::escape(id, &mut m);
    m.push_str("'><body>");
    m.extend(std::iter::repeat_n('x', size));
    m.push_str("</body></message>");
    m
}

/// What became of the messages.
#[derive(Default)]
struct Tally {
    sent: u32,
    received: u32,
    lost: u32,
}

impl Tally {
    /// Prints round trip `seq`'s line and counts it; false when the stream broke.
    fn note(
        &mut self,
        seq: u32,
        got: Result<Option<u64>, Failure>,
        within: Duration,
        stats: &mut Stats,
    ) -> bool {
        match got {
            Ok(Some(us)) => {
                self.received += 1;
                stats.record_total(us);
                let rtt = fmt_duration(Duration::from_micros(us));
                println!("seq={seq:<3} rtt={rtt}");
            }
            Ok(None) => {
                self.lost += 1;
                println!(
                    "seq={seq:<3} LOST: not back within {}",
                    fmt_duration(within)
                );
            }
            Err(f) => {
                stats.failures += 1;
                println!("seq={seq:<3} ERROR {}", describe(&f));
                return !f.fatal;
            }
        }
        true
    }
}

/// The XMPP ping.
pub(super) async fn run(a: &Args, wait: Duration) -> anyhow::Result<ExitCode> {
    refuse_smtp_options(a)?;
    let size = units::parse_size(a.size.as_deref().unwrap_or("100"))? as usize;
    let s = settings(a, login_account(a)?)?;
    let within = s.endpoint.timeout;
    println!(
        "PING {} ({}) as {}, {} messages of {size} bytes to itself",
        a.target, s.endpoint.addr, s.accounts[0].jid, a.count
    );
    let mut signals = Signals::new();
    let mut stats = Stats::new(COLUMNS, "rtt");
    let mut rng = SmallRng::seed_from_u64(rand::random());
    let mut report = UnitReport::new(s.clock);
    let t = report.now();
    let login = tokio::select! {
        l = crate::session::xmpp::login::login(&s, 0, &mut rng, &mut report) => l,
        sig = signals.recv() => return Ok(ExitCode::from(sig.exit_code())),
    };
    let took = Duration::from_micros(report.now().saturating_sub(t));
    let line = login_line(&report, &mut stats);
    let mut l = match login {
        Ok(l) => {
            println!("{line} total={} jid={}", fmt_duration(took), l.jid);
            l
        }
        Err(f) => {
            println!("{line} ERROR {}", describe(&f));
            return Ok(ExitCode::from(1));
        }
    };
    let run_id = engine::new_run_id();
    let mut tally = Tally::default();
    let mut stopped: Option<Signal> = None;
    let mut broken = false;
    for seq in 1..=a.count {
        if seq > 1 && !wait.is_zero() {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                sig = signals.recv() => { stopped = Some(sig); break; }
            }
        }
        let id = format!("spate-ping-{run_id}-{seq}");
        let stanza = message(&l.jid, &id, size);
        tally.sent += 1;
        let got = tokio::select! {
            got = l.echo(&stanza, &id, within) => got,
            sig = signals.recv() => { stopped = Some(sig); break; }
        };
        if !tally.note(seq, got, within, &mut stats) {
            broken = true;
            break;
        }
    }
    if !broken {
        // Politely: our stream's end, the server's (bounded), then the connection's.
        let close = xmpp::stream_close(l.conn.is_websocket());
        let _ = l.conn.send(close.as_bytes()).await;
        l.conn.set_timeout(within.min(Duration::from_secs(2)));
        for _ in 0..100 {
            if l.element(crate::session::xmpp::phase::ARRIVAL)
                .await
                .is_err()
            {
                break;
            }
        }
        l.conn.shutdown().await;
    }
    let Tally {
        sent,
        received,
        lost,
    } = tally;
    println!(
        "\n--- {} statistics: {sent} sent, {received} received, {lost} lost, {} failed ---",
        a.target, stats.failures
    );
    stats.finish(
        a.json.as_deref(),
        serde_json::json!({
            "target": a.target,
            "user": s.accounts[0].jid,
            "count": a.count,
            "sent": sent,
            "received": received,
            "lost": lost,
            "failed": stats.failures,
            "wait_ms": wait.as_millis() as u64,
            "size": size,
        }),
    )?;
    Ok(match stopped {
        Some(sig) => ExitCode::from(sig.exit_code()),
        None if lost > 0 || stats.failures > 0 => ExitCode::from(1),
        None => ExitCode::SUCCESS,
    })
}
