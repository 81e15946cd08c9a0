//! The XEP-0033 multicast service at `multicast.<domain>`: one stanza from the client, a
//! copy to every address it lists (to, cc and bcc of the served domains), each copy
//! addressed to its recipient. The copies keep the `<addresses>` block with every
//! address marked `delivered='true'` and the bcc entries removed (XEP-0033 §5); the
//! stanza is serialised once for all of them.
//!
//! Addresses that are offline, unknown or on a domain this server does not serve get
//! nothing, and the sender gets no error for them (the XEP's all-or-nothing `forbidden`
//! would make one offline account fail a whole fan-out); more addresses than the limit
//! get the sender `not-acceptable` and nobody a copy.

use std::sync::Arc;

use super::iq::NS_ADDRESS;
use super::route::Reach;
use super::session::{bounce, Bound};
use super::stanza::{stamped, to_attr, Jid, Prepared};
use super::stream::Stream;
use crate::proto::xmpp::Element;

/// Fans `e` (a message, or a presence when `presence`) out to its addresses.
pub(super) fn handle(st: &mut Stream<'_>, me: &Bound<'_>, e: &Element, presence: bool) {
    let (sh, hub) = (st.sh, st.hub);
    let is_block = |c: &Element| c.local_name() == "addresses" && c.ns() == Some(NS_ADDRESS);
    let errors_ok = e.attr("type") != Some("error");
    let Some(block) = e.children.iter().find(|c| is_block(c)) else {
        if errors_ok {
            bounce(st, me, e, "modify", "bad-request");
        }
        return;
    };
    let targets: Vec<&str> = block
        .children_named("address")
        .filter(|a| a.attr("delivered") != Some("true"))
        .filter(|a| matches!(a.attr("type"), Some("to" | "cc" | "bcc")))
        .filter_map(|a| a.attr("jid"))
        .collect();
    if targets.len() > hub.options.multicast_limit {
        if errors_ok {
            bounce(st, me, e, "modify", "not-acceptable");
        }
        return;
    }
    let resolved: Vec<(Jid, Arc<str>)> = targets
        .iter()
        .filter_map(|t| Some((Jid::parse(t)?, to_attr(t))))
        .filter(|(j, _)| j.local.is_some() && hub.serves(&j.domain))
        .collect();
    let mut copy = stamped(e, &me.b.full);
    for c in copy.children.iter_mut().filter(|c| is_block(c)) {
        c.children
            .retain(|a| !(a.local_name() == "address" && a.attr("type") == Some("bcc")));
        for a in c
            .children
            .iter_mut()
            .filter(|a| a.local_name() == "address")
        {
            a.attrs.retain(|(k, _)| k != "delivered");
            a.attrs.push(("delivered".into(), "true".into()));
        }
    }
    let reach = if presence {
        Reach::Presence
    } else {
        Reach::Messages
    };
    let prepared = Arc::new(Prepared::of(&copy));
    let n = hub.routes.fan_out(sh, &resolved, reach, &prepared);
    sh.stats.xmpp_multicast();
    sh.stats.xmpp_routed(presence, n);
}
