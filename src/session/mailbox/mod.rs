//! The POP3/IMAP driver: one mailbox visit per unit of work (connect, log in, act on some
//! messages, log out), every protocol step a phase of the unit's report; and the clients
//! ([`client`]) and mailbox reading ([`fetch`]) that verification uses too.
//!
//! Outcome of a visit: accepted = it ran to the end of QUIT/LOGOUT; rejected = the
//! server refused something (-ERR, NO, BAD), after which the visit logs out politely;
//! failed = the transport broke (refused, reset, timeout, garbage).

pub mod client;
pub mod errors;
pub mod fetch;
pub mod mix;
pub mod phase;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::{Endpoint, Failure, TlsMode};
use crate::engine::{Driver, Outcome, UnitReport};
use crate::metrics::{ErrorKind, Phase};
use crate::proto::imap_client::{command as imap_cmd, Untagged};
use crate::proto::pop3_client::command as pop3_cmd;
use client::{ClientError, Imap, Pop3};
use fetch::Account;

/// How a visit logs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Login {
    Auto,
    Apop,
    Plain,
}

/// What every visit shares.
pub struct Settings {
    pub pop3: Option<Endpoint>,
    pub imap: Option<Endpoint>,
    /// Share of visits that are IMAP (100 for `spate imap`).
    pub imap_percent: u8,
    pub accounts: Vec<Account>,
    /// Accounts in turn rather than at random.
    pub round_robin: bool,
    pub login: Login,
    pub messages_per_connection: u32,
    pub download: u8,
    pub delete: u8,
    pub top: u32,
    pub listings: bool,
    pub search: Option<String>,
    pub flag: bool,
    pub idle: Option<Duration>,
    /// APPEND, COPY/MOVE, SEARCH by date and header, BODYSTRUCTURE and a part.
    pub mix: mix::Mix,
    /// Round-robin position over the accounts.
    pub next_account: AtomicU64,
    /// Which accounts a visit in flight holds (see [`Lease`]); one per account.
    pub held: Vec<AtomicBool>,
}

/// An account a visit holds while it is in flight. Visits keep apart: a POP3 server
/// refuses a second login to a maildrop in use (`-ERR [IN-USE]`, RFC 2449), and a person
/// reads mail from one client at a time. Only when every account is held (more visits at
/// once than accounts) does a visit share one, and then it holds nothing.
struct Lease<'a> {
    acct: usize,
    /// Its flag in [`Settings::held`]; None when shared.
    flag: Option<&'a AtomicBool>,
}

impl<'a> Lease<'a> {
    /// The first account not held from `start` on (wrapping), or `start` shared.
    fn take(held: &'a [AtomicBool], start: usize) -> Lease<'a> {
        let n = held.len();
        let free = (0..n).map(|k| (start + k) % n).find(|&i| {
            held[i]
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        Lease {
            acct: free.unwrap_or(start),
            flag: free.map(|i| &held[i]),
        }
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some(f) = self.flag {
            f.store(false, Ordering::Release);
        }
    }
}

/// A client's failure as the unit's failure; `transport` failures leave no usable
/// connection (no logout is tried).
pub(crate) fn failure(phase: Phase, e: ClientError) -> Failure {
    match e {
        ClientError::Transport(t) => Failure::transport(phase, t),
        ClientError::Server { status, text } => Failure {
            phase,
            kind: match status {
                "-ERR" => errors::ERR,
                "NO" => errors::NO,
                "BYE" => ErrorKind::CLOSED,
                _ => errors::BAD,
            },
            code: 0,
            detail: None,
            text: crate::proto::normalize(&text),
            sample: format!("{status} {text}"),
            fatal: status == "BYE",
        },
    }
}

/// Times `fut` as `phase`; a failure becomes a [`Failure`].
pub(crate) async fn step<T>(
    r: &mut UnitReport,
    phase: Phase,
    fut: impl Future<Output = Result<T, ClientError>>,
) -> Result<T, Failure> {
    // Boxed: a visit's future is as large as its largest step, and an IDLE visit waits
    // for minutes holding it (4.4 KiB inline, 1.2 KiB with the steps boxed).
    r.time(phase, Box::pin(fut))
        .await
        .map_err(|e| failure(phase, e))
}

/// A greeting: timed from where the connect (or the TLS handshake) ended.
pub(crate) async fn greeting<T>(
    r: &mut UnitReport,
    fut: impl Future<Output = Result<T, ClientError>>,
) -> Result<T, Failure> {
    let t = r.start_after_last(phase::GREETING);
    let v = Box::pin(fut)
        .await
        .map_err(|e| failure(phase::GREETING, e))?;
    r.timed(phase::GREETING, t);
    Ok(v)
}

/// What a visit counts before it knows whether its deletions were committed.
#[derive(Default)]
struct Visit {
    /// Deletions asked for but not yet committed (QUIT, EXPUNGE).
    pending_deletes: u64,
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
    download: Spread,
    delete: Spread,
    mix: mix::State,
    connections_made: u64,
}

impl Visitor {
    pub fn new(id: usize, s: Arc<Settings>, mut rng: SmallRng) -> Self {
        let mix_rng = SmallRng::seed_from_u64(rng.random());
        Visitor {
            id,
            mix: mix::State::new(&s.mix, mix_rng, id),
            s,
            rng,
            download: Spread::default(),
            delete: Spread::default(),
            connections_made: 0,
        }
    }

    /// Where the next visit starts looking for an account (see [`Lease`]).
    fn account(&mut self) -> usize {
        let n = self.s.accounts.len();
        if self.s.round_robin {
            self.s.next_account.fetch_add(1, Ordering::Relaxed) as usize % n
        } else {
            self.rng.random_range(0..n)
        }
    }

    async fn open(
        &mut self,
        ep: &Endpoint,
        r: &mut UnitReport,
    ) -> Result<crate::transport::Connection, Failure> {
        let n = self.connections_made;
        self.connections_made += 1;
        ep.open(self.id, n, r).await
    }

    async fn pop3(
        &mut self,
        ep: &Endpoint,
        acct: usize,
        r: &mut UnitReport,
    ) -> Result<(), Failure> {
        let conn = self.open(ep, r).await?;
        let s = self.s.clone();
        let mut p = greeting(r, Pop3::greet(conn)).await?;
        let mut visit = Visit::default();
        let result = async {
            if ep.tls == TlsMode::Starttls {
                step(r, phase::STARTTLS, p.command("STLS")).await?;
                ep.handshake(&mut p.conn, r).await?;
            }
            let a = &s.accounts[acct];
            let login = async {
                match s.login {
                    Login::Plain => p.auth_plain(&a.user, &a.password).await,
                    l => p.login(&a.user, &a.password, l == Login::Apop).await,
                }
            };
            step(r, phase::AUTH, login).await?;
            let (n, _) = step(r, phase::STAT, p.stat()).await?;
            if s.listings {
                step(r, phase::UIDL, p.listing("UIDL")).await?;
                step(r, phase::LIST, p.listing("LIST")).await?;
            }
            let k = match s.messages_per_connection {
                0 => n,
                m => m.min(n),
            };
            let mut buf = Vec::new();
            for i in 1..=k {
                buf.clear();
                if self.download.next(s.download) {
                    step(r, phase::RETR, p.multi(&pop3_cmd::retr(i), &mut buf)).await?;
                    r.counters.count(phase::RETRIEVED, 1);
                    r.counters.count(phase::RETRIEVED_BYTES, buf.len() as u64);
                } else {
                    let cmd = pop3_cmd::top(i, s.top);
                    step(r, phase::TOP, p.multi(&cmd, &mut buf)).await?;
                }
                if self.delete.next(s.delete) {
                    step(r, phase::DELE, p.command(&pop3_cmd::dele(i))).await?;
                    visit.pending_deletes += 1;
                }
            }
            Ok(())
        }
        .await;
        finish(r, &mut visit, result, true, p.quit()).await
    }

    async fn imap(
        &mut self,
        ep: &Endpoint,
        seq: u64,
        acct: usize,
        r: &mut UnitReport,
    ) -> Result<(), Failure> {
        let conn = Box::pin(self.open(ep, r)).await?;
        let s = self.s.clone();
        let mut m = greeting(r, Imap::greet(conn)).await?;
        let mut visit = Visit::default();
        let result = async {
            if ep.tls == TlsMode::Starttls {
                step(r, phase::STARTTLS, m.command(imap_cmd::STARTTLS, |_| {})).await?;
                Box::pin(ep.handshake(&mut m.conn, r)).await?;
            }
            let a = &s.accounts[acct];
            let login = async {
                match s.login {
                    Login::Plain => m.authenticate_plain(&a.user, &a.password).await,
                    _ => m.login(&a.user, &a.password).await,
                }
            };
            step(r, phase::AUTH, login).await?;
            if s.mix.needs_capabilities() && !m.capabilities_current {
                step(r, phase::CAPABILITY, m.refresh_capabilities()).await?;
            }
            let sel = step(r, phase::SELECT, m.select("INBOX")).await?;
            if let Some(criteria) = &s.search {
                let cmd = format!("SEARCH {criteria}");
                Box::pin(mix::search(&mut m, phase::SEARCH, cmd.as_bytes(), r)).await?;
            }
            Box::pin(mix::searches(&s.mix, seq, &mut m, r)).await?;
            let k = match s.messages_per_connection {
                0 => sel.exists,
                n => n.min(sel.exists),
            };
            let mut pos = mix::Position::first();
            for _ in 0..k {
                if pos.at > m.exists {
                    break; // another session expunged the rest
                }
                Box::pin(self.imap_message(&mut m, &mut pos, &mut visit, r)).await?;
                pos.advance();
            }
            if visit.pending_deletes > 0 {
                step(r, phase::EXPUNGE, m.command(imap_cmd::EXPUNGE, |_| {})).await?;
                r.counters
                    .count(phase::DELETED, std::mem::take(&mut visit.pending_deletes));
            }
            if mix::share(seq, s.mix.append) {
                Box::pin(mix::append(&s.mix, &mut self.mix, seq, acct, &mut m, r)).await?;
            }
            if let Some(d) = s.idle {
                idle(&mut m, d, r).await?;
            }
            Ok(())
        }
        .await;
        Box::pin(finish(r, &mut visit, result, false, m.logout())).await
    }

    /// FETCH (whole or header), the flags asked for, then the mix's work on the message.
    async fn imap_message(
        &mut self,
        m: &mut Imap,
        pos: &mut mix::Position,
        visit: &mut Visit,
        r: &mut UnitReport,
    ) -> Result<(), Failure> {
        let s = &self.s;
        let i = pos.at;
        let whole = self.download.next(s.download);
        let cmd = imap_cmd::fetch(i, whole);
        let mut got = 0u64;
        let fetch = m.command(cmd.as_bytes(), |u| {
            pos.saw(u);
            if let Untagged::Fetch(_, f) = u {
                if let Some((_, b)) = f.body {
                    got += b.len() as u64;
                }
            }
        });
        step(r, phase::FETCH, fetch).await?;
        if whole {
            r.counters.count(phase::RETRIEVED, 1);
            r.counters.count(phase::RETRIEVED_BYTES, got);
        }
        if s.flag {
            let cmd = imap_cmd::add_flag(i, "\\Seen");
            step(r, phase::STORE, m.command(cmd.as_bytes(), |u| pos.saw(u))).await?;
        }
        let deleting = self.delete.next(s.delete);
        if deleting {
            let cmd = imap_cmd::add_flag(i, "\\Deleted");
            step(r, phase::STORE, m.command(cmd.as_bytes(), |u| pos.saw(u))).await?;
            visit.pending_deletes += 1;
        }
        mix::message(&s.mix, &mut self.mix, m, pos, deleting, visit, r).await
    }
}

/// IDLE for `d`: the phase is the server's part (IDLE to "+", DONE to OK), not the wait.
async fn idle(m: &mut Imap, d: Duration, r: &mut UnitReport) -> Result<(), Failure> {
    let t = r.start(phase::IDLE);
    let wait = std::pin::pin!(tokio::time::sleep(d));
    m.idle(wait, d).await.map_err(|e| failure(phase::IDLE, e))?;
    let total = r.took(t);
    let waited = m.idle_waited.as_micros() as u64;
    r.record(phase::IDLE, total.saturating_sub(waited));
    Ok(())
}

/// Ends a visit: after success, logs out as a timed phase; after a server refusal, logs
/// out untimed; after a transport failure, just drops. `commits` says whether logging out
/// commits pending deletions (POP3 QUIT does, RFC 1939 6; IMAP LOGOUT does not expunge).
async fn finish(
    r: &mut UnitReport,
    visit: &mut Visit,
    result: Result<(), Failure>,
    commits: bool,
    logout: impl Future<Output = Result<(), ClientError>>,
) -> Result<(), Failure> {
    let (outcome, logged_out) = match result {
        Ok(()) => {
            let res = step(r, phase::LOGOUT, logout).await;
            let ok = res.is_ok();
            (res, ok)
        }
        Err(f) if f.fatal => return Err(f),
        Err(f) => {
            let ok = logout.await.is_ok();
            (Err(f), ok)
        }
    };
    if commits && logged_out {
        r.counters
            .count(phase::DELETED, std::mem::take(&mut visit.pending_deletes));
    }
    outcome
}

impl Driver for Visitor {
    const WORDS: crate::results::UnitWords =
        crate::results::UnitWords::new("visits", "visits/s", "read", &[phase::SESSION], true);
    const COUNTERS: &'static [crate::metrics::Counter] = &[
        phase::RETRIEVED,
        phase::RETRIEVED_BYTES,
        phase::DELETED,
        phase::SEARCH_HITS,
    ];
    const PHASES: &'static [Phase] = &[
        Phase::CONNECT,
        Phase::TLS,
        phase::GREETING,
        phase::STARTTLS,
        phase::AUTH,
        phase::STAT,
        phase::UIDL,
        phase::LIST,
        phase::RETR,
        phase::TOP,
        phase::DELE,
        phase::SELECT,
        phase::SEARCH,
        phase::FETCH,
        phase::STORE,
        phase::EXPUNGE,
        phase::IDLE,
        phase::CAPABILITY,
        phase::SEARCH_DATE,
        phase::SEARCH_HEADER,
        phase::STRUCTURE,
        phase::PART,
        phase::COPY,
        phase::MOVE,
        phase::MOVE_EMULATED,
        phase::CREATE,
        phase::APPEND,
        phase::LOGOUT,
        phase::SESSION,
    ];

    async fn run_one(&mut self, seq: u64, r: &mut UnitReport) -> Outcome {
        // Exactly imap_percent of the run's visits are IMAP, spread evenly by sequence;
        // the mix's visit shares count over the IMAP visits (their own sequence).
        let imap = mix::share(seq, self.s.imap_percent);
        let imap_seq = mix::chosen_before(seq, self.s.imap_percent);
        let s = self.s.clone();
        // Held until the visit's end, or its cancellation.
        let lease = Lease::take(&s.held, self.account());
        let acct = lease.acct;
        let result = match (imap, &s.imap, &s.pop3) {
            (true, Some(ep), _) | (false, Some(ep), None) => {
                Box::pin(self.imap(ep, imap_seq, acct, r)).await
            }
            (_, _, Some(ep)) => Box::pin(self.pop3(ep, acct, r)).await,
            (_, None, None) => unreachable!("the plan has at least one endpoint"),
        };
        r.counters.bytes = r.counters.get(phase::RETRIEVED_BYTES);
        let outcome = match &result {
            Ok(()) => Outcome::Accepted,
            Err(f) if f.fatal => Outcome::Failed,
            Err(_) => Outcome::Rejected,
        };
        if let Err(f) = result {
            f.record(r);
        }
        if outcome == Outcome::Accepted {
            let session = r.took(r.started());
            r.record(phase::SESSION, session);
        }
        outcome
    }

    async fn finish(&mut self, _report: &mut UnitReport) {}
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
