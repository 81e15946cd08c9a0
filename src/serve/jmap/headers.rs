//! Header fields as JMAP reads them (RFC 8621 §4.1.2, §4.1.3): the raw fields of a header
//! block, the `header:Name[:form][:all]` properties, and each parsed form. Values are
//! parsed by `mail-parser` (RFC 2047 words decoded, addresses and dates taken apart) from
//! a one-field message, so that each form is that library's reading of the raw value.

use mail_parser::{Address, HeaderValue, MessageParser};
use serde_json::{json, Value};

/// The raw fields of a header block: name and value (after the colon, up to the line
/// end, folds kept), in order.
pub fn fields(head: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(head);
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.split_inclusive('\n') {
        if line.trim_end_matches(['\r', '\n']).is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = out.last_mut() {
                v.push_str(line);
            }
            continue;
        }
        if let Some((n, v)) = line.split_once(':') {
            out.push((n.trim().to_string(), v.to_string()));
        }
    }
    for (_, v) in &mut out {
        let end = v.trim_end_matches(['\r', '\n']).len();
        v.truncate(end);
    }
    out
}

/// How a header field's value is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    Raw,
    Text,
    Addresses,
    GroupedAddresses,
    MessageIds,
    Date,
    Urls,
}

/// A `header:` property: the field's name, its form, all instances or the last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property {
    pub name: String,
    pub form: Form,
    pub all: bool,
}

const ADDRESS_FIELDS: &[&str] = &[
    "from",
    "sender",
    "reply-to",
    "to",
    "cc",
    "bcc",
    "resent-from",
    "resent-sender",
    "resent-reply-to",
    "resent-to",
    "resent-cc",
    "resent-bcc",
];
const ID_FIELDS: &[&str] = &[
    "message-id",
    "in-reply-to",
    "references",
    "resent-message-id",
];
const DATE_FIELDS: &[&str] = &["date", "resent-date"];
const URL_FIELDS: &[&str] = &[
    "list-help",
    "list-unsubscribe",
    "list-subscribe",
    "list-post",
    "list-owner",
    "list-archive",
];
const TEXT_FIELDS: &[&str] = &["subject", "comments", "keywords", "list-id"];

impl Property {
    /// Parses `header:Name[:asForm][:all]`; `None` when it is not one, or the form does
    /// not fit the field (RFC 8621 §4.1.2: a field RFC 5322 or RFC 2369 defines takes
    /// only the forms of its syntax, any other field takes every form).
    pub fn parse(property: &str) -> Option<Property> {
        let rest = property.strip_prefix("header:")?;
        let mut parts = rest.split(':');
        let name = parts.next().filter(|n| !n.is_empty())?.to_string();
        let (mut form, mut all) = (Form::Raw, false);
        let mut more: Vec<&str> = parts.collect();
        if more.last() == Some(&"all") {
            all = true;
            more.pop();
        }
        match more.as_slice() {
            [] => {}
            [f] => {
                form = match *f {
                    "asRaw" => Form::Raw,
                    "asText" => Form::Text,
                    "asAddresses" => Form::Addresses,
                    "asGroupedAddresses" => Form::GroupedAddresses,
                    "asMessageIds" => Form::MessageIds,
                    "asDate" => Form::Date,
                    "asURLs" => Form::Urls,
                    _ => return None,
                }
            }
            _ => return None,
        }
        let lower = name.to_ascii_lowercase();
        let fits = match form {
            Form::Raw => true,
            _ => {
                let of = |list: &[&str]| list.contains(&lower.as_str());
                let known = [
                    ADDRESS_FIELDS,
                    ID_FIELDS,
                    DATE_FIELDS,
                    URL_FIELDS,
                    TEXT_FIELDS,
                ]
                .iter()
                .any(|l| of(l));
                !known
                    || match form {
                        Form::Text => of(TEXT_FIELDS),
                        Form::Addresses | Form::GroupedAddresses => of(ADDRESS_FIELDS),
                        Form::MessageIds => of(ID_FIELDS),
                        Form::Date => of(DATE_FIELDS),
                        Form::Urls => of(URL_FIELDS),
                        Form::Raw => true,
                    }
            }
        };
        fits.then_some(Property { name, form, all })
    }

    /// The property's value for a header block's fields.
    pub fn value(&self, fields: &[(String, String)]) -> Value {
        let mut values = fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(&self.name))
            .map(|(_, v)| parse(v, self.form));
        if self.all {
            Value::Array(values.collect())
        } else {
            values.next_back().unwrap_or(Value::Null)
        }
    }
}

/// One raw value in `form`.
pub fn parse(raw: &str, form: Form) -> Value {
    // The field name that makes mail-parser read the value in that form.
    let as_field = match form {
        Form::Raw => return Value::from(raw),
        Form::Text => "Subject",
        Form::Addresses | Form::GroupedAddresses => "To",
        Form::MessageIds => "References",
        Form::Date => "Date",
        Form::Urls => return urls(raw),
    };
    let message = format!("{as_field}:{raw}\r\n\r\n");
    let Some(m) = MessageParser::new().parse(message.as_bytes()) else {
        return Value::Null;
    };
    let Some(h) = m.headers().first() else {
        return Value::Null;
    };
    match (form, &h.value) {
        (Form::Text, HeaderValue::Text(t)) => json!(t.trim()),
        (Form::Text, HeaderValue::Empty) => json!(""),
        (Form::Addresses, HeaderValue::Address(a)) => addresses(a),
        (Form::GroupedAddresses, HeaderValue::Address(a)) => groups(a),
        (Form::MessageIds, HeaderValue::Text(id)) => json!([id]),
        (Form::MessageIds, HeaderValue::TextList(ids)) => json!(ids),
        (Form::Date, HeaderValue::DateTime(d)) if d.is_valid() => json!(d.to_rfc3339()),
        _ => Value::Null,
    }
}

fn address(a: &mail_parser::Addr<'_>) -> Value {
    json!({"name": a.name.as_deref(), "email": a.address.as_deref().unwrap_or("")})
}

fn addresses(a: &Address<'_>) -> Value {
    match a {
        Address::List(list) => list.iter().map(address).collect(),
        Address::Group(groups) => groups
            .iter()
            .flat_map(|g| g.addresses.iter().map(address))
            .collect(),
    }
}

fn groups(a: &Address<'_>) -> Value {
    match a {
        Address::List(list) => {
            json!([{"name": null, "addresses": addresses(&Address::List(list.clone()))}])
        }
        Address::Group(groups) => groups
            .iter()
            .map(|g| {
                json!({"name": g.name.as_deref(),
                       "addresses": g.addresses.iter().map(address).collect::<Vec<_>>()})
            })
            .collect(),
    }
}

/// RFC 2369's `<url>, <url>` list.
fn urls(raw: &str) -> Value {
    let list: Vec<&str> = raw
        .split(',')
        .filter_map(|u| {
            let u = u.trim();
            u.strip_prefix('<')?.split('>').next()
        })
        .collect();
    if list.is_empty() {
        Value::Null
    } else {
        json!(list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_known_answers() {
        let head = b"From: =?UTF-8?Q?Ann_=C3=89xample?= <ann@example.test>\r\n\
            Subject: a\r\n =?UTF-8?B?w6lsYW4=?=\r\nTo: g: bob@x.test, c@y.test;\r\n\
            Message-ID: <1@x>\r\nReferences: <a@x> <b@x>\r\n\
            Date: Tue, 1 Dec 2026 10:00:00 +0100\r\nList-Post: <mailto:l@x>, <https://x/p>\r\n\
            X-Two: 1\r\nX-Two: 2\r\n\r\nbody";
        let f = fields(head);
        let v = |p: &str| Property::parse(p).unwrap().value(&f);
        assert_eq!(v("header:Subject"), json!(" a\r\n =?UTF-8?B?w6lsYW4=?="));
        assert_eq!(v("header:subject:asText"), json!("a élan"));
        assert_eq!(
            v("header:From:asAddresses"),
            json!([{"name": "Ann Éxample", "email": "ann@example.test"}])
        );
        assert_eq!(
            v("header:To:asGroupedAddresses"),
            json!([{"name": "g", "addresses": [{"name": null, "email": "bob@x.test"},
                                               {"name": null, "email": "c@y.test"}]}])
        );
        assert_eq!(v("header:Message-ID:asMessageIds"), json!(["1@x"]));
        assert_eq!(v("header:References:asMessageIds"), json!(["a@x", "b@x"]));
        assert_eq!(v("header:Date:asDate"), json!("2026-12-01T10:00:00+01:00"));
        assert_eq!(
            v("header:List-Post:asURLs"),
            json!(["mailto:l@x", "https://x/p"])
        );
        assert_eq!(v("header:X-Two"), json!(" 2"));
        assert_eq!(v("header:X-Two:all"), json!([" 1", " 2"]));
        assert_eq!(v("header:X-None:all"), json!([]));
        assert_eq!(v("header:X-None"), Value::Null);
        // Forms that do not fit the field, and what is no header property.
        assert_eq!(Property::parse("header:Subject:asAddresses"), None);
        assert_eq!(Property::parse("header:From:asDate"), None);
        assert_eq!(Property::parse("header:X:asWhat"), None);
        assert_eq!(Property::parse("header:"), None);
        assert!(Property::parse("header:X-Any:asDate:all").is_some());
    }
}
