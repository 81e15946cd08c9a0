//! JIDs, stanzas serialised once for any number of recipients, and the replies the
//! server writes itself (IQ results, stanza errors).

use std::sync::Arc;

use crate::proto::xmpp::{self, Element, NS_STANZA_ERRORS};

/// Longest local part, domain or resource (RFC 7622 §3: 1023 bytes each).
const MAX_PART: usize = 1023;

/// A JID, lowercased in its local part and domain (ASCII case folding only: no PRECIS,
/// which load-test accounts do not need).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Jid {
    pub local: Option<String>,
    pub domain: String,
    pub resource: Option<String>,
}

impl Jid {
    /// Parses `[local@]domain[/resource]`; `None` when a part is empty, too long, or
    /// holds characters no JID may have.
    pub fn parse(text: &str) -> Option<Jid> {
        let (rest, resource) = match text.split_once('/') {
            Some((r, res)) => (r, Some(res)),
            None => (text, None),
        };
        let (local, domain) = match rest.split_once('@') {
            Some((l, d)) => (Some(l), d),
            None => (None, rest),
        };
        let ok =
            |p: &str| !p.is_empty() && p.len() <= MAX_PART && !p.chars().any(|c| c.is_control());
        let ok_name = |p: &str| ok(p) && !p.contains(['@', '/', ' ', '"', '&', '\'', '<', '>']);
        if !ok_name(domain)
            || local.is_some_and(|l| !ok_name(l))
            || resource.is_some_and(|r| !ok(r))
        {
            return None;
        }
        Some(Jid {
            local: local.map(str::to_ascii_lowercase),
            domain: domain.to_ascii_lowercase(),
            resource: resource.map(str::to_string),
        })
    }

    /// `local@domain` (or the domain alone).
    pub fn bare(&self) -> String {
        match &self.local {
            Some(l) => format!("{l}@{}", self.domain),
            None => self.domain.clone(),
        }
    }
}

/// A stanza serialised once, with its `to` attribute left out so that each recipient's
/// copy can carry its own: written as `text[..split]`, the `to` attribute, `text[split..]`.
#[derive(Debug)]
pub(super) struct Prepared {
    text: String,
    split: usize,
}

impl Prepared {
    /// `e` stamped with `from` (the sender's full JID) and without `to`.
    pub fn new(e: &Element, from: &str) -> Prepared {
        Prepared::of(&stamped(e, from))
    }

    /// Serialises `e`, whose `to` attribute the recipients' copies will add.
    pub fn of(e: &Element) -> Prepared {
        let mut text = String::with_capacity(256);
        e.write(&mut text);
        Prepared {
            text,
            split: 1 + e.name.len(),
        }
    }

    pub fn len(&self) -> usize {
        self.text.len()
    }

    pub fn head(&self) -> &str {
        self.text.get(..self.split).unwrap_or_default()
    }

    pub fn tail(&self) -> &str {
        self.text.get(self.split..).unwrap_or_default()
    }
}

/// A copy of `e` with `from` set to the sender's full JID (whatever the client wrote)
/// and no `to`.
pub(super) fn stamped(e: &Element, from: &str) -> Element {
    let mut attrs = Vec::with_capacity(e.attrs.len() + 1);
    attrs.push(("from".to_string(), from.to_string()));
    attrs.extend(
        e.attrs
            .iter()
            .filter(|(k, _)| k != "to" && k != "from")
            .cloned(),
    );
    Element {
        name: e.name.clone(),
        attrs,
        children: e.children.clone(),
        text: e.text.clone(),
    }
}

/// One copy of a stanza queued to a session: the shared bytes and its `to` attribute.
#[derive(Debug, Clone)]
pub(super) struct Outbound {
    pub stanza: Arc<Prepared>,
    /// ` to='…'`, escaped (empty for none).
    pub to: Arc<str>,
}

impl Outbound {
    /// The bytes this copy adds to a queue (for the queue's byte bound).
    pub fn len(&self) -> usize {
        self.stanza.len() + self.to.len()
    }
}

/// ` to='jid'`, escaped, ready to be written into a [`Prepared`] stanza.
pub(super) fn to_attr(jid: &str) -> Arc<str> {
    let mut s = String::with_capacity(jid.len() + 6);
    s.push_str(" to='");
    xmpp::escape(jid, &mut s);
    s.push('\'');
    s.into()
}

/// Appends ` name='value'` (escaped).
fn attr(out: &mut String, name: &str, value: &str) {
    out.push(' ');
    out.push_str(name);
    out.push_str("='");
    xmpp::escape(value, out);
    out.push('\'');
}

/// A stanza error answering `e` (RFC 6120 §8.3): the same kind of stanza, `type='error'`,
/// from whom it was sent to, to its sender (omitted when empty: a stream not yet bound),
/// with its id; the payload is not echoed.
pub(super) fn bounce(e: &Element, sender: &str, kind: &str, condition: &str) -> String {
    let name = match e.local_name() {
        n @ ("message" | "presence" | "iq") => n,
        _ => "message",
    };
    let mut s = format!("<{name} type='error'");
    if let Some(to) = e.attr("to") {
        attr(&mut s, "from", to);
    }
    if !sender.is_empty() {
        attr(&mut s, "to", sender);
    }
    if let Some(id) = e.attr("id") {
        attr(&mut s, "id", id);
    }
    s.push_str("><error");
    attr(&mut s, "type", kind);
    s.push_str("><");
    s.push_str(condition);
    attr(&mut s, "xmlns", NS_STANZA_ERRORS);
    s.push_str(&format!("/></error></{name}>"));
    s
}

/// An IQ result from `from` (omitted when `None`) to `to`, with `payload` (may be empty).
pub(super) fn iq_result(id: &str, from: Option<&str>, to: &str, payload: &str) -> String {
    let mut s = String::from("<iq type='result'");
    attr(&mut s, "id", id);
    if let Some(f) = from {
        attr(&mut s, "from", f);
    }
    if !to.is_empty() {
        attr(&mut s, "to", to);
    }
    if payload.is_empty() {
        s.push_str("/>");
    } else {
        s.push('>');
        s.push_str(payload);
        s.push_str("</iq>");
    }
    s
}

/// The first child element of an IQ (its payload), and that payload's namespace.
pub(super) fn payload(e: &Element) -> (Option<&Element>, &str) {
    let p = e.children.first();
    (p, p.and_then(Element::ns).unwrap_or(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jids_parse_and_fold_case() {
        let j = Jid::parse("User0@Example.TEST/Res/x").unwrap();
        assert_eq!(j.local.as_deref(), Some("user0"));
        assert_eq!(j.domain, "example.test");
        assert_eq!(j.resource.as_deref(), Some("Res/x"));
        assert_eq!(j.bare(), "user0@example.test");
        assert_eq!(Jid::parse("example.test").unwrap().bare(), "example.test");
        for bad in ["", "@d", "a@", "a@d/", "a b@d", "a@b@c", "a@d\u{1}"] {
            assert!(Jid::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn prepared_stanza_takes_each_recipients_to() {
        let e = Element::parse(
            b"<message to='b@d' from='forged' id='1'><body>hi &amp; bye</body></message>",
        )
        .unwrap();
        let p = Prepared::new(&e, "a@d/r");
        let to = to_attr("b@d/x");
        let text = format!("{}{}{}", p.head(), to, p.tail());
        assert_eq!(
            text,
            "<message to='b@d/x' from='a@d/r' id='1'><body>hi &amp; bye</body></message>"
        );
        let b = bounce(&e, "a@d/r", "cancel", "service-unavailable");
        let back = Element::parse(b.as_bytes()).unwrap();
        assert_eq!(back.attr("type"), Some("error"));
        assert_eq!(back.attr("from"), Some("b@d"));
        assert_eq!(back.attr("to"), Some("a@d/r"));
        assert!(back
            .child("error")
            .unwrap()
            .child("service-unavailable")
            .is_some());
    }
}
