//! `spate rr`: request/response load on a service (an authorization or decision service,
//! a cache, an HTTP endpoint): one request, one response per unit of work, framed by
//! lines, a length prefix or HTTP/1.1, over TCP or TLS with client identities.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use anyhow::Context as _;
use regex::bytes::Regex;
use serde::Serialize;

use super::{observers, print_outcome, Finished};
use crate::ctx::Ctx;
use crate::engine::{self, Observer, PlanHead, Workload};
use crate::opts::{MonitorArgs, OutputArgs, TransportArgs, WorkloadArgs};
use crate::proto::rr::{encode_request, Frame, HttpRequest};
use crate::results::{Summary, TaggedLog};
use crate::session::rr::identity::{self, Identity};
use crate::session::rr::variants::{Pick, Picker, Requests, Template, MAX_VARIANTS};
use crate::session::rr::{Policy, Session, Settings, Stats};
use crate::session::TlsMode;
use crate::{usage, UsageError};

const EXAMPLES: &str = "A unit of work is one request and its complete response. Phases: \
connect, tls (the handshake, with the connection's client identity), request (written), \
first_byte (request written to the first byte back) and response (from the unit's \
scheduled start to the last byte: in an open workload, waiting and connecting included). \
A response that fails --expect-status or --expect is rejected, with its first line as the \
error; a broken, over-long or late response fails that request only. Exit status 1 when \
any request was rejected or failed (or none was made).

REQUESTS: --requests FILE has one request per line ('#' comments, blank lines skipped); \
'CLASS<TAB>REQUEST' labels a request, and latency is reported per class (at most 16) as \
well as overall: in the summary, in report.html, and per interval in classes.hlog. \
--requests DIR takes each file as one request (bytes as they are), and \
files in DIR/CLASS/ have that class. Placeholders in any request: {seq} (the unit's \
number), {variant} (the variant drawn; short form: n in braces), {rand:A..B}, {identity} (the connection's client \
identity). Each request draws n in 0..N with --pick (N: --variants, else the number of \
requests) and sends request n mod (number of requests).

EXAMPLES:
  spate serve --rr 127.0.0.1:7000 &
  spate rr 127.0.0.1:7000 --template 'CHECK user{variant}' --variants 400 --rate 500/s -d 30s
  spate rr 127.0.0.1:7000 --frame len32 --requests reqs.txt --pick zipf:1.1 -u 20 -n 10000
  spate rr 127.0.0.1:8443 --frame http --method POST --path /authz \\
      --header 'Content-Type: application/json' --template '{\"user\":\"u{variant}\"}' \\
      --tls --ca ca.pem --identities ids/ --per-request --expect-status 200 -d 1m";

/// Options of `spate rr`.
#[derive(Debug, Clone, clap::Args, Serialize)]
#[command(allow_negative_numbers = true, after_long_help = EXAMPLES)]
pub struct Args {
    /// Service to load, HOST:PORT (an HTTP target may leave the port out: 80, 443 with --tls).
    pub target: String,

    #[command(flatten)]
    pub workload: WorkloadArgs,

    /// How requests and responses are delimited: line (one line each way; CRLF written),
    /// len32/len16 (big-endian length prefix), http (HTTP/1.1: Content-Length or chunked
    /// responses, Connection: close honoured).
    #[arg(long, value_enum, default_value_t = Frame::Line, help_heading = "Framing")]
    pub frame: Frame,
    /// Line framing: a response is the lines up to one matching REGEX (else one line).
    #[arg(long, value_name = "REGEX", help_heading = "Framing")]
    pub until: Option<String>,
    /// Largest response accepted; a longer one (or one announcing more) fails its request.
    #[arg(
        long,
        default_value = "1MiB",
        value_name = "SIZE",
        help_heading = "Framing"
    )]
    pub max_response: String,
    /// HTTP method (--frame http) [default: POST].
    #[arg(long, help_heading = "Framing")]
    pub method: Option<String>,
    /// HTTP request target (--frame http) [default: /].
    #[arg(long, help_heading = "Framing")]
    pub path: Option<String>,
    /// An HTTP header line 'Name: value' (repeatable; --frame http). Host and
    /// Content-Length are set.
    #[arg(long = "header", value_name = "'K: V'", help_heading = "Framing")]
    pub headers: Vec<String>,

    /// Requests from FILE (one per line, CLASS<TAB>REQUEST for a class) or DIR (one per
    /// file, DIR/CLASS/ for a class).
    #[arg(long, value_name = "FILE|DIR", help_heading = "Requests", conflicts_with_all = ["template", "template_file"])]
    pub requests: Option<PathBuf>,
    /// One request template, e.g. 'CHECK user{variant} {rand:1..9}'.
    #[arg(
        long,
        value_name = "STRING",
        help_heading = "Requests",
        conflicts_with = "template_file"
    )]
    pub template: Option<String>,
    /// One request template: the whole file (one final line end removed).
    #[arg(long, value_name = "FILE", help_heading = "Requests")]
    pub template_file: Option<PathBuf>,
    /// N: each request draws n in 0..N ({variant}); N distinct keys defeat (or fit) a cache.
    #[arg(long, value_name = "N", help_heading = "Requests")]
    pub variants: Option<u64>,
    /// How n is drawn: round-robin (shared by all sessions), shuffle (every variant once
    /// per round, in a random order), uniform, zipf:S (variant 0 hottest).
    #[arg(long, default_value = "round-robin", value_parser = parse_pick, value_name = "HOW", help_heading = "Requests")]
    pub pick: Pick,

    /// HTTP: the status a response must have, 100..599 [default: any below 400].
    #[arg(long, value_name = "CODE", help_heading = "Checks")]
    pub expect_status: Option<u16>,
    /// The response must match REGEX: the HTTP body (chunking removed), the bytes after
    /// a length prefix, or the line(s) without the last line end (CRLF read as LF; (?m)
    /// makes ^ and $ match at every line). {seq} and {variant} stand for the request's
    /// own numbers: an answer that names another request's (out of order, or left over)
    /// is rejected as such.
    #[arg(long, value_name = "REGEX", help_heading = "Checks")]
    pub expect: Option<String>,

    /// Client identities, one per connection in turn (defeats a per-subject cache):
    /// NAME.key with NAME.crt or NAME.pem (PEM) for each NAME; {identity} is NAME.
    /// Implies --tls; --ca or --insecure says how to check the server.
    #[arg(
        long,
        value_name = "DIR",
        help_heading = "Connections",
        conflicts_with = "cert"
    )]
    pub identities: Option<PathBuf>,
    /// Keep connections: each carries request after request (the default).
    #[arg(long, help_heading = "Connections", conflicts_with = "per_request")]
    pub keep_alive: bool,
    /// A new connection, and TLS handshake, for every request. Over HTTP each request
    /// says `Connection: close`, so that the server closes first, as wrk's and browsers'
    /// servers expect (unless --header gives a Connection of its own).
    #[arg(long, help_heading = "Connections")]
    pub per_request: bool,
    /// With --per-request, close each connection from this side instead of asking the
    /// server to: the side that closes first keeps the connection in TIME_WAIT for a
    /// minute, so this host's kernel pays for every request (and its local ports run out
    /// sooner).
    #[arg(long, help_heading = "Connections", requires = "per_request")]
    pub client_close: bool,

    #[command(flatten)]
    #[serde(flatten)]
    pub transport: TransportArgs,

    #[command(flatten)]
    pub output: OutputArgs,

    #[command(flatten)]
    pub monitor: MonitorArgs,
}

fn parse_pick(s: &str) -> Result<Pick, String> {
    s.parse()
}

/// Everything resolved: what plan.json records.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    #[serde(flatten)]
    pub head: PlanHead,
    pub address: std::net::SocketAddr,
    #[serde(flatten)]
    pub workload: Workload,
    pub frame: Frame,
    pub policy: Policy,
    pub tls: TlsMode,
    pub identities: usize,
    pub requests: usize,
    pub variants: u64,
    pub classes: Vec<String>,
    pub seed: u64,
    pub args: Args,
}

crate::plan_info!(Plan);

fn regex(opt: &str, re: &Option<String>) -> anyhow::Result<Option<Regex>> {
    re.as_deref()
        .map(|r| {
            Regex::new(r)
                .map_err(|e| UsageError(format!("{opt} {r:?}: {}", one_line(&e.to_string()))))
        })
        .transpose()
        .map_err(Into::into)
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The requests of the run, from whichever option gave them.
fn requests(args: &Args) -> anyhow::Result<Requests> {
    if let Some(t) = &args.template {
        let t =
            Template::parse(t.as_bytes(), "--template").map_err(|e| UsageError(e.to_string()))?;
        return Ok(Requests::one(t));
    }
    if let Some(p) = &args.template_file {
        let at = format!("--template-file {}", p.display());
        let mut bytes = std::fs::read(p).map_err(|e| UsageError(format!("{at}: {e}")))?;
        if bytes.ends_with(b"\n") {
            bytes.pop();
            if bytes.ends_with(b"\r") {
                bytes.pop();
            }
        }
        let t = Template::parse(&bytes, &p.display().to_string())
            .map_err(|e| UsageError(e.to_string()))?;
        return Ok(Requests::one(t));
    }
    let Some(p) = &args.requests else {
        return usage(
            "say what to send: --template 'STRING', --template-file FILE or --requests FILE|DIR",
        );
    };
    let r = if p.is_dir() {
        Requests::from_dir(p)
    } else {
        let text =
            std::fs::read(p).map_err(|e| UsageError(format!("--requests {}: {e}", p.display())))?;
        let text = String::from_utf8(text).map_err(|_| {
            UsageError(format!(
                "--requests {}: not UTF-8 text (binary requests: one per file in a directory)",
                p.display()
            ))
        })?;
        Requests::from_lines(&text, &p.display().to_string())
    };
    r.map_err(|e| UsageError(format!("--requests {e}")).into())
}

fn identities(args: &Args) -> anyhow::Result<Vec<Identity>> {
    let t = &args.transport;
    let wants_tls = t.tls || args.identities.is_some();
    if !wants_tls {
        if t.cert.is_some() || t.ca.is_some() || t.insecure {
            return usage("--cert, --ca and --insecure are for TLS: add --tls");
        }
        return Ok(Vec::new());
    }
    let base = t.tls_options();
    match &args.identities {
        Some(dir) => Ok(identity::from_dir(dir, &base).map_err(UsageError)?),
        None => Ok(vec![identity::single(&base).map_err(UsageError)?]),
    }
}

/// Every request a template can make must fit the framing: checked once, here.
fn check_framing(
    args: &Args,
    reqs: &Requests,
    http: &HttpRequest,
    ids: &[Identity],
) -> anyhow::Result<()> {
    let longest_name = ids.iter().map(|i| i.name.len()).max().unwrap_or(0);
    for (i, t) in reqs.templates.iter().enumerate() {
        if t.uses_identity() && ids.iter().all(|i| i.name.is_empty()) {
            return usage(
                "{identity} needs client identities: --identities DIR or --cert/--key with --tls",
            );
        }
        let probe = vec![b'x'; t.max_len(longest_name)];
        let mut filled = Vec::new();
        t.fill(0, 0, "", &mut rand::rng(), &mut filled);
        for body in [&probe, &filled] {
            if args.frame == Frame::Line && filled.iter().any(|&b| b == b'\n' || b == b'\r') {
                return usage(format!("request {}: --frame line sends one line; this request has a line break (use --frame len32 or http, or one request per line)", i + 1));
            }
            if args.frame != Frame::Line {
                encode_request(args.frame, http, body, &mut Vec::new())
                    .map_err(|e| UsageError(format!("request {}: {e}", i + 1)))?;
            }
        }
    }
    Ok(())
}

fn http_request(args: &Args, host: &str) -> anyhow::Result<HttpRequest> {
    for h in &args.headers {
        let ok = h
            .split_once(':')
            .is_some_and(|(k, _)| !k.trim().is_empty() && !k.contains(' '));
        if !ok || h.contains(['\r', '\n']) {
            return usage(format!(
                "--header {h:?}: expected 'Name: value' on one line"
            ));
        }
    }
    let token = |s: &str| !s.is_empty() && !s.contains(char::is_whitespace);
    let method = args.method.as_deref().unwrap_or("POST");
    let path = args.path.as_deref().unwrap_or("/");
    if !token(method) || !token(path) {
        return usage("--method and --path must be single words");
    }
    let mut headers = args.headers.clone();
    // One connection per request: the server is asked to close it (it then keeps the
    // TIME_WAIT), unless the user said otherwise.
    let says_connection = headers.iter().any(|h| {
        h.split_once(':')
            .is_some_and(|(k, _)| k.trim().eq_ignore_ascii_case("connection"))
    });
    if args.per_request && !args.client_close && !says_connection {
        headers.push("Connection: close".to_string());
    }
    Ok(HttpRequest {
        method: method.to_string(),
        path: path.to_string(),
        host: host.to_string(),
        headers,
    })
}

/// Builds the plan and the sessions' settings (no network I/O).
fn prepare(
    args: &Args,
    command: Vec<String>,
    clock: crate::metrics::Clock,
) -> anyhow::Result<(Plan, Settings)> {
    if args.transport.starttls {
        return usage(
            "--starttls: spate rr has no STARTTLS; use --tls for TLS from the first byte",
        );
    }
    let has_port = args
        .target
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok());
    if !has_port && args.frame != Frame::Http {
        return usage(format!("{}: give the port, HOST:PORT", args.target));
    }
    let port = if args.transport.tls { 443 } else { 80 };
    let mut endpoint = args.transport.endpoint(&args.target, port, false)?;
    endpoint.tls = TlsMode::Plain;
    endpoint.tls_config = None;
    let workload = args.workload.resolve()?;
    let max_response = crate::units::parse_size(&args.max_response)?;
    if max_response < 16 {
        return usage("--max-response must be at least 16 bytes");
    }
    let (until, expect) = checks(args)?;
    let reqs = requests(args)?;
    let n = args.variants.unwrap_or(reqs.templates.len() as u64);
    if n == 0 || n > MAX_VARIANTS {
        return usage(format!("--variants must be 1..{MAX_VARIANTS}"));
    }
    let ids = identities(args)?;
    // Host: the target as written (with its port), as curl sends it.
    let http = http_request(args, args.target.trim())?;
    check_framing(args, &reqs, &http, &ids)?;
    let seed = args.output.seed.unwrap_or_else(rand::random);
    let policy = if args.per_request {
        Policy::PerRequest
    } else {
        Policy::KeepAlive
    };
    let plan = Plan {
        head: PlanHead::new::<Session>(command, "rr", &args.target).of(&workload),
        address: endpoint.addr,
        workload,
        frame: args.frame,
        policy,
        tls: if ids.is_empty() {
            TlsMode::Plain
        } else {
            TlsMode::Implicit
        },
        identities: ids.len(),
        requests: reqs.templates.len(),
        variants: n,
        classes: reqs.classes.clone(),
        seed,
        args: args.clone(),
    };
    let stats = Arc::new(Stats::new(reqs.classes.clone()));
    let settings = Settings {
        endpoint,
        identities: ids,
        frame: args.frame,
        http,
        until,
        max_response: max_response.min(usize::MAX as u64) as usize,
        policy,
        picker: Picker::new(args.pick, n, seed),
        requests: reqs,
        expect_status: args.expect_status,
        expect,
        clock,
        stats,
    };
    Ok((plan, settings))
}

/// What a response is checked with (--until, --expect, --expect-status), and the options
/// that only one framing has, checked against the run's.
fn checks(
    args: &Args,
) -> anyhow::Result<(
    Option<regex::bytes::Regex>,
    Option<crate::session::rr::Expect>,
)> {
    let until = regex("--until", &args.until)?;
    if until.is_some() && args.frame != Frame::Line {
        return usage("--until is for --frame line");
    }
    if args.expect_status.is_some() && args.frame != Frame::Http {
        return usage("--expect-status is for --frame http");
    }
    if let Some(c) = args.expect_status.filter(|c| !(100..=599).contains(c)) {
        return usage(format!("--expect-status {c}: an HTTP status is 100..599"));
    }
    let http_only = [
        ("--method", args.method.is_some()),
        ("--path", args.path.is_some()),
        ("--header", !args.headers.is_empty()),
    ];
    if let Some((flag, _)) = http_only.iter().find(|(_, given)| *given) {
        if args.frame != Frame::Http {
            return usage(format!(
                "{flag} is for --frame http (this run frames requests as {})",
                args.frame.name()
            ));
        }
    }
    let expect = args
        .expect
        .as_deref()
        .map(|r| {
            crate::session::rr::Expect::new(r)
                .map_err(|e| UsageError(format!("--expect {r:?}: {}", one_line(&e.to_string()))))
        })
        .transpose()?;
    Ok((until, expect))
}

/// Puts the rr accounts into summary.json's `extra.rr`, and each class's response time
/// per interval into classes.hlog.
struct Report {
    stats: Arc<Stats>,
    head: serde_json::Value,
    /// `--detail`: how long classes.hlog has a row per second.
    detail: std::time::Duration,
    log: Option<TaggedLog>,
}

impl Observer for Report {
    fn start(&mut self, dir: &std::path::Path, start: std::time::SystemTime) -> anyhow::Result<()> {
        let classes = &self.stats.classes;
        if !classes.is_empty() {
            let path = dir.join("classes.hlog");
            let log = TaggedLog::create(
                &path,
                "response time per request class",
                start,
                &classes.names(),
                self.detail,
            )
            .with_context(|| format!("cannot write {}", path.display()))?;
            self.log = Some(log);
        }
        Ok(())
    }
    fn interval(&mut self, snap: &engine::Snapshot<'_>) -> anyhow::Result<()> {
        if let Some(log) = &mut self.log {
            let hists = self.stats.classes.take_interval();
            log.interval(snap.t_s - snap.interval_s, snap.interval_s, &hists)
                .context("cannot write classes.hlog")?;
        }
        Ok(())
    }
    fn finish(&mut self, summary: &mut Summary) {
        let s = &self.stats;
        if let Some(log) = self.log.take() {
            if let Err(e) = log.finish() {
                summary
                    .warnings
                    .push(format!("classes.hlog is incomplete: {e}"));
            }
        }
        let mut x = self.head.clone();
        x["handshakes"] = s.handshakes.load(Relaxed).into();
        x["resumed_handshakes"] = s.resumed.load(Relaxed).into();
        x["response_bytes"] = s.response_bytes.load(Relaxed).into();
        x["server_closes"] = s.server_closes.load(Relaxed).into();
        x["stale_retries"] = s.retries.load(Relaxed).into();
        if !s.classes.is_empty() {
            x["classes"] = s.classes.to_json();
        }
        summary.extra.insert("rr".into(), x);
    }
}

impl Args {
    /// Parses `spate rr` words (target and options): a sweep's step command line.
    pub fn from_words<I, S>(words: I) -> anyhow::Result<Args>
    where
        I: IntoIterator<Item = S>,
        S: Into<std::ffi::OsString> + Clone,
    {
        super::args_from_words("rr", words)
    }

    /// Checks everything a run would check before connecting (a sweep's steps, before the
    /// first one runs).
    pub fn check(&self) -> anyhow::Result<()> {
        prepare(self, Vec::new(), crate::metrics::Clock::new()).map(|_| ())
    }
}

/// A finished `spate rr` run and its request accounts.
pub struct Loaded {
    pub finished: Finished,
    pub stats: Arc<Stats>,
    /// The service's port (for a sweep's wait until idle).
    pub port: u16,
}

/// The whole run of `spate rr` up to its summary, printing nothing (`progress`: the
/// progress line where the output options allow it).
pub async fn load(args: Args, command: Vec<String>, progress: bool) -> anyhow::Result<Loaded> {
    // The clock the engine's Setup starts is replaced below; this one only types Settings.
    let (plan, settings) = prepare(&args, command, crate::metrics::Clock::new())?;
    let stop = Arc::new(AtomicBool::new(false));
    let title = format!("spate — request/response load on {}", args.target);
    let mut obs = observers(
        &args.output,
        &args.monitor,
        &plan,
        progress && args.output.progress_enabled(),
        title,
        "req",
        &stop,
    )?;
    let stats = settings.stats.clone();
    obs.push(Box::new(Report {
        detail: crate::units::parse_duration(&args.output.detail)?,
        log: None,
        stats: stats.clone(),
        head: serde_json::json!({
            "frame": plan.frame, "connections": plan.policy, "tls": plan.tls != TlsMode::Plain,
            "identities": plan.identities, "resumption": !args.transport.no_resumption,
            "requests": plan.requests, "variants": plan.variants, "pick": args.pick,
        }),
    }));
    obs.push(Box::new(super::thresholds::or_junit(
        &args.output,
        plan.head.protocol,
        crate::session::preflight(&plan.head.target, &settings.endpoint).await,
    )?));
    let out =
        crate::opts::output::results_dir(args.output.out.as_deref(), args.output.overwrite, "rr")?;
    let hook_stats = stats.clone();
    let run = engine::Setup::new(&plan, Some(&out), None, obs, stop)?.on_unit(Box::new(
        move |seq, outcome, report| hook_stats.classes.record(seq, outcome, report),
    ));
    let settings = Arc::new(Settings {
        clock: run.clock(),
        ..settings
    });
    let summary = engine::run(run, |id, rng| Session::new(id, settings.clone(), rng)).await?;
    Ok(Loaded {
        finished: Finished { dir: out, summary },
        stats,
        port: plan.address.port(),
    })
}

/// `spate rr`.
pub async fn run(args: Args, ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let output = args.output.clone();
    let Loaded {
        finished, stats, ..
    } = load(args, ctx.command_line.clone(), true).await?;
    print_outcome(&finished);
    print_rr(&finished.summary, &stats);
    println!("results: {}", finished.dir.display());
    let t = &finished.summary.totals;
    let ok = if t.attempted > 0 && t.accepted == t.attempted {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    let code = super::exit_code(&finished.summary, ok);
    super::thresholds::finish(&output, &finished.dir, &finished.summary, code)
}

fn print_rr(summary: &Summary, stats: &Stats) {
    let Some(x) = summary.extra.get("rr") else {
        return;
    };
    println!(
        "rr: frame {}, {} connections, {} TLS handshakes ({} resumed), {} closed by the server, {} stale retries",
        x["frame"].as_str().unwrap_or(""),
        x["connections"].as_str().unwrap_or(""),
        x["handshakes"],
        x["resumed_handshakes"],
        x["server_closes"],
        x["stale_retries"],
    );
    let lines = stats.classes.lines();
    if !lines.is_empty() {
        println!("per class (response time):");
        for l in lines {
            println!("{l}");
        }
    }
}
