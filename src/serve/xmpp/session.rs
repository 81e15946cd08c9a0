//! A bound session: reads its stanzas and writes what others route to it, at once.
//!
//! The loop handles every stanza already buffered, flushes, then waits for whichever
//! comes first: more input (cancel-safe reads) or a stanza in its queue. Queued stanzas
//! are written in batches and flushed together. Messages and presence are stamped with
//! the sender's full JID and routed; IQs are answered here (see [`super::iq`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::super::faults::FaultPoint;
use super::super::shared::Shared;
use super::negotiate::injected_condition;
use super::route::{Binding, Reach};
use super::stanza::{self, to_attr, Jid, Outbound, Prepared};
use super::stream::{End, Got, Stream};
use super::{iq, multicast};
use crate::proto::xmpp::Element;

/// Bytes of queued stanzas taken into the write buffer before the next flush: enough
/// to batch small stanzas, little enough that the write buffer of a slow reader stays
/// small next to its bounded queue.
const BATCH_BYTES: usize = 64 * 1024;

/// The session's place in the registry, released however the session ends (also when
/// its task is aborted at the end of the shutdown grace).
pub(super) struct Bound<'a> {
    sh: &'a Shared,
    pub b: Binding,
    /// XEP-0198: stanzas handled since the client enabled stream management (what `<a
    /// h='…'/>` answers its `<r/>` with); [`SM_OFF`] until it does.
    handled: AtomicU64,
}

/// [`Bound::handled`] before the client enabled stream management.
const SM_OFF: u64 = u64::MAX;
const NS_SM: &str = "urn:xmpp:sm:3";

impl<'a> Bound<'a> {
    fn new(sh: &'a Shared, b: Binding) -> Bound<'a> {
        sh.stats.xmpp_session(true);
        Bound {
            sh,
            b,
            handled: AtomicU64::new(SM_OFF),
        }
    }

    /// The account's bare JID.
    pub fn bare(&self) -> String {
        format!("{}@{}", self.b.local, self.b.domain)
    }
}

impl Drop for Bound<'_> {
    fn drop(&mut self) {
        super::hub(self.sh).routes.unbind(self.sh, &self.b);
        self.sh.stats.xmpp_session(false);
    }
}

/// Serves a bound session until its stream ends.
pub(super) async fn run(st: &mut Stream<'_>, b: Binding) -> End {
    let mut me = Bound::new(st.sh, b);
    loop {
        loop {
            match st.buffered() {
                Ok(Some(Got::Element(e))) => {
                    if let Err(end) = stanza(st, &me, &e).await {
                        return end;
                    }
                }
                Ok(Some(Got::Close)) => return End::Close,
                Ok(Some(Got::Open(_))) => return End::Error("not-well-formed"),
                Ok(None) => break,
                Err(end) => return end,
            }
        }
        if let Err(e) = st.conn.flush().await {
            return e.into();
        }
        let deadline = st.deadline;
        tokio::select! {
            r = st.conn.read_more(deadline) => {
                if let Err(e) = r {
                    return e.into();
                }
            }
            out = me.b.rx.recv() => {
                let Some(out) = out else {
                    // Taken out of the registry by someone else: replaced or too slow.
                    return End::Error(me.b.kick.get().copied().unwrap_or("reset"));
                };
                let mut batch = write(st, &me, out);
                while batch < BATCH_BYTES {
                    match me.b.rx.try_recv() {
                        Ok(out) => batch += write(st, &me, out),
                        Err(_) => break,
                    }
                }
                st.active();
            }
        }
    }
}

/// Queues one routed copy for writing; its size.
fn write(st: &mut Stream<'_>, me: &Bound<'_>, out: Outbound) -> usize {
    st.send_parts(&[out.stanza.head(), &out.to, out.stanza.tail()]);
    let n = out.len();
    me.b.queued.fetch_sub(n, Ordering::Relaxed);
    n
}

/// One stanza from the client (with the `xmpp-stanza` faults applied first).
async fn stanza(st: &mut Stream<'_>, me: &Bound<'_>, e: &Element) -> Result<(), End> {
    // XEP-0198's own elements are not stanzas: enable, the client's request for our
    // count, its acknowledgements of ours (we ask for none).
    if e.ns() == Some(NS_SM) {
        match e.local_name() {
            "enable" => {
                me.handled.store(0, Ordering::Relaxed);
                st.send("<enabled xmlns='urn:xmpp:sm:3'/>");
            }
            "r" => {
                let h = me.handled.load(Ordering::Relaxed);
                if h == SM_OFF {
                    return Err(End::Error("unsupported-stanza-type"));
                }
                st.send(&format!("<a xmlns='urn:xmpp:sm:3' h='{}'/>", h % (1 << 32)));
            }
            "a" => {}
            _ => return Err(End::Error("unsupported-stanza-type")),
        }
        return Ok(());
    }
    st.sh.stats.xmpp_stanza_received();
    if let Some(code) = st.fault(FaultPoint::XmppStanza).await? {
        return Err(End::Error(injected_condition(code)));
    }
    if e.local_name() == "message" && st.hub.options.end_at_message {
        return Err(End::Error("system-shutdown"));
    }
    match e.local_name() {
        "message" => message(st, me, e),
        "presence" => presence(st, me, e),
        "iq" => iq::handle(st, me, e),
        _ => return Err(End::Error("unsupported-stanza-type")),
    }
    // Handled (routed, bounced or answered): counted once the client enabled it.
    let _ = me
        .handled
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |h| {
            (h != SM_OFF).then(|| h + 1)
        });
    Ok(())
}

/// Sends the sender a stanza error answering `e`, and counts it.
pub(super) fn bounce(st: &mut Stream<'_>, me: &Bound<'_>, e: &Element, kind: &str, cond: &str) {
    st.sh.stats.xmpp_bounce();
    st.send(&stanza::bounce(e, &me.b.full, kind, cond));
}

/// A message: to the multicast service, to a bare JID (every available resource), or
/// to a full JID (that resource; if it is not bound, as to the bare JID, RFC 6121
/// §8.5.3.2.1). Nobody reached: `service-unavailable` for normal, chat and groupchat
/// messages (headlines and errors are dropped silently, §8.5.2.1.1).
fn message(st: &mut Stream<'_>, me: &Bound<'_>, e: &Element) {
    let (sh, hub) = (st.sh, st.hub);
    let kind = e.attr("type").unwrap_or("normal");
    let own = me.bare();
    let to = e.attr("to").unwrap_or(&own);
    let Some(jid) = Jid::parse(to) else {
        if kind != "error" {
            bounce(st, me, e, "modify", "jid-malformed");
        }
        return;
    };
    if to_multicast(hub, &jid) {
        return multicast::handle(st, me, e, false);
    }
    if !hub.serves(&jid.domain) {
        if kind != "error" {
            bounce(st, me, e, "cancel", "remote-server-not-found");
        }
        return;
    }
    let prepared = Arc::new(Prepared::new(e, &me.b.full));
    let to = to_attr(to);
    let routes = &hub.routes;
    let mut n = routes.deliver(sh, &jid, Reach::Messages, &prepared, &to);
    if n.is_none() && jid.resource.is_some() && matches!(kind, "normal" | "chat" | "headline") {
        let bare = Jid {
            resource: None,
            ..jid.clone()
        };
        n = routes.deliver(sh, &bare, Reach::Messages, &prepared, &to);
    }
    let n = n.unwrap_or(0);
    sh.stats.xmpp_routed(false, n);
    if n == 0 && matches!(kind, "normal" | "chat" | "groupchat") {
        bounce(st, me, e, "cancel", "service-unavailable");
    }
}

/// Addressed to a multicast service (`multicast.<domain>`: no local part, no resource).
fn to_multicast(hub: &super::Hub, jid: &Jid) -> bool {
    jid.local.is_none() && jid.resource.is_none() && hub.multicast_of(&jid.domain).is_some()
}

/// Presence: without `to` it is broadcast (available, a change of show/status, or
/// unavailable); with `to` it is directed (to a JID's available resources, or the
/// multicast service). Subscription requests are passed on; probes and presence to
/// nobody are dropped, as RFC 6121 lets a server do.
fn presence(st: &mut Stream<'_>, me: &Bound<'_>, e: &Element) {
    let (sh, hub) = (st.sh, st.hub);
    let kind = e.attr("type");
    let Some(to) = e.attr("to") else {
        if matches!(kind, None | Some("unavailable")) {
            let priority = e
                .child("priority")
                .and_then(|p| p.text.trim().parse::<i8>().ok())
                .unwrap_or(0);
            let prepared = Prepared::new(e, &me.b.full);
            let n = hub
                .routes
                .presence(sh, &me.b, prepared, kind.is_none(), priority);
            sh.stats.xmpp_routed(true, n);
        }
        return;
    };
    let Some(jid) = Jid::parse(to) else {
        return;
    };
    if to_multicast(hub, &jid) {
        return multicast::handle(st, me, e, true);
    }
    if jid.local.is_none() || !hub.serves(&jid.domain) || kind == Some("probe") {
        return;
    }
    if let (Some(r), Some(k)) = (&hub.rosters, kind) {
        // A subscription stanza changes both rosters, then goes on to the contact.
        r.apply(
            &me.bare().to_ascii_lowercase(),
            k,
            &jid.bare().to_ascii_lowercase(),
        );
    }
    let prepared = Arc::new(Prepared::new(e, &me.b.full));
    let n = hub
        .routes
        .deliver(sh, &jid, Reach::Presence, &prepared, &to_attr(to))
        .unwrap_or(0);
    sh.stats.xmpp_routed(true, n);
}
