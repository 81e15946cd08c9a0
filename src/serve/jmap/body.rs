//! A message's MIME structure as JMAP EmailBodyPart objects (RFC 8621 §4.1.4), read with
//! `mail-parser`: `bodyStructure`; `textBody`, `htmlBody` and `attachments` as §4.1.4's
//! algorithm picks them; `bodyValues` (text with its transfer encoding and charset
//! undone); and the blobs of parts. Leaf parts are numbered in order (`1`, `2`, …: their
//! `partId`); a part's blob is `b{mailbox}-{uid}-{partId}`, its content with the transfer
//! encoding undone. A `message/rfc822` part is a leaf.

use mail_parser::{HeaderValue, Message, MessageParser, MessagePart, MimeHeaders, PartType};
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

/// One part of the structure.
#[derive(Debug)]
pub struct Node {
    /// None for a multipart.
    pub part_id: Option<String>,
    /// Lowercase `type/subtype`.
    pub kind: String,
    fields: Vec<(String, String)>,
    name: Option<String>,
    charset: Option<String>,
    disposition: Option<String>,
    cid: Option<String>,
    language: Option<Vec<String>>,
    location: Option<String>,
    size: usize,
    /// A text part's content, decoded.
    pub text: Option<String>,
    pub is_encoding_problem: bool,
    pub children: Vec<Node>,
}

/// The parts of a message.
pub struct Structure {
    pub root: Node,
    /// The message's blob (`b7-12`), the base of its parts' blobs.
    blob: String,
}

/// The lists of leaf parts §4.1.4 makes (indexes in the structure's leaf order).
#[derive(Debug, Default)]
pub struct Bodies<'a> {
    pub text: Vec<&'a Node>,
    pub html: Vec<&'a Node>,
    pub attachments: Vec<&'a Node>,
}

impl Structure {
    pub fn parse(data: &[u8], blob: &str) -> Option<Structure> {
        let m = MessageParser::new().parse(data)?;
        if m.parts.is_empty() {
            return None;
        }
        let mut n = 0;
        Some(Structure {
            root: node(&m, 0, data, &mut n),
            blob: blob.to_string(),
        })
    }

    /// The EmailBodyPart object of `p` with `properties` (subParts for a multipart).
    pub fn object(&self, p: &Node, properties: &[String]) -> Value {
        let mut o = Map::new();
        for name in properties {
            let v = match name.as_str() {
                "partId" => json!(p.part_id),
                "blobId" => json!(p.part_id.as_ref().map(|id| format!("{}-{id}", self.blob))),
                "size" => json!(p.size),
                "headers" => p
                    .fields
                    .iter()
                    .map(|(n, v)| json!({"name": n, "value": v}))
                    .collect(),
                "name" => json!(p.name),
                "type" => json!(p.kind),
                "charset" => json!(p.charset),
                "disposition" => json!(p.disposition),
                "cid" => json!(p.cid),
                "language" => json!(p.language),
                "location" => json!(p.location),
                "subParts" => continue,
                other => match Property::parse(other) {
                    Some(h) => h.value(&p.fields),
                    None => continue,
                },
            };
            o.insert(name.clone(), v);
        }
        if p.part_id.is_none() {
            let subs: Vec<Value> = p
                .children
                .iter()
                .map(|c| self.object(c, properties))
                .collect();
            o.insert("subParts".into(), Value::Array(subs));
        }
        Value::Object(o)
    }

    /// textBody, htmlBody and attachments (RFC 8621 §4.1.4's algorithm).
    pub fn bodies(&self) -> Bodies<'_> {
        let mut b = Bodies::default();
        let (mut text, mut html) = (Some(Vec::new()), Some(Vec::new()));
        walk(
            std::slice::from_ref(&self.root),
            "mixed",
            false,
            &mut html,
            &mut text,
            &mut b.attachments,
        );
        b.text = text.unwrap_or_default();
        b.html = html.unwrap_or_default();
        b
    }

    /// Every leaf, in order.
    pub fn leaves(&self) -> Vec<&Node> {
        fn add<'a>(n: &'a Node, out: &mut Vec<&'a Node>) {
            match n.part_id {
                Some(_) => out.push(n),
                None => n.children.iter().for_each(|c| add(c, out)),
            }
        }
        let mut out = Vec::new();
        add(&self.root, &mut out);
        out
    }
}

fn inline_media(kind: &str) -> bool {
    ["image/", "audio/", "video/"]
        .iter()
        .any(|p| kind.starts_with(p))
}

/// RFC 8621 §4.1.4 `parseStructure`, as written there.
fn walk<'a>(
    parts: &'a [Node],
    multipart_type: &str,
    in_alternative: bool,
    html_body: &mut Option<Vec<&'a Node>>,
    text_body: &mut Option<Vec<&'a Node>>,
    attachments: &mut Vec<&'a Node>,
) {
    let text_length = text_body.as_ref().map(Vec::len);
    let html_length = html_body.as_ref().map(Vec::len);
    for (i, part) in parts.iter().enumerate() {
        let is_multipart = part.part_id.is_none();
        let is_inline = part.disposition.as_deref() != Some("attachment")
            && (part.kind == "text/plain" || part.kind == "text/html" || inline_media(&part.kind))
            && (i == 0
                || (multipart_type != "related"
                    && (inline_media(&part.kind) || part.name.is_none())));
        if is_multipart {
            let sub = part.kind.split('/').nth(1).unwrap_or("mixed");
            walk(
                &part.children,
                sub,
                in_alternative || sub == "alternative",
                html_body,
                text_body,
                attachments,
            );
        } else if is_inline {
            if multipart_type == "alternative" {
                match part.kind.as_str() {
                    "text/plain" => text_body.iter_mut().for_each(|t| t.push(part)),
                    "text/html" => html_body.iter_mut().for_each(|h| h.push(part)),
                    _ => attachments.push(part),
                }
                continue;
            } else if in_alternative {
                if part.kind == "text/plain" {
                    *html_body = None;
                }
                if part.kind == "text/html" {
                    *text_body = None;
                }
            }
            text_body.iter_mut().for_each(|t| t.push(part));
            html_body.iter_mut().for_each(|h| h.push(part));
            if (text_body.is_none() || html_body.is_none()) && inline_media(&part.kind) {
                attachments.push(part);
            }
        } else {
            attachments.push(part);
        }
    }
    if multipart_type == "alternative" {
        if let (Some(text), Some(html)) = (text_body.as_mut(), html_body.as_mut()) {
            if text_length == Some(text.len()) && html_length != Some(html.len()) {
                let from = html_length.unwrap_or(0);
                text.extend(html[from..].iter().copied());
            }
            if html_length == Some(html.len()) && text_length != Some(text.len()) {
                let from = text_length.unwrap_or(0);
                html.extend(text[from..].iter().copied());
            }
        }
    }
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

fn kind_of(p: &MessagePart<'_>) -> String {
    match p.content_type() {
        Some(c) => format!("{}/{}", c.ctype(), c.subtype().unwrap_or("")),
        None if matches!(p.body, PartType::Message(_)) => "message/rfc822".into(),
        None => "text/plain".into(),
    }
    .to_ascii_lowercase()
}

fn node(m: &Message<'_>, i: usize, data: &[u8], n: &mut u32) -> Node {
    let p = &m.parts[i];
    let kind = kind_of(p);
    let head = data
        .get(p.offset_header as usize..p.offset_body as usize)
        .unwrap_or_default();
    let (part_id, children) = match &p.body {
        PartType::Multipart(c) => (
            None,
            c.iter().map(|c| node(m, *c as usize, data, n)).collect(),
        ),
        _ => {
            *n += 1;
            (Some(n.to_string()), Vec::new())
        }
    };
    let size = match &p.body {
        PartType::Message(_) | PartType::Multipart(_) => {
            p.offset_end.saturating_sub(p.offset_body) as usize
        }
        _ => p.contents().len(),
    };
    let text = match &p.body {
        PartType::Text(t) | PartType::Html(t) => Some(t.to_string()),
        _ => None,
    };
    let charset = match p.content_type().and_then(|c| c.attribute("charset")) {
        Some(c) => Some(c.to_string()),
        None if kind.starts_with("text/") => Some("us-ascii".into()),
        None => None,
    };
    Node {
        part_id,
        fields: headers::fields(head),
        name: p.attachment_name().map(str::to_string),
        charset,
        disposition: p
            .content_disposition()
            .map(|d| d.ctype().to_ascii_lowercase()),
        cid: p
            .content_id()
            .map(|c| c.trim_matches(['<', '>']).to_string()),
        language: match p.content_language() {
            HeaderValue::Text(t) => Some(vec![t.to_string()]),
            HeaderValue::TextList(l) => Some(l.iter().map(|s| s.to_string()).collect()),
            _ => None,
        },
        location: p.content_location().map(str::to_string),
        size,
        text,
        is_encoding_problem: p.is_encoding_problem,
        children,
        kind,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIXED: &[u8] = b"Subject: s\r\nContent-Type: multipart/mixed; boundary=\"b\"\r\n\r\n\
        --b\r\nContent-Type: multipart/alternative; boundary=\"a\"\r\n\r\n\
        --a\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nhello\r\n\
        --a\r\nContent-Type: text/html\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n<p>h=C3=A9llo</p>\r\n--a--\r\n\
        --b\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"a.bin\"\r\n\
        Content-Transfer-Encoding: base64\r\n\r\naGk=\r\n--b--\r\n";

    fn names(list: &[&Node]) -> Vec<String> {
        list.iter().map(|n| n.part_id.clone().unwrap()).collect()
    }

    #[test]
    fn a_multipart_message_as_parts_bodies_and_blobs() {
        let s = Structure::parse(MIXED, "b7-1").unwrap();
        let props: Vec<String> = ["partId", "blobId", "type", "charset", "name", "disposition"]
            .map(String::from)
            .into();
        let o = s.object(&s.root, &props);
        assert_eq!(o["type"], "multipart/mixed");
        assert_eq!(o["partId"], Value::Null);
        let alt = &o["subParts"][0];
        assert_eq!(
            alt["subParts"][0],
            json!({"partId": "1", "blobId": "b7-1-1", "type": "text/plain", "charset": "utf-8",
                   "name": null, "disposition": null})
        );
        let bin = &o["subParts"][1];
        assert_eq!(
            (&bin["name"], &bin["disposition"]),
            (&json!("a.bin"), &json!("attachment"))
        );
        assert_eq!(bin["charset"], Value::Null);
        let b = s.bodies();
        assert_eq!(names(&b.text), ["1"]);
        assert_eq!(names(&b.html), ["2"]);
        assert_eq!(names(&b.attachments), ["3"]);
        assert_eq!(b.html[0].text.as_deref(), Some("<p>héllo</p>"));
        assert_eq!(part_content(MIXED, 3).as_deref(), Some(&b"hi"[..]));
        assert_eq!(part_content(MIXED, 4), None);
    }

    #[test]
    fn a_plain_message_is_one_part_of_both_bodies() {
        let s = Structure::parse(b"Subject: x\r\n\r\nbody\r\n", "b1-1").unwrap();
        let b = s.bodies();
        assert_eq!(
            (names(&b.text), names(&b.html)),
            (vec!["1".to_string()], vec!["1".to_string()])
        );
        assert!(b.attachments.is_empty());
        assert_eq!(b.text[0].text.as_deref(), Some("body\r\n"));
        assert_eq!(s.leaves().len(), 1);
    }
}
