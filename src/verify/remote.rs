//! Mailboxes read over IMAP, POP3 or JMAP: every address of the sent log (recipients,
//! and senders for derived messages) is logged into and read whole; messages are fed to
//! the ledger by UID/UIDL/email id, so polling again while waiting counts each message
//! once (over JMAP, what the ledger has seen is not even downloaded again).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::session::jmap::client::Error as JmapError;
use crate::session::jmap::inbox as jmap;
use crate::session::mailbox::fetch::{
    fetch_mailbox, parse_url, watch_mailbox, Account, Fetched, MailProto, Watched,
};
use crate::session::Endpoint;
use crate::verify::{Ledger, SentLog, Timing};
use crate::UsageError;

/// Passwords for the mailboxes to read.
#[derive(Debug, Clone)]
pub enum Passwords {
    /// `address password` lines.
    File(HashMap<String, String>),
    /// One password for every mailbox (the environment variable SPATE_PASSWORD).
    Same(String),
}

impl Passwords {
    /// From `--users-file`, else SPATE_PASSWORD; a usage error when neither is given.
    pub fn load(users_file: Option<&PathBuf>) -> anyhow::Result<Passwords> {
        if let Some(path) = users_file {
            let creds = crate::opts::accounts::read_credentials(path)?;
            return Ok(Passwords::File(
                creds
                    .into_iter()
                    .map(|(u, p)| (u.to_ascii_lowercase(), p))
                    .collect(),
            ));
        }
        match std::env::var("SPATE_PASSWORD") {
            Ok(p) => Ok(Passwords::Same(p)),
            Err(_) => Err(UsageError(
                "an IMAP/POP3/JMAP source needs passwords: --users-file FILE ('address password' \
                 lines) or the environment variable SPATE_PASSWORD"
                    .into(),
            )
            .into()),
        }
    }

    fn get(&self, address: &str) -> Option<&str> {
        match self {
            Passwords::File(m) => m.get(&address.to_ascii_lowercase()).map(String::as_str),
            Passwords::Same(p) => Some(p),
        }
    }
}

/// What is read: an IMAP or POP3 server, or a JMAP one.
enum Server {
    Mail(MailProto, Endpoint),
    Jmap(Arc<jmap::Server>),
}

/// A mailbox server to read the mailboxes from.
pub struct Remote {
    server: Server,
    passwords: Passwords,
    push: Arc<Push>,
}

/// What the watchers say of their push channels.
struct Push {
    /// Watchers that follow their mailbox by now, or gave up: a readiness count.
    settled: tokio::sync::watch::Sender<usize>,
    /// Mailboxes whose server refused push, and the first reason given.
    refused: Mutex<(usize, String)>,
}

impl Remote {
    pub fn new(
        url: &str,
        tls: &crate::tls::ClientOptions,
        timeout: Duration,
        passwords: Passwords,
    ) -> anyhow::Result<Remote> {
        let jmap = url.split_once("://").is_some_and(|(s, _)| {
            s.eq_ignore_ascii_case("jmap") || s.eq_ignore_ascii_case("jmaps")
        });
        let server = if jmap {
            Server::Jmap(Arc::new(
                jmap::Server::parse(url, tls, timeout).map_err(UsageError)?,
            ))
        } else {
            let (proto, endpoint) =
                parse_url(url, tls, timeout).map_err(|e| UsageError(e.to_string()))?;
            Server::Mail(proto, endpoint)
        };
        Ok(Remote {
            server,
            passwords,
            push: Arc::new(Push {
                settled: tokio::sync::watch::Sender::new(0),
                refused: Mutex::new((0, String::new())),
            }),
        })
    }

    /// Reads every mailbox the sent log names into the ledger once, a few sessions at a
    /// time. Blocking: call from a blocking thread of the runtime.
    pub fn poll(&self, log: &SentLog, ledger: &mut Ledger) -> anyhow::Result<()> {
        let mut skipped = Vec::new();
        let mut accounts = Vec::new();
        for id in 0..log.addrs.len() as u32 {
            let address = log.addrs.name(id);
            match self.passwords.get(address) {
                Some(password) => accounts.push(Account {
                    user: address.to_string(),
                    password: password.to_string(),
                }),
                None => skipped.push(address.to_string()),
            }
        }
        for batch in accounts.chunks(PARALLEL) {
            let done = match &self.server {
                Server::Mail(proto, ep) => {
                    let (proto, ep) = (*proto, ep.clone());
                    join(by_address(batch), move |account| {
                        let ep = ep.clone();
                        async move {
                            fetch_mailbox(proto, &ep, &account, false)
                                .await
                                .map_err(anyhow::Error::from)
                        }
                    })?
                }
                Server::Jmap(server) => read_jmap(server, batch, ledger)?,
            };
            for (address, fetched) in done {
                let fetched = fetched.map_err(|e| anyhow::anyhow!("mailbox {address}: {e}"))?;
                for m in fetched {
                    if !ledger.seen(&address, &m.id) {
                        // INTERNALDATE and receivedAt have whole seconds.
                        let arrived = m.arrived.map_or(Timing::Unknown, Timing::Seconds);
                        ledger.ingest(&address, &m.id, &m.raw, arrived);
                    }
                }
            }
        }
        if !skipped.is_empty() && skipped.len() == log.addrs.len() {
            anyhow::bail!(
                "no password for any mailbox of the run (first: {}): check --users-file",
                skipped[0]
            );
        }
        Ok(())
    }

    /// What the reader has to say beside the counts: push the server refused.
    pub fn notes(&self) -> Vec<String> {
        let (n, why) = &*self.push.refused.lock().unwrap_or_else(|p| p.into_inner());
        if *n == 0 {
            return Vec::new();
        }
        vec![format!(
            "no push for {n} watched mailbox{} ({why}): {} arrivals timed by the final read (receivedAt, whole seconds)",
            if *n == 1 { "" } else { "es" },
            if *n == 1 { "its" } else { "their" },
        )]
    }
}

/// Sessions at once while reading.
const PARALLEL: usize = 8;

/// What reading one mailbox gave.
type Read = (String, anyhow::Result<Vec<Fetched>>);

/// Runs `read` on every item (a mailbox's address and what reading it needs) at once,
/// each on a task of its own; the results in the items' order, whatever order the
/// sessions end in. Blocking.
fn join<I, T, F, Fut>(items: Vec<(String, I)>, mut read: F) -> anyhow::Result<Vec<(String, T)>>
where
    T: Send + 'static,
    F: FnMut(I) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    for (i, (address, item)) in items.into_iter().enumerate() {
        let fut = read(item);
        set.spawn(async move { (i, address, fut.await) });
    }
    let mut done = tokio::runtime::Handle::current().block_on(async {
        let mut v = Vec::new();
        while let Some(r) = set.join_next().await {
            v.push(r?);
        }
        Ok::<_, tokio::task::JoinError>(v)
    })?;
    done.sort_by_key(|(i, _, _)| *i);
    Ok(done.into_iter().map(|(_, a, r)| (a, r)).collect())
}

fn by_address(batch: &[Account]) -> Vec<(String, Account)> {
    batch.iter().map(|a| (a.user.clone(), a.clone())).collect()
}

/// One batch of JMAP mailboxes: each listed, then what the ledger has not seen yet
/// downloaded (what push already delivered is not asked for again).
fn read_jmap(
    server: &Arc<jmap::Server>,
    batch: &[Account],
    ledger: &Ledger,
) -> anyhow::Result<Vec<Read>> {
    let listed = join(by_address(batch), |account| {
        let server = server.clone();
        async move {
            let mut r = jmap::Reader::log_in(&server, &account).await?;
            let listed = r.list().await?;
            Ok::<_, JmapError>((r, listed))
        }
    })?;
    let mut wanted = Vec::new();
    for (address, r) in listed {
        match r {
            Ok((reader, listed)) => {
                let new: Vec<_> = listed
                    .into_iter()
                    .filter(|l| !ledger.seen(&address, &l.id))
                    .collect();
                wanted.push((address, (reader, new)));
            }
            Err(e) => return Ok(vec![(address, Err(e.into()))]),
        }
    }
    let got = join(
        wanted,
        |(mut reader, listed): (jmap::Reader, Vec<jmap::Listed>)| async move {
            let mut out = Vec::new();
            for l in &listed {
                out.push(reader.download(l).await?);
            }
            reader.close().await;
            Ok::<_, JmapError>(out)
        },
    )?;
    Ok(got
        .into_iter()
        .map(|(a, r)| (a, r.map_err(anyhow::Error::from)))
        .collect())
}

/// Most mailboxes followed by push at once while a run goes (one connection each, two
/// over JMAP); beyond that, arrivals are timed by the final read.
pub const MAX_WATCHED: usize = 200;

impl Remote {
    /// Follows the mailboxes while the run goes, over IMAP IDLE or JMAP's event stream,
    /// feeding each new message to the ledger with the moment it was announced as its
    /// arrival time (real-time delivery latency). POP3 has no push: nothing is watched,
    /// the final read times arrivals from the Received headers; nor has a JMAP server
    /// whose EventSource refuses ([`Remote::notes`] says so). Returns the watchers to
    /// await after `stop`; [`Remote::ready`] waits until they follow their mailboxes.
    pub fn watch(
        &self,
        addresses: &[String],
        ledger: Arc<Mutex<Ledger>>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        if matches!(self.server, Server::Mail(MailProto::Pop3, _)) {
            return Vec::new();
        }
        let mut tasks = Vec::new();
        for address in addresses.iter().take(MAX_WATCHED) {
            let Some(password) = self.passwords.get(address) else {
                continue;
            };
            let account = Account {
                user: address.clone(),
                password: password.to_string(),
            };
            let (ledger, stop, push) = (ledger.clone(), stop.clone(), self.push.clone());
            let settled = Arc::new(AtomicBool::new(false));
            let on_event = {
                let (push, settled) = (push.clone(), settled.clone());
                let mailbox = account.user.clone();
                move |w: Watched| {
                    let (m, at) = match w {
                        Watched::New(m) => (m, std::time::SystemTime::now()),
                        Watched::Announced(m, at) => (m, at),
                        Watched::Idling => return push.settle(&settled),
                    };
                    let mut l = ledger.lock().unwrap_or_else(|p| p.into_inner());
                    if !l.seen(&mailbox, &m.id) {
                        l.ingest(&mailbox, &m.id, &m.raw, Timing::Exact(at));
                    }
                }
            };
            let task = match &self.server {
                Server::Mail(_, ep) => {
                    let ep = ep.clone();
                    tokio::spawn(async move {
                        // A watcher that fails (login refused, server gone) leaves the
                        // mailbox to the final read, which reports the error.
                        let _ = watch_mailbox(&ep, &account, on_event, stop).await;
                        push.settle(&settled);
                    })
                }
                Server::Jmap(server) => {
                    let server = server.clone();
                    tokio::spawn(async move {
                        let r = jmap::watch(&server, &account, on_event, stop).await;
                        if let Err(jmap::WatchError::NoPush(why)) = r {
                            let mut refused =
                                push.refused.lock().unwrap_or_else(|p| p.into_inner());
                            refused.0 += 1;
                            if refused.1.is_empty() {
                                refused.1 = why;
                            }
                        }
                        push.settle(&settled);
                    })
                }
            };
            tasks.push(task);
        }
        tasks
    }

    /// Waits until `watchers` watchers follow their mailboxes (or gave up), at most
    /// `limit`: a run that starts before its mailboxes are watched has its first
    /// deliveries timed by the final read.
    pub async fn ready(&self, watchers: usize, limit: Duration) {
        let mut rx = self.push.settled.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|n| *n >= watchers)).await;
    }
}

impl Push {
    /// A watcher follows its mailbox, or ended: counted once, the first time.
    fn settle(&self, settled: &AtomicBool) {
        if !settled.swap(true, Ordering::Relaxed) {
            self.settled.send_modify(|n| *n += 1);
        }
    }
}
