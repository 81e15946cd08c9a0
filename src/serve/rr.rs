//! The request/response decision service (`--rr`, `--rrs`): each request gets a
//! deterministic decision naming the client certificate's subject, from a small LRU
//! cache when it was decided before (at once) or computed at `--rr-miss-cost`.
//!
//! A decision is `DENY` when the request contains `deny`, else `ALLOW`, followed by
//! `subject=NAME` (the certificate's CN, `-` without one) and `cache=hit|miss`; HTTP
//! answers 200 with it as the body. Faults at the `rr` point: fail answers HTTP CODE (or
//! `ERR CODE`), drop closes the connection without an answer.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsAcceptor;

use super::config::RrOptions;
use super::injection::FaultPoint;
use super::listener::Listener;
use super::shared::Shared;
use crate::proto::rr::{encode_response, Frame, Framer};

/// Largest request read.
const MAX_REQUEST: usize = 1 << 20;
/// Distinct subjects remembered (for the count).
const MAX_SUBJECTS: usize = 4096;

/// Least recently used first out: `order` maps a use tick to its key.
#[derive(Debug, Default)]
struct Lru {
    map: HashMap<Vec<u8>, u64>,
    order: BTreeMap<u64, Vec<u8>>,
    tick: u64,
}

impl Lru {
    /// Whether `key` was there; it is there (most recent) afterwards.
    fn touch(&mut self, key: &[u8], cap: usize) -> bool {
        self.tick += 1;
        if let Some(t) = self.map.get_mut(key) {
            let old = std::mem::replace(t, self.tick);
            self.order.remove(&old);
            self.order.insert(self.tick, key.to_vec());
            return true;
        }
        if cap == 0 {
            return false;
        }
        while self.map.len() >= cap {
            let Some((_, k)) = self.order.pop_first() else {
                break;
            };
            self.map.remove(&k);
        }
        self.map.insert(key.to_vec(), self.tick);
        self.order.insert(self.tick, key.to_vec());
        false
    }
}

/// The service every rr connection shares.
pub(crate) struct Service {
    opts: RrOptions,
    cache: Mutex<Lru>,
    subjects: Mutex<HashSet<String>>,
    /// `--rrs`: with client certificate verification when `--rr-client-ca` is given.
    pub tls: TlsAcceptor,
}

impl Service {
    pub fn new(opts: RrOptions, tls: TlsAcceptor) -> Service {
        Service {
            opts,
            cache: Mutex::default(),
            subjects: Mutex::default(),
            tls,
        }
    }
}

/// Serves one connection of listener `kind`.
pub(super) async fn run(tcp: TcpStream, kind: Listener, shared: &Shared, conn_no: u64) {
    let svc = &shared.service::<Service>();
    if kind != Listener::Rrs {
        serve(tcp, "-".into(), shared, conn_no).await;
        return;
    }
    let Ok(Ok(tls)) = tokio::time::timeout(shared.idle, svc.tls.accept(tcp)).await else {
        return;
    };
    shared
        .stats
        .tls_session(tls.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed));
    let subject = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| common_name(c.as_ref()).unwrap_or_else(|| "unnamed".into()))
        .unwrap_or_else(|| "-".into());
    if subject != "-" {
        if let Ok(mut seen) = svc.subjects.lock() {
            if seen.len() < MAX_SUBJECTS && seen.insert(subject.clone()) {
                shared.stats.rr_subject();
            }
        }
    }
    serve(tls, subject, shared, conn_no).await;
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut io: S,
    subject: String,
    shared: &Shared,
    conn_no: u64,
) {
    let svc = &shared.service::<Service>();
    let frame = svc.opts.frame;
    let mut faults = shared.faults.session(conn_no);
    let mut framer = Framer::request(frame, MAX_REQUEST);
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut out = Vec::new();
    let mut shutdown = shared.shutdown.clone();
    loop {
        framer.reset();
        let n = loop {
            match framer.frame(&buf) {
                Ok(Some(n)) => break n,
                Ok(None) => {}
                Err(e) => {
                    shared.stats.rr_bad_request();
                    out.clear();
                    let text = format!("ERR bad request: {e}");
                    encode_response(frame, 400, true, text.as_bytes(), &mut out);
                    let _ = io.write_all(&out).await;
                    let _ = io.shutdown().await;
                    return;
                }
            }
            let mut chunk = [0u8; 16 * 1024];
            let read = tokio::select! {
                r = tokio::time::timeout(shared.idle, io.read(&mut chunk)) => r,
                _ = shutdown.wait_for(|v| *v) => return,
            };
            match read {
                Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return,
                Ok(Ok(k)) => buf.extend_from_slice(&chunk[..k]),
            }
        };
        let m = framer.message(&buf[..n]);
        let close = m.close;
        let body = m.body().into_owned();
        buf.drain(..n);
        let (delay, injected) = faults.draw(FaultPoint::Rr, &shared.stats);
        if let Some(t) = faults.tarpit() {
            tokio::time::sleep(t).await;
        }
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        out.clear();
        match injected {
            super::faults::Injected::Drop => return,
            super::faults::Injected::Fail(code) => {
                shared.stats.reply(code);
                let text = format!("ERR {code} injected");
                encode_response(frame, code, close, text.as_bytes(), &mut out);
            }
            super::faults::Injected::None => {
                let text = decide(svc, &subject, &body, shared).await;
                encode_response(frame, 200, close, text.as_bytes(), &mut out);
            }
        }
        if io.write_all(&out).await.is_err() || io.flush().await.is_err() {
            return;
        }
        if close && frame == Frame::Http {
            let _ = io.shutdown().await;
            return;
        }
    }
}

/// The decision on `body` for `subject`: from the cache, or computed at the miss cost.
async fn decide(svc: &Service, subject: &str, body: &[u8], shared: &Shared) -> String {
    let mut key = subject.as_bytes().to_vec();
    key.push(0);
    key.extend_from_slice(body);
    let hit = svc
        .cache
        .lock()
        .map(|mut c| c.touch(&key, svc.opts.cache))
        .unwrap_or(false);
    if !hit && svc.opts.miss_cost > Duration::ZERO {
        // A decision not in the cache is computed: CPU work, off the I/O threads, so the
        // cache cliff shows in the server's CPU as well as in its latency.
        let cost = svc.opts.miss_cost;
        let _ = tokio::task::spawn_blocking(move || compute(cost)).await;
    }
    shared.stats.rr_request(hit);
    let deny = body.windows(4).any(|w| w.eq_ignore_ascii_case(b"deny"));
    format!(
        "{} subject={subject} cache={}",
        if deny { "DENY" } else { "ALLOW" },
        if hit { "hit" } else { "miss" }
    )
}

/// Busy work for `cost` of wall time (a miss's computation).
fn compute(cost: Duration) {
    let start = std::time::Instant::now();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while start.elapsed() < cost {
        for _ in 0..256 {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
        }
        std::hint::black_box(x);
    }
}

/// One DER element at the start of `b`: (tag, contents, rest).
fn der(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = b.split_first()?;
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |l, &x| (l << 8) | x as usize);
        (len, &rest[n..])
    };
    (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
}

/// The subject's common name (OID 2.5.4.3) of a DER certificate.
pub(crate) fn common_name(cert: &[u8]) -> Option<String> {
    let (_, certificate, _) = der(cert)?;
    let (_, tbs, _) = der(certificate)?;
    let mut rest = tbs;
    if rest.first() == Some(&0xa0) {
        rest = der(rest)?.2; // version
    }
    // serial, signature algorithm, issuer, validity, then the subject.
    for _ in 0..4 {
        rest = der(rest)?.2;
    }
    let (_, mut subject, _) = der(rest)?;
    // Bounded by the subject's bytes: each round consumes one RDN.
    while let Some((_, set, next)) = der(subject) {
        let mut atvs = set;
        while let Some((_, atv, more)) = der(atvs) {
            let (tag, oid, value) = der(atv)?;
            if tag == 0x06 && oid == [0x55, 0x04, 0x03] {
                let (_, v, _) = der(value)?;
                return Some(String::from_utf8_lossy(v).into_owned());
            }
            atvs = more;
        }
        subject = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_forgets_the_least_recent() {
        let mut c = Lru::default();
        assert!(!c.touch(b"a", 2));
        assert!(!c.touch(b"b", 2));
        assert!(c.touch(b"a", 2));
        assert!(!c.touch(b"c", 2)); // evicts b
        assert!(c.touch(b"a", 2));
        assert!(!c.touch(b"b", 2));
        assert_eq!(c.map.len(), 2);
    }

    #[test]
    fn common_name_of_a_generated_certificate() {
        let mut p = rcgen::CertificateParams::new(vec!["x.test".into()]).unwrap();
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "client-7");
        p.distinguished_name
            .push(rcgen::DnType::OrganizationName, "spate");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        assert_eq!(common_name(cert.der()).as_deref(), Some("client-7"));
        assert_eq!(common_name(b"\x30\x03\x02\x01"), None);
    }
}
