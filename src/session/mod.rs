//! Sessions: one driver per protocol ([`smtp`], [`mailbox`] for POP3/IMAP) over a shared
//! toolkit — an [`Endpoint`] that connects with source-address rotation and TLS (implicit,
//! or after the protocol's STARTTLS), timing each step as a phase of the unit's
//! [`UnitReport`], and one [`Failure`] type that says where a unit failed and whether its
//! connection is still usable.

pub mod jmap;
pub mod mailbox;
pub mod phase;
pub mod population;
mod said;
pub use said::{said, Said};
pub mod rr;
pub mod smtp;
pub mod xmpp;

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::engine::UnitReport;
use crate::metrics::{Detail, ErrorKey, ErrorKind, Phase};
use crate::transport::{client_certificate_refused, Connection, TransportError};
use crate::{usage, UsageError};

/// Every phase a protocol of spate times, and the engine's: the names a threshold or a
/// query may use.
pub fn all_phases() -> Vec<Phase> {
    use crate::engine::Driver;
    let mut all: Vec<Phase> = Vec::new();
    for p in [
        smtp::Session::PHASES,
        mailbox::Visitor::PHASES,
        xmpp::Session::PHASES,
        rr::Session::PHASES,
        jmap::Session::PHASES,
        population::User::PHASES,
        crate::engine::unit::ENGINE_PHASES,
    ]
    .concat()
    {
        if !all.contains(&p) {
            all.push(p);
        }
    }
    all
}

/// Every counter a protocol of spate keeps of its own: the names a threshold may use.
pub fn all_counters() -> Vec<crate::metrics::Counter> {
    use crate::engine::Driver;
    [
        smtp::Session::COUNTERS,
        mailbox::Visitor::COUNTERS,
        xmpp::Session::COUNTERS,
        rr::Session::COUNTERS,
        jmap::Session::COUNTERS,
        population::User::COUNTERS,
    ]
    .concat()
}

/// How a connection gets its TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TlsMode {
    Plain,
    /// Upgraded after the protocol's STARTTLS (STLS for POP3).
    Starttls,
    /// TLS from the first byte.
    Implicit,
}

/// Where a server is and how to reach it.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub addr: SocketAddr,
    /// Name checked against the server certificate.
    pub server_name: rustls::pki_types::ServerName<'static>,
    pub tls: TlsMode,
    /// Needed unless `tls` is `Plain` (or a share of STARTTLS connections is planned).
    pub tls_config: Option<Arc<rustls::ClientConfig>>,
    /// Deadline for connecting and for each reply.
    pub timeout: Duration,
    /// Source addresses connections rotate over; empty for the system's choice.
    pub bind: Vec<IpAddr>,
}

impl Endpoint {
    /// The source address of a session's `n`-th connection: sessions start at different
    /// places in the list so that concurrent connections spread over all of it.
    fn source(&self, session: usize, n: u64) -> Option<IpAddr> {
        if self.bind.is_empty() {
            return None;
        }
        Some(self.bind[(n as usize + session) % self.bind.len()])
    }

    fn tls_config(&self) -> Result<Arc<rustls::ClientConfig>, TransportError> {
        self.tls_config
            .clone()
            .ok_or_else(|| TransportError::TlsIo("no TLS configuration for this server".into()))
    }

    /// Connects, with implicit TLS when planned; untimed (verification).
    pub async fn connect(&self) -> Result<Connection, TransportError> {
        let mut conn = Connection::connect(self.addr, self.source(0, 0), self.timeout).await?;
        if self.tls == TlsMode::Implicit {
            self.start_tls(&mut conn).await?;
        }
        Ok(conn)
    }

    /// The TLS handshake with this server's name and configuration; untimed.
    pub async fn start_tls(&self, conn: &mut Connection) -> Result<(), TransportError> {
        conn.start_tls(self.tls_config()?, self.server_name.clone())
            .await
            .map(drop)
    }

    /// Connection `n` of `session`: TCP connect and implicit TLS as the `connect` and
    /// `tls` phases of `report`, counted in its connection counters.
    pub async fn open(
        &self,
        session: usize,
        n: u64,
        report: &mut UnitReport,
    ) -> Result<Connection, Failure> {
        let t = report.start(Phase::CONNECT);
        let conn = Connection::connect(self.addr, self.source(session, n), self.timeout).await;
        let retransmitted = match &conn {
            Ok(c) => c.syn_retransmits() > 0,
            Err(e) => matches!(e, TransportError::SynUnanswered(_)),
        };
        if retransmitted {
            // The time the server's full accept queue (or dropped SYNs) cost, as such.
            report.counters.connect_retransmits += 1;
            report.counters.connect_retransmit_us += report.now().saturating_sub(t);
        }
        let mut conn = match conn {
            Ok(c) => c,
            Err(e) => {
                report.counters.connect_failures += 1;
                return Err(Failure::transport(Phase::CONNECT, e));
            }
        };
        // From the connect call: creating the socket is not the server's time.
        let t = t.max(report.us_at(conn.connect_began()));
        report.timed(Phase::CONNECT, t);
        report.counters.connections += 1;
        if self.tls == TlsMode::Implicit {
            self.handshake(&mut conn, report).await?;
        }
        Ok(conn)
    }

    /// The TLS handshake (implicit, or after the protocol's STARTTLS was accepted), as
    /// the `tls` phase.
    pub async fn handshake(
        &self,
        conn: &mut Connection,
        report: &mut UnitReport,
    ) -> Result<(), Failure> {
        self.handshake_as(conn, None, report).await
    }

    /// [`Endpoint::handshake`], with a client configuration of its own when `config` is
    /// given (a connection's client identity) instead of the server's.
    pub async fn handshake_as(
        &self,
        conn: &mut Connection,
        config: Option<std::sync::Arc<rustls::ClientConfig>>,
        report: &mut UnitReport,
    ) -> Result<(), Failure> {
        let t = report.start(Phase::TLS);
        let config = config.map_or_else(|| self.tls_config(), Ok);
        let done = match config {
            Ok(c) => conn.start_tls(c, self.server_name.clone()).await,
            Err(e) => Err(e),
        };
        let cpu = match done {
            Ok(cpu) => cpu,
            Err(e) => {
                // A connection whose handshake failed never became usable: a failed one.
                report.counters.connect_failures += 1;
                return Err(Failure::transport(Phase::TLS, e));
            }
        };
        report.timed(Phase::TLS, t);
        report.counters.tls_connections += 1;
        report.counters.tls_cpu_us += cpu.as_micros() as u64;
        if conn.tls_resumed() == Some(true) {
            report.counters.tls_resumed += 1;
        }
        Ok(())
    }
}

/// `HOST[:PORT]` (or `[v6]:PORT`, with an optional `smtp://` or `lmtp://`) to the host name
/// and its first address.
pub fn resolve(target: &str, default_port: u16) -> anyhow::Result<(String, SocketAddr)> {
    let target = target.trim();
    let t = target
        .strip_prefix("smtp://")
        .or_else(|| target.strip_prefix("lmtp://"))
        .unwrap_or(target)
        .trim_end_matches('/');
    if let Some((scheme, _)) = t.split_once("://") {
        return usage(format!(
            "unsupported scheme '{scheme}://' in '{target}': this command takes smtp://, lmtp:// or HOST[:PORT]"
        ));
    }
    let (host, port) = if let Some(rest) = t.strip_prefix('[') {
        let (h, p) = rest
            .split_once(']')
            .ok_or_else(|| UsageError(format!("bad target '{target}'")))?;
        (h.to_string(), p.strip_prefix(':').unwrap_or(""))
    } else if t.matches(':').count() == 1 {
        let (h, p) = t.split_once(':').unwrap_or((t, ""));
        (h.to_string(), p)
    } else {
        if let Some((ip, port)) = t.rsplit_once(':') {
            if ip.parse::<std::net::Ipv6Addr>().is_ok() && port.parse::<u16>().is_ok() {
                return usage(format!(
                    "bad target '{target}': write an IPv6 address with a port in brackets, [{ip}]:{port}"
                ));
            }
        }
        (t.to_string(), "")
    };
    let port: u16 = if port.is_empty() {
        default_port
    } else {
        port.parse()
            .map_err(|_| UsageError(format!("bad port in target '{target}'")))?
    };
    if port == 0 {
        return usage(format!(
            "bad target '{target}': port 0 is not a port a server listens on"
        ));
    }
    if host.is_empty() {
        return usage(format!("bad target '{target}': expected HOST[:PORT]"));
    }
    let addr = (host.as_str(), port)
        .to_socket_addrs()
        .map_err(|e| UsageError(format!("cannot resolve '{host}': {e}")))?
        .next()
        .ok_or_else(|| UsageError(format!("cannot resolve '{host}'")))?;
    Ok((host, addr))
}

/// Checks before a run that the server takes a TCP connection at all: a server that
/// cannot be reached is the user's problem to fix (one line, exit 1), not a run to record.
/// That connection is closed without a byte, and the server counts it (a TLS server logs
/// a failed handshake): the [`Preflight`] it returns says so in the run's summary.
pub async fn preflight(target: &str, ep: &Endpoint) -> anyhow::Result<Preflight> {
    let addr = ep.addr;
    let source = ep.source(0, 0);
    match Connection::connect(addr, source, ep.timeout.min(Duration::from_secs(10))).await {
        Ok(conn) => {
            conn.shutdown().await;
            Ok(Preflight { connections: 1 })
        }
        Err(TransportError::Io(e)) if e.kind() == std::io::ErrorKind::AddrNotAvailable => {
            let ip = source.map_or(String::new(), |ip| ip.to_string());
            usage(format!("--bind {ip}: not an address of this machine ({e})"))
        }
        Err(e) if target == addr.to_string() => anyhow::bail!("cannot connect to {target}: {e}"),
        Err(e) => anyhow::bail!("cannot connect to {target} ({addr}): {e}"),
    }
}

/// The connections made before the load to check the server answers: an observer that
/// puts their number in summary.json (`extra.preflight_connections`), since the server's
/// own connection count includes them.
#[derive(Debug, Default)]
pub struct Preflight {
    pub connections: u64,
}

impl Preflight {
    /// Another check's connections added to these.
    pub fn and(mut self, other: Preflight) -> Preflight {
        self.connections += other.connections;
        self
    }
}

impl crate::engine::Observer for Preflight {
    fn interval(&mut self, _snap: &crate::engine::Snapshot<'_>) -> anyhow::Result<()> {
        Ok(())
    }

    fn finish(&mut self, summary: &mut crate::results::Summary) {
        summary
            .extra
            .insert("preflight_connections".into(), self.connections.into());
    }
}

/// The error class of a transport failure.
pub fn error_kind(e: &TransportError) -> ErrorKind {
    match e {
        TransportError::Refused => ErrorKind::REFUSED,
        TransportError::Closed => ErrorKind::CLOSED,
        TransportError::Timeout(_)
        | TransportError::SynUnanswered(_)
        | TransportError::Unaccepted(_)
        | TransportError::UnacceptedLikely(_) => ErrorKind::TIMEOUT,
        TransportError::Tls(t) if client_certificate_refused(t) => ErrorKind::CLIENT_CERTIFICATE,
        TransportError::Tls(_) | TransportError::TlsIo(_) => ErrorKind::TLS,
        TransportError::Protocol(_) => ErrorKind::PROTOCOL,
        TransportError::Io(_) => ErrorKind::IO,
        TransportError::OutOfPorts { .. } => ErrorKind::PORTS,
    }
}

/// Why a unit of work failed, and where.
#[derive(Debug)]
pub struct Failure {
    pub phase: Phase,
    pub kind: ErrorKind,
    /// The server's reply code, 0 when the server did not answer.
    pub code: u16,
    pub detail: Option<Detail>,
    /// Normalised, for the error class.
    pub text: String,
    /// Verbatim, for the error table.
    pub sample: String,
    /// The connection is unusable afterwards.
    pub fatal: bool,
}

impl Failure {
    /// A breach of the protocol by the server (something it must not send), said in
    /// spate's words: the class its words without their varying parts.
    pub fn breach(phase: Phase, what: impl Into<String>) -> Self {
        let what = what.into();
        Failure {
            phase,
            kind: ErrorKind::PROTOCOL,
            code: 0,
            detail: None,
            text: crate::proto::class_of(&what),
            sample: crate::proto::escaped(&what),
            fatal: true,
        }
    }

    pub fn transport(phase: Phase, e: TransportError) -> Self {
        let sample = crate::proto::escaped(&e.to_string());
        // A deadline is the run's own setting, not a varying detail: keep its number. A
        // protocol breach is spate's own wording (its numbers are spate's limits) with
        // what the server sent after ": ", which only the sample keeps.
        let text = match &e {
            TransportError::Timeout(_)
            | TransportError::SynUnanswered(_)
            | TransportError::Unaccepted(_)
            | TransportError::UnacceptedLikely(_)
            | TransportError::OutOfPorts { .. } => sample.clone(),
            TransportError::Protocol(what) => format!("protocol: {}", crate::proto::class_of(what)),
            _ => crate::proto::normalize(&sample),
        };
        Failure {
            phase,
            kind: error_kind(&e),
            code: 0,
            detail: None,
            text,
            sample,
            fatal: true,
        }
    }

    pub fn key(&self) -> ErrorKey {
        ErrorKey {
            phase: self.phase,
            kind: self.kind,
            code: self.code,
            detail: self.detail,
            text: self.text.clone(),
        }
    }

    /// Adds this failure to the unit's errors.
    pub fn record(self, report: &mut UnitReport) {
        let key = self.key();
        report.error(key, self.sample);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Driver;
    use crate::metrics::{Counters, OWN_COUNTERS};

    /// What every protocol declares fits what shared code keeps: no more counters than
    /// a run has room for, no counter under a name the common counters already use (it
    /// would be written twice into summary.json's totals), no word declared twice.
    #[test]
    fn every_protocols_declared_words_fit_and_are_distinct() {
        let common: Vec<String> = match serde_json::to_value(Counters::default()) {
            Ok(serde_json::Value::Object(m)) => m.keys().cloned().collect(),
            _ => unreachable!("Counters serializes as an object"),
        };
        let drivers: [(&str, &[crate::metrics::Counter], &[Phase]); 5] = [
            ("smtp", smtp::Session::COUNTERS, smtp::Session::PHASES),
            (
                "mailbox",
                mailbox::Visitor::COUNTERS,
                mailbox::Visitor::PHASES,
            ),
            ("xmpp", xmpp::Session::COUNTERS, xmpp::Session::PHASES),
            ("rr", rr::Session::COUNTERS, rr::Session::PHASES),
            ("jmap", jmap::Session::COUNTERS, jmap::Session::PHASES),
        ];
        for (name, counters, phases) in drivers {
            assert!(counters.len() <= OWN_COUNTERS, "{name}: {counters:?}");
            for (i, c) in counters.iter().enumerate() {
                assert!(!common.iter().any(|n| n == c.name()), "{name}: {c}");
                assert!(!counters[..i].contains(c), "{name}: {c} twice");
            }
            for (i, p) in phases.iter().enumerate() {
                assert!(!phases[..i].contains(p), "{name}: {p} twice");
            }
        }
    }
}
