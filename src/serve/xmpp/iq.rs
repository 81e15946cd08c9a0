//! IQs of a bound session. The server answers those addressed to itself (the domain, or
//! the account's bare JID), the multicast service answers its own, IQs to another
//! session's full JID are passed on; every request gets an answer: a result, or a
//! stanza error (`service-unavailable` for what is not implemented).

use std::fmt::Write as _;
use std::sync::Arc;

use super::route::Reach;
use super::session::{bounce, Bound};
use super::stanza::{iq_result, payload, to_attr, Jid, Prepared};
use super::stream::Stream;
use crate::proto::xmpp::{escape, Element, NS_BIND, NS_ROSTER, NS_SESSION};

const NS_PING: &str = "urn:xmpp:ping";
const NS_DISCO_INFO: &str = "http://jabber.org/protocol/disco#info";
const NS_DISCO_ITEMS: &str = "http://jabber.org/protocol/disco#items";
pub(super) const NS_ADDRESS: &str = "http://jabber.org/protocol/address";
/// The shared roster's one group.
const ROSTER_GROUP: &str = "spate";

/// Answers or routes one IQ.
pub(super) fn handle(st: &mut Stream<'_>, me: &Bound<'_>, e: &Element) {
    let kind = e.attr("type").unwrap_or("");
    let request = matches!(kind, "get" | "set");
    if !request && !matches!(kind, "result" | "error") {
        return bounce(st, me, e, "modify", "bad-request");
    }
    let Some(to) = e.attr("to") else {
        return server(st, me, e, None);
    };
    let Some(jid) = Jid::parse(to) else {
        if request {
            bounce(st, me, e, "modify", "jid-malformed");
        }
        return;
    };
    let hub = &st.hub;
    let bare_domain = jid.local.is_none() && jid.resource.is_none();
    if bare_domain && jid.domain == me.b.domain {
        return server(st, me, e, Some(to));
    }
    if bare_domain && hub.multicast_of(&jid.domain).is_some() {
        return service(st, me, e, to);
    }
    if jid.resource.is_none() && jid.bare() == me.bare() {
        return server(st, me, e, Some(to));
    }
    if jid.local.is_some() && jid.resource.is_some() && hub.serves(&jid.domain) {
        let prepared = Arc::new(Prepared::new(e, &me.b.full));
        let (sh, hub) = (st.sh, st.hub);
        let n = hub
            .routes
            .deliver(sh, &jid, Reach::Presence, &prepared, &to_attr(to));
        if n.unwrap_or(0) > 0 || !request {
            return;
        }
    }
    if !request {
        return;
    }
    if hub.serves(&jid.domain) || hub.multicast_of(&jid.domain).is_some() {
        bounce(st, me, e, "cancel", "service-unavailable");
    } else {
        bounce(st, me, e, "cancel", "remote-server-not-found");
    }
}

/// What the server itself answers: session, ping, roster, service discovery.
fn server(st: &mut Stream<'_>, me: &Bound<'_>, e: &Element, from: Option<&str>) {
    let kind = e.attr("type").unwrap_or("");
    if !matches!(kind, "get" | "set") {
        return;
    }
    let reply = match (kind, payload(e).1) {
        ("set", NS_SESSION) | ("get", NS_PING) => String::new(),
        ("get", NS_ROSTER) => roster(st, me),
        ("get", NS_DISCO_INFO) => disco_info(
            ("server", "im", "spate"),
            &[
                NS_DISCO_INFO,
                NS_DISCO_ITEMS,
                NS_PING,
                NS_ROSTER,
                "jabber:iq:register",
            ],
        ),
        ("get", NS_DISCO_ITEMS) => {
            let mut q = format!("<query xmlns='{NS_DISCO_ITEMS}'><item jid='multicast.");
            escape(&me.b.domain, &mut q);
            q.push_str("' name='Multicast'/></query>");
            q
        }
        ("set", NS_ROSTER | NS_BIND) => return bounce(st, me, e, "cancel", "not-allowed"),
        _ => return bounce(st, me, e, "cancel", "service-unavailable"),
    };
    let id = e.attr("id").unwrap_or("");
    st.send(&iq_result(id, from, &me.b.full, &reply));
}

/// The multicast service's answers: its identity and the XEP-0033 feature.
fn service(st: &mut Stream<'_>, me: &Bound<'_>, e: &Element, service: &str) {
    let kind = e.attr("type").unwrap_or("");
    if !matches!(kind, "get" | "set") {
        return;
    }
    let reply = match (kind, payload(e).1) {
        ("get", NS_DISCO_INFO) => disco_info(
            ("service", "multicast", "Multicast"),
            &[NS_DISCO_INFO, NS_ADDRESS],
        ),
        ("get", NS_PING) => String::new(),
        _ => return bounce(st, me, e, "cancel", "service-unavailable"),
    };
    let id = e.attr("id").unwrap_or("");
    st.send(&iq_result(id, Some(service), &me.b.full, &reply));
}

/// A disco#info query result: one identity (category, type, name) and these features.
fn disco_info(identity: (&str, &str, &str), features: &[&str]) -> String {
    let (category, kind, name) = identity;
    let mut q = format!(
        "<query xmlns='{NS_DISCO_INFO}'><identity category='{category}' type='{kind}' \
         name='{name}'/>"
    );
    for f in features {
        let _ = write!(q, "<feature var='{f}'/>");
    }
    q.push_str("</query>");
    q
}

/// The shared roster: every other account of the domain, in one group, subscription
/// both (none without a users file or registrations).
fn roster(st: &Stream<'_>, me: &Bound<'_>) -> String {
    let own = me.bare();
    let mut q = format!("<query xmlns='{NS_ROSTER}'>");
    if let Some(r) = &st.hub.rosters {
        // Built from subscriptions: each item with its own state.
        for (jid, item) in r.items(&own.to_ascii_lowercase()) {
            q.push_str("<item jid='");
            escape(&jid, &mut q);
            let _ = write!(q, "' subscription='{}'", item.subscription());
            q.push_str(if item.ask { " ask='subscribe'/>" } else { "/>" });
        }
        q.push_str("</query>");
        return q;
    }
    for jid in st.hub.accounts.of_domain(&st.sh.users, &me.b.domain) {
        if jid == own {
            continue;
        }
        q.push_str("<item jid='");
        escape(&jid, &mut q);
        let _ = write!(
            q,
            "' subscription='both'><group>{ROSTER_GROUP}</group></item>"
        );
    }
    q.push_str("</query>");
    q
}
