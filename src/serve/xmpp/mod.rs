//! The embedded server's XMPP listeners (RFC 6120/6121, client to server only): enough of
//! a real server for load runs, probes and tests to log in, exchange presence and messages,
//! register accounts and fan out XEP-0033 multicast, with every step counted in
//! [`super::Stats`] so a client's ledger can be reconciled with what the server did.
//!
//! A connection goes through [`stream`] (framing, stream headers and errors), then
//! [`negotiate`] (STARTTLS, SASL, in-band registration, resource binding) and, once bound,
//! [`session`] (the stanza loop). Bound sessions meet in [`route::Routes`]: a registry of
//! who is online, each with a bounded outbound queue; a stanza is serialised once and
//! the same bytes are queued to every recipient.
//!
//! Decisions a user can rely on (also in `spate serve --help`):
//! - Accounts: with `--users-file`, its `jid password` lines (SCRAM-SHA-256, SCRAM-SHA-1
//!   and PLAIN offered); without one, every JID of the served domains exists and any
//!   password works, so only PLAIN is offered (SCRAM needs a password the server knows).
//!   PLAIN is offered before TLS too: this is a loopback test server.
//! - In-band registration (XEP-0077) adds the account in memory, also next to a users
//!   file (its accounts stay); `conflict` when the JID already has a password.
//! - Roster (`--xmpp-roster shared`, the default): every other account of the domain
//!   (users file and registrations) in one group `spate`, subscription `both`. Presence
//!   goes to every available session of the domain and back to the sender; no presence
//!   probes are sent. With `--xmpp-roster subscriptions`, rosters are built from presence
//!   subscriptions ([`subs`]) and presence goes to the sender's subscribers only.
//! - A message to a bare JID reaches every available resource (priority 0 or more).
//! - A session reading too slowly for its queue is closed with `policy-violation`.
//! - XEP-0033: addresses that are offline, unknown or on other domains get nothing and
//!   the sender no error; more addresses than `--xmpp-multicast-limit` get
//!   `not-acceptable`.

mod accounts;
mod iq;
mod multicast;
mod negotiate;
mod route;
mod sasl;
mod session;
mod stanza;
mod stream;
mod subs;

use super::config::XmppOptions;
use super::conn::Conn;
use super::shared::Shared;

pub(crate) use accounts::Accounts;
pub(crate) use route::Routes;

/// The largest frame a client may send (a stanza, or a stream header), and the deepest
/// nesting inside a stanza: beyond them the stream ends with `policy-violation` before
/// anything more is buffered or parsed.
pub(crate) const MAX_STANZA: usize = 256 * 1024;
pub(crate) const MAX_DEPTH: usize = 64;
/// Bytes queued to one session beyond which it counts as too slow (with the queue's
/// stanza bound, [`XmppOptions::queue`]).
const MAX_QUEUED_BYTES: usize = 8 * 1024 * 1024;

/// What the XMPP listeners share: the served domains, accounts and the online sessions.
pub(crate) struct Hub {
    /// Lowercased; empty means every domain is served.
    domains: Vec<String>,
    options: XmppOptions,
    pub(super) accounts: Accounts,
    pub(super) routes: Routes,
    /// `--xmpp-roster subscriptions`: the rosters; `None` with the shared roster.
    pub(super) rosters: Option<subs::Rosters>,
}

impl Hub {
    pub(crate) fn new(domains: &[String], options: XmppOptions) -> Hub {
        Hub {
            domains: domains.iter().map(|d| d.to_ascii_lowercase()).collect(),
            accounts: Accounts::default(),
            routes: Routes::default(),
            rosters: options.subscriptions.then(subs::Rosters::default),
            options,
        }
    }

    /// Is `domain` (lowercased) one of ours?
    fn serves(&self, domain: &str) -> bool {
        self.domains.is_empty() || self.domains.iter().any(|d| d == domain)
    }

    /// The domain whose multicast service `domain` is (`multicast.example.test`).
    fn multicast_of<'a>(&self, domain: &'a str) -> Option<&'a str> {
        domain
            .strip_prefix("multicast.")
            .filter(|d| !d.is_empty() && self.serves(d))
    }

    /// Who gets `user@domain`'s broadcast presence besides its own resources (local
    /// parts on `domain`): everyone (`None`) with the shared roster, else its subscribers.
    fn audience(&self, local: &str, domain: &str) -> Option<std::collections::HashSet<String>> {
        let r = self.rosters.as_ref()?;
        let mut s = r.subscribers(&format!("{local}@{domain}"), domain);
        s.insert(local.to_string());
        Some(s)
    }

    /// The domain a stream without `to` is for.
    fn default_domain<'a>(&'a self, hostname: &'a str) -> &'a str {
        self.domains.first().map_or(hostname, String::as_str)
    }
}

/// XMPP's state in what every session shares (the server built it).
pub(super) fn hub(sh: &Shared) -> &Hub {
    sh.service()
}

/// Serves one XMPP connection (plain with STARTTLS, or direct TLS already handshaken).
pub(super) async fn run(conn: &mut Conn, sh: &Shared, conn_no: u64) {
    let mut st = stream::Stream::new(conn, sh, conn_no);
    let end = negotiate::serve(&mut st).await;
    st.finish(end);
    if let stream::End::Error(_) = end {
        // The client may still be sending (an oversized stanza): let it read the error.
        conn.linger(std::time::Duration::from_secs(1)).await;
    }
}

/// Serves one XMPP connection over WebSocket (RFC 7395): the HTTP upgrade (the xmpp
/// subprotocol required; any path), then the stream as on TCP with each element a
/// message. A request that is not an upgrade is answered with its HTTP status.
pub(super) async fn run_websocket(conn: &mut Conn, sh: &Shared, conn_no: u64) {
    let deadline = tokio::time::Instant::now() + conn.idle();
    let head = loop {
        let found = conn.take_frame(|b| {
            let end = b.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4);
            match end {
                None if b.len() > 16 * 1024 => Err(()),
                end => Ok(end),
            }
        });
        match found {
            Ok(Some(h)) => break String::from_utf8_lossy(h).into_owned(),
            Ok(None) => {}
            Err(()) => return refuse(conn, 431, "request head too long").await,
        }
        if conn.read_more(deadline).await.is_err() {
            return;
        }
    };
    match crate::transport::websocket::server_answer(&head, "xmpp") {
        Ok(answer) => conn.queue(answer.as_bytes()),
        Err((code, why)) => return refuse(conn, code, &why).await,
    }
    if conn.websocket().is_err() {
        return;
    }
    run(conn, sh, conn_no).await;
}

/// Answers a request that is no WebSocket upgrade with `code` and why, then closes. A 426
/// names the upgrade (RFC 9110 §15.5.22) and the version spoken (RFC 6455 §4.4); a 405
/// the method allowed.
async fn refuse(conn: &mut Conn, code: u16, why: &str) {
    let reason = match code {
        400 => "Bad Request",
        405 => "Method Not Allowed",
        426 => "Upgrade Required",
        431 => "Request Header Fields Too Large",
        _ => "Error",
    };
    let (fields, connection) = match code {
        426 => (
            "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n",
            "Upgrade, close",
        ),
        405 => ("Allow: GET\r\n", "close"),
        _ => ("", "close"),
    };
    conn.queue(
        format!(
            "HTTP/1.1 {code} {reason}\r\n{fields}Content-Type: text/plain\r\n\
             Content-Length: {}\r\nConnection: {connection}\r\n\r\n{why}\n",
            why.len() + 1
        )
        .as_bytes(),
    );
    let _ = conn.flush().await;
}

/// The stream error and close sent to a connection refused for the connection cap.
pub(super) fn refusal() -> String {
    let mut s = crate::proto::xmpp::stream_open_server("localhost", "refused");
    s.push_str(&crate::proto::xmpp::stream_error("resource-constraint"));
    s.push_str(crate::proto::xmpp::STREAM_CLOSE);
    s
}
