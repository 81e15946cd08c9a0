//! Logging an XMPP session in (RFC 6120): stream, STARTTLS, SASL (SCRAM-SHA-256,
//! SCRAM-SHA-1 or PLAIN), resource binding, roster, initial presence; every step a phase.

use rand::rngs::SmallRng;
use rand::Rng;

use super::{RosterMode, Settings, MAX_DEPTH, MAX_STANZA};
use crate::engine::UnitReport;
use crate::metrics::{ErrorKind, Phase};
use crate::proto::sasl::{self, ScramClient, ScramHash};
use crate::proto::xmpp::{self, Element, Frame, Framer};
use crate::session::{Failure, TlsMode};
use crate::transport::Connection;

/// What the stream gave: its header, one element, or its end.
pub(super) enum Got {
    Open,
    /// Keepalive whitespace between stanzas.
    Whitespace,
    Element(Element),
    Close,
}

/// A failure the server stated (a SASL failure, an IQ error, a stream error): the
/// condition is the error class, the stanza the sample.
pub(super) fn stated(phase: Phase, kind: ErrorKind, condition: &str, sample: &Element) -> Failure {
    let mut raw = String::new();
    sample.write(&mut raw);
    raw.truncate(300);
    Failure {
        phase,
        kind,
        code: 0,
        detail: None,
        text: condition.to_string(),
        sample: raw,
        fatal: true,
    }
}

/// A protocol breach of the server's (unexpected element, bad SCRAM answer).
pub(super) fn breach(phase: Phase, what: impl Into<String>) -> Failure {
    Failure::breach(phase, what)
}

/// The condition of an error element: its first child other than `text`.
pub(super) fn condition(e: &Element) -> String {
    e.children
        .iter()
        .map(|c| c.local_name())
        .find(|n| *n != "text")
        .unwrap_or("undefined-condition")
        .to_string()
}

/// Reads the next frame as [`Got`]; a stream error is the failure it states.
pub(super) async fn read(
    conn: &mut Connection,
    framer: &mut Framer,
    phase: Phase,
) -> Result<Got, Failure> {
    let mut kind = None;
    let bytes = conn
        .read_frame(MAX_STANZA, super::framing(framer, &mut kind))
        .await
        .map_err(|e| Failure::transport(phase, e))?;
    match kind {
        Some(Frame::Open) => Ok(Got::Open),
        Some(Frame::Whitespace) => Ok(Got::Whitespace),
        Some(Frame::Close) => Ok(Got::Close),
        Some(Frame::Element) => {
            let e = Element::parse(bytes).map_err(|e| breach(phase, e.to_string()))?;
            if e.local_name() == "error" && e.name.contains(':') {
                return Err(stated(phase, super::errors::STREAM, &condition(&e), &e));
            }
            Ok(Got::Element(e))
        }
        None => Err(breach(phase, "no frame")),
    }
}

/// The next element; the stream's end is a failure of `phase`.
pub(super) async fn element(
    conn: &mut Connection,
    framer: &mut Framer,
    phase: Phase,
) -> Result<Element, Failure> {
    element_where(conn, framer, phase, |_| true).await
}

/// The next element `want` picks, skipping others (and whitespace keepalives), within one
/// timeout for the whole wait: a server that keeps sending something else, or a byte a
/// second, cannot hold a phase open past it. The stream's end is a failure of `phase`.
pub(super) async fn element_where(
    conn: &mut Connection,
    framer: &mut Framer,
    phase: Phase,
    mut want: impl FnMut(&Element) -> bool,
) -> Result<Element, Failure> {
    let timeout = conn.timeout();
    let until = tokio::time::Instant::now() + timeout;
    let got = loop {
        let left = until.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            break Err(Failure {
                kind: ErrorKind::TIMEOUT,
                text: "no answer in time while the server kept sending other data".into(),
                sample: format!(
                    "no answer within {} (--timeout) while the server kept sending other data",
                    crate::units::fmt_duration(timeout)
                ),
                ..breach(phase, "")
            });
        }
        conn.set_timeout(left);
        match read(conn, framer, phase).await {
            Ok(Got::Element(e)) if want(&e) => break Ok(e),
            Ok(Got::Element(_) | Got::Open | Got::Whitespace) => continue,
            Ok(Got::Close) => {
                break Err(Failure {
                    kind: ErrorKind::CLOSED,
                    ..breach(phase, "the server closed the stream")
                })
            }
            // The wait's own deadline, stated as the whole timeout (one class, however
            // much of it the skipped stanzas used).
            Err(f) if f.kind == ErrorKind::TIMEOUT => {
                break Err(Failure::transport(
                    phase,
                    crate::transport::TransportError::Timeout(timeout),
                ))
            }
            Err(f) => break Err(f),
        }
    };
    conn.set_timeout(timeout);
    got
}

async fn send(conn: &mut Connection, phase: Phase, text: &str) -> Result<(), Failure> {
    let sent = match conn.is_websocket() {
        true => Box::pin(super::ws_send_elements(conn, text)).await,
        false => conn.send(text.as_bytes()).await,
    };
    sent.map_err(|e| Failure::transport(phase, e))
}

/// Opens (or reopens) the stream and reads the features, as the `stream` phase.
async fn open_stream(
    s: &Settings,
    conn: &mut Connection,
    framer: &mut Framer,
    report: &mut UnitReport,
) -> Result<Element, Failure> {
    let t = report.start(super::phase::STREAM);
    framer.restart();
    let ws = conn.is_websocket();
    send(
        conn,
        super::phase::STREAM,
        &xmpp::stream_open(&s.domain, ws),
    )
    .await?;
    let features = element(conn, framer, super::phase::STREAM).await?;
    if features.local_name() != "features" {
        return Err(breach(
            super::phase::STREAM,
            format!("expected stream features, got <{}>", features.name),
        ));
    }
    report.timed(super::phase::STREAM, t);
    Ok(features)
}

/// STARTTLS when the plan says so (over `endpoint`); the features of the stream after it.
async fn starttls(
    s: &Settings,
    endpoint: &crate::session::Endpoint,
    conn: &mut Connection,
    framer: &mut Framer,
    features: Element,
    report: &mut UnitReport,
) -> Result<Element, Failure> {
    if endpoint.tls != TlsMode::Starttls {
        return Ok(features);
    }
    if features.child("starttls").is_none() {
        return Err(Failure {
            kind: ErrorKind::UNSUPPORTED,
            ..breach(super::phase::STARTTLS, "the server does not offer STARTTLS")
        });
    }
    let t = report.start(super::phase::STARTTLS);
    send(conn, super::phase::STARTTLS, &xmpp::starttls()).await?;
    let answer = element(conn, framer, super::phase::STARTTLS).await?;
    if answer.local_name() != "proceed" {
        return Err(stated(
            super::phase::STARTTLS,
            ErrorKind::PERMANENT,
            answer.local_name(),
            &answer,
        ));
    }
    report.timed(super::phase::STARTTLS, t);
    endpoint.handshake(conn, report).await?;
    open_stream(s, conn, framer, report).await
}

/// The mechanism to use: the one asked for, or the strongest offered.
fn mechanism(s: &Settings, features: &Element) -> Result<Option<ScramHash>, Failure> {
    let offered: Vec<&str> = features
        .child("mechanisms")
        .map(|m| {
            m.children_named("mechanism")
                .map(|c| c.text.trim())
                .collect()
        })
        .unwrap_or_default();
    let has = |m: &str| offered.iter().any(|o| o.eq_ignore_ascii_case(m));
    let choice = match s.sasl {
        super::Sasl::Auto => [ScramHash::Sha256, ScramHash::Sha1]
            .into_iter()
            .find(|h| has(h.mechanism()))
            .map(Some)
            .or_else(|| has("PLAIN").then_some(None)),
        super::Sasl::ScramSha256 => has("SCRAM-SHA-256").then_some(Some(ScramHash::Sha256)),
        super::Sasl::ScramSha1 => has("SCRAM-SHA-1").then_some(Some(ScramHash::Sha1)),
        super::Sasl::Plain => has("PLAIN").then_some(None),
    };
    choice.ok_or_else(|| {
        breach(
            super::phase::AUTH,
            format!(
                "no usable SASL mechanism (--sasl {}; the server offers {})",
                s.sasl.name(),
                if offered.is_empty() {
                    "none".to_string()
                } else {
                    offered.join(" ")
                }
            ),
        )
    })
}

/// A SASL exchange: PLAIN, or SCRAM with the server's signature checked.
async fn authenticate(
    s: &Settings,
    account: &super::Account,
    conn: &mut Connection,
    framer: &mut Framer,
    features: &Element,
    rng: &mut SmallRng,
    report: &mut UnitReport,
) -> Result<(), Failure> {
    let hash = mechanism(s, features)?;
    let (user, _) = account.jid.split_once('@').unwrap_or((&account.jid, ""));
    let t = report.start(super::phase::AUTH);
    let mut scram = None;
    let first = match hash {
        Some(h) => {
            let nonce: String = (0..24)
                .map(|_| rng.sample(rand::distr::Alphanumeric) as char)
                .collect();
            let c = ScramClient::new(h, user, &account.password, &nonce);
            let first = c.client_first();
            scram = Some(c);
            xmpp::auth(h.mechanism(), &sasl::encode(first.as_bytes()))
        }
        None => {
            let plain = format!("\0{user}\0{}", account.password);
            xmpp::auth("PLAIN", &sasl::encode(plain.as_bytes()))
        }
    };
    send(conn, super::phase::AUTH, &first).await?;
    loop {
        let e = element(conn, framer, super::phase::AUTH).await?;
        let data = sasl::decode(e.text.trim()).unwrap_or_default();
        let data = String::from_utf8_lossy(&data).to_string();
        match (e.local_name(), scram.as_mut()) {
            ("challenge", Some(c)) => {
                let fin = c
                    .client_final(&data)
                    .map_err(|x| breach(super::phase::AUTH, format!("SCRAM failed ({x})")))?;
                send(
                    conn,
                    super::phase::AUTH,
                    &xmpp::response(&sasl::encode(fin.as_bytes())),
                )
                .await?;
            }
            ("success", c) => {
                if let Some(c) = c {
                    c.verify_server_final(&data)
                        .map_err(|x| breach(super::phase::AUTH, format!("SCRAM failed ({x})")))?;
                }
                report.timed(super::phase::AUTH, t);
                return Ok(());
            }
            ("failure", _) => {
                return Err(stated(
                    super::phase::AUTH,
                    super::errors::SASL,
                    &condition(&e),
                    &e,
                ))
            }
            (other, _) => {
                return Err(breach(
                    super::phase::AUTH,
                    format!("unexpected element in SASL: <{other}>"),
                ))
            }
        }
    }
}

/// Creates the account by in-band registration (XEP-0077) before logging in: created,
/// already there (`conflict`) or refused, counted in the ledger; only a refusal fails.
async fn register(
    s: &Settings,
    account: &super::Account,
    conn: &mut Connection,
    framer: &mut Framer,
    report: &mut UnitReport,
) -> Result<(), Failure> {
    use std::sync::atomic::Ordering::Relaxed;
    let (user, _) = account.jid.split_once('@').unwrap_or((&account.jid, ""));
    let mut iq =
        String::from("<iq type='set' id='reg1'><query xmlns='jabber:iq:register'><username>");
    xmpp::escape(user, &mut iq);
    iq.push_str("</username><password>");
    xmpp::escape(&account.password, &mut iq);
    iq.push_str("</password></query></iq>");
    let t = report.start(super::phase::REGISTER);
    send(conn, super::phase::REGISTER, &iq).await?;
    let counts = &s.ledger.registered;
    match iq_result(conn, framer, super::phase::REGISTER, "reg1").await {
        Ok(_) => {
            counts[0].fetch_add(1, Relaxed);
        }
        Err(f) if f.text == "conflict" => {
            counts[1].fetch_add(1, Relaxed);
        }
        Err(f) => {
            counts[2].fetch_add(1, Relaxed);
            return Err(f);
        }
    }
    report.timed(super::phase::REGISTER, t);
    Ok(())
}

/// Waits for the result of IQ `id`; other stanzas that come first are skipped.
pub(super) async fn iq_result(
    conn: &mut Connection,
    framer: &mut Framer,
    phase: Phase,
    id: &str,
) -> Result<Element, Failure> {
    let e = element_where(conn, framer, phase, |e| {
        e.local_name() == "iq" && e.attr("id") == Some(id)
    })
    .await?;
    match e.attr("type") {
        Some("result") => Ok(e),
        _ => {
            let cond = e.child("error").map(condition).unwrap_or_default();
            Err(stated(phase, super::errors::STANZA, &cond, &e))
        }
    }
}

/// Binds a resource (and opens a legacy session when the server requires one); returns
/// the full JID the server assigned.
async fn bind(
    conn: &mut Connection,
    framer: &mut Framer,
    features: &Element,
    resource: &str,
    report: &mut UnitReport,
) -> Result<String, Failure> {
    if features.child("bind").is_none() {
        return Err(breach(
            super::phase::BIND,
            "the server offers no resource binding",
        ));
    }
    let t = report.start(super::phase::BIND);
    send(conn, super::phase::BIND, &xmpp::bind("b1", resource)).await?;
    let r = iq_result(conn, framer, super::phase::BIND, "b1").await?;
    let jid = r
        .child("bind")
        .and_then(|b| b.child("jid"))
        .map(|j| j.text.trim().to_string())
        .ok_or_else(|| breach(super::phase::BIND, "bind result without a JID"))?;
    let legacy = features
        .child("session")
        .is_some_and(|s| s.child("optional").is_none());
    if legacy {
        send(conn, super::phase::BIND, &xmpp::session("s1")).await?;
        iq_result(conn, framer, super::phase::BIND, "s1").await?;
    }
    report.timed(super::phase::BIND, t);
    Ok(jid)
}

/// A logged-in session, ready to be split into its reader and writer.
pub(crate) struct LoggedIn {
    pub conn: Connection,
    pub framer: Framer,
    /// --roster all: the sessions to subscribe to (not in the roster with subscription
    /// both).
    pub missing: Vec<usize>,
    /// The full JID the server bound.
    pub jid: String,
    /// XEP-0198 stream management is enabled on the stream, and the id to resume it
    /// with when the server allows that.
    pub sm: bool,
    pub sm_id: Option<String>,
    /// The stream resumed an earlier one (no bind, roster or presence): the server's
    /// count of that stream's stanzas it handled.
    pub resumed: Option<u64>,
}

impl LoggedIn {
    /// The next element on the stream: the stream's end, or a stream error with its
    /// condition, is a failure of `phase`.
    pub(crate) async fn element(&mut self, phase: Phase) -> Result<Element, Failure> {
        element(&mut self.conn, &mut self.framer, phase).await
    }

    /// `spate ping`: writes `stanza`, a message with id `id` to this session's own JID,
    /// and waits up to `within` for it to come back. Its round trip in µs, from before
    /// the first byte written to the last byte read; None when it was not back in time
    /// (the stream stays usable). A stanza error about it is a failure that is not fatal,
    /// a broken stream or a stream error a fatal one. Other stanzas are skipped; an IQ
    /// request (a server's XEP-0199 ping) is answered, or the server may end the stream.
    pub(crate) async fn echo(
        &mut self,
        stanza: &str,
        id: &str,
        within: std::time::Duration,
    ) -> Result<Option<u64>, Failure> {
        let start = std::time::Instant::now();
        send(&mut self.conn, super::phase::ARRIVAL, stanza).await?;
        let timeout = self.conn.timeout();
        let got = loop {
            let left = within.saturating_sub(start.elapsed());
            if left.is_zero() {
                break Ok(None);
            }
            self.conn.set_timeout(left);
            let e = match self.element(super::phase::ARRIVAL).await {
                Ok(e) => e,
                Err(f) if f.kind == ErrorKind::TIMEOUT => break Ok(None),
                Err(f) => break Err(f),
            };
            match (e.local_name(), e.attr("type")) {
                ("message", _) if e.attr("id") != Some(id) => {}
                ("message", Some("error")) => {
                    let cond = e.child("error").map(condition).unwrap_or_default();
                    let f = stated(super::phase::ARRIVAL, super::errors::STANZA, &cond, &e);
                    break Err(Failure { fatal: false, ..f });
                }
                ("message", _) => break Ok(Some(start.elapsed().as_micros() as u64)),
                ("iq", Some("get" | "set")) => {
                    let (iq, to) = (e.attr("id").unwrap_or(""), e.attr("from").unwrap_or(""));
                    let answer = match e.children.first().and_then(|c| c.ns()) {
                        Some("urn:xmpp:ping") => xmpp::iq_result(iq, to),
                        _ => xmpp::iq_error(iq, to, "cancel", "service-unavailable"),
                    };
                    self.conn.set_timeout(timeout);
                    send(&mut self.conn, super::phase::ARRIVAL, &answer).await?;
                }
                _ => {}
            }
        };
        self.conn.set_timeout(timeout);
        got
    }
}

/// The whole login of session `id` as phases of `report`.
pub(crate) async fn login(
    s: &Settings,
    id: usize,
    rng: &mut SmallRng,
    report: &mut UnitReport,
) -> Result<LoggedIn, Failure> {
    login_or_resume(s, id, rng, report, None).await
}

/// [`login`], or with `resume` (XEP-0198's id and our count of stanzas read) the
/// resumption of the stream that died, when the server still has it: in place of
/// binding, timed as the bind phase. A refused resumption logs in afresh.
pub(crate) async fn login_or_resume(
    s: &Settings,
    id: usize,
    rng: &mut SmallRng,
    report: &mut UnitReport,
    resume: Option<(String, u64)>,
) -> Result<LoggedIn, Failure> {
    let account = &s.accounts[id % s.accounts.len()];
    let ws = s.websocket.as_ref().filter(|w| w.carries(id));
    let endpoint = ws.map_or(&s.endpoint, |w| &w.endpoint);
    let mut conn = endpoint.open(id, 0, report).await?;
    if let Some(w) = ws {
        let t = report.start(super::phase::WEBSOCKET);
        // Boxed: the upgrade's state does not make every session's future larger.
        Box::pin(conn.websocket(&w.host, &w.path, "xmpp"))
            .await
            .map_err(|e| Failure::transport(super::phase::WEBSOCKET, e))?;
        report.timed(super::phase::WEBSOCKET, t);
    }
    let mut framer = Framer::new(MAX_STANZA, MAX_DEPTH).websocket(ws.is_some());
    let features = open_stream(s, &mut conn, &mut framer, report).await?;
    let features = starttls(s, endpoint, &mut conn, &mut framer, features, report).await?;
    if s.register {
        register(s, account, &mut conn, &mut framer, report).await?;
    }
    authenticate(s, account, &mut conn, &mut framer, &features, rng, report).await?;
    let features = open_stream(s, &mut conn, &mut framer, report).await?;
    if let Some((previd, h)) = resume.filter(|_| offers_sm(&features)) {
        let t = report.start(super::phase::BIND);
        let mut ask = String::from("<resume xmlns='urn:xmpp:sm:3' previd='");
        xmpp::escape(&previd, &mut ask);
        ask.push_str(&format!("' h='{h}'/>"));
        send(&mut conn, super::phase::BIND, &ask).await?;
        let e = element_where(&mut conn, &mut framer, super::phase::BIND, |e| {
            matches!(e.local_name(), "resumed" | "failed") && e.ns() == Some(super::sm::NS)
        })
        .await?;
        if e.local_name() == "resumed" {
            report.timed(super::phase::BIND, t);
            let handled = super::sm::h_of(e.attr("h")).unwrap_or(0);
            return Ok(LoggedIn {
                conn,
                framer,
                missing: Vec::new(),
                jid: String::new(),
                sm: true,
                sm_id: Some(previd),
                resumed: Some(handled),
            });
        }
    }
    let jid = bind(
        &mut conn,
        &mut framer,
        &features,
        &format!("spate{id}"),
        report,
    )
    .await?;
    let mut missing = Vec::new();
    if s.roster != RosterMode::Off {
        let t = report.start(super::phase::ROSTER);
        send(&mut conn, super::phase::ROSTER, &xmpp::roster_get("r1")).await?;
        let r = iq_result(&mut conn, &mut framer, super::phase::ROSTER, "r1").await?;
        report.timed(super::phase::ROSTER, t);
        if s.roster == RosterMode::All {
            missing = not_in_roster(s, id, &r);
        }
    }
    // Initial presence; the server sends it back to this resource too (RFC 6121 §4.2.2).
    let t = report.start(super::phase::PRESENCE);
    send(&mut conn, super::phase::PRESENCE, "<presence/>").await?;
    element_where(&mut conn, &mut framer, super::phase::PRESENCE, |e| {
        e.local_name() == "presence" && e.attr("from") == Some(jid.as_str())
    })
    .await?;
    report.timed(super::phase::PRESENCE, t);
    let (sm, sm_id) = match s.stream_management {
        true => enable_sm(&mut conn, &mut framer, &features).await?,
        false => (false, None),
    };
    Ok(LoggedIn {
        conn,
        framer,
        missing,
        jid,
        sm,
        sm_id,
        resumed: None,
    })
}

fn offers_sm(features: &Element) -> bool {
    features
        .children
        .iter()
        .any(|c| c.local_name() == "sm" && c.ns() == Some(super::sm::NS))
}

/// XEP-0198: enables stream management (asking for resumption) when the server offers
/// it; whether it did, and the id to resume with when the server allows it. The stanzas
/// the server sends before `<enabled/>` are not counted (they were sent before it
/// counted), and a `<failed/>` leaves the stream as it was.
async fn enable_sm(
    conn: &mut Connection,
    framer: &mut Framer,
    features: &Element,
) -> Result<(bool, Option<String>), Failure> {
    if !offers_sm(features) {
        return Ok((false, None));
    }
    send(conn, super::phase::BIND, super::sm::ENABLE).await?;
    let e = element_where(conn, framer, super::phase::BIND, |e| {
        matches!(e.local_name(), "enabled" | "failed") && e.ns() == Some(super::sm::NS)
    })
    .await?;
    if e.local_name() != "enabled" {
        return Ok((false, None));
    }
    let resumable = matches!(e.attr("resume"), Some("true" | "1"));
    Ok((true, e.attr("id").filter(|_| resumable).map(str::to_string)))
}

/// The sessions of the run (other than `id`) that a roster result lacks, or holds with a
/// subscription short of both.
fn not_in_roster(s: &Settings, id: usize, result: &Element) -> Vec<usize> {
    let both: std::collections::HashSet<String> = result
        .child("query")
        .map(|q| {
            q.children
                .iter()
                .filter(|i| i.local_name() == "item" && i.attr("subscription") == Some("both"))
                .filter_map(|i| i.attr("jid"))
                .map(str::to_ascii_lowercase)
                .collect()
        })
        .unwrap_or_default();
    (0..s.sessions)
        .filter(|&j| j != id)
        .filter(|&j| !both.contains(&s.accounts[j % s.accounts.len()].jid.to_ascii_lowercase()))
        .collect()
}
