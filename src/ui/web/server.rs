//! The live view's HTTP server: a thread that accepts, and a thread per connection (at
//! most [`MAX_CONNECTIONS`]), each request read within a byte and a time budget.
//!
//! - `GET /`: the page (its script and styles inline: it needs no network).
//! - `GET /events`: Server-Sent Events: `report` (the report's body, drawn anew),
//!   `status` (JSON: paused, rate, users, actions), and `end` with the last report.
//! - `GET /api/status`: that JSON; `GET /api/intervals?after=N` and `GET /api/plan`:
//!   what `spate watch` reads.
//! - `POST /api/pause`, `/api/resume`, `/api/stop`, `/api/rate` (body `200/s`),
//!   `/api/users` (body `50`): steer the run; JSON `{"ok":true,"said":...}`, or
//!   `{"ok":false,"error":...}` with 400 (bad value), 401 (token), 403 (another site),
//!   409 (not for this run).
//!
//! With a token set (`SPATE_WEB_TOKEN`), every request but `GET /` (the page's shell,
//! which names no run) needs it: `Authorization: Bearer`, `X-Spate-Token`, or, for a GET
//! (the page's event stream, which cannot send headers), `?token=`; else 401.
//!
//! A page from another site cannot steer the run: a request whose Origin is not this
//! server's is refused, and so is a Host that is a name other than `localhost` (DNS
//! rebinding) while the server listens on loopback.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::feed::Feed;
use super::live::Live;
use crate::engine::{Action, Control, Refused};
use crate::ui::metrics::http::{read_head_and_more, response_head, Limits};

/// Connections served at once; more are answered 503.
const MAX_CONNECTIONS: usize = 32;
/// The largest request body (a rate or a number).
const MAX_BODY: usize = 1024;
/// An event stream with nothing new says so this often, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// The status shows this many of the latest actions.
const STATUS_ACTIONS: usize = 100;
/// How often the accept loop looks at its stop flag when nobody connects.
const POLL: Duration = Duration::from_millis(25);

/// What a live view steers: one run ([`Control`]), or every shard of one (`spate watch`).
pub trait Steering: Send + Sync {
    /// Applies `action` asked by `by`; what was done, in words, or why not.
    fn apply(&self, action: Action, by: &str) -> Result<String, Refused>;
    /// The status's part on steering: `open`, `paused`, `rate`, `users`, `ended`,
    /// `actions_total` and the latest `actions`; and `t_s`, the run's time now, when it
    /// knows it (else the status has the latest drawing's).
    fn status(&self) -> serde_json::Map<String, serde_json::Value>;
}

impl Steering for Control {
    fn apply(&self, action: Action, by: &str) -> Result<String, Refused> {
        Control::apply(self, action, by)
    }

    fn status(&self) -> serde_json::Map<String, serde_json::Value> {
        let steer = self.now();
        let actions = self.records();
        let last = |name: &str| {
            actions
                .iter()
                .rev()
                .find(|r| r.action == name)
                .and_then(|r| r.value)
        };
        let v = serde_json::json!({
            // The run's clock, not the latest drawing's: drawn only while a page watches.
            "t_s": (self.t_s() * 1000.0).round() / 1000.0,
            "open": self.open(),
            "paused": steer.paused,
            "rate": last("rate"),
            "users": last("users"),
            "ended": steer.ended,
            // The latest (control.jsonl has every one).
            "actions_total": actions.len(),
            "actions": &actions[actions.len().saturating_sub(STATUS_ACTIONS)..],
        });
        match v {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        }
    }
}

/// What every connection's thread shares.
pub struct Ctx {
    pub live: Arc<Live>,
    pub control: Arc<dyn Steering>,
    /// The run's intervals for `spate watch` (none in `spate watch`'s own view).
    pub feed: Option<Arc<Feed>>,
    /// Steering needs it when set (SPATE_WEB_TOKEN).
    pub token: Option<String>,
    /// The page, made once.
    pub page: String,
    /// The run as the status says it: run id, protocol, target.
    pub about: serde_json::Value,
    /// The page's title (the shell leaves it out when a token is set; the page sets it
    /// from the status).
    pub title: String,
    /// Where the server listens on loopback (then only IP or `localhost` hosts).
    pub loopback: bool,
    pub stop: AtomicBool,
    connections: AtomicUsize,
}

impl Ctx {
    pub fn new(
        live: Arc<Live>,
        control: Arc<dyn Steering>,
        feed: Option<Arc<Feed>>,
        token: Option<String>,
        (page, title): (String, String),
        about: serde_json::Value,
        loopback: bool,
    ) -> Ctx {
        Ctx {
            live,
            control,
            feed,
            token,
            page,
            about,
            title,
            loopback,
            stop: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
        }
    }

    /// The status JSON: the run, what it is told now, and the latest actions.
    pub fn status(&self) -> serde_json::Value {
        let frame = self.live.current();
        let mut s = self.control.status();
        let ended = frame.ended || s.get("ended").is_some_and(|e| e == true);
        s.insert("run".into(), self.about.clone());
        s.insert("title".into(), self.title.clone().into());
        // The run's own time while it goes; once the last drawing is made, the time it
        // shows (the run's end).
        let now = s.get("t_s").and_then(serde_json::Value::as_f64);
        let t_s = now.filter(|_| !frame.ended).unwrap_or(frame.t_s);
        s.insert("t_s".into(), t_s.into());
        s.insert("ended".into(), ended.into());
        s.insert("token_required".into(), self.token.is_some().into());
        serde_json::Value::Object(s)
    }
}

/// The server's accept thread; dropping it stops it (streams end within a second).
pub struct Server {
    addr: SocketAddr,
    ctx: Arc<Ctx>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    pub fn start(listener: TcpListener, ctx: Arc<Ctx>) -> std::io::Result<Server> {
        let addr = listener.local_addr()?;
        listener.set_nonblocking(true)?;
        let c = ctx.clone();
        let thread = std::thread::Builder::new()
            .name("spate-web".into())
            .spawn(move || accept_loop(&listener, &c))?;
        Ok(Server {
            addr,
            ctx,
            thread: Some(thread),
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.ctx.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: &TcpListener, ctx: &Arc<Ctx>) {
    while !ctx.stop.load(Ordering::Relaxed) {
        let Ok((stream, peer)) = listener.accept() else {
            // Nobody waiting, or no descriptor left for one (EMFILE): look again shortly.
            std::thread::sleep(POLL);
            continue;
        };
        if ctx.connections.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            ctx.connections.fetch_sub(1, Ordering::SeqCst);
            let _ = busy(stream);
            continue;
        }
        let c = ctx.clone();
        let spawned = std::thread::Builder::new()
            .name("spate-web-conn".into())
            .spawn(move || {
                let _ = serve(stream, peer, &c);
                c.connections.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            ctx.connections.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn busy(mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(Duration::from_secs(1)))?;
    reply(
        &mut stream,
        "503 Service Unavailable",
        "text/plain; charset=utf-8",
        b"too many connections\n",
    )
}

/// A request, as far as this server cares.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// What follows `?` in the target.
    pub query: String,
    pub content_length: Option<usize>,
    pub token: Option<String>,
    pub origin: Option<String>,
    pub host: Option<String>,
    pub user_agent: Option<String>,
}

/// Parses a request head; None when it is not HTTP/1.x.
pub fn parse(head: &str) -> Option<Request> {
    let mut lines = head.lines();
    let mut words = lines.next()?.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (words.next(), words.next(), words.next(), words.next())
    else {
        return None;
    };
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let mut r = Request {
        method: method.to_string(),
        path: target.split('?').next().unwrap_or("").to_string(),
        query: target.split_once('?').map_or("", |(_, q)| q).to_string(),
        ..Request::default()
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => r.content_length = Some(value.parse().ok()?),
            "authorization" => {
                r.token = value
                    .strip_prefix("Bearer ")
                    .map(|t| t.trim().to_string())
                    .or(r.token)
            }
            "x-spate-token" => r.token = Some(value.to_string()),
            "origin" => r.origin = Some(value.to_string()),
            "host" => r.host = Some(value.to_string()),
            "user-agent" => r.user_agent = Some(value.to_string()),
            _ => {}
        }
    }
    Some(r)
}

/// Whether a Host header names this server by address or as `localhost` (a page that
/// reached us under another name came through DNS rebinding).
fn host_is_ours(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        Some(v6) => {
            return v6
                .split(']')
                .next()
                .is_some_and(|a| a.parse::<std::net::Ipv6Addr>().is_ok())
        }
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    name.eq_ignore_ascii_case("localhost") || name.parse::<std::net::Ipv4Addr>().is_ok()
}

fn serve(mut stream: TcpStream, peer: SocketAddr, ctx: &Ctx) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    let limits = Limits::default();
    let Some(head) = read_head_and_more(&mut stream, limits)? else {
        return Ok(());
    };
    let Some((req, more)) = head.ok().and_then(|(h, more)| Some((parse(&h)?, more))) else {
        return text(&mut stream, "400 Bad Request", "bad request\n");
    };
    if ctx.loopback && req.host.as_deref().is_some_and(|h| !host_is_ours(h)) {
        return text(&mut stream, "403 Forbidden", "unknown host\n");
    }
    // With a token set, everything but the page's shell needs it: the status, the
    // intervals and the plan (the whole command line) tell as much as steering does.
    if req.path != "/" && !authorized(&req, peer, ctx) {
        let body = serde_json::json!({
            "ok": false,
            "error": "this run needs its token (SPATE_WEB_TOKEN)",
        });
        return json(&mut stream, "401 Unauthorized", &body);
    }
    match (req.method.as_str(), req.path.as_str()) {
        ("GET", "/") => reply(
            &mut stream,
            "200 OK",
            "text/html; charset=utf-8",
            ctx.page.as_bytes(),
        ),
        ("GET", "/events") => events(stream, ctx),
        ("GET", "/api/status") => json(&mut stream, "200 OK", &ctx.status()),
        ("GET", "/api/intervals") => match &ctx.feed {
            Some(feed) => {
                let after = query_value(&req.query, "after")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let mut body = feed.after(after);
                body.push('\n');
                reply(&mut stream, "200 OK", "application/json", body.as_bytes())
            }
            None => text(&mut stream, "404 Not Found", "not found\n"),
        },
        ("GET", "/api/plan") => match ctx.feed.as_ref().and_then(|f| f.plan()) {
            Some(plan) => reply(&mut stream, "200 OK", "application/json", plan.as_bytes()),
            None => text(&mut stream, "404 Not Found", "no plan yet\n"),
        },
        ("POST", path) if path.starts_with("/api/") => {
            let (status, body) = steer(&mut stream, &req, more, peer, ctx)?;
            json(&mut stream, status, &body)
        }
        ("GET" | "HEAD", _) => text(&mut stream, "404 Not Found", "not found\n"),
        _ => text(
            &mut stream,
            "405 Method Not Allowed",
            "method not allowed\n",
        ),
    }
}

/// A steering request: checked (origin, token, body), then applied.
fn steer(
    stream: &mut TcpStream,
    req: &Request,
    mut body: Vec<u8>,
    peer: SocketAddr,
    ctx: &Ctx,
) -> std::io::Result<(&'static str, serde_json::Value)> {
    let fail = |e: &str| serde_json::json!({"ok": false, "error": e});
    if let (Some(origin), Some(host)) = (&req.origin, &req.host) {
        if origin != &format!("http://{host}") {
            eprintln!("spate: web: refused a request from {peer} sent by the page of {origin}");
            return Ok(("403 Forbidden", fail("a request from another site's page")));
        }
    }
    let len = req.content_length.unwrap_or(0);
    if len > MAX_BODY {
        return Ok((
            "413 Payload Too Large",
            fail("the body is a rate or a number"),
        ));
    }
    // What came with the head, then the rest.
    body.truncate(len);
    let have = body.len();
    body.resize(len, 0);
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    if stream.read_exact(&mut body[have..]).is_err() {
        return Ok(("400 Bad Request", fail("the body ended early")));
    }
    let value = String::from_utf8_lossy(&body);
    let name = req.path.trim_start_matches("/api/");
    let action = match Action::parse(name, Some(&value)) {
        Ok(a) => a,
        Err(e) if e.starts_with("unknown action") => {
            return Ok(("404 Not Found", fail(&e)));
        }
        Err(e) => return Ok(("400 Bad Request", fail(&e))),
    };
    let by = match req.user_agent.as_deref() {
        Some(ua) if ua.starts_with("spate-ctl") => format!("{} spate ctl", peer.ip()),
        Some(ua) if ua.starts_with("spate-watch") => format!("{} spate watch", peer.ip()),
        _ => format!("{} web", peer.ip()),
    };
    match ctx.control.apply(action, &by) {
        Ok(said) => Ok(("200 OK", serde_json::json!({"ok": true, "said": said}))),
        Err(e) => Ok(("409 Conflict", fail(&e.0))),
    }
}

/// Whether `req` may be answered: no token is set, or it carries the token (a header,
/// or `?token=` for the page's event stream, which cannot send headers). A refusal is
/// said on the run's stderr.
fn authorized(req: &Request, peer: SocketAddr, ctx: &Ctx) -> bool {
    let Some(want) = &ctx.token else {
        return true;
    };
    let given = req.token.clone().or_else(|| {
        (req.method == "GET")
            .then(|| query_value(&req.query, "token").map(percent_decoded))
            .flatten()
    });
    if given.as_deref().is_some_and(|t| same(t, want)) {
        return true;
    }
    eprintln!(
        "spate: web: refused a request from {peer} for {}: {} token",
        req.path,
        if given.is_some() { "wrong" } else { "no" }
    );
    false
}

/// A query value with its `%XX` escapes (and `+` for a space) decoded.
fn percent_decoded(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of `name` in a query string (`after=12&x=1`).
fn query_value<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query.split('&').find_map(|kv| {
        kv.split_once('=')
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v)
    })
}

/// Compares a token without stopping at the first difference.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// The event stream: every new frame as a `report` and a `status` event, until the last
/// one (then `end`), the page going away, or the server stopping.
fn events(mut stream: TcpStream, ctx: &Ctx) -> std::io::Result<()> {
    stream.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-store\r\n\
          Connection: close\r\n\r\nretry: 2000\n\n",
    )?;
    let _watching = ctx.live.watch();
    let mut seen = 0;
    let mut quiet_since = Instant::now();
    let mut out = String::new();
    while !ctx.stop.load(Ordering::Relaxed) {
        let Some(f) = ctx.live.next_after(seen, Duration::from_secs(1)) else {
            if quiet_since.elapsed() >= KEEP_ALIVE {
                stream.write_all(b": still running\n\n")?;
                quiet_since = Instant::now();
            }
            continue;
        };
        seen = f.generation;
        out.clear();
        event(&mut out, "report", &f.body);
        event(&mut out, "status", &ctx.status().to_string());
        if f.ended {
            event(&mut out, "end", "");
        }
        stream.write_all(out.as_bytes())?;
        stream.flush()?;
        quiet_since = Instant::now();
        if f.ended {
            ctx.live.got_last();
            return Ok(());
        }
    }
    Ok(())
}

/// One Server-Sent Event: each line of `data` as a `data:` line.
fn event(out: &mut String, name: &str, data: &str) {
    out.push_str("event: ");
    out.push_str(name);
    out.push('\n');
    for line in data.split('\n') {
        out.push_str("data: ");
        out.push_str(line.trim_end_matches('\r'));
        out.push('\n');
    }
    out.push('\n');
}

fn reply(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let mut out = response_head(status, content_type, body.len());
    out.extend_from_slice(body);
    stream.write_all(&out)?;
    stream.flush()
}

fn text(stream: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    reply(stream, status, "text/plain; charset=utf-8", body.as_bytes())
}

fn json(stream: &mut TcpStream, status: &str, body: &serde_json::Value) -> std::io::Result<()> {
    let mut text = body.to_string();
    text.push('\n');
    reply(stream, status, "application/json", text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_with_their_token_origin_and_length() {
        let r = parse(
            "POST /api/rate?x=1 HTTP/1.1\r\nHost: 127.0.0.1:5665\r\nContent-Length: 5\r\n\
             Authorization: Bearer s3cret\r\nOrigin: http://127.0.0.1:5665\r\n",
        )
        .unwrap();
        assert_eq!(r.method, "POST");
        assert_eq!(r.path, "/api/rate");
        assert_eq!(r.content_length, Some(5));
        assert_eq!(r.token.as_deref(), Some("s3cret"));
        assert_eq!(r.origin.as_deref(), Some("http://127.0.0.1:5665"));
        assert_eq!(
            parse("GET / HTTP/1.1\r\nX-Spate-Token: t\r\n")
                .unwrap()
                .token
                .as_deref(),
            Some("t")
        );
        assert!(parse("GET /").is_none());
        assert!(parse("GET / HTTP/1.1\r\nContent-Length: many\r\n").is_none());
    }

    #[test]
    fn only_addresses_and_localhost_are_our_hosts() {
        for h in [
            "127.0.0.1:5665",
            "localhost:80",
            "LOCALHOST",
            "[::1]:5665",
            "127.0.0.2",
        ] {
            assert!(host_is_ours(h), "{h}");
        }
        for h in ["evil.example:5665", "127.0.0.1.nip.io", "[nonsense]"] {
            assert!(!host_is_ours(h), "{h}");
        }
    }

    #[test]
    fn a_query_token_is_percent_decoded() {
        assert_eq!(percent_decoded("a%2Bb+c%2fd"), "a+b c/d");
        assert_eq!(percent_decoded("50%"), "50%");
        assert_eq!(percent_decoded("%zz%4"), "%zz%4");
        assert_eq!(percent_decoded("%C3%A9"), "é");
    }

    #[test]
    fn events_carry_every_line_of_their_data() {
        let mut out = String::new();
        event(&mut out, "report", "<p>a</p>\r\n<p>b</p>");
        assert_eq!(out, "event: report\ndata: <p>a</p>\ndata: <p>b</p>\n\n");
        assert!(same("abc", "abc") && !same("abc", "abd") && !same("abc", "ab"));
    }
}
