//! `spate ctl`: steer a running test from a shell, through its live view's API (`--web`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Duration;

use crate::ctx::Ctx;
use crate::engine::Action;

/// Options of `spate ctl`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "The run must have been started with --web. Actions: pause, resume, \
                  stop (as SIGTERM: work in flight finishes, everything is written), rate \
                  RATE (an open workload: --rate or --stages; the whole run's rate, shards \
                  included; from 1/h to 1000000/s per process, each shard's share), users \
                  N (a closed one: --users; at most the sessions it started), status \
                  (print what the run is told and its time, as JSON). Each action is \
                  written to the run's control.jsonl and marked on its report's charts. \
                  An action the run refuses exits 1 with its reason. A run started with \
                  SPATE_WEB_TOKEN set (needed off loopback) wants the same token in \
                  SPATE_WEB_TOKEN for everything, status included.\n\n\
                  EXAMPLES:\n  spate ctl http://127.0.0.1:5665 pause\n  \
                  spate ctl 127.0.0.1:5665 rate 200/s\n  \
                  spate ctl spate-results/ users 50\n  \
                  spate ctl http://127.0.0.1:5665,http://127.0.0.1:5666 stop"
)]
pub struct Args {
    /// The run's live view: http://HOST:PORT/, HOST:PORT, or its results directory (its
    /// web.json says where). Several, separated by commas: each is told the same.
    #[arg(value_name = "RUN")]
    pub run: String,
    /// pause, resume, stop, rate, users or status.
    #[arg(value_name = "ACTION")]
    pub action: String,
    /// The rate (200/s, 5000/min) or the number of sessions.
    #[arg(value_name = "VALUE")]
    pub value: Option<String>,
}

/// `spate ctl`: 0 when every run did it, 1 when one refused or did not answer.
pub fn run(args: Args, _ctx: &Ctx) -> anyhow::Result<ExitCode> {
    let status = args.action == "status";
    if !status {
        Action::parse(&args.action, args.value.as_deref()).map_err(crate::UsageError)?;
    } else if let Some(v) = &args.value {
        return crate::usage(format!("status takes no value ({v})"));
    }
    let token = std::env::var(crate::ui::web::TOKEN_VAR)
        .ok()
        .filter(|t| !t.is_empty());
    let mut failed = false;
    for run in args.run.split(',').map(str::trim).filter(|r| !r.is_empty()) {
        let addr = where_is(run)?;
        let (method, path, body) = match status {
            true => ("GET", "/api/status".to_string(), String::new()),
            false => (
                "POST",
                format!("/api/{}", args.action),
                args.value.clone().unwrap_or_default(),
            ),
        };
        match ask(addr, method, &path, &body, token.as_deref()) {
            Ok((code, answer)) if status && code == 200 => println!("{run}: {answer}"),
            Ok((code, answer)) => {
                let v: serde_json::Value = serde_json::from_str(&answer).unwrap_or_default();
                if v["ok"] == true {
                    println!("{run}: {}", v["said"].as_str().unwrap_or("done"));
                } else {
                    failed = true;
                    let why = v["error"].as_str().map_or(answer.trim(), |e| e);
                    println!("{run}: refused ({code}): {why}");
                }
            }
            Err(e) => {
                failed = true;
                println!("{run}: no answer: {e}");
            }
        }
    }
    Ok(match failed {
        true => ExitCode::from(1),
        false => ExitCode::SUCCESS,
    })
}

/// The address of a run given as a URL, HOST:PORT, or its results directory.
pub(crate) fn where_is(run: &str) -> anyhow::Result<SocketAddr> {
    let dir = std::path::Path::new(run);
    let text = if dir.is_dir() {
        let file = dir.join("web.json");
        let web: serde_json::Value = std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .ok_or_else(|| {
                crate::UsageError(format!(
                    "{run}: no web.json in it (was the run started with --web?)"
                ))
            })?;
        web["address"].as_str().unwrap_or_default().to_string()
    } else if run.starts_with("https://") {
        return Err(crate::UsageError(format!(
            "{run}: the live view speaks plain HTTP (reach it over an SSH tunnel or a proxy that ends TLS)"
        ))
        .into());
    } else {
        let rest = run.strip_prefix("http://").unwrap_or(run);
        rest.split('/').next().unwrap_or_default().to_string()
    };
    text.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            crate::UsageError(format!(
                "{run}: expected http://HOST:PORT/, HOST:PORT or a results directory"
            ))
            .into()
        })
}

/// One request; the status code and the body.
fn ask(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> std::io::Result<(u16, String)> {
    request(addr, (method, path, body), token, "spate-ctl", 1 << 20)
}

/// One request (`method`, `path`, `body`) as `agent`, its answer read up to `limit`
/// bytes; the status code and the body.
pub(crate) fn request(
    addr: SocketAddr,
    (method, path, body): (&str, &str, &str),
    token: Option<&str>,
    agent: &str,
    limit: u64,
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: {agent}\r\n{auth}\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut answer = Vec::new();
    s.take(limit).read_to_end(&mut answer)?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other("not an HTTP answer"))?;
    Ok((code, body.to_string()))
}
