//! The embedded server's JMAP listeners (RFC 8620 core, RFC 8621 mail) over the same store
//! as IMAP and POP3: the core a client syncs against, and `spate jmap`'s load mix.
//!
//! - `GET /.well-known/jmap`: the session resource (its URLs absolute, from the request's
//!   Host and the listener's scheme; its state constant, so that a client never fetches it
//!   again for a request's `sessionState`).
//! - `POST /jmap/api/`: method calls ([`methods`]), result references and creation ids
//!   included: Mailbox ([`mailbox`]), Email and Thread ([`emails`], [`email_set`]),
//!   EmailSubmission ([`submission`]), each `*/changes` from the states of [`sync`].
//! - `POST /jmap/upload/{account}/`, `GET /jmap/download/{account}/{blob}/{name}`: blobs
//!   (a message's blob is the message, a part's its content; uploads are kept in memory,
//!   bounded).
//! - `GET /jmap/eventsource/`: push (Server-Sent Events), a `state` event whenever the
//!   account changes, `ping` every `ping` seconds when asked.
//!
//! Authentication is HTTP Basic against the users file (without one, any password); any
//! other scheme is answered 401 with the Basic challenge. Every request is one HTTP/1.1
//! exchange on a kept connection.
//!
//! Decisions a user can rely on: a mailbox's id is its UIDVALIDITY (`m7`), a message's
//! its mailbox's and its UID (`e7-12`): the store keeps IMAP's per-mailbox UIDs, so a
//! message moved by `Email/set` gets a new id (the response's `updated` gives it;
//! `Email/changes` reports the old id destroyed and the new one created). Each message is
//! its own thread. The MIME parts are taken apart (`bodyStructure`, and `textBody`,
//! `htmlBody`, `attachments` as RFC 8621 §4.1.4's algorithm picks them).

mod body;
mod compose;
mod email;
mod email_set;
mod emails;
mod headers;
mod mailbox;
mod methods;
mod submission;
mod sync;

use std::time::Duration;

use base64::Engine as _;
use serde_json::{json, Value};

use super::conn::{Conn, ConnError};
use super::shared::Shared;
use crate::proto::rr::{Frame, Framer};

/// The largest request (head and body) read.
const MAX_REQUEST: usize = 16 << 20;
/// The session's core capability limits.
pub(super) const MAX_CALLS: usize = 64;
pub(super) const MAX_OBJECTS: usize = 1000;
const MAX_UPLOAD: usize = 16 << 20;

/// JMAP's state in what every session shares: the accounts' states (for `*/changes`)
/// and their submissions.
#[derive(Debug, Default)]
pub(crate) struct Service {
    states: sync::States,
    submissions: submission::Submissions,
}

fn service(sh: &Shared) -> &Service {
    sh.service()
}

/// One HTTP request, as far as JMAP needs it.
struct Request {
    method: String,
    path: String,
    query: String,
    host: String,
    content_type: Option<String>,
    /// The user and password of a Basic Authorization.
    basic: Option<(String, String)>,
    body: Vec<u8>,
}

/// Reads the start line and the fields a JMAP server needs from a request's head.
fn request(head: &[u8], body: Vec<u8>) -> Option<Request> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let mut words = lines.next()?.split(' ');
    let (method, target) = (words.next()?, words.next()?);
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut r = Request {
        method: method.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        host: String::new(),
        content_type: None,
        basic: None,
        body,
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match name.trim().to_ascii_lowercase().as_str() {
            "host" => r.host = value.to_string(),
            "content-type" => r.content_type = media_type(value),
            // Another scheme (Bearer), or Basic that does not decode, is no login: 401
            // with the Basic challenge (RFC 9110 §11.6.1), not a malformed request.
            "authorization" => r.basic = basic(value),
            _ => {}
        }
    }
    Some(r)
}

/// A media type (`type/subtype`, lowercase) from a Content-Type value or a `type`
/// parameter, parameters dropped; `None` when it is not one.
fn media_type(value: &str) -> Option<String> {
    let t = value.split(';').next()?.trim().to_ascii_lowercase();
    let ok = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b))
    };
    let (a, b) = t.split_once('/')?;
    (ok(a) && ok(b)).then_some(t)
}

/// The user and password of a Basic authorization's value.
fn basic(value: &str) -> Option<(String, String)> {
    let (scheme, b64) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let raw = String::from_utf8(raw).ok()?;
    let (u, p) = raw.split_once(':')?;
    Some((u.to_string(), p.to_string()))
}

/// Serves one JMAP connection, request after request, until the client closes (or an
/// event stream ends it).
pub(super) async fn run(conn: &mut Conn, sh: &Shared) -> Result<(), ConnError> {
    let mut framer = Framer::request(Frame::Http, MAX_REQUEST);
    loop {
        let deadline = tokio::time::Instant::now() + conn.idle();
        let (head, body) = loop {
            let taken = conn.take_frame(|b| framer.frame(b));
            match taken {
                Ok(Some(bytes)) => {
                    let m = framer.message(bytes);
                    let body = m.body().into_owned();
                    let end = bytes
                        .windows(4)
                        .position(|w| w == b"\r\n\r\n")
                        .map_or(bytes.len(), |p| p + 4);
                    break (bytes[..end].to_vec(), body);
                }
                Ok(None) => {}
                Err(_) => {
                    reply(conn, 400, "text/plain", b"bad request\n", true);
                    return conn.flush().await;
                }
            }
            conn.flush().await?;
            conn.read_more(deadline).await?;
        };
        framer.reset();
        let Some(req) = request(&head, body) else {
            reply(conn, 400, "text/plain", b"bad request\n", true);
            return conn.flush().await;
        };
        if req.method == "GET" && req.path.starts_with("/jmap/eventsource") {
            return events(conn, sh, &req).await;
        }
        answer(conn, sh, &req);
    }
}

/// The logged-in account of a request (its mailbox key), or None after answering 401.
fn login(conn: &mut Conn, sh: &Shared, req: &Request) -> Option<String> {
    let ok = req
        .basic
        .as_ref()
        .is_some_and(|(u, p)| sh.users.check(u, p));
    sh.stats.auth(ok);
    match (ok, &req.basic) {
        (true, Some((u, _))) => Some(sh.users.mailbox_for_login(u)),
        _ => {
            conn.queue(
                b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"spate\"\r\n\
                  Content-Type: application/problem+json\r\nContent-Length: 88\r\n\r\n\
                  {\"type\":\"about:blank\",\"status\":401,\"detail\":\"log in with HTTP Basic: user and password\"}",
            );
            None
        }
    }
}

/// Answers one request other than the event stream.
fn answer(conn: &mut Conn, sh: &Shared, req: &Request) {
    let path = req.path.as_str();
    let route = (req.method.as_str(), path);
    let known = matches!(
        route,
        (
            "GET",
            "/.well-known/jmap" | "/jmap/session" | "/jmap/session/"
        ) | ("POST", "/jmap/api" | "/jmap/api/")
    ) || path.starts_with("/jmap/upload/")
        || path.starts_with("/jmap/download/");
    if !known {
        return reply(conn, 404, "text/plain", b"not found\n", false);
    }
    let Some(user) = login(conn, sh, req) else {
        return;
    };
    let account = account_id(&user);
    match route {
        ("GET", _) if !path.starts_with("/jmap/download/") => {
            let scheme = if conn.is_tls() { "https" } else { "http" };
            let body = session(&user, &account, &format!("{scheme}://{}", req.host));
            reply(
                conn,
                200,
                "application/json",
                body.to_string().as_bytes(),
                false,
            );
        }
        ("POST", "/jmap/api" | "/jmap/api/") => {
            let (status, body) = match serde_json::from_slice::<Value>(&req.body) {
                Ok(v) => methods::api(sh, &user, &account, &v),
                Err(_) => (
                    400,
                    problem("urn:ietf:params:jmap:error:notJSON", "the body is not JSON"),
                ),
            };
            reply(
                conn,
                status,
                "application/json",
                body.to_string().as_bytes(),
                false,
            );
        }
        ("POST", _) => {
            let (status, body) =
                email_set::upload(&account, path, &req.body, req.content_type.as_deref());
            reply(
                conn,
                status,
                "application/json",
                body.to_string().as_bytes(),
                false,
            );
        }
        _ => match email_set::download(sh, &user, &account, path) {
            Some(bytes) => {
                // The type the client asked for (the downloadUrl's `type`, RFC 8620 §6.2).
                let asked = param(&req.query, "type")
                    .and_then(|t| media_type(&t.replace("%2F", "/").replace("%2f", "/")));
                let whole_message = path
                    .rsplit('/')
                    .nth(1)
                    .is_some_and(|b| b.starts_with('b') && b.matches('-').count() == 1);
                let kind = asked.as_deref().unwrap_or(match whole_message {
                    true => "message/rfc822",
                    false => "application/octet-stream",
                });
                reply(conn, 200, kind, &bytes, false)
            }
            None => reply(conn, 404, "text/plain", b"no such blob\n", false),
        },
    }
}

/// An account id: the account's address, hex (ids are letters, digits, `-` and `_`).
pub(super) fn account_id(user: &str) -> String {
    let mut s = String::from("a");
    for b in user.bytes() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// A JMAP problem document (RFC 7807).
pub(super) fn problem(kind: &str, detail: &str) -> Value {
    json!({"type": kind, "status": 400, "detail": detail})
}

/// The session resource for `user`, its URLs under `base`.
fn session(user: &str, account: &str, base: &str) -> Value {
    json!({
        "capabilities": {
            "urn:ietf:params:jmap:core": {
                "maxSizeUpload": MAX_UPLOAD,
                "maxConcurrentUpload": 4,
                "maxSizeRequest": MAX_REQUEST,
                "maxConcurrentRequests": 8,
                "maxCallsInRequest": MAX_CALLS,
                "maxObjectsInGet": MAX_OBJECTS,
                "maxObjectsInSet": MAX_OBJECTS,
                "collationAlgorithms": ["i;ascii-casemap"],
            },
            "urn:ietf:params:jmap:mail": {},
            "urn:ietf:params:jmap:submission": {},
        },
        "accounts": {
            account: {
                "name": user,
                "isPersonal": true,
                "isReadOnly": false,
                "accountCapabilities": {
                    "urn:ietf:params:jmap:mail": {
                        "maxMailboxesPerEmail": 1,
                        "maxMailboxDepth": null,
                        "maxSizeMailboxName": 255,
                        "maxSizeAttachmentsPerEmail": MAX_UPLOAD,
                        "emailQuerySortOptions": ["receivedAt"],
                        "mayCreateTopLevelMailbox": false,
                    },
                    "urn:ietf:params:jmap:submission": {
                        "maxDelayedSend": 0,
                        "submissionExtensions": {},
                    },
                },
            },
        },
        "primaryAccounts": {
            "urn:ietf:params:jmap:mail": account,
            "urn:ietf:params:jmap:submission": account,
        },
        "username": user,
        "apiUrl": format!("{base}/jmap/api/"),
        "downloadUrl": format!("{base}/jmap/download/{{accountId}}/{{blobId}}/{{name}}?type={{type}}"),
        "uploadUrl": format!("{base}/jmap/upload/{{accountId}}/"),
        "eventSourceUrl": format!("{base}/jmap/eventsource/?types={{types}}&closeafter={{closeafter}}&ping={{ping}}"),
        "state": methods::SESSION_STATE,
    })
}

/// Queues one response.
fn reply(conn: &mut Conn, status: u16, content_type: &str, body: &[u8], close: bool) {
    let reason = match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        413 => "Payload Too Large",
        _ => "Error",
    };
    let connection = if close { "Connection: close\r\n" } else { "" };
    conn.queue_fmt(format_args!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{connection}\r\n",
        body.len()
    ));
    conn.queue(body);
}

/// The query parameter `name` of `query`.
fn param<'q>(query: &'q str, name: &str) -> Option<&'q str> {
    query.split('&').find_map(|kv| {
        kv.split_once('=')
            .filter(|(k, _)| *k == name)
            .map(|(_, v)| v)
    })
}

/// The event stream (RFC 8620 §7.3): a `state` event at once and whenever the account's
/// state changes (a delivery, a flag, a move), a `ping` every `ping` seconds when asked;
/// with `closeafter=state`, it ends after the first change. Ends on server shutdown.
async fn events(conn: &mut Conn, sh: &Shared, req: &Request) -> Result<(), ConnError> {
    let Some(user) = login(conn, sh, req) else {
        return conn.flush().await;
    };
    let account = account_id(&user);
    let ping = param(&req.query, "ping")
        .and_then(|p| p.parse::<u64>().ok())
        .filter(|p| *p > 0)
        .map(|p| Duration::from_secs(p.max(1)));
    let close_after = param(&req.query, "closeafter") == Some("state");
    conn.queue(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
          Connection: close\r\n\r\n",
    );
    // Deliveries land in INBOX: its changes wake the stream; other mailboxes' are seen
    // at the next wake (at most a second later).
    let mut inbox = sh.store.watch(&user, "INBOX");
    let mut shutdown = conn.shutdown_signal();
    let mut last = String::new();
    let mut changes = 0;
    let mut pinged = tokio::time::Instant::now();
    loop {
        let state = methods::state(sh, &user);
        if state != last {
            conn.queue_fmt(format_args!(
                "event: state\ndata: {{\"@type\":\"StateChange\",\"changed\":{{\"{account}\":{{\"Email\":\"{state}\",\"Mailbox\":\"{state}\",\"Thread\":\"{state}\"}}}}}}\n\n"
            ));
            last = state;
            changes += 1;
        }
        conn.flush().await?;
        if close_after && changes > 1 {
            return Ok(());
        }
        let wait = ping
            .unwrap_or(Duration::from_secs(1))
            .min(Duration::from_secs(1));
        tokio::select! {
            _ = async {
                match &mut inbox {
                    Some(w) => { let _ = w.changed().await; }
                    None => std::future::pending::<()>().await,
                }
            } => {}
            _ = tokio::time::sleep(wait) => {
                if let Some(p) = ping.filter(|p| pinged.elapsed() >= *p) {
                    pinged = tokio::time::Instant::now();
                    conn.queue_fmt(format_args!("event: ping\ndata: {{\"interval\":{}}}\n\n", p.as_secs()));
                }
            }
            _ = shutdown.wait_for(|v| *v) => return Ok(()),
        }
    }
}
