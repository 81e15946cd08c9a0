//! What a client or the embedded server writes during stream negotiation (RFC 6120):
//! headers, features, STARTTLS, SASL, resource binding, and a few replies. Values are
//! escaped; base64 payloads are written as given. Stanzas that carry load (messages,
//! presence) are built by the session with [`super::escape`].

use super::escape;

pub const NS_CLIENT: &str = "jabber:client";
pub const NS_STREAMS: &str = "http://etherx.jabber.org/streams";
pub const NS_STREAM_ERRORS: &str = "urn:ietf:params:xml:ns:xmpp-streams";
pub const NS_STANZA_ERRORS: &str = "urn:ietf:params:xml:ns:xmpp-stanzas";
pub const NS_TLS: &str = "urn:ietf:params:xml:ns:xmpp-tls";
pub const NS_SASL: &str = "urn:ietf:params:xml:ns:xmpp-sasl";
pub const NS_BIND: &str = "urn:ietf:params:xml:ns:xmpp-bind";
/// RFC 3921 session establishment, still asked for by some servers.
pub const NS_SESSION: &str = "urn:ietf:params:xml:ns:xmpp-session";
pub const NS_ROSTER: &str = "jabber:iq:roster";

/// The end of a stream.
pub const STREAM_CLOSE: &str = "</stream:stream>";
/// RFC 7395's framing namespace (XMPP over WebSocket).
pub const NS_FRAMING: &str = "urn:ietf:params:xml:ns:xmpp-framing";
/// The end of a stream over WebSocket.
pub const WS_CLOSE: &str = "<close xmlns='urn:ietf:params:xml:ns:xmpp-framing'/>";

/// The end of a stream, over WebSocket (`ws`) or not.
pub fn stream_close(ws: bool) -> &'static str {
    if ws {
        WS_CLOSE
    } else {
        STREAM_CLOSE
    }
}

/// The server's `<open/>` over WebSocket (RFC 7395), from its domain `from`, stream `id`.
pub fn ws_open_server(from: &str, id: &str) -> String {
    let mut s = format!("<open xmlns='{NS_FRAMING}' version='1.0' from='");
    escape(from, &mut s);
    s.push_str("' id='");
    escape(id, &mut s);
    s.push_str("'/>");
    s
}

/// A top-level element written for a TCP stream, as one WebSocket message: over
/// WebSocket every message declares its namespaces (RFC 7395 §3.3.3), so a stanza gets
/// `xmlns='jabber:client'` and a `stream:` element `xmlns:stream` after its name when
/// its first tag lacks them. The parts to write in order (the middle one maybe empty).
pub fn ws_parts(element: &str) -> [&str; 3] {
    let text = element.trim_start();
    let name_end = text
        .find(|c: char| c.is_whitespace() || c == '/' || c == '>')
        .unwrap_or(text.len());
    let name = text.get(1..name_end).unwrap_or("");
    let (declare, wanted) = match name {
        "message" | "presence" | "iq" => ("xmlns=", " xmlns='jabber:client'"),
        n if n.starts_with("stream:") => (
            "xmlns:stream=",
            " xmlns:stream='http://etherx.jabber.org/streams'",
        ),
        _ => return [element, "", ""],
    };
    // The first tag's end, outside attribute values.
    let mut quote = None;
    let mut tag_end = text.len();
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '>') => {
                tag_end = i;
                break;
            }
            _ => {}
        }
    }
    if text[..tag_end].contains(declare) {
        return [element, "", ""];
    }
    let at = element.len() - text.len() + name_end;
    [&element[..at], wanted, &element[at..]]
}

/// `text` (top-level elements written for a TCP stream, one or more) as WebSocket
/// messages: one per element, each with its namespaces declared ([`ws_parts`]).
/// Whitespace between elements is dropped.
pub fn ws_messages(text: &str) -> Vec<[&str; 3]> {
    let mut framer = super::Framer::new(text.len().max(1), usize::MAX).websocket(true);
    let mut out = Vec::new();
    let mut rest = text;
    while let Ok(Some((kind, n))) = framer.frame(rest.as_bytes()) {
        let (one, after) = rest.split_at(n);
        if kind != super::Frame::Whitespace {
            out.push(ws_parts(one.trim_start()));
        }
        rest = after;
    }
    if !rest.trim().is_empty() {
        // Not whole elements (never from spate's own builders): as they are.
        out.push([rest, "", ""]);
    }
    out
}

/// A client's stream header to `to`: over WebSocket, RFC 7395's `<open/>`.
pub fn stream_open(to: &str, ws: bool) -> String {
    if !ws {
        return stream_open_client(to);
    }
    let mut s = format!("<open xmlns='{NS_FRAMING}' version='1.0' to='");
    escape(to, &mut s);
    s.push_str("'/>");
    s
}

/// A client's stream header to the server `to` (with the XML declaration).
pub fn stream_open_client(to: &str) -> String {
    let mut s = format!(
        "<?xml version='1.0'?><stream:stream xmlns='{NS_CLIENT}' \
         xmlns:stream='{NS_STREAMS}' version='1.0' to='"
    );
    escape(to, &mut s);
    s.push_str("'>");
    s
}

/// The server's reply header, from its domain `from`, with the stream `id`.
pub fn stream_open_server(from: &str, id: &str) -> String {
    let mut s = format!(
        "<?xml version='1.0'?><stream:stream xmlns='{NS_CLIENT}' \
         xmlns:stream='{NS_STREAMS}' version='1.0' from='"
    );
    escape(from, &mut s);
    s.push_str("' id='");
    escape(id, &mut s);
    s.push_str("'>");
    s
}

/// `<stream:features>` offering STARTTLS (when `starttls`), these SASL `mechanisms` (when
/// any), and resource binding (when `bind`).
pub fn features(starttls: bool, mechanisms: &[&str], bind: bool) -> String {
    let mut s = String::from("<stream:features>");
    if starttls {
        s.push_str(&format!("<starttls xmlns='{NS_TLS}'/>"));
    }
    if !mechanisms.is_empty() {
        s.push_str(&format!("<mechanisms xmlns='{NS_SASL}'>"));
        for m in mechanisms {
            s.push_str("<mechanism>");
            escape(m, &mut s);
            s.push_str("</mechanism>");
        }
        s.push_str("</mechanisms>");
    }
    if bind {
        s.push_str(&format!("<bind xmlns='{NS_BIND}'/>"));
    }
    s.push_str("</stream:features>");
    s
}

/// A stream error (`not-well-formed`, `policy-violation`, …); the stream closes after it.
pub fn stream_error(condition: &str) -> String {
    let mut s = String::from("<stream:error><");
    escape(condition, &mut s);
    s.push_str(&format!(" xmlns='{NS_STREAM_ERRORS}'/></stream:error>"));
    s
}

pub fn starttls() -> String {
    format!("<starttls xmlns='{NS_TLS}'/>")
}

pub fn proceed() -> String {
    format!("<proceed xmlns='{NS_TLS}'/>")
}

/// `<auth>` with an initial response. An empty `initial_b64` sends none (the server
/// then challenges); a zero-length initial response is `"="` (RFC 6120 §6.4.2).
pub fn auth(mechanism: &str, initial_b64: &str) -> String {
    let mut s = format!("<auth xmlns='{NS_SASL}' mechanism='");
    escape(mechanism, &mut s);
    s.push('\'');
    sasl_payload(s, "auth", initial_b64)
}

/// The server's SASL challenge.
pub fn challenge(b64: &str) -> String {
    sasl_payload(format!("<challenge xmlns='{NS_SASL}'"), "challenge", b64)
}

/// The client's answer to a challenge.
pub fn response(b64: &str) -> String {
    sasl_payload(format!("<response xmlns='{NS_SASL}'"), "response", b64)
}

/// SASL success, with additional data (SCRAM's `v=…`, base64) or none (empty).
pub fn success(b64: &str) -> String {
    sasl_payload(format!("<success xmlns='{NS_SASL}'"), "success", b64)
}

/// SASL failure with its condition (`not-authorized`, `invalid-mechanism`, …).
pub fn failure(condition: &str) -> String {
    let mut s = format!("<failure xmlns='{NS_SASL}'><");
    escape(condition, &mut s);
    s.push_str("/></failure>");
    s
}

/// Closes the open tag `head` (`<name attrs`) with base64 content, or self-closes it.
fn sasl_payload(mut head: String, name: &str, b64: &str) -> String {
    if b64.is_empty() {
        head.push_str("/>");
        return head;
    }
    head.push('>');
    escape(b64, &mut head);
    head.push_str("</");
    head.push_str(name);
    head.push('>');
    head
}

/// Resource binding: asks for `resource`, or lets the server pick one (empty).
pub fn bind(id: &str, resource: &str) -> String {
    let mut s = iq_head("set", id, "");
    if resource.is_empty() {
        s.push_str(&format!("<bind xmlns='{NS_BIND}'/></iq>"));
        return s;
    }
    s.push_str(&format!("<bind xmlns='{NS_BIND}'><resource>"));
    escape(resource, &mut s);
    s.push_str("</resource></bind></iq>");
    s
}

/// The server's answer to [`bind`]: the full JID bound.
pub fn bind_result(id: &str, jid: &str) -> String {
    let mut s = iq_head("result", id, "");
    s.push_str(&format!("<bind xmlns='{NS_BIND}'><jid>"));
    escape(jid, &mut s);
    s.push_str("</jid></bind></iq>");
    s
}

/// Legacy session establishment (RFC 3921 §3), for servers that still require it.
pub fn session(id: &str) -> String {
    let mut s = iq_head("set", id, "");
    s.push_str(&format!("<session xmlns='{NS_SESSION}'/></iq>"));
    s
}

/// A roster get.
pub fn roster_get(id: &str) -> String {
    let mut s = iq_head("get", id, "");
    s.push_str(&format!("<query xmlns='{NS_ROSTER}'/></iq>"));
    s
}

/// An empty IQ result to `to` (omitted when empty).
pub fn iq_result(id: &str, to: &str) -> String {
    let mut s = iq_head("result", id, to);
    s.pop(); // the head's '>'
    s.push_str("/>");
    s
}

/// An IQ error of `kind` (`cancel`, `modify`, …) with a stanza error `condition`.
pub fn iq_error(id: &str, to: &str, kind: &str, condition: &str) -> String {
    let mut s = iq_head("error", id, to);
    s.push_str("<error type='");
    escape(kind, &mut s);
    s.push_str("'><");
    escape(condition, &mut s);
    s.push_str(&format!(" xmlns='{NS_STANZA_ERRORS}'/></error></iq>"));
    s
}

/// `<iq type='…' id='…' [to='…']>`.
fn iq_head(kind: &str, id: &str, to: &str) -> String {
    let mut s = format!("<iq type='{kind}' id='");
    escape(id, &mut s);
    if !to.is_empty() {
        s.push_str("' to='");
        escape(to, &mut s);
    }
    s.push_str("'>");
    s
}
