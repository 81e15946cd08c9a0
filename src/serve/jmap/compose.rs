//! A message made from the properties of an Email/set `create` (RFC 8621 §4.6): header
//! fields from the convenience properties and `header:Name[:asRaw|asText]`, the body from
//! `bodyStructure`, or from `textBody`/`htmlBody`/`attachments` (text from `bodyValues`,
//! anything else from a blob). Non-ASCII header text is RFC 2047 encoded; text goes out
//! as 8bit when its lines allow, else base64, as blobs do.

use base64::Engine as _;
use serde_json::{Map, Value};

/// Why a create was refused: the SetError's type, the properties at fault, why.
#[derive(Debug)]
pub struct Refused {
    pub kind: &'static str,
    pub properties: Vec<String>,
    pub description: String,
}

fn refused(property: &str, description: impl Into<String>) -> Refused {
    Refused {
        kind: "invalidProperties",
        properties: vec![property.to_string()],
        description: description.into(),
    }
}

/// The server sets these; a create may not.
const SERVER_SET: &[&str] = &[
    "id",
    "blobId",
    "threadId",
    "size",
    "hasAttachment",
    "preview",
];

/// An encoded word when `text` is not plain ASCII.
fn encode_word(text: &str) -> String {
    if text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return text.to_string();
    }
    let b64 = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
    format!("=?UTF-8?B?{b64}?=")
}

fn addresses(v: &Value, property: &str) -> Result<String, Refused> {
    let list = v
        .as_array()
        .ok_or_else(|| refused(property, "a list of EmailAddress"))?;
    let mut out = Vec::new();
    for a in list {
        let email = a["email"]
            .as_str()
            .filter(|e| e.contains('@') && !e.contains(['<', '>', ',', '\r', '\n']))
            .ok_or_else(|| refused(property, "an address without email"))?;
        out.push(match a["name"].as_str().filter(|n| !n.is_empty()) {
            Some(n) if n.is_ascii() => format!("\"{}\" <{email}>", n.replace(['"', '\\'], "")),
            Some(n) => format!("{} <{email}>", encode_word(n)),
            None => email.to_string(),
        });
    }
    Ok(out.join(", "))
}

fn ids(v: &Value, property: &str) -> Result<String, Refused> {
    let list = v
        .as_array()
        .ok_or_else(|| refused(property, "a list of message ids"))?;
    let ids: Option<Vec<String>> = list
        .iter()
        .map(|i| i.as_str().map(|i| format!("<{i}>")))
        .collect();
    ids.map(|i| i.join(" "))
        .ok_or_else(|| refused(property, "a list of message ids"))
}

/// The header fields the properties of `e` give, in order.
fn header_fields(e: &Map<String, Value>, host: &str, seq: u64) -> Result<Vec<String>, Refused> {
    let mut fields = Vec::new();
    let date = match e.get("sentAt").and_then(Value::as_str) {
        Some(d) => chrono::DateTime::parse_from_rfc3339(d)
            .map_err(|_| refused("sentAt", "not an RFC 3339 date"))?
            .to_rfc2822(),
        None => chrono::Utc::now().to_rfc2822(),
    };
    fields.push(format!("Date: {date}"));
    for (property, name) in [
        ("from", "From"),
        ("sender", "Sender"),
        ("replyTo", "Reply-To"),
        ("to", "To"),
        ("cc", "Cc"),
        ("bcc", "Bcc"),
    ] {
        if let Some(v) = e.get(property).filter(|v| !v.is_null()) {
            fields.push(format!("{name}: {}", addresses(v, property)?));
        }
    }
    if let Some(s) = e.get("subject").filter(|v| !v.is_null()) {
        let s = s.as_str().ok_or_else(|| refused("subject", "a string"))?;
        fields.push(format!(
            "Subject: {}",
            encode_word(&s.replace(['\r', '\n'], " "))
        ));
    }
    match e.get("messageId").filter(|v| !v.is_null()) {
        Some(v) => fields.push(format!("Message-ID: {}", ids(v, "messageId")?)),
        None => fields.push(format!("Message-ID: <jmap.{seq}@{host}>")),
    }
    for (property, name) in [("inReplyTo", "In-Reply-To"), ("references", "References")] {
        if let Some(v) = e.get(property).filter(|v| !v.is_null()) {
            fields.push(format!("{name}: {}", ids(v, property)?));
        }
    }
    for (k, v) in e.iter().filter(|(k, _)| k.starts_with("header:")) {
        let mut parts = k["header:".len()..].split(':');
        let name = parts.next().unwrap_or("");
        let form = parts.next();
        let text = v.as_str().ok_or_else(|| refused(k, "a string"))?;
        let valid_name =
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_graphic() && b != b':');
        let value = match form {
            None | Some("asRaw") => text.to_string(),
            Some("asText") => format!(" {}", encode_word(text)),
            _ => return Err(refused(k, "asRaw and asText are the forms taken")),
        };
        if !valid_name || parts.next().is_some() || value.contains(['\r', '\n']) {
            return Err(refused(k, "a header field name and one line"));
        }
        fields.push(format!("{name}:{value}"));
    }
    fields.push("MIME-Version: 1.0".into());
    Ok(fields)
}

/// Where a part's content comes from.
pub trait Blobs {
    fn blob(&self, id: &str) -> Option<std::sync::Arc<[u8]>>;
}

/// One part (a leaf: text from bodyValues or bytes from a blob; or a multipart).
fn part(
    spec: &Value,
    values: &Map<String, Value>,
    blobs: &dyn Blobs,
    n: &mut u32,
) -> Result<String, Refused> {
    let kind = spec["type"]
        .as_str()
        .unwrap_or("text/plain")
        .to_ascii_lowercase();
    if let Some(subs) = spec["subParts"].as_array() {
        *n += 1;
        let boundary = format!("=_spate_{n}_{}", rand::random::<u32>());
        let mut out = format!("Content-Type: {kind}; boundary=\"{boundary}\"\r\n\r\n");
        for s in subs {
            out.push_str(&format!("--{boundary}\r\n"));
            out.push_str(&part(s, values, blobs, n)?);
            out.push_str("\r\n");
        }
        out.push_str(&format!("--{boundary}--\r\n"));
        return Ok(out);
    }
    let (bytes, text) = match (spec["partId"].as_str(), spec["blobId"].as_str()) {
        (Some(id), None) => {
            let v = values
                .get(id)
                .and_then(|v| v["value"].as_str())
                .ok_or_else(|| refused("bodyValues", format!("no value for part {id}")))?;
            (v.as_bytes().to_vec(), true)
        }
        (None, Some(b)) => match blobs.blob(b) {
            Some(data) => (data.to_vec(), false),
            None => {
                return Err(Refused {
                    kind: "blobNotFound",
                    properties: Vec::new(),
                    description: format!("no blob {b}"),
                })
            }
        },
        _ => return Err(refused("bodyStructure", "a part has a partId or a blobId")),
    };
    let mut head = format!("Content-Type: {kind}");
    if text {
        head.push_str("; charset=utf-8");
    }
    if let Some(name) = spec["name"].as_str() {
        head.push_str(&format!(
            "; name=\"{}\"",
            encode_word(&name.replace('"', ""))
        ));
    }
    head.push_str("\r\n");
    if let Some(d) = spec["disposition"].as_str() {
        head.push_str(&format!("Content-Disposition: {d}"));
        if let Some(name) = spec["name"].as_str() {
            head.push_str(&format!(
                "; filename=\"{}\"",
                encode_word(&name.replace('"', ""))
            ));
        }
        head.push_str("\r\n");
    }
    if let Some(cid) = spec["cid"].as_str() {
        head.push_str(&format!("Content-ID: <{cid}>\r\n"));
    }
    let body = match text {
        true => String::from_utf8_lossy(&bytes)
            .replace("\r\n", "\n")
            .replace('\n', "\r\n"),
        false => String::new(),
    };
    let plain = text
        && !body.replace("\r\n", "").contains('\r')
        && body.split("\r\n").all(|l| l.len() <= 998);
    if plain {
        head.push_str("Content-Transfer-Encoding: 8bit\r\n\r\n");
        head.push_str(&body);
    } else {
        head.push_str("Content-Transfer-Encoding: base64\r\n\r\n");
        let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
        for line in b64.as_bytes().chunks(76) {
            head.push_str(std::str::from_utf8(line).unwrap_or_default());
            head.push_str("\r\n");
        }
    }
    Ok(head)
}

/// The body structure textBody, htmlBody and attachments describe (RFC 8621 §4.6).
fn structure_of(e: &Map<String, Value>) -> Value {
    let list = |k: &str| {
        e.get(k)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let (text, html, attachments) = (list("textBody"), list("htmlBody"), list("attachments"));
    let mut body = match (text.first(), html.first()) {
        (Some(t), Some(h)) => serde_json::json!({"type": "multipart/alternative",
            "subParts": [t.clone(), h.clone()]}),
        (Some(t), None) => t.clone(),
        (None, Some(h)) => h.clone(),
        (None, None) => serde_json::json!({"partId": "", "type": "text/plain"}),
    };
    if !attachments.is_empty() {
        let mut subs = vec![body];
        subs.extend(attachments);
        body = serde_json::json!({"type": "multipart/mixed", "subParts": subs});
    }
    body
}

/// The message an Email/set `create` describes.
pub fn message(
    e: &Map<String, Value>,
    blobs: &dyn Blobs,
    host: &str,
    seq: u64,
) -> Result<Vec<u8>, Refused> {
    if let Some(p) = e.keys().find(|k| SERVER_SET.contains(&k.as_str())) {
        return Err(refused(p, "set by the server"));
    }
    if e.contains_key("bodyStructure")
        && ["textBody", "htmlBody", "attachments"]
            .iter()
            .any(|k| e.contains_key(*k))
    {
        return Err(refused(
            "bodyStructure",
            "bodyStructure or textBody/htmlBody/attachments",
        ));
    }
    let mut values = e
        .get("bodyValues")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    values.insert("".into(), serde_json::json!({"value": ""}));
    let structure = match e.get("bodyStructure") {
        Some(s) => s.clone(),
        None => structure_of(e),
    };
    let mut out = header_fields(e, host, seq)?.join("\r\n");
    out.push_str("\r\n");
    out.push_str(&part(&structure, &values, blobs, &mut 0)?);
    Ok(out.into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct NoBlobs;
    impl Blobs for NoBlobs {
        fn blob(&self, id: &str) -> Option<std::sync::Arc<[u8]>> {
            (id == "up1").then(|| std::sync::Arc::from(&b"\x00\x01binary"[..]))
        }
    }

    #[test]
    fn a_draft_with_both_bodies_and_an_attachment_reads_back() {
        let e = json!({"mailboxIds": {"m1": true}, "from": [{"name": "Ann Éxample", "email": "ann@x.test"}],
            "to": [{"email": "bob@y.test"}], "subject": "héllo", "header:X-Tag:asText": "t",
            "textBody": [{"partId": "t", "type": "text/plain"}],
            "htmlBody": [{"partId": "h", "type": "text/html"}],
            "attachments": [{"blobId": "up1", "type": "application/octet-stream", "name": "a.bin", "disposition": "attachment"}],
            "bodyValues": {"t": {"value": "plain\nline"}, "h": {"value": "<p>html</p>"}}});
        let m = message(e.as_object().unwrap(), &NoBlobs, "host.test", 7).unwrap();
        let parsed = mail_parser::MessageParser::new().parse(&m).unwrap();
        assert_eq!(parsed.subject(), Some("héllo"));
        assert_eq!(parsed.body_text(0).as_deref(), Some("plain\r\nline"));
        assert_eq!(parsed.body_html(0).as_deref(), Some("<p>html</p>"));
        assert_eq!(parsed.attachment(0).unwrap().contents(), b"\x00\x01binary");
        assert_eq!(parsed.message_id(), Some("jmap.7@host.test"));
        let text = String::from_utf8_lossy(&m);
        assert!(text.contains("From: =?UTF-8?B?"), "{text}");
        assert!(text.contains("X-Tag: t\r\n"), "{text}");
        for bad in [
            json!({"id": "x"}),
            json!({"header:X:asDate": "x"}),
            json!({"from": "ann"}),
            json!({"textBody": [{"partId": "t"}]}),
            json!({"attachments": [{"blobId": "nope"}]}),
        ] {
            assert!(
                message(bad.as_object().unwrap(), &NoBlobs, "h", 1).is_err(),
                "{bad}"
            );
        }
    }
}
