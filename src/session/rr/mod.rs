//! `spate rr` sessions: one request, one response per unit of work, over a connection
//! that is kept (keep-alive) or made anew for each request, with TLS and a client
//! identity per connection. The framing is `proto::rr`; what is sent is [`variants`].

pub mod classes;
pub mod identity;
pub mod phase;
pub mod variants;

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use rand::rngs::SmallRng;
use regex::bytes::Regex;
use serde::Serialize;

use self::classes::Classes;
use self::identity::Identity;
use self::variants::{Picker, Requests};
use super::{Endpoint, Failure};
use crate::engine::{Driver, Outcome, UnitReport};
use crate::metrics::{Clock, ErrorKind, Phase};
use crate::proto::rr::{encode_request, Frame, Framer, HttpRequest};
use crate::transport::{Connection, TransportError};

/// How long a connection the server said it closes waits for that close.
const SERVER_CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether requests share connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// A connection carries request after request (until the server closes it).
    KeepAlive,
    /// A new connection (and TLS handshake) for every request.
    PerRequest,
}

/// What every session of a run shares.
pub struct Settings {
    /// Plain TCP: the sessions do TLS themselves, with the connection's identity.
    pub endpoint: Endpoint,
    /// TLS configurations, one per identity, taken in turn per connection; empty: no TLS.
    pub identities: Vec<Identity>,
    pub frame: Frame,
    pub http: HttpRequest,
    pub until: Option<Regex>,
    pub max_response: usize,
    pub policy: Policy,
    pub requests: Requests,
    pub picker: Picker,
    pub expect_status: Option<u16>,
    pub expect: Option<Expect>,
    pub clock: Clock,
    pub stats: Arc<Stats>,
}

/// `--expect REGEX`, whose `{seq}` and `{variant}` (`{n}`) stand for the request's own
/// sequence number and variant: a response that names another request's (out of order,
/// or left over from an earlier one) is a rejection that says so.
#[derive(Debug, Clone)]
pub struct Expect {
    re: Regex,
    seq: bool,
    n: bool,
}

impl Expect {
    /// Compiles `pattern`, the placeholders made capture groups of digits.
    pub fn new(pattern: &str) -> Result<Expect, regex::Error> {
        let mut p = pattern.to_string();
        let seq = p.contains("{seq}");
        let n = p.contains("{variant}") || p.contains("{n}");
        p = p
            .replacen("{seq}", "(?P<spate_seq>[0-9]+)", 1)
            .replace("{seq}", "[0-9]+");
        let named = "(?P<spate_n>[0-9]+)";
        p = match (p.find("{variant}"), p.find("{n}")) {
            (Some(a), Some(b)) if b < a => p.replacen("{n}", named, 1),
            (Some(_), _) => p.replacen("{variant}", named, 1),
            (None, Some(_)) => p.replacen("{n}", named, 1),
            (None, None) => p,
        };
        p = p.replace("{variant}", "[0-9]+").replace("{n}", "[0-9]+");
        Ok(Expect {
            re: Regex::new(&p)?,
            seq,
            n,
        })
    }

    /// None when `body` matches for request (`seq`, `n`); else why not.
    fn check(&self, body: &[u8], seq: u64, n: u64) -> Option<Miss> {
        if !self.seq && !self.n {
            return (!self.re.is_match(body)).then_some(Miss::NoMatch);
        }
        let Some(c) = self.re.captures(body) else {
            return Some(Miss::NoMatch);
        };
        let num = |g: &str| {
            c.name(g)
                .and_then(|m| std::str::from_utf8(m.as_bytes()).ok()?.parse::<u64>().ok())
        };
        for (on, group, want, what) in [
            (self.seq, "spate_seq", seq, "{seq}"),
            (self.n, "spate_n", n, "{variant}"),
        ] {
            match num(group) {
                Some(got) if on && got != want => {
                    return Some(Miss::OtherRequest(format!(
                        "--expect's {what} is {got}, this request's {want} (out of order, or left over from an earlier request)"
                    )))
                }
                _ => {}
            }
        }
        None
    }
}

/// Why a response did not pass `--expect`.
#[derive(Debug, PartialEq, Eq)]
enum Miss {
    NoMatch,
    /// It names another request (how, in words).
    OtherRequest(String),
}

/// What the summary's `extra.rr` counts beyond the engine's counters.
#[derive(Debug)]
pub struct Stats {
    pub handshakes: AtomicU64,
    pub resumed: AtomicU64,
    pub response_bytes: AtomicU64,
    /// Connections the server ended with `Connection: close` (or by closing).
    pub server_closes: AtomicU64,
    /// Requests sent again on a new connection because a kept one had gone stale.
    pub retries: AtomicU64,
    next_identity: AtomicU64,
    pub classes: Classes,
}

impl Stats {
    pub fn new(classes: Vec<String>) -> Stats {
        Stats {
            handshakes: AtomicU64::new(0),
            resumed: AtomicU64::new(0),
            response_bytes: AtomicU64::new(0),
            server_closes: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            next_identity: AtomicU64::new(0),
            classes: Classes::new(classes),
        }
    }
}

/// One session: at most one connection at a time.
pub struct Session {
    id: usize,
    s: Arc<Settings>,
    conn: Option<Connection>,
    /// The identity of `conn` (index into `identities`).
    identity: usize,
    opened: u64,
    rng: SmallRng,
    framer: Framer,
    body: Vec<u8>,
    wire: Vec<u8>,
    /// The request being made: its sequence number and variant.
    current: (u64, u64),
}

impl Session {
    pub fn new(id: usize, s: Arc<Settings>, rng: SmallRng) -> Session {
        let framer = Framer::response(
            s.frame,
            s.max_response,
            s.until.clone(),
            s.frame == Frame::Http && s.http.is_head(),
        );
        Session {
            id,
            s,
            conn: None,
            identity: 0,
            opened: 0,
            rng,
            framer,
            body: Vec::new(),
            wire: Vec::new(),
            current: (0, 0),
        }
    }

    /// A new connection: TCP, then the TLS handshake with the next identity.
    async fn open(&mut self, report: &mut UnitReport) -> Result<(), Failure> {
        let n = self.opened;
        self.opened += 1;
        let mut conn = self.s.endpoint.open(self.id, n, report).await?;
        if !self.s.identities.is_empty() {
            let i = self.s.stats.next_identity.fetch_add(1, Relaxed) as usize;
            self.identity = i % self.s.identities.len();
            let config = self.s.identities[self.identity].config.clone();
            let name = &self.s.identities[self.identity].name;
            self.s
                .endpoint
                .handshake_as(&mut conn, Some(config), report)
                .await
                .map_err(|mut f| {
                    // Which identity the server refused.
                    f.sample = format!("{} (identity {name})", f.sample);
                    f
                })?;
            self.s.stats.handshakes.fetch_add(1, Relaxed);
            if conn.tls_resumed() == Some(true) {
                self.s.stats.resumed.fetch_add(1, Relaxed);
            }
        }
        self.conn = Some(conn);
        Ok(())
    }

    /// The variant of the next request and its class.
    fn draw(&mut self) -> (u64, Option<u8>) {
        let n = self.s.picker.draw(&mut self.rng);
        (n, self.s.requests.get(n).class)
    }

    /// Writes variant `n` as the next request (after the connection is open: its
    /// identity may be part of the request).
    fn build(&mut self, seq: u64, n: u64) {
        self.current = (seq, n);
        let t = self.s.requests.get(n);
        let name = self
            .s
            .identities
            .get(self.identity)
            .map_or("", |i| i.name.as_str());
        t.fill(seq, n, name, &mut self.rng, &mut self.body);
        self.wire.clear();
        // Checked before the run for the longest request a template can make.
        let _ = encode_request(self.s.frame, &self.s.http, &self.body, &mut self.wire);
    }

    /// One request and its response on the current connection.
    async fn exchange(&mut self, report: &mut UnitReport) -> Result<Exchanged, Attempt> {
        let Some(conn) = self.conn.as_mut() else {
            return Err(Attempt::Stale(phase::REQUEST, TransportError::Closed));
        };
        let t = report.start(phase::REQUEST);
        if let Err(e) = conn.send(&self.wire).await {
            return Err(Attempt::Stale(phase::REQUEST, e));
        }
        report.timed_now(phase::REQUEST, t);
        report.counters.bytes += self.wire.len() as u64;
        let _ = report.start(phase::FIRST_BYTE);
        let clock = self.s.clock;
        let mut first = None;
        self.framer.reset();
        let framer = &mut self.framer;
        let read = conn
            .read_frame(self.s.max_response, |b: &[u8]| {
                if first.is_none() && !b.is_empty() {
                    first = Some(clock.end_us(t));
                }
                framer.frame(b)
            })
            .or_close()
            .await;
        let bytes = match read {
            // A whole response, or what came until the server closed: whole when its
            // body runs until the close (HTTP without a length), else cut off.
            Ok(b) if self.framer.at_close(b).is_some() => b,
            Ok(_) => {
                return Err(Attempt::Failed(Failure::transport(
                    Phase::RESPONSE,
                    TransportError::Closed,
                )))
            }
            Err(TransportError::Closed) if first.is_none() => {
                return Err(Attempt::Stale(phase::FIRST_BYTE, TransportError::Closed))
            }
            // TLS 1.3: the server checks the client's certificate after the handshake
            // completed on the client's side, and its refusal comes with the first read:
            // a failed handshake, not a failed response.
            Err(TransportError::Tls(ref t)) if crate::transport::client_certificate_refused(t) => {
                let mut f = Failure::transport(Phase::TLS, read.unwrap_err());
                if let Some(i) = self.s.identities.get(self.identity) {
                    f.sample = format!("{} (identity {})", f.sample, i.name);
                    self.s.stats.handshakes.fetch_sub(1, Relaxed);
                }
                return Err(Attempt::Failed(f));
            }
            Err(e) => {
                let phase = if first.is_some() {
                    Phase::RESPONSE
                } else {
                    phase::FIRST_BYTE
                };
                return Err(Attempt::Failed(Failure::transport(phase, e)));
            }
        };
        report.record(phase::FIRST_BYTE, first.unwrap_or(t).saturating_sub(t));
        report.done();
        self.s
            .stats
            .response_bytes
            .fetch_add(bytes.len() as u64, Relaxed);
        let m = self.framer.message(bytes);
        let (seq, n) = self.current;
        let mut verdict = check(&self.s, &m, seq, n);
        let close = m.close;
        // Bytes after a whole response before the next request went: the server answered
        // more than was asked (a second response?): this request's answer is in doubt, and
        // the connection goes, so the next request is not blamed for them.
        let extra = conn.leftover();
        if extra > 0 && verdict.is_none() {
            let text = "the server sent more than one response: bytes after the response";
            verdict = Some(Failure {
                phase: Phase::RESPONSE,
                kind: ErrorKind::PROTOCOL,
                code: 0,
                detail: None,
                text: text.into(),
                sample: format!("{text} ({extra} bytes)"),
                fatal: false,
            });
        }
        Ok(Exchanged {
            close: close || extra > 0,
            verdict,
        })
    }

    async fn close(&mut self) {
        if let Some(c) = self.conn.take() {
            c.shutdown().await;
        }
    }

    /// The server said it closes the connection: waits (briefly) for its close before
    /// closing this side, so that the server's side is the one that keeps TIME_WAIT.
    /// Once the server's close has come, closing the socket is all that is left: no
    /// shutdown first (its FIN would go to a peer that has gone), no close_notify.
    async fn close_after_server(&mut self) {
        let Some(mut c) = self.conn.take() else {
            return;
        };
        c.set_timeout(SERVER_CLOSE_WAIT);
        let closed = matches!(
            c.read_frame(64, |_: &[u8]| Ok::<_, std::convert::Infallible>(None))
                .await,
            Err(TransportError::Closed)
        );
        if !closed {
            c.shutdown().await;
        }
    }

    async fn unit(
        &mut self,
        seq: u64,
        n: u64,
        report: &mut UnitReport,
    ) -> Result<Outcome, Failure> {
        let reused = self.conn.is_some();
        if !reused {
            self.open(report).await?;
        }
        self.build(seq, n);
        let mark = report.timings.len();
        let mut done = self.exchange(report).await;
        if reused {
            if let Err(Attempt::Stale(..)) = &done {
                // The server closed a kept connection between requests: try once anew
                // (the stale attempt's timings are not the request's).
                self.s.stats.retries.fetch_add(1, Relaxed);
                report.timings.truncate(mark);
                self.conn = None;
                self.open(report).await?;
                self.build(seq, n);
                done = self.exchange(report).await;
            }
        }
        let ex = match done {
            Ok(ex) => ex,
            Err(Attempt::Stale(phase, e)) => return Err(Failure::transport(phase, e)),
            Err(Attempt::Failed(f)) => return Err(f),
        };
        if ex.close {
            self.s.stats.server_closes.fetch_add(1, Relaxed);
        }
        if ex.close {
            Box::pin(self.close_after_server()).await;
        } else if self.s.policy == Policy::PerRequest {
            self.close().await;
        }
        match ex.verdict {
            None => Ok(Outcome::Accepted),
            Some(f) => {
                f.record(report);
                Ok(Outcome::Rejected)
            }
        }
    }
}

struct Exchanged {
    close: bool,
    /// A rejection, when the response did not pass the checks.
    verdict: Option<Failure>,
}

enum Attempt {
    /// Nothing came back on the connection (closed before any byte): stale when kept.
    Stale(Phase, TransportError),
    Failed(Failure),
}

/// The gist of an error response's body: an HTML page's <title> or <h1>, else its first
/// non-empty line; at most 160 characters, control characters escaped.
fn what_it_said(body: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(&body[..body.len().min(4096)]);
    let tag = |t: &str| {
        let open = format!("<{t}>");
        let start = text.find(&open)? + open.len();
        let end = text[start..].find('<')? + start;
        Some(text[start..end].trim().to_string())
    };
    let said = tag("title").or_else(|| tag("h1")).or_else(|| {
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(String::from)
    })?;
    (!said.is_empty()).then(|| crate::proto::escaped(&said.chars().take(160).collect::<String>()))
}

/// `--expect-status` and `--expect`: None when the response passes, else its rejection
/// with the response's first line.
fn check(s: &Settings, m: &crate::proto::rr::Message<'_>, seq: u64, n: u64) -> Option<Failure> {
    let bad_status = match (m.status, s.expect_status) {
        (Some(st), Some(want)) => st != want,
        (Some(st), None) => st >= 400,
        (None, _) => false,
    };
    let miss = match (bad_status, &s.expect) {
        (true, _) => None,
        (false, Some(e)) => Some(e.check(&m.body(), seq, n)?),
        (false, None) => return None,
    };
    // Only a rejection pays for its text.
    let first = String::from_utf8_lossy(&m.first_line[..m.first_line.len().min(200)]).into_owned();
    let status = m.status.unwrap_or(0);
    let kind = match status {
        400..=499 => ErrorKind::TRANSIENT,
        500..=599 => ErrorKind::PERMANENT,
        _ => ErrorKind::PROTOCOL,
    };
    let (text, sample) = match miss {
        // What the server said about a refusal (nginx names a client certificate
        // problem in its page's title).
        None => {
            let sample = match what_it_said(&m.body()) {
                Some(said) => format!("{first} — {said}"),
                None => first.clone(),
            };
            (crate::proto::normalize(&first), sample)
        }
        Some(Miss::NoMatch) => (
            format!("no match for --expect: {}", crate::proto::normalize(&first)),
            first,
        ),
        Some(Miss::OtherRequest(how)) => (
            "the answer to another request".to_string(),
            format!("the answer to another request: {how}; the response: {first}"),
        ),
    };
    Some(Failure {
        phase: Phase::RESPONSE,
        kind,
        code: status,
        detail: None,
        text,
        sample,
        fatal: false,
    })
}

impl Driver for Session {
    const WORDS: crate::results::UnitWords =
        crate::results::UnitWords::new("requests", "req/s", "sent", &[], true);
    const PHASES: &'static [Phase] = &[
        Phase::CONNECT,
        Phase::TLS,
        phase::REQUEST,
        phase::FIRST_BYTE,
    ];

    async fn run_one(&mut self, seq: u64, report: &mut UnitReport) -> Outcome {
        let (n, class) = self.draw();
        let outcome = match self.unit(seq, n, report).await {
            Ok(o) => o,
            Err(f) => {
                self.conn = None;
                f.record(report);
                Outcome::Failed
            }
        };
        // Tagged last, with no await before the engine's hook reads it (see Classes).
        self.s.stats.classes.tag(seq, class);
        outcome
    }

    fn idle(&mut self) {
        if let Some(c) = self.conn.as_mut() {
            c.idle();
        }
    }

    async fn finish(&mut self, _report: &mut UnitReport) {
        self.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_shows_what_the_server_said() {
        let nginx = b"<html>\r\n<head><title>400 No required SSL certificate was sent</title></head>\r\n<body>\r\n<center><h1>400 Bad Request</h1></center>\r\n</body>\r\n</html>\r\n";
        assert_eq!(
            what_it_said(nginx).as_deref(),
            Some("400 No required SSL certificate was sent")
        );
        assert_eq!(
            what_it_said(b"\n\n  Deny: expired\nmore").as_deref(),
            Some("Deny: expired")
        );
        assert_eq!(what_it_said(b""), None);
    }

    #[test]
    fn expect_placeholders_name_the_request() {
        let e = Expect::new("^A {seq} v={variant}$").unwrap();
        assert_eq!(e.check(b"A 7 v=3", 7, 3), None);
        assert!(matches!(
            e.check(b"A 6 v=3", 7, 3),
            Some(Miss::OtherRequest(_))
        ));
        assert!(matches!(
            e.check(b"A 7 v=4", 7, 3),
            Some(Miss::OtherRequest(_))
        ));
        assert_eq!(e.check(b"B 7 v=3", 7, 3), Some(Miss::NoMatch));
        // Without placeholders, a plain match.
        let plain = Expect::new("^OK").unwrap();
        assert_eq!(plain.check(b"OK 1", 0, 0), None);
    }
}
