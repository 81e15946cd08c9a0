//! A message's MIME structure as JMAP EmailBodyPart objects (RFC 8621 §4.1.4), read with
//! `mail-parser`: `bodyStructure`, and the blobs of its parts. Leaf parts are numbered in
//! order (`1`, `2`, …: their `partId`); a part's blob is `b{mailbox}-{uid}-{partId}`,
//! its content with the transfer encoding undone. A `message/rfc822` part is a leaf.

use mail_parser::{HeaderValue, Message, MessageParser, MimeHeaders, PartType};
use serde_json::{json, Map, Value};

use super::headers::{self, Property};

/// The body properties returned when a request names none (RFC 8621 §4.2).
pub const DEFAULT_PROPERTIES: &[&str] = &[
    "partId",
    "blobId",
    "size",
    "name",
    "type",
    "charset",
    "disposition",
    "cid",
    "language",
    "location",
];

/// Is `p` a body part property (for `bodyProperties`)?
pub fn known(p: &str) -> bool {
    DEFAULT_PROPERTIES.contains(&p)
        || p == "headers"
        || p == "subParts"
        || Property::parse(p).is_some()
}

/// The `bodyStructure` of a message whose blob is `blob` (`b7-12`).
pub fn structure(data: &[u8], blob: &str, properties: &[String]) -> Value {
    let Some(m) = MessageParser::new().parse(data) else {
        return json!(null);
    };
    if m.parts.is_empty() {
        return json!(null);
    }
    let mut n = 0;
    part(&m, 0, data, blob, properties, &mut n)
}

/// The content of leaf part `want` (its `partId`), transfer encoding undone.
pub fn part_content(data: &[u8], want: u32) -> Option<Vec<u8>> {
    let m = MessageParser::new().parse(data)?;
    let mut n = 0;
    find(&m, 0, want, &mut n)
}

fn find(m: &Message<'_>, i: usize, want: u32, n: &mut u32) -> Option<Vec<u8>> {
    let p = m.parts.get(i)?;
    match &p.body {
        PartType::Multipart(children) => {
            children.iter().find_map(|c| find(m, *c as usize, want, n))
        }
        PartType::Message(_) => {
            *n += 1;
            let (s, e) = (p.offset_body as usize, p.offset_end as usize);
            (*n == want).then(|| m.raw_message.get(s..e).unwrap_or_default().to_vec())
        }
        _ => {
            *n += 1;
            (*n == want).then(|| p.contents().to_vec())
        }
    }
}

fn part(
    m: &Message<'_>,
    i: usize,
    data: &[u8],
    blob: &str,
    properties: &[String],
    n: &mut u32,
) -> Value {
    let p = &m.parts[i];
    let children = match &p.body {
        PartType::Multipart(c) => Some(c),
        _ => None,
    };
    let id = match children {
        Some(_) => None,
        None => {
            *n += 1;
            Some(n.to_string())
        }
    };
    let ct = p.content_type();
    let kind = match ct {
        Some(c) => format!("{}/{}", c.ctype(), c.subtype().unwrap_or("")),
        None if matches!(p.body, PartType::Message(_)) => "message/rfc822".into(),
        None => "text/plain".into(),
    }
    .to_ascii_lowercase();
    let head = data
        .get(p.offset_header as usize..p.offset_body as usize)
        .unwrap_or_default();
    let fields = headers::fields(head);
    let size = match &p.body {
        PartType::Message(_) | PartType::Multipart(_) => {
            p.offset_end.saturating_sub(p.offset_body) as usize
        }
        _ => p.contents().len(),
    };
    let mut o = Map::new();
    for name in properties {
        let v = match name.as_str() {
            "partId" => json!(id),
            "blobId" => json!(id.as_ref().map(|id| format!("{blob}-{id}"))),
            "size" => json!(size),
            "headers" => fields
                .iter()
                .map(|(n, v)| json!({"name": n, "value": v}))
                .collect(),
            "name" => json!(p.attachment_name()),
            "type" => json!(kind),
            "charset" => match ct.and_then(|c| c.attribute("charset")) {
                Some(c) => json!(c),
                None if kind.starts_with("text/") => json!("us-ascii"),
                None => Value::Null,
            },
            "disposition" => json!(p
                .content_disposition()
                .map(|d| d.ctype().to_ascii_lowercase())),
            "cid" => json!(p.content_id().map(|c| c.trim_matches(['<', '>']))),
            "language" => match p.content_language() {
                HeaderValue::Text(t) => json!([t]),
                HeaderValue::TextList(l) => json!(l),
                _ => Value::Null,
            },
            "location" => json!(p.content_location()),
            "subParts" => continue,
            other => match Property::parse(other) {
                Some(h) => h.value(&fields),
                None => continue,
            },
        };
        o.insert(name.clone(), v);
    }
    if let Some(children) = children {
        let subs: Vec<Value> = children
            .iter()
            .map(|c| part(m, *c as usize, data, blob, properties, n))
            .collect();
        o.insert("subParts".into(), Value::Array(subs));
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multipart_message_as_parts_and_their_blobs() {
        let m = b"Subject: s\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n\
            --b\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nhello\r\n\
            --b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"a.bin\"\r\n\
            Content-Transfer-Encoding: base64\r\n\r\naGk=\r\n--b--\r\n";
        let props: Vec<String> = ["partId", "blobId", "type", "charset", "name", "disposition"]
            .map(String::from)
            .into();
        let s = structure(m, "b7-1", &props);
        assert_eq!(s["type"], "multipart/mixed");
        assert_eq!(s["partId"], Value::Null);
        let subs = s["subParts"].as_array().unwrap();
        assert_eq!(
            subs[0],
            json!({"partId": "1", "blobId": "b7-1-1", "type": "text/plain", "charset": "utf-8",
                   "name": null, "disposition": null})
        );
        assert_eq!(subs[1]["name"], "a.bin");
        assert_eq!(subs[1]["disposition"], "attachment");
        assert_eq!(subs[1]["charset"], Value::Null);
        assert_eq!(part_content(m, 2).as_deref(), Some(&b"hi"[..]));
        assert_eq!(part_content(m, 3), None);
    }
}
