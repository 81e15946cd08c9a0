//! `spate jmap` sessions (RFC 8620/8621): each session logs one account in (the session
//! resource and its mailboxes, its setup) and keeps its HTTP/1.1 connection; a unit of
//! work is one visit to the inbox as a mail client makes it: the newest messages and
//! their header fields in one request, then the bodies of some, then their keywords set
//! or the messages destroyed in one request. Every request is a phase.

pub mod phase;
mod url;

use std::sync::Arc;

use base64::Engine as _;
use rand::rngs::SmallRng;
use serde_json::{json, Value};

use super::{Endpoint, Failure, TlsMode};
use crate::engine::{Driver, Outcome, UnitReport};
use crate::metrics::Phase;
use crate::proto::rr::{Frame, Framer};
use crate::transport::Connection;

/// The largest response read (a page of bodies).
const MAX_RESPONSE: usize = 32 << 20;

/// An account to log in as.
#[derive(Debug, Clone)]
pub struct Account {
    pub user: String,
    pub password: String,
}

/// What every session of a run shares.
pub struct Settings {
    pub endpoint: Endpoint,
    /// The Host header, and the path of the session resource.
    pub host: String,
    pub session_path: String,
    pub accounts: Vec<Account>,
    /// Messages a visit looks at (the newest first).
    pub messages: u32,
    /// Percentages of them whose body is read, that are destroyed, and of the others
    /// those whose `$seen` is set.
    pub download: u8,
    pub flag: u8,
    pub delete: u8,
}

/// Redirects followed to the session resource.
const MAX_REDIRECTS: usize = 3;

/// An HTTP response: its status, its body, and a redirect's Location.
struct Reply {
    status: u16,
    body: Vec<u8>,
    location: Option<String>,
}

/// What the session found at its login.
struct LoggedIn {
    /// The API's path on this server, the mail account and its inbox.
    api: String,
    account: String,
    inbox: String,
}

/// One session: one account, one connection at a time.
pub struct Session {
    id: usize,
    s: Arc<Settings>,
    conn: Option<Connection>,
    framer: Framer,
    auth: String,
    login: Option<LoggedIn>,
    /// Messages looked at so far (the percentages are spread evenly over them), and
    /// of them those not destroyed.
    seen: u64,
    kept: u64,
}

/// Whether the `n`-th of a run of things is one of `pct` percent, evenly spread.
fn chosen(n: u64, pct: u8) -> bool {
    let p = u64::from(pct.min(100));
    (n + 1) * p / 100 > n * p / 100
}

impl Session {
    pub fn new(id: usize, s: Arc<Settings>, _rng: SmallRng) -> Session {
        let a = &s.accounts[id % s.accounts.len()];
        let auth =
            base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", a.user, a.password));
        Session {
            id,
            framer: Framer::response(Frame::Http, MAX_RESPONSE, None, false),
            auth,
            s,
            conn: None,
            login: None,
            seen: 0,
            kept: 0,
        }
    }

    /// One HTTP exchange, timed as `phase` (a new connection first when there is none,
    /// or the server closed the last one): the status, the body, and for a redirect its
    /// Location.
    async fn exchange(
        &mut self,
        phase: Phase,
        method: &str,
        path: &str,
        body: &[u8],
        report: &mut UnitReport,
    ) -> Result<Reply, Failure> {
        if self.conn.is_none() {
            self.conn = Some(self.s.endpoint.open(self.id, 0, report).await?);
        }
        let conn = self.conn.as_mut().expect("opened");
        let mut wire = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Basic {}\r\nAccept: application/json\r\n",
            self.s.host, self.auth
        )
        .into_bytes();
        if method == "POST" {
            wire.extend_from_slice(
                format!(
                    "Content-Type: application/json\r\nContent-Length: {}\r\n",
                    body.len()
                )
                .as_bytes(),
            );
        }
        wire.extend_from_slice(b"\r\n");
        wire.extend_from_slice(body);
        let t = report.start(phase);
        let sent = conn.send(&wire).await;
        self.framer.reset();
        let framer = &mut self.framer;
        let got = match sent {
            Ok(()) => {
                conn.read_frame(MAX_RESPONSE, |b: &[u8]| framer.frame(b))
                    .await
            }
            Err(e) => Err(e),
        };
        let bytes = match got {
            Ok(b) => b,
            Err(e) => {
                self.conn = None;
                return Err(Failure::transport(phase, e));
            }
        };
        report.counters.bytes += bytes.len() as u64;
        let m = self.framer.message(bytes);
        let (status, close, body) = (m.status.unwrap_or(0), m.close, m.body().into_owned());
        let location = (300..400)
            .contains(&status)
            .then(|| url::location(bytes))
            .flatten();
        report.timed(phase, t);
        if close {
            self.conn = None;
        }
        Ok(Reply {
            status,
            body,
            location,
        })
    }

    /// A JMAP request of `calls`, timed as `phase`: its method responses; a method error
    /// or an HTTP refusal is a rejection with its type.
    async fn api(
        &mut self,
        phase: Phase,
        calls: Value,
        report: &mut UnitReport,
    ) -> Result<Vec<Value>, Failure> {
        let path = self
            .login
            .as_ref()
            .map_or("/", |l| l.api.as_str())
            .to_string();
        let req = json!({"using": ["urn:ietf:params:jmap:core", "urn:ietf:params:jmap:mail"], "methodCalls": calls});
        let Reply { status, body, .. } = self
            .exchange(phase, "POST", &path, req.to_string().as_bytes(), report)
            .await?;
        let v: Value = serde_json::from_slice(&body)
            .map_err(|_| Failure::breach(phase, format!("HTTP {status}: not JSON")))?;
        if status != 200 {
            return Err(refused(
                phase,
                status,
                v["type"].as_str().unwrap_or("http"),
                &v.to_string(),
            ));
        }
        let responses = v["methodResponses"]
            .as_array()
            .cloned()
            .ok_or_else(|| Failure::breach(phase, "no methodResponses"))?;
        if let Some(e) = responses.iter().find(|r| r[0] == "error") {
            return Err(refused(
                phase,
                0,
                e[1]["type"].as_str().unwrap_or("error"),
                &e.to_string(),
            ));
        }
        Ok(responses)
    }

    /// The session resource, following redirects on this server (Cyrus answers
    /// /.well-known/jmap with a 301 to /jmap): it and the path it was found at.
    async fn session_resource(
        &mut self,
        report: &mut UnitReport,
    ) -> Result<(Value, String), Failure> {
        let mut path = self.s.session_path.clone();
        let tls = matches!(self.s.endpoint.tls, TlsMode::Implicit);
        for _ in 0..=MAX_REDIRECTS {
            let r = self
                .exchange(phase::SESSION, "GET", &path, b"", report)
                .await?;
            match (r.status, &r.location) {
                (200, _) => {
                    let v = serde_json::from_slice(&r.body).map_err(|_| {
                        Failure::breach(phase::SESSION, "the session resource is not JSON")
                    })?;
                    return Ok((v, path));
                }
                (301 | 302 | 303 | 307 | 308, Some(to)) => {
                    path = url::resolve(tls, &self.s.host, &path, to).ok_or_else(|| {
                        refused(phase::SESSION, r.status, "redirect elsewhere", to)
                    })?;
                }
                (status, _) => {
                    return Err(refused(
                        phase::SESSION,
                        status,
                        "http",
                        &String::from_utf8_lossy(&r.body),
                    ))
                }
            }
        }
        Err(refused(phase::SESSION, 0, "too many redirects", &path))
    }

    /// The session resource and the inbox: what every visit uses.
    async fn log_in(&mut self, report: &mut UnitReport) -> Result<(), Failure> {
        let (session, at) = self.session_resource(report).await?;
        let account = session["primaryAccounts"]["urn:ietf:params:jmap:mail"]
            .as_str()
            .ok_or_else(|| Failure::breach(phase::SESSION, "the session names no mail account"))?
            .to_string();
        let api = session["apiUrl"]
            .as_str()
            .ok_or_else(|| Failure::breach(phase::SESSION, "no apiUrl"))?;
        // An absolute URL or a relative one (Cyrus's `/jmap/`), against the resource's.
        let tls = matches!(self.s.endpoint.tls, TlsMode::Implicit);
        let api = url::resolve(tls, &self.s.host, &at, api).ok_or_else(|| {
            Failure::breach(phase::SESSION, format!("apiUrl on another server: {api}"))
        })?;
        self.login = Some(LoggedIn {
            api,
            account: account.clone(),
            inbox: String::new(),
        });
        let r = self
            .api(
                phase::MAILBOX,
                json!([["Mailbox/get", {"accountId": account, "ids": null}, "m"]]),
                report,
            )
            .await?;
        let inbox = r[0][1]["list"]
            .as_array()
            .and_then(|l| l.iter().find(|m| m["role"] == "inbox"))
            .and_then(|m| m["id"].as_str())
            .ok_or_else(|| Failure::breach(phase::MAILBOX, "no mailbox with the inbox role"))?
            .to_string();
        if let Some(l) = self.login.as_mut() {
            l.inbox = inbox;
        }
        Ok(())
    }

    /// One visit to the inbox.
    async fn visit(&mut self, report: &mut UnitReport) -> Result<(), Failure> {
        if self.login.is_none() {
            self.log_in(report).await?;
        }
        let l = self.login.as_ref().expect("logged in");
        let (account, inbox) = (l.account.clone(), l.inbox.clone());
        let r = self
            .api(
                phase::QUERY,
                json!([
                    ["Email/query", {"accountId": account, "filter": {"inMailbox": inbox},
                        "sort": [{"property": "receivedAt", "isAscending": false}], "limit": self.s.messages}, "q"],
                    ["Email/get", {"accountId": account,
                        "#ids": {"resultOf": "q", "name": "Email/query", "path": "/ids"},
                        "properties": ["id", "subject", "from", "receivedAt", "size", "keywords", "preview"]}, "g"],
                ]),
                report,
            )
            .await?;
        let ids: Vec<String> = r[0][1]["ids"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect();
        // A message already read is not marked again (a client does not).
        let already: std::collections::HashSet<&str> = r[1][1]["list"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["keywords"]["$seen"] == true)
            .filter_map(|e| e["id"].as_str())
            .collect();
        let (mut read, mut seen, mut destroy) = (Vec::new(), Vec::new(), Vec::new());
        for id in ids {
            let n = self.seen;
            self.seen += 1;
            if chosen(n, self.s.download) {
                read.push(id.clone());
            }
            if chosen(n, self.s.delete) {
                destroy.push(id);
            } else {
                // Of the messages kept, --flag percent.
                let k = self.kept;
                self.kept += 1;
                if chosen(k, self.s.flag) && !already.contains(id.as_str()) {
                    seen.push(id);
                }
            }
        }
        if !read.is_empty() {
            let r = self
                .api(
                    phase::BODY,
                    json!([["Email/get", {"accountId": account, "ids": read,
                        "properties": ["bodyValues", "textBody"], "fetchTextBodyValues": true}, "b"]]),
                    report,
                )
                .await?;
            let got = r[0][1]["list"].as_array().map_or(0, Vec::len) as u64;
            report.counters.count(phase::RETRIEVED, got);
        }
        if !seen.is_empty() || !destroy.is_empty() {
            let update: serde_json::Map<String, Value> = seen
                .iter()
                .map(|id| (id.clone(), json!({"keywords/$seen": true})))
                .collect();
            let r = self
                .api(
                    phase::SET,
                    json!([["Email/set", {"accountId": account, "update": update, "destroy": destroy}, "s"]]),
                    report,
                )
                .await?;
            let done = |k: &str| r[0][1][k].as_object().map_or(0, |m| m.len()) as u64;
            report.counters.count(phase::FLAGGED, done("updated"));
            report.counters.count(
                phase::DELETED,
                r[0][1]["destroyed"].as_array().map_or(0, Vec::len) as u64,
            );
            if done("notUpdated") + done("notDestroyed") > 0 {
                return Err(refused(phase::SET, 0, "notUpdated", &r[0][1].to_string()));
            }
        }
        Ok(())
    }
}

/// A refusal: the server answered, and said no.
fn refused(phase: Phase, status: u16, kind: &str, sample: &str) -> Failure {
    Failure {
        phase,
        kind: phase::REFUSAL,
        code: status,
        detail: None,
        text: kind.to_string(),
        sample: sample.chars().take(300).collect(),
        fatal: status == 401,
    }
}

impl Driver for Session {
    const WORDS: crate::results::UnitWords =
        crate::results::UnitWords::new("visits", "visits/s", "read", &[phase::VISIT], true);
    const COUNTERS: &'static [crate::metrics::Counter] =
        &[phase::RETRIEVED, phase::FLAGGED, phase::DELETED];
    const PHASES: &'static [Phase] = &[
        Phase::CONNECT,
        Phase::TLS,
        phase::SESSION,
        phase::MAILBOX,
        phase::QUERY,
        phase::BODY,
        phase::SET,
        phase::VISIT,
    ];

    async fn setup(&mut self, report: &mut UnitReport) {
        if let Err(f) = self.log_in(report).await {
            f.record(report);
        }
    }

    async fn run_one(&mut self, _seq: u64, r: &mut UnitReport) -> Outcome {
        let result = self.visit(r).await;
        let outcome = match &result {
            Ok(()) => Outcome::Accepted,
            Err(f) if f.fatal || f.kind != phase::REFUSAL => Outcome::Failed,
            Err(_) => Outcome::Rejected,
        };
        match result {
            Ok(()) => {
                let took = r.took(r.started());
                r.record(phase::VISIT, took);
            }
            Err(f) => {
                if f.fatal {
                    self.login = None;
                }
                f.record(r);
            }
        }
        outcome
    }

    fn idle(&mut self) {
        if let Some(c) = self.conn.as_mut() {
            c.idle();
        }
    }

    async fn finish(&mut self, _report: &mut UnitReport) {
        if let Some(c) = self.conn.take() {
            c.shutdown().await;
        }
    }
}
