//! The MIME structure of a stored message, parsed once with `mail-parser` and kept with
//! the message: byte ranges of every part's header and body (so sections are slices of
//! the stored bytes, never re-encoded), the fields BODYSTRUCTURE reports, and the sent
//! date SEARCH SENT* compares.

use std::fmt::Write as _;
use std::ops::Range;

use mail_parser::{HeaderValue, Message, MessageParser, MessagePart, MimeHeaders, PartType};

use super::envelope::envelope;
use super::nstring;
use crate::proto::imap::{quote, Section, SectionText};

#[derive(Debug)]
pub struct Structure {
    root: Part,
    /// The Date header's day (in its own zone) as days since the epoch.
    pub sent_day: Option<i64>,
}

#[derive(Debug)]
struct Part {
    header: Range<usize>,
    body: Range<usize>,
    ctype: String,
    csub: String,
    params: Vec<(String, String)>,
    id: Option<String>,
    description: Option<String>,
    encoding: Option<String>,
    md5: Option<String>,
    disposition: Option<(String, Vec<(String, String)>)>,
    language: Vec<String>,
    location: Option<String>,
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    Leaf,
    Multi(Vec<Part>),
    /// message/rfc822: the root part of the enclosed message.
    Message(Box<Part>),
}

/// Where the header ends (after the blank line), or the end of the data.
pub(super) fn header_end(data: &[u8]) -> usize {
    let mut i = 0;
    // An empty header: the message starts with its blank line.
    if data.starts_with(b"\r\n") {
        return 2;
    }
    while let Some(p) = data[i..].iter().position(|&b| b == b'\n') {
        let at = i + p + 1;
        match data.get(at..) {
            Some([b'\r', b'\n', ..]) => return at + 2,
            Some([b'\n', ..]) => return at + 1,
            _ => i = at,
        }
    }
    data.len()
}

impl Structure {
    pub fn parse(data: &[u8]) -> Structure {
        let parsed = MessageParser::new().parse(data);
        let sent_day = parsed.as_ref().and_then(|m| {
            let d = m.date()?;
            let day = chrono::NaiveDate::from_ymd_opt(d.year.into(), d.month.into(), d.day.into())?;
            Some(
                day.signed_duration_since(chrono::NaiveDate::from_ymd_opt(1970, 1, 1)?)
                    .num_days(),
            )
        });
        let root = match &parsed {
            Some(m) if !m.parts.is_empty() => message_part(m, 0, data, 0..data.len()),
            _ => plain(data, 0..data.len()),
        };
        Structure { root, sent_day }
    }

    /// BODYSTRUCTURE (`ext`) or BODY.
    pub fn render(&self, data: &[u8], ext: bool) -> String {
        let mut out = String::new();
        render(&self.root, data, ext, &mut out);
        out
    }

    /// The bytes a section names; `None` when there is no such part.
    pub fn section(&self, data: &[u8], s: &Section) -> Option<Vec<u8>> {
        let top = &self.root;
        if s.part.is_empty() {
            let whole = 0..data.len();
            return Some(text_of(data, top.header.start..whole.end, &s.text));
        }
        let mut cur = top;
        for (i, &n) in s.part.iter().enumerate() {
            let n = n as usize - 1;
            cur = match (&cur.kind, i) {
                (Kind::Multi(ch), _) => ch.get(n)?,
                (_, 0) if n == 0 => cur,
                (Kind::Message(inner), _) => match &inner.kind {
                    Kind::Multi(ch) => ch.get(n)?,
                    _ if n == 0 => inner,
                    _ => return None,
                },
                _ => return None,
            };
        }
        Some(match &s.text {
            None => data[cur.body.clone()].to_vec(),
            Some(SectionText::Mime) => data[cur.header.clone()].to_vec(),
            Some(_) => match &cur.kind {
                Kind::Message(inner) => text_of(data, inner.header.start..inner.body.end, &s.text),
                _ => Vec::new(),
            },
        })
    }
}

/// Do the decoded (base64, quoted-printable, charset) text parts of the message contain
/// `needle` (case-insensitively)? `None` when no part is encoded, so the raw bytes, which
/// the caller searched already, are all there is.
pub fn decoded_text_contains(data: &[u8], needle: &str) -> Option<bool> {
    let encoded = [&b"base64"[..], b"quoted-printable"]
        .iter()
        .any(|e| data.windows(e.len()).any(|w| w.eq_ignore_ascii_case(e)));
    if !encoded {
        return None;
    }
    let m = MessageParser::new().parse(data)?;
    let needle = needle.to_lowercase();
    Some(m.parts.iter().any(|p| match &p.body {
        PartType::Text(t) | PartType::Html(t) => t.to_lowercase().contains(&needle),
        _ => false,
    }))
}

/// HEADER, HEADER.FIELDS (.NOT), TEXT or all of the message in `range`.
fn text_of(data: &[u8], range: Range<usize>, text: &Option<SectionText>) -> Vec<u8> {
    let msg = &data[range];
    let end = header_end(msg);
    match text {
        None | Some(SectionText::Mime) => msg.to_vec(),
        Some(SectionText::Header) => msg[..end].to_vec(),
        Some(SectionText::Text) => msg[end..].to_vec(),
        Some(SectionText::HeaderFields { not, fields }) => super::header_fields(msg, fields, *not),
    }
}

/// A part without a parse (no Content-Type or an unparsable message): text/plain.
fn plain(data: &[u8], range: Range<usize>) -> Part {
    let end = range.start + header_end(&data[range.clone()]);
    Part {
        header: range.start..end,
        body: end..range.end,
        ctype: "TEXT".into(),
        csub: "PLAIN".into(),
        params: vec![("CHARSET".into(), "us-ascii".into())],
        id: None,
        description: None,
        encoding: None,
        md5: None,
        disposition: None,
        language: Vec::new(),
        location: None,
        kind: Kind::Leaf,
    }
}

/// Where the part offsets of `m` count from in `data`: a nested message parsed in the same
/// stream borrows the outer bytes and counts from the start of the whole message; an
/// encoded one (base64 message/rfc822) has its own decoded copy (`None`: not mappable).
fn base_of(m: &Message, data: &[u8]) -> Option<usize> {
    let raw = m.raw_message();
    let (r, d) = (raw.as_ptr() as usize, data.as_ptr() as usize);
    (r >= d && r + raw.len() <= d + data.len()).then_some(0)
}

fn attrs(a: Option<&[mail_parser::Attribute]>) -> Vec<(String, String)> {
    a.unwrap_or_default()
        .iter()
        .map(|x| (x.name.to_ascii_uppercase(), x.value.to_string()))
        .collect()
}

/// Part `id` of message `m`, whose part offsets count from `base` in `data`; `limit` is
/// the range the part must stay in.
fn message_part(m: &Message, id: usize, data: &[u8], limit: Range<usize>) -> Part {
    let Some(base) = base_of(m, data) else {
        return plain(data, limit);
    };
    let p: &MessagePart = &m.parts[id];
    let clamp = |x: u32| (base + x as usize).clamp(limit.start, limit.end);
    let header = clamp(p.offset_header)..clamp(p.offset_body).max(clamp(p.offset_header));
    let mut body = header.end..clamp(p.offset_end).max(header.end);
    if id == 0 {
        body.end = limit.end;
    }
    let (ctype, csub, mut params) = match p.content_type() {
        Some(ct) => (
            ct.ctype().to_ascii_uppercase(),
            ct.subtype().unwrap_or("").to_ascii_uppercase(),
            attrs(ct.attributes()),
        ),
        None => ("TEXT".into(), "PLAIN".into(), Vec::new()),
    };
    if p.content_type().is_none() {
        params.push(("CHARSET".into(), "us-ascii".into()));
    }
    let kind = match &p.body {
        PartType::Multipart(ids) => Kind::Multi(
            ids.iter()
                .map(|&c| {
                    let mut child = message_part(m, c as usize, data, body.clone());
                    // The CRLF before a boundary belongs to the boundary.
                    let b = &child.body;
                    if b.end > b.start + 1
                        && data.get(b.end - 2..b.end) == Some(b"\r\n")
                        && data.get(b.end..b.end + 2) == Some(b"--")
                    {
                        child.body.end -= 2;
                    }
                    child
                })
                .collect(),
        ),
        PartType::Message(inner) if !inner.parts.is_empty() && base_of(inner, data).is_some() => {
            Kind::Message(Box::new(message_part(inner, 0, data, body.clone())))
        }
        _ => Kind::Leaf,
    };
    let (ctype, csub) = match (&kind, ctype.as_str()) {
        // An enclosed message that could not be mapped onto the stored bytes.
        (Kind::Leaf, "MESSAGE") if csub == "RFC822" => {
            ("APPLICATION".to_string(), "OCTET-STREAM".to_string())
        }
        _ => (ctype, csub),
    };
    let language = match p.content_language() {
        HeaderValue::Text(t) => vec![t.to_string()],
        HeaderValue::TextList(l) => l.iter().map(|t| t.to_string()).collect(),
        _ => Vec::new(),
    };
    let raw_header = &data[header.clone()];
    Part {
        ctype,
        csub,
        params,
        id: p.content_id().map(|s| format!("<{s}>")),
        description: p.content_description().map(str::to_string),
        encoding: super::header_value(raw_header, "Content-Transfer-Encoding"),
        md5: super::header_value(raw_header, "Content-MD5"),
        disposition: p
            .content_disposition()
            .map(|d| (d.ctype().to_string(), attrs(d.attributes()))),
        language,
        location: p.content_location().map(str::to_string),
        header,
        body,
        kind,
    }
}

fn params(v: &[(String, String)]) -> String {
    if v.is_empty() {
        return "NIL".into();
    }
    let inner: Vec<String> = v
        .iter()
        .map(|(k, x)| format!("{} {}", quote(k), quote(x)))
        .collect();
    format!("({})", inner.join(" "))
}

fn lines(b: &[u8]) -> usize {
    let n = b.iter().filter(|&&c| c == b'\n').count();
    if b.last().is_some_and(|&c| c != b'\n') {
        n + 1
    } else {
        n
    }
}

fn render(p: &Part, data: &[u8], ext: bool, out: &mut String) {
    out.push('(');
    let dsp_lang_loc = |out: &mut String| {
        let dsp = match &p.disposition {
            Some((t, a)) => format!("({} {})", quote(t), params(a)),
            None => "NIL".into(),
        };
        let lang = match p.language.as_slice() {
            [] => "NIL".to_string(),
            [one] => quote(one),
            many => format!(
                "({})",
                many.iter().map(|l| quote(l)).collect::<Vec<_>>().join(" ")
            ),
        };
        let _ = write!(out, " {dsp} {lang} {}", nstring(p.location.clone()));
    };
    if let Kind::Multi(children) = &p.kind {
        for c in children {
            render(c, data, ext, out);
        }
        if children.is_empty() {
            // RFC 3501 needs at least one part; an empty multipart shows as an empty text.
            out.push_str("(\"TEXT\" \"PLAIN\" NIL NIL NIL \"7BIT\" 0 0)");
        }
        let _ = write!(out, " {}", quote(&p.csub));
        if ext {
            let _ = write!(out, " {}", params(&p.params));
            dsp_lang_loc(out);
        }
        out.push(')');
        return;
    }
    let body = &data[p.body.clone()];
    let _ = write!(
        out,
        "{} {} {} {} {} {} {}",
        quote(&p.ctype),
        quote(&p.csub),
        params(&p.params),
        nstring(p.id.clone()),
        nstring(p.description.clone()),
        quote(p.encoding.as_deref().unwrap_or("7BIT")),
        body.len()
    );
    match &p.kind {
        Kind::Message(inner) => {
            let env = envelope(&data[inner.header.start..inner.body.end]);
            let _ = write!(out, " {} ", env.trim_start_matches("ENVELOPE "));
            render(inner, data, ext, out);
            let _ = write!(out, " {}", lines(body));
        }
        _ if p.ctype == "TEXT" => {
            let _ = write!(out, " {}", lines(body));
        }
        _ => {}
    }
    if ext {
        let _ = write!(out, " {}", nstring(p.md5.clone()));
        dsp_lang_loc(out);
    }
    out.push(')');
}

/// The structure parsed for `m` earlier, if it was.
pub(crate) fn cached(m: &crate::serve::store::StoredMessage) -> Option<std::sync::Arc<Structure>> {
    m.derived
        .get()
        .and_then(|d| d.clone().downcast::<Structure>().ok())
}

/// Keeps `parsed` with `m` for the next FETCH or SEARCH that needs it.
pub(crate) fn keep(m: &crate::serve::store::StoredMessage, parsed: std::sync::Arc<Structure>) {
    let _ = m.derived.set(parsed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sec(part: &[u32], text: Option<SectionText>) -> Section {
        Section {
            part: part.to_vec(),
            text,
        }
    }

    #[test]
    fn multipart_sections_and_structure() {
        let m = b"From: a@b\r\nContent-Type: multipart/mixed; boundary=\"xx\"\r\n\r\npre\r\n--xx\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nhello\r\n--xx\r\nContent-Type: message/rfc822\r\n\r\nSubject: in\r\n\r\ninner body\r\n--xx--\r\n";
        let s = Structure::parse(m);
        let get = |p: &[u32], t| String::from_utf8(s.section(m, &sec(p, t)).unwrap()).unwrap();
        assert_eq!(get(&[1], None), "hello");
        assert_eq!(
            get(&[1], Some(SectionText::Mime)),
            "Content-Type: text/plain; charset=utf-8\r\n\r\n"
        );
        assert_eq!(get(&[2], None), "Subject: in\r\n\r\ninner body");
        assert_eq!(get(&[2], Some(SectionText::Text)), "inner body");
        assert_eq!(get(&[2, 1], None), "inner body");
        assert!(s.section(m, &sec(&[3], None)).is_none());
        let b = s.render(m, false);
        assert!(
            b.starts_with("((\"TEXT\" \"PLAIN\" (\"CHARSET\" \"utf-8\") NIL NIL \"7BIT\" 5 1)(\"MESSAGE\" \"RFC822\" NIL NIL NIL \"7BIT\" 25 (NIL \"in\""),
            "{b}"
        );
        assert!(b.ends_with(" 3) \"MIXED\")"), "{b}");
    }

    #[test]
    fn encoded_bodies_are_searched_decoded() {
        let m = b"Content-Type: text/plain\r\nContent-Transfer-Encoding: base64\r\n\r\naGVsbG8gV29ybGQ=\r\n";
        assert_eq!(decoded_text_contains(m, "world"), Some(true));
        assert_eq!(decoded_text_contains(m, "planet"), Some(false));
        let q = b"Content-Transfer-Encoding: quoted-printable\r\n\r\ncaf=C3=A9 ol=\r\ne\r\n";
        assert_eq!(decoded_text_contains(q, "CAF\u{e9} OLE"), Some(true));
        assert_eq!(
            decoded_text_contains(b"A: b\r\n\r\nplain\r\n", "plain"),
            None
        );
    }

    #[test]
    fn single_part_and_no_header() {
        let m = b"Subject: x\r\n\r\nbody\r\n";
        let s = Structure::parse(m);
        assert_eq!(
            s.render(m, true),
            "(\"TEXT\" \"PLAIN\" (\"CHARSET\" \"us-ascii\") NIL NIL \"7BIT\" 6 1 NIL NIL NIL NIL)"
        );
        assert_eq!(s.section(m, &sec(&[1], None)).unwrap(), b"body\r\n");
        assert_eq!(header_end(b"\r\nbody"), 2);
        assert_eq!(header_end(b"A: b\nC: d\n\nbody"), 11);
    }

    fn exercise(bytes: &[u8]) {
        let s = Structure::parse(bytes);
        let _ = s.render(bytes, true);
        let _ = s.render(bytes, false);
        for part in [
            vec![],
            vec![1],
            vec![2],
            vec![1, 1],
            vec![2, 1],
            vec![2, 2, 1],
        ] {
            for text in [
                None,
                Some(SectionText::Mime),
                Some(SectionText::Header),
                Some(SectionText::Text),
            ] {
                let _ = s.section(bytes, &sec(&part, text));
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)
        ) {
            exercise(&bytes);
        }

        #[test]
        fn mangled_multiparts_never_panic(
            cut in 0usize..400,
            junk in proptest::collection::vec(proptest::num::u8::ANY, 0..40)
        ) {
            let m = b"Content-Type: multipart/mixed; boundary=x\r\n\r\n--x\r\nContent-Type: message/rfc822\r\n\r\nContent-Type: multipart/alternative; boundary=y\r\n\r\n--y\r\n\r\na\r\n--y--\r\n--x\r\nContent-Transfer-Encoding: base64\r\nContent-Type: message/rfc822\r\n\r\nU3ViamVjdDogeA0KDQp5DQo=\r\n--x--\r\n";
            let mut bytes = m[..cut.min(m.len())].to_vec();
            bytes.extend_from_slice(&junk);
            bytes.extend_from_slice(&m[cut.min(m.len())..]);
            exercise(&bytes);
        }
    }
}
