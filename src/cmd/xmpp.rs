//! `spate xmpp`: XMPP sessions that log in and stay logged in, and stamped one-to-one
//! messages between them whose delivery is timed at every recipient and accounted for in
//! a ledger (expected, delivered, missing, duplicated).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::{observers, print_outcome, Finished};
use crate::ctx::Ctx;
use crate::engine::{self, Observer, PlanHead, Workload};
use crate::opts::accounts::AccountsArgs;
use crate::opts::{MonitorArgs, OutputArgs, PickArg, TransportArgs, WorkloadArgs};
use crate::results::Summary;
use crate::session::xmpp::ledger::Ledger;
use crate::session::xmpp::{
    Account, Gate, Mix, RosterMode, Sasl, Session, Settings, Traffic, WebSocket,
};
use crate::session::{Endpoint, TlsMode};
use crate::{usage, UsageError};

const EXAMPLES: &str = "A unit of work is one message from a session to another session of the \
run, stamped with the run id, its sequence and its send time. Every session logs in first \
(connect, TLS, stream, STARTTLS, SASL, bind, roster, initial presence: each a phase), and no \
message goes out before every session has tried to log in. Each recipient times the arrival \
(the arrival phase) and the ledger counts expected, delivered, missing and duplicated \
deliveries; exit status 1 when some are missing.

EXAMPLES:
  SPATE_PASSWORD=pw spate xmpp 127.0.0.1:5222 --user-pattern 'user{0..99}@example.test' \\
      --users 100 --think 1s --duration 1m --starttls --ca ca.pem
  spate xmpp 127.0.0.1:5222 --users-file users.txt --users 300 --login-rate 50/s \\
      --rate 200/s --duration 5m";

/// Options of `spate xmpp`.
#[derive(Debug, Clone, clap::Args, Serialize)]
#[command(allow_negative_numbers = true, after_long_help = EXAMPLES)]
pub struct Args {
    /// Server to load, HOST[:PORT] (5222; 5223 with --tls). The certificate is checked
    /// against the JIDs' domain, as XMPP requires. Or a WebSocket URL (RFC 7395),
    /// ws://HOST[:PORT]/PATH or wss://… (path /xmpp-websocket by default; a wss
    /// certificate is checked against the URL's host): every session goes there.
    pub target: String,

    /// A WebSocket URL (ws:// or wss://) that --websocket-percent of the sessions go to,
    /// the others to the TCP target: one run, both transports (the websocket phase times
    /// the upgrade; the summary counts the sessions of each).
    #[arg(long, value_name = "URL", help_heading = "Transport")]
    pub websocket: Option<String>,
    /// The share of the sessions that go over --websocket, spread evenly [default: 100].
    #[arg(long, value_name = "PERCENT", requires = "websocket", value_parser = clap::value_parser!(u32).range(0..=100), help_heading = "Transport")]
    pub websocket_percent: Option<u32>,

    #[command(flatten)]
    pub workload: WorkloadArgs,

    #[command(flatten)]
    #[serde(flatten)]
    pub accounts: AccountsArgs,
    /// SASL mechanism (auto: the strongest offered of SCRAM-SHA-256, SCRAM-SHA-1, PLAIN).
    #[arg(long, value_enum, default_value_t = Sasl::Auto, help_heading = "Accounts")]
    pub sasl: Sasl,
    /// Logins per second (200/s, 3000/min); default: all sessions at once.
    #[arg(long, value_name = "RATE", help_heading = "Accounts")]
    pub login_rate: Option<String>,
    /// Create each account first by in-band registration (XEP-0077), paced by
    /// --login-rate; the summary counts accounts created, already there and refused.
    #[arg(long, help_heading = "Accounts")]
    pub register: bool,
    /// Do not enable XEP-0198 stream management. By default a session enables it when
    /// the server offers it and asks for an acknowledgement behind every stanza: a stanza
    /// the server acknowledged is the server's to deliver (missing if it never arrives,
    /// whatever happened to the stream), and only those it had not are indeterminate
    /// when a stream dies (without it, every stanza in flight is). Where the server
    /// allows it, a session whose stream died resumes it instead of logging in again.
    #[arg(long, help_heading = "Accounts")]
    pub no_stream_management: bool,
    /// After binding: `get` asks for the roster (a phase of its own; `--roster` alone);
    /// `all` also subscribes every session to every other one not yet in its roster with
    /// subscription both, each approving the others' requests (the subscribe phase), so
    /// presence reaches every session without a shared roster on the server. The summary
    /// says which the server had: every roster full already (a shared roster, or an
    /// earlier run's subscriptions) or subscriptions made.
    #[arg(
        long,
        value_enum,
        value_name = "get|all",
        num_args = 0..=1,
        default_missing_value = "get",
        help_heading = "Accounts"
    )]
    pub roster: Option<RosterMode>,

    /// What each unit of work sends: a chat message to one other session, a XEP-0033
    /// multicast to --addresses sessions, or a presence change (broadcast by the server to
    /// the sender's contacts: every logged-in session with a shared roster). For several
    /// kinds at once give each its rate instead (Traffic mix).
    /// [default: message]
    #[arg(long, value_enum, help_heading = "Messages")]
    pub traffic: Option<Traffic>,
    /// A mix, each kind at its own rate (all of them at once; instead of --traffic and
    /// --rate): chat messages per second over all sessions, e.g. 200/s.
    #[arg(
        long,
        value_name = "RATE",
        help_heading = "Traffic mix",
        conflicts_with = "message_every"
    )]
    pub message_rate: Option<String>,
    /// Mix: every session sends a chat message this often (the rate is sessions / period).
    #[arg(long, value_name = "DURATION", help_heading = "Traffic mix")]
    pub message_every: Option<String>,
    /// Mix: XEP-0033 multicasts per second over all sessions (each to --addresses).
    #[arg(
        long,
        value_name = "RATE",
        help_heading = "Traffic mix",
        conflicts_with = "multicast_every"
    )]
    pub multicast_rate: Option<String>,
    /// Mix: every session sends a multicast this often.
    #[arg(long, value_name = "DURATION", help_heading = "Traffic mix")]
    pub multicast_every: Option<String>,
    /// Mix: presence changes per second over all sessions.
    #[arg(
        long,
        value_name = "RATE",
        help_heading = "Traffic mix",
        conflicts_with = "presence_every"
    )]
    pub presence_rate: Option<String>,
    /// Mix: every session changes its presence this often, e.g. 60s as in E5 (the server
    /// broadcasts each change to the session's contacts).
    #[arg(long, value_name = "DURATION", help_heading = "Traffic mix")]
    pub presence_every: Option<String>,

    /// Mix: raw stanzas (--raw) per second over all sessions.
    #[arg(
        long,
        value_name = "RATE",
        help_heading = "Traffic mix",
        conflicts_with = "raw_every"
    )]
    pub raw_rate: Option<String>,
    /// Mix: every session sends a raw stanza this often.
    #[arg(long, value_name = "DURATION", help_heading = "Traffic mix")]
    pub raw_every: Option<String>,
    /// Stanzas of your own (MUC, PubSub, IQ...): one per line ('#' comments), taken in
    /// turn, with {to} (another session's JID), {from}, {domain}, {id} and {seq} filled
    /// in. An <iq> must carry id='{id}': it is timed to its result (the reply phase; an
    /// error reply is a rejection with its condition). Alone, --raw is what every unit
    /// sends; in a mix give --raw-rate or --raw-every.
    #[arg(long, value_name = "FILE", help_heading = "Messages")]
    pub raw: Option<std::path::PathBuf>,

    /// Multicast: recipients per message, N or MIN..MAX (distinct logged-in sessions).
    #[arg(
        long,
        default_value = "10",
        value_name = "N",
        help_heading = "Messages"
    )]
    pub addresses: String,
    /// Multicast: the XEP-0033 service's JID [default: multicast.DOMAIN].
    #[arg(long, value_name = "JID", help_heading = "Messages")]
    pub multicast_service: Option<String>,
    /// After the last stanza, how long sessions stay to receive what is still on its way
    /// (what has not arrived by then is missing).
    #[arg(
        long,
        default_value = "10s",
        value_name = "DURATION",
        help_heading = "Messages"
    )]
    pub wait: String,
    /// After every session has logged in, wait (at most this long) until what the logins
    /// set off has passed before the traffic starts: each login's presence goes to every
    /// contact online, and on a busy server that storm outlasts the logins by a minute.
    /// Settled: the sessions together read at most one stanza a second per 50 sessions
    /// (at least 5) for 2 s in a row. The measured window (the monitor's after_setup
    /// figures: server CPU per delivery) opens after it; summary.json's
    /// extra.xmpp.settle says how long it took and whether it settled.
    #[arg(long, value_name = "MAX", help_heading = "Messages")]
    pub settle: Option<String>,
    /// How each message picks its recipient among the other sessions.
    #[arg(long, value_enum, default_value_t = PickArg::Random, help_heading = "Messages")]
    pub pick: PickArg,
    /// Body size of each message, in bytes.
    #[arg(long, default_value = "100", help_heading = "Messages")]
    pub size: String,

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
    pub domain: String,
    pub sessions: usize,
    pub accounts: usize,
    #[serde(flatten)]
    pub workload: Workload,
    pub tls: TlsMode,
    /// Sessions over WebSocket: the URL and their share (percent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub websocket: Option<(String, u32)>,
    pub seed: u64,
    pub args: Args,
}

crate::plan_info!(Plan);

/// Fewer deliveries than this in the window, and the server's CPU per delivery is printed
/// with a caveat (one multicast to one address read "642 512 µs per delivery").
const MIN_DELIVERIES_FOR_A_COST: u64 = 100;

fn accounts(args: &Args) -> anyhow::Result<Vec<Account>> {
    let creds = args.accounts.credentials("log in")?;
    creds
        .into_iter()
        .map(|(jid, password)| Ok(Account::bare(jid, password)?))
        .collect()
}

/// The traffic mix: each kind given a rate or a per-session period, with its rate in
/// stanzas per second; empty when none is (then --traffic says what every unit sends).
fn mix(args: &Args, sessions: usize) -> anyhow::Result<Vec<(Traffic, f64)>> {
    let mut kinds = Vec::new();
    let each = [
        (
            Traffic::Message,
            &args.message_rate,
            &args.message_every,
            "message",
        ),
        (
            Traffic::Multicast,
            &args.multicast_rate,
            &args.multicast_every,
            "multicast",
        ),
        (
            Traffic::Presence,
            &args.presence_rate,
            &args.presence_every,
            "presence",
        ),
        (Traffic::Raw, &args.raw_rate, &args.raw_every, "raw"),
    ];
    for (kind, rate, every, name) in each {
        let r = match (rate, every) {
            (Some(r), _) => crate::units::parse_rate(r)?,
            (None, Some(p)) => {
                let p = crate::units::parse_duration(p)?;
                if p.is_zero() {
                    return usage(format!("--{name}-every must be more than 0"));
                }
                sessions as f64 / p.as_secs_f64()
            }
            (None, None) => continue,
        };
        if r <= 0.0 {
            return usage(format!("--{name}-rate must be more than 0"));
        }
        kinds.push((kind, r));
    }
    Ok(kinds)
}

/// The workload: sessions are `--users`; `--rate`/`--stages` spread their messages, or
/// the mix's rates add up to the open rate.
pub(crate) fn workload(args: &Args) -> anyhow::Result<(Workload, usize)> {
    let mut w = args.workload.clone();
    let sessions = w.users.unwrap_or(2) as usize;
    if sessions < 2 {
        return usage("--users: a message needs a recipient, so at least 2 sessions");
    }
    let kinds = mix(args, sessions)?;
    if !kinds.is_empty() {
        let clash = [
            (w.rate.is_some(), "--rate"),
            (w.stages.is_some(), "--stages"),
            (w.think.is_some(), "--think"),
            (args.traffic.is_some(), "--traffic"),
        ];
        if let Some((_, opt)) = clash.iter().find(|c| c.0) {
            return usage(format!(
                "{opt}: a traffic mix (--message-rate, --presence-every, ...) sets the rates of its kinds itself"
            ));
        }
    }
    // A mix's rates add up to the open workload's.
    let mix_rate = (!kinds.is_empty()).then(|| kinds.iter().map(|k| k.1).sum::<f64>());
    if w.rate.is_some() || w.stages.is_some() || mix_rate.is_some() {
        // In XMPP the sessions stay logged in: they carry the open workload's messages.
        if w.max_in_flight != 1000 {
            return usage("--max-in-flight: in spate xmpp the logged-in sessions (--users) carry the messages");
        }
        w.users = None;
        w.max_in_flight = sessions as u32;
    } else {
        w.users = Some(sessions as u32);
    }
    let mut resolved = w.resolve_at(mix_rate)?;
    // Traffic (open arrivals, --duration) starts once every session has logged in.
    resolved.after_setup = true;
    let sessions = match &resolved.shard {
        Some(of) => {
            // This shard's sessions (a closed workload's users are already its share).
            let share = of.share(sessions as u64) as usize;
            if share < 2 {
                return usage(format!("--users {sessions}: split into {} shards, a shard has fewer than the 2 sessions a message needs", of.count));
            }
            if let crate::engine::Model::Open { max_in_flight, .. } = &mut resolved.model {
                *max_in_flight = share as u32;
            }
            share
        }
        None => sessions,
    };
    Ok((resolved, sessions))
}

/// Builds the plan and the sessions' shared settings (no network I/O).
fn prepare(args: &Args, command: Vec<String>) -> anyhow::Result<(Plan, Vec<Account>)> {
    let accounts = accounts(args)?;
    let domain = accounts[0]
        .jid
        .split_once('@')
        .map_or("", |(_, d)| d)
        .to_string();
    if let Some(a) = accounts
        .iter()
        .find(|a| !a.jid.ends_with(&format!("@{domain}")))
    {
        return usage(format!(
            "{}: every account must be on one domain ({domain}) for now",
            a.jid
        ));
    }
    let (workload, sessions) = workload(args)?;
    let accounts = match &workload.shard {
        // No two shards log into the same account.
        Some(of) => of.take(accounts, "accounts")?,
        None => accounts,
    };
    if sessions > accounts.len() {
        return usage(format!(
            "--users {sessions}: only {} accounts (each session logs in as its own account)",
            accounts.len()
        ));
    }
    let (ep, ws) = endpoints(args, &domain)?;
    let plan = Plan {
        head: PlanHead::new::<Session>(command, "xmpp", &args.target).of(&workload),
        address: ep.addr,
        domain,
        sessions,
        accounts: accounts.len(),
        workload,
        tls: ep.tls,
        websocket: ws.map(|w| (w.url, w.percent)),
        seed: args.output.seed.unwrap_or_else(rand::random),
        args: args.clone(),
    };
    Ok((plan, accounts))
}

fn strip_scheme(t: &str) -> &str {
    t.split_once("://").map_or(t, |(_, rest)| rest)
}

/// Where the sessions over WebSocket go.
pub struct WsTarget {
    pub url: String,
    pub percent: u32,
    pub endpoint: Endpoint,
    pub host: String,
    pub path: String,
}

/// The TCP endpoint (the WebSocket one when the target is a URL), and where the
/// sessions over WebSocket go. A TCP endpoint's certificate names the XMPP `domain`
/// (RFC 6120 §13.7.2), a wss one its URL's host, unless --server-name says otherwise.
pub fn endpoints(args: &Args, domain: &str) -> anyhow::Result<(Endpoint, Option<WsTarget>)> {
    let ws_of = |url: &str, percent: u32| -> anyhow::Result<WsTarget> {
        let u = crate::transport::websocket::parse_url(url, "/xmpp-websocket")
            .unwrap_or_else(|| Err(format!("{url}: expected a ws:// or wss:// URL")))
            .map_err(UsageError)?;
        let mut t = args.transport.clone();
        t.tls = u.tls;
        // STARTTLS is TCP's (over WebSocket TLS is wss://): the TCP sessions' alone.
        t.starttls = false;
        let endpoint = t.endpoint(&u.authority, u.port, false)?;
        Ok(WsTarget {
            url: url.to_string(),
            percent,
            endpoint,
            host: u.authority,
            path: u.path,
        })
    };
    let by_name = |mut e: Endpoint| -> anyhow::Result<Endpoint> {
        if args.transport.server_name.is_none() {
            e.server_name =
                crate::tls::server_name(domain).map_err(|e| UsageError(e.to_string()))?;
        }
        Ok(e)
    };
    if crate::transport::websocket::parse_url(&args.target, "/").is_some() {
        if args.websocket.is_some() {
            return usage("--websocket: the target is a WebSocket URL already (give a TCP target to mix the two)");
        }
        if args.transport.starttls || args.transport.tls {
            return usage("--starttls/--tls: over WebSocket, TLS is wss:// (the connection's own)");
        }
        let ws = ws_of(&args.target, 100)?;
        return Ok((ws.endpoint.clone(), Some(ws)));
    }
    let port = if args.transport.tls { 5223 } else { 5222 };
    let tcp = by_name(
        args.transport
            .endpoint(strip_scheme(&args.target), port, false)?,
    )?;
    let ws = match &args.websocket {
        Some(url) => Some(ws_of(url, args.websocket_percent.unwrap_or(100))?),
        None => None,
    };
    Ok((tcp, ws))
}

/// Puts the ledger's account into the summary (and a warning when deliveries are missing).
struct LedgerReport(Arc<Ledger>, Option<RosterMode>);

impl Observer for LedgerReport {
    fn start(
        &mut self,
        _dir: &std::path::Path,
        _start: std::time::SystemTime,
    ) -> anyhow::Result<()> {
        Ok(())
    }
    fn interval(&mut self, _snap: &engine::Snapshot<'_>) -> anyhow::Result<()> {
        Ok(())
    }
    fn finish(&mut self, summary: &mut Summary) {
        let a = self.0.account();
        let t = a.total;
        // A stanza is counted accepted when it is written; one in flight when its stream
        // died (no acknowledgement from the server) that not every recipient got may or
        // may not have been taken: the run's totals count it indeterminate (a failure
        // whose outcome is unknown, as an SMTP message whose end of data went out
        // without a reply), as the ledger does its deliveries. Each unit stays in
        // exactly one class: accepted, rejected, failed (indeterminate among these) or
        // unfinished.
        let doubt = a.stanzas_in_doubt.min(summary.totals.accepted);
        if doubt > 0 {
            summary.totals.accepted -= doubt;
            summary.totals.failed += doubt;
            summary.totals.indeterminate += doubt;
            summary.warnings.push(format!(
                "{doubt} stanzas were in flight, unacknowledged, when their stream died and not every recipient got them: counted indeterminate, not accepted ({} deliveries in doubt)",
                t.indeterminate
            ));
        }
        if t.missing > 0 {
            let first: Vec<String> = a
                .missing_sample
                .iter()
                .take(5)
                .map(|m| format!("{} #{} ({} missing)", m.kind, m.seq, m.missing))
                .collect();
            summary.warnings.push(format!(
                "{} of {} deliveries never arrived (first: {}); see extra.xmpp.missing_sample in summary.json",
                t.missing,
                t.expected,
                first.join(", ")
            ));
        }
        if t.duplicates > 0 {
            summary.warnings.push(format!(
                "{} deliveries arrived more than once",
                t.duplicates
            ));
        }
        let mut x = serde_json::to_value(t).unwrap_or_default();
        x["missing_sample"] = serde_json::to_value(&a.missing_sample).unwrap_or_default();
        for (kind, c) in &a.kinds {
            x[*kind] = serde_json::to_value(c).unwrap_or_default();
        }
        let reg = |i: usize| self.0.registered[i].load(std::sync::atomic::Ordering::Relaxed);
        if reg(0) + reg(1) + reg(2) > 0 {
            x["registered"] =
                serde_json::json!({"created": reg(0), "existed": reg(1), "refused": reg(2)});
        }
        if self.1 == Some(RosterMode::All) {
            let r = |i: usize| self.0.roster[i].load(std::sync::atomic::Ordering::Relaxed);
            let logged_in = summary.phase("bind").map_or(0, |p| p.count);
            let how = if r(0) + r(1) == 0 && r(2) > 0 {
                "every roster held every other session already (the server's shared roster, or an earlier run's subscriptions)"
            } else {
                "pairwise subscriptions (presence subscribe / subscribed)"
            };
            x["roster"] = serde_json::json!({
                "mode": "all", "how": how, "full_already": r(2), "sessions": logged_in,
                "subscriptions_made": r(0), "subscriptions_refused": r(1),
            });
            if r(1) > 0 {
                summary.warnings.push(format!(
                    "--roster all: {} subscription requests were refused",
                    r(1)
                ));
            }
        }
        if let Some(st) = self.0.settled() {
            if !st.settled {
                summary.warnings.push(format!(
                    "--settle: the sessions were still reading {} stanzas over {:.0} s when the wait gave up: the measured window holds what the logins set off",
                    st.stanzas_read, st.waited_s
                ));
            }
            x["settle"] = serde_json::to_value(&st).unwrap_or_default();
        }
        let sm = |i: usize| self.0.sm[i].load(std::sync::atomic::Ordering::Relaxed);
        if sm(0) > 0 {
            x["stream_management"] = serde_json::json!({
                "enabled": sm(0), "acknowledged": sm(1), "unacknowledged_when_a_stream_died": sm(2),
                "resumed": sm(3), "written_again": sm(4),
            });
        }
        if let Some((cpu, window)) = server_cpu(summary) {
            // E5's own number: what the server spent per delivery it made, over the load
            // (from the end of the logins when they took a second or more).
            let per = (t.delivered > 0).then(|| (cpu * 1e6 / t.delivered as f64).round());
            x["server"] = serde_json::json!({
                "cpu_s": (cpu * 1000.0).round() / 1000.0,
                "cpu_us_per_delivery": per,
                "deliveries": t.delivered,
                "window": window,
                "basis": format!("the monitored server processes (--monitor-pid, --monitor-process), {window}"),
            });
        }
        summary.extra.insert("xmpp".into(), x);
    }
}

/// The CPU seconds the monitored server processes used during the run (none when no
/// process was monitored).
/// The followed server processes' CPU seconds over the load: from the end of every
/// session's login when that was a phase of its own (`monitor.after_setup`: the login
/// storm is not the load's), else over the whole run; and which it is.
fn server_cpu(summary: &Summary) -> Option<(f64, &'static str)> {
    let monitor = summary.extra.get("monitor")?;
    let (mean, secs, basis) = match monitor.get("after_setup").filter(|a| a.is_object()) {
        Some(a) => (
            a.get("mean")?,
            a.get("seconds")?.as_f64()?,
            "after the logins",
        ),
        None => (monitor.get("mean")?, summary.elapsed_s, "logins included"),
    };
    let pct: Vec<f64> = mean
        .as_object()?
        .iter()
        .filter(|(k, _)| k.starts_with("proc.") && k.ends_with(".cpu_pct"))
        .filter_map(|(_, v)| v.as_f64())
        .collect();
    (!pct.is_empty()).then(|| (pct.iter().sum::<f64>() * secs / 100.0, basis))
}
/// The traffic of `sessions` sessions: the mix (or the one kind), and the raw stanzas it
/// sends, checked against what it needs (a multicast addresses at most `addresses_hi`).
fn traffic(args: &Args, sessions: usize, addresses_hi: u32) -> anyhow::Result<(Mix, Vec<String>)> {
    let kinds = mix(args, sessions)?;
    let alone = match (args.traffic, &args.raw) {
        (Some(t), _) => t,
        (None, Some(_)) => Traffic::Raw,
        (None, None) => Traffic::Message,
    };
    let mix = if kinds.is_empty() {
        Mix::only(alone)
    } else {
        Mix::new(kinds)
    };
    let raw = match &args.raw {
        Some(path) if mix.has(Traffic::Raw) => raw_templates(path)?,
        Some(_) => return usage("--raw FILE: the traffic has no raw stanzas (--traffic raw, or --raw-rate/--raw-every in a mix)"),
        None if mix.has(Traffic::Raw) => return usage("raw traffic needs its stanzas: --raw FILE"),
        None => Vec::new(),
    };
    if mix.has(Traffic::Multicast) && addresses_hi as usize >= sessions {
        return usage(format!(
            "--addresses {}: a session can address at most the {} other sessions (--users {})",
            args.addresses,
            sessions - 1,
            sessions
        ));
    }
    Ok((mix, raw))
}

/// The stanza templates of --raw FILE, each checked: one element (message, presence or
/// iq) once its placeholders are filled in, and an IQ's id is '{id}'.
fn raw_templates(path: &std::path::Path) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| UsageError(format!("--raw {}: {e}", path.display())))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let at = format!("--raw {}:{}", path.display(), n + 1);
        let mut filled = String::new();
        crate::session::xmpp::fill_template(t, &mut filled, |k, o| {
            o.push_str(if k == "id" {
                "spate-0"
            } else {
                "x@example.test"
            })
        });
        let e = crate::proto::xmpp::Element::parse(filled.as_bytes())
            .map_err(|e| UsageError(format!("{at}: not one XML element: {e}")))?;
        match e.local_name() {
            "message" | "presence" => {}
            "iq" if e.attr("id") == Some("spate-0") => {}
            "iq" => {
                return usage(format!(
                    "{at}: an <iq> needs id='{{id}}' so that its reply can be matched"
                ))
            }
            other => {
                return usage(format!(
                    "{at}: <{other}> is not a stanza (message, presence or iq)"
                ))
            }
        }
        out.push(t.to_string());
    }
    if out.is_empty() {
        return usage(format!("--raw {}: no stanza in it", path.display()));
    }
    Ok(out)
}

impl Args {
    /// Parses `spate xmpp` words (target and options): a sweep's step command line.
    pub fn from_words<I, S>(words: I) -> anyhow::Result<Args>
    where
        I: IntoIterator<Item = S>,
        S: Into<std::ffi::OsString> + Clone,
    {
        super::args_from_words("xmpp", words)
    }
}

/// A finished `spate xmpp` run, with the settings its sessions shared (the ledger).
pub struct Loaded {
    pub finished: Finished,
    pub settings: Arc<Settings>,
    /// The server's port (for a sweep's wait until idle).
    pub port: u16,
}

/// The whole run of `spate xmpp` up to its summary, printing nothing (`progress`: the
/// progress line where the output options allow it).
pub async fn load(args: Args, command: Vec<String>, progress: bool) -> anyhow::Result<Loaded> {
    let login_rate = args
        .login_rate
        .as_deref()
        .map(crate::units::parse_rate)
        .transpose()?;
    if login_rate == Some(0.0) {
        return usage("--login-rate must be more than 0");
    }
    let body = crate::session::xmpp::body_element(crate::units::parse_size(&args.size)? as usize);
    let addresses = crate::units::parse_count_range(&args.addresses)?;
    if addresses.lo == 0 {
        return usage("--addresses: a multicast needs at least 1 recipient");
    }
    // The end of a run waits --wait for stanzas on their way: the grace for work in
    // flight must cover it, or the engine would cut the sessions off first.
    let mut args = args;
    let wait = crate::units::parse_duration(&args.wait)?;
    let settle = args
        .settle
        .as_deref()
        .map(crate::units::parse_duration)
        .transpose()
        .map_err(|e| crate::UsageError(format!("--settle: {e}")))?;
    if crate::units::parse_duration(&args.output.grace)? < wait + Duration::from_secs(5) {
        args.output.grace = format!("{}s", wait.as_secs() + 5);
    }
    let (plan, accounts) = prepare(&args, command)?;
    let (mix, raw) = traffic(&args, plan.sessions, addresses.hi)?;
    let (endpoint, ws) = endpoints(&args, &plan.domain)?;
    let stop = Arc::new(AtomicBool::new(false));
    let title = format!("spate — XMPP load on {}", args.target);
    let mut obs = observers(
        &args.output,
        &args.monitor,
        &plan,
        progress && args.output.progress_enabled(),
        title,
        "msg",
        &stop,
    )?;
    let ledger = Arc::new(Ledger::default());
    obs.push(Box::new(LedgerReport(ledger.clone(), args.roster)));
    obs.push(Box::new(super::thresholds::or_junit(
        &args.output,
        plan.head.protocol,
        crate::session::preflight(&plan.head.target, &endpoint).await,
    )?));
    let out = crate::opts::output::results_dir(
        args.output.out.as_deref(),
        args.output.overwrite,
        "xmpp",
    )?;
    let run = engine::Setup::new(&plan, Some(&out), None, obs, stop.clone())?;
    let settings = Arc::new(Settings {
        endpoint,
        websocket: ws.map(|w| WebSocket {
            endpoint: w.endpoint,
            host: w.host,
            path: w.path,
            percent: w.percent,
        }),
        domain: plan.domain.clone(),
        sessions: plan.sessions,
        online: (0..plan.sessions).map(|_| AtomicBool::new(false)).collect(),
        logged_in: AtomicUsize::new(0),
        refused: AtomicUsize::new(0),
        counted: plan.workload.count.is_some(),
        stop: stop.clone(),
        accounts,
        sasl: args.sasl,
        roster: args.roster.unwrap_or(RosterMode::Off),
        subs_pending: AtomicUsize::new(0),
        register: args.register,
        stream_management: !args.no_stream_management,
        login_rate,
        round_robin: args.pick == PickArg::RoundRobin,
        body,
        mix,
        raw,
        wait,
        settle,
        addresses: (addresses.lo, addresses.hi),
        multicast_service: match &args.multicast_service {
            Some(jid) => service_jid(jid)?,
            None => format!("multicast.{}", plan.domain),
        },
        run_id: plan.head.run_id.clone(),
        gate: Gate::default(),
        finishing: Gate::default(),
        ledger,
        recorder: run.recorder(),
        clock: run.clock(),
    });
    let summary = engine::run(run, |id, rng| Session::new(id, settings.clone(), rng)).await?;
    Ok(Loaded {
        finished: Finished { dir: out, summary },
        settings,
        port: plan.address.port(),
    })
}

/// `spate xmpp`.
pub async fn run(args: Args, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let register = args.register;
    let output = args.output.clone();
    let Loaded {
        finished, settings, ..
    } = load(args, ctx.command_line.clone(), true).await?;
    print_outcome(&finished);
    // The sessions are gone: the ledger holds what the summary's observer saw.
    let a = settings.ledger.account();
    let missing = a.total.missing;
    let line = |c: &crate::session::xmpp::ledger::Counts| {
        format!(
            "expected {}  delivered {}  missing {}  duplicates {}{}",
            c.expected,
            c.delivered,
            c.missing,
            c.duplicates,
            if c.bounced > 0 {
                format!("  bounced {}", c.bounced)
            } else {
                String::new()
            }
        ) + &if c.indeterminate > 0 {
            format!(
                "  indeterminate {} (in flight when a stream died: the server may have dropped them with it)",
                c.indeterminate
            )
        } else {
            String::new()
        }
    };
    println!("deliveries: {}", line(&a.total));
    if a.kinds.len() > 1 {
        for (kind, c) in &a.kinds {
            println!("  {kind:<10} sent {}  {}", c.sent, line(c));
        }
    }
    let server = finished.summary.extra.get("xmpp").map(|x| &x["server"]);
    if let Some(per) = server.and_then(|s| s["cpu_us_per_delivery"].as_f64()) {
        let window = server.and_then(|s| s["window"].as_str()).unwrap_or("");
        let n = server.and_then(|s| s["deliveries"].as_u64()).unwrap_or(0);
        // The window's CPU holds the server's fixed costs too (logins, presence): over a
        // handful of deliveries it says nothing of what one costs.
        let caveat = if n < MIN_DELIVERIES_FOR_A_COST {
            format!("; over only {n} deliveries: the window's fixed costs, not a cost per delivery")
        } else {
            String::new()
        };
        println!("server CPU: {per:.0} µs per delivery ({window}{caveat})");
    }
    if register {
        let reg =
            |i: usize| settings.ledger.registered[i].load(std::sync::atomic::Ordering::Relaxed);
        println!(
            "registrations: created {}  already there {}  refused {}",
            reg(0),
            reg(1),
            reg(2)
        );
    }
    if let Some(r) = finished
        .summary
        .extra
        .get("xmpp")
        .map(|x| &x["roster"])
        .filter(|r| r.is_object())
    {
        println!(
            "roster all: {} subscriptions made, {} refused; {} sessions had every other already ({})",
            r["subscriptions_made"], r["subscriptions_refused"], r["full_already"], r["how"].as_str().unwrap_or("")
        );
    }
    println!("results: {}", finished.dir.display());
    let verdict = Verdict::of(&finished.summary, &settings);
    if let Some(why) = verdict.why() {
        println!("{why}: exit status 1");
    }
    let duplicated = a.total.duplicates;
    if duplicated > 0 {
        println!("{duplicated} deliveries arrived more than once (the server duplicated them): exit status 1");
    }
    let bounced = a.total.bounced;
    if bounced > 0 {
        println!("{bounced} deliveries were refused by the server (error bounces: see the error table): exit status 1");
    }
    let failing = verdict.why().is_none() && super::mostly_failed(&finished.summary, "stanza");
    let ok = if missing > 0 || verdict.why().is_some() || duplicated > 0 || bounced > 0 || failing {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    };
    let code = super::exit_code(&finished.summary, ok);
    super::thresholds::finish(&output, &finished.dir, &finished.summary, code)
}

/// Why a run failed of itself, whatever else it measured: most of its sessions never
/// logged in, no stanza could be sent, or nothing sent was delivered.
struct Verdict {
    sessions: usize,
    never_logged_in: usize,
    refused: usize,
    nothing_sent: bool,
    /// Stanzas that should have reached someone went out, and none did.
    nothing_delivered: Option<u64>,
}

impl Verdict {
    fn of(summary: &Summary, s: &Settings) -> Verdict {
        use std::sync::atomic::Ordering::SeqCst;
        let t = &summary.totals;
        let ledger = s.ledger.account().total;
        // Indeterminate stanzas went out (their streams died under them).
        let nothing_sent = t.attempted > 0 && t.accepted + t.indeterminate == 0;
        // Raw stanzas are not in the ledger: a run of them alone expects no delivery.
        let sent_for_delivery = ledger.sent > 0 || ledger.expected > 0;
        Verdict {
            sessions: s.sessions,
            never_logged_in: s.sessions.saturating_sub(s.logged_in.load(SeqCst)),
            refused: s.refused.load(SeqCst),
            nothing_sent,
            nothing_delivered: (!nothing_sent && sent_for_delivery && ledger.delivered == 0)
                .then_some(ledger.sent),
        }
    }

    /// The one line that says why the run failed of itself, if it did.
    fn why(&self) -> Option<String> {
        if self.never_logged_in * 2 > self.sessions {
            let how = match self.refused {
                0 => String::new(),
                n => format!("{n} refused by the server; "),
            };
            return Some(format!(
                "{} of {} sessions never logged in ({how}see the error table)",
                self.never_logged_in, self.sessions
            ));
        }
        if self.nothing_sent {
            return Some(
                "no stanza could be sent (no session logged in?): see the error table".into(),
            );
        }
        self.nothing_delivered.map(|sent| {
            format!("nothing was delivered: {sent} stanzas sent, none arrived at a recipient (see the error table)")
        })
    }
}

/// --multicast-service: a domain JID (the service's address), checked before the run.
fn service_jid(jid: &str) -> anyhow::Result<String> {
    let j = jid.trim();
    let ok = !j.is_empty()
        && j.len() <= 1023
        && !j.contains(['@', '/', ' ', '<', '>', '\'', '"', '&'])
        && !j.starts_with('.')
        && !j.ends_with('.');
    if !ok {
        return crate::usage(format!(
            "--multicast-service {jid:?}: give the service's domain JID, e.g. multicast.example.test"
        ));
    }
    Ok(j.to_string())
}
