//! A stored message as a JMAP Email object (RFC 8621 §4): its header fields read from the
//! message as received (unfolded; RFC 2047 encoded words left as they are), its body the
//! message's body as one text part.

use serde_json::{json, Map, Value};

use super::super::store::{flags, Mailbox, StoredMessage};

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
fn split(data: &[u8]) -> (&[u8], &[u8]) {
    match data.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(p) => (&data[..p + 2], &data[p + 4..]),
        None => match data.windows(2).position(|w| w == b"\n\n") {
            Some(p) => (&data[..p + 1], &data[p + 2..]),
            None => (data, &[]),
        },
    }
}

/// The value of header field `name` (the first one), unfolded.
pub fn header(data: &[u8], name: &str) -> Option<String> {
    let (head, _) = split(data);
    let text = String::from_utf8_lossy(head);
    let mut found: Option<String> = None;
    for line in text.split('\n') {
        let line = line.trim_end_matches('\r');
        if line.starts_with([' ', '\t']) {
            if let Some(f) = found.as_mut() {
                f.push(' ');
                f.push_str(line.trim());
            }
            continue;
        }
        if found.is_some() {
            break;
        }
        if let Some((n, v)) = line.split_once(':') {
            if n.trim().eq_ignore_ascii_case(name) {
                found = Some(v.trim().to_string());
            }
        }
    }
    found
}

/// An address list (`Ann <ann@x>, bob@y`) as JMAP EmailAddress objects.
fn addresses(value: &str) -> Value {
    let list: Vec<Value> = value
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(|a| match (a.rfind('<'), a.rfind('>')) {
            (Some(l), Some(r)) if l < r => {
                let name = a[..l].trim().trim_matches('"');
                json!({"name": (!name.is_empty()).then_some(name), "email": &a[l + 1..r]})
            }
            _ => json!({"name": null, "email": a}),
        })
        .collect();
    Value::Array(list)
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

/// The Email object of message `i` of mailbox `mb` (UIDVALIDITY `uv`), with the
/// `properties` asked for; `body_values` adds the text body's value.
pub fn object(
    mb: &Mailbox,
    i: usize,
    properties: &[String],
    body_values: bool,
    max_value: usize,
) -> Value {
    let m = &mb.messages[i];
    let uv = mb.uid_validity;
    let (_, body) = split(&m.data);
    let text = String::from_utf8_lossy(body);
    let mut o = Map::new();
    let part = json!({"partId": "1", "blobId": format!("b{uv}-{}", m.uid), "size": body.len(),
                      "type": "text/plain", "charset": "utf-8"});
    for p in properties {
        let v = match p.as_str() {
            "id" => json!(email_id(uv, m.uid)),
            "blobId" => json!(format!("b{uv}-{}", m.uid)),
            "threadId" => json!(format!("t{uv}-{}", m.uid)),
            "mailboxIds" => json!({ mailbox_id(uv): true }),
            "keywords" => Value::Object(keywords(mb, m)),
            "size" => json!(m.size),
            "receivedAt" => json!(utc(m.received)),
            "messageId" | "inReplyTo" | "references" => {
                let name = match p.as_str() {
                    "messageId" => "message-id",
                    "inReplyTo" => "in-reply-to",
                    _ => "references",
                };
                match header(&m.data, name) {
                    Some(v) => json!(v
                        .split_whitespace()
                        .map(|id| id.trim_matches(['<', '>']))
                        .collect::<Vec<_>>()),
                    None => Value::Null,
                }
            }
            "sender" | "from" | "to" | "cc" | "bcc" | "replyTo" => {
                let name = if p == "replyTo" {
                    "reply-to"
                } else {
                    p.as_str()
                };
                header(&m.data, name).map_or(Value::Null, |v| addresses(&v))
            }
            "subject" => header(&m.data, "subject").map_or(Value::Null, Value::from),
            "sentAt" => header(&m.data, "date")
                .and_then(|d| chrono::DateTime::parse_from_rfc2822(&d).ok())
                .map_or(Value::Null, |d| json!(d.to_rfc3339())),
            "hasAttachment" => json!(false),
            "preview" => {
                let words: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
                json!(words.chars().take(256).collect::<String>())
            }
            "textBody" => json!([part.clone()]),
            "htmlBody" => json!([part.clone()]),
            "attachments" => json!([]),
            "bodyValues" => {
                let mut values = Map::new();
                if body_values {
                    let truncated = max_value > 0 && text.len() > max_value;
                    let mut cut = if truncated { max_value } else { text.len() };
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    values.insert(
                        "1".into(),
                        json!({"value": &text[..cut], "isEncodingProblem": false, "isTruncated": truncated}),
                    );
                }
                Value::Object(values)
            }
            _ => continue,
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
        assert_eq!(header(m, "subject").as_deref(), Some("a long subject"));
        assert_eq!(
            addresses(&header(m, "from").unwrap()),
            json!([{"name": "Ann Example", "email": "ann@example.test"}])
        );
        assert_eq!(
            addresses(&header(m, "TO").unwrap())
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert_eq!(header(m, "cc"), None);
        assert_eq!(parse_id("e7-12"), Some((7, 12)));
        assert_eq!(parse_id("x"), None);
    }
}
