//! `spate jmap` sessions (RFC 8620/8621): each session logs one account in (the session
//! resource and its mailboxes, its setup) and keeps its HTTP/1.1 connection; a unit of
//! work is one visit to the inbox as a mail client makes it: the newest messages and
//! their header fields in one request, then the bodies of some, then their keywords set
//! or the messages destroyed in one request; then, as the run asks, moves to the archive,
//! a generated message imported and one sent to another account of the run (`mix`).
//! Every request is a phase.

pub mod client;
pub mod inbox;
mod mix;
pub mod phase;
pub mod url;

use std::sync::Arc;

use rand::rngs::SmallRng;
use serde_json::{json, Value};

use self::client::{Found, Http, Reply};
use super::{Endpoint, Failure, TlsMode};
use crate::engine::{Driver, Outcome, UnitReport};
use crate::message::{Builder, Built, Factory};
use crate::metrics::Phase;

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
    /// Percentage of the messages kept (not destroyed) moved to the archive.
    pub moves: u8,
    /// Percentages of visits that import a generated message into the inbox, and that
    /// send one to another account of the run.
    pub import: u8,
    pub submit: u8,
    /// The generator of those messages: its senders and recipients are the accounts, in
    /// their order. None when no visit imports or sends.
    pub factory: Option<Arc<Factory>>,
}

/// What the session found at its login.
struct LoggedIn {
    /// The API's path on this server, the mail account and its inbox.
    api: String,
    account: String,
    inbox: String,
    /// The upload URL's template, where moves go, where drafts go (the inbox when
    /// None), and the identity that sends.
    upload: Option<String>,
    archive: Option<String>,
    drafts: Option<String>,
    identity: Option<String>,
}

/// One session: one account, one connection at a time.
pub struct Session {
    id: usize,
    s: Arc<Settings>,
    http: Http,
    login: Option<LoggedIn>,
    /// Messages looked at so far (the percentages are spread evenly over them), and
    /// of them those not destroyed.
    seen: u64,
    kept: u64,
    /// Visits made so far and messages sent (the shares of visits are spread over them).
    visits: u64,
    submits: u64,
    /// The message generator, what it built, and the message itself (not dot-stuffed).
    builder: Option<Builder>,
    built: Built,
    wire: Vec<u8>,
    message: Vec<u8>,
}

/// Whether the `n`-th of a run of things is one of `pct` percent, evenly spread.
fn chosen(n: u64, pct: u8) -> bool {
    let p = u64::from(pct.min(100));
    (n + 1) * p / 100 > n * p / 100
}

/// A client error as the failure of `phase`.
fn failure(phase: Phase, e: client::Error) -> Failure {
    match e {
        client::Error::Transport(e) => Failure::transport(phase, e),
        client::Error::Refused {
            status,
            kind,
            sample,
        } => refused(phase, status, &kind, &sample),
        client::Error::Breach(what) => Failure::breach(phase, what),
    }
}

impl Session {
    pub fn new(id: usize, s: Arc<Settings>, rng: SmallRng) -> Session {
        let a = &s.accounts[id % s.accounts.len()];
        Session {
            id,
            http: Http::new(&s.host, &a.user, &a.password),
            builder: s.factory.as_ref().map(|f| f.builder(rng, id)),
            s,
            login: None,
            seen: 0,
            kept: 0,
            visits: 0,
            submits: 0,
            built: Built::default(),
            wire: Vec::new(),
            message: Vec::new(),
        }
    }

    /// One HTTP exchange of the request `wire`, timed as `phase` (a new connection first
    /// when there is none, or the server closed the last one).
    async fn exchange(
        &mut self,
        phase: Phase,
        wire: Vec<u8>,
        report: &mut UnitReport,
    ) -> Result<Reply, Failure> {
        if !self.http.is_open() {
            let conn = self.s.endpoint.open(self.id, 0, report).await?;
            self.http.attach(conn);
        }
        let t = report.start(phase);
        let reply = self
            .http
            .round_trip(&wire)
            .await
            .map_err(|e| Failure::transport(phase, e))?;
        report.counters.bytes += reply.wire as u64;
        report.timed(phase, t);
        Ok(reply)
    }

    /// A JMAP request of `calls`, timed as `phase`: its method responses; a method error
    /// or an HTTP refusal is a rejection with its type.
    async fn api(
        &mut self,
        phase: Phase,
        calls: Value,
        report: &mut UnitReport,
    ) -> Result<Vec<Value>, Failure> {
        self.post(phase, client::api_body(calls), report).await
    }

    /// An API request of `body` (from [`client::api_body`] or its like), timed as `phase`.
    async fn post(
        &mut self,
        phase: Phase,
        body: Vec<u8>,
        report: &mut UnitReport,
    ) -> Result<Vec<Value>, Failure> {
        let path = self.login.as_ref().map_or("/", |l| l.api.as_str());
        let wire = self.http.request("POST", path, "application/json", &body);
        let reply = self.exchange(phase, wire, report).await?;
        client::responses(reply).map_err(|e| failure(phase, e))
    }

    /// The session resource, following redirects on this server: it and the path it was
    /// found at.
    async fn session_resource(
        &mut self,
        report: &mut UnitReport,
    ) -> Result<(Value, String), Failure> {
        let mut path = self.s.session_path.clone();
        let tls = matches!(self.s.endpoint.tls, TlsMode::Implicit);
        for _ in 0..=client::MAX_REDIRECTS {
            let wire = self.http.request("GET", &path, "application/json", b"");
            let r = self.exchange(phase::SESSION, wire, report).await?;
            match client::session_step(tls, &self.s.host, &path, r) {
                Ok(Found::Session(v)) => return Ok((v, path)),
                Ok(Found::Redirect(to)) => path = to,
                Err(e) => return Err(failure(phase::SESSION, e)),
            }
        }
        Err(refused(phase::SESSION, 0, "too many redirects", &path))
    }

    /// The session resource and the inbox: what every visit uses. A login that fails part
    /// way (its Mailbox/get refused, or its Identity/get) leaves nothing behind: the next
    /// visit logs in again, rather than asking for a mailbox it never found.
    async fn log_in(&mut self, report: &mut UnitReport) -> Result<(), Failure> {
        let done = self.log_in_steps(report).await;
        if done.is_err() {
            self.login = None;
        }
        done
    }

    async fn log_in_steps(&mut self, report: &mut UnitReport) -> Result<(), Failure> {
        let (session, at) = self.session_resource(report).await?;
        let tls = matches!(self.s.endpoint.tls, TlsMode::Implicit);
        let urls = client::urls(&session, tls, &self.s.host, &at)
            .map_err(|e| failure(phase::SESSION, e))?;
        let account = urls.account;
        self.login = Some(LoggedIn {
            api: urls.api,
            account: account.clone(),
            inbox: String::new(),
            upload: urls.upload,
            archive: None,
            drafts: None,
            identity: None,
        });
        let mailboxes = json!(["Mailbox/get", {"accountId": account, "ids": null}, "m"]);
        // The identity that sends is asked in the same request, only by a run that sends.
        let body = if self.s.submit > 0 {
            client::api_body_submission(json!([
                mailboxes,
                ["Identity/get", {"accountId": account, "ids": null}, "i"]
            ]))
        } else {
            client::api_body(json!([mailboxes]))
        };
        let r = self.post(phase::MAILBOX, body, report).await?;
        let inbox = client::inbox(&r[0][1])
            .ok_or_else(|| Failure::breach(phase::MAILBOX, "no mailbox with the inbox role"))?;
        let user = &self.s.accounts[self.id % self.s.accounts.len()].user;
        let identity = r.get(1).and_then(|i| mix::identity(&i[1], user));
        if let Some(l) = self.login.as_mut() {
            l.inbox = inbox;
            l.archive = client::move_target(&r[0][1]);
            l.drafts = client::with_role(&r[0][1], "drafts");
            l.identity = identity;
        }
        Ok(())
    }

    /// One visit to the inbox, unit `seq` of the run.
    async fn visit(&mut self, seq: u64, report: &mut UnitReport) -> Result<(), Failure> {
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
        let mut moving = Vec::new();
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
                    seen.push(id.clone());
                }
                if chosen(k, self.s.moves) {
                    moving.push(id);
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
        if !moving.is_empty() {
            self.move_kept(&account, moving, report).await?;
        }
        let v = self.visits;
        self.visits += 1;
        // Two messages a visit at most: each its own number for its trace header.
        if chosen(v, self.s.import) {
            self.import(seq * 2, report).await?;
        }
        if chosen(v, self.s.submit) {
            self.submit(seq * 2 + 1, report).await?;
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
    const COUNTERS: &'static [crate::metrics::Counter] = &[
        phase::RETRIEVED,
        phase::FLAGGED,
        phase::DELETED,
        phase::MOVED,
        phase::IMPORTED,
        phase::SUBMITTED,
    ];
    const PHASES: &'static [Phase] = &[
        Phase::CONNECT,
        Phase::TLS,
        phase::SESSION,
        phase::MAILBOX,
        phase::QUERY,
        phase::BODY,
        phase::SET,
        phase::MOVE,
        phase::UPLOAD,
        phase::IMPORT,
        phase::SUBMIT,
        phase::VISIT,
    ];

    async fn setup(&mut self, report: &mut UnitReport) {
        if let Err(f) = self.log_in(report).await {
            f.record(report);
        }
    }

    async fn run_one(&mut self, seq: u64, r: &mut UnitReport) -> Outcome {
        let result = self.visit(seq, r).await;
        // A refusal is the server's answer, whatever it costs the session: a refused
        // login (HTTP 401) is rejected, as IMAP's NO and POP3's -ERR to a login are, and
        // the next visit logs in again.
        let outcome = match &result {
            Ok(()) => Outcome::Accepted,
            Err(f) if f.kind == phase::REFUSAL => Outcome::Rejected,
            Err(_) => Outcome::Failed,
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
        self.http.idle();
    }

    async fn finish(&mut self, _report: &mut UnitReport) {
        self.http.close().await;
    }
}
