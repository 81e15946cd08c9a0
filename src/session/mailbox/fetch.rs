//! Reading mailboxes back, for `spate verify` and tests: everything in INBOX at once
//! ([`fetch_mailbox`]), or new messages as they arrive over IMAP IDLE ([`watch_mailbox`]).
//! JMAP's counterpart is `session::jmap::inbox`, reporting in the same terms ([`Fetched`],
//! [`Watched`]).

use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::client::{ClientError, Imap, Pop3};
use crate::proto::imap_client::{command as imap_cmd, internal_date, Untagged};
use crate::proto::pop3_client::command as pop3_cmd;
use crate::session::{Endpoint, TlsMode};

/// Which mailbox protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MailProto {
    Imap,
    Pop3,
}

/// A mailbox login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub user: String,
    pub password: String,
}

/// One message read from a mailbox.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The IMAP UID (decimal) or the POP3 UIDL.
    pub id: String,
    /// The message as stored (header and body, CRLF line ends as the server sends them).
    pub raw: Vec<u8>,
    /// IMAP INTERNALDATE (whole seconds); None over POP3.
    pub arrived: Option<SystemTime>,
}

#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("bad mailbox URL '{0}': {1}")]
    Url(String, String),
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl From<crate::transport::TransportError> for FetchError {
    fn from(e: crate::transport::TransportError) -> Self {
        FetchError::Client(e.into())
    }
}

/// Parses `imap://host[:port]`, `imaps://`, `pop3://`, `pop3s://` (default ports 143, 993,
/// 110, 995); `imap+starttls://` and `pop3+stls://` upgrade with STARTTLS/STLS.
pub fn parse_url(
    url: &str,
    tls: &crate::tls::ClientOptions,
    timeout: Duration,
) -> Result<(MailProto, Endpoint), FetchError> {
    let bad = |m: &str| FetchError::Url(url.to_string(), m.to_string());
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| bad("expected imap://, imaps://, pop3:// or pop3s://"))?;
    let (proto, mode, port) = match scheme.to_ascii_lowercase().as_str() {
        "imap" => (MailProto::Imap, TlsMode::Plain, 143),
        "imap+starttls" => (MailProto::Imap, TlsMode::Starttls, 143),
        "imaps" => (MailProto::Imap, TlsMode::Implicit, 993),
        "pop3" | "pop" => (MailProto::Pop3, TlsMode::Plain, 110),
        "pop3+stls" | "pop3+starttls" => (MailProto::Pop3, TlsMode::Starttls, 110),
        "pop3s" | "pops" => (MailProto::Pop3, TlsMode::Implicit, 995),
        _ => return Err(bad("unknown scheme")),
    };
    let hostport = rest.split(['/', '?']).next().unwrap_or("");
    let ep = endpoint(hostport, port, mode, tls, timeout).map_err(|e| bad(&e))?;
    Ok((proto, ep))
}

/// The endpoint of a mailbox server at `hostport` (`port` when it names none), its
/// certificate checked as `tls` says unless `mode` is plain.
pub fn endpoint(
    hostport: &str,
    port: u16,
    mode: TlsMode,
    tls: &crate::tls::ClientOptions,
    timeout: Duration,
) -> Result<Endpoint, String> {
    let (host, addr) = crate::session::resolve(hostport, port).map_err(|e| format!("{e:#}"))?;
    let tls_config = if mode == TlsMode::Plain {
        None
    } else {
        Some(crate::tls::client_config(tls).map_err(|e| e.to_string())?)
    };
    Ok(Endpoint {
        addr,
        server_name: crate::tls::server_name(&host).map_err(|e| e.to_string())?,
        tls: mode,
        tls_config,
        timeout,
        bind: Vec::new(),
    })
}

async fn open_pop3(ep: &Endpoint, acct: &Account) -> Result<Pop3, FetchError> {
    let mut p = Pop3::greet(ep.connect().await?).await?;
    if ep.tls == TlsMode::Starttls {
        p.stls(ep).await?;
    }
    p.login(&acct.user, &acct.password, false).await?;
    Ok(p)
}

async fn open_imap(ep: &Endpoint, acct: &Account) -> Result<Imap, FetchError> {
    let mut m = Imap::greet(ep.connect().await?).await?;
    if ep.tls == TlsMode::Starttls {
        m.starttls(ep).await?;
    }
    m.login(&acct.user, &acct.password).await?;
    Ok(m)
}

/// Reads every message of INBOX (in the server's order), deleting them afterwards when
/// `delete` is set (POP3 DELE + QUIT; IMAP \Deleted + EXPUNGE of exactly what was read).
/// Holds the whole mailbox in memory: meant for test-sized mailboxes.
pub async fn fetch_mailbox(
    proto: MailProto,
    ep: &Endpoint,
    acct: &Account,
    delete: bool,
) -> Result<Vec<Fetched>, FetchError> {
    match proto {
        MailProto::Pop3 => {
            let mut p = open_pop3(ep, acct).await?;
            let mut out = Vec::new();
            for (n, uidl) in p.listing("UIDL").await? {
                let mut raw = Vec::new();
                p.multi(&pop3_cmd::retr(n), &mut raw).await?;
                out.push(Fetched {
                    id: uidl,
                    raw,
                    arrived: None,
                });
                if delete {
                    p.command(&pop3_cmd::dele(n)).await?;
                }
            }
            p.quit().await?;
            Ok(out)
        }
        MailProto::Imap => {
            let mut m = open_imap(ep, acct).await?;
            let sel = m.select("INBOX").await?;
            let out = if sel.exists > 0 {
                fetch_uids(&mut m, "1:*", 0).await?
            } else {
                Vec::new()
            };
            if delete && !out.is_empty() {
                let uids: Vec<&str> = out.iter().map(|f| f.id.as_str()).collect();
                for chunk in uids.chunks(200) {
                    let cmd = imap_cmd::uid_add_flag(&chunk.join(","), "\\Deleted");
                    m.command(cmd.as_bytes(), |_| {}).await?;
                }
                m.command(imap_cmd::EXPUNGE, |_| {}).await?;
            }
            m.logout().await?;
            Ok(out)
        }
    }
}

/// `UID FETCH set (UID INTERNALDATE BODY.PEEK[])`, keeping messages with UID > `after`.
async fn fetch_uids(m: &mut Imap, set: &str, after: u32) -> Result<Vec<Fetched>, FetchError> {
    let mut out = Vec::new();
    let cmd = imap_cmd::uid_fetch_whole(set);
    m.command(cmd.as_bytes(), |u| {
        if let Untagged::Fetch(_, f) = u {
            if let (Some(uid), Some((_, body))) = (f.uid, f.body) {
                if uid > after {
                    out.push(Fetched {
                        id: uid.to_string(),
                        raw: body.to_vec(),
                        arrived: f.internal_date.and_then(internal_date),
                    });
                }
            }
        }
    })
    .await?;
    Ok(out)
}

/// What a mailbox watch reports.
#[derive(Debug)]
pub enum Watched {
    /// A message, fetched whole, announced just now (IMAP IDLE).
    New(Fetched),
    /// A message, fetched whole, that push announced at this time (JMAP: the moment
    /// the state event was read, before the message was asked for).
    Announced(Fetched, SystemTime),
    /// The server accepted IDLE: from now on a delivery is reported as it happens (sent
    /// at every (re)start of IDLE; a readiness signal for whoever waits on the watch).
    Idling,
}

/// Watches INBOX over IMAP IDLE and hands every message to `on_event` as it arrives
/// (fetched whole), until `stop` turns true. Messages already there when the watch
/// starts are handed over first, so nothing delivered while it was logging in is
/// missed; callers tell old from new by content (the X-Spate-Trace run id). IDLE is
/// renewed every few minutes (RFC 2177 asks for less than 29).
pub async fn watch_mailbox(
    ep: &Endpoint,
    acct: &Account,
    mut on_event: impl FnMut(Watched) + Send,
    mut stop: watch::Receiver<bool>,
) -> Result<(), FetchError> {
    let mut m = open_imap(ep, acct).await?;
    let sel = m.select("INBOX").await?;
    let refresh = Duration::from_secs(240);
    let mut last_uid = 0u32;
    let mut exists = sel.exists;
    loop {
        if exists > 0 {
            let set = format!("{}:*", last_uid + 1);
            for f in fetch_uids(&mut m, &set, last_uid).await? {
                last_uid = last_uid.max(f.id.parse().unwrap_or(0));
                on_event(Watched::New(f));
            }
        }
        // A dropped sender counts as a stop: nobody can ask any more.
        if *stop.borrow() || stop.has_changed().is_err() {
            break;
        }
        let until = {
            let stop = &mut stop;
            let on_event = &mut on_event;
            // First polled once the server has answered IDLE with its continuation.
            async move {
                on_event(Watched::Idling);
                tokio::select! {
                    _ = stop.wait_for(|v| *v) => {}
                    _ = tokio::time::sleep(refresh) => {}
                }
            }
        };
        m.idle(std::pin::pin!(until), refresh).await?;
        exists = m.exists;
    }
    m.logout().await?;
    Ok(())
}
