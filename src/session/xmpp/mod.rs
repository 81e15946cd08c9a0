//! The XMPP driver (RFC 6120/6121): each session logs one account in (its setup, every
//! step a phase) and stays logged in; a unit of work is one stamped message to another
//! session of the run. Every session also reads: a stamped message that arrives is a
//! delivery, timed from its send on the run's one clock (sender and recipient live in this
//! process, so there is no clock skew) and entered in the run's [`ledger::Ledger`].
//!
//! Outcome of a unit: accepted = the stanza was written (XMPP does not acknowledge a
//! message; its arrival is what the arrival phase and the ledger measure); failed = the
//! session is not logged in or its stream broke.

pub mod ledger;
mod login;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::Rng;
use serde::Serialize;
use tokio::sync::Mutex;

use super::{Endpoint, Failure};
use crate::engine::{Driver, Outcome, UnitReport};
use crate::metrics::{Clock, ErrorKind, Phase, Recorder};
use crate::proto::xmpp::{self, Element, Frame, Framer};
use crate::transport::{ReadHalf, WriteHalf};
use ledger::{Arrival, Ledger};

/// Largest stanza read, and deepest nesting: a hostile server's 64 MiB stanza or 10 000
/// nested elements end the session, they are never buffered or parsed.
pub const MAX_STANZA: usize = 256 * 1024;
pub const MAX_DEPTH: usize = 64;
/// The namespace of spate's stamp on every stanza it sends.
pub const STAMP_NS: &str = "urn:x-spate:stamp:0";

/// Which SASL mechanism to log in with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sasl {
    /// The strongest offered: SCRAM-SHA-256, then SCRAM-SHA-1, then PLAIN.
    Auto,
    #[value(name = "scram-sha-256")]
    ScramSha256,
    #[value(name = "scram-sha-1")]
    ScramSha1,
    Plain,
}

impl Sasl {
    pub fn name(self) -> &'static str {
        match self {
            Sasl::Auto => "auto",
            Sasl::ScramSha256 => "scram-sha-256",
            Sasl::ScramSha1 => "scram-sha-1",
            Sasl::Plain => "plain",
        }
    }
}

/// An account: a bare JID and its password.
#[derive(Debug, Clone)]
pub struct Account {
    pub jid: String,
    pub password: String,
}

/// Counts the logins of a run, so that no message goes out before every session has
/// tried to log in (a message to a session still logging in would be lost, not slow).
#[derive(Default)]
pub struct Gate {
    tried: AtomicUsize,
    notify: tokio::sync::Notify,
}

impl Gate {
    fn tried(&self) {
        self.tried.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Waits until `sessions` logins were tried, or `limit` passed.
    async fn wait(&self, sessions: usize, limit: Duration) {
        let all = async {
            loop {
                let notified = self.notify.notified();
                if self.tried.load(Ordering::SeqCst) >= sessions {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(limit, all).await;
    }
}

/// What every session of a run shares.
pub struct Settings {
    pub endpoint: Endpoint,
    /// The server's domain (the `to` of the stream header).
    pub domain: String,
    pub accounts: Vec<Account>,
    /// Sessions of the run (each logs in as accounts[id]).
    pub sessions: usize,
    pub sasl: Sasl,
    /// Ask for the roster after binding.
    pub roster: bool,
    /// Logins per second over the run's sessions (none: all at once).
    pub login_rate: Option<f64>,
    /// Recipients in turn (the next session's) rather than at random.
    pub round_robin: bool,
    /// Size of a message body, in bytes.
    pub body: usize,
    pub run_id: String,
    pub gate: Gate,
    /// Which sessions are logged in now.
    pub online: Vec<AtomicBool>,
    pub ledger: Arc<Ledger>,
    pub recorder: Arc<Recorder>,
    pub clock: Clock,
}

/// One XMPP session.
pub struct Session {
    id: usize,
    s: Arc<Settings>,
    rng: SmallRng,
    writer: Option<Arc<Mutex<WriteHalf>>>,
    reader: Option<tokio::task::JoinHandle<()>>,
    /// The stream is up (the reader clears it when the server ends or breaks it).
    alive: Arc<AtomicBool>,
    /// The session is closing its stream: what the server does next is not an error.
    closing: Arc<AtomicBool>,
    next_rr: usize,
    stanza: String,
}

impl Session {
    pub fn new(id: usize, s: Arc<Settings>, rng: SmallRng) -> Session {
        Session {
            id,
            s,
            rng,
            writer: None,
            reader: None,
            alive: Arc::new(AtomicBool::new(false)),
            closing: Arc::new(AtomicBool::new(false)),
            next_rr: id + 1,
            stanza: String::with_capacity(512),
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
            let i = (self.next_rr + k) % n;
            if ok(i) {
                self.next_rr = i + 1;
                return Some(i);
            }
        }
        None
    }

    /// The stamped message `seq` to `to`, sent at `t_us` on the run clock.
    fn message(&mut self, seq: u64, to: &str, t_us: u64) {
        use std::fmt::Write as _;
        let st = &mut self.stanza;
        st.clear();
        st.push_str("<message type='chat' to='");
        xmpp::escape(to, st);
        let _ = write!(
            st,
            "' id='{run}-{seq}'><body>{body}</body><stamp xmlns='{STAMP_NS}' run='{run}' seq='{seq}' t='{t_us}'/></message>",
            run = self.s.run_id,
            body = "x".repeat(self.s.body),
        );
    }
}

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
    const PHASES: &'static [Phase] = &[
        Phase::Connect,
        Phase::Tls,
        Phase::Stream,
        Phase::Starttls,
        Phase::Auth,
        Phase::Bind,
        Phase::Roster,
        Phase::Presence,
        Phase::Send,
        Phase::Arrival,
    ];

    async fn setup(&mut self, report: &mut UnitReport) {
        self.pace().await;
        match login::login(&self.s, self.id, &mut self.rng, report).await {
            Ok(l) => {
                let (rd, wr) = l.conn.split();
                let writer = Arc::new(Mutex::new(wr));
                self.alive.store(true, Ordering::SeqCst);
                self.s.online[self.id].store(true, Ordering::SeqCst);
                let reader = Reader {
                    id: self.id,
                    s: self.s.clone(),
                    writer: writer.clone(),
                    alive: self.alive.clone(),
                    closing: self.closing.clone(),
                };
                self.reader = Some(tokio::spawn(reader.run(rd, l.framer)));
                self.writer = Some(writer);
            }
            Err(f) => f.record(report),
        }
        self.s.gate.tried();
        // No message before every session has tried to log in (outside any phase, and
        // before the first unit, so no response time includes it).
        self.s
            .gate
            .wait(self.s.sessions, Duration::from_secs(600))
            .await;
    }

    async fn run_one(&mut self, seq: u64, report: &mut UnitReport) -> Outcome {
        let Some(writer) = self
            .writer
            .clone()
            .filter(|_| self.alive.load(Ordering::SeqCst))
        else {
            let text = match self.writer {
                None => "the session is not logged in",
                Some(_) => "the server ended the stream",
            };
            failure(Phase::Send, ErrorKind::Closed, text).record(report);
            return Outcome::Failed;
        };
        let Some(to) = self.recipient() else {
            failure(
                Phase::Send,
                ErrorKind::Protocol,
                "no other session is logged in",
            )
            .record(report);
            return Outcome::Failed;
        };
        let t = report.start(Phase::Send);
        let to = self.s.accounts[to % self.s.accounts.len()].jid.clone();
        self.message(seq, &to, report.started());
        self.s.ledger.sending(seq, 1);
        let sent = writer.lock().await.send(self.stanza.as_bytes()).await;
        if let Err(e) = sent {
            self.s.ledger.not_sent(seq);
            Failure::transport(Phase::Send, e).record(report);
            return Outcome::Failed;
        }
        report.timed(Phase::Send, t);
        report.counters.bytes += self.stanza.len() as u64;
        report.done();
        Outcome::Accepted
    }

    async fn finish(&mut self, _report: &mut UnitReport) {
        // Every session keeps reading until the run's messages have arrived (or a little
        // while has passed), then closes its stream.
        let until = tokio::time::Instant::now() + Duration::from_secs(3);
        while self.s.ledger.pending() > 0 && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.closing.store(true, Ordering::SeqCst);
        self.s.online[self.id].store(false, Ordering::SeqCst);
        if let Some(w) = self.writer.take() {
            let mut w = w.lock().await;
            let _ = w.send(xmpp::STREAM_CLOSE.as_bytes()).await;
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

/// A session's receiving side.
struct Reader {
    id: usize,
    s: Arc<Settings>,
    writer: Arc<Mutex<WriteHalf>>,
    alive: Arc<AtomicBool>,
    closing: Arc<AtomicBool>,
}

impl Reader {
    async fn run(self, mut rd: ReadHalf, mut framer: Framer) {
        // Pushed stanzas come when they come: the read waits as long as the run lasts.
        rd.set_timeout(Duration::from_secs(365 * 86_400));
        let end = loop {
            let mut kind = None;
            let got = rd
                .read_frame(MAX_STANZA, |b| {
                    framer.frame(b).map(|f| {
                        f.map(|(k, n)| {
                            kind = Some(k);
                            n
                        })
                    })
                })
                .await;
            let bytes = match got {
                Ok(b) => b,
                Err(e) => break Some(Failure::transport(Phase::Arrival, e)),
            };
            match kind {
                Some(Frame::Element) => {}
                Some(Frame::Close) => {
                    break Some(failure(
                        Phase::Arrival,
                        ErrorKind::Closed,
                        "the server closed the stream",
                    ))
                }
                _ => continue,
            }
            let e = match Element::parse(bytes) {
                Ok(e) => e,
                Err(x) => break Some(login::breach(Phase::Arrival, x.to_string())),
            };
            if let Some(f) = self.stanza(&e).await {
                break Some(f);
            }
        };
        self.alive.store(false, Ordering::SeqCst);
        self.s.online[self.id].store(false, Ordering::SeqCst);
        if let Some(f) = end.filter(|_| !self.closing.load(Ordering::SeqCst)) {
            let (key, sample) = (f.key(), f.sample);
            self.s.recorder.with(self.id, |sh| sh.error(key, || sample));
        }
    }

    /// Handles one incoming stanza; a stream error ends the session.
    async fn stanza(&self, e: &Element) -> Option<Failure> {
        match e.local_name() {
            "message" => self.message(e),
            "iq" if matches!(e.attr("type"), Some("get" | "set")) => {
                // A server's ping (XEP-0199) or any request: answer, or it may drop us.
                let mut reply = String::from("<iq type='result' id='");
                xmpp::escape(e.attr("id").unwrap_or(""), &mut reply);
                if let Some(from) = e.attr("from") {
                    reply.push_str("' to='");
                    xmpp::escape(from, &mut reply);
                }
                reply.push_str("'/>");
                let _ = self.writer.lock().await.send(reply.as_bytes()).await;
            }
            "error" if e.name.contains(':') => {
                return Some(login::stated(
                    Phase::Arrival,
                    ErrorKind::Protocol,
                    &login::condition(e),
                    e,
                ))
            }
            _ => {}
        }
        None
    }

    /// A stamped message of this run is a delivery: timed and entered in the ledger.
    fn message(&self, e: &Element) {
        let now = self.s.clock.now_us();
        let Some(stamp) = e
            .children
            .iter()
            .find(|c| c.local_name() == "stamp" && c.ns() == Some(STAMP_NS))
        else {
            return;
        };
        if stamp.attr("run") != Some(self.s.run_id.as_str()) {
            return;
        }
        let (Some(seq), Some(t)) = (
            stamp.attr("seq").and_then(|v| v.parse::<u64>().ok()),
            stamp.attr("t").and_then(|v| v.parse::<u64>().ok()),
        ) else {
            return;
        };
        let arrival = self.s.ledger.received(seq);
        self.s.recorder.with(self.id, |sh| match arrival {
            Arrival::First => {
                sh.record(Phase::Arrival, now.saturating_sub(t).max(1));
                sh.counters.delivered += 1;
            }
            Arrival::Duplicate => sh.counters.duplicates += 1,
            Arrival::Unknown => {}
        });
    }
}
