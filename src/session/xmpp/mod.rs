//! The XMPP driver (RFC 6120/6121): each session logs one account in (its setup, every
//! step a phase) and stays logged in; a unit of work is one stamped message to another
//! session of the run. Every session also reads: a stamped message that arrives is a
//! delivery, timed from its send on the run's one clock (sender and recipient live in this
//! process, so there is no clock skew) and entered in the run's [`ledger::Ledger`].
//!
//! Outcome of a unit: accepted = the stanza was written (XMPP does not acknowledge a
//! message; its arrival is what the arrival phase and the ledger measure); rejected =
//! the server refused the session's login (a SASL failure, a registration refused), as a
//! refused login is in every command; failed = the login or the stream broke.

pub mod errors;
mod kinds;
pub mod ledger;
pub(crate) mod login;
pub mod phase;
mod reader;
mod refused;
pub mod settle;
mod sm;

pub use kinds::{Account, Gate, Mix, RosterMode, Sasl, Traffic};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::Rng;
use tokio::sync::Mutex;

use super::{Endpoint, Failure};
use crate::engine::{Driver, Outcome, UnitReport};
use crate::metrics::{Clock, ErrorKey, ErrorKind, Phase, Recorder};
use crate::proto::xmpp::{self, Element, Frame, Framer};
use crate::transport::{ReadHalf, WriteHalf};
use ledger::{Arrival, Ledger};

/// Largest stanza read, and deepest nesting: a hostile server's 64 MiB stanza or 10 000
/// nested elements end the session, they are never buffered or parsed.
pub const MAX_STANZA: usize = 256 * 1024;
pub const MAX_DEPTH: usize = 64;
/// The namespace of spate's stamp on every stanza it sends.
pub const STAMP_NS: &str = "urn:x-spate:stamp:0";

/// XMPP over WebSocket (RFC 7395): where, and which of the sessions go there.
#[derive(Debug, Clone)]
pub struct WebSocket {
    pub endpoint: Endpoint,
    /// The upgrade request's Host header and path.
    pub host: String,
    pub path: String,
    /// The share of the sessions (percent), spread evenly over them.
    pub percent: u32,
}

impl WebSocket {
    /// The phase a delivery to session `id` is also timed in when the run mixes TCP and
    /// WebSocket sessions (none when every session goes one way).
    pub fn arrival_phase(&self, id: usize) -> Option<Phase> {
        if !(1..100).contains(&self.percent) {
            return None;
        }
        Some(match self.carries(id) {
            true => phase::WS_ARRIVAL,
            false => phase::TCP_ARRIVAL,
        })
    }

    /// Whether session `id` goes over WebSocket: of every 100 sessions in a row,
    /// `percent` do, evenly spread.
    pub fn carries(&self, id: usize) -> bool {
        let (p, i) = (u64::from(self.percent.min(100)), id as u64);
        (i + 1) * p / 100 > i * p / 100
    }
}

/// What every session of a run shares.
pub struct Settings {
    pub endpoint: Endpoint,
    /// Sessions over WebSocket, and where (none: every session over TCP).
    pub websocket: Option<WebSocket>,
    /// The server's domain (the `to` of the stream header).
    pub domain: String,
    pub accounts: Vec<Account>,
    /// Sessions of the run (each logs in as accounts[id]).
    pub sessions: usize,
    pub sasl: Sasl,
    /// What to do with the roster after binding.
    pub roster: RosterMode,
    /// --roster all: subscriptions asked for and not answered yet, over the run (the
    /// ledger counts the answers).
    pub subs_pending: AtomicUsize,
    /// Create each account by in-band registration before logging in.
    pub register: bool,
    /// Enable XEP-0198 stream management when the server offers it (see [`sm`]).
    pub stream_management: bool,
    /// Logins per second over the run's sessions (none: all at once).
    pub login_rate: Option<f64>,
    /// Recipients in turn (the next session's) rather than at random.
    pub round_robin: bool,
    /// A message's `<body>` element (of --size bytes), built once.
    pub body: String,
    /// What the units send.
    pub mix: Mix,
    /// --raw FILE: stanza templates, taken in turn.
    pub raw: Vec<String>,
    /// How long sessions keep reading after the last unit for deliveries still on the way.
    pub wait: Duration,
    /// `--settle MAX`: after the logins, wait (at most MAX) until what they set off has
    /// passed before the traffic starts (see [`settle`]).
    pub settle: Option<Duration>,
    /// Multicast: recipients per message (drawn from the range), and the service's JID.
    pub addresses: (u32, u32),
    pub multicast_service: String,
    pub run_id: String,
    pub gate: Gate,
    /// Counts the sessions done sending.
    pub finishing: Gate,
    /// Which sessions are logged in now.
    pub online: Vec<AtomicBool>,
    /// Sessions that logged in at least once, and sessions whose login the server refused
    /// (those do not try again: see [`Session::refused_unit`]).
    pub logged_in: AtomicUsize,
    pub refused: AtomicUsize,
    /// The run ends by its count (rather than by its duration alone).
    pub counted: bool,
    /// Set when the run is ending (its duration passed, or it was stopped): read only, so
    /// that no session waits past the run's end for a back-off or for the others.
    pub stop: Arc<AtomicBool>,
    pub ledger: Arc<Ledger>,
    pub recorder: Arc<Recorder>,
    pub clock: Clock,
}

impl Settings {
    /// One session's settings, for a probe that logs one account in by itself (`spate
    /// ping`): no traffic, no roster, no registration.
    pub fn single(endpoint: Endpoint, domain: String, account: Account, sasl: Sasl) -> Settings {
        Settings {
            endpoint,
            websocket: None,
            domain,
            accounts: vec![account],
            sessions: 1,
            sasl,
            roster: RosterMode::Off,
            register: false,
            stream_management: false,
            login_rate: None,
            round_robin: false,
            body: String::new(),
            mix: Mix::only(Traffic::Message),
            raw: Vec::new(),
            wait: Duration::ZERO,
            settle: None,
            addresses: (1, 1),
            multicast_service: String::new(),
            run_id: String::new(),
            gate: Gate::default(),
            finishing: Gate::default(),
            online: vec![AtomicBool::new(false)],
            logged_in: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            counted: true,
            stop: Arc::new(AtomicBool::new(false)),
            subs_pending: AtomicUsize::new(0),
            ledger: Arc::new(Ledger::default()),
            recorder: Arc::new(Recorder::new(1)),
            clock: Clock::new(),
        }
    }
}

/// One XMPP session.
pub struct Session {
    id: usize,
    s: Arc<Settings>,
    rng: SmallRng,
    writer: Option<Arc<Mutex<WriteHalf>>>,
    reader: Option<tokio::task::JoinHandle<()>>,
    /// The stream's XEP-0198 counts, when it enabled stream management.
    sm: Option<Arc<sm::Sm>>,
    /// The stream is up (the reader clears it when the server ends or breaks it).
    alive: Arc<AtomicBool>,
    /// The session is closing its stream: what the server does next is not an error.
    closing: Arc<AtomicBool>,
    stanza: String,
    /// --roster all: the bare JIDs (lowercase) asked for a subscription and not answered.
    asked: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// --raw IQs written and waiting for their reply, by id.
    replies: Replies,
    /// After a failed login again: no new try before this time, and the back-off that
    /// set it (see [`Session::reconnect`]).
    retry: Option<(tokio::time::Instant, Duration)>,
    /// The session logged in once; the server refused its login (it does not try again).
    ever_online: bool,
    refused: bool,
    /// Where the round robin over recipients goes on (u32: beside the flags above it
    /// fits the word a usize took; a waiting session's size is held to 4 KiB).
    next_rr: u32,
}

/// IQs waiting for their reply, by id: the reader hands each reply over.
type Replies =
    Arc<std::sync::Mutex<std::collections::HashMap<String, tokio::sync::oneshot::Sender<Element>>>>;

impl Session {
    pub fn new(id: usize, s: Arc<Settings>, rng: SmallRng) -> Session {
        Session {
            id,
            s,
            rng,
            writer: None,
            reader: None,
            sm: None,
            alive: Arc::new(AtomicBool::new(false)),
            closing: Arc::new(AtomicBool::new(false)),
            next_rr: (id + 1) as u32,
            stanza: String::new(),
            asked: Arc::default(),
            replies: Arc::default(),
            retry: None,
            ever_online: false,
            refused: false,
        }
    }

    /// Puts a logged-in stream to work: its reader task, and its writer for the units.
    fn online(&mut self, l: login::LoggedIn) {
        let (rd, wr) = l.conn.split();
        let writer = Arc::new(Mutex::new(wr));
        if l.resumed.is_none() {
            // A stream not resumed: what the dead one's server had not acknowledged is
            // in doubt now.
            if let Some(old) = self.sm.take() {
                old.died(&self.s.ledger);
            }
            self.sm = l.sm.then(|| {
                self.s.ledger.stream_management(1, 0, 0);
                Arc::new(sm::Sm::new(l.sm_id.clone()))
            });
        }
        self.alive.store(true, Ordering::SeqCst);
        self.s.online[self.id].store(true, Ordering::SeqCst);
        if !self.ever_online {
            self.ever_online = true;
            self.s.logged_in.fetch_add(1, Ordering::SeqCst);
        }
        let reader = reader::Reader {
            id: self.id,
            s: self.s.clone(),
            writer: writer.clone(),
            alive: self.alive.clone(),
            closing: self.closing.clone(),
            asked: self.asked.clone(),
            replies: self.replies.clone(),
            sm: self.sm.clone(),
        };
        self.reader = Some(tokio::spawn(reader.run(rd, l.framer)));
        self.writer = Some(writer);
    }

    /// The session is not logged in (its login failed, or the server ended its stream):
    /// logs in again at once, as a client would; after a login that failed (broke, or
    /// was refused for now: `temporary-auth-failure`), only once a back-off has passed
    /// (100 ms, doubling up to 30 s), which this unit waits for, so that a server that
    /// cannot take logins is not hammered with them and a session that cannot log in
    /// does not spin through units; the wait ends with the run. In a run bounded by its
    /// count there is no back-off: each unit is one login attempt, as each of spate smtp's
    /// units is one connection, so that `-n 40` against a server whose logins break ends
    /// after 40 attempts instead of waiting out 40 back-offs (16 minutes). A login the
    /// server refused for good is not tried again (see [`Session::refused_unit`]). The
    /// login's phases and errors are this unit's; a reconnection is counted when it is
    /// tried. The unit's outcome when it did not log in.
    async fn reconnect(&mut self, report: &mut UnitReport) -> Option<Outcome> {
        if let Some((at, _)) = self.retry.filter(|_| !self.s.counted) {
            self.until(at).await;
            if self.s.stop.load(Ordering::SeqCst) {
                // The run ended during the back-off: no login now that it would not use.
                failure(
                    phase::SEND,
                    ErrorKind::CLOSED,
                    "the session is not logged in",
                )
                .record(report);
                return Some(Outcome::Failed);
            }
        }
        if let Some(r) = self.reader.take() {
            // Already ended (that is how the stream was found dead).
            r.abort();
        }
        report.counters.reconnections += 1;
        // Boxed: a login's state is large and lives only while it logs in; inline, it
        // would be part of every waiting session's future (1.9 KiB each).
        let resume = self.sm.as_ref().and_then(|s| s.resumption());
        let login = login::login_or_resume(&self.s, self.id, &mut self.rng, report, resume);
        match Box::pin(login).await {
            Ok(mut l) => {
                if let (Some(h), Some(sm)) = (l.resumed, &self.sm) {
                    // What the server had not handled is written again, before anything
                    // else (the reader's answers come after): the queue keeps the wire's
                    // order.
                    let again = sm.resumed(h, &self.s.ledger);
                    // Written on the wire again: stanzas out, as any other.
                    report
                        .counters
                        .count(phase::STANZAS_OUT, again.len() as u64);
                    report.counters.bytes += again.iter().map(|b| b.len() as u64).sum::<u64>();
                    if !again.is_empty() {
                        let mut bytes = again.concat();
                        bytes.extend_from_slice(sm::REQUEST.as_bytes());
                        let text = String::from_utf8_lossy(&bytes);
                        let _ = match l.conn.is_websocket() {
                            true => Box::pin(ws_send_elements(&mut l.conn, &text)).await,
                            false => l.conn.send(text.as_bytes()).await,
                        };
                    }
                }
                // The roster lives on the server: a --roster all run subscribed already.
                self.online(l);
                self.retry = None;
                None
            }
            Err(f) => Some(self.login_failed(f, report)),
        }
    }

    /// Waits for this session's turn under `--login-rate`.
    async fn pace(&self) {
        if let Some(rate) = self.s.login_rate.filter(|r| *r > 0.0) {
            let at = self.s.clock.origin() + Duration::from_secs_f64(self.id as f64 / rate);
            tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
        }
    }

    /// A recipient for the next message: another session that is logged in.
    fn recipient(&mut self) -> Option<usize> {
        let n = self.s.sessions;
        let ok = |i: usize| i != self.id && self.s.online[i].load(Ordering::Relaxed);
        if !self.s.round_robin {
            for _ in 0..8 {
                let i = self.rng.random_range(0..n);
                if ok(i) {
                    return Some(i);
                }
            }
        }
        for k in 0..n {
            let i = (self.next_rr as usize + k) % n;
            if ok(i) {
                self.next_rr = (i + 1) as u32;
                return Some(i);
            }
        }
        None
    }

    /// The stamp every stanza carries: the run, the sequence, the sending session and the
    /// send time on the run clock.
    fn stamp(&mut self, kind: Traffic, seq: u64, t_us: u64) {
        use std::fmt::Write as _;
        let _ = write!(
            self.stanza,
            "<stamp xmlns='{STAMP_NS}' run='{}' seq='{seq}' k='{}' from='{}' t='{t_us}'/>",
            self.s.run_id,
            kind.letter(),
            self.id
        );
    }

    /// The JID of session `i`.
    fn jid(&self, i: usize) -> &str {
        &self.s.accounts[i % self.s.accounts.len()].jid
    }

    /// Builds unit `seq`'s stanza; returns how many recipients it is for (0: none can
    /// get it, nobody else is logged in).
    fn build(&mut self, kind: Traffic, seq: u64, t_us: u64) -> u32 {
        use std::fmt::Write as _;
        self.stanza.clear();
        match kind {
            Traffic::Message => {
                let Some(to) = self.recipient() else { return 0 };
                let s = &*self.s;
                let out = &mut self.stanza;
                // An id, so that an error bounce names the message even when the server
                // does not return its payload (RFC 6120 §8.3.1 leaves that optional).
                let _ = write!(out, "<message type='chat' id='{ID_PREFIX}{seq}' to='");
                xmpp::escape(&s.accounts[to % s.accounts.len()].jid, out);
                out.push_str("'>");
                out.push_str(&s.body);
                self.stamp(kind, seq, t_us);
                self.stanza.push_str("</message>");
                1
            }
            Traffic::Multicast => self.multicast(seq, t_us),
            Traffic::Raw => {
                let template = seq as usize % self.s.raw.len();
                let to = if self.s.raw[template].contains("{to}") {
                    let Some(i) = self.recipient() else { return 0 };
                    Some(i)
                } else {
                    None
                };
                let mut out = std::mem::take(&mut self.stanza);
                fill_template(&self.s.raw[template], &mut out, |k, out| match k {
                    "to" => xmpp::escape(to.map_or("", |i| self.jid(i)), out),
                    "from" => xmpp::escape(self.jid(self.id), out),
                    "domain" => xmpp::escape(&self.s.domain, out),
                    "id" => out.push_str(&raw_id(seq)),
                    "seq" => {
                        use std::fmt::Write as _;
                        let _ = write!(out, "{seq}");
                    }
                    _ => {}
                });
                self.stanza = out;
                1
            }
            Traffic::Presence => {
                let others = (0..self.s.sessions)
                    .filter(|&i| i != self.id && self.s.online[i].load(Ordering::Relaxed))
                    .count() as u32;
                self.stanza.push_str("<presence><status>spate</status>");
                self.stamp(kind, seq, t_us);
                self.stanza.push_str("</presence>");
                others
            }
        }
    }

    /// A XEP-0033 message to distinct logged-in sessions other than this one, addressed
    /// as they are picked.
    fn multicast(&mut self, seq: u64, t_us: u64) -> u32 {
        use std::fmt::Write as _;
        let (lo, hi) = self.s.addresses;
        let want = if hi > lo {
            self.rng.random_range(lo..=hi)
        } else {
            lo
        };
        let n = self.s.sessions;
        let start = self.rng.random_range(0..n);
        let s = &*self.s;
        let out = &mut self.stanza;
        let _ = write!(out, "<message id='{ID_PREFIX}{seq}' to='");
        xmpp::escape(&s.multicast_service, out);
        out.push_str("'><addresses xmlns='http://jabber.org/protocol/address'>");
        let mut picked = 0;
        for i in (0..n).map(|k| (start + k) % n) {
            if picked == want {
                break;
            }
            if i != self.id && s.online[i].load(Ordering::Relaxed) {
                out.push_str("<address type='to' jid='");
                xmpp::escape(&s.accounts[i % s.accounts.len()].jid, out);
                out.push_str("'/>");
                picked += 1;
            }
        }
        if picked == 0 {
            return 0;
        }
        out.push_str("</addresses>");
        out.push_str(&s.body);
        self.stamp(Traffic::Multicast, seq, t_us);
        self.stanza.push_str("</message>");
        picked
    }
}

/// What the ids of the run's stanzas start with; the sequence number follows.
const ID_PREFIX: &str = "spate-";

/// The id of raw stanza `seq` (its `{id}`, and the key its IQ reply is matched by).
fn raw_id(seq: u64) -> String {
    format!("{ID_PREFIX}{seq}")
}

/// A message's `<body>` of `size` bytes, built once for the run.
pub fn body_element(size: usize) -> String {
    let mut b = String::with_capacity(size + 13);
    b.push_str("<body>");
    b.extend(std::iter::repeat_n('x', size));
    b.push_str("</body>");
    b
}

/// Copies `template` into `out`, each `{name}` replaced by what `fill` writes for it
/// (an unknown name is kept as it is).
pub fn fill_template(template: &str, out: &mut String, mut fill: impl FnMut(&str, &mut String)) {
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) if PLACEHOLDERS.contains(&&after[..close]) => {
                fill(&after[..close], out);
                rest = &after[close + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
}

/// The placeholders of a --raw template.
pub const PLACEHOLDERS: &[&str] = &["to", "from", "domain", "id", "seq"];

impl Session {
    /// A raw IQ's reply: a result is accepted, an error rejected with its condition;
    /// none within --timeout fails the unit.
    async fn reply(
        &mut self,
        rx: tokio::sync::oneshot::Receiver<Element>,
        seq: u64,
        t: u64,
        report: &mut UnitReport,
    ) -> Outcome {
        match tokio::time::timeout(self.s.endpoint.timeout, rx).await {
            Ok(Ok(e)) if e.attr("type") == Some("result") => {
                report.timed(phase::REPLY, t);
                report.done();
                Outcome::Accepted
            }
            Ok(Ok(e)) => {
                report.timed(phase::REPLY, t);
                let cond = e.child("error").map(login::condition).unwrap_or_default();
                let mut f = login::stated(phase::REPLY, errors::STANZA, &cond, &e);
                f.fatal = false;
                f.record(report);
                Outcome::Rejected
            }
            Ok(Err(_)) => {
                failure(
                    phase::REPLY,
                    ErrorKind::CLOSED,
                    "the stream ended before the reply",
                )
                .record(report);
                Outcome::Failed
            }
            Err(_) => {
                if let Ok(mut r) = self.replies.lock() {
                    r.remove(&raw_id(seq));
                }
                let text = format!("no reply within {:.0?}", self.s.endpoint.timeout);
                let mut f = failure(phase::REPLY, ErrorKind::TIMEOUT, &text);
                f.fatal = false;
                f.record(report);
                Outcome::Failed
            }
        }
    }

    /// --roster all: asks every contact in `jids` for a subscription (one write) and waits
    /// for their approvals (the subscribe phase); the contacts' readers approve.
    async fn subscribe(&mut self, jids: &[String], report: &mut UnitReport) {
        let Some(writer) = self.writer.clone() else {
            return;
        };
        let mut out = String::with_capacity(jids.len() * 64);
        for j in jids {
            out.push_str("<presence type='subscribe' to='");
            xmpp::escape(j, &mut out);
            out.push_str("'/>");
        }
        let t = report.start(phase::SUBSCRIBE);
        let mut w = writer.lock().await;
        let sent = match w.is_websocket() {
            true => Box::pin(ws_send_elements_half(&mut w, &out)).await,
            false => w.send(out.as_bytes()).await,
        };
        drop(w);
        if let Err(e) = sent {
            Failure::transport(phase::SUBSCRIBE, e).record(report);
            return;
        }
        report.counters.count(phase::STANZAS_OUT, jids.len() as u64);
        let until = tokio::time::Instant::now() + self.s.endpoint.timeout * 4;
        let left = || self.asked.lock().map_or(0, |a| a.len());
        while left() > 0 && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        match left() {
            0 => report.timed_now(phase::SUBSCRIBE, t),
            n => {
                let text = format!(
                    "{n} of {} subscription requests unanswered after {:.0?}",
                    jids.len(),
                    self.s.endpoint.timeout * 4
                );
                failure(phase::SUBSCRIBE, ErrorKind::TIMEOUT, &text).record(report);
            }
        }
    }
}

/// Writes `text` (top-level elements) over WebSocket: one message per element, each
/// declaring its namespaces (RFC 7395). Callers box it, so that a TCP session's future
/// holds none of this path's state.
pub(crate) async fn ws_send_elements(
    conn: &mut crate::transport::Connection,
    text: &str,
) -> Result<(), crate::transport::TransportError> {
    conn.send_messages(&as_bytes(&xmpp::ws_messages(text)))
        .await
}

/// [`ws_send_elements`] on a write half.
pub(crate) async fn ws_send_elements_half(
    w: &mut WriteHalf,
    text: &str,
) -> Result<(), crate::transport::TransportError> {
    w.send_messages(&as_bytes(&xmpp::ws_messages(text))).await
}

/// One element of spate's own over WebSocket (and XEP-0198's request when `request`):
/// no need to look for where they are.
async fn send_stanza_ws(
    w: &mut WriteHalf,
    stanza: &str,
    request: bool,
) -> Result<(), crate::transport::TransportError> {
    let [a, b, c] = xmpp::ws_parts(stanza);
    let messages = [
        [a.as_bytes(), b.as_bytes(), c.as_bytes()],
        [sm::REQUEST.as_bytes(), b"", b""],
    ];
    w.send_messages(&messages[..1 + usize::from(request)]).await
}

fn as_bytes<'a>(messages: &[[&'a str; 3]]) -> Vec<[&'a [u8]; 3]> {
    messages.iter().map(|m| m.map(str::as_bytes)).collect()
}

/// The transport's frame callback over an XMPP framer: the frame's length, with its kind
/// left in `kind` (login and the reader both read this way).
pub(super) fn framing<'a>(
    framer: &'a mut Framer,
    kind: &'a mut Option<Frame>,
) -> impl FnMut(&[u8]) -> Result<Option<usize>, xmpp::FrameError> + 'a {
    move |b| {
        framer.frame(b).map(|f| {
            f.map(|(k, n)| {
                *kind = Some(k);
                n
            })
        })
    }
}

/// How long a unit waits for another session to be logged in before it fails for want of
/// a recipient.
const NOBODY_ONLINE_WAIT: Duration = Duration::from_millis(100);

fn failure(phase: Phase, kind: ErrorKind, text: &str) -> Failure {
    Failure {
        phase,
        kind,
        code: 0,
        detail: None,
        text: text.to_string(),
        sample: text.to_string(),
        fatal: true,
    }
}

impl Driver for Session {
    const WORDS: crate::results::UnitWords = crate::results::UnitWords::new(
        "messages",
        "msg/s",
        "sent",
        &[
            phase::MULTICAST_LAST,
            phase::ARRIVAL,
            phase::BROADCAST_LAST,
            phase::REPLY,
        ],
        false,
    );
    const COUNTERS: &'static [crate::metrics::Counter] = &[
        phase::DELIVERED,
        phase::DUPLICATES,
        phase::STANZAS_IN,
        phase::STANZAS_OUT,
    ];
    const PHASES: &'static [Phase] = &[
        Phase::CONNECT,
        Phase::TLS,
        phase::WEBSOCKET,
        phase::STREAM,
        phase::STARTTLS,
        phase::REGISTER,
        phase::AUTH,
        phase::BIND,
        phase::ROSTER,
        phase::PRESENCE,
        phase::SUBSCRIBE,
        phase::SEND,
        phase::REPLY,
        phase::ARRIVAL,
        phase::TCP_ARRIVAL,
        phase::WS_ARRIVAL,
        phase::MULTICAST,
        phase::MULTICAST_LAST,
        phase::BROADCAST,
        phase::BROADCAST_LAST,
    ];

    async fn setup(&mut self, report: &mut UnitReport) {
        self.pace().await;
        let mut subscribe = Vec::new();
        // Boxed: a login's state is large and lives only while it logs in; inline, it
        // would be part of every waiting session's future (1.9 KiB each).
        match Box::pin(login::login(&self.s, self.id, &mut self.rng, report)).await {
            Ok(l) => {
                if self.s.roster == RosterMode::All {
                    // Counted before the gate opens, so that no session finds the run's
                    // subscriptions all answered while another has not asked yet.
                    let s = &self.s;
                    if l.missing.is_empty() {
                        s.ledger.roster[2].fetch_add(1, Ordering::SeqCst);
                    }
                    s.subs_pending.fetch_add(l.missing.len(), Ordering::SeqCst);
                    subscribe = l
                        .missing
                        .iter()
                        .map(|&j| s.accounts[j % s.accounts.len()].jid.to_ascii_lowercase())
                        .collect();
                    self.asked
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .extend(subscribe.iter().cloned());
                }
                self.online(l);
            }
            Err(f) => {
                // Not a unit: its outcome is the next unit's business.
                let _ = self.login_failed(f, report);
            }
        }
        self.s.gate.tried();
        // No message before every session has tried to log in (outside any phase, and
        // before the first unit, so no response time includes it).
        self.s
            .gate
            .wait(self.s.sessions, Duration::from_secs(600))
            .await;
        if !subscribe.is_empty() {
            self.subscribe(&subscribe, report).await;
        }
        if self.s.roster == RosterMode::All {
            // Traffic starts once every roster is complete (or the wait gave up).
            let until = tokio::time::Instant::now() + self.s.endpoint.timeout * 4;
            while self.s.subs_pending.load(Ordering::SeqCst) > 0
                && tokio::time::Instant::now() < until
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        if let Some(max) = self.s.settle {
            // Part of the setup: the measured window (after_setup) opens after it.
            settle::wait(&self.s, self.id, max).await;
        }
    }

    async fn run_one(&mut self, seq: u64, report: &mut UnitReport) -> Outcome {
        // The rare paths (logging in again, waiting for someone to be online, a raw IQ's
        // reply, a refused session's unit) are boxed: inline, their state would be part
        // of every session's future.
        if self.refused {
            return Box::pin(self.refused_unit(report)).await;
        }
        let down = self.writer.is_none() || !self.alive.load(Ordering::SeqCst);
        if down {
            if let Some(outcome) = Box::pin(self.reconnect(report)).await {
                // The login failed: its error is this unit's.
                return outcome;
            }
        }
        let Some(writer) = self
            .writer
            .clone()
            .filter(|_| self.alive.load(Ordering::SeqCst))
        else {
            let text = match self.writer {
                None => "the session is not logged in",
                Some(_) => "the server ended the stream",
            };
            failure(phase::SEND, ErrorKind::CLOSED, text).record(report);
            return Outcome::Failed;
        };
        let kind = self.s.mix.next();
        let mut recipients = self.build(kind, seq, report.started());
        if recipients == 0 {
            // Nobody else is logged in now (they may be logging in again): wait a little
            // for them rather than spin through units that cannot be sent.
            Box::pin(tokio::time::sleep(NOBODY_ONLINE_WAIT)).await;
            recipients = self.build(kind, seq, report.started());
        }
        if recipients == 0 {
            failure(
                phase::SEND,
                ErrorKind::PROTOCOL,
                "no other session is logged in",
            )
            .record(report);
            return Outcome::Failed;
        }
        // A raw IQ waits for its reply (registered before the write, so the reader
        // cannot miss it); any other raw stanza is done when written.
        let reply = (kind == Traffic::Raw && self.stanza.starts_with("<iq")).then(|| {
            let (tx, rx) = tokio::sync::oneshot::channel();
            let id = raw_id(seq);
            if let Ok(mut r) = self.replies.lock() {
                r.insert(id, tx);
            }
            rx
        });
        let t = report.start(phase::SEND);
        if kind != Traffic::Raw {
            self.s.ledger.sending(seq, kind, recipients);
        }
        let sent = {
            let mut w = writer.lock().await;
            let one = self.stanza.len();
            if let Some(sm) = &self.sm {
                // Under the writer's lock: the queue keeps the wire's order. The request
                // for an acknowledgement goes in the same write.
                sm.sent(
                    (kind != Traffic::Raw).then_some(seq),
                    self.stanza.as_bytes(),
                );
                self.stanza.push_str(sm::REQUEST);
            }
            if !w.is_websocket() {
                w.send(self.stanza.as_bytes()).await
            } else if kind != Traffic::Raw {
                let (stanza, request) = (&self.stanza[..one], self.sm.is_some());
                Box::pin(send_stanza_ws(&mut w, stanza, request)).await
            } else {
                Box::pin(ws_send_elements_half(&mut w, &self.stanza)).await
            }
        };
        if let Err(e) = sent {
            self.s.ledger.not_sent(seq);
            Failure::transport(phase::SEND, e).record(report);
            return Outcome::Failed;
        }
        report.timed_now(phase::SEND, t);
        report.counters.bytes += self.stanza.len() as u64;
        report.counters.count(phase::STANZAS_OUT, 1);
        if let Some(rx) = reply {
            return Box::pin(self.reply(rx, seq, t, report)).await;
        }
        report.done();
        Outcome::Accepted
    }

    async fn finish(&mut self, report: &mut UnitReport) {
        // A stream that died and can be resumed is resumed now, as a client would, even
        // though this session has nothing left to send: the server kept for it what was
        // on its way to it when the stream died, and hands that over on resumption.
        let resumable = self.sm.as_ref().is_some_and(|s| s.resumption().is_some());
        if !self.alive.load(Ordering::SeqCst) && resumable && !self.refused {
            // Boxed: rare, and inline it would be part of every waiting session's future.
            Box::pin(self.reconnect(report)).await;
        }
        // A dead stream left for a resumption that will not come: what its server had not
        // acknowledged is in doubt.
        if !self.alive.load(Ordering::SeqCst) {
            if let Some(sm) = self.sm.take() {
                sm.died(&self.s.ledger);
            }
        }
        // Sessions whose units ran out first stay online (and keep reading) until every
        // session is done sending: a late unit's recipients must still be there.
        self.s.finishing.tried();
        self.s
            .finishing
            .wait(self.s.sessions, self.s.wait + Duration::from_secs(10))
            .await;
        // Every session keeps reading until the run's stanzas have arrived (or --wait has
        // passed), then closes its stream.
        let until = tokio::time::Instant::now() + self.s.wait;
        while self.s.ledger.pending() > 0 && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.closing.store(true, Ordering::SeqCst);
        self.s.online[self.id].store(false, Ordering::SeqCst);
        if let Some(w) = self.writer.take() {
            let mut w = w.lock().await;
            let close = xmpp::stream_close(w.is_websocket());
            let _ = w.send(close.as_bytes()).await;
        }
        if let Some(r) = self.reader.take() {
            // The server answers our close with its own; then the reader ends.
            if tokio::time::timeout(Duration::from_secs(2), r)
                .await
                .is_err()
            {
                // Gone past its deadline: the task is dropped (aborted with the runtime).
            }
        }
    }
}
