//! What every JMAP client of spate does the same way, the load sessions (`spate jmap`) and
//! the mailbox reader (`spate verify --source jmap://`): HTTP/1.1 exchanges with Basic
//! authentication on one kept connection, the session resource through its redirects and
//! the URLs it names, method calls and their responses. No timing and no policy here: a
//! caller opens the connection its own way and times what it likes.

use base64::Engine as _;
use serde_json::{json, Value};

use super::url;
use crate::proto::rr::{Frame, Framer};
use crate::transport::{Connection, TransportError};

/// The largest response read (a page of bodies, a message downloaded).
pub const MAX_RESPONSE: usize = 32 << 20;

/// Redirects followed to the session resource.
pub const MAX_REDIRECTS: usize = 3;

/// Why a JMAP exchange did not give what was asked.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The server answered and said no: an HTTP status (with the problem's type), or a
    /// method error's type (status 0).
    #[error("{kind}{}: {sample}", http_status(*.status))]
    Refused {
        status: u16,
        kind: String,
        sample: String,
    },
    /// The server sent what JMAP does not allow (not JSON, no apiUrl, no inbox).
    #[error("{0}")]
    Breach(String),
}

impl Error {
    pub fn refused(status: u16, kind: &str, sample: &str) -> Error {
        Error::Refused {
            status,
            kind: kind.to_string(),
            sample: sample.chars().take(300).collect(),
        }
    }

    /// A method error of this type (`cannotCalculateChanges`, `accountNotFound`).
    pub fn is_method_error(&self, kind: &str) -> bool {
        matches!(self, Error::Refused { status: 0, kind: k, .. } if k == kind)
    }
}

/// ` (HTTP 401)`, or nothing for a method error.
fn http_status(status: u16) -> String {
    match status {
        0 => String::new(),
        s => format!(" (HTTP {s})"),
    }
}

/// An HTTP response: its status, its body (chunks joined), a redirect's Location, and how
/// many bytes it took on the wire.
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    pub location: Option<String>,
    pub wire: usize,
}

/// One account's HTTP/1.1 connection to the server (kept between exchanges, dropped when
/// broken or closed by the server) and what its requests say of it.
pub struct Http {
    conn: Option<Connection>,
    framer: Framer,
    /// The Host header.
    host: String,
    /// `user:password` in base64, for Basic authentication.
    auth: String,
}

impl Http {
    pub fn new(host: &str, user: &str, password: &str) -> Http {
        Http {
            conn: None,
            framer: Framer::response(Frame::Http, MAX_RESPONSE, None, false),
            host: host.to_string(),
            auth: base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")),
        }
    }

    /// There is a connection to send on (else [`Http::attach`] one).
    pub fn is_open(&self) -> bool {
        self.conn.is_some()
    }

    pub fn attach(&mut self, conn: Connection) {
        self.conn = Some(conn);
    }

    /// The bytes of a request: `accept` the media type asked for, a body only for POST.
    pub fn request(&self, method: &str, path: &str, accept: &str, body: &[u8]) -> Vec<u8> {
        self.post_typed(method, path, accept, "application/json", body)
    }

    /// The bytes of a blob upload (RFC 8620 §6.1): a POST of `body` as `content_type`.
    pub fn upload(&self, path: &str, content_type: &str, body: &[u8]) -> Vec<u8> {
        self.post_typed("POST", path, "application/json", content_type, body)
    }

    fn post_typed(
        &self,
        method: &str,
        path: &str,
        accept: &str,
        content_type: &str,
        body: &[u8],
    ) -> Vec<u8> {
        let mut wire = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Basic {}\r\nAccept: {accept}\r\n",
            self.host, self.auth
        )
        .into_bytes();
        if method == "POST" {
            wire.extend_from_slice(
                format!(
                    "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
                    body.len()
                )
                .as_bytes(),
            );
        }
        wire.extend_from_slice(b"\r\n");
        wire.extend_from_slice(body);
        wire
    }

    /// Sends `wire` on the attached connection and reads its response. A connection that
    /// broke, or that the server closes after this response, is dropped: the caller
    /// attaches another before the next exchange.
    pub async fn round_trip(&mut self, wire: &[u8]) -> Result<Reply, TransportError> {
        let conn = self.conn.as_mut().ok_or(TransportError::Closed)?;
        self.framer.reset();
        let framer = &mut self.framer;
        let got = match conn.send(wire).await {
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
                return Err(e);
            }
        };
        let m = self.framer.message(bytes);
        let status = m.status.unwrap_or(0);
        let reply = Reply {
            status,
            body: m.body().into_owned(),
            location: (300..400)
                .contains(&status)
                .then(|| url::location(bytes))
                .flatten(),
            wire: bytes.len(),
        };
        if m.close {
            self.conn = None;
        }
        Ok(reply)
    }

    /// The connection is about to wait (between visits): its buffer can go.
    pub fn idle(&mut self) {
        if let Some(c) = self.conn.as_mut() {
            c.idle();
        }
    }

    pub async fn close(&mut self) {
        if let Some(c) = self.conn.take() {
            c.shutdown().await;
        }
    }
}

/// What a GET of the session resource found.
pub enum Found {
    Session(Value),
    /// A redirect to this path on the same server.
    Redirect(String),
}

/// Reads the response to a GET of the session resource at `path` on `host` (reached
/// over https when `tls`): the resource, or where a redirect points (Cyrus answers
/// /.well-known/jmap with a 301 to /jmap); a redirect elsewhere is refused.
pub fn session_step(tls: bool, host: &str, path: &str, r: Reply) -> Result<Found, Error> {
    match (r.status, &r.location) {
        (200, _) => serde_json::from_slice(&r.body)
            .map(Found::Session)
            .map_err(|_| Error::Breach("the session resource is not JSON".into())),
        (301 | 302 | 303 | 307 | 308, Some(to)) => url::resolve(tls, host, path, to)
            .map(Found::Redirect)
            .ok_or_else(|| Error::refused(r.status, "redirect elsewhere", to)),
        (status, _) => Err(Error::refused(
            status,
            "http",
            &String::from_utf8_lossy(&r.body),
        )),
    }
}

/// What a session resource names for the mail account, its URLs as paths on this server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Urls {
    pub account: String,
    pub api: String,
    /// URI templates (RFC 6570 level 1, [`fill`]); None when absent or on another server.
    pub download: Option<String>,
    pub upload: Option<String>,
    pub event_source: Option<String>,
    /// Most objects an Email/get may ask for.
    pub max_objects: usize,
}

/// The mail account and the URLs of `session`, found at `at` on `host`: an absolute URL
/// or a relative one (Cyrus's `/jmap/`), resolved against the resource's.
pub fn urls(session: &Value, tls: bool, host: &str, at: &str) -> Result<Urls, Error> {
    let account = session["primaryAccounts"]["urn:ietf:params:jmap:mail"]
        .as_str()
        .ok_or_else(|| Error::Breach("the session names no mail account".into()))?
        .to_string();
    let on_this_server = |name: &str| {
        session[name]
            .as_str()
            .and_then(|u| url::resolve(tls, host, at, u))
    };
    let api = on_this_server("apiUrl").ok_or_else(|| match session["apiUrl"].as_str() {
        Some(api) => Error::Breach(format!("apiUrl on another server: {api}")),
        None => Error::Breach("no apiUrl".into()),
    })?;
    let max_objects = session["capabilities"]["urn:ietf:params:jmap:core"]["maxObjectsInGet"]
        .as_u64()
        .map_or(usize::MAX, |n| n.max(1) as usize);
    Ok(Urls {
        account,
        api,
        download: on_this_server("downloadUrl"),
        upload: on_this_server("uploadUrl"),
        event_source: on_this_server("eventSourceUrl"),
        max_objects,
    })
}

/// The body of a request of `calls` (core and mail capabilities).
pub fn api_body(calls: Value) -> Vec<u8> {
    json!({"using": ["urn:ietf:params:jmap:core", "urn:ietf:params:jmap:mail"], "methodCalls": calls})
        .to_string()
        .into_bytes()
}

/// [`api_body`] with the submission capability too (Identity/get, EmailSubmission/set);
/// asked only by requests that use it, as a server without it refuses the capability.
pub fn api_body_submission(calls: Value) -> Vec<u8> {
    json!({"using": ["urn:ietf:params:jmap:core", "urn:ietf:params:jmap:mail",
                     "urn:ietf:params:jmap:submission"], "methodCalls": calls})
    .to_string()
    .into_bytes()
}

/// The method responses of an API response; an HTTP refusal or any method error is the
/// error.
pub fn responses(r: Reply) -> Result<Vec<Value>, Error> {
    let v: Value = serde_json::from_slice(&r.body)
        .map_err(|_| Error::Breach(format!("HTTP {}: not JSON", r.status)))?;
    if r.status != 200 {
        return Err(Error::refused(
            r.status,
            v["type"].as_str().unwrap_or("http"),
            &v.to_string(),
        ));
    }
    let responses = v["methodResponses"]
        .as_array()
        .cloned()
        .ok_or_else(|| Error::Breach("no methodResponses".into()))?;
    if let Some(e) = responses.iter().find(|r| r[0] == "error") {
        return Err(Error::refused(
            0,
            e[1]["type"].as_str().unwrap_or("error"),
            &e.to_string(),
        ));
    }
    Ok(responses)
}

/// The id of the inbox in a Mailbox/get response's arguments.
pub fn inbox(mailbox_get: &Value) -> Option<String> {
    mailbox_get["list"]
        .as_array()?
        .iter()
        .find(|m| m["role"] == "inbox")?["id"]
        .as_str()
        .map(str::to_string)
}

/// The id of the mailbox with `role` in a Mailbox/get response's arguments.
pub fn with_role(mailbox_get: &Value, role: &str) -> Option<String> {
    mailbox_get["list"]
        .as_array()?
        .iter()
        .find(|m| m["role"] == role)?["id"]
        .as_str()
        .map(str::to_string)
}

/// Where messages are moved to: the archive, else the first mailbox that is not the
/// inbox (in the server's order).
pub fn move_target(mailbox_get: &Value) -> Option<String> {
    with_role(mailbox_get, "archive").or_else(|| {
        mailbox_get["list"]
            .as_array()?
            .iter()
            .find(|m| m["role"] != "inbox")?["id"]
            .as_str()
            .map(str::to_string)
    })
}

/// A URI template with its variables filled in (RFC 6570 simple expansion: every
/// character but the unreserved ones percent-encoded).
pub fn fill(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = template.to_string();
    for (name, value) in vars {
        let mut enc = String::new();
        for b in value.bytes() {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                enc.push(b as char);
            } else {
                enc.push_str(&format!("%{b:02X}"));
            }
        }
        out = out.replace(&format!("{{{name}}}"), &enc);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, body: &str, location: Option<&str>) -> Reply {
        Reply {
            status,
            body: body.as_bytes().to_vec(),
            location: location.map(str::to_string),
            wire: 0,
        }
    }

    #[test]
    fn the_session_resource_is_followed_and_read() {
        let h = "127.0.0.1:8080";
        let r = session_step(false, h, "/.well-known/jmap", reply(301, "", Some("/jmap")));
        assert!(matches!(r, Ok(Found::Redirect(p)) if p == "/jmap"));
        let r = session_step(false, h, "/", reply(302, "", Some("http://elsewhere/jmap")));
        assert!(matches!(r, Err(Error::Refused { status: 302, .. })));
        let session = json!({
            "primaryAccounts": {"urn:ietf:params:jmap:mail": "a1"},
            "apiUrl": "/jmap/",
            "downloadUrl": "http://127.0.0.1:8080/jmap/download/{accountId}/{blobId}/{name}?accept={type}",
            "eventSourceUrl": "http://other:8080/events",
            "capabilities": {"urn:ietf:params:jmap:core": {"maxObjectsInGet": 500}},
        });
        let r = session_step(false, h, "/jmap", reply(200, &session.to_string(), None));
        let Ok(Found::Session(v)) = r else {
            panic!("not read")
        };
        let u = urls(&v, false, h, "/jmap").unwrap();
        assert_eq!(u.api, "/jmap/");
        assert_eq!(u.event_source, None);
        assert_eq!(u.max_objects, 500);
        let d = fill(
            u.download.as_deref().unwrap(),
            &[
                ("accountId", "a1"),
                ("blobId", "b7-1"),
                ("name", "m.eml"),
                ("type", "message/rfc822"),
            ],
        );
        assert_eq!(d, "/jmap/download/a1/b7-1/m.eml?accept=message%2Frfc822");
    }

    #[test]
    fn method_errors_and_http_refusals_are_errors() {
        let ok = r#"{"methodResponses":[["Email/get",{"list":[]},"g"]]}"#;
        assert_eq!(responses(reply(200, ok, None)).unwrap().len(), 1);
        let e = r#"{"methodResponses":[["error",{"type":"cannotCalculateChanges"},"c"]]}"#;
        assert!(responses(reply(200, e, None))
            .unwrap_err()
            .is_method_error("cannotCalculateChanges"));
        let p = r#"{"type":"urn:ietf:params:jmap:error:notRequest","status":400}"#;
        assert!(matches!(
            responses(reply(400, p, None)),
            Err(Error::Refused { status: 400, .. })
        ));
        assert!(matches!(
            responses(reply(200, "<html>", None)),
            Err(Error::Breach(_))
        ));
        let mb = json!({"list": [{"id": "m1", "role": null}, {"id": "m2", "role": "inbox"}]});
        assert_eq!(inbox(&mb).as_deref(), Some("m2"));
        assert_eq!(move_target(&mb).as_deref(), Some("m1"));
        let mb = json!({"list": [{"id": "m1", "role": "inbox"}, {"id": "m2", "role": null},
                                 {"id": "m3", "role": "archive"}]});
        assert_eq!(move_target(&mb).as_deref(), Some("m3"));
        assert_eq!(
            move_target(&json!({"list": [{"id": "m1", "role": "inbox"}]})),
            None
        );
    }
}
