//! Stream negotiation, server side (RFC 6120 §4–§7): the stream header, STARTTLS, SASL,
//! in-band registration (XEP-0077) before authentication, then resource binding.

use super::super::faults::FaultPoint;
use super::accounts::{Accounts, Refused};
use super::route::Binding;
use super::stanza::{bounce, iq_result, payload, Jid};
use super::stream::{End, Stream};
use super::{sasl, session};
use crate::proto::xmpp::{self, Element, NS_BIND, NS_SASL, NS_SESSION, NS_TLS};

const NS_REGISTER: &str = "jabber:iq:register";
const REGISTER_FEATURE: &str = "<register xmlns='http://jabber.org/features/iq-register'/>";
/// Failed SASL attempts on one stream before it is closed (RFC 6120 §6.4.5: 2 to 5).
const MAX_AUTH_FAILURES: u32 = 3;

/// Negotiates, then serves the bound session; how the stream ends.
pub(super) async fn serve(st: &mut Stream<'_>) -> End {
    match negotiate(st).await {
        Ok(binding) => session::run(st, binding).await,
        Err(end) => end,
    }
}

/// What a pre-authentication stream led to.
enum Step {
    /// TLS is up: a new stream follows.
    Tls,
    /// SASL succeeded for this bare JID: a new stream follows.
    Authenticated(String),
}

async fn negotiate(st: &mut Stream<'_>) -> Result<Binding, End> {
    if let Some(code) = st.fault(FaultPoint::Connect).await? {
        return Err(End::Error(injected_condition(code)));
    }
    let jid = loop {
        st.open().await?;
        st.send(&features(st));
        match before_auth(st).await? {
            Step::Tls => continue,
            Step::Authenticated(jid) => break jid,
        }
    };
    st.open().await?;
    // Resource binding, and XEP-0198 stream management (acknowledgements, no
    // resumption: see session.rs).
    let f = xmpp::features(false, &[], true).replace(
        "</stream:features>",
        "<sm xmlns='urn:xmpp:sm:3'/></stream:features>",
    );
    st.send(&f);
    bind(st, &jid).await
}

/// The stream error an injected failure of reply code `code` becomes.
pub(super) fn injected_condition(code: u16) -> &'static str {
    if code < 500 {
        "resource-constraint"
    } else {
        "internal-server-error"
    }
}

/// The features before authentication: STARTTLS until TLS is up (never over WebSocket,
/// where TLS is wss://'s, RFC 7395 §3.8), the SASL mechanisms
/// (SCRAM only when the server knows the passwords), and in-band registration.
fn features(st: &Stream<'_>) -> String {
    let mechanisms: &[&str] = if Accounts::knows_passwords(&st.sh.users) {
        &["SCRAM-SHA-256", "SCRAM-SHA-1", "PLAIN"]
    } else {
        &["PLAIN"]
    };
    let starttls = !st.conn.is_tls() && !st.conn.is_websocket();
    let f = xmpp::features(starttls, mechanisms, false);
    f.replace(
        "</stream:features>",
        &format!("{REGISTER_FEATURE}</stream:features>"),
    )
}

/// Before authentication: STARTTLS, SASL and registration; anything else is refused
/// with `not-authorized` (RFC 6120 §6.4.1 … stanzas need an authenticated stream).
async fn before_auth(st: &mut Stream<'_>) -> Result<Step, End> {
    let mut failures = 0;
    loop {
        let e = st.element().await?;
        match (e.local_name(), e.ns()) {
            ("starttls", Some(NS_TLS)) => {
                // Not offered (TLS already, or WebSocket): RFC 6120 §5.4.2.2's failure
                // case, the stream closed.
                if st.conn.is_tls() || st.conn.is_websocket() {
                    st.send(&format!("<failure xmlns='{NS_TLS}'/>"));
                    return Err(End::Close);
                }
                st.send(&xmpp::proceed());
                st.conn.starttls(&st.sh.tls).await?;
                st.sh.stats.tls_session(st.conn.tls_resumed());
                return Ok(Step::Tls);
            }
            ("auth", Some(NS_SASL)) => match sasl::authenticate(st, &e).await? {
                Some(jid) => return Ok(Step::Authenticated(jid)),
                None => {
                    failures += 1;
                    if failures >= MAX_AUTH_FAILURES {
                        return Err(End::Error("policy-violation"));
                    }
                }
            },
            ("iq", _) if payload(&e).1 == NS_REGISTER => register(st, &e),
            _ => return Err(End::Error("not-authorized")),
        }
    }
}

/// XEP-0077 in-band registration: the form, or the account created in memory.
fn register(st: &mut Stream<'_>, e: &Element) {
    let id = e.attr("id").unwrap_or("");
    let query = payload(e).0;
    match e.attr("type") {
        Some("get") => {
            let form = format!(
                "<query xmlns='{NS_REGISTER}'><instructions>Choose a user name and \
                 password.</instructions><username/><password/></query>"
            );
            st.send(&iq_result(id, None, "", &form));
        }
        Some("set") => {
            let field = |n: &str| query.and_then(|q| q.child(n)).map(|c| c.text.trim());
            let user = field("username").unwrap_or("");
            let password = field("password").unwrap_or("");
            let jid = Jid::parse(&format!("{user}@{}", st.domain))
                .filter(|j| j.resource.is_none() && !user.contains('@'));
            let refusal = match jid {
                _ if query.and_then(|q| q.child("remove")).is_some() => {
                    Some(("cancel", "not-allowed"))
                }
                Some(_) if password.is_empty() => Some(("modify", "not-acceptable")),
                None => Some(("modify", "not-acceptable")),
                Some(j) => match st.hub.accounts.register(&st.sh.users, &j.bare(), password) {
                    Ok(()) => {
                        st.sh.stats.xmpp_registration();
                        None
                    }
                    Err(Refused::Conflict) => Some(("cancel", "conflict")),
                },
            };
            match refusal {
                None => st.send(&iq_result(id, None, "", "")),
                Some((kind, condition)) => {
                    st.sh.stats.xmpp_bounce();
                    st.send(&bounce(e, "", kind, condition));
                }
            }
        }
        _ => {}
    }
}

/// After authentication: resource binding (client-chosen or generated resource); the
/// legacy session request is answered too. Other stanzas end the stream.
async fn bind(st: &mut Stream<'_>, jid: &str) -> Result<Binding, End> {
    let Some((local, domain)) = jid.split_once('@') else {
        return Err(End::Error("internal-server-error"));
    };
    loop {
        let e = st.element().await?;
        if e.local_name() != "iq" {
            return Err(End::Error("not-authorized"));
        }
        let id = e.attr("id").unwrap_or("");
        let (p, ns) = payload(&e);
        match (e.attr("type"), ns) {
            (Some("set"), NS_BIND) => {
                let asked = p
                    .and_then(|p| p.child("resource"))
                    .map_or("", |r| r.text.trim());
                if asked.len() > 1023 || asked.chars().any(char::is_control) {
                    st.sh.stats.xmpp_bounce();
                    st.send(&bounce(&e, "", "modify", "bad-request"));
                    continue;
                }
                let resource = if asked.is_empty() {
                    format!("spate-{:016x}", rand::random::<u64>())
                } else {
                    asked.to_string()
                };
                let (sh, hub) = (st.sh, st.hub);
                let queue = hub.options.queue;
                let b = hub.routes.bind(sh, local, domain, &resource, queue);
                st.send(&xmpp::bind_result(id, &b.full));
                return Ok(b);
            }
            (Some("set"), NS_SESSION) => st.send(&iq_result(id, None, "", "")),
            (Some("get" | "set"), _) => return Err(End::Error("not-authorized")),
            _ => {}
        }
    }
}
