//! One mailbox visit, the unit of work of `spate pop3` / `spate imap`: every protocol step
//! timed in its own phase, failures classified, outcomes committed in one lock per visit.
//!
//! Outcome of a visit: accepted = it ran to the end of QUIT/LOGOUT; rejected = the
//! server refused something (-ERR, NO, BAD), after which the visit logs out politely;
//! failed = the transport broke (refused, reset, timeout, garbage).

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::Rng;

use super::client::{ClientError, Imap, Pop3};
use super::fetch::{Endpoint, TlsMode};
use super::load::{LoginArg, Settings};
use crate::engine::Driver;
use crate::load::PickArg;
use crate::metrics::{ErrorKey, ErrorKind, Phase};
use crate::proto::imap_client::Untagged;
use crate::proto::smtp::reply::normalize;
use crate::transport::{Clock, Connection};

/// One failure, where it happened.
struct Fail {
    phase: Phase,
    kind: ErrorKind,
    text: String,
    sample: String,
    /// The connection is unusable: do not try to log out.
    transport: bool,
}

impl Fail {
    fn new(phase: Phase, e: ClientError) -> Fail {
        match e {
            ClientError::Transport(t) => {
                let sample = t.to_string();
                Fail {
                    phase,
                    kind: t.kind(),
                    text: normalize(&sample),
                    sample,
                    transport: true,
                }
            }
            ClientError::Server { status, text } => Fail {
                phase,
                kind: match status {
                    "-ERR" => ErrorKind::Err,
                    "NO" => ErrorKind::No,
                    "BYE" => ErrorKind::Closed,
                    _ => ErrorKind::Bad,
                },
                text: normalize(&text),
                sample: format!("{status} {text}"),
                transport: status == "BYE",
            },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Accepted,
    Rejected,
    Failed,
}

/// Per-visit scratch, reused.
#[derive(Default)]
struct Scratch {
    timings: Vec<(Phase, u64)>,
    fails: Vec<Fail>,
    connections: u64,
    tls_connections: u64,
    connect_failures: u64,
    retrieved: u64,
    retrieved_bytes: u64,
    deleted: u64,
    /// Deletions asked for but not yet committed (QUIT, EXPUNGE).
    pending_deletes: u64,
}

/// Times `fut` as `phase`; a failure becomes a [`Fail`].
async fn step<T>(
    x: &mut Scratch,
    clock: Clock,
    phase: Phase,
    fut: impl Future<Output = Result<T, ClientError>>,
) -> Result<T, Fail> {
    let t = clock.now_us();
    match fut.await {
        Ok(v) => {
            x.timings.push((phase, clock.now_us().saturating_sub(t)));
            Ok(v)
        }
        Err(e) => Err(Fail::new(phase, e)),
    }
}

/// Spreads a percentage evenly: true `pct` times in 100 calls, deterministically.
#[derive(Default)]
struct Spread(u32);

impl Spread {
    fn next(&mut self, pct: u8) -> bool {
        self.0 += u32::from(pct);
        if self.0 >= 100 {
            self.0 -= 100;
            true
        } else {
            false
        }
    }
}

pub struct Visitor {
    id: usize,
    s: Arc<Settings>,
    rng: SmallRng,
    x: Scratch,
    download: Spread,
    delete: Spread,
    connections_made: u64,
}

impl Visitor {
    pub fn new(id: usize, s: Arc<Settings>, rng: SmallRng) -> Self {
        Visitor {
            id,
            s,
            rng,
            x: Scratch::default(),
            download: Spread::default(),
            delete: Spread::default(),
            connections_made: 0,
        }
    }

    fn account(&mut self) -> usize {
        let n = self.s.accounts.len();
        match self.s.pick {
            PickArg::RoundRobin => self.s.next_account.fetch_add(1, Ordering::Relaxed) as usize % n,
            PickArg::Random => self.rng.random_range(0..n),
        }
    }

    /// Connect, implicit TLS, as phases.
    async fn open(&mut self, ep: &Endpoint) -> Result<Connection, Fail> {
        let s = &self.s;
        let bind = if s.bind.is_empty() {
            None
        } else {
            Some(s.bind[(self.connections_made as usize + self.id) % s.bind.len()])
        };
        self.connections_made += 1;
        let clock = s.clock;
        let t = clock.now_us();
        let mut conn = match Connection::connect(ep.addr, bind, ep.timeout).await {
            Ok(c) => c,
            Err(e) => {
                self.x.connect_failures += 1;
                return Err(Fail::new(Phase::Connect, e.into()));
            }
        };
        self.x.timings.push((Phase::Connect, clock.now_us() - t));
        self.x.connections += 1;
        if ep.tls == TlsMode::Implicit {
            let cfg = ep.tls_config.clone().expect("TLS config is built with TLS");
            step(&mut self.x, clock, Phase::Tls, async {
                conn.start_tls(cfg, ep.server_name.clone())
                    .await
                    .map_err(ClientError::from)
            })
            .await?;
            self.x.tls_connections += 1;
        }
        Ok(conn)
    }

    async fn pop3(&mut self, ep: &Endpoint, acct: usize) -> Result<(), Fail> {
        let conn = self.open(ep).await?;
        let clock = self.s.clock;
        let s = self.s.clone();
        let Visitor {
            x,
            download,
            delete,
            ..
        } = self;
        let mut p = step(x, clock, Phase::Greeting, Pop3::greet(conn)).await?;
        let result = async {
            if ep.tls == TlsMode::Starttls {
                let cfg = ep.tls_config.clone().expect("TLS config is built with TLS");
                step(x, clock, Phase::Starttls, p.command("STLS")).await?;
                step(x, clock, Phase::Tls, async {
                    p.conn
                        .start_tls(cfg, ep.server_name.clone())
                        .await
                        .map_err(ClientError::from)
                })
                .await?;
                x.tls_connections += 1;
            }
            let a = &s.accounts[acct];
            let login = async {
                match s.login {
                    LoginArg::Plain => p.auth_plain(&a.user, &a.password).await,
                    l => p.login(&a.user, &a.password, l == LoginArg::Apop).await,
                }
            };
            step(x, clock, Phase::Auth, login).await?;
            let (n, _) = step(x, clock, Phase::Stat, p.stat()).await?;
            if s.listings {
                step(x, clock, Phase::Uidl, p.listing("UIDL")).await?;
                step(x, clock, Phase::List, p.listing("LIST")).await?;
            }
            let k = match s.messages_per_connection {
                0 => n,
                m => m.min(n),
            };
            let mut buf = Vec::new();
            for i in 1..=k {
                buf.clear();
                if download.next(s.download) {
                    step(
                        x,
                        clock,
                        Phase::Retr,
                        p.multi(&format!("RETR {i}"), &mut buf),
                    )
                    .await?;
                    x.retrieved += 1;
                    x.retrieved_bytes += buf.len() as u64;
                } else {
                    let cmd = format!("TOP {i} {}", s.top);
                    step(x, clock, Phase::Top, p.multi(&cmd, &mut buf)).await?;
                }
                if delete.next(s.delete) {
                    step(x, clock, Phase::Dele, p.command(&format!("DELE {i}"))).await?;
                    x.pending_deletes += 1;
                }
            }
            Ok(())
        }
        .await;
        finish(x, clock, result, true, p.quit()).await
    }

    async fn imap(&mut self, ep: &Endpoint, acct: usize) -> Result<(), Fail> {
        let conn = self.open(ep).await?;
        let clock = self.s.clock;
        let s = self.s.clone();
        let Visitor {
            x,
            download,
            delete,
            ..
        } = self;
        let mut m = step(x, clock, Phase::Greeting, Imap::greet(conn)).await?;
        let result = async {
            if ep.tls == TlsMode::Starttls {
                let cfg = ep.tls_config.clone().expect("TLS config is built with TLS");
                step(x, clock, Phase::Starttls, m.command(b"STARTTLS", |_| {})).await?;
                step(x, clock, Phase::Tls, async {
                    m.conn
                        .start_tls(cfg, ep.server_name.clone())
                        .await
                        .map_err(ClientError::from)
                })
                .await?;
                x.tls_connections += 1;
            }
            let a = &s.accounts[acct];
            let login = async {
                match s.login {
                    LoginArg::Plain => m.authenticate_plain(&a.user, &a.password).await,
                    _ => m.login(&a.user, &a.password).await,
                }
            };
            step(x, clock, Phase::Auth, login).await?;
            let sel = step(x, clock, Phase::Select, m.select("INBOX")).await?;
            if let Some(criteria) = &s.search {
                step(x, clock, Phase::Search, m.search(false, criteria)).await?;
            }
            let k = match s.messages_per_connection {
                0 => sel.exists,
                n => n.min(sel.exists),
            };
            for i in 1..=k {
                let whole = download.next(s.download);
                let cmd = if whole {
                    format!("FETCH {i} (BODY.PEEK[])")
                } else {
                    format!("FETCH {i} (BODY.PEEK[HEADER])")
                };
                let mut got = 0u64;
                let fetch = m.command(cmd.as_bytes(), |u| {
                    if let Untagged::Fetch(_, f) = u {
                        if let Some((_, b)) = f.body {
                            got += b.len() as u64;
                        }
                    }
                });
                step(x, clock, Phase::Fetch, fetch).await?;
                if whole {
                    x.retrieved += 1;
                    x.retrieved_bytes += got;
                }
                if s.flag {
                    let cmd = format!("STORE {i} +FLAGS.SILENT (\\Seen)");
                    step(x, clock, Phase::Store, m.command(cmd.as_bytes(), |_| {})).await?;
                }
                if delete.next(s.delete) {
                    let cmd = format!("STORE {i} +FLAGS.SILENT (\\Deleted)");
                    step(x, clock, Phase::Store, m.command(cmd.as_bytes(), |_| {})).await?;
                    x.pending_deletes += 1;
                }
            }
            if x.pending_deletes > 0 {
                step(x, clock, Phase::Expunge, m.command(b"EXPUNGE", |_| {})).await?;
                x.deleted += std::mem::take(&mut x.pending_deletes);
            }
            if let Some(d) = s.idle {
                let t = clock.now_us();
                m.idle(tokio::time::sleep(d), d)
                    .await
                    .map_err(|e| Fail::new(Phase::Idle, e))?;
                // The server's part: IDLE to "+", DONE to OK; not the wait asked for.
                let total = clock.now_us().saturating_sub(t);
                let waited = m.idle_waited.as_micros() as u64;
                x.timings.push((Phase::Idle, total.saturating_sub(waited)));
            }
            Ok(())
        }
        .await;
        finish(x, clock, result, false, m.logout()).await
    }
}

/// Ends a visit: after success, logs out as a timed phase; after a server refusal, logs
/// out untimed; after a transport failure, just drops. `commits` says whether logging out
/// commits pending deletions (POP3 QUIT does, RFC 1939 6; IMAP LOGOUT does not expunge).
async fn finish(
    x: &mut Scratch,
    clock: Clock,
    result: Result<(), Fail>,
    commits: bool,
    logout: impl Future<Output = Result<(), ClientError>>,
) -> Result<(), Fail> {
    let (outcome, logged_out) = match result {
        Ok(()) => {
            let r = step(x, clock, Phase::Logout, logout).await;
            let ok = r.is_ok();
            (r, ok)
        }
        Err(f) if f.transport => return Err(f),
        Err(f) => {
            let ok = logout.await.is_ok();
            (Err(f), ok)
        }
    };
    if commits && logged_out {
        x.deleted += std::mem::take(&mut x.pending_deletes);
    }
    outcome
}

impl Driver for Visitor {
    async fn run_one(&mut self, seq: u64, scheduled_us: u64, open: bool) {
        let clock = self.s.clock;
        let start_us = clock.now_us();
        // Reset the counts, keep the vectors' capacity.
        let (mut timings, mut fails) = (
            std::mem::take(&mut self.x.timings),
            std::mem::take(&mut self.x.fails),
        );
        timings.clear();
        fails.clear();
        self.x = Scratch {
            timings,
            fails,
            ..Scratch::default()
        };
        let lag = start_us.saturating_sub(scheduled_us);
        if open {
            self.x.timings.push((Phase::Lag, lag));
        }
        // Exactly imap_percent of the run's visits are IMAP, spread evenly by sequence.
        let p = u64::from(self.s.imap_percent);
        let imap = (seq + 1) * p / 100 > seq * p / 100;
        let acct = self.account();
        let s = self.s.clone();
        let result = match (imap, &s.imap, &s.pop3) {
            (true, Some(ep), _) | (false, Some(ep), None) => self.imap(ep, acct).await,
            (_, _, Some(ep)) => self.pop3(ep, acct).await,
            (_, None, None) => unreachable!("prepare() plans at least one endpoint"),
        };
        let end_us = clock.now_us();
        let outcome = match &result {
            Ok(()) => Outcome::Accepted,
            Err(f) if f.transport => Outcome::Failed,
            Err(_) => Outcome::Rejected,
        };
        if let Err(f) = result {
            self.x.fails.push(f);
        }
        if outcome != Outcome::Failed {
            self.x
                .timings
                .push((Phase::Response, end_us.saturating_sub(scheduled_us)));
        }
        if outcome == Outcome::Accepted {
            self.x
                .timings
                .push((Phase::Session, end_us.saturating_sub(start_us)));
        }
        let x = &mut self.x;
        let late = open && lag > 10_000;
        self.s.recorder.with(self.id, |sh| {
            let c = &mut sh.counters;
            c.attempted += 1;
            match outcome {
                Outcome::Accepted => c.accepted += 1,
                Outcome::Rejected => c.rejected += 1,
                Outcome::Failed => c.failed += 1,
            }
            c.connections += x.connections;
            c.tls_connections += x.tls_connections;
            c.connect_failures += x.connect_failures;
            c.retrieved += x.retrieved;
            c.retrieved_bytes += x.retrieved_bytes;
            c.bytes += x.retrieved_bytes;
            c.deleted += x.deleted;
            c.late += u64::from(late);
            for &(p, us) in &x.timings {
                sh.record(p, us);
            }
            for f in x.fails.drain(..) {
                let key = ErrorKey {
                    phase: f.phase,
                    kind: f.kind,
                    code: 0,
                    enhanced: None,
                    text: f.text,
                };
                sh.error(key, || f.sample);
            }
        });
    }

    async fn finish(&mut self) {}
}

#[cfg(test)]
mod tests {
    use super::Spread;

    #[test]
    fn spread_is_exact_and_even() {
        for pct in [0u8, 1, 25, 33, 50, 99, 100] {
            let mut s = Spread::default();
            let hits: Vec<bool> = (0..200).map(|_| s.next(pct)).collect();
            assert_eq!(
                hits.iter().filter(|h| **h).count(),
                2 * pct as usize,
                "{pct}"
            );
            // Never two misses more than the gap the percentage implies.
            if pct >= 50 {
                assert!(!hits.windows(2).any(|w| !w[0] && !w[1]), "{pct}");
            }
        }
    }
}
