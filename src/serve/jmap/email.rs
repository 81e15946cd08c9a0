//! A stored message as a JMAP Email object (RFC 8621 §4): its header fields in every form
//! ([`headers`]), its MIME structure and bodies ([`body`]).

use serde_json::{json, Map, Value};

use super::super::store::{flags, Mailbox, StoredMessage};
use super::body;
use super::headers::{self, Form, Property};

/// The properties an Email/get without `properties` returns (RFC 8621 §4.2).
pub const DEFAULT: &[&str] = &[
    "id",
    "blobId",
    "threadId",
    "mailboxIds",
    "keywords",
    "size",
    "receivedAt",
    "messageId",
    "inReplyTo",
    "references",
    "sender",
    "from",
    "to",
    "cc",
    "bcc",
    "replyTo",
    "subject",
    "sentAt",
    "hasAttachment",
    "preview",
    "bodyValues",
    "textBody",
    "htmlBody",
    "attachments",
];

/// The ids of a message in mailbox `uv` (its UIDVALIDITY) with UID `uid`.
pub fn email_id(uv: u32, uid: u32) -> String {
    format!("e{uv}-{uid}")
}

pub fn mailbox_id(uv: u32) -> String {
    format!("m{uv}")
}

/// (UIDVALIDITY, UID) of an email, blob or thread id (`e7-12`, `b7-12`, `t7-12`).
pub fn parse_id(id: &str) -> Option<(u32, u32)> {
    let rest = id.get(1..)?;
    let (uv, uid) = rest.split_once('-')?;
    Some((uv.parse().ok()?, uid.parse().ok()?))
}

/// The head and body of a message.
pub fn split(data: &[u8]) -> (&[u8], &[u8]) {
    match data.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(p) => (&data[..p + 2], &data[p + 4..]),
        None => match data.windows(2).position(|w| w == b"\n\n") {
            Some(p) => (&data[..p + 1], &data[p + 2..]),
            None => (data, &[]),
        },
    }
}

/// RFC 3339 of a time.
pub fn utc(t: std::time::SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(t).to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The JMAP keywords of a stored message (IMAP's flags and its keyword bits).
pub fn keywords(mb: &Mailbox, m: &StoredMessage) -> Map<String, Value> {
    let mut k = Map::new();
    for (bit, name) in [
        (flags::SEEN, "$seen"),
        (flags::ANSWERED, "$answered"),
        (flags::FLAGGED, "$flagged"),
        (flags::DRAFT, "$draft"),
    ] {
        if m.flags & bit != 0 {
            k.insert(name.into(), true.into());
        }
    }
    for (i, name) in mb.keywords.iter().enumerate() {
        if m.keywords & (1 << i) != 0 {
            k.insert(name.to_ascii_lowercase(), true.into());
        }
    }
    k
}

/// Sets or clears keyword `name` on `m` (a flag for IMAP's system ones); false when the
/// mailbox's keyword table is full.
pub fn set_keyword(mb: &mut Mailbox, i: usize, name: &str, on: bool) -> bool {
    let flag = match name.to_ascii_lowercase().as_str() {
        "$seen" => Some(flags::SEEN),
        "$answered" => Some(flags::ANSWERED),
        "$flagged" => Some(flags::FLAGGED),
        "$draft" => Some(flags::DRAFT),
        _ => None,
    };
    let bit = match flag {
        Some(_) => None,
        None => match mb.keyword_bit(name, on) {
            Some(b) => Some(b),
            None if !on => return true,
            None => return false,
        },
    };
    let modseq = mb.next_modseq();
    let m = &mut mb.messages[i];
    match (flag, bit) {
        (Some(f), _) if on => m.flags |= f,
        (Some(f), _) => m.flags &= !f,
        (None, Some(b)) if on => m.keywords |= b,
        (None, Some(b)) => m.keywords &= !b,
        _ => {}
    }
    m.modseq = modseq;
    true
}

/// Is `p` an Email property this server returns (RFC 8621 §4.1)?
pub fn known(p: &str) -> bool {
    DEFAULT.contains(&p) || p == "headers" || p == "bodyStructure" || Property::parse(p).is_some()
}

/// What an Email/get asks of each message.
pub struct Want<'a> {
    pub properties: &'a [String],
    pub body_properties: &'a [String],
    /// Which parts' values `bodyValues` holds: textBody's, htmlBody's, every text part's.
    pub text_values: bool,
    pub html_values: bool,
    pub all_values: bool,
    /// Cut values at this many bytes (0: never).
    pub max_value: usize,
}

/// A value of `bodyValues`, cut at `max` bytes (0: never) on a character boundary.
fn body_value(part: &body::Node, max: usize) -> Value {
    let text = part.text.as_deref().unwrap_or("");
    let truncated = max > 0 && text.len() > max;
    let mut cut = if truncated { max } else { text.len() };
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    json!({"value": &text[..cut], "isEncodingProblem": part.is_encoding_problem,
           "isTruncated": truncated})
}

/// The Email object of message `i` of mailbox `mb` with the properties `want` asks for.
pub fn object(mb: &Mailbox, i: usize, want: &Want<'_>) -> Value {
    let m = &mb.messages[i];
    let uv = mb.uid_validity;
    let (head, _) = split(&m.data);
    let fields = headers::fields(head);
    let blob = format!("b{uv}-{}", m.uid);
    // The MIME structure, parsed only for the properties that need it.
    let structure = std::cell::OnceCell::new();
    let structure = || structure.get_or_init(|| body::Structure::parse(&m.data, &blob));
    let bodies = std::cell::OnceCell::new();
    let bodies = || bodies.get_or_init(|| structure().as_ref().map(|s| s.bodies()));
    let parts = |which: usize| -> Value {
        match (structure(), bodies()) {
            (Some(s), Some(b)) => [&b.text, &b.html, &b.attachments][which]
                .iter()
                .map(|p| s.object(p, want.body_properties))
                .collect(),
            _ => json!([]),
        }
    };
    let mut o = Map::new();
    let form = |name: &str, form: Form| {
        Property {
            name: name.into(),
            form,
            all: false,
        }
        .value(&fields)
    };
    for p in want.properties {
        let v = match p.as_str() {
            "id" => json!(email_id(uv, m.uid)),
            "blobId" => json!(&blob),
            "threadId" => json!(format!("t{uv}-{}", m.uid)),
            "mailboxIds" => json!({ mailbox_id(uv): true }),
            "keywords" => Value::Object(keywords(mb, m)),
            "size" => json!(m.size),
            "receivedAt" => json!(utc(m.received)),
            "messageId" => form("Message-ID", Form::MessageIds),
            "inReplyTo" => form("In-Reply-To", Form::MessageIds),
            "references" => form("References", Form::MessageIds),
            "sender" | "from" | "to" | "cc" | "bcc" => form(p, Form::Addresses),
            "replyTo" => form("Reply-To", Form::Addresses),
            "subject" => form("Subject", Form::Text),
            "sentAt" => form("Date", Form::Date),
            "hasAttachment" => json!(bodies().as_ref().is_some_and(|b| !b.attachments.is_empty())),
            "preview" => {
                let text = bodies()
                    .as_ref()
                    .and_then(|b| b.text.iter().find(|p| p.kind == "text/plain"))
                    .and_then(|p| p.text.as_deref())
                    .unwrap_or("");
                let words: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
                json!(words.chars().take(256).collect::<String>())
            }
            "textBody" => parts(0),
            "htmlBody" => parts(1),
            "attachments" => parts(2),
            "bodyValues" => {
                let mut values = Map::new();
                if let (Some(s), Some(b)) = (structure(), bodies()) {
                    let mut chosen: Vec<&body::Node> = Vec::new();
                    if want.all_values {
                        chosen.extend(
                            s.leaves()
                                .into_iter()
                                .filter(|p| p.kind.starts_with("text/")),
                        );
                    }
                    if want.text_values {
                        chosen.extend(b.text.iter().filter(|p| p.kind.starts_with("text/")));
                    }
                    if want.html_values {
                        chosen.extend(b.html.iter().filter(|p| p.kind.starts_with("text/")));
                    }
                    for p in chosen {
                        if let Some(id) = &p.part_id {
                            values.insert(id.clone(), body_value(p, want.max_value));
                        }
                    }
                }
                Value::Object(values)
            }
            "headers" => fields
                .iter()
                .map(|(n, v)| json!({"name": n, "value": v}))
                .collect(),
            "bodyStructure" => match structure() {
                Some(s) => s.object(&s.root, want.body_properties),
                None => Value::Null,
            },
            other => match Property::parse(other) {
                Some(h) => h.value(&fields),
                None => continue,
            },
        };
        o.insert(p.clone(), v);
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields_are_unfolded_and_addresses_taken_apart() {
        let m = b"From: \"Ann Example\" <ann@example.test>\r\nTo: bob@example.test,\r\n carol@example.test\r\nSubject: a long\r\n  subject\r\n\r\nbody\r\n";
        let fields = headers::fields(split(m).0);
        let form = |name: &str, form: Form| {
            Property {
                name: name.into(),
                form,
                all: false,
            }
            .value(&fields)
        };
        assert_eq!(form("subject", Form::Text), json!("a long subject"));
        assert_eq!(
            form("TO", Form::Addresses),
            json!([{"name": null, "email": "bob@example.test"}, {"name": null, "email": "carol@example.test"}])
        );
        assert_eq!(
            form("From", Form::Addresses),
            json!([{"name": "Ann Example", "email": "ann@example.test"}])
        );
        assert_eq!(form("cc", Form::Addresses), Value::Null);
        assert_eq!(parse_id("e7-12"), Some((7, 12)));
        assert_eq!(parse_id("x"), None);
    }
}
