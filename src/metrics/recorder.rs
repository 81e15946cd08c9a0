//! The recorder: a few mutex-guarded shards that sessions write into (a thread always uses
//! the same shard, so locks are practically uncontended and held for a few hundred
//! nanoseconds), drained by the aggregator once per interval. Nothing per message is kept
//! beyond the interval except what the sent log must record.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Mutex;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::Phase;

/// Highest latency a histogram tracks: one hour, in microseconds. Larger values saturate.
pub const HIST_MAX_US: u64 = 3_600_000_000;

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 3).expect("static histogram bounds are valid")
}

/// Message and connection counts. Invariant: attempted = accepted + rejected + failed +
/// unfinished. The fields are what every protocol counts; a protocol's own counts
/// (recipients accepted, messages retrieved, stanzas in) are in `own`, by the counters it
/// declares, and are written beside the others as if they were fields.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Counters {
    /// Units whose work was started (or whose connection was attempted for them).
    pub attempted: u64,
    /// Units the server did (a message accepted for at least one recipient).
    pub accepted: u64,
    /// Units the server refused (a 4xx/5xx reply, no recipient accepted).
    pub rejected: u64,
    /// Units lost to transport or protocol failures (refused, reset, timeout, garbage).
    pub failed: u64,
    /// Of `failed`: messages whose end of data went out and whose final reply never
    /// came (a timeout, a reset, a crash): the server may have them. The rest of `failed`
    /// broke before the end of data, which the server cannot have taken.
    #[serde(default)]
    pub indeterminate: u64,
    /// Units of work still running when the run ended (after the grace period, or a
    /// second interrupt): neither accepted nor refused.
    #[serde(default)]
    pub unfinished: u64,
    /// Message bytes written (as on the wire, dot-stuffed); for POP3/IMAP, message bytes
    /// read, so KiB/s means the same thing in every report.
    pub bytes: u64,
    pub connections: u64,
    pub tls_connections: u64,
    /// Of `tls_connections`: handshakes that resumed an earlier session (the rest were
    /// full handshakes).
    #[serde(default)]
    pub tls_resumed: u64,
    /// CPU time (µs) this side spent in its TLS handshakes, failed ones not included.
    #[serde(default)]
    pub tls_cpu_us: u64,
    pub connect_failures: u64,
    /// Connects (made or timed out) whose SYN had to be sent again: the server's accept
    /// queue was full (Linux drops the SYN), or something dropped SYNs; and the time
    /// they spent connecting (µs), most of it waiting for the retransmits.
    #[serde(default)]
    pub connect_retransmits: u64,
    #[serde(default)]
    pub connect_retransmit_us: u64,
    /// Arrivals (open model) that started more than 10 ms after their schedule.
    pub late: u64,
    /// Arrivals dropped because the in-flight cap and the backlog were full.
    pub dropped: u64,
    /// Sessions that logged in again after the server ended a live stream.
    #[serde(default)]
    pub reconnections: u64,
    /// The protocol's own counters.
    #[serde(flatten)]
    pub own: Own,
}

impl Counters {
    /// Counters that hold `own` (at 0) in this order: a run's declared counters, so that
    /// what its shards add up to lists them the same way every time.
    pub fn declared(own: &[Counter]) -> Counters {
        let mut c = Counters::default();
        for &k in own {
            c.own.add(k, 0);
        }
        c
    }

    pub fn add(&mut self, o: &Counters) {
        self.attempted += o.attempted;
        self.accepted += o.accepted;
        self.rejected += o.rejected;
        self.failed += o.failed;
        self.indeterminate += o.indeterminate;
        self.unfinished += o.unfinished;
        self.bytes += o.bytes;
        self.connections += o.connections;
        self.tls_connections += o.tls_connections;
        self.tls_resumed += o.tls_resumed;
        self.tls_cpu_us += o.tls_cpu_us;
        self.connect_failures += o.connect_failures;
        self.connect_retransmits += o.connect_retransmits;
        self.connect_retransmit_us += o.connect_retransmit_us;
        self.late += o.late;
        self.dropped += o.dropped;
        self.reconnections += o.reconnections;
        for (k, v) in o.own.iter() {
            self.own.add(k, v);
        }
    }

    /// All at 0, the protocol's counters kept in their order.
    pub fn zeroed(&self) -> Counters {
        let mut z = Counters::default();
        for (k, _) in self.own.iter() {
            z.own.add(k, 0);
        }
        z
    }

    /// Adds `n` to the protocol's counter `k`.
    #[inline]
    pub fn count(&mut self, k: Counter, n: u64) {
        self.own.add(k, n);
    }

    /// The protocol's counter `k` (0 when never counted).
    pub fn get(&self, k: Counter) -> u64 {
        self.own.get(k)
    }

    pub fn reconciles(&self) -> bool {
        self.attempted == self.accepted + self.rejected + self.failed + self.unfinished
    }
}

super::word::word!(
    /// A protocol's own counter (`rcpt_accepted`, `retrieved`, `stanzas_in`): declared
    /// with [`counters!`](super::counters) next to its driver, summed like the others,
    /// written into summary.json's totals and intervals.csv under its name.
    Counter
);

/// Declares counters as constants: `counters! { pub RETRIEVED => "retrieved", "messages read"; }`.
macro_rules! counters {
    ($($t:tt)*) => { $crate::metrics::word::declare! { Counter: $($t)* } };
}
pub(crate) use counters;

/// A counter as a plan declares it: its name and what it counts.
#[derive(Debug, Clone, Serialize)]
pub struct DeclaredCounter {
    pub counter: Counter,
    pub what: &'static str,
}

impl Counter {
    /// The table of `counters` for plan.json.
    pub fn declare(counters: &[Counter]) -> Vec<DeclaredCounter> {
        counters
            .iter()
            .map(|&c| DeclaredCounter {
                counter: c,
                what: c.describe(),
            })
            .collect()
    }
}

/// How many counters of its own a protocol may have.
pub const OWN_COUNTERS: usize = 12;

/// A protocol's own counters and their values, in the order first counted (or declared).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Own([Option<(Counter, u64)>; OWN_COUNTERS]);

impl Own {
    #[inline]
    fn add(&mut self, k: Counter, n: u64) {
        for slot in self.0.iter_mut() {
            match slot {
                Some((c, v)) if *c == k => {
                    *v += n;
                    return;
                }
                Some(_) => {}
                None => {
                    *slot = Some((k, n));
                    return;
                }
            }
        }
        // A protocol declares at most OWN_COUNTERS (a test holds every protocol to it);
        // only a results file made by hand could bring more.
        debug_assert!(false, "more than {OWN_COUNTERS} counters of one protocol");
    }

    fn get(&self, k: Counter) -> u64 {
        self.iter().find(|(c, _)| *c == k).map_or(0, |(_, v)| v)
    }

    /// The counters and their values.
    pub fn iter(&self) -> impl Iterator<Item = (Counter, u64)> + '_ {
        self.0.iter().map_while(|s| *s)
    }

    /// Each counter said for a person: its name in words and its value (a byte count
    /// as bytes), e.g. `rcpt accepted 400`, `retrieved bytes 1.2 MiB`.
    pub fn said(&self) -> Vec<String> {
        self.iter()
            .map(|(k, v)| {
                let name = k.name().replace('_', " ");
                if k.name().ends_with("_bytes") {
                    format!("{name} {}", crate::units::fmt_bytes(v))
                } else {
                    format!("{name} {v}")
                }
            })
            .collect()
    }

    /// The value of the counter named `name`, if it was counted or declared.
    pub fn named(&self, name: &str) -> Option<u64> {
        self.iter().find(|(c, _)| c.name() == name).map(|(_, v)| v)
    }
}

impl Serialize for Own {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (k, v) in self.iter() {
            m.serialize_entry(k.name(), &v)?;
        }
        m.end()
    }
}

impl<'de> serde::Deserialize<'de> for Own {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Own, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Own;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("counters by name")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut a: A) -> Result<Own, A::Error> {
                let mut own = Own::default();
                let mut n = 0;
                while let Some((k, v)) = a.next_entry::<std::borrow::Cow<'de, str>, u64>()? {
                    n += 1;
                    if n > OWN_COUNTERS {
                        return Err(serde::de::Error::custom(format!(
                            "more than {OWN_COUNTERS} counters of a protocol"
                        )));
                    }
                    own.add(Counter::named(&k), v);
                }
                Ok(own)
            }
        }
        d.deserialize_map(Visit)
    }
}

super::word::word!(
    /// What kind of failure an error is. The kinds every protocol can have are this
    /// type's constants; a protocol declares its own (POP3's `-ERR`, XMPP's stream
    /// errors) with [`error_kinds!`](super::error_kinds) next to its driver.
    ErrorKind
);

/// Declares error kinds as constants: `error_kinds! { pub NO => "NO", "IMAP NO"; }`.
macro_rules! error_kinds {
    ($($t:tt)*) => { $crate::metrics::word::declare! { ErrorKind: $($t)* } };
}
pub(crate) use error_kinds;

super::word::common! { ErrorKind:
    TRANSIENT => "4xx", "the server refused for now (a 4xx reply)";
    PERMANENT => "5xx", "the server refused for good (a 5xx reply)";
    REFUSED => "refused", "TCP connection refused";
    CLOSED => "closed", "connection reset or closed by the server unexpectedly";
    TIMEOUT => "timeout", "a phase deadline passed";
    TLS => "tls", "TLS handshake or certificate failure";
    PROTOCOL => "protocol", "the server sent something that is not the protocol (garbage, an overlong line)";
    IO => "io", "any other I/O error";
    PORTS => "out-of-ports", "no local port left for the connect (every one held toward that server from that source address): add source addresses with --bind";
    CLIENT_CERTIFICATE => "tls-client-cert", "the server refused the client certificate (or asked for one that was not given)";
    UNFINISHED => "unfinished", "the unit was still running when the run ended";
    UNSUPPORTED => "not-offered", "the server does not offer what the run needs (AUTH, STARTTLS): nothing was asked of it, so it refused nothing";
}

/// A three-part status detail that refines a reply code, written `a.b.c` (SMTP's RFC 3463
/// enhanced status codes are one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Detail(pub u8, pub u16, pub u16);

impl std::str::FromStr for Detail {
    type Err = ();
    /// `class.subject.detail`, as RFC 3463 writes it.
    fn from_str(s: &str) -> Result<Detail, ()> {
        let mut p = s.split('.');
        let (Some(a), Some(b), Some(c), None) = (p.next(), p.next(), p.next(), p.next()) else {
            return Err(());
        };
        Ok(Detail(
            a.parse().map_err(|_| ())?,
            b.parse().map_err(|_| ())?,
            c.parse().map_err(|_| ())?,
        ))
    }
}

impl std::fmt::Display for Detail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// An error class: phase, kind, reply code, status detail and normalised text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct ErrorKey {
    pub phase: Phase,
    pub kind: ErrorKind,
    pub code: u16,
    pub detail: Option<Detail>,
    pub text: String,
}

impl std::fmt::Display for ErrorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.phase)?;
        if self.code != 0 {
            write!(f, " {}", self.code)?;
        } else {
            write!(f, " {}", self.kind.name())?;
        }
        if let Some(e) = self.detail {
            write!(f, " {e}")?;
        }
        if !self.text.is_empty() {
            write!(f, " {}", self.text)?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ErrorStat {
    pub count: u64,
    /// One verbatim example (the first seen), for the error table.
    pub sample: String,
}

/// What the server did with a message of the sent log, as far as the client knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SentOutcome {
    /// A final positive reply.
    Accepted,
    /// The end of data went out and no final reply came (the unit failed).
    Indeterminate,
    /// The end of data went out and the run ended before the final reply.
    Unfinished,
}

impl SentOutcome {
    pub fn name(self) -> &'static str {
        match self {
            SentOutcome::Accepted => "accepted",
            SentOutcome::Indeterminate => "indeterminate",
            SentOutcome::Unfinished => "unfinished",
        }
    }

    pub fn parse(s: &str) -> Option<SentOutcome> {
        [
            SentOutcome::Accepted,
            SentOutcome::Indeterminate,
            SentOutcome::Unfinished,
        ]
        .into_iter()
        .find(|o| o.name() == s)
    }
}

/// Set on a recipient index (in `Shard::rcpts`) of an accepted message whose own final
/// reply never came: LMTP answers each recipient after the data, and a connection that
/// dies after some of those replies leaves the others' fate unknown (the server may have
/// delivered to them). The sent log writes such a recipient with a leading `?`.
pub const UNSURE_RCPT: u32 = 1 << 31;

/// One message the server accepted or may have, for the sent log. Recipients are indices
/// into the run's address pool, stored in the shard's `rcpts` vector at
/// `rcpt_start..+rcpt_len` (an index may carry [`UNSURE_RCPT`]).
#[derive(Debug, Clone, Copy)]
pub struct SentRecord {
    pub seq: u64,
    /// Microseconds since the run's start when the final reply arrived (accepted), or
    /// when the end of data went out (indeterminate, unfinished).
    pub accepted_us: u64,
    pub outcome: SentOutcome,
    pub digest: [u8; 16],
    pub size: u32,
    pub from: u32,
    pub rcpt_start: u32,
    pub rcpt_len: u16,
}

/// What one shard (and one drained interval) holds.
#[derive(Debug, Default)]
pub struct Shard {
    pub counters: Counters,
    /// Each phase's histogram, in the order the run declared its phases (a phase
    /// recorded without being declared comes after them); `None` until first recorded.
    hists: Vec<(Phase, Option<Histogram<u64>>)>,
    pub errors: HashMap<ErrorKey, ErrorStat>,
    pub sent: Vec<SentRecord>,
    pub rcpts: Vec<u32>,
}

/// Distinct error classes kept per shard per interval; beyond this, errors are still
/// counted but folded into one overflow class, so a server that puts a counter in every
/// reply text cannot grow memory.
const MAX_ERROR_CLASSES: usize = 256;

impl Shard {
    /// A shard whose phases and counters come in this order (every shard of a run is
    /// made with the run's declared ones, so what they add up to keeps that order).
    pub fn declared(phases: &[Phase], counters: &[Counter]) -> Shard {
        Shard {
            hists: phases.iter().map(|&p| (p, None)).collect(),
            counters: Counters::declared(counters),
            ..Shard::default()
        }
    }

    /// The slot of `phase`, made at the end when the shard has none yet.
    #[inline]
    fn slot(&mut self, phase: Phase) -> &mut Option<Histogram<u64>> {
        let i = match self.hists.iter().position(|(p, _)| *p == phase) {
            Some(i) => i,
            None => {
                self.hists.push((phase, None));
                self.hists.len() - 1
            }
        };
        &mut self.hists[i].1
    }

    #[inline]
    pub fn record(&mut self, phase: Phase, micros: u64) {
        self.slot(phase)
            .get_or_insert_with(new_histogram)
            .saturating_record(micros.clamp(1, HIST_MAX_US));
    }

    /// Adds a whole histogram to a phase.
    pub fn record_hist(&mut self, phase: Phase, h: &Histogram<u64>) {
        if !h.is_empty() {
            self.slot(phase)
                .get_or_insert_with(new_histogram)
                .add(h)
                .expect("same bounds");
        }
    }

    /// The phases with samples, in the shard's order, and their histograms.
    pub fn hists(&self) -> impl Iterator<Item = (Phase, &Histogram<u64>)> {
        self.hists
            .iter()
            .filter_map(|(p, h)| h.as_ref().filter(|h| !h.is_empty()).map(|h| (*p, h)))
    }

    pub fn error(&mut self, key: ErrorKey, sample: impl FnOnce() -> String) {
        let len = self.errors.len();
        let key = if len >= MAX_ERROR_CLASSES && !self.errors.contains_key(&key) {
            ErrorKey {
                text: "(more error classes than spate keeps per interval)".into(),
                ..key
            }
        } else {
            key
        };
        let stat = self.errors.entry(key).or_default();
        if stat.count == 0 {
            stat.sample = sample();
        }
        stat.count += 1;
    }

    pub fn sent(&mut self, mut rec: SentRecord, rcpts: &[u32]) {
        rec.rcpt_start = self.rcpts.len() as u32;
        rec.rcpt_len = rcpts.len() as u16;
        self.rcpts.extend_from_slice(rcpts);
        self.sent.push(rec);
    }

    /// Empties the shard and keeps its allocations (histograms, buffers) for reuse.
    pub fn clear(&mut self) {
        self.counters = self.counters.zeroed();
        for h in self.hists.iter_mut().filter_map(|(_, h)| h.as_mut()) {
            h.reset();
        }
        self.errors.clear();
        self.sent.clear();
        self.rcpts.clear();
    }

    /// Adds another shard into this one (histograms add, counters add, errors merge).
    pub fn absorb(&mut self, other: &mut Shard) {
        self.counters.add(&other.counters);
        for (phase, theirs) in other.hists.iter_mut() {
            let mine = self.slot(*phase);
            if let Some(t) = theirs.as_mut().filter(|t| !t.is_empty()) {
                mine.get_or_insert_with(new_histogram)
                    .add(&*t)
                    .expect("same bounds");
                t.reset();
            }
        }
        for (k, v) in other.errors.drain() {
            let e = self.errors.entry(k).or_default();
            if e.count == 0 {
                e.sample = v.sample;
            }
            e.count += v.count;
        }
        let base = self.rcpts.len() as u32;
        self.rcpts.append(&mut other.rcpts);
        self.sent.extend(other.sent.drain(..).map(|mut r| {
            r.rcpt_start += base;
            r
        }));
        other.counters = other.counters.zeroed();
    }

    /// Adds another shard's counters, histograms and errors into this one, leaving it as
    /// it is (per-message records are not totals and stay out).
    pub fn add(&mut self, other: &Shard) {
        self.counters.add(&other.counters);
        for (phase, theirs) in other.hists.iter() {
            let mine = self.slot(*phase);
            if let Some(t) = theirs.as_ref().filter(|t| !t.is_empty()) {
                mine.get_or_insert_with(new_histogram)
                    .add(t)
                    .expect("same bounds");
            }
        }
        for (k, v) in &other.errors {
            let e = self.errors.entry(k.clone()).or_default();
            if e.count == 0 {
                e.sample.clone_from(&v.sample);
            }
            e.count += v.count;
        }
    }

    pub fn hist(&self, phase: Phase) -> Option<&Histogram<u64>> {
        self.hists
            .iter()
            .find(|(p, _)| *p == phase)
            .and_then(|(_, h)| h.as_ref())
            .filter(|h| !h.is_empty())
    }

    /// The histogram of the phase named `name`.
    pub fn hist_named(&self, name: &str) -> Option<&Histogram<u64>> {
        self.hists().find(|(p, _)| p.name() == name).map(|(_, h)| h)
    }
}

/// One drained interval.
pub type Interval = Shard;

/// The next thread's slot: each thread that records takes one, once.
static NEXT_SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

thread_local! {
    static THREAD_SLOT: usize = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
}

pub struct Recorder {
    shards: Box<[Mutex<Shard>]>,
    active: AtomicI64,
    /// The most units in flight at once, and the time all units have spent in flight
    /// (µs): the run's concurrency, its maximum and its mean.
    active_max: AtomicI64,
    busy_us: AtomicU64,
}

impl Recorder {
    pub fn new(shards: usize) -> Self {
        Recorder::declared(shards, &[], &[])
    }

    /// A recorder whose shards keep `phases` and `counters` in this order (the run's
    /// declared ones).
    pub fn declared(shards: usize, phases: &[Phase], counters: &[Counter]) -> Self {
        Recorder {
            shards: (0..shards.max(1))
                .map(|_| Mutex::new(Shard::declared(phases, counters)))
                .collect(),
            active: AtomicI64::new(0),
            active_max: AtomicI64::new(0),
            busy_us: AtomicU64::new(0),
        }
    }

    /// Runs `f` on the calling thread's shard (for session `_session`). Shards follow
    /// threads, not sessions: locks are contended between threads only, and a run uses
    /// as many shards as threads record into it (the runtime's workers), from its first
    /// second on. By session, a burst of concurrency mid-run reached shards unused until
    /// then, and each took a histogram per phase (~190 KB of counts, all resident) at
    /// that moment: a step in the generator's memory that looked like a leak.
    #[inline]
    pub fn with<R>(&self, _session: usize, f: impl FnOnce(&mut Shard) -> R) -> R {
        let i = THREAD_SLOT.with(|s| *s) % self.shards.len();
        let mut shard = self.shards[i].lock().unwrap_or_else(|p| p.into_inner());
        f(&mut shard)
    }

    pub fn session_started(&self) {
        let now = self.active.fetch_add(1, Ordering::Relaxed) + 1;
        self.active_max.fetch_max(now, Ordering::Relaxed);
    }
    /// A unit ended after `busy_us` in flight.
    pub fn session_ended(&self, busy_us: u64) {
        self.active.fetch_sub(1, Ordering::Relaxed);
        self.busy_us.fetch_add(busy_us, Ordering::Relaxed);
    }

    /// Units in flight over a run of `elapsed_s`: the mean (the time units spent in
    /// flight over the run's time: Little's L) and the most at once.
    pub fn in_flight(&self, elapsed_s: f64) -> (f64, i64) {
        let busy_s = self.busy_us.load(Ordering::Relaxed) as f64 / 1e6;
        let mean = if elapsed_s > 0.0 {
            busy_s / elapsed_s
        } else {
            0.0
        };
        (mean, self.active_max.load(Ordering::Relaxed))
    }
    pub fn active_sessions(&self) -> i64 {
        self.active.load(Ordering::Relaxed)
    }

    /// Drains every shard into `into` (which the caller reuses from interval to interval).
    pub fn drain_into(&self, into: &mut Shard) {
        for shard in self.shards.iter() {
            let mut s = shard.lock().unwrap_or_else(|p| p.into_inner());
            into.absorb(&mut s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::metrics::phases! {
        BODY => "body", "a test phase";
        RCPT => "rcpt", "another";
        MAIL => "mail", "a third";
    }

    #[test]
    fn drain_merges_and_resets() {
        let rec = Recorder::new(4);
        for session in 0..8 {
            rec.with(session, |s| {
                s.counters.attempted += 1;
                s.counters.accepted += 1;
                s.record(BODY, 1000 + session as u64);
                s.sent(
                    SentRecord {
                        seq: session as u64,
                        accepted_us: 5,
                        outcome: SentOutcome::Accepted,
                        digest: [0; 16],
                        size: 10,
                        from: 0,
                        rcpt_start: 0,
                        rcpt_len: 0,
                    },
                    &[session as u32, 99],
                );
            });
        }
        rec.with(1, |s| {
            s.counters.attempted += 1;
            s.counters.failed += 1;
            s.error(
                ErrorKey {
                    phase: RCPT,
                    kind: ErrorKind::TRANSIENT,
                    code: 451,
                    detail: Some(Detail(4, 3, 0)),
                    text: "Temporary lookup failure".into(),
                },
                || "451 4.3.0 Temporary lookup failure".into(),
            )
        });
        let mut iv = Shard::default();
        rec.drain_into(&mut iv);
        assert_eq!(iv.counters.attempted, 9);
        assert!(iv.counters.reconciles());
        assert_eq!(iv.hist(BODY).unwrap().len(), 8);
        assert_eq!(iv.sent.len(), 8);
        for r in &iv.sent {
            let rc = &iv.rcpts[r.rcpt_start as usize..][..r.rcpt_len as usize];
            assert_eq!(rc, &[r.seq as u32, 99]);
        }
        assert_eq!(iv.errors.values().map(|e| e.count).sum::<u64>(), 1);
        // Drained: a second drain adds nothing.
        let mut again = Shard::default();
        rec.drain_into(&mut again);
        assert_eq!(again.counters, again.counters.zeroed());
        assert_eq!(again.counters.attempted, 0);
        assert!(again.hist(BODY).is_none());
    }

    #[test]
    fn error_classes_are_bounded() {
        let mut s = Shard::default();
        for i in 0..1000 {
            s.error(
                ErrorKey {
                    phase: MAIL,
                    kind: ErrorKind::PERMANENT,
                    code: 550,
                    detail: None,
                    text: format!("reason {i}"),
                },
                String::new,
            );
        }
        assert!(s.errors.len() <= MAX_ERROR_CLASSES + 1);
        assert_eq!(s.errors.values().map(|e| e.count).sum::<u64>(), 1000);
    }
}
