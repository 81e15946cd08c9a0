//! Reading an account's inbox over JMAP, for `spate verify --source jmap://`: all of it
//! ([`Reader::list`], then [`Reader::download`] of what is wanted), or new messages as
//! push announces them ([`watch`]: the session's EventSource, RFC 8620 §7.3). Messages
//! come out as the IMAP reader's do ([`Fetched`], [`Watched`]): the id is the JMAP email
//! id, the message its blob downloaded whole, the arrival its `receivedAt`.
//!
//! New messages are found with Email/changes since the last state; a server that cannot
//! calculate changes (answers cannotCalculateChanges) is asked with Email/query, newest first, down to
//! the newest `receivedAt` already handed over: what is kept per mailbox is that time and
//! the ids that have it, not every id.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use tokio::sync::watch;

use super::client::{self, Error, Found, Http, Reply, Urls};
use super::url;
use crate::proto::rr::{Frame, Framer, MAX_HEAD};
use crate::proto::sse;
use crate::session::mailbox::fetch::{self, Account, Fetched, Watched};
use crate::session::{Endpoint, TlsMode};
use crate::transport::{Connection, TransportError};

/// Messages listed or asked for per request (at most the server's maxObjectsInGet).
const PAGE: usize = 256;
/// Most Email/changes requests of one catch-up.
const MAX_CHANGE_PAGES: usize = 10_000;
/// The keep-alive asked of the event stream, in seconds.
const PING: &str = "30";
/// Longest line or event of the event stream, and most bytes read from it at once.
const MAX_EVENT: usize = 64 * 1024;

/// A JMAP server: where it is, and its session resource.
pub struct Server {
    pub endpoint: Endpoint,
    /// The Host header (the URL's authority).
    host: String,
    session_path: String,
}

impl Server {
    /// `jmap://HOST[:PORT][/PATH]` (HTTP, port 80 by default) or `jmaps://…` (HTTPS,
    /// 443); PATH is the session resource's, /.well-known/jmap by default.
    pub fn parse(
        url: &str,
        tls: &crate::tls::ClientOptions,
        timeout: Duration,
    ) -> Result<Server, String> {
        let bad = |m: &str| format!("bad JMAP URL '{url}': {m}");
        let (secure, rest) = match url.split_once("://") {
            Some((s, rest)) if s.eq_ignore_ascii_case("jmap") => (false, rest),
            Some((s, rest)) if s.eq_ignore_ascii_case("jmaps") => (true, rest),
            _ => return Err(bad("expected jmap:// or jmaps://")),
        };
        let (host, port, session_path) =
            url::target(rest, secure).ok_or_else(|| bad("expected HOST[:PORT][/PATH]"))?;
        let mode = if secure {
            TlsMode::Implicit
        } else {
            TlsMode::Plain
        };
        let endpoint = fetch::endpoint(&host, port, mode, tls, timeout).map_err(|e| bad(&e))?;
        Ok(Server {
            endpoint,
            host,
            session_path,
        })
    }

    fn tls(&self) -> bool {
        self.endpoint.tls == TlsMode::Implicit
    }
}

/// A message as a listing names it: enough to download it and to place it in time.
#[derive(Debug, Clone)]
pub struct Listed {
    pub id: String,
    blob: String,
    received: Option<SystemTime>,
}

impl Listed {
    fn of(v: &Value) -> Option<Listed> {
        Some(Listed {
            id: v["id"].as_str()?.to_string(),
            blob: v["blobId"].as_str()?.to_string(),
            received: v["receivedAt"]
                .as_str()
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(SystemTime::from),
        })
    }

    /// Where the listing puts it (an unreadable date is the oldest).
    fn at(&self) -> SystemTime {
        self.received.unwrap_or(SystemTime::UNIX_EPOCH)
    }
}

/// How far a mailbox has been handed over: the newest `receivedAt` (whole seconds on
/// most servers) and the ids of the messages that have it.
#[derive(Debug, Default)]
struct Cursor {
    newest: Option<SystemTime>,
    at_newest: HashSet<String>,
}

#[derive(Debug, PartialEq, Eq)]
enum Place {
    New,
    Seen,
    /// Before the newest handed over: so is everything after it, newest first.
    Older,
}

impl Cursor {
    fn place(&self, l: &Listed) -> Place {
        let Some(newest) = self.newest else {
            return Place::New;
        };
        match l.at().cmp(&newest) {
            std::cmp::Ordering::Greater => Place::New,
            std::cmp::Ordering::Equal if self.at_newest.contains(&l.id) => Place::Seen,
            std::cmp::Ordering::Equal => Place::New,
            std::cmp::Ordering::Less => Place::Older,
        }
    }

    fn note(&mut self, l: &Listed) {
        match self.newest {
            Some(n) if l.at() < n => return,
            Some(n) if l.at() == n => {}
            _ => {
                self.newest = Some(l.at());
                self.at_newest.clear();
            }
        }
        self.at_newest.insert(l.id.clone());
    }
}

/// One account logged in: its connection for requests, its URLs and its inbox.
pub struct Reader {
    http: Http,
    endpoint: Endpoint,
    urls: Urls,
    /// None when no mailbox has the inbox role: then all mail is read.
    inbox: Option<String>,
    /// Email/changes answered cannotCalculateChanges: new messages are found by query.
    no_changes: bool,
}

impl Reader {
    /// Fetches the session resource (following redirects on this server) and finds the
    /// mail account and its inbox.
    pub async fn log_in(server: &Server, acct: &Account) -> Result<Reader, Error> {
        let mut r = Reader {
            http: Http::new(&server.host, &acct.user, &acct.password),
            endpoint: server.endpoint.clone(),
            urls: Urls {
                account: String::new(),
                api: String::new(),
                download: None,
                upload: None,
                event_source: None,
                max_objects: PAGE,
            },
            inbox: None,
            no_changes: false,
        };
        let mut path = server.session_path.clone();
        let mut session = None;
        for _ in 0..=client::MAX_REDIRECTS {
            let reply = r.exchange("GET", &path, "application/json", b"").await?;
            match client::session_step(server.tls(), &server.host, &path, reply)? {
                Found::Session(v) => {
                    session = Some(v);
                    break;
                }
                Found::Redirect(to) => path = to,
            }
        }
        let session = session.ok_or_else(|| {
            Error::Breach(format!(
                "more than {} redirects to the session resource",
                client::MAX_REDIRECTS
            ))
        })?;
        r.urls = client::urls(&session, server.tls(), &server.host, &path)?;
        let m = r
            .api(
                json!([["Mailbox/get", {"accountId": r.urls.account, "ids": null,
                "properties": ["id", "role"]}, "m"]]),
            )
            .await?;
        r.inbox = client::inbox(&m[0][1]);
        Ok(r)
    }

    async fn exchange(
        &mut self,
        method: &str,
        path: &str,
        accept: &str,
        body: &[u8],
    ) -> Result<Reply, Error> {
        if !self.http.is_open() {
            self.http.attach(self.endpoint.connect().await?);
        }
        let wire = self.http.request(method, path, accept, body);
        Ok(self.http.round_trip(&wire).await?)
    }

    async fn api(&mut self, calls: Value) -> Result<Vec<Value>, Error> {
        let api = self.urls.api.clone();
        let reply = self
            .exchange("POST", &api, "application/json", &client::api_body(calls))
            .await?;
        client::responses(reply)
    }

    /// Every message of the inbox, oldest first.
    pub async fn list(&mut self) -> Result<Vec<Listed>, Error> {
        Ok(self.newer(&Cursor::default(), false).await?.0)
    }

    /// The message whole, its blob downloaded.
    pub async fn download(&mut self, l: &Listed) -> Result<Fetched, Error> {
        let template = self.urls.download.as_deref().ok_or_else(|| {
            Error::Breach("the session names no downloadUrl on this server".into())
        })?;
        let path = client::fill(
            template,
            &[
                ("accountId", &self.urls.account),
                ("blobId", &l.blob),
                ("name", "message.eml"),
                ("type", "message/rfc822"),
            ],
        );
        let r = self.exchange("GET", &path, "*/*", b"").await?;
        if r.status != 200 {
            let sample = String::from_utf8_lossy(&r.body);
            return Err(client::Error::refused(r.status, "download", &sample));
        }
        Ok(Fetched {
            id: l.id.clone(),
            raw: r.body,
            arrived: l.received,
        })
    }

    pub async fn close(mut self) {
        self.http.close().await;
    }

    /// The messages of the inbox newer than `cursor` (all of them for a new one; only
    /// those of the newest `receivedAt` when `newest_only`), oldest first, and the Email
    /// state they were listed at: Email/query newest first with Email/get of each page
    /// by a result reference.
    async fn newer(
        &mut self,
        cursor: &Cursor,
        newest_only: bool,
    ) -> Result<(Vec<Listed>, String), Error> {
        let page = PAGE.min(self.urls.max_objects);
        let filter = match &self.inbox {
            Some(id) => json!({"inMailbox": id}),
            None => Value::Null,
        };
        let (mut out, mut listed, mut state, mut position) =
            (Vec::new(), HashSet::new(), None, 0usize);
        loop {
            let r = self
                .api(json!([
                    ["Email/query", {"accountId": self.urls.account, "filter": filter,
                        "sort": [{"property": "receivedAt", "isAscending": false}],
                        "position": position, "limit": page}, "q"],
                    ["Email/get", {"accountId": self.urls.account,
                        "#ids": {"resultOf": "q", "name": "Email/query", "path": "/ids"},
                        "properties": ["id", "blobId", "receivedAt"]}, "g"],
                ]))
                .await?;
            state.get_or_insert_with(|| r[1][1]["state"].as_str().unwrap_or("").to_string());
            let got: HashMap<String, Listed> =
                listing(&r[1][1]).map(|l| (l.id.clone(), l)).collect();
            let ids = strings(&r[0][1]["ids"]);
            // A page with nothing not listed before ends it (an empty one, or a server
            // that ignores the position).
            let mut fresh = false;
            for id in &ids {
                if !listed.insert(id.clone()) {
                    continue;
                }
                fresh = true;
                let Some(l) = got.get(id) else { continue };
                let below_newest =
                    newest_only && out.first().is_some_and(|f: &Listed| l.at() < f.at());
                let done = match cursor.place(l) {
                    Place::Older => true,
                    _ if below_newest => true,
                    Place::New => {
                        out.push(l.clone());
                        false
                    }
                    Place::Seen => false,
                };
                if done {
                    out.reverse();
                    return Ok((out, state.unwrap_or_default()));
                }
            }
            if !fresh {
                break;
            }
            position += ids.len();
        }
        out.reverse();
        Ok((out, state.unwrap_or_default()))
    }

    /// The inbox's messages created since `state`, oldest first, and the state now:
    /// Email/changes, or [`Reader::newer`] than `cursor` on a server that cannot tell.
    async fn since(
        &mut self,
        state: &str,
        cursor: &Cursor,
    ) -> Result<(Vec<Listed>, String), Error> {
        if !self.no_changes {
            match self.created_since(state).await {
                Ok((ids, now)) => return Ok((self.in_inbox(&ids).await?, now)),
                Err(e) if e.is_method_error("cannotCalculateChanges") => self.no_changes = true,
                Err(e) => return Err(e),
            }
        }
        self.newer(cursor, false).await
    }

    async fn created_since(&mut self, since: &str) -> Result<(Vec<String>, String), Error> {
        let (mut created, mut state) = (Vec::new(), since.to_string());
        for _ in 0..MAX_CHANGE_PAGES {
            let r = self
                .api(json!([["Email/changes", {"accountId": self.urls.account,
                    "sinceState": state, "maxChanges": PAGE}, "c"]]))
                .await?;
            let c = &r[0][1];
            created.extend(strings(&c["created"]));
            state = c["newState"]
                .as_str()
                .ok_or_else(|| Error::Breach("Email/changes without newState".into()))?
                .to_string();
            if c["hasMoreChanges"] != true {
                return Ok((created, state));
            }
        }
        Err(Error::Breach(format!(
            "Email/changes still has more after {MAX_CHANGE_PAGES} requests"
        )))
    }

    /// Of these messages, those still there and in the inbox (in the server's order).
    async fn in_inbox(&mut self, ids: &[String]) -> Result<Vec<Listed>, Error> {
        let mut out = Vec::new();
        for batch in ids.chunks(PAGE.min(self.urls.max_objects)) {
            let r = self
                .api(
                    json!([["Email/get", {"accountId": self.urls.account, "ids": batch,
                    "properties": ["id", "blobId", "receivedAt", "mailboxIds"]}, "g"]]),
                )
                .await?;
            let list = r[0][1]["list"].as_array().cloned().unwrap_or_default();
            for v in &list {
                let inside = match &self.inbox {
                    Some(inbox) => v["mailboxIds"][inbox] == true,
                    None => true,
                };
                if let Some(l) = Listed::of(v).filter(|_| inside) {
                    out.push(l);
                }
            }
        }
        Ok(out)
    }

    /// Opens the session's event stream for Email changes: the connection past the
    /// response's head, and the decoder of its body.
    async fn events(&self) -> Result<(Connection, sse::Decoder), WatchError> {
        let template = self.urls.event_source.as_deref().ok_or_else(|| {
            WatchError::NoPush("the session names no eventSourceUrl on this server".into())
        })?;
        let path = client::fill(
            template,
            &[("types", "Email"), ("closeafter", "no"), ("ping", PING)],
        );
        let mut conn = self.endpoint.connect().await?;
        conn.send(&self.http.request("GET", &path, "text/event-stream", b""))
            .await?;
        // The head alone: the body is the stream, read as it comes.
        let mut framer = Framer::response(Frame::Http, MAX_HEAD, None, true);
        let head = conn.read_frame(MAX_HEAD, |b| framer.frame(b)).await?;
        let m = framer.message(head);
        let (status, chunked) = (m.status.unwrap_or(0), m.is_chunked());
        if status != 200 {
            return Err(WatchError::NoPush(format!(
                "its EventSource answered HTTP {status}"
            )));
        }
        Ok((conn, sse::Decoder::new(chunked, MAX_EVENT)))
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn listing(get: &Value) -> impl Iterator<Item = Listed> + '_ {
    get["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Listed::of)
}

/// The Email state a `state` event gives `account`, if it names one.
fn email_state(e: &sse::Event, account: &str) -> Option<String> {
    if e.kind != "state" && e.kind != "message" {
        return None;
    }
    let v: Value = serde_json::from_str(&e.data).ok()?;
    v["changed"][account]["Email"].as_str().map(str::to_string)
}

/// Why a watch ended before it was stopped.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The server offers no push (no eventSourceUrl, or the EventSource refused: Cyrus
    /// 3.6 as Debian builds it answers 204): the mailbox is left to the final read.
    #[error("no push: {0}")]
    NoPush(String),
    #[error(transparent)]
    Client(#[from] Error),
}

impl From<TransportError> for WatchError {
    fn from(e: TransportError) -> Self {
        WatchError::Client(e.into())
    }
}

/// Follows the inbox over the session's event stream until `stop` turns true.
/// [`Watched::Idling`] says the stream is up; from then on every `state` event that
/// changes the Email state has what it brought fetched and handed over with the time the
/// event was read ([`Watched::Announced`]). Messages already there when the stream
/// opened are not: no push announced them (the final read finds them).
pub async fn watch(
    server: &Server,
    acct: &Account,
    mut on_event: impl FnMut(Watched) + Send,
    mut stop: watch::Receiver<bool>,
) -> Result<(), WatchError> {
    let mut r = Reader::log_in(server, acct).await?;
    let (mut conn, mut sse) = r.events().await?;
    // The stream is open: whatever arrives from now on is announced. Where the inbox
    // stands now is its newest messages (of one receivedAt) and the Email state.
    let mut cursor = Cursor::default();
    let (present, mut state) = r.newer(&cursor, true).await?;
    for l in &present {
        cursor.note(l);
    }
    on_event(Watched::Idling);
    conn.set_bare_waits(true);
    let account = r.urls.account.clone();
    let any = |b: &[u8]| Ok::<_, std::convert::Infallible>((!b.is_empty()).then_some(b.len()));
    loop {
        // A dropped sender counts as a stop: nobody can ask any more.
        if *stop.borrow() || stop.has_changed().is_err() {
            break;
        }
        let (at, changed) = tokio::select! {
            got = conn.read_frame(MAX_EVENT, any) => {
                let bytes = match got {
                    Ok(b) => b,
                    // A quiet stream (a server that sends no pings) is not a dead one.
                    Err(TransportError::Timeout(_)) => continue,
                    Err(e) => return Err(e.into()),
                };
                let at = SystemTime::now();
                let mut changed = false;
                sse.feed(bytes, |e| {
                    changed |= email_state(&e, &account).is_some_and(|s| s != state);
                })
                .map_err(|e| Error::Transport(TransportError::Protocol(e.to_string())))?;
                (at, changed)
            }
            _ = stop.wait_for(|v| *v) => break,
        };
        if changed {
            let (new, now) = r.since(&state, &cursor).await?;
            state = now;
            for l in new {
                cursor.note(&l);
                on_event(Watched::Announced(r.download(&l).await?, at));
            }
        }
        if sse.ended() {
            return Err(Error::Transport(TransportError::Closed).into());
        }
    }
    conn.shutdown().await;
    r.close().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listed(id: &str, secs: u64) -> Listed {
        Listed {
            id: id.into(),
            blob: String::new(),
            received: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(secs)),
        }
    }

    #[test]
    fn the_cursor_tells_new_from_seen_within_a_second() {
        let mut c = Cursor::default();
        assert_eq!(c.place(&listed("a", 10)), Place::New);
        c.note(&listed("a", 10));
        c.note(&listed("old", 9));
        assert_eq!(c.place(&listed("a", 10)), Place::Seen);
        assert_eq!(c.place(&listed("b", 10)), Place::New);
        assert_eq!(c.place(&listed("old", 9)), Place::Older);
        c.note(&listed("c", 11));
        assert_eq!(c.place(&listed("a", 10)), Place::Older);
        assert_eq!(c.at_newest.len(), 1);
    }

    #[test]
    fn state_events_name_the_accounts_email_state() {
        let e = |kind: &str, data: &str| sse::Event {
            kind: kind.into(),
            data: data.into(),
        };
        let data = r#"{"@type":"StateChange","changed":{"a1":{"Email":"s7","Mailbox":"s7"}}}"#;
        assert_eq!(email_state(&e("state", data), "a1").as_deref(), Some("s7"));
        assert_eq!(email_state(&e("state", data), "a2"), None);
        assert_eq!(email_state(&e("ping", r#"{"interval":30}"#), "a1"), None);
        assert_eq!(email_state(&e("state", "not json"), "a1"), None);
    }
}
