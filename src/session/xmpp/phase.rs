//! XMPP's phases.

pub use crate::session::phase::*;

crate::metrics::phases! {
    pub WEBSOCKET => "websocket", "XMPP over WebSocket: the HTTP upgrade request sent to the server's 101 answer (RFC 6455, subprotocol xmpp)";
    pub STREAM => "stream", "XMPP: stream header sent to the server's stream features (each (re)start)";
    pub REGISTER => "register", "XMPP: in-band registration (XEP-0077) to its result";
    pub BIND => "bind", "XMPP: resource binding (and a legacy session IQ) to its result, or a XEP-0198 stream resumption to <resumed/>";
    pub ROSTER => "roster", "XMPP: roster get to its result";
    pub SUBSCRIBE => "subscribe", "XMPP: --roster all: a session's subscription requests to its contacts' last approval";
    pub PRESENCE => "presence", "XMPP: initial presence sent to the server's echo of it";
    pub SEND => "send", "XMPP: a stanza written (no server reply to wait for)";
    pub REPLY => "reply", "XMPP: a --raw IQ written to its result or error";
    pub ARRIVAL => "arrival", "XMPP: a chat message's send to its arrival at its recipient";
    pub MULTICAST => "multicast", "XMPP: a XEP-0033 multicast's send to its arrival at each recipient";
    pub MULTICAST_LAST => "multicast_last", "XMPP: a XEP-0033 multicast's send to its arrival at the last of its recipients";
    pub BROADCAST => "broadcast", "XMPP: a presence change's send to its arrival at each contact";
    pub TCP_ARRIVAL => "tcp_arrival", "XMPP, TCP and WebSocket sessions mixed (--websocket-percent): a delivery of any kind, send to arrival, at a recipient over TCP";
    pub WS_ARRIVAL => "ws_arrival", "XMPP, TCP and WebSocket sessions mixed (--websocket-percent): a delivery of any kind, send to arrival, at a recipient over WebSocket";
    pub BROADCAST_LAST => "broadcast_last", "XMPP: a presence change's send to its arrival at the last of its contacts";
}

crate::metrics::counters! {
    pub DELIVERED => "delivered", "stamped stanzas of this run received by a recipient (each recipient counts)";
    pub DUPLICATES => "duplicates", "stamped stanzas received more than once";
    pub STANZAS_IN => "stanzas_in", "stanzas read once logged in (messages, presences, IQs)";
    pub STANZAS_OUT => "stanzas_out", "stanzas written once logged in";
}
